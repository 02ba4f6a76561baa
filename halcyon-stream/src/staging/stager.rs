//! The staging thread: the host's half of a double-buffered staged copy.
//!
//! A staged copy moves its chunks through two halves of one pinned buffer. While the device
//! copies one chunk out of (or into) one half, this thread copies the next chunk into (or the
//! previous one out of) the other half, so the host's copy and the device's overlap instead of
//! taking turns. The copy's host functions, which run in stream order, hand chunks to the
//! thread ([`Pipeline::hand`]) and wait for them ([`Pipeline::wait_copied`]); the thread itself
//! only copies bytes and never calls a driver.
//!
//! One thread per [`StagingPool`](super::StagingPool), started with its first staged copy of
//! more than one chunk, runs the chunks of every copy in the order they were handed over. It
//! finishes what it was handed before it exits (the pool's drop), and
//! [`StagingPool::drain`](super::StagingPool::drain) waits for it first, so no chunk is copied
//! into or out of a buffer the backend frees.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// A host address handed to the thread or moved into a host function.
#[derive(Clone, Copy)]
pub(super) struct SendPtr(pub(super) *mut u8);

// SAFETY: only the address moves; the staged copy's safety contract says who may touch the
// memory and when.
unsafe impl Send for SendPtr {}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// One chunk to copy, for `pipeline`.
struct Job {
    from: SendPtr,
    to: SendPtr,
    n: usize,
    pipeline: Arc<Pipeline>,
}

#[derive(Default)]
struct Jobs {
    queue: VecDeque<Job>,
    /// A job is being copied.
    busy: bool,
    closing: bool,
}

#[derive(Default)]
struct Shared {
    jobs: Mutex<Jobs>,
    /// The thread waits here for jobs; [`Stager::quiesce`] for the queue to empty.
    changed: Condvar,
}

/// The staging thread (see the [module docs](self)).
pub(super) struct Stager {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Stager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let jobs = lock(&self.shared.jobs);
        f.debug_struct("Stager")
            .field("queued", &jobs.queue.len())
            .field("busy", &jobs.busy)
            .finish()
    }
}

impl Stager {
    /// Starts the thread; `None` if the system refuses one (staged copies then take turns).
    pub(super) fn spawn() -> Option<Stager> {
        let shared = Arc::new(Shared::default());
        let thread = std::thread::Builder::new()
            .name("halcyon-staging".into())
            .spawn({
                let shared = shared.clone();
                move || run(&shared)
            })
            .ok()?;
        Some(Stager {
            shared,
            thread: Some(thread),
        })
    }

    fn push(&self, job: Job) {
        lock(&self.shared.jobs).queue.push_back(job);
        self.shared.changed.notify_all();
    }

