//! [`HipStreamApi`]: halcyon's [`StreamApi`] translation table over the HIP runtime
//! ([`crate::result::Hip`]), so that the generic stream layer ([`halcyon::stream`]) makes a
//! whole device of it.
//!
//! | core vocabulary ([`StreamApi`])  | HIP call                                                     |
//! |----------------------------------|--------------------------------------------------------------|
//! | bind the device to a thread      | `hipGetDevice`; `hipSetDevice(index)` when another is current, and `hipSetDevice(previous)` after the call (see [Threads](#threads)) |
//! | adopt a thread                   | `hipSetDevice(index)`, kept                                  |
//! | stream                           | `hipStreamCreateWithFlags(hipStreamNonBlocking)` / `hipStreamDestroy` |
//! | synchronize stream               | `hipStreamSynchronize`                                       |
//! | event                            | `hipEventCreateWithFlags(hipEventDisableTiming)`: the *shared* HIP event; for [`EventFlags::BLOCKING_SYNC`] also a *private* one, `hipEventCreateWithFlags(hipEventBlockingSync)` (that flag alone), because HIP holds an event's lock for the whole of `hipEventSynchronize` (see [Events](#events)) / `hipEventDestroy` of each |
//! | record / query / synchronize     | `hipEventRecord` of the shared event, then of the private one on the same stream (a failure of the second is the call's error) / `hipEventQuery` of the shared one (`hipErrorNotReady` → pending) / `hipEventSynchronize` of the private one (of the shared one without a private one, or while the private one missed the last record), so that a thread blocked there never holds the lock a query or stream wait needs |
//! | stream waits event               | `hipStreamWaitEvent(stream, shared event, 0)`                |
//! | host function                    | `hipLaunchHostFunc` if exported, else `hipStreamAddCallback` (HIP 5.2) |
//! | device memory                    | `hipMalloc` (out of memory: the API's pool trimmed, `hipMemPoolTrimTo(pool, 0)`, and tried once more) / `hipFree` |
//! | host-visible memory              | `hipMallocManaged(hipMemAttachGlobal)` / `hipFree`, or `hipHostMalloc(hipHostMallocMapped)` / `hipHostFree` ([`HostVisibleMemory`]) |
//! | pinned memory ([`MemoryPlacement::Pinned`]) | `hipHostMalloc(hipHostMallocMapped \| hipHostMallocCoherent)` / `hipHostFree` whatever [`HostVisibleMemory`] says; `hipHostGetDevicePointer` must return the host address (else `hipHostFree` and `Unimplemented`) |
//! | stream-ordered allocation        | `hipMallocFromPoolAsync` from the API's own pool (`hipMemPoolCreate`, release threshold [`HipStreamApi::set_pool_release_threshold`]) / `hipFreeAsync`; `hipMallocAsync` on the device's default pool where the pool calls are not all exported or the pool cannot be made; when `hipMallocAsync` is exported and `hipDeviceAttributeMemoryPoolsSupported` |
//! | copy host → device               | through pinned staging (`hipHostMalloc`) in chunks of up to 8 MiB: the first chunk copied in at enqueue, each later one by a host function, `hipMemcpyAsync(HostToDevice)` from the buffer after each, then a host function returning it to the pool (`halcyon::stream::staging`); straight from the source (no staging, no host function) if it lies within one of this API's host-visible or pinned allocations |
//! | copy device → host               | through pinned staging in chunks of up to 8 MiB: `hipMemcpyAsync(DeviceToHost)` into the buffer, then a host function copying the chunk out, the last one returning the buffer (`halcyon::stream::staging`); straight into the destination (no staging, no host function) if it lies within one of this API's host-visible or pinned allocations |
//! | copy device → device             | `hipMemcpyAsync(DeviceToDevice)`                             |
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
//! buffers (`hipHostMalloc`, pooled; see `halcyon::stream::staging`), from which `hipMemcpyAsync` is
//! asynchronous, with a host function on the same stream after the copy: for a write it only
//! returns the buffer to the pool (the caller's bytes were copied into it at enqueue); for a
//! read it first copies the bytes to the caller's memory, and the stream's later work (the
//! submission's completion event) waits for it. A copy over 8 MiB goes through one 8 MiB
//! buffer chunk by chunk, a host function moving each chunk (`halcyon::stream::staging`
//! explains why). The host functions call no HIP function. Copies from or to this API's own host-visible or pinned memory (managed, or mapped pinned:
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

use std::cell::Cell;
use std::ffi::{c_uint, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use halcyon::stream::allocations::Allocations;
use halcyon::stream::registry::Registry;
use halcyon::stream::staging::{
    capacity_for, stage_from_device, stage_to_device, staging_len, Lease, Pinned, StagingPool,
};
use halcyon::stream::{
    ApiInfo, Capabilities, DevicePtr, EventFlags, EventHandle, FunctionHandle, HostFunc,
    KernelParams, LaunchConfig, LoadedModule, MemoryPlacement, ModuleHandle, StreamApi,
    StreamHandle,
};
use halcyon::{EntryPoint, Error, ExecutableSpec, Result, StatusCode};

use crate::code_object::ImageKind;
use crate::module::{HipModule, FORMAT_HSACO};
use crate::result::Hip;
use crate::sys;

/// How [`MemoryPlacement::HostVisible`] allocations are made (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HostVisibleMemory {
    /// [`HostVisibleMemory::Managed`] where the device reports managed-memory support, else
    /// [`HostVisibleMemory::MappedHost`].
    #[default]
    Auto,
    /// `hipMallocManaged(hipMemAttachGlobal)`, freed with `hipFree`: migrates to the GPU on
    /// access with XNACK enabled or on an APU, otherwise stays in host RAM (see the module
    /// docs).
    Managed,
    /// `hipHostMalloc(hipHostMallocMapped)`, freed with `hipHostFree`: pinned host memory the
    /// device reads and writes over the bus.
    MappedHost,
}

thread_local! {
    /// The device a `HipStreamApi` left current on this thread: set on the threads the stream
    /// layer runs for the API ([`StreamApi::adopt_thread`]), where no other code's device needs
    /// giving back.
    static LEFT: Cell<Option<i32>> = const { Cell::new(None) };
}

/// A device [`bind_device`] made current in place of another: dropping it makes the other
/// current again, so other HIP code on the thread finds the device it chose.
#[must_use = "the device is only bound while the guard lives"]
struct Bound {
    restore: Option<(Hip, i32)>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some((hip, previous)) = self.restore {
            let _ = hip.set_device(previous);
        }
    }
}

/// Makes `device` current on the calling thread (`hipSetDevice`) unless it is (`hipGetDevice`,
/// a thread-local read in the runtime). The device that was current is made current again when
/// the guard drops, unless it is one this backend left current on an adopted thread.
fn bind_device(hip: Hip, device: i32) -> Result<Bound> {
    let current = hip.get_device().ok();
    if current == Some(device) {
        return Ok(Bound { restore: None });
    }
    hip.set_device(device)?;
    match current {
        Some(previous) if LEFT.with(Cell::get) != Some(previous) => Ok(Bound {
            restore: Some((hip, previous)),
        }),
        _ => {
            LEFT.with(|left| left.set(Some(device)));
            Ok(Bound { restore: None })
        }
    }
}

fn invalid(message: String) -> Error {
    Error::new(
        StatusCode::InvalidArgument,
        format!("HIP stream API: {message}"),
    )
}

/// A `hipStream_t`, destroyed on drop.
struct RawStream {
    hip: Hip,
    raw: sys::hipStream_t,
}

/// The HIP events behind one [`EventHandle`] (see [Events](self#events)), destroyed on drop.
struct RawEvent {
    hip: Hip,
    events: EventPair<sys::hipEvent_t>,
}

/// Which HIP event each operation on an event uses: the shared one, and for
/// [`EventFlags::BLOCKING_SYNC`] a private one only synchronisations wait on (see
/// [Events](self#events)). Generic over the handle so that the logic is testable without HIP.
#[derive(Debug)]
pub(crate) struct EventPair<E> {
    /// Recorded, queried, and waited on by streams.
    shared: E,
    /// Recorded after `shared` on the same stream; only `synchronize_event` waits on it.
    private: Option<E>,
    /// Whether `private` holds the same record as `shared` (`false` once a record of `shared`
    /// succeeded and the one of `private` did not, until a record of both succeeds).
    in_step: AtomicBool,
}

impl<E: Copy> EventPair<E> {
    /// A single HIP event: everything uses `shared`.
    pub(crate) fn single(shared: E) -> Self {
        EventPair {
            shared,
            private: None,
            in_step: AtomicBool::new(true),
        }
    }

    /// `shared` plus `private`, neither recorded yet (both complete, so in step).
    pub(crate) fn paired(shared: E, private: E) -> Self {
        EventPair {
            private: Some(private),
            ..EventPair::single(shared)
        }
    }

    /// Every HIP event of the pair, shared first.
    pub(crate) fn all(&self) -> impl Iterator<Item = E> {
        std::iter::once(self.shared).chain(self.private)
    }

    /// The event queries and stream waits use.
    pub(crate) fn shared(&self) -> E {
        self.shared
    }

    /// The event a synchronisation waits on: the private one while it holds the most recent
    /// record, else the shared one.
    pub(crate) fn to_synchronize(&self) -> E {
        match self.private {
            Some(private) if self.in_step.load(Ordering::Acquire) => private,
            _ => self.shared,
        }
    }

