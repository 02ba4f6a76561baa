//! The order of one channel's collectives on this rank.
//!
//! Every rank's engine must see a channel's collectives in the same order, but a queue issues
//! operations in the order their waits are reached. So each collective takes a *turn*, a value
//! of the channel's order semaphore, when it is submitted, and waits for the turn before it:
//! turn `k` is passed (the semaphore signalled to `k`) once the engine has collective `k`.
//!
//! A collective that never reaches the engine (refused, its waits failed, its device went
//! away) leaves this rank out of step with the others for good, so its turn fails the order
//! semaphore, and every later collective on the channel fails with that error. The failure
//! never overtakes an earlier turn still waiting: it is held until the turn before it passes.

use std::sync::{Arc, Mutex};

use crate::error::{Error, StatusCode};
use crate::fence::Fence;
use crate::semaphore::Semaphore;

/// One channel's turns.
pub(crate) struct Order {
    semaphore: Semaphore,
    /// The channel, for messages (`"channel mpi rank 0 of 2"`).
    name: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Turns handed out.
    taken: u64,
    /// A failure held until the turn before it is passed: the turn that failed, and why.
    held: Option<(u64, Error)>,
}

impl Order {
    pub(crate) fn new(name: String) -> Arc<Order> {
        let semaphore = Semaphore::new(0);
        semaphore.set_label(&format!("{name} order"));
        Arc::new(Order {
            semaphore,
            name,
            state: Mutex::default(),
        })
    }

    /// The next turn: the semaphore value to wait for (the turn before) and the turn.
    pub(crate) fn take(self: &Arc<Order>) -> (Semaphore, u64, Turn) {
        let mut state = self.lock();
        state.taken += 1;
        let value = state.taken;
        let turn = Turn {
            order: self.clone(),
            value,
            settled: false,
            waits: Fence::new(),
        };
        (self.semaphore.clone(), value - 1, turn)
    }

    /// The channel's name (`"channel mpi rank 0 of 2 on cpu://0"`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A collective's turn (see the [module docs](self)): passed once the engine has it, failed
/// (with [`Turn::fail`]'s error, or on drop) otherwise.
pub(crate) struct Turn {
    order: Arc<Order>,
    value: u64,
    settled: bool,
    /// The collective's own waits: a failure among them is why it did not run.
    waits: Fence,
}

impl Turn {
    pub(crate) fn value(&self) -> u64 {
        self.value
    }

    /// Remembers the collective's waits, to name the failed one if it does not run.
    pub(crate) fn waits_on(&mut self, waits: &Fence) {
        self.waits = waits.clone();
    }

    /// The engine has the collective: the next turn may go.
    pub(crate) fn pass(&mut self) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let order = &self.order;
        let state = order.lock();
        // A failed order semaphore stays failed: the channel is out of step already.
        let _ = order.semaphore.signal(self.value);
        if let Some((at, error)) = &state.held {
            if *at == self.value + 1 {
                order.semaphore.fail(error.clone());
            }
        }
    }

    /// The collective will not reach the engine: fail the channel from this turn on.
    pub(crate) fn fail(&mut self, error: Error) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let order = &self.order;
        let mut state = order.lock();
        let reached = order
            .semaphore
            .query()
            .map_or(true, |v| v + 1 >= self.value);
        if reached {
            order.semaphore.fail(error);
        } else if state.held.as_ref().is_none_or(|(at, _)| *at > self.value) {
            state.held = Some((self.value, error));
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let context = format!(
            "collective #{} on {} did not reach its engine on this rank, so this rank's later \
             collectives on it cannot match the other ranks' and fail; create a new channel",
            self.value, self.order.name
        );
        let failed = (self.waits.iter()).find_map(|(s, v)| s.failure_before(v));
        let error = match failed {
            Some(cause) => cause.context(context),
            None => Error::new(
                StatusCode::Aborted,
                format!("{context} (its device dropped it before it ran)"),
            ),
        };
        self.fail(error);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn order() -> Arc<Order> {
        Order::new("channel test rank 0 of 2".into())
    }

    /// Each turn waits for the one before, and passing a turn signals its value.
    #[test]
    fn turns_pass_in_order() {
        let order = order();
        let (semaphore, before, mut first) = order.take();
        assert_eq!((before, first.value()), (0, 1));
        let (_, before, mut second) = order.take();
        assert_eq!(before, 1);
        first.pass();
        assert_eq!(semaphore.query().unwrap(), 1);
        second.pass();
        second.pass(); // once only
        assert_eq!(semaphore.query().unwrap(), 2);
    }

    /// A turn that fails while the turn before it is still waiting holds its failure until
    /// that one passes: the earlier collective is not failed with it.
    #[test]
    fn a_failure_waits_for_the_turn_before() {
        let order = order();
        let (semaphore, _, mut first) = order.take();
        let (_, _, mut second) = order.take();
        let (_, _, third) = order.take();
        second.fail(Error::new(StatusCode::DataLoss, "the input was lost"));
        assert_eq!(semaphore.query().unwrap(), 0, "held");
        first.pass();
        let error = semaphore.query().unwrap_err();
        assert_eq!(error.code(), StatusCode::DataLoss);
        assert!(
            semaphore.failure_before(1).is_none(),
            "the first turn passed"
        );
        drop(third); // fails nothing more: the channel is already out of step
        assert_eq!(semaphore.query().unwrap_err().code(), StatusCode::DataLoss);
    }

    /// A turn dropped unpassed fails the channel with `Aborted`, naming it, or with the error
    /// of the wait that failed.
    #[test]
    fn a_dropped_turn_names_why() {
        let order = order();
        let (semaphore, _, turn) = order.take();
        drop(turn);
        let error = semaphore.query().unwrap_err();
        assert_eq!(error.code(), StatusCode::Aborted);
        assert!(
            error.to_string().contains("collective #1 on channel test"),
            "{error}"
        );

        let order = self::order();
        let (semaphore, _, mut turn) = order.take();
        let input = Semaphore::new(0);
        input.fail(Error::new(StatusCode::Internal, "the producer failed"));
        turn.waits_on(&Fence::at(&input, 1));
        drop(turn);
        let error = semaphore.query().unwrap_err();
        assert_eq!(error.code(), StatusCode::Internal);
        assert!(error.to_string().contains("the producer failed"), "{error}");
    }
}
