//! [`CudaApi`]: halcyon's [`StreamApi`] as a translation table over the CUDA driver API.
//!
//! Every method binds the device's context to the calling thread (see below), makes one or two
//! driver calls ([`crate::sys`]: cudarc's declarations, results as numbers), and turns a
//! failing result into a [`halcyon::Error`] ([`crate::result`]). No policy lives here: ordering,
//! timelines, completion and fault handling are the stream layer's ([`halcyon::stream`]).
//! cudarc's safe layer is not used at all (its per-slice event tracking would duplicate what
//! halcyon's timelines do); like cudarc itself, this crate layers raw calls ([`crate::sys`]) →
//! checked calls ([`crate::result::check`]) → the table.
//!
//! | core vocabulary ([`StreamApi`])     | CUDA driver call                                               |
//! |-------------------------------------|----------------------------------------------------------------|
//! | the device's context                | `cuDevicePrimaryCtxRetain` (released on drop), `cuCtxSetCurrent` when another context is current on the thread |
//! | `create_stream` / `destroy_stream`  | `cuStreamCreate(CU_STREAM_NON_BLOCKING)` / `cuStreamDestroy`     |
//! | `synchronize_stream`                | `cuStreamSynchronize`                                          |
//! | `create_event` / `destroy_event`    | `cuEventCreate(CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC per flags)` / `cuEventDestroy` |
//! | `record_event`                      | `cuEventRecord`                                                |
//! | `query_event`                       | `cuEventQuery`: success → `true`, `CUDA_ERROR_NOT_READY` → `false`, else the error |
//! | `synchronize_event`                 | `cuEventSynchronize`                                           |
//! | `stream_wait_event`                 | `cuStreamWaitEvent(stream, event, 0)`                          |
//! | `launch_host_func`                  | `cuLaunchHostFunc` with an `extern "C"` trampoline (`src/callback.rs`); refused on a capturing stream (one-shot closures cannot be replayed) |
//! | `allocate(Device)`                  | `cuMemAlloc`; out of memory: the API's pool trimmed (`cuMemPoolTrimTo(pool, 0)`) and tried once more, as for module loading and graph instantiation |
//! | `allocate(HostVisible)`             | `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`; host pointer = the same address (needs concurrent managed access) |
//! | `allocate(Pinned)`                  | `cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP \| CU_MEMHOSTALLOC_PORTABLE)`, then `cuMemHostGetDevicePointer(flags 0)`, which must return the host address (else `cuMemFreeHost` and `Unimplemented`) |
//! | `free`                              | the base of a live allocation only (each recorded with its allocator): `cuMemFreeHost` for a pinned one, else `cuMemFree` |
//! | `host_pointer`                      | the address itself inside a pinned or managed allocation (no driver call) |
//! | `allocate_async` / `free_async`     | `cuMemAllocFromPoolAsync` from the API's own pool (`cuMemPoolCreate`, release threshold [`CudaApi::set_pool_release_threshold`]) / `cuMemFreeAsync`; when `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` |
//! | `copy_host_to_device_async`         | while capturing, from a pinned copy kept until the API drops; else from a source lying within one pinned allocation, `cuMemcpyHtoDAsync` straight from it (no staging, no host function); else through pinned staging in chunks of up to 8 MiB: the first chunk copied in at enqueue, each later one by a host function, `cuMemcpyHtoDAsync` from the buffer after each, and a host function returning it (`halcyon::stream::staging`) |
//! | `copy_device_to_host_async`         | refused while capturing; into a destination lying within one pinned allocation, `cuMemcpyDtoHAsync` straight into it (no staging, no host function); else through pinned staging in chunks of up to 8 MiB: `cuMemcpyDtoHAsync` into the buffer, then a host function copying the chunk out, the last one returning the buffer (`halcyon::stream::staging`) |
//! | `copy_device_to_device_async`       | `cuMemcpyDtoDAsync`                                            |
//! | `memset_async` (1, 2, 4 bytes)      | `cuMemsetD8Async` / `cuMemsetD16Async` / `cuMemsetD32Async`     |
//! | `load_module`                       | `cuModuleLoadDataEx` (PTX NUL-terminated, JIT-compiled for `CU_JIT_THREADS_PER_BLOCK` of the largest workgroup; or cubin/fatbin) with a JIT error log; `cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)` refuses a workgroup larger than the kernel can launch; `cuFuncGetParamInfo` checks each kernel's signature (drivers with CUDA 12.4+ only; skipped below); status words from the PTX `.param`s (which must agree with `cuFuncGetParamInfo` where it answers), or from `cuFuncGetParamInfo` for a cubin (without it: launched with one, which a kernel without the parameter never reads); an entry point declaring dynamic shared memory ([`CudaModule::with_shared_memory`]): `cuFuncGetAttribute(SHARED_SIZE_BYTES)` plus it within `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, and `cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)` where it exceeds the kernel's default limit |
//! | `unload_module`                     | `cuModuleUnload`                                               |
//! | `get_function`                      | `cuModuleGetFunction`; the handle is registered with its kernel's checked signature, which a launch must match |
//! | `launch_kernel`                     | `cuLaunchKernel`; `kernelParams[i]` points at binding `i`'s `CUdeviceptr`, then at each `u32` constant, then at the status word's `CUdeviceptr` if there is one (see [`crate::module`]) |
//! | `begin_capture` / `end_capture`     | `cuStreamBeginCapture(CU_STREAM_CAPTURE_MODE_RELAXED)` / `cuStreamEndCapture` + `cuGraphInstantiateWithFlags` + `cuGraphDestroy`; while a stream of the device captures, `cuMemFree`, `cuMemFreeHost`, `cuModuleLoadDataEx` and `cuModuleUnload` (which may synchronise the context and so invalidate the capture) wait on other threads, and a capture waits for those under way (`src/capture.rs`) |
//! | `launch_graph` / `destroy_graph`    | `cuGraphLaunch` / `cuGraphExecDestroy`; `GRAPHS` is advertised only after [`CudaApi::enable_graphs`] |
//!
//! Every call above exists in CUDA 11.4 or earlier except `cuFuncGetParamInfo` (CUDA 12.4),
//! which is made only when the driver supports [`PARAM_INFO_VERSION`]
//! ([`Probe::supports`]): the probe admits drivers from CUDA 12.0 (were the symbol missing
//! anyway, [`Code::MISSING_SYMBOL`] would skip the check, not panic).
//!
//! Handles are the CUDA pointers (`CUstream`, `CUevent`, `CUmodule`, `CUfunction`,
//! `CUgraphExec`) cast to the `u64` newtypes, and `CUdeviceptr` as is. Every handle a method is
//! given is looked up among the objects this API made and has not destroyed
//! (`objects.rs`) before it reaches the driver, which would dereference it unchecked: a
//! destroyed, made-up or other API's handle is an `InvalidArgument` error, and an object
//! destroyed on one thread while a call on another uses it is destroyed when that call returns.
//! Likewise every allocation is recorded with its allocator
//! ([`halcyon::stream::allocations`]): a free must name the base of a live allocation, and a
//! copy or fill must lie within one (`InvalidArgument` otherwise, before the driver is called).
//! Kernel bindings are not checked: which bytes a kernel touches is the kernel's business.
//!
//! **Context binding.** Each `CudaApi` retains its device's primary context (shared with the
//! CUDA runtime and every other user of the device in the process). Every method asks the
//! driver which context is current on the calling thread (`cuCtxGetCurrent`, a thread-local
//! read in the driver) and calls `cuCtxSetCurrent` unless it is this device's and this
//! `CudaApi` made it current on the thread itself (a thread-local remembers the last
//! `CudaApi` that left its context current, so a thread whose current context is a primary
//! context released by everyone and retained again at the same address, by a new `CudaApi`,
//! still gets it set again). What the call found current decides what it leaves behind:
//!
//! * nothing (a thread no CUDA code used yet, halcyon's own threads), this context, or one a
//!   dropped `CudaApi` left that nobody retains any more (destroyed; asked with
//!   `cuDevicePrimaryCtxGetState`): this context stays current, so the next call on the
//!   thread costs one `cuCtxGetCurrent`;
//! * any other context (the CUDA runtime's after `cudaSetDevice`, a context a library pushed,
//!   another device's `CudaApi`, one a dropped `CudaApi` left while someone still retains
//!   it): the call makes it current again before it returns
//!   (`cuCtxSetCurrent` replaces the top of the thread's context stack, so a pushed context
//!   comes back where it was), at the cost of two more `cuCtxSetCurrent`s. So halcyon-cuda
//!   never changes the device that other CUDA code on a shared thread (a tokio worker issuing
//!   submissions, say) works on.
//!
//! **Host functions after a device fault.** CUDA drops enqueued host functions after a sticky
//! error without running them. Their closures live in a registry (`src/callback.rs`), not in
//! leaked boxes, and are dropped with the `CudaApi`; the stream layer's fault probe turns the
//! fault into errors on the affected fences. A pinned staging buffer held by such a host
//! function (a read's or a write's) never returns to the pool: dropped with the closure, it is
//! orphaned (never reused, as the copy may still use it) and freed when the API drops.
//!
//! **Freeing staging.** `cuMemFreeHost` may wait for the device, so staging buffers beyond the
//! pool's limits are only *retired* on the copy paths (the issuing thread, which must not block)
//! and reused by later copies before anything new is allocated; they are freed in
//! `synchronize_stream`, `free` and when the API drops, calls that may block anyway.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, Weak};

use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdevice_attribute as Attr, CUdeviceptr, CUevent, CUevent_flags,
    CUfunction, CUfunction_attribute, CUgraph, CUgraphExec, CUjit_option,
    CUmemAllocationHandleType, CUmemAllocationType, CUmemAttach_flags, CUmemLocationType,
    CUmemPoolProps, CUmemPool_attribute, CUmemoryPool, CUmodule, CUresult, CUstream,
    CUstreamCaptureMode, CUstreamCaptureStatus, CUstream_flags, CU_MEMHOSTALLOC_DEVICEMAP,
    CU_MEMHOSTALLOC_PORTABLE,
};
use halcyon::stream::allocations::Allocations;
use halcyon::stream::registry::Registry;
use halcyon::stream::staging::{
    capacity_for, stage_from_device, stage_to_device, staging_len, Lease, Pinned, StagingPool,
};
use halcyon::stream::{
    ApiInfo, Capabilities, DevicePtr, EventFlags, EventHandle, FunctionHandle, GraphHandle,
    HostFunc, KernelParams, LaunchConfig, LoadedModule, MemoryPlacement, ModuleHandle, StreamApi,
    StreamHandle,
};
use halcyon::{EntryPoint, Error, ExecutableSpec, Result, StatusCode};

