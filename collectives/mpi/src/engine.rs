//! An MPI channel: a communicator of its own, a communication thread that makes its blocking
//! calls in order, and a watchdog that gives up on a call past the channel's timeout.
//!
//! # The communication thread
//!
//! [`HostEngine::start`] queues the job and returns. The channel's thread takes jobs in the
//! order they were queued (the order of the channel's turns, see [`halcyon::channel`]) and
//! runs each with the blocking MPI call ([`crate::call`]), so no executor thread or reactor
//! ever blocks in MPI; the job's report signals its fence from this thread, and the device's
//! waiters wake as for any completion.
//!
//! # The watchdog
//!
//! A blocking call cannot be cancelled, and one whose peer is gone or stalled never returns.
//! The watchdog thread sleeps until the running call's deadline; a call still running then is
//! abandoned ([`CollectiveDone::abandon`]): it fails with `DeadlineExceeded`, its memory is
//! kept for good and its buffers refuse further use, since MPI may still write them. The
//! channel is broken from then on: the jobs queued behind the call, and every later one, fail
//! with `Unavailable` without touching MPI.
//!
//! An MPI error (the communicator returns errors instead of aborting the job) fails the job
//! with the library's text, and breaks the channel the same way: MPI leaves a communicator in
//! an undefined state after an error.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use halcyon::backend::{ChannelBackend, CollectiveDone, CollectiveKind, HostEngine, HostJob};
use halcyon::{Error, Result, StatusCode};

use crate::call::{self, Comm, Ranges};
use crate::provider::Shared;

/// An MPI channel (see the [module docs](self)).
pub(crate) struct MpiChannel {
    engine: Arc<Engine>,
}

/// What the channel, its thread and its watchdog share.
pub(crate) struct Engine {
    comm: Comm,
    rank: u32,
    count: u32,
    timeout: Duration,
    state: Mutex<State>,
    /// Wakes the thread (a job queued, closing) and the watchdog (a call started or ended).
    changed: Condvar,
    /// Keeps MPI initialised while the channel lives.
    mpi: Arc<Shared>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Queued>,
    /// The call on the MPI thread: its deadline and its report, which the watchdog takes if
    /// the deadline passes first.
    running: Option<(Instant, Option<CollectiveDone>)>,
    /// Why the channel no longer runs collectives.
    broken: Option<Error>,
    /// The channel was dropped (or MPI is finalising): the thread ends once the queue is empty.
    closing: bool,
    /// The thread ended.
    ended: bool,
    /// The watchdog abandoned the call the thread is in (the thread may never come back).
    stuck: bool,
}

/// A job waiting for the thread: its kind, its ranges and its report.
struct Queued {
    kind: CollectiveKind,
    ranges: Ranges,
    done: CollectiveDone,
}

// SAFETY: the ranges are addresses that `HostEngine::start`'s contract makes valid from any
// thread until the job is reported.
unsafe impl Send for Queued {}

impl MpiChannel {
    /// A channel over `comm` (a communicator of its own, which the channel frees), with its
    /// thread and watchdog started.
    pub(crate) fn start(mpi: Arc<Shared>, comm: Comm, timeout: Duration) -> Result<MpiChannel> {
        let (rank, count) = call::rank_and_count(comm)?;
        let engine = Arc::new(Engine {
            comm,
            rank,
            count,
            timeout,
            state: Mutex::default(),
            changed: Condvar::new(),
            mpi,
        });
        let spawn = |name: String, body: fn(&Engine)| {
            let engine = engine.clone();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || body(&engine))
                .map_err(|e| {
                    Error::new(
                        StatusCode::ResourceExhausted,
                        format!("cannot start an MPI channel's thread: {e}"),
                    )
                })
        };
        spawn(format!("halcyon-mpi-{rank}"), Engine::serve)?;
        engine.mpi.register(&engine);
        if let Err(error) = spawn(format!("halcyon-mpi-watch-{rank}"), Engine::watch) {
            engine.close();
            return Err(error);
        }
        Ok(MpiChannel { engine })
    }
}

impl Drop for MpiChannel {
    fn drop(&mut self) {
        // The thread finishes what is queued and frees the communicator; MPI's finalisation
        // (`Mpi`'s drop) waits for it.
        self.engine.close();
    }
}

impl ChannelBackend for MpiChannel {
    fn rank(&self) -> u32 {
        self.engine.rank
    }

    fn count(&self) -> u32 {
        self.engine.count
    }

    fn engine(&self) -> &str {
        "mpi"
    }

    fn check(&self, kind: &CollectiveKind) -> Result<()> {
        call::check(kind)
    }

