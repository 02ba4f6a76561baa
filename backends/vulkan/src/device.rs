//! The Vulkan device: the translation table from the core's device SPI to Vulkan.
//!
//! | core                          | Vulkan device                                                 |
//! |-------------------------------|---------------------------------------------------------------|
//! | queues `0..c`                 | queues of the first compute family (up to `max_queues`)        |
//! | queues `c..`, `TRANSFER` only | queues of a dedicated transfer family (`transfer_queues`)      |
//! | semaphore                     | timeline `VkSemaphore` behind the core semaphore               |
//! | wait on this device's timeline, signalled by submitted work | `VkTimelineSemaphoreSubmitInfo` wait (no host round trip) |
//! | wait on host / foreign semaphores | pending action on the reactor ([`ActionQueue`])            |
//! | signal of a device semaphore  | `vkQueueSubmit` signal; core payload advanced by the reactor   |
//! | signal of a host semaphore    | signalled by the reactor when the queue's timeline passes it   |
//! | reactor park                  | `vkWaitSemaphores` on the control semaphore only                |
//! | queue completion              | a thread per queue blocked in `vkWaitSemaphores` on its timeline |
//! | command list                  | a `VkCommandBuffer` ([`crate::record`])                        |
//! | queue read                    | copy into a host-visible staging buffer, copied out on completion |
//! | host call                     | run by the core's pending-action executor                      |

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ash::vk;
use halcyon::backend::reactor::{Parker, Reactor, ReactorHandle, Unpark};
use halcyon::backend::{fail_in_order, failure_order, ActionQueue};
use halcyon::backend::{
    BufferMemory, DeviceBackend, ExecutableBackend, OperationTrace, SemaphoreExt, Work,
};
use halcyon::device::keys;
use halcyon::{
    BufferParams, DeviceFeatures, DeviceInfo, Error, ExecutableSpec, Fence, QueueCapabilities,
    Result, Semaphore, StatusCode,
};

use crate::context::Context;
use crate::executable::{VulkanExecutable, FORMAT_SPIRV, FORMAT_WGSL};
use crate::instance::vk_fail;
use crate::memory::{vk_properties, VulkanMemory};
use crate::options::VulkanDeviceOptions;
use crate::record::{Recording, Recycler};
use crate::semaphore::{SemInner, VulkanSemaphore};
use crate::timestamps::{QueueStamps, Stamp, Stamped};

/// How long one reactor `vkWaitSemaphores` may block before it re-reads its wait set (a
/// safety net; wakes come from the control semaphore, never from this timeout).
const PARK_TIMEOUT: Duration = Duration::from_secs(5);

/// A submission's few semaphores, handles and flags, inline up to four: no allocation for the
/// usual one wait and two signals.
pub(crate) type Few<T> = smallvec::SmallVec<[T; 4]>;

/// A submission the GPU has not finished.
pub(crate) struct InFlight {
    /// The queue timeline value its `vkQueueSubmit` signals.
    value: u64,
    signal: Fence,
    /// Per entry of `signal`: whether the submission signals it on the device.
    device_signalled: Few<bool>,
    /// Native semaphores it signals (their `in_flight` counts it).
    natives: Few<Arc<SemInner>>,
    /// Semaphores waited on in `vkQueueSubmit`, with the values: if one failed before reaching
    /// its value, the submission fails.
    waited: Few<(Semaphore, u64)>,
    /// What it recorded (command pool, staging, descriptor pool, retained resources), and what
    /// runs on completion before the fence is signalled (a read's copy-out).
    recording: Recording,
    /// The timestamps of a profiled submission ([`crate::timestamps`]).
    stamped: Option<Stamped>,
}

/// What a completed submission still owns: its recording (command pool, descriptor pool,
/// staging, retained resources) and its semaphores.
///
/// Released one completion later, not at once: a timeline value being reached does not mean
/// the driver is done with the batch (lavapipe's queue thread may still be signalling its other
/// semaphores), and destroying or resetting objects it still touches crashed or deadlocked
/// lavapipe. A queue executes its batches in order, so once a later batch completed, the earlier
/// one is entirely finished; the last one is released when the device is dropped, after
/// `vkDeviceWaitIdle`.
struct Retired {
    recording: Recording,
    stamp: Option<Stamp>,
    _signal: Fence,
    _natives: Few<Arc<SemInner>>,
    _waited: Few<(Semaphore, u64)>,
}

