//! The exported HIP runtime API: each `hip*` function halcyon-hip calls, with HIP's C
//! signature, on the same streams, events, memory and kernels as the CUDA exports
//! ([`crate::cuda`]). HIP's error numbers are CUDA's for every error the fake returns
//! (`hipErrorInvalidValue` = 1 = `CUDA_ERROR_INVALID_VALUE`, ..., `hipErrorNotReady` = 600),
//! so the model's `CUresult`s are returned as their numbers.
//!
//! Where HIP differs from CUDA, the fake follows HIP (hipamd 5.2 and ROCm/clr, as
//! halcyon-hip's docs cite them), and checks what HIP would not say:
//!
//! * **No context.** The current device is per thread (`hipSetDevice`); a call that creates
//!   something on it (a stream, an event, memory, a module) on a thread that never chose a
//!   device is a violation: it works on one GPU by luck. What a call does on a stream happens
//!   on the stream's device, whichever is current; an event recorded on another device's
//!   stream, a function or pool of another device, and another device's memory (no peer
//!   access) are violations.
//! * **An event's lock.** HIP serialises everything done to an event under the event's lock,
//!   and `hipEventSynchronize` holds it for its whole wait: a `hipEventQuery`,
//!   `hipEventRecord` or `hipStreamWaitEvent` of an event another thread is synchronising on
//!   (whose record has not completed) waits for the device, which halcyon's `StreamApi` forbids
//!   outside its synchronising calls. The fake takes the same lock, and such a call is a
//!   violation (then waits, as HIP does).
//! * **Pageable copies block.** `hipMemcpyAsync` with a host side in pageable memory (not
//!   within a `hipHostMalloc` or managed allocation) waits on the host for the stream in
//!   hipamd: a violation, then done synchronously.
//! * **Frees synchronise.** `hipFree` and `hipHostFree` wait for every stream of the device
//!   before freeing, as they do in hipamd and ROCm/clr.
//! * **Host functions.** Both `hipLaunchHostFunc` and `hipStreamAddCallback` (HIP 5.2's only
//!   kind) run on the stream's worker, where any HIP call is a violation; a callback is given
//!   `hipSuccess`.
//! * **Code objects.** `hipModuleLoadData` reads an AMDGPU code object's ELF symbol table for
//!   its kernels ([`crate::hsaco`]), or an offload bundle's entry for the device; the device
//!   is a gfx900, and a code object (or a bundle without one) for another target is
//!   `hipErrorNoBinaryForGpu`. The kernels it runs are the CUDA exports' natives,
//!   by name and with their parameters (the argument metadata is not read).
//! * **No graphs.** The capture and graph calls are not exported (halcyon-hip does not offer
//!   graphs), so a caller finds them missing, as on a runtime without them.
//! * **Faults.** A device fault (only a use of freed memory can cause one here) is reported
//!   by later waits, as the CUDA side's sticky error; ROCm would abort the process instead.
//!
//! Every pointer a caller passes is trusted as HIP trusts it (valid for what the call writes
//! or reads), except that null out-pointers are `hipErrorInvalidValue`.

#![allow(non_snake_case, non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, TryLockError};

use cudarc::driver::sys::CUresult;

use crate::contract::{
    check_same_device, current_device, enter_hip, lock, set_hip_device, violation, HipNeeds, Ret,
};
use crate::driver::{device_count, driver, next_handle};
use crate::exports::{
    as_ptr, destroy_pool, enqueue_launch, event, find_function, handle, mapped_address,
    memset_async, pool, put, reachable, register_module, stream, unload_module,
};
use crate::hsaco;
use crate::kernels::Entry;
use crate::memory::{memory, Kind, DEVICE_BYTES};
use crate::stream::{Event, Op, Source, Stream};

use CUresult::{CUDA_ERROR_INVALID_VALUE as INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED};

/// `hipError_t`.
type hipError_t = c_int;

/// The HIP version the fake reports (`hipRuntimeGetVersion`, `hipDriverGetVersion`): 6.2.0.
const HIP_VERSION: c_int = 60_200_000;
/// The device's name.
const DEVICE_NAME: &str = "halcyon fake HIP device (host threads, gfx900)";

/// `hipMemcpyKind`.
const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;
const DEVICE_TO_DEVICE: c_int = 3;
const DEFAULT: c_int = 4;

/// `hipHostMallocMapped`.
const HOST_MALLOC_MAPPED: c_uint = 0x2;

