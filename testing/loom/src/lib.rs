//! Model checks of halcyon's concurrency core. The models live in `tests/`; this library only
//! holds what they share. Run them with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p loom_tests --release
//! ```
//!
//! Without `--cfg loom` everything here compiles to nothing. `LOOM_MAX_PREEMPTIONS` overrides the
//! preemption bound each model picks (a larger bound explores more, for much longer).
//!
//! When loom finds a deadlock in a model that owns a reactor, unwinding drops loom objects
//! outside the execution and the test binary aborts ("panic in a destructor during cleanup");
//! rerun that one test with `-- --nocapture` to read loom's report, which is printed first.

#[cfg(loom)]
pub use support::*;

#[cfg(loom)]
mod support {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, PoisonError};
    use std::task::{Context, Poll, Wake, Waker};

    /// Explores every interleaving of `f` with at most `preemption_bound` preemptions per
    /// execution (unless `LOOM_MAX_PREEMPTIONS` says otherwise).
    pub fn model_with_bound<F>(preemption_bound: usize, f: F)
    where
        F: Fn() + Sync + Send + 'static,
    {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound.get_or_insert(preemption_bound);
        builder.check(f);
    }

    /// [`model_with_bound`] with a bound of 3, for small models.
    pub fn model<F>(f: F)
    where
        F: Fn() + Sync + Send + 'static,
    {
        model_with_bound(3, f);
    }

    /// A waker that counts its wakes.
    ///
    /// It lives outside loom (a std atomic, read only after the threads that wake it are joined),
    /// so observing it adds no interleavings to explore.
    #[derive(Debug, Default)]
    pub struct WakeCounter(AtomicUsize);

    /// A fresh [`WakeCounter`] and a waker that increments it.
    pub fn counting_waker() -> (Arc<WakeCounter>, Waker) {
        let counter = Arc::new(WakeCounter::default());
        let waker = Waker::from(counter.clone());
        (counter, waker)
    }

    impl WakeCounter {
        /// How many times a waker of this counter was woken.
        pub fn wakes(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }
    }

    impl Wake for WakeCounter {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// How many freed blocks [`Quarantine`] holds back before it really frees the oldest.
    const QUARANTINE_SLOTS: usize = 1 << 16;

    /// A global allocator that holds every freed block back until 65 536 more have been freed,
    /// so an address freed during one loom execution is not handed out again during it.
    ///
    /// The reactor's inbox is a Treiber stack: a push's compare-exchange compares node
    /// addresses. If a node freed by the reactor is reallocated at the same address for a later
    /// push, a stale compare-exchange succeeds (a harmless ABA: the list stays well formed).
    /// Whether that happens depends on the allocator's free lists, which loom neither controls
    /// nor resets between executions, so replaying an execution can take a different branch,
    /// and loom aborts with "Is the model fully deterministic?". Install this in model binaries
    /// that run the reactor:
    ///
    /// ```text
    /// #[global_allocator]
    /// static ALLOCATOR: loom_tests::Quarantine = loom_tests::Quarantine;
    /// ```
    #[derive(Debug)]
    pub struct Quarantine;

    struct Slots {
        /// Freed blocks not yet returned to the system: `(address, size, align)`.
        blocks: [(usize, usize, usize); QUARANTINE_SLOTS],
        next: usize,
    }

    static SLOTS: std::sync::Mutex<Slots> = std::sync::Mutex::new(Slots {
        blocks: [(0, 0, 0); QUARANTINE_SLOTS],
        next: 0,
    });

    // SAFETY: every block comes from `System` and goes back to it exactly once, with the layout
    // it was allocated with; holding a block back only delays its release.
    unsafe impl GlobalAlloc for Quarantine {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract for `alloc` is `System`'s.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            let (address, size, align) = {
                // `std::sync::Mutex` does not allocate, so the allocator may use it.
                let mut slots = SLOTS.lock().unwrap_or_else(PoisonError::into_inner);
                let next = slots.next;
                slots.next = (next + 1) % QUARANTINE_SLOTS;
                std::mem::replace(
                    &mut slots.blocks[next],
                    (ptr as usize, layout.size(), layout.align()),
                )
            };
            if address != 0 {
                // SAFETY: the evicted block was passed to `dealloc` with this layout and came
                // from `System` (`realloc` goes through `alloc` and `dealloc` here); it is freed
                // once, since its slot now holds another block.
                unsafe {
                    System.dealloc(
                        address as *mut u8,
                        Layout::from_size_align_unchecked(size, align),
                    )
                }
            }
        }
    }

    /// Signals `sem` to `value` on a new loom thread.
    pub fn spawn_signal(
        sem: &halcyon::Semaphore,
        value: u64,
    ) -> loom::thread::JoinHandle<halcyon::Result<()>> {
        let sem = sem.clone();
        loom::thread::spawn(move || sem.signal(value))
    }

    /// Fails `sem` with `error` on a new loom thread.
    pub fn spawn_fail(
        sem: &halcyon::Semaphore,
        error: &halcyon::Error,
    ) -> loom::thread::JoinHandle<()> {
        let (sem, error) = (sem.clone(), error.clone());
        loom::thread::spawn(move || sem.fail(error))
    }

    /// Polls `future` once with `waker`.
    pub fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>, waker: &Waker) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(waker))
    }
}
