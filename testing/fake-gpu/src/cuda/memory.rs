//! CUDA's memory: allocations, memory pools, stream-ordered allocations, copies and fills.

use std::ffi::{c_uchar, c_uint, c_ushort, c_void};

use cudarc::driver::sys::{CUdeviceptr, CUpointer_attribute, CUresult, CU_MEMHOSTALLOC_DEVICEMAP};
use CUresult::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED};

use super::{call, cuda_stream, sync_context};
use crate::ffi::{as_ptr, handle, put, put_new};
use crate::model::alloc::{
    check_pool_stream, create_pool, destroy_pool, free, free_async, managed_flags,
    mapped_device_pointer, pool, set_pool_attribute,
};
use crate::model::contract::{current_device, sticky, Needs, Ret};
use crate::model::copy::{enqueue_copy, host_bytes, memset_async, reachable, write_value_async};
use crate::model::memory::{memory, Kind};
use crate::model::ops::Source;
use crate::model::stream::Stream;

/// Allocates `bytes` of `kind` on device `dev` into `out`.
fn allocate(out: *mut CUdeviceptr, bytes: usize, kind: Kind, dev: u32) -> Ret {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ptr = memory().allocate(bytes, kind, dev)?;
    // SAFETY: non-null; CUDA's contract: valid for one CUdeviceptr.
    unsafe { put(out, ptr) }
}

/// Allocates `bytes` of pinned host memory (`mapped`: the device may reach it) into `out`.
fn allocate_host(out: *mut *mut c_void, bytes: usize, mapped: bool) -> Ret {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ptr = memory().allocate(bytes, Kind::Pinned { mapped }, current_device())?;
    // SAFETY: non-null; CUDA's contract: valid for one pointer.
    unsafe { put(out, as_ptr(ptr)) }
}

/// `cuMemAlloc`: device memory (zeroed host memory, 256-aligned).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(out: *mut CUdeviceptr, bytes: usize) -> CUresult {
    call("cuMemAlloc", Needs::Context, || {
        allocate(out, bytes, Kind::Device, current_device())
    })
}

/// `cuMemAllocManaged`: managed memory; flags `CU_MEM_ATTACH_GLOBAL` or `_HOST`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    out: *mut CUdeviceptr,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    call("cuMemAllocManaged", Needs::Context, || {
        managed_flags(flags)?;
        allocate(out, bytes, Kind::Managed, current_device())
    })
}

/// `cuMemAllocHost`: pinned host memory the device can reach.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(out: *mut *mut c_void, bytes: usize) -> CUresult {
    call("cuMemAllocHost", Needs::Context, || {
        allocate_host(out, bytes, true)
    })
}

/// `cuMemHostAlloc`: pinned host memory, mapped with `CU_MEMHOSTALLOC_DEVICEMAP`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    out: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    call("cuMemHostAlloc", Needs::Context, || {
        allocate_host(out, bytes, flags & CU_MEMHOSTALLOC_DEVICEMAP != 0)
    })
}

/// `cuMemHostGetDevicePointer`: a mapped pinned address is its own device address (unless
/// the test made them differ: see [`crate::model::alloc::mapped_device_pointer`]); flags
/// must be 0.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    out: *mut CUdeviceptr,
    host: *mut c_void,
    flags: c_uint,
) -> CUresult {
    call("cuMemHostGetDevicePointer", Needs::Context, || {
        let address = mapped_device_pointer(handle(host), flags)?;
        // SAFETY: CUDA's contract: `out` is valid for one CUdeviceptr.
        unsafe { put(out, address) }
    })
}

/// `cuMemFree`: device, managed or stream-ordered memory, by its base. Freeing memory that
/// queued work still uses is a violation, reported when the device gets to that work.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(ptr: CUdeviceptr) -> CUresult {
    call("cuMemFree", Needs::ContextEvenFaulted, || {
        sync_context();
        free(ptr, false, "cuMemFree")
    })
}

/// `cuMemFreeHost`: pinned memory, by its base.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(ptr: *mut c_void) -> CUresult {
    call("cuMemFreeHost", Needs::ContextEvenFaulted, || {
        sync_context();
        free(handle(ptr), true, "cuMemFreeHost")
    })
}

