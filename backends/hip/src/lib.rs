//! # halcyon-hip
//!
//! halcyon's HIP (AMD ROCm) backend: the generic stream device
//! ([`halcyon_stream::StreamDevice`]) over [`HipStreamApi`], the HIP runtime as a
//! [`halcyon_stream::StreamApi`] translation table (its docs have the "core vocabulary → HIP
//! call" table). The runtime, `libamdhip64` ([`sys`]), and hiprtc ([`rtc`]) are opened at run
//! time with [`libloading`]: nothing from ROCm is needed to build this crate. Devices are
//! `hip://N` ([`HipDriver`] for a [`DriverRegistry`]; [`HipDriver::create_device_with`] takes
//! [`HipDeviceOptions`]):
//!
//! ```no_run
//! let registry = halcyon::DriverRegistry::new();
//! halcyon_hip::register(&registry)?;
//! match registry.enumerate_devices("hip") {
//!     Ok(devices) => devices.iter().for_each(|d| println!("{}: {}", d.uri, d.name)),
//!     Err(e) => println!("no HIP devices: {e}"),
//! }
//! # Ok::<(), halcyon::Error>(())
//! ```
//!
//! # Formats and safety
//!
//! One executable format, `"hip-hsaco"` ([`HipModule`], see [`module`]): an AMDGPU code object
//! or offload bundle plus entry-point metadata. HIP reads code objects unchecked, so one from a
//! file enters through the `unsafe` [`HipModule::from_code_object_unchecked`], and its byte
//! form ([`HipModule::to_packed`]) loads from unchecked specs only; hiprtc output, which
//! halcyon compiled itself, enters safely ([`rtc::HipRtc::compile_module`]).
//!
//! # Ordering
//!
//! Nothing beyond the core's rules. A kernel fails its dispatch by the status-word convention
//! (docs/ARCHITECTURE.md); its argument metadata says whether it takes the word ([`module`]).
//!
//! # Errors
//!
//! With no runtime or no AMD GPU, enumeration and creation return [`StatusCode::Unavailable`]
//! saying what is missing, with the HIP error named ([`result`]). There are no sticky faults
//! to report: on ROCm a device fault (an access violation, a trap) aborts the whole process,
//! so the stream layer's fault probe is defensive code here (see [`api`], "Device faults").
//!
//! # Testing without a GPU
//!
//! `tests/fake_runtime*.rs` run the conformance suite and the runtime tests on the fake GPU of
//! `testing/fake-gpu`, opened by path as the HIP runtime, which aborts on any breach of a HIP
//! rule halcyon relies on. Without a runtime or a GPU the GPU tests skip (`Unavailable`).

#![warn(missing_docs)]

pub mod api;
pub mod code_object;
mod gather;
pub mod module;
pub mod rccl;
pub mod result;
pub mod rtc;
pub mod sys;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use halcyon::{DeviceEntry, Driver, DriverInfo, DriverRegistry, Error, Result, StatusCode};
use halcyon_stream::{CompletionStrategy, StreamDeviceOptions};

pub use api::{HipStreamApi, HostVisibleMemory};
pub use module::{HipModule, FORMAT_HSACO};
use result::Hip;

/// The driver id and URI scheme: `hip`, `hip://0`.
pub const DRIVER_ID: &str = "hip";

/// Formats a HIP version number (`major * 10_000_000 + minor * 100_000 + patch`), for example
/// `50221153` as `5.2.21153`.
///
/// ```
/// assert_eq!(halcyon_hip::version_string(50221153), "5.2.21153");
/// ```
pub fn version_string(version: i32) -> String {
    format!(
        "{}.{}.{}",
        version / 10_000_000,
        (version / 100_000) % 100,
        version % 100_000
    )
}

/// The HIP driver, for a [`DriverRegistry`].
///
/// The runtime is loaded on first use and kept for the life of the process.
#[derive(Debug)]
pub struct HipDriver {
    sonames: Option<Vec<String>>,
    hip: OnceLock<Result<Hip>>,
}

impl Default for HipDriver {
    fn default() -> Self {
        HipDriver::new()
    }
}

impl HipDriver {
    /// A driver loading [`sys::DEFAULT_SONAMES`].
    pub fn new() -> Self {
        HipDriver {
            sonames: None,
            hip: OnceLock::new(),
        }
    }

