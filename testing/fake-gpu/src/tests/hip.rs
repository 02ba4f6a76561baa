//! The HIP exports: HIP's own rules (a current device per thread, the event lock, pageable
//! copies, synchronising frees, callbacks, code objects) over the shared model.

use super::*;

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
        assert_eq!(
            // SAFETY: a valid out-pointer.
            unsafe { crate::hip::hipStreamCreateWithFlags(&mut s, 1) },
            0
        );
        s
    }

    fn event(&self) -> *mut c_void {
        let mut e = null_mut();
        assert_eq!(
            // SAFETY: a valid out-pointer.
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
        let d = crate::model::driver::driver();
        assert!(d.streams.is_empty() && d.events.is_empty() && d.modules.is_empty());
        drop(d);
        assert_eq!(
            crate::model::memory::memory().count(),
            0,
            "the test freed its memory"
        );
    }
}

/// Makes `s` wait at the gate (see [`gate`]) through `hipLaunchHostFunc`.
fn hip_gate(s: *mut c_void) {
    GATE.store(false, Ordering::SeqCst);
    assert_eq!(
        // SAFETY: a live stream; the function may be called with any pointer.
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
const HSACO: &[u8] = include_bytes!("../../../../backends/hip/tests/data/conformance-gfx900.hsaco");

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
    assert_eq!(
        // SAFETY: 64 readable bytes.
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

/// `hipEventElapsedTime` is the same model as `cuEventElapsedTime`, with HIP's numbers:
/// `hipErrorInvalidHandle` (400) for an event created with `hipEventDisableTiming` or never
/// recorded; between completed timing events, the signed milliseconds.
#[test]
fn hip_elapsed_time_refuses_events_without_timing() {
    let session = HipSession::new();
    let s = session.stream();
    let untimed = session.event(); // hipEventDisableTiming | hipEventBlockingSync
    let (mut start, mut end) = (null_mut(), null_mut());
    let mut ms = f32::NAN;
    let x = session.malloc(256);
    // SAFETY: live handles of this runtime; valid out-pointers.
    unsafe {
        assert_eq!(crate::hip::hipEventCreateWithFlags(&mut start, 0), 0);
        assert_eq!(crate::hip::hipEventCreateWithFlags(&mut end, 0x1), 0);
        assert_eq!(crate::hip::hipEventElapsedTime(&mut ms, start, end), 400);
        assert_eq!(crate::hip::hipEventRecord(start, s), 0);
        assert_eq!(crate::hip::hipMemsetD32Async(x, 7, 64, s), 0);
        assert_eq!(crate::hip::hipEventRecord(end, s), 0);
        assert_eq!(crate::hip::hipEventRecord(untimed, s), 0);
        assert_eq!(crate::hip::hipStreamSynchronize(s), 0);
        assert_eq!(crate::hip::hipEventElapsedTime(&mut ms, start, end), 0);
        assert!(ms >= 0.0, "{ms}");
        let mut back = f32::NAN;
        assert_eq!(crate::hip::hipEventElapsedTime(&mut back, end, start), 0);
        assert_eq!(back, -ms);
        assert_eq!(crate::hip::hipEventElapsedTime(&mut ms, untimed, end), 400);
        assert_eq!(
            crate::hip::hipEventElapsedTime(&mut ms, start, untimed),
            400
        );
        for e in [start, end, untimed] {
            assert_eq!(crate::hip::hipEventDestroy(e), 0);
        }
        assert_eq!(crate::hip::hipFree(x), 0);
        assert_eq!(crate::hip::hipStreamDestroy(s), 0);
    }
    assert!(session.new_violations().is_empty());
}
