//! Driving a future to completion on the current thread, for the `*_blocking` helpers.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::sync::thread;

/// Wakes a parked thread.
struct Unparker(thread::Thread);

impl Wake for Unparker {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.unpark();
    }
}

/// A waker that unparks the calling thread. Outside loom it is built once per thread and cached,
/// so a blocking wait costs a reference-count increment rather than an allocation (and the last
/// reference is never dropped by the waking thread, which would free it into the wrong thread's
/// allocator cache).
#[cfg(not(loom))]
fn current_thread_waker() -> Waker {
    thread_local! {
        static WAKER: Waker = Waker::from(std::sync::Arc::new(Unparker(thread::current())));
    }
    WAKER
        .try_with(Waker::clone)
        .unwrap_or_else(|_| Waker::from(std::sync::Arc::new(Unparker(thread::current()))))
}

#[cfg(loom)]
fn current_thread_waker() -> Waker {
    Waker::from(std::sync::Arc::new(Unparker(thread::current())))
}

/// Polls `future` on this thread, parking between polls, until it completes (`Some(output)`) or
/// `timeout` passes (`None`; the future is dropped, which deregisters its waiters).
pub(crate) fn block_on_timeout<F: Future>(
    future: F,
    timeout: Option<Duration>,
) -> Option<F::Output> {
    let deadline = timeout.map(|t| Instant::now().checked_add(t));
    let waker = current_thread_waker();
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Some(output);
        }
        match deadline {
            // No timeout, or one too far away to represent: wait for the wake.
            None | Some(None) => thread::park(),
            Some(Some(deadline)) => {
                let now = Instant::now();
                if now >= deadline {
                    return None;
                }
                thread::park_timeout(deadline - now);
            }
        }
    }
}
