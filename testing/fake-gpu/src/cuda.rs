//! The exported CUDA driver API: each `cu*` function with CUDA's C signature (enum parameters as
//! their numbers, so no value a caller passes is an invalid Rust enum), translated onto the
//! fake's streams, events, memory and modules. Every call starts with the contract's checks
//! ([`crate::contract::enter`]).
//!
//! Every pointer a caller passes is trusted as CUDA trusts it (valid for what the call writes
//! or reads), except that null out-pointers are `CUDA_ERROR_INVALID_VALUE`.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};

use cudarc::driver::sys::{
    CUdevice, CUdevice_attribute as Attr, CUdeviceptr, CUhostFn, CUjit_option, CUpointer_attribute,
    CUresult, CUstreamCaptureMode, CUstreamCaptureStatus, CU_MEMHOSTALLOC_DEVICEMAP,
};

use crate::contract::{
    check_current, check_same_device, current_context, current_device, enter, set_current, sticky,
    violation, Needs, Ret,
};
use crate::driver::{
    context_device, device_count, driver, next_handle, primary_context, CAPTURES_INVALIDATED,
    GRAPH_LAUNCHES,
};
use crate::kernels::{parse_ptx, Entry, DEFAULT_DYNAMIC_SHARED, MAX_SHARED_OPTIN};
use crate::memory::{memory, Kind, DEVICE_BYTES};
use crate::stream::{Event, Op, Source, Stream};
use crate::{cubin, hsaco};

/// The CUDA version the fake reports (`cuDriverGetVersion`).
pub(crate) const DRIVER_VERSION: c_int = 13000;
/// The device's name.
const DEVICE_NAME: &str = "halcyon fake CUDA device (host threads)";

use CUresult::{
    CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, CUDA_SUCCESS,
};

use crate::exports::{
    as_ptr, destroy_pool, enqueue_launch, event, find_function, handle, mapped_address,
    memset_async, pool, put, reachable, register_module, stream, unload_module,
};

/// Runs a call: the contract's checks, then `body`.
/// Calls that release something ([`Needs::ContextEvenFaulted`]) do so after a fault too, and
/// then report the fault, as CUDA reports an earlier asynchronous error.
fn call(name: &'static str, needs: Needs, body: impl FnOnce() -> Ret) -> CUresult {
    match enter(name, needs).and_then(|()| body()) {
        Ok(()) if needs == Needs::ContextEvenFaulted => {
            sticky(current_device()).unwrap_or(CUDA_SUCCESS)
        }
        Ok(()) => CUDA_SUCCESS,
        Err(code) => code,
    }
}

/// Checks a device ordinal: the device's index.
fn device(dev: CUdevice) -> Result<u32, CUresult> {
    u32::try_from(dev)
        .ok()
        .filter(|&d| d < device_count())
        .ok_or(CUDA_ERROR_INVALID_DEVICE)
}

/// The live stream `s`, which work is enqueued on: it must belong to the current context
/// ([`check_current`]).
fn cuda_stream(s: *mut c_void, call: &str) -> Result<Arc<Stream>, CUresult> {
    let stream = stream(handle(s), call)?;
    check_current(call, stream.device, "a stream")?;
    Ok(stream)
}

// ------------------------------------------------------------------ errors and versions

/// The codes the fake returns, plus CUDA 13's `CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER` (36),
/// with their names.
static NAMES: LazyLock<Vec<(u32, &'static CStr)>> = LazyLock::new(|| {
    use CUresult::*;
    let mut names: Vec<(u32, &'static CStr)> = [
        CUDA_SUCCESS,
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_INVALID_DEVICE,
        CUDA_ERROR_INVALID_CONTEXT,
        CUDA_ERROR_INVALID_PTX,
        CUDA_ERROR_INVALID_HANDLE,
        CUDA_ERROR_ILLEGAL_STATE,
        CUDA_ERROR_NOT_FOUND,
        CUDA_ERROR_NOT_READY,
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_NOT_PERMITTED,
        CUDA_ERROR_NOT_SUPPORTED,
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        CUDA_ERROR_CAPTURED_EVENT,
        CUDA_ERROR_CONTEXT_IS_DESTROYED,
    ]
    .into_iter()
    .map(|code| {
        let name = std::ffi::CString::new(format!("{code:?}")).expect("no NUL");
        (code as u32, &*Box::leak(name.into_boxed_c_str()))
    })
    .collect();
    names.push((36, c"CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"));
    names
});

fn error_name(code: c_uint) -> Option<&'static CStr> {
    NAMES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

/// `cuGetErrorName`: the code's name; `CUDA_ERROR_INVALID_VALUE` for a code it does not know.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(code: c_uint, out: *mut *const c_char) -> CUresult {
    call("cuGetErrorName", Needs::Nothing, || {
        let name = error_name(code).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: CUDA's contract: `out` is valid for one pointer.
        unsafe { put(out, name.as_ptr()) }
    })
}

/// `cuGetErrorString`: the code's name, as its description.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(code: c_uint, out: *mut *const c_char) -> CUresult {
    call("cuGetErrorString", Needs::Nothing, || {
        let name = error_name(code).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: CUDA's contract: `out` is valid for one pointer.
        unsafe { put(out, name.as_ptr()) }
    })
}

/// `cuDriverGetVersion`: [`DRIVER_VERSION`].
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    call("cuDriverGetVersion", Needs::Nothing, || {
        // SAFETY: CUDA's contract: `version` is valid for one int.
        unsafe { put(version, DRIVER_VERSION) }
    })
}

