//! Host-visible staging a device keeps for copies between devices ([`crate::Queue::copy_from`]).
//!
//! A copy between two devices moves its bytes through a host-visible buffer on each side.
//! Allocating those afresh for every copy costs more than the copy on a large transfer (the
//! page faults of fresh memory), so each device keeps a few: a copy takes the smallest idle one
//! that is large enough, or allocates one; a buffer is idle again once nothing but the keeper
//! holds it (every submission using it completed). At most [`MAX_KEPT`] buffers and
//! [`MAX_BYTES`] are kept; beyond that the largest idle ones are let go.

use std::sync::Mutex;

use crate::buffer::{Buffer, BufferParams};
use crate::device::Device;
use crate::error::Result;

/// Staging buffers a device keeps at most.
pub(crate) const MAX_KEPT: usize = 4;
/// Bytes of staging a device keeps at most.
pub(crate) const MAX_BYTES: u64 = 256 << 20;

/// A device's kept staging (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct HostStaging {
    kept: Mutex<Vec<Buffer>>,
}

impl HostStaging {
    /// A host-visible buffer of `device` of at least `len` (non-zero) bytes that nothing else
    /// uses: a kept idle one, or a new one (kept if the limits allow).
    pub(crate) fn take(&self, device: &Device, len: u64) -> Result<Buffer> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let idle = kept
            .iter()
            .filter(|b| b.is_unshared() && b.size() >= len)
            .min_by_key(|b| b.size());
        if let Some(buffer) = idle {
            return Ok(buffer.clone());
        }
        drop(kept);
        let fresh = device.allocator().allocate(len, BufferParams::HOST)?;
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.push(fresh.clone());
        // Let go of the largest idle buffers beyond the limits (busy ones stay with their
        // submissions either way).
        kept.sort_by_key(|b| b.size());
        while kept.len() > MAX_KEPT || kept.iter().map(Buffer::size).sum::<u64>() > MAX_BYTES {
            match kept.iter().rposition(|b| b.is_unshared()) {
                Some(at) => drop(kept.remove(at)),
                None => break,
            }
        }
        Ok(fresh)
    }
}
