//! Graphs: stream capture, instantiation and launch, where the runtime exports them.

use std::ptr;

use halcyon::Result;

use super::Hip;
use crate::sys;

impl Hip {
    /// Whether stream capture and graph launch are exported.
    pub fn has_graphs(self) -> bool {
        let a = self.api;
        a.hipStreamBeginCapture.is_some()
            && a.hipStreamEndCapture.is_some()
            && a.hipGraphInstantiate.is_some()
            && a.hipGraphLaunch.is_some()
            && a.hipGraphDestroy.is_some()
            && a.hipGraphExecDestroy.is_some()
    }

    /// `hipStreamBeginCapture`: later work on `stream` is recorded, not run.
    ///
    /// # Safety
    /// `stream` is a live, non-null stream not already capturing.
    pub unsafe fn stream_begin_capture(
        self,
        stream: sys::hipStream_t,
        mode: sys::hipStreamCaptureMode,
    ) -> Result<()> {
        let f = self.optional(self.api.hipStreamBeginCapture, "hipStreamBeginCapture")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(stream, mode) };
        self.check(e, || format!("hipStreamBeginCapture(mode {mode})"))
    }

    /// `hipStreamEndCapture`: the recorded graph.
    ///
    /// # Safety
    /// `stream` is a live stream that is capturing.
    pub unsafe fn stream_end_capture(self, stream: sys::hipStream_t) -> Result<sys::hipGraph_t> {
        let f = self.optional(self.api.hipStreamEndCapture, "hipStreamEndCapture")?;
        let mut g: sys::hipGraph_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid; the stream is guaranteed by the caller.
        let e = unsafe { f(stream, &mut g) };
        self.check(e, || "hipStreamEndCapture".into()).map(|()| g)
    }

    /// `hipGraphInstantiate`; the error message includes the runtime's log, if any.
    ///
    /// # Safety
    /// `graph` is a live graph of this runtime.
    pub unsafe fn graph_instantiate(self, graph: sys::hipGraph_t) -> Result<sys::hipGraphExec_t> {
        let f = self.optional(self.api.hipGraphInstantiate, "hipGraphInstantiate")?;
        let mut exec: sys::hipGraphExec_t = ptr::null_mut();
        let mut log = [0u8; 1024];
        // SAFETY: the out-pointers and the log buffer are valid for their sizes; the graph is
        // guaranteed by the caller.
        let e = unsafe {
            f(
                &mut exec,
                graph,
                ptr::null_mut(),
                log.as_mut_ptr().cast(),
                log.len(),
            )
        };
        self.check(e, || {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let log = String::from_utf8_lossy(&log[..end]);
            if log.trim().is_empty() {
                "hipGraphInstantiate".into()
            } else {
                format!("hipGraphInstantiate (log: {})", log.trim())
            }
        })
        .map(|()| exec)
    }

    /// `hipGraphLaunch`.
    ///
    /// # Safety
    /// `exec` and `stream` are live; everything the graph touches stays valid until it
    /// completes.
    pub unsafe fn graph_launch(
        self,
        exec: sys::hipGraphExec_t,
        stream: sys::hipStream_t,
    ) -> Result<()> {
        let f = self.optional(self.api.hipGraphLaunch, "hipGraphLaunch")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(exec, stream) };
        self.check(e, || "hipGraphLaunch".into())
    }

    /// `hipGraphDestroy`.
    ///
    /// # Safety
    /// `graph` is live and not used afterwards.
    pub unsafe fn graph_destroy(self, graph: sys::hipGraph_t) -> Result<()> {
        let f = self.optional(self.api.hipGraphDestroy, "hipGraphDestroy")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(graph) };
        self.check(e, || "hipGraphDestroy".into())
    }

    /// `hipGraphExecDestroy`.
    ///
    /// # Safety
    /// `exec` is live, not running, and not used afterwards.
    pub unsafe fn graph_exec_destroy(self, exec: sys::hipGraphExec_t) -> Result<()> {
        let f = self.optional(self.api.hipGraphExecDestroy, "hipGraphExecDestroy")?;
        // SAFETY: guaranteed by the caller.
        let e = unsafe { f(exec) };
        self.check(e, || "hipGraphExecDestroy".into())
    }
}
