//! [`StreamApi`]: the translation table a stream-based vendor API (CUDA, HIP, the host
//! emulation) implements once, so that the stream layer above it is written once.
//!
//! The table is llaisys' `RuntimeAPI` idea: a small set of plain operations on streams, events,
//! memory and modules, with no policy. Everything halcyon adds (timeline semaphores, pending
//! actions, completion, resource lifetime) lives in the generic layer above
//! ([`crate::StreamDevice`]).
//!
//! # Handles
//!
//! Vendor objects are named by opaque `u64` newtypes ([`StreamHandle`], [`EventHandle`],
//! [`DevicePtr`], ...), one type per kind. Why not associated types? The layer stores handles
//! in pools, maps and in-flight records and moves them between threads; vendor handle types are
//! raw pointers that are neither `Send` nor `Hash`, so every backend would wrap them in the same
//! newtypes anyway. A `u64` per kind keeps the layer free of generic noise, keeps vendor types
//! out of the core's public API (`docs/ARCHITECTURE.md`: the core names no vendor type), still makes passing an event where a stream is
//! expected a compile error, and costs a backend one cast at its boundary (`CUstream` ↔ `u64`,
//! `CUdeviceptr` is a `u64` already). A handle means nothing to another `StreamApi` instance.
//!
//! # Status words
//!
//! Kernels fail their dispatch through a status word, by the convention `docs/ARCHITECTURE.md`
//! states once ("Status words"). The stream layer's part: [`StreamApi::load_module`] reports
//! which entry points take one ([`LoadedModule::status_words`]: the kernel takes exactly one
//! more pointer after its constants), and the stream layer launches those with the address of
//! a zeroed `u32` in [`MemoryPlacement::Pinned`] host memory in [`KernelParams::status`], one
//! word per dispatch. It reads the words when the submission completed and fails it with
//! [`halcyon::StatusCode::KernelFailed`] on a nonzero word. Such a submission signals its
//! semaphores from the host after the check, so work waiting on it starts only after the check
//! passed. As with any timeline semaphore, a later submission signalling a higher value of the
//! same semaphore without waiting for the checked one releases such waits anyway: chain the
//! submissions, as [`halcyon::Timeline`] does, to keep dependents behind the check.
//!
//! # Errors
//!
//! Every method returns [`halcyon::Result`] with the vendor error already turned into an
//! [`halcyon::Error`]: a [`halcyon::StatusCode`] programs can match on and a message naming the call,
//! the vendor code and what to do. **Sticky device errors** (CUDA's illegal address, HIP's
//! launch failure) make every later call that touches the device fail with the same error, and
//! host functions already enqueued never run: the stream layer's probe relies on
//! [`StreamApi::query_event`] reporting them.

use std::fmt;
use std::ptr::NonNull;

use halcyon::backend::{ChannelBackend, CollectiveKind};
use halcyon::{ChannelParams, ChannelProvider, EntryPoint, ExecutableSpec};
use halcyon::{Error, Result, StatusCode};

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u64);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#x})"), self.0)
            }
        }
    };
}

handle!(
    /// A stream: an in-order queue of device work (`CUstream`, `hipStream_t`).
    StreamHandle
);
handle!(
    /// An event: a binary marker recorded into a stream (`CUevent`, `hipEvent_t`).
    EventHandle
);
handle!(
    /// A loaded module (`CUmodule`, `hipModule_t`).
    ModuleHandle
);
handle!(
    /// A kernel function of a loaded module (`CUfunction`, `hipFunction_t`).
    FunctionHandle
);
handle!(
    /// An instantiated, launchable graph (`CUgraphExec`, `hipGraphExec_t`).
    GraphHandle
);
handle!(
    /// A device address (`CUdeviceptr`, `hipDeviceptr_t`). Kernels receive these as their
    /// binding parameters.
    DevicePtr
);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0.wrapping_add(bytes))
    }
}

