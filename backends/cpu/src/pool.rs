//! The worker pool: threads that claim tiles of parallel jobs.
//!
//! A [`Job`] is one parallel command in flight (a dispatch split into workgroup tiles, a large
//! fill or copy split into chunks, or a single host call). Workers claim tiles with one atomic
//! increment each; whichever worker finishes the job's last tile runs its continuation (the rest
//! of the submission), so no thread ever waits for another and workers never block on
//! semaphores: waits are resolved before work reaches the pool.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use halcyon::{Error, Result, StatusCode};

/// Runs tile `index` of a job; `Err` fails the job with that message.
pub(crate) trait Tiles: Send + Sync + 'static {
    /// How many tiles there are.
    fn count(&self) -> u32;
    /// Runs one tile.
    fn run(&self, index: u32) -> std::result::Result<(), String>;
    /// Called once, by the thread that finished the last tile, with the first failure if any.
    fn done(&self, failure: Option<String>);
}

/// A job and its tiles in one allocation: `Job<T>` for the concrete tiles, handled as
/// `Job` (`Job<dyn Tiles>`).
pub(crate) struct Job<T: ?Sized + Tiles = dyn Tiles> {
    count: u32,
    next: AtomicU32,
    remaining: AtomicU32,
    failure: Mutex<Option<String>>,
    tiles: T,
}

impl<T: Tiles> Job<T> {
    fn fresh(tiles: T) -> Job<T> {
        let count = tiles.count();
        Job {
            count,
            next: AtomicU32::new(0),
            remaining: AtomicU32::new(count),
            failure: Mutex::new(None),
            tiles,
        }
    }
}

impl Job {
    pub(crate) fn new<T: Tiles>(tiles: T) -> Arc<Job> {
        Arc::new(Job::fresh(tiles))
    }

    fn exhausted(&self) -> bool {
        self.next.load(Ordering::Relaxed) >= self.count
    }

    /// Claims and runs tiles until none are left; the thread that completes the last one
    /// calls `done`.
    pub(crate) fn work(&self) {
        let mut finished = 0;
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if index >= self.count {
                break;
            }
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.tiles.run(index)))
                    .unwrap_or_else(|panic| {
                        Err(panic
                            .downcast_ref::<&str>()
                            .map(|s| format!("panicked: {s}"))
                            .or_else(|| {
                                panic
                                    .downcast_ref::<String>()
                                    .map(|s| format!("panicked: {s}"))
                            })
                            .unwrap_or_else(|| "panicked".into()))
                    });
            if let Err(message) = outcome {
                let mut failure = self.failure.lock().unwrap_or_else(|p| p.into_inner());
                failure.get_or_insert(message);
            }
            finished += 1;
        }
        if finished > 0 && self.remaining.fetch_sub(finished, Ordering::AcqRel) == finished {
            let failure = self
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            self.tiles.done(failure);
        }
    }
}

/// Job allocations kept for reuse, of one tile type: at most this many.
const KEPT_JOBS: usize = 8;

/// Jobs of one tile type built in the allocation of an earlier one that nothing holds any
/// more (no worker, no queue entry: `Arc::get_mut`), so that a steady stream of them allocates
/// nothing once a few exist. A kept job lives until it is reused or its `KeptJobs` is dropped,
/// so its tiles must let go of what they hold (buffers, the submission) in
/// [`Tiles::done`], which runs before the job is idle.
pub(crate) struct KeptJobs<T: Tiles> {
    jobs: Mutex<Vec<Arc<Job<T>>>>,
}

impl<T: Tiles> KeptJobs<T> {
    pub(crate) fn new() -> Self {
        KeptJobs {
            jobs: Mutex::new(Vec::with_capacity(KEPT_JOBS)),
        }
    }

