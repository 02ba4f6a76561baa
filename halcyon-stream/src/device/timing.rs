//! Device times of profiled operations, from timing events around their work on the stream.
//!
//! While the device's profiler is on (the operation's signal fence carries an
//! [`OperationTrace`]), [`Core::issue`](super::core::Core) records a **timing event** on the
//! queue's stream right before the operation's first command (after its stream waits, so it
//! completes when the device can start the work) and another right after its last one (before
//! the completion event, which therefore completes after both). They come from a pool of their
//! own, created without [`EventFlags::DISABLE_TIMING`]; the synchronisation events keep that
//! flag, since a timed record costs more (CUDA recommends the flag for events that only
//! synchronise; this crate has no measurement of the difference on a GPU). An operation
//! submitted while the profiler is off records none: its extra cost is one lookup of its
//! signal fence's first semaphore (`OperationTrace::of`, which the core's issue makes too).
//!
//! **Graphs.** A resubmitted command list replayed as a graph is timed around the graph launch
//! (and around its capture and first launch): the timing events are recorded on the stream
//! outside the capture, never in it, where CUDA would make them graph nodes and the host stream
//! refuses them. So the device time of a graph-launched submission includes the launch's own
//! overhead on the device.
//!
//! **On completion** ([`Timing::settle`], called by `Core::complete` where the completion
//! event's success is known, so both timing events completed, and before the signal fence is
//! settled): the two events' device times are placed on the profile clock through the device's
//! current reference ([`super::calibration`]): `host(reference) + elapsed(reference, event)`.
//! Both ends come from the same reference, and the elapsed times are monotonic in the events'
//! timestamps, so operations of one stream placed through one reference never overlap.
//! `elapsed` never blocks, so no completion path waits for the device.
//!
//! **Failures.** The timing events are records like any other: on an API that reports a
//! failure at the stream's next record (the host stream API: the record after a failed kernel,
//! or after a wait on a failed event, completes with that error and clears it), the start
//! event takes a failed wait's error and the end event the work's, which the completion event
//! would have taken. So `Core::complete` takes their status into the operation's outcome
//! ([`TimedSpan::status`]); on CUDA and HIP, whose asynchronous errors are sticky, every record
//! reports the same error anyway. (A difference remains on the host stream: after a failed wait
//! the work itself runs instead of being skipped, since the start event cleared the error; its
//! outcome is still the failure.) An operation whose completion event fails gets no device
//! times ([`Timing::abandon`]); one that ran and failed (a kernel's error) keeps them.
//!
//! **Error and corrections.** A placed time is late by at most the reference's calibration
//! error ([`crate::keys::TIMESTAMP_CALIBRATION_ERROR_NS`]), plus the timer's resolution (about
//! 0.5 µs on CUDA, per event) and the `f32`'s rounding (below 0.15 µs within the 4 s a
//! reference serves). The host's own observations bound the truth: the device cannot start the
//! work before the host recorded the start event (`issued_ns`), nor start it before the
//! previous operation on the same stream ended, nor end it after the host saw it complete (now,
//! at settling). So each placed time is clamped into those bounds, which only ever moves it
//! closer to the truth, and keeps every record's stages in order (device end ≤ completed)
//! without a tolerance. How often that happens and by how much is counted
//! ([`crate::keys::DEVICE_TIME_CORRECTIONS`], [`crate::keys::DEVICE_TIME_CORRECTION_MAX_NS`]):
//! a correction larger than the stated error would mean the calibration is wrong.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::api::{StreamApi, StreamHandle};
use crate::device::calibration::Calibrator;
use crate::device::core::lock;
use crate::event_pool::{Event, EventPool};
use halcyon::backend::OperationTrace;
use halcyon::profile::now_ns;
use halcyon::Result;

#[cfg(doc)]
use crate::api::EventFlags;

/// The timing events of one profiled operation in flight (held by its timepoint).
pub(crate) struct TimedSpan {
    trace: OperationTrace,
    start: Event,
    /// `None` until the end event is recorded.
    end: Option<Event>,
    /// The profile clock right before the start event was recorded.
    issued_ns: u64,
    /// Its place in its queue's stream order (from 1).
    seq: u64,
}

impl TimedSpan {
    /// The error its timing events report, if any. Both completed (the completion event, after
    /// them on the stream, did); on an API that reports a stream's error at the next record (the
    /// host stream API), the start event holds a failed stream wait's error and the end event
    /// the work's, which the completion event then lacks. Never blocks.
    pub(crate) fn status<A: StreamApi>(&self, api: &A) -> Result<()> {
        for event in std::iter::once(&self.start).chain(&self.end) {
            api.query_event(event.handle())?;
        }
        Ok(())
    }
}

