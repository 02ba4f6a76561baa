//! Events: record generations that streams complete, waited on by streams and the host; and
//! the timestamps of timing events (created without `CU_EVENT_DISABLE_TIMING` /
//! `hipEventDisableTiming`), which [`elapsed_ms`] subtracts for `cuEventElapsedTime` and
//! `hipEventElapsedTime`.

use std::collections::BTreeSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use cudarc::driver::sys::CUresult;

use crate::model::contract::{check_same_device, lock, sticky, Ret};
use crate::model::driver::{driver, next_handle};
use crate::model::stream::{Stream, FAULT_POLL};

/// An event: the generation of its latest record, which records completed, and whether its
/// latest record was made in a stream capture (a *captured event*, which only orders work
/// inside the capture).
pub(crate) struct Event {
    /// The device it was created on.
    pub device: u32,
    state: Mutex<EventState>,
    completed: Condvar,
    /// HIP's per-event lock, which `hipEventSynchronize` holds for its whole wait (see
    /// [`crate::hip`]); CUDA has none.
    pub hip_lock: Mutex<()>,
    /// The generation the holder of [`Event::hip_lock`] in `hipEventSynchronize` waits for.
    pub hip_synchronizing: AtomicU64,
    /// Created without `CU_EVENT_DISABLE_TIMING` (`hipEventDisableTiming`): its records are
    /// timestamped.
    pub timing: bool,
}

#[derive(Default)]
struct EventState {
    recorded: u64,
    /// Every generation up to this one completed...
    done_through: u64,
    /// ...and these after it (records on several streams complete out of order).
    done: BTreeSet<u64>,
    captured: bool,
    /// The newest record that completed with a timestamp: its generation and its device time
    /// ([`device_time_ns`]). Timing events only.
    stamped: Option<(u64, u64)>,
}

impl EventState {
    fn is_done(&self, generation: u64) -> bool {
        generation <= self.done_through || self.done.contains(&generation)
    }
}

impl Event {
    /// A new event of device `device`, timestamping its records if `timing`.
    pub(crate) fn new(device: u32, timing: bool) -> Arc<Event> {
        Arc::new(Event {
            device,
            state: Mutex::default(),
            completed: Condvar::new(),
            hip_lock: Mutex::new(()),
            hip_synchronizing: AtomicU64::new(0),
            timing,
        })
    }

    /// A new record outside any capture: its generation.
    pub(crate) fn next_generation(&self) -> u64 {
        let mut state = lock(&self.state);
        state.recorded += 1;
        state.captured = false;
        state.recorded
    }

    /// A record inside a capture.
    pub(crate) fn capture(&self) {
        lock(&self.state).captured = true;
    }

    /// The latest record's generation (0: never recorded), and whether it was captured.
    pub(crate) fn latest(&self) -> (u64, bool) {
        let state = lock(&self.state);
        (state.recorded, state.captured)
    }

    pub(crate) fn complete(&self, generation: u64) {
        let stamp = self.timing.then(device_time_ns);
        let mut state = lock(&self.state);
        if let Some(at) = stamp {
            if state.stamped.is_none_or(|(newest, _)| generation > newest) {
                state.stamped = Some((generation, at));
            }
        }
        state.done.insert(generation);
        loop {
            let next = state.done_through + 1;
            if !state.done.remove(&next) {
                break;
            }
            state.done_through = next;
        }
        self.completed.notify_all();
    }

    /// `cuEventQuery`: whether the latest record completed.
    pub(crate) fn query(&self) -> bool {
        let state = lock(&self.state);
        state.is_done(state.recorded)
    }

    /// Whether record `generation` completed.
    pub(crate) fn is_done(&self, generation: u64) -> bool {
        lock(&self.state).is_done(generation)
    }

