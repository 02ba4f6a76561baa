//! Failing an action's signal fence in timeline order.
//!
//! An action that will not run (a wait failed, or issuing it failed) fails its signal fence.
//! Failing a semaphore at once would let the failure overtake earlier work on that same
//! timeline: an action signalling `s` to `v + 1` that also waits for `s` to reach `v` would fail
//! `s` while the work signalling `v` is still running, failing that work's submission and every
//! consumer of `v`, though nothing they depend on failed. So the failure waits for the action's
//! waits on its own signal semaphores (its *order*) to settle, reached or failed, and only then
//! fails the fence: work before the action on its timelines completes and reports its own
//! outcome; work after it fails. The same holds for the lower values of its signal semaphores
//! that submitted work will still signal (`Semaphore::expect_signal`, registered by every
//! [`crate::Queue`] submission), which covers dependencies through other semaphores. An order
//! entry that never settles holds the failure back, as it would have held the action back. If
//! the reactor shuts down first, the fence fails at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::Error;
use crate::fence::Fence;
use crate::reactor::ReactorHandle;
use crate::semaphore::Wait;

/// The entries of `wait` on semaphores that `signal` also signals: what a failure of an action
/// with these timepoints waits for (its *order*, see [`super::ActionQueue::submit_parked`]).
pub fn failure_order(wait: &Fence, signal: &Fence) -> Fence {
    wait.iter()
        .filter(|(semaphore, _)| signal.iter().any(|(s, _)| s.ptr_eq(semaphore)))
        .collect()
}

/// Fails `signal` with `error` once every entry of `order` has settled, and every lower value of
/// each signal semaphore that submitted work will still signal has too: at once if they all
/// have (the usual case), else from a task on `reactor`. What a backend calls when work it ran
/// failed (pass [`failure_order`] of the work's wait and signal fences); see the
/// [module docs](super) for the ordering this keeps.
pub fn fail_in_order(reactor: &ReactorHandle, order: &Fence, signal: Fence, error: Error) {
    // Besides `order`, the earlier values of the signal semaphores that submitted work will
    // still signal: work this action depends on through other semaphores (a chain of queue
    // operations ending in this one) or whose completion the host has not seen yet.
    let earlier = signal
        .iter()
        .filter_map(|(semaphore, value)| Some((semaphore, semaphore.pending_below(value)?)));
    let waits: Vec<Wait> = order
        .iter()
        .chain(earlier)
        .filter(|(semaphore, value)| matches!(semaphore.query(), Ok(current) if current < *value))
        .map(|(semaphore, value)| semaphore.wait(value))
        .collect();
    if waits.is_empty() {
        return signal.fail(error);
    }
    // After shutdown the task comes straight back and is dropped here, failing the fence.
    let _ = reactor.spawn(FailAfter {
        waits,
        signal,
        error: Some(error),
    });
}

/// Fails `signal` with `error` once every wait has completed, either way; on drop if sooner.
struct FailAfter {
    waits: Vec<Wait>,
    signal: Fence,
    error: Option<Error>,
}

impl Future for FailAfter {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.waits
            .retain_mut(|wait| Pin::new(wait).poll(cx).is_pending());
        if !this.waits.is_empty() {
            return Poll::Pending;
        }
        if let Some(error) = this.error.take() {
            this.signal.fail(error);
        }
        Poll::Ready(())
    }
}

impl Drop for FailAfter {
    fn drop(&mut self) {
        if let Some(error) = self.error.take() {
            self.signal.fail(error);
        }
    }
}