/// Runs a call: the contract's checks, then `body`; the result as a `hipError_t`.
fn call(name: &'static str, needs: HipNeeds, body: impl FnOnce() -> Ret) -> hipError_t {
    match enter_hip(name, needs).and_then(|()| body()) {
        Ok(()) => 0,
        Err(code) => code as hipError_t,
    }
}

/// Checks a device ordinal: the device's index.
fn device(ordinal: c_int) -> Result<u32, CUresult> {
    u32::try_from(ordinal)
        .ok()
        .filter(|&d| d < device_count())
        .ok_or(CUresult::CUDA_ERROR_INVALID_DEVICE)
}

// ------------------------------------------------------------------ errors and versions

/// The codes the fake returns, with their names and descriptions.
const ERRORS: &[(c_int, &CStr, &CStr)] = &[
    (0, c"hipSuccess", c"no error"),
    (1, c"hipErrorInvalidValue", c"invalid argument"),
    (2, c"hipErrorOutOfMemory", c"out of memory"),
    (3, c"hipErrorNotInitialized", c"initialization error"),
    (101, c"hipErrorInvalidDevice", c"invalid device ordinal"),
    (
        200,
        c"hipErrorInvalidImage",
        c"device kernel image is invalid",
    ),
    (
        209,
        c"hipErrorNoBinaryForGpu",
        c"no kernel image is available for execution on the device",
    ),
    (400, c"hipErrorInvalidHandle", c"invalid resource handle"),
    (
        401,
        c"hipErrorIllegalState",
        c"the operation cannot be performed in the present state",
    ),
    (500, c"hipErrorNotFound", c"named symbol not found"),
    (600, c"hipErrorNotReady", c"device not ready"),
    (
        700,
        c"hipErrorIllegalAddress",
        c"an illegal memory access was encountered",
    ),
    (719, c"hipErrorLaunchFailure", c"unspecified launch failure"),
    (800, c"hipErrorNotPermitted", c"operation not permitted"),
    (801, c"hipErrorNotSupported", c"operation not supported"),
    (999, c"hipErrorUnknown", c"unknown error"),
];

fn error_entry(code: hipError_t) -> (c_int, &'static CStr, &'static CStr) {
    ERRORS
        .iter()
        .copied()
        .find(|(c, _, _)| *c == code)
        .unwrap_or(ERRORS[ERRORS.len() - 1])
}

/// `hipGetErrorName`: the code's name (`hipErrorUnknown` for a code the fake does not know).
#[no_mangle]
pub extern "C" fn hipGetErrorName(code: hipError_t) -> *const c_char {
    error_entry(code).1.as_ptr()
}

/// `hipGetErrorString`: the code's description.
#[no_mangle]
pub extern "C" fn hipGetErrorString(code: hipError_t) -> *const c_char {
    error_entry(code).2.as_ptr()
}

/// `hipDriverGetVersion`: [`HIP_VERSION`].
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDriverGetVersion(version: *mut c_int) -> hipError_t {
    call("hipDriverGetVersion", HipNeeds::Nothing, || {
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(version, HIP_VERSION) }
    })
}

/// `hipRuntimeGetVersion`: [`HIP_VERSION`].
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> hipError_t {
    call("hipRuntimeGetVersion", HipNeeds::Nothing, || {
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(version, HIP_VERSION) }
    })
}

/// `hipInit`: flags must be 0.
#[no_mangle]
pub extern "C" fn hipInit(flags: c_uint) -> hipError_t {
    call("hipInit", HipNeeds::Nothing, || {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        driver().initialized = true;
        Ok(())
    })
}

// ------------------------------------------------------------------ devices

/// `hipGetDeviceCount`: [`device_count`] devices.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> hipError_t {
    call("hipGetDeviceCount", HipNeeds::Nothing, || {
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(count, device_count() as c_int) }
    })
}

/// `hipSetDevice`: the device becomes current on this thread.
#[no_mangle]
pub extern "C" fn hipSetDevice(ordinal: c_int) -> hipError_t {
    call("hipSetDevice", HipNeeds::Nothing, || {
        set_hip_device(device(ordinal)?);
        Ok(())
    })
}

/// Each device's flags (`hipSetDeviceFlags`), by ordinal; 0 is `hipDeviceScheduleAuto`.
static DEVICE_FLAGS: [std::sync::atomic::AtomicU32; 8] =
    [const { std::sync::atomic::AtomicU32::new(0) }; 8];

/// The flags `hipSetDeviceFlags` accepts: the scheduling mask (7), `hipDeviceMapHost` (8),
/// `hipDeviceLmemResizeToMax` (0x10).
const DEVICE_FLAGS_SUPPORTED: c_uint = 0x7 | 0x8 | 0x10;

