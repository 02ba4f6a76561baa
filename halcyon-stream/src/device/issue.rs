//! Issuing a released submission to its queue's stream.
//!
//! In this order (on the submitting thread, or on the reactor for parked actions):
//! 1. resolve every wait: reached (nothing to do), or an event of this device's timeline at or
//!    above the value (`stream_wait_event`); the action was parked until one of the two held;
//! 2. enqueue the work's operations (resolving buffers to device addresses and keeping their
//!    memory in the submission's timepoint);
//! 3. record a pooled event after them (for a profiled operation, timing events of their own
//!    before its first and after its last operation, see [`super::timing`]);
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
//! **Pinned host memory** ([`super::pinned`]): a submission that has status words, or update or
//! read bytes up to [`PinnedMemory::LEASE_MAX`], leases one buffer of the device's pinned host
//! memory, held by its timepoint until it is settled (or orphaned if its stream may still use
//! it). Update bytes are copied into it at issue and the device copies from there; a
//! read's bytes land there and are copied out to the reader on completion. Both are then plain
//! DMAs, with no staging and no host function in the API. A list captured into a graph takes no
//! lease (the graph's copies must outlive the submission: the API keeps their bytes), and where
//! the API has no pinned memory the copies go through the API's own staging.
//!
//! **Status words** (the status-word convention, docs/ARCHITECTURE.md): a command list whose
//! dispatches include entry points that take a status word gets one `u32` per such dispatch at
//! the start of its pinned lease, zeroed by the host at issue; dispatch `i` of them is launched
//! with word `i`, which the kernel writes over the bus, and [`Core::complete`] reads the words
//! once the completion event completed. Such a list is always replayed on the stream, never
//! captured into a graph (a graph would reuse one word across launches whose checks overlap),
//! and its signals are not scheduled on the timelines: the fence is settled from the host after
//! the check, and dependents on any queue stay parked until then (released by the settle's
//! advance, or failed with the check's error). Without pinned memory such a submission fails.

use std::sync::Arc;

