//! [`HipStreamApi`]: halcyon's [`StreamApi`] translation table over the HIP runtime
//! ([`crate::result::Hip`]), so that the generic stream layer ([`halcyon_stream`]) makes a
//! whole device of it.
//!
//! | core vocabulary ([`StreamApi`])  | HIP call                                                     |
//! |----------------------------------|--------------------------------------------------------------|
//! | bind the device to a thread      | `hipGetDevice`; `hipSetDevice(index)` when another is current, and `hipSetDevice(previous)` after the call (see [Threads](#threads)) |
//! | adopt a thread                   | `hipSetDevice(index)`, kept                                  |
//! | stream                           | `hipStreamCreateWithFlags(hipStreamNonBlocking)` / `hipStreamDestroy` |
//! | synchronize stream               | `hipStreamSynchronize`                                       |
//! | event                            | `hipEventCreateWithFlags(hipEventDisableTiming)` (`hipEventDefault` for an event without [`EventFlags::DISABLE_TIMING`], a timing event): the *shared* HIP event; for [`EventFlags::BLOCKING_SYNC`] also a *private* one, `hipEventCreateWithFlags(hipEventBlockingSync)` (that flag alone), because HIP holds an event's lock for the whole of `hipEventSynchronize` (see [Events](#events)) / `hipEventDestroy` of each |
//! | record / query / synchronize     | `hipEventRecord` of the shared event, then of the private one on the same stream (a failure of the second is the call's error) / `hipEventQuery` of the shared one (`hipErrorNotReady` → pending) / `hipEventSynchronize` of the private one (of the shared one without a private one, or while the private one missed the last record), so that a thread blocked there never holds the lock a query or stream wait needs |
//! | stream waits event               | `hipStreamWaitEvent(stream, shared event, 0)`                |
//! | event elapsed time               | `hipEventElapsedTime` of the shared events (created without `hipEventDisableTiming` for events without [`EventFlags::DISABLE_TIMING`]); `EVENT_TIMING` always advertised |
//! | host function                    | `hipLaunchHostFunc` if exported, else `hipStreamAddCallback` (HIP 5.2) |
//! | device memory                    | `hipMalloc` (out of memory: the API's pool trimmed, `hipMemPoolTrimTo(pool, 0)`, and tried once more) / `hipFree` |
//! | host-visible memory              | `hipMallocManaged(hipMemAttachGlobal)` / `hipFree`, or `hipHostMalloc(hipHostMallocMapped)` / `hipHostFree` ([`HostVisibleMemory`]) |
//! | pinned memory ([`MemoryPlacement::Pinned`]) | `hipHostMalloc(hipHostMallocMapped \| hipHostMallocCoherent)` / `hipHostFree` whatever [`HostVisibleMemory`] says; `hipHostGetDevicePointer` must return the host address (else `hipHostFree` and `Unimplemented`) |
//! | stream-ordered allocation        | `hipMallocFromPoolAsync` from the API's own pool (`hipMemPoolCreate`, release threshold [`HipStreamApi::set_pool_release_threshold`]) / `hipFreeAsync`; `hipMallocAsync` on the device's default pool where the pool calls are not all exported or the pool cannot be made; when `hipMallocAsync` is exported and `hipDeviceAttributeMemoryPoolsSupported` |
//! | copy host → device               | through pinned staging (`hipHostMalloc`) in chunks of up to 8 MiB: the first chunk copied in at enqueue, each later one by the staging thread into the other half of a 16 MiB buffer while the device copies the one before (host functions hand them over and wait), `hipMemcpyAsync(HostToDevice)` from the buffer after each, then a host function returning it to the pool (`halcyon_stream::staging`); straight from the source (no staging, no host function) if it lies within one of this API's host-visible or pinned allocations |
//! | copy device → host               | through pinned staging in chunks of up to 8 MiB: `hipMemcpyAsync(DeviceToHost)` into one half of the buffer, then a host function handing the chunk to the staging thread, which copies it out while the device fills the other half, the last one waiting for every chunk and returning the buffer (`halcyon_stream::staging`); straight into the destination (no staging, no host function) if it lies within one of this API's host-visible or pinned allocations |
//! | copy device → device             | `hipMemcpyAsync(DeviceToDevice)`                             |
//! | peer access / peer copy          | `hipDeviceCanAccessPeer` / `hipDeviceEnablePeerAccess(peer, 0)` (already enabled is success) / `hipMemcpyPeerAsync`, all optional (no peer access without them); another API over the same device reaches its memory as it is (`peer.rs`) |
//! | fills                            | `hipMemsetD8Async` / `hipMemsetD16Async` / `hipMemsetD32Async` |
//! | module ([`FORMAT_HSACO`])        | `hipModuleLoadData` (after the checks of [`HipModule`], and each kernel's static LDS plus its declared dynamic shared memory checked against `hipDeviceAttributeMaxSharedMemoryPerBlock`; out of memory: the pool trimmed and tried once more) / `hipModuleUnload` |
//! | function                         | `hipModuleGetFunction`                                       |
//! | kernel launch                    | `hipModuleLaunchKernel`, `kernelParams` = one pointer per argument: each binding's device pointer, then each `u32` constant (then the status word's device pointer, for a kernel that takes one: [`crate::module`]); the grid checked first against `hipDeviceAttributeMaxGridDim{X,Y,Z}` and `grid × block ≤ u32::MAX` per dimension (`InvalidArgument`), which some runtimes would otherwise truncate |
//! | graphs                           | not offered ([`Capabilities::GRAPHS`] unset)                 |
//!
//! # Handles
//!
//! HIP handles (`hipStream_t`, `hipEvent_t`, ...) are pointers; the [`StreamApi`] handles are
//! their addresses as `u64`. Because the trait's methods are safe, every handle is looked up in
//! a registry of live objects first: a handle that is not live is an `InvalidArgument` error,
//! never a pointer handed to HIP. A call holds the object (an `Arc`) while HIP uses it, and the
//! HIP object is destroyed when the last holder lets go, so a destroy racing a use cannot free
//! the object under the use. Device addresses are checked the same way against the live
//! allocations before a copy or fill is enqueued.
//!
//! # Events
//!
//! HIP serialises everything done to one event under that event's lock, and
//! `hipEventSynchronize` holds it for the whole wait: `Event::synchronize`, `Event::query`,
//! `Event::streamWait` and `Event::addMarker` take the same `lock_` (hipamd 5.2.3
//! `src/hip_event.cpp`; ROCm/clr 5.7 through 7.x `hipamd/src/hip_event.cpp`). The stream
//! layer's completion threads sleep in `synchronize_event` on a submission's completion event
//! while other threads query it and make streams wait on it (`query_event`,
//! `stream_wait_event`), and those calls, which must not block, would wait for the submission
//! to complete. So an event created with [`EventFlags::BLOCKING_SYNC`] (the kind a completion
//! thread waits on) is two HIP events: the shared one, recorded, queried and waited on by
//! streams, and a private one only `synchronize_event` uses. `record_event` records the shared
//! one, then the private one on the same stream, so the private one completes after the shared
//! one (stream order) and a synchronisation returns only once the shared record completed
//! too. If the second record fails the call fails, and `synchronize_event` waits on the shared
//! event until a later record of both succeeds, so it never returns before the most recent
//! record completed. Events created without the flag are one HIP event. Cost: one more
//! `hipEventRecord` per completion event.
//!
//! The private event is created with `hipEventBlockingSync` and no other flag: the newest
//! ROCm/clr sleeps in `hipEventSynchronize` only for an event whose flags are exactly that
//! (`flags_ == hipEventBlockingSync`); ROCm through 6.2 ignores the flag there (the device's
//! scheduling flags decide, and HIP starts every device polling, so a device with completion
//! threads is switched to sleeping waits there: [`HipStreamApi::schedule_blocking_sync`]),
//! and clr releases in between test its bit.
//! `hipEventDisableTiming` would buy nothing on it: AMD's runtime records the same timestamped
//! marker either way.
//!
//! # Threads
//!
//! HIP keeps the current device per thread. Every call first asks which device is current on
//! the calling thread (`hipGetDevice`, a thread-local read in the runtime) and makes this
//! API's device current (`hipSetDevice`) only when it is another. Then, before it returns, it
//! makes the thread's previous device current again (two more `hipSetDevice`s), so other HIP
//! code sharing the thread (a tokio worker issuing submissions, say) keeps working on the
//! device it chose, and may switch devices between the API's calls without restoring
//! anything. A fresh thread's device is 0, which HIP cannot tell from one chosen, so that is
//! given back too. The exception is the threads the stream layer runs for the API (completion
//! threads, reclaimer, reactor: [`StreamApi::adopt_thread`]), where only halcyon works: there
//! the device stays current, and calls cost one `hipGetDevice`.
//!
//! # Host functions
//!
//! HIP 5.2 does not export `hipLaunchHostFunc`, so host functions are stream callbacks
//! (`hipStreamAddCallback`) there: an `extern "C"` trampoline receives the boxed [`HostFunc`]
//! as its user data. A callback whose status is not `hipSuccess` drops the function unrun, as
//! [`StreamApi::launch_host_func`] requires after a stream error; HIP itself always passes
//! `hipSuccess` (hipamd 5.2.3 and ROCm/clr call the callback with a constant status; see
//! [Device faults](#device-faults)), so that branch is defensive. A panic in the function is
//! caught at the trampoline (it must not unwind into HIP). HIP runs a stream callback on a
//! runtime thread and blocks the stream's later work until it returns: the stream layer
//! enqueues them on a dedicated callback stream for that reason. If HIP never calls the
//! callback, the function is leaked, never run.
//!
//! # Device faults
//!
//! On ROCm a GPU fault (a memory access violation, an illegal instruction, a kernel's
//! `abort()` or `__builtin_trap()`) does not come back through this API at all: the runtime's
//! HSA queue-error callback prints the error and calls `abort()`, ending the process (ROCclr
//! 5.2.3 `device/rocm/rocdevice.cpp` and ROCm/clr `rocclr/device/rocm/rocdevice.cpp`,
//! `callbackQueue`). No sticky error reaches `hipEventQuery`, `hipEventSynchronize` or
//! `hipStreamSynchronize`, and stream callbacks receive `hipSuccess`. What this API does with
//! error statuses (a callback status that is not `hipSuccess`, an event query or
//! synchronisation that fails), and the stream layer's fault probe above it, are defensive
//! handling of what the HIP API declares, not a path a faulting kernel takes on ROCm. A kernel
//! fails its dispatch through a status word instead ([`crate::module`]).
//!
//! # Copies between host and device
//!
//! In hipamd, `hipMemcpyAsync` with a pageable host pointer (a `Vec`, which is what the stream
//! layer hands a queue write or read) on either side waits on the host for the stream, which
//! [`StreamApi`] forbids outside `synchronize_*`. So both directions go through pinned staging
//! buffers (`hipHostMalloc`, pooled; see `halcyon_stream::staging`), from which `hipMemcpyAsync` is
//! asynchronous, with a host function on the same stream after the copy: for a write it only
//! returns the buffer to the pool (the caller's bytes were copied into it at enqueue); for a
//! read it first copies the bytes to the caller's memory, and the stream's later work (the
//! submission's completion event) waits for it. A copy over 8 MiB goes through the two halves
//! of one 16 MiB buffer chunk by chunk, the staging thread copying one chunk on the host while
//! the device copies the next (`halcyon_stream::staging` explains why). The host functions call no HIP function. Copies from or to this API's own host-visible or pinned memory (managed, or mapped pinned:
//! [`MemoryPlacement::Pinned`] and [`HostVisibleMemory::MappedHost`]; known from the allocation
//! registry) need no staging and go straight to `hipMemcpyAsync`.
//!
//! Costs: an extra host memcpy per copy, and a host function per copy or 8 MiB chunk (on HIP 5.2, without
//! `hipLaunchHostFunc`, a stream callback, slower and blocking the copy's stream until it
//! returns). Idle buffers are bounded (8 buffers, 64 MiB); the ones beyond that are retired.
//! `hipHostFree` waits for every stream of the device (hipamd 5.2.3 `ihipFree` finishes the
//! null stream and synchronises the non-blocking streams; ROCm/clr's calls `SyncAllStreams`),
//! so retired buffers are freed only where waiting for other work is allowed:
//! `synchronize_stream`, `free` (whose `hipFree` waits the same way) and on drop; never in
//! `synchronize_event`, which the stream layer's completion threads call to wait for their
//! own queue's work only, nor when a copy is enqueued. Until then a copy reuses a retired
//! buffer before it allocates a new one, so the pinned staging allocated stays within what the
//! most copies in flight at once needed. A buffer whose host function is dropped unrun (HIP
//! refused to enqueue it, or reported a stream error) may still be in use by the device: it is
//! never reused and is freed only when the `HipStreamApi` is dropped, after its streams were
//! synchronised and destroyed; one whose callback HIP never calls at all stays allocated
//! (leaked).
//!
//! # Host-visible memory
//!
//! halcyon maps host-visible buffers at the address the device uses, so a host-visible
//! allocation needs one address valid on both sides. [`HostVisibleMemory::Auto`] takes
//! managed memory (`hipMallocManaged`, IREE's choice for device-local host-visible memory) when
//! the device reports `hipDeviceAttributeManagedMemory`, and pinned, mapped host memory
//! (`hipHostMalloc(hipHostMallocMapped)`) otherwise, whose device address
//! (`hipHostGetDevicePointer`) must equal its host address (it does on ROCm, which maps pinned
//! memory at the same virtual address; the allocation is refused if not). Each allocation
//! remembers which allocator made it, and is freed by the matching call.
//!
//! Where managed memory lives depends on the system, not on halcyon. With XNACK enabled
//! (`HSA_XNACK=1` on GPUs that support it, such as MI200 and MI300; reported as
//! `hipDeviceAttributePageableMemoryAccess`) or on an APU, its pages migrate to the GPU on
//! access, so a host-visible buffer the device works on is device-local after the first touch.
//! Without XNACK (the default on most discrete GPUs) ROCm keeps managed memory in host RAM and
//! the device reads and writes it over the bus, as it does mapped host memory: use host-visible
//! buffers for uploads, read-backs and small shared state, and device-local buffers for what
//! kernels work on.
//!
//! [`MemoryPlacement::Pinned`] memory is always the mapped kind, made coherent
//! (`hipHostMalloc(hipHostMallocMapped | hipHostMallocCoherent)`, same-address check and all:
//! the stream layer reads kernels' status words from it), whatever
//! [`HostVisibleMemory`] picks for host-visible buffers: [`StreamApi::host_pointer`] returns its
//! address, and copies to and from it skip staging.
//!
//! [`HipModule`]: crate::module::HipModule

