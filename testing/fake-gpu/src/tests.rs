//! The fake's own checks: each rule it enforces catches a caller that breaks it, and what it
//! models (streams, events, graphs, faults) behaves as CUDA documents. Violations are recorded
//! here, not fatal; tests run one at a time (the driver is the process's).

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use cudarc::driver::sys::CUresult;

use crate::contract::{set_record_only, violations};
use crate::cuda::*;

static SERIAL: Mutex<()> = Mutex::new(());

const PTX: &str = "//\n.version 8.0\n.target sm_52\n.address_size 64\n\
    .visible .entry add_one_u32(\n\t.param .u64 p0,\n\t.param .u32 p1\n)\n{\n\tret;\n}\n\0";

/// The driver initialised and the primary context retained and current on this thread, for
/// one test; released (destroying the context) when dropped.
struct Session {
    _serial: MutexGuard<'static, ()>,
    violations: usize,
    /// Whether [`Session::release`] already released the context.
    released: bool,
}

impl Session {
    fn new() -> Session {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        set_record_only(true);
        let mut context = null_mut();
        // SAFETY: valid out-pointers; CUDA's call order.
        unsafe {
            assert_eq!(cuInit(0), CUresult::CUDA_SUCCESS);
            assert_eq!(
                cuDevicePrimaryCtxRetain(&mut context, 0),
                CUresult::CUDA_SUCCESS
            );
            assert_eq!(cuCtxSetCurrent(context), CUresult::CUDA_SUCCESS);
        }
        Session {
            _serial: serial,
            violations: violations().len(),
            released: false,
        }
    }

    /// The violations recorded since the session began.
    fn new_violations(&self) -> Vec<String> {
        violations()[self.violations..].to_vec()
    }

    fn stream(&self) -> *mut c_void {
        let mut s = null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { cuStreamCreate(&mut s, 1) }, CUresult::CUDA_SUCCESS);
        s
    }

    fn add_one(&self) -> (*mut c_void, *mut c_void) {
        let (mut module, mut function) = (null_mut(), null_mut());
        // SAFETY: NUL-terminated PTX and name; valid out-pointers.
        unsafe {
            assert_eq!(
                cuModuleLoadData(&mut module, PTX.as_ptr().cast()),
                CUresult::CUDA_SUCCESS
            );
            assert_eq!(
                cuModuleGetFunction(&mut function, module, c"add_one_u32".as_ptr()),
                CUresult::CUDA_SUCCESS
            );
        }
        (module, function)
    }

    fn launch_add_one(&self, function: *mut c_void, x: u64, n: u32, s: *mut c_void) -> CUresult {
        let mut args = [
            (&x as *const u64).cast_mut().cast::<c_void>(),
            (&n as *const u32).cast_mut().cast(),
        ];
        // SAFETY: one pointer per parameter, each to a value of its size, alive for the call.
        unsafe {
            cuLaunchKernel(
                function,
                1,
                1,
                1,
                64,
                1,
                1,
                0,
                s,
                args.as_mut_ptr(),
                null_mut(),
            )
        }
    }
}

impl Session {
    /// A stream held at the gate with an `add_one_u32` launch on 256 bytes queued behind it:
    /// the stream, the module and the memory, which the test can now release too early.
    fn queued_add_one(&self) -> (*mut c_void, *mut c_void, u64) {
        let s = self.stream();
        let (module, add_one) = self.add_one();
        let x = alloc(256);
        gate(s);
        assert_eq!(
            self.launch_add_one(add_one, x, 64, s),
            CUresult::CUDA_SUCCESS
        );
        (s, module, x)
    }
}

impl Session {
    /// Releases the context now (destroying it), and returns the violations recorded since the
    /// session began: read while the session still serialises the tests, so no other test's
    /// violations slip in.
    fn release(&mut self) -> Vec<String> {
        if !self.released {
            self.released = true;
            // SAFETY: balances the retain.
            unsafe { cuDevicePrimaryCtxRelease_v2(0) };
        }
        self.new_violations()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.release();
    }
}

/// Closed: a stream that reaches [`gate`]'s host function waits until [`open_gate`].
static GATE: AtomicBool = AtomicBool::new(false);