    /// A driver loading the first of `sonames` that opens (names or paths, for example
    /// `/opt/rocm/lib/libamdhip64.so`), on first use.
    ///
    /// # Safety
    /// As for [`Hip::load`]: each of `sonames` that opens must be a HIP runtime.
    pub unsafe fn with_sonames<S: Into<String>>(sonames: impl IntoIterator<Item = S>) -> Self {
        HipDriver {
            sonames: Some(sonames.into_iter().map(Into::into).collect()),
            hip: OnceLock::new(),
        }
    }

    /// A driver over a runtime already loaded (for example with [`Hip::load_without`]).
    pub fn with_hip(hip: Hip) -> Self {
        HipDriver {
            sonames: None,
            hip: OnceLock::from(Ok(hip)),
        }
    }

    /// The loaded runtime; `Unavailable` naming every soname tried when none opens.
    pub fn hip(&self) -> Result<Hip> {
        self.hip
            .get_or_init(|| match &self.sonames {
                None => Hip::load_default(),
                Some(names) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    // SAFETY: `with_sonames`'s contract, which its caller took on.
                    unsafe { Hip::load(&names) }
                }
            })
            .clone()
    }

    /// Initialises HIP and returns the device count; `Unavailable` naming the HIP errors when
    /// there is no usable device.
    fn devices(&self) -> Result<(Hip, i32)> {
        let hip = self.hip()?;
        let init = hip.init();
        let count = hip.device_count();
        if let (Ok(()), Ok(n)) = (&init, &count) {
            if *n > 0 {
                return Ok((hip, *n));
            }
        }
        let init = match init {
            Ok(()) => "hipInit(0) succeeded".to_string(),
            Err(e) => e.message().to_string(),
        };
        let count = match count {
            Ok(n) => format!("hipGetDeviceCount reports {n} devices"),
            Err(e) => format!(
                "hipGetDeviceCount reports 0 devices ({})",
                e.message().trim_start_matches("hipGetDeviceCount failed: ")
            ),
        };
        Err(Error::new(
            StatusCode::Unavailable,
            format!(
                "no usable AMD GPU: {} is loaded, but {count} and {init}; {}",
                hip.describe(),
                kfd_hint()
            ),
        ))
    }
}

/// What `/dev/kfd` (the ROCm kernel interface) says about why no GPU was found.
fn kfd_hint() -> &'static str {
    if std::path::Path::new("/dev/kfd").exists() {
        "/dev/kfd exists: check that this user may open it and /dev/dri/renderD* (groups render, video)"
    } else {
        "/dev/kfd is absent: no amdgpu kernel driver or no AMD GPU"
    }
}

/// Describes device `device` of `hip`: name, gfx version, compute units, memory.
pub(crate) fn describe_device(hip: Hip, ordinal: i32) -> Result<String> {
    let device = hip.device_get(ordinal)?;
    let mut name = hip.device_name(device)?;
    let attr = |a| hip.device_attribute(a, device).ok();
    let mut details = Vec::new();
    if let (Some(major), Some(minor)) = (
        attr(sys::hipDeviceAttributeComputeCapabilityMajor),
        attr(sys::hipDeviceAttributeComputeCapabilityMinor),
    ) {
        details.push(format!("compute {major}.{minor}"));
    }
    if let Some(cus) = attr(sys::hipDeviceAttributeMultiprocessorCount) {
        details.push(format!("{cus} CUs"));
    }
    if let Ok(bytes) = hip.device_total_mem(device) {
        details.push(format!("{} MiB", bytes >> 20));
    }
    if !details.is_empty() {
        name = format!("{name} ({})", details.join(", "));
    }
    Ok(name)
}

impl Driver for HipDriver {
    fn info(&self) -> DriverInfo {
        let runtime = match self.hip() {
            Ok(hip) => hip.describe(),
            Err(e) => format!("runtime not loaded: {}", e.message()),
        };
        DriverInfo::new(
            DRIVER_ID,
            "HIP",
            format!("halcyon-hip {} ({runtime})", env!("CARGO_PKG_VERSION")),
        )
    }

    fn enumerate_devices(&self) -> Result<Vec<DeviceEntry>> {
        let (hip, count) = self.devices()?;
        (0..count)
            .map(|i| {
                Ok(DeviceEntry::new(
                    i as u32,
                    format!("{DRIVER_ID}://{i}"),
                    describe_device(hip, i)?,
                ))
            })
            .collect()
    }

    fn create_device(&self, index: u32) -> Result<halcyon::Device> {
        self.create_device_with(index, &HipDeviceOptions::default())
    }
}