use std::ptr::NonNull;
use std::sync::Arc;

use halcyon::{Error, ExecutableSpec, Result, StatusCode};
use halcyon_stream::allocations::Allocations;
use halcyon_stream::registry::Registry;
use halcyon_stream::staging::StagingPool;
use halcyon_stream::{
    ApiInfo, Capabilities, DevicePtr, EventFlags, EventHandle, FunctionHandle, HostFunc,
    KernelParams, LaunchConfig, LoadedModule, MemoryPlacement, ModuleHandle, StreamApi,
    StreamHandle,
};

use crate::module::FORMAT_HSACO;
use crate::result::Hip;
use crate::sys;

// By concern: the device current on a thread, streams and events, host functions,
// allocation, copies and fills (with staging), code objects and function lookup, launches.
// The `StreamApi` impl below forwards each method to the file of its concern.
mod collectives;
mod context;
mod copies;
mod host_funcs;
mod launch;
mod memory;
mod modules;
mod peer;
mod streams;
#[cfg(test)]
mod tests;

pub(crate) use context::bind_device;
use launch::DEFAULT_MAX_GRID;
pub use memory::HostVisibleMemory;
use memory::{AllocKind, MemPool};
use modules::{RawFunction, RawModule, DEFAULT_MAX_SHARED_MEMORY};
use streams::{RawEvent, RawStream};

