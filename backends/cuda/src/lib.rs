//! # halcyon-cuda
//!
//! halcyon's CUDA backend, built on [cudarc]'s driver bindings with libcuda opened at run
//! time: nothing from CUDA is needed to build it. With no NVIDIA driver, a driver older than
//! CUDA 12.0, or no device, enumeration and creation return [`StatusCode::Unavailable`] saying
//! which, and never panic.
//!
//! cudarc's loader panics in those cases, so it is never used (only cudarc's declarations
//! are), and no driver function is called before [`probe::probe`] has succeeded: it opens
//! libcuda with libloading (the library every driver call is then resolved from), checks
//! `cuDriverGetVersion` against [`probe::MIN_DRIVER_VERSION`] (CUDA 12.0, driver R525; the
//! bindings are CUDA 12.8's, but symbols are resolved one at a time on first use, and calls
//! newer than 12.0 are made only where the driver has them: see [`probe`]) and runs
//! `cuInit(0)`. Every function here that calls the driver takes the resulting
//! [`probe::Probe`] as proof, except the [`sys`] calls themselves, which fail (never panic)
//! without a driver. NVRTC is guarded the same way ([`nvrtc::probe`]). Nothing relies on
//! `catch_unwind`, so this holds under `panic = "abort"` too.
//!
//! A device is halcyon's generic stream device ([`halcyon_stream::StreamDevice`]) over
//! [`CudaApi`], the CUDA driver API as a [`halcyon_stream::StreamApi`] translation table: one
//! stream per queue, timeline semaphores as `(value, CUevent)` timepoints, device-side waits with
//! `cuStreamWaitEvent`, completion through a thread per queue blocked on blocking-sync events
//! (the default) or through `cuLaunchHostFunc` callbacks ([`CudaDeviceOptions`]).
//!
//! **Failing a dispatch.** A kernel fails its dispatch through a status word, the stream
//! layer's convention ([`halcyon_stream::api`]): a kernel whose entry point declares `b`
//! bindings and `c` constants and that takes one more parameter, a pointer, after the
//! constants gets a `u32` in device memory, zero when it starts; writing a nonzero value fails
//! the submission on completion (`StatusCode::Internal`, naming the entry point and the value),
//! and everything waiting on it. `__trap()` or an illegal address would instead be a sticky
//! fault that kills the context. Such submissions signal their semaphores from the host after
//! the check, so their dependents wait on the host. Whether a kernel takes the word is read
//! from its PTX `.param`s, or for a cubin from `cuFuncGetParamInfo` (CUDA 12.4+ drivers; before
//! that every cubin kernel is launched with a word, which a kernel without the parameter never
//! reads): see [`module`].
//!
//! ```text
//! extern "C" __global__ void checked(const float* x, unsigned int n, unsigned int* status) {
//!     unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n && !isfinite(x[i])) *status = 1u;
//! }
//! ```
//!
//! Modules, bottom up (cudarc's own layering, `sys` → `result` → `api`, as in halcyon-hip):
//!
//! * [`probe`]: the gate in front of the driver (libcuda present, CUDA 12.0 or newer,
//!   initialised).
//! * [`sys`]: the driver calls this crate makes, resolved from the library the probe opened, with
//!   cudarc's parameter types and the result as a plain number ([`sys::Code`]), so codes from a
//!   driver newer than the bindings and missing symbols are errors, not undefined behaviour or
//!   panics.
//! * [`result`]: a [`sys::Code`] → [`halcyon::Error`] with the call, the error's name and number.
//! * [`nvrtc`]: CUDA C → PTX at run time, behind its own probe of libnvrtc.
//! * [`module`]: the `"cuda"` executable format ([`CudaModule`]: PTX, or through `unsafe`
//!   constructors a cubin or fatbin, plus entry-point metadata; native, or as bytes in a
//!   [`halcyon::PackedExecutable`]), its cheap checks, [`CudaModule::compile`].
//! * [`api`]: [`CudaApi`], the translation table (its docs have the call-by-call table), with
//!   the host-function registry behind `cuLaunchHostFunc` and pinned staging for reads and
//!   writes.
//! * this module: [`CudaDriver`] for a [`DriverRegistry`] (`cuda://N`), [`create_device`] and
//!   [`create_device_with`].
//!
//! ```
//! use halcyon::{BufferParams, EntryPoint, StatusCode, Timepoints};
//! use halcyon_cuda::CudaModule;
//!
//! # fn main() -> halcyon::Result<()> {
//! let skip = |e: &halcyon::Error| e.code() == StatusCode::Unavailable;
//! let device = match halcyon_cuda::create_device(0) {
//!     Ok(device) => device,
//!     Err(e) if skip(&e) => return Ok(println!("no CUDA device: {e}")),
//!     Err(e) => return Err(e),
//! };
//! // CUDA C, compiled to PTX by NVRTC at run time (or ship PTX: `CudaModule::ptx`).
//! let module = CudaModule::compile(
//!     r#"extern "C" __global__ void add_one(unsigned int* x, unsigned int n) {
//!            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
//!            if (i < n) x[i] += 1;
//!        }"#,
//!     vec![EntryPoint { name: "add_one".into(), workgroup_size: [64, 1, 1], binding_count: 1, constant_count: 1 }],
//!     &[],
//! );
//! let module = match module {
//!     Ok(module) => module,
//!     Err(e) if skip(&e) => return Ok(println!("no NVRTC: {e}")),
//!     Err(e) => return Err(e),
//! };
//! let executable = match device.load_executable(&module.spec()) {
//!     Ok(executable) => executable,
//!     // An NVRTC newer than the driver writes PTX the driver cannot JIT.
//!     Err(e) if e.code() == StatusCode::FailedPrecondition => return Ok(println!("{e}")),
//!     Err(e) => return Err(e),
//! };
//! let add_one = executable.kernel("add_one")?;
//! let buffer = device.allocator().allocate(1024 * 4, BufferParams::DEVICE)?;
//! let queue = device.queue(0)?;
//! let timeline = queue.timeline()?;
//! futures::executor::block_on(async {
//!     queue.fill(timeline.next(), 0u8, &buffer.whole()).await?;
//!     queue
//!         .dispatch(timeline.next(), &add_one.launch([16, 1, 1]).constant(1024u32).binding(buffer.whole()))
//!         .await?;
//!     let words = queue.read::<u32>(timeline.next(), &buffer.whole()).await?;
//!     assert!(words.iter().all(|&word| word == 1));
//!     Ok(())
//! })
//! # }
//! ```

