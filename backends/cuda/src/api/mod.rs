//! [`CudaApi`]: halcyon's [`StreamApi`] as a translation table over the CUDA driver API.
//!
//! Every method binds the device's context to the calling thread (see below), makes one or two
//! driver calls ([`crate::sys`]: cudarc's declarations, results as numbers), and turns a
//! failing result into a [`halcyon::Error`] ([`crate::result`]). No policy lives here: ordering,
//! timelines, completion and fault handling are the stream layer's ([`halcyon_stream`]).
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
//! | `event_elapsed_ms`                  | `cuEventElapsedTime` (events without `CU_EVENT_DISABLE_TIMING`; `EVENT_TIMING` always advertised) |
//! | `launch_host_func`                  | `cuLaunchHostFunc` with an `extern "C"` trampoline (`src/callback.rs`); refused on a capturing stream (one-shot closures cannot be replayed) |
//! | `allocate(Device)`                  | `cuMemAlloc`; out of memory: the API's pool trimmed (`cuMemPoolTrimTo(pool, 0)`) and tried once more, as for module loading and graph instantiation |
//! | `allocate(HostVisible)`             | `cuMemAllocManaged(CU_MEM_ATTACH_GLOBAL)`; host pointer = the same address (needs concurrent managed access) |
//! | `allocate(Pinned)`                  | `cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP \| CU_MEMHOSTALLOC_PORTABLE)`, then `cuMemHostGetDevicePointer(flags 0)`, which must return the host address (else `cuMemFreeHost` and `Unimplemented`) |
//! | `free`                              | the base of a live allocation only (each recorded with its allocator): `cuMemFreeHost` for a pinned one, else `cuMemFree` |
//! | `host_pointer`                      | the address itself inside a pinned or managed allocation (no driver call) |
//! | `allocate_async` / `free_async`     | `cuMemAllocFromPoolAsync` from the API's own pool (`cuMemPoolCreate`, release threshold [`CudaApi::set_pool_release_threshold`]) / `cuMemFreeAsync`; when `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` |
//! | `copy_host_to_device_async`         | while capturing, from a pinned copy kept until the API drops; else from a source lying within one pinned allocation, `cuMemcpyHtoDAsync` straight from it (no staging, no host function); else through pinned staging in chunks of up to 8 MiB: the first chunk copied in at enqueue, each later one by the staging thread into the other half of a 16 MiB buffer while the device copies the one before (host functions hand them over and wait), `cuMemcpyHtoDAsync` from the buffer after each, and a host function returning it (`halcyon_stream::staging`) |
//! | `copy_device_to_host_async`         | refused while capturing; into a destination lying within one pinned allocation, `cuMemcpyDtoHAsync` straight into it (no staging, no host function); else through pinned staging in chunks of up to 8 MiB: `cuMemcpyDtoHAsync` into one half of the buffer, then a host function handing the chunk to the staging thread, which copies it out while the device fills the other half, the last one waiting for every chunk and returning the buffer (`halcyon_stream::staging`) |
//! | `copy_device_to_device_async`       | `cuMemcpyDtoDAsync`                                            |
//! | `can_access_peer` / `enable_peer_access` | `cuDeviceCanAccessPeer` / `cuCtxEnablePeerAccess(peer context, 0)` (already enabled is success); both trivially true for another `CudaApi` over the same device (`peer.rs`) |
//! | `copy_peer_async`                   | `cuMemcpyPeerAsync` with both devices' primary contexts, each range checked in its own API's allocations |
//! | `memset_async` (1, 2, 4 bytes)      | `cuMemsetD8Async` / `cuMemsetD16Async` / `cuMemsetD32Async`     |
//! | `load_module`                       | `cuModuleLoadDataEx` (PTX NUL-terminated, JIT-compiled for `CU_JIT_THREADS_PER_BLOCK` of the largest workgroup; or cubin/fatbin) with a JIT error log; `cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)` refuses a workgroup larger than the kernel can launch; `cuFuncGetParamInfo` checks each kernel's signature (drivers with CUDA 12.4+ only; skipped below); status words from the PTX `.param`s (which must agree with `cuFuncGetParamInfo` where it answers), or from `cuFuncGetParamInfo` for a cubin (without it: launched with one, which a kernel without the parameter never reads); an entry point declaring dynamic shared memory ([`CudaModule::with_shared_memory`]): `cuFuncGetAttribute(SHARED_SIZE_BYTES)` plus it within `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`, and `cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)` where it exceeds the kernel's default limit |
//! | `unload_module`                     | `cuModuleUnload`                                               |
//! | `get_function`                      | `cuModuleGetFunction`; the handle is registered with its kernel's checked signature, which a launch must match |
//! | `launch_kernel`                     | `cuLaunchKernel`; `kernelParams[i]` points at binding `i`'s `CUdeviceptr`, then at each `u32` constant, then at the status word's `CUdeviceptr` if there is one (see [`crate::module`]) |
//! | `begin_capture` / `end_capture`     | `cuStreamBeginCapture(CU_STREAM_CAPTURE_MODE_RELAXED)` / `cuStreamEndCapture` + `cuGraphInstantiateWithFlags`, the graph kept with its executable graph and its kernel nodes listed in capture order (`cuGraphGetRootNodes`, `cuGraphNodeGetDependentNodes`, `cuGraphNodeGetType`); while a stream of the device captures, `cuMemFree`, `cuMemFreeHost`, `cuModuleLoadDataEx` and `cuModuleUnload` (which may synchronise the context and so invalidate the capture) wait on other threads, and a capture waits for those under way (`src/capture.rs`) |
//! | `launch_graph` / `destroy_graph`    | `cuGraphLaunch` / `cuGraphExecDestroy` + `cuGraphDestroy`; `GRAPHS` is advertised only after [`CudaApi::enable_graphs`] |
//! | `update_graph_kernel`               | `cuGraphKernelNodeGetParams` (the node must launch the same function and shape) + `cuGraphExecKernelNodeSetParams` with `kernelParams` as for a launch; `GRAPH_UPDATE` with `GRAPHS`, where the driver exports both (`_v2`, CUDA 12.0) |
//!
//! Every call above exists in CUDA 11.4 or earlier except the `_v2` kernel-node calls of
//! `update_graph_kernel` (CUDA 12.0, looked up before `GRAPH_UPDATE` is advertised) and
//! `cuFuncGetParamInfo` (CUDA 12.4),
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
//! ([`halcyon_stream::allocations`]): a free must name the base of a live allocation, and a
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
//!
//! **Where it lives.** The trait's implementation below is a list of calls, one per method, to
//! the `CudaApi` method of the same name in the file of its concern: `context.rs` binds the
//! context, `streams.rs` holds the stream and event tables and host functions, `memory.rs`
//! allocations and the API's memory pool, `copies.rs` copies and fills with their pinned
//! staging, `peer.rs` peer access and peer copies, `modules.rs` module loading and function lookup, `launch.rs` kernel launches, and
//! `graphs.rs` graph capture with the copies captured into graphs.
//!
//! [`CudaModule::with_shared_memory`]: crate::CudaModule::with_shared_memory
//! [`PARAM_INFO_VERSION`]: crate::probe::PARAM_INFO_VERSION
//! [`Code::MISSING_SYMBOL`]: crate::sys::Code::MISSING_SYMBOL