use crate::capture::CaptureGate;
use crate::module::{check_kernel_params, ptx_status_word, CudaModule, Image, FORMAT_CUDA};
use crate::objects::{destroy_last, Event, Function, Graph, KernelSignature, Module, Stream};
use crate::probe::{Probe, PARAM_INFO_VERSION};
use crate::result::{check, cuda_error};
use crate::sys::{self, Code};
use crate::{callback, DRIVER_ID};

static NEXT_API: AtomicU64 = AtomicU64::new(1);

/// The `CudaApi` that last left its context current on a thread.
struct Left {
    id: u64,
    context: CUcontext,
    /// The device whose primary context `context` is.
    device: CUdevice,
    /// Dead once that `CudaApi` dropped: its release may have destroyed the context.
    alive: Weak<()>,
}

/// Whether a context a dropped `CudaApi` left current on this thread is gone: its device's
/// primary context is no longer retained by anyone (another `CudaApi`, the CUDA runtime, the
/// application), so making it current again would hand the driver a destroyed context. While
/// anyone still retains it the context lives, and other code on the thread may be using it:
/// it is given back like any other. A state the driver cannot tell counts as gone.
fn left_context_is_gone(device: CUdevice) -> bool {
    let mut flags: std::ffi::c_uint = 0;
    let mut active: std::ffi::c_int = 0;
    // SAFETY: valid out-pointers; `device` is a device handle the driver gave a `CudaApi`
    // (devices are never destroyed).
    let code = unsafe { sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active) };
    !code.is_success() || active == 0
}

thread_local! {
    /// The `CudaApi` that last made its context current on this thread and left it there.
    static BOUND: RefCell<Option<Left>> = const { RefCell::new(None) };
}

/// A context [`CudaApi::bind`] made current in place of another: dropping it makes the other
/// current again, so code that shares the thread (the CUDA runtime after `cudaSetDevice`, a
/// library that pushed its own context) finds its context where it left it.
#[must_use = "the context is only bound while the guard lives"]
struct Bound {
    /// The context that was current before, to make current again.
    restore: Option<CUcontext>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(previous) = self.restore {
            // SAFETY: `previous` was current on this thread when the guard was made, and making
            // a context current is allowed from any thread; if its owner destroyed it since,
            // the driver refuses it, which leaves this thread's context to that owner.
            let _ = unsafe { sys::cuCtxSetCurrent(previous) };
        }
    }
}

/// Bytes of JIT error log kept when loading a module fails.
const JIT_LOG_BYTES: usize = 16 << 10;
/// The shared memory every CUDA kernel may use per block without opting in (48 KiB): the
/// limit assumed where the device's cannot be read.
const DEFAULT_SHARED_MEMORY: u32 = 48 << 10;

/// The CUDA driver API for one device, as a [`StreamApi`] (see the [module docs](self)).
pub struct CudaApi {
    probe: &'static Probe,
    ordinal: i32,
    device: CUdevice,
    context: CUcontext,
    /// Process-unique: the thread-local binding key and the owner of host functions.
    id: u64,
    /// Held while the API lives: a thread where it left its context current can tell whether
    /// the context may since have been destroyed (see [`CudaApi::bind`]).
    alive: Arc<()>,
    info: ApiInfo,
    /// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`: the host may touch managed memory while
    /// kernels run, so host-visible (managed) buffers can be offered.
    concurrent_managed: bool,
    /// The most shared memory a block may have, static and dynamic together
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, else the 48 KiB every kernel
    /// may use): see [`CudaApi::set_shared_memory`].
    max_shared_memory: u32,
    staging: Arc<StagingPool>,
    /// Pinned copies of host data captured into graphs (see [`CudaApi::enable_graphs`]): while
    /// a capture runs, by its stream; once it made a graph, by the graph; once that graph was
    /// destroyed (or the capture failed), retired, and freed where the API may wait
    /// ([`Self::free_retired`]) or with the API.
    captured: Mutex<CapturedCopies>,
    /// Streams created and not destroyed. A destroyed `CUstream` must never reach the driver;
    /// the stream layer may free stream-ordered memory after the stream is gone and relies on
    /// an error then (it falls back to `free`). Like the registries below, see
    /// [`crate::objects`].
    streams: Registry<Stream>,
    /// Events created and not destroyed.
    events: Registry<Event>,
    /// Modules loaded and not unloaded, with their kernels' checked signatures.
    modules: Registry<Module>,
    /// The functions `get_function` handed out (of modules not unloaded): a launch must pass
    /// exactly their kernel's signature.
    functions: Registry<Function>,
    /// Executable graphs instantiated and not destroyed.
    graphs: Registry<Graph>,
    /// This API's own memory pool for stream-ordered allocation (where the device has memory
    /// pools): see [`CudaApi::set_pool_release_threshold`].
    pool: Option<MemPool>,
    /// The allocations made and not freed, with their allocators: a free must name the base of
    /// one (freed once, by the matching call), and a copy or fill must lie within one. Those
    /// still live are freed with the API.
    memory: Allocations<AllocKind>,
    /// Host functions enqueued so far ([`CudaApi::host_funcs_enqueued`]).
    host_funcs: AtomicU64,
    /// The streams capturing a graph now, counted by the device's [`CaptureGate`], with the
    /// thread that began each capture.
    capturing: Mutex<HashMap<u64, std::thread::ThreadId>>,
    /// Held shared by every call that enqueues on a stream (from its capture check to its
    /// driver call), exclusively by `cuStreamBeginCapture` and `cuStreamEndCapture`: the
    /// driver crashes (a segfault in `cuMemsetD8Async` or `cuLaunchHostFunc`, seen on an
    /// H200) when a capture begins or ends on a stream while another thread enqueues on it, and
    /// a capture beginning between an enqueue's capture check and its driver call would take
    /// in an operation the check refused for captures.
    capture_transitions: RwLock<()>,
}

/// Pinned copies of captured host-to-device data (see [`CudaApi::captured`]).
#[derive(Default)]
struct CapturedCopies {
    by_stream: HashMap<u64, Vec<Pinned>>,
    by_graph: HashMap<u64, Vec<Pinned>>,
    retired: Vec<Pinned>,
}

/// A stream held for an enqueue: the stream, and the shared side of
/// [`CudaApi::capture_transitions`] until the call's driver calls are made.
struct EnqueueStream<'a> {
    stream: Arc<Stream>,
    _no_capture_transition: RwLockReadGuard<'a, ()>,
}

impl std::ops::Deref for EnqueueStream<'_> {
    type Target = Stream;

    fn deref(&self) -> &Stream {
        &self.stream
    }
}

/// Which allocator made an allocation, and so which call frees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocKind {
    /// `cuMemAlloc`: freed by `cuMemFree`.
    Device,
    /// `cuMemAllocManaged`: host-addressable; freed by `cuMemFree`.
    Managed,
    /// `cuMemHostAlloc(DEVICEMAP | PORTABLE)`, with one address on both sides:
    /// host-addressable, copied to and from without staging; freed by `cuMemFreeHost`.
    Pinned,
    /// `cuMemAllocFromPoolAsync`: freed in stream order by `cuMemFreeAsync` (or at once by
    /// `cuMemFree`).
    StreamOrdered,
}

impl AllocKind {
    /// Whether the host may use the allocation's address itself.
    fn host_addressable(self) -> bool {
        matches!(self, AllocKind::Managed | AllocKind::Pinned)
    }
}

/// A `CUmemoryPool` created by [`CudaApi::new`] and destroyed with the API.
struct MemPool(CUmemoryPool);

// SAFETY: the CUDA driver API is thread-safe; the raw handles held here (a retained primary
// context, a memory pool) may be used from any thread once that thread binds the context, which
// every method does first.
unsafe impl Send for CudaApi {}
// SAFETY: as above; `&CudaApi` methods only read immutable fields or go through the driver and
// internally synchronised pools.
unsafe impl Sync for CudaApi {}