/// `cuPointerGetAttribute`: `CU_POINTER_ATTRIBUTE_IS_MANAGED` only (an `unsigned int`).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_uint,
    ptr: CUdeviceptr,
) -> CUresult {
    call("cuPointerGetAttribute", Needs::Context, || {
        if attribute != CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED as u32 {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let kind = memory().kind_of(ptr, 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: CUDA's contract: `data` is valid for the attribute's type.
        unsafe { put(data.cast::<c_uint>(), c_uint::from(kind == Kind::Managed)) }
    })
}

// ------------------------------------------------------------------ memory pools

/// `cuMemPoolCreate`: a pool of pinned memory on the device its properties' location names
/// (allocations from it are ordinary stream-ordered ones).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(out: *mut *mut c_void, props: *const c_void) -> CUresult {
    call("cuMemPoolCreate", Needs::Context, || {
        // SAFETY: CUDA's contract: `out` is valid for one CUmemoryPool, `props` points at a
        // CUmemPoolProps.
        unsafe { put_new(out, || create_pool(props)) }
    })
}

/// `cuMemPoolDestroy`: allocations still outstanding stay valid (as in CUDA).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(p: *mut c_void) -> CUresult {
    call("cuMemPoolDestroy", Needs::ContextEvenFaulted, || {
        destroy_pool(handle(p), "cuMemPoolDestroy")
    })
}

/// `cuMemPoolSetAttribute`: accepted for a live pool (the fake keeps nothing).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    p: *mut c_void,
    _attribute: c_uint,
    value: *mut c_void,
) -> CUresult {
    call("cuMemPoolSetAttribute", Needs::Context, || {
        set_pool_attribute(handle(p), value, "cuMemPoolSetAttribute")
    })
}

/// `cuMemPoolTrimTo`: nothing to trim (freed memory goes back at once).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(p: *mut c_void, _keep: usize) -> CUresult {
    call("cuMemPoolTrimTo", Needs::Context, || {
        pool(handle(p), "cuMemPoolTrimTo").map(drop)
    })
}

/// Refuses a stream-ordered allocation or free during a capture: memory nodes in graphs are
/// not modelled (the capture is invalidated).
fn no_memory_nodes(stream: &Stream) -> Ret {
    if stream.capture_status().is_some() {
        stream.invalidate_capture(CUDA_ERROR_NOT_SUPPORTED);
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
}

/// A stream-ordered allocation on stream `s`, from pool `from` (0: the stream's device's
/// default pool) of device `pool_device` (`None`: the stream's).
fn allocate_async(
    out: *mut CUdeviceptr,
    bytes: usize,
    from: (u64, Option<u32>),
    s: *mut c_void,
    call: &str,
) -> Ret {
    let stream = cuda_stream(s, call)?;
    if let (_, Some(pool_device)) = from {
        check_pool_stream(pool_device, &stream, call)?;
    }
    no_memory_nodes(&stream)?;
    allocate(out, bytes, Kind::Pool(from.0), stream.device)
}

/// `cuMemAllocAsync`: from the device's default pool, usable at once.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    out: *mut CUdeviceptr,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    call("cuMemAllocAsync", Needs::Context, || {
        allocate_async(out, bytes, (0, None), s, "cuMemAllocAsync")
    })
}

/// `cuMemAllocFromPoolAsync`: from `pool`, usable at once.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    out: *mut CUdeviceptr,
    bytes: usize,
    p: *mut c_void,
    s: *mut c_void,
) -> CUresult {
    const CALL: &str = "cuMemAllocFromPoolAsync";
    call(CALL, Needs::Context, || {
        let from = (handle(p), Some(pool(handle(p), CALL)?));
        allocate_async(out, bytes, from, s, CALL)
    })
}

/// `cuMemFreeAsync`: frees a stream-ordered allocation when the stream gets there.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(ptr: CUdeviceptr, s: *mut c_void) -> CUresult {
    call("cuMemFreeAsync", Needs::Context, || {
        let stream = cuda_stream(s, "cuMemFreeAsync")?;
        no_memory_nodes(&stream)?;
        free_async(ptr, &stream, "cuMemFreeAsync")
    })
}

// ------------------------------------------------------------------ copies and fills

/// `cuMemcpyDtoH` (synchronous: nothing of halcyon's streams is ordered with it).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    call("cuMemcpyDtoH", Needs::Context, || {
        let mut memory = memory();
        memory
            .check(src, bytes)
            .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: the source lies in a live allocation (checked under this lock); CUDA's
        // contract: `dst` is valid for `bytes`.
        unsafe { memory.copy(handle(dst), src, bytes) };
        Ok(())
    })
}

/// `cuMemcpyHtoD` (synchronous: nothing of halcyon's streams is ordered with it).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CUresult {
    call("cuMemcpyHtoD", Needs::Context, || {
        let mut memory = memory();
        memory
            .check(dst, bytes)
            .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: the destination lies in a live allocation (checked under this lock); CUDA's
        // contract: `src` is valid for `bytes`.
        unsafe { memory.copy(dst, handle(src.cast_mut()), bytes) };
        Ok(())
    })
}

/// `cuMemsetD8` (synchronous).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, value: c_uchar, count: usize) -> CUresult {
    call("cuMemsetD8", Needs::Context, || {
        let mut memory = memory();
        memory
            .check(dst, count)
            .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        memory.fill(dst, u32::from(value), 1, count);
        Ok(())
    })
}

