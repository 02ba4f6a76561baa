//! Streams, events and host functions. Every handle is looked up in the API's registries
//! before it reaches the driver (see [`crate::objects`]); a stream an enqueue uses is held
//! with the shared side of [`CudaApi::capture_transitions`] ([`EnqueueStream`]); host
//! functions go through the callback registry (`src/callback.rs`) to `cuLaunchHostFunc`.

use std::ffi::c_uint;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLockReadGuard};

use cudarc::driver::sys::{CUevent, CUevent_flags, CUstream, CUstream_flags};
use halcyon::Result;
use halcyon_stream::{EventFlags, EventHandle, HostFunc, StreamHandle};

use super::CudaApi;
use crate::callback;
use crate::objects::{destroy_last, Event, Stream};
use crate::result::{check, cuda_error};
use crate::sys::{self, Code};

/// A stream held for an enqueue: the stream, and the shared side of
/// [`CudaApi::capture_transitions`] until the call's driver calls are made.
pub(super) struct EnqueueStream<'a> {
    stream: Arc<Stream>,
    _no_capture_transition: RwLockReadGuard<'a, ()>,
}

impl std::ops::Deref for EnqueueStream<'_> {
    type Target = Stream;

    fn deref(&self) -> &Stream {
        &self.stream
    }
}

impl CudaApi {
    /// Stream `s` of this API, held for the caller's driver calls; `InvalidArgument` if it is
    /// not a live stream of this API (destroyed, made up, or another API's). The caller has
    /// bound the context first, so that the stream is released while it is bound.
    pub(super) fn live_stream(&self, s: StreamHandle) -> Result<Arc<Stream>> {
        self.streams.get(s.0)
    }