bitflags::bitflags! {
    /// Optional parts of a [`StreamApi`]. The stream layer checks them before relying on the
    /// corresponding methods, whose default implementations fail with
    /// [`StatusCode::Unimplemented`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct Capabilities: u32 {
        /// [`StreamApi::launch_host_func`] works (`cuLaunchHostFunc`, or
        /// `hipStreamAddCallback` on HIP 5.2, which has no `hipLaunchHostFunc`).
        const HOST_FUNC = 1 << 0;
        /// [`StreamApi::allocate_async`] and [`StreamApi::free_async`] work (stream-ordered
        /// memory pools).
        const STREAM_ORDERED_ALLOC = 1 << 1;
        /// Graph capture and launch ([`StreamApi::begin_capture`] and the rest) work.
        const GRAPHS = 1 << 2;
        /// [`StreamApi::event_elapsed_ms`] works for events created without
        /// [`EventFlags::DISABLE_TIMING`] (`cuEventElapsedTime`, `hipEventElapsedTime`): the
        /// stream layer then gives profiled operations device times (`device/timing.rs`).
        const EVENT_TIMING = 1 << 3;
        /// [`StreamApi::write_value32`] works (`cuStreamWriteValue32`,
        /// `hipStreamWriteValue32`): the stream layer can then observe completions by words
        /// the device writes ([`crate::CompletionStrategy::FlagWrite`]). Needs
        /// [`MemoryPlacement::Pinned`] memory too.
        const WRITE_VALUE = 1 << 4;
        /// [`StreamApi::update_graph_kernel`] works (`cuGraphExecKernelNodeSetParams`): the
        /// stream layer then replays a reusable command list submitted with a new binding
        /// table through its graph, pointing the graph's kernels at the new buffers, instead
        /// of issuing it on the stream. Needs [`Capabilities::GRAPHS`].
        const GRAPH_UPDATE = 1 << 5;
    }
}

bitflags::bitflags! {
    /// How an event is created.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct EventFlags: u32 {
        /// [`StreamApi::synchronize_event`] blocks the thread in the OS instead of spinning
        /// (`CU_EVENT_BLOCKING_SYNC`). Events a completion thread waits on are created with it.
        const BLOCKING_SYNC = 1 << 0;
        /// The event records no timestamp (`CU_EVENT_DISABLE_TIMING`), which makes recording and
        /// querying cheaper (CUDA recommends it for events that only synchronise). Every event
        /// the stream layer synchronises with has it; only the timing events around profiled
        /// operations, from a pool of their own, lack it (see [`StreamApi::event_elapsed_ms`]).
        const DISABLE_TIMING = 1 << 1;
    }
}

/// Where an allocation lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemoryPlacement {
    /// Device memory the host cannot address (`cuMemAlloc`, `hipMalloc`).
    Device,
    /// Device memory the host can address too (`cuMemAllocManaged`, `hipMallocManaged`);
    /// [`StreamApi::host_pointer`] returns its host address.
    HostVisible,
    /// Page-locked host memory mapped into the device's address space at the same address
    /// (`cuMemHostAlloc(DEVICEMAP | PORTABLE)`, `hipHostMalloc(hipHostMallocMapped)`): the
    /// returned [`DevicePtr`] is also its host address ([`StreamApi::host_pointer`] returns it).
    /// Kernels may read and write it over the bus; a copy between it and device memory is
    /// enqueued as a plain asynchronous DMA, with no staging and no host function (the stream
    /// layer's own staging, read-back and status words live here). Slow to allocate and free
    /// (freeing may wait for the device): pool it. Optional: `Unimplemented` where the API
    /// cannot map host memory at one address.
    Pinned,
}

/// What an API is and what it offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiInfo {
    /// The driver id used in device URIs (`cuda`, `hip`, `host-stream`): a word of ASCII
    /// letters, digits, `-` and `_`.
    pub driver: String,
    /// A human-readable device name (`NVIDIA H100`, `host threads`).
    pub name: String,
    /// Optional capabilities.
    pub capabilities: Capabilities,
    /// Minimum alignment of binding offsets, in bytes.
    pub binding_alignment: u64,
    /// How many blocks can run at once (a rough figure for `device.concurrency`).
    pub concurrency: u32,
    /// The device's memory in bytes (`device.memory_bytes`), where the API can tell.
    pub memory_bytes: Option<u64>,
}