impl CudaApi {
    /// Opens device `index`: retains its primary context and reads its name and capabilities.
    /// `NotFound` if there is no such device. The probe proves libcuda is loaded and initialised.
    pub fn new(probe: &'static Probe, index: u32) -> Result<CudaApi> {
        let count = crate::device_count(probe)?;
        if i64::from(index) >= i64::from(count) {
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "{DRIVER_ID}://{index} does not exist: cuDeviceGetCount reports {count} devices"
                ),
            ));
        }
        let ordinal = index as c_int;
        let name = crate::describe_device(probe, ordinal)?;
        let mut device: CUdevice = 0;
        // SAFETY: valid out-pointer; the probe initialised the driver.
        check(unsafe { sys::cuDeviceGet(&mut device, ordinal) }, || {
            format!("cuDeviceGet({ordinal})")
        })?;
        let attribute = |a: Attr| -> i32 {
            let mut value: c_int = 0;
            // SAFETY: valid out-pointer and device.
            let r = unsafe { sys::cuDeviceGetAttribute(&mut value, a, device) };
            if r.is_success() {
                value
            } else {
                0
            }
        };
        // GRAPHS only on request (enable_graphs).
        let mut capabilities = Capabilities::HOST_FUNC;
        if attribute(Attr::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) == 1 {
            capabilities |= Capabilities::STREAM_ORDERED_ALLOC;
        }
        let concurrent_managed = attribute(Attr::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) == 1
            && attribute(Attr::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS) == 1;
        let sms = attribute(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).max(1) as u32;
        let max_shared_memory = [
            Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
        ]
        .into_iter()
        .map(|a| attribute(a).max(0) as u32)
        .find(|&bytes| bytes > 0)
        .unwrap_or(DEFAULT_SHARED_MEMORY);
        let blocks_per_sm =
            attribute(Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR).max(1) as u32;

        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device. Balanced by cuDevicePrimaryCtxRelease in Drop
        // (or just below on failure).
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) },
            || format!("cuDevicePrimaryCtxRetain(device {ordinal})"),
        )?;
        let api = CudaApi {
            probe,
            ordinal,
            device,
            context,
            id: NEXT_API.fetch_add(1, Ordering::Relaxed),
            alive: Arc::new(()),
            info: ApiInfo {
                driver: DRIVER_ID.into(),
                name,
                capabilities,
                // 16 bytes: what float4 / uint4 (vector) loads of a binding need.
                binding_alignment: 16,
                concurrency: sms.saturating_mul(blocks_per_sm),
            },
            concurrent_managed,
            max_shared_memory,
            staging: Arc::default(),
            captured: Mutex::default(),
            streams: Registry::new("CUDA", "stream"),
            events: Registry::new("CUDA", "event"),
            modules: Registry::new("CUDA", "module"),
            functions: Registry::new("CUDA", "function"),
            graphs: Registry::new("CUDA", "graph"),
            pool: None,
            memory: Allocations::new("CUDA"),
            host_funcs: AtomicU64::new(0),
            capturing: Mutex::default(),
            capture_transitions: RwLock::new(()),
        };
        // Fails early (e.g. the context cannot be created) rather than on first use, and keeps
        // the context current while the pool is made.
        let bound = api.bind()?;
        let mut api = api;
        if capabilities.contains(Capabilities::STREAM_ORDERED_ALLOC) {
            // Without its own pool the API allocates from the device's default pool, which
            // works, only with that pool's release threshold.
            api.pool = api.create_pool().ok();
            api.set_pool_release_threshold(u64::MAX)?;
        }
        drop(bound);
        Ok(api)
    }

    /// Creates the API's own pool of device memory (pinned, on this device, not exportable), so
    /// its release threshold and trimming touch nobody else's allocations (the device's
    /// default pool is shared with every other CUDA user in the process).
    fn create_pool(&self) -> Result<MemPool> {
        // SAFETY: an all-zero CUmemPoolProps is its documented default (every field zero or
        // null); the fields that matter are set below.
        let mut props: CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
        props.location.type_ = CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = self.ordinal;
        let mut pool: CUmemoryPool = std::ptr::null_mut();
        // SAFETY: valid out-pointer and properties; destroyed in Drop.
        check(unsafe { sys::cuMemPoolCreate(&mut pool, &props) }, || {
            format!("cuMemPoolCreate(device {})", self.ordinal)
        })?;
        Ok(MemPool(pool))
    }

    /// How many bytes of freed stream-ordered memory the pool keeps for reuse instead of
    /// returning them to the driver at the next synchronisation
    /// (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`). [`CudaApi::new`] sets `u64::MAX`, keeping
    /// everything: a CUDA pool's own default, 0, gives memory back at every synchronisation,
    /// and a completion thread synchronises with every submission, so each queue `alloca`
    /// would map fresh memory. What the pool keeps is given back when a plain allocation runs
    /// out of memory (the pool is trimmed and the allocation retried). No-op without memory
    /// pools.
    pub fn set_pool_release_threshold(&self, bytes: u64) -> Result<()> {
        let Some(pool) = &self.pool else {
            return Ok(());
        };
        let _bound = self.bind()?;
        let mut value: u64 = bytes;
        // SAFETY: a live pool; the attribute takes a cuuint64_t, which `value` is.
        check(
            unsafe {
                sys::cuMemPoolSetAttribute(
                    pool.0,
                    CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    (&mut value as *mut u64).cast(),
                )
            },
            || format!("cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, {bytes})"),
        )
    }

    /// Advertises [`Capabilities::GRAPHS`], so the stream layer replays a reusable command list
    /// submitted again as a CUDA graph (captured with `cuStreamBeginCapture` in relaxed mode,
    /// then `cuGraphLaunch`) instead of enqueueing its commands one by one.
    ///
    /// A graph's memcpy nodes read their host source at every launch, so a captured
    /// host-to-device update is taken from a pinned copy made at capture time (stream capture
    /// does not take pageable host memory), which lives as long as the graph: once the graph is
    /// destroyed it is freed at the next `free`, `synchronize_stream` or drop of the API
    /// (`cuMemFreeHost` may wait for the device, which those calls may). The graph methods
    /// themselves work either way.
    pub fn enable_graphs(&mut self) {
        self.info.capabilities |= Capabilities::GRAPHS;
    }

    /// Makes `call`; if the device is out of memory, gives back what this API's stream-ordered
    /// pool keeps (`cuMemPoolTrimTo(pool, 0)`, see [`CudaApi::set_pool_release_threshold`]) and
    /// makes it once more. For every call that allocates device memory outside the pool:
    /// `cuMemAlloc`, module loading (code and globals) and graph instantiation. The stream layer
    /// waits for frees still on their way before it retries an allocation, so by then the host
    /// has seen them complete and the trim releases them.
    fn trimming_on_oom(&self, mut call: impl FnMut() -> Code) -> Code {
        let r = call();
        match &self.pool {
            Some(pool) if r == CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                // SAFETY: a live pool; trimming only releases unused memory.
                let _ = unsafe { sys::cuMemPoolTrimTo(pool.0, 0) };
                call()
            }
            _ => r,
        }
    }

    /// `cuModuleGetFunction`: the kernel called `name` in `module` (loaded by this API and
    /// held by the caller).
    fn function(&self, module: CUmodule, name: &str) -> Result<CUfunction> {
        let c_name = CString::new(name).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!("kernel name {name:?} contains a NUL byte"),
            )
        })?;
        let _bound = self.bind()?;
        let mut f: CUfunction = std::ptr::null_mut();
        // SAFETY: a loaded module; a NUL-terminated name; valid out-pointer.
        let r = unsafe { sys::cuModuleGetFunction(&mut f, module, c_name.as_ptr()) };
        check(r, || {
            format!(
                "cuModuleGetFunction({name:?}) (the module has no such kernel; declare it \
                 extern \"C\" so its name is not mangled)"
            )
        })?;
        Ok(f)
    }

    /// Stream `s` of this API, held for the caller's driver calls; `InvalidArgument` if it is
    /// not a live stream of this API (destroyed, made up, or another API's). The caller has
    /// bound the context first, so that the stream is released while it is bound.
    fn live_stream(&self, s: StreamHandle) -> Result<Arc<Stream>> {
        self.streams.get(s.0)
    }

    /// [`Self::live_stream`] for a call that enqueues on it: no capture begins or ends on any
    /// of this API's streams until the returned guard drops (see
    /// [`CudaApi::capture_transitions`]). Never held across a wait for the device.
    fn enqueue_stream(&self, s: StreamHandle) -> Result<EnqueueStream<'_>> {
        let guard = self
            .capture_transitions
            .read()
            .unwrap_or_else(|p| p.into_inner());
        Ok(EnqueueStream {
            stream: self.live_stream(s)?,
            _no_capture_transition: guard,
        })
    }

    /// Event `e` of this API, held for the caller's driver calls (see [`Self::live_stream`]).
    fn live_event(&self, e: EventHandle) -> Result<Arc<Event>> {
        self.events.get(e.0)
    }

    /// Whether `len` bytes at `ptr` lie within one [`AllocKind::Pinned`] allocation (where a
    /// copy from or into host memory needs no staging).
    fn pinned_range(&self, ptr: u64, len: u64) -> bool {
        self.memory
            .within(ptr, len, |kind| kind == AllocKind::Pinned)
    }

    /// Whether `s` is being captured into a graph.
    fn capturing(&self, s: StreamHandle, live: &Stream) -> Result<bool> {
        // Read as a plain integer: an out-of-range value must not become an enum.
        let mut status: u32 = 0;
        // SAFETY: a live stream; the out-pointer is valid for the 4-byte enum.
        let r = unsafe { sys::cuStreamIsCapturing(live.raw(), (&mut status as *mut u32).cast()) };
        check(r, || format!("cuStreamIsCapturing({s:?})"))?;
        Ok(status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE as u32)
    }

    /// `FailedPrecondition` if `s` is being captured. Host functions here are one-shot closures
    /// taken out of the registry when they run (`src/callback.rs`), so a host node in a graph
    /// would run its closure on the first launch only; a captured device-to-host read would
    /// also hand its pinned staging back to the pool after the first launch while every later
    /// launch still copies into it (corrupting whatever read reuses it). Refuse both instead.
    fn refuse_capture(&self, s: StreamHandle, live: &Stream, what: &str) -> Result<()> {
        if !self.capturing(s, live)? {
            return Ok(());
        }
        Err(Error::new(
            StatusCode::FailedPrecondition,
            format!(
                "{what} cannot be enqueued on {s:?} while it is captured into a graph (a CUDA \
                 graph would replay it, but halcyon-cuda's host functions run once); enqueue it \
                 outside the capture"
            ),
        ))
    }

    /// `cuLaunchHostFunc` of `func` through the registry; the caller has bound the context and
    /// checked that `s` is not capturing.
    fn enqueue_host_func(&self, s: StreamHandle, live: &Stream, func: HostFunc) -> Result<()> {
        let user_data = callback::register(self.id, func);
        // SAFETY: the trampoline is a valid `extern "C" fn(*mut c_void)` for the whole process;
        // `user_data` is an id it looks up, never dereferenced, so it cannot dangle.
        let r = unsafe { sys::cuLaunchHostFunc(live.raw(), Some(callback::trampoline), user_data) };
        if !r.is_success() {
            // Not enqueued: CUDA will never call it.
            callback::cancel(user_data);
        } else {
            self.host_funcs.fetch_add(1, Ordering::Relaxed);
        }
        check(r, || format!("cuLaunchHostFunc({s:?})"))
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// The probe this API was opened with.
    pub fn probe(&self) -> &'static Probe {
        self.probe
    }

    /// The retained primary context, for interoperating with other CUDA code (it stays valid
    /// while this `CudaApi` lives).
    pub fn context(&self) -> CUcontext {
        self.context
    }

    /// Host functions registered and not yet run (after a device fault they never will; they
    /// are dropped with the API).
    pub fn pending_host_funcs(&self) -> usize {
        callback::pending_count(self.id)
    }

    /// Bytes of pinned memory held for captured host-to-device copies (see
    /// [`CudaApi::enable_graphs`]): of captures under way, of graphs alive, and of graphs
    /// destroyed whose copies a later `free`, `synchronize_stream` or drop frees.
    pub fn captured_copy_bytes(&self) -> usize {
        let captured = self.captured.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = |copies: &Vec<Pinned>| copies.iter().map(|p| p.capacity).sum::<usize>();
        captured.by_stream.values().map(bytes).sum::<usize>()
            + captured.by_graph.values().map(bytes).sum::<usize>()
            + bytes(&captured.retired)
    }

    /// Host functions enqueued on this API's streams so far (`cuLaunchHostFunc` calls that
    /// succeeded: the stream layer's completion callbacks, and the copies that staged).
    pub fn host_funcs_enqueued(&self) -> u64 {
        self.host_funcs.load(Ordering::Relaxed)
    }

    /// Makes this device's context current on the calling thread, unless it already is, for as
    /// long as the returned guard lives (see the [module docs](self)): if another context was
    /// current, dropping the guard makes it current again.
    fn bind(&self) -> Result<Bound> {
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        if !unsafe { sys::cuCtxGetCurrent(&mut current) }.is_success() {
            current = std::ptr::null_mut();
        }
        // Who left `current` current: (whether it was this API, whether it was a `CudaApi` now
        // dropped). `None`: no `CudaApi` left it (another library, the CUDA runtime, nothing).
        let left = BOUND.with(|b| {
            b.borrow()
                .as_ref()
                .filter(|l| l.context == current)
                .map(|l| (l.id == self.id, l.alive.strong_count() == 0, l.device))
        });
        if left.is_some_and(|(this, _, _)| this) {
            return Ok(Bound { restore: None });
        }
        // SAFETY: the context is retained for as long as `self` lives.
        check(unsafe { sys::cuCtxSetCurrent(self.context) }, || {
            format!(
                "cuCtxSetCurrent(primary context of device {})",
                self.ordinal
            )
        })?;
        // A context a dropped `CudaApi` left behind is not given back once nobody retains it
        // (destroyed); while someone does, it is given back like any other context, since the
        // application may be using it on this thread.
        let stale =
            left.is_some_and(|(_, dropped, device)| dropped && left_context_is_gone(device));
        if !stale && left.is_some_and(|(_, dropped, _)| dropped) {
            // Someone else's context from now on: later calls give it back without asking.
            BOUND.with(|b| *b.borrow_mut() = None);
        }
        if current.is_null() || current == self.context || stale {
            // Nobody else's context to give back: this one stays current for the next call.
            BOUND.with(|b| {
                *b.borrow_mut() = Some(Left {
                    id: self.id,
                    context: self.context,
                    device: self.device,
                    alive: Arc::downgrade(&self.alive),
                })
            });
            Ok(Bound { restore: None })
        } else {
            Ok(Bound {
                restore: Some(current),
            })
        }
    }

    /// Refuses an entry point whose workgroup is larger than the loaded kernel can launch
    /// (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`, which the kernel's registers, shared memory
    /// and `.maxntid` / `__launch_bounds__` lower below the device's 1024): every dispatch of
    /// it would fail with `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`. A driver that cannot answer
    /// leaves it to the launch.
    fn check_block_size(&self, function: FunctionHandle, entry: &EntryPoint) -> Result<()> {
        let attribute = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
        let max = function_attribute(function, attribute).unwrap_or(0);
        let threads: u64 = entry.workgroup_size.iter().map(|&d| u64::from(d)).product();
        if max <= 0 || threads <= max as u64 {
            return Ok(());
        }
        Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "kernel '{}' declares workgroup size {:?} ({threads} threads), but CUDA can \
                 launch it with at most {max} threads per block on device {} (its registers, \
                 shared memory or .maxntid / __launch_bounds__ limit it): declare a workgroup \
                 of at most {max} threads, or build the kernel for {threads} (for example \
                 __launch_bounds__({threads}))",
                entry.name, entry.workgroup_size, self.ordinal
            ),
        ))
    }

    /// Readies `function` for launches with `bytes` of dynamic shared memory, the entry point's
    /// declaration ([`CudaModule::with_shared_memory`]): refuses a kernel whose static shared
    /// memory (`CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`) plus `bytes` exceeds what a block of this
    /// device may have, and raises the kernel's dynamic limit
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, 48 KiB less its static memory by
    /// default) to `bytes` where that is below, which kernels above 48 KiB must opt in to.
    /// Nothing for a kernel declaring none.
    fn set_shared_memory(
        &self,
        function: FunctionHandle,
        entry: &EntryPoint,
        bytes: u32,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let f = function.0 as usize as CUfunction;
        let read = |attribute| function_attribute(function, attribute).map(|v| v.max(0) as u32);
        let name = &entry.name;
        let statik = read(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
        let total = u64::from(statik.unwrap_or(0)) + u64::from(bytes);
        if total > u64::from(self.max_shared_memory) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "kernel '{name}' declares {bytes} bytes of dynamic shared memory{}, but a \
                     block on device {} may have at most {} bytes of shared memory \
                     (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN): declare less",
                    match statik {
                        Some(s) if s > 0 => format!(" on top of its {s} bytes of static"),
                        _ => String::new(),
                    },
                    self.ordinal,
                    self.max_shared_memory
                ),
            ));
        }
        let dynamic = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        if read(dynamic).is_some_and(|limit| limit >= bytes) {
            return Ok(());
        }
        // SAFETY: as above; the attribute takes an int, and `bytes` fits one (it is below the
        // device's limit, itself an int).
        let r = unsafe { sys::cuFuncSetAttribute(f, dynamic, bytes as c_int) };
        check(r, || {
            format!(
                "cuFuncSetAttribute(kernel '{name}', MAX_DYNAMIC_SHARED_SIZE_BYTES, {bytes}): \
                 the kernel cannot have the dynamic shared memory its entry point declares"
            )
        })
        .map_err(|e| Error::new(StatusCode::InvalidArgument, e.message().to_owned()))
    }

    /// Held across a call that may synchronise the context (`cuMemFree`, `cuMemFreeHost`,
    /// `cuModuleUnload`), which would invalidate a graph capture: waits until no stream of
    /// this device captures, and keeps captures from beginning meanwhile (see
    /// [`crate::capture`]).
    fn no_captures(&self) -> crate::capture::SyncCall {
        CaptureGate::get().sync(self.device)
    }

    /// Stops counting stream `s`'s capture (ended, or its stream destroyed), if it has one.
    fn capture_ended(&self, s: StreamHandle) {
        let began = self
            .capturing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&s.0);
        if let Some(thread) = began {
            CaptureGate::get().end(self.device, thread);
        }
    }

    fn free_pinned(&self, buffers: Vec<Pinned>) {
        let _no_captures = (!buffers.is_empty()).then(|| self.no_captures());
        for buffer in buffers {
            // SAFETY: allocated by cuMemAllocHost in this context and no longer in use (it was
            // idle in the pool).
            let _ = unsafe { sys::cuMemFreeHost(buffer.ptr.as_ptr().cast()) };
        }
    }

    /// Frees the staging buffers retired beyond the pool's limits. `cuMemFreeHost` may wait for
    /// the device, so only where the API may block: `synchronize_stream`, `free` and drop, never
    /// on the copy paths (the issuing thread) or in event waits (completion threads).
    fn free_retired(&self) {
        self.free_pinned(self.staging.take_retired());
        let captured = std::mem::take(
            &mut self
                .captured
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retired,
        );
        self.free_pinned(captured);
    }

    /// Moves the pinned copies of capture `from` (a stream's) to graph `to`, or retires them.
    fn captured_copies(&self, from: u64, to: Option<u64>) {
        let mut captured = self.captured.lock().unwrap_or_else(|p| p.into_inner());
        let copies = captured.by_stream.remove(&from).unwrap_or_default();
        match to {
            Some(graph) => captured.by_graph.entry(graph).or_default().extend(copies),
            None => captured.retired.extend(copies),
        }
    }

    /// A pinned staging buffer of at least `len` bytes: an unused one (idle, or retired and not
    /// yet freed), else a new one. The caller trims the pool once it took it.
    fn pinned(&self, len: usize) -> Result<Pinned> {
        if let Some(buffer) = self.staging.take_unused(len) {
            return Ok(buffer);
        }
        let capacity = capacity_for(len);
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is bound.
        check(
            unsafe { sys::cuMemAllocHost_v2(&mut ptr, capacity) },
            || format!("cuMemAllocHost({capacity} bytes of pinned staging)"),
        )?;
        let ptr = NonNull::new(ptr.cast()).ok_or_else(|| {
            Error::new(
                StatusCode::Internal,
                "cuMemAllocHost succeeded but returned a null pointer",
            )
        })?;
        Ok(Pinned { ptr, capacity })
    }

    /// A lease of pinned staging of at least `len` bytes for one copy ([`Self::pinned`]), after
    /// retiring the idle buffers beyond the pool's limits.
    fn staging_lease(&self, len: usize) -> Result<Lease> {
        let buffer = self.pinned(len)?;
        self.staging.trim();
        Ok(Lease::new(buffer, self.staging.clone()))
    }

    /// A [`MemoryPlacement::Pinned`] allocation of `bytes` (non-zero) bytes: page-locked host
    /// memory mapped into the device's address space (`cuMemHostAlloc(DEVICEMAP | PORTABLE)`),
    /// kept only if its device address (`cuMemHostGetDevicePointer`) is its host address, and
    /// recorded in `mapped`. The context is bound.
    fn allocate_pinned(&self, bytes: usize) -> Result<CUdeviceptr> {
        let flags = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the context is bound; the flags are documented ones.
        check(
            unsafe { sys::cuMemHostAlloc(&mut host, bytes, flags as c_uint) },
            || {
                format!(
                    "cuMemHostAlloc({bytes} bytes, CU_MEMHOSTALLOC_DEVICEMAP | \
                     CU_MEMHOSTALLOC_PORTABLE)"
                )
            },
        )?;
        if host.is_null() {
            return Err(Error::new(
                StatusCode::Internal,
                "cuMemHostAlloc succeeded but returned a null pointer",
            ));
        }
        let mut device: CUdeviceptr = 0;
        // SAFETY: valid out-pointer; `host` was just returned by cuMemHostAlloc with
        // CU_MEMHOSTALLOC_DEVICEMAP and is not freed; the flags must be 0.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) };
        let base = host as usize as u64;
        if r.is_success() && device == base {
            self.memory.insert(base, bytes as u64, AllocKind::Pinned);
            return Ok(device);
        }
        // SAFETY: allocated just above by cuMemHostAlloc, freed once; nothing used it.
        let _ = unsafe { sys::cuMemFreeHost(host) };
        let why = if r.is_success() {
            format!("its device address {device:#x} differs from its host address {base:#x}")
        } else {
            cuda_error("cuMemHostGetDevicePointer", r)
                .message()
                .to_string()
        };
        Err(Error::new(
            StatusCode::Unimplemented,
            format!(
                "{}: pinned host memory has no single address valid on host and device ({why}; \
                 every visible device must report \
                 CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, so restricting \
                 CUDA_VISIBLE_DEVICES to such devices may help); allocate device memory and use \
                 queue reads and writes instead",
                self.info.name
            ),
        ))
    }

    /// A host-to-device copy on a stream captured into a graph. The graph's memcpy node reads
    /// its source at every launch, and capture does not take pageable memory: the bytes are
    /// copied now into pinned memory kept with the graph (see [`CudaApi::captured`]). No host
    /// function is involved (it would run once only).
    ///
    /// # Safety
    /// `src..src+bytes` must be readable.
    unsafe fn copy_captured_host_to_device(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        s: StreamHandle,
        live: &Stream,
    ) -> Result<()> {
        let mut captured = self.captured.lock().unwrap_or_else(|p| p.into_inner());
        let copies = captured.by_stream.entry(s.0).or_default();
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; allowed while capturing in relaxed mode.
        check(unsafe { sys::cuMemAllocHost_v2(&mut ptr, bytes) }, || {
            format!("cuMemAllocHost({bytes} bytes) for a captured host-to-device copy")
        })?;
        let ptr: NonNull<u8> = NonNull::new(ptr.cast()).ok_or_else(|| {
            Error::new(
                StatusCode::Internal,
                "cuMemAllocHost returned a null pointer",
            )
        })?;
        let pinned = Pinned {
            ptr,
            capacity: bytes,
        };
        // SAFETY: the caller guarantees `src..src+bytes` is readable; the new pinned buffer
        // holds `bytes` bytes and overlaps nothing.
        unsafe { pinned.fill_from(src, bytes) };
        copies.push(pinned);
        drop(captured);
        // SAFETY: a pinned copy kept with the capture, then its graph, and freed only after the
        // graph was destroyed, by a call that waits for the device's work.
        check(
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst.0, ptr.as_ptr().cast(), bytes, live.raw()) },
            || format!("cuMemcpyHtoDAsync({dst:?}, {bytes} bytes, {s:?}) during capture"),
        )
    }
}