mod collectives;
mod context;
mod copies;
mod graphs;
mod launch;
mod memory;
mod modules;
mod peer;
mod streams;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::ffi::c_int;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use cudarc::driver::sys::{CUcontext, CUdevice, CUdevice_attribute as Attr};
use halcyon::{Error, ExecutableSpec, Result, StatusCode};
use halcyon_stream::allocations::Allocations;
use halcyon_stream::registry::Registry;
use halcyon_stream::staging::StagingPool;
use halcyon_stream::{
    ApiInfo, Capabilities, DevicePtr, EventFlags, EventHandle, FunctionHandle, GraphHandle,
    HostFunc, KernelParams, LaunchConfig, LoadedModule, MemoryPlacement, ModuleHandle, StreamApi,
    StreamHandle,
};

use crate::module::FORMAT_CUDA;
use crate::objects::{Event, Function, Graph, Module, Stream};
use crate::probe::Probe;
use crate::result::check;
use crate::{callback, sys, DRIVER_ID};

use graphs::CapturedCopies;
use memory::{free_kind, AllocKind, MemPool};

static NEXT_API: AtomicU64 = AtomicU64::new(1);

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
    /// kernels run, so host-visible device-local (managed) buffers can be offered.
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
    /// The streams capturing a graph now, counted by the device's
    /// [`CaptureGate`](crate::capture::CaptureGate), with the thread that began each capture.
    capturing: Mutex<HashMap<u64, std::thread::ThreadId>>,
    /// Held shared by every call that enqueues on a stream (from its capture check to its
    /// driver call), exclusively by `cuStreamBeginCapture` and `cuStreamEndCapture`: the
    /// driver crashes (a segfault in `cuMemsetD8Async` or `cuLaunchHostFunc`, seen on an
    /// H200) when a capture begins or ends on a stream while another thread enqueues on it, and
    /// a capture beginning between an enqueue's capture check and its driver call would take
    /// in an operation the check refused for captures.
    capture_transitions: RwLock<()>,
}