/// How [`HipDriver::create_device_with`] creates a device.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HipDeviceOptions {
    /// Queues, each with its own HIP stream (at least 1).
    pub queue_count: u32,
    /// How completions are observed. Default [`CompletionStrategy::CompletionThread`]: a
    /// thread per queue blocks in `hipEventSynchronize` on each submission's blocking-sync event
    /// (a private HIP event recorded beside the one other threads query and make streams wait
    /// on, since HIP holds an event's lock for the whole synchronisation: see [`api`],
    /// "Events"). IREE measured HIP host callbacks at about 6 µs (`hipLaunchHostFunc`) and
    /// stream callbacks (`hipStreamAddCallback`, all HIP 5.2 has) at up to about 100 µs,
    /// against about 2 µs for an event record; a stream callback also blocks the stream it is
    /// on until it returns. [`CompletionStrategy::HostCallback`] (IREE's design, callbacks on a
    /// dedicated stream) is available for comparison, and so is
    /// [`CompletionStrategy::FlagWrite`] (`hipStreamWriteValue32` into pinned words read by one
    /// scanner thread; see [`HipDeviceOptions::completion_poll`]).
    pub completion: CompletionStrategy,
    /// With host callbacks: how often, at most, the fault probe queries the events in flight
    /// while the device is busy (completion threads need no probe). Defensive on ROCm, which
    /// aborts the process on a device fault (see [`api`], "Device faults").
    pub probe_interval: Duration,
    /// The allocator of host-visible device-local buffers (`HOST_VISIBLE | DEVICE_LOCAL`);
    /// host-visible buffers without `DEVICE_LOCAL` (`BufferParams::HOST`) are pinned host
    /// memory (`hipHostMalloc`) whatever this says.
    pub host_visible_memory: HostVisibleMemory,
    /// With completion threads: how long a queue's thread polls (for the next submission,
    /// then `hipEventQuery` on its event) before it sleeps in the driver; with flag-write
    /// completion, how long the scanner reads the words after its last progress. Default zero
    /// (never polls; an idle device uses no CPU). See
    /// [`halcyon_stream::StreamDeviceOptions::completion_spin`] for the trade.
    pub completion_spin: Duration,
    /// With flag-write completion: how often the scanner reads the words while work is pending
    /// beyond its spin. Default 50 µs. See
    /// [`halcyon_stream::StreamDeviceOptions::completion_poll`].
    pub completion_poll: Duration,
    /// Bytes of freed stream-ordered (`alloca`) memory the device's own memory pool keeps for
    /// reuse (see [`HipStreamApi::set_pool_release_threshold`]). Default `u64::MAX`: as much
    /// as the runtime lets it keep (ROCm 6.2+ still gives everything back once the pool's free
    /// memory outgrows its memory in use), given back when a plain allocation runs out of
    /// memory. Ignored where the runtime has no pool calls (before ROCm 5.2) or the device no
    /// memory pools.
    pub pool_release_threshold: u64,
    /// With completion threads on a runtime older than ROCm 6.3: make threads that wait for
    /// the device sleep ([`HipStreamApi::schedule_blocking_sync`]). Those runtimes ignore the
    /// `hipEventBlockingSync` flag of the event a completion thread waits on, and poll in
    /// `hipEventSynchronize` unless the device's scheduling says otherwise, so without this
    /// each queue's completion thread keeps a CPU core busy while work is in flight. The
    /// setting is the device's, for the whole process (other HIP code's synchronisations on
    /// it sleep too, a few microseconds later than polling would see the work done). Default
    /// `true`; `false` leaves the device's scheduling alone. No effect on newer runtimes or
    /// with host callbacks. Best effort: a runtime that refuses it leaves the device polling.
    pub blocking_sync: bool,
    /// How old the reference that places the device's event timestamps on the host clock
    /// (for profiled operations' device times) may get before a profiled operation asks for a
    /// new one. Default 1 s. See
    /// [`halcyon_stream::StreamDeviceOptions::timestamp_recalibration`].
    pub timestamp_recalibration: Duration,
    /// The GPU architecture (`gfx90a`, `gfx942:sramecc+:xnack-`) halcyon's own kernels (the
    /// gather kernel of `Queue::copy_view`) are compiled for with hiprtc. Default `None`: the
    /// architecture the kernel driver (KFD) reports for this machine's GPUs, where they all
    /// have one ([`rtc::kfd_offload_arch`]). With none, or GPUs of several, hiprtc chooses: a
    /// runtime that contains it (HIP 5.x, 6.x) compiles for the GPU current on the calling
    /// thread, and a stand-alone one refuses. A kernel that does not compile, or was compiled
    /// for another GPU and does not load, leaves the device gathering strided copies on the
    /// host (`Device::gathers_on_device` says so); naming the device's architecture here
    /// avoids that.
    pub offload_arch: Option<String>,
}