/// A host side of an asynchronous copy during a capture must be pinned (a graph's memcpy node
/// reads it at every launch): otherwise the capture is invalidated.
fn pageable_in_capture(stream: &Stream) -> Ret {
    if stream.capture_status().is_some() {
        stream.invalidate_capture(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        return Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    Ok(())
}

/// `cuMemcpyHtoDAsync`: from pinned memory, read when the stream gets there; from pageable
/// memory, taken now (the call returns once the source may be reused).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    const CALL: &str = "cuMemcpyHtoDAsync";
    call(CALL, Needs::Context, || {
        let stream = cuda_stream(s, CALL)?;
        reachable(dst, bytes, stream.device, CALL)?;
        let from = handle(src.cast_mut());
        let source = if memory().is_pinned(from, bytes) {
            Source::Checked(from)
        } else {
            pageable_in_capture(&stream)?;
            // SAFETY: CUDA's contract: `src` is valid for `bytes` now.
            unsafe { host_bytes(src, bytes) }
        };
        enqueue_copy(&stream, dst, true, source, bytes, CALL);
        Ok(())
    })
}

/// `cuMemcpyDtoHAsync`: into pinned memory, when the stream gets there; into pageable memory,
/// the call waits until the copy is done.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    const CALL: &str = "cuMemcpyDtoHAsync";
    call(CALL, Needs::Context, || {
        let stream = cuda_stream(s, CALL)?;
        reachable(src, bytes, stream.device, CALL)?;
        let to = handle(dst);
        let pinned = memory().is_pinned(to, bytes);
        if !pinned {
            pageable_in_capture(&stream)?;
        }
        let position = enqueue_copy(&stream, to, pinned, Source::Checked(src), bytes, CALL);
        if let (false, Some(position)) = (pinned, position) {
            // Into pageable memory: done (or dropped, after a fault) before the call returns.
            stream.wait_for(position);
            if let Some(code) = sticky(stream.device) {
                return Err(code);
            }
        }
        Ok(())
    })
}

/// `cuMemcpyDtoDAsync`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    const CALL: &str = "cuMemcpyDtoDAsync";
    call(CALL, Needs::Context, || {
        let stream = cuda_stream(s, CALL)?;
        reachable(dst, bytes, stream.device, CALL)?;
        reachable(src, bytes, stream.device, CALL)?;
        enqueue_copy(&stream, dst, true, Source::Checked(src), bytes, CALL);
        Ok(())
    })
}

/// `cuMemcpyAsync` (unified addressing) between two allocations of the fake's: each must be
/// memory the stream's device reaches (its own, a peer's it enabled access to, or managed or
/// pinned memory); pageable host memory is not modelled here (`CUDA_ERROR_INVALID_VALUE`).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    const CALL: &str = "cuMemcpyAsync";
    call(CALL, Needs::Context, || {
        let stream = cuda_stream(s, CALL)?;
        reachable(dst, bytes, stream.device, CALL)?;
        reachable(src, bytes, stream.device, CALL)?;
        enqueue_copy(&stream, dst, true, Source::Checked(src), bytes, CALL);
        Ok(())
    })
}

/// A `cuMemsetD*Async` call: `count` elements of `width` bytes set to `value`.
fn memset(
    dst: CUdeviceptr,
    value: u32,
    width: usize,
    count: usize,
    s: *mut c_void,
    call_name: &'static str,
) -> CUresult {
    call(call_name, Needs::Context, || {
        let stream = cuda_stream(s, call_name)?;
        memset_async(dst, value, width, count, &stream, call_name)
    })
}

/// `cuMemsetD8Async`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    value: c_uchar,
    count: usize,
    s: *mut c_void,
) -> CUresult {
    memset(dst, u32::from(value), 1, count, s, "cuMemsetD8Async")
}

/// `cuMemsetD16Async` (the address 2-aligned).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async(
    dst: CUdeviceptr,
    value: c_ushort,
    count: usize,
    s: *mut c_void,
) -> CUresult {
    memset(dst, u32::from(value), 2, count, s, "cuMemsetD16Async")
}

/// `cuStreamWriteValue32_v2`: writes `value` at `addr` (4-aligned, reachable by the stream's
/// device) once the stream's earlier work completed. Only the default flags (0) are taken.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWriteValue32_v2(
    s: *mut c_void,
    addr: CUdeviceptr,
    value: c_uint,
    flags: c_uint,
) -> CUresult {
    call("cuStreamWriteValue32", Needs::Context, || {
        if flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let stream = cuda_stream(s, "cuStreamWriteValue32")?;
        write_value_async(addr, value, &stream, "cuStreamWriteValue32")
    })
}

/// `cuMemsetD32Async` (the address 4-aligned).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    value: c_uint,
    count: usize,
    s: *mut c_void,
) -> CUresult {
    memset(dst, value, 4, count, s, "cuMemsetD32Async")
}
