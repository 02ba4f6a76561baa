//! Devices keep their own handles, memory, faults and primary contexts.

use super::*;

#[test]
fn devices_keep_their_own_handles_memory_faults_and_contexts() {
    let session = Session::new();
    let s0 = session.stream();
    let (m0, f0) = session.add_one();
    let x0 = alloc(256);
    let mut context = null_mut();
    // SAFETY: a valid out-pointer; balanced by the release below.
    let retained = unsafe { cuDevicePrimaryCtxRetain(&mut context, 1) };
    assert_eq!(retained, CUresult::CUDA_SUCCESS);
    make_current(1);
    let s1 = session.stream();
    let (m1, f1) = session.add_one();
    let x1 = alloc(256);
    let (mut e0, mut e1) = (null_mut(), null_mut());
    // SAFETY: live handles of this driver, some combined across devices (the case under
    // test); valid out-pointers.
    unsafe {
        assert_eq!(cuEventCreate(&mut e1, 0), CUresult::CUDA_SUCCESS);
        // Device 0's function on device 1's stream; device 0's stream under device 1's
        // context; device 0's memory in a copy on device 1's stream.
        assert_eq!(
            session.launch_add_one(f0, x1, 64, s1),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(
            session.launch_add_one(f0, x0, 64, s0),
            CUresult::CUDA_ERROR_INVALID_CONTEXT
        );
        assert_eq!(
            cuMemcpyDtoDAsync_v2(x1, x0, 256, s1),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        // Device 1's own work, recorded; device 0 waits for it across devices (allowed).
        assert_eq!(
            session.launch_add_one(f1, x1, 64, s1),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuEventRecord(e1, s1), CUresult::CUDA_SUCCESS);
        make_current(0);
        assert_eq!(cuEventCreate(&mut e0, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventRecord(e1, s0), CUresult::CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuStreamWaitEvent(s0, e1, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(
            session.launch_add_one(f0, x0, 64, s0),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s0), CUresult::CUDA_SUCCESS);
    }
    assert_eq!(read_u32s(x0, 64), vec![1; 64]);
    assert_eq!(read_u32s(x1, 64), vec![1; 64]);
    let found = session.new_violations();
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(found[0].contains("a function of device 0 with a stream of device 1"));
    assert!(found[1].contains("the current context is device 1's"));
    assert!(found[2].contains("which device 1 cannot reach"));
    assert!(found[3].contains("an event of device 1 with a stream of device 0"));
    // A fault on device 1 is device 1's: device 0 goes on; releasing device 1's context (its
    // handles destroyed first, which works after a fault) leaves device 0's alone.
    make_current(1);
    crate::model::kernels::fault_next_kernel(CUresult::CUDA_ERROR_LAUNCH_FAILED);
    // SAFETY: live handles of this driver.
    unsafe {
        assert_eq!(
            session.launch_add_one(f1, x1, 64, s1),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s1), CUresult::CUDA_ERROR_LAUNCH_FAILED);
        let mut e = null_mut();
        assert_eq!(cuEventCreate(&mut e, 0), CUresult::CUDA_ERROR_LAUNCH_FAILED);
        for code in [
            cuEventDestroy_v2(e1),
            cuMemFree_v2(x1),
            cuModuleUnload(m1),
            cuStreamDestroy_v2(s1),
        ] {
            assert_eq!(code, CUresult::CUDA_ERROR_LAUNCH_FAILED);
        }
        assert_eq!(cuDevicePrimaryCtxRelease_v2(1), CUresult::CUDA_SUCCESS);
        make_current(0);
        assert_eq!(
            session.launch_add_one(f0, x0, 64, s0),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s0), CUresult::CUDA_SUCCESS);
        assert_eq!(read_u32s(x0, 64), vec![2; 64]);
        for code in [
            cuEventDestroy_v2(e0),
            cuMemFree_v2(x0),
            cuModuleUnload(m0),
            cuStreamDestroy_v2(s0),
        ] {
            assert_eq!(code, CUresult::CUDA_SUCCESS);
        }
    }
    assert_eq!(session.new_violations().len(), 4);
}

#[test]
fn releasing_one_devices_context_reports_only_its_leaks() {
    let session = Session::new();
    let s0 = session.stream();
    let mut context = null_mut();
    // SAFETY: a valid out-pointer; balanced by the release below.
    let retained = unsafe { cuDevicePrimaryCtxRetain(&mut context, 1) };
    assert_eq!(retained, CUresult::CUDA_SUCCESS);
    make_current(1);
    let _leaked = alloc(64);
    assert_eq!(
        // SAFETY: balances the retain above.
        unsafe { cuDevicePrimaryCtxRelease_v2(1) },
        CUresult::CUDA_SUCCESS
    );
    let found = session.new_violations();
    assert!(
        found.len() == 1
            && found[0].contains("device 1")
            && found[0].contains("1 allocations")
            && !found[0].contains("streams"),
        "{found:?}"
    );
    make_current(0);
    // SAFETY: device 0's stream, still alive.
    unsafe {
        assert_eq!(cuStreamSynchronize(s0), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s0), CUresult::CUDA_SUCCESS);
    }
}

/// A released primary context stays current where it was (CUDA pops it from no stack), and
/// making it current again is allowed, as code giving back the context it found does; a call
/// that needs it then is the violation, and a handle that was never a context is one at once.
#[test]
fn a_released_context_can_be_made_current_but_not_used() {
    let mut session = Session::new();
    assert!(session.release().is_empty());
    let context = crate::model::driver::primary_context(0) as *mut c_void;
    // SAFETY: a primary context of this driver, released: the case under test.
    assert_eq!(unsafe { cuCtxSetCurrent(context) }, CUresult::CUDA_SUCCESS);
    assert!(session.new_violations().is_empty());
    let mut s = null_mut();
    // SAFETY: a valid out-pointer; the current context is released (the case under test).
    let created = unsafe { cuStreamCreate(&mut s, 1) };
    assert_eq!(created, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    let found = session.new_violations();
    assert!(
        found.len() == 1 && found[0].contains("without a usable current context"),
        "{found:?}"
    );
    // SAFETY: not a context: the case under test (the fake refuses it before using it).
    let refused = unsafe { cuCtxSetCurrent(0xdead_0000usize as *mut c_void) };
    assert_eq!(refused, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    let found = session.new_violations();
    assert!(
        found.len() == 2 && found[1].contains("not a context of this driver"),
        "{found:?}"
    );
    assert_eq!(
        // SAFETY: nothing current, as the next test expects to find it.
        unsafe { cuCtxSetCurrent(null_mut()) },
        CUresult::CUDA_SUCCESS
    );
}