impl HipDeviceOptions {
    /// Sets [`HipDeviceOptions::queue_count`].
    pub fn with_queue_count(mut self, queue_count: u32) -> Self {
        self.queue_count = queue_count;
        self
    }

    /// Sets [`HipDeviceOptions::completion`].
    pub fn with_completion(mut self, completion: CompletionStrategy) -> Self {
        self.completion = completion;
        self
    }

    /// Sets [`HipDeviceOptions::probe_interval`].
    pub fn with_probe_interval(mut self, probe_interval: Duration) -> Self {
        self.probe_interval = probe_interval;
        self
    }

    /// Sets [`HipDeviceOptions::host_visible_memory`].
    pub fn with_host_visible_memory(mut self, host_visible_memory: HostVisibleMemory) -> Self {
        self.host_visible_memory = host_visible_memory;
        self
    }

    /// Sets [`HipDeviceOptions::completion_spin`].
    pub fn with_completion_spin(mut self, completion_spin: Duration) -> Self {
        self.completion_spin = completion_spin;
        self
    }

    /// Sets [`HipDeviceOptions::completion_poll`].
    pub fn with_completion_poll(mut self, completion_poll: Duration) -> Self {
        self.completion_poll = completion_poll;
        self
    }

    /// Sets [`HipDeviceOptions::pool_release_threshold`].
    pub fn with_pool_release_threshold(mut self, pool_release_threshold: u64) -> Self {
        self.pool_release_threshold = pool_release_threshold;
        self
    }

    /// Sets [`HipDeviceOptions::blocking_sync`].
    pub fn with_blocking_sync(mut self, blocking_sync: bool) -> Self {
        self.blocking_sync = blocking_sync;
        self
    }

    /// Sets [`HipDeviceOptions::timestamp_recalibration`].
    pub fn with_timestamp_recalibration(mut self, interval: Duration) -> Self {
        self.timestamp_recalibration = interval;
        self
    }

    /// Sets [`HipDeviceOptions::offload_arch`].
    pub fn with_offload_arch(mut self, arch: impl Into<String>) -> Self {
        self.offload_arch = Some(arch.into());
        self
    }
}

/// The first HIP runtime whose `hipEventSynchronize` honours an event's
/// `hipEventBlockingSync` flag (ROCm 6.3).
const EVENT_BLOCKING_SYNC_VERSION: i32 = 60_300_000;

impl Default for HipDeviceOptions {
    fn default() -> Self {
        HipDeviceOptions {
            queue_count: 1,
            completion: CompletionStrategy::CompletionThread,
            probe_interval: Duration::from_millis(10),
            host_visible_memory: HostVisibleMemory::Auto,
            completion_spin: Duration::ZERO,
            completion_poll: Duration::from_micros(50),
            pool_release_threshold: u64::MAX,
            blocking_sync: true,
            timestamp_recalibration: Duration::from_secs(1),
            offload_arch: None,
        }
    }
}

impl HipDriver {
    /// Creates device `hip://index` with `options`: a [`HipStreamApi`] wrapped by halcyon's
    /// stream device. `Unavailable` naming the HIP errors when there is no usable GPU,
    /// `NotFound` for an index past the device count.
    pub fn create_device_with(
        &self,
        index: u32,
        options: &HipDeviceOptions,
    ) -> Result<halcyon::Device> {
        let (hip, count) = self.devices()?;
        if i64::from(index) >= i64::from(count) {
            return Err(Error::new(
                StatusCode::NotFound,
                format!("{DRIVER_ID}://{index} does not exist: hipGetDeviceCount reports {count} devices"),
            ));
        }
        let api = HipStreamApi::new(hip, index as i32, options.host_visible_memory)?
            .with_offload_arch(options.offload_arch.clone());
        api.set_pool_release_threshold(options.pool_release_threshold)?;
        if options.blocking_sync
            && options.completion == CompletionStrategy::CompletionThread
            && hip
                .runtime_version()
                .is_ok_and(|v| v < EVENT_BLOCKING_SYNC_VERSION)
        {
            // Best effort: without it the device works, and its completion threads poll.
            let _ = api.schedule_blocking_sync();
        }
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
}

/// Registers the HIP driver in `registry`.
pub fn register(registry: &DriverRegistry) -> Result<()> {
    registry.register(Arc::new(HipDriver::new()))
}