unsafe extern "C" fn wait_for_gate(_: *mut c_void) {
    while !GATE.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Closes the gate and makes `s` wait at it, so that work queued after this is certainly in
/// flight (not yet run) until [`open_gate`].
fn gate(s: *mut c_void) {
    GATE.store(false, Ordering::SeqCst);
    // SAFETY: a live stream; the function may be called with any pointer.
    assert_eq!(
        unsafe { cuLaunchHostFunc(s, Some(wait_for_gate), null_mut()) },
        CUresult::CUDA_SUCCESS
    );
}

fn open_gate() {
    GATE.store(true, Ordering::SeqCst);
}

fn alloc(bytes: usize) -> u64 {
    let mut p = 0;
    // SAFETY: a valid out-pointer.
    assert_eq!(
        unsafe { cuMemAlloc_v2(&mut p, bytes) },
        CUresult::CUDA_SUCCESS
    );
    p
}

fn read_u32s(src: u64, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; n];
    // SAFETY: `out` holds `n` u32s.
    assert_eq!(
        unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, 4 * n) },
        CUresult::CUDA_SUCCESS
    );
    out
}

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

#[test]
fn events_order_streams_and_graphs_replay() {
    let session = Session::new();
    let (a, b) = (session.stream(), session.stream());
    let (module, add_one) = session.add_one();
    let x = alloc(256);
    let mut e = null_mut();
    // SAFETY: live handles of this driver; valid out-pointers.
    unsafe {
        assert_eq!(cuEventCreate(&mut e, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuEventQuery(e),
            CUresult::CUDA_SUCCESS,
            "never recorded: complete"
        );
        // a (held at the gate): +1, record; b waits for the record, then +1 again.
        gate(a);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, a),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuEventRecord(e, a), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventQuery(e), CUresult::CUDA_ERROR_NOT_READY);
        assert_eq!(cuStreamWaitEvent(b, e, 0), CUresult::CUDA_SUCCESS);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, b),
            CUresult::CUDA_SUCCESS
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(read_u32s(x, 64), vec![0; 64], "b waits for a's record");
        open_gate();
        assert_eq!(cuStreamSynchronize(b), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventQuery(e), CUresult::CUDA_SUCCESS);
    }
    assert_eq!(read_u32s(x, 64), vec![2; 64]);
    // Captured once, launched twice: +2 per launch. An event recorded in the capture is a
    // captured event (no graph node; querying it is an error until it is recorded again).
    let (mut graph, mut exec) = (null_mut(), null_mut());
    // SAFETY: as above.
    unsafe {
        assert_eq!(cuStreamBeginCapture_v2(a, 2), CUresult::CUDA_SUCCESS);
        assert_eq!(
            session.launch_add_one(add_one, x, 64, a),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuEventRecord(e, a), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuStreamWaitEvent(a, e, 0),
            CUresult::CUDA_SUCCESS,
            "within the capture"
        );
        assert_eq!(
            session.launch_add_one(add_one, x, 64, a),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuStreamEndCapture(a, &mut graph), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventQuery(e), CUresult::CUDA_ERROR_CAPTURED_EVENT);
        assert_eq!(
            cuGraphInstantiateWithFlags(&mut exec, graph, 0),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(cuGraphDestroy(graph), CUresult::CUDA_SUCCESS);
        for _ in 0..2 {
            assert_eq!(cuGraphLaunch(exec, a), CUresult::CUDA_SUCCESS);
        }
        assert_eq!(cuEventRecord(e, a), CUresult::CUDA_SUCCESS);
        assert_eq!(cuEventSynchronize(e), CUresult::CUDA_SUCCESS);
        assert_eq!(cuGraphExecDestroy(exec), CUresult::CUDA_SUCCESS);
        // Waiting in a capture on work outside it invalidates the capture.
        assert_eq!(cuStreamBeginCapture_v2(b, 2), CUresult::CUDA_SUCCESS);
        assert_eq!(
            cuStreamWaitEvent(b, e, 0),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION
        );
        assert_eq!(
            cuStreamEndCapture(b, &mut graph),
            CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        assert!(graph.is_null());
    }
    assert_eq!(read_u32s(x, 64), vec![6; 64]);
    // SAFETY: live handles, each destroyed once.
    unsafe {
        assert_eq!(cuEventDestroy_v2(e), CUresult::CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(x), CUresult::CUDA_SUCCESS);
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(a), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(b), CUresult::CUDA_SUCCESS);
    }
    assert!(
        session.new_violations().is_empty(),
        "{:?}",
        session.new_violations()
    );
}

