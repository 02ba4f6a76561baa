//! # halcyon
//!
//! An async-first hardware abstraction layer: one API over CPU, Vulkan, CUDA and HIP devices in
//! the spirit of IREE's HAL, where every wait is a std [`Future`](std::future::Future) that
//! runs under tokio, `futures::executor` or any other executor.
//!
//! A program opens a [`Device`] through a backend crate (`halcyon-cpu`, `halcyon-vulkan`,
//! `halcyon-cuda`, `halcyon-hip`), allocates [`Buffer`]s, loads an [`Executable`] and submits
//! work to a [`Queue`]. Each operation returns a [`Submission`] future at once; a [`Timeline`]
//! orders them, and [`Timepoints`] and [`Semaphore`]s order work across queues and devices.
//!
//! ```
//! use halcyon::{Device, Executable};
//!
//! /// Uploads `x`, runs `scale` over it in place (64 floats per workgroup), reads it back.
//! async fn scale(device: &Device, module: &Executable, factor: f32, x: &[f32]) -> halcyon::Result<Vec<f32>> {
//!     let scale = module.kernel("scale")?;
//!     let buffer = device.allocator().allocate(std::mem::size_of_val(x) as u64, halcyon::BufferParams::DEVICE)?;
//!     let queue = device.queue(0)?;
//!     let timeline = queue.timeline()?; // each operation waits for the one before
//!     queue.write(timeline.next(), x, &buffer.whole()).await?;
//!     let groups = (x.len() as u32).div_ceil(64);
//!     let launch = scale.launch([groups, 1, 1]).constant(factor).binding(buffer.whole());
//!     queue.dispatch(timeline.next(), &launch).await?;
//!     queue.read::<f32>(timeline.next(), &buffer.whole()).await
//! }
//! ```
//!
//! The README's version of this runs on the CPU device (`halcyon_cpu::default_device()`).
//!
//! # Modules
//!
//! * The user API at the crate root: devices, queues, buffers, command buffers, executables,
//!   [`Semaphore`] (a timeline semaphore: monotonic `u64` payload plus a failure state, whose
//!   waits are cancel-safe futures woken only when their value is reached) and [`Fence`] (a set
//!   of `(semaphore, value)` timepoints with `wait_all` / `wait_any`).
//! * [`queue`]: the ordering and failure rules every queue operation keeps, and how to cancel
//!   queued work.
//! * [`view`]: [`BufferView`], a buffer range seen as a typed array with a shape and strides,
//!   read back and moved between devices in one call.
//! * [`channel`]: collectives (all-reduce and the others) across devices, processes and hosts,
//!   as queue operations.
//! * [`device`], [`driver`], [`command_buffer`]: the device model's details (query keys, URIs,
//!   bindings).
//! * [`topology`]: which devices reach each other's memory directly (peer DMA) and which only
//!   through host memory.
//! * [`backend`]: the SPI, everything a device backend implements and builds on, in one
//!   module: the device and memory traits, native semaphores, the completion reactor
//!   ([`backend::reactor`]) and the pending-action executor ([`backend::ActionQueue`]).
//!
//! The stream layer CUDA and HIP share is the `halcyon-stream` crate, built on [`backend`].
//! `docs/ARCHITECTURE.md` in the repository describes the layers and a submission's path.

#![warn(missing_docs)]

mod allocator;
pub mod backend;
mod block;
mod buffer;
pub mod channel;
pub mod command_buffer;
pub mod device;
pub mod driver;
mod element;
mod error;
mod executable;
mod fence;
mod host_staging;
mod label;
mod log;
pub mod profile;
pub mod queue;
mod semaphore;
#[cfg(all(target_os = "linux", not(loom)))]
mod semaphore_fd;
mod spin;
mod sync;
pub mod topology;
pub mod view;

pub use allocator::{Allocator, AllocatorStats};
pub use buffer::{
    Access, Buffer, BufferMemory, BufferParams, BufferRef, BufferUsage, MappedRead, MappedWrite,
    MemoryType,
};
pub use channel::{Channel, ChannelParams, ChannelProvider, ReduceOp};
pub use command_buffer::{
    Binding, BindingTable, Command, CommandBuffer, CommandBufferBuilder, CommandBufferMode,
    Recording,
};
pub use device::{Device, DeviceFeatures, DeviceInfo, QueueCapabilities};
pub use driver::{DeviceEntry, Driver, DriverInfo, DriverRegistry};
pub use element::{Element, ElementType};
pub use error::{Error, Result, StatusCode};
pub use executable::{
    EntryPoint, Executable, ExecutableCache, ExecutableSource, ExecutableSpec, Kernel, Launch,
    PackedExecutable, MAX_ENTRY_POINTS,
};
pub use fence::{Fence, WaitAll, WaitAny};
pub use queue::{Queue, Submission, Timeline, TimelineStep, Timepoints};
pub use semaphore::{Semaphore, Wait};
#[cfg(all(target_os = "linux", not(loom)))]
pub use semaphore_fd::SemaphoreFd;
pub use view::BufferView;