/// `hipSetDeviceFlags`: the flags of the thread's current device (which the runtime accepts
/// after the device was used, as hipamd and clr do); recorded, with no effect on the fake's
/// waits. Unknown bits are `hipErrorInvalidValue`.
#[no_mangle]
pub extern "C" fn hipSetDeviceFlags(flags: c_uint) -> hipError_t {
    call("hipSetDeviceFlags", HipNeeds::Nothing, || {
        if flags & !DEVICE_FLAGS_SUPPORTED != 0 {
            return Err(INVALID_VALUE);
        }
        DEVICE_FLAGS[current_device() as usize].store(flags, Ordering::SeqCst);
        Ok(())
    })
}

/// `hipGetDeviceFlags`: the flags of the thread's current device.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceFlags(out: *mut c_uint) -> hipError_t {
    call("hipGetDeviceFlags", HipNeeds::Nothing, || {
        let flags = DEVICE_FLAGS[current_device() as usize].load(Ordering::SeqCst);
        // SAFETY: HIP's contract: valid for one unsigned int.
        unsafe { put(out, flags) }
    })
}

/// `hipGetDevice`: the device current on this thread (device 0 before any `hipSetDevice`, as
/// in HIP). A thread that asked knows which device its calls act on, so from then on it counts
/// as having chosen it (the contract check that device calls follow a `hipSetDevice` is about
/// threads that never looked).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipGetDevice(out: *mut c_int) -> hipError_t {
    call("hipGetDevice", HipNeeds::Nothing, || {
        let device = current_device();
        set_hip_device(device);
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(out, device as c_int) }
    })
}

/// `hipDeviceGet`: the device of an ordinal (its ordinal).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGet(out: *mut c_int, ordinal: c_int) -> hipError_t {
    call("hipDeviceGet", HipNeeds::Nothing, || {
        device(ordinal)?;
        // SAFETY: HIP's contract: valid for one hipDevice_t.
        unsafe { put(out, ordinal) }
    })
}

/// `hipDeviceGetName`: [`DEVICE_NAME`], truncated to `len - 1` bytes and NUL-terminated.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> hipError_t {
    call("hipDeviceGetName", HipNeeds::Nothing, || {
        device(dev)?;
        if name.is_null() || len <= 0 {
            return Err(INVALID_VALUE);
        }
        let bytes = DEVICE_NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: HIP's contract: `name` is valid for `len` bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

/// `hipDeviceGetAttribute`: a gfx900 (compute 9.0) with 4 compute units, wavefronts of 64,
/// managed memory and memory pools; 0 for attributes it does not model.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    dev: c_int,
) -> hipError_t {
    call("hipDeviceGetAttribute", HipNeeds::Nothing, || {
        device(dev)?;
        let answer = match attribute {
            23 => 9,          // ComputeCapabilityMajor
            61 => 0,          // ComputeCapabilityMinor
            24 => 1,          // ManagedMemory
            29 => i32::MAX,   // MaxGridDimX
            30 | 31 => 65536, // MaxGridDimY, MaxGridDimZ (as ROCm 5.7 on)
            56 => 1024,       // MaxThreadsPerBlock
            63 => 4,          // MultiprocessorCount
            74 => 64 << 10,   // MaxSharedMemoryPerBlock
            87 => 64,         // WarpSize
            88 => 1,          // MemoryPoolsSupported
            _ => 0,
        };
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(value, answer) }
    })
}

/// `hipDeviceTotalMem`: [`DEVICE_BYTES`].
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceTotalMem(bytes: *mut usize, dev: c_int) -> hipError_t {
    call("hipDeviceTotalMem", HipNeeds::Nothing, || {
        device(dev)?;
        // SAFETY: HIP's contract: valid for one size_t.
        unsafe { put(bytes, DEVICE_BYTES) }
    })
}

// ------------------------------------------------------------------ streams

/// `hipStreamCreateWithFlags`: a stream with its worker thread (`hipStreamDefault` or
/// `hipStreamNonBlocking`).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamCreateWithFlags(
    out: *mut *mut c_void,
    flags: c_uint,
) -> hipError_t {
    call("hipStreamCreateWithFlags", HipNeeds::Device, || {
        if out.is_null() || flags > 1 {
            return Err(INVALID_VALUE);
        }
        let h = next_handle();
        let dev = current_device();
        let stream = Stream::spawn(h, dev)?;
        let mut driver = driver();
        driver.streams.insert(h, stream);
        driver.adopt(h, dev);
        drop(driver);
        // SAFETY: HIP's contract: valid for one hipStream_t.
        unsafe { put(out, as_ptr(h)) }
    })
}

