//! Graph capture: `cuStreamBeginCapture` / `cuStreamEndCapture` and the executable graphs
//! made from them, the device's capture gate (see [`crate::capture`]), the refusal of host
//! functions and reads on a capturing stream, and the pinned copies of host data that
//! captured host-to-device copies read at every launch (see [`CudaApi::enable_graphs`]).

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::NonNull;

use cudarc::driver::sys::{CUgraph, CUgraphExec, CUstreamCaptureMode, CUstreamCaptureStatus};
use halcyon::{Error, Result, StatusCode};
use halcyon_stream::staging::PinnedBuffer;
use halcyon_stream::{Capabilities, DevicePtr, GraphHandle, StreamHandle};

use super::CudaApi;
use crate::capture::CaptureGate;
use crate::objects::{destroy_last, Graph, Stream};
use crate::result::check;
use crate::sys;

/// Pinned copies of captured host-to-device data (see [`CudaApi::captured`]).
#[derive(Default)]
pub(super) struct CapturedCopies {
    pub(super) by_stream: HashMap<u64, Vec<PinnedBuffer>>,
    pub(super) by_graph: HashMap<u64, Vec<PinnedBuffer>>,
    pub(super) retired: Vec<PinnedBuffer>,
}

impl CudaApi {
    /// Advertises [`Capabilities::GRAPHS`], so the stream layer replays a reusable command list
    /// submitted again as a CUDA graph (captured with `cuStreamBeginCapture` in relaxed mode,
    /// then `cuGraphLaunch`) instead of enqueueing its commands one by one.
    ///
    /// A graph's memcpy nodes read their host source at every launch, so a captured
    /// host-to-device update is taken from a pinned copy made at capture time (stream capture
    /// does not take pageable host memory), which lives as long as the graph: once the graph is
    /// destroyed it is freed at the next `free`, `synchronize_stream` or drop of the API
    /// (`cuMemFreeHost` may wait for the device, which those calls may). The graph methods
    /// themselves work either way.
    pub fn enable_graphs(&mut self) {
        self.info.capabilities |= Capabilities::GRAPHS;
    }

    /// Bytes of pinned memory held for captured host-to-device copies (see
    /// [`CudaApi::enable_graphs`]): of captures under way, of graphs alive, and of graphs
    /// destroyed whose copies a later `free`, `synchronize_stream` or drop frees.
    pub fn captured_copy_bytes(&self) -> usize {
        let captured = self.captured.lock().unwrap_or_else(|p| p.into_inner());
        let bytes = |copies: &Vec<PinnedBuffer>| copies.iter().map(|p| p.capacity).sum::<usize>();
        captured.by_stream.values().map(bytes).sum::<usize>()
            + captured.by_graph.values().map(bytes).sum::<usize>()
            + bytes(&captured.retired)
    }

    /// Whether `s` is being captured into a graph.
    pub(super) fn capturing(&self, s: StreamHandle, live: &Stream) -> Result<bool> {
        // Read as a plain integer: an out-of-range value must not become an enum.
        let mut status: u32 = 0;
        // SAFETY: a live stream; the out-pointer is valid for the 4-byte enum.
        let r = unsafe { sys::cuStreamIsCapturing(live.raw(), (&mut status as *mut u32).cast()) };
        check(r, || format!("cuStreamIsCapturing({s:?})"))?;
        Ok(status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE as u32)
    }

    /// `FailedPrecondition` if `s` is being captured. Host functions here are one-shot closures
    /// taken out of the registry when they run (`src/callback.rs`), so a host node in a graph
    /// would run its closure on the first launch only; a captured device-to-host read would
    /// also hand its pinned staging back to the pool after the first launch while every later
    /// launch still copies into it (corrupting whatever read reuses it). Refuse both instead.
    pub(super) fn refuse_capture(&self, s: StreamHandle, live: &Stream, what: &str) -> Result<()> {
        if !self.capturing(s, live)? {
            return Ok(());
        }
        Err(Error::new(
            StatusCode::FailedPrecondition,
            format!(
                "{what} cannot be enqueued on {s:?} while it is captured into a graph (a CUDA \
                 graph would replay it, but halcyon-cuda's host functions run once); enqueue it \
                 outside the capture"
            ),
        ))
    }

