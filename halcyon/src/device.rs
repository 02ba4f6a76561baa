//! Devices: the handle users hold, and the backend trait (the SPI) each backend implements.
//!
//! A [`Device`] is created by a driver (see [`crate::driver`]). It exposes its
//! [`DeviceInfo`], integer facts through [`Device::query`], its [`Allocator`], its queues,
//! semaphore creation (backend-native where the backend has one), and executable loading (with a
//! content-keyed cache). Backends implement [`DeviceBackend`]; the core never names a vendor type.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::allocator::Allocator;
use crate::buffer::{BufferMemory, BufferParams};
use crate::channel::Channel;
use crate::command_buffer::{Command, Recording};
use crate::error::{Error, Result, StatusCode};
use crate::executable::{Executable, ExecutableBackend, ExecutableCache, ExecutableSpec};
use crate::fence::Fence;
use crate::profile::Profiler;
use crate::queue::Queue;
use crate::semaphore::Semaphore;

bitflags::bitflags! {
    /// Optional device capabilities (IREE's device feature bits).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct DeviceFeatures: u32 {
        /// The device supports debugging executables.
        const DEBUGGING = 1 << 0;
        /// The device can report executable coverage.
        const COVERAGE = 1 << 1;
        /// The device reports its own start and end of each profiled queue operation
        /// ([`crate::profile::Operation::device_ns`]); without it, profiles hold host times only.
        const PROFILING = 1 << 2;
    }
}

bitflags::bitflags! {
    /// What a queue can run. Every queue runs host calls, barriers and `alloca`/`dealloca`.
    ///
    /// GPUs often have queues that only move memory (Vulkan's dedicated transfer families, a
    /// copy engine): those have [`QueueCapabilities::TRANSFER`] alone. Pick queues by what they
    /// must run with [`Device::queue_affinity`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct QueueCapabilities: u32 {
        /// Kernel dispatches (`dispatch`, and `execute` of command buffers that dispatch).
        const DISPATCH = 1 << 0;
        /// Fill, update, copy, read and write.
        const TRANSFER = 1 << 1;
    }
}

/// What a device is.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// Its URI, for example `cpu://0`.
    pub id: String,
    /// A human-readable name.
    pub name: String,
    /// The driver id, for example `cpu`.
    pub driver: String,
    /// Optional capabilities.
    pub features: DeviceFeatures,
}

impl DeviceInfo {
    /// A device's identity; `features` default.
    pub fn new(id: impl Into<String>, name: impl Into<String>, driver: impl Into<String>) -> Self {
        DeviceInfo {
            id: id.into(),
            name: name.into(),
            driver: driver.into(),
            features: Default::default(),
        }
    }

    /// Sets [`DeviceInfo::features`].
    pub fn with_features(mut self, features: DeviceFeatures) -> Self {
        self.features = features;
        self
    }
}

/// A query key whose answer is a `T` ([`Device::query`]). Backends define keys of their own
/// (`halcyon_stream::keys`, ...); [`Device::query_raw`] asks by name.
pub struct Key<T> {
    name: &'static str,
    _answer: PhantomData<fn() -> T>,
}

impl<T> Key<T> {
    /// A key named `name` whose answer is a `T`.
    pub const fn new(name: &'static str) -> Self {
        Key {
            name,
            _answer: PhantomData,
        }
    }

    /// Its name, as [`DeviceBackend::query`] receives it.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<T> Clone for Key<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Key<T> {}

impl<T> fmt::Debug for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?}: {})", self.name, std::any::type_name::<T>())
    }
}

/// A type a query can answer in: the backend's `i64` answer, checked to fit.
pub trait QueryValue: Sized {
    /// The answer as `Self`, or `None` if it does not fit.
    fn from_answer(answer: i64) -> Option<Self>;
}

impl QueryValue for i64 {
    fn from_answer(answer: i64) -> Option<Self> {
        Some(answer)
    }
}

impl QueryValue for u64 {
    fn from_answer(answer: i64) -> Option<Self> {
        u64::try_from(answer).ok()
    }
}

impl QueryValue for u32 {
    fn from_answer(answer: i64) -> Option<Self> {
        u32::try_from(answer).ok()
    }
}

