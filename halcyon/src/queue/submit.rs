//! Device queues: every operation waits on a fence and signals a fence, and returns a
//! [`Submission`] future.
//!
//! Ordering is exactly what the fences say: an operation starts once its wait fence is reached
//! and signals its signal fence when it completes; two operations with no semaphore path between
//! them may run in any order or concurrently, even on one queue. For a plain sequence, use a
//! [`Timeline`] ([`Queue::timeline`]): each [`Timeline::next`] waits for the previous operation
//! and signals the next value, like tinygrad's queue timelines.
//!
//! Failure: invalid arguments (ranges, usage, counts, a buffer mapped on the host) refuse the
//! operation: nothing of it reaches the device, the [`Submission`] completes with the error,
//! and the signal fence is failed with it **in order**, as a failure of the work itself would
//! be: after the operation's waits, once every earlier value on its timelines has settled with
//! its own outcome, so a refusal never overtakes (and never fails) earlier work. A failed wait
//! or a failed execution likewise fails the signal fence; an operation whose wait failed
//! reports the failure it inherited ([`crate::Error::inherited`]). Dropping a [`Submission`]
//! never cancels the work.
//!
//! # Cancelling queued work
//!
//! Work that has not started is cancelled by failing a semaphore it waits on: it then never
//! runs, and its signal fence (and everything downstream) fails with that error.
//!
//! ```
//! # fn demo(queue: &halcyon::Queue, buffer: &halcyon::Buffer) -> halcyon::Result<()> {
//! use halcyon::{Error, Fence, StatusCode, Timepoints};
//!
//! let go = queue.device().create_semaphore(0)?;
//! let done = queue.device().create_semaphore(0)?;
//! let fill = queue.fill(
//!     Timepoints::new(Fence::at(&go, 1), Fence::at(&done, 1)),
//!     7u8,
//!     &buffer.whole(),
//! );
//! // Changed our mind before `go` was signalled: the fill never runs.
//! go.fail(Error::new(StatusCode::Cancelled, "the user pressed stop"));
//! let error = futures::executor::block_on(fill).unwrap_err();
//! assert_eq!(error.code(), StatusCode::Cancelled);
//! # Ok(()) }
//! ```
//!
//! (`halcyon_cpu`'s `cancelling_queued_work` test runs this example on the CPU device.)
//!
//! Work already issued to the device runs to completion; halcyon cannot stop a running kernel.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytemuck::Pod;

use crate::buffer::{Access, Buffer, BufferParams, BufferRef, BufferUsage};
use crate::command_buffer::{
    check_usage, BindingTable, Command, CommandBuffer, CommandBufferMode, Recording,
};
use crate::device::{Device, DeviceBackend, QueueCapabilities, Work};
use crate::error::{Error, Result, StatusCode};
use crate::executable::Launch;
use crate::fence::Fence;
use crate::profile::{classify, name, Header, OperationTrace, Pairs};
use crate::queue::read_sink::ReadSink;
use crate::queue::touched::Touched;
use crate::semaphore::{Semaphore, Wait};

/// The wait and signal fences of one queue operation.
#[derive(Clone, Debug, Default)]
#[must_use = "timepoints do nothing until a queue operation is submitted with them"]
pub struct Timepoints {
    /// Reached before the operation starts.
    pub wait: Fence,
    /// Signalled when it completes.
    pub signal: Fence,
}

impl Timepoints {
    /// Wait on `wait`, signal `signal`.
    pub fn new(wait: Fence, signal: Fence) -> Self {
        Timepoints { wait, signal }
    }
}

impl From<(Fence, Fence)> for Timepoints {
    fn from((wait, signal): (Fence, Fence)) -> Self {
        Timepoints { wait, signal }
    }
}

impl From<(&Fence, &Fence)> for Timepoints {
    fn from((wait, signal): (&Fence, &Fence)) -> Self {
        Timepoints {
            wait: wait.clone(),
            signal: signal.clone(),
        }
    }
}