/// `hipStreamDestroy`: queued work still completes; the handle is dead at once.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamDestroy(s: *mut c_void) -> hipError_t {
    call("hipStreamDestroy", HipNeeds::Nothing, || {
        let stream =
            driver().remove(|d| &mut d.streams, handle(s), "stream", "hipStreamDestroy")?;
        stream.destroy();
        Ok(())
    })
}

/// `hipStreamSynchronize`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamSynchronize(s: *mut c_void) -> hipError_t {
    call("hipStreamSynchronize", HipNeeds::Nothing, || {
        stream(handle(s), "hipStreamSynchronize")?.synchronize()
    })
}

/// `hipStreamQuery`: whether everything enqueued completed (`hipErrorNotReady` if not).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamQuery(s: *mut c_void) -> hipError_t {
    call("hipStreamQuery", HipNeeds::Nothing, || {
        if stream(handle(s), "hipStreamQuery")?.is_idle() {
            Ok(())
        } else {
            Err(CUresult::CUDA_ERROR_NOT_READY)
        }
    })
}

/// `hipStreamWaitEvent`: later work on the stream waits for the event's latest record (under
/// the event's lock).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamWaitEvent(
    s: *mut c_void,
    e: *mut c_void,
    flags: c_uint,
) -> hipError_t {
    call("hipStreamWaitEvent", HipNeeds::Nothing, || {
        let stream = stream(handle(s), "hipStreamWaitEvent")?;
        let event = event(handle(e), "hipStreamWaitEvent")?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        let _held = event_lock(&event, handle(e), "hipStreamWaitEvent");
        stream.wait_event(event.clone())
    })
}

/// `hipLaunchHostFunc`: runs `function(data)` on the stream's worker when it gets there.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipLaunchHostFunc(
    s: *mut c_void,
    function: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
) -> hipError_t {
    call("hipLaunchHostFunc", HipNeeds::Nothing, || {
        let stream = stream(handle(s), "hipLaunchHostFunc")?;
        let func = function.ok_or(INVALID_VALUE)?;
        stream.enqueue(Op::Host {
            func,
            data: data as usize,
        });
        Ok(())
    })
}

/// `hipStreamAddCallback`: runs `callback(stream, hipSuccess, data)` on the stream's worker
/// when it gets there; flags must be 0.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamAddCallback(
    s: *mut c_void,
    callback: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void)>,
    data: *mut c_void,
    flags: c_uint,
) -> hipError_t {
    call("hipStreamAddCallback", HipNeeds::Nothing, || {
        let stream = stream(handle(s), "hipStreamAddCallback")?;
        let func = callback.ok_or(INVALID_VALUE)?;
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        stream.enqueue(Op::Callback {
            func,
            data: data as usize,
        });
        Ok(())
    })
}

// ------------------------------------------------------------------ events

/// Takes `event`'s HIP lock for a call other than `hipEventSynchronize`: if a synchronising
/// thread holds it and the record it waits for has not completed, the call would wait for the
/// device, a violation (reported, then waited for, as HIP would).
fn event_lock<'a>(event: &'a Event, h: u64, call: &str) -> MutexGuard<'a, ()> {
    match event.hip_lock.try_lock() {
        Ok(held) => held,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => {
            let generation = event.hip_synchronizing.load(Ordering::Acquire);
            if !event.is_done(generation) {
                violation(format!(
                    "{call} of event {h:#x} while another thread is blocked in \
                     hipEventSynchronize on it: HIP holds an event's lock for the whole wait, \
                     so this call waits for the device"
                ));
            }
            lock(&event.hip_lock)
        }
    }
}

/// `hipEventCreateWithFlags`: a never-recorded event (complete); `hipEventDefault`,
/// `hipEventBlockingSync`, `hipEventDisableTiming` and `hipEventInterprocess` flags.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipEventCreateWithFlags(
    out: *mut *mut c_void,
    flags: c_uint,
) -> hipError_t {
    call("hipEventCreateWithFlags", HipNeeds::Device, || {
        if out.is_null() || flags & !0x7 != 0 {
            return Err(INVALID_VALUE);
        }
        let h = next_handle();
        let dev = current_device();
        let mut driver = driver();
        driver.events.insert(h, Event::new(dev));
        driver.adopt(h, dev);
        drop(driver);
        // SAFETY: HIP's contract: valid for one hipEvent_t.
        unsafe { put(out, as_ptr(h)) }
    })
}