impl QueryValue for bool {
    fn from_answer(answer: i64) -> Option<Self> {
        match answer {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

/// Typed query keys every device answers ([`Device::query`]; backends may answer more, see
/// their crates' `keys`). Each key names the type of its answer.
pub mod keys {
    use super::Key;

    /// How many queues the device has.
    pub const QUEUE_COUNT: Key<u32> = Key::new(names::QUEUE_COUNT);
    /// How many workgroups (or threads) can run at once.
    pub const CONCURRENCY: Key<u32> = Key::new(names::CONCURRENCY);
    /// Minimum alignment of buffer offsets for dispatch bindings, in bytes.
    pub const BINDING_ALIGNMENT: Key<u64> = Key::new(names::BINDING_ALIGNMENT);
    /// The most workgroups a dispatch may have in x (Vulkan's `maxComputeWorkGroupCount[0]`,
    /// CUDA's and HIP's grid limit); a device that does not answer has no limit below
    /// `u32::MAX`. Dispatches beyond it are refused at submission.
    pub const MAX_WORKGROUP_COUNT_X: Key<u32> = Key::new(names::MAX_WORKGROUP_COUNT_X);
    /// As [`MAX_WORKGROUP_COUNT_X`], in y.
    pub const MAX_WORKGROUP_COUNT_Y: Key<u32> = Key::new(names::MAX_WORKGROUP_COUNT_Y);
    /// As [`MAX_WORKGROUP_COUNT_X`], in z.
    pub const MAX_WORKGROUP_COUNT_Z: Key<u32> = Key::new(names::MAX_WORKGROUP_COUNT_Z);
    /// The most bytes one dispatch binding may cover (Vulkan's `maxStorageBufferRange`); a
    /// device that does not answer has no limit. Dispatches beyond it are refused at
    /// submission.
    pub const MAX_BINDING_RANGE: Key<u64> = Key::new(names::MAX_BINDING_RANGE);
    /// The memory the device's buffers draw on, in bytes: device-local heaps on a GPU, the
    /// machine's physical memory on the CPU device. Not answered where the backend cannot
    /// tell.
    pub const MEMORY_BYTES: Key<u64> = Key::new(names::MEMORY_BYTES);
    /// Queue actions parked in the pending-action executor now, waiting for their waits, over
    /// all the device's queues.
    pub const PENDING_ACTIONS: Key<u64> = Key::new(names::PENDING_ACTIONS);
    /// Times the device's completion reactor woke from sleep since the device was created.
    pub const REACTOR_WAKEUPS: Key<u64> = Key::new(names::REACTOR_WAKEUPS);
    /// Command buffers replayed as captured graphs (CUDA and HIP graphs) since the device was
    /// created; not answered by devices without graphs.
    pub const GRAPH_REPLAYS: Key<u64> = Key::new(names::GRAPH_REPLAYS);

    /// The keys' names, as backends match them in [`DeviceBackend::query`](super::DeviceBackend::query).
    pub mod names {
        /// The name of [`QUEUE_COUNT`](super::QUEUE_COUNT).
        pub const QUEUE_COUNT: &str = "device.queue_count";
        /// The name of [`CONCURRENCY`](super::CONCURRENCY).
        pub const CONCURRENCY: &str = "device.concurrency";
        /// The name of [`BINDING_ALIGNMENT`](super::BINDING_ALIGNMENT).
        pub const BINDING_ALIGNMENT: &str = "buffer.binding_alignment";
        /// The name of [`MAX_WORKGROUP_COUNT_X`](super::MAX_WORKGROUP_COUNT_X).
        pub const MAX_WORKGROUP_COUNT_X: &str = "dispatch.max_workgroup_count.x";
        /// The name of [`MAX_WORKGROUP_COUNT_Y`](super::MAX_WORKGROUP_COUNT_Y).
        pub const MAX_WORKGROUP_COUNT_Y: &str = "dispatch.max_workgroup_count.y";
        /// The name of [`MAX_WORKGROUP_COUNT_Z`](super::MAX_WORKGROUP_COUNT_Z).
        pub const MAX_WORKGROUP_COUNT_Z: &str = "dispatch.max_workgroup_count.z";
        /// The name of [`MEMORY_BYTES`](super::MEMORY_BYTES).
        pub const MEMORY_BYTES: &str = "device.memory_bytes";
        /// The name of [`MAX_BINDING_RANGE`](super::MAX_BINDING_RANGE).
        pub const MAX_BINDING_RANGE: &str = "dispatch.max_binding_range";
        /// The name of [`PENDING_ACTIONS`](super::PENDING_ACTIONS).
        pub const PENDING_ACTIONS: &str = "queue.pending_actions";
        /// The name of [`REACTOR_WAKEUPS`](super::REACTOR_WAKEUPS).
        pub const REACTOR_WAKEUPS: &str = "reactor.wakeups";
        /// The name of [`GRAPH_REPLAYS`](super::GRAPH_REPLAYS).
        pub const GRAPH_REPLAYS: &str = "queue.graph_replays";
    }
}

/// Work a backend runs once a submission's waits are reached.
pub enum Work {
    /// Resolved commands (a command buffer's, or a single queue operation's).
    Commands {
        /// The commands, every binding resolved to a buffer range.
        commands: Arc<[Command]>,
        /// The reusable command buffer they were resolved from, if any: every submission of
        /// one recording has the same commands but for the buffers its binding table names.
        recording: Option<Recording>,
    },
    /// Copy `source` to host memory and hand the bytes to `sink`.
    Read {
        /// What to read.
        source: crate::buffer::BufferRef,
        /// Receives the bytes (or the failure).
        sink: crate::backend::ReadSink,
    },
    /// Run a closure on the host in queue order.
    HostCall(Box<dyn FnOnce() -> Result<()> + Send>),
    /// Copy `source`, a range of **another device's** buffer, into `target`, a range of this
    /// device's, with the driver's peer DMA ([`crate::Queue::copy_from`]). The core submits it
    /// only to a backend whose [`DeviceBackend::peer_reach`] answered
    /// [`Reach::Direct`](crate::topology::Reach::Direct) for the source's device, with equal
    /// lengths and the usages checked; a backend that never answers so never receives it.
    PeerCopy {
        /// The range read, of another device's buffer.
        source: crate::buffer::BufferRef,
        /// The range written, of this device's buffer.
        target: crate::buffer::BufferRef,
    },
    /// A collective on a channel this device's backend made
    /// ([`DeviceBackend::create_channel`]): hand it to the channel's engine, then call
    /// [`crate::channel::Collective::issued`].
    Collective(crate::channel::Collective),
}

impl fmt::Debug for Work {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Work::Commands { commands, .. } => write!(f, "Commands({} commands)", commands.len()),
            Work::Read { source, .. } => write!(f, "Read({source:?})"),
            Work::HostCall(_) => f.write_str("HostCall(..)"),
            Work::PeerCopy { source, target } => write!(f, "PeerCopy({source:?} -> {target:?})"),
            Work::Collective(c) => write!(f, "Collective({})", c.kind()),
        }
    }
}

/// The entry point name of a backend's gather kernel ([`DeviceBackend::gather_kernel`]).
pub const GATHER_ENTRY_POINT: &str = "halcyon_gather";

/// The backend side of a device: the one trait each backend implements.
///
/// Ordering and failure contract of [`DeviceBackend::submit`]: run `work` once every entry of
/// `wait` is reached (through the core's [`crate::backend::ActionQueue`], or natively), then
/// signal every entry of `signal`; if a wait fails, do not run `work` and fail `signal` with
/// that error; if running fails, fail `signal`. Signal (or fail) the entries in fence order, as
/// [`Fence::signal`] and [`Fence::fail`] do: the first is the core's completion marker, which
/// the buffer mapping checks watch, and it must settle before anyone woken by the others looks. Never block the caller on the device, and keep
/// `work` (and so every resource it references) alive until `signal` is reached or failed.
///
/// It is [`Any`](std::any::Any), so that a backend can recognise another device of its own
/// ([`DeviceBackend::peer_reach`]) by upcasting `&dyn DeviceBackend` to `&dyn Any`.
pub trait DeviceBackend: std::any::Any + Send + Sync + 'static {
    /// Identity and features.
    fn info(&self) -> &DeviceInfo;