struct QueueState {
    queue: vk::Queue,
    /// The last value handed to a `vkQueueSubmit` on `timeline`.
    submitted: u64,
    in_flight: VecDeque<InFlight>,
    /// Ends the queue's completion thread once `in_flight` is empty.
    stop: bool,
    /// Completed submissions whose objects are not released yet (see [`Retired`]).
    retired: Vec<Retired>,
    /// An empty vector with capacity, swapped with `retired` when that is released, so that
    /// retiring allocates nothing.
    spare: Vec<Retired>,
    /// Submissions failed by a device loss: released only when the device is dropped.
    lost: Vec<InFlight>,
}

pub(crate) struct VkQueue {
    pub(crate) family: u32,
    /// `all()` for a compute-family queue, `TRANSFER` for a transfer-family one.
    capabilities: QueueCapabilities,
    timeline: vk::Semaphore,
    state: Mutex<QueueState>,
    /// Wakes the completion thread of a lost device (which no longer waits in Vulkan) to stop.
    work: Condvar,
    /// Held while completing this queue's submissions, so they complete in order.
    processing: Mutex<()>,
    /// Reset command slots and cached recordings of reused command lists.
    pub(crate) recycler: Recycler,
    /// Timestamp query pools for profiled submissions.
    stamps: QueueStamps,
}

