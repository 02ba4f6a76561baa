//! The timeline behind a stream device's semaphore: which device signals are scheduled, as
//! `(value, event)` timepoints, so that device-to-device waits become stream-waits-event.
//!
//! A GPU event is binary and must be recorded before it is waited on; a halcyon semaphore is a
//! `u64` timeline that may be waited on before anything signals it. IREE's HIP driver bridges
//! the two (see the HIP HAL driver notes in the design references), and so does this:
//!
//! * **Signal timepoints.** When a submission that signals `(semaphore, v)` is issued to a
//!   stream, the event recorded after its work is added here as the timepoint `(v, event)`
//!   ([`EventTimeline::schedule`]): once that event completes, the semaphore is at `v` or above.
//! * **Device waits.** A submission that waits for `v` asks [`EventTimeline::wait_source`]: if `v` was
//!   reached there is nothing to wait for; if some timepoint `w >= v` is scheduled, its stream
//!   waits on that event (the smallest such `w`, so it waits no longer than needed): no host
//!   round trip. The submission takes a reference to the event, so the event cannot be recycled
//!   and re-recorded while it enqueues the wait.
//! * **Not yet scheduled.** Otherwise the submission is parked in the pending-action executor
//!   on [`EventTimeline::scheduled`], a host semaphore that tracks the highest value that is
//!   scheduled or reached. [`EventTimeline::schedule`] inserts the timepoint *before* it advances
//!   that semaphore, so the parked submission, released by the advance, always finds the
//!   timepoint (or, if it completed meanwhile, the value reached).
//! * **Retiring.** When the device reaches `v` ([`EventTimeline::retire`]) or the host signals it
//!   ([`EventTimeline::host_signal`]), timepoints at or below `v` are dropped; their events return to
//!   the pool once their other holders are done.
//! * **Failure.** [`EventTimeline::fail`] drops every timepoint, refuses new ones and fails the
//!   scheduled semaphore with the same error, so parked submissions are released and fail.
//! * **Outcomes.** A device wait trusts the event, which completes whether or not the work
//!   behind it succeeded on the host's terms (the work's own inputs may have failed while it ran,
//!   or its status words may report a failure after it). So a timepoint may carry the *outcome*
//!   of the submission that scheduled it ([`EventTimeline::schedule_by`]): a host semaphore that
//!   reaches 1 once that submission settled successfully and fails with its error otherwise. A
//!   submission that waited on the event takes the outcome too
//!   ([`EventTimeline::wait_source_by`]) and settles only after it: successfully if it succeeded,
//!   failed with its error if not. Outcomes only ever wait for submissions scheduled before, so
//!   they never wait in a cycle.
//!
//! Lock order: the core semaphore's lock (held while [`NativeSemaphore::signal`] runs), then this
//! timeline's, then the scheduled semaphore's; the timeline's lock is never held while the
//! scheduled semaphore wakes its waiters.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;

use crate::event_pool::Event;
use crate::sync::{lock, Mutex};
use halcyon::backend::{NativeSemaphore, SemaphoreExt};
use halcyon::Semaphore;
use halcyon::{Error, Result};

/// How a device can wait for a value of a timeline.
#[derive(Debug)]
pub enum WaitSource {
    /// The value was reached: nothing to wait for.
    Reached,
    /// Wait for this event: a signal at or above the value completes with it.
    Event(Event),
    /// No signal at or above the value is scheduled yet (or the timeline failed).
    Unscheduled,
}

struct State {
    /// The highest value reached by a host signal or a completed device signal.
    reached: u64,
    /// Scheduled device signals above `reached`: value → event of the work that signals it,
    /// and that work's outcome if it has one.
    timepoints: BTreeMap<u64, (Event, Option<Semaphore>)>,
    failed: bool,
}

/// The `(value, event)` timepoints of one semaphore (see the [module docs](self)).
pub struct EventTimeline {
    owner: u64,
    state: Mutex<State>,
    scheduled: Semaphore,
}

impl EventTimeline {
    /// A timeline of a semaphore created by device `owner` at `initial`.
    pub fn new(owner: u64, initial: u64) -> EventTimeline {
        EventTimeline {
            owner,
            state: Mutex::new(State {
                reached: initial,
                timepoints: BTreeMap::new(),
                failed: false,
            }),
            scheduled: Semaphore::new(initial),
        }
    }

    /// The id of the device whose streams the events belong to.
    pub fn owner(&self) -> u64 {
        self.owner
    }

    /// A host semaphore at the highest value that is scheduled on a stream or reached; it fails
    /// with the timeline. Pending actions whose device waits are not yet scheduled wait on it.
    pub fn scheduled(&self) -> &Semaphore {
        &self.scheduled
    }

