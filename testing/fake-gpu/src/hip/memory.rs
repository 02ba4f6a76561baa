//! HIP's memory: allocations (frees that synchronise), copies and fills, memory pools and
//! stream-ordered allocations.

use std::ffi::{c_int, c_uint, c_void};

use cudarc::driver::sys::CUresult;

use super::{call, hipError_t, INVALID_VALUE};
use crate::ffi::{as_ptr, handle, put, put_new};
use crate::model::alloc::{
    check_pool_stream, create_pool, destroy_pool, free, free_async, managed_flags,
    mapped_device_pointer, pool, set_pool_attribute,
};
use crate::model::contract::{current_device, violation, HipNeeds, Ret};
use crate::model::copy::{
    allocated, enqueue_copy, host_bytes, memset_async, reachable, write_value_async,
};
use crate::model::memory::{memory, Kind};
use crate::model::ops::Source;
use crate::model::stream::{find_stream, synchronize_all};

/// `hipMemcpyKind`.
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const DEVICE_TO_DEVICE: c_int = 3;
const DEFAULT: c_int = 4;

/// `hipHostMallocMapped`.
const HOST_MALLOC_MAPPED: c_uint = 0x2;

/// Allocates `bytes` of `kind` on device `dev` into `out`: zero bytes are a null pointer and
/// success, as in HIP.
fn allocate(out: *mut *mut c_void, bytes: usize, kind: Kind, dev: u32) -> Ret {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    if bytes == 0 {
        // SAFETY: non-null; HIP's contract: valid for one pointer.
        return unsafe { put(out, std::ptr::null_mut()) };
    }
    let ptr = memory().allocate(bytes, kind, dev)?;
    // SAFETY: non-null; HIP's contract: valid for one pointer.
    unsafe { put(out, as_ptr(ptr)) }
}

/// `hipMalloc`: device memory (zeroed host memory, 256-aligned).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMalloc(out: *mut *mut c_void, bytes: usize) -> hipError_t {
    call("hipMalloc", HipNeeds::Device, || {
        allocate(out, bytes, Kind::Device, current_device())
    })
}

/// `hipMallocManaged`: managed memory; flags `hipMemAttachGlobal` or `hipMemAttachHost`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMallocManaged(
    out: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> hipError_t {
    call("hipMallocManaged", HipNeeds::Device, || {
        managed_flags(flags)?;
        allocate(out, bytes, Kind::Managed, current_device())
    })
}

/// `hipHostMalloc`: pinned host memory (mapped at the same address with
/// `hipHostMallocMapped`).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipHostMalloc(
    out: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> hipError_t {
    call("hipHostMalloc", HipNeeds::Device, || {
        let mapped = flags & HOST_MALLOC_MAPPED != 0;
        allocate(out, bytes, Kind::Pinned { mapped }, current_device())
    })
}

/// `hipHostGetDevicePointer`: the same address, for mapped pinned memory (unless the test
/// made them differ: see [`crate::model::alloc::mapped_device_pointer`]); flags must be 0.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipHostGetDevicePointer(
    out: *mut *mut c_void,
    host: *mut c_void,
    flags: c_uint,
) -> hipError_t {
    call("hipHostGetDevicePointer", HipNeeds::Nothing, || {
        let address = mapped_device_pointer(handle(host), flags)?;
        // SAFETY: HIP's contract: valid for one pointer.
        unsafe { put(out, as_ptr(address)) }
    })
}

/// Frees the allocation at `ptr` (pinned host memory: `host`) once every stream's work so far
/// completed (as hipamd does); null is a no-op.
fn free_synchronized(ptr: *mut c_void, host: bool, call: &'static str) -> Ret {
    if ptr.is_null() {
        return Ok(());
    }
    synchronize_all();
    free(handle(ptr), host, call)
}

/// `hipFree`: device, managed or stream-ordered memory, by its base, once every stream's work
/// so far completed (as hipamd does). Null is a no-op.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipFree(ptr: *mut c_void) -> hipError_t {
    call("hipFree", HipNeeds::Nothing, || {
        free_synchronized(ptr, false, "hipFree")
    })
}