/// Everything submissions and the reactor share.
pub(crate) struct Core {
    pub(crate) context: Arc<Context>,
    pub(crate) queues: Vec<VkQueue>,
    /// Set once the reactor runs: failures of completed work are ordered on it.
    reactor: std::sync::OnceLock<ReactorHandle>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Core {
    /// This device's native object behind `semaphore`, if any.
    fn own_native<'a>(&self, semaphore: &'a Semaphore) -> Option<&'a Arc<SemInner>> {
        let native = semaphore
            .native()?
            .as_any()
            .downcast_ref::<VulkanSemaphore>()?;
        Arc::ptr_eq(&native.inner.context, &self.context).then_some(&native.inner)
    }

    /// Records `work` and submits it on queue `index`, waiting natively on `native_waits`.
    fn execute(
        self: &Arc<Self>,
        index: usize,
        native_waits: Few<(Semaphore, u64)>,
        signal: Fence,
        work: Work,
    ) -> Result<()> {
        if let Some(lost) = self.context.lost() {
            return Err(lost.clone());
        }
        let recording = Recording::record(self, index, work)?;
        let queue = &self.queues[index];
        // Profiled: timestamps around the recording. Otherwise nothing is added.
        let trace = OperationTrace::of(&signal).cloned();
        let stamp = trace.as_ref().and_then(|_| {
            queue
                .stamps
                .take(&self.context.device, queue.family, &self.context.stats)
        });
        let mut wait_handles = Few::new();
        let mut wait_values = Few::new();
        let mut keep_natives = Few::new();
        for (semaphore, value) in &native_waits {
            if let Some(native) = self.own_native(semaphore) {
                wait_handles.push(native.handle);
                wait_values.push(*value);
                keep_natives.push(native.clone());
            }
        }
        let mut signal_handles = Few::new();
        let mut signal_values = Few::new();
        let mut device_signalled = Few::new();
        let mut natives = Few::new();
        // A kernel that can fail its dispatch is checked on the host before anything it
        // signals moves: then every signal is a host signal, made after the check.
        let on_device = !recording.reports_status();
        for (semaphore, value) in signal.iter() {
            let native = Some(semaphore)
                .filter(|_| on_device)
                .and_then(|s| self.own_native(s))
                .filter(|n| n.device_max.load(Ordering::Acquire) < value)
                .filter(|_| matches!(semaphore.query(), Ok(current) if current < value));
            device_signalled.push(native.is_some());
            if let Some(native) = native {
                signal_handles.push(native.handle);
                signal_values.push(value);
                native.in_flight.fetch_add(1, Ordering::AcqRel);
                natives.push(native.clone());
            }
        }
        let undo = |natives: &[Arc<SemInner>]| {
            for n in natives {
                n.in_flight.fetch_sub(1, Ordering::AcqRel);
            }
        };
        let stages: Few<_> =
            smallvec::smallvec![vk::PipelineStageFlags::ALL_COMMANDS; wait_handles.len()];
        let mut state = lock(&queue.state);
        let value = state.submitted + 1;
        signal_handles.push(queue.timeline);
        signal_values.push(value);
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let mut command_buffers = recording.command_buffers();
        if let Some(stamp) = &stamp {
            command_buffers.insert(0, stamp.begin);
            command_buffers.push(stamp.end);
        }
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&wait_handles)
            .wait_dst_stage_mask(&stages)
            .command_buffers(&command_buffers)
            .signal_semaphores(&signal_handles)
            .push_next(&mut timeline_info);
        let injected = self.context.options.faults.as_ref();
        // The device cannot start the work before this.
        let submitted_ns = stamp.map_or(0, |_| halcyon::profile::now_ns());
        let submitted = match injected.and_then(|f| f.take_submit()) {
            Some(injected) => Err(injected),
            // SAFETY: the queue is externally synchronised by `state`'s lock; every handle in
            // the submit info is live (semaphores are kept by `natives`/`keep_natives`, the
            // command buffer and resources by `recording`, which stays alive until the
            // completion thread sees the queue timeline reach `value`); wait values are
            // signalled by work already submitted.
            None => unsafe {
                self.context
                    .device
                    .queue_submit(state.queue, &[submit], vk::Fence::null())
            },
        };
        if let Err(r) = submitted {
            drop(state);
            undo(&natives);
            if let Some(stamp) = stamp {
                queue.stamps.give_back(&self.context.device, stamp);
            }
            let error = vk_fail("vkQueueSubmit", r);
            if r == vk::Result::ERROR_DEVICE_LOST {
                return Err(self.lose(error));
            }
            return Err(error);
        }
        self.context.stats.submits.fetch_add(1, Ordering::Relaxed);
        self.context
            .stats
            .timestamp_queries
            .fetch_add(2 * stamp.is_some() as u64, Ordering::Relaxed);
        self.context
            .stats
            .native_waits
            .fetch_add(wait_handles.len() as u64, Ordering::Relaxed);
        for (native, value) in natives.iter().zip(&signal_values) {
            native.device_max.fetch_max(*value, Ordering::AcqRel);
        }
        state.submitted = value;
        state.in_flight.push_back(InFlight {
            value,
            signal,
            device_signalled,
            natives,
            waited: native_waits,
            recording,
            stamped: stamp.zip(trace).map(|(stamp, trace)| Stamped {
                stamp,
                trace,
                submitted_ns,
            }),
        });
        drop(state);
        drop(keep_natives);
        // No wake-up for the completion thread: while the queue is idle it already waits in
        // `vkWaitSemaphores` for this value (see `complete_loop`).
        Ok(())
    }

    /// Completes every submission of every queue whose queue timeline value the GPU reached.
    fn process(&self) {
        for queue in &self.queues {
            self.process_queue(queue, None);
        }
        self.prune_watched();
    }

    /// Completes, in order, the submissions of `queue` whose value the GPU reached (`reached`,
    /// or the timeline's counter).
    fn process_queue(&self, queue: &VkQueue, reached: Option<u64>) {
        let _in_order = lock(&queue.processing);
        let reached = match reached {
            Some(value) => value,
            None => match self.context.counter(queue.timeline) {
                Ok(value) => value,
                Err(_) => return,
            },
        };
        loop {
            let done = {
                let mut state = lock(&queue.state);
                match state.in_flight.front() {
                    Some(f) if f.value <= reached => state.in_flight.pop_front(),
                    _ => None,
                }
            };
            let Some(done) = done else { break };
            self.complete(queue, done);
        }
    }

    /// Forgets watched values that were reached or whose semaphore is gone.
    fn prune_watched(&self) {
        let mut watched = lock(&self.context.watched);
        watched.retain(|_, (inner, value)| {
            Arc::strong_count(inner) > 1
                && self
                    .context
                    .counter(inner.handle)
                    .is_ok_and(|counter| counter < *value)
        });
    }

    /// Settles a finished submission's signal fence, in fence order, and recycles its objects.
    fn complete(&self, queue: &VkQueue, done: InFlight) {
        self.context.stats.completed.fetch_add(1, Ordering::Relaxed);
        let InFlight {
            signal,
            device_signalled,
            natives,
            waited,
            recording,
            stamped,
            ..
        } = done;
        let mut recording = recording;
        // What the previous completion retired is entirely finished now that a later batch
        // completed (see [`Retired`]): released before anything is signalled, so that the
        // submission a signal below wakes finds its list's recording back in the cache instead
        // of recording (and allocating) afresh.
        let older = {
            let mut state = lock(&queue.state);
            let spare = std::mem::take(&mut state.spare);
            std::mem::replace(&mut state.retired, spare)
        };
        let emptied = self.release(queue, older);
        // Device times before anything is signalled: the core records completion then.
        if let Some(stamped) = &stamped {
            queue.stamps.report(
                &self.context.device,
                &self.context.clock,
                &self.context.stats,
                stamped,
            );
        }
        // A failure after the value was reached is a later operation's: the input was whole.
        let mut result = waited
            .iter()
            .find_map(|(s, v)| s.failure_before(*v))
            .map_or(Ok(()), Err)
            .map_err(|e| e.context("a semaphore this submission waited on failed"));
        let after = recording.take_after();
        if result.is_ok() {
            result = recording.check_status();
        }
        if result.is_ok() {
            if let Some(after) = after {
                result = after();
            }
        }
        match result {
            Ok(()) => {
                let mut first_error = None;
                for ((semaphore, value), on_device) in signal.iter().zip(&device_signalled) {
                    if *on_device {
                        semaphore.advance(value);
                    } else if let Err(error) = semaphore.signal(value) {
                        first_error.get_or_insert(error);
                    }
                }
                if let Some(error) = first_error {
                    signal.fail(error);
                }
            }
            // Never before the work this submission waited on (on another queue, say) has
            // settled on the host: the failure must not overtake it.
            Err(error) => match self.reactor.get() {
                Some(reactor) => {
                    let waited: Fence = waited.iter().map(|(s, v)| (s, *v)).collect();
                    let order = failure_order(&waited, &signal);
                    fail_in_order(reactor, &order, signal.clone(), error)
                }
                None => signal.fail(error),
            },
        }
        for native in &natives {
            native.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        recording.release_resources();
        let mut state = lock(&queue.state);
        state.retired.push(Retired {
            recording,
            stamp: stamped.map(|s| s.stamp),
            _signal: signal,
            _natives: natives,
            _waited: waited,
        });
        state.spare = emptied;
    }

    /// Recycles or destroys what retired submissions held; returns the emptied vector (the
    /// queue's next spare, set under the lock `complete` takes anyway).
    fn release(&self, queue: &VkQueue, mut retired: Vec<Retired>) -> Vec<Retired> {
        for retired in retired.drain(..) {
            let (keep, _after) = retired.recording.finish(queue);
            drop(keep);
            if let Some(stamp) = retired.stamp {
                queue.stamps.give_back(&self.context.device, stamp);
            }
        }
        retired
    }

    /// Blocks in `vkWaitSemaphores` on one timeline semaphore until it reaches `value`
    /// (`Ok(true)`), the timeout passes (`Ok(false)`) or the driver reports an error. Always a
    /// single semaphore: drivers without a native wait-any (Mesa's emulated timelines,
    /// lavapipe) spin-poll a multi-semaphore `ANY` wait.
    fn wait_one(
        &self,
        semaphore: vk::Semaphore,
        value: u64,
        timeout_ns: u64,
    ) -> std::result::Result<bool, vk::Result> {
        let handles = [semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&handles)
            .values(&values);
        // SAFETY: the handle is a live timeline semaphore of this device (the queue timelines
        // live as long as `self`).
        let result = unsafe { self.context.device.wait_semaphores(&info, timeout_ns) };
        match result {
            Ok(()) => Ok(true),
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(r) => Err(r),
        }
    }

    /// The device is lost (`error` names the call and the `VkResult`): from now on every
    /// submission fails with it, and every submission in flight fails now.
    ///
    /// What the failed submissions hold (command buffers, staging, the user's buffers) is kept
    /// until the device is dropped: after a loss the driver may still be touching it, and only
    /// `vkDeviceWaitIdle` returning (with `VK_ERROR_DEVICE_LOST`) makes freeing it valid.
    fn lose(&self, error: Error) -> Error {
        let error = self.context.lose(error.context(format!(
            "{} is lost: every submission in flight and every later one fails; drop the \
             device and create it again",
            self.context.id
        )));
        halcyon::backend::device_lost(&self.context.id, &error);
        for queue in &self.queues {
            let _in_order = lock(&queue.processing);
            let failed: Vec<InFlight> = lock(&queue.state).in_flight.drain(..).collect();
            for done in &failed {
                done.signal.fail(error.clone());
                for native in &done.natives {
                    native.in_flight.fetch_sub(1, Ordering::AcqRel);
                }
            }
            lock(&queue.state).lost.extend(failed);
        }
        error
    }

    /// A queue's completion thread: blocks in `vkWaitSemaphores` on the queue timeline's next
    /// unfinished value, and completes what finished, until [`VulkanDevice`]'s drop stops it.
    ///
    /// While the queue is idle it waits for the value the *next* submission will signal (a
    /// wait before the signal is submitted, which Vulkan allows for timelines), so a submission
    /// never has to wake this thread: the driver does when the work completes. (Measured on
    /// lavapipe: such a wait sleeps, using no CPU; only multi-semaphore `ANY` waits spin there.)
    fn complete_loop(&self, index: usize) {
        let queue = &self.queues[index];
        loop {
            let target = {
                let mut state = lock(&queue.state);
                loop {
                    if let Some(front) = state.in_flight.front() {
                        break front.value;
                    }
                    if state.stop {
                        return;
                    }
                    if self.context.lost().is_none() {
                        break state.submitted + 1;
                    }
                    // A lost device fails every wait at once: sleep until stopped instead.
                    state = queue.work.wait(state).unwrap_or_else(|p| p.into_inner());
                }
            };
            let waited = self.wait_one(queue.timeline, target, u64::MAX);
            let faults = self.context.options.faults.as_ref();
            match faults
                .and_then(|f| f.take_completion_wait())
                .map_or(waited, Err)
            {
                Ok(true) => {
                    self.context
                        .stats
                        .completion_wakes
                        .fetch_add(1, Ordering::Relaxed);
                    self.process_queue(queue, None);
                }
                Ok(false) => {}
                Err(vk::Result::ERROR_DEVICE_LOST) => {
                    self.lose(vk_fail("vkWaitSemaphores", vk::Result::ERROR_DEVICE_LOST));
                }
                Err(_) => {
                    // Out of host or device memory inside the wait: transient, so retry
                    // shortly (a wait that keeps failing at once must not become a spin).
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }

    /// Stops the completion threads once they have completed everything already submitted.
    ///
    /// No `vkDeviceWaitIdle` and no host signal here: on lavapipe (Mesa 22.3) a
    /// `vkDeviceWaitIdle` racing `vkWaitSemaphores` on other threads of the same device
    /// occasionally deadlocks inside the driver. Draining is enough: device work only waits on
    /// values that earlier device work signals, so every in-flight submission finishes.
    fn stop_completion(&self) {
        for queue in &self.queues {
            let mut state = lock(&queue.state);
            state.stop = true;
            if state.in_flight.is_empty() {
                // The thread may be waiting for the next submission's value: consume that value
                // with a host signal (later submissions take the ones after it). After a real
                // loss the signal fails, but then so does the thread's wait.
                state.submitted += 1;
                let _ = self.context.host_signal(queue.timeline, state.submitted);
            }
            drop(state);
            queue.work.notify_all();
        }
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: the device is live; waiting for idle makes every in-flight submission done.
        let _ = unsafe { self.context.device.device_wait_idle() };
        self.process();
        for queue in &self.queues {
            let leftovers: Vec<InFlight> = lock(&queue.state).in_flight.drain(..).collect();
            for f in leftovers {
                self.complete(queue, f);
            }
            let retired = std::mem::take(&mut lock(&queue.state).retired);
            let _ = self.release(queue, retired);
            // Failed by a device loss; the wait above returned, so nothing uses them now.
            let lost = std::mem::take(&mut lock(&queue.state).lost);
            for f in lost {
                let (keep, _after) = f.recording.finish(queue);
                drop(keep);
            }
            // The device is idle and every recording returned its slot.
            queue.recycler.destroy(&self.context.device);
            queue.stamps.destroy(&self.context.device);
            // SAFETY: the device is idle; nothing waits on or signals the timeline any more.
            unsafe { self.context.device.destroy_semaphore(queue.timeline, None) };
        }
    }
}

/// The reactor's sleep: `vkWaitSemaphores` on the control semaphore only.
///
/// Queue timelines are watched by the queues' completion threads, so the reactor waits on
/// nothing else. Watched native semaphores need no wait of their own either: a `VkSemaphore` of
/// this device only moves through this device's submissions (completed by the completion
/// threads, which advance it) or a host signal through the core semaphore (which wakes its
/// waiters itself).
struct VulkanParker {
    core: Arc<Core>,
    control_seen: u64,
}

impl Parker for VulkanParker {
    fn park(&mut self) {
        self.control_seen = self.core.context.park(self.control_seen, PARK_TIMEOUT);
        self.core
            .context
            .stats
            .parks
            .fetch_add(1, Ordering::Relaxed);
        self.core.prune_watched();
    }

    fn unparker(&self) -> Box<dyn Unpark> {
        Box::new(ControlUnpark(self.core.context.clone()))
    }

    fn shutdown(&mut self) {
        // SAFETY: the device is live; waiting idle lets every submitted batch finish so its
        // signal fence can be settled instead of hanging its waiters.
        let _ = unsafe { self.core.context.device.device_wait_idle() };
        self.core.process();
    }
}

struct ControlUnpark(Arc<Context>);

impl Unpark for ControlUnpark {
    fn unpark(&self) {
        self.0.interrupt();
    }
}

pub(crate) struct VulkanDevice {
    /// One per queue: blocks on the queue timeline and completes submissions (see `Drop`).
    completers: Vec<std::thread::JoinHandle<()>>,
    // Dropped first: its shutdown fails the actions still pending and settles in-flight work.
    reactor: Reactor,
    actions: Vec<ActionQueue>,
    core: Arc<Core>,
    info: DeviceInfo,
}

impl VulkanDevice {
    pub(crate) fn new(index: u32, options: VulkanDeviceOptions) -> Result<VulkanDevice> {
        let (context, choice) = Context::new(index, options)?;
        // Without calibrated timestamps, the measured offset: one short round trip on the first
        // compute queue, now, while nothing else can use it (never on an executor's path).
        if context.host_query_reset {
            // SAFETY: the device was created with at least one queue of the compute family.
            let first = unsafe { context.device.get_device_queue(choice.family, 0) };
            // Profiling falls back to host times if this fails; the device still works.
            let _ =
                context
                    .clock
                    .measure(&context.device, first, choice.family, choice.timestamp_bits);
        }
        // Timestamps need hostQueryReset (to reuse queries from any queue) and a calibration.
        let timestamps = context.host_query_reset && context.clock.current().is_some();
        let bits = |family_bits: u32| if timestamps { family_bits } else { 0 };
        let mut queues = Vec::new();
        let compute = (0..choice.count).map(|i| {
            let all = QueueCapabilities::all();
            (choice.family, i, all, bits(choice.timestamp_bits))
        });
        let transfer_bits = bits(choice.transfer_timestamp_bits);
        let transfer = choice.transfer_family.into_iter().flat_map(|family| {
            (0..choice.transfer_count)
                .map(move |i| (family, i, QueueCapabilities::TRANSFER, transfer_bits))
        });
        for (family, i, capabilities, timestamp_bits) in compute.chain(transfer) {
            // SAFETY: the device was created with `choice.count` queues of the compute family
            // and `choice.transfer_count` of the transfer family.
            let queue = unsafe { context.device.get_device_queue(family, i) };
            queues.push(VkQueue {
                family,
                capabilities,
                timeline: context.create_timeline(0)?,
                state: Mutex::new(QueueState {
                    queue,
                    submitted: 0,
                    in_flight: VecDeque::new(),
                    stop: false,
                    retired: Vec::new(),
                    spare: Vec::new(),
                    lost: Vec::new(),
                }),
                work: Condvar::new(),
                processing: Mutex::new(()),
                recycler: Recycler::default(),
                stamps: QueueStamps::new(timestamp_bits),
            });
        }
        let core = Arc::new(Core {
            context: context.clone(),
            queues,
            reactor: std::sync::OnceLock::new(),
        });
        let parker = VulkanParker {
            core: core.clone(),
            control_seen: 0,
        };
        let reactor = Reactor::with_parker(format!("vulkan{index}"), Box::new(parker))?;
        let _ = core.reactor.set(reactor.handle());
        let mut completers = Vec::new();
        for i in 0..core.queues.len() {
            let thread_core = core.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("halcyon-vulkan{index}-q{i}"))
                .spawn(move || thread_core.complete_loop(i));
            match spawned {
                Ok(handle) => completers.push(handle),
                Err(e) => {
                    core.stop_completion();
                    for handle in completers {
                        let _ = handle.join();
                    }
                    return Err(Error::with_source(
                        StatusCode::ResourceExhausted,
                        format!("cannot spawn the completion thread of vulkan://{index} queue {i}"),
                        e,
                    ));
                }
            }
        }
        let actions = (0..core.queues.len())
            .map(|_| ActionQueue::new(reactor.handle()))
            .collect();
        let transfer = match (choice.transfer_family, choice.transfer_count) {
            (Some(f), 0) => format!(", transfer family {f} unused"),
            (Some(f), n) => format!(", transfer family {f} x{n}"),
            (None, _) => String::new(),
        };
        Ok(VulkanDevice {
            info: DeviceInfo::new(
                context.id.clone(),
                format!(
                    "{} (Vulkan {}, queue family {} x{}{transfer})",
                    context.name,
                    crate::instance::version_string(context.api_version),
                    choice.family,
                    choice.count
                ),
                crate::DRIVER_ID,
            )
            .with_features(if bits(choice.timestamp_bits) > 0 {
                DeviceFeatures::PROFILING
            } else {
                DeviceFeatures::empty()
            }),
            completers,
            reactor,
            actions,
            core,
        })
    }
}

impl Drop for VulkanDevice {
    fn drop(&mut self) {
        // The completion threads hold the core; stop and join them first. What is still in
        // flight afterwards is completed by the reactor's shutdown (it waits idle and processes).
        self.core.stop_completion();
        for handle in self.completers.drain(..) {
            let _ = handle.join();
        }
    }
}

impl DeviceBackend for VulkanDevice {
    /// A WGSL compute shader ([`crate::gather`]), so strided copies stay on the device.
    fn gather_kernel(&self) -> Option<halcyon::ExecutableSpec> {
        Some(halcyon::ExecutableSpec::bytes(
            "wgsl",
            crate::gather::GATHER_WGSL.as_bytes(),
        ))
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// Blocks in `vkWaitSemaphores` on the queue's timeline, for up to `budget`, until the
    /// submission signalling `done` completed, then completes what finished on this thread
    /// (under the queue's processing lock, in order, as its completion thread would): the
    /// awaiting task is woken by the driver, not by a thread the driver woke. `false` for a
    /// submission not handed to Vulkan yet (its waits are pending) or already completed.
    fn wait_native(&self, queue: u32, done: &Semaphore, budget: Duration) -> bool {
        let Some(q) = self.core.queues.get(queue as usize) else {
            return false;
        };
        let target = {
            let state = lock(&q.state);
            // The completion semaphore is the first entry of the signal fence.
            let mine = |f: &&InFlight| {
                f.signal
                    .iter()
                    .next()
                    .is_some_and(|(s, _)| s.id() == done.id())
            };
            state.in_flight.iter().find(mine).map(|f| f.value)
        };
        let Some(target) = target else {
            return false;
        };
        let timeout = u64::try_from(budget.as_nanos()).unwrap_or(u64::MAX);
        self.core
            .context
            .stats
            .awaiting_waits
            .fetch_add(1, Ordering::Relaxed);
        if let Ok(true) = self.core.wait_one(q.timeline, target, timeout) {
            self.core.process_queue(q, None);
        }
        true
    }

    fn query(&self, key: &str) -> Option<i64> {
        let context = &self.core.context;
        let stats = &context.stats;
        Some(match key {
            keys::names::CONCURRENCY => 1,
            keys::names::BINDING_ALIGNMENT => {
                context.limits.min_storage_buffer_offset_alignment as i64
            }
            keys::names::MEMORY_BYTES => physical_query(context, "vulkan.device_local_bytes")?,
            keys::names::MAX_BINDING_RANGE => i64::from(context.limits.max_storage_buffer_range),
            keys::names::MAX_WORKGROUP_COUNT_X => {
                i64::from(context.limits.max_compute_work_group_count[0])
            }
            keys::names::MAX_WORKGROUP_COUNT_Y => {
                i64::from(context.limits.max_compute_work_group_count[1])
            }
            keys::names::MAX_WORKGROUP_COUNT_Z => {
                i64::from(context.limits.max_compute_work_group_count[2])
            }
            "vulkan.native_waits" => context.stat(&stats.native_waits),
            "vulkan.host_waits" => context.stat(&stats.host_waits),
            "vulkan.reactor_parks" => context.stat(&stats.parks),
            "vulkan.completion_wakes" => context.stat(&stats.completion_wakes),
            "vulkan.awaiting_waits" => context.stat(&stats.awaiting_waits),
            "vulkan.watch_interrupts" => context.stat(&stats.watch_interrupts),
            "vulkan.completed" => context.stat(&stats.completed),
            "vulkan.submits" => context.stat(&stats.submits),
            "vulkan.recording_reuses" => context.stat(&stats.recording_reuses),
            "vulkan.reactor_wakeups" | keys::names::REACTOR_WAKEUPS => {
                self.reactor.handle().stats().wakeups as i64
            }
            keys::names::PENDING_ACTIONS => {
                self.actions.iter().map(ActionQueue::pending).sum::<usize>() as i64
            }
            "vulkan.reactor_polls" => self.reactor.handle().stats().polls as i64,
            "vulkan.non_coherent_host_memory_types" => (0..context.memory.memory_type_count)
                .filter(|&i| {
                    let f = context.memory.memory_types[i as usize].property_flags;
                    f.contains(vk::MemoryPropertyFlags::HOST_VISIBLE)
                        && !f.contains(vk::MemoryPropertyFlags::HOST_COHERENT)
                })
                .count() as i64,
            "vulkan.non_coherent_atom_size" => context.limits.non_coherent_atom_size as i64,
            "vulkan.memory_blocks" => context.allocator.blocks(),
            "vulkan.memory_block_bytes" => context.allocator.block_bytes(),
            "vulkan.dedicated_allocations" => context.allocator.dedicated_allocations(),
            "vulkan.suballocations" => context.allocator.suballocations(),
            _ if key.starts_with("vulkan.timestamp_") => {
                return crate::timestamps::query(context, key)
                    .or_else(|| physical_query(context, key))
            }
            _ => return physical_query(context, key),
        })
    }

    fn queue_count(&self) -> u32 {
        self.actions.len() as u32
    }

    fn queue_capabilities(&self, queue: u32) -> QueueCapabilities {
        self.core
            .queues
            .get(queue as usize)
            .map_or(QueueCapabilities::all(), |q| q.capabilities)
    }

    fn allocate(&self, size: u64, params: &BufferParams) -> Result<Arc<dyn BufferMemory>> {
        Ok(Arc::new(VulkanMemory::new(
            &self.core.context,
            size,
            vk_properties(params.memory),
        )?))
    }

    fn executable_formats(&self) -> Vec<String> {
        vec![FORMAT_SPIRV.into(), FORMAT_WGSL.into()]
    }

    fn load_executable(&self, spec: &ExecutableSpec) -> Result<Box<dyn ExecutableBackend>> {
        Ok(Box::new(VulkanExecutable::load(&self.core.context, spec)?))
    }

    fn create_semaphore(&self, initial_value: u64) -> Result<Semaphore> {
        let native = VulkanSemaphore::new(&self.core.context, initial_value)?;
        Ok(Semaphore::with_native(initial_value, Box::new(native)))
    }

    fn submit(&self, queue: u32, wait: Fence, signal: Fence, work: Work) {
        let Some(actions) = self.actions.get(queue as usize) else {
            signal.fail(Error::new(
                StatusCode::OutOfRange,
                format!(
                    "{} has {} queues; queue {queue} does not exist",
                    self.info.id,
                    self.actions.len()
                ),
            ));
            return;
        };
        if let Work::HostCall(call) = work {
            self.core
                .context
                .stats
                .host_waits
                .fetch_add(!wait.is_empty() as u64, Ordering::Relaxed);
            return actions.submit(wait, signal, move |signal: &Fence| {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))
                    .unwrap_or_else(|_| {
                        Err(Error::new(
                            StatusCode::Internal,
                            "a queue host_call panicked",
                        ))
                    });
                result.and_then(|()| signal.signal())
            });
        }
        // Waits this device can honour in vkQueueSubmit: values of its own timelines that work
        // already submitted will signal. Everything else waits on the host.
        let mut host = Fence::new();
        let mut native = Few::new();
        for (semaphore, value) in wait.iter() {
            match semaphore.query() {
                Ok(current) if current >= value => continue,
                Ok(_) => {}
                Err(_) => {
                    host.insert(semaphore, value);
                    continue;
                }
            }
            let covered = self
                .core
                .own_native(semaphore)
                .is_some_and(|n| n.device_max.load(Ordering::Acquire) >= value);
            if covered {
                native.push((semaphore.clone(), value));
            } else {
                host.insert(semaphore, value);
            }
        }
        if !host.is_empty() {
            self.core
                .context
                .stats
                .host_waits
                .fetch_add(1, Ordering::Relaxed);
        }
        let core = self.core.clone();
        let index = queue as usize;
        let order = failure_order(&wait, &signal);
        actions.submit_parked(host, order, signal, move |signal: &Fence| {
            core.execute(index, native, signal.clone(), work)
        });
    }
}

/// Facts about the physical device (`vkGetPhysicalDeviceProperties`, memory properties).
fn physical_query(context: &Context, key: &str) -> Option<i64> {
    let p = &context.properties;
    let l = &context.limits;
    let xyz = |v: [u32; 3], axis: &str| match axis {
        "x" => Some(v[0] as i64),
        "y" => Some(v[1] as i64),
        "z" => Some(v[2] as i64),
        _ => None,
    };
    if let Some(axis) = key.strip_prefix("vulkan.max_compute_workgroup_count.") {
        return xyz(l.max_compute_work_group_count, axis);
    }
    if let Some(axis) = key.strip_prefix("vulkan.max_compute_workgroup_size.") {
        return xyz(l.max_compute_work_group_size, axis);
    }
    let heaps = &context.memory.memory_heaps[..context.memory.memory_heap_count as usize];
    Some(match key {
        "vulkan.api_version" => p.api_version as i64,
        "vulkan.driver_version" => p.driver_version as i64,
        "vulkan.vendor_id" => p.vendor_id as i64,
        "vulkan.device_id" => p.device_id as i64,
        "vulkan.device_type" => p.device_type.as_raw() as i64,
        "vulkan.max_compute_workgroup_invocations" => l.max_compute_work_group_invocations as i64,
        "vulkan.max_compute_shared_memory_size" => l.max_compute_shared_memory_size as i64,
        "vulkan.max_push_constants_size" => l.max_push_constants_size as i64,
        "vulkan.max_storage_buffer_range" => l.max_storage_buffer_range as i64,
        "vulkan.max_memory_allocation_count" => l.max_memory_allocation_count as i64,
        "vulkan.device_local_bytes" => heaps
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size as i64)
            .sum(),
        "vulkan.timestamp_period_ps" => (p.limits.timestamp_period * 1000.0) as i64,
        _ => return None,
    })
}
