//! Peer access between two devices, and peer copies: halcyon-stream's `can_access_peer`,
//! `enable_peer_access` and `copy_peer_async` (see `halcyon_stream`'s `device/peer.rs` for
//! when the stream layer makes them).
//!
//! | [`StreamApi`](super::StreamApi) | HIP call |
//! |---|---|
//! | `can_access_peer`    | `hipDeviceCanAccessPeer(self, peer)` (`false` where the runtime lacks it); `true` without a call for another `HipStreamApi` over the same device, whose memory it addresses already |
//! | `enable_peer_access` | `hipDeviceEnablePeerAccess(peer, 0)` with this device current; `hipErrorPeerAccessAlreadyEnabled` is success; nothing for the same device |
//! | `copy_peer_async`    | `hipMemcpyPeerAsync(dst, this device, src, peer device, len, stream)`, each range checked within a live allocation of its own API first |

use std::ffi::c_void;

use halcyon::Result;
use halcyon_stream::arguments::host_len;
use halcyon_stream::{DevicePtr, StreamHandle};

use super::HipStreamApi;

impl HipStreamApi {
    /// [`StreamApi::can_access_peer`](super::StreamApi::can_access_peer).
    pub(super) fn can_access_peer(&self, peer: &HipStreamApi) -> Result<bool> {
        if peer.device == self.device {
            return Ok(true);
        }
        self.hip.can_access_peer(self.device, peer.device)
    }

    /// [`StreamApi::enable_peer_access`](super::StreamApi::enable_peer_access).
    pub(super) fn enable_peer_access(&self, peer: &HipStreamApi) -> Result<()> {
        if peer.device == self.device {
            return Ok(());
        }
        let _bound = self.bind()?;
        self.hip.enable_peer_access(peer.device)
    }

    /// [`StreamApi::copy_peer_async`](super::StreamApi::copy_peer_async).
    pub(super) fn copy_peer_async(
        &self,
        dst: DevicePtr,
        peer: &HipStreamApi,
        src: DevicePtr,
        len: u64,
        stream: StreamHandle,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bytes = host_len(len, "a peer copy")?;
        // Both held live until the copy is enqueued (a free meanwhile waits), each in the
        // table of the API that allocated it.
        let _dst = self.memory.check(dst, len, "peer copy destination")?;
        let _src = peer.memory.check(src, len, "peer copy source")?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        // SAFETY: each range lies in a live allocation of its device (checked above), so the
        // copy touches no other memory; the stream is live and held.
        unsafe {
            self.hip.memcpy_peer_async(
                dst.0 as usize as *mut c_void,
                self.device,
                src.0 as usize as *const c_void,
                peer.device,
                bytes,
                stream.raw,
            )
        }
    }
}
