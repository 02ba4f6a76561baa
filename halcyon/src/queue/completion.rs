//! A queue's completion semaphores: every operation gets a fresh semaphore at 0 that marks its
//! completion (what buffer trackers and its `Submission` watch, and where its profile record
//! rides). They are recycled instead of allocated per operation.
//!
//! The queue keeps the allocations of its last [`KEPT`] completion semaphores. A new one is
//! built in the oldest of them if nothing holds that one any more (every tracker, waiter and
//! fence that had it has let go: checked by the reference count, so reuse can never be seen),
//! else allocated; either way it joins the back. Operations complete and release their
//! semaphores roughly in order, so in a steady stream the oldest is almost always free.

use std::collections::VecDeque;

use crate::profile::OperationTrace;
use crate::semaphore::{Semaphore, Spent};
use crate::sync::{lock, Mutex};

/// The completion semaphores a queue keeps for reuse.
const KEPT: usize = 64;

/// One queue's recycled completion semaphores (see the [module docs](self)).
pub(crate) struct Completions {
    kept: Mutex<VecDeque<Spent>>,
}

impl Completions {
    pub(crate) fn new() -> Self {
        Completions {
            kept: Mutex::new(VecDeque::with_capacity(KEPT)),
        }
    }

    /// A semaphore at 0 for one operation's completion, carrying its profile record if any.
    pub(crate) fn next(&self, trace: Option<OperationTrace>) -> Semaphore {
        let mut kept = lock(&self.kept);
        let trace = match kept.front_mut() {
            Some(oldest) => match Semaphore::reuse(oldest, trace) {
                Ok(reused) => {
                    // To the back, as the newest: a pop and a push (`rotate_left` cost several
                    // times more on a full ring).
                    if let Some(spent) = kept.pop_front() {
                        kept.push_back(spent);
                    }
                    return reused;
                }
                Err(trace) => trace,
            },
            None => trace,
        };
        let fresh = Semaphore::completion(trace);
        if kept.len() >= KEPT {
            kept.pop_front(); // still in use: it is freed by its last holder instead
        }
        kept.push_back(fresh.spent());
        fresh
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A completion semaphore is reused only once nothing holds it; the reused one is a new
    /// semaphore: at 0, not failed, unlabelled, with a new id.
    #[test]
    fn reused_only_when_released_and_fresh_when_reused() {
        let completions = Completions::new();
        let first = completions.next(None);
        first.set_label("first");
        let first_id = first.id();
        first.fail(crate::Error::new(crate::StatusCode::Aborted, "old"));
        let wait = first.wait(1);
        drop(first);
        // A waiter still holds it: the next one is a new allocation.
        let second = completions.next(None);
        assert_eq!(completions.kept.lock().unwrap().len(), 2);
        drop(wait);
        drop(second);
        // Now the oldest is free: reused in place.
        let third = completions.next(None);
        assert_eq!(
            completions.kept.lock().unwrap().len(),
            2,
            "no new allocation"
        );
        assert_eq!(third.query().expect("not failed"), 0);
        assert_eq!(third.label(), None);
        assert_ne!(third.id(), first_id);
        third.signal(1).expect("signal");
    }
}
