//! Memory: device, managed and pinned host allocations, stream-ordered allocation and memory
//! pools, and asynchronous copies and fills.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr;

use halcyon::Result;

use super::Hip;
use crate::sys;

impl Hip {
    /// `hipMalloc`: device memory on the current device.
    pub fn malloc(self, size: usize) -> Result<sys::hipDeviceptr_t> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one pointer.
        let e = unsafe { (self.api.hipMalloc)(&mut p, size) };
        self.check(e, || format!("hipMalloc({size} bytes)"))
            .map(|()| p)
    }

    /// `hipFree`.
    ///
    /// # Safety
    /// `ptr` came from [`Hip::malloc`] (or is null), is freed once, and no pending work uses it.
    pub unsafe fn free(self, ptr: sys::hipDeviceptr_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipFree)(ptr) };
        self.check(e, || "hipFree".into())
    }

    /// `hipHostMalloc`: pinned host memory (`sys::hipHostMalloc*` flags).
    pub fn host_malloc(self, size: usize, flags: c_uint) -> Result<*mut c_void> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one pointer.
        let e = unsafe { (self.api.hipHostMalloc)(&mut p, size, flags) };
        self.check(e, || {
            format!("hipHostMalloc({size} bytes, flags {flags:#x})")
        })
        .map(|()| p)
    }

    /// `hipHostFree`.
    ///
    /// # Safety
    /// `ptr` came from [`Hip::host_malloc`] (or is null), is freed once, and no pending work
    /// uses it.
    pub unsafe fn host_free(self, ptr: *mut c_void) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipHostFree)(ptr) };
        self.check(e, || "hipHostFree".into())
    }

    /// `hipHostGetDevicePointer`: the device address of memory from [`Hip::host_malloc`] with
    /// `sys::hipHostMallocMapped`.
    ///
    /// # Safety
    /// `ptr` came from [`Hip::host_malloc`] and has not been freed.
    pub unsafe fn host_get_device_pointer(self, ptr: *mut c_void) -> Result<sys::hipDeviceptr_t> {
        let mut d: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one pointer; `ptr` is guaranteed by the caller.
        let e = unsafe { (self.api.hipHostGetDevicePointer)(&mut d, ptr, 0) };
        self.check(e, || "hipHostGetDevicePointer".into())
            .map(|()| d)
    }

    /// `hipMallocManaged`: device-local, host-visible memory (`sys::hipMemAttachGlobal`).
    pub fn malloc_managed(self, size: usize, flags: c_uint) -> Result<*mut c_void> {
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one pointer.
        let e = unsafe { (self.api.hipMallocManaged)(&mut p, size, flags) };
        self.check(e, || {
            format!("hipMallocManaged({size} bytes, flags {flags:#x})")
        })
        .map(|()| p)
    }

    /// Whether stream-ordered allocation (`hipMallocAsync`/`hipFreeAsync`) is exported.
    pub fn has_stream_ordered_alloc(self) -> bool {
        self.api.hipMallocAsync.is_some() && self.api.hipFreeAsync.is_some()
    }

    /// `hipMallocAsync`: device memory usable by work on `stream` issued after this call.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime.
    pub unsafe fn malloc_async(
        self,
        size: usize,
        stream: sys::hipStream_t,
    ) -> Result<sys::hipDeviceptr_t> {
        let f = self.optional(self.api.hipMallocAsync, "hipMallocAsync")?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid; the stream is guaranteed by the caller.
        let e = unsafe { f(&mut p, size, stream) };
        self.check(e, || format!("hipMallocAsync({size} bytes)"))
            .map(|()| p)
    }

    /// `hipFreeAsync`: frees `ptr` once earlier work on `stream` completes.
    ///
    /// # Safety
    /// `ptr` came from this runtime's allocator and is freed once; `stream` is live; work on
    /// other streams using `ptr` is ordered before this call.
    pub unsafe fn free_async(
        self,
        ptr: sys::hipDeviceptr_t,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        let f = self.optional(self.api.hipFreeAsync, "hipFreeAsync")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(ptr, stream) };
        self.check(e, || "hipFreeAsync".into())
    }

    /// Whether the memory-pool calls [`HipStreamApi`](crate::HipStreamApi) uses for its own
    /// pool are all exported (`hipMemPoolCreate`, `hipMemPoolDestroy`,
    /// `hipMallocFromPoolAsync`, `hipMemPoolSetAttribute`, `hipMemPoolTrimTo`; ROCm 5.2 and
    /// later), as well as `hipFreeAsync`.
    pub fn has_mem_pools(self) -> bool {
        let a = self.api;
        a.hipMemPoolCreate.is_some()
            && a.hipMemPoolDestroy.is_some()
            && a.hipMallocFromPoolAsync.is_some()
            && a.hipMemPoolSetAttribute.is_some()
            && a.hipMemPoolTrimTo.is_some()
            && a.hipFreeAsync.is_some()
    }

    /// `hipMemPoolCreate`: a new memory pool with the properties `props` (see
    /// [`sys::hipMemPoolProps`]).
    pub fn mem_pool_create(self, props: &sys::hipMemPoolProps) -> Result<sys::hipMemPool_t> {
        let f = self.optional(self.api.hipMemPoolCreate, "hipMemPoolCreate")?;
        let mut pool: sys::hipMemPool_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one handle; `props` is a valid hipMemPoolProps
        // (its layout is that of every release's header; see `sys`), read during the call.
        let e = unsafe { f(&mut pool, props) };
        self.check(e, || {
            format!(
                "hipMemPoolCreate(device {}, allocation type {}, handle types {:#x})",
                props.location.id, props.allocType, props.handleTypes
            )
        })
        .map(|()| pool)
    }

    /// `hipMemPoolDestroy`. Memory still allocated from the pool, or freed by work not yet
    /// completed, keeps the pool alive in the runtime until it is gone.
    ///
    /// # Safety
    /// `pool` came from [`Hip::mem_pool_create`], is destroyed once, and is not used afterwards.
    pub unsafe fn mem_pool_destroy(self, pool: sys::hipMemPool_t) -> Result<()> {
        let f = self.optional(self.api.hipMemPoolDestroy, "hipMemPoolDestroy")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(pool) };
        self.check(e, || "hipMemPoolDestroy".into())
    }

    /// `hipMallocFromPoolAsync`: device memory from `pool`, usable by work on `stream` issued
    /// after this call; freed with [`Hip::free_async`].
    ///
    /// # Safety
    /// `pool` is a live pool and `stream` a live stream of this runtime.
    pub unsafe fn malloc_from_pool_async(
        self,
        size: usize,
        pool: sys::hipMemPool_t,
        stream: sys::hipStream_t,
    ) -> Result<sys::hipDeviceptr_t> {
        let f = self.optional(self.api.hipMallocFromPoolAsync, "hipMallocFromPoolAsync")?;
        let mut p: *mut c_void = ptr::null_mut();
        // SAFETY: the out-pointer is valid; the pool and stream are guaranteed by the caller.
        let e = unsafe { f(&mut p, size, pool, stream) };
        self.check(e, || format!("hipMallocFromPoolAsync({size} bytes)"))
            .map(|()| p)
    }

    /// `hipMemPoolSetAttribute(pool, hipMemPoolAttrReleaseThreshold, &bytes)`: how many bytes
    /// of freed memory `pool` keeps instead of releasing them at a synchronisation.
    ///
    /// # Safety
    /// `pool` is a live pool of this runtime.
    pub unsafe fn mem_pool_set_release_threshold(
        self,
        pool: sys::hipMemPool_t,
        bytes: u64,
    ) -> Result<()> {
        let f = self.optional(self.api.hipMemPoolSetAttribute, "hipMemPoolSetAttribute")?;
        let mut value: u64 = bytes;
        // SAFETY: the pool is guaranteed by the caller; this attribute's value is a uint64_t,
        // which `value` is, read during the call.
        let e = unsafe {
            f(
                pool,
                sys::hipMemPoolAttrReleaseThreshold,
                (&mut value as *mut u64).cast(),
            )
        };
        self.check(e, || {
            format!("hipMemPoolSetAttribute(hipMemPoolAttrReleaseThreshold, {bytes})")
        })
    }

    /// `hipMemPoolTrimTo`: releases the pool's freed memory until it holds at most
    /// `min_bytes_to_hold` (memory still allocated, or freed by work not yet known complete,
    /// stays).
    ///
    /// # Safety
    /// `pool` is a live pool of this runtime.
    pub unsafe fn mem_pool_trim_to(
        self,
        pool: sys::hipMemPool_t,
        min_bytes_to_hold: usize,
    ) -> Result<()> {
        let f = self.optional(self.api.hipMemPoolTrimTo, "hipMemPoolTrimTo")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(pool, min_bytes_to_hold) };
        self.check(e, || format!("hipMemPoolTrimTo({min_bytes_to_hold})"))
    }

    /// `hipMemcpyAsync` of `size` bytes (`sys::hipMemcpy*` kinds).
    ///
    /// # Safety
    /// `dst` and `src` are valid for `size` bytes of the kind given until the copy completes
    /// on `stream` (null or live).
    pub unsafe fn memcpy_async(
        self,
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: sys::hipMemcpyKind,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipMemcpyAsync)(dst, src, size, kind, stream) };
        self.check(e, || format!("hipMemcpyAsync({size} bytes, kind {kind})"))
    }

    /// `hipMemsetD8Async`: `count` bytes.
    ///
    /// # Safety
    /// `dst` is device memory valid for `count` bytes until the fill completes on `stream`.
    pub unsafe fn memset_d8_async(
        self,
        dst: sys::hipDeviceptr_t,
        value: u8,
        count: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipMemsetD8Async)(dst, value, count, stream) };
        self.check(e, || format!("hipMemsetD8Async({count} x u8 {value:#x})"))
    }

    /// `hipMemsetD16Async`: `count` 16-bit elements.
    ///
    /// # Safety
    /// `dst` is 2-aligned device memory valid for `count` elements until the fill completes.
    pub unsafe fn memset_d16_async(
        self,
        dst: sys::hipDeviceptr_t,
        value: u16,
        count: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipMemsetD16Async)(dst, value, count, stream) };
        self.check(e, || format!("hipMemsetD16Async({count} x u16 {value:#x})"))
    }

    /// `hipMemsetD32Async`: `count` 32-bit elements (the bits of `value`).
    ///
    /// # Safety
    /// `dst` is 4-aligned device memory valid for `count` elements until the fill completes.
    pub unsafe fn memset_d32_async(
        self,
        dst: sys::hipDeviceptr_t,
        value: u32,
        count: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller; HIP takes the pattern as a signed int, the same
        // bits.
        let e = unsafe {
            (self.api.hipMemsetD32Async)(
                dst,
                c_int::from_ne_bytes(value.to_ne_bytes()),
                count,
                stream,
            )
        };
        self.check(e, || format!("hipMemsetD32Async({count} x u32 {value:#x})"))
    }
}