    /// Work that signals `value` was issued and `event` was recorded after it: adds the
    /// timepoint, then releases whoever waits for `value` to be scheduled. Ignored if `value` is
    /// already reached or the timeline failed.
    pub fn schedule(&self, value: u64, event: &Event) {
        self.schedule_by(value, event, None);
    }

    /// [`EventTimeline::schedule`], with the `outcome` of the work that signals `value` (see the
    /// [module docs](self)): a host semaphore that work sets to 1 once it settled successfully,
    /// or fails with its error, in any case eventually.
    pub fn schedule_by(&self, value: u64, event: &Event, outcome: Option<&Semaphore>) {
        {
            let mut state = lock(&self.state);
            if state.failed || value <= state.reached {
                return;
            }
            state
                .timepoints
                .entry(value)
                .or_insert_with(|| (event.clone(), outcome.cloned()));
        }
        self.scheduled.advance(value);
    }

    /// How a stream can wait for `value`: reached, an event, or not yet scheduled.
    pub fn wait_source(&self, value: u64) -> WaitSource {
        self.wait_source_by(value).0
    }

    /// [`EventTimeline::wait_source`], with the outcome of the work behind the event, if it was
    /// scheduled with one (see the [module docs](self)).
    pub fn wait_source_by(&self, value: u64) -> (WaitSource, Option<Semaphore>) {
        let state = lock(&self.state);
        if state.failed {
            return (WaitSource::Unscheduled, None);
        }
        if state.reached >= value {
            return (WaitSource::Reached, None);
        }
        match state.timepoints.range(value..).next() {
            Some((_, (event, outcome))) => (WaitSource::Event(event.clone()), outcome.clone()),
            None => (WaitSource::Unscheduled, None),
        }
    }

    /// The device reached `value`: forgets the timepoints at or below it (their events return
    /// to the pool once nobody else holds them).
    pub fn retire(&self, value: u64) {
        let retired = {
            let mut state = lock(&self.state);
            if value <= state.reached {
                return;
            }
            state.reached = value;
            let above = state.timepoints.split_off(&(value.saturating_add(1)));
            std::mem::replace(&mut state.timepoints, above)
        };
        drop(retired);
        self.scheduled.advance(value);
    }

    /// The host signalled `value` (the core semaphore stores it right after): reached, so
    /// device waits for it need no event, and parked waits for it are released.
    pub fn host_signal(&self, value: u64) {
        self.retire(value)
    }

    /// The semaphore failed: drops every timepoint, refuses new ones, and fails the scheduled
    /// semaphore with `error` so parked waits are released with it.
    pub fn fail(&self, error: &Error) {
        let dropped = {
            let mut state = lock(&self.state);
            state.failed = true;
            std::mem::take(&mut state.timepoints)
        };
        drop(dropped);
        self.scheduled.fail(error.clone());
    }

    /// How many timepoints are scheduled and not yet retired.
    pub fn timepoint_count(&self) -> usize {
        lock(&self.state).timepoints.len()
    }
}

impl fmt::Debug for EventTimeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("EventTimeline")
            .field("owner", &self.owner)
            .field("reached", &state.reached)
            .field("timepoints", &state.timepoints.keys().collect::<Vec<_>>())
            .field("failed", &state.failed)
            .finish()
    }
}

/// The [`NativeSemaphore`] of a stream device: an [`EventTimeline`]. The core semaphore keeps the
/// payload and the waiters; the timeline knows which device signals are scheduled.
pub struct StreamSemaphore {
    timeline: EventTimeline,
}

impl StreamSemaphore {
    /// A core semaphore backed by a new timeline of device `owner`.
    pub fn create(owner: u64, initial_value: u64) -> Semaphore {
        let initial = initial_value.min(Semaphore::MAX_VALUE);
        Semaphore::with_native(
            initial,
            Box::new(StreamSemaphore {
                timeline: EventTimeline::new(owner, initial),
            }),
        )
    }

    /// The timeline behind `semaphore`, if a stream device created it.
    pub fn timeline_of(semaphore: &Semaphore) -> Option<&EventTimeline> {
        SemaphoreExt::native(semaphore)?
            .as_any()
            .downcast_ref::<StreamSemaphore>()
            .map(|s| &s.timeline)
    }
}

impl NativeSemaphore for StreamSemaphore {
    fn signal(&self, value: u64) -> Result<()> {
        self.timeline.host_signal(value);
        Ok(())
    }

    fn fail(&self, error: &Error) {
        self.timeline.fail(error);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