/// An in-order path through a queue: a timeline semaphore and a counter.
///
/// ```
/// # fn demo(queue: &halcyon::Queue, buffer: &halcyon::Buffer) -> halcyon::Result<()> {
/// let timeline = queue.timeline()?;
/// let _ = queue.fill(timeline.next(), 0u8, &buffer.whole());     // waits 0, signals 1
/// let read = queue.read::<u8>(timeline.next(), &buffer.whole()); // waits 1, signals 2
/// # Ok(()) }
/// ```
///
/// Every value [`Timeline::next`] hands out is signalled in order, even one whose step is never
/// submitted: a [`TimelineStep`] dropped unsubmitted (the ordinary case: `q.fill(t.next(), 1u8,
/// &buf.slice(0..1000)?)`, where `next()` runs and then `?` returns early) becomes a
/// [`Queue::barrier`] on the timeline's queue, a no-op that passes its value on, so later
/// operations do not wait for it forever. The caller already got the error that kept the
/// step from being submitted; the timeline itself carries on.
#[derive(Clone, Debug)]
pub struct Timeline {
    semaphore: Semaphore,
    next: Arc<AtomicU64>,
    queue: Queue,
}

impl Timeline {
    /// The step for the next operation: wait for the previous one, signal one more. Pass it
    /// to a queue operation (which takes `impl Into<Timepoints>`); dropped unsubmitted, it
    /// becomes a barrier (see the type docs).
    pub fn next(&self) -> TimelineStep {
        let n = self.next.fetch_add(1, Ordering::AcqRel);
        TimelineStep {
            timepoints: Some(Timepoints {
                wait: Fence::at(&self.semaphore, n),
                signal: Fence::at(&self.semaphore, n + 1),
            }),
            queue: self.queue.clone(),
        }
    }

    /// The timeline semaphore (its value counts completed operations).
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// The value the last operation handed out will signal.
    pub fn last(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }
}

/// The timepoints of one operation on a [`Timeline`] ([`Timeline::next`]), not yet submitted.
///
/// It derefs to its [`Timepoints`], so more waits can be added (`step.wait.insert(..)`), and
/// converts into them when a queue operation takes it. Dropped without being converted, it
/// submits a [`Queue::barrier`] with its timepoints, so its value is still signalled in order
/// (after its waits, including any added) and the timeline does not stall. Converting it by
/// hand (`Timepoints::from(step)`) hands that duty to the caller.
#[must_use = "a timeline step does nothing until a queue operation is submitted with it \
              (dropped, it becomes a barrier)"]
pub struct TimelineStep {
    /// `None` once converted.
    timepoints: Option<Timepoints>,
    queue: Queue,
}

impl fmt::Debug for TimelineStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TimelineStep")
            .field(&self.timepoints)
            .finish()
    }
}

impl std::ops::Deref for TimelineStep {
    type Target = Timepoints;
    fn deref(&self) -> &Timepoints {
        self.timepoints
            .as_ref()
            .expect("a step holds its timepoints until converted")
    }
}

impl std::ops::DerefMut for TimelineStep {
    fn deref_mut(&mut self) -> &mut Timepoints {
        self.timepoints
            .as_mut()
            .expect("a step holds its timepoints until converted")
    }
}

impl From<TimelineStep> for Timepoints {
    fn from(mut step: TimelineStep) -> Timepoints {
        step.timepoints
            .take()
            .expect("a step holds its timepoints until converted")
    }
}

impl Drop for TimelineStep {
    fn drop(&mut self) {
        if let Some(timepoints) = self.timepoints.take() {
            // Its outcome is the outcome of the waits; whoever awaits the timeline sees it.
            drop(self.queue.barrier(timepoints));
        }
    }
}

pub(super) type Output<T> = Box<dyn FnOnce() -> Result<T> + Send>;

/// A submitted queue operation: completes when its signal fence is reached, with its output
/// (the `Vec<T>`, for a read), or with the failure. Either way every entry of the signal fence
/// has settled (reached or failed) by the time it completes. Dropping it never cancels the work.
///
/// It reports this operation's outcome, however late it is awaited: once every entry of its
/// signal fence was reached, it completes with its output even if a semaphore of the fence
/// fails afterwards (a later operation's failure, say on the same [`Timeline`]). A plain
/// [`crate::Semaphore::wait`] on such a semaphore gets the failure whatever the value.
#[must_use = "dropping a Submission does not cancel it, but its failure would go unseen"]
pub struct Submission<T = ()> {
    /// Waits on the signal fence's entries not yet settled (two inline: an operation's own
    /// completion and its timeline's next value).
    unsettled: smallvec::SmallVec<[Wait; 2]>,
    failed: Option<Error>,
    /// The error of an operation refused at submission: reported once its signal settled
    /// (failed in order, see [`Queue::reject`]), whatever the signal failed with.
    rejected: Option<Error>,
    output: Option<Output<T>>,
    /// How long the first poll watches for completion before registering its waker
    /// ([`Device::set_completion_spin`]); zero once spent.
    spin: Duration,
    /// The backend and queue to wait natively on during that watch
    /// ([`DeviceBackend::wait_native`]); only while `spin` is not zero. Weak: a submission
    /// must not keep its device alive (dropping a device aborts its pending work).
    native: Option<(Weak<dyn DeviceBackend>, u32)>,
}

