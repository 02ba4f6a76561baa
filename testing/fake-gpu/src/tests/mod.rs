//! The fake's own checks: each rule it enforces catches a caller that breaks it, and what it
//! models (streams, events, graphs, faults) behaves as CUDA documents. Violations are recorded
//! here, not fatal; tests run one at a time (the driver is the process's).

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

use cudarc::driver::sys::CUresult;

use crate::cuda::*;
use crate::model::contract::{set_record_only, violations};

mod contract;
mod devices;
mod hip;
mod nccl;
mod peer;
mod streams;

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
    assert_eq!(
        // SAFETY: a live stream; the function may be called with any pointer.
        unsafe { cuLaunchHostFunc(s, Some(wait_for_gate), null_mut()) },
        CUresult::CUDA_SUCCESS
    );
}

fn open_gate() {
    GATE.store(true, Ordering::SeqCst);
}

fn alloc(bytes: usize) -> u64 {
    let mut p = 0;
    assert_eq!(
        // SAFETY: a valid out-pointer.
        unsafe { cuMemAlloc_v2(&mut p, bytes) },
        CUresult::CUDA_SUCCESS
    );
    p
}

fn read_u32s(src: u64, n: usize) -> Vec<u32> {
    let mut out = vec![0u32; n];
    assert_eq!(
        // SAFETY: `out` holds `n` u32s.
        unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, 4 * n) },
        CUresult::CUDA_SUCCESS
    );
    out
}

/// Makes device `device`'s primary context current on this thread (retained by the caller).
fn make_current(device: u32) {
    let context = crate::model::driver::primary_context(device) as *mut c_void;
    // SAFETY: a primary context the caller retained.
    assert_eq!(unsafe { cuCtxSetCurrent(context) }, CUresult::CUDA_SUCCESS);
}
