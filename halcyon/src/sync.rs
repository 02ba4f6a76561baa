//! The one switch between `std` and [loom](https://docs.rs/loom) synchronisation primitives.
//!
//! Everything in the concurrency core imports its atomics, locks, `Arc` and threads from here, so
//! building with `RUSTFLAGS="--cfg loom"` lets loom explore every interleaving of that code.
//! Under loom there is no model of time: timeouts are treated as "wait until woken".

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
    pub(crate) use std::sync::{mpsc, Arc, Mutex, MutexGuard};
    pub(crate) mod thread {
        pub(crate) use std::thread::{
            current, park, park_timeout, Builder, JoinHandle, Thread, ThreadId,
        };
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
    pub(crate) use loom::sync::{mpsc, Arc, Mutex, MutexGuard};
    pub(crate) mod thread {
        pub(crate) use loom::thread::{current, park, Builder, JoinHandle, Thread, ThreadId};

        /// loom has no model of time: a timed park is a park that only a wake ends.
        pub(crate) fn park_timeout(_timeout: std::time::Duration) {
            park()
        }
    }
}

pub(crate) use imp::*;

/// Locks `mutex`, ignoring poisoning: every critical section in the core leaves its data
/// consistent before it can panic (they only move values between collections), so a panic in
/// one thread must not turn every later semaphore operation into a panic too.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
