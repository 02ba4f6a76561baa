//! Reusable command lists replayed as graphs.
//!
//! # When a list becomes a graph
//!
//! A reusable [`halcyon::CommandBuffer`] names its recording ([`Recording`]) in every
//! submission. The first submission of a recording is issued directly, the second is captured
//! into a graph (`begin_capture`, the usual operations, `end_capture`, then `launch_graph`),
//! and every later one launches that graph: one API call per submission instead of one per
//! command. One-shot lists, lists with status words (a graph would reuse one word across
//! launches whose checks overlap) and lists on an API without
//! [`Capabilities::GRAPHS`](crate::Capabilities::GRAPHS) are always issued directly.
//!
//! # New buffers, same graph
//!
//! Submissions of one recording differ only in the buffers their binding tables name. The
//! cache keeps, with each graph, the device address of every binding the graph now uses. A
//! launch resolves the submission's bindings (which also keeps their memory alive until it
//! completes, and fails like a direct issue if one was released) and compares: a dispatch whose
//! addresses moved has its kernel pointed at the new ones in place
//! ([`StreamApi::update_graph_kernel`], `cuGraphExecKernelNodeSetParams`), which costs one
//! call per moved dispatch and no new graph. A fill, copy or update whose range moved cannot be
//! updated that way: that submission is issued directly and the graph stays as it is, as it
//! does where the API cannot update graphs ([`keys::GRAPH_BYPASSES`](super::keys)).
//!
//! # Lifetime
//!
//! A graph holds device addresses. That stays right: a buffer's memory never changes while the
//! buffer lives, only released (a queue `dealloca`), and every launch resolves each buffer
//! again. The cache is keyed by the recording through a `Weak`, so a recording whose command
//! buffers are all gone has its graph destroyed at the next lookup; at most [`MAX_GRAPHS`] are
//! kept per queue, the least recently used dropped first.

use std::sync::{Arc, Mutex};

use crate::api::{DevicePtr, GraphHandle, KernelParams, StreamApi};
use crate::device::core::{lock, Core, QueueStreams, Stats};
use crate::timepoint::Timepoint;
use halcyon::command_buffer::{Command, Recording};
use halcyon::Result;

/// Graphs (or first sightings) a queue keeps; the least recently used are dropped.
pub(crate) const MAX_GRAPHS: usize = 64;

/// A graph captured from a recording, with the address of every binding of the list its
/// kernels now address, in command order (as [`Command::for_each_binding`] visits them).
pub(crate) struct Captured {
    graph: GraphHandle,
    addresses: Vec<DevicePtr>,
    /// A submission's addresses, compared with `addresses` (kept to reuse its memory).
    scratch: Vec<DevicePtr>,
}

/// What to do with a submission of a recording.
pub(crate) enum Plan {
    /// First sighting: issue the commands directly.
    Direct,
    /// Second sighting: capture the commands into a graph, then launch it.
    Capture,
    /// Captured before: launch its graph (taken out of the cache until the issue puts it back).
    Launch(Captured),
}

struct Entry {
    recording: Recording,
    graph: Option<Captured>,
}

/// One queue's graph cache. Issues of one queue hold its issue lock from
/// [`GraphCache::plan`] until they put the graph back, so an entry is never planned twice at
/// once.
#[derive(Default)]
pub(crate) struct GraphCache {
    entries: Mutex<Vec<Entry>>,
}