/// `hipHostFree`: pinned memory, by its base, once every stream's work so far completed (as
/// hipamd does). Null is a no-op.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipHostFree(ptr: *mut c_void) -> hipError_t {
    call("hipHostFree", HipNeeds::Nothing, || {
        free_synchronized(ptr, true, "hipHostFree")
    })
}

/// `hipMemcpyAsync`: host to device, device to host, device to device, or inferred
/// (`hipMemcpyDefault`). A host side outside the fake's allocations (pageable memory) is a
/// violation: hipamd waits for the stream on the host there. The copy is then done before the
/// call returns, as hipamd does.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: c_int,
    s: *mut c_void,
) -> hipError_t {
    const CALL: &str = "hipMemcpyAsync";
    call(CALL, HipNeeds::Nothing, || {
        let stream = find_stream(handle(s), CALL)?;
        let (to, from) = (handle(dst), handle(src.cast_mut()));
        let (dst_ok, src_ok) = (allocated(to, bytes), allocated(from, bytes));
        let pageable = match kind {
            HOST_TO_DEVICE => {
                reachable(to, bytes, stream.device, CALL)?;
                !src_ok
            }
            DEVICE_TO_HOST => {
                reachable(from, bytes, stream.device, CALL)?;
                !dst_ok
            }
            DEVICE_TO_DEVICE => {
                reachable(to, bytes, stream.device, CALL)?;
                reachable(from, bytes, stream.device, CALL)?;
                false
            }
            DEFAULT => {
                for (ptr, ok) in [(to, dst_ok), (from, src_ok)] {
                    if ok {
                        reachable(ptr, bytes, stream.device, CALL)?;
                    }
                }
                !(src_ok && dst_ok)
            }
            _ => return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED),
        };
        if bytes == 0 {
            return Ok(());
        }
        if !pageable {
            enqueue_copy(&stream, to, true, Source::Checked(from), bytes, CALL);
            return Ok(());
        }
        violation(format!(
            "hipMemcpyAsync({to:#x} <- {from:#x}, {bytes} bytes, kind {kind}) on stream \
             {:#x} with a host side in pageable memory: hipamd waits on the host for the \
             stream there (copy through pinned memory instead)",
            handle(s)
        ));
        let source = if src_ok {
            Source::Checked(from)
        } else {
            // SAFETY: HIP's contract: `src` is valid for `bytes` now.
            unsafe { host_bytes(src, bytes) }
        };
        if let Some(position) = enqueue_copy(&stream, to, dst_ok, source, bytes, CALL) {
            stream.wait_for(position);
        }
        Ok(())
    })
}

/// A `hipMemsetD*Async` call: `count` elements of `width` bytes set to `value`.
fn memset(
    dst: *mut c_void,
    value: u32,
    width: usize,
    count: usize,
    s: *mut c_void,
    name: &'static str,
) -> hipError_t {
    call(name, HipNeeds::Nothing, || {
        let stream = find_stream(handle(s), name)?;
        memset_async(handle(dst), value, width, count, &stream, name)
    })
}

/// `hipMemsetD8Async`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemsetD8Async(
    dst: *mut c_void,
    value: u8,
    count: usize,
    s: *mut c_void,
) -> hipError_t {
    memset(dst, u32::from(value), 1, count, s, "hipMemsetD8Async")
}

/// `hipMemsetD16Async` (the address 2-aligned).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemsetD16Async(
    dst: *mut c_void,
    value: u16,
    count: usize,
    s: *mut c_void,
) -> hipError_t {
    memset(dst, u32::from(value), 2, count, s, "hipMemsetD16Async")
}

/// `hipStreamWriteValue32`: writes `value` at `ptr` (4-aligned, reachable by the stream's
/// device) once the stream's earlier work completed. Only the default flags (0) are taken.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamWriteValue32(
    s: *mut c_void,
    ptr: *mut c_void,
    value: u32,
    flags: c_uint,
) -> hipError_t {
    call("hipStreamWriteValue32", HipNeeds::Nothing, || {
        if flags != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let stream = find_stream(handle(s), "hipStreamWriteValue32")?;
        write_value_async(handle(ptr), value, &stream, "hipStreamWriteValue32")
    })
}

