//! The one switch between `std` and [loom](https://docs.rs/loom) synchronisation primitives for
//! the stream layer's model-checked parts (timelines, the event pool, the completion handoff,
//! the completion flags, the allocation table), following the core's own switch (which stays private to the core).
//!
//! Building with `RUSTFLAGS="--cfg loom"` swaps these for loom's, so the loom models
//! (`testing/loom/tests/stream.rs`) explore every interleaving of that code. The rest of the
//! stream layer (completion threads, the probe parker, the in-flight map) uses `std` directly.

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
    pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
    pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
}

pub(crate) use imp::*;

/// Locks `mutex`, ignoring poisoning: every critical section here leaves its data consistent
/// before it can panic (they only move values between collections), so a panic in one thread
/// must not turn every later operation on the same object into a panic too.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