impl GraphCache {
    /// The plan for `recording`, and the graphs that fell out of the cache (the caller destroys
    /// them: their recordings are gone, or they were the least recently used).
    pub(crate) fn plan(&self, recording: &Recording) -> (Plan, Vec<GraphHandle>) {
        let mut entries = lock(&self.entries);
        let mut dropped = Vec::new();
        entries.retain_mut(|e| {
            let live = e.recording.is_live();
            if !live {
                dropped.extend(e.graph.take().map(|c| c.graph));
            }
            live
        });
        let plan = match entries.iter().position(|e| e.recording == *recording) {
            Some(at) => {
                // Most recently used last.
                let mut entry = entries.remove(at);
                let plan = entry.graph.take().map_or(Plan::Capture, Plan::Launch);
                entries.push(entry);
                plan
            }
            None => {
                if entries.len() >= MAX_GRAPHS {
                    dropped.extend(entries.remove(0).graph.map(|c| c.graph));
                }
                entries.push(Entry {
                    recording: recording.clone(),
                    graph: None,
                });
                Plan::Direct
            }
        };
        (plan, dropped)
    }

    /// Puts `captured` back as `recording`'s graph; the graph to destroy if the recording is no
    /// longer cached.
    fn keep(&self, recording: &Recording, captured: Captured) -> Option<GraphHandle> {
        let mut entries = lock(&self.entries);
        match entries.iter_mut().find(|e| e.recording == *recording) {
            Some(entry) if entry.graph.is_none() => {
                entry.graph = Some(captured);
                None
            }
            _ => Some(captured.graph),
        }
    }

    /// Forgets `recording` (its capture failed), so its next submission starts over.
    fn forget(&self, recording: &Recording) -> Option<GraphHandle> {
        let mut entries = lock(&self.entries);
        let at = entries.iter().position(|e| e.recording == *recording)?;
        entries.remove(at).graph.map(|c| c.graph)
    }

    /// Every cached graph (the device is going away).
    pub(crate) fn drain(&self) -> Vec<GraphHandle> {
        lock(&self.entries)
            .drain(..)
            .filter_map(|e| e.graph.map(|c| c.graph))
            .collect()
    }
}

/// What a launch found when it compared a submission's addresses with its graph's.
enum Moved {
    /// Nothing, or only dispatches' bindings: launch (after updating those).
    Kernels(usize),
    /// A fill, copy or update addresses other bytes: issue directly.
    Transfers,
}

impl<A: StreamApi> Core<A> {
    /// Enqueues `commands`, a submission of `recording`, directly or through the recording's
    /// graph (see the [module docs](self)).
    pub(super) fn enqueue_recorded(
        &self,
        queue: &QueueStreams,
        commands: &Arc<[Command]>,
        recording: &Recording,
        timepoint: &mut Timepoint,
    ) -> Result<()> {
        let (plan, dropped) = queue.graphs.plan(recording);
        for graph in dropped {
            let _ = self.api.destroy_graph(graph);
        }
        match plan {
            Plan::Direct => self.enqueue_list(queue.stream, commands, 0, timepoint),
            Plan::Capture => self.capture(queue, commands, recording, timepoint),
            Plan::Launch(mut captured) => {
                let kept = timepoint.memory.len();
                match self.relaunch(queue, commands, &mut captured, timepoint) {
                    Ok(true) => {
                        self.keep_graph(queue, recording, captured);
                        Ok(())
                    }
                    Ok(false) => {
                        // Issued directly instead; the graph stays as it was.
                        Stats::bump(&self.stats.graph_bypasses, 1);
                        self.keep_graph(queue, recording, captured);
                        timepoint.memory.truncate(kept);
                        self.enqueue_list(queue.stream, commands, 0, timepoint)
                    }
                    Err(Failed::Issue(error)) => {
                        // As a direct issue would fail: the graph is still right.
                        self.keep_graph(queue, recording, captured);
                        Err(error)
                    }
                    Err(Failed::Update) => {
                        // Some kernels may point at the new buffers and some not: the graph
                        // goes, and the recording starts over.
                        Stats::bump(&self.stats.graph_bypasses, 1);
                        queue.graphs.forget(recording);
                        let _ = self.api.destroy_graph(captured.graph);
                        timepoint.memory.truncate(kept);
                        self.enqueue_list(queue.stream, commands, 0, timepoint)
                    }
                }
            }
        }
    }