#![warn(missing_docs)]

pub mod api;
mod callback;
mod capture;
pub mod module;
pub mod nvrtc;
mod objects;
pub mod probe;
pub mod result;
pub mod sys;

use std::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::{CUdevice, CUdevice_attribute};
use halcyon::{DeviceEntry, Driver, DriverInfo, DriverRegistry, Error, Result, StatusCode};
use halcyon_stream::{CompletionStrategy, StreamDeviceOptions};

pub use api::CudaApi;
pub use module::{CudaModule, FORMAT_CUDA};
use probe::Probe;

/// The driver id and URI scheme: `cuda`, `cuda://0`.
pub const DRIVER_ID: &str = "cuda";

/// The number of devices (`cuDeviceGetCount`); `Unavailable` when it is 0.
pub(crate) fn device_count(probe: &Probe) -> Result<i32> {
    let mut count: c_int = 0;
    // SAFETY: a valid out-pointer; the probe initialised the driver.
    result::check(unsafe { sys::cuDeviceGetCount(&mut count) }, || {
        "cuDeviceGetCount".into()
    })?;
    if count <= 0 {
        return Err(Error::new(
            StatusCode::Unavailable,
            format!(
                "NVIDIA driver {} initialised, but cuDeviceGetCount reports {count} devices",
                probe.soname()
            ),
        ));
    }
    Ok(count)
}

/// Device `ordinal`'s name with its compute capability, multiprocessors and memory.
pub(crate) fn describe_device(_probe: &Probe, ordinal: i32) -> Result<String> {
    let mut device: CUdevice = 0;
    // SAFETY: a valid out-pointer; the probe initialised the driver.
    result::check(unsafe { sys::cuDeviceGet(&mut device, ordinal) }, || {
        format!("cuDeviceGet({ordinal})")
    })?;
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; `device` came from cuDeviceGet; the probe
    // guarantees libcuda is loaded and initialised.
    let e = unsafe { sys::cuDeviceGetName(buf.as_mut_ptr().cast(), buf.len() as c_int, device) };
    result::check(e, || format!("cuDeviceGetName({ordinal})"))?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let mut name = String::from_utf8_lossy(&buf[..end]).into_owned();

    use CUdevice_attribute as A;
    // SAFETY: `device` came from cuDeviceGet (after a successful probe).
    let attr = |a| {
        let mut value: c_int = 0;
        // SAFETY: a valid out-pointer and a device from cuDeviceGet.
        unsafe { sys::cuDeviceGetAttribute(&mut value, a, device) }
            .is_success()
            .then_some(value)
    };
    let mut details = Vec::new();
    if let (Some(major), Some(minor)) = (
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    ) {
        details.push(format!("sm_{major}{minor}"));
    }
    if let Some(sms) = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) {
        details.push(format!("{sms} SMs"));
    }
    let mut bytes = 0usize;
    // SAFETY: a valid out-pointer and a device from cuDeviceGet.
    if unsafe { sys::cuDeviceTotalMem_v2(&mut bytes, device) }.is_success() {
        details.push(format!("{} MiB", bytes >> 20));
    }
    if !details.is_empty() {
        name = format!("{name} ({})", details.join(", "));
    }
    Ok(name)
}

