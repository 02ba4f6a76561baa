//! # halcyon-cuda
//!
//! halcyon's CUDA backend: the generic stream device ([`halcyon_stream::StreamDevice`]) over
//! [`CudaApi`], the CUDA driver API as a [`halcyon_stream::StreamApi`] translation table (one
//! stream per queue, timepoints `(value, CUevent)`, device-side waits with `cuStreamWaitEvent`;
//! its docs have the call-by-call table). Only [cudarc]'s declarations are used: libcuda (CUDA
//! 12.0, driver R525, or newer: see [`probe`]) and, for [`CudaModule::compile`], libnvrtc are
//! opened at run time, so nothing from CUDA is needed to build it. Devices are `cuda://N`
//! ([`CudaDriver`] for a [`DriverRegistry`], [`create_device`], [`create_device_with`]);
//! [`create_device`] has a complete example.
//!
//! # Formats and safety
//!
//! One executable format, `"cuda"` ([`CudaModule`], see [`module`]). PTX enters safely
//! ([`CudaModule::ptx`], [`CudaModule::compile`], [`CudaModule::from_packed`]): the driver's JIT
//! reports bad PTX as an error. A cubin or fatbin is read by the driver unchecked, so it enters
//! only through `unsafe` ([`CudaModule::binary`], [`CudaModule::from_packed_unchecked`],
//! [`halcyon::PackedExecutable::spec_unchecked`]), whose caller vouches for the image and its
//! entry-point metadata.
//!
//! # Ordering
//!
//! Nothing beyond the core's rules. A kernel fails its dispatch by the status-word convention
//! (docs/ARCHITECTURE.md); whether it takes the word is read from its PTX `.param`s or
//! `cuFuncGetParamInfo` ([`module`]).
//!
//! # Errors
//!
//! With no NVIDIA driver, one older than CUDA 12.0, or no device, enumeration and creation
//! return [`StatusCode::Unavailable`] saying which, and never panic: cudarc's loader (which
//! panics) is never used, no driver function is called before [`probe::probe`] succeeds, and
//! every function that calls the driver takes its [`probe::Probe`] as proof (the [`sys`] calls
//! fail without one). NVRTC is guarded the same way ([`nvrtc::probe`]). Nothing relies on
//! `catch_unwind`, so this holds under `panic = "abort"` too. A device fault (`__trap()`, an
//! illegal address) is sticky and kills the context; the stream layer's fault probe turns it
//! into errors on the affected fences (`Aborted`; [`result`] maps every CUDA error).
//!
//! # Testing without a GPU
//!
//! `tests/fake_driver*.rs` run the conformance suite and the translation-table tests on the
//! fake driver of `testing/fake-gpu`, a `libcuda.so.1` that runs the driver API on host threads
//! and aborts on any breach of CUDA's contract. On a machine without libcuda or a device the GPU
//! tests skip (`Unavailable`).

#![warn(missing_docs)]

pub mod api;
mod callback;
mod capture;
mod gather;
pub mod module;
pub mod nccl;
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
#[non_exhaustive]
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
    /// [`CompletionStrategy::FlagWrite`] has each stream write a word of pinned memory with
    /// `cuStreamWriteValue32` after each submission and one scanner thread per device read the
    /// words (spinning [`CudaDeviceOptions::completion_spin`] after its last progress, then
    /// polling every [`CudaDeviceOptions::completion_poll`]): no driver wake-up on the
    /// completion path, for a thread that polls while the device is busy.
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
    /// then `cuEventQuery` on its event) before it sleeps in the driver; with flag-write
    /// completion, how long the scanner reads the words after its last progress. Default zero
    /// (never polls; an idle device uses no CPU). See
    /// [`halcyon_stream::StreamDeviceOptions::completion_spin`] for the trade.
    pub completion_spin: Duration,
    /// With flag-write completion: how often the scanner reads the words while work is pending
    /// beyond its spin. Default 50 µs. See
    /// [`halcyon_stream::StreamDeviceOptions::completion_poll`].
    pub completion_poll: Duration,
    /// Bytes of freed stream-ordered (`alloca`) memory the device's memory pool keeps for reuse
    /// (see [`CudaApi::set_pool_release_threshold`]). Default `u64::MAX`: all of it, given back
    /// only when a plain allocation runs out of memory.
    pub pool_release_threshold: u64,
    /// How old the reference that places the device's event timestamps on the host clock
    /// (for profiled operations' device times) may get before a profiled operation asks for a
    /// new one. Default 1 s. See
    /// [`halcyon_stream::StreamDeviceOptions::timestamp_recalibration`].
    pub timestamp_recalibration: Duration,
}

impl CudaDeviceOptions {
    /// Sets [`CudaDeviceOptions::queue_count`].
    pub fn with_queue_count(mut self, queue_count: u32) -> Self {
        self.queue_count = queue_count;
        self
    }

    /// Sets [`CudaDeviceOptions::completion`].
    pub fn with_completion(mut self, completion: CompletionStrategy) -> Self {
        self.completion = completion;
        self
    }

    /// Sets [`CudaDeviceOptions::probe_interval`].
    pub fn with_probe_interval(mut self, probe_interval: Duration) -> Self {
        self.probe_interval = probe_interval;
        self
    }