/// `hipEventDestroy`: records in flight still complete; the handle is dead at once.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipEventDestroy(e: *mut c_void) -> hipError_t {
    call("hipEventDestroy", HipNeeds::Nothing, || {
        driver()
            .remove(|d| &mut d.events, handle(e), "event", "hipEventDestroy")
            .map(drop)
    })
}

/// `hipEventRecord`: a new record, completed when the stream gets to it (under the event's
/// lock). The event and the stream must be of one device.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipEventRecord(e: *mut c_void, s: *mut c_void) -> hipError_t {
    call("hipEventRecord", HipNeeds::Nothing, || {
        let event = event(handle(e), "hipEventRecord")?;
        let stream = stream(handle(s), "hipEventRecord")?;
        check_same_device(
            "hipEventRecord",
            ("an event", event.device),
            ("a stream", stream.device),
        )?;
        let _held = event_lock(&event, handle(e), "hipEventRecord");
        stream.record(event.clone());
        Ok(())
    })
}

/// `hipEventQuery`: whether the latest record completed (`hipErrorNotReady` if not; under the
/// event's lock).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipEventQuery(e: *mut c_void) -> hipError_t {
    call("hipEventQuery", HipNeeds::Nothing, || {
        let event = event(handle(e), "hipEventQuery")?;
        let _held = event_lock(&event, handle(e), "hipEventQuery");
        if event.query() {
            Ok(())
        } else {
            Err(CUresult::CUDA_ERROR_NOT_READY)
        }
    })
}

/// `hipEventSynchronize`: blocks until the latest record (when called) completed, holding the
/// event's lock all the while.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipEventSynchronize(e: *mut c_void) -> hipError_t {
    call("hipEventSynchronize", HipNeeds::Nothing, || {
        let event = event(handle(e), "hipEventSynchronize")?;
        let _held = lock(&event.hip_lock);
        let (generation, _) = event.latest();
        event.hip_synchronizing.store(generation, Ordering::Release);
        event.wait(generation)
    })
}

// ------------------------------------------------------------------ memory

/// Allocates `bytes` of `kind` on device `dev` into `out`: zero bytes are a null pointer and
/// success, as in HIP.
fn allocate(out: *mut *mut c_void, bytes: usize, kind: Kind, dev: u32) -> Ret {
    if out.is_null() {
        return Err(INVALID_VALUE);
    }
    if bytes == 0 {
        // SAFETY: non-null; HIP's contract: valid for one pointer.
        return unsafe { put(out, std::ptr::null_mut()) };
    }
    let ptr = memory().allocate(bytes, kind, dev)?;
    // SAFETY: non-null; HIP's contract: valid for one pointer.
    unsafe { put(out, as_ptr(ptr)) }
}

/// Waits for every stream's work enqueued so far, as `hipFree` and `hipHostFree` do.
fn synchronize_all_streams() {
    let streams: Vec<Arc<Stream>> = driver().streams.values().cloned().collect();
    for stream in streams {
        let _ = stream.synchronize();
    }
}

/// `hipMalloc`: device memory (zeroed host memory, 256-aligned).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMalloc(out: *mut *mut c_void, bytes: usize) -> hipError_t {
    call("hipMalloc", HipNeeds::Device, || {
        allocate(out, bytes, Kind::Device, current_device())
    })
}

/// `hipMallocManaged`: managed memory; flags `hipMemAttachGlobal` or `hipMemAttachHost`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMallocManaged(
    out: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> hipError_t {
    call("hipMallocManaged", HipNeeds::Device, || {
        if flags != 1 && flags != 2 {
            return Err(INVALID_VALUE);
        }
        allocate(out, bytes, Kind::Managed, current_device())
    })
}

/// `hipHostMalloc`: pinned host memory (mapped at the same address with
/// `hipHostMallocMapped`).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipHostMalloc(
    out: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> hipError_t {
    call("hipHostMalloc", HipNeeds::Device, || {
        let mapped = flags & HOST_MALLOC_MAPPED != 0;
        allocate(out, bytes, Kind::Pinned { mapped }, current_device())
    })
}

/// `hipHostGetDevicePointer`: the same address, for mapped pinned memory (unless the test
/// made them differ: see [`crate::exports::mapped_address`]); flags must be 0.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipHostGetDevicePointer(
    out: *mut *mut c_void,
    host: *mut c_void,
    flags: c_uint,
) -> hipError_t {
    call("hipHostGetDevicePointer", HipNeeds::Nothing, || {
        if flags != 0 {
            return Err(INVALID_VALUE);
        }
        match memory().kind_of(handle(host), 1) {
            Some(Kind::Pinned { mapped: true }) => {}
            _ => return Err(INVALID_VALUE),
        }
        // SAFETY: HIP's contract: valid for one pointer.
        unsafe { put(out, as_ptr(mapped_address(handle(host)))) }
    })
}

