//! Counting heap allocations, for tests that hold a submit path's allocations to a limit.
//!
//! A test binary installs [`Counting`] as its global allocator and reads [`per_call`] around
//! the code it measures. Every thread's allocations count (a backend's worker and completion
//! threads are part of what a submission costs), so such a binary should hold one test: another
//! running alongside would be counted too. A driver's own C allocations are not seen.
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: halcyon_conformance::allocations::Counting =
//!     halcyon_conformance::allocations::Counting;
//!
//! let per_round_trip = halcyon_conformance::allocations::per_call(100, 1000, || round_trip());
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting allocations (and reallocations) as they happen.
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to the system allocator with the caller's arguments, which
// meet its contract because they meet `GlobalAlloc`'s.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations counted so far (only while [`Counting`] is the global allocator).
pub fn count() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Allocations per call of `f` over `calls` calls, after `warm_up` calls that are not counted.
///
/// Waits 50 ms before counting: the test harness's main thread records the test it just
/// started (a hash map insertion, which allocates) while the test already runs, and a fast
/// warm-up in an optimised build finished before it once in a few runs.
pub fn per_call(warm_up: u64, calls: u64, mut f: impl FnMut()) -> f64 {
    std::thread::sleep(std::time::Duration::from_millis(50));
    for _ in 0..warm_up {
        f();
    }
    let before = count();
    for _ in 0..calls {
        f();
    }
    (count() - before) as f64 / calls.max(1) as f64
}
