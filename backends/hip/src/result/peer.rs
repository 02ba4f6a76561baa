//! Peer access: whether one device reaches another's memory, enabling it, and copies between
//! the two (`hipDeviceCanAccessPeer`, `hipDeviceEnablePeerAccess`, `hipMemcpyPeerAsync`). All
//! three are optional in the table: a runtime without them has no peer access.

use std::ffi::{c_int, c_void};

use halcyon::Result;

use super::Hip;
use crate::sys;

impl Hip {
    /// `hipDeviceCanAccessPeer(device, peer)`: whether `device` can reach `peer`'s memory.
    /// `false` where the runtime does not export the call.
    pub fn can_access_peer(self, device: i32, peer: i32) -> Result<bool> {
        let Some(f) = self.api.hipDeviceCanAccessPeer else {
            return Ok(false);
        };
        let mut can: c_int = 0;
        // SAFETY: the out-pointer is valid for one int; any ordinals are accepted (invalid
        // ones return an error).
        let e = unsafe { f(&mut can, device, peer) };
        self.check(e, || format!("hipDeviceCanAccessPeer({device}, {peer})"))
            .map(|()| can == 1)
    }

    /// `hipDeviceEnablePeerAccess(peer, 0)` from the thread's current device; access already
    /// enabled (`hipErrorPeerAccessAlreadyEnabled`) is success.
    pub fn enable_peer_access(self, peer: i32) -> Result<()> {
        let f = self.optional(
            self.api.hipDeviceEnablePeerAccess,
            "hipDeviceEnablePeerAccess",
        )?;
        // SAFETY: any ordinal is accepted (invalid ones return an error); flags must be 0.
        let e = unsafe { f(peer, 0) };
        if e == sys::hipErrorPeerAccessAlreadyEnabled {
            return Ok(());
        }
        self.check(e, || format!("hipDeviceEnablePeerAccess({peer}, 0)"))
    }

    /// `hipMemcpyPeerAsync` of `size` bytes from `src` on device `src_device` to `dst` on
    /// device `dst_device`.
    ///
    /// # Safety
    /// `dst` and `src` are device memory of their devices, valid for `size` bytes until the
    /// copy completes on `stream` (live).
    pub unsafe fn memcpy_peer_async(
        self,
        dst: *mut c_void,
        dst_device: i32,
        src: *const c_void,
        src_device: i32,
        size: usize,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        let f = self.optional(self.api.hipMemcpyPeerAsync, "hipMemcpyPeerAsync")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(dst, dst_device, src, src_device, size, stream) };
        self.check(e, || {
            format!(
                "hipMemcpyPeerAsync({size} bytes from device {src_device} to device \
                 {dst_device})"
            )
        })
    }
}