/// `hipFree`: device, managed or stream-ordered memory, by its base, once every stream's work
/// so far completed (as hipamd does). Null is a no-op.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipFree(ptr: *mut c_void) -> hipError_t {
    call("hipFree", HipNeeds::Nothing, || {
        if ptr.is_null() {
            return Ok(());
        }
        synchronize_all_streams();
        memory()
            .free(
                handle(ptr),
                |k| !matches!(k, Kind::Pinned { .. }),
                "hipFree",
            )
            .map(drop)
    })
}

/// `hipHostFree`: pinned memory, by its base, once every stream's work so far completed (as
/// hipamd does). Null is a no-op.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipHostFree(ptr: *mut c_void) -> hipError_t {
    call("hipHostFree", HipNeeds::Nothing, || {
        if ptr.is_null() {
            return Ok(());
        }
        synchronize_all_streams();
        memory()
            .free(
                handle(ptr),
                |k| matches!(k, Kind::Pinned { .. }),
                "hipHostFree",
            )
            .map(drop)
    })
}

/// Whether `len` bytes at `ptr` lie within one allocation of the fake's (not pageable host
/// memory).
fn allocated(ptr: u64, len: usize) -> bool {
    memory().kind_of(ptr, len).is_some()
}

/// `hipMemcpyAsync`: host to device, device to host, device to device, or inferred
/// (`hipMemcpyDefault`). A host side outside the fake's allocations (pageable memory) is a
/// violation: hipamd waits for the stream on the host there. The copy is then done before the
/// call returns, as hipamd does.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: c_int,
    s: *mut c_void,
) -> hipError_t {
    call("hipMemcpyAsync", HipNeeds::Nothing, || {
        let stream = stream(handle(s), "hipMemcpyAsync")?;
        let (to, from) = (handle(dst), src as usize as u64);
        let (dst_ok, src_ok) = (allocated(to, bytes), allocated(from, bytes));
        let pageable = match kind {
            HOST_TO_DEVICE => {
                reachable(to, bytes, stream.device, "hipMemcpyAsync")?;
                !src_ok
            }
            DEVICE_TO_HOST => {
                reachable(from, bytes, stream.device, "hipMemcpyAsync")?;
                !dst_ok
            }
            DEVICE_TO_DEVICE => {
                reachable(to, bytes, stream.device, "hipMemcpyAsync")?;
                reachable(from, bytes, stream.device, "hipMemcpyAsync")?;
                false
            }
            DEFAULT => {
                for (ptr, ok) in [(to, dst_ok), (from, src_ok)] {
                    if ok {
                        reachable(ptr, bytes, stream.device, "hipMemcpyAsync")?;
                    }
                }
                !(src_ok && dst_ok)
            }
            _ => return Err(CUDA_ERROR_NOT_SUPPORTED),
        };
        if bytes == 0 {
            return Ok(());
        }
        if pageable {
            violation(format!(
                "hipMemcpyAsync({to:#x} <- {from:#x}, {bytes} bytes, kind {kind}) on stream \
                 {:#x} with a host side in pageable memory: hipamd waits on the host for the \
                 stream there (copy through pinned memory instead)",
                handle(s)
            ));
            let position = stream.enqueue(Op::Copy {
                dst: to,
                dst_checked: dst_ok,
                src: if src_ok {
                    Source::Checked(from)
                } else {
                    // SAFETY: HIP's contract: `src` is valid for `bytes` now.
                    Source::Bytes(Arc::new(unsafe {
                        std::slice::from_raw_parts(src.cast::<u8>(), bytes).to_vec()
                    }))
                },
                len: bytes,
                call: "hipMemcpyAsync",
            });
            if let Some(position) = position {
                stream.wait_for(position);
            }
            return Ok(());
        }
        stream.enqueue(Op::Copy {
            dst: to,
            dst_checked: true,
            src: Source::Checked(from),
            len: bytes,
            call: "hipMemcpyAsync",
        });
        Ok(())
    })
}

/// `hipMemsetD8Async`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemsetD8Async(
    dst: *mut c_void,
    value: u8,
    count: usize,
    s: *mut c_void,
) -> hipError_t {
    call("hipMemsetD8Async", HipNeeds::Nothing, || {
        let stream = stream(handle(s), "hipMemsetD8Async")?;
        memset_async(
            handle(dst),
            u32::from(value),
            1,
            count,
            &stream,
            "hipMemsetD8Async",
        )
    })
}