/// `hipMemsetD32Async` (the address 4-aligned).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemsetD32Async(
    dst: *mut c_void,
    value: c_int,
    count: usize,
    s: *mut c_void,
) -> hipError_t {
    memset(dst, value as u32, 4, count, s, "hipMemsetD32Async")
}

// ------------------------------------------------------------------ memory pools

/// `hipMemPoolCreate`: pinned device memory on the device its properties' location names
/// (`hipMemAllocationTypePinned`, `hipMemLocationTypeDevice`); allocations from it are
/// ordinary stream-ordered ones.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolCreate(
    out: *mut *mut c_void,
    props: *const c_int,
) -> hipError_t {
    call("hipMemPoolCreate", HipNeeds::Nothing, || {
        // SAFETY: HIP's contract: `out` is valid for one hipMemPool_t, `props` points at a
        // hipMemPoolProps.
        unsafe { put_new(out, || create_pool(props.cast())) }
    })
}

/// `hipMemPoolDestroy`: allocations still outstanding stay valid.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolDestroy(p: *mut c_void) -> hipError_t {
    call("hipMemPoolDestroy", HipNeeds::Nothing, || {
        destroy_pool(handle(p), "hipMemPoolDestroy")
    })
}

/// `hipMemPoolSetAttribute`: accepted for a live pool (the fake keeps nothing).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolSetAttribute(
    p: *mut c_void,
    _attribute: c_int,
    value: *mut c_void,
) -> hipError_t {
    call("hipMemPoolSetAttribute", HipNeeds::Nothing, || {
        set_pool_attribute(handle(p), value, "hipMemPoolSetAttribute")
    })
}

/// `hipMemPoolTrimTo`: nothing to trim (freed memory goes back at once).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolTrimTo(p: *mut c_void, _keep: usize) -> hipError_t {
    call("hipMemPoolTrimTo", HipNeeds::Nothing, || {
        pool(handle(p), "hipMemPoolTrimTo").map(drop)
    })
}

/// `hipMallocAsync`: from the stream's device's default pool, usable at once.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMallocAsync(
    out: *mut *mut c_void,
    bytes: usize,
    s: *mut c_void,
) -> hipError_t {
    call("hipMallocAsync", HipNeeds::Nothing, || {
        let stream = find_stream(handle(s), "hipMallocAsync")?;
        allocate(out, bytes, Kind::Pool(0), stream.device)
    })
}

/// `hipMallocFromPoolAsync`: from `pool` (of the stream's device), usable at once.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMallocFromPoolAsync(
    out: *mut *mut c_void,
    bytes: usize,
    p: *mut c_void,
    s: *mut c_void,
) -> hipError_t {
    const CALL: &str = "hipMallocFromPoolAsync";
    call(CALL, HipNeeds::Nothing, || {
        let pool_device = pool(handle(p), CALL)?;
        let stream = find_stream(handle(s), CALL)?;
        check_pool_stream(pool_device, &stream, CALL)?;
        allocate(out, bytes, Kind::Pool(handle(p)), stream.device)
    })
}

/// `hipFreeAsync`: frees a stream-ordered allocation when the stream gets there.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipFreeAsync(ptr: *mut c_void, s: *mut c_void) -> hipError_t {
    call("hipFreeAsync", HipNeeds::Nothing, || {
        if s.is_null() {
            // HIP allows the null stream here, and the HIP backend frees pool memory outside
            // stream order that way once no work can use it. halcyon enqueues nothing else on
            // the null stream, so the free happens at once.
            return memory()
                .free(handle(ptr), |k| matches!(k, Kind::Pool(_)), "hipFreeAsync")
                .map(drop)
                .map_err(|_| INVALID_VALUE);
        }
        let stream = find_stream(handle(s), "hipFreeAsync")?;
        free_async(handle(ptr), &stream, "hipFreeAsync")
    })
}