/// The last operation of a queue given device times: its stream position and its device end.
#[derive(Default)]
struct Mark {
    seq: u64,
    end: u64,
}

/// Counters behind the timing keys.
#[derive(Default)]
pub(crate) struct TimingStats {
    pub(crate) timing_events: AtomicU64,
    pub(crate) device_times: AtomicU64,
    pub(crate) skipped: AtomicU64,
    pub(crate) corrections: AtomicU64,
    pub(crate) correction_max_ns: AtomicU64,
}

/// A device's timing: its timing-event pool, its calibration stream and reference, and the
/// per-queue order marks (see the [module docs](self)).
pub(crate) struct Timing {
    /// Events created without `DISABLE_TIMING`; never used for synchronisation.
    pub(crate) events: EventPool,
    /// The calibration stream (see [`super::calibration`]); destroyed by the core.
    pub(crate) stream: StreamHandle,
    pub(crate) calibrator: Calibrator,
    /// Per queue: the next operation's stream position.
    next_seq: Vec<AtomicU64>,
    /// Per queue: the last operation placed.
    marks: Vec<Mutex<Mark>>,
    pub(crate) stats: TimingStats,
}

/// Where an operation's device range lands: its ends on the profile clock, and the largest
/// correction the host's bounds made to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Placed {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) correction: u64,
}

/// Clamps the measured range `(start, end)` (nanoseconds on the profile clock, unrounded) into
/// what the host observed: the start not before `earliest`, the end not after `latest`, the
/// start not after the end.
pub(crate) fn place(measured: (f64, f64), earliest: u64, latest: u64) -> Placed {
    let latest = latest.max(earliest);
    let round = |ns: f64| -> u64 {
        // `as` saturates: negative and NaN become 0, huge values u64::MAX.
        ns.round() as u64
    };
    let (raw_start, raw_end) = (round(measured.0), round(measured.1));
    let start = raw_start.clamp(earliest, latest);
    let end = raw_end.clamp(start, latest);
    Placed {
        start,
        end,
        correction: start.abs_diff(raw_start).max(end.abs_diff(raw_end)),
    }
}

impl Timing {
    /// The timing of a device with `queues` queues, whose timing events come from `events`,
    /// calibrated on `stream` and recalibrated per `calibrator`.
    pub(crate) fn new(
        queues: usize,
        events: EventPool,
        stream: StreamHandle,
        calibrator: Calibrator,
    ) -> Self {
        Timing {
            events,
            stream,
            calibrator,
            next_seq: (0..queues).map(|_| AtomicU64::new(1)).collect(),
            marks: (0..queues).map(|_| Mutex::default()).collect(),
            stats: TimingStats::default(),
        }
    }

