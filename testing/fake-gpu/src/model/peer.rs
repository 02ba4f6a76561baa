//! Peer access between the fake's devices: which pairs may reach each other's memory, which
//! access is enabled, and peer copies (`cuMemcpyPeerAsync`, `hipMemcpyPeerAsync`).
//!
//! Every pair of distinct devices can access each other (`cuDeviceCanAccessPeer` and
//! `hipDeviceCanAccessPeer` answer 1) unless a test turned peer access off
//! ([`crate::client::Fake::set_peer_access`]); a device never "accesses" itself as a peer
//! (CUDA answers 0 there). Access is one way and must be enabled (`cuCtxEnablePeerAccess`
//! from the accessing device's context, `hipDeviceEnablePeerAccess` from its current device):
//! once it is, that device's kernels, copies and fills may reach the peer's device memory
//! ([`crate::model::memory::Memory::check_on`]); before, doing so is a violation, as it is
//! undefined on a GPU. A peer copy names both devices, so the driver may stage it without
//! enabled access, as CUDA and HIP do: the fake runs it either way and counts those without
//! (`FakeStats::peer_copies_unenabled`), which halcyon never makes. A context's destruction
//! forgets the access from and to its device.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use cudarc::driver::sys::CUresult;

use crate::model::driver::MAX_DEVICES;

/// Bit `p` of `ENABLED[d]`: device `d` reaches device `p`'s memory.
static ENABLED: [AtomicU8; MAX_DEVICES] = [const { AtomicU8::new(0) }; MAX_DEVICES];
/// Set by a test: no pair can access each other.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Peer copies the device ran (`FakeStats::peer_copies`).
pub(crate) static PEER_COPIES: AtomicU64 = AtomicU64::new(0);
/// Of those, how many were enqueued while the destination's device had no access to the
/// source's enabled (`FakeStats::peer_copies_unenabled`).
pub(crate) static PEER_COPIES_UNENABLED: AtomicU64 = AtomicU64::new(0);

/// Turns peer access between every pair on (the default) or off.
pub(crate) fn set_supported(supported: bool) {
    UNSUPPORTED.store(!supported, Ordering::SeqCst);
}

/// Whether device `device` can be given access to device `peer`'s memory (distinct devices,
/// and a test did not turn peer access off).
pub(crate) fn can_access(device: u32, peer: u32) -> bool {
    device != peer && !UNSUPPORTED.load(Ordering::SeqCst)
}

/// Enables `device`'s access to `peer`'s memory: `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED` where
/// [`can_access`] says no, `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED` the second time.
pub(crate) fn enable(device: u32, peer: u32) -> Result<(), CUresult> {
    if !can_access(device, peer) {
        return Err(CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
    }
    let bit = 1u8 << peer;
    let before = ENABLED[device as usize].fetch_or(bit, Ordering::SeqCst);
    if before & bit != 0 {
        return Err(CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
    }
    Ok(())
}

/// Whether `device` may reach `owner`'s device memory: its own, or a peer's it enabled.
pub(crate) fn reaches(device: u32, owner: u32) -> bool {
    device == owner
        || (device as usize) < MAX_DEVICES
            && ENABLED[device as usize].load(Ordering::SeqCst) & (1u8 << owner) != 0
}

/// Forgets every access from and to `device` (its context was destroyed).
pub(crate) fn forget(device: u32) {
    ENABLED[device as usize].store(0, Ordering::SeqCst);
    for row in &ENABLED {
        row.fetch_and(!(1u8 << device), Ordering::SeqCst);
    }
}

/// Counts a peer copy from `src_device`'s memory into `dst_device`'s, enqueued now, if
/// `dst_device` has no access to `src_device`'s memory enabled.
pub(crate) fn count_unenabled(dst_device: u32, src_device: u32) {
    if !reaches(dst_device, src_device) {
        PEER_COPIES_UNENABLED.fetch_add(1, Ordering::Relaxed);
    }
}