#[test]
fn ptx_is_read_for_entry_points_and_rejected_with_a_log() {
    let session = Session::new();
    let (module, add_one) = session.add_one();
    let (mut offset, mut size) = (0, 0);
    // SAFETY: a live function; valid out-pointers.
    unsafe {
        assert_eq!(
            cuFuncGetParamInfo(add_one, 1, &mut offset, &mut size),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!((offset, size), (8, 4));
        assert_eq!(
            cuFuncGetParamInfo(add_one, 2, &mut offset, &mut size),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_SUCCESS);
    }
    let bad = ".version 8.0\n.target sm_52\n.visible .entry k()\n{\n\tbogus.u32 %r1;\n}\n\0";
    let mut log = vec![0u8; 256];
    let mut options = [5u32, 6]; // CU_JIT_ERROR_LOG_BUFFER, its size
    let mut values = [
        log.as_mut_ptr().cast::<c_void>(),
        std::ptr::without_provenance_mut(log.len()),
    ];
    let mut m = null_mut();
    // SAFETY: NUL-terminated text; option arrays of 2 entries; the log holds 256 bytes.
    let code = unsafe {
        cuModuleLoadDataEx(
            &mut m,
            bad.as_ptr().cast(),
            2,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    assert_eq!(code, CUresult::CUDA_ERROR_INVALID_PTX);
    let log =
        String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap()]).to_string();
    assert!(log.contains("Unknown instruction 'bogus.u32'"), "{log}");
    assert!(session.new_violations().is_empty());
}

/// `.maxntid` caps a kernel's block size: `cuFuncGetAttribute` reports the cap, a launch of a
/// larger block is refused as a driver refuses one too large for a kernel's registers, and a
/// malformed directive is a PTX error.
#[test]
fn maxntid_limits_the_block_size() {
    let session = Session::new();
    let ptx = ".version 8.0\n.target sm_52\n.visible .entry empty()\n.maxntid 16, 2\n\
               .minnctapersm 1\n{\n\tret;\n}\n\0";
    let (mut module, mut empty) = (null_mut(), null_mut());
    let mut max = 0;
    // SAFETY: NUL-terminated PTX and name; valid out-pointers.
    unsafe {
        assert_eq!(
            cuModuleLoadData(&mut module, ptx.as_ptr().cast()),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            cuModuleGetFunction(&mut empty, module, c"empty".as_ptr()),
            CUresult::CUDA_SUCCESS
        );
        assert_eq!(
            cuFuncGetAttribute(&mut max, 0, empty),
            CUresult::CUDA_SUCCESS
        );
    }
    assert_eq!(max, 32);
    let s = session.stream();
    let launch = |block_x: u32| {
        // SAFETY: a live function without parameters and a live stream.
        unsafe { cuLaunchKernel(empty, 1, 1, 1, block_x, 1, 1, 0, s, null_mut(), null_mut()) }
    };
    assert_eq!(launch(33), CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    assert_eq!(launch(32), CUresult::CUDA_SUCCESS);
    // SAFETY: live handles, destroyed once, after the launch completed.
    unsafe {
        assert_eq!(cuStreamSynchronize(s), CUresult::CUDA_SUCCESS);
        assert_eq!(cuStreamDestroy_v2(s), CUresult::CUDA_SUCCESS);
        assert_eq!(cuModuleUnload(module), CUresult::CUDA_SUCCESS);
    }
    let bad = ".version 8.0\n.target sm_52\n.visible .entry k()\n.maxntid 0\n{\n\tret;\n}\n\0";
    // SAFETY: NUL-terminated PTX; a valid out-pointer.
    let code = unsafe { cuModuleLoadData(&mut module, bad.as_ptr().cast()) };
    assert_eq!(code, CUresult::CUDA_ERROR_INVALID_PTX);
    assert!(session.new_violations().is_empty());
}

#[test]
fn a_kernel_whose_module_was_unloaded_before_it_ran_is_a_violation() {
    let session = Session::new();
    let (s, module, x) = session.queued_add_one();
    // SAFETY: the module is live (unloaded under a queued launch: the case under test).
    assert_eq!(unsafe { cuModuleUnload(module) }, CUresult::CUDA_SUCCESS);
    open_gate();
    // SAFETY: live handles.
    unsafe {
        assert_eq!(cuStreamSynchronize(s), CUresult::CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuMemFree_v2(x), CUresult::CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(cuStreamDestroy_v2(s), CUresult::CUDA_ERROR_INVALID_HANDLE);
    }
    let found = session.new_violations();
    assert!(
        found.len() == 1 && found[0].contains("module was unloaded"),
        "{found:?}"
    );
}

/// Makes device `device`'s primary context current on this thread (retained by the caller).
fn make_current(device: u32) {
    let context = crate::driver::primary_context(device) as *mut c_void;
    // SAFETY: a primary context the caller retained.
    assert_eq!(unsafe { cuCtxSetCurrent(context) }, CUresult::CUDA_SUCCESS);
}

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
    crate::kernels::fault_next_kernel(CUresult::CUDA_ERROR_LAUNCH_FAILED);
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
    // SAFETY: balances the retain above.
    assert_eq!(
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

// ------------------------------------------------------------------ HIP

/// The HIP exports, for one test: device 0 current on this thread; on drop, checks that the
/// test destroyed and freed everything it made (the CUDA sessions after it would report it).
struct HipSession {
    _serial: MutexGuard<'static, ()>,
    violations: usize,
}

impl HipSession {
    fn new() -> HipSession {
        let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        set_record_only(true);
        assert_eq!(crate::hip::hipInit(0), 0);
        assert_eq!(crate::hip::hipSetDevice(0), 0);
        HipSession {
            _serial: serial,
            violations: violations().len(),
        }
    }

    fn new_violations(&self) -> Vec<String> {
        violations()[self.violations..].to_vec()
    }

    fn stream(&self) -> *mut c_void {
        let mut s = null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(
            unsafe { crate::hip::hipStreamCreateWithFlags(&mut s, 1) },
            0
        );
        s
    }

    fn event(&self) -> *mut c_void {
        let mut e = null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(
            unsafe { crate::hip::hipEventCreateWithFlags(&mut e, 0x3) },
            0
        );
        e
    }

    fn malloc(&self, bytes: usize) -> *mut c_void {
        let mut p = null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { crate::hip::hipMalloc(&mut p, bytes) }, 0);
        p
    }
}

impl Drop for HipSession {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let d = crate::driver::driver();
        assert!(d.streams.is_empty() && d.events.is_empty() && d.modules.is_empty());
        drop(d);
        assert_eq!(
            crate::memory::memory().count(),
            0,
            "the test freed its memory"
        );
    }
}

/// Makes `s` wait at the gate (see [`gate`]) through `hipLaunchHostFunc`.
fn hip_gate(s: *mut c_void) {
    GATE.store(false, Ordering::SeqCst);
    // SAFETY: a live stream; the function may be called with any pointer.
    assert_eq!(
        unsafe { crate::hip::hipLaunchHostFunc(s, Some(wait_for_gate), null_mut()) },
        0
    );
}

/// Opens the gate after `ms` milliseconds, from another thread.
fn open_gate_after(ms: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        open_gate();
    })
}