fn invalid(message: String) -> Error {
    Error::new(
        StatusCode::InvalidArgument,
        format!("HIP stream API: {message}"),
    )
}

/// Halcyon's [`StreamApi`] over HIP for one device (see the [module docs](self)).
pub struct HipStreamApi {
    hip: Hip,
    device: i32,
    info: ApiInfo,
    host_visible: HostVisibleMemory,
    streams: Registry<RawStream>,
    events: Registry<RawEvent>,
    modules: Registry<RawModule>,
    functions: Registry<RawFunction>,
    memory: Allocations<AllocKind>,
    /// Pinned staging for host↔device copies (`halcyon_stream::staging`).
    staging: Arc<StagingPool>,
    /// The most blocks a launch may have in x, y and z (`hipDeviceAttributeMaxGridDim*`, else
    /// [`DEFAULT_MAX_GRID`]): see [`check_grid`](launch::check_grid).
    max_grid: [u32; 3],
    /// The most shared memory (LDS) a block may have, static and dynamic together
    /// (`hipDeviceAttributeMaxSharedMemoryPerBlock`, else [`DEFAULT_MAX_SHARED_MEMORY`]): an
    /// entry point declaring more is refused at load.
    max_shared_memory: u32,
    /// This API's own pool for stream-ordered allocation, where the device has memory pools
    /// and the runtime exports the pool calls: see
    /// [`HipStreamApi::set_pool_release_threshold`]. `None`: `hipMallocAsync` on the device's
    /// default pool.
    pool: Option<MemPool>,
    /// The architecture halcyon's own kernels are compiled for
    /// ([`crate::HipDeviceOptions::offload_arch`]); `None`: the kernel driver's.
    offload_arch: Option<String>,
}

