//! Copies and fills on a stream, and the checks of the memory they reach.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use CUresult::CUDA_ERROR_INVALID_VALUE;

use crate::model::contract::{violation, Ret};
use crate::model::memory::memory;
use crate::model::ops::{Op, Source};
use crate::model::stream::Stream;

/// Checks that device `device` may reach `len` bytes at `ptr` now: `CUDA_ERROR_INVALID_VALUE`
/// otherwise (CUDA checks pointers when the call is made). Memory of another device whose
/// access `device` was not given is also a violation (see [`crate::model::peer`]).
pub(crate) fn reachable(ptr: u64, len: usize, device: u32, call: &str) -> Ret {
    let memory = memory();
    memory
        .check(ptr, len)
        .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    if let Err(why) = memory.check_on(ptr, len, device) {
        drop(memory);
        violation(format!("{call}: {why}"));
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Whether `len` bytes at `ptr` lie within one allocation of the fake's (not pageable host
/// memory).
pub(crate) fn allocated(ptr: u64, len: usize) -> bool {
    memory().kind_of(ptr, len).is_some()
}

/// The `len` bytes of pageable host memory at `src`, taken now.
///
/// # Safety
/// `src` must be valid for reads of `len` bytes.
pub(crate) unsafe fn host_bytes(src: *const c_void, len: usize) -> Source {
    // SAFETY: the caller's contract.
    Source::Bytes(Arc::new(unsafe {
        std::slice::from_raw_parts(src.cast::<u8>(), len).to_vec()
    }))
}

/// Enqueues a copy of `len` bytes from `src` to `dst` on `stream` (`dst_checked`: `dst` is
/// device-reachable memory, checked when the device gets there): the position it completes
/// at (`None` when captured).
pub(crate) fn enqueue_copy(
    stream: &Stream,
    dst: u64,
    dst_checked: bool,
    src: Source,
    len: usize,
    call: &'static str,
) -> Option<u64> {
    stream.enqueue(Op::Copy {
        dst,
        dst_checked,
        src,
        len,
        call,
    })
}

/// Enqueues a memset of `count` elements of `width` bytes at `dst` on `stream` (checked now,
/// and again when the device gets to it): the address must be `width`-aligned.
/// A stream memory write of `value` at `dst` (4-aligned, device-reachable), checked now and
/// again when the stream gets to it.
pub(crate) fn write_value_async(dst: u64, value: u32, stream: &Stream, call: &'static str) -> Ret {
    if !dst.is_multiple_of(4) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    reachable(dst, 4, stream.device, call)?;
    stream.enqueue(Op::WriteValue { dst, value, call });
    Ok(())
}

pub(crate) fn memset_async(
    dst: u64,
    value: u32,
    width: usize,
    count: usize,
    stream: &Stream,
    call: &str,
) -> Ret {
    if !dst.is_multiple_of(width as u64) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let len = count.checked_mul(width).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    reachable(dst, len, stream.device, call)?;
    stream.enqueue(Op::Memset {
        dst,
        value,
        width,
        count,
    });
    Ok(())
}

/// Enqueues a peer copy of `len` bytes from `src` (memory device `src_device` reaches) into
/// `dst` (memory device `dst_device` reaches) on `stream`, each range checked now against its
/// own device and again when the stream gets there.
pub(crate) fn peer_copy_async(
    stream: &Stream,
    (dst, dst_device): (u64, u32),
    (src, src_device): (u64, u32),
    len: usize,
    call: &'static str,
) -> Ret {
    reachable(dst, len, dst_device, call)?;
    reachable(src, len, src_device, call)?;
    if len == 0 {
        return Ok(());
    }
    crate::model::peer::count_unenabled(dst_device, src_device);
    stream.enqueue(Op::PeerCopy {
        dst,
        dst_device,
        src,
        src_device,
        len,
        call,
    });
    Ok(())
}
