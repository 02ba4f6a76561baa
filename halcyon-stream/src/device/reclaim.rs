//! Frees of buffer memory, and unloads of modules, that must not run where a submission
//! completes.
//!
//! A submission holds the memory of every buffer it uses until it is settled, so the last
//! reference to a buffer the application already dropped goes away while the submission is
//! settled: on a completion thread, or on the reactor. Freeing there would block the completion
//! path on the device: `cuMemFree` and `hipFree` wait for the device (`hipFree` for every
//! stream of it), so a completion thread would sit in the free until the work queued after its
//! submission, on every queue, is done, and only then report the completions behind it. An
//! application that awaits one submission before issuing the next would see its pipeline drain
//! at every such free.
//!
//! So while [`Core::complete`](super::core::Core) settles a submission it marks its thread
//! ([`defer_frees`]), and memory dropped under the mark is handed to the device's *reclaimer*,
//! a thread that makes the frees in order.
//!
//! The same wait would block an application thread that drops the last reference while the
//! device has work in flight: typically a task on an async executor dropping a buffer it no
//! longer needs while later kernels run, whose worker thread would then sit in `cuMemFree`
//! until the device drained, stalling every other task on it. So a drop while submissions are
//! in flight on the device (its in-flight count, shared with the reclaim queue) is handed over
//! too. With nothing in flight a free has nothing to wait for and is made at once, on the
//! dropping thread, as is every free during the device's own shutdown. Stream-ordered memory
//! (queue `alloca`) is freed in stream order with no wait and never goes through here.
//!
//! The same holds for modules: `cuModuleUnload` and `hipModuleUnload` synchronise with the
//! device too, and the last reference to an executable the application dropped may be the one
//! a dispatching submission holds, so its unload goes the same way ([`Reclaimed::Module`]).
//!
//! An allocation that runs out of memory waits for the reclaimer's pending frees
//! ([`Reclaim::flush`], from `Core::retry_out_of_memory`) and tries once more, so deferring a
//! free never turns into a spurious out-of-memory error. When the device is dropped the reclaimer takes what is left, and memory
//! dropped after that (a buffer that outlived its device) is freed at once.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::api::{DevicePtr, ModuleHandle};
use crate::handoff::Handoff;

/// What the reclaimer releases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reclaimed {
    /// Memory no device work uses any more ([`crate::StreamApi::free`]).
    Memory(DevicePtr),
    /// A module no submission dispatches any more ([`crate::StreamApi::unload_module`]).
    Module(ModuleHandle),
}

