//! HIP's peer access: `hipDeviceCanAccessPeer`, `hipDeviceEnablePeerAccess` and
//! `hipMemcpyPeerAsync` (see [`crate::model::peer`]).

use std::ffi::{c_int, c_uint, c_void};

use super::{call, hipError_t, INVALID_VALUE};
use crate::ffi::{handle, put};
use crate::model::contract::{current_device, HipNeeds, Ret};
use crate::model::copy::peer_copy_async;
use crate::model::driver::device;
use crate::model::peer;
use crate::model::stream::find_stream;

/// `hipDeviceCanAccessPeer`: 1 for two distinct devices (unless a test turned peer access
/// off), 0 for a device and itself.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceCanAccessPeer(
    out: *mut c_int,
    dev: c_int,
    peer_dev: c_int,
) -> hipError_t {
    call("hipDeviceCanAccessPeer", HipNeeds::Nothing, || {
        let (dev, peer_dev) = (device(dev)?, device(peer_dev)?);
        if out.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: non-null; HIP's contract: valid for one int.
        unsafe { put(out, c_int::from(peer::can_access(dev, peer_dev))) }
    })
}

/// `hipDeviceEnablePeerAccess`: the thread's current device may reach `peer_dev`'s memory
/// from now on (the thread must have chosen its device). Flags must be 0;
/// `hipErrorPeerAccessUnsupported` where `hipDeviceCanAccessPeer` says 0,
/// `hipErrorPeerAccessAlreadyEnabled` the second time.
#[no_mangle]
pub extern "C" fn hipDeviceEnablePeerAccess(peer_dev: c_int, flags: c_uint) -> hipError_t {
    call("hipDeviceEnablePeerAccess", HipNeeds::Device, || -> Ret {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        peer::enable(current_device(), device(peer_dev)?)
    })
}

/// `hipMemcpyPeerAsync`: `bytes` from `src` (memory of device `src_dev`) to `dst` (memory of
/// device `dst_dev`) on `s`; each range must be its device's memory (or memory that device
/// reaches), else a violation and `hipErrorInvalidValue`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyPeerAsync(
    dst: *mut c_void,
    dst_dev: c_int,
    src: *const c_void,
    src_dev: c_int,
    bytes: usize,
    s: *mut c_void,
) -> hipError_t {
    const CALL: &str = "hipMemcpyPeerAsync";
    call(CALL, HipNeeds::Nothing, || {
        let stream = find_stream(handle(s), CALL)?;
        let (dst_dev, src_dev) = (device(dst_dev)?, device(src_dev)?);
        let (to, from) = (handle(dst), handle(src.cast_mut()));
        peer_copy_async(&stream, (to, dst_dev), (from, src_dev), bytes, CALL)
    })
}
