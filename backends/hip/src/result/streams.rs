//! Streams (creation, synchronisation, waits on events), host functions on them
//! (`hipLaunchHostFunc` where exported, `hipStreamAddCallback`), and events.

use std::ffi::{c_uint, c_void};
use std::ptr;

use halcyon::Result;

use super::Hip;
use crate::sys;

impl Hip {
    /// `hipStreamCreateWithFlags` (`sys::hipStreamNonBlocking`, ...) on the current device.
    pub fn stream_create(self, flags: c_uint) -> Result<sys::hipStream_t> {
        let mut s: sys::hipStream_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one handle.
        let e = unsafe { (self.api.hipStreamCreateWithFlags)(&mut s, flags) };
        self.check(e, || format!("hipStreamCreateWithFlags(flags {flags:#x})"))
            .map(|()| s)
    }

    /// `hipStreamDestroy`.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime and is not used afterwards.
    pub unsafe fn stream_destroy(self, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamDestroy)(stream) };
        self.check(e, || "hipStreamDestroy".into())
    }

    /// `hipStreamSynchronize`: blocks the calling thread until `stream` is idle.
    ///
    /// # Safety
    /// `stream` is null or a live stream of this runtime.
    pub unsafe fn stream_synchronize(self, stream: sys::hipStream_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamSynchronize)(stream) };
        self.check(e, || "hipStreamSynchronize".into())
    }

    /// `hipStreamQuery`: `true` when all work on `stream` has completed.
    ///
    /// # Safety
    /// `stream` is null or a live stream of this runtime.
    pub unsafe fn stream_query(self, stream: sys::hipStream_t) -> Result<bool> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamQuery)(stream) };
        self.check_ready(e, || "hipStreamQuery".into())
    }

    /// `hipStreamWaitEvent(stream, event, 0)`: later work on `stream` waits for `event`.
    ///
    /// # Safety
    /// `stream` and `event` are live objects of this runtime.
    pub unsafe fn stream_wait_event(
        self,
        stream: sys::hipStream_t,
        event: sys::hipEvent_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamWaitEvent)(stream, event, 0) };
        self.check(e, || "hipStreamWaitEvent".into())
    }

    /// `hipStreamAddCallback(stream, callback, user_data, 0)`: `callback` runs on a runtime
    /// thread once earlier work on `stream` completes, and blocks later work until it returns.
    ///
    /// # Safety
    /// `stream` is a live stream; `user_data` stays valid until `callback` runs; `callback`
    /// does not call the HIP API and does not unwind.
    pub unsafe fn stream_add_callback(
        self,
        stream: sys::hipStream_t,
        callback: sys::hipStreamCallback_t,
        user_data: *mut c_void,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipStreamAddCallback)(stream, callback, user_data, 0) };
        self.check(e, || "hipStreamAddCallback".into())
    }

    /// Whether `hipLaunchHostFunc` is available (not in HIP 5.2.3's library).
    pub fn has_launch_host_func(self) -> bool {
        self.api.hipLaunchHostFunc.is_some()
    }

    /// `hipLaunchHostFunc`; `Unimplemented` where the runtime lacks it (use
    /// [`Hip::stream_add_callback`]).
    ///
    /// # Safety
    /// As [`Hip::stream_add_callback`].
    pub unsafe fn launch_host_func(
        self,
        stream: sys::hipStream_t,
        function: sys::hipHostFn_t,
        user_data: *mut c_void,
    ) -> Result<()> {
        let f = self.optional(self.api.hipLaunchHostFunc, "hipLaunchHostFunc")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(stream, function, user_data) };
        self.check(e, || "hipLaunchHostFunc".into())
    }

    /// Whether `hipStreamWriteValue32` is available.
    pub fn has_stream_write_value(self) -> bool {
        self.api.hipStreamWriteValue32.is_some()
    }

    /// `hipStreamWriteValue32` with no flags: writes `value` at `ptr` once the work on `stream`
    /// before it completed.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime; `ptr` is 4-aligned memory the device can
    /// write, valid until the write completed.
    pub unsafe fn stream_write_value32(
        self,
        stream: sys::hipStream_t,
        ptr: *mut c_void,
        value: u32,
    ) -> Result<()> {
        let f = self.optional(self.api.hipStreamWriteValue32, "hipStreamWriteValue32")?;
        // SAFETY: guaranteed by the caller; 0 is the documented default flags.
        let e = unsafe { f(stream, ptr, value, 0) };
        self.check(e, || format!("hipStreamWriteValue32({value})"))
    }

    // ---- events ----

    /// `hipEventCreateWithFlags` (`sys::hipEventDisableTiming`, ...).
    pub fn event_create(self, flags: c_uint) -> Result<sys::hipEvent_t> {
        let mut ev: sys::hipEvent_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid for one handle.
        let e = unsafe { (self.api.hipEventCreateWithFlags)(&mut ev, flags) };
        self.check(e, || format!("hipEventCreateWithFlags(flags {flags:#x})"))
            .map(|()| ev)
    }

    /// `hipEventRecord`: `event` completes when the work on `stream` before it does.
    ///
    /// # Safety
    /// `event` is a live event, `stream` null or a live stream, of this runtime.
    pub unsafe fn event_record(
        self,
        event: sys::hipEvent_t,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipEventRecord)(event, stream) };
        self.check(e, || "hipEventRecord".into())
    }

    /// `hipEventQuery`: `true` when the recorded work has completed (or nothing was recorded).
    ///
    /// # Safety
    /// `event` is a live event of this runtime.
    pub unsafe fn event_query(self, event: sys::hipEvent_t) -> Result<bool> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipEventQuery)(event) };
        self.check_ready(e, || "hipEventQuery".into())
    }

    /// `hipEventSynchronize`: blocks the calling thread until `event` completes.
    ///
    /// # Safety
    /// `event` is a live event of this runtime.
    pub unsafe fn event_synchronize(self, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipEventSynchronize)(event) };
        self.check(e, || "hipEventSynchronize".into())
    }

    /// `hipEventElapsedTime`: the milliseconds from `start`'s latest record to `stop`'s.
    ///
    /// # Safety
    /// `start` and `stop` are live events of this runtime.
    pub unsafe fn event_elapsed_time(
        self,
        start: sys::hipEvent_t,
        stop: sys::hipEvent_t,
    ) -> Result<f32> {
        let mut ms = 0.0f32;
        // SAFETY: guaranteed by the caller; the out-pointer is valid for one float.
        let e = unsafe { (self.api.hipEventElapsedTime)(&mut ms, start, stop) };
        self.check(e, || "hipEventElapsedTime".into()).map(|()| ms)
    }

    /// `hipEventDestroy`.
    ///
    /// # Safety
    /// `event` is a live event of this runtime and is not used afterwards.
    pub unsafe fn event_destroy(self, event: sys::hipEvent_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipEventDestroy)(event) };
        self.check(e, || "hipEventDestroy".into())
    }
}