use crate::api::{DevicePtr, FunctionHandle, KernelParams, LaunchConfig, StreamApi, StreamHandle};
use crate::device::core::{Core, QueueStreams, Stats, Via};
use crate::device::executable::StreamExecutable;
use crate::device::memory::StreamMemory;
use crate::device::pinned::{HostArea, PinnedMemory};
use crate::device::CompletionStrategy;
use crate::event_pool::Event;
use crate::timeline::WaitSource;
use crate::timepoint::{HostBytes, ReadInto, Timepoint};
use halcyon::backend::reactor::Completion;
use halcyon::backend::BufferMemory;
use halcyon::backend::OperationTrace;
use halcyon::backend::Work;
use halcyon::command_buffer::{Command, Dispatch};
use halcyon::BufferRef;
use halcyon::Fence;
use halcyon::Semaphore;
use halcyon::{Error, Result, StatusCode};

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
        mut work: Work,
    ) -> Result<()> {
        let mut events = Vec::new();
        let mut waited = Vec::new();
        let mut inputs = Vec::new();
        for (semaphore, value) in wait.iter() {
            let source = self
                .own_timeline(semaphore)
                .map(|t| t.wait_source_by(value));
            match source {
                Some((WaitSource::Reached, _)) => {}
                Some((WaitSource::Event(event), outcome)) => {
                    events.push(event);
                    waited.push((semaphore.clone(), value));
                    inputs.extend(outcome);
                }
                Some((WaitSource::Unscheduled, _)) | None => match semaphore.query() {
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
        let _in_order = queue.order.lock_issue(&*self.api, queue.stream);
        for event in &events {
            self.api.stream_wait_event(queue.stream, event.handle())?;
        }
        Stats::bump(&self.stats.native_waits, events.len() as u64);
        drop(events); // the waits captured the records; the events may be recycled
        let mut timepoint = self.timepoints.acquire();
        // A panic here (a `StreamApi` method of the backend panicking) would unwind through
        // the timepoint and the work, dropping host memory, pinned leases and buffers that
        // operations already enqueued still read or write. So it is caught: what the
        // submission held is kept for the stream as when its event cannot be recorded and
        // the stream cannot be synchronised (the API, which just panicked, is not called
        // again), and the panic goes on.
        // Only a profiled operation is timed (see `super::timing`): for any other this is the
        // one lookup of the signal fence's first semaphore.
        let trace = self
            .timing
            .as_ref()
            .and_then(|_| OperationTrace::of(signal).cloned());
        let recorded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut span = match (&self.timing, trace) {
                (Some(timing), Some(trace)) => timing.begin(&*self.api, index, queue.stream, trace),
                _ => None,
            };
            let enqueued = self.enqueue(queue, &work, &mut timepoint);
            if let Some(timing) = &self.timing {
                timing.end(&*self.api, queue.stream, &mut span);
            }
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
            (enqueued, span, event)
        }));
        let (enqueued, span, event) = match recorded {
            Ok(recorded) => {
                if let (Ok(()), Work::Collective(collective)) = (&recorded.0, &mut work) {
                    // The engine has it: the channel's next collective may be enqueued.
                    collective.issued();
                }
                recorded
            }
            Err(panic) => {
                if let Some(host) = timepoint.host.take() {
                    host.orphan();
                }
                self.keep_for_stream(&mut timepoint, Some(work));
                self.timepoints.release(timepoint);
                std::panic::resume_unwind(panic);
            }
        };
        let event = match event {
            Ok(event) => event,
            Err(error) => {
                // Without an event the submission's completion cannot be observed: wait for the
                // stream (a device that fails to record is normally dead, and returns at once)
                // so that nothing enqueued outlives the resources dropped with the error.
                // Its pinned lease is reused only if the stream is known to be done with it.
                if self.api.synchronize_stream(queue.stream).is_err() {
                    if let Some(host) = timepoint.host.take() {
                        host.orphan();
                    }
                    self.keep_for_stream(&mut timepoint, Some(work));
                }
                self.timepoints.release(timepoint);
                return Err(enqueued.err().unwrap_or(error));
            }
        };
        if enqueued.is_ok() && !timepoint.status.checked() {
            // A submission that failed to enqueue schedules nothing: work waiting on its
            // signals stays parked until the failure reaches them. Nor does one whose status
            // words are checked on completion: its dependents must not start before the check.
            // Work that waits on the event settles after this submission (see
            // crate::timeline): its outcome goes with the timepoints.
            for (semaphore, value) in signal.iter() {
                if let Some(timeline) = self.own_timeline(semaphore) {
                    let outcome = timepoint.outcome.get_or_insert_with(|| Semaphore::new(0));
                    timeline.schedule_by(value, &event, Some(outcome));
                }
            }
        }
        timepoint.queue = index;
        timepoint.event = Some(event.clone());
        timepoint.signal = signal.clone();
        timepoint.waited = waited;
        timepoint.inputs = inputs;
        timepoint.work = Some(work);
        timepoint.error = enqueued.err();
        timepoint.timing = span;
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
            Work::Commands {
                commands,
                recording,
            } => {
                let count = self.count_status(commands, timepoint);
                match recording {
                    Some(recording) if count == 0 && self.graphs && !commands.is_empty() => {
                        self.enqueue_recorded(queue, commands, recording, timepoint)
                    }
                    _ => self.enqueue_list(stream, commands, count, timepoint),
                }
            }
            Work::Read { source, sink } => {
                let src = self.address(source, &mut timepoint.memory)?;
                let len = usize::try_from(source.len()).map_err(|_| {
                    Error::new(
                        StatusCode::ResourceExhausted,
                        format!(
                            "a read of {} bytes does not fit in host memory",
                            source.len()
                        ),
                    )
                })?;
                let leased = match len {
                    1..=PinnedMemory::LEASE_MAX => {
                        self.pinned.try_lease(&*self.api, &self.name, len)
                    }
                    _ => None,
                };
                let into = match leased {
                    Some(lease) => {
                        Stats::bump(&self.stats.pinned_leases, 1);
                        let area = timepoint.host.insert(HostArea::new(lease));
                        let dst = area.carve(len).ok_or_else(|| {
                            Error::new(
                                StatusCode::Internal,
                                format!("{}: a pinned lease is smaller than its read", self.name),
                            )
                        })?;
                        ReadInto::Pinned(dst, len)
                    }
                    // The reader's vector, where it supplied one (`Queue::read_into`).
                    None => ReadInto::Staging(match sink.buffer(len) {
                        Some(buffer) => HostBytes::from_vec(buffer),
                        None => HostBytes::zeroed(len).ok_or_else(|| {
                            Error::new(
                                StatusCode::ResourceExhausted,
                                format!(
                                    "{}: cannot allocate {len} bytes of host memory for a read",
                                    self.name
                                ),
                            )
                        })?,
                    }),
                };
                let dst = match &into {
                    ReadInto::Pinned(dst, _) => dst.as_ptr(),
                    ReadInto::Staging(bytes) => bytes.as_mut_ptr(),
                };
                // The timepoint owns the destination before the copy is enqueued: a copy that
                // fails part way (a later chunk of a staged one) has enqueued chunks that still
                // write it, and the timepoint keeps it until its completion event, recorded
                // after them, completed (or for as long as the stream may run them).
                timepoint.read = Some((sink.clone(), into));
                // SAFETY: `dst` addresses `len` bytes that the timepoint owns (its pinned lease,
                // or a heap box that moving does not move) and nobody touches until the
                // completion event, after which the bytes are handed to the sink.
                unsafe {
                    self.api
                        .copy_device_to_host_async(dst, src, source.len(), stream)
                }
            }
            Work::PeerCopy { source, target } => {
                self.enqueue_peer_copy(stream, source, target, &mut timepoint.memory)
            }
            Work::HostCall(_) => Err(Error::new(
                StatusCode::Internal,
                "host calls run on the host, not on a stream",
            )),
            Work::Collective(collective) => {
                let mut range = |r: Option<&BufferRef>| {
                    r.map(|r| Ok((self.address(r, &mut timepoint.memory)?, r.len())))
                        .transpose()
                };
                let (send, recv) = (range(collective.send())?, range(collective.recv())?);
                // SAFETY: both ranges are this device's memory (`address` checked), which the
                // timepoint keeps alive until the stream passed its completion event, recorded
                // after the collective.
                unsafe {
                    self.api.enqueue_collective(
                        collective.channel().backend(),
                        &collective.kind(),
                        send,
                        recv,
                        stream,
                    )
                }
            }
        }
    }

    /// Enqueues `commands` on `stream` one by one, with a pinned lease for their `count`
    /// status words and update bytes (see [`Core::lease_for_list`]).
    pub(super) fn enqueue_list(
        &self,
        stream: StreamHandle,
        commands: &[Command],
        count: usize,
        timepoint: &mut Timepoint,
    ) -> Result<()> {
        let slots = self.lease_for_list(commands, count, timepoint)?;
        self.enqueue_each(stream, commands, timepoint, slots)
    }

    /// Enqueues `commands` (without status words) on `stream` while it captures a graph: no
    /// lease, since the graph's copies outlive the submission (the API keeps their bytes).
    pub(super) fn enqueue_unleased(
        &self,
        stream: StreamHandle,
        commands: &[Command],
        timepoint: &mut Timepoint,
    ) -> Result<()> {
        self.enqueue_each(stream, commands, timepoint, StatusSlots::none())
    }

    fn enqueue_each(
        &self,
        stream: StreamHandle,
        commands: &[Command],
        timepoint: &mut Timepoint,
        mut slots: StatusSlots,
    ) -> Result<()> {
        for command in commands {
            self.enqueue_command(stream, command, timepoint, &mut slots)?;
        }
        Ok(())
    }

    /// Counts the dispatches of `commands` that take a status word, remembering their entry
    /// points in the timepoint's status words.
    fn count_status(&self, commands: &[Command], timepoint: &mut Timepoint) -> usize {
        let entries = &mut timepoint.status.entries;
        for command in commands {
            if let Command::Dispatch(dispatch) = command {
                if let Some(entry) = self.status_entry(dispatch) {
                    entries.push(entry.to_owned());
                }
            }
        }
        entries.len()
    }

    /// Leases pinned host memory for a list issued on the stream (not captured): room for its
    /// `count` status words, zeroed here, and for its update bytes if they are at most
    /// [`PinnedMemory::LEASE_MAX`]. The lease is required for status words (`Unimplemented` or
    /// `ResourceExhausted` without it) and an optimisation for updates (without it, they go
    /// through the API's staging). Returns where the status words are.
    fn lease_for_list(
        &self,
        commands: &[Command],
        count: usize,
        timepoint: &mut Timepoint,
    ) -> Result<StatusSlots> {
        let words = count * 4;
        let updates: usize = commands
            .iter()
            .map(|command| match command {
                Command::Update { data, .. } => HostArea::room_for(data.len()),
                _ => 0,
            })
            .sum();
        // Larger updates go through the API (see `PinnedMemory::LEASE_MAX`): no room for them.
        let updates = match updates <= PinnedMemory::LEASE_MAX {
            true => updates,
            false => 0,
        };
        let len = HostArea::room_for(words) + updates;
        if count == 0 && updates == 0 {
            return Ok(StatusSlots::none());
        }
        let lease = if count == 0 {
            match self.pinned.try_lease(&*self.api, &self.name, len) {
                Some(lease) => lease,
                None => return Ok(StatusSlots::none()),
            }
        } else {
            Stats::bump(&self.stats.status_checks, 1);
            self.pinned
                .lease(&*self.api, &self.name, len)
                .map_err(|error| {
                    error.context(format!(
                        "{}: cannot allocate the status words of a submission's dispatches",
                        self.name
                    ))
                })?
        };
        Stats::bump(&self.stats.pinned_leases, 1);
        let area = timepoint.host.insert(HostArea::new(lease));
        if count == 0 {
            return Ok(StatusSlots::none());
        }
        let base = area.carve(words).ok_or_else(|| {
            Error::new(
                StatusCode::Internal,
                format!(
                    "{}: a pinned lease is smaller than its status words",
                    self.name
                ),
            )
        })?;
        // SAFETY: `base` starts `words` bytes of the lease, which this submission alone uses
        // and no device work touches yet (a lease is only handed out once the work of its last
        // user is over). The launches enqueued after this write see it (pinned host memory is
        // coherent with the device, and a launch orders the host's earlier writes before it).
        unsafe { std::ptr::write_bytes(base.as_ptr(), 0, words) };
        Ok(StatusSlots {
            base: Some(DevicePtr(base.as_ptr() as usize as u64)),
            count,
            next: 0,
        })
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
                        "{} (format '{}') was loaded by another device instance \
                         ({}) than {}, which dispatches it; load it on the device that \
                         dispatches it",
                        dispatch.executable,
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
            // The stream layer says it runs no gathers (`DeviceBackend::gathers`), so the core
            // gathers on the host instead of sending one.
            Command::Gather { .. } => Err(Error::new(
                StatusCode::Internal,
                format!(
                    "{}: a gather reached a stream device, which runs none",
                    self.name
                ),
            )),
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
                let src = match timepoint.host.as_mut().and_then(|h| h.carve(data.len())) {
                    Some(staged) => {
                        // SAFETY: `staged` is `data.len()` bytes of this submission's pinned
                        // lease, handed out once and not yet used by any copy; `data` is
                        // ordinary host memory, so the two do not overlap.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                data.as_ptr(),
                                staged.as_ptr(),
                                data.len(),
                            )
                        };
                        staged.as_ptr().cast_const()
                    }
                    None => data.as_ptr(),
                };
                // SAFETY: `src` is either the submission's pinned lease or `data`, which belongs
                // to the command list; the timepoint keeps both (the lease, and the list as its
                // work) until the completion event recorded after this copy completed.
                unsafe {
                    self.api
                        .copy_host_to_device_async(dst, src, data.len() as u64, stream)
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
        let (function, config, takes_status) = self.launch_shape(dispatch)?;
        // The same decision as `status_entry`, which counted the words: past the checks above,
        // only the module's flag remains.
        let status = if takes_status {
            match slots.base {
                Some(base) if slots.next < slots.count => {
                    let word = base.offset(4 * slots.next as u64);
                    slots.next += 1;
                    Some(word)
                }
                _ => {
                    let entry = dispatch.executable.entry_point(dispatch.entry_point)?;
                    return Err(Error::new(
                        StatusCode::Internal,
                        format!(
                            "{}: kernel '{}' takes a status word, but its submission has no \
                             word left for it",
                            self.name, entry.name
                        ),
                    ));
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
        let params = KernelParams {
            bindings: &bindings,
            constants: &dispatch.constants,
            status,
        };
        self.api.launch_kernel(function, &config, &params, stream)
    }

    /// The kernel `dispatch` launches, the launch's shape, and whether the kernel takes a
    /// status word.
    pub(super) fn launch_shape(
        &self,
        dispatch: &Dispatch<BufferRef>,
    ) -> Result<(FunctionHandle, LaunchConfig, bool)> {
        let executable = self.own_executable(dispatch)?;
        let index = dispatch.entry_point as usize;
        let entry = dispatch.executable.entry_point(dispatch.entry_point)?;
        let config = LaunchConfig {
            grid: dispatch.workgroups,
            block: entry.workgroup_size,
            shared_memory_bytes: executable
                .shared_memory_bytes
                .get(index)
                .copied()
                .unwrap_or(0),
        };
        let takes_status = executable.status_words.get(index).copied().unwrap_or(false);
        Ok((executable.functions[index], config, takes_status))
    }

    /// The device address of `range`, keeping its memory alive in `keep`.
    pub(super) fn address(
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
                        "buffer {} was not allocated by this device instance ({}); allocate \
                         it from this device's allocator",
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
            CompletionStrategy::FlagWrite => {
                if let Some(flags) = &self.flags {
                    // Under the queue's issue lock, after the completion event's record: the
                    // word reaches the value once the stream got past the event. On failure
                    // the submission stays in flight, where the probe finds it.
                    let word = flags.word(index);
                    let _ = flags.flags.register(index, id, |value| {
                        self.api.write_value32(queue.stream, word, value)
                    });
                }
            }
        }
    }
}
