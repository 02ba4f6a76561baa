//! Allocating and freeing: device, managed and pinned memory, memory pools and stream-ordered
//! allocations, and the device address of mapped pinned memory.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::sys::CUresult;
use CUresult::{CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE};

use crate::model::contract::{check_same_device, violation, Ret};
use crate::model::driver::{device, driver, next_handle};
use crate::model::memory::{memory, Kind};
use crate::model::ops::Op;
use crate::model::stream::Stream;

/// Checks managed memory's attach flags: global (1) or host (2).
pub(crate) fn managed_flags(flags: c_uint) -> Ret {
    if flags != 1 && flags != 2 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Frees the allocation based at `ptr`: pinned host memory (`host`) or any other kind.
pub(crate) fn free(ptr: u64, host: bool, call: &'static str) -> Ret {
    memory()
        .free(ptr, |k| matches!(k, Kind::Pinned { .. }) == host, call)
        .map(drop)
}

/// Set by [`set_offset_mapped`].
static OFFSET_MAPPED: AtomicBool = AtomicBool::new(false);

/// How far a mapped pinned allocation's device address lies from its host address while
/// [`OFFSET_MAPPED`] is set: past the 47-bit user address space, so never a live address.
const MAPPED_OFFSET: u64 = 1 << 47;

/// Makes mapped pinned memory's device address differ from its host address (`true`), as on
/// a system without unified addressing, or equal it (`false`, the default).
pub(crate) fn set_offset_mapped(offset: bool) {
    OFFSET_MAPPED.store(offset, Ordering::Relaxed);
}

/// The device address of mapped pinned memory at host address `host`: the host address, as
/// with unified addressing, or one that differs from it (see [`set_offset_mapped`]). Flags
/// must be 0 and `host` within a mapped pinned allocation: `CUDA_ERROR_INVALID_VALUE`.
pub(crate) fn mapped_device_pointer(host: u64, flags: c_uint) -> Result<u64, CUresult> {
    if flags != 0 || memory().kind_of(host, 1) != Some(Kind::Pinned { mapped: true }) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(if OFFSET_MAPPED.load(Ordering::Relaxed) {
        host + MAPPED_OFFSET
    } else {
        host
    })
}

/// Creates a memory pool from its properties (`CUmemPoolProps`, `hipMemPoolProps`: pinned
/// memory on the device their location names): its handle.
///
/// # Safety
/// `props` must be null or point at the properties, whose first four ints are the
/// allocation type, the handle types and the location (type, id).
pub(crate) unsafe fn create_pool(props: *const c_void) -> Result<u64, CUresult> {
    if props.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the caller's contract.
    let [alloc_type, _handles, location_type, location_id] =
        unsafe { std::ptr::read(props.cast::<[c_int; 4]>()) };
    if alloc_type != 1 || location_type != 1 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let dev = device(location_id)?;
    let h = next_handle();
    let mut driver = driver();
    driver.pools.insert(h);
    driver.adopt(h, dev);
    Ok(h)
}

/// Checks that `pool` is a live memory pool: its device; a violation and
/// `CUDA_ERROR_INVALID_HANDLE` otherwise.
pub(crate) fn pool(pool: u64, call: &str) -> Result<u32, CUresult> {
    let driver = driver();
    if driver.pools.contains(&pool) {
        return Ok(driver.owner(pool));
    }
    drop(driver);
    violation(format!("{call}({pool:#x}): not a live pool"));
    Err(CUDA_ERROR_INVALID_HANDLE)
}

/// Sets an attribute of `pool`: accepted for a live pool and a value (the fake keeps
/// nothing).
pub(crate) fn set_pool_attribute(p: u64, value: *mut c_void, call: &str) -> Ret {
    pool(p, call)?;
    if value.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Checks that `stream` may allocate from a pool of device `pool_device`.
pub(crate) fn check_pool_stream(pool_device: u32, stream: &Stream, call: &str) -> Ret {
    check_same_device(call, ("a pool", pool_device), ("a stream", stream.device))
}

/// Destroys pool `pool` (allocations still outstanding stay valid): a violation and
/// `CUDA_ERROR_INVALID_HANDLE` if it is not live. Checked and removed under one lock, so two
/// destroys of one pool cannot both succeed.
pub(crate) fn destroy_pool(pool: u64, call: &str) -> Ret {
    let mut driver = driver();
    if driver.pools.remove(&pool) {
        driver.retire(pool);
        return Ok(());
    }
    drop(driver);
    violation(format!("{call}({pool:#x}): not a live pool"));
    Err(CUDA_ERROR_INVALID_HANDLE)
}

/// Enqueues the free of stream-ordered allocation `ptr` on `stream`, done when the stream
/// gets there: `CUDA_ERROR_INVALID_VALUE` if `ptr` is no such allocation's base.
pub(crate) fn free_async(ptr: u64, stream: &Stream, call: &'static str) -> Ret {
    if !memory().is_base(ptr, |k| matches!(k, Kind::Pool(_))) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    stream.enqueue(Op::FreeAsync { ptr, call });
    Ok(())
}
