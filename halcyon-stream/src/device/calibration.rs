//! The device's clock on the host's: a reference timing event whose host time is known, so
//! that the device time of any timing event is the reference's host time plus the elapsed time
//! from the reference to it (as tinygrad places CUDA events on its host timeline).
//!
//! CUDA and HIP tell only the time between two completed timing events
//! ([`StreamApi::event_elapsed_ms`]), never an event's time on a clock the host can read. So a
//! **calibration** records a timing event on the device's *calibration stream*, a stream of its
//! own that holds nothing else (so the record completes as soon as the device reaches it, not
//! behind queued work), reads the profile clock just before the record (`before`) and polls the
//! event until it completed, reading the clock again right after (`after`). The device
//! timestamped the event between the two, so `after` is the reference's device time, late by
//! at most `after - before`: the **calibration error**. Each calibration makes
//! [`Calibrator::TRIALS`] such round trips and keeps the shortest (the usual minimum-round-trip
//! filter of clock synchronisation), and answers it as `stream.timestamp_calibration_error_ns`
//! ([`crate::keys::TIMESTAMP_CALIBRATION_ERROR_NS`]). Polling (not a blocking synchronisation,
//! whose wake-up would add tens of microseconds to the round trip) costs one core for the round
//! trip, on the thread that calibrates.
//!
//! **When.** Once when the device is created (on the creating thread: not a hot path, and
//! profiled operations find a reference at once), and again whenever a profiled operation is
//! issued while the reference is older than [`StreamDeviceOptions::timestamp_recalibration`]
//! (default 1 s). A recalibration runs on the device's *clock thread*, which does nothing
//! else: the issuing thread only pushes a request (an atomic swap, and a push when none is
//! pending), so no executor thread, completion thread or reactor ever waits for the device here.
//! Operations settled before the new reference lands use the one before.
//!
//! **Why recalibrate rather than chain from recent events.** The elapsed time is an `f32` of
//! milliseconds, whose rounding grows with the distance from the reference (about 30 ns at 1 s,
//! 4 µs at 100 s, 0.1 ms after an hour), and the device's timer drifts against the host's by
//! some parts per million. Chaining (each operation's time from the last one's) would keep
//! the distances short too, but it never corrects the drift and it accumulates each link's
//! rounding; a fresh reference every second bounds both, for one round trip a second on a
//! thread that blocks anyway. A reference older than four recalibration intervals (at least
//! 4 s, where the rounding is still below the timer's 0.5 µs) is not used at all
//! ([`Calibrator::usable`]): its operations keep host times only.
//!
//! [`StreamApi::event_elapsed_ms`]: crate::StreamApi::event_elapsed_ms
//! [`StreamDeviceOptions::timestamp_recalibration`]: crate::StreamDeviceOptions::timestamp_recalibration

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::{StreamApi, StreamHandle};
use crate::device::core::lock;
use crate::event_pool::{Event, EventPool};
use crate::handoff::Handoff;
use halcyon::profile::now_ns;
use halcyon::{Error, Result, StatusCode};

/// A reference: a completed timing event and its time on the profile clock.
pub(crate) struct Calibration {
    /// The timing event, recorded on the calibration stream and seen complete; held (never
    /// re-recorded) while this calibration is in use.
    pub(crate) reference: Event,
    /// The profile clock right after the event was seen complete: its device time, late by
    /// at most `error_ns`.
    pub(crate) host_ns: u64,
    /// The round trip from just before the record to just after it was seen complete.
    pub(crate) error_ns: u64,
}

/// The device's current reference and the requests for a new one (see the [module docs](self)).
pub(crate) struct Calibrator {
    current: Mutex<Option<Arc<Calibration>>>,
    /// `host_ns` of the current reference (0: none), read without the lock at issue.
    calibrated_at: AtomicU64,
    /// A request is queued or being served.
    pending: AtomicBool,
    requests: Handoff<()>,
    /// How old the reference may get before a profiled operation asks for a new one.
    interval_ns: u64,
    /// Calibrations made.
    calibrations: AtomicU64,
}

impl Calibrator {
    /// Round trips per calibration; the shortest is kept.
    pub(crate) const TRIALS: usize = 3;
    /// How long a calibration waits for its record before it gives up.
    const TIMEOUT: Duration = Duration::from_secs(1);
    /// How long it polls before it yields the CPU between polls.
    const SPIN: Duration = Duration::from_micros(50);

