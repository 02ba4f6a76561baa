//! Query keys a stream device answers through [`halcyon::Device::query`], besides the standard
//! [`halcyon::device::keys`]: counters of how waits were satisfied, how submissions completed,
//! what the event and timepoint pools did, and how profiled operations got their device times.
//!
//! Each key is typed by its answer (all `u64`: counters, and two durations in nanoseconds);
//! [`names`] holds the names the stream device matches.

use halcyon::device::Key;

/// Waits satisfied by `stream_wait_event` on a scheduled signal's event (no host wait).
pub const NATIVE_WAITS: Key<u64> = Key::new(names::NATIVE_WAITS);
/// Waits the host had to see reached first (host or other devices' semaphores not yet
/// reached at submit, and host calls' waits).
pub const HOST_WAITS: Key<u64> = Key::new(names::HOST_WAITS);
/// Waits on this device's semaphores whose signal was not yet scheduled at submit: the
/// submission was parked until it was.
pub const DEFERRED_WAITS: Key<u64> = Key::new(names::DEFERRED_WAITS);
/// Submissions received.
pub const SUBMISSIONS: Key<u64> = Key::new(names::SUBMISSIONS);
/// Submissions issued to a stream whose fences were settled.
pub const COMPLETED: Key<u64> = Key::new(names::COMPLETED);
/// Of those, how many failed.
pub const FAILED: Key<u64> = Key::new(names::FAILED);
/// Settled by a host-function callback through the reactor.
pub const CALLBACK_COMPLETIONS: Key<u64> = Key::new(names::CALLBACK_COMPLETIONS);
/// Settled by a completion thread.
pub const THREAD_COMPLETIONS: Key<u64> = Key::new(names::THREAD_COMPLETIONS);
/// Settled by the flag-write scanner ([`crate::CompletionStrategy::FlagWrite`]).
pub const FLAG_COMPLETIONS: Key<u64> = Key::new(names::FLAG_COMPLETIONS);
/// Settled (successfully) by the probe because their callback had not come.
pub const PROBE_COMPLETIONS: Key<u64> = Key::new(names::PROBE_COMPLETIONS);
/// Failed by the probe because their event reported an error (a device fault).
pub const PROBE_FAILURES: Key<u64> = Key::new(names::PROBE_FAILURES);
/// Probe runs.
pub const PROBES: Key<u64> = Key::new(names::PROBES);
/// Submissions whose event completed before a submission whose event their stream waited on
/// had settled, so they settled after it (see `halcyon_stream::timeline`). Those that fail
/// that way are counted in [`FAILED`] when they do.
pub const SETTLES_DEFERRED: Key<u64> = Key::new(names::SETTLES_DEFERRED);
/// Submissions in flight now.
pub const IN_FLIGHT: Key<u64> = Key::new(names::IN_FLIGHT);
/// Events the event pool created.
pub const EVENTS_CREATED: Key<u64> = Key::new(names::EVENTS_CREATED);
/// Events handed out by the pool (created or reused).
pub const EVENTS_ACQUIRED: Key<u64> = Key::new(names::EVENTS_ACQUIRED);
/// Events back in the pool now.
pub const EVENTS_FREE: Key<u64> = Key::new(names::EVENTS_FREE);
/// Timepoint records created.
pub const TIMEPOINTS_CREATED: Key<u64> = Key::new(names::TIMEPOINTS_CREATED);
/// Timepoint records handed out (created or reused).
pub const TIMEPOINTS_ACQUIRED: Key<u64> = Key::new(names::TIMEPOINTS_ACQUIRED);
/// Times the reactor woke.
pub const REACTOR_WAKEUPS: Key<u64> = Key::new(names::REACTOR_WAKEUPS);
/// Pending-action polls on the reactor.
pub const REACTOR_POLLS: Key<u64> = Key::new(names::REACTOR_POLLS);
/// Resubmitted command lists captured into a graph.
pub const GRAPH_CAPTURES: Key<u64> = Key::new(names::GRAPH_CAPTURES);
/// Captures of a resubmitted command list that failed (the driver refused or invalidated the
/// capture); each such submission was issued directly instead.
pub const GRAPH_CAPTURE_FAILURES: Key<u64> = Key::new(names::GRAPH_CAPTURE_FAILURES);
/// Kernel launches of cached graphs pointed at a submission's new buffers in place
/// ([`StreamApi::update_graph_kernel`](crate::StreamApi::update_graph_kernel)): a reusable
/// command list submitted with another binding table.
pub const GRAPH_KERNEL_UPDATES: Key<u64> = Key::new(names::GRAPH_KERNEL_UPDATES);
/// Submissions of a recording with a cached graph that were issued on the stream instead:
/// their binding table moved a fill, copy or update (graphs update kernels only), or the API
/// cannot update graphs, or an update failed (the graph was dropped).
pub const GRAPH_BYPASSES: Key<u64> = Key::new(names::GRAPH_BYPASSES);
/// Copies from another device's buffer issued as one native peer copy
/// ([`StreamApi::copy_peer_async`](crate::StreamApi::copy_peer_async)): `Queue::copy_from` between
/// two devices of this driver with peer access, which is not staged through host memory.
pub const PEER_COPIES: Key<u64> = Key::new(names::PEER_COPIES);
/// Submissions issued as one graph launch.
pub const GRAPH_LAUNCHES: Key<u64> = Key::new(names::GRAPH_LAUNCHES);
/// Queue `alloca`s served by stream-ordered allocation on the queue's stream.
pub const QUEUED_ALLOCATIONS: Key<u64> = Key::new(names::QUEUED_ALLOCATIONS);
/// Submissions with dispatches that take a status word (zeroed before, checked on completion;
/// signalled from the host).
pub const STATUS_CHECKS: Key<u64> = Key::new(names::STATUS_CHECKS);
/// Submissions that leased the device's pinned host memory (status words, staged update bytes,
/// read-back bytes), so their copies needed no staging by the API.
pub const PINNED_LEASES: Key<u64> = Key::new(names::PINNED_LEASES);
/// Pinned host buffers idle in the device's pool now (leased ones not counted).
pub const PINNED_IDLE: Key<u64> = Key::new(names::PINNED_IDLE);
/// Pinned host buffers the device allocated so far (steady once its pool covers the
/// submissions in flight).
pub const PINNED_ALLOCATED: Key<u64> = Key::new(names::PINNED_ALLOCATED);
/// Buffer frees and module unloads handed to the device's reclaimer thread because the last
/// reference went while a submission was settled (both may wait for the device; completion
/// paths must not).
pub const DEFERRED_FREES: Key<u64> = Key::new(names::DEFERRED_FREES);
/// Timing events recorded around profiled operations: two per operation, none while the
/// profiler is off, none on an API without [`Capabilities::EVENT_TIMING`]. They come from a
/// pool of their own, created without [`EventFlags::DISABLE_TIMING`]; calibrations' records
/// are not counted here.
///
/// [`Capabilities::EVENT_TIMING`]: crate::Capabilities::EVENT_TIMING
/// [`EventFlags::DISABLE_TIMING`]: crate::EventFlags::DISABLE_TIMING
pub const TIMING_EVENTS: Key<u64> = Key::new(names::TIMING_EVENTS);
/// Timing events the timing pool created (for profiled operations and calibrations; apart
/// from [`EVENTS_CREATED`], the synchronisation events').
pub const TIMING_EVENTS_CREATED: Key<u64> = Key::new(names::TIMING_EVENTS_CREATED);
/// Profiled operations given device times (from their timing events).
pub const DEVICE_TIMES: Key<u64> = Key::new(names::DEVICE_TIMES);
/// Profiled operations left with host times only: a timing event could not be recorded or
/// measured, the operation failed on the device, or no reference of the device's clock was
/// recent enough when it completed.
pub const DEVICE_TIMES_SKIPPED: Key<u64> = Key::new(names::DEVICE_TIMES_SKIPPED);
/// Device times moved into what the host observed (not before the operation was issued or
/// the previous one on its stream ended, not after the host saw it complete): the measured
/// time was off by more than rounding.
pub const DEVICE_TIME_CORRECTIONS: Key<u64> = Key::new(names::DEVICE_TIME_CORRECTIONS);
/// The largest of those corrections, in nanoseconds. Beyond the calibration error plus a
/// microsecond or so of timer resolution, the calibration would be wrong.
pub const DEVICE_TIME_CORRECTION_MAX_NS: Key<u64> = Key::new(names::DEVICE_TIME_CORRECTION_MAX_NS);
/// Calibrations of the device's clock against the host's made so far (one when the device is
/// created, then one whenever a profiled operation finds the reference older than
/// `StreamDeviceOptions::timestamp_recalibration`).
pub const TIMESTAMP_CALIBRATIONS: Key<u64> = Key::new(names::TIMESTAMP_CALIBRATIONS);
/// The current calibration's error bound in nanoseconds: the round trip from just before its
/// reference event was recorded to just after the host saw it complete. Device times are late
/// by at most this, plus the timer's resolution (about 0.5 µs on CUDA) and the rounding of
/// the `f32` milliseconds the API reports (below 0.15 µs within a reference's 4 s). Not
/// answered by a device without event timing, nor before a calibration succeeded.
pub const TIMESTAMP_CALIBRATION_ERROR_NS: Key<u64> =
    Key::new(names::TIMESTAMP_CALIBRATION_ERROR_NS);

