//! Events of the host stream API: a record counter, a completion counter and a condition
//! variable. Waiting on one blocks the thread; nothing ever spins.
//!
//! Each [`StreamApi::record_event`](crate::stream::StreamApi::record_event) call takes the next
//! *generation*; the stream completes that generation when it reaches the record, with the
//! stream's pending error if the work before it failed. Queries and synchronisations look at
//! the generation recorded when they are called, and a stream wait captures it when enqueued,
//! so re-recording an event never changes what an earlier wait waits for (CUDA semantics).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use crate::error::Error;
use crate::stream::host::control::Control;

#[derive(Default)]
struct State {
    recorded: u64,
    completed: u64,
    /// The error of the most recently completed record, if its work failed.
    status: Option<Error>,
}

/// How a wait on an event ended.
pub(crate) enum Waited {
    /// The record completed, with the error of its work if it failed.
    Done(Option<Error>),
    /// The device faulted or the API is shutting down: the record may never complete.
    Abandoned,
}

/// One event (see the [module docs](self)). Whatever its [`EventFlags`], it never records
/// timing and a synchronisation always sleeps in the OS (the `BLOCKING_SYNC` behaviour).
///
/// [`EventFlags`]: crate::stream::EventFlags
#[derive(Default)]
pub(crate) struct HostEvent {
    state: Mutex<State>,
    changed: Condvar,
}

impl HostEvent {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A record is being enqueued: its generation.
    pub(crate) fn next_record(&self) -> u64 {
        let mut state = self.lock();
        state.recorded += 1;
        state.recorded
    }

    /// The generation of the most recent record (0: never recorded).
    pub(crate) fn current(&self) -> u64 {
        self.lock().recorded
    }

    /// A stream reached record `generation`; `error` is its work's failure.
    pub(crate) fn complete(&self, generation: u64, error: Option<Error>) {
        let mut state = self.lock();
        if generation > state.completed {
            state.completed = generation;
            state.status = error;
        }
        drop(state);
        self.changed.notify_all();
    }

    /// `Ok(true)` if the most recent record completed, `Err` if its work failed.
    pub(crate) fn query(&self) -> Result<bool, Error> {
        let state = self.lock();
        if state.completed < state.recorded {
            return Ok(false);
        }
        match &state.status {
            Some(error) => Err(error.clone()),
            None => Ok(true),
        }
    }

    /// Blocks until record `generation` completed, or the device faulted, or `closing` is set.
    pub(crate) fn wait_for(
        &self,
        generation: u64,
        control: &Control,
        closing: &AtomicBool,
    ) -> Waited {
        let mut state = self.lock();
        loop {
            if state.completed >= generation {
                return Waited::Done(state.status.clone());
            }
            if control.is_faulted() || closing.load(Ordering::Acquire) {
                return Waited::Abandoned;
            }
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Wakes every waiter so it re-checks the fault and shutdown flags (set before this call).
    pub(crate) fn wake_all(&self) {
        drop(self.lock());
        self.changed.notify_all();
    }
}