    /// Sets [`CudaDeviceOptions::graphs`].
    pub fn with_graphs(mut self, graphs: bool) -> Self {
        self.graphs = graphs;
        self
    }

    /// Sets [`CudaDeviceOptions::completion_spin`].
    pub fn with_completion_spin(mut self, completion_spin: Duration) -> Self {
        self.completion_spin = completion_spin;
        self
    }

    /// Sets [`CudaDeviceOptions::completion_poll`].
    pub fn with_completion_poll(mut self, completion_poll: Duration) -> Self {
        self.completion_poll = completion_poll;
        self
    }

    /// Sets [`CudaDeviceOptions::pool_release_threshold`].
    pub fn with_pool_release_threshold(mut self, pool_release_threshold: u64) -> Self {
        self.pool_release_threshold = pool_release_threshold;
        self
    }

    /// Sets [`CudaDeviceOptions::timestamp_recalibration`].
    pub fn with_timestamp_recalibration(mut self, interval: Duration) -> Self {
        self.timestamp_recalibration = interval;
        self
    }
}

impl Default for CudaDeviceOptions {
    fn default() -> Self {
        CudaDeviceOptions {
            queue_count: 2,
            completion: CompletionStrategy::CompletionThread,
            probe_interval: Duration::from_millis(10),
            graphs: true,
            completion_spin: Duration::ZERO,
            completion_poll: Duration::from_micros(50),
            pool_release_threshold: u64::MAX,
            timestamp_recalibration: Duration::from_secs(1),
        }
    }
}

/// Creates device `cuda://index` with the default [`CudaDeviceOptions`].
///
/// Compiles a kernel with NVRTC, then fills, dispatches and reads back; without a driver, a
/// device or NVRTC it prints why and stops:
///
/// ```
/// use halcyon::{BufferParams, EntryPoint, StatusCode, Timepoints};
/// use halcyon_cuda::CudaModule;
///
/// # fn main() -> halcyon::Result<()> {
/// let skip = |e: &halcyon::Error| e.code() == StatusCode::Unavailable;
/// let device = match halcyon_cuda::create_device(0) {
///     Ok(device) => device,
///     Err(e) if skip(&e) => return Ok(println!("no CUDA device: {e}")),
///     Err(e) => return Err(e),
/// };
/// // CUDA C, compiled to PTX by NVRTC at run time (or ship PTX: `CudaModule::ptx`).
/// let module = CudaModule::compile(
///     r#"extern "C" __global__ void add_one(unsigned int* x, unsigned int n) {
///            unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
///            if (i < n) x[i] += 1;
///        }"#,
///     vec![EntryPoint { name: "add_one".into(), workgroup_size: [64, 1, 1], binding_count: 1, constant_count: 1 }],
///     &[],
/// );
/// let module = match module {
///     Ok(module) => module,
///     Err(e) if skip(&e) => return Ok(println!("no NVRTC: {e}")),
///     Err(e) => return Err(e),
/// };
/// let executable = match device.load_executable(&module.spec()) {
///     Ok(executable) => executable,
///     // An NVRTC newer than the driver writes PTX the driver cannot JIT.
///     Err(e) if e.code() == StatusCode::FailedPrecondition => return Ok(println!("{e}")),
///     Err(e) => return Err(e),
/// };
/// let add_one = executable.kernel("add_one")?;
/// let buffer = device.allocator().allocate(1024 * 4, BufferParams::DEVICE)?;
/// let queue = device.queue(0)?;
/// let timeline = queue.timeline()?;
/// futures::executor::block_on(async {
///     queue.fill(timeline.next(), 0u8, &buffer.whole()).await?;
///     queue
///         .dispatch(timeline.next(), &add_one.launch([16, 1, 1]).constant(1024u32).binding(buffer.whole()))
///         .await?;
///     let words = queue.read::<u32>(timeline.next(), &buffer.whole()).await?;
///     assert!(words.iter().all(|&word| word == 1));
///     Ok(())
/// })
/// # }
/// ```
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
        StreamDeviceOptions::default()
            .with_index(index)
            .with_queue_count(options.queue_count)
            .with_completion(options.completion)
            .with_probe_interval(options.probe_interval)
            .with_completion_spin(options.completion_spin)
            .with_completion_poll(options.completion_poll)
            .with_timestamp_recalibration(options.timestamp_recalibration),
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
        DriverInfo::new(
            DRIVER_ID,
            "CUDA",
            format!(
                "halcyon-cuda {} (cudarc 0.19, CUDA {} bindings, driver CUDA {}+; {driver})",
                env!("CARGO_PKG_VERSION"),
                probe::version_string(probe::BINDINGS_VERSION),
                probe::version_string(probe::MIN_DRIVER_VERSION)
            ),
        )
    }

    fn enumerate_devices(&self) -> Result<Vec<DeviceEntry>> {
        let probe = probe::probe()?;
        let count = device_count(probe)?;
        (0..count)
            .map(|i| {
                Ok(DeviceEntry::new(
                    i as u32,
                    format!("{DRIVER_ID}://{i}"),
                    describe_device(probe, i)?,
                ))
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
