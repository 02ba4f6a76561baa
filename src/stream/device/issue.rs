//! Issuing a released submission to its queue's stream.
//!
//! In this order (on the submitting thread, or on the reactor for parked actions):
//! 1. resolve every wait: reached (nothing to do), or an event of this device's timeline at or
//!    above the value (`stream_wait_event`); the action was parked until one of the two held;
//! 2. enqueue the work's operations (resolving buffers to device addresses and keeping their
//!    memory in the submission's timepoint);
//! 3. record a pooled event after them;
//! 4. add `(value, event)` to the timeline of every semaphore of this device the work signals,
//!    which releases actions parked until that value is scheduled (skipped if enqueueing failed,
//!    so dependents wait for the failure instead of running, and skipped for a submission with
//!    status words, see below);
//! 5. register the submission in flight, then hand it to the completion strategy (a host
//!    function posting to the reactor, or the queue's completion thread).
//!
//! Registering before step 5 means a completion never finds nothing to settle; scheduling
//! before step 5 means a timepoint is never added after its value was retired. An issue holds
//! its queue's issue lock, so one queue's submissions reach its stream in one piece each.
//!
//! **Status words** (the convention is in [`crate::stream::api`]): a command list whose
//! dispatches include entry points that take a status word gets a status array of one `u32`
//! per such dispatch (pooled by the timepoint pool, allocated only when none is idle), zeroed
//! with `memset_async` before its first command; dispatch `i` of them is launched with slot
//! `i`, and after the last command the words are copied back into host memory the timepoint
//! holds, where [`Core::complete`] checks them. Such a list is always replayed on the stream,
//! never captured into a graph (a graph would reuse one array across launches whose checks
//! overlap), and its signals are not scheduled on the timelines: the fence is settled from the
//! host after the check, and dependents on any queue stay parked until then (released by the
//! settle's advance, or failed with the check's error).

use std::sync::Arc;

use crate::backend::BufferMemory;
use crate::buffer::{BufferParams, BufferRef};
use crate::command_buffer::{Command, Dispatch};
use crate::device::Work;
use crate::error::{Error, Result, StatusCode};
use crate::fence::Fence;
use crate::reactor::Completion;
use crate::stream::api::{DevicePtr, KernelParams, LaunchConfig, StreamApi, StreamHandle};
use crate::stream::device::core::{lock, Core, QueueStreams, Stats, Via};
use crate::stream::device::executable::StreamExecutable;
use crate::stream::device::graphs::Plan;
use crate::stream::device::memory::StreamMemory;
use crate::stream::device::CompletionStrategy;
use crate::stream::event_pool::Event;
use crate::stream::timeline::WaitSource;
use crate::stream::timepoint::{StatusArray, StatusWords, Timepoint};

/// Where a submission's status-word dispatches write: dispatch `next` of them gets word `next`
/// of the array at `base`, which holds `count` words for it.
struct StatusSlots {
    base: Option<DevicePtr>,
    count: usize,
    next: usize,
}

impl StatusSlots {
    /// No status words (a list without such dispatches, issued directly or through a graph).
    fn none() -> StatusSlots {
        StatusSlots {
            base: None,
            count: 0,
            next: 0,
        }
    }
}