    /// Waits until every chunk handed over so far has been copied.
    pub(super) fn quiesce(&self) {
        let mut jobs = lock(&self.shared.jobs);
        while jobs.busy || !jobs.queue.is_empty() {
            jobs = self
                .shared
                .changed
                .wait(jobs)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Stager {
    fn drop(&mut self) {
        lock(&self.shared.jobs).closing = true;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: copies jobs in order until closing with none left.
fn run(shared: &Shared) {
    let mut jobs = lock(&shared.jobs);
    loop {
        if let Some(job) = jobs.queue.pop_front() {
            jobs.busy = true;
            drop(jobs);
            // SAFETY: a pipeline hands over a chunk only while its staged copy's contract keeps
            // both ranges valid and untouched by anything else until the chunk is counted as
            // copied (see `chunks.rs`), and the two never overlap (pinned staging is not the
            // caller's memory).
            unsafe { std::ptr::copy_nonoverlapping(job.from.0.cast_const(), job.to.0, job.n) };
            job.pipeline.copied_one();
            jobs = lock(&shared.jobs);
            jobs.busy = false;
            shared.changed.notify_all();
            continue;
        }
        if jobs.closing {
            return;
        }
        jobs = shared.changed.wait(jobs).unwrap_or_else(|p| p.into_inner());
    }
}

#[derive(Default)]
struct State {
    /// Chunks handed to the thread.
    handed: usize,
    /// Chunks copied (by the thread, or by the caller before the pipeline was made).
    copied: usize,
    /// The copy failed part way: no chunk is handed over any more.
    aborted: bool,
}

/// One staged copy's chunks on the staging thread, in order: how many were handed over and
/// copied, and whether the copy was abandoned.
pub(super) struct Pipeline {
    state: Mutex<State>,
    changed: Condvar,
}

impl Pipeline {
    /// A pipeline whose first `copied` chunks are in place already.
    pub(super) fn new(copied: usize) -> Arc<Pipeline> {
        Arc::new(Pipeline {
            state: Mutex::new(State {
                handed: copied,
                copied,
                aborted: false,
            }),
            changed: Condvar::new(),
        })
    }

    /// Hands the next chunk (`n` bytes from `from` to `to`) to `stager`; once the copy was
    /// abandoned, copies it here instead (so that nothing of it is copied after the stream ran
    /// the host function that called this).
    ///
    /// # Safety
    /// Both ranges must stay valid, and untouched by anything else, until the chunk is counted
    /// as copied ([`Pipeline::wait_copied`]), and must not overlap.
    pub(super) unsafe fn hand(
        self: &Arc<Self>,
        stager: &Stager,
        from: SendPtr,
        to: SendPtr,
        n: usize,
    ) {
        {
            let mut state = lock(&self.state);
            if state.aborted {
                // The chunks before this one are copied first, so that a count of copied
                // chunks still means "every chunk up to it".
                while state.copied < state.handed {
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                state.handed += 1;
                drop(state);
                // SAFETY: the caller's contract.
                unsafe { std::ptr::copy_nonoverlapping(from.0.cast_const(), to.0, n) };
                self.copied_one();
                return;
            }
            state.handed += 1;
        }
        stager.push(Job {
            from,
            to,
            n,
            pipeline: self.clone(),
        });
    }

    fn copied_one(&self) {
        lock(&self.state).copied += 1;
        self.changed.notify_all();
    }

    /// Waits until `chunks` chunks are copied, or, for an abandoned copy, until every chunk
    /// handed over is (a chunk whose host function never ran never will be).
    pub(super) fn wait_copied(&self, chunks: usize) {
        let mut state = lock(&self.state);
        while state.copied < chunks && !(state.aborted && state.copied == state.handed) {
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Abandons the copy: no chunk is handed to the thread any more (a host function that
    /// still runs copies its chunk itself), and this waits until the thread has copied every
    /// chunk it was handed (at most the one or two under way), so that none is copied after
    /// the stream ran everything enqueued.
    pub(super) fn abort(&self) {
        let mut state = lock(&self.state);
        state.aborted = true;
        self.changed.notify_all();
        while state.copied < state.handed {
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_copied_in_order_and_counted() {
        let stager = Stager::spawn().expect("a thread");
        let src: Vec<u8> = (0..64).collect();
        let mut dst = vec![0u8; 64];
        let pipeline = Pipeline::new(1);
        for k in 1..4 {
            // SAFETY: `src` and `dst` outlive the wait below and do not overlap.
            unsafe {
                pipeline.hand(
                    &stager,
                    SendPtr(src.as_ptr().add(16 * k).cast_mut()),
                    SendPtr(dst.as_mut_ptr().add(16 * k)),
                    16,
                )
            };
        }
        pipeline.wait_copied(4);
        assert_eq!(dst[16..], src[16..]);
        assert_eq!(dst[..16], [0; 16], "chunk 0 was the caller's");
        stager.quiesce();
    }

    #[test]
    fn an_abandoned_copy_waits_for_what_it_handed_and_copies_the_rest_itself() {
        let stager = Stager::spawn().expect("a thread");
        let src = vec![7u8; 4096];
        let mut dst = vec![0u8; 4096];
        let pipeline = Pipeline::new(0);
        // SAFETY: as above.
        unsafe {
            pipeline.hand(
                &stager,
                SendPtr(src.as_ptr().cast_mut()),
                SendPtr(dst.as_mut_ptr()),
                4096,
            )
        };
        pipeline.abort();
        assert!(
            dst.iter().all(|&b| b == 7),
            "the chunk handed over was copied"
        );
        let mut more = vec![0u8; 16];
        // SAFETY: as above.
        unsafe {
            pipeline.hand(
                &stager,
                SendPtr(src.as_ptr().cast_mut()),
                SendPtr(more.as_mut_ptr()),
                16,
            )
        };
        assert_eq!(more, [7; 16], "copied by the caller, not the thread");
        // Chunk 2 was never handed over: the wait returns instead of hanging.
        pipeline.wait_copied(3);
        stager.quiesce();
    }
}
