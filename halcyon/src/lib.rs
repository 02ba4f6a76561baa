//! # halcyon
//!
//! An async-first hardware abstraction layer: one API over CPU, Vulkan, CUDA and HIP devices in
//! the spirit of IREE's HAL, where every wait is a std [`Future`](std::future::Future).
//!
//! This crate is the executor-agnostic core:
//!
//! * [`Semaphore`]: a timeline semaphore (monotonic `u64` payload plus a failure state) whose
//!   waits are cancel-safe futures woken only when their value is reached;
//! * [`Fence`]: a set of `(semaphore, value)` timepoints with `wait_all` / `wait_any` futures;
//! * [`reactor`]: the per-device completion reactor that turns device completions into wakes;
//! * [`queue`]: the pending-action executor that issues queue work once its waits are reached;
//! * [`backend`]: the hooks device backends build on (native semaphores).
//!
//! The stream layer CUDA and HIP share is the `halcyon-stream` crate, built on [`backend`].
//!
//! Futures use std `Waker`s only, so they run under tokio, `futures::executor` or any executor.
//!
//! ```
//! use halcyon::{Fence, Semaphore};
//!
//! # fn main() -> halcyon::Result<()> {
//! futures::executor::block_on(async {
//!     let upload = Semaphore::new(0);
//!     let compute = Semaphore::new(0);
//!
//!     // A "device" thread finishes the upload, then the compute step.
//!     let (u, c) = (upload.clone(), compute.clone());
//!     let device = std::thread::spawn(move || -> halcyon::Result<()> {
//!         u.signal(1)?;
//!         c.wait_blocking(0, None)?;
//!         c.signal(1)
//!     });
//!
//!     let mut done = Fence::new();
//!     done.insert(&upload, 1);
//!     done.insert(&compute, 1);
//!     done.wait_all().await?;
//!     device.join().unwrap()?;
//!     println!("upload at {}, compute at {}", upload.query()?, compute.query()?);
//!     Ok(())
//! })
//! # }
//! ```

#![warn(missing_docs)]

mod allocator;
pub mod backend;
mod block;
mod buffer;
pub mod command_buffer;
pub mod device;
pub mod driver;
mod error;
mod executable;
mod fence;
pub mod queue;
pub mod reactor;
mod semaphore;
mod sync;

pub use allocator::{Allocator, AllocatorStats};
pub use buffer::{
    Access, Buffer, BufferMemory, BufferParams, BufferRef, BufferUsage, MappedRead, MappedWrite,
    MemoryType,
};
pub use command_buffer::{
    Binding, BindingTable, Command, CommandBuffer, CommandBufferBuilder, CommandBufferMode,
};
pub use device::{Device, DeviceFeatures, DeviceInfo, QueueCapabilities};
pub use driver::{DeviceEntry, Driver, DriverInfo, DriverRegistry};
pub use error::{Error, Result, StatusCode};
pub use executable::{
    EntryPoint, Executable, ExecutableCache, ExecutableSource, ExecutableSpec, Kernel, Launch,
    PackedExecutable, MAX_ENTRY_POINTS,
};
pub use fence::{Fence, WaitAll, WaitAny};
pub use queue::{Queue, Submission, Timeline, TimelineStep, Timepoints};
pub use semaphore::{Semaphore, Wait};