impl std::fmt::Debug for HipStreamApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipStreamApi")
            .field("device", &self.device)
            .field("name", &self.info.name)
            .field("capabilities", &self.info.capabilities)
            .field("host_visible", &self.host_visible)
            .field("own_pool", &self.pool.is_some())
            .finish_non_exhaustive()
    }
}

/// The error for a null handle or address HIP returned with `hipSuccess`.
fn null_from(call: &str) -> Error {
    Error::new(
        StatusCode::Internal,
        format!("{call} succeeded but returned a null handle"),
    )
}

impl HipStreamApi {
    /// The API for HIP device `device` (an ordinal below `hipGetDeviceCount`). The calling
    /// thread's current device is the same afterwards. `host_visible` picks the allocator of
    /// host-visible memory.
    ///
    /// Fails with the `hipSetDevice` error when the device cannot be used (for example
    /// `Unavailable` with `hipErrorInvalidDevice` on a machine without an AMD GPU), and with
    /// `Unimplemented` if [`HostVisibleMemory::Managed`] is asked of a device without managed
    /// memory.
    pub fn new(hip: Hip, device: i32, host_visible: HostVisibleMemory) -> Result<Self> {
        let _bound = bind_device(hip, device)?;
        let name = crate::describe_device(hip, device)?;
        let attribute = |a| hip.device_attribute(a, device).ok();
        let managed = attribute(sys::hipDeviceAttributeManagedMemory) == Some(1);
        let host_visible = match host_visible {
            HostVisibleMemory::Auto if managed => HostVisibleMemory::Managed,
            HostVisibleMemory::Auto => HostVisibleMemory::MappedHost,
            HostVisibleMemory::Managed if !managed => {
                return Err(Error::new(
                    StatusCode::Unimplemented,
                    format!(
                        "hip://{device} ({name}) reports no managed memory \
                         (hipDeviceAttributeManagedMemory is not 1); use \
                         HostVisibleMemory::MappedHost or Auto"
                    ),
                ))
            }
            other => other,
        };
        // HIP 5.2 has no hipLaunchHostFunc, but hipStreamAddCallback is always there.
        let mut capabilities = Capabilities::HOST_FUNC | Capabilities::EVENT_TIMING;
        if hip.has_stream_write_value() {
            capabilities |= Capabilities::WRITE_VALUE;
        }
        if hip.has_stream_ordered_alloc()
            && attribute(sys::hipDeviceAttributeMemoryPoolsSupported) == Some(1)
        {
            capabilities |= Capabilities::STREAM_ORDERED_ALLOC;
        }
        let grid_limit = |a, default| {
            attribute(a)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&n| n > 0)
                .unwrap_or(default)
        };
        let max_grid = [
            grid_limit(sys::hipDeviceAttributeMaxGridDimX, DEFAULT_MAX_GRID[0]),
            grid_limit(sys::hipDeviceAttributeMaxGridDimY, DEFAULT_MAX_GRID[1]),
            grid_limit(sys::hipDeviceAttributeMaxGridDimZ, DEFAULT_MAX_GRID[2]),
        ];
        let max_shared_memory = grid_limit(
            sys::hipDeviceAttributeMaxSharedMemoryPerBlock,
            DEFAULT_MAX_SHARED_MEMORY,
        );
        let memory_bytes = hip.device_total_mem(device).ok().map(|b| b as u64);
        let mut api = HipStreamApi {
            hip,
            device,
            info: ApiInfo {
                driver: crate::DRIVER_ID.into(),
                name,
                capabilities,
                // Enough for 16-byte (dwordx4) vector loads of a binding's elements.
                binding_alignment: 16,
                concurrency: attribute(sys::hipDeviceAttributeMultiprocessorCount)
                    .map_or(1, |n| n.max(1) as u32),
                memory_bytes,
            },
            host_visible,
            streams: Registry::new("HIP", "stream"),
            events: Registry::new("HIP", "event"),
            modules: Registry::new("HIP", "module"),
            functions: Registry::new("HIP", "function"),
            memory: Allocations::new("HIP"),
            staging: Arc::default(),
            max_grid,
            max_shared_memory,
            pool: None,
            offload_arch: None,
        };
        if capabilities.contains(Capabilities::STREAM_ORDERED_ALLOC) && hip.has_mem_pools() {
            // Without its own pool (older runtimes, or a refused hipMemPoolCreate) the API
            // allocates with hipMallocAsync from the device's default pool, which works, only
            // with that pool's release threshold.
            api.pool = MemPool::create(hip, device, u64::MAX).ok();
        }
        Ok(api)
    }

    /// This API with its own kernels (the gather kernel) compiled for `arch` (see
    /// [`crate::HipDeviceOptions::offload_arch`]); `None`: the kernel driver's architecture.
    pub fn with_offload_arch(mut self, arch: Option<String>) -> Self {
        self.offload_arch = arch;
        self
    }

    /// The HIP runtime.
    pub fn hip(&self) -> Hip {
        self.hip
    }

    /// The device ordinal.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// How host-visible memory is allocated ([`HostVisibleMemory::Auto`] resolved).
    pub fn host_visible_memory(&self) -> HostVisibleMemory {
        self.host_visible
    }
}