    fn keep_graph(&self, queue: &QueueStreams, recording: &Recording, captured: Captured) {
        if let Some(graph) = queue.graphs.keep(recording, captured) {
            let _ = self.api.destroy_graph(graph);
        }
    }

    /// Launches `captured` for `commands`, pointing its moved kernels at their new buffers
    /// first; `Ok(false)` when the submission must be issued directly instead.
    fn relaunch(
        &self,
        queue: &QueueStreams,
        commands: &[Command],
        captured: &mut Captured,
        timepoint: &mut Timepoint,
    ) -> std::result::Result<bool, Failed> {
        // Resolve every buffer again: keeps its memory alive until completion, and fails (like
        // a direct issue) if one was released since the capture.
        captured.scratch.clear();
        self.resolve_bindings(commands, &mut captured.scratch, timepoint)
            .map_err(Failed::Issue)?;
        match moved(commands, &captured.addresses, &captured.scratch) {
            Moved::Kernels(0) => {}
            Moved::Kernels(_) if !self.graph_updates => return Ok(false),
            Moved::Kernels(_) => self.update_kernels(commands, captured)?,
            Moved::Transfers => return Ok(false),
        }
        // SAFETY: the graph replays this recording's commands with the addresses in
        // `captured.addresses`, which are this submission's (updated above where they moved):
        // the timepoint holds their memory (resolved above, as for a direct issue) until the
        // run completed.
        unsafe { self.api.launch_graph(captured.graph, queue.stream) }.map_err(Failed::Issue)?;
        Stats::bump(&self.stats.graph_launches, 1);
        Ok(true)
    }

    /// Points every dispatch of `commands` whose bindings moved (`captured.scratch` against
    /// `captured.addresses`) at the new addresses, recording them as the graph's.
    fn update_kernels(
        &self,
        commands: &[Command],
        captured: &mut Captured,
    ) -> std::result::Result<(), Failed> {
        let mut at = 0;
        let mut kernel = 0;
        for command in commands {
            let n = bindings(command);
            let range = at..at + n;
            at += n;
            let Command::Dispatch(dispatch) = command else {
                continue;
            };
            if dispatch.workgroups.contains(&0) {
                continue; // never launched, so not in the graph
            }
            let ordinal = kernel;
            kernel += 1;
            if captured.addresses[range.clone()] == captured.scratch[range.clone()] {
                continue;
            }
            let (function, config, _) = self.launch_shape(dispatch).map_err(|_| Failed::Update)?;
            let params = KernelParams {
                bindings: &captured.scratch[range.clone()],
                constants: &dispatch.constants,
                status: None,
            };
            self.api
                .update_graph_kernel(captured.graph, ordinal, function, &config, &params)
                .map_err(|_| Failed::Update)?;
            Stats::bump(&self.stats.graph_kernel_updates, 1);
            captured.addresses[range.clone()].copy_from_slice(&captured.scratch[range]);
        }
        Ok(())
    }