/// A module loaded by [`StreamApi::load_module`], with the metadata its format carries.
#[derive(Clone, Debug)]
pub struct LoadedModule {
    /// The module.
    pub module: ModuleHandle,
    /// Entry points, in the order dispatches index them. Each name is looked up with
    /// [`StreamApi::get_function`]; the workgroup size is the launch's block size.
    pub entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points`: whether the entry point's kernel takes a status word
    /// after its constants (see [the convention](crate::api#status-words)); such
    /// kernels are launched with [`KernelParams::status`] set. Entry points beyond
    /// the vector's length take none, so an API without status words leaves it empty.
    pub status_words: Vec<bool>,
    /// Index-aligned with `entry_points`: the dynamic shared memory each entry point's kernel
    /// is launched with, in bytes ([`LaunchConfig::shared_memory_bytes`] of its every launch;
    /// CUDA's `extern __shared__`, HIP's dynamic LDS). The API checked at load that the device
    /// can launch the kernel with it. Entry points beyond the vector's length take none.
    pub shared_memory_bytes: Vec<u32>,
}

impl LoadedModule {
    /// Whether entry point `index` takes a status word ([`LoadedModule::status_words`]).
    pub fn takes_status_word(&self, index: usize) -> bool {
        self.status_words.get(index).copied().unwrap_or(false)
    }

    /// The dynamic shared memory entry point `index` is launched with, in bytes
    /// ([`LoadedModule::shared_memory_bytes`]).
    pub fn shared_memory(&self, index: usize) -> u32 {
        self.shared_memory_bytes.get(index).copied().unwrap_or(0)
    }
}

/// The shape of a kernel launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z (halcyon's workgroup count).
    pub grid: [u32; 3],
    /// Threads per block in x, y, z (the entry point's workgroup size).
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes: the entry point's
    /// ([`LoadedModule::shared_memory_bytes`]).
    pub shared_memory_bytes: u32,
}

/// A kernel's parameters in halcyon's one dispatch model: every binding as a device pointer, in
/// binding order, then every `u32` constant, in order, then, for an entry point that takes one,
/// the status word's device pointer.
#[derive(Clone, Copy, Debug)]
pub struct KernelParams<'a> {
    /// One device address per binding (the buffer's address plus the binding's offset).
    pub bindings: &'a [DevicePtr],
    /// The push constants.
    pub constants: &'a [u32],
    /// The address of the dispatch's status word (a `u32` the device writes, 4-byte aligned,
    /// in [`MemoryPlacement::Pinned`] memory of this API), for an entry
    /// point whose kernel takes one ([`LoadedModule::status_words`]), passed as its last
    /// parameter (see [the convention](crate::api#status-words)); `None` for every
    /// other kernel. The API neither zeroes nor reads the word: the stream layer does.
    pub status: Option<DevicePtr>,
}

/// A host function enqueued on a stream. It must not call the [`StreamApi`] (CUDA and HIP
/// forbid calling their API from a host callback): the stream layer's only post to its reactor.
pub type HostFunc = Box<dyn FnOnce() + Send + 'static>;

/// The error the optional methods return by default.
pub fn unimplemented(api: &str, what: &str) -> Error {
    Error::new(
        StatusCode::Unimplemented,
        format!(
            "the {api} stream API does not implement {what}; check \
             StreamApi::info().capabilities before using it"
        ),
    )
}

/// The operations of a stream-based device API, in the order of the CUDA driver API manual.
///
/// Implementations are a translation table: each method calls the vendor function, converts its
/// error, and adds no policy. All methods take `&self` and may be called from any thread (a
/// CUDA backend binds its context on the calling thread first). None may block except the
/// `synchronize_*` methods.
///
/// **Ordering.** Work enqueued on one stream runs in enqueue order, each operation after the
/// previous one completed and its writes are visible. Streams are independent except through
/// [`StreamApi::stream_wait_event`].
///
/// # Safety
///
/// The stream layer hands what this table returns to safe code unchecked, so an implementation
/// promises: [`StreamApi::host_pointer`], where it is `Some`, is the host address of the whole
/// allocation, valid for reads and writes of its size until [`StreamApi::free`] (or
/// [`StreamApi::free_async`]'s completion) of it; [`StreamApi::allocate`] returns at least
/// `size` bytes that nothing else uses until freed; copies, fills and launches touch only the
/// ranges they are given; and every method is sound for any handle or pointer argument (a
/// stale, foreign or made-up one is an error, not undefined behaviour), except where a method
/// is itself `unsafe` and says otherwise.
pub unsafe trait StreamApi: Send + Sync + 'static {
    /// Identity and capabilities. Cheap; called when a device is created.
    fn info(&self) -> ApiInfo;

    /// Called first thing on each thread the stream layer runs for a device of this API (its
    /// completion threads, its reclaimer and its reactor), where nothing but halcyon's work
    /// runs. An API that binds a device or context to the calling thread (see the trait docs)
    /// and gives the thread's previous one back after each call on other threads may bind it
    /// here for good instead. Default: nothing.
    fn adopt_thread(&self) {}

    /// The most blocks a launch may have in x, y and z (CUDA's `maxGridDim`); launches beyond
    /// them are refused before they reach the API. Default: no limit below `u32::MAX`.
    fn max_grid(&self) -> [u32; 3] {
        [u32::MAX; 3]
    }

    // ---------------------------------------------------------------- streams

    /// Creates a stream that does not synchronise with the legacy default stream
    /// (`CU_STREAM_NON_BLOCKING`). Fails with `ResourceExhausted` when the API is out of streams.
    fn create_stream(&self) -> Result<StreamHandle>;

    /// Destroys `stream`. Work already enqueued still runs to completion and releases its
    /// resources afterwards (as `cuStreamDestroy` does); the handle is invalid on return.
    fn destroy_stream(&self, stream: StreamHandle) -> Result<()>;

    /// Blocks until every operation enqueued on `stream` before the call completed. Returns the
    /// sticky device error if the device faulted (at once, not after a hang).
    fn synchronize_stream(&self, stream: StreamHandle) -> Result<()>;

    // ---------------------------------------------------------------- events

    /// Creates an event with `flags`. A new event counts as complete (nothing recorded).
    fn create_event(&self, flags: EventFlags) -> Result<EventHandle>;

    /// Destroys `event`. A record still pending on a stream completes harmlessly.
    fn destroy_event(&self, event: EventHandle) -> Result<()>;

    /// Enqueues a record of `event` on `stream`: the event completes once all work enqueued on
    /// `stream` before it completed. Re-recording replaces the event's state: queries, waits and
    /// synchronisations issued afterwards refer to the new record; waits enqueued earlier keep
    /// waiting for the record they saw.
    fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<()>;

    /// Without blocking: `Ok(true)` if the most recent record completed (or none was made),
    /// `Ok(false)` if it is pending, `Err` with the error of the work it captured or the sticky
    /// device error (then the work will never complete). The stream layer's fault probe.
    fn query_event(&self, event: EventHandle) -> Result<bool>;

    /// Blocks until the most recent record of `event` (at the time of the call) completed; like
    /// [`StreamApi::query_event`] for errors. With [`EventFlags::BLOCKING_SYNC`] the thread sleeps
    /// in the OS instead of spinning.
    fn synchronize_event(&self, event: EventHandle) -> Result<()>;

    /// Makes all work enqueued on `stream` after this call wait until the most recent record of
    /// `event` (at the time of the call) completed, without involving the host. Waiting on an
    /// event never recorded does not wait. The event may be re-recorded right after the call.
    fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()>;

    /// The time from the completion of `start`'s most recent record to that of `end`'s, in
    /// milliseconds (`cuEventElapsedTime`, `hipEventElapsedTime`): negative if `end` completed
    /// first. Both events must have been created without [`EventFlags::DISABLE_TIMING`] and
    /// recorded (else the vendor's invalid-handle error, `InvalidArgument`), and their records
    /// must have completed (else the vendor's not-ready error). The device's timer resolution
    /// is about 0.5 µs on CUDA; an `f32` of milliseconds holds 24 significant bits, so the
    /// answer's rounding grows with its size (about 30 ns at one second, 4 µs at 100 s).
    /// Never blocks. Optional ([`Capabilities::EVENT_TIMING`]).
    fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let _ = (start, end);
        Err(unimplemented(&self.info().driver, "event timing"))
    }

    // ---------------------------------------------------------------- host functions

    /// Enqueues `func` on `stream`: it runs on an API-owned thread once the work before it
    /// completed, and the work after it waits for it to return. `func` must not call this API
    /// (CUDA and HIP deadlock or fail if it does) and must be quick. After a sticky device error
    /// enqueued host functions never run (they are dropped unrun). Optional
    /// ([`Capabilities::HOST_FUNC`]).
    fn launch_host_func(&self, stream: StreamHandle, func: HostFunc) -> Result<()> {
        let _ = (stream, func);
        Err(unimplemented(&self.info().driver, "host functions"))
    }

    // ---------------------------------------------------------------- memory

    /// Allocates `size` bytes (at least 256-byte aligned), synchronously. `ResourceExhausted`
    /// when out of memory. The contents are unspecified.
    fn allocate(&self, size: u64, placement: MemoryPlacement) -> Result<DevicePtr>;

    /// Frees an allocation made by [`StreamApi::allocate`]. Work already enqueued that uses it
    /// must have completed (the stream layer frees only after that).
    fn free(&self, ptr: DevicePtr) -> Result<()>;

    /// The host address of `ptr` if the host can access that memory directly (a
    /// [`MemoryPlacement::HostVisible`] allocation), else `None`.
    fn host_pointer(&self, ptr: DevicePtr) -> Option<NonNull<u8>>;

    /// Allocates `size` bytes in stream order on `stream`: usable by work enqueued on `stream`
    /// after this call. Optional ([`Capabilities::STREAM_ORDERED_ALLOC`]).
    fn allocate_async(&self, size: u64, stream: StreamHandle) -> Result<DevicePtr> {
        let _ = (size, stream);
        Err(unimplemented(
            &self.info().driver,
            "stream-ordered allocation",
        ))
    }

    /// Frees `ptr` in stream order: once the work enqueued on `stream` before it completed.
    /// Optional ([`Capabilities::STREAM_ORDERED_ALLOC`]).
    fn free_async(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<()> {
        let _ = (ptr, stream);
        Err(unimplemented(
            &self.info().driver,
            "stream-ordered allocation",
        ))
    }

    /// Enqueues a copy of `len` bytes from host memory at `src` to device memory at `dst`.
    /// From a [`MemoryPlacement::Pinned`] allocation of this API it is a plain DMA; from other
    /// host memory the API may stage the bytes (and enqueue a host function to recycle the
    /// staging), but it never blocks on the stream.
    ///
    /// # Safety
    /// `src..src + len` must stay valid and unmodified until the copy completed on `stream`
    /// (the stream layer keeps the bytes alive until the submission's completion event).
    unsafe fn copy_host_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()>;

    /// Enqueues a copy of `len` bytes from device memory at `src` to host memory at `dst`.
    /// Into a [`MemoryPlacement::Pinned`] allocation of this API it is a plain DMA; into other
    /// host memory the API may copy through staging and a host function, but it never blocks
    /// on the stream.
    ///
    /// # Safety
    /// `dst..dst + len` must stay valid, and not be accessed by anything else, until the copy
    /// completed on `stream`.
    unsafe fn copy_device_to_host_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()>;

    /// Enqueues a copy of `len` bytes between device addresses. Invalid addresses are reported
    /// as errors (synchronously, or as a device error), never as host memory corruption.
    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()>;

    // ---------------------------------------------------------------- peer access (optional)

    /// Whether this API's streams can copy directly from `peer`'s device memory, `peer` being
    /// the API of another device of the same driver (`cuDeviceCanAccessPeer`,
    /// `hipDeviceCanAccessPeer`; `true` for another API over this very device, whose memory
    /// this one addresses already). A pure question: enables nothing. The stream layer asks
    /// once per pair and remembers the answer. Default: `false` (no peer access; copies between
    /// devices are staged through host memory).
    fn can_access_peer(&self, peer: &Self) -> Result<bool>
    where
        Self: Sized,
    {
        let _ = peer;
        Ok(false)
    }

    /// Lets this API's device reach `peer`'s device memory from now on (`cuCtxEnablePeerAccess`,
    /// `hipDeviceEnablePeerAccess`), after [`StreamApi::can_access_peer`] said it can; access
    /// already enabled is `Ok` (the call is idempotent), as is another API over this very
    /// device. Synchronous, not on a stream: the stream layer calls it once per pair, before
    /// the first peer copy. Default: `Unimplemented`.
    fn enable_peer_access(&self, peer: &Self) -> Result<()>
    where
        Self: Sized,
    {
        let _ = peer;
        Err(unimplemented(&self.info().driver, "peer access"))
    }

    /// Enqueues on `stream` (one of this API's) a copy of `len` bytes from `src`, device memory
    /// of `peer`'s device, into `dst`, device memory of this API's (`cuMemcpyPeerAsync` with
    /// both devices' contexts, `hipMemcpyPeerAsync`): one DMA between the two devices, ordered
    /// on `stream` like any copy. Each range must lie within a live allocation of its own API
    /// (`InvalidArgument` otherwise, before the driver is called). The stream layer calls it
    /// only after [`StreamApi::enable_peer_access`] succeeded for `peer`, and keeps both
    /// allocations alive until the copy completed. Default: `Unimplemented`.
    fn copy_peer_async(
        &self,
        dst: DevicePtr,
        peer: &Self,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()>
    where
        Self: Sized,
    {
        let _ = (dst, peer, src, len, stream);
        Err(unimplemented(&self.info().driver, "peer copies"))
    }

    /// Enqueues a fill of `len` bytes at `dst` with the little-endian `pattern` of `pattern_len`
    /// bytes (1, 2 or 4: `cuMemsetD8/D16/D32Async`). `dst` and `len` must be multiples of
    /// `pattern_len` (`InvalidArgument` otherwise).
    fn memset_async(
        &self,
        dst: DevicePtr,
        pattern: u32,
        pattern_len: u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()>;

    /// Enqueues a write of `value` into the 4 bytes at `ptr`, made once the work enqueued on
    /// `stream` before it completed and visible to the host after that work's own writes
    /// (`cuStreamWriteValue32` with its default flags, whose memory barrier orders the work's
    /// writes before it; `hipStreamWriteValue32`). `ptr` must be 4-aligned and lie within a
    /// live allocation of this API (`InvalidArgument` otherwise); the stream layer writes only
    /// into its own [`MemoryPlacement::Pinned`] memory, which the host reads while the device
    /// writes. Optional ([`Capabilities::WRITE_VALUE`]).
    fn write_value32(&self, stream: StreamHandle, ptr: DevicePtr, value: u32) -> Result<()> {
        let _ = (stream, ptr, value);
        Err(unimplemented(&self.info().driver, "stream memory writes"))
    }

    // ---------------------------------------------------------------- modules and kernels

    /// The executable formats [`StreamApi::load_module`] understands (`cuda-ptx`, ...).
    fn module_formats(&self) -> Vec<String>;

    /// Loads a module from `spec` (one of [`StreamApi::module_formats`]), returning it with its
    /// entry points' metadata (which the format must carry: device code alone does not say how
    /// many bindings and constants a kernel takes). `InvalidArgument` for malformed input.
    fn load_module(&self, spec: &ExecutableSpec) -> Result<LoadedModule>;

    /// Unloads `module`. Kernels of it still running or enqueued must have completed (the stream
    /// layer keeps executables alive until the work using them completed).
    fn unload_module(&self, module: ModuleHandle) -> Result<()>;

    /// The kernel called `name` in `module`; `NotFound` naming it otherwise.
    fn get_function(&self, module: ModuleHandle, name: &str) -> Result<FunctionHandle>;

    /// Enqueues a launch of `function` with `config` and `params` on `stream`. Argument errors
    /// (a block too large, a bad address) are reported synchronously where the API can; errors
    /// while the kernel runs complete the next recorded event with an error. `params.status` is
    /// set exactly for the entry points [`StreamApi::load_module`] reported a status word for.
    fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        stream: StreamHandle,
    ) -> Result<()>;

    // ---------------------------------------------------------------- graphs (optional)

    /// Starts capturing the work enqueued on `stream` into a graph instead of running it.
    /// Optional ([`Capabilities::GRAPHS`]).
    fn begin_capture(&self, stream: StreamHandle) -> Result<()> {
        let _ = stream;
        Err(unimplemented(&self.info().driver, "graph capture"))
    }

    /// Ends the capture started on `stream` and instantiates it. Optional.
    fn end_capture(&self, stream: StreamHandle) -> Result<GraphHandle> {
        let _ = stream;
        Err(unimplemented(&self.info().driver, "graph capture"))
    }

    /// Enqueues one run of `graph` on `stream`. Optional.
    ///
    /// # Safety
    /// A graph replays the operations captured into it with the addresses they had then: the
    /// copies, fills and kernels captured read and write memory the API checked at capture
    /// time, which must still be allocated (not freed, nor freed and allocated again) and
    /// untouched by the host until this run completes, as for the work when it was captured.
    /// The stream layer holds every buffer a graph's command list uses for each launch.
    unsafe fn launch_graph(&self, graph: GraphHandle, stream: StreamHandle) -> Result<()> {
        let _ = (graph, stream);
        Err(unimplemented(&self.info().driver, "graph launch"))
    }

    /// Points the `kernel`-th kernel launch captured into `graph` (counting from 0, in the
    /// order [`StreamApi::launch_kernel`] was called during the capture) at `params`, for
    /// every launch of `graph` enqueued after this call; launches enqueued before keep the
    /// parameters they had (`cuGraphExecKernelNodeSetParams`). `function` and `config` must be
    /// the captured launch's (`FailedPrecondition` otherwise, the sign of a miscounted
    /// `kernel`): only the parameters change. `params` is checked as for a launch;
    /// `InvalidArgument` for a `kernel` past the graph's launches. The graph is not changed on
    /// error. Calls on one graph, and its launches, must not overlap (the stream layer makes
    /// them under the queue's issue lock). Optional ([`Capabilities::GRAPH_UPDATE`]).
    ///
    /// Every later launch of the graph reads and writes the new addresses: the contract of
    /// [`StreamApi::launch_graph`] then covers them.
    fn update_graph_kernel(
        &self,
        graph: GraphHandle,
        kernel: usize,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
    ) -> Result<()> {
        let _ = (graph, kernel, function, config, params);
        Err(unimplemented(&self.info().driver, "graph updates"))
    }

    /// Destroys `graph` once its enqueued runs completed. Optional.
    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        let _ = graph;
        Err(unimplemented(&self.info().driver, "graphs"))
    }

    /// The device's gather kernel, if the API has one
    /// ([`halcyon::backend::DeviceBackend::gather_kernel`] states its contract). Optional.
    fn gather_kernel(&self) -> Option<ExecutableSpec> {
        None
    }

    /// A channel of the API's collective engine (NCCL for CUDA, RCCL for HIP) for this device,
    /// spanning `provider`'s ranks: rank 0 makes the engine's unique id, the provider hands it
    /// to the others ([`ChannelProvider::exchange_id`]), and every rank joins. Blocks until
    /// every rank has joined. Optional (`Unimplemented`); `Unavailable` when the engine's
    /// library is missing.
    fn create_channel(
        &self,
        provider: &dyn ChannelProvider,
        params: &ChannelParams,
    ) -> Result<Box<dyn ChannelBackend>> {
        let _ = (provider, params);
        Err(unimplemented(&self.info().driver, "collectives"))
    }

    /// Enqueues collective `kind` of `channel` (one [`StreamApi::create_channel`] made) on
    /// `stream`: it reads `send` and writes `recv`, each a device address and a length in
    /// bytes (`None` where the kind has no such range). Optional.
    ///
    /// # Safety
    ///
    /// The ranges must be device memory of this device, live until the stream has passed the
    /// collective.
    unsafe fn enqueue_collective(
        &self,
        channel: &dyn ChannelBackend,
        kind: &CollectiveKind,
        send: Option<(DevicePtr, u64)>,
        recv: Option<(DevicePtr, u64)>,
        stream: StreamHandle,
    ) -> Result<()> {
        let _ = (channel, kind, send, recv, stream);
        Err(unimplemented(&self.info().driver, "collectives"))
    }
}
