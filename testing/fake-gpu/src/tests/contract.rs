//! Each rule of the contract catches a CUDA caller that breaks it.

use super::*;

#[test]
fn a_call_without_a_current_context_is_a_violation() {
    let session = Session::new();
    let code = std::thread::spawn(|| {
        let mut s = null_mut();
        // SAFETY: a valid out-pointer.
        unsafe { cuStreamCreate(&mut s, 1) }
    })
    .join()
    .unwrap();
    assert_eq!(code, CUresult::CUDA_ERROR_INVALID_CONTEXT);
    let found = session.new_violations();
    assert!(
        found.len() == 1 && found[0].contains("without a usable current context"),
        "{found:?}"
    );
}

static FROM_HOST_FUNCTION: AtomicU32 = AtomicU32::new(0);

unsafe extern "C" fn calls_the_driver(_: *mut c_void) {
    let mut e = null_mut();
    // SAFETY: a valid out-pointer (the call is the violation under test).
    let code = unsafe { cuEventCreate(&mut e, 0) };
    FROM_HOST_FUNCTION.store(code as u32, Ordering::SeqCst);
}

#[test]
fn a_driver_call_from_a_host_function_is_a_violation() {
    let session = Session::new();
    let s = session.stream();
    // SAFETY: a live stream and a function that may be called with any pointer.
    unsafe {
        assert_eq!(
            cuLaunchHostFunc(s, Some(calls_the_driver), null_mut()),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUresult::CUDA_SUCCESS);
    }
    assert_eq!(
        FROM_HOST_FUNCTION.load(Ordering::SeqCst),
        CUresult::CUDA_ERROR_NOT_PERMITTED as u32
    );
    let found = session.new_violations();
    assert!(
        found.len() == 1 && found[0].contains("inside a host function"),
        "{found:?}"
    );
}

#[test]
fn memory_freed_before_the_device_used_it_is_a_violation_and_a_fault() {
    let session = Session::new();
    let (s, module, x) = session.queued_add_one();
    // SAFETY: an allocation of this driver (freed while the kernel is queued: the case under
    // test).
    assert_eq!(unsafe { cuMemFree_v2(x) }, CUresult::CUDA_SUCCESS);
    // A new allocation of the same size does not land at the freed address (quarantine), so
    // the kernel cannot pass by writing into it.
    let y = alloc(256);
    assert_ne!(x, y);
    open_gate();
    // SAFETY: live handles.
    unsafe {
        assert_eq!(cuStreamSynchronize(s), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        // Sticky: every later call fails the same way; releasing still releases, and reports
        // the fault.
        let mut e = null_mut();
        assert_eq!(
            cuEventCreate(&mut e, 0),
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
        );
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(cuMemFree_v2(y), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(cuStreamDestroy_v2(s), CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
    }
    let found = session.new_violations();
    assert!(
        found.len() == 1 && found[0].contains("already freed"),
        "{found:?}"
    );
    drop(session);
    // The context went, and with it the fault.
    let _session = Session::new();
    let mut e = null_mut();
    // SAFETY: a valid out-pointer.
    unsafe {
        assert_eq!(cuEventCreate(&mut e, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventDestroy_v2(e), CUresult::CUDA_SUCCESS);
    }
}

#[test]
fn stale_handles_and_double_frees_are_violations() {
    let session = Session::new();
    let s = session.stream();
    let x = alloc(64);
    // SAFETY: handles of this driver, some stale (the case under test).
    unsafe {
        assert_eq!(cuStreamDestroy_v2(s), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamSynchronize(s), CUresult::CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(
            cuStreamSynchronize(null_mut()),
            CUresult::CUDA_ERROR_INVALID_HANDLE
        );
        assert_eq!(cuMemFree_v2(x), CUresult::CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(x), CUresult::CUDA_ERROR_INVALID_VALUE);
    }
    let found = session.new_violations();
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].contains("which was destroyed"), "{found:?}");
    assert!(found[1].contains("legacy default stream"), "{found:?}");
    assert!(found[2].contains("double free"), "{found:?}");
}

#[test]
fn resources_alive_when_the_context_goes_are_leaks() {
    let mut session = Session::new();
    let _s = session.stream();
    let _x = alloc(64);
    let found = session.release();
    assert!(
        found.len() == 1 && found[0].contains("1 streams") && found[0].contains("1 allocations"),
        "{found:?}"
    );
}
