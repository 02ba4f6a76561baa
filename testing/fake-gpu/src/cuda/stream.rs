//! CUDA's streams, stream capture, events and host functions.

use std::ffi::{c_uint, c_void};

use cudarc::driver::sys::{
    CUevent_flags, CUhostFn, CUresult, CUstreamCaptureMode, CUstreamCaptureStatus,
};
use CUresult::CUDA_ERROR_NOT_SUPPORTED;

use super::{call, cuda_stream};
use crate::ffi::{as_ptr, handle, no_flags, put, put_new};
use crate::model::contract::{current_device, Needs};
use crate::model::driver::driver;
use crate::model::event::{create_event, destroy_event, elapsed_ms, find_event};
use crate::model::stream::{create_stream, destroy_stream, find_stream};

// ------------------------------------------------------------------ streams

/// `cuStreamCreate`: a stream of the current context's device, with its worker thread.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(out: *mut *mut c_void, _flags: c_uint) -> CUresult {
    call("cuStreamCreate", Needs::Context, || {
        // SAFETY: CUDA's contract: `out` is valid for one CUstream.
        unsafe { put_new(out, || create_stream(current_device())) }
    })
}

/// `cuStreamDestroy`: queued work still completes; the handle is dead at once.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(s: *mut c_void) -> CUresult {
    call("cuStreamDestroy", Needs::ContextEvenFaulted, || {
        destroy_stream(handle(s), "cuStreamDestroy")
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
        let stream = find_stream(handle(s), "cuStreamSynchronize")?;
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
        let event = find_event(handle(e), "cuStreamWaitEvent")?;
        no_flags(flags)?;
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
        let ops = match stream.end_capture() {
            Ok(ops) => ops,
            Err(code) => {
                // SAFETY: CUDA's contract: `graph` is valid for one CUgraph.
                unsafe { put(graph, std::ptr::null_mut()) }?;
                return Err(code);
            }
        };
        let h = driver().add_graph(ops, stream.device);
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
        let answer = match find_stream(handle(s), "cuStreamIsCapturing")?.capture_status() {
            None => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE,
            Some(None) => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE,
            Some(Some(_)) => CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED,
        };
        // SAFETY: CUDA's contract: `status` is valid for the 4-byte enum.
        unsafe { put(status, answer as c_uint) }
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
        cuda_stream(s, "cuLaunchHostFunc")?.host_func(function, data)
    })
}

// ------------------------------------------------------------------ events

/// `cuEventCreate`: a never-recorded event (complete) of the current context's device;
/// `CU_EVENT_DEFAULT`, `CU_EVENT_BLOCKING_SYNC`, `CU_EVENT_DISABLE_TIMING` and
/// `CU_EVENT_INTERPROCESS` flags (only timing is modelled: an event without
/// `CU_EVENT_DISABLE_TIMING` timestamps its records).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(out: *mut *mut c_void, flags: c_uint) -> CUresult {
    call("cuEventCreate", Needs::Context, || {
        if flags & !0x7 != 0 {
            return Err(CUresult::CUDA_ERROR_INVALID_VALUE);
        }
        let timing = flags & CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint == 0;
        // SAFETY: CUDA's contract: `out` is valid for one CUevent.
        unsafe { put_new(out, || create_event(current_device(), timing)) }
    })
}

/// `cuEventDestroy`: records in flight still complete; the handle is dead at once.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(e: *mut c_void) -> CUresult {
    call("cuEventDestroy", Needs::ContextEvenFaulted, || {
        destroy_event(handle(e), "cuEventDestroy")
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
        let event = find_event(handle(e), "cuEventRecord")?;
        let stream = cuda_stream(s, "cuEventRecord")?;
        event.check_stream(&stream, "cuEventRecord")?;
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
        let event = find_event(handle(e), "cuEventQuery")?;
        if event.latest().1 {
            return Err(CUresult::CUDA_ERROR_CAPTURED_EVENT);
        }
        event.status()
    })
}

/// `cuEventElapsedTime`: the milliseconds between the latest records of two timing events
/// (the model's [`elapsed_ms`]: `CUDA_ERROR_INVALID_HANDLE` for an event created with
/// `CU_EVENT_DISABLE_TIMING` or never recorded, `CUDA_ERROR_NOT_READY` while a record is
/// pending).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    ms: *mut f32,
    start: *mut c_void,
    end: *mut c_void,
) -> CUresult {
    call("cuEventElapsedTime", Needs::Context, || {
        let start = find_event(handle(start), "cuEventElapsedTime")?;
        let end = find_event(handle(end), "cuEventElapsedTime")?;
        let elapsed = elapsed_ms(&start, &end, "cuEventElapsedTime")?;
        // SAFETY: CUDA's contract: `ms` is valid for one float.
        unsafe { put(ms, elapsed) }
    })
}

/// `cuEventSynchronize`: blocks until the latest record (when called) completed.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(e: *mut c_void) -> CUresult {
    call("cuEventSynchronize", Needs::Context, || {
        let event = find_event(handle(e), "cuEventSynchronize")?;
        match event.latest() {
            (_, true) => Err(CUresult::CUDA_ERROR_CAPTURED_EVENT),
            (generation, false) => event.wait(generation),
        }
    })
}