/// `cuInit`: flags must be 0.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    call("cuInit", Needs::Nothing, || {
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        driver().initialized = true;
        Ok(())
    })
}

// ------------------------------------------------------------------ devices and the context

/// `cuDeviceGetCount`: [`device_count`] devices.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    call("cuDeviceGetCount", Needs::Init, || {
        // SAFETY: CUDA's contract: `count` is valid for one int.
        unsafe { put(count, device_count() as c_int) }
    })
}

/// `cuDeviceGet`: ordinal `n` is device `n`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(out: *mut CUdevice, ordinal: c_int) -> CUresult {
    call("cuDeviceGet", Needs::Init, || {
        device(ordinal)?;
        // SAFETY: CUDA's contract: `out` is valid for one CUdevice.
        unsafe { put(out, ordinal) }
    })
}

/// `cuDeviceGetAttribute`: a compute capability 9.0 device with 4 multiprocessors, memory
/// pools, concurrent managed access and Hopper's shared memory limits; 0 for attributes it
/// does not model.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_uint,
    dev: CUdevice,
) -> CUresult {
    call("cuDeviceGetAttribute", Needs::Init, || {
        device(dev)?;
        let answer = match attribute {
            a if a == Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as u32 => 9,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as u32 => 0,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as u32 => 4,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR as u32 => 2,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK as u32 => 1024,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK as u32 => {
                DEFAULT_DYNAMIC_SHARED as c_int
            }
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN as u32 => {
                MAX_SHARED_OPTIN as c_int
            }
            a if a == Attr::CU_DEVICE_ATTRIBUTE_WARP_SIZE as u32 => 32,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM as u32 => 1,
            _ => 0,
        };
        // SAFETY: CUDA's contract: `value` is valid for one int.
        unsafe { put(value, answer) }
    })
}

/// `cuDeviceGetName`: [`DEVICE_NAME`], truncated to `len - 1` bytes and NUL-terminated.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    call("cuDeviceGetName", Needs::Init, || {
        device(dev)?;
        if name.is_null() || len <= 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let bytes = DEVICE_NAME.as_bytes();
        let n = bytes.len().min(len as usize - 1);
        // SAFETY: CUDA's contract: `name` is valid for `len` bytes; `n + 1 <= len`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
            name.add(n).write(0);
        }
        Ok(())
    })
}

/// `cuDeviceTotalMem`: [`DEVICE_BYTES`].
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    call("cuDeviceTotalMem", Needs::Init, || {
        device(dev)?;
        // SAFETY: CUDA's contract: `bytes` is valid for one size_t.
        unsafe { put(bytes, DEVICE_BYTES) }
    })
}

/// `cuDevicePrimaryCtxRetain`: one more reference to the device's primary context.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    out: *mut *mut c_void,
    dev: CUdevice,
) -> CUresult {
    call("cuDevicePrimaryCtxRetain", Needs::Init, || {
        let dev = device(dev)?;
        // SAFETY: CUDA's contract: `out` is valid for one CUcontext.
        unsafe { put(out, as_ptr(primary_context(dev) as u64)) }?;
        driver().retains[dev as usize] += 1;
        Ok(())
    })
}

/// `cuDevicePrimaryCtxRelease`: one reference fewer; the last one destroys the context and
/// everything in it (what is still alive then was leaked: a violation, unless it faulted),
/// leaving the other devices' contexts as they are.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    call("cuDevicePrimaryCtxRelease", Needs::Init, || {
        let dev = device(dev)?;
        let mut driver = driver();
        let retains = &mut driver.retains[dev as usize];
        if *retains == 0 {
            drop(driver);
            violation(format!(
                "cuDevicePrimaryCtxRelease({dev}) without a matching retain"
            ));
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        *retains -= 1;
        if *retains == 0 {
            driver.destroy_context(dev);
        }
        Ok(())
    })
}

/// `cuDevicePrimaryCtxGetState`: whether the device's primary context is alive (retained by
/// someone); its flags are always 0.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    call("cuDevicePrimaryCtxGetState", Needs::Init, || {
        let dev = device(dev)?;
        let retained = driver().retains[dev as usize] > 0;
        // SAFETY: CUDA's contract: `flags` and `active` are valid for one value each.
        unsafe { put(flags, 0 as c_uint) }?;
        // SAFETY: as above.
        unsafe { put(active, c_int::from(retained)) }
    })
}

/// `cuCtxSetCurrent`: a device's primary context or null. As in CUDA, a primary context whose
/// last reference was released stays on the thread stacks it was current on (its release
/// resets it and pops nothing), so making it current again (code giving back the context it
/// found current) is allowed; any call that needs it then is a violation (`Needs::Context`).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(context: *mut c_void) -> CUresult {
    call("cuCtxSetCurrent", Needs::Init, || {
        let context = context as usize;
        if context != 0 && context_device(context).is_none() {
            violation(format!(
                "cuCtxSetCurrent({context:#x}): not a context of this driver"
            ));
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        set_current(context);
        Ok(())
    })
}

/// `cuCtxGetCurrent`: the context `cuCtxSetCurrent` made current on this thread, or null.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(out: *mut *mut c_void) -> CUresult {
    call("cuCtxGetCurrent", Needs::Init, || {
        // SAFETY: CUDA's contract: `out` is valid for one CUcontext.
        unsafe { put(out, current_context() as *mut c_void) }
    })
}