    /// An integer fact for the key named `key` (see [`keys::names`]), or `None` if the backend
    /// does not know it.
    fn query(&self, key: &str) -> Option<i64>;

    /// How many queues the device has (at least 1).
    fn queue_count(&self) -> u32;

    /// How long an awaited submission should watch for its completion before sleeping on this
    /// device, by default ([`Device::set_completion_spin`]): worth it where work often completes
    /// within microseconds of being awaited and nothing else needs the awaiting thread's core
    /// meanwhile. Zero (the default) sleeps at once.
    fn completion_spin(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// Waits on the device's own completion primitive, on the awaiting thread, for the
    /// operation on `queue` whose completion semaphore is `done`, for up to `budget`, settling
    /// there whatever completed meanwhile; whether it waited so. An awaited submission with a
    /// spin budget ([`Device::set_completion_spin`]) calls this on its first poll instead of
    /// spinning, where the backend can: the thread then sleeps in the driver (a Vulkan
    /// timeline wait) and, woken by the device, settles the operation itself, with no hop
    /// through the backend's completion thread. Settling here must keep the backend's order
    /// (fence order, one queue's submissions in submission order). The default returns `false`
    /// and the submission spins on the semaphore.
    fn wait_native(&self, queue: u32, done: &Semaphore, budget: std::time::Duration) -> bool {
        let _ = (queue, done, budget);
        false
    }

    /// Allocates `size` bytes of memory matching `params`.
    fn allocate(&self, size: u64, params: &BufferParams) -> Result<Arc<dyn BufferMemory>>;

    /// Memory for a queue `alloca` on `queue`, allocated in that queue's order (a stream-ordered
    /// pool: `cuMemAllocAsync` on the queue's stream), or `None` to let the core's alloca pool
    /// serve it (the default).
    ///
    /// The memory may be handed out before the `alloca`'s waits are reached: it is only used by
    /// work ordered after the `alloca` signals. Releasing it (its last reference dropping, after
    /// the `dealloca` and every submission using it) must return it in queue order too, without
    /// blocking.
    fn allocate_queued(
        &self,
        queue: u32,
        size: u64,
        params: &BufferParams,
    ) -> Option<Result<Arc<dyn BufferMemory>>> {
        let _ = (queue, size, params);
        None
    }

    /// Executable formats [`DeviceBackend::load_executable`] understands.
    fn executable_formats(&self) -> Vec<String>;

    /// Loads an executable in one of [`DeviceBackend::executable_formats`].
    fn load_executable(&self, spec: &ExecutableSpec) -> Result<Box<dyn ExecutableBackend>>;

    /// A kernel that packs a strided view's elements, which the core dispatches for
    /// [`crate::Queue::copy_view`] on a device that runs no [`Command::Gather`] itself
    /// ([`DeviceBackend::gathers`]). `None` by default (the core then gathers on the host).
    ///
    /// Its entry point is named [`GATHER_ENTRY_POINT`], with 64 invocations per workgroup in
    /// x; binding 0 is the source and binding 1 the target, both `u32` words (each binding
    /// starts and ends on a word); its 16 `u32` constants are:
    ///
    /// | constants | meaning |
    /// |---|---|
    /// | 0–3 | the shape, padded to rank 4 with leading 1s |
    /// | 4–7 | the strides, in elements (0 for the padding) |
    /// | 8, 9 | the word of binding 0 where the first element starts, and of binding 1 |
    /// | 10 | the number of elements |
    /// | 11 | the element's size in bytes: 1, 2, or a multiple of 4 |
    /// | 12 | the invocations per row of the grid (`x` workgroups × 64) |
    /// | 13, 14 | the byte within word 8 (of binding 0) and word 9 (of binding 1) where the elements start: 0 for elements of whole words |
    /// | 15 | zero |
    ///
    /// Invocations `i = y · row + x` below the count copy one element each, every element
    /// once (nothing at or past the count): element `e`, where `index` is `e` unravelled
    /// over the shape in row-major order, goes from `(Σ index_k · stride_k)` elements past
    /// the source's start to element `e` of the target. The kernel chooses which `e` each
    /// invocation takes: `i` itself, or any one-to-one map of `0..count` such as tiles of
    /// the last two axes (Vulkan's and HIP's kernels take 8 × 8 tiles where both are
    /// multiples of 8, so that a transpose reads and writes runs of 8). Elements of
    /// 1 or 2 bytes share target words with their neighbours, and the first and last word
    /// with bytes outside the target: the kernel writes only the element's own bytes (byte
    /// stores, or atomic and/or on the word). The core dispatches it for ranks up to 4 (one
    /// launch per index of any leading axes past those) and indices below 2^32.
    fn gather_kernel(&self) -> Option<ExecutableSpec> {
        None
    }

    /// Whether the device runs [`Command::Gather`] (a strided view's elements packed by the
    /// device, [`crate::Queue::copy_view`]); without it the core gathers on the host between
    /// staging copies. `false` by default.
    fn gathers(&self) -> bool {
        false
    }

    /// A channel of this device's collective engine through `provider` (see
    /// [`Device::channel`]): a backend over host memory takes the provider's own
    /// ([`crate::channel::ChannelProvider::host_channel`]), a GPU backend makes one of its
    /// vendor's engine with the id the provider exchanges. `Unimplemented` by default.
    fn create_channel(
        &self,
        provider: &dyn crate::channel::ChannelProvider,
        params: &crate::channel::ChannelParams,
    ) -> Result<Box<dyn crate::channel::ChannelBackend>> {
        let _ = (provider, params);
        Err(Error::new(
            StatusCode::Unimplemented,
            format!(
                "{} has no collective engine; copy its buffers to a device that has one \
                 (Queue::copy_from)",
                self.info().id
            ),
        ))
    }

    /// Creates a semaphore; backends with native timelines return natively backed ones.
    fn create_semaphore(&self, initial_value: u64) -> Result<Semaphore> {
        Ok(Semaphore::new(initial_value))
    }

    /// What queue `queue` can run (every capability unless the backend says otherwise). The
    /// core refuses work a queue cannot run before it reaches [`DeviceBackend::submit`].
    fn queue_capabilities(&self, queue: u32) -> QueueCapabilities {
        let _ = queue;
        QueueCapabilities::all()
    }

    /// How this device's queues reach `source`'s memory, `source` being another device (the
    /// core answers [`Reach::Same`](crate::topology::Reach::Same) itself). A backend that
    /// answers [`Reach::Direct`](crate::topology::Reach::Direct) receives copies from that
    /// device's buffers as [`Work::PeerCopy`] and must run them as one device operation,
    /// ordered by the submission's fences like any other work; it recognises its own kind of
    /// device by upcasting `source` to `&dyn Any` and downcasting. Must be cheap after the first
    /// call for a pair (remember the driver's answer) and change nothing. The default,
    /// [`Reach::Staged`](crate::topology::Reach::Staged), makes every copy between devices go
    /// through host memory.
    fn peer_reach(&self, source: &dyn DeviceBackend) -> crate::topology::Reach {
        let _ = source;
        crate::topology::Reach::Staged
    }

    /// Submits `work` on queue `queue` (see the trait docs for the contract).
    fn submit(&self, queue: u32, wait: Fence, signal: Fence, work: Work);
}

struct Inner {
    backend: Arc<dyn DeviceBackend>,
    allocator: Allocator,
    executables: ExecutableCache,
    /// The device's workgroup-count limits ([`keys::MAX_WORKGROUP_COUNT_X`] ..), read once.
    max_workgroup_count: [u32; 3],
    /// The most bytes a dispatch binding may cover ([`keys::MAX_BINDING_RANGE`]), read once;
    /// `u64::MAX` where the device has no limit.
    max_binding_range: u64,
    profiler: Profiler,
    /// Each queue's label ([`Queue::set_label`]), shared with the profiler.
    queue_labels: Arc<[crate::label::Label]>,
    /// [`Device::completion_spin`], in nanoseconds.
    completion_spin_ns: std::sync::atomic::AtomicU64,
    /// Each queue's recycled completion semaphores.
    completions: Box<[crate::queue::completion::Completions]>,
    /// Staging for copies between devices ([`crate::Queue::copy_from`]).
    host_staging: crate::host_staging::HostStaging,
    /// The backend's gather kernel ([`DeviceBackend::gather_kernel`]), loaded on first use;
    /// `None` if it offers none or it does not load.
    gather: std::sync::OnceLock<Option<crate::Kernel>>,
}

/// A device handle. Cheap to clone. The device lives while any handle to it does ([`Queue`]s
/// hold one), and work it already issued to the hardware completes (and settles its fences)
/// even after the last handle goes. Queue actions still waiting on semaphores when the last
/// handle goes are dropped unissued: their signal fences fail with
/// [`crate::StatusCode::Aborted`] (see [`crate::queue`]), so keep the
/// device alive until what you submitted has been issued.
///
/// A device comes from a backend: `halcyon_cpu::default_device()`, or a
/// [`DriverRegistry`](crate::DriverRegistry) the backends registered their drivers in, by URI.
///
/// ```
/// use halcyon::{BufferParams, DriverRegistry};
///
/// /// Fills 256 bytes with 0xab on the device at `uri` and reads them back.
/// async fn fill_and_read(registry: &DriverRegistry, uri: &str) -> halcyon::Result<Vec<u8>> {
///     let device = registry.create_device(uri)?; // "cpu://0", "vulkan://0", ...
///     let buffer = device.allocator().allocate(256, BufferParams::DEVICE)?;
///     let queue = device.queue(0)?;
///     let timeline = queue.timeline()?; // each operation waits for the one before
///     queue.fill(timeline.next(), 0xabu8, &buffer.whole()).await?;
///     queue.read(timeline.next(), &buffer.whole()).await
/// }
/// ```
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

/// A [`Device`] handle that does not keep it alive ([`Device::downgrade`]).
#[derive(Clone)]
pub(crate) struct WeakDevice(std::sync::Weak<Inner>);

impl WeakDevice {
    /// The device, unless it was dropped.
    pub(crate) fn upgrade(&self) -> Option<Device> {
        self.0.upgrade().map(|inner| Device { inner })
    }
}

impl Device {
    /// Wraps a backend (the SPI; users get devices from a driver registry).
    pub fn from_backend(backend: Arc<dyn DeviceBackend>) -> Device {
        let limit = |key| {
            backend
                .query(key)
                .map_or(u32::MAX, |v| v.clamp(0, i64::from(u32::MAX)) as u32)
        };
        let max_workgroup_count = [
            limit(keys::names::MAX_WORKGROUP_COUNT_X),
            limit(keys::names::MAX_WORKGROUP_COUNT_Y),
            limit(keys::names::MAX_WORKGROUP_COUNT_Z),
        ];
        let max_binding_range = backend
            .query(keys::names::MAX_BINDING_RANGE)
            .map_or(u64::MAX, |v| v.max(0) as u64);
        let info = backend.info();
        let spin = backend.completion_spin();
        let queue_count = backend.queue_count().max(1);
        let queue_labels: Arc<[crate::label::Label]> = (0..queue_count)
            .map(|_| crate::label::Label::default())
            .collect();
        let allocator = Allocator::new(backend.clone());
        let counters = {
            let (backend, allocator) = (backend.clone(), allocator.clone());
            Box::new(move || {
                let stats = allocator.stats();
                let mut counters = vec![
                    ("allocations", stats.allocations),
                    ("bytes_in_use", stats.bytes_in_use),
                    ("peak_bytes_in_use", stats.peak_bytes_in_use),
                ];
                for (name, key) in [
                    ("pending_actions", keys::names::PENDING_ACTIONS),
                    ("reactor_wakeups", keys::names::REACTOR_WAKEUPS),
                    ("graph_replays", keys::names::GRAPH_REPLAYS),
                ] {
                    if let Some(value) = backend.query(key) {
                        counters.push((name, value.max(0) as u64));
                    }
                }
                counters
            })
        };
        let profiler = Profiler::new(&info.id, &info.name, queue_labels.clone(), counters);
        crate::log::event!(
            "halcyon::device",
            INFO,
            device = %info.id,
            name = %info.name,
            queues = queue_labels.len(),
            "device created"
        );
        Device {
            inner: Arc::new(Inner {
                max_workgroup_count,
                max_binding_range,
                profiler,
                queue_labels,
                allocator,
                backend,
                executables: ExecutableCache::default(),
                completion_spin_ns: std::sync::atomic::AtomicU64::new(
                    u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX),
                ),
                completions: (0..queue_count)
                    .map(|_| crate::queue::completion::Completions::new())
                    .collect(),
                host_staging: Default::default(),
                gather: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Identity and features.
    pub fn info(&self) -> &DeviceInfo {
        self.inner.backend.info()
    }

    /// A fact about the device, typed by its key (see [`keys`]). `NotFound` naming the key if
    /// the device does not answer it; `Internal` if the backend's answer does not fit the key's
    /// type (a backend bug).
    ///
    /// ```
    /// use halcyon::device::keys;
    ///
    /// fn describe(device: &halcyon::Device) -> halcyon::Result<String> {
    ///     let queues: u32 = device.query(keys::QUEUE_COUNT)?;
    ///     let memory = device.query(keys::MEMORY_BYTES).map_or("unknown".into(), |b| format!("{b} bytes"));
    ///     Ok(format!("{queues} queues, {memory}"))
    /// }
    /// ```
    pub fn query<T: QueryValue>(&self, key: Key<T>) -> Result<T> {
        let answer = self.query_raw(key.name())?;
        T::from_answer(answer).ok_or_else(|| {
            Error::new(
                StatusCode::Internal,
                format!(
                    "device {} answered query '{}' with {answer}, which is not a {}",
                    self.info().id,
                    key.name(),
                    std::any::type_name::<T>()
                ),
            )
        })
    }

    /// A fact by its name, as the backend answers it (for backend-specific keys built at run
    /// time, such as `vulkan.max_compute_workgroup_count.x`); `NotFound` naming the key if the
    /// device does not answer it. Prefer [`Device::query`] with a typed key.
    pub fn query_raw(&self, name: &str) -> Result<i64> {
        if name == keys::names::QUEUE_COUNT {
            return Ok(i64::from(self.queue_count()));
        }
        self.inner.backend.query(name).ok_or_else(|| {
            Error::new(
                StatusCode::NotFound,
                format!("device {} does not answer query '{name}'", self.info().id),
            )
        })
    }

    /// The most workgroups a dispatch may have in x, y and z on this device (its
    /// [`keys::MAX_WORKGROUP_COUNT_X`] .. answers; `u32::MAX` where it has no limit).
    pub fn max_workgroup_count(&self) -> [u32; 3] {
        self.inner.max_workgroup_count
    }

    /// The most bytes one dispatch binding may cover on this device (its
    /// [`keys::MAX_BINDING_RANGE`] answer; `u64::MAX` where it has no limit).
    pub fn max_binding_range(&self) -> u64 {
        self.inner.max_binding_range
    }

    /// Sets how long an awaited [`Submission`](crate::Submission) of this device watches for
    /// its completion before it sleeps (the default is the backend's: 20 µs on the CPU device's
    /// pool, zero elsewhere until measured on each device): on its first poll, if the operation
    /// has not completed, the future checks it in a loop for up to `budget`, then registers its
    /// waker as usual.
    ///
    /// Waking a sleeping thread costs microseconds (tens on some VMs), so for operations that
    /// complete within the budget the spin turns a sleep and a wake-up into a few loads. **The
    /// spin runs on the thread that polls** (an async executor's thread): each submission
    /// awaited costs that thread at most `budget` of busy waiting, once, whatever the
    /// operation's length; `Duration::ZERO` turns it off. Submissions made before the call
    /// keep the budget they were made with.
    pub fn set_completion_spin(&self, budget: std::time::Duration) {
        let ns = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        self.inner
            .completion_spin_ns
            .store(ns, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long an awaited submission spins before it sleeps ([`Device::set_completion_spin`]).
    pub fn completion_spin(&self) -> std::time::Duration {
        let ns = self
            .inner
            .completion_spin_ns
            .load(std::sync::atomic::Ordering::Relaxed);
        std::time::Duration::from_nanos(ns)
    }

    /// The device's profiler: off until [enabled](Profiler::enable); see
    /// [`crate::profile`].
    pub fn profiler(&self) -> &Profiler {
        &self.inner.profiler
    }

    /// Queue `index`'s recycled completion semaphores.
    pub(crate) fn completions(&self, index: u32) -> Option<&crate::queue::completion::Completions> {
        self.inner.completions.get(index as usize)
    }

    /// Queue `index`'s label slot.
    pub(crate) fn queue_label(&self, index: u32) -> Option<&crate::label::Label> {
        self.inner.queue_labels.get(index as usize)
    }

    /// The device's allocator.
    pub fn allocator(&self) -> &Allocator {
        &self.inner.allocator
    }

    /// The staging this device keeps for copies between devices.
    /// Whether the device packs strided views itself ([`crate::Queue::copy_view`]): its
    /// backend gathers natively or offers a gather kernel that loads. Where not, strided
    /// copies are gathered on the host between staging copies.
    pub fn gathers_on_device(&self) -> bool {
        self.inner.backend.gathers() || self.gather_kernel().is_some()
    }

    /// The backend's gather kernel, loaded once ([`DeviceBackend::gather_kernel`]).
    pub(crate) fn gather_kernel(&self) -> Option<&crate::Kernel> {
        self.inner
            .gather
            .get_or_init(|| {
                let spec = self.inner.backend.gather_kernel()?;
                let loaded = self
                    .load_executable(&spec)
                    .and_then(|e| e.kernel(GATHER_ENTRY_POINT));
                if let Err(error) = &loaded {
                    let id = &self.info().id;
                    crate::log::event!("halcyon::device", WARN, id, error = %error, "the gather kernel did not load; strided copies go through the host");
                    let _ = (id, error);
                }
                loaded.ok()
            })
            .as_ref()
    }

    pub(crate) fn host_staging(&self) -> &crate::host_staging::HostStaging {
        &self.inner.host_staging
    }

    /// A handle that does not keep the device alive (for work the device itself holds).
    pub(crate) fn downgrade(&self) -> WeakDevice {
        WeakDevice(Arc::downgrade(&self.inner))
    }

    /// Whether two handles refer to the same device (not merely the same driver and index:
    /// two devices created over one GPU are two devices).
    pub fn ptr_eq(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// How many queues the device has.
    pub fn queue_count(&self) -> u32 {
        self.inner.backend.queue_count().max(1)
    }

    /// This device's place in a communicator that `provider` brings together: a [`Channel`]
    /// of the device's collective engine (MPI for the CPU device, NCCL for CUDA devices, RCCL
    /// for HIP devices), spanning `provider`'s ranks. Blocks until every rank has made its
    /// channel: call it off the async executor (`tokio::task::spawn_blocking`). See
    /// [`crate::channel`].
    ///
    /// `Unimplemented` if the device has no engine (Vulkan) or the provider cannot serve it;
    /// `Unavailable` if the engine's library is missing.
    pub fn channel(
        &self,
        provider: &dyn crate::channel::ChannelProvider,
        params: &crate::channel::ChannelParams,
    ) -> Result<Channel> {
        let backend = self.inner.backend.create_channel(provider, params)?;
        Ok(Channel::new(self, backend))
    }

    /// Queue `index`; `OutOfRange` if the device has no such queue.
    pub fn queue(&self, index: u32) -> Result<Queue> {
        if index >= self.queue_count() {
            return Err(Error::new(
                StatusCode::OutOfRange,
                format!(
                    "device {} has {} queues; queue {index} does not exist",
                    self.info().id,
                    self.queue_count()
                ),
            ));
        }
        Ok(Queue::new(self.clone(), index))
    }

    /// The queues selected by an affinity bitmask (bit `i` = queue `i`); all queues for
    /// `u64::MAX`. `InvalidArgument` if the mask selects none.
    pub fn queues(&self, affinity: u64) -> Result<Vec<Queue>> {
        let queues: Vec<Queue> = (0..self.queue_count().min(64))
            .filter(|i| affinity & (1u64 << i) != 0)
            .map(|i| Queue::new(self.clone(), i))
            .collect();
        if queues.is_empty() {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "queue affinity {affinity:#x} selects none of the device's {} queues",
                    self.queue_count()
                ),
            ));
        }
        Ok(queues)
    }

    /// The affinity mask (bit `i` = queue `i`, as [`Device::queues`] takes) of the queues that
    /// can run everything in `required`; 0 if none can.
    pub fn queue_affinity(&self, required: QueueCapabilities) -> u64 {
        (0..self.queue_count().min(64))
            .filter(|&i| self.inner.backend.queue_capabilities(i).contains(required))
            .fold(0, |mask, i| mask | 1u64 << i)
    }

    /// Creates a timeline semaphore (device-native where the backend has one).
    pub fn create_semaphore(&self, initial_value: u64) -> Result<Semaphore> {
        self.inner.backend.create_semaphore(initial_value)
    }

    /// Executable formats this device loads.
    pub fn supported_formats(&self) -> Vec<String> {
        self.inner.backend.executable_formats()
    }

    /// Loads an executable, or returns the cached one for identical content.
    ///
    /// `Unimplemented` (listing the supported formats) for a format the device does not load.
    pub fn load_executable(&self, spec: &ExecutableSpec) -> Result<Executable> {
        let formats = self.supported_formats();
        if !formats.contains(&spec.format) {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!(
                    "device {} cannot load executable format '{}'; it supports: {}",
                    self.info().id,
                    spec.format,
                    formats.join(", ")
                ),
            ));
        }
        self.inner.executables.get_or_load(spec, |spec| {
            let backend = self.inner.backend.load_executable(spec)?;
            Ok(Executable::from_backend(
                spec.format.clone(),
                self.info().id.clone(),
                backend,
            ))
        })
    }

    /// The executable cache.
    pub fn executable_cache(&self) -> &ExecutableCache {
        &self.inner.executables
    }

    /// The backend (the SPI).
    pub fn backend(&self) -> &Arc<dyn DeviceBackend> {
        &self.inner.backend
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("info", self.info()).finish()
    }
}