impl<T> fmt::Debug for Submission<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Submission")
            .field("failed", &self.failed)
            .finish()
    }
}

impl<T> Submission<T> {
    /// The submission of an operation refused before it was submitted: completes with
    /// `error` once `signalled` (the operation's own signal, failed in order) has settled.
    pub(super) fn rejected(signalled: Submission<()>, error: Error) -> Self {
        Submission {
            unsettled: signalled.unsettled,
            failed: None,
            rejected: Some(error),
            output: None,
            spin: signalled.spin,
            native: signalled.native,
        }
    }
}

impl<T: Send + 'static> Submission<T> {
    /// The same submission, completing with `f` of its output: `f` runs on the thread that
    /// polls it to completion, after every entry of its signal fence has settled, and not at
    /// all if it fails.
    pub fn map<U>(self, f: impl FnOnce(T) -> Result<U> + Send + 'static) -> Submission<U> {
        Submission {
            unsettled: self.unsettled,
            failed: self.failed,
            rejected: self.rejected,
            output: self
                .output
                .map(|output| -> Output<U> { Box::new(move || output().and_then(f)) }),
            spin: self.spin,
            native: self.native,
        }
    }
}

impl<T> Unpin for Submission<T> {}

impl<T> Future for Submission<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = &mut *self;
        if !this.spin.is_zero() {
            // Once, on the first poll: watch the last entry (which settles last) before
            // sleeping; the executor's thread pays at most the budget.
            let budget = std::mem::take(&mut this.spin);
            // The first entry is the operation's own completion (see `Queue::submit`).
            let native = this.native.take();
            if let (Some(done), Some(last)) = (this.unsettled.first(), this.unsettled.last()) {
                let waited = native.is_some_and(|(backend, queue)| {
                    !last.is_settled()
                        && backend
                            .upgrade()
                            .is_some_and(|b| b.wait_native(queue, done.semaphore(), budget))
                });
                if !waited {
                    crate::spin::spin_until(budget, || last.is_settled());
                }
            }
        }
        // Backends settle signal entries in fence order, so the last entry settles last: wait
        // on it alone (one wake per completion, not one per entry), then collect the others,
        // which are settled by then. The earliest entry's error wins. An entry whose semaphore
        // reached its value before failing was signalled by this operation: the failure is a
        // later operation's, not this one's.
        while let Some(last) = this.unsettled.last_mut() {
            match Pin::new(&mut *last).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) if last.semaphore().reached_before_failure(last.value()) => {}
                Poll::Ready(Err(error)) => this.failed = Some(error),
            }
            this.unsettled.pop();
        }
        if let Some(error) = this.rejected.take() {
            this.failed = None;
            return Poll::Ready(Err(error));
        }
        if let Some(error) = this.failed.take() {
            this.output = None;
            return Poll::Ready(Err(error));
        }
        match this.output.take() {
            Some(output) => Poll::Ready(output()),
            None => Poll::Ready(Err(Error::new(
                StatusCode::FailedPrecondition,
                "Submission polled after it completed",
            ))),
        }
    }
}

/// A device queue. Cheap to clone.
#[derive(Clone)]
pub struct Queue {
    device: Device,
    index: u32,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue")
            .field("device", &self.device.info().id)
            .field("index", &self.index)
            .field("label", &self.label())
            .finish()
    }
}

/// `queue 1 of cpu://0`, or `queue 1 'upload' of cpu://0` once labelled
/// ([`Queue::set_label`]).
impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "queue {}", self.index)?;
        if let Some(label) = self.label() {
            write!(f, " '{label}'")?;
        }
        write!(f, " of {}", self.device.info().id)
    }
}