    /// Held across a call that may synchronise the context (`cuMemFree`, `cuMemFreeHost`,
    /// `cuModuleUnload`), which would invalidate a graph capture: waits until no stream of
    /// this device captures, and keeps captures from beginning meanwhile (see
    /// [`crate::capture`]).
    pub(super) fn no_captures(&self) -> crate::capture::SyncCall {
        CaptureGate::get().sync(self.device)
    }

    /// Stops counting stream `s`'s capture (ended, or its stream destroyed), if it has one.
    pub(super) fn capture_ended(&self, s: StreamHandle) {
        let began = self
            .capturing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&s.0);
        if let Some(thread) = began {
            CaptureGate::get().end(self.device, thread);
        }
    }

    /// Moves the pinned copies of capture `from` (a stream's) to graph `to`, or retires them.
    pub(super) fn captured_copies(&self, from: u64, to: Option<u64>) {
        let mut captured = self.captured.lock().unwrap_or_else(|p| p.into_inner());
        let copies = captured.by_stream.remove(&from).unwrap_or_default();
        match to {
            Some(graph) => captured.by_graph.entry(graph).or_default().extend(copies),
            None => captured.retired.extend(copies),
        }
    }

    /// A host-to-device copy on a stream captured into a graph. The graph's memcpy node reads
    /// its source at every launch, and capture does not take pageable memory: the bytes are
    /// copied now into pinned memory kept with the graph (see [`CudaApi::captured`]). No host
    /// function is involved (it would run once only).
    ///
    /// # Safety
    /// `src..src+bytes` must be readable.
    pub(super) unsafe fn copy_captured_host_to_device(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        s: StreamHandle,
        live: &Stream,
    ) -> Result<()> {
        let mut captured = self.captured.lock().unwrap_or_else(|p| p.into_inner());
        let copies = captured.by_stream.entry(s.0).or_default();
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; allowed while capturing in relaxed mode.
        check(unsafe { sys::cuMemAllocHost_v2(&mut ptr, bytes) }, || {
            format!("cuMemAllocHost({bytes} bytes) for a captured host-to-device copy")
        })?;
        let ptr: NonNull<u8> = NonNull::new(ptr.cast()).ok_or_else(|| {
            Error::new(
                StatusCode::Internal,
                "cuMemAllocHost returned a null pointer",
            )
        })?;
        let pinned = PinnedBuffer {
            ptr,
            capacity: bytes,
        };
        // SAFETY: the caller guarantees `src..src+bytes` is readable; the new pinned buffer
        // holds `bytes` bytes and overlaps nothing.
        unsafe { pinned.fill_from(src, bytes) };
        copies.push(pinned);
        drop(captured);
        check(
            // SAFETY: a pinned copy kept with the capture, then its graph, and freed only after the
            // graph was destroyed, by a call that waits for the device's work.
            unsafe { sys::cuMemcpyHtoDAsync_v2(dst.0, ptr.as_ptr().cast(), bytes, live.raw()) },
            || format!("cuMemcpyHtoDAsync({dst:?}, {bytes} bytes, {s:?}) during capture"),
        )
    }

    pub(super) fn begin_capture(&self, s: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let live = self.live_stream(s)?;
        // Relaxed mode: no thread is refused "potentially unsafe" calls while this stream
        // captures. Other threads (the reactor's probe, completion threads) keep querying and
        // synchronising events, and a captured host-to-device copy allocates pinned memory on
        // this thread (cuMemAllocHost), which the global and thread-local modes would refuse.
        // Relaxed mode also lets other threads free memory and unload modules, which may
        // synchronise the context and so invalidate the capture: the device's capture gate
        // holds them back until it ends (see [`crate::capture`]).
        let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        CaptureGate::get().begin(self.device);
        // An entry already there is the capture under way on the stream: it stays counted for
        // the thread that began it.
        let previous = match self
            .capturing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(s.0)
        {
            std::collections::hash_map::Entry::Occupied(_) => Some(()),
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(std::thread::current().id());
                None
            }
        };
        if previous.is_some() {
            // Already capturing: the driver refuses below, and the first capture stays counted.
            CaptureGate::get().end(self.device, std::thread::current().id());
        }
        // No enqueue on any of this API's streams meanwhile (see `capture_transitions`); taken
        // after the capture gate, which may wait for a module load.
        let transition = self
            .capture_transitions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let began = check(
            // SAFETY: a live stream of this context, held for the call.
            unsafe { sys::cuStreamBeginCapture_v2(live.raw(), mode) },
            || format!("cuStreamBeginCapture({s:?}, CU_STREAM_CAPTURE_MODE_RELAXED)"),
        );
        drop(transition);
        if began.is_err() && previous.is_none() {
            self.capture_ended(s);
        }
        began
    }

    pub(super) fn end_capture(&self, s: StreamHandle) -> Result<GraphHandle> {
        let _bound = self.bind()?;
        let live = self.live_stream(s)?;
        let mut graph: CUgraph = std::ptr::null_mut();
        let transition = self
            .capture_transitions
            .write()
            .unwrap_or_else(|p| p.into_inner());
        // SAFETY: a live stream, held for the call (a stream not capturing is the driver's
        // error); valid out-pointer.
        let ended = unsafe { sys::cuStreamEndCapture(live.raw(), &mut graph) };
        drop(transition);
        // The stream no longer captures, whatever the result.
        self.capture_ended(s);
        if let Err(e) = check(ended, || format!("cuStreamEndCapture({s:?})")) {
            // No graph: nothing will read the capture's copies.
            self.captured_copies(s.0, None);
            return Err(e);
        }
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: the graph just captured; valid out-pointer; flags 0.
        let r = self
            .trimming_on_oom(|| unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) });
        // SAFETY: the executable graph does not depend on the graph it was instantiated from.
        let _ = unsafe { sys::cuGraphDestroy(graph) };
        if let Err(e) = check(r, || "cuGraphInstantiateWithFlags".into()) {
            self.captured_copies(s.0, None);
            return Err(e);
        }
        let handle = exec as usize as u64;
        self.captured_copies(s.0, Some(handle));
        self.graphs.insert(handle, Graph::new(exec));
        Ok(GraphHandle(handle))
    }

    /// # Safety
    /// The contract of [`StreamApi`](halcyon_stream::StreamApi)'s method of the same name.
    pub(super) unsafe fn launch_graph(&self, graph: GraphHandle, s: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let (graph, live) = (self.graphs.get(graph.0)?, self.enqueue_stream(s)?);
        check(
            // SAFETY: an executable graph of this API and a live stream, both held for the call.
            unsafe { sys::cuGraphLaunch(graph.raw(), live.raw()) },
            || format!("cuGraphLaunch({:p}, {s:?})", graph.raw()),
        )
    }

    pub(super) fn destroy_graph(&self, graph: GraphHandle) -> Result<()> {
        let _bound = self.bind()?;
        let held = self.graphs.remove(graph.0)?;
        // Its pinned copies are retired: freed by a later call that waits for the device, so
        // after the runs in flight that read them.
        {
            let mut captured = self.captured.lock().unwrap_or_else(|p| p.into_inner());
            let copies = captured.by_graph.remove(&graph.0).unwrap_or_default();
            captured.retired.extend(copies);
        }
        // cuGraphExecDestroy here, or when a launch under way returns; runs in flight finish
        // first (CUDA frees it asynchronously on completion).
        destroy_last(held)
    }
}
