//! Peer access: which pairs can access each other, enabling it once, peer copies between two
//! contexts, and the checks that still hold (memory freed under a queued peer copy).

use std::sync::atomic::Ordering;

use super::*;
use crate::model::peer::{PEER_COPIES, PEER_COPIES_UNENABLED};

/// Retains device 1's primary context (released by the caller).
fn retain_device_1() -> *mut c_void {
    let mut context = null_mut();
    // SAFETY: a valid out-pointer; the caller balances the retain.
    let retained = unsafe { cuDevicePrimaryCtxRetain(&mut context, 1) };
    assert_eq!(retained, CUresult::CUDA_SUCCESS);
    context
}

#[test]
fn peer_copies_move_bytes_between_contexts_once_access_is_enabled() {
    let session = Session::new();
    let context0 = crate::model::driver::primary_context(0) as *mut c_void;
    let x0 = alloc(256);
    // SAFETY: a live allocation of 256 bytes.
    assert_eq!(unsafe { cuMemsetD8_v2(x0, 9, 256) }, CUresult::CUDA_SUCCESS);
    let context1 = retain_device_1();
    make_current(1);
    let s1 = session.stream();
    let x1 = alloc(256);
    let (copies, unenabled) = (
        PEER_COPIES.load(Ordering::SeqCst),
        PEER_COPIES_UNENABLED.load(Ordering::SeqCst),
    );
    // SAFETY: live handles and allocations of this driver; valid out-pointers.
    unsafe {
        let mut can = -1;
        assert_eq!(
            cuDeviceCanAccessPeer(&mut can, 1, 0),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(can, 1);
        assert_eq!(
            cuDeviceCanAccessPeer(&mut can, 1, 1),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(can, 0, "a device is not its own peer");
        // A peer copy names both contexts: the driver may stage it without enabled access.
        assert_eq!(
            cuMemcpyPeerAsync(x1, context1, x0, context0, 128, s1),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s1), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuCtxEnablePeerAccess(context1, 0),
            CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
            "a context is not its own peer"
        );
        assert_eq!(cuCtxEnablePeerAccess(context0, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuCtxEnablePeerAccess(context0, 0),
            CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
        );
        assert_eq!(
            cuMemcpyPeerAsync(x1, context1, x0, context0, 256, s1),
            CUresult::CUDA_SUCCESS
        );
        // With access enabled device 1 reaches device 0's memory in any copy (unified
        // addressing), one way only.
        assert_eq!(cuMemcpyDtoDAsync_v2(x1, x0, 4, s1), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s1), CUresult::CUDA_SUCCESS);
    }
    assert_eq!(read_u32s(x1, 64), vec![0x0909_0909; 64]);
    assert_eq!(PEER_COPIES.load(Ordering::SeqCst), copies + 2);
    assert_eq!(PEER_COPIES_UNENABLED.load(Ordering::SeqCst), unenabled + 1);
    assert!(
        session.new_violations().is_empty(),
        "{:?}",
        session.new_violations()
    );
    make_current(0);
    let s0 = session.stream();
    // SAFETY: live handles; device 0 has no access to device 1's memory (the case under test).
    unsafe {
        assert_eq!(
            cuMemcpyDtoDAsync_v2(x0, x1, 4, s0),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuStreamDestroy_v2(s0), CUresult::CUDA_SUCCESS);
    }
    let found = session.new_violations();
    assert!(
        found.len() == 1 && found[0].contains("peer access to device 1 is not enabled"),
        "{found:?}"
    );
    make_current(1);
    // SAFETY: live handles of device 1; nothing queued uses them any more.
    unsafe {
        assert_eq!(cuMemFree_v2(x1), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s1), CUresult::CUDA_SUCCESS);
        assert_eq!(cuDevicePrimaryCtxRelease_v2(1), CUresult::CUDA_SUCCESS);
    }
    make_current(0);
    // The released context took its access with it.
    assert!(!crate::model::peer::reaches(1, 0));
    // SAFETY: device 0's allocation, unused.
    assert_eq!(unsafe { cuMemFree_v2(x0) }, CUresult::CUDA_SUCCESS);
}

#[test]
fn memory_freed_under_a_queued_peer_copy_is_a_violation() {
    let session = Session::new();
    let context0 = crate::model::driver::primary_context(0) as *mut c_void;
    let x0 = alloc(256);
    let context1 = retain_device_1();
    make_current(1);
    let s1 = session.stream();
    let x1 = alloc(256);
    // SAFETY: live handles; the source is freed before the stream gets to the copy (the case
    // under test).
    unsafe {
        let enabled = cuCtxEnablePeerAccess(context0, 0);
        assert_eq!(enabled, CUresult::CUDA_SUCCESS);
        gate(s1);
        assert_eq!(
            cuMemcpyPeerAsync(x1, context1, x0, context0, 256, s1),
            CUresult::CUDA_SUCCESS
        );
        make_current(0);
        assert_eq!(cuMemFree_v2(x0), CUresult::CUDA_SUCCESS);
        open_gate();
        make_current(1);
        assert_eq!(
            cuStreamSynchronize(s1),
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
        );
    }
    let found = session.new_violations();
    assert!(
        found.len() == 1
            && found[0].contains("cuMemcpyPeerAsync")
            && found[0].contains("already freed"),
        "{found:?}"
    );
    // SAFETY: device 1 faulted: its handles are released with it (allowed after a fault).
    unsafe {
        let _ = cuMemFree_v2(x1);
        let _ = cuStreamDestroy_v2(s1);
        let _ = cuDevicePrimaryCtxRelease_v2(1);
    }
    make_current(0);
}