impl Queue {
    pub(crate) fn new(device: Device, index: u32) -> Self {
        Queue { device, index }
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The queue's index on its device.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Names the queue in error messages and profiles (its track in a trace, its lane in a
    /// timeline; see its `Display`). Every handle to the queue sees the new label.
    pub fn set_label(&self, label: &str) {
        if let Some(slot) = self.device.queue_label(self.index) {
            slot.set(label);
        }
    }

    /// The queue's label, if it has one.
    pub fn label(&self) -> Option<Arc<str>> {
        self.device.queue_label(self.index)?.get()
    }

    /// What this queue can run.
    pub fn capabilities(&self) -> QueueCapabilities {
        self.device.backend().queue_capabilities(self.index)
    }

    /// A new in-order timeline for this queue (a fresh device semaphore at 0).
    pub fn timeline(&self) -> Result<Timeline> {
        Ok(Timeline {
            semaphore: self.device.create_semaphore(0)?,
            next: Arc::new(AtomicU64::new(0)),
            queue: self.clone(),
        })
    }

    /// Submits `work` touching `touched`; the core of every operation.
    pub(super) fn submit<T: Send + 'static>(
        &self,
        timepoints: Timepoints,
        touched: Touched,
        work: Work,
        output: Output<T>,
    ) -> Submission<T> {
        self.submit_labelled(timepoints, touched, work, output, None)
    }

