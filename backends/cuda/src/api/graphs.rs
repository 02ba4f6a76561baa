//! Graph capture: `cuStreamBeginCapture` / `cuStreamEndCapture` and the executable graphs
//! made from them (their kernel nodes pointed at new parameters in place), the device's capture gate (see [`crate::capture`]), the refusal of host
//! functions and reads on a capturing stream, and the pinned copies of host data that
//! captured host-to-device copies read at every launch (see [`CudaApi::enable_graphs`]).

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::NonNull;

use cudarc::driver::sys::{
    CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUgraphNodeType, CUstreamCaptureMode,
    CUstreamCaptureStatus, CUDA_KERNEL_NODE_PARAMS,
};
use halcyon::{Error, Result, StatusCode};
use halcyon_stream::staging::PinnedBuffer;
use halcyon_stream::{
    Capabilities, DevicePtr, FunctionHandle, GraphHandle, KernelParams, LaunchConfig, StreamHandle,
};

use super::launch::with_kernel_params;
use super::CudaApi;
use crate::capture::CaptureGate;
use crate::objects::{destroy_last, Graph, NodeShape, Stream};
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
    ///
    /// Where the driver has `cuGraphExecKernelNodeSetParams_v2` (CUDA 12.0), it also
    /// advertises [`Capabilities::GRAPH_UPDATE`]: a list submitted with a new binding table
    /// keeps its graph, whose kernel nodes are pointed at the new buffers in place.
    pub fn enable_graphs(&mut self) {
        self.info.capabilities |= Capabilities::GRAPHS;
        if sys::exports("cuGraphExecKernelNodeSetParams_v2\0")
            && sys::exports("cuGraphKernelNodeGetParams_v2\0")
        {
            self.info.capabilities |= Capabilities::GRAPH_UPDATE;
        }
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
        if let Err(e) = check(r, || "cuGraphInstantiateWithFlags".into()) {
            // SAFETY: the graph just captured, destroyed once.
            let _ = unsafe { sys::cuGraphDestroy(graph) };
            self.captured_copies(s.0, None);
            return Err(e);
        }
        // The graph stays with its executable graph: its kernel nodes name what an update
        // changes.
        // SAFETY: the graph just captured, alive until the `Graph` made below destroys it.
        let kernels = unsafe { kernel_chain(graph) };
        let handle = exec as usize as u64;
        self.captured_copies(s.0, Some(handle));
        self.graphs.insert(handle, Graph::new(exec, graph, kernels));
        Ok(GraphHandle(handle))
    }

    pub(super) fn update_graph_kernel(
        &self,
        graph: GraphHandle,
        kernel: usize,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
    ) -> Result<()> {
        let _bound = self.bind()?;
        let held = self.graphs.get(graph.0)?;
        // The status word, if any, is held live until the update is made.
        let (f, _status) = self.launchable(function, params)?;
        let mut checked = held.in_use.lock().unwrap_or_else(|p| p.into_inner());
        let Some(kernels) = held.kernels() else {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!(
                    "{graph:?} is not a chain of nodes (as one stream's capture makes): its \
                     kernels cannot be told apart to update"
                ),
            ));
        };
        let node = *kernels.get(kernel).ok_or_else(|| {
            Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "kernel launch {kernel} of {graph:?}, which has {}",
                    kernels.len()
                ),
            )
        })?;
        let LaunchConfig {
            grid,
            block,
            shared_memory_bytes,
        } = *config;
        let wanted = node_params(f.raw(), grid, block, shared_memory_bytes);
        let shape = |p: &CUDA_KERNEL_NODE_PARAMS| -> NodeShape {
            (
                p.func,
                [p.gridDimX, p.gridDimY, p.gridDimZ],
                [p.blockDimX, p.blockDimY, p.blockDimZ],
                p.sharedMemBytes,
            )
        };
        // Updates keep the node's function and shape, so they are read once.
        let captured = match checked[kernel] {
            Some(captured) => captured,
            None => {
                let mut captured = node_params(std::ptr::null_mut(), [0; 3], [0; 3], 0);
                // SAFETY: a kernel node of the graph `held` keeps alive; valid out-pointer.
                let r = unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut captured) };
                check(r, || format!("cuGraphKernelNodeGetParams({node:p})"))?;
                *checked[kernel].insert(shape(&captured))
            }
        };
        if captured != shape(&wanted) {
            return Err(Error::new(
                StatusCode::FailedPrecondition,
                format!(
                    "kernel launch {kernel} of {graph:?} launches another kernel or shape \
                     (captured {captured:?}, asked {:?} of {}): only its parameters can change",
                    shape(&wanted),
                    f.name
                ),
            ));
        }
        let r = with_kernel_params(params, |kernel_params| {
            let update = CUDA_KERNEL_NODE_PARAMS {
                kernelParams: kernel_params,
                ..wanted
            };
            // SAFETY: an executable graph and a kernel node of the graph it was instantiated
            // from, both held (with `in_use` locked, so no launch or update of the graph runs
            // meanwhile); the function is the node's own, and the parameters match its
            // signature (checked above), so the driver reads no more than `kernel_params`
            // points at, which outlives the call; `extra` is null.
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(held.raw(), node, &update) }
        });
        check(r, || {
            format!(
                "cuGraphExecKernelNodeSetParams({graph:?}, kernel {kernel}, {} bindings)",
                params.bindings.len()
            )
        })
    }

    /// # Safety
    /// The contract of [`StreamApi`](halcyon_stream::StreamApi)'s method of the same name.
    pub(super) unsafe fn launch_graph(&self, graph: GraphHandle, s: StreamHandle) -> Result<()> {
        let _bound = self.bind()?;
        let (graph, live) = (self.graphs.get(graph.0)?, self.enqueue_stream(s)?);
        let _in_use = graph.in_use.lock().unwrap_or_else(|p| p.into_inner());
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

/// `CUDA_KERNEL_NODE_PARAMS` for a launch of `func` with this shape and no parameters yet.
fn node_params(
    func: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_memory_bytes: u32,
) -> CUDA_KERNEL_NODE_PARAMS {
    CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: block[0],
        blockDimY: block[1],
        blockDimZ: block[2],
        sharedMemBytes: shared_memory_bytes,
        kernelParams: std::ptr::null_mut(),
        extra: std::ptr::null_mut(),
        kern: std::ptr::null_mut(),
        ctx: std::ptr::null_mut(),
    }
}