/// How to create a CUDA device ([`create_device_with`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaDeviceOptions {
    /// Queues, each with its own CUDA stream (at least 1). Default 2, so a transfer can overlap
    /// a kernel.
    pub queue_count: u32,
    /// How completions are observed. Default [`CompletionStrategy::CompletionThread`]: a thread
    /// per queue sleeps in `cuEventSynchronize` on each submission's blocking-sync event and
    /// settles it the moment the driver wakes it. The alternative,
    /// [`CompletionStrategy::HostCallback`] (IREE's HIP design), has the driver run a
    /// `cuLaunchHostFunc` callback on its own callback thread, which then has to wake the
    /// reactor: one more thread hop, and IREE measured host callbacks to be slow (tens of
    /// microseconds per callback, and a callback blocks the stream it runs on, hence the extra
    /// callback stream per queue). Host callbacks cost no thread per queue; select them for
    /// devices with many queues, or compare both with this crate's benchmark.
    pub completion: CompletionStrategy,
    /// With host callbacks: how often, at most, the fault probe queries the events in flight
    /// while the device is busy (a sticky fault stops host callbacks; the probe turns it into
    /// errors; completion threads get the error from `cuEventSynchronize` and need no probe).
    /// Default 10 ms.
    pub probe_interval: Duration,
    /// Replay a reusable command buffer submitted again as a CUDA graph (stream capture, then
    /// `cuGraphLaunch`: one call per submission instead of one per command). Default on: on an
    /// H200, 100 empty dispatches replayed as a graph took 130 µs from submission to completion
    /// against 393 µs enqueued one by one (`cuda_replay_100`). A captured host-to-device update
    /// keeps a pinned copy as long as its graph (see [`CudaApi::enable_graphs`]).
    pub graphs: bool,
    /// With completion threads: how long a queue's thread polls (for the next submission,
    /// then `cuEventQuery` on its event) before it sleeps in the driver. Default zero (never
    /// polls; an idle device uses no CPU). See
    /// [`halcyon_stream::StreamDeviceOptions::completion_spin`] for the trade.
    pub completion_spin: Duration,
    /// Bytes of freed stream-ordered (`alloca`) memory the device's memory pool keeps for reuse
    /// (see [`CudaApi::set_pool_release_threshold`]). Default `u64::MAX`: all of it, given back
    /// only when a plain allocation runs out of memory.
    pub pool_release_threshold: u64,
}

impl Default for CudaDeviceOptions {
    fn default() -> Self {
        CudaDeviceOptions {
            queue_count: 2,
            completion: CompletionStrategy::CompletionThread,
            probe_interval: Duration::from_millis(10),
            graphs: true,
            completion_spin: Duration::ZERO,
            pool_release_threshold: u64::MAX,
        }
    }
}

/// Creates device `cuda://index` with the default [`CudaDeviceOptions`].
pub fn create_device(index: u32) -> Result<halcyon::Device> {
    create_device_with(index, CudaDeviceOptions::default())
}

/// Creates device `cuda://index`: `Unavailable` without a usable driver or device, `NotFound`
/// for an index beyond the devices there are.
pub fn create_device_with(index: u32, options: CudaDeviceOptions) -> Result<halcyon::Device> {
    let probe = probe::probe()?;
    let mut api = CudaApi::new(probe, index)?;
    if options.graphs {
        api.enable_graphs();
    }
    api.set_pool_release_threshold(options.pool_release_threshold)?;
    halcyon_stream::create_device(
        api,
        StreamDeviceOptions {
            index,
            queue_count: options.queue_count,
            completion: options.completion,
            probe_interval: options.probe_interval,
            completion_spin: options.completion_spin,
        },
    )
}

/// The CUDA driver, for a [`DriverRegistry`].
#[derive(Clone, Debug, Default)]
pub struct CudaDriver;

impl Driver for CudaDriver {
    fn info(&self) -> DriverInfo {
        let driver = match probe::probe() {
            Ok(p) => format!(
                "NVIDIA driver CUDA {} via {}{}",
                probe::version_string(p.driver_version()),
                p.soname(),
                if p.supports(probe::PARAM_INFO_VERSION) {
                    ""
                } else {
                    " (before CUDA 12.4: kernel signatures are not checked at load)"
                }
            ),
            Err(e) => e.message().to_string(),
        };
        DriverInfo {
            id: DRIVER_ID.into(),
            name: "CUDA".into(),
            full_name: format!(
                "halcyon-cuda {} (cudarc 0.19, CUDA {} bindings, driver CUDA {}+; {driver})",
                env!("CARGO_PKG_VERSION"),
                probe::version_string(probe::BINDINGS_VERSION),
                probe::version_string(probe::MIN_DRIVER_VERSION)
            ),
        }
    }

    fn enumerate_devices(&self) -> Result<Vec<DeviceEntry>> {
        let probe = probe::probe()?;
        let count = device_count(probe)?;
        (0..count)
            .map(|i| {
                Ok(DeviceEntry {
                    index: i as u32,
                    uri: format!("{DRIVER_ID}://{i}"),
                    name: describe_device(probe, i)?,
                })
            })
            .collect()
    }

    fn create_device(&self, index: u32) -> Result<halcyon::Device> {
        create_device(index)
    }
}

/// Registers the CUDA driver in `registry`.
pub fn register(registry: &DriverRegistry) -> Result<()> {
    registry.register(Arc::new(CudaDriver))
}
