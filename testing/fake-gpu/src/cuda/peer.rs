//! CUDA's peer access: `cuDeviceCanAccessPeer`, `cuCtxEnablePeerAccess` and
//! `cuMemcpyPeerAsync` (see [`crate::model::peer`]).

use std::ffi::{c_int, c_uint, c_void};

use cudarc::driver::sys::{CUdevice, CUdeviceptr, CUresult};
use CUresult::{CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_VALUE};

use super::{call, cuda_stream};
use crate::ffi::{handle, put};
use crate::model::contract::{current_device, Needs, Ret};
use crate::model::copy::peer_copy_async;
use crate::model::driver::{context_device, device, driver};
use crate::model::peer;

/// The device whose primary context `context` is, if someone retains it:
/// `CUDA_ERROR_INVALID_CONTEXT` otherwise.
fn live_context(context: *mut c_void) -> Result<u32, CUresult> {
    let device = context_device(handle(context) as usize).ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    match driver().retains[device as usize] {
        0 => Err(CUDA_ERROR_INVALID_CONTEXT),
        _ => Ok(device),
    }
}

/// `cuDeviceCanAccessPeer`: 1 for two distinct devices (unless a test turned peer access
/// off), 0 for a device and itself.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(
    out: *mut c_int,
    dev: CUdevice,
    peer_dev: CUdevice,
) -> CUresult {
    call("cuDeviceCanAccessPeer", Needs::Init, || {
        let (dev, peer_dev) = (device(dev)?, device(peer_dev)?);
        if out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-null; CUDA's contract: valid for one int.
        unsafe { put(out, c_int::from(peer::can_access(dev, peer_dev))) }
    })
}

/// `cuCtxEnablePeerAccess`: the current context's device may reach `peer_context`'s device
/// memory from now on. Flags must be 0; the peer context must be retained;
/// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED` where `cuDeviceCanAccessPeer` says 0 (the context
/// itself included), `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` the second time.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuCtxEnablePeerAccess(
    peer_context: *mut c_void,
    flags: c_uint,
) -> CUresult {
    call("cuCtxEnablePeerAccess", Needs::Context, || -> Ret {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let peer_dev = live_context(peer_context)?;
        peer::enable(current_device(), peer_dev)
    })
}

/// `cuMemcpyPeerAsync`: `bytes` from `src` (memory of `src_context`'s device) to `dst`
/// (memory of `dst_context`'s device) on `s`, a stream of the current context. Both contexts
/// must be retained; each range must be its context's device's memory (or memory that device
/// reaches), else a violation and `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyPeerAsync(
    dst: CUdeviceptr,
    dst_context: *mut c_void,
    src: CUdeviceptr,
    src_context: *mut c_void,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    const CALL: &str = "cuMemcpyPeerAsync";
    call(CALL, Needs::Context, || {
        let stream = cuda_stream(s, CALL)?;
        let (dst_dev, src_dev) = (live_context(dst_context)?, live_context(src_context)?);
        peer_copy_async(&stream, (dst, dst_dev), (src, src_dev), bytes, CALL)
    })
}
