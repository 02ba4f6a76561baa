//! Queues and the pending-action executor.
//!
//! Every queue operation waits on a fence and signals a fence. An operation whose wait fence is
//! already reached is issued to the device at once, on the submitting thread. One whose waits are
//! not yet reached becomes a **pending action**: a future on the device's
//! [reactor](crate::backend::reactor) that awaits the wait fence and then issues. The reactor polls it when
//! a semaphore it waits on moves, so a host `signal` from any thread releases the actions
//! depending on it within one reactor wake.
//!
//! Ordering and failure semantics of [`ActionQueue::submit`](crate::backend::ActionQueue::submit):
//!
//! * An action issues only after every entry of its wait fence is reached. Ready actions of one
//!   queue issue in submission order: actions register on semaphores in submission order, a
//!   signal wakes in registration order, and the reactor polls woken actions in submission order.
//!   While a queue has actions pending on the reactor, its later actions go through the reactor
//!   too, so a ready action never overtakes an earlier ready one of the same queue. Actions whose
//!   waits are reached at different times issue in the order their waits are reached: ordering
//!   between actions is what their semaphores say (submit an action waiting on a semaphore that
//!   a later action signals, and the later one runs first).
//! * An action issues exactly once, or not at all.
//! * If a wait fails, the action does not issue; its signal fence is failed with that same
//!   error, so failure travels down any chain of dependent actions without hangs.
//! * If issuing fails (or panics), the signal fence is failed with that error.
//! * A failure never overtakes earlier work on the action's own timelines: each entry `(s, v)` of
//!   its signal fence fails only once the earlier work on `s` has settled, reached or failed:
//!   the action's waits on `s` (its *order*, see [`ActionQueue::submit_parked`](crate::backend::ActionQueue::submit_parked)) and the highest
//!   value below `v` that work already submitted through a [`Queue`] will signal on `s`. The
//!   latter covers work it depends on through other semaphores (an `alloca` .. `dealloca` chain
//!   on a private semaphore ending in a signal of the caller's timeline) and work whose
//!   completion the host has not seen yet (a device that completes queues independently). Work
//!   signalling the values before it completes and reports its own outcome; work submitted only
//!   after the failure finds the semaphore failed and fails too.
//! * If the reactor shuts down (its device was dropped) before the waits are reached, the action
//!   is dropped unissued and its signal fence fails with [`crate::StatusCode::Aborted`].

pub(crate) mod across;
pub(crate) mod action;
mod collective;
pub(crate) mod completion;
pub(crate) mod ordered;
mod peer;
pub(crate) mod read_sink;
pub(crate) mod submit;
pub(crate) mod touched;

pub use submit::{Queue, Submission, Timeline, TimelineStep, Timepoints};