    /// [`Queue::submit`], for work whose profile record names it by `label` (a command
    /// buffer's).
    fn submit_labelled<T: Send + 'static>(
        &self,
        timepoints: Timepoints,
        touched: Touched,
        work: Work,
        output: Output<T>,
        label: Option<Arc<str>>,
    ) -> Submission<T> {
        let Timepoints { wait, signal } = timepoints;
        let (kind, bytes) = classify(&work);
        let record = self
            .device
            .profiler()
            .submitted(self.index, kind, bytes, || {
                // Mostly none: a loop that allocates only for a labelled semaphore.
                let mut labels = Vec::new();
                for (s, _) in wait.iter().chain(signal.iter()) {
                    if let Some(label) = s.label() {
                        labels.push((s.id(), label));
                    }
                }
                Header {
                    id: 0, // the profiler numbers it
                    bytes,
                    queue: self.index,
                    kind,
                    name: name(&work, kind, label),
                    timepoints: Pairs::new(
                        wait.iter().map(|(s, v)| (s.id(), v)),
                        signal.iter().map(|(s, v)| (s.id(), v)),
                    ),
                    semaphore_labels: (!labels.is_empty()).then(|| labels.into_boxed_slice()),
                }
            });
        let trace = record.map(OperationTrace);
        let done = match self.device.completions(self.index) {
            Some(completions) => completions.next(trace),
            None => Semaphore::completion(trace),
        };
        let done_fence = Fence::at(&done, 1);
        for (buffer, access) in touched.iter() {
            if let Err(error) = buffer.track(&done, 1, *access) {
                // Settles what the buffers tracked so far; the operation is refused in order.
                done.fail(error.clone());
                return self.reject(Timepoints { wait, signal }, error);
            }
        }
        // Later failures on these timelines wait for this work (see `crate::queue`).
        for (semaphore, value) in signal.iter() {
            semaphore.expect_signal(value);
        }
        // `done` goes first: a fence is signalled in order, so the buffer trackers (which watch
        // `done`) see the work complete before anyone woken by the caller's semaphores looks.
        let signal = done_fence.join(&signal);
        let unsettled = signal.iter().map(|(s, v)| s.wait(v)).collect();
        self.device.backend().submit(self.index, wait, signal, work);
        let spin = self.device.completion_spin();
        Submission {
            unsettled,
            failed: None,
            rejected: None,
            output: Some(output),
            native: (!spin.is_zero()).then(|| (Arc::downgrade(self.device.backend()), self.index)),
            spin,
        }
    }

    /// The error for work that needs `missing` capabilities this queue lacks.
    pub(super) fn cannot_run(&self, missing: QueueCapabilities) -> Error {
        Error::new(
            StatusCode::InvalidArgument,
            format!(
                "{self} cannot run {missing:?} work (it has {:?}); pick a queue from \
                 device.queue_affinity({missing:?})",
                self.capabilities()
            ),
        )
    }

    /// Refuses an operation (a bad argument, a conflicting host mapping, a failed allocation)
    /// without letting the failure overtake earlier work: the operation is submitted as a host
    /// call that fails with `error`, so its signal fence fails in order, as a failure of the
    /// work itself would (see [`crate::queue`]): after its waits, and after every earlier value
    /// on its timelines has settled with its own outcome. The submission completes with `error`
    /// once the signal fence has settled.
    pub(crate) fn reject<T>(&self, timepoints: Timepoints, error: Error) -> Submission<T> {
        let failure = error.clone();
        let signalled = self.submit(
            timepoints,
            Touched::default(),
            Work::HostCall(Box::new(move || Err(failure))),
            Box::new(|| Ok(())),
        );
        Submission::rejected(signalled, error)
    }

    pub(crate) fn commands(&self, timepoints: Timepoints, commands: Arc<[Command]>) -> Submission {
        self.commands_labelled(timepoints, commands, None, None)
    }

    /// [`Queue::commands`] of a command buffer labelled `label`, resolved from `recording`
    /// (reusable buffers only: a one-shot recording is never submitted again).
    fn commands_labelled(
        &self,
        timepoints: Timepoints,
        commands: Arc<[Command]>,
        label: Option<Arc<str>>,
        recording: Option<Recording>,
    ) -> Submission {
        let capabilities = self.capabilities();
        let needs = |c: &Command| match c {
            Command::Dispatch(_) => QueueCapabilities::DISPATCH,
            Command::Barrier => QueueCapabilities::empty(),
            _ => QueueCapabilities::TRANSFER,
        };
        if capabilities != QueueCapabilities::all() {
            let missing = commands
                .iter()
                .fold(QueueCapabilities::empty(), |m, c| m | needs(c))
                - capabilities;
            if !missing.is_empty() {
                return self.reject(timepoints, self.cannot_run(missing));
            }
        }
        if let Err(error) = self.check_limits(&commands) {
            return self.reject(timepoints, error);
        }
        let mut touched = Touched::default();
        for command in commands.iter() {
            command.for_each_binding(|range, access| touched.add(range.buffer(), access));
        }
        self.submit_labelled(
            timepoints,
            touched,
            Work::Commands {
                commands,
                recording,
            },
            Box::new(|| Ok(())),
            label,
        )
    }

    /// `InvalidArgument` for a dispatch with more workgroups in some dimension than the device
    /// allows ([`Device::max_workgroup_count`]), before the driver sees it.
    fn check_limits(&self, commands: &[Command]) -> Result<()> {
        let limits = self.device.max_workgroup_count();
        let range = self.device.max_binding_range();
        if limits == [u32::MAX; 3] && range == u64::MAX {
            return Ok(());
        }
        for command in commands {
            let Command::Dispatch(dispatch) = command else {
                continue;
            };
            let name = || {
                (dispatch.executable.entry_point(dispatch.entry_point))
                    .map_or("?", |e| e.name.as_str())
            };
            if let Some((index, binding)) =
                (dispatch.bindings.iter().enumerate()).find(|(_, binding)| binding.len() > range)
            {
                let name = name();
                return Err(Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "binding {index} of dispatch '{name}' covers {} bytes, but {} binds at \
                         most {range} bytes at once; split the work into smaller ranges",
                        binding.len(),
                        self.device.info().id,
                    ),
                ));
            }
            for (axis, (&count, &limit)) in dispatch.workgroups.iter().zip(&limits).enumerate() {
                if count > limit {
                    let name = name();
                    return Err(Error::new(
                        StatusCode::InvalidArgument,
                        format!(
                            "dispatch of '{name}' asks for {count} workgroups in {}, but {} \
                             allows at most {limit} (workgroups {:?}, limits {limits:?}); split \
                             the dispatch or move work into another dimension",
                            ["x", "y", "z"][axis],
                            self.device.info().id,
                            dispatch.workgroups,
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn one(
        &self,
        timepoints: Timepoints,
        record: impl FnOnce(&mut crate::command_buffer::CommandBufferBuilder) -> Result<()>,
    ) -> Submission {
        let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
        if let Err(error) = record(&mut builder) {
            return self.reject(timepoints, error);
        }
        match builder.finish().resolve(None) {
            Ok(commands) => self.commands(timepoints, commands),
            Err(error) => self.reject(timepoints, error),
        }
    }

    /// Executes a command buffer; `table` fills its binding-table slots (reusable buffers).
    pub fn execute(
        &self,
        timepoints: impl Into<Timepoints>,
        command_buffer: &CommandBuffer,
        table: Option<&BindingTable>,
    ) -> Submission {
        let timepoints = timepoints.into();
        match command_buffer.resolve(table) {
            Ok(commands) => {
                let recording = (command_buffer.mode() == CommandBufferMode::Reusable)
                    .then(|| command_buffer.recording());
                self.commands_labelled(timepoints, commands, command_buffer.label(), recording)
            }
            Err(error) => self.reject(timepoints, error),
        }
    }

    /// Fills `target` with `pattern` repeated: a value of 1, 2 or 4 bytes (`0u8`, `1.0f32`,
    /// `0xFFFFu16`...), written as it lies in memory. The target's offset and length must be
    /// multiples of the pattern's size and it needs [`BufferUsage::TRANSFER_TARGET`]; a
    /// pattern of another size, a misaligned range or a missing usage is `InvalidArgument`.
    /// Runs once `timepoints.wait` is reached and signals `timepoints.signal` when the bytes
    /// are written; a refusal fails both the submission and the signal fence, in order (see
    /// [`crate::queue`]).
    ///
    /// ```
    /// # async fn demo(queue: &halcyon::Queue, y: &halcyon::Buffer) -> halcyon::Result<()> {
    /// queue.fill(halcyon::Timepoints::default(), 1.0f32, &y.whole()).await?; // every float 1.0
    /// # Ok(()) }
    /// ```
    pub fn fill<T: Pod>(
        &self,
        timepoints: impl Into<Timepoints>,
        pattern: T,
        target: &BufferRef,
    ) -> Submission {
        self.one(timepoints.into(), |b| b.fill(pattern, target).map(drop))
    }

    /// Writes the elements of `data` (copied now, so the caller may reuse it at once) into
    /// `target`, which must be exactly as many bytes long, with offset and length multiples
    /// of 4, and at most [`crate::command_buffer::MAX_UPDATE_SIZE`] bytes (use
    /// [`Queue::write`] for more). Ordering and failure as for [`Queue::fill`]; a wrong
    /// length, a misaligned range or a missing [`BufferUsage::TRANSFER_TARGET`] is
    /// `InvalidArgument`.
    pub fn update<T: Pod>(
        &self,
        timepoints: impl Into<Timepoints>,
        data: &[T],
        target: &BufferRef,
    ) -> Submission {
        self.one(timepoints.into(), |b| b.update(data, target).map(drop))
    }

    /// Copies `source` into `target` on the device, once `timepoints.wait` is reached: equal
    /// lengths, no overlap within one buffer, usages [`BufferUsage::TRANSFER_SOURCE`] and
    /// [`BufferUsage::TRANSFER_TARGET`] (`InvalidArgument` otherwise, failing the submission and
    /// the signal fence in order). The submission holds both buffers until it completes.
    pub fn copy(
        &self,
        timepoints: impl Into<Timepoints>,
        source: &BufferRef,
        target: &BufferRef,
    ) -> Submission {
        self.one(timepoints.into(), |b| b.copy(source, target).map(drop))
    }

    /// Dispatches `launch` ([`crate::Kernel::launch`]) once `timepoints.wait` is reached,
    /// signalling `timepoints.signal` when it completes.
    ///
    /// The launch is checked as [`crate::CommandBufferBuilder::dispatch`] records it (counts,
    /// constant sizes, workgroup limits of this device, usage, no binding-table slots); a
    /// refused launch never reaches the device and fails the submission and the signal fence
    /// in order (see [`crate::queue`]). The submission holds the launch's buffers and
    /// executable until it completes; a kernel that fails on the device fails it likewise.
    /// Dispatching the same launch again reuses the command built the first time: keep a
    /// launch that runs in a loop, and its dispatches allocate nothing for it.
    ///
    /// ```
    /// use halcyon::{Buffer, Kernel, Queue, Timepoints};
    ///
    /// /// y = a * x + y over `n` floats, 256 per workgroup, once `Timepoints` allow.
    /// async fn saxpy(queue: &Queue, saxpy: &Kernel, a: f32, x: &Buffer, y: &Buffer) -> halcyon::Result<()> {
    ///     let n = (x.size() / 4) as u32;
    ///     let launch = saxpy.launch([n.div_ceil(256), 1, 1]).constant(a).constant(n);
    ///     let launch = launch.binding(x.whole()).binding(y.whole());
    ///     queue.dispatch(Timepoints::default(), &launch).await
    /// }
    /// ```
    pub fn dispatch(&self, timepoints: impl Into<Timepoints>, launch: &Launch) -> Submission {
        let timepoints = timepoints.into();
        let built = launch.one_shot(|| {
            let mut builder = CommandBuffer::builder(CommandBufferMode::OneShot);
            builder.dispatch(launch)?;
            builder.finish().resolve(None)
        });
        match built {
            Ok(commands) => self.commands(timepoints, commands),
            Err(error) => self.reject(timepoints, error),
        }
    }

    /// Writes the elements of `data` into `target`, which must be exactly as many bytes long
    /// (`InvalidArgument` otherwise, as is a target without
    /// [`BufferUsage::TRANSFER_TARGET`]); any size. The bytes are copied now, so the caller
    /// may reuse `data` at once; the device copies them once `timepoints.wait` is reached and
    /// signals `timepoints.signal` when they are in the buffer. A refusal fails the submission
    /// and the signal fence in order (see [`crate::queue`]).
    ///
    /// ```
    /// # async fn demo(queue: &halcyon::Queue, x: &halcyon::Buffer) -> halcyon::Result<()> {
    /// let xs: Vec<f32> = (0..1024).map(|i| i as f32).collect();
    /// queue.write(halcyon::Timepoints::default(), &xs, &x.slice(0..4096)?).await?;
    /// # Ok(()) }
    /// ```
    pub fn write<T: Pod>(
        &self,
        timepoints: impl Into<Timepoints>,
        data: &[T],
        target: &BufferRef,
    ) -> Submission {
        let data: &[u8] = bytemuck::cast_slice(data);
        self.write_shared(timepoints, data.into(), target)
    }

    /// [`Queue::write`] of bytes the caller already holds in an `Arc<[u8]>`, which the
    /// submission keeps until the device has copied them instead of copying them first. For
    /// repeated large uploads of the same bytes this saves a copy and, above the allocator's
    /// mapping threshold, the page faults of fresh memory on every write.
    pub fn write_shared(
        &self,
        timepoints: impl Into<Timepoints>,
        data: Arc<[u8]>,
        target: &BufferRef,
    ) -> Submission {
        let timepoints = timepoints.into();
        if target.len() != data.len() as u64 {
            return self.reject(
                timepoints,
                Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "write target is {} bytes but {} bytes of data were given",
                        target.len(),
                        data.len()
                    ),
                ),
            );
        }
        if let Err(error) = check_usage(target, BufferUsage::TRANSFER_TARGET, "write target") {
            return self.reject(timepoints, error);
        }
        let command = Command::Update {
            target: target.clone(),
            data,
        };
        self.commands(timepoints, Arc::new([command]))
    }

    /// Reads `source` into a new `Vec<T>` once `timepoints.wait` is reached; the submission
    /// completes with it once `timepoints.signal` is reached. The vector is allocated as `T`,
    /// so its elements are aligned whatever `T` is; `source.len()` must be a whole number of
    /// them (`InvalidArgument` otherwise, as is a source without
    /// [`BufferUsage::TRANSFER_SOURCE`] or a queue without transfers; refusals fail the signal
    /// fence in order). Bytes arrive as they lie in device memory. The bytes go straight into
    /// the vector where the backend copies from host-visible memory (CPU, Vulkan, the stream
    /// backends' pinned staging); a large read on CUDA or HIP of elements wider than a byte
    /// lands in the backend's own staging vector first and is copied into the `Vec<T>` once.
    ///
    /// ```
    /// # async fn demo(queue: &halcyon::Queue, y: &halcyon::Buffer) -> halcyon::Result<()> {
    /// let ys: Vec<f32> = queue.read(halcyon::Timepoints::default(), &y.whole()).await?;
    /// let bytes = queue.read::<u8>(halcyon::Timepoints::default(), &y.whole()).await?;
    /// assert_eq!(bytes.len(), ys.len() * 4);
    /// # Ok(()) }
    /// ```
    pub fn read<T: Pod + Send>(
        &self,
        timepoints: impl Into<Timepoints>,
        source: &BufferRef,
    ) -> Submission<Vec<T>> {
        self.read_with(timepoints.into(), source, ReadSink::typed::<T>(None))
    }

    /// [`Queue::read`] into `buffer`, whose allocation is reused for the elements instead of
    /// a new vector each time: the submission completes with `buffer`, `source.len() /
    /// size_of::<T>()` elements long (its old contents replaced). Every backend here reuses
    /// it (the stream backends read large byte reads straight into it). For repeated large
    /// reads, hand back the vector the previous read returned: a fresh one costs the page
    /// faults of touching new memory, which for 64 MiB can take longer than the copy itself.
    /// Ordering and failure as for [`Queue::read`]; a refused read drops `buffer`.
    pub fn read_into<T: Pod + Send>(
        &self,
        timepoints: impl Into<Timepoints>,
        source: &BufferRef,
        buffer: Vec<T>,
    ) -> Submission<Vec<T>> {
        self.read_with(timepoints.into(), source, ReadSink::typed(Some(buffer)))
    }

    fn read_with<T: Pod + Send>(
        &self,
        timepoints: Timepoints,
        source: &BufferRef,
        sink: ReadSink,
    ) -> Submission<Vec<T>> {
        let size = std::mem::size_of::<T>() as u64;
        if size == 0 || !source.len().is_multiple_of(size) {
            let error = Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "read of {} bytes into a Vec<{}>: the length must be a whole number of \
                     {size}-byte elements",
                    source.len(),
                    std::any::type_name::<T>()
                ),
            );
            return self.reject(timepoints, error);
        }
        if !self.capabilities().contains(QueueCapabilities::TRANSFER) {
            return self.reject(timepoints, self.cannot_run(QueueCapabilities::TRANSFER));
        }
        if let Err(error) = check_usage(source, BufferUsage::TRANSFER_SOURCE, "read source") {
            return self.reject(timepoints, error);
        }
        let mut touched = Touched::default();
        touched.add(source.buffer(), Access::Read);
        let taken = sink.clone();
        self.submit(
            timepoints,
            touched,
            Work::Read {
                source: source.clone(),
                sink,
            },
            Box::new(move || {
                taken.take::<T>().ok_or_else(|| {
                    Error::new(
                        StatusCode::Internal,
                        "queue read completed without delivering its bytes",
                    )
                })
            }),
        )
    }

    /// Allocates a buffer in queue order: the handle is returned at once and may be used in
    /// submissions ordered after `timepoints.signal`. Its memory comes from the backend's
    /// queue-ordered pool where it has one (CUDA and HIP stream-ordered allocation), else from the
    /// device's alloca pool (reusing memory a [`Queue::dealloca`] returned) or a new allocation.
    pub fn alloca(
        &self,
        timepoints: impl Into<Timepoints>,
        size: u64,
        params: BufferParams,
    ) -> Result<(Buffer, Submission)> {
        let timepoints = timepoints.into();
        let buffer = match self
            .device
            .allocator()
            .allocate_for_queue(self.index, size, params)
        {
            Ok(buffer) => buffer,
            Err(error) => {
                // The signal fails in order; the caller has the error now.
                drop(self.reject::<()>(timepoints, error.clone()));
                return Err(error);
            }
        };
        let mut touched = Touched::default();
        touched.add(&buffer, Access::Write);
        let submission = self.submit(
            timepoints,
            touched,
            Work::Commands {
                commands: Arc::new([]),
                recording: None,
            },
            Box::new(|| Ok(())),
        );
        Ok((buffer, submission))
    }

    /// Frees a buffer in queue order: once `timepoints.wait` is reached its memory is detached
    /// (later use fails with `FailedPrecondition`) and returns to the pool as soon as no
    /// in-flight work holds it.
    pub fn dealloca(&self, timepoints: impl Into<Timepoints>, buffer: &Buffer) -> Submission {
        let mut touched = Touched::default();
        touched.add(buffer, Access::Write);
        let buffer = buffer.clone();
        self.submit(
            timepoints.into(),
            touched,
            Work::HostCall(Box::new(move || {
                drop(buffer.release_memory());
                Ok(())
            })),
            Box::new(|| Ok(())),
        )
    }

    /// Signals `timepoints.signal` once `timepoints.wait` is reached (and earlier work it
    /// depends on completed).
    pub fn barrier(&self, timepoints: impl Into<Timepoints>) -> Submission {
        self.commands(timepoints.into(), Arc::new([]))
    }

    /// Runs `call` on the host in queue order; an `Err` fails the signal fence.
    pub fn host_call(
        &self,
        timepoints: impl Into<Timepoints>,
        call: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Submission {
        self.submit(
            timepoints.into(),
            Touched::default(),
            Work::HostCall(Box::new(call)),
            Box::new(|| Ok(())),
        )
    }
}
