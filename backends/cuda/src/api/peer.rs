//! Peer access between two devices' contexts, and peer copies: halcyon-stream's
//! `can_access_peer`, `enable_peer_access` and `copy_peer_async` (see `halcyon_stream`'s
//! `device/peer.rs` for when the stream layer makes them).
//!
//! | [`StreamApi`](halcyon_stream::StreamApi) | CUDA driver call |
//! |---|---|
//! | `can_access_peer`    | `cuDeviceCanAccessPeer(self, peer)`; `true` without a call for another `CudaApi` over the same device (one primary context, whose memory it addresses already) |
//! | `enable_peer_access` | `cuCtxEnablePeerAccess(peer's primary context, 0)` with this context bound; `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` is success; nothing for the same device |
//! | `copy_peer_async`    | `cuMemcpyPeerAsync(dst, this context, src, peer's context, len, stream)`, each range checked within a live allocation of its own API first |

use std::ffi::c_int;

use cudarc::driver::sys::CUresult;
use halcyon::Result;
use halcyon_stream::arguments::host_len;
use halcyon_stream::{DevicePtr, StreamHandle};

use super::CudaApi;
use crate::result::check;
use crate::sys;

impl CudaApi {
    pub(super) fn can_access_peer(&self, peer: &CudaApi) -> Result<bool> {
        if peer.device == self.device {
            return Ok(true);
        }
        let mut can: c_int = 0;
        check(
            // SAFETY: a valid out-pointer; both devices come from cuDeviceGet (devices are
            // never destroyed), and the probe initialised the driver.
            unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.device, peer.device) },
            || {
                format!(
                    "cuDeviceCanAccessPeer(device {}, peer {})",
                    self.ordinal, peer.ordinal
                )
            },
        )?;
        Ok(can == 1)
    }

    pub(super) fn enable_peer_access(&self, peer: &CudaApi) -> Result<()> {
        if peer.device == self.device {
            return Ok(());
        }
        let _bound = self.bind()?;
        // SAFETY: this device's context is current (bound above); `peer.context` is the peer's
        // primary context, retained while `peer` lives; flags must be 0.
        let r = unsafe { sys::cuCtxEnablePeerAccess(peer.context, 0) };
        if r.is(CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
            return Ok(());
        }
        check(r, || {
            format!(
                "cuCtxEnablePeerAccess(primary context of device {}) from device {}",
                peer.ordinal, self.ordinal
            )
        })
    }

    pub(super) fn copy_peer_async(
        &self,
        dst: DevicePtr,
        peer: &CudaApi,
        src: DevicePtr,
        len: u64,
        s: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bytes = host_len(len, "a peer copy")?;
        // Both held live until the copy is enqueued (a free meanwhile waits), each in the
        // table of the API that allocated it.
        let _dst = self.memory.check(dst, len, "peer copy destination")?;
        let _src = peer.memory.check(src, len, "peer copy source")?;
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        check(
            // SAFETY: a live stream of this context, held for the call; each range within a
            // live allocation of its context (checked above), both contexts retained while
            // their `CudaApi`s live, so the copy touches no host memory.
            unsafe {
                sys::cuMemcpyPeerAsync(dst.0, self.context, src.0, peer.context, bytes, live.raw())
            },
            || {
                format!(
                    "cuMemcpyPeerAsync({dst:?} on device {}, {src:?} on device {}, {len} \
                     bytes, {s:?})",
                    self.ordinal, peer.ordinal
                )
            },
        )
    }
}
