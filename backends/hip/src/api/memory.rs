//! Allocation: device memory (`hipMalloc`), host-visible memory (managed or mapped pinned, as
//! [`HostVisibleMemory`] picks), pinned memory, and stream-ordered allocation from the API's
//! own pool ([`MemPool`]) or the device's default one. See
//! [Host-visible memory](super#host-visible-memory).
//!
//! Every allocation is registered with the allocator that made it ([`AllocKind`]), so that
//! copies and fills are checked against live allocations and each allocation is freed by the
//! matching call.

use std::ffi::{c_uint, c_void};
use std::ptr::NonNull;

use halcyon::{Error, Result, StatusCode};
use halcyon_stream::allocations::Allocations;
use halcyon_stream::out_of_memory::retry_after_trim;
use halcyon_stream::{Capabilities, DevicePtr, MemoryPlacement, StreamHandle};

use super::{invalid, null_from, HipStreamApi};
use crate::result::Hip;
use crate::sys;

/// How [`MemoryPlacement::HostVisible`] allocations (the stream layer's host-visible
/// device-local buffers) are made (see the module docs).
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

/// A `hipMemPool_t` made by [`HipStreamApi::new`] for its device, destroyed on drop.
pub(super) struct MemPool {
    hip: Hip,
    pub(super) raw: sys::hipMemPool_t,
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
    pub(super) fn create(hip: Hip, device: i32, release_threshold: u64) -> Result<MemPool> {
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
    pub(super) fn host_visible(self) -> bool {
        matches!(self, AllocKind::Managed | AllocKind::MappedHost)
    }
}

/// Whether `len` bytes of host memory at `ptr` lie within one live host-visible allocation
/// (managed or mapped pinned), which `hipMemcpyAsync` copies asynchronously.
pub(crate) fn host_resident(memory: &Allocations<AllocKind>, ptr: *const u8, len: u64) -> bool {
    memory.within(ptr as usize as u64, len, AllocKind::host_visible)
}

pub(super) fn size_of(size: u64) -> Result<usize> {
    usize::try_from(size.max(1)).map_err(|_| {
        Error::new(
            StatusCode::ResourceExhausted,
            format!("HIP stream API: {size} bytes do not fit this host's address space"),
        )
    })
}

impl HipStreamApi {
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

    /// Whether stream-ordered allocation comes from the API's own pool
    /// (`hipMallocFromPoolAsync`). `false` where it comes from the device's default pool
    /// (`hipMallocAsync`: a runtime without the pool calls, or a refused `hipMemPoolCreate`)
    /// or where there is none ([`Capabilities::STREAM_ORDERED_ALLOC`] unset).
    pub fn has_own_pool(&self) -> bool {
        self.pool.is_some()
    }

    pub(super) fn free_kind(&self, base: u64, kind: AllocKind) -> Result<()> {
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
    pub(super) fn malloc_device(&self, bytes: usize) -> Result<*mut c_void> {
        self.trimming_on_oom(|| self.hip.malloc(bytes))
    }

    /// Makes `call`, and once more after `hipMemPoolTrimTo(pool, 0)` if it ran out of memory
    /// ([`retry_after_trim`]; `hipErrorOutOfMemory` is the only error of these calls that is
    /// `ResourceExhausted`). For `hipMalloc` and module loading.
    pub(super) fn trimming_on_oom<T>(&self, call: impl FnMut() -> Result<T>) -> Result<T> {
        retry_after_trim(
            call,
            |r| matches!(r, Err(e) if e.code() == StatusCode::ResourceExhausted),
            || {
                let Some(pool) = &self.pool else {
                    return false;
                };
                // SAFETY: a live pool; trimming only releases memory no allocation holds.
                unsafe { self.hip.mem_pool_trim_to(pool.raw, 0) }.is_ok()
            },
        )
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

    /// [`StreamApi::allocate`](super::StreamApi::allocate).
    pub(super) fn allocate(&self, size: u64, placement: MemoryPlacement) -> Result<DevicePtr> {
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

    /// [`StreamApi::free`](super::StreamApi::free).
    pub(super) fn free(&self, ptr: DevicePtr) -> Result<()> {
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

    /// [`StreamApi::host_pointer`](super::StreamApi::host_pointer).
    pub(super) fn host_pointer(&self, ptr: DevicePtr) -> Option<NonNull<u8>> {
        match self.memory.find(ptr.0) {
            // Managed and mapped host memory have one address on both sides.
            Some((_, _, kind)) if kind.host_visible() => NonNull::new(ptr.0 as usize as *mut u8),
            _ => None,
        }
    }

    /// [`StreamApi::allocate_async`](super::StreamApi::allocate_async).
    pub(super) fn allocate_async(&self, size: u64, stream: StreamHandle) -> Result<DevicePtr> {
        if !self
            .info
            .capabilities
            .contains(Capabilities::STREAM_ORDERED_ALLOC)
        {
            return Err(halcyon_stream::api::unimplemented(
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

    /// [`StreamApi::free_async`](super::StreamApi::free_async).
    pub(super) fn free_async(&self, ptr: DevicePtr, stream: StreamHandle) -> Result<()> {
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
}