    /// Records the pair with `record`: the shared event, then the private one. Fails with the
    /// first error; when only the private record fails, synchronisations fall back to the
    /// shared event until a later record of both succeeds.
    pub(crate) fn record(&self, mut record: impl FnMut(E) -> Result<()>) -> Result<()> {
        record(self.shared)?;
        let Some(private) = self.private else {
            return Ok(());
        };
        let recorded = record(private);
        self.in_step.store(recorded.is_ok(), Ordering::Release);
        recorded.map_err(|e| {
            e.context(
                "cannot record the event's private blocking-sync HIP event (the shared one was \
                 recorded; synchronisations wait on that until a record of both succeeds)",
            )
        })
    }
}

/// A loaded `hipModule_t`, unloaded on drop, with its checked entry points.
struct RawModule {
    hip: Hip,
    raw: sys::hipModule_t,
    entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points`: whether the kernel takes a status word.
    status_words: Vec<bool>,
    /// The code object, 8-byte aligned, kept for the module's life: HIP may keep referring to
    /// the image it loaded from.
    _image: Vec<u64>,
}

/// A `hipFunction_t` of a live module, with the argument counts its entry point declared.
struct RawFunction {
    module: Arc<RawModule>,
    raw: sys::hipFunction_t,
    name: String,
    binding_count: usize,
    constant_count: usize,
    /// Whether it takes a status word after the constants.
    status_word: bool,
}

// SAFETY: HIP objects may be used and destroyed from any thread (the HIP runtime API is
// thread-safe); the wrappers only hold the handle and the `Copy` symbol table.
unsafe impl Send for RawStream {}
// SAFETY: as above; shared references only read the handle.
unsafe impl Sync for RawStream {}
// SAFETY: as for `RawStream`; the pair is handles and an atomic.
unsafe impl Send for RawEvent {}
// SAFETY: as for `RawStream`; shared references read the handles and the atomic only.
unsafe impl Sync for RawEvent {}
// SAFETY: as for `RawStream`; the image is plain owned data.
unsafe impl Send for RawModule {}
// SAFETY: as for `RawStream`.
unsafe impl Sync for RawModule {}
// SAFETY: as for `RawStream`.
unsafe impl Send for RawFunction {}
// SAFETY: as for `RawStream`.
unsafe impl Sync for RawFunction {}

impl Drop for RawStream {
    fn drop(&mut self) {
        // SAFETY: the registry handed out the last holder; nothing uses the stream any more.
        // Work already enqueued still completes (hipStreamDestroy does not cancel it).
        let _ = unsafe { self.hip.stream_destroy(self.raw) };
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        for raw in self.events.all() {
            // SAFETY: the last holder, and each HIP event of the pair is destroyed once; a
            // record still pending completes harmlessly.
            let _ = unsafe { self.hip.event_destroy(raw) };
        }
    }
}

/// A `hipMemPool_t` made by [`HipStreamApi::new`] for its device, destroyed on drop.
struct MemPool {
    hip: Hip,
    raw: sys::hipMemPool_t,
}

// SAFETY: as for `RawStream`: a HIP pool may be used and destroyed from any thread.
unsafe impl Send for MemPool {}
// SAFETY: as for `RawStream`.
unsafe impl Sync for MemPool {}

/// The properties of [`HipStreamApi`]'s own pool on `device`: pinned device memory on that
/// device, not exportable, no size limit; everything else zero (see
/// [`sys::hipMemPoolProps`] for why zero suits every ROCm release).
pub(crate) fn pool_props(device: i32) -> sys::hipMemPoolProps {
    sys::hipMemPoolProps {
        allocType: sys::hipMemAllocationTypePinned,
        handleTypes: sys::hipMemHandleTypeNone,
        location: sys::hipMemLocation {
            type_: sys::hipMemLocationTypeDevice,
            id: device,
        },
        ..sys::hipMemPoolProps::default()
    }
}

impl MemPool {
    /// A new pool on `device` (see [`pool_props`]) keeping `release_threshold` bytes of freed
    /// memory.
    fn create(hip: Hip, device: i32, release_threshold: u64) -> Result<MemPool> {
        let raw = hip.mem_pool_create(&pool_props(device))?;
        if raw.is_null() {
            return Err(null_from("hipMemPoolCreate"));
        }
        let pool = MemPool { hip, raw };
        // SAFETY: a live pool, just made. If this fails, dropping `pool` destroys it.
        unsafe { hip.mem_pool_set_release_threshold(pool.raw, release_threshold) }?;
        Ok(pool)
    }
}

impl Drop for MemPool {
    fn drop(&mut self) {
        // SAFETY: the pool is not used again. Memory still allocated from it, or freed by work
        // not yet completed, keeps it alive in the runtime until that memory is gone.
        let _ = unsafe { self.hip.mem_pool_destroy(self.raw) };
    }
}

impl Drop for RawModule {
    fn drop(&mut self) {
        // SAFETY: the last holder: every function of it is gone (functions hold the module),
        // and the stream layer unloads only after the kernels using it completed.
        let _ = unsafe { self.hip.module_unload(self.raw) };
    }
}

/// Which allocator made an allocation (and so which call frees it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AllocKind {
    /// `hipMalloc`.
    Device,
    /// `hipMallocManaged`.
    Managed,
    /// `hipHostMalloc(hipHostMallocMapped)`.
    MappedHost,
    /// `hipMallocFromPoolAsync` (or `hipMallocAsync`).
    StreamOrdered,
}

impl AllocKind {
    fn host_visible(self) -> bool {
        matches!(self, AllocKind::Managed | AllocKind::MappedHost)
    }
}

/// Whether `len` bytes of host memory at `ptr` lie within one live host-visible allocation
/// (managed or mapped pinned), which `hipMemcpyAsync` copies asynchronously.
pub(crate) fn host_resident(memory: &Allocations<AllocKind>, ptr: *const u8, len: u64) -> bool {
    memory.within(ptr as usize as u64, len, AllocKind::host_visible)
}

/// `hipEventCreateWithFlags` flags for an event created with `flags`: those of the shared
/// HIP event (never `hipEventBlockingSync`), and those of the private one, which only
/// [`EventFlags::BLOCKING_SYNC`] events have: `hipEventBlockingSync` alone (see
/// [Events](self#events)).
pub(crate) fn event_flags(flags: EventFlags) -> (c_uint, Option<c_uint>) {
    let mut shared = sys::hipEventDefault;
    if flags.contains(EventFlags::DISABLE_TIMING) {
        shared |= sys::hipEventDisableTiming;
    }
    let private = flags
        .contains(EventFlags::BLOCKING_SYNC)
        .then_some(sys::hipEventBlockingSync);
    (shared, private)
}

/// The grid limits assumed where `hipDeviceAttributeMaxGridDim{X,Y,Z}` cannot be read: what
/// ROCm reports from 5.7 on (`INT32_MAX`, 65536, 65536; ROCm/clr `hip_device.cpp`).
pub(crate) const DEFAULT_MAX_GRID: [u32; 3] = [i32::MAX as u32, 1 << 16, 1 << 16];

/// The shared memory (LDS) per block assumed where `hipDeviceAttributeMaxSharedMemoryPerBlock`
/// cannot be read: 64 KiB, what every AMD GPU since GCN has.
pub(crate) const DEFAULT_MAX_SHARED_MEMORY: u32 = 64 << 10;

/// Checks that kernel `symbol`, whose static LDS is `statik` bytes (its metadata's
/// `.group_segment_fixed_size`), can be launched with the `bytes` of dynamic shared memory its
/// entry point declares on a device whose blocks may have `max` bytes of it: both together
/// must fit (`InvalidArgument` naming both otherwise; `hipModuleLaunchKernel` would refuse
/// every dispatch of it).
pub(crate) fn check_shared_memory(
    symbol: &str,
    statik: u32,
    bytes: u32,
    max: u32,
    device: i32,
) -> Result<()> {
    if bytes == 0 || u64::from(statik) + u64::from(bytes) <= u64::from(max) {
        return Ok(());
    }
    Err(invalid(format!(
        "kernel '{}' declares {bytes} bytes of dynamic shared memory{}, but a block on \
         hip://{device} may have at most {max} bytes of shared memory \
         (hipDeviceAttributeMaxSharedMemoryPerBlock): declare less",
        symbol,
        if statik > 0 {
            format!(" on top of its {statik} bytes of static")
        } else {
            String::new()
        },
    )))
}

/// Checks the shape of a launch of kernel `name` before `hipModuleLaunchKernel` sees it:
/// at most `max_grid[i]` blocks in each dimension (the device's `hipDeviceAttributeMaxGridDim*`),
/// and at most `u32::MAX` work-items (blocks × threads per block) in each. HIP computes the
/// work-items in 64 bits but hands them on as 32-bit values, and not every release checks
/// every dimension: HIP 5.2.3 refuses an overflow in any dimension, ROCm 5.7 checks only x and
/// truncates y and z to 32 bits, later releases bound y and z by their grid limit (6.0 – 6.2:
/// `INT32_MAX / 1024`; later clr: 65536, the limit the device reports from 5.7 on). This check
/// gives the same answer on every release.
pub(crate) fn check_grid(
    name: &str,
    grid: [u32; 3],
    block: [u32; 3],
    max_grid: [u32; 3],
) -> Result<()> {
    for (i, axis) in ["X", "Y", "Z"].into_iter().enumerate() {
        let lower = axis.to_ascii_lowercase();
        if grid[i] > max_grid[i] {
            return Err(invalid(format!(
                "kernel '{name}': a grid of {} blocks in {lower} exceeds the device's limit of {} \
                 (hipDeviceAttributeMaxGridDim{axis}); grid {grid:?}, block {block:?}",
                grid[i], max_grid[i]
            )));
        }
        let items = u64::from(grid[i]) * u64::from(block[i]);
        if items > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "kernel '{name}': {} blocks of {} threads in {lower} are {items} work-items, more \
                 than the {} (u32::MAX) hipModuleLaunchKernel takes in one dimension; grid \
                 {grid:?}, block {block:?}",
                grid[i],
                block[i],
                u32::MAX
            )));
        }
    }
    Ok(())
}

/// The element count of a fill of `len` bytes at `dst` with a `pattern_len`-byte pattern, or
/// `InvalidArgument` unless `pattern_len` is 1, 2 or 4 and divides both.
pub(crate) fn memset_elements(dst: DevicePtr, pattern_len: u8, len: u64) -> Result<usize> {
    if !matches!(pattern_len, 1 | 2 | 4) {
        return Err(invalid(format!(
            "a fill pattern is 1, 2 or 4 bytes, not {pattern_len}"
        )));
    }
    let p = u64::from(pattern_len);
    if dst.0 % p != 0 || len % p != 0 {
        return Err(invalid(format!(
            "a fill with a {pattern_len}-byte pattern needs an address and length that are \
             multiples of {pattern_len}: {dst:?}, {len} bytes"
        )));
    }
    usize::try_from(len / p).map_err(|_| invalid(format!("a fill of {len} bytes is too large")))
}

/// The `kernelParams` of a launch: storage for each argument's value, and the array of
/// pointers to them that `hipModuleLaunchKernel` reads (it copies the values during the call).
pub(crate) struct KernelArgs {
    /// One slot per argument: a binding's device pointer, or a constant in the low 4 bytes
    /// (little-endian, so a pointer to the slot is a pointer to the `u32`).
    values: Vec<u64>,
}

impl KernelArgs {
    /// The bindings, the constants, then the status word's address if there is one.
    pub(crate) fn new(params: &KernelParams<'_>) -> Self {
        let values = params
            .bindings
            .iter()
            .map(|p| p.0)
            .chain(params.constants.iter().map(|&c| u64::from(c)))
            .chain(params.status.map(|p| p.0))
            .collect();
        KernelArgs { values }
    }

    /// The pointer array: element `i` points at argument `i`'s value. Valid while `self` lives
    /// and is not moved or changed.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        self.values
            .iter_mut()
            .map(|v| (v as *mut u64).cast::<c_void>())
            .collect()
    }
}

/// A host function handed to HIP as user data: HIP holds one reference of the `Arc`
/// ([`host_func_user_data`]), given back to a trampoline. Whoever takes the function first runs
/// it (or drops it unrun); see [`HipStreamApi`]'s `enqueue_host_func` for why the enqueuing
/// thread may be that one.
type HostFuncCell = Mutex<Option<HostFunc>>;

/// `func` in a fresh cell, and the user data for HIP: one reference to the cell, consumed by
/// [`consume_host_func`].
fn host_func_user_data(func: HostFunc) -> (Arc<HostFuncCell>, *mut c_void) {
    let cell = Arc::new(Mutex::new(Some(func)));
    let user_data = Arc::into_raw(cell.clone()).cast_mut().cast::<c_void>();
    (cell, user_data)
}

/// Takes the cell's function, if it is still there, and runs it (or drops it, when `run` is
/// false), never letting a panic unwind out: not from the function, nor from its payload.
fn settle_host_func(cell: &HostFuncCell, run: bool) {
    let func = cell.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(func) = func else {
        return;
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        if run {
            func()
        } else {
            drop(func)
        }
    }));
    if let Err(payload) = outcome {
        // Its `Drop` could panic too, and nothing may unwind into HIP.
        std::mem::forget(payload);
    }
}

/// Settles (see [`settle_host_func`]) the cell HIP hands back as user data, and lets go of
/// HIP's reference to it.
///
/// # Safety
/// `user_data` is the pointer [`host_func_user_data`] made, consumed here: HIP hands it back
/// once.
unsafe fn consume_host_func(user_data: *mut c_void, run: bool) {
    // SAFETY: guaranteed by the caller: HIP's reference to the cell, given back once.
    let cell = unsafe { Arc::from_raw(user_data.cast_const().cast::<HostFuncCell>()) };
    settle_host_func(&cell, run);
}

/// `hipStreamCallback_t` trampoline: runs the host function on success, drops it unrun when
/// the stream reports an error.
unsafe extern "C" fn stream_callback(
    _stream: sys::hipStream_t,
    status: sys::hipError_t,
    user_data: *mut c_void,
) {
    // SAFETY: HIP passes back the user data `launch_host_func` gave it, once.
    unsafe { consume_host_func(user_data, status == sys::hipSuccess) }
}

/// `hipHostFn_t` trampoline (`hipLaunchHostFunc`, which reports no status).
unsafe extern "C" fn host_fn(user_data: *mut c_void) {
    // SAFETY: HIP passes back the user data `launch_host_func` gave it, once.
    unsafe { consume_host_func(user_data, true) }
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
    /// Pinned staging for host↔device copies (`halcyon::stream::staging`).
    staging: Arc<StagingPool>,
    /// The most blocks a launch may have in x, y and z (`hipDeviceAttributeMaxGridDim*`, else
    /// [`DEFAULT_MAX_GRID`]): see [`check_grid`].
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

/// `len` as a host length, `InvalidArgument` if it cannot be one.
fn host_len(len: u64) -> Result<usize> {
    usize::try_from(len)
        .ok()
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| invalid(format!("a copy of {len} bytes is too large for this host")))
}

fn size_of(size: u64) -> Result<usize> {
    usize::try_from(size.max(1)).map_err(|_| {
        Error::new(
            StatusCode::ResourceExhausted,
            format!("HIP stream API: {size} bytes do not fit this host's address space"),
        )
    })
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
        let mut capabilities = Capabilities::HOST_FUNC;
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
        };
        if capabilities.contains(Capabilities::STREAM_ORDERED_ALLOC) && hip.has_mem_pools() {
            // Without its own pool (older runtimes, or a refused hipMemPoolCreate) the API
            // allocates with hipMallocAsync from the device's default pool, which works, only
            // with that pool's release threshold.
            api.pool = MemPool::create(hip, device, u64::MAX).ok();
        }
        Ok(api)
    }

    /// How many bytes of freed stream-ordered memory the API's own pool keeps for reuse
    /// instead of returning them to the system at the next synchronisation
    /// (`hipMemPoolAttrReleaseThreshold`). [`HipStreamApi::new`] sets `u64::MAX`, keeping
    /// everything the runtime lets it keep: a pool's own default, 0, gives memory back at every
    /// synchronisation (ROCm 6.x releases every pool's freed memory above its threshold in
    /// `hipEventSynchronize`), and a completion thread synchronises with every submission, so
    /// each queue `alloca` would map fresh memory. (ROCm 6.2+ also releases all of a pool's
    /// free memory, whatever the threshold, once it outgrows the memory in use, and hipamd
    /// 5.2 never acts on the threshold at all.) What the pool keeps is given back when a plain allocation runs
    /// out of memory (the pool is trimmed and the allocation retried). A no-op without the
    /// API's own pool (see [`HipStreamApi::has_own_pool`]).
    pub fn set_pool_release_threshold(&self, bytes: u64) -> Result<()> {
        let Some(pool) = &self.pool else {
            return Ok(());
        };
        let _bound = self.bind()?;
        // SAFETY: a live pool (destroyed only when the API drops).
        unsafe { self.hip.mem_pool_set_release_threshold(pool.raw, bytes) }
    }

    /// Makes threads that wait for this device sleep until its work completed
    /// (`hipSetDeviceFlags(hipDeviceScheduleBlockingSync)`, keeping the flags' other bits)
    /// instead of polling. Before ROCm 6.3 the device's scheduling, not an event's
    /// `hipEventBlockingSync`, decides how `hipEventSynchronize` waits, and HIP starts every
    /// device polling (hipamd and clr `SetActiveWait(true)` at start-up), so each completion
    /// thread would keep a CPU core busy for as long as work is in flight. The flag is the
    /// device's, for the whole process: other HIP code's synchronisations on it sleep too.
    /// [`crate::HipDriver::create_device_with`] calls this where it matters (see
    /// [`crate::HipDeviceOptions::blocking_sync`]). `Unimplemented` where the runtime lacks
    /// `hipSetDeviceFlags`.
    pub fn schedule_blocking_sync(&self) -> Result<()> {
        let _bound = self.bind()?;
        let others = self
            .hip
            .device_flags()
            .map_or(0, |flags| flags & !sys::hipDeviceScheduleMask);
        self.hip
            .set_device_flags(others | sys::hipDeviceScheduleBlockingSync)
    }

    /// Whether stream-ordered allocation comes from the API's own pool
    /// (`hipMallocFromPoolAsync`). `false` where it comes from the device's default pool
    /// (`hipMallocAsync`: a runtime without the pool calls, or a refused `hipMemPoolCreate`)
    /// or where there is none ([`Capabilities::STREAM_ORDERED_ALLOC`] unset).
    pub fn has_own_pool(&self) -> bool {
        self.pool.is_some()
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

    /// Makes this API's device current on the calling thread for as long as the returned guard
    /// lives (see [Threads](self#threads)).
    fn bind(&self) -> Result<Bound> {
        bind_device(self.hip, self.device)
    }

    fn stream(&self, handle: StreamHandle) -> Result<Arc<RawStream>> {
        self.streams.get(handle.0)
    }

    fn event(&self, handle: EventHandle) -> Result<Arc<RawEvent>> {
        self.events.get(handle.0)
    }

    fn free_kind(&self, base: u64, kind: AllocKind) -> Result<()> {
        let ptr = base as usize as *mut c_void;
        // SAFETY: `base` was the start of a live allocation made by the allocator `kind`
        // names, and was just removed from the registry, so it is freed exactly once. The
        // stream layer frees memory only after the work using it completed.
        unsafe {
            match kind {
                AllocKind::Device | AllocKind::Managed => self.hip.free(ptr),
                // Pool memory goes back through hipFreeAsync (on the null stream, always valid):
                // newer runtimes' hipFree returns pool allocations to their pool, but older
                // hipamd releases the memory behind the pool's back.
                AllocKind::StreamOrdered => self.hip.free_async(ptr, std::ptr::null_mut()),
                AllocKind::MappedHost => self.hip.host_free(ptr),
            }
        }
    }

    /// `hipMalloc`, trimming the pool when it runs out of memory ([`HipStreamApi::trimming_on_oom`]).
    fn malloc_device(&self, bytes: usize) -> Result<*mut c_void> {
        self.trimming_on_oom(|| self.hip.malloc(bytes))
    }

    /// Makes `call`; when it runs out of memory, the freed memory the API's own pool keeps is
    /// given back (`hipMemPoolTrimTo(pool, 0)`) and the call made once more. For every call that
    /// takes device memory outside the pool: `hipMalloc` and module loading.
    fn trimming_on_oom<T>(&self, mut call: impl FnMut() -> Result<T>) -> Result<T> {
        match call() {
            // hipErrorOutOfMemory: the only error of these calls that is ResourceExhausted.
            Err(e) if e.code() == StatusCode::ResourceExhausted => {
                let Some(pool) = &self.pool else {
                    return Err(e);
                };
                // SAFETY: a live pool; trimming only releases memory no allocation holds.
                let _ = unsafe { self.hip.mem_pool_trim_to(pool.raw, 0) };
                call()
            }
            other => other,
        }
    }

    /// A pinned staging buffer of at least `len` bytes: an idle or retired one, else a new one.
    fn pinned(&self, len: usize) -> Result<Lease> {
        let buffer = match self.staging.take_unused(len) {
            Some(buffer) => buffer,
            None => {
                let capacity = capacity_for(len);
                let ptr = self
                    .hip
                    .host_malloc(capacity, sys::hipHostMallocDefault)
                    .map_err(|e| e.context("cannot allocate pinned staging for a copy"))?;
                let ptr = NonNull::new(ptr.cast()).ok_or_else(|| null_from("hipHostMalloc"))?;
                Pinned { ptr, capacity }
            }
        };
        self.staging.trim();
        Ok(Lease::new(buffer, self.staging.clone()))
    }

    /// Frees pinned buffers no device work uses (`hipHostFree` may wait for the device: only
    /// where the API may block).
    fn free_pinned(&self, buffers: Vec<Pinned>) {
        for buffer in buffers {
            // SAFETY: allocated by hipHostMalloc, handed over by the pool exactly once, and no
            // longer used by any copy (idle or retired, or everything is synchronised).
            let _ = unsafe { self.hip.host_free(buffer.ptr.as_ptr().cast()) };
        }
    }

    /// Frees the staging buffers retired beyond the pool's limits.
    fn free_retired(&self) {
        self.free_pinned(self.staging.take_retired());
    }

    /// Enqueues `func` on `stream`: `hipLaunchHostFunc` if exported, else a stream callback.
    /// If HIP refuses it, `func` is dropped unrun on this thread.
    fn enqueue_host_func(&self, stream: &RawStream, func: HostFunc) -> Result<()> {
        let (cell, user_data) = host_func_user_data(func);
        // SAFETY: a live stream; `user_data` is HIP's reference to the cell, handed back to the
        // trampoline at most once, which consumes it; the trampolines call no HIP function and
        // never unwind.
        let enqueued = unsafe {
            if self.hip.has_launch_host_func() {
                self.hip.launch_host_func(stream.raw, host_fn, user_data)
            } else {
                self.hip
                    .stream_add_callback(stream.raw, stream_callback, user_data)
            }
        };
        if enqueued.is_err() {
            // The function is taken here and dropped unrun, on this thread, which may call HIP.
            // HIP's reference stays with HIP, leaked if it never calls back: an error does not
            // prove that the callback was not queued (clr's hipStreamAddCallback queues the
            // callback's marker before a second marker whose creation may fail), and a callback
            // that still comes finds the cell empty.
            settle_host_func(&cell, false);
        }
        enqueued
    }

    fn allocate_host_visible(&self, size: usize) -> Result<(*mut c_void, AllocKind)> {
        match self.host_visible {
            HostVisibleMemory::MappedHost => self
                .allocate_mapped_host(size, 0, "try HostVisibleMemory::Managed")
                .map(|host| (host, AllocKind::MappedHost)),
            _ => Ok((
                self.hip.malloc_managed(size, sys::hipMemAttachGlobal)?,
                AllocKind::Managed,
            )),
        }
    }

    /// `hipHostMalloc(hipHostMallocMapped | flags)`: pinned host memory mapped into the device's
    /// address space, kept only if its device address (`hipHostGetDevicePointer`) is its host
    /// address; else freed again and `Unimplemented`, whose message ends with `advice`. Backs
    /// [`HostVisibleMemory::MappedHost`] and every [`MemoryPlacement::Pinned`] allocation
    /// ([`AllocKind::MappedHost`]).
    fn allocate_mapped_host(
        &self,
        size: usize,
        flags: c_uint,
        advice: &str,
    ) -> Result<*mut c_void> {
        let host = self
            .hip
            .host_malloc(size, sys::hipHostMallocMapped | flags)?;
        if host.is_null() {
            return Err(null_from("hipHostMalloc"));
        }
        // SAFETY: `host` was just returned by hipHostMalloc and is not freed.
        let device = unsafe { self.hip.host_get_device_pointer(host) };
        if device.as_ref().ok() == Some(&host) {
            return Ok(host);
        }
        // SAFETY: allocated just above, freed once; nothing used it.
        let _ = unsafe { self.hip.host_free(host) };
        let why = match device {
            Ok(device) => {
                format!("device address {device:?} differs from host address {host:?}")
            }
            Err(e) => e.message().to_string(),
        };
        Err(Error::new(
            StatusCode::Unimplemented,
            format!(
                "hip://{}: mapped host memory has no single address valid on host and device \
                 ({why}); {advice}",
                self.device
            ),
        ))
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
unsafe impl StreamApi for HipStreamApi {
    fn info(&self) -> ApiInfo {
        self.info.clone()
    }

    fn max_grid(&self) -> [u32; 3] {
        self.max_grid
    }

    fn adopt_thread(&self) {
        // Only halcyon's work runs here: the device may stay current for good.
        if self.hip.set_device(self.device).is_ok() {
            LEFT.with(|left| left.set(Some(self.device)));
        }
    }

    fn create_stream(&self) -> Result<StreamHandle> {
        let _bound = self.bind()?;
        let raw = self.hip.stream_create(sys::hipStreamNonBlocking)?;
        if raw.is_null() {
            return Err(null_from("hipStreamCreateWithFlags"));
        }
        let handle = raw as usize as u64;
        self.streams
            .insert(handle, RawStream { hip: self.hip, raw });
        Ok(StreamHandle(handle))
    }

    fn destroy_stream(&self, stream: StreamHandle) -> Result<()> {
        // hipStreamDestroy runs when the last call using the stream returns.
        self.streams.remove(stream.0).map(drop)
    }

    fn synchronize_stream(&self, stream: StreamHandle) -> Result<()> {
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        // SAFETY: a live stream, held for the call.
        let synchronized = unsafe { self.hip.stream_synchronize(stream.raw) };
        self.free_retired(); // this method may block
        synchronized
    }

    fn create_event(&self, flags: EventFlags) -> Result<EventHandle> {
        let _bound = self.bind()?;
        let (shared_flags, private_flags) = event_flags(flags);
        let shared = self.hip.event_create(shared_flags)?;
        if shared.is_null() {
            return Err(null_from("hipEventCreateWithFlags"));
        }
        // Owned from here: dropped on an error below, it destroys what it holds.
        let mut event = RawEvent {
            hip: self.hip,
            events: EventPair::single(shared),
        };
        if let Some(private_flags) = private_flags {
            let private = self.hip.event_create(private_flags)?;
            if private.is_null() {
                return Err(null_from("hipEventCreateWithFlags"));
            }
            event.events = EventPair::paired(shared, private);
        }
        let handle = shared as usize as u64;
        self.events.insert(handle, event);
        Ok(EventHandle(handle))
    }

    fn destroy_event(&self, event: EventHandle) -> Result<()> {
        self.events.remove(event.0).map(drop)
    }

    fn record_event(&self, event: EventHandle, stream: StreamHandle) -> Result<()> {
        let (event, stream) = (self.event(event)?, self.stream(stream)?);
        let _bound = self.bind()?;
        event.events.record(|raw| {
            // SAFETY: a HIP event of a live event and a live stream of this device, both held
            // for the call.
            unsafe { self.hip.event_record(raw, stream.raw) }
        })
    }

    fn query_event(&self, event: EventHandle) -> Result<bool> {
        let event = self.event(event)?;
        let _bound = self.bind()?;
        // SAFETY: a live event, held for the call. `hipErrorNotReady` is `Ok(false)`. The
        // shared HIP event: a completion thread blocked in `synchronize_event` holds only the
        // private one's lock.
        unsafe { self.hip.event_query(event.events.shared()) }
    }

    fn synchronize_event(&self, event: EventHandle) -> Result<()> {
        let event = self.event(event)?;
        let _bound = self.bind()?;
        // No staging is freed here (see the module docs): hipHostFree waits for every stream
        // of the device, and this runs on the completion threads.
        //
        // SAFETY: a live event, held for the call (a concurrent destroy_event only drops the
        // registry's reference).
        unsafe { self.hip.event_synchronize(event.events.to_synchronize()) }
    }

    fn stream_wait_event(&self, stream: StreamHandle, event: EventHandle) -> Result<()> {
        let (stream, event) = (self.stream(stream)?, self.event(event)?);
        let _bound = self.bind()?;
        // SAFETY: a live stream and event, held for the call; HIP captures the event's most
        // recent record at the call, so it may be re-recorded or destroyed afterwards. The
        // shared HIP event, whose lock no synchronisation holds.
        unsafe {
            self.hip
                .stream_wait_event(stream.raw, event.events.shared())
        }
    }

    fn launch_host_func(&self, stream: StreamHandle, func: HostFunc) -> Result<()> {
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        self.enqueue_host_func(&stream, func)
    }

    fn allocate(&self, size: u64, placement: MemoryPlacement) -> Result<DevicePtr> {
        let _bound = self.bind()?;
        let bytes = size_of(size)?;
        let (ptr, kind) = match placement {
            MemoryPlacement::Device => (self.malloc_device(bytes)?, AllocKind::Device),
            MemoryPlacement::HostVisible => self.allocate_host_visible(bytes)?,
            // Whatever `host_visible` says: pinned memory is always mapped host memory, and
            // coherent (fine-grained): kernels write status words into it that the host reads
            // after the completion event, which must not depend on the event's release scope
            // (non-coherent host memory is the default where HIP_HOST_COHERENT=0).
            MemoryPlacement::Pinned => (
                self.allocate_mapped_host(
                    bytes,
                    sys::hipHostMallocCoherent,
                    "allocate device memory and use queue reads and writes instead",
                )?,
                AllocKind::MappedHost,
            ),
        };
        if ptr.is_null() {
            return Err(null_from("a HIP allocation"));
        }
        let base = ptr as usize as u64;
        self.memory.insert(base, bytes as u64, kind);
        Ok(DevicePtr(base))
    }

    fn free(&self, ptr: DevicePtr) -> Result<()> {
        let (len, kind) = self.memory.remove(ptr.0, |_| Ok(()))?;
        let freed = self.bind().and_then(|_bound| self.free_kind(ptr.0, kind));
        if freed.is_err() {
            // Still allocated: kept in the registry, so a later free (or the API's drop) frees it.
            self.memory.insert(ptr.0, len, kind);
        }
        // hipFree and hipHostFree wait for every stream of the device already, so retired
        // staging goes now too. (Stream-ordered memory goes back by hipFreeAsync on the null
        // stream, which waits for none of this API's non-blocking streams: as for every free,
        // the caller's contract that the work using the memory completed is what makes it
        // safe.)
        self.free_retired();
        freed
    }

    fn host_pointer(&self, ptr: DevicePtr) -> Option<NonNull<u8>> {
        match self.memory.find(ptr.0) {
            // Managed and mapped host memory have one address on both sides.
            Some((_, _, kind)) if kind.host_visible() => NonNull::new(ptr.0 as usize as *mut u8),
            _ => None,
        }
    }

    fn allocate_async(&self, size: u64, stream: StreamHandle) -> Result<DevicePtr> {
        if !self
            .info
            .capabilities
            .contains(Capabilities::STREAM_ORDERED_ALLOC)
        {
            return Err(halcyon::stream::api::unimplemented(
                crate::DRIVER_ID,
                "stream-ordered allocation (hipMallocAsync is missing or the device reports no \
                 memory pools)",
            ));
        }
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let bytes = size_of(size)?;
        let (ptr, call) = match &self.pool {
            Some(pool) => {
                // SAFETY: a live pool of this device and a live stream, held for the call.
                let ptr = unsafe { self.hip.malloc_from_pool_async(bytes, pool.raw, stream.raw) }?;
                (ptr, "hipMallocFromPoolAsync")
            }
            None => {
                // SAFETY: a live stream, held for the call.
                let ptr = unsafe { self.hip.malloc_async(bytes, stream.raw) }?;
                (ptr, "hipMallocAsync")
            }
        };
        if ptr.is_null() {
            // Before ROCm 6.2 (hipamd, clr) a pool allocation that fails returns hipSuccess and
            // a null pointer; 6.2 made it hipErrorOutOfMemory.
            return Err(Error::new(
                StatusCode::ResourceExhausted,
                format!("{call}({bytes} bytes) returned no memory (the pool cannot grow)"),
            ));
        }
        let base = ptr as usize as u64;
        self.memory
            .insert(base, bytes as u64, AllocKind::StreamOrdered);
        Ok(DevicePtr(base))
    }

    fn free_async(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<()> {
        let stream = self.stream(stream)?;
        let (len, kind) = self.memory.remove(ptr.0, |kind| match kind {
            AllocKind::StreamOrdered => Ok(()),
            other => Err(invalid(format!(
                "{ptr:?} was not allocated in stream order ({other:?}): free it with free()"
            ))),
        })?;
        let freed = self.bind().and_then(|_bound| {
            // SAFETY: a stream-ordered allocation just removed from the registry (freed once),
            // on a live stream; work on other streams using it is ordered before this by the
            // caller.
            unsafe {
                self.hip
                    .free_async(ptr.0 as usize as *mut c_void, stream.raw)
            }
        });
        if freed.is_err() {
            // Still allocated: kept in the registry, so the caller's fallback (`free`) or the
            // API's drop frees it.
            self.memory.insert(ptr.0, len, kind);
        }
        freed
    }

    unsafe fn copy_host_to_device_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // Held live until the copy is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "copy to the device")?;
        let bytes = host_len(len)?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let copy = |src: *const u8| {
            // SAFETY: `dst..dst+len` lies in a live allocation; `src..src+len` is pinned or
            // host-visible memory that stays valid and unmodified until the copy completed on
            // the (live, held) stream (the caller's contract, or the staging lease).
            unsafe {
                self.hip.memcpy_async(
                    dst.0 as usize as *mut c_void,
                    src.cast(),
                    bytes,
                    sys::hipMemcpyHostToDevice,
                    stream.raw,
                )
            }
        };
        if host_resident(&self.memory, src, len) {
            return copy(src); // already asynchronous: no staging
        }
        // Through pinned staging, chunk by chunk: from pageable memory hipMemcpyAsync would
        // wait for the stream (see the module docs).
        let lease = self.pinned(staging_len(bytes))?;
        let copy = |staging: *const u8, offset: usize, n: usize| {
            // SAFETY: `dst+offset..+n` lies in the checked live allocation; `staging` holds `n`
            // bytes of pinned memory that stage_to_device keeps for this copy until the
            // (live, held) stream passed it.
            unsafe {
                self.hip.memcpy_async(
                    (dst.0 as usize + offset) as *mut c_void,
                    staging.cast(),
                    n,
                    sys::hipMemcpyHostToDevice,
                    stream.raw,
                )
            }
        };
        // SAFETY: the caller keeps `src..src+len` readable and unmodified until the copy
        // completed on the stream (which includes the host functions enqueued on it), and
        // pinned staging is not the caller's memory. A buffer a failure orphans, or whose host
        // function a stream error drops, is never reused; the API frees it when dropped.
        unsafe {
            stage_to_device(lease, src, bytes, copy, |f| {
                self.enqueue_host_func(&stream, f)
            })
            .map_err(|e| e.context("cannot stage a copy to the device"))
        }
    }

    unsafe fn copy_device_to_host_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // Held live until the copy is enqueued (a free meanwhile waits).
        let _src = self.memory.check(src, len, "copy from the device")?;
        let bytes = host_len(len)?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let copy = |dst: *mut u8| {
            // SAFETY: `src..src+len` lies in a live allocation; `dst..dst+len` is pinned or
            // host-visible memory that stays valid and untouched until the copy completed on
            // the (live, held) stream (the caller's contract, or the staging lease).
            unsafe {
                self.hip.memcpy_async(
                    dst.cast(),
                    src.0 as usize as *const c_void,
                    bytes,
                    sys::hipMemcpyDeviceToHost,
                    stream.raw,
                )
            }
        };
        if host_resident(&self.memory, dst, len) {
            return copy(dst); // already asynchronous: no staging
        }
        // Into pinned staging, chunk by chunk: into pageable memory hipMemcpyAsync would wait
        // for the stream (see the module docs).
        let lease = self.pinned(staging_len(bytes))?;
        let copy = |staging: *mut u8, offset: usize, n: usize| {
            // SAFETY: `src+offset..+n` lies in the checked live allocation; `staging` holds `n`
            // bytes of pinned memory that stage_from_device keeps for this copy until its host
            // function copied them out.
            unsafe {
                self.hip.memcpy_async(
                    staging.cast(),
                    (src.0 as usize + offset) as *const c_void,
                    n,
                    sys::hipMemcpyDeviceToHost,
                    stream.raw,
                )
            }
        };
        // SAFETY: the caller keeps `dst..dst+len` valid and untouched until the copy completed
        // on the stream, which includes the host functions enqueued on it (later work on the
        // stream waits for them); pinned staging and the caller's memory are disjoint.
        unsafe {
            stage_from_device(lease, dst, bytes, copy, |f| {
                self.enqueue_host_func(&stream, f)
            })
            .map_err(|e| e.context("cannot stage a copy from the device"))
        }
    }

    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // Both held live until the copy is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "device copy destination")?;
        let _src = self.memory.check(src, len, "device copy source")?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        // SAFETY: both ranges lie in live allocations of this API (checked above), so the copy
        // cannot touch other memory; the stream is live and held.
        unsafe {
            self.hip.memcpy_async(
                dst.0 as usize as *mut c_void,
                src.0 as usize as *const c_void,
                len as usize,
                sys::hipMemcpyDeviceToDevice,
                stream.raw,
            )
        }
    }

    fn memset_async(
        &self,
        dst: DevicePtr,
        pattern: u32,
        pattern_len: u8,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        let count = memset_elements(dst, pattern_len, len)?;
        if count == 0 {
            return Ok(());
        }
        // Held live until the fill is enqueued (a free meanwhile waits).
        let _dst = self.memory.check(dst, len, "fill")?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let ptr = dst.0 as usize as sys::hipDeviceptr_t;
        // SAFETY: `dst..dst+len` lies in a live allocation (checked above) and is aligned to
        // the pattern (memset_elements); the stream is live and held.
        unsafe {
            match pattern_len {
                1 => self
                    .hip
                    .memset_d8_async(ptr, pattern as u8, count, stream.raw),
                2 => self
                    .hip
                    .memset_d16_async(ptr, pattern as u16, count, stream.raw),
                _ => self.hip.memset_d32_async(ptr, pattern, count, stream.raw),
            }
        }
    }

    fn module_formats(&self) -> Vec<String> {
        vec![FORMAT_HSACO.into()]
    }

    fn load_module(&self, spec: &ExecutableSpec) -> Result<LoadedModule> {
        let module = HipModule::from_spec(spec)?;
        let image = module.image();
        let entry_points = module.entry_points().to_vec();
        let status_words: Vec<bool> = (0..entry_points.len())
            .map(|index| module.takes_status_word(index))
            .collect();
        let shared_memory_bytes: Vec<u32> = (0..entry_points.len())
            .map(|index| module.shared_memory(index))
            .collect();
        for (entry, &bytes) in entry_points.iter().zip(&shared_memory_bytes) {
            // Every code object of a bundle: which one HIP picks is known only to HIP. A
            // compressed bundle's kernels are unread: only the dynamic part is checked.
            let statik = image
                .kernels(&entry.name)
                .map(|kernel| kernel.group_segment_fixed_size)
                .max()
                .unwrap_or(0);
            check_shared_memory(
                &entry.name,
                statik,
                bytes,
                self.max_shared_memory,
                self.device,
            )?;
        }
        let bytes = module.code_object();
        // Padded to 4096 bytes: clr copies the first 4096 bytes of an image it cannot size (an
        // offload bundle) whatever its real length.
        let image_words = halcyon::backend::loader_image(bytes, 4096);
        // SAFETY: `loader_image` holds `bytes` then zeros in its first `len * 8` bytes.
        let view = unsafe {
            std::slice::from_raw_parts(image_words.as_ptr().cast::<u8>(), image_words.len() * 8)
        };
        let _bound = self.bind()?;
        // SAFETY: a `HipModule` is hiprtc output (`HipRtc::compile_module`) or comes from the
        // unsafe `HipModule::from_code_object_unchecked` / `from_packed` (also through an
        // unchecked spec), whose callers vouch that it is unmodified clang/hipcc output for
        // this device with metadata agreeing with its code: what HIP reads it as. HIP also
        // reads a bundle's first 4096 bytes whatever its length (clr cannot tell a bundle's
        // size), which the padding holds. The image stays alive (and unmoved) in the module
        // until after hipModuleUnload.
        let raw = self.trimming_on_oom(|| unsafe { self.hip.module_load_data(view) });
        let raw = raw.map_err(|e| {
            let built_for = if image.kind() == ImageKind::CompressedBundle {
                format!(
                    "the compressed offload bundle (CCOB, not read by halcyon): does it hold a \
                     code object for hip://{}'s architecture?",
                    self.device
                )
            } else if image.is_bundle() {
                format!(
                    "the offload bundle holds code objects for [{}]: is hip://{}'s architecture \
                     among them?",
                    image.targets().join(", "),
                    self.device
                )
            } else {
                format!(
                    "the code object was built for {}: is that hip://{}'s architecture?",
                    image.targets().join(", "),
                    self.device
                )
            };
            Error::new(e.code(), format!("{}; {built_for}", e.message()))
        })?;
        if raw.is_null() {
            return Err(null_from("hipModuleLoadData"));
        }
        let handle = raw as usize as u64;
        self.modules.insert(
            handle,
            RawModule {
                hip: self.hip,
                raw,
                entry_points: entry_points.clone(),
                status_words: status_words.clone(),
                _image: image_words,
            },
        );
        Ok(LoadedModule {
            module: ModuleHandle(handle),
            entry_points,
            status_words,
            shared_memory_bytes,
        })
    }

    fn unload_module(&self, module: ModuleHandle) -> Result<()> {
        let module = self.modules.remove(module.0)?;
        // Dropped outside the registry's lock, before the module (their `Drop`s call HIP).
        drop(
            self.functions
                .retain(|_, f| !Arc::ptr_eq(&f.module, &module)),
        );
        // hipModuleUnload runs when the last launch using one of its functions returned.
        Ok(())
    }

    fn get_function(&self, module_handle: ModuleHandle, name: &str) -> Result<FunctionHandle> {
        let module = self.modules.get(module_handle.0)?;
        let Some(index) = module.entry_points.iter().position(|e| e.name == name) else {
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "HIP module has no entry point '{name}'; it declares: [{}]",
                    module
                        .entry_points
                        .iter()
                        .map(|e| e.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        };
        let _bound = self.bind()?;
        // SAFETY: a live module, held for the call.
        let raw = unsafe { self.hip.module_get_function(module.raw, name) }?;
        if raw.is_null() {
            return Err(null_from("hipModuleGetFunction"));
        }
        let handle = raw as usize as u64;
        let entry = &module.entry_points[index];
        let function = RawFunction {
            raw,
            name: name.to_string(),
            binding_count: entry.binding_count as usize,
            constant_count: entry.constant_count as usize,
            status_word: module.status_words[index],
            module: module.clone(),
        };
        self.functions.insert(handle, function);
        if !self
            .modules
            .get(module_handle.0)
            .is_ok_and(|live| Arc::ptr_eq(&live, &module))
        {
            // An unload raced this call and dropped the module's functions before the insert:
            // this one would keep the unloaded module alive until the API goes.
            drop(self.functions.remove(handle));
            return Err(self.modules.missing(module_handle.0));
        }
        Ok(FunctionHandle(handle))
    }

    fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        stream: StreamHandle,
    ) -> Result<()> {
        let status = params.status;
        let function = self.functions.get(function.0)?;
        if params.bindings.len() != function.binding_count
            || params.constants.len() != function.constant_count
            || status.is_some() != function.status_word
        {
            return Err(invalid(format!(
                "kernel '{}' takes {} bindings and {} constants{}; the launch passes {} and {}{}",
                function.name,
                function.binding_count,
                function.constant_count,
                if function.status_word {
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
            )));
        }
        check_grid(&function.name, config.grid, config.block, self.max_grid)?;
        // The word the kernel stores to: 4 aligned bytes of a live allocation of this API (a
        // made-up address would have the kernel write wherever it points, host memory
        // included where the device can reach it), held live until the launch is enqueued.
        let _status = status
            .map(|word| {
                if word.0 % 4 != 0 {
                    return Err(invalid(format!(
                        "kernel '{}': the status word at {word:?} is not 4-byte aligned",
                        function.name
                    )));
                }
                self.memory.check(word, 4, "status word")
            })
            .transpose()?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let mut args = KernelArgs::new(params);
        let mut pointers = args.pointers();
        let kernel_params = if pointers.is_empty() {
            std::ptr::null_mut()
        } else {
            pointers.as_mut_ptr()
        };
        // SAFETY: a live function (its module held) and stream. The module's metadata was
        // checked at load to take exactly `binding_count` 8-byte pointers then
        // `constant_count` 4-byte values, then an 8-byte pointer if it takes a status word, and
        // the launch matches (checked above), so HIP reads exactly one valid pointer per
        // argument, each to a value at least as large as the argument; it copies the values
        // during the call, so `args` may go afterwards.
        unsafe {
            self.hip.module_launch_kernel(
                function.raw,
                config.grid,
                config.block,
                config.shared_memory_bytes,
                stream.raw,
                kernel_params,
                std::ptr::null_mut(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn static_and_dynamic_shared_memory_must_fit_a_block() {
        let max = DEFAULT_MAX_SHARED_MEMORY;
        check_shared_memory("k", 1024, 0, 512, 0).unwrap();
        check_shared_memory("k", 1024, max - 1024, max, 0).unwrap();
        let e = check_shared_memory("k", 1024, max - 1023, max, 3).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(
            e.message().contains(
                "on top of its 1024 bytes of static, but a block on hip://3 may have \
                           at most 65536 bytes"
            ),
            "{e}"
        );
    }

    #[test]
    fn event_flags_map_to_hip_flags() {
        assert_eq!(
            event_flags(EventFlags::empty()),
            (sys::hipEventDefault, None)
        );
        assert_eq!(
            event_flags(EventFlags::DISABLE_TIMING),
            (sys::hipEventDisableTiming, None)
        );
        // The shared event never blocks; the private one has the blocking-sync flag alone,
        // the only way the newest clr honours it.
        assert_eq!(
            event_flags(EventFlags::DISABLE_TIMING | EventFlags::BLOCKING_SYNC),
            (sys::hipEventDisableTiming, Some(sys::hipEventBlockingSync))
        );
        assert_eq!(
            event_flags(EventFlags::BLOCKING_SYNC),
            (sys::hipEventDefault, Some(sys::hipEventBlockingSync))
        );
    }

    /// A fake HIP: records which events were recorded, and fails the ones in `failing`.
    fn recorder<'a>(
        log: &'a Mutex<Vec<u32>>,
        failing: &'a [u32],
    ) -> impl FnMut(u32) -> Result<()> + 'a {
        move |event| {
            log.lock().unwrap().push(event);
            if failing.contains(&event) {
                Err(Error::new(
                    StatusCode::Internal,
                    format!("record {event} fails"),
                ))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn single_events_use_one_hip_event_for_everything() {
        let pair = EventPair::single(1u32);
        assert_eq!(pair.all().collect::<Vec<_>>(), [1]);
        let log = Mutex::default();
        pair.record(recorder(&log, &[])).unwrap();
        assert_eq!(*log.lock().unwrap(), [1]);
        assert_eq!((pair.shared(), pair.to_synchronize()), (1, 1));
        let e = pair.record(recorder(&log, &[1])).unwrap_err();
        assert_eq!(e.message(), "record 1 fails");
        assert_eq!(pair.to_synchronize(), 1);
    }

    #[test]
    fn paired_events_record_both_and_synchronize_on_the_private_one() {
        let pair = EventPair::paired(1u32, 2u32);
        assert_eq!(pair.all().collect::<Vec<_>>(), [1, 2]);
        // Never recorded: both complete, so the private one stands for the shared one.
        assert_eq!((pair.shared(), pair.to_synchronize()), (1, 2));
        let log = Mutex::default();
        pair.record(recorder(&log, &[])).unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            [1, 2],
            "shared first, then private, each once"
        );
        assert_eq!((pair.shared(), pair.to_synchronize()), (1, 2));
    }

    #[test]
    fn a_failed_private_record_falls_back_to_the_shared_event_until_both_record() {
        let pair = EventPair::paired(1u32, 2u32);
        let log = Mutex::default();
        // The shared record fails: nothing changed, nothing else is recorded.
        let e = pair.record(recorder(&log, &[1])).unwrap_err();
        assert_eq!(e.message(), "record 1 fails");
        assert_eq!(*log.lock().unwrap(), [1]);
        assert_eq!(pair.to_synchronize(), 2);
        // Only the private record fails: the call fails, saying which, and synchronisations
        // wait on the shared event, which holds the newest record.
        log.lock().unwrap().clear();
        let e = pair.record(recorder(&log, &[2])).unwrap_err();
        assert_eq!(e.code(), StatusCode::Internal);
        assert!(e.message().contains("private blocking-sync"), "{e}");
        assert!(e.message().ends_with("record 2 fails"), "{e}");
        assert_eq!(*log.lock().unwrap(), [1, 2]);
        assert_eq!((pair.shared(), pair.to_synchronize()), (1, 1));
        // A failed shared record leaves it so.
        assert!(pair.record(recorder(&log, &[1])).is_err());
        assert_eq!(pair.to_synchronize(), 1);
        // A record of both puts the private event back in step.
        pair.record(recorder(&log, &[])).unwrap();
        assert_eq!(pair.to_synchronize(), 2);
    }

    #[test]
    fn grids_are_checked_against_the_limits_and_32_bit_work_items() {
        let max = DEFAULT_MAX_GRID;
        check_grid("k", [1, 1, 1], [64, 1, 1], max).unwrap();
        check_grid("k", [i32::MAX as u32, 1, 1], [1, 1, 1], max).unwrap();
        check_grid("k", [(1 << 22) - 1, 1 << 16, 1 << 16], [1024, 1, 1], max).unwrap();
        // x: u32::MAX work-items exactly is fine, one block more is not.
        check_grid("k", [(u32::MAX / 1024), 1, 1], [1024, 1, 1], max).unwrap();
        let e = check_grid("k", [u32::MAX / 1024 + 1, 1, 1], [1024, 1, 1], max).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains("kernel 'k'"), "{e}");
        assert!(
            e.message().contains("in x are 4294967296 work-items"),
            "{e}"
        );
        assert!(e.message().contains("4294967295 (u32::MAX)"), "{e}");
        for (grid, axis) in [
            ([i32::MAX as u32 + 1, 1, 1], "X"),
            ([1, 65537, 1], "Y"),
            ([1, 1, 65537], "Z"),
        ] {
            let e = check_grid("k", grid, [1, 1, 1], max).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(
                e.message()
                    .contains(&format!("(hipDeviceAttributeMaxGridDim{axis})")),
                "{e}"
            );
        }
        // HIP 5.2 reports INT32_MAX blocks in y and z: then the work-item bound applies there.
        let wide = [i32::MAX as u32; 3];
        check_grid("k", [1, 1 << 20, 1 << 20], [1, 1024, 1024], wide).unwrap();
        for grid in [[1, 1 << 23, 1], [1, 1, 1 << 23]] {
            let e = check_grid("k", grid, [1, 1024, 1024], wide).unwrap_err();
            assert!(e.message().contains("work-items"), "{e}");
        }
    }

    #[test]
    fn memset_elements_checks_pattern_and_alignment() {
        assert_eq!(memset_elements(DevicePtr(0x1000), 4, 64).unwrap(), 16);
        assert_eq!(memset_elements(DevicePtr(0x1002), 2, 6).unwrap(), 3);
        assert_eq!(memset_elements(DevicePtr(0x1003), 1, 5).unwrap(), 5);
        for (ptr, pattern, len) in [(0x1000, 3, 6), (0x1002, 4, 8), (0x1000, 4, 6), (0, 8, 8)] {
            let e = memset_elements(DevicePtr(ptr), pattern, len).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        }
    }

    #[test]
    fn kernel_args_point_at_each_binding_then_each_constant() {
        let bindings = [DevicePtr(0x7000_0000_1000), DevicePtr(0x7000_0000_2040)];
        let constants = [42u32, 1.5f32.to_bits()];
        let params = KernelParams {
            bindings: &bindings,
            constants: &constants,
            status: None,
        };
        let mut args = KernelArgs::new(&params);
        let pointers = args.pointers();
        assert_eq!(pointers.len(), 4);
        // SAFETY: each pointer addresses a live u64 slot of `args`, read as HIP would read an
        // argument of that size.
        unsafe {
            assert_eq!(*pointers[0].cast::<u64>(), 0x7000_0000_1000);
            assert_eq!(*pointers[1].cast::<u64>(), 0x7000_0000_2040);
            assert_eq!(*pointers[2].cast::<u32>(), 42);
            assert_eq!(f32::from_bits(*pointers[3].cast::<u32>()), 1.5);
        }
        let empty = KernelParams {
            bindings: &[],
            constants: &[],
            status: None,
        };
        assert!(KernelArgs::new(&empty).pointers().is_empty());
        // The status word comes last, after the constants.
        let mut args = KernelArgs::new(&KernelParams {
            status: Some(DevicePtr(0x7000_0000_3000)),
            ..params
        });
        let pointers = args.pointers();
        assert_eq!(pointers.len(), 5);
        // SAFETY: as above.
        unsafe {
            assert_eq!(*pointers[2].cast::<u32>(), 42);
            assert_eq!(*pointers[4].cast::<u64>(), 0x7000_0000_3000);
        }
        let mut args = KernelArgs::new(&KernelParams {
            status: Some(DevicePtr(0x7000_0000_3000)),
            ..empty
        });
        let pointers = args.pointers();
        assert_eq!(pointers.len(), 1);
        // SAFETY: as above.
        assert_eq!(unsafe { *pointers[0].cast::<u64>() }, 0x7000_0000_3000);
    }

    #[test]
    fn only_copies_within_host_visible_allocations_skip_staging() {
        let memory = Allocations::new("HIP");
        memory.insert(0x1000, 0x100, AllocKind::Device);
        // Mapped host memory: MemoryPlacement::Pinned, or HostVisibleMemory::MappedHost.
        memory.insert(0x2000, 0x100, AllocKind::MappedHost);
        memory.insert(0x3000, 0x100, AllocKind::Managed);
        // Adjacent to the mapped allocation above, but another allocation.
        memory.insert(0x2100, 0x100, AllocKind::MappedHost);
        memory.insert(0x5000, 0x100, AllocKind::StreamOrdered);
        let at = |a: usize| a as *const u8;
        assert!(host_resident(&memory, at(0x2000), 0x100));
        assert!(
            host_resident(&memory, at(0x2010), 0x20),
            "inside a mapped allocation"
        );
        assert!(host_resident(&memory, at(0x20ff), 1), "its last byte");
        assert!(host_resident(&memory, at(0x3080), 0x80));
        assert!(
            !host_resident(&memory, at(0x2080), 0x81),
            "runs past the end"
        );
        assert!(
            !host_resident(&memory, at(0x20f0), 0x20),
            "spans two allocations"
        );
        assert!(!host_resident(&memory, at(0x1000), 0x10), "device memory");
        assert!(
            !host_resident(&memory, at(0x5000), 0x10),
            "stream-ordered memory"
        );
        assert!(
            !host_resident(&memory, at(0x4000), 1),
            "not this API's memory"
        );
        assert!(!host_resident(&memory, at(0xfff), 2), "starts before one");
        assert!(!host_resident(&memory, at(0x2000), u64::MAX));
    }

    #[test]
    fn the_own_pool_is_pinned_unexportable_device_memory() {
        let props = pool_props(3);
        assert_eq!(props.allocType, sys::hipMemAllocationTypePinned);
        assert_eq!(props.handleTypes, sys::hipMemHandleTypeNone);
        assert_eq!(
            props.location,
            sys::hipMemLocation {
                type_: sys::hipMemLocationTypeDevice,
                id: 3
            }
        );
        assert!(props.win32SecurityAttributes.is_null());
        assert_eq!(props.maxSize, 0, "reserved before ROCm 6.2: must stay zero");
        assert_eq!(props.reserved, [0; 56]);
    }

    #[test]
    fn host_lengths_fit_the_address_space() {
        assert_eq!(host_len(4096).unwrap(), 4096);
        let e = host_len(u64::MAX).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    }

    /// A heap buffer standing in for pinned memory (never given to HIP).
    fn fake_pinned(capacity: usize, fill: u8) -> Pinned {
        let buffer = vec![fill; capacity].into_boxed_slice();
        let ptr = NonNull::new(Box::into_raw(buffer).cast::<u8>()).unwrap();
        Pinned { ptr, capacity }
    }

    fn free_fake(pool: &StagingPool) -> usize {
        let all = pool.drain();
        let n = all.len();
        for p in all {
            // SAFETY: made by `fake_pinned` with this capacity, freed once.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    p.ptr.as_ptr(),
                    p.capacity,
                ))
            });
        }
        n
    }

    /// Hands a host function to a trampoline as HIP would; `status` None: `hipLaunchHostFunc`.
    fn deliver(func: HostFunc, status: Option<sys::hipError_t>) {
        let (_cell, user_data) = host_func_user_data(func);
        // SAFETY: a fresh cell's user data, consumed once.
        unsafe {
            match status {
                Some(status) => stream_callback(std::ptr::null_mut(), status, user_data),
                None => host_fn(user_data),
            }
        }
    }

    /// The one host function a staged read of `dst.len()` bytes (at most the buffer) enqueues,
    /// its device copy left out (the buffer keeps what `fake_pinned` put there).
    ///
    /// # Safety
    /// `dst` must outlive the host function and be disjoint from the buffer.
    unsafe fn copy_out_of_staging(lease: Lease, dst: *mut u8, len: usize) -> HostFunc {
        let mut funcs = Vec::new();
        // SAFETY: forwarded from the caller.
        unsafe {
            stage_from_device(
                lease,
                dst,
                len,
                |_, _, _| Ok(()),
                |f| {
                    funcs.push(f);
                    Ok(())
                },
            )
            .unwrap()
        };
        assert_eq!(funcs.len(), 1);
        funcs.remove(0)
    }

    /// The host function a staged write of one chunk enqueues (the buffer's release).
    fn release_staging(lease: Lease) -> HostFunc {
        let src = [1u8; 4];
        let mut funcs = Vec::new();
        // SAFETY: `src` is read at once (one chunk), before this returns.
        unsafe {
            stage_to_device(
                lease,
                src.as_ptr(),
                4,
                |_, _, _| Ok(()),
                |f| {
                    funcs.push(f);
                    Ok(())
                },
            )
            .unwrap()
        };
        assert_eq!(funcs.len(), 1);
        funcs.remove(0)
    }

    #[test]
    fn reads_copy_out_of_staging_then_reuse_it_unless_the_stream_failed() {
        let pool = Arc::new(StagingPool::default());
        for status in [None, Some(sys::hipSuccess)] {
            let mut dst = [0u8; 5];
            let lease = Lease::new(fake_pinned(16, 7), pool.clone());
            // SAFETY: the fake buffer holds 16 bytes; `dst` is 5 bytes, alive and disjoint.
            let func = unsafe { copy_out_of_staging(lease, dst.as_mut_ptr(), dst.len()) };
            deliver(func, status);
            assert_eq!(dst, [7; 5]);
            assert_eq!(pool.counts(), (1, 0, 0), "back among the idle buffers");
            free_fake(&pool);
        }
        let mut dst = [0u8; 5];
        let lease = Lease::new(fake_pinned(16, 7), pool.clone());
        // SAFETY: as above.
        let func = unsafe { copy_out_of_staging(lease, dst.as_mut_ptr(), dst.len()) };
        deliver(func, Some(sys::hipErrorLaunchFailure));
        assert_eq!(dst, [0; 5], "not written after a stream error");
        assert_eq!(
            pool.counts(),
            (0, 0, 1),
            "orphaned: the device may still write it"
        );
        assert_eq!(free_fake(&pool), 1);
    }

    #[test]
    fn writes_return_staging_after_the_copy_unless_the_stream_failed() {
        let pool = Arc::new(StagingPool::default());
        deliver(
            release_staging(Lease::new(fake_pinned(8, 0), pool.clone())),
            None,
        );
        deliver(
            release_staging(Lease::new(fake_pinned(8, 0), pool.clone())),
            Some(sys::hipSuccess),
        );
        assert_eq!(pool.counts(), (2, 0, 0));
        deliver(
            release_staging(Lease::new(fake_pinned(8, 0), pool.clone())),
            Some(sys::hipErrorLaunchFailure),
        );
        assert_eq!(pool.counts(), (2, 0, 1));
        assert_eq!(free_fake(&pool), 3);
    }

    /// Counts drops, to see that a host function is released exactly once.
    struct Guard(Arc<AtomicUsize>);

    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn host_func(ran: &Arc<AtomicUsize>, dropped: &Arc<AtomicUsize>) -> *mut c_void {
        let (ran, guard) = (ran.clone(), Guard(dropped.clone()));
        let func: HostFunc = Box::new(move || {
            let _guard = guard;
            ran.fetch_add(1, Ordering::SeqCst);
        });
        host_func_user_data(func).1
    }

    #[test]
    fn trampolines_run_on_success_and_drop_unrun_on_error() {
        let (ran, dropped) = (Arc::default(), Arc::default());
        // SAFETY: each call consumes a fresh cell's user data, as HIP would.
        unsafe {
            stream_callback(
                std::ptr::null_mut(),
                sys::hipSuccess,
                host_func(&ran, &dropped),
            );
            assert_eq!(
                (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
                (1, 1)
            );
            stream_callback(
                std::ptr::null_mut(),
                sys::hipErrorLaunchFailure,
                host_func(&ran, &dropped),
            );
            assert_eq!(
                (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
                (1, 2)
            );
            host_fn(host_func(&ran, &dropped));
            assert_eq!(
                (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
                (2, 3)
            );
        }
    }

    #[test]
    fn a_panicking_host_func_does_not_unwind_into_hip() {
        let func: HostFunc = Box::new(|| panic!("host function panics"));
        let (_cell, user_data) = host_func_user_data(func);
        // SAFETY: a fresh cell's user data, consumed once.
        unsafe { stream_callback(std::ptr::null_mut(), sys::hipSuccess, user_data) };
        /// A panic payload whose own drop panics.
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("the payload's drop panics too");
            }
        }
        let func: HostFunc = Box::new(|| std::panic::panic_any(Bomb));
        let (_cell, user_data) = host_func_user_data(func);
        // SAFETY: as above.
        unsafe { host_fn(user_data) };
    }

    /// An enqueue HIP refused may still have queued the callback: the enqueuing thread takes
    /// the function (dropped unrun), and a callback that comes anyway finds the cell empty and
    /// only lets go of HIP's reference, so nothing runs twice or is freed twice.
    #[test]
    fn a_callback_after_a_failed_enqueue_runs_nothing() {
        let (ran, dropped): (Arc<AtomicUsize>, Arc<AtomicUsize>) = Default::default();
        let (ran2, guard) = (Arc::clone(&ran), Guard(Arc::clone(&dropped)));
        let func: HostFunc = Box::new(move || {
            let _guard = guard;
            ran2.fetch_add(1, Ordering::SeqCst);
        });
        let (cell, user_data) = host_func_user_data(func);
        settle_host_func(&cell, false);
        assert_eq!(
            (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
            (0, 1)
        );
        assert_eq!(Arc::strong_count(&cell), 2, "HIP's reference is kept");
        // SAFETY: HIP's reference, handed back once.
        unsafe { stream_callback(std::ptr::null_mut(), sys::hipSuccess, user_data) };
        assert_eq!(
            (ran.load(Ordering::SeqCst), dropped.load(Ordering::SeqCst)),
            (0, 1)
        );
        assert_eq!(Arc::strong_count(&cell), 1, "HIP's reference is let go");
    }
}