    /// A job of `tiles`, in a kept allocation if one is idle.
    pub(crate) fn job(&self, tiles: T) -> Arc<Job> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(kept) = jobs.iter_mut().find(|j| Arc::strong_count(j) == 1) {
            if let Some(job) = Arc::get_mut(kept) {
                *job = Job::fresh(tiles);
                return kept.clone();
            }
        }
        let job = Arc::new(Job::fresh(tiles));
        if jobs.len() < KEPT_JOBS {
            jobs.push(job.clone());
        }
        job
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// Bumped by every push, under the lock: what a spinning worker watches.
    pushes: AtomicU64,
    /// Whether a worker is spinning for work (at most one does; see [`Pool::new`]).
    spinning: AtomicBool,
    /// How long a worker that runs out of work spins before it sleeps.
    spin: Duration,
}

struct State {
    jobs: VecDeque<Arc<Job>>,
    shutdown: bool,
    idle: usize,
}

/// A fixed set of worker threads.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    workers: usize,
}

impl Pool {
    /// Starts `workers` threads. A worker that runs out of work watches for more for up to
    /// `spin` before it sleeps, one worker at a time: a job pushed meanwhile starts without a
    /// wake-up (microseconds saved per job when submissions follow each other closely), for
    /// at most `spin` of one core's time after each burst of work.
    pub(crate) fn new(workers: usize, name: &str, spin: Duration) -> Result<Pool> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                shutdown: false,
                idle: 0,
            }),
            wake: Condvar::new(),
            pushes: AtomicU64::new(0),
            spinning: AtomicBool::new(false),
            spin,
        });
        let mut pool = Pool {
            shared: shared.clone(),
            threads: Vec::with_capacity(workers),
            workers,
        };
        for i in 0..workers {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(format!("halcyon-{name}-worker-{i}"))
                .spawn(move || worker(&shared))
                .map_err(|e| {
                    Error::with_source(
                        StatusCode::ResourceExhausted,
                        format!("cannot spawn CPU worker thread {i} of {workers}"),
                        e,
                    )
                })?;
            pool.threads.push(thread);
        }
        Ok(pool)
    }

    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    /// Queues a job and wakes as many idle workers as it has tiles, less the spinning one.
    pub(crate) fn push(&self, job: Arc<Job>) {
        let tiles = job.count as usize;
        let mut state = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        state.jobs.push_back(job);
        self.shared.pushes.fetch_add(1, Ordering::Release);
        // A spinner that stops before seeing the push re-checks the queue under the lock
        // before it sleeps, so counting it here loses no job.
        let spinning = usize::from(self.shared.spinning.load(Ordering::Acquire));
        let wake = tiles.saturating_sub(spinning).min(state.idle);
        drop(state);
        if wake >= self.workers {
            self.shared.wake.notify_all();
        } else {
            for _ in 0..wake {
                self.shared.wake.notify_one();
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shutdown = true;
        self.shared.wake.notify_all();
        for thread in self.threads.drain(..) {
            // A worker thread dropping the last device handle would join itself.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn worker(shared: &Shared) {
    let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    // Whether this worker, out of work, may spin before sleeping: after each job, not after a
    // spin that found nothing.
    let mut may_spin = true;
    loop {
        // Job handles are dropped with the lock released: the last one drops the job's
        // continuation, which may drop the last handle of this pool (whose drop takes the lock)
        // or of its device.
        match state.jobs.front() {
            Some(job) if job.exhausted() => {
                let finished = state.jobs.pop_front();
                drop(state);
                drop(finished);
                state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            }
            Some(job) => {
                let job = job.clone();
                drop(state);
                job.work();
                drop(job);
                may_spin = true;
                state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            }
            None if state.shutdown => return,
            None if may_spin
                && !shared.spin.is_zero()
                && !shared.spinning.swap(true, Ordering::AcqRel) =>
            {
                let seen = shared.pushes.load(Ordering::Relaxed); // pushes happen under the lock
                drop(state);
                halcyon::backend::spin_until(shared.spin, || {
                    shared.pushes.load(Ordering::Acquire) != seen
                });
                shared.spinning.store(false, Ordering::Release);
                may_spin = false;
                // Back to the top: the queue is checked again under the lock.
                state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            }
            None => {
                state.idle += 1;
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
                state.idle -= 1;
            }
        }
    }
}