/// `hipMemsetD16Async` (the address 2-aligned).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemsetD16Async(
    dst: *mut c_void,
    value: u16,
    count: usize,
    s: *mut c_void,
) -> hipError_t {
    call("hipMemsetD16Async", HipNeeds::Nothing, || {
        let stream = stream(handle(s), "hipMemsetD16Async")?;
        memset_async(
            handle(dst),
            u32::from(value),
            2,
            count,
            &stream,
            "hipMemsetD16Async",
        )
    })
}

/// `hipMemsetD32Async` (the address 4-aligned).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemsetD32Async(
    dst: *mut c_void,
    value: c_int,
    count: usize,
    s: *mut c_void,
) -> hipError_t {
    call("hipMemsetD32Async", HipNeeds::Nothing, || {
        let stream = stream(handle(s), "hipMemsetD32Async")?;
        memset_async(
            handle(dst),
            value as u32,
            4,
            count,
            &stream,
            "hipMemsetD32Async",
        )
    })
}

// ------------------------------------------------------------------ memory pools

/// `hipMemPoolCreate`: pinned device memory on the device its properties' location names
/// (`hipMemAllocationTypePinned`, `hipMemLocationTypeDevice`); allocations from it are
/// ordinary stream-ordered ones.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolCreate(
    out: *mut *mut c_void,
    props: *const c_int,
) -> hipError_t {
    call("hipMemPoolCreate", HipNeeds::Nothing, || {
        if props.is_null() || out.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: HIP's contract: `props` points at a hipMemPoolProps, whose first four ints
        // are the allocation type, the handle types and the location (type, id).
        let [alloc_type, _handles, location_type, location_id] =
            unsafe { std::ptr::read(props.cast::<[c_int; 4]>()) };
        if alloc_type != 1 || location_type != 1 {
            return Err(INVALID_VALUE);
        }
        let dev = device(location_id)?;
        let h = next_handle();
        let mut driver = driver();
        driver.pools.insert(h);
        driver.adopt(h, dev);
        drop(driver);
        // SAFETY: HIP's contract: valid for one hipMemPool_t.
        unsafe { put(out, as_ptr(h)) }
    })
}

/// `hipMemPoolDestroy`: allocations still outstanding stay valid.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolDestroy(p: *mut c_void) -> hipError_t {
    call("hipMemPoolDestroy", HipNeeds::Nothing, || {
        destroy_pool(p, "hipMemPoolDestroy")
    })
}

/// `hipMemPoolSetAttribute`: accepted for a live pool (the fake keeps nothing).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolSetAttribute(
    p: *mut c_void,
    _attribute: c_int,
    value: *mut c_void,
) -> hipError_t {
    call("hipMemPoolSetAttribute", HipNeeds::Nothing, || {
        pool(p, "hipMemPoolSetAttribute")?;
        if value.is_null() {
            return Err(INVALID_VALUE);
        }
        Ok(())
    })
}

/// `hipMemPoolTrimTo`: nothing to trim (freed memory goes back at once).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMemPoolTrimTo(p: *mut c_void, _keep: usize) -> hipError_t {
    call("hipMemPoolTrimTo", HipNeeds::Nothing, || {
        pool(p, "hipMemPoolTrimTo").map(drop)
    })
}

/// `hipMallocAsync`: from the stream's device's default pool, usable at once.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMallocAsync(
    out: *mut *mut c_void,
    bytes: usize,
    s: *mut c_void,
) -> hipError_t {
    call("hipMallocAsync", HipNeeds::Nothing, || {
        let stream = stream(handle(s), "hipMallocAsync")?;
        allocate(out, bytes, Kind::Pool(0), stream.device)
    })
}

/// `hipMallocFromPoolAsync`: from `pool` (of the stream's device), usable at once.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipMallocFromPoolAsync(
    out: *mut *mut c_void,
    bytes: usize,
    p: *mut c_void,
    s: *mut c_void,
) -> hipError_t {
    call("hipMallocFromPoolAsync", HipNeeds::Nothing, || {
        let pool_device = pool(p, "hipMallocFromPoolAsync")?;
        let stream = stream(handle(s), "hipMallocFromPoolAsync")?;
        check_same_device(
            "hipMallocFromPoolAsync",
            ("a pool", pool_device),
            ("a stream", stream.device),
        )?;
        allocate(out, bytes, Kind::Pool(handle(p)), stream.device)
    })
}