    /// Records the start event of `trace`'s operation on queue `queue`'s `stream`, before its
    /// first command (the caller holds the queue's issue lock). `None` if the record failed:
    /// the operation keeps host times only.
    pub(crate) fn begin<A: StreamApi>(
        &self,
        api: &A,
        queue: usize,
        stream: StreamHandle,
        trace: OperationTrace,
    ) -> Option<TimedSpan> {
        let issued_ns = now_ns();
        self.calibrator.refresh_if_stale(issued_ns);
        let Some(start) = self.record(api, stream) else {
            self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        Some(TimedSpan {
            trace,
            start,
            end: None,
            issued_ns,
            seq: self.next_seq[queue].fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Records the end event of `span` after the operation's last command (and before its
    /// completion event); drops the span if that fails.
    pub(crate) fn end<A: StreamApi>(
        &self,
        api: &A,
        stream: StreamHandle,
        span: &mut Option<TimedSpan>,
    ) {
        let Some(timed) = span else {
            return;
        };
        match self.record(api, stream) {
            Some(end) => timed.end = Some(end),
            None => {
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                *span = None;
            }
        }
    }

    fn record<A: StreamApi>(&self, api: &A, stream: StreamHandle) -> Option<Event> {
        let event = self.events.acquire().ok()?;
        api.record_event(event.handle(), stream).ok()?;
        self.stats.timing_events.fetch_add(1, Ordering::Relaxed);
        Some(event)
    }

    /// The operation of `span`, on queue `queue`, completed on the device (its completion
    /// event did, so its timing events did too): places its device range on the profile clock
    /// and records it in its trace. Call before its signal fence is settled. Never blocks.
    pub(crate) fn settle<A: StreamApi>(&self, api: &A, queue: usize, span: TimedSpan) {
        let Some(measured) = self.measure(api, &span) else {
            self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut mark = lock(&self.marks[queue]);
        // An earlier operation on the stream ended before this one's start event completed.
        let earliest = match mark.seq < span.seq {
            true => span.issued_ns.max(mark.end),
            false => span.issued_ns,
        };
        let placed = place(measured, earliest, now_ns());
        if span.seq > mark.seq {
            *mark = Mark {
                seq: span.seq,
                end: placed.end,
            };
        }
        drop(mark);
        span.trace.device_started(placed.start);
        span.trace.device_ended(placed.end);
        let stats = &self.stats;
        stats.device_times.fetch_add(1, Ordering::Relaxed);
        if placed.correction > 0 {
            stats.corrections.fetch_add(1, Ordering::Relaxed);
            stats
                .correction_max_ns
                .fetch_max(placed.correction, Ordering::Relaxed);
        }
    }

    /// The operation of `span` did not complete on the device (its completion event failed, or
    /// its device went away first): it keeps host times only.
    pub(crate) fn abandon(&self, span: TimedSpan) {
        drop(span);
        self.stats.skipped.fetch_add(1, Ordering::Relaxed);
    }

    /// The device times of `span`'s events through the current reference, in nanoseconds on
    /// the profile clock; `None` without a usable reference or if the API cannot tell.
    fn measure<A: StreamApi>(&self, api: &A, span: &TimedSpan) -> Option<(f64, f64)> {
        let end = span.end.as_ref()?;
        let reference = self.calibrator.usable(span.issued_ns)?;
        let from = reference.reference.handle();
        let start_ms = api.event_elapsed_ms(from, span.start.handle()).ok()?;
        let end_ms = api.event_elapsed_ms(from, end.handle()).ok()?;
        let at = |ms: f32| reference.host_ns as f64 + f64::from(ms) * 1e6;
        Some((at(start_ms), at(end_ms)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_inside_the_bounds_is_only_rounded() {
        let placed = place((1_000.4, 2_000.6), 900, 3_000);
        assert_eq!(
            placed,
            Placed {
                start: 1_000,
                end: 2_001,
                correction: 0
            }
        );
    }

    #[test]
    fn a_late_range_is_pulled_back_to_the_completion() {
        // Measured late by 700 ns (a calibration error): the end is after the host saw the
        // work complete, at 2 500.
        let placed = place((2_100.0, 3_200.0), 1_000, 2_500);
        assert_eq!(
            placed,
            Placed {
                start: 2_100,
                end: 2_500,
                correction: 700
            }
        );
        // Entirely late: both ends at the completion.
        let placed = place((4_000.0, 5_000.0), 1_000, 2_500);
        assert_eq!(
            (placed.start, placed.end, placed.correction),
            (2_500, 2_500, 2_500)
        );
    }

    #[test]
    fn an_early_start_is_pushed_to_the_issue() {
        let placed = place((900.0, 1_800.0), 1_000, 2_500);
        assert_eq!(
            (placed.start, placed.end, placed.correction),
            (1_000, 1_800, 100)
        );
    }

    #[test]
    fn nonsense_measurements_stay_inside_the_bounds() {
        for measured in [
            (f64::NAN, f64::NAN),
            (-1e30, 1e30),
            (f64::INFINITY, f64::NEG_INFINITY),
            (5_000.0, 100.0),
        ] {
            let placed = place(measured, 1_000, 2_500);
            assert!(
                1_000 <= placed.start && placed.start <= placed.end && placed.end <= 2_500,
                "{measured:?} → {placed:?}"
            );
        }
        // Bounds the wrong way round (cannot happen: the issue precedes the settle) still
        // give an ordered range.
        let placed = place((10.0, 20.0), 2_000, 1_000);
        assert_eq!((placed.start, placed.end), (2_000, 2_000));
    }

    /// Why a reference serves at most a few seconds: the `f32` of milliseconds between it and
    /// an event rounds to half a unit in the last place, which grows with the distance.
    #[test]
    fn f32_milliseconds_lose_resolution_far_from_the_reference() {
        let rounding_ns = |seconds: f64| {
            let ms = (seconds * 1e3) as f32;
            // Half the gap to the next f32, in nanoseconds.
            f64::from(f32::from_bits(ms.to_bits() + 1) - ms) * 1e6 / 2.0
        };
        assert!(rounding_ns(1.0) < 31.0, "{}", rounding_ns(1.0));
        assert!(rounding_ns(4.0) < 123.0, "{}", rounding_ns(4.0));
        assert!(rounding_ns(100.0) > 3_900.0, "{}", rounding_ns(100.0));
    }
}
