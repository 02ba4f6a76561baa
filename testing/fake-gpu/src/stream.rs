//! Streams (a worker thread each, running its operations in order), events (record
//! generations), stream capture, and the operations themselves.

use std::collections::{BTreeSet, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cudarc::driver::sys::CUresult;

use crate::contract::{fault, in_host_function, lock, sticky, violation, Ret};
use crate::driver::HOST_FUNCS_RUN;
use crate::kernels::{self, Launch};
use crate::memory::{memory, Kind};

/// How often a blocked wait looks at the sticky error.
const FAULT_POLL: Duration = Duration::from_millis(5);

/// How long every kernel takes (`HALCYON_FAKE_GPU_KERNEL_US`, default 100 µs): long enough
/// that work is still in flight when the host goes on, as on a GPU, so that memory freed or
/// results read too early are caught rather than hidden by an instant device.
fn kernel_latency() -> Duration {
    static LATENCY: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LATENCY.get_or_init(|| {
        let micros = std::env::var("HALCYON_FAKE_GPU_KERNEL_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100);
        Duration::from_micros(micros)
    })
}

/// An event: the generation of its latest record, which records completed, and whether its
/// latest record was made in a stream capture (a *captured event*, which only orders work
/// inside the capture).
pub(crate) struct Event {
    /// The device it was created on.
    pub device: u32,
    state: Mutex<EventState>,
    completed: Condvar,
    /// HIP's per-event lock, which `hipEventSynchronize` holds for its whole wait (see
    /// [`crate::hip`]); CUDA has none.
    pub hip_lock: Mutex<()>,
    /// The generation the holder of [`Event::hip_lock`] in `hipEventSynchronize` waits for.
    pub hip_synchronizing: AtomicU64,
}

#[derive(Default)]
struct EventState {
    recorded: u64,
    /// Every generation up to this one completed...
    done_through: u64,
    /// ...and these after it (records on several streams complete out of order).
    done: BTreeSet<u64>,
    captured: bool,
}

impl EventState {
    fn is_done(&self, generation: u64) -> bool {
        generation <= self.done_through || self.done.contains(&generation)
    }
}

impl Event {
    /// A new event of device `device`.
    pub(crate) fn new(device: u32) -> Arc<Event> {
        Arc::new(Event {
            device,
            state: Mutex::default(),
            completed: Condvar::new(),
            hip_lock: Mutex::new(()),
            hip_synchronizing: AtomicU64::new(0),
        })
    }

    /// A new record outside any capture: its generation.
    fn next_generation(&self) -> u64 {
        let mut state = lock(&self.state);
        state.recorded += 1;
        state.captured = false;
        state.recorded
    }

    /// A record inside a capture.
    fn capture(&self) {
        lock(&self.state).captured = true;
    }

    /// The latest record's generation (0: never recorded), and whether it was captured.
    pub(crate) fn latest(&self) -> (u64, bool) {
        let state = lock(&self.state);
        (state.recorded, state.captured)
    }

    fn complete(&self, generation: u64) {
        let mut state = lock(&self.state);
        state.done.insert(generation);
        loop {
            let next = state.done_through + 1;
            if !state.done.remove(&next) {
                break;
            }
            state.done_through = next;
        }
        self.completed.notify_all();
    }

    /// `cuEventQuery`: whether the latest record completed.
    pub(crate) fn query(&self) -> bool {
        let state = lock(&self.state);
        state.is_done(state.recorded)
    }

    /// Whether record `generation` completed.
    pub(crate) fn is_done(&self, generation: u64) -> bool {
        lock(&self.state).is_done(generation)
    }

    /// Blocks until record `generation` completed: the sticky error if the event's device
    /// faults. (`CUDA_ERROR_CONTEXT_IS_DESTROYED` if its context goes meanwhile: the record
    /// was dropped.)
    pub(crate) fn wait(&self, generation: u64) -> Ret {
        let epoch = crate::driver::epoch(self.device);
        let mut state = lock(&self.state);
        while !state.is_done(generation) {
            if let Some(code) = sticky(self.device) {
                return Err(code);
            }
            if crate::driver::epoch(self.device) != epoch {
                return Err(CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED);
            }
            state = self
                .completed
                .wait_timeout(state, FAULT_POLL)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }
}

/// Where a copy reads.
#[derive(Clone)]
pub(crate) enum Source {
    /// Device-reachable memory, checked when the device gets to it.
    Checked(u64),
    /// Pageable host bytes, taken when the call was made.
    Bytes(Arc<Vec<u8>>),
}

/// One operation in a stream (or a graph).
#[derive(Clone)]
pub(crate) enum Op {
    /// Wait until `event`'s record `generation` completed.
    Wait { event: Arc<Event>, generation: u64 },
    /// Complete `event`'s record `generation`.
    Record { event: Arc<Event>, generation: u64 },
    /// Run a kernel.
    Kernel(Arc<Launch>),
    /// Copy `len` bytes; `dst_checked`: the destination is device-reachable memory (else the
    /// caller's pageable memory, which it keeps valid while it waits for the copy).
    Copy {
        dst: u64,
        dst_checked: bool,
        src: Source,
        len: usize,
        call: &'static str,
    },
    /// Fill `count` elements of `width` bytes with `value`.
    Memset {
        dst: u64,
        value: u32,
        width: usize,
        count: usize,
    },
    /// A host function.
    Host {
        func: unsafe extern "C" fn(*mut c_void),
        data: usize,
    },
    /// A HIP stream callback (`hipStreamAddCallback`): called with the stream, `hipSuccess`
    /// and its user data.
    Callback {
        func: unsafe extern "C" fn(*mut c_void, i32, *mut c_void),
        data: usize,
    },
    /// Free a stream-ordered allocation (`call` names the free).
    FreeAsync { ptr: u64, call: &'static str },
}

impl Op {
    /// Runs the operation on `stream`, a stream of device `device`.
    fn run(&self, stream: u64, device: u32) {
        match self {
            Op::Wait { event, generation } => {
                let _ = event.wait(*generation);
            }
            Op::Record { event, generation } => event.complete(*generation),
            Op::Kernel(launch) => {
                std::thread::sleep(kernel_latency());
                if let Err((code, why, broken)) = kernels::run(launch, device) {
                    let why = format!("kernel {} on stream {stream:#x}: {why}", launch.name());
                    if broken {
                        violation(why.clone());
                    }
                    fault(device, code, &why);
                }
            }
            Op::Copy {
                dst,
                dst_checked,
                src,
                len,
                call,
            } => {
                let mut memory = memory();
                if sticky(device).is_some() {
                    return; // faulted meanwhile: the host may have freed what this uses
                }
                let mut checked = if *dst_checked {
                    memory.check_on(*dst, *len, device)
                } else {
                    Ok(())
                };
                if let (Ok(()), Source::Checked(src)) = (&checked, src) {
                    checked = memory.check_on(*src, *len, device);
                }
                if let Err(why) = checked {
                    drop(memory);
                    let why =
                        format!("{call} on stream {stream:#x}, when the device got to it: {why}");
                    violation(why.clone());
                    fault(device, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, &why);
                    return;
                }
                let from = match src {
                    Source::Checked(src) => *src,
                    Source::Bytes(bytes) => bytes.as_ptr() as usize as u64,
                };
                // SAFETY: both ranges were checked against live allocations under this lock,
                // or are the call's own bytes, or caller memory it keeps valid while it waits.
                unsafe { memory.copy(*dst, from, *len) };
            }
            Op::Memset {
                dst,
                value,
                width,
                count,
            } => {
                let mut memory = memory();
                if sticky(device).is_some() {
                    return;
                }
                let len = width * count;
                if let Err(why) = memory.check_on(*dst, len, device) {
                    drop(memory);
                    let why =
                        format!("a memset on stream {stream:#x}, when the device got to it: {why}");
                    violation(why.clone());
                    fault(device, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, &why);
                    return;
                }
                memory.fill(*dst, *value, *width, *count);
            }
            Op::Host { func, data } => {
                HOST_FUNCS_RUN.fetch_add(1, Ordering::Relaxed);
                // SAFETY: the function and its user data were passed to cuLaunchHostFunc, whose
                // caller promised it may be called with them once the stream gets here.
                in_host_function(|| unsafe { func(*data as *mut c_void) });
            }
            Op::Callback { func, data } => {
                HOST_FUNCS_RUN.fetch_add(1, Ordering::Relaxed);
                // SAFETY: as for `Op::Host`, with hipStreamAddCallback's arguments.
                in_host_function(|| unsafe {
                    func(stream as usize as *mut c_void, 0, *data as *mut c_void)
                });
            }
            Op::FreeAsync { ptr, call } => {
                let mut memory = memory();
                if sticky(device).is_none()
                    && memory
                        .free(*ptr, |k| matches!(k, Kind::Pool(_)), call)
                        .is_err()
                {
                    drop(memory);
                    violation(format!(
                        "{call}({ptr:#x}) on stream {stream:#x}: when the stream got \
                         there, {ptr:#x} was no stream-ordered allocation"
                    ));
                }
            }
        }
    }
}

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
    /// Its context's incarnation when it was made ([`crate::driver::epoch`]).
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
            epoch: crate::driver::epoch(device),
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
            if sticky(self.device).is_none() && self.epoch == crate::driver::epoch(self.device) {
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