    /// [`Self::live_stream`] for a call that enqueues on it: no capture begins or ends on any
    /// of this API's streams until the returned guard drops (see
    /// [`CudaApi::capture_transitions`]). Never held across a wait for the device.
    pub(super) fn enqueue_stream(&self, s: StreamHandle) -> Result<EnqueueStream<'_>> {
        let guard = self
            .capture_transitions
            .read()
            .unwrap_or_else(|p| p.into_inner());
        Ok(EnqueueStream {
            stream: self.live_stream(s)?,
            _no_capture_transition: guard,
        })
    }

    /// Event `e` of this API, held for the caller's driver calls (see [`Self::live_stream`]).
    fn live_event(&self, e: EventHandle) -> Result<Arc<Event>> {
        self.events.get(e.0)
    }

    /// `cuLaunchHostFunc` of `func` through the registry; the caller has bound the context and
    /// checked that `s` is not capturing.
    pub(super) fn enqueue_host_func(
        &self,
        s: StreamHandle,
        live: &Stream,
        func: HostFunc,
    ) -> Result<()> {
        let user_data = callback::register(self.id, func);
        // SAFETY: the trampoline is a valid `extern "C" fn(*mut c_void)` for the whole process;
        // `user_data` is an id it looks up, never dereferenced, so it cannot dangle.
        let r = unsafe { sys::cuLaunchHostFunc(live.raw(), Some(callback::trampoline), user_data) };
        if !r.is_success() {
            // Not enqueued: CUDA will never call it.
            callback::cancel(user_data);
        } else {
            self.host_funcs.fetch_add(1, Ordering::Relaxed);
        }
        check(r, || format!("cuLaunchHostFunc({s:?})"))
    }

    pub(super) fn create_stream(&self) -> Result<StreamHandle> {
        let _bound = self.bind()?;
        let mut s: CUstream = std::ptr::null_mut();
        let flags = CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
        // SAFETY: valid out-pointer; context bound.
        check(unsafe { sys::cuStreamCreate(&mut s, flags) }, || {
            "cuStreamCreate(CU_STREAM_NON_BLOCKING)".into()
        })?;
        let handle = StreamHandle(s as usize as u64);
        self.streams.insert(handle.0, Stream::new(s));
        Ok(handle)
    }

    pub(super) fn destroy_stream(&self, handle: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        // Only one destroy finds it; no call looks it up any more.
        let s = self.streams.remove(handle.0)?;
        self.capture_ended(handle);
        // A capture it ended here made no graph: its copies are retired.
        self.captured_copies(handle.0, None);
        // cuStreamDestroy here, or when the last call using the stream returns; enqueued work
        // still completes (the driver releases the stream's resources once it is done).
        destroy_last(s)
    }

    pub(super) fn synchronize_stream(&self, handle: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let live = self.live_stream(handle)?;
        // SAFETY: a live stream of this context, held for the call.
        let synchronized = check(unsafe { sys::cuStreamSynchronize(live.raw()) }, || {
            format!("cuStreamSynchronize({handle:?})")
        });
        self.free_retired(); // this method may block
        synchronized
    }

    pub(super) fn create_event(&self, flags: EventFlags) -> Result<EventHandle> {
        let _bound = self.bind()?;
        let mut cu_flags = 0;
        if flags.contains(EventFlags::BLOCKING_SYNC) {
            cu_flags |= CUevent_flags::CU_EVENT_BLOCKING_SYNC as c_uint;
        }
        if flags.contains(EventFlags::DISABLE_TIMING) {
            cu_flags |= CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        }
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: valid out-pointer; context bound.
        check(unsafe { sys::cuEventCreate(&mut e, cu_flags) }, || {
            format!("cuEventCreate({flags:?})")
        })?;
        self.events.insert(e as usize as u64, Event::new(e));
        Ok(EventHandle(e as usize as u64))
    }

    pub(super) fn destroy_event(&self, handle: EventHandle) -> Result<()> {
        let _bound = self.bind()?;
        // cuEventDestroy here, or when the last call using the event returns; a pending
        // record completes harmlessly (CUDA defers the release until it has).
        destroy_last(self.events.remove(handle.0)?)
    }

    pub(super) fn record_event(&self, e: EventHandle, s: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let (event, live) = (self.live_event(e)?, self.enqueue_stream(s)?);
        check(
            // SAFETY: a live event and stream of this context, held for the call.
            unsafe { sys::cuEventRecord(event.raw(), live.raw()) },
            || format!("cuEventRecord({e:?}, {s:?})"),
        )
    }

    pub(super) fn query_event(&self, e: EventHandle) -> Result<bool> {
        let _bound = self.bind()?;
        let event = self.live_event(e)?;
        // SAFETY: a live event of this context, held for the call.
        match unsafe { sys::cuEventQuery(event.raw()) } {
            Code::SUCCESS => Ok(true),
            Code::NOT_READY => Ok(false),
            code => Err(cuda_error(&format!("cuEventQuery({e:?})"), code)),
        }
    }

    pub(super) fn synchronize_event(&self, e: EventHandle) -> Result<()> {
        let _bound = self.bind()?;
        let event = self.live_event(e)?;
        // SAFETY: a live event of this context, held for the call. With CU_EVENT_BLOCKING_SYNC
        // the thread sleeps.
        check(unsafe { sys::cuEventSynchronize(event.raw()) }, || {
            format!("cuEventSynchronize({e:?})")
        })
    }

    pub(super) fn event_elapsed_ms(&self, start: EventHandle, end: EventHandle) -> Result<f32> {
        let _bound = self.bind()?;
        let (first, second) = (self.live_event(start)?, self.live_event(end)?);
        let mut ms = 0.0f32;
        check(
            // SAFETY: a valid out-pointer for one float; live events of this context, held for
            // the call. The driver refuses events without timing or not yet complete.
            unsafe { sys::cuEventElapsedTime(&mut ms, first.raw(), second.raw()) },
            || format!("cuEventElapsedTime({start:?}, {end:?})"),
        )?;
        Ok(ms)
    }

    pub(super) fn stream_wait_event(&self, s: StreamHandle, e: EventHandle) -> Result<()> {
        let _bound = self.bind()?;
        let (live, event) = (self.enqueue_stream(s)?, self.live_event(e)?);
        check(
            // SAFETY: a live stream and event of this context, held for the call; flags 0
            // (CU_EVENT_WAIT_DEFAULT).
            unsafe { sys::cuStreamWaitEvent(live.raw(), event.raw(), 0) },
            || format!("cuStreamWaitEvent({s:?}, {e:?})"),
        )
    }

    pub(super) fn launch_host_func(&self, s: StreamHandle, func: HostFunc) -> Result<()> {
        let _bound = self.bind()?;
        let live = self.enqueue_stream(s)?;
        self.refuse_capture(s, &live, "a host function")?;
        self.enqueue_host_func(s, &live, func)
    }
}