// ------------------------------------------------------------------ streams

/// `cuStreamCreate`: a stream of the current context's device, with its worker thread.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(out: *mut *mut c_void, _flags: c_uint) -> CUresult {
    call("cuStreamCreate", Needs::Context, || {
        if out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = next_handle();
        let dev = current_device();
        let stream = Stream::spawn(h, dev)?;
        let mut driver = driver();
        driver.streams.insert(h, stream);
        driver.adopt(h, dev);
        drop(driver);
        // SAFETY: CUDA's contract: `out` is valid for one CUstream.
        unsafe { put(out, as_ptr(h)) }
    })
}

/// `cuStreamDestroy`: queued work still completes; the handle is dead at once.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(s: *mut c_void) -> CUresult {
    call("cuStreamDestroy", Needs::ContextEvenFaulted, || {
        let stream = driver().remove(|d| &mut d.streams, handle(s), "stream", "cuStreamDestroy")?;
        stream.destroy();
        Ok(())
    })
}

/// `cuStreamSynchronize`: waits for everything enqueued so far (a capturing stream's capture
/// is invalidated: `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(s: *mut c_void) -> CUresult {
    call("cuStreamSynchronize", Needs::Context, || {
        let stream = stream(handle(s), "cuStreamSynchronize")?;
        if stream.capture_status().is_some() {
            stream.invalidate_capture(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
            return Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        }
        stream.synchronize()
    })
}

/// `cuStreamWaitEvent`: later work on the stream waits for the event's latest record (none:
/// no wait). Flags must be 0. The event may be another device's, as in CUDA.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(
    s: *mut c_void,
    e: *mut c_void,
    flags: c_uint,
) -> CUresult {
    call("cuStreamWaitEvent", Needs::Context, || {
        let stream = cuda_stream(s, "cuStreamWaitEvent")?;
        let event = event(handle(e), "cuStreamWaitEvent")?;
        if flags != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        stream.wait_event(event)
    })
}

/// `cuStreamBeginCapture`: later work on the stream is recorded into a graph.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamBeginCapture_v2(s: *mut c_void, mode: c_uint) -> CUresult {
    call("cuStreamBeginCapture", Needs::Context, || {
        let stream = cuda_stream(s, "cuStreamBeginCapture")?;
        // Relaxed mode only: the global and thread-local modes' bans on "unsafe" calls from
        // other threads are not modelled.
        if mode != CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED as c_uint {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        stream.begin_capture()
    })
}