    /// Captures `commands` into a graph for `recording` and launches it (or issues them
    /// directly if the capture fails).
    fn capture(
        &self,
        queue: &QueueStreams,
        commands: &[Command],
        recording: &Recording,
        timepoint: &mut Timepoint,
    ) -> Result<()> {
        let stream = queue.stream;
        if self.api.begin_capture(stream).is_err() {
            queue.graphs.forget(recording);
            Stats::bump(&self.stats.graph_capture_failures, 1);
            return self.enqueue_list(stream, commands, 0, timepoint);
        }
        let kept = timepoint.memory.len();
        let mut addresses = Vec::new();
        let enqueued = self.enqueue_captured(stream, commands, &mut addresses, timepoint);
        let captured = self.api.end_capture(stream);
        let graph = match (enqueued, captured) {
            (Ok(()), Ok(graph)) => graph,
            (_, captured) => {
                if let Ok(graph) = captured {
                    let _ = self.api.destroy_graph(graph);
                }
                if let Some(old) = queue.graphs.forget(recording) {
                    let _ = self.api.destroy_graph(old);
                }
                // Nothing ran: the capture took the operations. Issue them directly instead,
                // which reports any error that was not the capture's own (a released buffer, a
                // device fault) as a direct issue would; a capture the driver invalidated (a
                // context-wide call on another thread, an operation it cannot capture) costs the
                // submission nothing. The recording starts over: its next submission is issued
                // directly, the one after captured again.
                Stats::bump(&self.stats.graph_capture_failures, 1);
                timepoint.memory.truncate(kept);
                return self.enqueue_list(stream, commands, 0, timepoint);
            }
        };
        Stats::bump(&self.stats.graph_captures, 1);
        // SAFETY: the graph was captured from these commands just now, whose buffers the
        // timepoint holds until the run completed.
        let launched = unsafe { self.api.launch_graph(graph, stream) };
        if launched.is_err() {
            // Destroying a launched graph is deferred by the API until its runs end.
            queue.graphs.forget(recording);
            let _ = self.api.destroy_graph(graph);
        } else {
            let captured = Captured {
                graph,
                addresses,
                scratch: Vec::new(),
            };
            self.keep_graph(queue, recording, captured);
        }
        launched?;
        Stats::bump(&self.stats.graph_launches, 1);
        Ok(())
    }

    /// Enqueues `commands` on `stream` while it captures, collecting the address of every
    /// binding (in [`Command::for_each_binding`] order) into `addresses`.
    fn enqueue_captured(
        &self,
        stream: crate::api::StreamHandle,
        commands: &[Command],
        addresses: &mut Vec<DevicePtr>,
        timepoint: &mut Timepoint,
    ) -> Result<()> {
        self.resolve_bindings(commands, addresses, timepoint)?;
        self.enqueue_unleased(stream, commands, timepoint)
    }

    /// Appends the device address of every binding of `commands` (in
    /// [`Command::for_each_binding`] order) to `addresses`, keeping their memory alive in the
    /// timepoint; fails like a direct issue on a released buffer or another device's.
    fn resolve_bindings(
        &self,
        commands: &[Command],
        addresses: &mut Vec<DevicePtr>,
        timepoint: &mut Timepoint,
    ) -> Result<()> {
        let mut resolved = Ok(());
        for command in commands {
            command.for_each_binding(|range, _| {
                if resolved.is_ok() {
                    match self.address(range, &mut timepoint.memory) {
                        Ok(ptr) => addresses.push(ptr),
                        Err(error) => resolved = Err(error),
                    }
                }
            });
        }
        resolved
    }
}

/// How a graph launch failed.
enum Failed {
    /// A buffer is released (or not this device's), or the launch failed: the submission fails.
    Issue(halcyon::Error),
    /// A kernel update failed: the graph is dropped and the submission issued directly.
    Update,
}

/// How many bindings `command` has ([`Command::for_each_binding`] calls).
fn bindings(command: &Command) -> usize {
    match command {
        Command::Fill { .. } | Command::Update { .. } => 1,
        Command::Copy { .. } | Command::Gather { .. } => 2,
        Command::Dispatch(d) => d.bindings.len(),
        Command::Barrier => 0,
    }
}

/// Which commands' addresses moved between `before` and `now` (both in binding order).
fn moved(commands: &[Command], before: &[DevicePtr], now: &[DevicePtr]) -> Moved {
    let mut at = 0;
    let mut kernels = 0;
    for command in commands {
        let n = bindings(command);
        let same = before.get(at..at + n) == now.get(at..at + n);
        at += n;
        if same {
            continue;
        }
        match command {
            Command::Dispatch(d) if d.workgroups.contains(&0) => {}
            Command::Dispatch(_) => kernels += 1,
            _ => return Moved::Transfers,
        }
    }
    Moved::Kernels(kernels)
}
