//! # halcyon-cpu
//!
//! halcyon's CPU device: the embedded default, needing nothing installed. Work runs on a pool of
//! worker threads that claim workgroup tiles atomically ([`ExecutionMode::Pool`]), or on the
//! thread that issues it ([`ExecutionMode::Inline`], lowest latency for tiny work). Kernels are
//! Rust closures ([`RustKernels`]) or C functions in a shared library loaded through a versioned
//! C ABI (the `unsafe` [`c_library_spec`], header `include/halcyon_cpu.h`: loading a library
//! runs its code, so its caller vouches for it).
//!
//! Rust kernels need no `unsafe`: a workgroup reads bindings through shared views
//! ([`WorkgroupContext::binding`]), writes its own chunk of a binding
//! ([`WorkgroupContext::chunk_mut`]) or scatters writes through atomics
//! ([`WorkgroupContext::atomics`]); the device checks that concurrent workgroups (and
//! dispatches) never get aliasing views. [`WorkgroupContext::raw_binding`] is the `unsafe`
//! escape hatch for other patterns.
//!
//! ```
//! use halcyon::{BufferParams, EntryPoint};
//! use halcyon_cpu::RustKernels;
//!
//! # fn main() -> halcyon::Result<()> {
//! futures::executor::block_on(async {
//!     let device = halcyon_cpu::default_device()?;
//!     let queue = device.queue(0)?;
//!     let kernels = RustKernels::new().entry(
//!         EntryPoint { name: "add_one".into(), workgroup_size: [64, 1, 1], binding_count: 1, constant_count: 0 },
//!         |ctx| {
//!             // Each workgroup gets its own 64 elements: no `unsafe`, no data race.
//!             for x in ctx.chunk_mut::<u32>(0, 64)? {
//!                 *x += 1;
//!             }
//!             Ok(())
//!         },
//!     );
//!     let add_one = device.load_executable(&kernels.spec())?.kernel("add_one")?;
//!     let buffer = device.allocator().allocate(256 * 4, BufferParams::HOST)?;
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

mod access;
mod c_abi;
mod collective;
mod device;
mod executor;
mod kernel;
mod memory;
mod pool;
mod rust_kernel;

use std::sync::Arc;
use std::time::Duration;

use halcyon::{DeviceEntry, Driver, DriverInfo, DriverRegistry, Error, Result, StatusCode};

pub use c_abi::{c_library_spec, FORMAT_C_ABI};
pub use rust_kernel::{AtomicElement, RawBinding, RustKernels, WorkgroupContext, FORMAT_RUST};

/// The driver id and URI scheme: `cpu`, `cpu://0`.
pub const DRIVER_ID: &str = "cpu";

/// Where a CPU device runs work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecutionMode {
    /// On a pool of worker threads; `workers: 0` means one per available core.
    Pool {
        /// Number of worker threads (0 = one per core).
        workers: usize,
    },
    /// On the thread that issues the work: the submitting thread when its waits are already
    /// reached, the device's reactor thread otherwise.
    ///
    /// **This blocks the submitting thread for as long as the work runs**: a submission from
    /// an async task runs its kernel on the executor thread (a dispatch taking 200 ms stalls a
    /// current-thread tokio runtime for 200 ms). It is for tiny work where a thread hop costs
    /// more than the work, or for code outside async. The default, [`ExecutionMode::Pool`],
    /// never runs work on the submitting thread, so halcyon's "never blocks an executor
    /// thread" holds for every default.
    Inline,
}

/// How to create a CPU device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CpuDeviceOptions {
    /// Pool or inline execution.
    pub mode: ExecutionMode,
    /// Number of queues (at least 1).
    pub queue_count: u32,
    /// How long a pool worker that runs out of work watches for more before it sleeps (one
    /// worker at a time): a job submitted meanwhile starts without waking a thread. Costs up
    /// to this much of one core after each burst of work; `Duration::ZERO` turns it off.
    /// Default [`DEFAULT_WORKER_SPIN`]; no effect inline.
    pub worker_spin: Duration,
}

/// [`CpuDeviceOptions::worker_spin`]'s default.
pub const DEFAULT_WORKER_SPIN: Duration = Duration::from_micros(50);

/// How long an awaited submission of a pool device watches for its completion before it
/// sleeps, by default ([`halcyon::Device::set_completion_spin`] changes it per device).
pub const DEFAULT_COMPLETION_SPIN: Duration = Duration::from_micros(20);

impl CpuDeviceOptions {
    /// Sets [`CpuDeviceOptions::mode`].
    pub fn with_mode(mut self, mode: ExecutionMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets [`CpuDeviceOptions::worker_spin`].
    pub fn with_worker_spin(mut self, spin: Duration) -> Self {
        self.worker_spin = spin;
        self
    }

    /// Sets [`CpuDeviceOptions::queue_count`].
    pub fn with_queue_count(mut self, queue_count: u32) -> Self {
        self.queue_count = queue_count;
        self
    }
}

impl Default for CpuDeviceOptions {
    fn default() -> Self {
        CpuDeviceOptions {
            mode: ExecutionMode::Pool { workers: 0 },
            queue_count: 1,
            worker_spin: DEFAULT_WORKER_SPIN,
        }
    }
}

/// Creates a CPU device with `options`.
pub fn create_device(options: CpuDeviceOptions) -> Result<halcyon::Device> {
    Ok(halcyon::Device::from_backend(Arc::new(
        device::CpuDevice::new(0, &options)?,
    )))
}

/// Creates a CPU device with default options (a worker per core, one queue).
pub fn default_device() -> Result<halcyon::Device> {
    create_device(CpuDeviceOptions::default())
}

/// The CPU driver, for a [`DriverRegistry`]. It has one device, `cpu://0`.
#[derive(Clone, Debug, Default)]
pub struct CpuDriver {
    options: CpuDeviceOptions,
}

impl CpuDriver {
    /// A driver whose devices use `options`.
    pub fn new(options: CpuDeviceOptions) -> Self {
        CpuDriver { options }
    }
}

impl Driver for CpuDriver {
    fn info(&self) -> DriverInfo {
        DriverInfo::new(
            DRIVER_ID,
            "CPU",
            format!(
                "halcyon-cpu {} (host CPU, Rust and C ABI v1 kernels)",
                env!("CARGO_PKG_VERSION")
            ),
        )
    }

    fn enumerate_devices(&self) -> Result<Vec<DeviceEntry>> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(vec![DeviceEntry::new(
            0,
            format!("{DRIVER_ID}://0"),
            format!("host CPU ({cores} cores)"),
        )])
    }

    fn create_device(&self, index: u32) -> Result<halcyon::Device> {
        if index != 0 {
            return Err(Error::new(
                StatusCode::NotFound,
                format!("the CPU driver has one device, cpu://0; cpu://{index} does not exist"),
            ));
        }
        create_device(self.options)
    }
}

/// Registers the CPU driver (default options) in `registry`.
pub fn register(registry: &DriverRegistry) -> Result<()> {
    registry.register(Arc::new(CpuDriver::default()))
}

/// The README's Rust examples, run as this crate's doctests (they use the CPU device).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