impl std::fmt::Debug for CudaApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaApi")
            .field("ordinal", &self.ordinal)
            .finish_non_exhaustive()
    }
}

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
        let mut capabilities = Capabilities::HOST_FUNC | Capabilities::EVENT_TIMING;
        if sys::exports("cuStreamWriteValue32_v2\0") {
            capabilities |= Capabilities::WRITE_VALUE;
        }
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
        check(
            // SAFETY: valid out-pointer and device. Balanced by cuDevicePrimaryCtxRelease in Drop
            // (or just below on failure).
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) },
            || format!("cuDevicePrimaryCtxRetain(device {ordinal})"),
        )?;
        let mut total = 0usize;
        // SAFETY: a valid out-pointer and a device from cuDeviceGet.
        let memory_bytes = unsafe { sys::cuDeviceTotalMem_v2(&mut total, device) }
            .is_success()
            .then_some(total as u64);
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
                memory_bytes,
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

    /// Host functions enqueued on this API's streams so far (`cuLaunchHostFunc` calls that
    /// succeeded: the stream layer's completion callbacks, and the copies that staged).
    pub fn host_funcs_enqueued(&self) -> u64 {
        self.host_funcs.load(Ordering::Relaxed)
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

// SAFETY: see the trait's contract; every handle and pointer is checked against the objects
// and allocations this API made (`Registry`, `Allocations`) before it reaches CUDA.
//
// Each method is the inherent method of the same name in the file of its concern (an inherent
// method takes precedence over the trait's, so these are calls, not recursion).
unsafe impl StreamApi for CudaApi {
    fn info(&self) -> ApiInfo {
        self.info.clone()
    }

    fn max_grid(&self) -> [u32; 3] {
        crate::module::MAX_GRID_DIM
    }

    // ------------------------------------------------------------ streams and events (streams.rs)

    fn create_stream(&self) -> Result<StreamHandle> {
        CudaApi::create_stream(self)
    }

    fn destroy_stream(&self, handle: StreamHandle) -> Result<()> {
        CudaApi::destroy_stream(self, handle)
    }

    fn synchronize_stream(&self, handle: StreamHandle) -> Result<()> {
        CudaApi::synchronize_stream(self, handle)
    }

    fn create_event(&self, flags: EventFlags) -> Result<EventHandle> {
        CudaApi::create_event(self, flags)
    }

    fn destroy_event(&self, handle: EventHandle) -> Result<()> {
        CudaApi::destroy_event(self, handle)
    }

    fn record_event(&self, e: EventHandle, s: StreamHandle) -> Result<()> {
        CudaApi::record_event(self, e, s)
    }

    fn query_event(&self, e: EventHandle) -> Result<bool> {
        CudaApi::query_event(self, e)
    }

    fn synchronize_event(&self, e: EventHandle) -> Result<()> {
        CudaApi::synchronize_event(self, e)
    }

    fn stream_wait_event(&self, s: StreamHandle, e: EventHandle) -> Result<()> {
        CudaApi::stream_wait_event(self, s, e)
    }

    fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        CudaApi::event_elapsed_ms(self, start, end)
    }

    fn launch_host_func(&self, s: StreamHandle, func: HostFunc) -> Result<()> {
        CudaApi::launch_host_func(self, s, func)
    }

    // ------------------------------------------------------------------------- memory (memory.rs)

    fn allocate(&self, size: u64, placement: MemoryPlacement) -> Result<DevicePtr> {
        CudaApi::allocate(self, size, placement)
    }

    fn free(&self, ptr: DevicePtr) -> Result<()> {
        CudaApi::free(self, ptr)
    }

    fn host_pointer(&self, ptr: DevicePtr) -> Option<NonNull<u8>> {
        CudaApi::host_pointer(self, ptr)
    }

    fn allocate_async(&self, size: u64, s: StreamHandle) -> Result<DevicePtr> {
        CudaApi::allocate_async(self, size, s)
    }

    fn free_async(&self, ptr: DevicePtr, s: StreamHandle) -> Result<()> {
        CudaApi::free_async(self, ptr, s)
    }

    // --------------------------------------------------------------- copies and fills (copies.rs)

    unsafe fn copy_host_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { CudaApi::copy_host_to_device_async(self, dst, src, len, s) }
    }

    unsafe fn copy_device_to_host_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { CudaApi::copy_device_to_host_async(self, dst, src, len, s) }
    }

    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        CudaApi::copy_device_to_device_async(self, dst, src, len, s)
    }

    fn memset_async(
        &self,
        dst: DevicePtr,
        pattern: u32,
        pattern_len: u8,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        CudaApi::memset_async(self, dst, pattern, pattern_len, len, s)
    }

    // ------------------------------------------------------------------ peer access (peer.rs)

    fn can_access_peer(&self, peer: &Self) -> Result<bool> {
        CudaApi::can_access_peer(self, peer)
    }

    fn enable_peer_access(&self, peer: &Self) -> Result<()> {
        CudaApi::enable_peer_access(self, peer)
    }

    fn copy_peer_async(
        &self,
        dst: DevicePtr,
        peer: &Self,
        src: DevicePtr,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        CudaApi::copy_peer_async(self, dst, peer, src, len, s)
    }

    fn write_value32(&self, s: StreamHandle, ptr: DevicePtr, value: u32) -> Result<()> {
        CudaApi::write_value32(self, s, ptr, value)
    }

    // ------------------------------------------------ modules and kernels (modules.rs, launch.rs)

    fn module_formats(&self) -> Vec<String> {
        vec![FORMAT_CUDA.into()]
    }

    fn load_module(&self, spec: &ExecutableSpec) -> Result<LoadedModule> {
        CudaApi::load_module(self, spec)
    }

    fn unload_module(&self, module: ModuleHandle) -> Result<()> {
        CudaApi::unload_module(self, module)
    }

    fn get_function(&self, module_handle: ModuleHandle, name: &str) -> Result<FunctionHandle> {
        CudaApi::get_function(self, module_handle, name)
    }

    fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        s: StreamHandle,
    ) -> Result<()> {
        CudaApi::launch_kernel(self, function, config, params, s)
    }

    // ------------------------------------------------------------------------- graphs (graphs.rs)

    fn begin_capture(&self, s: StreamHandle) -> Result<()> {
        CudaApi::begin_capture(self, s)
    }

    fn end_capture(&self, s: StreamHandle) -> Result<GraphHandle> {
        CudaApi::end_capture(self, s)
    }

    unsafe fn launch_graph(&self, graph: GraphHandle, s: StreamHandle) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { CudaApi::launch_graph(self, graph, s) }
    }

    fn update_graph_kernel(
        &self,
        graph: GraphHandle,
        kernel: usize,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
    ) -> Result<()> {
        CudaApi::update_graph_kernel(self, graph, kernel, function, config, params)
    }

    fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        CudaApi::destroy_graph(self, graph)
    }

    fn gather_kernel(&self) -> Option<ExecutableSpec> {
        Some(crate::gather::spec())
    }

    fn create_channel(
        &self,
        provider: &dyn halcyon::ChannelProvider,
        params: &halcyon::ChannelParams,
    ) -> Result<Box<dyn halcyon::backend::ChannelBackend>> {
        self.nccl_channel(provider, params)
    }

    unsafe fn enqueue_collective(
        &self,
        channel: &dyn halcyon::backend::ChannelBackend,
        kind: &halcyon::backend::CollectiveKind,
        send: Option<(DevicePtr, u64)>,
        recv: Option<(DevicePtr, u64)>,
        stream: StreamHandle,
    ) -> Result<()> {
        // SAFETY: the trait's contract, passed on.
        unsafe { self.nccl_enqueue(channel, kind, send, recv, stream) }
    }
}