/// `hipFreeAsync`: frees a stream-ordered allocation when the stream gets there.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipFreeAsync(ptr: *mut c_void, s: *mut c_void) -> hipError_t {
    call("hipFreeAsync", HipNeeds::Nothing, || {
        if s.is_null() {
            // HIP allows the null stream here, and the HIP backend frees pool memory outside
            // stream order that way once no work can use it. halcyon enqueues nothing else on
            // the null stream, so the free happens at once.
            return memory()
                .free(handle(ptr), |k| matches!(k, Kind::Pool(_)), "hipFreeAsync")
                .map(drop)
                .map_err(|_| INVALID_VALUE);
        }
        let stream = stream(handle(s), "hipFreeAsync")?;
        if !memory().is_base(handle(ptr), |k| matches!(k, Kind::Pool(_))) {
            return Err(INVALID_VALUE);
        }
        stream.enqueue(Op::FreeAsync {
            ptr: handle(ptr),
            call: "hipFreeAsync",
        });
        Ok(())
    })
}

// ------------------------------------------------------------------ modules and kernels

/// `hipModuleLoadData`: an AMDGPU code object for gfx900, or an offload bundle holding one,
/// read for its kernels (see [`crate::hsaco`]; why one is refused is said on stderr).
///
/// # Safety
/// HIP's contract for the call: `image` is a complete code object or offload bundle.
#[no_mangle]
pub unsafe extern "C" fn hipModuleLoadData(
    out: *mut *mut c_void,
    image: *const c_void,
) -> hipError_t {
    call("hipModuleLoadData", HipNeeds::Device, || {
        if image.is_null() || out.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: HIP's contract: a complete code object or offload bundle.
        let names = unsafe { hsaco::code_object(image.cast()) }.and_then(hsaco::kernel_names);
        let names = names.map_err(|(code, why)| {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("halcyon-fake-gpu: hipModuleLoadData: {why}\n").as_bytes(),
            );
            // The refusals are hipErrorInvalidImage (200) and hipErrorNoBinaryForGpu (209).
            if code == 209 {
                CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
            } else {
                CUresult::CUDA_ERROR_INVALID_IMAGE
            }
        })?;
        let entries: Vec<Entry> = names.iter().map(|name| Entry::by_name(name)).collect();
        let module = register_module(&entries, current_device());
        // SAFETY: HIP's contract: valid for one hipModule_t.
        unsafe { put(out, as_ptr(module)) }
    })
}

/// `hipModuleUnload`: the module's functions die with it; launches still queued must not run
/// (a violation when they do).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipModuleUnload(m: *mut c_void) -> hipError_t {
    call("hipModuleUnload", HipNeeds::Nothing, || {
        unload_module(handle(m), "hipModuleUnload")
    })
}

/// `hipModuleGetFunction`: `hipErrorNotFound` for a name the module lacks.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipModuleGetFunction(
    out: *mut *mut c_void,
    m: *mut c_void,
    name: *const c_char,
) -> hipError_t {
    call("hipModuleGetFunction", HipNeeds::Nothing, || {
        if name.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: HIP's contract: `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let function = find_function(handle(m), &name, "hipModuleGetFunction")?;
        // SAFETY: HIP's contract: valid for one hipFunction_t.
        unsafe { put(out, as_ptr(function)) }
    })
}

/// `hipModuleLaunchKernel`: the grid in blocks (as CUDA's), read each parameter's value now
/// through `kernelParams` and run the kernel natively when the stream gets there. Kernels the
/// fake cannot run, and `extra`, are `hipErrorNotSupported`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    f: *mut c_void,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_memory_bytes: c_uint,
    s: *mut c_void,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> hipError_t {
    call("hipModuleLaunchKernel", HipNeeds::Nothing, || {
        let kernel = driver().find(
            |d| &d.functions,
            handle(f),
            "function",
            "hipModuleLaunchKernel",
        )?;
        let stream = stream(handle(s), "hipModuleLaunchKernel")?;
        let grid = [grid_x, grid_y, grid_z];
        let block = [block_x, block_y, block_z];
        let threads = u64::from(block_x) * u64::from(block_y) * u64::from(block_z);
        if grid.contains(&0)
            || block.contains(&0)
            || threads > 1024
            || grid_x > i32::MAX as u32
            || grid_y > 65536
            || grid_z > 65536
            || shared_memory_bytes > 64 << 10
        {
            return Err(INVALID_VALUE);
        }
        if !extra.is_null() {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        // SAFETY: HIP's contract for `kernelParams`.
        unsafe {
            enqueue_launch(
                "hipModuleLaunchKernel",
                &kernel,
                &stream,
                grid,
                block,
                shared_memory_bytes,
                kernel_params,
            )
        }
    })
}
