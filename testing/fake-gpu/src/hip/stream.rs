//! HIP's streams, host functions and callbacks, and events (with HIP's per-event lock).

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, TryLockError};

use super::{call, hipError_t, INVALID_VALUE};
use crate::ffi::{handle, no_flags, put, put_new};
use crate::model::contract::{current_device, lock, violation, HipNeeds};
use crate::model::event::{create_event, destroy_event, elapsed_ms, find_event, Event};
use crate::model::ops::Op;
use crate::model::stream::{create_stream, destroy_stream, find_stream};

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
        if flags > 1 {
            return Err(INVALID_VALUE);
        }
        // SAFETY: HIP's contract: valid for one hipStream_t.
        unsafe { put_new(out, || create_stream(current_device())) }
    })
}

/// `hipStreamDestroy`: queued work still completes; the handle is dead at once.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamDestroy(s: *mut c_void) -> hipError_t {
    call("hipStreamDestroy", HipNeeds::Nothing, || {
        destroy_stream(handle(s), "hipStreamDestroy")
    })
}

/// `hipStreamSynchronize`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamSynchronize(s: *mut c_void) -> hipError_t {
    call("hipStreamSynchronize", HipNeeds::Nothing, || {
        find_stream(handle(s), "hipStreamSynchronize")?.synchronize()
    })
}

/// `hipStreamQuery`: whether everything enqueued completed (`hipErrorNotReady` if not).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipStreamQuery(s: *mut c_void) -> hipError_t {
    call("hipStreamQuery", HipNeeds::Nothing, || {
        find_stream(handle(s), "hipStreamQuery")?.status()
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
        let stream = find_stream(handle(s), "hipStreamWaitEvent")?;
        let event = find_event(handle(e), "hipStreamWaitEvent")?;
        no_flags(flags)?;
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
        find_stream(handle(s), "hipLaunchHostFunc")?.host_func(function, data)
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
        let stream = find_stream(handle(s), "hipStreamAddCallback")?;
        let func = callback.ok_or(INVALID_VALUE)?;
        no_flags(flags)?;
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
        if flags & !0x7 != 0 {
            return Err(INVALID_VALUE);
        }
        // hipEventDisableTiming (0x2), the same bit as CUDA's.
        let timing = flags & 0x2 == 0;
        // SAFETY: HIP's contract: valid for one hipEvent_t.
        unsafe { put_new(out, || create_event(current_device(), timing)) }
    })
}

/// `hipEventDestroy`: records in flight still complete; the handle is dead at once.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipEventDestroy(e: *mut c_void) -> hipError_t {
    call("hipEventDestroy", HipNeeds::Nothing, || {
        destroy_event(handle(e), "hipEventDestroy")
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
        let event = find_event(handle(e), "hipEventRecord")?;
        let stream = find_stream(handle(s), "hipEventRecord")?;
        event.check_stream(&stream, "hipEventRecord")?;
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
        let event = find_event(handle(e), "hipEventQuery")?;
        let _held = event_lock(&event, handle(e), "hipEventQuery");
        event.status()
    })
}

/// `hipEventElapsedTime`: the milliseconds between the latest records of two timing events,
/// under each event's lock in turn (HIP takes the start event's, then the stop event's); the
/// model's [`elapsed_ms`], whose errors are HIP's by number (`hipErrorInvalidHandle` for an
/// event created with `hipEventDisableTiming` or never recorded, `hipErrorNotReady` while a
/// record is pending).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipEventElapsedTime(
    ms: *mut f32,
    start: *mut c_void,
    stop: *mut c_void,
) -> hipError_t {
    call("hipEventElapsedTime", HipNeeds::Nothing, || {
        let first = find_event(handle(start), "hipEventElapsedTime")?;
        let second = find_event(handle(stop), "hipEventElapsedTime")?;
        drop(event_lock(&first, handle(start), "hipEventElapsedTime"));
        drop(event_lock(&second, handle(stop), "hipEventElapsedTime"));
        let elapsed = elapsed_ms(&first, &second, "hipEventElapsedTime")?;
        // SAFETY: HIP's contract: `ms` is valid for one float.
        unsafe { put(ms, elapsed) }
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
        let event = find_event(handle(e), "hipEventSynchronize")?;
        let _held = lock(&event.hip_lock);
        let (generation, _) = event.latest();
        event.hip_synchronizing.store(generation, Ordering::Release);
        event.wait(generation)
    })
}
