//! Streams: a worker thread each, running its operations in order, and stream capture.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cudarc::driver::sys::CUresult;

use crate::model::contract::{lock, sticky, Ret};
use crate::model::driver::{driver, next_handle, CAPTURES_INVALIDATED, TIMED_RECORDS};
use crate::model::event::Event;
use crate::model::ops::Op;

/// How often a blocked wait looks at the sticky error.
pub(crate) const FAULT_POLL: Duration = Duration::from_millis(5);

/// An ongoing stream capture.
pub(crate) struct Capture {
    pub ops: Vec<Op>,
    /// Set when something invalidated it.
    pub error: Option<CUresult>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Op>,
    enqueued: u64,
    completed: u64,
    capture: Option<Capture>,
    destroyed: bool,
}

/// A stream: a worker thread running its operations in order.
pub(crate) struct Stream {
    pub handle: u64,
    /// The device it was created on.
    pub device: u32,
    /// Its context's incarnation when it was made ([`crate::model::driver::epoch`]).
    epoch: u64,
    state: Mutex<State>,
    work: Condvar,
    done: Condvar,
}

impl Stream {
    /// A new stream of device `device` and its worker thread (which lives until the stream is destroyed and
    /// drained).
    pub(crate) fn spawn(handle: u64, device: u32) -> Result<Arc<Stream>, CUresult> {
        let stream = Arc::new(Stream {
            handle,
            device,
            epoch: crate::model::driver::epoch(device),
            state: Mutex::default(),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let worker = stream.clone();
        std::thread::Builder::new()
            .name(format!("fake-gpu-stream-{handle:#x}"))
            .spawn(move || worker.run())
            .map_err(|_| CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
        Ok(stream)
    }

    fn run(&self) {
        loop {
            let op = {
                let mut state = lock(&self.state);
                loop {
                    if let Some(op) = state.queue.pop_front() {
                        break op;
                    }
                    if state.destroyed {
                        return;
                    }
                    state = self.work.wait(state).unwrap_or_else(|p| p.into_inner());
                }
            };
            // After a fault the device runs nothing more (host functions included), nor after
            // its context went.
            if sticky(self.device).is_none()
                && self.epoch == crate::model::driver::epoch(self.device)
            {
                op.run(self.handle, self.device);
            }
            drop(op);
            let mut state = lock(&self.state);
            state.completed += 1;
            self.done.notify_all();
        }
    }

    /// Enqueues `op`, or adds it to the capture: the position it will complete at, or `None`
    /// when captured.
    pub(crate) fn enqueue(&self, op: Op) -> Option<u64> {
        let mut state = lock(&self.state);
        if let Some(capture) = &mut state.capture {
            capture.ops.push(op);
            return None;
        }
        state.queue.push_back(op);
        state.enqueued += 1;
        self.work.notify_one();
        Some(state.enqueued)
    }

    /// Enqueues `ops` together (a graph launch: nothing interleaves), or adds them to the
    /// capture.
    pub(crate) fn enqueue_all(&self, ops: &[Op]) {
        let mut state = lock(&self.state);
        if let Some(capture) = &mut state.capture {
            capture.ops.extend(ops.iter().cloned());
            return;
        }
        state.queue.extend(ops.iter().cloned());
        state.enqueued += ops.len() as u64;
        self.work.notify_one();
    }

    /// `cuEventRecord` on this stream: a new record of `event` (decided under the stream's lock,
    /// so a capture cannot begin in between), or inside a capture a captured event (no node:
    /// it only orders work within the capture).
    pub(crate) fn record(&self, event: Arc<Event>) {
        let mut state = lock(&self.state);
        if state.capture.is_some() {
            event.capture();
            return;
        }
        if event.timing {
            TIMED_RECORDS.fetch_add(1, Ordering::Relaxed);
        }
        let generation = event.next_generation();
        state.queue.push_back(Op::Record { event, generation });
        state.enqueued += 1;
        self.work.notify_one();
    }

    /// `cuStreamWaitEvent` on this stream. Inside a capture, a captured event orders nothing
    /// more (captures here are single-stream), while one recorded outside invalidates the
    /// capture (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`: an external dependency needs
    /// `CU_EVENT_WAIT_EXTERNAL`). Outside a capture, waiting on a captured event (joining the
    /// capture) is not modelled: `CUDA_ERROR_NOT_SUPPORTED`.
    pub(crate) fn wait_event(&self, event: Arc<Event>) -> Ret {
        let mut state = lock(&self.state);
        let (generation, captured) = event.latest();
        if let Some(capture) = &mut state.capture {
            if captured {
                return Ok(());
            }
            capture
                .error
                .get_or_insert(CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
            return Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_ISOLATION);
        }
        if captured {
            return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
        }
        if generation > 0 {
            state.queue.push_back(Op::Wait { event, generation });
            state.enqueued += 1;
            self.work.notify_one();
        }
        Ok(())
    }

    /// Blocks until the operation at `position` completed (also after a fault: the worker
    /// drains what is queued without running it).
    pub(crate) fn wait_for(&self, position: u64) {
        let mut state = lock(&self.state);
        while state.completed < position {
            state = self.done.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether everything enqueued so far completed (`cuStreamQuery`, `hipStreamQuery`).
    pub(crate) fn is_idle(&self) -> bool {
        let state = lock(&self.state);
        state.completed == state.enqueued
    }

    /// `cuStreamSynchronize`.
    pub(crate) fn synchronize(&self) -> Ret {
        let position = lock(&self.state).enqueued;
        self.wait_for(position);
        sticky(self.device).map_or(Ok(()), Err)
    }

    /// `cuStreamDestroy`: the worker finishes what is queued, then exits.
    pub(crate) fn destroy(&self) {
        let mut state = lock(&self.state);
        state.destroyed = true;
        state.capture = None;
        self.work.notify_one();
    }

    /// Whether a capture is under way (valid or invalidated).
    pub(crate) fn capture_status(&self) -> Option<Option<CUresult>> {
        lock(&self.state).capture.as_ref().map(|c| c.error)
    }

    /// Starts capturing: `CUDA_ERROR_ILLEGAL_STATE` if already capturing.
    pub(crate) fn begin_capture(&self) -> Ret {
        let mut state = lock(&self.state);
        if state.capture.is_some() {
            return Err(CUresult::CUDA_ERROR_ILLEGAL_STATE);
        }
        state.capture = Some(Capture {
            ops: Vec::new(),
            error: None,
        });
        Ok(())
    }

    /// Marks the capture under way invalid with `code` (what its `cuStreamEndCapture` reports
    /// as `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`).
    pub(crate) fn invalidate_capture(&self, code: CUresult) {
        if let Some(capture) = &mut lock(&self.state).capture {
            capture.error.get_or_insert(code);
        }
    }

    /// Ends the capture: its operations, `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`, or
    /// `CUDA_ERROR_ILLEGAL_STATE` if none was under way.
    pub(crate) fn end_capture(&self) -> Result<Vec<Op>, CUresult> {
        match lock(&self.state).capture.take() {
            None => Err(CUresult::CUDA_ERROR_ILLEGAL_STATE),
            Some(Capture { error: Some(_), .. }) => {
                Err(CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
            }
            Some(Capture { ops, .. }) => Ok(ops),
        }
    }
}

impl Stream {
    /// Enqueues `function(data)` (a host function), run on the worker when it gets there.
    pub(crate) fn host_func(
        &self,
        function: Option<unsafe extern "C" fn(*mut c_void)>,
        data: *mut c_void,
    ) -> Ret {
        let func = function.ok_or(CUresult::CUDA_ERROR_INVALID_VALUE)?;
        self.enqueue(Op::Host {
            func,
            data: data as usize,
        });
        Ok(())
    }

    /// Whether everything enqueued so far completed: `CUDA_ERROR_NOT_READY` if not.
    pub(crate) fn status(&self) -> Ret {
        if self.is_idle() {
            Ok(())
        } else {
            Err(CUresult::CUDA_ERROR_NOT_READY)
        }
    }
}

/// Creates a stream of device `device` with its worker thread: its handle.
pub(crate) fn create_stream(device: u32) -> Result<u64, CUresult> {
    let h = next_handle();
    let stream = Stream::spawn(h, device)?;
    let mut driver = driver();
    driver.streams.insert(h, stream);
    driver.adopt(h, device);
    Ok(h)
}

/// The live stream `h`: a violation and `CUDA_ERROR_INVALID_HANDLE` otherwise (the legacy
/// default stream, 0, included).
pub(crate) fn find_stream(h: u64, call: &str) -> Result<Arc<Stream>, CUresult> {
    driver().find(|d| &d.streams, h, "stream", call)
}

/// Destroys stream `h`: queued work still completes; the handle is dead at once.
pub(crate) fn destroy_stream(h: u64, call: &str) -> Ret {
    let stream = driver().remove(|d| &mut d.streams, h, "stream", call)?;
    stream.destroy();
    Ok(())
}

/// Waits for every stream's work enqueued so far (`hipFree`, `hipHostFree`).
pub(crate) fn synchronize_all() {
    let streams: Vec<Arc<Stream>> = driver().streams.values().cloned().collect();
    for stream in streams {
        let _ = stream.synchronize();
    }
}

/// Invalidates every capture under way on device `device`'s streams with `code`, counting
/// each in `FakeStats::captures_invalidated` (a call that synchronises the context).
pub(crate) fn invalidate_captures(device: u32, code: CUresult) {
    let streams: Vec<Arc<Stream>> = driver()
        .streams
        .values()
        .filter(|s| s.device == device)
        .cloned()
        .collect();
    for stream in streams {
        if stream.capture_status() == Some(None) {
            stream.invalidate_capture(code);
            CAPTURES_INVALIDATED.fetch_add(1, Ordering::Relaxed);
        }
    }
}
