//! Events of the host stream API: a record counter, a completion counter and a condition
//! variable. Waiting on one blocks the thread; nothing ever spins.
//!
//! Each [`StreamApi::record_event`](halcyon_stream::StreamApi::record_event) call takes the next
//! *generation*; the stream completes that generation when it reaches the record, with the
//! stream's pending error if the work before it failed. Queries look at the generation recorded
//! when they are called, and a stream wait (or a synchronisation) captures it as a [`Ticket`]
//! when enqueued, so re-recording an event never changes what an earlier wait waits for (CUDA
//! semantics): the wait ends when *its* generation completes and gets *that* generation's
//! outcome, even if the event was re-recorded (say, after the stream layer returned it to its
//! pool) and a later record completed first, failed or not.
//!
//! An event created without [`EventFlags::DISABLE_TIMING`] also keeps the [`Instant`] at which
//! the stream completed its newest record: [`elapsed_ms`] answers the time between two of them,
//! as `cuEventElapsedTime` does, refusing the same events CUDA refuses.
//!
//! [`EventFlags::DISABLE_TIMING`]: halcyon_stream::EventFlags::DISABLE_TIMING

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::control::Control;
use halcyon::{Error, Result, StatusCode};

#[derive(Default)]
struct State {
    recorded: u64,
    /// The highest generation completed.
    completed: u64,
    /// The error of record `completed`, if its work failed.
    status: Option<Error>,
    /// When the stream completed record `completed` (timing events only).
    completed_at: Option<Instant>,
    /// Generations that live [`Ticket`]s wait for: how many, and the outcome once completed.
    awaited: BTreeMap<u64, Awaited>,
}

#[derive(Default)]
struct Awaited {
    tickets: usize,
    /// `Some(error_or_none)` once the generation's record completed.
    outcome: Option<Option<Error>>,
}

/// A wait for one generation of an event, taken when the wait is enqueued; holds that
/// generation's outcome until the wait runs (or the ticket is dropped unrun).
pub(crate) struct Ticket {
    event: Arc<HostEvent>,
    /// 0: the event was never recorded, so there is nothing to wait for.
    generation: u64,
}

/// How a wait on an event ended.
pub(crate) enum Waited {
    /// The record completed, with the error of its work if it failed.
    Done(Option<Error>),
    /// The device faulted or the API is shutting down: the record may never complete.
    Abandoned,
}

/// One event (see the [module docs](self)). Whatever its [`EventFlags`], a synchronisation
/// always sleeps in the OS (the `BLOCKING_SYNC` behaviour).
///
/// [`EventFlags`]: halcyon_stream::EventFlags
#[derive(Default)]
pub(crate) struct HostEvent {
    state: Mutex<State>,
    changed: Condvar,
    /// Created without `DISABLE_TIMING`: its records keep their completion time.
    pub(crate) timing: bool,
}

impl HostEvent {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new event, never recorded; `timing`: created without `DISABLE_TIMING`.
    pub(crate) fn new(timing: bool) -> Self {
        HostEvent {
            timing,
            ..HostEvent::default()
        }
    }

    /// A record is being enqueued: its generation.
    pub(crate) fn next_record(&self) -> u64 {
        let mut state = self.lock();
        state.recorded += 1;
        state.recorded
    }

    /// A stream reached record `generation`; `error` is its work's failure.
    pub(crate) fn complete(&self, generation: u64, error: Option<Error>) {
        let now = self.timing.then(Instant::now);
        let mut state = self.lock();
        if let Some(awaited) = state.awaited.get_mut(&generation) {
            awaited.outcome = Some(error.clone());
        }
        if generation > state.completed {
            state.completed = generation;
            state.status = error;
            state.completed_at = now;
        }
        drop(state);
        self.changed.notify_all();
    }

    /// A wait for the most recent record, as it is now: its outcome is kept until the ticket is
    /// used or dropped.
    pub(crate) fn ticket(self: &Arc<Self>) -> Ticket {
        let mut state = self.lock();
        let generation = state.recorded;
        if generation > 0 {
            // The newest record is the highest generation, so it is complete iff `completed`
            // reached it, and then `status` is its outcome.
            let outcome = (state.completed >= generation).then(|| state.status.clone());
            let awaited = state.awaited.entry(generation).or_default();
            awaited.tickets += 1;
            if awaited.outcome.is_none() {
                awaited.outcome = outcome;
            }
        }
        Ticket {
            event: self.clone(),
            generation,
        }
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

    /// When the newest record completed: `InvalidArgument` for an event without timing or
    /// never recorded (CUDA's `CUDA_ERROR_INVALID_HANDLE`), `Unavailable` while the record is
    /// pending (`CUDA_ERROR_NOT_READY`).
    fn completed_at(&self, which: &str) -> Result<Instant> {
        let refused = |why: &str| {
            Error::new(
                StatusCode::InvalidArgument,
                format!("host stream API: event_elapsed_ms: the {which} event {why}"),
            )
        };
        if !self.timing {
            return Err(refused(
                "was created with EventFlags::DISABLE_TIMING (CUDA_ERROR_INVALID_HANDLE)",
            ));
        }
        let state = self.lock();
        if state.recorded == 0 {
            return Err(refused("was never recorded (CUDA_ERROR_INVALID_HANDLE)"));
        }
        match (state.completed >= state.recorded, state.completed_at) {
            (true, Some(at)) => Ok(at),
            _ => Err(Error::new(
                StatusCode::Unavailable,
                format!(
                    "host stream API: event_elapsed_ms: the {which} event's record has not \
                     completed (CUDA_ERROR_NOT_READY)"
                ),
            )),
        }
    }

    /// Wakes every waiter so it re-checks the fault and shutdown flags (set before this call).
    pub(crate) fn wake_all(&self) {
        drop(self.lock());
        self.changed.notify_all();
    }
}

impl Ticket {
    /// Blocks until the ticket's record completed (at once if the event was never recorded), or
    /// the device faulted, or `closing` is set. Dropping the ticket afterwards releases its
    /// registration.
    pub(crate) fn wait(self, control: &Control, closing: &AtomicBool) -> Waited {
        if self.generation == 0 {
            return Waited::Done(None);
        }
        let mut state = self.event.lock();
        loop {
            if let Some(outcome) = state
                .awaited
                .get(&self.generation)
                .and_then(|awaited| awaited.outcome.clone())
            {
                return Waited::Done(outcome);
            }
            if control.is_faulted() || closing.load(Ordering::Acquire) {
                return Waited::Abandoned;
            }
            state = self
                .event
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.generation == 0 {
            return;
        }
        let mut state = self.event.lock();
        if let Some(awaited) = state.awaited.get_mut(&self.generation) {
            awaited.tickets -= 1;
            if awaited.tickets == 0 {
                state.awaited.remove(&self.generation);
            }
        }
    }
}

/// The milliseconds from `start`'s newest record's completion to `end`'s (negative if `end`
/// completed first), as `cuEventElapsedTime` answers them; see [`HostEvent::completed_at`] for
/// the events it refuses.
pub(crate) fn elapsed_ms(start: &HostEvent, end: &HostEvent) -> Result<f32> {
    // One lock at a time: `start` and `end` may be the same event.
    let (from, to) = (start.completed_at("start")?, end.completed_at("end")?);
    let ms = match to.checked_duration_since(from) {
        Some(forward) => forward.as_secs_f64() * 1e3,
        None => -(from.duration_since(to).as_secs_f64() * 1e3),
    };
    Ok(ms as f32)
}
