//! # halcyon-stream
//!
//! The stream layer: timeline semaphores, device queues and completion over stream-based APIs
//! (CUDA, HIP), written once and generic over a small [`StreamApi`] translation table.
//!
//! GPU stream APIs offer in-order streams and binary events that must be recorded before they
//! are waited on; halcyon offers timeline semaphores that may be waited on before anything
//! signals them, where every wait is a future. This layer bridges the two along the lines of
//! IREE's HIP HAL driver:
//!
//! * **[`StreamApi`]** ([`api`]): streams, events, host functions, memory, copies and fills,
//!   modules and kernel launches, optional stream-ordered allocation and graphs. A backend
//!   implements it as a translation table (vendor errors turned into [`halcyon::Error`]s) and gets
//!   a whole device from [`StreamDevice`].
//! * **Timelines** ([`EventTimeline`]): each semaphore a stream device creates keeps the device
//!   signals scheduled on streams as `(value, event)` timepoints. Events come from an
//!   [`EventPool`] and are reference counted ([`Event`]): a timepoint, the in-flight record of
//!   the submission that recorded it, and a submission enqueueing a wait on it each hold one, and
//!   the last to let go returns it to the pool. In-flight records themselves are recycled too.
//! * **Device-to-device waits**: a submission waiting on a value for which a timepoint at or
//!   above it is scheduled makes its stream wait on that event (`stream_wait_event`): no host
//!   round trip. A wait whose signal is not yet scheduled parks the submission in the core's
//!   pending-action executor ([`halcyon::backend::ActionQueue`]) until the signal is scheduled (not
//!   until it completes), then it is released with a stream wait.
//! * **Completion** reaches the device's reactor by one of three [`CompletionStrategy`]s: host
//!   functions on a dedicated callback stream that only post to the reactor, a completion
//!   thread per queue blocked on blocking-sync events, or words of pinned memory each stream
//!   writes after each submission, read by one scanner thread ([`flags`]). A **probe** on the
//!   reactor queries the events in flight while the device is busy: a device fault (after which
//!   host functions never run and flags are never written) becomes an error on every affected
//!   fence instead of a hang.
//! * **Status words**: this layer implements the status-word convention (docs/ARCHITECTURE.md;
//!   its part is in [`api`](api#status-words)): each dispatch that takes one gets its own word
//!   in the submission's lease of the device's pinned host memory, which the kernel writes over
//!   the bus, and dependents on every queue stay parked until the host's check passed.
//! * **Device times** (`device/timing.rs`, `device/calibration.rs`): while a device's profiler
//!   is on and its API has [`Capabilities::EVENT_TIMING`], each operation gets two timing events
//!   around its work on the stream, from a pool of their own (the synchronisation events stay
//!   timing-disabled); when it completes, their times are placed on the profile clock through
//!   a reference event whose host time a calibration measured (within a stated error,
//!   [`keys::TIMESTAMP_CALIBRATION_ERROR_NS`]), and recorded before its fence is settled.
//! * **Pinned host memory**: a submission's status words, and its update or read-back bytes up
//!   to 1 MiB, live in one lease of pooled [`MemoryPlacement::Pinned`] memory of the API, held
//!   until the submission is settled, so its copies are plain DMAs (no staging, no host
//!   function).
//! * **[`staging`]**: a pool of pinned host buffers that backends copy through so that host↔device
//!   copies of arbitrary host memory never block the issuing thread; the backend allocates and
//!   frees them (the stream device's pinned leases use the same pool type).
//! * **[`allocations`]**: live allocations by base address, so that a backend frees each once
//!   and refuses a copy or fill outside them.
//! * **Policy shared by the backends**: [`arguments`] (host lengths, fill patterns, shared
//!   memory against a block's limit) and [`out_of_memory`] (trim the stream-ordered pool, try
//!   once more), stated and tested once here.
//! * **[`registry`]**: live objects by handle, so that a backend refuses a stale or made-up
//!   handle with an error instead of passing it to a driver that would dereference it.
//! * **The host stream API** (`HostStreamApi`, in the workspace's unpublished
//!   `halcyon-host-stream` testing crate, `testing/host-stream/`): a real implementation on host
//!   threads (a thread per stream), with fault injection, so all of the above runs and is tested
//!   without a GPU; the timeline and event-pool logic is also model-checked with loom
//!   (`testing/loom/tests/stream.rs`).

pub mod allocations;
pub mod api;
pub mod arguments;
pub mod collectives;
pub mod device;
pub mod event_pool;
pub mod flags;
pub mod handoff;
pub mod out_of_memory;
pub mod registry;
pub mod staging;
mod sync;
pub mod timeline;
mod timepoint;

pub use api::{
    ApiInfo, Capabilities, DevicePtr, EventFlags, EventHandle, FunctionHandle, GraphHandle,
    HostFunc, KernelParams, LaunchConfig, LoadedModule, MemoryPlacement, ModuleHandle, StreamApi,
    StreamHandle,
};
pub use device::{create_device, keys, CompletionStrategy, StreamDevice, StreamDeviceOptions};
pub use event_pool::{Event, EventFactory, EventPool, EventPoolStats};
pub use timeline::{EventTimeline, StreamSemaphore, WaitSource};