impl Drop for CudaApi {
    fn drop(&mut self) {
        // Host functions still pending will never run (a faulted context drops them) or belong
        // to streams nobody synchronised; either way nothing waits for them any more.
        callback::drop_owned_by(self.id);
        let open: Vec<u64> = self
            .capturing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect();
        for s in open {
            self.capture_ended(StreamHandle(s));
        }
        // The objects nobody destroyed (functions first: they hold their modules). Destroyed
        // with the context bound; if it cannot be bound, forgotten: the context's destruction
        // takes them with it, and a driver call without it would be the driver's undefined
        // behaviour.
        let functions = self.functions.drain();
        let modules = self.modules.drain();
        let graphs = self.graphs.drain();
        let events = self.events.drain();
        let streams = self.streams.drain();
        if let Ok(_bound) = self.bind() {
            drop((functions, modules, graphs, events, streams));
            self.free_pinned(self.staging.drain());
            let captured =
                std::mem::take(&mut *self.captured.lock().unwrap_or_else(|p| p.into_inner()));
            let CapturedCopies {
                by_stream,
                by_graph,
                retired,
            } = captured;
            self.free_pinned(
                by_stream
                    .into_values()
                    .chain(by_graph.into_values())
                    .flatten()
                    .chain(retired)
                    .collect(),
            );
            let _no_captures = self.no_captures();
            for (base, _, kind) in self.memory.drain() {
                // SAFETY: an allocation of this API nobody freed, forgotten by the drain, so
                // freed once, by the call matching its allocator; the API is going away, and
                // the stream layer keeps it alive until the work using its memory completed.
                let _ = unsafe { free_kind(base, kind) };
            }
            if let Some(pool) = self.pool.take() {
                // SAFETY: the pool is not used again, and this device's context is current (a
                // call after `_bound` would run under whatever context it gives back).
                // Allocations still outstanding (or frees not yet completed) keep it alive in
                // the driver until they are gone.
                let _ = unsafe { sys::cuMemPoolDestroy(pool.0) };
            }
        } else {
            // Without the context no driver call is made: the pool goes with the process.
            std::mem::forget((functions, modules, graphs, events, streams));
        }
        // SAFETY: balances the retain in `new`. Other users of the primary context keep it
        // alive; the last release destroys it, with everything still allocated in it.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// Frees the allocation at `base`, made by `kind`'s allocator, on a thread where its context is
/// bound and behind the capture gate.
///
/// # Safety
/// `base` is the base of a live allocation of `kind` that nothing uses any more and that is
/// freed only here.
unsafe fn free_kind(base: u64, kind: AllocKind) -> Result<()> {
    match kind {
        // SAFETY: forwarded from the caller.
        AllocKind::Pinned => check(
            unsafe { sys::cuMemFreeHost(base as usize as *mut c_void) },
            || format!("cuMemFreeHost({base:#x})"),
        ),
        // SAFETY: forwarded from the caller; cuMemFree also frees stream-ordered memory.
        _ => check(unsafe { sys::cuMemFree_v2(base) }, || {
            format!("cuMemFree({base:#x})")
        }),
    }
}

fn usize_len(len: u64, what: &str) -> Result<usize> {
    usize::try_from(len).map_err(|_| {
        Error::new(
            StatusCode::OutOfRange,
            format!("{what} of {len} bytes does not fit this host's address space"),
        )
    })
}

// SAFETY: see the trait's contract; every handle and pointer is checked against the objects
// and allocations this API made (`Registry`, `Allocations`) before it reaches CUDA.
unsafe impl StreamApi for CudaApi {
    fn info(&self) -> ApiInfo {
        self.info.clone()
    }

    fn max_grid(&self) -> [u32; 3] {
        crate::module::MAX_GRID_DIM
    }

    // ---------------------------------------------------------------- streams

    fn create_stream(&self) -> Result<StreamHandle> {
        let _bound = self.bind()?;
        let mut s: CUstream = std::ptr::null_mut();
        let flags = CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
        // SAFETY: valid out-pointer; context bound.
        check(unsafe { sys::cuStreamCreate(&mut s, flags) }, || {
            "cuStreamCreate(CU_STREAM_NON_BLOCKING)".into()
        })?;
        let handle = StreamHandle(s as usize as u64);
        self.streams.insert(handle.0, Stream::new(s));
        Ok(handle)
    }

    fn destroy_stream(&self, handle: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        // Only one destroy finds it; no call looks it up any more.
        let s = self.streams.remove(handle.0)?;
        self.capture_ended(handle);
        // A capture it ended here made no graph: its copies are retired.
        self.captured_copies(handle.0, None);
        // cuStreamDestroy here, or when the last call using the stream returns; enqueued work
        // still completes (the driver releases the stream's resources once it is done).
        destroy_last(s)
    }

    fn synchronize_stream(&self, handle: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let live = self.live_stream(handle)?;
        // SAFETY: a live stream of this context, held for the call.
        let synchronized = check(unsafe { sys::cuStreamSynchronize(live.raw()) }, || {
            format!("cuStreamSynchronize({handle:?})")
        });
        self.free_retired(); // this method may block
        synchronized
    }

    // ---------------------------------------------------------------- events

    fn create_event(&self, flags: EventFlags) -> Result<EventHandle> {
        let _bound = self.bind()?;
        let mut cu_flags = 0;
        if flags.contains(EventFlags::BLOCKING_SYNC) {
            cu_flags |= CUevent_flags::CU_EVENT_BLOCKING_SYNC as c_uint;
        }
        if flags.contains(EventFlags::DISABLE_TIMING) {
            cu_flags |= CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        }
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; context bound.
        check(unsafe { sys::cuEventCreate(&mut e, cu_flags) }, || {
            format!("cuEventCreate({flags:?})")
        })?;
        self.events.insert(e as usize as u64, Event::new(e));
        Ok(EventHandle(e as usize as u64))
    }

    fn destroy_event(&self, handle: EventHandle) -> Result<()> {
        let _bound = self.bind()?;
        // cuEventDestroy here, or when the last call using the event returns; a pending
        // record completes harmlessly (CUDA defers the release until it has).
        destroy_last(self.events.remove(handle.0)?)
    }

    fn record_event(&self, e: EventHandle, s: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let (event, live) = (self.live_event(e)?, self.enqueue_stream(s)?);
        // SAFETY: a live event and stream of this context, held for the call.
        check(
            unsafe { sys::cuEventRecord(event.raw(), live.raw()) },
            || format!("cuEventRecord({e:?}, {s:?})"),
        )
    }

    fn query_event(&self, e: EventHandle) -> Result<bool> {
        let _bound = self.bind()?;
        let event = self.live_event(e)?;
        // SAFETY: a live event of this context, held for the call.
        match unsafe { sys::cuEventQuery(event.raw()) } {
            Code::SUCCESS => Ok(true),
            Code::NOT_READY => Ok(false),
            code => Err(cuda_error(&format!("cuEventQuery({e:?})"), code)),
        }
    }

    fn synchronize_event(&self, e: EventHandle) -> Result<()> {
        let _bound = self.bind()?;
        let event = self.live_event(e)?;
        // SAFETY: a live event of this context, held for the call. With CU_EVENT_BLOCKING_SYNC
        // the thread sleeps.
        check(unsafe { sys::cuEventSynchronize(event.raw()) }, || {
            format!("cuEventSynchronize({e:?})")
        })
    }

    fn stream_wait_event(&self, s: StreamHandle, e: EventHandle) -> Result<()> {
        let _bound = self.bind()?;
        let (live, event) = (self.enqueue_stream(s)?, self.live_event(e)?);
        // SAFETY: a live stream and event of this context, held for the call; flags 0
        // (CU_EVENT_WAIT_DEFAULT).
        check(
            unsafe { sys::cuStreamWaitEvent(live.raw(), event.raw(), 0) },
            || format!("cuStreamWaitEvent({s:?}, {e:?})"),
        )
    }

    // ---------------------------------------------------------------- host functions

    fn launch_host_func(&self, s: StreamHandle, func: HostFunc) -> Result<()> {
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        self.refuse_capture(s, &live, "a host function")?;
        self.enqueue_host_func(s, &live, func)
    }

    // ---------------------------------------------------------------- memory

    fn allocate(&self, size: u64, placement: MemoryPlacement) -> Result<DevicePtr> {
        if size == 0 {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                "cannot allocate 0 bytes of CUDA memory",
            ));
        }
        let bytes = usize_len(size, "an allocation")?;
        let _bound = self.bind()?;
        let mut ptr: CUdeviceptr = 0;
        match placement {
            MemoryPlacement::Device => {
                // SAFETY: valid out-pointer; context bound. cuMemAlloc aligns to at least 256.
                let r = self.trimming_on_oom(|| unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes) });
                check(r, || format!("cuMemAlloc({size} bytes)"))?;
                self.memory.insert(ptr, size, AllocKind::Device);
            }
            MemoryPlacement::HostVisible => {
                if !self.concurrent_managed {
                    return Err(Error::new(
                        StatusCode::Unavailable,
                        format!(
                            "{}: host-visible buffers are managed memory, which this device \
                             cannot share with the host while kernels run (no \
                             CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS); allocate device \
                             memory and use queue reads and writes",
                            self.info.name
                        ),
                    ));
                }
                let flags = CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as c_uint;
                // SAFETY: valid out-pointer; context bound.
                check(
                    unsafe { sys::cuMemAllocManaged(&mut ptr, bytes, flags) },
                    || format!("cuMemAllocManaged({size} bytes, CU_MEM_ATTACH_GLOBAL)"),
                )?;
                self.memory.insert(ptr, size, AllocKind::Managed);
            }
            MemoryPlacement::Pinned => ptr = self.allocate_pinned(bytes)?,
        }
        Ok(DevicePtr(ptr))
    }

    fn free(&self, ptr: DevicePtr) -> Result<()> {
        let _bound = self.bind()?;
        // Forgotten whether or not the free succeeds: after a sticky fault cuMemFree and
        // cuMemFreeHost report the fault, and whether they freed the memory is not documented,
        // so keeping the record (for the drop to free again) could free it twice; forgetting it
        // can only leak it.
        let (_, kind) = self.memory.remove(ptr.0, |_| Ok(()))?;
        self.free_retired(); // this method may block
        let _no_captures = self.no_captures();
        // SAFETY: the base of a live allocation of this API, just forgotten, so freed exactly
        // once, by the call matching its allocator; the stream layer frees only after the work
        // using it completed.
        unsafe { free_kind(ptr.0, kind) }
    }

    fn host_pointer(&self, ptr: DevicePtr) -> Option<NonNull<u8>> {
        // Pinned, device-mapped host memory has one address on both sides (checked when it
        // was allocated), and so has managed memory (unified addressing), which is only
        // allocated where the host may touch it while kernels run.
        self.memory
            .within(ptr.0, 0, AllocKind::host_addressable)
            .then(|| NonNull::new(ptr.0 as usize as *mut u8))
            .flatten()
    }

    fn allocate_async(&self, size: u64, s: StreamHandle) -> Result<DevicePtr> {
        if !self
            .info
            .capabilities
            .contains(Capabilities::STREAM_ORDERED_ALLOC)
        {
            return Err(halcyon::stream::api::unimplemented(
                DRIVER_ID,
                "stream-ordered allocation on a device without memory pools",
            ));
        }
        if size == 0 {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                "cannot allocate 0 bytes of CUDA memory",
            ));
        }
        let bytes = usize_len(size, "an allocation")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        let mut ptr: CUdeviceptr = 0;
        let r = match &self.pool {
            // SAFETY: valid out-pointer; a live pool and a live stream of this context.
            Some(pool) => unsafe {
                sys::cuMemAllocFromPoolAsync(&mut ptr, bytes, pool.0, live.raw())
            },
            // SAFETY: valid out-pointer; a live stream of this context.
            None => unsafe { sys::cuMemAllocAsync(&mut ptr, bytes, live.raw()) },
        };
        check(r, || {
            let call = if self.pool.is_some() {
                "cuMemAllocFromPoolAsync"
            } else {
                "cuMemAllocAsync"
            };
            format!("{call}({size} bytes, {s:?})")
        })?;
        self.memory.insert(ptr, size, AllocKind::StreamOrdered);
        Ok(DevicePtr(ptr))
    }

    fn free_async(&self, ptr: DevicePtr, s: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        let (len, kind) = self.memory.remove(ptr.0, |kind| match kind {
            AllocKind::StreamOrdered => Ok(()),
            other => Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "{ptr:?} was not allocated in stream order ({other:?} memory): free it with \
                     free()"
                ),
            )),
        })?;
        // SAFETY: a stream-ordered allocation of this API, just forgotten (freed once), on a
        // live stream held for the call; freed once the stream reaches this point.
        let freed = check(unsafe { sys::cuMemFreeAsync(ptr.0, live.raw()) }, || {
            format!("cuMemFreeAsync({ptr:?}, {s:?})")
        });
        if freed.is_err() {
            // Not enqueued: kept, so that the caller's fallback (`free`) frees it.
            self.memory.insert(ptr.0, len, kind);
        }
        freed
    }

    unsafe fn copy_host_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bytes = usize_len(len, "a copy")?;
        // Held live until the copy is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "copy to the device")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        // Checked whether or not GRAPHS is advertised: the staged path below enqueues a host
        // function, which a capture would turn into a one-shot host node (see refuse_capture).
        if self.capturing(s, &live)? {
            // SAFETY: forwarded from the caller.
            return unsafe { self.copy_captured_host_to_device(dst, src, bytes, s, &live) };
        }
        if self.pinned_range(src as usize as u64, len) {
            // From this API's pinned memory the copy is asynchronous as it is: no staging.
            // SAFETY: `src..src+len` lies within a live pinned allocation, which the caller
            // keeps valid and unmodified until the copy completed on `s`.
            return check(
                unsafe { sys::cuMemcpyHtoDAsync_v2(dst.0, src.cast(), bytes, live.raw()) },
                || format!("cuMemcpyHtoDAsync({dst:?}, {len} bytes from pinned memory, {s:?})"),
            );
        }
        // From pageable memory cuMemcpyHtoDAsync may wait for the stream (the driver stages
        // the bytes and may synchronise to do so); from pinned memory it returns at once. So
        // the caller's bytes go through pooled pinned staging, chunk by chunk, the buffer
        // returned to the pool by a host function once the stream passed the last copy from it
        // (see halcyon::stream::staging).
        let lease = self.staging_lease(staging_len(bytes))?;
        let copy = |staging: *const u8, offset: usize, n: usize| {
            let to = DevicePtr(dst.0 + offset as u64);
            // SAFETY: `staging` holds `n` bytes of pinned memory that stage_to_device keeps
            // for this copy until the stream passed it.
            let r = unsafe { sys::cuMemcpyHtoDAsync_v2(to.0, staging.cast(), n, live.raw()) };
            check(r, || format!("cuMemcpyHtoDAsync({to:?}, {n} bytes, {s:?})"))
        };
        // SAFETY: the caller keeps `src..src+len` readable and unmodified until the copy
        // completed on `s` (which includes the host functions enqueued on it), and pinned
        // staging is not the caller's memory. A buffer a failure orphans, or whose host
        // function a sticky fault drops, is never reused; the API frees it when dropped.
        unsafe {
            stage_to_device(lease, src, bytes, copy, |f| {
                self.enqueue_host_func(s, &live, f)
            })
            .map_err(|e| e.context("cannot stage a copy to the device"))
        }
    }

    unsafe fn copy_device_to_host_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bytes = usize_len(len, "a copy")?;
        // Held live until the copy is enqueued (a free meanwhile waits).
        let _src = self.memory.check(src, len, "copy from the device")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        // Checked before anything is enqueued (the copy into staging would be captured too).
        self.refuse_capture(s, &live, "a device-to-host copy")?;
        if self.pinned_range(dst as usize as u64, len) {
            // Into this API's pinned memory the copy is asynchronous as it is: no staging.
            // SAFETY: `dst..dst+len` lies within a live pinned allocation, which the caller
            // keeps valid and untouched by anything else until the copy completed on `s`.
            return check(
                unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src.0, bytes, live.raw()) },
                || format!("cuMemcpyDtoHAsync({src:?}, {len} bytes into pinned memory, {s:?})"),
            );
        }
        // Into pinned memory: into pageable memory cuMemcpyDtoHAsync would block until the
        // stream reached and finished it. So the bytes come through pooled pinned staging,
        // chunk by chunk, each copied out by a host function (see halcyon::stream::staging).
        let lease = self.staging_lease(staging_len(bytes))?;
        let copy = |staging: *mut u8, offset: usize, n: usize| {
            let from = DevicePtr(src.0 + offset as u64);
            // SAFETY: `staging` holds `n` bytes of pinned memory that stage_from_device keeps
            // for this copy until its host function copied them out.
            let r = unsafe { sys::cuMemcpyDtoHAsync_v2(staging.cast(), from.0, n, live.raw()) };
            check(r, || {
                format!("cuMemcpyDtoHAsync({from:?}, {n} bytes, {s:?})")
            })
        };
        // SAFETY: the caller keeps `dst..dst+len` valid and untouched until the copy completed
        // on `s`, which includes the host functions enqueued on it (work after them waits for
        // them); pinned staging and the caller's memory are disjoint. A buffer a failure
        // orphans, or whose host function a sticky fault drops, is never reused.
        unsafe {
            stage_from_device(lease, dst, bytes, copy, |f| {
                self.enqueue_host_func(s, &live, f)
            })
            .map_err(|e| e.context("cannot stage a copy from the device"))
        }
    }

    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bytes = usize_len(len, "a copy")?;
        // Both held live until the copy is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "device copy destination")?;
        let _src = self.memory.check(src, len, "device copy source")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        // SAFETY: a live stream, held for the call; ranges within live allocations; invalid ones are reported by the driver, never touch
        // host memory.
        check(
            unsafe { sys::cuMemcpyDtoDAsync_v2(dst.0, src.0, bytes, live.raw()) },
            || format!("cuMemcpyDtoDAsync({dst:?}, {src:?}, {len} bytes, {s:?})"),
        )
    }

    fn memset_async(
        &self,
        dst: DevicePtr,
        pattern: u32,
        pattern_len: u8,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        let width = u64::from(pattern_len);
        if !matches!(pattern_len, 1 | 2 | 4) || dst.0 % width != 0 || len % width != 0 {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "memset of {len} bytes at {dst:?} with a {pattern_len}-byte pattern: the \
                     pattern must be 1, 2 or 4 bytes and the address and length multiples of it"
                ),
            ));
        }
        if len == 0 {
            return Ok(());
        }
        let count = usize_len(len / width, "a fill")?;
        // Held live until the fill is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "fill")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        let (d, st) = (dst.0, live.raw());
        // SAFETY: a live stream, held for the call; device addresses only, aligned for the element width (checked above).
        let (r, call) = unsafe {
            match pattern_len {
                1 => (
                    sys::cuMemsetD8Async(d, pattern as u8, count, st),
                    "cuMemsetD8Async",
                ),
                2 => (
                    sys::cuMemsetD16Async(d, pattern as u16, count, st),
                    "cuMemsetD16Async",
                ),
                _ => (
                    sys::cuMemsetD32Async(d, pattern, count, st),
                    "cuMemsetD32Async",
                ),
            }
        };
        check(r, || {
            format!("{call}({dst:?}, {pattern:#x}, {count} elements, {s:?})")
        })
    }

    // ---------------------------------------------------------------- modules and kernels

    fn module_formats(&self) -> Vec<String> {
        vec![FORMAT_CUDA.into()]
    }

    fn load_module(&self, spec: &ExecutableSpec) -> Result<LoadedModule> {
        let module = CudaModule::from_spec(spec)?;
        let _bound = self.bind()?;
        // Loading may synchronise the context (a JIT compile, lazy loading waiting for the
        // device), which would invalidate a capture under way: the capture gate keeps the two
        // apart. A load that fails unloads what it loaded from inside this call, which the
        // gate lets through (the thread is inside a call already).
        let _no_captures = self.no_captures();
        let ptx;
        let binary;
        let image: *const c_void = match module.code() {
            Image::Ptx(text) => {
                // NUL-free (validated); cuModuleLoadData reads PTX up to the NUL.
                ptx = CString::new(text.as_str()).map_err(|_| {
                    Error::new(StatusCode::InvalidArgument, "PTX text contains a NUL byte")
                })?;
                ptx.as_ptr().cast()
            }
            Image::Binary(bytes) => {
                // Aligned for the ELF headers, and followed by 4096 zero bytes (see
                // `loader_image`): cheap defence for a fixed-size read past the end of an
                // image that is shorter than its caller vouched.
                binary = halcyon::backend::loader_image(bytes, bytes.len() + 4096);
                binary.as_ptr().cast()
            }
        };
        let mut log = vec![0 as c_char; JIT_LOG_BYTES];
        // The JIT budgets registers so that a block of the largest workgroup among the entry
        // points can launch (without it, a kernel using many registers compiles to fewer
        // threads per block than its workgroup; a cubin was sized when it was built).
        let threads_per_block = module
            .entry_points()
            .iter()
            .map(|e| e.workgroup_size.iter().product::<u32>())
            .max()
            .unwrap_or(1);
        let mut options = [
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            CUjit_option::CU_JIT_THREADS_PER_BLOCK,
        ];
        let log_ptr: *mut c_void = log.as_mut_ptr().cast();
        let mut handle: CUmodule = std::ptr::null_mut();
        let r = self.trimming_on_oom(|| {
            // JIT option values are passed as pointer-sized words: the buffer, its size, the
            // threads per block. The driver overwrites the last two (with the log's length and
            // what it targeted), so every attempt passes fresh ones.
            let mut values: [*mut c_void; 3] = [
                log_ptr,
                std::ptr::without_provenance_mut(JIT_LOG_BYTES),
                std::ptr::without_provenance_mut(threads_per_block as usize),
            ];
            // SAFETY: `image` is NUL-terminated PTX (which the JIT checks), or a binary image
            // that reached here only through an unsafe constructor or an unchecked spec, whose
            // caller vouched for it (`CudaModule::binary`'s contract); it, the log buffer,
            // `options` and `values` outlive the call; the option count matches both arrays.
            unsafe {
                sys::cuModuleLoadDataEx(
                    &mut handle,
                    image,
                    options.len() as c_uint,
                    options.as_mut_ptr(),
                    values.as_mut_ptr(),
                )
            }
        });
        if !r.is_success() {
            let bytes: Vec<u8> = log
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            let log = String::from_utf8_lossy(&bytes);
            let mut error = cuda_error(
                &format!(
                    "cuModuleLoadData({} image with entry points [{}])",
                    module.kind(),
                    module
                        .entry_points()
                        .iter()
                        .map(|e| e.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                r,
            );
            if !log.trim().is_empty() {
                error = Error::new(
                    error.code(),
                    format!("{}; JIT log:\n{}", error.message(), log.trim_end()),
                );
            }
            return Err(error);
        }
        // Owned from here: an error below drops it, which unloads it (from inside this call,
        // which the capture gate lets through).
        let mut loaded = Module::new(handle, self.device);
        let mut status_words = Vec::with_capacity(module.entry_points().len());
        for (index, entry) in module.entry_points().iter().enumerate() {
            // The driver's report where it has one (CUDA 12.4+); for PTX also its text, which
            // says whether the kernel takes a status word on any driver (validated above). For
            // a cubin kernel the driver cannot report on, see `cubin_status_word`.
            // Where both the driver and the PTX text answer, they must agree.
            let checked = self.function(loaded.raw(), &entry.name).and_then(|f| {
                let f = FunctionHandle(f as usize as u64);
                let params = kernel_params(self.probe, f);
                let reported = match &params {
                    Some(params) if !params.is_empty() => Some(check_kernel_params(entry, params)?),
                    _ => None,
                };
                let status_word = match module.code() {
                    Image::Ptx(text) => {
                        let parsed = ptx_status_word(text, entry)?;
                        if reported.is_some_and(|reported| reported != parsed) {
                            return Err(Error::new(
                                StatusCode::InvalidArgument,
                                format!(
                                    "kernel '{}': the driver reports {} status word, but its \
                                     PTX text declares {}; refusing to guess how to launch it",
                                    entry.name,
                                    if parsed { "no" } else { "a" },
                                    if parsed { "one" } else { "none" }
                                ),
                            ));
                        }
                        parsed
                    }
                    Image::Binary(_) => {
                        cubin_status_word(reported, params.is_some_and(|p| p.is_empty()), entry)
                    }
                };
                self.check_block_size(f, entry)?;
                self.set_shared_memory(f, entry, module.shared_memory(index))?;
                Ok((f, status_word))
            });
            let (_, status_word) = checked?;
            status_words.push(status_word);
            loaded.signatures.insert(
                entry.name.clone(),
                KernelSignature {
                    bindings: entry.binding_count as usize,
                    constants: entry.constant_count as usize,
                    status_word,
                },
            );
        }
        let handle = ModuleHandle(loaded.raw() as usize as u64);
        self.modules.insert(handle.0, loaded);
        Ok(LoadedModule {
            module: handle,
            entry_points: module.entry_points().to_vec(),
            status_words,
            shared_memory_bytes: (0..module.entry_points().len())
                .map(|index| module.shared_memory(index))
                .collect(),
        })
    }

    fn unload_module(&self, module: ModuleHandle) -> Result<()> {
        let _bound = self.bind()?;
        let module = self.modules.remove(module.0)?;
        // Its functions go too (dropped here, before the module: they hold it).
        drop(
            self.functions
                .retain(|_, f| !Arc::ptr_eq(&f.module, &module)),
        );
        // cuModuleUnload (behind the capture gate) here, or when the last launch of one of its
        // kernels returns; the stream layer unloads only after the work using it completed.
        destroy_last(module)
    }

    fn get_function(&self, module_handle: ModuleHandle, name: &str) -> Result<FunctionHandle> {
        let _bound = self.bind()?;
        let module = self.modules.get(module_handle.0)?;
        let Some(signature) = module.signatures.get(name).copied() else {
            let mut names: Vec<&str> = module.signatures.keys().map(String::as_str).collect();
            names.sort_unstable();
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "the CUDA module has no entry point '{name}'; it declares: [{}]",
                    names.join(", ")
                ),
            ));
        };
        let function = self.function(module.raw(), name)?;
        let handle = FunctionHandle(function as usize as u64);
        let held = module.clone();
        self.functions
            .insert(handle.0, Function::new(function, signature, module));
        if !self
            .modules
            .get(module_handle.0)
            .is_ok_and(|live| Arc::ptr_eq(&live, &held))
        {
            // An unload raced this call and dropped the module's functions before the insert:
            // this one would keep the unloaded module alive until the API goes.
            drop(self.functions.remove(handle.0));
            return Err(self.modules.missing(module_handle.0));
        }
        Ok(handle)
    }

    fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        s: StreamHandle,
    ) -> Result<()> {
        let status = params.status;
        let _bound = self.bind()?;
        let f = self.functions.get(function.0).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "{function:?} is not a live CUDA function: get_function did not hand it out, \
                     or its module was unloaded"
                ),
            )
        })?;
        let live = self.enqueue_stream(s)?;
        let signature = f.signature;
        if (
            params.bindings.len(),
            params.constants.len(),
            status.is_some(),
        ) != (
            signature.bindings,
            signature.constants,
            signature.status_word,
        ) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "{function:?} takes {} bindings and {} constants{}; the launch passes {} and \
                     {}{}",
                    signature.bindings,
                    signature.constants,
                    if signature.status_word {
                        " and a status word"
                    } else {
                        ""
                    },
                    params.bindings.len(),
                    params.constants.len(),
                    if status.is_some() {
                        " and a status word"
                    } else {
                        ""
                    }
                ),
            ));
        }
        // The word the kernel stores to: 4 aligned bytes of a live allocation of this API (a
        // made-up address would have the kernel write wherever it points, host memory
        // included where the device can reach it), held live until the launch is enqueued.
        let _status = status
            .map(|word| {
                if word.0 % 4 != 0 {
                    return Err(Error::new(
                        StatusCode::InvalidArgument,
                        format!("{function:?}: the status word at {word:?} is not 4-byte aligned"),
                    ));
                }
                self.memory.check(word, 4, "status word")
            })
            .transpose()?;
        // The driver copies the values during the call, so they only need to outlive it: the
        // pointers (bindings, then the status word) are kept in `pointers`, the constants are
        // used in place.
        let bindings = params.bindings.len();
        let pointers: Vec<CUdeviceptr> = params
            .bindings
            .iter()
            .chain(status.as_ref())
            .map(|p| p.0)
            .collect();
        let mut args: Vec<*mut c_void> =
            Vec::with_capacity(pointers.len() + params.constants.len());
        args.extend(
            pointers[..bindings]
                .iter()
                .map(|p| p as *const CUdeviceptr as *mut c_void),
        );
        args.extend(
            params
                .constants
                .iter()
                .map(|c| c as *const u32 as *mut c_void),
        );
        args.extend(
            pointers[bindings..]
                .iter()
                .map(|p| p as *const CUdeviceptr as *mut c_void),
        );
        let kernel_params = if args.is_empty() {
            std::ptr::null_mut()
        } else {
            args.as_mut_ptr()
        };
        let LaunchConfig {
            grid,
            block,
            shared_memory_bytes,
        } = *config;
        // SAFETY: a function of a loaded module and a live stream, both held for the call
        // (the function holds its module). The kernel's parameters were
        // checked against its entry point at load (from the PTX text, and with
        // check_kernel_params where the driver reports them), and the launch passes exactly
        // that signature (checked above), so it reads no more argument values, and no larger
        // ones, than `args` points at; `pointers` and the constants outlive the call; `extra`
        // is null.
        let r = unsafe {
            sys::cuLaunchKernel(
                f.raw(),
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_memory_bytes,
                live.raw(),
                kernel_params,
                std::ptr::null_mut(),
            )
        };
        check(r, || {
            format!(
                "cuLaunchKernel(grid {grid:?}, block {block:?}, {} bindings, {} constants{}, \
                 {s:?})",
                params.bindings.len(),
                params.constants.len(),
                if status.is_some() {
                    ", a status word"
                } else {
                    ""
                }
            )
        })
    }

    // ---------------------------------------------------------------- graphs

    fn begin_capture(&self, s: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let live = self.live_stream(s)?;
        // Relaxed mode: no thread is refused "potentially unsafe" calls while this stream
        // captures. Other threads (the reactor's probe, completion threads) keep querying and
        // synchronising events, and a captured host-to-device copy allocates pinned memory on
        // this thread (cuMemAllocHost), which the global and thread-local modes would refuse.
        // Relaxed mode also lets other threads free memory and unload modules, which may
        // synchronise the context and so invalidate the capture: the device's capture gate
        // holds them back until it ends (see [`crate::capture`]).
        let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        CaptureGate::get().begin(self.device);
        // An entry already there is the capture under way on the stream: it stays counted for
        // the thread that began it.
        let previous = match self
            .capturing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(s.0)
        {
            std::collections::hash_map::Entry::Occupied(_) => Some(()),
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(std::thread::current().id());
                None
            }
        };
        if previous.is_some() {
            // Already capturing: the driver refuses below, and the first capture stays counted.
            CaptureGate::get().end(self.device, std::thread::current().id());
        }
        // No enqueue on any of this API's streams meanwhile (see `capture_transitions`); taken
        // after the capture gate, which may wait for a module load.
        let transition = self
            .capture_transitions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        // SAFETY: a live stream of this context, held for the call.
        let began = check(
            unsafe { sys::cuStreamBeginCapture_v2(live.raw(), mode) },
            || format!("cuStreamBeginCapture({s:?}, CU_STREAM_CAPTURE_MODE_RELAXED)"),
        );
        drop(transition);
        if began.is_err() && previous.is_none() {
            self.capture_ended(s);
        }
        began
    }

    fn end_capture(&self, s: StreamHandle) -> Result<GraphHandle> {
        let _bound = self.bind()?;
        let live = self.live_stream(s)?;
        let mut graph: CUgraph = std::ptr::null_mut();
        let transition = self
            .capture_transitions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        // SAFETY: a live stream, held for the call (a stream not capturing is the driver's
        // error); valid out-pointer.
        let ended = unsafe { sys::cuStreamEndCapture(live.raw(), &mut graph) };
        drop(transition);
        // The stream no longer captures, whatever the result.
        self.capture_ended(s);
        if let Err(e) = check(ended, || format!("cuStreamEndCapture({s:?})")) {
            // No graph: nothing will read the capture's copies.
            self.captured_copies(s.0, None);
            return Err(e);
        }
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: the graph just captured; valid out-pointer; flags 0.
        let r = self
            .trimming_on_oom(|| unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) });
        // SAFETY: the executable graph does not depend on the graph it was instantiated from.
        let _ = unsafe { sys::cuGraphDestroy(graph) };
        if let Err(e) = check(r, || "cuGraphInstantiateWithFlags".into()) {
            self.captured_copies(s.0, None);
            return Err(e);
        }
        let handle = exec as usize as u64;
        self.captured_copies(s.0, Some(handle));
        self.graphs.insert(handle, Graph::new(exec));
        Ok(GraphHandle(handle))
    }

    unsafe fn launch_graph(&self, graph: GraphHandle, s: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let (graph, live) = (self.graphs.get(graph.0)?, self.enqueue_stream(s)?);
        // SAFETY: an executable graph of this API and a live stream, both held for the call.
        check(
            unsafe { sys::cuGraphLaunch(graph.raw(), live.raw()) },
            || format!("cuGraphLaunch({:p}, {s:?})", graph.raw()),
        )
    }

    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        let _bound = self.bind()?;
        let held = self.graphs.remove(graph.0)?;
        // Its pinned copies are retired: freed by a later call that waits for the device, so
        // after the runs in flight that read them.
        {
            let mut captured = self.captured.lock().unwrap_or_else(|p| p.into_inner());
            let copies = captured.by_graph.remove(&graph.0).unwrap_or_default();
            captured.retired.extend(copies);
        }
        // cuGraphExecDestroy here, or when a launch under way returns; runs in flight finish
        // first (CUDA frees it asynchronously on completion).
        destroy_last(held)
    }
}