    /// Blocks until record `generation` completed: the sticky error if the event's device
    /// faults. (`CUDA_ERROR_CONTEXT_IS_DESTROYED` if its context goes meanwhile: the record
    /// was dropped.)
    pub(crate) fn wait(&self, generation: u64) -> Ret {
        let epoch = crate::model::driver::epoch(self.device);
        let mut state = lock(&self.state);
        while !state.is_done(generation) {
            if let Some(code) = sticky(self.device) {
                return Err(code);
            }
            if crate::model::driver::epoch(self.device) != epoch {
                return Err(CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
            }
            state = self
                .completed
                .wait_timeout(state, FAULT_POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }
}

impl Event {
    /// Whether the latest record completed: `CUDA_ERROR_NOT_READY` if not.
    pub(crate) fn status(&self) -> Ret {
        if self.query() {
            Ok(())
        } else {
            Err(CUresult::CUDA_ERROR_NOT_READY)
        }
    }

    /// Checks that the event may be recorded on `stream`: both are of one device.
    pub(crate) fn check_stream(&self, stream: &Stream, call: &str) -> Ret {
        check_same_device(call, ("an event", self.device), ("a stream", stream.device))
    }
}

/// The device's timer resolution, as CUDA documents it for `cuEventElapsedTime` ("around 0.5
/// microseconds"): timestamps are multiples of it.
pub(crate) const TIMER_RESOLUTION_NS: u64 = 500;

/// The device clock: nanoseconds since the fake's first timestamp, on the host's monotonic
/// clock, rounded down to [`TIMER_RESOLUTION_NS`].
fn device_time_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let ns = EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64;
    ns - ns % TIMER_RESOLUTION_NS
}

impl Event {
    /// The timestamp of the latest record, for `cuEventElapsedTime`: `CUDA_ERROR_INVALID_HANDLE`
    /// for an event created with timing disabled or never recorded (as CUDA documents),
    /// `CUDA_ERROR_CAPTURED_EVENT` for one last recorded in a capture (it has no record that
    /// runs), `CUDA_ERROR_NOT_READY` while the latest record is pending.
    fn timestamp(&self) -> Result<u64, CUresult> {
        if !self.timing {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        let state = lock(&self.state);
        if state.captured {
            return Err(CUresult::CUDA_ERROR_CAPTURED_EVENT);
        }
        if state.recorded == 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_HANDLE);
        }
        match state.stamped {
            Some((generation, at)) if generation == state.recorded => Ok(at),
            _ => Err(CUresult::CUDA_ERROR_NOT_READY),
        }
    }
}

/// `cuEventElapsedTime` and `hipEventElapsedTime`: the milliseconds from `start`'s latest record
/// to `end`'s (negative if `end` came first), as an `f32`; both must be timing events of one
/// device whose latest records completed (see [`Event::timestamp`] for the errors). Events of
/// two devices are a violation.
pub(crate) fn elapsed_ms(start: &Event, end: &Event, call: &str) -> Result<f32, CUresult> {
    check_same_device(call, ("an event", start.device), ("an event", end.device))?;
    // One lock at a time: `start` and `end` may be the same event.
    let (from, to) = (start.timestamp()?, end.timestamp()?);
    let ns = to as f64 - from as f64;
    Ok((ns / 1e6) as f32)
}

/// Creates a never-recorded (complete) event of device `device`, timestamping its records if
/// `timing`: its handle.
pub(crate) fn create_event(device: u32, timing: bool) -> Result<u64, CUresult> {
    let h = next_handle();
    let mut driver = driver();
    driver.events.insert(h, Event::new(device, timing));
    driver.adopt(h, device);
    Ok(h)
}

/// The live event `h`: a violation and `CUDA_ERROR_INVALID_HANDLE` otherwise.
pub(crate) fn find_event(h: u64, call: &str) -> Result<Arc<Event>, CUresult> {
    driver().find(|d| &d.events, h, "event", call)
}

/// Destroys event `h`: records in flight still complete; the handle is dead at once.
pub(crate) fn destroy_event(h: u64, call: &str) -> Ret {
    driver()
        .remove(|d| &mut d.events, h, "event", call)
        .map(drop)
}