    fn host(&self) -> Option<&dyn HostEngine> {
        Some(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl HostEngine for MpiChannel {
    unsafe fn start(&self, job: HostJob) {
        let queued = Queued {
            kind: job.kind,
            ranges: Ranges {
                send: job.send,
                send_len: job.send_len,
                recv: job.recv,
                recv_len: job.recv_len,
            },
            done: job.done,
        };
        let engine = &self.engine;
        let mut state = engine.lock();
        if let Some(error) = engine.refusal(&state) {
            drop(state);
            queued.done.complete(Err(error));
            return;
        }
        state.queue.push_back(queued);
        drop(state);
        engine.changed.notify_all();
    }
}

impl Engine {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why a job queued now would not run, if it would not.
    fn refusal(&self, state: &State) -> Option<Error> {
        self.broken(state).or_else(|| {
            (state.closing || state.ended).then(|| {
                Error::new(
                    StatusCode::Unavailable,
                    "the MPI channel is closed (its MPI library was finalised)",
                )
            })
        })
    }

    /// The error of a job on a broken channel, if it is broken.
    fn broken(&self, state: &State) -> Option<Error> {
        let broken = state.broken.as_ref()?;
        Some(Error::new(
            StatusCode::Unavailable,
            format!(
                "MPI channel rank {} of {} is broken by an earlier collective ({broken}); \
                 create a new channel",
                self.rank, self.count
            ),
        ))
    }

    /// Stops taking jobs once the queue is empty.
    pub(crate) fn close(&self) {
        self.lock().closing = true;
        self.changed.notify_all();
    }

    /// Waits until the thread has ended; whether it did. A thread blocked in an abandoned
    /// call gets one more timeout to come back (a late peer completes the call) before it is
    /// left there.
    pub(crate) fn wait_ended(&self) -> bool {
        let mut state = self.lock();
        let mut grace: Option<Instant> = None;
        while !state.ended {
            if state.stuck {
                let until = *grace.get_or_insert_with(|| Instant::now() + self.timeout);
                let now = Instant::now();
                if now >= until {
                    return false;
                }
                state = (self.changed.wait_timeout(state, until - now))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            } else {
                state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        }
        true
    }

    /// The communication thread: runs the queued jobs in order, then frees the communicator.
    fn serve(&self) {
        let mut state = self.lock();
        loop {
            let Some(job) = state.queue.pop_front() else {
                if state.closing {
                    break;
                }
                state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            if let Some(error) = self.broken(&state) {
                drop(state);
                job.done.complete(Err(error));
                state = self.lock();
                continue;
            }
            state.running = Some((Instant::now() + self.timeout, Some(job.done)));
            drop(state);
            self.changed.notify_all();
            // SAFETY: the job's ranges stay valid until its report (`HostEngine::start`'s
            // contract), which follows this call, or forever if the watchdog abandons it.
            let result = unsafe { call::run(self.comm, &job.kind, &job.ranges) };
            state = self.lock();
            state.stuck = false;
            let done = state.running.take().and_then(|(_, done)| done);
            if let Err(error) = &result {
                state.broken.get_or_insert_with(|| error.clone());
            }
            match done {
                Some(done) => {
                    drop(state);
                    done.complete(result);
                    state = self.lock();
                }
                // The watchdog abandoned it and failed everything queued: the channel is
                // broken, and the thread has nothing left to do.
                None => break,
            }
        }
        let broken = state.broken.is_some();
        state.ended = true;
        drop(state);
        self.changed.notify_all();
        if !broken {
            let mut comm = self.comm.0;
            // SAFETY: the communicator is this channel's own and nothing uses it any more.
            let _ = unsafe { mpi::ffi::MPI_Comm_free(&mut comm) };
        }
    }

    /// The watchdog: abandons a call still running at its deadline.
    fn watch(&self) {
        let mut state = self.lock();
        loop {
            if state.ended {
                return;
            }
            let deadline = match &state.running {
                Some((deadline, Some(_))) => *deadline,
                _ => {
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
            };
            let now = Instant::now();
            if now < deadline {
                state = (self.changed.wait_timeout(state, deadline - now))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                continue;
            }
            let Some(done) = state.running.as_mut().and_then(|(_, done)| done.take()) else {
                continue;
            };
            let error = Error::new(
                StatusCode::DeadlineExceeded,
                format!(
                    "an MPI collective on rank {} of {} did not complete within the channel's \
                     timeout of {:?}: a peer is gone or stalled",
                    self.rank, self.count, self.timeout
                ),
            );
            state.broken = Some(error.clone());
            state.stuck = true;
            let queued: Vec<Queued> = state.queue.drain(..).collect();
            let refusal = self.broken(&state).expect("broken above");
            drop(state);
            done.abandon(error);
            for job in queued {
                job.done.complete(Err(refusal.clone()));
            }
            self.changed.notify_all();
            return;
        }
    }
}
