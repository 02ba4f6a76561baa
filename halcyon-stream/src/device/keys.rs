//! Query keys a stream device answers through [`halcyon::Device::query`], besides the standard
//! [`halcyon::device::keys`]: counters of how waits were satisfied, how submissions completed, and
//! what the event and timepoint pools did.

/// Waits satisfied by `stream_wait_event` on a scheduled signal's event (no host wait).
pub const NATIVE_WAITS: &str = "stream.native_waits";
/// Waits the host had to see reached first (host or other devices' semaphores not yet
/// reached at submit, and host calls' waits).
pub const HOST_WAITS: &str = "stream.host_waits";
/// Waits on this device's semaphores whose signal was not yet scheduled at submit: the
/// submission was parked until it was.
pub const DEFERRED_WAITS: &str = "stream.deferred_waits";
/// Submissions received.
pub const SUBMISSIONS: &str = "stream.submissions";
/// Submissions issued to a stream whose fences were settled.
pub const COMPLETED: &str = "stream.completed";
/// Of those, how many failed.
pub const FAILED: &str = "stream.failed";
/// Settled by a host-function callback through the reactor.
pub const CALLBACK_COMPLETIONS: &str = "stream.callback_completions";
/// Settled by a completion thread.
pub const THREAD_COMPLETIONS: &str = "stream.thread_completions";
/// Settled (successfully) by the probe because their callback had not come.
pub const PROBE_COMPLETIONS: &str = "stream.probe_completions";
/// Failed by the probe because their event reported an error (a device fault).
pub const PROBE_FAILURES: &str = "stream.probe_failures";
/// Probe runs.
pub const PROBES: &str = "stream.probes";
/// Submissions whose event completed before a submission whose event their stream waited on
/// had settled, so they settled after it (see `halcyon_stream::timeline`). Those that fail
/// that way are counted in [`FAILED`] when they do.
pub const SETTLES_DEFERRED: &str = "stream.settles_deferred";
/// Submissions in flight now.
pub const IN_FLIGHT: &str = "stream.in_flight";
/// Events the event pool created.
pub const EVENTS_CREATED: &str = "stream.events_created";
/// Events handed out by the pool (created or reused).
pub const EVENTS_ACQUIRED: &str = "stream.events_acquired";
/// Events back in the pool now.
pub const EVENTS_FREE: &str = "stream.events_free";
/// Timepoint records created.
pub const TIMEPOINTS_CREATED: &str = "stream.timepoints_created";
/// Timepoint records handed out (created or reused).
pub const TIMEPOINTS_ACQUIRED: &str = "stream.timepoints_acquired";
/// Times the reactor woke.
pub const REACTOR_WAKEUPS: &str = "stream.reactor_wakeups";
/// Pending-action polls on the reactor.
pub const REACTOR_POLLS: &str = "stream.reactor_polls";
/// Resubmitted command lists captured into a graph.
pub const GRAPH_CAPTURES: &str = "stream.graph_captures";
/// Captures of a resubmitted command list that failed (the driver refused or invalidated the
/// capture); each such submission was issued directly instead.
pub const GRAPH_CAPTURE_FAILURES: &str = "stream.graph_capture_failures";
/// Submissions issued as one graph launch.
pub const GRAPH_LAUNCHES: &str = "stream.graph_launches";
/// Queue `alloca`s served by stream-ordered allocation on the queue's stream.
pub const QUEUED_ALLOCATIONS: &str = "stream.queued_allocations";
/// Submissions with dispatches that take a status word (zeroed before, checked on completion;
/// signalled from the host).
pub const STATUS_CHECKS: &str = "stream.status_checks";
/// Submissions that leased the device's pinned host memory (status words, staged update bytes,
/// read-back bytes), so their copies needed no staging by the API.
pub const PINNED_LEASES: &str = "stream.pinned_leases";
/// Pinned host buffers idle in the device's pool now (leased ones not counted).
pub const PINNED_IDLE: &str = "stream.pinned_idle";
/// Pinned host buffers the device allocated so far (steady once its pool covers the
/// submissions in flight).
pub const PINNED_ALLOCATED: &str = "stream.pinned_allocated";
/// Buffer frees and module unloads handed to the device's reclaimer thread because the last
/// reference went while a submission was settled (both may wait for the device; completion
/// paths must not).
pub const DEFERRED_FREES: &str = "stream.deferred_frees";