#[test]
fn hip_creation_on_a_thread_without_a_device_is_a_violation() {
    let session = HipSession::new();
    let s = std::thread::spawn(|| {
        let mut s = null_mut();
        // SAFETY: a valid out-pointer.
        let code = unsafe { crate::hip::hipStreamCreateWithFlags(&mut s, 1) };
        assert_eq!(code, 0, "HIP creates it on device 0 anyway");
        s as usize
    })
    .join()
    .unwrap();
    let found = session.new_violations();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("never called hipSetDevice"), "{found:?}");
    // SAFETY: the stream made above.
    assert_eq!(unsafe { crate::hip::hipStreamDestroy(s as *mut c_void) }, 0);
    // With the device set, the same call is fine.
    let s = session.stream();
    // SAFETY: a live stream.
    assert_eq!(unsafe { crate::hip::hipStreamDestroy(s) }, 0);
    assert_eq!(session.new_violations().len(), 1);
}

#[test]
fn hip_event_calls_while_another_thread_synchronises_are_violations() {
    let session = HipSession::new();
    let (s, other) = (session.stream(), session.stream());
    let e = session.event();
    hip_gate(s);
    // SAFETY: live handles throughout; the gate opens from another thread.
    unsafe {
        assert_eq!(crate::hip::hipEventRecord(e, s), 0);
        assert_eq!(crate::hip::hipEventQuery(e), 600, "hipErrorNotReady");
        let waiter = {
            let e = e as usize;
            std::thread::spawn(move || crate::hip::hipEventSynchronize(e as *mut c_void))
        };
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(session.new_violations().is_empty());
        let opener = open_gate_after(100);
        // Each waits (as HIP does) for the synchronisation, and is reported.
        assert_eq!(
            crate::hip::hipEventQuery(e),
            0,
            "complete once it got the lock"
        );
        assert_eq!(waiter.join().unwrap(), 0);
        opener.join().unwrap();
        let found = session.new_violations();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("hipEventQuery") && found[0].contains("hipEventSynchronize"),
            "{found:?}"
        );
        // Once the record completed, a synchronisation in progress holds nobody up.
        assert_eq!(crate::hip::hipStreamWaitEvent(other, e, 0), 0);
        assert_eq!(crate::hip::hipEventRecord(e, other), 0);
        assert_eq!(crate::hip::hipStreamSynchronize(other), 0);
        assert_eq!(session.new_violations().len(), 1);
        assert_eq!(crate::hip::hipEventDestroy(e), 0);
        assert_eq!(crate::hip::hipStreamDestroy(s), 0);
        assert_eq!(crate::hip::hipStreamDestroy(other), 0);
    }
}