/// `cuFuncGetAttribute(attribute)` of `function`, a kernel of a module this API loaded, on a
/// thread where its context is bound; `None` where the driver cannot answer.
fn function_attribute(function: FunctionHandle, attribute: CUfunction_attribute) -> Option<c_int> {
    let mut value: c_int = 0;
    // SAFETY: a valid out-pointer; the caller's contract: a function of a loaded module, with
    // its context bound.
    let r = unsafe {
        sys::cuFuncGetAttribute(&mut value, attribute, function.0 as usize as CUfunction)
    };
    r.is_success().then_some(value)
}

/// Whether a cubin kernel is launched with a status word: as the driver reports
/// (`cuFuncGetParamInfo`) where it reported parameters; none where it reported no parameters
/// at all for an entry point that declares none (a kernel without parameters); otherwise
/// (the driver cannot say, or reports none for an entry point that declares some) one, since
/// an argument past a kernel's last parameter is never read, while a missing one would be read
/// from past the argument array.
fn cubin_status_word(reported: Option<bool>, reported_none: bool, entry: &EntryPoint) -> bool {
    match reported {
        Some(reported) => reported,
        None => !(reported_none && entry.binding_count == 0 && entry.constant_count == 0),
    }
}

/// The `(offset, size)` of each parameter of kernel `f` as the driver reports them
/// (`cuFuncGetParamInfo`, CUDA 12.4+); empty if it reports none or cannot say, and without
/// calling it on a driver older than CUDA 12.4 (which lacks the symbol: cudarc would panic).
fn kernel_params(probe: &Probe, f: FunctionHandle) -> Option<Vec<(usize, usize)>> {
    if !probe.supports(PARAM_INFO_VERSION) {
        return None;
    }
    let function = f.0 as usize as CUfunction;
    let mut params = Vec::new();
    // More parameters than the portable parameter space could hold is certainly a mismatch.
    for index in 0..=crate::module::MAX_PARAM_BYTES as usize {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: a function of a loaded module; valid out-pointers.
        match unsafe { sys::cuFuncGetParamInfo(function, index, &mut offset, &mut size) } {
            Code::SUCCESS => params.push((offset, size)),
            // Past the last parameter.
            Code::INVALID_VALUE => break,
            // The driver cannot say (e.g. not supported).
            _ => return None,
        }
    }
    Some(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubin_kernels_without_parameters_take_no_status_word() {
        let entry = |binding_count, constant_count| EntryPoint {
            name: "k".into(),
            workgroup_size: [1, 1, 1],
            binding_count,
            constant_count,
        };
        // The driver's report decides where it reported parameters.
        assert!(cubin_status_word(Some(true), false, &entry(1, 0)));
        assert!(!cubin_status_word(Some(false), false, &entry(1, 0)));
        // No parameters reported for an entry point declaring none: a parameterless kernel.
        assert!(!cubin_status_word(None, true, &entry(0, 0)));
        // No parameters reported for one declaring some, or no report: launched with a word.
        assert!(cubin_status_word(None, true, &entry(1, 0)));
        assert!(cubin_status_word(None, true, &entry(0, 2)));
        assert!(cubin_status_word(None, false, &entry(0, 0)));
    }
}