    /// A calibrator with no reference yet, asking for a new one when the reference is older
    /// than `interval`.
    pub(crate) fn new(interval: Duration) -> Self {
        Calibrator {
            current: Mutex::new(None),
            calibrated_at: AtomicU64::new(0),
            pending: AtomicBool::new(false),
            requests: Handoff::new(Duration::ZERO),
            interval_ns: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
            calibrations: AtomicU64::new(0),
        }
    }

    /// The current reference, if it may be used for an operation issued at `issued_ns`: made
    /// at most four intervals (and at least 4 s) away from it.
    pub(crate) fn usable(&self, issued_ns: u64) -> Option<Arc<Calibration>> {
        let current = lock(&self.current).clone()?;
        let limit = self
            .interval_ns
            .saturating_mul(4)
            .max(Duration::from_secs(4).as_nanos() as u64);
        (current.host_ns.abs_diff(issued_ns) <= limit).then_some(current)
    }

    /// The current reference's calibration error, if there is one.
    pub(crate) fn error_ns(&self) -> Option<u64> {
        lock(&self.current).as_ref().map(|c| c.error_ns)
    }

    /// Calibrations made so far.
    pub(crate) fn calibrations(&self) -> u64 {
        self.calibrations.load(Ordering::Relaxed)
    }

    /// A profiled operation is issued at `now_ns`: asks the clock thread for a new reference
    /// if the current one is older than the interval and none is asked for yet. Never blocks.
    pub(crate) fn refresh_if_stale(&self, now_ns: u64) {
        let at = self.calibrated_at.load(Ordering::Relaxed);
        if (at == 0 || now_ns.saturating_sub(at) >= self.interval_ns)
            && !self.pending.swap(true, Ordering::AcqRel)
        {
            self.requests.push(());
        }
    }

    /// Makes a calibration on this thread and makes it the current reference.
    pub(crate) fn calibrate<A: StreamApi>(
        &self,
        api: &A,
        events: &EventPool,
        stream: StreamHandle,
    ) -> Result<()> {
        let calibration = measure(api, events, stream)?;
        self.calibrated_at
            .store(calibration.host_ns, Ordering::Relaxed);
        *lock(&self.current) = Some(Arc::new(calibration));
        self.calibrations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The clock thread's loop: serves requests until [`Calibrator::stop`]. A failed
    /// calibration leaves the reference as it was; the next stale operation asks again.
    pub(crate) fn run<A: StreamApi>(&self, api: &A, events: &EventPool, stream: StreamHandle) {
        while let Some(()) = self.requests.next() {
            let _ = self.calibrate(api, events, stream);
            self.pending.store(false, Ordering::Release);
        }
    }

    /// Ends the clock thread's loop once it served the requests already made.
    pub(crate) fn stop(&self) {
        self.requests.stop();
    }
}

/// [`Calibrator::TRIALS`] round trips on `stream`; the shortest.
fn measure<A: StreamApi>(api: &A, events: &EventPool, stream: StreamHandle) -> Result<Calibration> {
    let mut best: Option<Calibration> = None;
    for _ in 0..Calibrator::TRIALS {
        // The best trial's event is held, so this one is another.
        let event = events.acquire()?;
        let before = now_ns();
        api.record_event(event.handle(), stream)?;
        poll(api, &event)?;
        let after = now_ns();
        let trial = Calibration {
            reference: event,
            host_ns: after,
            error_ns: after - before,
        };
        if best.as_ref().is_none_or(|b| trial.error_ns < b.error_ns) {
            best = Some(trial);
        }
    }
    best.ok_or_else(|| Error::new(StatusCode::Internal, "a calibration made no round trip"))
}

/// Polls `event` until it completed: spinning for [`Calibrator::SPIN`], then yielding between
/// polls; `DeadlineExceeded` after [`Calibrator::TIMEOUT`].
fn poll<A: StreamApi>(api: &A, event: &Event) -> Result<()> {
    let start = Instant::now();
    while !api.query_event(event.handle())? {
        let waited = start.elapsed();
        if waited >= Calibrator::TIMEOUT {
            return Err(Error::new(
                StatusCode::DeadlineExceeded,
                format!(
                    "the calibration stream did not reach a timing event's record within \
                     {waited:?}; the device seems stuck"
                ),
            ));
        }
        if waited < Calibrator::SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    Ok(())
}