impl Drop for HipStreamApi {
    fn drop(&mut self) {
        // Whatever the stream layer left: let the streams finish, then destroy everything and
        // free the memory no work can still use.
        let _bound = self.bind();
        for stream in self.streams.drain() {
            // SAFETY: a live stream (held by `stream`).
            let _ = unsafe { self.hip.stream_synchronize(stream.raw) };
        }
        self.functions.drain();
        self.modules.drain();
        self.events.drain();
        for (base, _, kind) in self.memory.drain() {
            let _ = self.free_kind(base, kind);
        }
        // The streams are synchronised and destroyed: no copy uses staging any more (orphaned
        // buffers, whose host function never ran, are freed here too; see the module docs).
        self.free_pinned(self.staging.drain());
        // Last, after its memory was freed above: hipMemPoolDestroy (MemPool's drop).
        drop(self.pool.take());
    }
}

// SAFETY: see the trait's contract; every handle and pointer is checked against the objects
// and allocations this API made (`Registry`, `Allocations`) before it reaches HIP.
//
// Each method forwards to the inherent method of the same name in the file of its concern
// (`HipStreamApi::name` names the inherent method: inherent methods come first).
unsafe impl StreamApi for HipStreamApi {
    fn info(&self) -> ApiInfo {
        self.info.clone()
    }