/// `cuStreamEndCapture`: the captured graph (null, and
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`, if something invalidated the capture).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamEndCapture(s: *mut c_void, graph: *mut *mut c_void) -> CUresult {
    call("cuStreamEndCapture", Needs::Context, || {
        let stream = cuda_stream(s, "cuStreamEndCapture")?;
        let ended = stream.end_capture();
        let ops = match ended {
            Ok(ops) => ops,
            Err(code) => {
                // SAFETY: CUDA's contract: `graph` is valid for one CUgraph.
                unsafe { put(graph, std::ptr::null_mut()) }?;
                return Err(code);
            }
        };
        let h = next_handle();
        let mut driver = driver();
        driver.graphs.insert(h, Arc::new(ops));
        driver.adopt(h, stream.device);
        drop(driver);
        // SAFETY: CUDA's contract: `graph` is valid for one CUgraph.
        unsafe { put(graph, as_ptr(h)) }
    })
}

/// `cuStreamIsCapturing`: none, active or invalidated.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(s: *mut c_void, status: *mut c_uint) -> CUresult {
    call("cuStreamIsCapturing", Needs::Context, || {
        let answer = match stream(handle(s), "cuStreamIsCapturing")?.capture_status() {
            None => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
            Some(None) => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
            Some(Some(_)) => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED,
        };
        // SAFETY: CUDA's contract: `status` is valid for the 4-byte enum.
        unsafe { put(status, answer as c_uint) }
    })
}

// ------------------------------------------------------------------ events

/// `cuEventCreate`: a never-recorded event (complete) of the current context's device.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(out: *mut *mut c_void, _flags: c_uint) -> CUresult {
    call("cuEventCreate", Needs::Context, || {
        if out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = next_handle();
        let dev = current_device();
        let mut driver = driver();
        driver.events.insert(h, Event::new(dev));
        driver.adopt(h, dev);
        drop(driver);
        // SAFETY: CUDA's contract: `out` is valid for one CUevent.
        unsafe { put(out, as_ptr(h)) }
    })
}

/// `cuEventDestroy`: records in flight still complete; the handle is dead at once.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(e: *mut c_void) -> CUresult {
    call("cuEventDestroy", Needs::ContextEvenFaulted, || {
        driver()
            .remove(|d| &mut d.events, handle(e), "event", "cuEventDestroy")
            .map(drop)
    })
}

/// `cuEventRecord`: a new record, completed when the stream gets to it (in a capture: a
/// captured event, which only orders work within the capture; no graph node). The event and
/// the stream must be of one device.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(e: *mut c_void, s: *mut c_void) -> CUresult {
    call("cuEventRecord", Needs::Context, || {
        let event = event(handle(e), "cuEventRecord")?;
        let stream = cuda_stream(s, "cuEventRecord")?;
        check_same_device(
            "cuEventRecord",
            ("an event", event.device),
            ("a stream", stream.device),
        )?;
        stream.record(event);
        Ok(())
    })
}

/// `cuEventQuery`: whether the latest record completed (`CUDA_ERROR_NOT_READY` if not).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(e: *mut c_void) -> CUresult {
    call("cuEventQuery", Needs::Context, || {
        let event = event(handle(e), "cuEventQuery")?;
        if event.latest().1 {
            return Err(CUresult::CUDA_ERROR_CAPTURED_EVENT);
        }
        if event.query() {
            Ok(())
        } else {
            Err(CUresult::CUDA_ERROR_NOT_READY)
        }
    })
}

/// `cuEventSynchronize`: blocks until the latest record (when called) completed.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(e: *mut c_void) -> CUresult {
    call("cuEventSynchronize", Needs::Context, || {
        let event = event(handle(e), "cuEventSynchronize")?;
        match event.latest() {
            (_, true) => Err(CUresult::CUDA_ERROR_CAPTURED_EVENT),
            (generation, false) => event.wait(generation),
        }
    })
}

/// `cuLaunchHostFunc`: runs `function(data)` on the stream's worker when it gets there, where
/// any driver call is a violation.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(
    s: *mut c_void,
    function: CUhostFn,
    data: *mut c_void,
) -> CUresult {
    call("cuLaunchHostFunc", Needs::Context, || {
        let stream = cuda_stream(s, "cuLaunchHostFunc")?;
        let func = function.ok_or(CUDA_ERROR_INVALID_VALUE)?;
        stream.enqueue(Op::Host {
            func,
            data: data as usize,
        });
        Ok(())
    })
}

// ------------------------------------------------------------------ memory

/// Allocates `bytes` of `kind` on device `dev` into `out`.
fn allocate(out: *mut CUdeviceptr, bytes: usize, kind: Kind, dev: u32) -> Ret {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ptr = memory().allocate(bytes, kind, dev)?;
    // SAFETY: non-null; CUDA's contract: valid for one CUdeviceptr.
    unsafe { put(out, ptr) }
}

fn allocate_host(out: *mut *mut c_void, bytes: usize, mapped: bool) -> Ret {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let ptr = memory().allocate(bytes, Kind::Pinned { mapped }, current_device())?;
    // SAFETY: non-null; CUDA's contract: valid for one pointer.
    unsafe { put(out, as_ptr(ptr)) }
}

/// `cuMemAlloc`: device memory (zeroed host memory, 256-aligned).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(out: *mut CUdeviceptr, bytes: usize) -> CUresult {
    call("cuMemAlloc", Needs::Context, || {
        allocate(out, bytes, Kind::Device, current_device())
    })
}

/// `cuMemAllocManaged`: managed memory; flags `CU_MEM_ATTACH_GLOBAL` or `_HOST`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(
    out: *mut CUdeviceptr,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    call("cuMemAllocManaged", Needs::Context, || {
        if flags != 1 && flags != 2 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        allocate(out, bytes, Kind::Managed, current_device())
    })
}

/// `cuMemAllocHost`: pinned host memory the device can reach.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(out: *mut *mut c_void, bytes: usize) -> CUresult {
    call("cuMemAllocHost", Needs::Context, || {
        allocate_host(out, bytes, true)
    })
}

/// `cuMemHostAlloc`: pinned host memory, mapped with `CU_MEMHOSTALLOC_DEVICEMAP`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    out: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    call("cuMemHostAlloc", Needs::Context, || {
        allocate_host(out, bytes, flags & CU_MEMHOSTALLOC_DEVICEMAP != 0)
    })
}

/// `cuMemHostGetDevicePointer`: a mapped pinned address is its own device address (unless
/// the test made them differ: see [`crate::exports::mapped_address`]); flags must be 0.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    out: *mut CUdeviceptr,
    host: *mut c_void,
    flags: c_uint,
) -> CUresult {
    call("cuMemHostGetDevicePointer", Needs::Context, || {
        let address = handle(host);
        if flags != 0 || memory().kind_of(address, 0) != Some(Kind::Pinned { mapped: true }) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: CUDA's contract: `out` is valid for one CUdeviceptr.
        unsafe { put(out, mapped_address(address)) }
    })
}

/// `cuMemFree`: device, managed or stream-ordered memory, by its base. Freeing memory that
/// queued work still uses is a violation, reported when the device gets to that work.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(ptr: CUdeviceptr) -> CUresult {
    call("cuMemFree", Needs::ContextEvenFaulted, || {
        sync_context();
        memory()
            .free(ptr, |k| !matches!(k, Kind::Pinned { .. }), "cuMemFree")
            .map(drop)
    })
}

/// What a call that may synchronise the whole context (`cuMemFree`, `cuMemFreeHost`,
/// `cuModuleUnload`) does to graph captures: CUDA calls synchronising a context while one of
/// its streams captures invalid, so every capture running on the current context's device is
/// invalidated (its end reports `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`; its operations never
/// run) and counted in `FakeStats::captures_invalidated`.
fn sync_context() {
    let device = current_device();
    let streams: Vec<Arc<Stream>> = driver()
        .streams
        .values()
        .filter(|s| s.device == device)
        .cloned()
        .collect();
    for stream in streams {
        if stream.capture_status() == Some(None) {
            stream.invalidate_capture(CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
            CAPTURES_INVALIDATED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// `cuMemFreeHost`: pinned memory, by its base.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(ptr: *mut c_void) -> CUresult {
    call("cuMemFreeHost", Needs::ContextEvenFaulted, || {
        sync_context();
        memory()
            .free(
                handle(ptr),
                |k| matches!(k, Kind::Pinned { .. }),
                "cuMemFreeHost",
            )
            .map(drop)
    })
}

/// `cuPointerGetAttribute`: `CU_POINTER_ATTRIBUTE_IS_MANAGED` only (an `unsigned int`).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_uint,
    ptr: CUdeviceptr,
) -> CUresult {
    call("cuPointerGetAttribute", Needs::Context, || {
        if attribute != CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED as u32 {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        let kind = memory().kind_of(ptr, 0).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: CUDA's contract: `data` is valid for the attribute's type.
        unsafe { put(data.cast::<c_uint>(), c_uint::from(kind == Kind::Managed)) }
    })
}

/// `cuMemPoolCreate`: a pool of pinned memory on the device its properties' location names
/// (allocations from it are ordinary stream-ordered ones).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(out: *mut *mut c_void, props: *const c_void) -> CUresult {
    call("cuMemPoolCreate", Needs::Context, || {
        if props.is_null() || out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: CUDA's contract: `props` points at a CUmemPoolProps, whose first four ints
        // are the allocation type, the handle types and the location (type, id).
        let [alloc_type, _handles, location_type, location_id] =
            unsafe { std::ptr::read(props.cast::<[c_int; 4]>()) };
        if alloc_type != 1 || location_type != 1 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let dev = device(location_id)?;
        let h = next_handle();
        let mut driver = driver();
        driver.pools.insert(h);
        driver.adopt(h, dev);
        drop(driver);
        // SAFETY: CUDA's contract: `out` is valid for one CUmemoryPool.
        unsafe { put(out, as_ptr(h)) }
    })
}

/// `cuMemPoolDestroy`: allocations still outstanding stay valid (as in CUDA).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: *mut c_void) -> CUresult {
    call("cuMemPoolDestroy", Needs::ContextEvenFaulted, || {
        destroy_pool(pool, "cuMemPoolDestroy")
    })
}

/// `cuMemPoolSetAttribute`: accepted for a live pool (the fake keeps nothing).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    p: *mut c_void,
    _attribute: c_uint,
    value: *mut c_void,
) -> CUresult {
    call("cuMemPoolSetAttribute", Needs::Context, || {
        pool(p, "cuMemPoolSetAttribute")?;
        if value.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        Ok(())
    })
}

/// `cuMemPoolTrimTo`: nothing to trim (freed memory goes back at once).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(p: *mut c_void, _keep: usize) -> CUresult {
    call("cuMemPoolTrimTo", Needs::Context, || {
        pool(p, "cuMemPoolTrimTo").map(drop)
    })
}

/// A stream-ordered allocation on stream `s`, from pool `from` (0: the stream's device's
/// default pool) of device `pool_device` (`None`: the stream's).
fn allocate_async(
    out: *mut CUdeviceptr,
    bytes: usize,
    from: (u64, Option<u32>),
    s: *mut c_void,
    call: &str,
) -> Ret {
    let stream = cuda_stream(s, call)?;
    if let (_, Some(pool_device)) = from {
        check_same_device(call, ("a pool", pool_device), ("a stream", stream.device))?;
    }
    if stream.capture_status().is_some() {
        // Memory nodes in graphs are not modelled.
        stream.invalidate_capture(CUDA_ERROR_NOT_SUPPORTED);
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    allocate(out, bytes, Kind::Pool(from.0), stream.device)
}

/// `cuMemAllocAsync`: from the device's default pool, usable at once.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    out: *mut CUdeviceptr,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    call("cuMemAllocAsync", Needs::Context, || {
        allocate_async(out, bytes, (0, None), s, "cuMemAllocAsync")
    })
}

/// `cuMemAllocFromPoolAsync`: from `pool`, usable at once.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    out: *mut CUdeviceptr,
    bytes: usize,
    p: *mut c_void,
    s: *mut c_void,
) -> CUresult {
    call("cuMemAllocFromPoolAsync", Needs::Context, || {
        let pool_device = pool(p, "cuMemAllocFromPoolAsync")?;
        allocate_async(
            out,
            bytes,
            (handle(p), Some(pool_device)),
            s,
            "cuMemAllocFromPoolAsync",
        )
    })
}

/// `cuMemFreeAsync`: frees a stream-ordered allocation when the stream gets there.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(ptr: CUdeviceptr, s: *mut c_void) -> CUresult {
    call("cuMemFreeAsync", Needs::Context, || {
        let stream = cuda_stream(s, "cuMemFreeAsync")?;
        if stream.capture_status().is_some() {
            // Freeing in a graph (a memory node) is not modelled.
            stream.invalidate_capture(CUDA_ERROR_NOT_SUPPORTED);
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        if !memory().is_base(ptr, |k| matches!(k, Kind::Pool(_))) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        stream.enqueue(Op::FreeAsync {
            ptr,
            call: "cuMemFreeAsync",
        });
        Ok(())
    })
}

/// `cuMemcpyDtoH` (synchronous: nothing of halcyon's streams is ordered with it).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    call("cuMemcpyDtoH", Needs::Context, || {
        let mut memory = memory();
        memory
            .check(src, bytes)
            .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: the source lies in a live allocation (checked under this lock); CUDA's
        // contract: `dst` is valid for `bytes`.
        unsafe { memory.copy(handle(dst), src, bytes) };
        Ok(())
    })
}

/// `cuMemcpyHtoD` (synchronous: nothing of halcyon's streams is ordered with it).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CUresult {
    call("cuMemcpyHtoD", Needs::Context, || {
        let mut memory = memory();
        memory
            .check(dst, bytes)
            .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: the destination lies in a live allocation (checked under this lock); CUDA's
        // contract: `src` is valid for `bytes`.
        unsafe { memory.copy(dst, handle(src.cast_mut()), bytes) };
        Ok(())
    })
}

/// `cuMemsetD8` (synchronous).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: CUdeviceptr, value: c_uchar, count: usize) -> CUresult {
    call("cuMemsetD8", Needs::Context, || {
        let mut memory = memory();
        memory
            .check(dst, count)
            .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
        memory.fill(dst, u32::from(value), 1, count);
        Ok(())
    })
}

/// A host side of an asynchronous copy during a capture must be pinned (a graph's memcpy node
/// reads it at every launch): otherwise the capture is invalidated.
fn pageable_in_capture(stream: &Stream) -> Ret {
    if stream.capture_status().is_some() {
        stream.invalidate_capture(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
        return Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    }
    Ok(())
}

/// `cuMemcpyHtoDAsync`: from pinned memory, read when the stream gets there; from pageable
/// memory, taken now (the call returns once the source may be reused).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    call("cuMemcpyHtoDAsync", Needs::Context, || {
        let stream = cuda_stream(s, "cuMemcpyHtoDAsync")?;
        reachable(dst, bytes, stream.device, "cuMemcpyHtoDAsync")?;
        let from = src as usize as u64;
        let src = if memory().is_pinned(from, bytes) {
            Source::Checked(from)
        } else {
            pageable_in_capture(&stream)?;
            // SAFETY: CUDA's contract: `src` is valid for `bytes` now.
            Source::Bytes(Arc::new(unsafe {
                std::slice::from_raw_parts(src.cast::<u8>(), bytes).to_vec()
            }))
        };
        stream.enqueue(Op::Copy {
            dst,
            dst_checked: true,
            src,
            len: bytes,
            call: "cuMemcpyHtoDAsync",
        });
        Ok(())
    })
}

/// `cuMemcpyDtoHAsync`: into pinned memory, when the stream gets there; into pageable memory,
/// the call waits until the copy is done.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    call("cuMemcpyDtoHAsync", Needs::Context, || {
        let stream = cuda_stream(s, "cuMemcpyDtoHAsync")?;
        reachable(src, bytes, stream.device, "cuMemcpyDtoHAsync")?;
        let to = dst as usize as u64;
        let pinned = memory().is_pinned(to, bytes);
        if !pinned {
            pageable_in_capture(&stream)?;
        }
        let position = stream.enqueue(Op::Copy {
            dst: to,
            dst_checked: pinned,
            src: Source::Checked(src),
            len: bytes,
            call: "cuMemcpyDtoHAsync",
        });
        if let (false, Some(position)) = (pinned, position) {
            // Into pageable memory: done (or dropped, after a fault) before the call returns.
            stream.wait_for(position);
            if let Some(code) = sticky(stream.device) {
                return Err(code);
            }
        }
        Ok(())
    })
}

/// `cuMemcpyDtoDAsync`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    s: *mut c_void,
) -> CUresult {
    call("cuMemcpyDtoDAsync", Needs::Context, || {
        let stream = cuda_stream(s, "cuMemcpyDtoDAsync")?;
        reachable(dst, bytes, stream.device, "cuMemcpyDtoDAsync")?;
        reachable(src, bytes, stream.device, "cuMemcpyDtoDAsync")?;
        stream.enqueue(Op::Copy {
            dst,
            dst_checked: true,
            src: Source::Checked(src),
            len: bytes,
            call: "cuMemcpyDtoDAsync",
        });
        Ok(())
    })
}

/// `cuMemsetD8Async`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: CUdeviceptr,
    value: c_uchar,
    count: usize,
    s: *mut c_void,
) -> CUresult {
    call("cuMemsetD8Async", Needs::Context, || {
        let stream = cuda_stream(s, "cuMemsetD8Async")?;
        memset_async(dst, u32::from(value), 1, count, &stream, "cuMemsetD8Async")
    })
}

/// `cuMemsetD16Async` (the address 2-aligned).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async(
    dst: CUdeviceptr,
    value: c_ushort,
    count: usize,
    s: *mut c_void,
) -> CUresult {
    call("cuMemsetD16Async", Needs::Context, || {
        let stream = cuda_stream(s, "cuMemsetD16Async")?;
        memset_async(dst, u32::from(value), 2, count, &stream, "cuMemsetD16Async")
    })
}

/// `cuMemsetD32Async` (the address 4-aligned).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: CUdeviceptr,
    value: c_uint,
    count: usize,
    s: *mut c_void,
) -> CUresult {
    call("cuMemsetD32Async", Needs::Context, || {
        let stream = cuda_stream(s, "cuMemsetD32Async")?;
        memset_async(dst, value, 4, count, &stream, "cuMemsetD32Async")
    })
}

// ------------------------------------------------------------------ modules and kernels

/// Writes `message` into the JIT error log the options name, if they name one.
///
/// # Safety
/// `options` and `values` must be valid for `count` entries, and a log buffer they name valid
/// for its declared size.
unsafe fn write_jit_log(
    count: c_uint,
    options: *const c_uint,
    values: *const *mut c_void,
    message: &str,
) {
    if count == 0 || options.is_null() || values.is_null() {
        return;
    }
    // SAFETY: the caller's contract: both arrays hold `count` entries.
    let (options, values) = unsafe {
        (
            std::slice::from_raw_parts(options, count as usize),
            std::slice::from_raw_parts(values, count as usize),
        )
    };
    let find = |option: CUjit_option| {
        options
            .iter()
            .position(|&o| o == option as c_uint)
            .map(|i| values[i])
    };
    let (Some(buffer), Some(size)) = (
        find(CUjit_option::CU_JIT_ERROR_LOG_BUFFER),
        find(CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES),
    ) else {
        return;
    };
    let size = size as usize;
    if buffer.is_null() || size == 0 {
        return;
    }
    let n = message.len().min(size - 1);
    // SAFETY: the caller's contract: the buffer holds `size` bytes; `n + 1 <= size`.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), buffer.cast::<u8>(), n);
        buffer.cast::<u8>().add(n).write(0);
    }
}

/// `cuModuleLoadData`: see [`cuModuleLoadDataEx`].
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(out: *mut *mut c_void, image: *const c_void) -> CUresult {
    // SAFETY: forwarded; no options.
    unsafe { cuModuleLoadDataEx(out, image, 0, std::ptr::null_mut(), std::ptr::null_mut()) }
}

/// `cuModuleLoadDataEx`: NUL-terminated PTX, read for its entry points (PTX without
/// `.version` and `.target`, or with a parameter list the fake cannot read, is
/// `CUDA_ERROR_INVALID_PTX` with a JIT log), or an sm_90 cubin, read for its kernels' names
/// (see [`crate::cubin`]; another architecture is `CUDA_ERROR_NO_BINARY_FOR_GPU`); a fatbin is
/// `CUDA_ERROR_NOT_SUPPORTED`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    out: *mut *mut c_void,
    image: *const c_void,
    count: c_uint,
    options: *mut c_uint,
    values: *mut *mut c_void,
) -> CUresult {
    call("cuModuleLoadData", Needs::Context, || {
        if image.is_null() || out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // The first bytes, stopping at a NUL (PTX text may be shorter than a binary header).
        let mut head = Vec::with_capacity(4);
        for i in 0..4 {
            // SAFETY: CUDA's contract: the image is a binary (with a header of more than 4
            // bytes) or NUL-terminated PTX, and this stops at the NUL.
            let byte = unsafe { image.cast::<u8>().add(i).read() };
            if byte == 0 {
                break;
            }
            head.push(byte);
        }
        let log = |message: &str| {
            // SAFETY: CUDA's contract for the options.
            unsafe { write_jit_log(count, options, values, message) }
        };
        if head == b"\x7fELF" {
            // SAFETY: CUDA's contract: a complete cubin, whose headers describe its bytes.
            let image = unsafe { hsaco::image(image.cast()) };
            let names = image
                .map_err(|(_, why)| cubin::Refusal::Invalid(why))
                .and_then(cubin::kernel_names)
                .map_err(|refusal| match refusal {
                    cubin::Refusal::Invalid(why) => {
                        log(&why);
                        CUresult::CUDA_ERROR_INVALID_IMAGE
                    }
                    cubin::Refusal::OtherArchitecture(why) => {
                        log(&why);
                        CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
                    }
                })?;
            let entries: Vec<Entry> = names.iter().map(|name| Entry::by_name(name)).collect();
            let module = register_module(&entries, current_device());
            // SAFETY: CUDA's contract: `out` is valid for one CUmodule.
            return unsafe { put(out, as_ptr(module)) };
        }
        if head == [0x50, 0xed, 0x55, 0xba] {
            log("the fake CUDA driver loads PTX and cubins, not fatbins");
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        // SAFETY: CUDA's contract: PTX is NUL-terminated.
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_string_lossy();
        let entries = parse_ptx(&text)
            .inspect_err(|message| log(message))
            .map_err(|_| CUresult::CUDA_ERROR_INVALID_PTX)?;
        let module = register_module(&entries, current_device());
        // SAFETY: CUDA's contract: `out` is valid for one CUmodule.
        unsafe { put(out, as_ptr(module)) }
    })
}

/// `cuModuleUnload`: the module's functions die with it.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(m: *mut c_void) -> CUresult {
    call("cuModuleUnload", Needs::ContextEvenFaulted, || {
        sync_context();
        unload_module(handle(m), "cuModuleUnload")
    })
}

/// `cuModuleGetFunction`: `CUDA_ERROR_NOT_FOUND` for a name the module lacks.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    out: *mut *mut c_void,
    m: *mut c_void,
    name: *const c_char,
) -> CUresult {
    call("cuModuleGetFunction", Needs::Context, || {
        if name.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: CUDA's contract: `name` is NUL-terminated.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let function = find_function(handle(m), &name, "cuModuleGetFunction")?;
        // SAFETY: CUDA's contract: `out` is valid for one CUfunction.
        unsafe { put(out, as_ptr(function)) }
    })
}

/// `cuFuncGetParamInfo`: offset and size of parameter `index` (`CUDA_ERROR_INVALID_VALUE`
/// past the last).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    f: *mut c_void,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    call("cuFuncGetParamInfo", Needs::Context, || {
        let kernel = driver().find(
            |d| &d.functions,
            handle(f),
            "function",
            "cuFuncGetParamInfo",
        )?;
        let &(at, n) = kernel.params.get(index).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: CUDA's contract: both are valid for one size_t.
        unsafe {
            put(offset, at)?;
            put(size, n)
        }
    })
}

/// `cuFuncGetAttribute`: `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK` is the kernel's limit
/// (see `Entry::max_threads`), `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` its dynamic
/// shared memory limit (see `Kernel::max_dynamic_shared`); the other attributes CUDA 12
/// defines read 0 (static shared memory among them).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    out: *mut c_int,
    attribute: c_uint,
    f: *mut c_void,
) -> CUresult {
    call("cuFuncGetAttribute", Needs::Context, || {
        let kernel = driver().find(
            |d| &d.functions,
            handle(f),
            "function",
            "cuFuncGetAttribute",
        )?;
        let value = match attribute {
            0 => kernel.max_threads as c_int,
            8 => kernel.max_dynamic_shared.load(Ordering::Relaxed) as c_int,
            // Up to CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE.
            1..=15 => 0,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        // SAFETY: CUDA's contract: `out` is valid for one int.
        unsafe { put(out, value) }
    })
}

/// `cuFuncSetAttribute`: `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` up to
/// [`MAX_SHARED_OPTIN`] (the fake models no static shared memory) and
/// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT` (-1 to 100, ignored); anything else
/// is `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(
    f: *mut c_void,
    attribute: c_uint,
    value: c_int,
) -> CUresult {
    call("cuFuncSetAttribute", Needs::Context, || {
        let kernel = driver().find(
            |d| &d.functions,
            handle(f),
            "function",
            "cuFuncSetAttribute",
        )?;
        match (attribute, value) {
            (8, v) if (0..=MAX_SHARED_OPTIN as c_int).contains(&v) => {
                kernel.max_dynamic_shared.store(v as u32, Ordering::Relaxed);
                Ok(())
            }
            (9, -1..=100) => Ok(()),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// `cuLaunchKernel`: reads each parameter's value now (through `kernelParams`, one pointer
/// per parameter, as CUDA does) and runs the kernel natively when the stream gets there.
/// Kernels the fake cannot run, and `extra`, are `CUDA_ERROR_NOT_SUPPORTED`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
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
) -> CUresult {
    call("cuLaunchKernel", Needs::Context, || {
        let kernel = driver().find(|d| &d.functions, handle(f), "function", "cuLaunchKernel")?;
        let stream = cuda_stream(s, "cuLaunchKernel")?;
        let grid = [grid_x, grid_y, grid_z];
        let block = [block_x, block_y, block_z];
        let threads = u64::from(block_x) * u64::from(block_y) * u64::from(block_z);
        if grid.contains(&0)
            || block.contains(&0)
            || threads > 1024
            || block_z > 64
            || grid_y > 65535
            || grid_z > 65535
            || grid_x > i32::MAX as u32
            || shared_memory_bytes > kernel.max_dynamic_shared.load(Ordering::Relaxed)
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if threads > u64::from(kernel.max_threads) {
            // What a driver says to a block too large for the kernel's registers or its
            // `.maxntid`.
            return Err(CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
        }
        if !extra.is_null() {
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        // SAFETY: CUDA's contract for `kernelParams`.
        unsafe {
            enqueue_launch(
                "cuLaunchKernel",
                &kernel,
                &stream,
                grid,
                block,
                shared_memory_bytes,
                kernel_params,
            )
        }?;
        Ok(())
    })
}

// ------------------------------------------------------------------ graphs

/// `cuGraphInstantiateWithFlags`: flags must be 0.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphInstantiateWithFlags(
    out: *mut *mut c_void,
    graph: *mut c_void,
    flags: c_ulonglong,
) -> CUresult {
    call("cuGraphInstantiate", Needs::Context, || {
        let ops = driver().find(|d| &d.graphs, handle(graph), "graph", "cuGraphInstantiate")?;
        if flags != 0 || out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let h = next_handle();
        let mut driver = driver();
        let dev = driver.owner(handle(graph));
        driver.execs.insert(h, Arc::new(ops.to_vec()));
        driver.adopt(h, dev);
        drop(driver);
        // SAFETY: CUDA's contract: `out` is valid for one CUgraphExec.
        unsafe { put(out, as_ptr(h)) }
    })
}

/// `cuGraphDestroy`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphDestroy(graph: *mut c_void) -> CUresult {
    call("cuGraphDestroy", Needs::ContextEvenFaulted, || {
        driver()
            .remove(|d| &mut d.graphs, handle(graph), "graph", "cuGraphDestroy")
            .map(drop)
    })
}

/// `cuGraphLaunch`: enqueues the graph's operations, together.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(exec: *mut c_void, s: *mut c_void) -> CUresult {
    call("cuGraphLaunch", Needs::Context, || {
        let ops = driver().find(
            |d| &d.execs,
            handle(exec),
            "executable graph",
            "cuGraphLaunch",
        )?;
        let stream = cuda_stream(s, "cuGraphLaunch")?;
        let exec_device = driver().owner(handle(exec));
        check_same_device(
            "cuGraphLaunch",
            ("an executable graph", exec_device),
            ("a stream", stream.device),
        )?;
        stream.enqueue_all(&ops);
        GRAPH_LAUNCHES.fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
}

/// `cuGraphExecDestroy`: launches in flight still complete.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGraphExecDestroy(exec: *mut c_void) -> CUresult {
    call("cuGraphExecDestroy", Needs::ContextEvenFaulted, || {
        driver()
            .remove(
                |d| &mut d.execs,
                handle(exec),
                "executable graph",
                "cuGraphExecDestroy",
            )
            .map(drop)
    })
}