impl<A: StreamApi> Core<A> {
    /// Issues `work` on queue `index` once the action queue released it (see the module docs).
    /// An `Err` fails the signal fence at once, so it is only returned while nothing was
    /// enqueued that could still touch the work's resources.
    pub(crate) fn issue(
        self: &Arc<Self>,
        index: usize,
        wait: &Fence,
        signal: &Fence,
        work: Work,
    ) -> Result<()> {
        let mut events = Vec::new();
        let mut waited = Vec::new();
        for (semaphore, value) in wait.iter() {
            let source = self.own_timeline(semaphore).map(|t| t.wait_source(value));
            match source {
                Some(WaitSource::Reached) => {}
                Some(WaitSource::Event(event)) => {
                    events.push(event);
                    waited.push(semaphore.clone());
                }
                Some(WaitSource::Unscheduled) | None => match semaphore.query() {
                    Ok(current) if current >= value => {}
                    Ok(current) => {
                        return Err(Error::new(
                            StatusCode::Internal,
                            format!(
                                "{}: a submission was released while its wait for value {value} \
                                 (the semaphore is at {current}) was neither reached nor \
                                 scheduled on a stream",
                                self.name
                            ),
                        ))
                    }
                    Err(error) => return Err(error),
                },
            }
        }
        let queue = &self.queues[index];
        let _in_order = lock(&queue.order.issue);
        for event in &events {
            self.api.stream_wait_event(queue.stream, event.handle())?;
        }
        Stats::bump(&self.stats.native_waits, events.len() as u64);
        drop(events); // the waits captured the records; the events may be recycled
        let mut timepoint = self.timepoints.acquire();
        let enqueued = self.enqueue(queue, &work, &mut timepoint);
        let event = self
            .events
            .acquire()
            .and_then(|event| {
                self.api
                    .record_event(event.handle(), queue.stream)
                    .map(|()| event)
            })
            .map_err(|error| {
                error.context(format!(
                    "{}: cannot record the completion event of a submission",
                    self.name
                ))
            });
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                // Without an event the submission's completion cannot be observed: wait for the
                // stream (a device that fails to record is normally dead, and returns at once)
                // so that nothing enqueued outlives the resources dropped with the error.
                let _ = self.api.synchronize_stream(queue.stream);
                return Err(enqueued.err().unwrap_or(error));
            }
        };
        if enqueued.is_ok() && !timepoint.status.checked() {
            // A submission that failed to enqueue schedules nothing: work waiting on its
            // signals stays parked until the failure reaches them. Nor does one whose status
            // words are checked on completion: its dependents must not start before the check.
            for (semaphore, value) in signal.iter() {
                if let Some(timeline) = self.own_timeline(semaphore) {
                    timeline.schedule(value, &event);
                }
            }
        }
        timepoint.queue = index;
        timepoint.event = Some(event.clone());
        timepoint.signal = signal.clone();
        timepoint.waited = waited;
        timepoint.work = Some(work);
        timepoint.error = enqueued.err();
        let id = self.register(timepoint);
        self.track(index, id, event);
        // Stream-ordered frees that found the stream busy with an issue (this one or another):
        // safe to enqueue now, with no capture open.
        queue.order.free_deferred(&*self.api, queue.stream);
        Ok(())
    }

    /// Enqueues the operations of `work` on `stream`, keeping what they address in `timepoint`.
    fn enqueue(&self, queue: &QueueStreams, work: &Work, timepoint: &mut Timepoint) -> Result<()> {
        let stream = queue.stream;
        match work {
            Work::Commands(commands) => {
                let count = self.prepare_status(stream, commands, &mut timepoint.status)?;
                if count == 0 && self.graphs && !commands.is_empty() {
                    return self.enqueue_reusable(queue, commands, timepoint);
                }
                let mut slots = StatusSlots {
                    base: timepoint.status.array.as_ref().map(|a| a.ptr),
                    count,
                    next: 0,
                };
                for command in commands.iter() {
                    self.enqueue_command(stream, command, timepoint, &mut slots)?;
                }
                if count > 0 {
                    self.copy_status_back(stream, &mut timepoint.status)?;
                }
                Ok(())
            }
            Work::Read { source, sink } => {
                let src = self.address(source, &mut timepoint.memory)?;
                let mut staging = vec![0u8; source.len() as usize].into_boxed_slice();
                // SAFETY: `staging` is a heap allocation of `source.len()` bytes that the
                // timepoint owns (moving the box does not move the bytes) and nobody touches
                // until the completion event, after which the bytes are handed to the sink.
                unsafe {
                    self.api.copy_device_to_host_async(
                        staging.as_mut_ptr(),
                        src,
                        source.len(),
                        stream,
                    )?
                };
                timepoint.read = Some((sink.clone(), staging));
                Ok(())
            }
            Work::HostCall(_) => Err(Error::new(
                StatusCode::Internal,
                "host calls run on the host, not on a stream",
            )),
        }
    }

    /// Enqueues `commands` directly, or through a graph if the list was submitted before (see
    /// [`super::graphs`]).
    fn enqueue_reusable(
        &self,
        queue: &QueueStreams,
        commands: &Arc<[Command]>,
        timepoint: &mut Timepoint,
    ) -> Result<()> {
        let stream = queue.stream;
        let (plan, dropped) = queue.graphs.plan(commands);
        for graph in dropped {
            let _ = self.api.destroy_graph(graph);
        }
        match plan {
            Plan::Direct => {
                let mut slots = StatusSlots::none();
                for command in commands.iter() {
                    self.enqueue_command(stream, command, timepoint, &mut slots)?;
                }
                Ok(())
            }
            Plan::Launch(graph) => {
                // Resolve every buffer again: keeps its memory alive until completion, and
                // fails (like a direct issue) if one was released since the capture.
                let mut resolved = Ok(());
                for command in commands.iter() {
                    command.for_each_binding(|range, _| {
                        if resolved.is_ok() {
                            resolved = self.address(range, &mut timepoint.memory).map(drop);
                        }
                    });
                }
                resolved?;
                self.api.launch_graph(graph, stream)?;
                Stats::bump(&self.stats.graph_launches, 1);
                Ok(())
            }
            Plan::Capture => {
                self.api.begin_capture(stream)?;
                let mut slots = StatusSlots::none();
                let enqueued = commands.iter().try_for_each(|command| {
                    self.enqueue_command(stream, command, timepoint, &mut slots)
                });
                let captured = self.api.end_capture(stream);
                let graph = match (enqueued, captured) {
                    (Ok(()), Ok(graph)) => graph,
                    (enqueued, captured) => {
                        if let Ok(graph) = captured {
                            let _ = self.api.destroy_graph(graph);
                        }
                        if let Some(old) = queue.graphs.forget(commands) {
                            let _ = self.api.destroy_graph(old);
                        }
                        // Nothing ran: the capture took the operations. Report the first error.
                        return Err(enqueued.and(captured.map(drop)).unwrap_err());
                    }
                };
                let kept = queue.graphs.captured(commands, graph);
                Stats::bump(&self.stats.graph_captures, 1);
                let launched = self.api.launch_graph(graph, stream);
                if launched.is_err() || !kept {
                    // Destroying a launched graph is deferred by the API until its runs end.
                    queue.graphs.forget(commands);
                    let _ = self.api.destroy_graph(graph);
                }
                launched?;
                Stats::bump(&self.stats.graph_launches, 1);
                Ok(())
            }
        }
    }

    /// Counts the dispatches of `commands` that take a status word, remembering their entry
    /// points in `status`. If there are any, takes an idle status array with room for them (or
    /// allocates one) and enqueues the zeroing of their words on `stream`, before any command of
    /// the submission. Returns the count.
    fn prepare_status(
        &self,
        stream: StreamHandle,
        commands: &[Command],
        status: &mut StatusWords,
    ) -> Result<usize> {
        for command in commands {
            if let Command::Dispatch(dispatch) = command {
                if let Some(entry) = self.status_entry(dispatch) {
                    status.entries.push(entry.to_owned());
                }
            }
        }
        let count = status.entries.len();
        if count == 0 {
            return Ok(0);
        }
        Stats::bump(&self.stats.status_checks, 1);
        let array = match self.timepoints.take_status_array(count) {
            Some(array) => array,
            None => {
                let slots = StatusArray::slots_for(count);
                let memory = StreamMemory::allocate(
                    &self.api,
                    self.id,
                    &self.name,
                    (slots * 4) as u64,
                    &BufferParams::DEVICE,
                )
                .map_err(|error| {
                    error.context(format!(
                        "{}: cannot allocate the status words of a submission's dispatches",
                        self.name
                    ))
                })?;
                StatusArray {
                    ptr: memory.ptr,
                    slots,
                    _memory: Arc::new(memory),
                }
            }
        };
        let words = array.ptr;
        status.array = Some(array);
        self.api
            .memset_async(words, 0, 4, (count * 4) as u64, stream)?;
        Ok(count)
    }

    /// Enqueues the copy of a submission's status words into its host memory, after its last
    /// command.
    fn copy_status_back(&self, stream: StreamHandle, status: &mut StatusWords) -> Result<()> {
        let count = status.entries.len();
        let words = status.array.as_ref().map(|a| a.ptr).ok_or_else(|| {
            Error::new(
                StatusCode::Internal,
                format!(
                    "{}: a submission's status words have no device array",
                    self.name
                ),
            )
        })?;
        status.host.clear();
        status.host.resize(count, 0);
        // SAFETY: `host` holds `count` u32s, `count * 4` bytes, owned by the submission's
        // timepoint; nothing touches the vector again (its buffer stays put) until the timepoint
        // is settled, after the completion event recorded behind this copy completed.
        unsafe {
            self.api.copy_device_to_host_async(
                status.host.as_mut_ptr().cast(),
                words,
                (count * 4) as u64,
                stream,
            )
        }
    }

    /// The stream executable of `dispatch`, if this device loaded it.
    fn own_executable<'a>(
        &self,
        dispatch: &'a Dispatch<BufferRef>,
    ) -> Result<&'a StreamExecutable<A>> {
        dispatch
            .executable
            .backend()
            .as_any()
            .downcast_ref::<StreamExecutable<A>>()
            .filter(|e| e.owner == self.id)
            .ok_or_else(|| {
                Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "executable {} (format '{}', loaded by {}) was not loaded by {}; load it \
                         on the device that dispatches it",
                        dispatch.executable.id(),
                        dispatch.executable.format(),
                        dispatch.executable.device_id(),
                        self.name
                    ),
                )
            })
    }

    /// The entry point of `dispatch` if it launches a kernel that takes a status word: a
    /// non-empty grid of an entry point of this device's executable whose module says so.
    fn status_entry<'a>(&self, dispatch: &'a Dispatch<BufferRef>) -> Option<&'a str> {
        if dispatch.workgroups.contains(&0) {
            return None;
        }
        let executable = self.own_executable(dispatch).ok()?;
        let index = dispatch.entry_point as usize;
        if !executable.status_words.get(index).copied().unwrap_or(false) {
            return None;
        }
        let entry = dispatch.executable.entry_point(dispatch.entry_point).ok()?;
        Some(entry.name.as_str())
    }

    fn enqueue_command(
        &self,
        stream: StreamHandle,
        command: &Command,
        timepoint: &mut Timepoint,
        slots: &mut StatusSlots,
    ) -> Result<()> {
        let memory = &mut timepoint.memory;
        match command {
            Command::Barrier => Ok(()), // a stream is in order already
            Command::Fill {
                target,
                pattern,
                pattern_len,
            } => {
                let dst = self.address(target, memory)?;
                self.api
                    .memset_async(dst, *pattern, *pattern_len, target.len(), stream)
            }
            Command::Update { target, data } => {
                let dst = self.address(target, memory)?;
                // SAFETY: `data` belongs to the command list, which the timepoint keeps (as its
                // work) until the completion event recorded after this copy completed.
                unsafe {
                    self.api.copy_host_to_device_async(
                        dst,
                        data.as_ptr(),
                        data.len() as u64,
                        stream,
                    )
                }
            }
            Command::Copy { source, target } => {
                let src = self.address(source, memory)?;
                let dst = self.address(target, memory)?;
                self.api
                    .copy_device_to_device_async(dst, src, target.len(), stream)
            }
            Command::Dispatch(dispatch) => self.enqueue_dispatch(stream, dispatch, memory, slots),
        }
    }

    fn enqueue_dispatch(
        &self,
        stream: StreamHandle,
        dispatch: &Dispatch<BufferRef>,
        memory: &mut Vec<Arc<dyn BufferMemory>>,
        slots: &mut StatusSlots,
    ) -> Result<()> {
        if dispatch.workgroups.contains(&0) {
            return Ok(());
        }
        let executable = self.own_executable(dispatch)?;
        let index = dispatch.entry_point as usize;
        let entry = dispatch.executable.entry_point(dispatch.entry_point)?;
        // The same decision as `status_entry`, which counted the words: past the checks above,
        // only the module's flag remains.
        let status = if executable.status_words.get(index).copied().unwrap_or(false) {
            match slots.base {
                Some(base) if slots.next < slots.count => {
                    let word = base.offset(4 * slots.next as u64);
                    slots.next += 1;
                    Some(word)
                }
                _ => {
                    return Err(Error::new(
                        StatusCode::Internal,
                        format!(
                            "{}: kernel '{}' takes a status word, but its submission has no \
                             word left for it",
                            self.name, entry.name
                        ),
                    ))
                }
            }
        } else {
            None
        };
        let bindings = dispatch
            .bindings
            .iter()
            .map(|binding| self.address(binding, memory))
            .collect::<Result<Vec<_>>>()?;
        let config = LaunchConfig {
            grid: dispatch.workgroups,
            block: entry.workgroup_size,
            shared_memory_bytes: 0,
        };
        let params = KernelParams {
            bindings: &bindings,
            constants: &dispatch.constants,
            status,
        };
        self.api
            .launch_kernel(executable.functions[index], &config, &params, stream)
    }

    /// The device address of `range`, keeping its memory alive in `keep`.
    fn address(
        &self,
        range: &BufferRef,
        keep: &mut Vec<Arc<dyn BufferMemory>>,
    ) -> Result<DevicePtr> {
        let memory = range.buffer().memory()?;
        let base = memory
            .as_any()
            .downcast_ref::<StreamMemory<A>>()
            .filter(|m| m.owner == self.id)
            .map(|m| m.ptr)
            .ok_or_else(|| {
                Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "buffer {} was not allocated by {}; allocate it from this device's \
                         allocator",
                        range.buffer().id(),
                        self.name
                    ),
                )
            })?;
        keep.push(memory);
        Ok(base.offset(range.offset()))
    }

    /// Arranges for the completion of submission `id` (recorded as `event` on queue `index`)
    /// to be observed. If that fails, the probe settles it.
    fn track(self: &Arc<Self>, index: usize, id: u64, event: Event) {
        let queue = &self.queues[index];
        match self.strategy {
            CompletionStrategy::HostCallback => {
                let (Some(callback), Some(reactor)) = (queue.callback, self.reactor.get()) else {
                    return;
                };
                let reactor = reactor.clone();
                let core = Arc::downgrade(self);
                let tracked = self
                    .api
                    .stream_wait_event(callback, event.handle())
                    .and_then(|()| {
                        self.api.launch_host_func(
                            callback,
                            Box::new(move || {
                                // Runs on an API thread that must not call the API: it only
                                // posts. The reactor settles the submission.
                                let _ = reactor.post(Completion::Call(Box::new(move || {
                                    if let Some(core) = core.upgrade() {
                                        core.complete(id, None, Via::Callback);
                                    }
                                })));
                            }),
                        )
                    });
                // On failure the submission stays in flight, where the probe finds it.
                let _ = tracked;
            }
            CompletionStrategy::CompletionThread => {
                if let Some(fifo) = &queue.fifo {
                    fifo.push((id, event));
                }
            }
        }
    }
}
