//! Allocations: device memory (`cuMemAlloc`, tried once more after trimming the API's pool when
//! the device is out of memory), managed and pinned host-visible memory, stream-ordered memory
//! from the API's own pool, and the record of every live allocation with its allocator
//! ([`AllocKind`]), which frees and range checks go by.

use std::ffi::{c_uint, c_void};
use std::ptr::NonNull;

use cudarc::driver::sys::{
    CUdeviceptr, CUmemAllocationHandleType, CUmemAllocationType, CUmemAttach_flags,
    CUmemLocationType, CUmemPoolProps, CUmemPool_attribute, CUmemoryPool, CUresult,
    CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE,
};
use halcyon::{Error, Result, StatusCode};
use halcyon_stream::arguments::host_len;
use halcyon_stream::out_of_memory::retry_after_trim;
use halcyon_stream::{Capabilities, DevicePtr, MemoryPlacement, StreamHandle};

use super::CudaApi;
use crate::result::{check, cuda_error};
use crate::sys::{self, Code};
use crate::DRIVER_ID;

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
pub(super) struct MemPool(pub(super) CUmemoryPool);

impl CudaApi {
    /// Creates the API's own pool of device memory (pinned, on this device, not exportable), so
    /// its release threshold and trimming touch nobody else's allocations (the device's
    /// default pool is shared with every other CUDA user in the process).
    pub(super) fn create_pool(&self) -> Result<MemPool> {
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
        check(
            // SAFETY: a live pool; the attribute takes a cuuint64_t, which `value` is.
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

    /// Makes `call`, and once more after `cuMemPoolTrimTo(pool, 0)` if the device ran out of
    /// memory ([`retry_after_trim`]; the pool's release threshold is
    /// [`CudaApi::set_pool_release_threshold`]'s). For `cuMemAlloc`, module loading (code and
    /// globals) and graph instantiation.
    pub(super) fn trimming_on_oom(&self, call: impl FnMut() -> Code) -> Code {
        retry_after_trim(
            call,
            |&r| r == CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            || {
                let Some(pool) = &self.pool else {
                    return false;
                };
                // SAFETY: a live pool; trimming only releases unused memory.
                unsafe { sys::cuMemPoolTrimTo(pool.0, 0) }.is_success()
            },
        )
    }

    /// Whether `len` bytes at `ptr` lie within one [`AllocKind::Pinned`] allocation (where a
    /// copy from or into host memory needs no staging).
    pub(super) fn pinned_range(&self, ptr: u64, len: u64) -> bool {
        self.memory
            .within(ptr, len, |kind| kind == AllocKind::Pinned)
    }

    /// A [`MemoryPlacement::Pinned`] allocation of `bytes` (non-zero) bytes: page-locked host
    /// memory mapped into the device's address space (`cuMemHostAlloc(DEVICEMAP | PORTABLE)`),
    /// kept only if its device address (`cuMemHostGetDevicePointer`) is its host address, and
    /// recorded in `mapped`. The context is bound.
    fn allocate_pinned(&self, bytes: usize) -> Result<CUdeviceptr> {
        let flags = CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE;
        let mut host: *mut c_void = std::ptr::null_mut();
        check(
            // SAFETY: valid out-pointer; the context is bound; the flags are documented ones.
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

    pub(super) fn allocate(&self, size: u64, placement: MemoryPlacement) -> Result<DevicePtr> {
        if size == 0 {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                "cannot allocate 0 bytes of CUDA memory",
            ));
        }
        let bytes = host_len(size, "an allocation")?;
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
                            "{}: host-visible device-local buffers are managed memory, which \
                             this device cannot share with the host while kernels run (no \
                             CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS); allocate \
                             host-visible memory without DEVICE_LOCAL (pinned host memory, \
                             BufferParams::HOST) or device memory and queue reads and writes",
                            self.info.name
                        ),
                    ));
                }
                let flags = CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as c_uint;
                check(
                    // SAFETY: valid out-pointer; context bound.
                    unsafe { sys::cuMemAllocManaged(&mut ptr, bytes, flags) },
                    || format!("cuMemAllocManaged({size} bytes, CU_MEM_ATTACH_GLOBAL)"),
                )?;
                self.memory.insert(ptr, size, AllocKind::Managed);
            }
            MemoryPlacement::Pinned => ptr = self.allocate_pinned(bytes)?,
        }
        Ok(DevicePtr(ptr))
    }

    pub(super) fn free(&self, ptr: DevicePtr) -> Result<()> {
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

    pub(super) fn host_pointer(&self, ptr: DevicePtr) -> Option<NonNull<u8>> {
        // Pinned, device-mapped host memory has one address on both sides (checked when it
        // was allocated), and so has managed memory (unified addressing), which is only
        // allocated where the host may touch it while kernels run.
        self.memory
            .within(ptr.0, 0, AllocKind::host_addressable)
            .then(|| NonNull::new(ptr.0 as usize as *mut u8))
            .flatten()
    }

    pub(super) fn allocate_async(&self, size: u64, s: StreamHandle) -> Result<DevicePtr> {
        if !self
            .info
            .capabilities
            .contains(Capabilities::STREAM_ORDERED_ALLOC)
        {
            return Err(halcyon_stream::api::unimplemented(
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
        let bytes = host_len(size, "an allocation")?;
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

    pub(super) fn free_async(&self, ptr: DevicePtr, s: StreamHandle) -> Result<()> {
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
}

/// Frees the allocation at `base`, made by `kind`'s allocator, on a thread where its context is
/// bound and behind the capture gate.
///
/// # Safety
/// `base` is the base of a live allocation of `kind` that nothing uses any more and that is
/// freed only here.
pub(super) unsafe fn free_kind(base: u64, kind: AllocKind) -> Result<()> {
    match kind {
        AllocKind::Pinned => check(
            // SAFETY: forwarded from the caller.
            unsafe { sys::cuMemFreeHost(base as usize as *mut c_void) },
            || format!("cuMemFreeHost({base:#x})"),
        ),
        // SAFETY: forwarded from the caller; cuMemFree also frees stream-ordered memory.
        _ => check(unsafe { sys::cuMemFree_v2(base) }, || {
            format!("cuMemFree({base:#x})")
        }),
    }
}