/// The one node `list` reports (`cuGraphGetRootNodes`, `cuGraphNodeGetDependentNodes`):
/// `Some(None)` for none, `None` for several or an error.
fn only_node(
    list: impl FnOnce(*mut CUgraphNode, *mut usize) -> sys::Code,
) -> Option<Option<CUgraphNode>> {
    let mut nodes: [CUgraphNode; 2] = [std::ptr::null_mut(); 2];
    let mut count = nodes.len();
    if !list(nodes.as_mut_ptr(), &mut count).is_success() {
        return None;
    }
    match count {
        0 => Some(None),
        1 => Some(Some(nodes[0])),
        _ => None,
    }
}

/// The kernel nodes of `graph` in order, if it is the chain one stream's capture makes (one
/// root, each node followed by at most one): the `k`-th is the `k`-th kernel launched during
/// the capture. `None` for any other shape, or if the driver does not answer.
///
/// # Safety
/// `graph` must be a live graph of the bound context.
unsafe fn kernel_chain(graph: CUgraph) -> Option<Vec<CUgraphNode>> {
    let mut kernels = Vec::new();
    // SAFETY: the caller's contract; the out-pointers are valid for two nodes and a count.
    let mut next =
        only_node(|nodes, count| unsafe { sys::cuGraphGetRootNodes(graph, nodes, count) })?;
    while let Some(node) = next {
        // Read as a plain integer: an out-of-range value must not become an enum.
        let mut kind: u32 = u32::MAX;
        // SAFETY: a node of the live graph; the out-pointer is valid for the 4-byte enum.
        let r = unsafe { sys::cuGraphNodeGetType(node, (&mut kind as *mut u32).cast()) };
        if !r.is_success() {
            return None;
        }
        if kind == CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL as u32 {
            kernels.push(node);
        }
        // SAFETY: as above.
        next = only_node(|nodes, count| unsafe {
            sys::cuGraphNodeGetDependentNodes(node, nodes, count)
        })?;
    }
    Some(kernels)
}