/// The keys' names, as the stream device matches them.
pub mod names {
    /// The name of [`NATIVE_WAITS`](super::NATIVE_WAITS).
    pub const NATIVE_WAITS: &str = "stream.native_waits";
    /// The name of [`HOST_WAITS`](super::HOST_WAITS).
    pub const HOST_WAITS: &str = "stream.host_waits";
    /// The name of [`DEFERRED_WAITS`](super::DEFERRED_WAITS).
    pub const DEFERRED_WAITS: &str = "stream.deferred_waits";
    /// The name of [`SUBMISSIONS`](super::SUBMISSIONS).
    pub const SUBMISSIONS: &str = "stream.submissions";
    /// The name of [`COMPLETED`](super::COMPLETED).
    pub const COMPLETED: &str = "stream.completed";
    /// The name of [`FAILED`](super::FAILED).
    pub const FAILED: &str = "stream.failed";
    /// The name of [`CALLBACK_COMPLETIONS`](super::CALLBACK_COMPLETIONS).
    pub const CALLBACK_COMPLETIONS: &str = "stream.callback_completions";
    /// The name of [`THREAD_COMPLETIONS`](super::THREAD_COMPLETIONS).
    pub const THREAD_COMPLETIONS: &str = "stream.thread_completions";
    /// The name of [`FLAG_COMPLETIONS`](super::FLAG_COMPLETIONS).
    pub const FLAG_COMPLETIONS: &str = "stream.flag_completions";
    /// The name of [`PROBE_COMPLETIONS`](super::PROBE_COMPLETIONS).
    pub const PROBE_COMPLETIONS: &str = "stream.probe_completions";
    /// The name of [`PROBE_FAILURES`](super::PROBE_FAILURES).
    pub const PROBE_FAILURES: &str = "stream.probe_failures";
    /// The name of [`PROBES`](super::PROBES).
    pub const PROBES: &str = "stream.probes";
    /// The name of [`SETTLES_DEFERRED`](super::SETTLES_DEFERRED).
    pub const SETTLES_DEFERRED: &str = "stream.settles_deferred";
    /// The name of [`IN_FLIGHT`](super::IN_FLIGHT).
    pub const IN_FLIGHT: &str = "stream.in_flight";
    /// The name of [`EVENTS_CREATED`](super::EVENTS_CREATED).
    pub const EVENTS_CREATED: &str = "stream.events_created";
    /// The name of [`EVENTS_ACQUIRED`](super::EVENTS_ACQUIRED).
    pub const EVENTS_ACQUIRED: &str = "stream.events_acquired";
    /// The name of [`EVENTS_FREE`](super::EVENTS_FREE).
    pub const EVENTS_FREE: &str = "stream.events_free";
    /// The name of [`TIMEPOINTS_CREATED`](super::TIMEPOINTS_CREATED).
    pub const TIMEPOINTS_CREATED: &str = "stream.timepoints_created";
    /// The name of [`TIMEPOINTS_ACQUIRED`](super::TIMEPOINTS_ACQUIRED).
    pub const TIMEPOINTS_ACQUIRED: &str = "stream.timepoints_acquired";
    /// The name of [`REACTOR_WAKEUPS`](super::REACTOR_WAKEUPS).
    pub const REACTOR_WAKEUPS: &str = "stream.reactor_wakeups";
    /// The name of [`REACTOR_POLLS`](super::REACTOR_POLLS).
    pub const REACTOR_POLLS: &str = "stream.reactor_polls";
    /// The name of [`GRAPH_CAPTURES`](super::GRAPH_CAPTURES).
    pub const GRAPH_CAPTURES: &str = "stream.graph_captures";
    /// The name of [`GRAPH_CAPTURE_FAILURES`](super::GRAPH_CAPTURE_FAILURES).
    pub const GRAPH_CAPTURE_FAILURES: &str = "stream.graph_capture_failures";
    /// The name of [`GRAPH_KERNEL_UPDATES`](super::GRAPH_KERNEL_UPDATES).
    pub const GRAPH_KERNEL_UPDATES: &str = "stream.graph_kernel_updates";
    /// The name of [`GRAPH_BYPASSES`](super::GRAPH_BYPASSES).
    pub const GRAPH_BYPASSES: &str = "stream.graph_bypasses";
    /// The name of [`PEER_COPIES`](super::PEER_COPIES).
    pub const PEER_COPIES: &str = "stream.peer_copies";
    /// The name of [`GRAPH_LAUNCHES`](super::GRAPH_LAUNCHES).
    pub const GRAPH_LAUNCHES: &str = "stream.graph_launches";
    /// The name of [`QUEUED_ALLOCATIONS`](super::QUEUED_ALLOCATIONS).
    pub const QUEUED_ALLOCATIONS: &str = "stream.queued_allocations";
    /// The name of [`STATUS_CHECKS`](super::STATUS_CHECKS).
    pub const STATUS_CHECKS: &str = "stream.status_checks";
    /// The name of [`PINNED_LEASES`](super::PINNED_LEASES).
    pub const PINNED_LEASES: &str = "stream.pinned_leases";
    /// The name of [`PINNED_IDLE`](super::PINNED_IDLE).
    pub const PINNED_IDLE: &str = "stream.pinned_idle";
    /// The name of [`PINNED_ALLOCATED`](super::PINNED_ALLOCATED).
    pub const PINNED_ALLOCATED: &str = "stream.pinned_allocated";
    /// The name of [`DEFERRED_FREES`](super::DEFERRED_FREES).
    pub const DEFERRED_FREES: &str = "stream.deferred_frees";
    /// The name of [`TIMING_EVENTS`](super::TIMING_EVENTS).
    pub const TIMING_EVENTS: &str = "stream.timing_events";
    /// The name of [`TIMING_EVENTS_CREATED`](super::TIMING_EVENTS_CREATED).
    pub const TIMING_EVENTS_CREATED: &str = "stream.timing_events_created";
    /// The name of [`DEVICE_TIMES`](super::DEVICE_TIMES).
    pub const DEVICE_TIMES: &str = "stream.device_times";
    /// The name of [`DEVICE_TIMES_SKIPPED`](super::DEVICE_TIMES_SKIPPED).
    pub const DEVICE_TIMES_SKIPPED: &str = "stream.device_times_skipped";
    /// The name of [`DEVICE_TIME_CORRECTIONS`](super::DEVICE_TIME_CORRECTIONS).
    pub const DEVICE_TIME_CORRECTIONS: &str = "stream.device_time_corrections";
    /// The name of [`DEVICE_TIME_CORRECTION_MAX_NS`](super::DEVICE_TIME_CORRECTION_MAX_NS).
    pub const DEVICE_TIME_CORRECTION_MAX_NS: &str = "stream.device_time_correction_max_ns";
    /// The name of [`TIMESTAMP_CALIBRATIONS`](super::TIMESTAMP_CALIBRATIONS).
    pub const TIMESTAMP_CALIBRATIONS: &str = "stream.timestamp_calibrations";
    /// The name of [`TIMESTAMP_CALIBRATION_ERROR_NS`](super::TIMESTAMP_CALIBRATION_ERROR_NS).
    pub const TIMESTAMP_CALIBRATION_ERROR_NS: &str = "stream.timestamp_calibration_error_ns";
}