    fn max_grid(&self) -> [u32; 3] {
        self.max_grid
    }

    fn adopt_thread(&self) {
        HipStreamApi::adopt_thread(self)
    }

    fn create_stream(&self) -> Result<StreamHandle> {
        HipStreamApi::create_stream(self)
    }

    fn destroy_stream(&self, stream: StreamHandle) -> Result<()> {
        HipStreamApi::destroy_stream(self, stream)
    }

    fn synchronize_stream(&self, stream: StreamHandle) -> Result<()> {
        HipStreamApi::synchronize_stream(self, stream)
    }

    fn create_event(&self, flags: EventFlags) -> Result<EventHandle> {
        HipStreamApi::create_event(self, flags)
    }

    fn destroy_event(&self, event: EventHandle) -> Result<()> {
        HipStreamApi::destroy_event(self, event)
    }

    fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        HipStreamApi::record_event(self, event, stream)
    }

    fn query_event(&self, event: EventHandle) -> Result<bool> {
        HipStreamApi::query_event(self, event)
    }

    fn synchronize_event(&self, event: EventHandle) -> Result<()> {
        HipStreamApi::synchronize_event(self, event)
    }

    fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        HipStreamApi::stream_wait_event(self, stream, event)
    }

    fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        HipStreamApi::event_elapsed_ms(self, start, end)
    }

    fn launch_host_func(&self, stream: StreamHandle, func: HostFunc) -> Result<()> {
        HipStreamApi::launch_host_func(self, stream, func)
    }

    fn allocate(&self, size: u64, placement: MemoryPlacement) -> Result<DevicePtr> {
        HipStreamApi::allocate(self, size, placement)
    }

    fn free(&self, ptr: DevicePtr) -> Result<()> {
        HipStreamApi::free(self, ptr)
    }

    fn host_pointer(&self, ptr: DevicePtr) -> Option<NonNull<u8>> {
        HipStreamApi::host_pointer(self, ptr)
    }

    fn allocate_async(&self, size: u64, stream: StreamHandle) -> Result<DevicePtr> {
        HipStreamApi::allocate_async(self, size, stream)
    }

    fn free_async(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<()> {
        HipStreamApi::free_async(self, ptr, stream)
    }

    unsafe fn copy_host_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        // SAFETY: the caller's contract, which is the inherent method's.
        unsafe { HipStreamApi::copy_host_to_device_async(self, dst, src, len, stream) }
    }

    unsafe fn copy_device_to_host_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        // SAFETY: the caller's contract, which is the inherent method's.
        unsafe { HipStreamApi::copy_device_to_host_async(self, dst, src, len, stream) }
    }

    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        HipStreamApi::copy_device_to_device_async(self, dst, src, len, stream)
    }

    fn memset_async(
        &self,
        dst: DevicePtr,
        pattern: u32,
        pattern_len: u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        HipStreamApi::memset_async(self, dst, pattern, pattern_len, len, stream)
    }

    fn can_access_peer(&self, peer: &Self) -> Result<bool> {
        HipStreamApi::can_access_peer(self, peer)
    }

    fn enable_peer_access(&self, peer: &Self) -> Result<()> {
        HipStreamApi::enable_peer_access(self, peer)
    }

    fn copy_peer_async(
        &self,
        dst: DevicePtr,
        peer: &Self,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        HipStreamApi::copy_peer_async(self, dst, peer, src, len, stream)
    }

    fn write_value32(&self, stream: StreamHandle, ptr: DevicePtr, value: u32) -> Result<()> {
        HipStreamApi::write_value32(self, stream, ptr, value)
    }

    fn module_formats(&self) -> Vec<String> {
        vec![FORMAT_HSACO.into()]
    }

    fn load_module(&self, spec: &ExecutableSpec) -> Result<LoadedModule> {
        HipStreamApi::load_module(self, spec)
    }

    fn unload_module(&self, module: ModuleHandle) -> Result<()> {
        HipStreamApi::unload_module(self, module)
    }

    fn get_function(&self, module_handle: ModuleHandle, name: &str) -> Result<FunctionHandle> {
        HipStreamApi::get_function(self, module_handle, name)
    }

    fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        stream: StreamHandle,
    ) -> Result<()> {
        HipStreamApi::launch_kernel(self, function, config, params, stream)
    }

    fn gather_kernel(&self) -> Option<ExecutableSpec> {
        let arch = self.offload_arch.clone();
        crate::gather::spec(arch.or_else(crate::rtc::kfd_offload_arch).as_deref())
    }

    fn create_channel(
        &self,
        provider: &dyn halcyon::ChannelProvider,
        params: &halcyon::ChannelParams,
    ) -> Result<Box<dyn halcyon::backend::ChannelBackend>> {
        self.rccl_channel(provider, params)
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
        unsafe { self.rccl_enqueue(channel, kind, send, recv, stream) }
    }
}