#[test]
fn hip_copies_from_or_to_pageable_memory_are_violations_done_at_once() {
    let session = HipSession::new();
    let s = session.stream();
    let buf = session.malloc(16);
    let input = [7u8; 16];
    let mut output = [0u8; 16];
    let mut pinned = null_mut();
    // SAFETY: live handles; the host buffers outlive the synchronisation.
    unsafe {
        assert_eq!(crate::hip::hipHostMalloc(&mut pinned, 16, 0x2), 0);
        assert_eq!(
            crate::hip::hipMemcpyAsync(buf, input.as_ptr().cast(), 16, 1, s),
            0
        );
        assert_eq!(
            crate::hip::hipMemcpyAsync(output.as_mut_ptr().cast(), buf, 16, 2, s),
            0
        );
        assert_eq!(output, input, "done before the call returned");
        assert_eq!(session.new_violations().len(), 2);
        // Through pinned memory: asynchronous, and fine.
        assert_eq!(crate::hip::hipMemcpyAsync(pinned, buf, 16, 2, s), 0);
        assert_eq!(crate::hip::hipMemcpyAsync(buf, pinned, 16, 1, s), 0);
        assert_eq!(crate::hip::hipStreamSynchronize(s), 0);
        assert_eq!(std::slice::from_raw_parts(pinned.cast::<u8>(), 16), input);
        let found = session.new_violations();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().all(|v| v.contains("pageable")), "{found:?}");
        assert_eq!(crate::hip::hipHostFree(pinned), 0);
        assert_eq!(crate::hip::hipFree(buf), 0);
        assert_eq!(crate::hip::hipStreamDestroy(s), 0);
    }
}

#[test]
fn hip_frees_wait_for_every_stream() {
    let session = HipSession::new();
    let s = session.stream();
    let buf = session.malloc(16);
    hip_gate(s);
    let start = std::time::Instant::now();
    let opener = open_gate_after(150);
    // SAFETY: a live allocation no queued work uses.
    assert_eq!(unsafe { crate::hip::hipFree(buf) }, 0);
    assert!(
        start.elapsed() >= std::time::Duration::from_millis(150),
        "hipFree returned while the stream was held"
    );
    opener.join().unwrap();
    // SAFETY: a live stream.
    assert_eq!(unsafe { crate::hip::hipStreamDestroy(s) }, 0);
    assert!(session.new_violations().is_empty());
}

static CALLBACK_STATUS: AtomicU32 = AtomicU32::new(u32::MAX);

unsafe extern "C" fn callback_that_calls_hip(_: *mut c_void, status: i32, event: *mut c_void) {
    CALLBACK_STATUS.store(status as u32, Ordering::SeqCst);
    // SAFETY: a live event; the call itself is what the fake must report.
    let _ = unsafe { crate::hip::hipEventQuery(event) };
}

#[test]
fn hip_stream_callbacks_get_success_and_may_not_call_hip() {
    let session = HipSession::new();
    let s = session.stream();
    let e = session.event();
    // SAFETY: live handles; the callback may be called with the event.
    unsafe {
        assert_eq!(
            crate::hip::hipStreamAddCallback(s, Some(callback_that_calls_hip), e, 0),
            0
        );
        assert_eq!(crate::hip::hipStreamSynchronize(s), 0);
        assert_eq!(CALLBACK_STATUS.load(Ordering::SeqCst), 0, "hipSuccess");
        let found = session.new_violations();
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("stream callback"), "{found:?}");
        assert_eq!(crate::hip::hipEventDestroy(e), 0);
        assert_eq!(crate::hip::hipStreamDestroy(s), 0);
    }
}