thread_local! {
    /// Set while this thread settles a submission ([`defer_frees`]).
    static DEFERRING: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as settling a submission until the guard drops: buffer memory and
/// modules dropped meanwhile go to the device's reclaimer.
pub(crate) fn defer_frees() -> DeferGuard {
    DeferGuard {
        was: DEFERRING.with(|d| d.replace(true)),
    }
}

/// See [`defer_frees`].
pub(crate) struct DeferGuard {
    was: bool,
}

impl Drop for DeferGuard {
    fn drop(&mut self) {
        DEFERRING.with(|d| d.set(self.was));
    }
}

/// Whether the calling thread is settling a submission.
fn deferring() -> bool {
    DEFERRING.with(Cell::get)
}

#[derive(Default)]
struct Counts {
    pushed: u64,
    freed: u64,
    closed: bool,
}

/// The queue to a device's reclaimer thread (see the [module docs](self)).
pub(crate) struct Reclaim {
    queue: Handoff<Reclaimed>,
    counts: Mutex<Counts>,
    freed: Condvar,
    /// Submissions in flight on the device (its `Core`'s count): a free made while it is
    /// nonzero may wait for them.
    in_flight: Arc<AtomicUsize>,
}

impl Reclaim {
    /// The reclaim queue of a device whose submissions in flight `in_flight` counts.
    pub(crate) fn new(in_flight: Arc<AtomicUsize>) -> Self {
        Reclaim {
            queue: Handoff::new(std::time::Duration::ZERO),
            counts: Mutex::default(),
            freed: Condvar::new(),
            in_flight,
        }
    }
}

impl Reclaim {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `item` to the reclaimer if the calling thread is settling a submission or the
    /// device has submissions in flight (either way, releasing it here could wait for the
    /// device), and the reclaimer still runs; `false`: the caller releases it itself.
    pub(crate) fn defer(&self, item: Reclaimed) -> bool {
        (deferring() || self.in_flight.load(Ordering::SeqCst) > 0) && self.hand_over(item)
    }

    /// The reclaimer thread's loop: releases each item with `release`, in order, until
    /// [`Reclaim::close`].
    pub(crate) fn run(&self, release: impl Fn(Reclaimed)) {
        while let Some(item) = self.queue.next() {
            release(item);
            self.counts().freed += 1;
            self.freed.notify_all();
        }
    }

    /// Hands `item` (which no device work uses) to the reclaimer wherever the caller runs;
    /// `false` once the reclaimer stopped: the caller releases it itself.
    pub(crate) fn hand_over(&self, item: Reclaimed) -> bool {
        let mut counts = self.counts();
        if counts.closed {
            return false;
        }
        counts.pushed += 1;
        // Under the lock, so [`Reclaim::close`] cannot stop the queue in between: what was
        // counted is always in the queue before it stops, and the thread releases it.
        self.queue.push(item);
        true
    }

    /// Waits until everything handed over so far was released.
    pub(crate) fn flush(&self) {
        let mut counts = self.counts();
        let target = counts.pushed;
        while counts.freed < target {
            counts = self.freed.wait(counts).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Stops taking frees; the thread ends once it made those already handed over.
    pub(crate) fn close(&self) {
        self.counts().closed = true;
        self.queue.stop();
    }

    /// Items handed over and not yet released.
    pub(crate) fn pending(&self) -> u64 {
        let counts = self.counts();
        counts.pushed - counts.freed
    }

    /// Items handed over so far.
    pub(crate) fn deferred(&self) -> u64 {
        self.counts().pushed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    #[test]
    fn only_frees_under_the_mark_are_deferred_and_all_are_made_in_order() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let reclaim = Arc::new(Reclaim::new(in_flight.clone()));
        let memory = |n| Reclaimed::Memory(DevicePtr(n));
        assert!(!reclaim.defer(memory(1)), "not settling: freed at once");
        let freed = Arc::new(StdMutex::new(Vec::new()));
        let thread = {
            let (reclaim, freed) = (reclaim.clone(), freed.clone());
            std::thread::spawn(move || reclaim.run(|item| freed.lock().unwrap().push(item)))
        };
        {
            let _mark = defer_frees();
            {
                let _nested = defer_frees();
                assert!(reclaim.defer(memory(2)));
                assert!(reclaim.defer(Reclaimed::Module(ModuleHandle(7))));
            }
            assert!(
                reclaim.defer(memory(3)),
                "still marked after a nested guard"
            );
        }
        assert!(!reclaim.defer(memory(4)), "the mark is gone");
        in_flight.store(2, Ordering::SeqCst);
        assert!(
            reclaim.defer(memory(6)),
            "work in flight: deferred without the mark"
        );
        in_flight.store(0, Ordering::SeqCst);
        assert!(!reclaim.defer(memory(8)), "idle again");
        reclaim.flush();
        assert_eq!(
            *freed.lock().unwrap(),
            [
                memory(2),
                Reclaimed::Module(ModuleHandle(7)),
                memory(3),
                memory(6)
            ]
        );
        assert_eq!(reclaim.pending(), 0);
        reclaim.close();
        let _mark = defer_frees();
        assert!(!reclaim.defer(memory(5)), "closed: freed at once");
        thread.join().unwrap();
    }
}
