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
//!   implements it as a translation table (vendor errors turned into [`crate::Error`]s) and gets
//!   a whole device from [`StreamDevice`].
//! * **Timelines** ([`Timeline`]): each semaphore a stream device creates keeps the device
//!   signals scheduled on streams as `(value, event)` timepoints. Events come from an
//!   [`EventPool`] and are reference counted ([`Event`]): a timepoint, the in-flight record of
//!   the submission that recorded it, and a submission enqueueing a wait on it each hold one, and
//!   the last to let go returns it to the pool. In-flight records themselves are recycled too.
//! * **Device-to-device waits**: a submission waiting on a value for which a timepoint at or
//!   above it is scheduled makes its stream wait on that event (`stream_wait_event`): no host
//!   round trip. A wait whose signal is not yet scheduled parks the submission in the core's
//!   pending-action executor ([`crate::queue::ActionQueue`]) until the signal is scheduled (not
//!   until it completes), then it is released with a stream wait.
//! * **Completion** reaches the device's reactor by one of two [`CompletionStrategy`]s: host
//!   functions on a dedicated callback stream that only post to the reactor, or a completion
//!   thread per queue blocked on blocking-sync events. A **probe** on the reactor queries the
//!   events in flight while the device is busy: a device fault (after which host functions never
//!   run) becomes an error on every affected fence instead of a hang.
//! * **Status words**: a kernel fails its dispatch by setting a `u32` it takes as one more
//!   parameter after its constants (the convention is in [`api`](api#status-words); GPU kernels
//!   have no other way short of a context-killing fault). Each such dispatch of a submission
//!   gets its own word in the submission's lease of the device's pinned host memory, zeroed by
//!   the host before and read by it after (the kernel writes it over the bus); a nonzero word
//!   fails the submission on completion naming the entry point and the value.
//!   Such a submission's signals are made from the host after the check (not scheduled on the
//!   timelines), so dependents on every queue stay parked until it passed, and its command
//!   list is replayed on the stream, never captured into a graph.
//! * **Pinned host memory**: a submission's status words, and its update or read-back bytes up
//!   to 1 MiB, live in one lease of pooled [`MemoryPlacement::Pinned`] memory of the API, held
//!   until the submission is settled, so its copies are plain DMAs (no staging, no host
//!   function).
//! * **[`staging`]**: a pool of pinned host buffers that backends copy through so that host↔device
//!   copies of arbitrary host memory never block the issuing thread; the backend allocates and
//!   frees them (the stream device's pinned leases use the same pool type).
//! * **[`allocations`]**: live allocations by base address, so that a backend frees each once
//!   and refuses a copy or fill outside them.
//! * **[`registry`]**: live objects by handle, so that a backend refuses a stale or made-up
//!   handle with an error instead of passing it to a driver that would dereference it.
//! * **[`host::HostStreamApi`]**: a real implementation on host threads (a thread per stream),
//!   with fault injection, so all of the above runs and is tested without a GPU; the timeline
//!   and event-pool logic is also model-checked with loom (`loom_tests/tests/stream.rs`).
//!
//! ```
//! use halcyon::stream::host::{HostModule, HostStreamApi};
//! use halcyon::stream::{create_device, StreamDeviceOptions};
//! use halcyon::{BufferParams, EntryPoint};
//!
//! # fn main() -> halcyon::Result<()> {
//! futures::executor::block_on(async {
//!     let device = create_device(HostStreamApi::new(), StreamDeviceOptions::default())?;
//!     let queue = device.queue(0)?;
//!     let module = HostModule::new().kernel(
//!         EntryPoint { name: "add_one".into(), workgroup_size: [64, 1, 1], binding_count: 1, constant_count: 0 },
//!         |args| {
//!             // SAFETY: the only binding; blocks run one after another.
//!             let data = unsafe { args.binding_mut::<u32>(0) };
//!             let start = args.block_id()[0] as usize * 64;
//!             data.iter_mut().skip(start).take(64).for_each(|x| *x += 1);
//!             Ok(())
//!         },
//!     );
//!     let add_one = device.load_executable(&module.spec())?.kernel("add_one")?;
//!     let buffer = device.allocator().allocate(256 * 4, BufferParams::DEVICE)?;
//!
//!     let timeline = queue.timeline()?;
//!     queue.fill(timeline.next(), 41u32, &buffer.whole()).await?;
//!     queue.dispatch(timeline.next(), &add_one.launch([4, 1, 1]).binding(buffer.whole())).await?;
//!     let words = queue.read::<u32>(timeline.next(), &buffer.whole()).await?;
//!     assert!(words.iter().all(|&x| x == 42));
//!     Ok(())
//! })
//! # }
//! ```

pub mod allocations;
pub mod api;
pub mod device;
pub mod event_pool;
pub mod handoff;
pub mod host;
pub mod registry;
pub mod staging;
pub mod timeline;
mod timepoint;

pub use api::{
    ApiInfo, Capabilities, DevicePtr, EventFlags, EventHandle, FunctionHandle, GraphHandle,
    HostFunc, KernelParams, LaunchConfig, LoadedModule, MemoryPlacement, ModuleHandle, StreamApi,
    StreamHandle,
};
pub use device::{create_device, keys, CompletionStrategy, StreamDevice, StreamDeviceOptions};
pub use event_pool::{Event, EventFactory, EventPool, EventPoolStats};
pub use timeline::{StreamSemaphore, Timeline, WaitSource};