/// halcyon-hip's test code object: `tests/data/conformance.hip` built for gfx900.
const HSACO: &[u8] = include_bytes!("../../../backends/hip/tests/data/conformance-gfx900.hsaco");

#[test]
fn hip_code_objects_are_read_for_their_kernels_and_target() {
    // SAFETY: a complete code object.
    let image = unsafe { crate::hsaco::image(HSACO.as_ptr()) }.unwrap();
    assert_eq!(image.len(), HSACO.len(), "the headers reach the whole file");
    let mut names = crate::hsaco::kernel_names(image).unwrap();
    names.sort();
    assert_eq!(names, ["add_one_u32", "fail", "saxpy_f32"]);
    let mut other = HSACO.to_vec();
    other[0x30] = 0x3f; // gfx90a
    assert_eq!(crate::hsaco::kernel_names(&other).unwrap_err().0, 209);
    let mut relocatable = HSACO.to_vec();
    relocatable[0x10] = 1; // ET_REL
    assert_eq!(crate::hsaco::kernel_names(&relocatable).unwrap_err().0, 200);
    let not_elf = [0u8; 64];
    // SAFETY: 64 readable bytes.
    assert_eq!(
        unsafe { crate::hsaco::image(not_elf.as_ptr()) }
            .unwrap_err()
            .0,
        200
    );

    let _session = HipSession::new();
    let (mut module, mut function) = (null_mut(), null_mut());
    // SAFETY: a complete code object, NUL-terminated names, valid out-pointers.
    unsafe {
        assert_eq!(
            crate::hip::hipModuleLoadData(&mut module, HSACO.as_ptr().cast()),
            0
        );
        assert_eq!(
            crate::hip::hipModuleGetFunction(&mut function, module, c"saxpy_f32".as_ptr()),
            0
        );
        assert_eq!(
            crate::hip::hipModuleGetFunction(&mut function, module, c"missing".as_ptr()),
            500,
            "hipErrorNotFound"
        );
        assert_eq!(
            crate::hip::hipModuleLoadData(&mut function, other.as_ptr().cast()),
            209
        );
        assert_eq!(crate::hip::hipModuleUnload(module), 0);
    }
}

#[test]
fn hip_devices_keep_their_own_streams_events_and_memory() {
    use crate::hip::*;
    let session = HipSession::new();
    let (s0, e0) = (session.stream(), session.event());
    assert_eq!(hipSetDevice(1), 0);
    let (s1, e1, x1) = (session.stream(), session.event(), session.malloc(256));
    // SAFETY: live handles of this runtime, some combined across devices (the case under
    // test).
    unsafe {
        assert_eq!(hipEventRecord(e0, s1), 400, "hipErrorInvalidHandle");
        assert_eq!(hipMemsetD32Async(x1, 7, 64, s0), 1, "hipErrorInvalidValue");
        // Device 1's own work, waited for by device 0's stream (allowed across devices).
        assert_eq!(hipMemsetD32Async(x1, 7, 64, s1), 0);
        assert_eq!(hipEventRecord(e1, s1), 0);
        assert_eq!(hipStreamWaitEvent(s0, e1, 0), 0);
        assert_eq!(hipStreamSynchronize(s0), 0);
        assert_eq!(hipEventQuery(e1), 0);
    }
    let found = session.new_violations();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("an event of device 0 with a stream of device 1"));
    assert!(found[1].contains("which device 0 cannot reach"));
    // SAFETY: live handles, each destroyed once.
    unsafe {
        for code in [
            hipFree(x1),
            hipEventDestroy(e0),
            hipEventDestroy(e1),
            hipStreamDestroy(s0),
            hipStreamDestroy(s1),
        ] {
            assert_eq!(code, 0);
        }
    }
}

/// A released primary context stays current where it was (CUDA pops it from no stack), and
/// making it current again is allowed, as code giving back the context it found does; a call
/// that needs it then is the violation, and a handle that was never a context is one at once.
#[test]
fn a_released_context_can_be_made_current_but_not_used() {
    let mut session = Session::new();
    assert!(session.release().is_empty());
    let context = crate::driver::primary_context(0) as *mut c_void;
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
    // SAFETY: nothing current, as the next test expects to find it.
    assert_eq!(
        unsafe { cuCtxSetCurrent(null_mut()) },
        CUresult::CUDA_SUCCESS
    );
}
