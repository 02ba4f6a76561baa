//! Failing an action's signal fence in timeline order.
//!
//! An action that will not run (a wait failed, or issuing it failed) fails its signal fence.
//! Failing a semaphore at once would let the failure overtake earlier work on that same
//! timeline: an action signalling `s` to `v + 1` that also waits for `s` to reach `v` would fail
//! `s` while the work signalling `v` is still running, failing that work's submission and every
//! consumer of `v`, though nothing they depend on failed. So each signal entry `(s, v)` fails
//! only once the earlier work on `s` has settled, reached or failed: the action's own waits on
//! `s` (its *order*, [`failure_order`]) and the highest value below `v` that submitted work will
//! still signal on `s` (registered by every [`crate::Queue`] submission with
//! [`Semaphore::expect_signal`]), which covers work the action depends on through other
//! semaphores and completions the host has not seen yet. Work before the action on its
//! timelines completes and reports its own outcome; work after it fails. An entry whose earlier
//! work never settles holds its failure back, as that work would have held the action back. If
//! the reactor shuts down first, the entries fail at once.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::backend::reactor::ReactorHandle;
use crate::error::Error;
use crate::fence::Fence;
use crate::semaphore::{Semaphore, Wait};

/// `error`, a failure of one of the semaphores `wait` waits on, as the work that waited
/// reports it ([`Error::inherited`]): naming the first failed entry of `wait`.
pub(crate) fn inherited(wait: &Fence, error: &Error) -> Error {
    match wait.iter().find(|(s, _)| s.is_failed()) {
        Some((semaphore, value)) => error.inherited(format_args!(
            "waits on a failed semaphore{} (value {value})",
            crate::label::suffix(semaphore.label())
        )),
        None => error.inherited("waits on a failed semaphore"),
    }
}

/// The entries of `wait` on semaphores that `signal` also signals: what a failure of an action
/// with these timepoints waits for (its *order*, see [`crate::backend::ActionQueue::submit_parked`]).
pub fn failure_order(wait: &Fence, signal: &Fence) -> Fence {
    wait.iter()
        .filter(|(semaphore, _)| signal.iter().any(|(s, _)| s.ptr_eq(semaphore)))
        .collect()
}

/// Fails each entry `(s, v)` of `signal` with `error` once the earlier work on `s` has settled:
/// the entries of `order` on `s`, and the highest value below `v` that work submitted through a
/// [`crate::Queue`] will still signal on `s`. Entries with nothing to wait for (the usual case)
/// fail at once, in fence order; the others from a task on `reactor`, each as soon as its own
/// timeline allows (so one entry never waits for another semaphore's work, which could wait for
/// this very failure). What a backend calls when work it ran failed, with [`failure_order`] of
/// the work's wait and signal fences; see the [module docs](super) for the ordering this keeps.
pub fn fail_in_order(reactor: &ReactorHandle, order: &Fence, signal: Fence, error: Error) {
    let mut held = Vec::new();
    for (semaphore, value) in signal.iter() {
        let earlier = order
            .iter()
            .filter(|(s, _)| s.ptr_eq(semaphore))
            .map(|(_, v)| v)
            .chain(semaphore.pending_below(value))
            .max();
        match earlier {
            Some(earlier) if matches!(semaphore.query(), Ok(current) if current < earlier) => {
                held.push((semaphore.clone(), semaphore.wait(earlier)))
            }
            _ => semaphore.fail(error.clone()),
        }
    }
    if held.is_empty() {
        return;
    }
    // After shutdown the task comes straight back and is dropped here, failing what it held.
    let _ = reactor.spawn(FailAfter { held, error });
}

/// Fails each held semaphore with `error` once its wait has completed, either way; every one
/// still held on drop.
struct FailAfter {
    held: Vec<(Semaphore, Wait)>,
    error: Error,
}

impl Future for FailAfter {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let error = &this.error;
        this.held.retain_mut(|(semaphore, wait)| {
            let pending = Pin::new(wait).poll(cx).is_pending();
            if !pending {
                semaphore.fail(error.clone());
            }
            pending
        });
        match this.held.is_empty() {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    }
}

impl Drop for FailAfter {
    fn drop(&mut self) {
        for (semaphore, _) in self.held.drain(..) {
            semaphore.fail(self.error.clone());
        }
    }
}
