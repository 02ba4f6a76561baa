//! [`StreamDevice`]: the device SPI implemented once over any [`StreamApi`].
//!
//! | core                                   | stream device                                          |
//! |----------------------------------------|--------------------------------------------------------|
//! | queue `i`                              | stream `i` (plus callback stream `i` with host callbacks) |
//! | semaphore                              | core semaphore backed by an [`EventTimeline`] of `(value, event)` timepoints |
//! | wait on this device's semaphore, signal already issued | `stream_wait_event` on the signal's event: no host round trip |
//! | wait on this device's semaphore, signal not yet issued | parked in the [`ActionQueue`] until the signal is issued, then as above |
//! | wait on a host / other device's semaphore | parked in the [`ActionQueue`] until reached         |
//! | signal                                 | event recorded after the work; fence settled when it completes |
//! | completion                             | host function posting to the reactor, or a completion thread per queue |
//! | device fault                           | completion threads (with host callbacks: the probe) fail every fence in flight with the fault |
//! | copy from another device's buffer (`Work::PeerCopy`) | `copy_peer_async` after `enable_peer_access` once per pair (see `peer.rs`); `peer_reach` is `can_access_peer`, asked once |
//! | fill / update / copy                   | `memset_async` / `copy_host_to_device_async` (from the submission's pinned lease, up to 1 MiB of updates) / `copy_device_to_device_async` |
//! | dispatch                               | `launch_kernel`: bindings as device pointers, then `u32` constants |
//! | dispatch of a kernel with a status word | `launch_kernel` with its word (`KernelParams::status`) in the submission's lease of pinned host memory (zeroed by the host before, read by it on completion); signals made from the host after the check |
//! | barrier                                | nothing: a stream runs in order                        |
//! | a reusable command list submitted again (any binding table) | captured into a graph once, then `launch_graph`, its moved kernels updated in place (`update_graph_kernel`) where the API has graphs |
//! | queue read                             | `copy_device_to_host_async` into the submission's pinned lease (up to 1 MiB; larger reads into host memory of their own), copied out to the reader on completion |
//! | pinned host memory                     | `allocate(MemoryPlacement::Pinned)`, pooled; one lease per submission that needs one, released when it is settled (see `pinned.rs`) |
//! | host call                              | run by the [`ActionQueue`] once its waits are reached  |
//! | buffer memory                          | one `allocate` per buffer; host-visible where the API maps it; freed on the device's reclaimer thread when the last reference goes while a submission is settled or while work is in flight (a free may wait for the device), at once otherwise |
//! | queue `alloca` / release of its memory | `allocate_async` / `free_async` on the queue's stream (stream-ordered pools), else the core's pool |
//! | executable                             | `load_module` + `get_function` per entry point          |
//! | profiled operation's device start / end | timing events (no `DISABLE_TIMING`, a pool of their own) recorded before and after its work, placed on the host clock through a calibrated reference when it completes (see `timing.rs`, `calibration.rs`); where the API has [`Capabilities::EVENT_TIMING`] |
//!
//! Resource lifetime: a submission's in-flight record ([`crate`]'s timepoint) holds its
//! command list (and so its buffers and executables), the buffer memory it addresses and its
//! staging until its signal fence is settled, reached or failed.
//!
//! Counters are answered by [`halcyon::Device::query`] under the [`keys`].
//!
//! The device's own threads and locks (completion threads, the reactor's probe parker, the
//! in-flight map) use `std` primitives directly: they need `Condvar`, `Weak` and timeouts, which
//! the loom models do not cover. The timeline and event-pool logic they drive uses
//! `crate::sync` and is model-checked (`testing/loom/tests/stream.rs`).

mod calibration;
mod completion;
pub(crate) mod core;
mod executable;
mod flag_words;
mod graphs;
mod issue;
pub mod keys;
mod memory;
mod peer;
pub(crate) mod pinned;
mod reclaim;
mod settle;
pub(crate) mod timing;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::api::{Capabilities, EventFlags, EventHandle, StreamApi};
use crate::event_pool::{EventFactory, EventPool};
use crate::timeline::{EventTimeline, StreamSemaphore};
use halcyon::backend::reactor::Reactor;
use halcyon::backend::{failure_order, ActionQueue};
use halcyon::backend::{BufferMemory, DeviceBackend, ExecutableBackend, Work};
use halcyon::device::{keys as device_keys, DeviceFeatures, DeviceInfo};
use halcyon::topology::Reach;
use halcyon::ExecutableSpec;
use halcyon::Fence;
use halcyon::Semaphore;
use halcyon::{BufferParams, MemoryType};
use halcyon::{Error, Result, StatusCode};

use self::calibration::Calibrator;
use self::completion::{completion_thread, Fifo, ProbeParker};
use self::core::{Core, QueueStreams, Stats, Via};
use self::executable::StreamExecutable;
use self::memory::StreamMemory;
use self::reclaim::Reclaimed;
use self::timing::Timing;

/// How a [`StreamDevice`] observes completions (see the completion module docs in the source).
///
/// The default is [`CompletionStrategy::CompletionThread`], chosen by measurement: it has one
/// thread hand-off fewer on the completion path (event → completion thread → awaiting task,
/// against event → callback stream → reactor → awaiting task). Through the host stream API the
/// empty-kernel round trip measured 6.8 µs with completion threads against 9.8 µs with host
/// callbacks (raw: 4.1 µs, pinned to one CPU, interleaved runs); IREE measured vendor host
/// callbacks at about 6 µs against about 2 µs for an event record on real GPUs, and moved to
/// threads blocking on events for the same reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompletionStrategy {
    /// A host function per submission on a dedicated callback stream posts to the reactor
    /// (IREE's original HIP design). Needs [`Capabilities::HOST_FUNC`].
    HostCallback,
    /// A thread per queue blocks on each submission's blocking-sync event in turn.
    #[default]
    CompletionThread,
    /// After each submission its stream writes a value into a word of pinned host memory
    /// (`cuStreamWriteValue32`, `hipStreamWriteValue32`), and one scanner thread per device reads
    /// the words with plain loads ([`crate::flags`]): no driver call and no OS wake-up between
    /// the device finishing and the host seeing it, while the scanner is scanning. It scans
    /// continuously for [`StreamDeviceOptions::completion_spin`] after its last progress, then
    /// every [`StreamDeviceOptions::completion_poll`] while work is pending, and sleeps when
    /// none is; only a submission that finds the device idle wakes it. The fault probe covers
    /// a device that faulted and will never write. Needs [`Capabilities::WRITE_VALUE`] and
    /// pinned memory.
    FlagWrite,
}

/// How to create a [`StreamDevice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamDeviceOptions {
    /// The device index in its URI (`driver://index`).
    pub index: u32,
    /// Number of queues, each with its own stream (at least 1).
    pub queue_count: u32,
    /// How completions are observed.
    pub completion: CompletionStrategy,
    /// With [`CompletionStrategy::HostCallback`]: how often, at most, the fault probe queries
    /// the events in flight while the device is busy (completion threads need no probe).
    pub probe_interval: Duration,
    /// With [`CompletionStrategy::CompletionThread`]: how long a completion thread polls (for
    /// the next submission, then for its event) before it sleeps in the OS. Zero, the default,
    /// never polls: an idle device uses no CPU. A budget of a few tens of microseconds takes
    /// an OS wake-up off the completion path of short work, at the cost of up to that much CPU
    /// time per submission on one thread per queue; vendor runtimes make the same trade when
    /// their synchronisation spins (CUDA's default `CU_CTX_SCHED_AUTO`). Ignored with host
    /// callbacks.
    pub completion_spin: Duration,
    /// With [`CompletionStrategy::FlagWrite`]: how often the scanner reads the words while
    /// work is pending and its spin budget ([`StreamDeviceOptions::completion_spin`]) has run
    /// out since its last progress (default 50 µs, about the OS's shortest sleep with the
    /// default timer slack). A completion is seen at most this late, plus the sleep's overrun.
    pub completion_poll: Duration,
    /// Where the API has [`Capabilities::EVENT_TIMING`]: how old the reference that places
    /// the device's timestamps on the host clock may get before a profiled operation asks the
    /// device's clock thread for a new one (default 1 s; see `calibration.rs`). Shorter
    /// bounds the drift between the device's and the host's clocks more tightly, for one
    /// record-and-poll round trip per interval of profiling. A reference older than four
    /// intervals (at least 4 s) is not used.
    pub timestamp_recalibration: Duration,
}

impl StreamDeviceOptions {
    /// Sets [`StreamDeviceOptions::index`].
    pub fn with_index(mut self, index: u32) -> Self {
        self.index = index;
        self
    }

    /// Sets [`StreamDeviceOptions::queue_count`].
    pub fn with_queue_count(mut self, queue_count: u32) -> Self {
        self.queue_count = queue_count;
        self
    }

    /// Sets [`StreamDeviceOptions::completion`].
    pub fn with_completion(mut self, completion: CompletionStrategy) -> Self {
        self.completion = completion;
        self
    }

    /// Sets [`StreamDeviceOptions::probe_interval`].
    pub fn with_probe_interval(mut self, probe_interval: Duration) -> Self {
        self.probe_interval = probe_interval;
        self
    }

    /// Sets [`StreamDeviceOptions::completion_spin`].
    pub fn with_completion_spin(mut self, completion_spin: Duration) -> Self {
        self.completion_spin = completion_spin;
        self
    }

    /// Sets [`StreamDeviceOptions::completion_poll`].
    pub fn with_completion_poll(mut self, completion_poll: Duration) -> Self {
        self.completion_poll = completion_poll;
        self
    }

    /// Sets [`StreamDeviceOptions::timestamp_recalibration`].
    pub fn with_timestamp_recalibration(mut self, interval: Duration) -> Self {
        self.timestamp_recalibration = interval;
        self
    }
}

impl Default for StreamDeviceOptions {
    fn default() -> Self {
        StreamDeviceOptions {
            index: 0,
            queue_count: 1,
            completion: CompletionStrategy::default(),
            probe_interval: Duration::from_millis(10),
            completion_spin: Duration::ZERO,
            completion_poll: Duration::from_micros(50),
            timestamp_recalibration: Duration::from_secs(1),
        }
    }
}

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// The pool's events: created with fixed flags, destroyed through the API.
struct ApiEvents<A: StreamApi> {
    api: Arc<A>,
    flags: EventFlags,
}

impl<A: StreamApi> EventFactory for ApiEvents<A> {
    fn create(&self) -> Result<EventHandle> {
        self.api.create_event(self.flags)
    }

    fn destroy(&self, event: EventHandle) {
        let _ = self.api.destroy_event(event);
    }
}

/// A device over a [`StreamApi`] (see the [module docs](self)). Wrap it with
/// [`halcyon::Device::from_backend`], or use [`create_device`].
pub struct StreamDevice<A: StreamApi> {
    // Dropped first (in `Drop`): pending actions fail, the probe stops.
    reactor: Option<Reactor>,
    actions: Vec<ActionQueue>,
    completers: Vec<std::thread::JoinHandle<()>>,
    /// Makes the frees and module unloads deferred while submissions are settled or in flight
    /// (see `reclaim.rs`).
    reclaimer: Option<std::thread::JoinHandle<()>>,
    /// Recalibrates the device's clock on request (see `calibration.rs`), where the API has
    /// event timing.
    clock: Option<std::thread::JoinHandle<()>>,
    core: Arc<Core<A>>,
    info: DeviceInfo,
}

/// Creates a [`halcyon::Device`] over `api` with `options`.
pub fn create_device<A: StreamApi>(
    api: A,
    options: StreamDeviceOptions,
) -> Result<halcyon::Device> {
    Ok(halcyon::Device::from_backend(Arc::new(StreamDevice::new(
        api, options,
    )?)))
}

impl<A: StreamApi> StreamDevice<A> {
    /// Creates a device: one stream per queue (and one callback stream per queue for
    /// [`CompletionStrategy::HostCallback`]), the reactor, and the completion threads.
    ///
    /// `Unimplemented` if host callbacks are asked for but the API has no host functions (use
    /// [`CompletionStrategy::CompletionThread`]); `InvalidArgument` for a zero probe interval.
    pub fn new(api: A, options: StreamDeviceOptions) -> Result<Self> {
        let api = Arc::new(api);
        let api_info = api.info();
        let id = format!("{}://{}", api_info.driver, options.index);
        let strategy = options.completion;
        if strategy == CompletionStrategy::HostCallback
            && !api_info.capabilities.contains(Capabilities::HOST_FUNC)
        {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!(
                    "{id}: the {} stream API has no host functions, so completions cannot come \
                     from host callbacks; use CompletionStrategy::CompletionThread",
                    api_info.driver
                ),
            ));
        }
        if strategy == CompletionStrategy::FlagWrite
            && !api_info.capabilities.contains(Capabilities::WRITE_VALUE)
        {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!(
                    "{id}: the {} stream API cannot write values from a stream, so completions \
                     cannot come from device-written flags; use \
                     CompletionStrategy::CompletionThread",
                    api_info.driver
                ),
            ));
        }
        if options.probe_interval.is_zero() {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                "the stream device's probe interval must be above zero (10 ms is a good value)",
            ));
        }
        let mut queues = Vec::new();
        let created = (0..options.queue_count.max(1)).try_for_each(|_| -> Result<()> {
            let stream = api.create_stream()?;
            let callback = match strategy {
                CompletionStrategy::HostCallback => match api.create_stream() {
                    Ok(callback) => Some(callback),
                    Err(error) => {
                        let _ = api.destroy_stream(stream);
                        return Err(error);
                    }
                },
                CompletionStrategy::CompletionThread | CompletionStrategy::FlagWrite => None,
            };
            queues.push(QueueStreams {
                stream,
                callback,
                order: Default::default(),
                graphs: Default::default(),
                fifo: (strategy == CompletionStrategy::CompletionThread)
                    .then(|| Fifo::new(options.completion_spin)),
            });
            Ok(())
        });
        let mut flags = EventFlags::DISABLE_TIMING;
        if strategy == CompletionStrategy::CompletionThread {
            flags |= EventFlags::BLOCKING_SYNC;
        }
        let events = EventPool::new(Box::new(ApiEvents {
            api: api.clone(),
            flags,
        }));
        // Timing events (for profiled operations and calibrations) are created with timing,
        // and without blocking sync: nothing blocks on them, a calibration polls.
        let timing = match (
            &created,
            api_info.capabilities.contains(Capabilities::EVENT_TIMING),
        ) {
            (Ok(()), true) => api.create_stream().ok().map(|stream| {
                let events = EventPool::new(Box::new(ApiEvents {
                    api: api.clone(),
                    flags: EventFlags::empty(),
                }));
                let calibrator = Calibrator::new(options.timestamp_recalibration);
                Timing::new(queues.len(), events, stream, calibrator)
            }),
            _ => None,
        };
        let flags = match (&created, strategy) {
            (Ok(()), CompletionStrategy::FlagWrite) => Some(flag_words::DeviceFlags::new(
                &*api,
                queues.len(),
                options.completion_spin,
                options.completion_poll,
            )),
            _ => None,
        };
        let (flags, flags_failed) = match flags {
            Some(Ok(flags)) => (Some(flags), None),
            Some(Err(error)) => (None, Some(error)),
            None => (None, None),
        };
        // From here on, dropping the core destroys the streams created so far.
        let core = Arc::new(Core::new(
            api,
            NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
            id.clone(),
            queues,
            events,
            timing,
            strategy,
            flags,
            options.probe_interval,
        ));
        created?;
        if let Some(error) = flags_failed {
            return Err(error.context(format!("{id}: cannot set up flag-write completion")));
        }
        let reactor = Reactor::with_parker(
            format!("{}{}", api_info.driver, options.index),
            Box::new(ProbeParker::new(core.clone())),
        )?;
        let _ = core.reactor.set(reactor.handle());
        let mut device = StreamDevice {
            actions: core
                .queues
                .iter()
                .map(|_| ActionQueue::new(reactor.handle()))
                .collect(),
            reactor: Some(reactor),
            completers: Vec::new(),
            reclaimer: None,
            clock: None,
            core: core.clone(),
            info: DeviceInfo::new(
                id.clone(),
                format!(
                    "{} ({} queues, {})",
                    api_info.name,
                    core.queues.len(),
                    match strategy {
                        CompletionStrategy::HostCallback => "host-callback completion",
                        CompletionStrategy::CompletionThread => "completion threads",
                        CompletionStrategy::FlagWrite => "flag-write completion",
                    }
                ),
                api_info.driver.clone(),
            )
            .with_features(match core.timing {
                Some(_) => DeviceFeatures::PROFILING,
                None => DeviceFeatures::empty(),
            }),
        };
        // Named `halcyon-{driver}{index}-{suffix}`; an error names `what` the thread does.
        let spawn = |suffix: String, what: &str, run: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(format!(
                    "halcyon-{}{}-{suffix}",
                    api_info.driver, options.index
                ))
                .spawn(run)
                .map_err(|e| {
                    Error::with_source(
                        StatusCode::ResourceExhausted,
                        format!("{id}: cannot spawn the thread that {what}"),
                        e,
                    )
                })
        };
        let (api, reclaim) = (core.api.clone(), core.reclaim.clone());
        device.reclaimer = Some(spawn(
            "free".into(),
            "frees buffer memory",
            Box::new(move || {
                api.adopt_thread();
                reclaim.run(|item| {
                    let _ = match item {
                        Reclaimed::Memory(ptr) => api.free(ptr),
                        Reclaimed::Module(module) => api.unload_module(module),
                    };
                })
            }),
        )?);
        if let Some(timing) = &core.timing {
            // The first reference, here (device creation is no hot path), so the first
            // profiled operations find one. Failing, the first profiled one asks again.
            let _ = timing
                .calibrator
                .calibrate(&*core.api, &timing.events, timing.stream);
            let thread_core = core.clone();
            device.clock = Some(spawn(
                "clock".into(),
                "calibrates its clock",
                Box::new(move || {
                    thread_core.api.adopt_thread();
                    if let Some(timing) = &thread_core.timing {
                        let api = &*thread_core.api;
                        timing.calibrator.run(api, &timing.events, timing.stream);
                    }
                }),
            )?);
        }
        // On an error below, dropping `device` stops and joins the threads so far.
        if strategy == CompletionStrategy::CompletionThread {
            for index in 0..core.queues.len() {
                let thread_core = core.clone();
                device.completers.push(spawn(
                    format!("q{index}"),
                    &format!("completes queue {index}'s submissions"),
                    Box::new(move || completion_thread(thread_core, index)),
                )?);
            }
        }
        if let Some(flags) = &core.flags {
            let thread_core = core.clone();
            let (spin, poll) = (flags.spin, flags.poll);
            device.completers.push(spawn(
                "flags".into(),
                "scans the completion flags",
                Box::new(move || {
                    thread_core.api.adopt_thread();
                    if let Some(flags) = &thread_core.flags {
                        flags
                            .flags
                            .run(spin, poll, |id| thread_core.complete(id, None, Via::Flag));
                    }
                }),
            )?);
        }
        Ok(device)
    }

    /// The stream API.
    pub fn api(&self) -> &Arc<A> {
        &self.core.api
    }
}

impl<A: StreamApi> Drop for StreamDevice<A> {
    fn drop(&mut self) {
        // Stop the reactor first: pending actions fail (Aborted), and nothing new is issued.
        drop(self.reactor.take());
        // The clock thread ends once it made the calibration under way, if any.
        if let Some(timing) = &self.core.timing {
            timing.calibrator.stop();
        }
        if let Some(thread) = self.clock.take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
        // Let the streams finish what was issued, stop the completion threads, and settle
        // whatever is left (callbacks posted after the reactor stopped were dropped unrun).
        self.core.drain();
        for thread in self.completers.drain(..) {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
        self.core.settle_leftovers();
        // The frees deferred so far (the leftovers' too) are made; later ones are made at once.
        self.core.reclaim.close();
        if let Some(thread) = self.reclaimer.take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

fn run_host_call(call: Box<dyn FnOnce() -> Result<()> + Send>, signal: &Fence) -> Result<()> {
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(call)).unwrap_or_else(|_| {
            Err(Error::new(
                StatusCode::Internal,
                "a queue host_call panicked",
            ))
        });
    result.and_then(|()| signal.signal())
}

fn reached(semaphore: &Semaphore, value: u64) -> bool {
    matches!(semaphore.query(), Ok(current) if current >= value)
}

impl<A: StreamApi> DeviceBackend for StreamDevice<A> {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn query(&self, key: &str) -> Option<i64> {
        let core = &self.core;
        let stats = &core.stats;
        let stat = |c: &AtomicU64| c.load(Ordering::Relaxed) as i64;
        let reactor = || self.reactor.as_ref().map(|r| r.handle().stats());
        let events = || core.events.stats();
        // A device without event timing answers its counters with 0.
        let timing = |counter: fn(&timing::TimingStats) -> &AtomicU64| {
            core.timing.as_ref().map_or(0, |t| stat(counter(&t.stats)))
        };
        Some(match key {
            device_keys::names::CONCURRENCY => i64::from(core.api.info().concurrency),
            device_keys::names::BINDING_ALIGNMENT => core.api.info().binding_alignment as i64,
            device_keys::names::MEMORY_BYTES => {
                i64::try_from(core.api.info().memory_bytes?).unwrap_or(i64::MAX)
            }
            device_keys::names::MAX_WORKGROUP_COUNT_X => i64::from(core.api.max_grid()[0]),
            device_keys::names::MAX_WORKGROUP_COUNT_Y => i64::from(core.api.max_grid()[1]),
            device_keys::names::MAX_WORKGROUP_COUNT_Z => i64::from(core.api.max_grid()[2]),
            keys::names::NATIVE_WAITS => stat(&stats.native_waits),
            keys::names::HOST_WAITS => stat(&stats.host_waits),
            keys::names::DEFERRED_WAITS => stat(&stats.deferred_waits),
            keys::names::SUBMISSIONS => stat(&stats.submissions),
            keys::names::COMPLETED => stat(&stats.completed),
            keys::names::FAILED => stat(&stats.failed),
            keys::names::CALLBACK_COMPLETIONS => stat(&stats.callback_completions),
            keys::names::THREAD_COMPLETIONS => stat(&stats.thread_completions),
            keys::names::FLAG_COMPLETIONS => stat(&stats.flag_completions),
            keys::names::PROBE_COMPLETIONS => stat(&stats.probe_completions),
            keys::names::PROBE_FAILURES => stat(&stats.probe_failures),
            keys::names::PROBES => stat(&stats.probes),
            keys::names::SETTLES_DEFERRED => stat(&stats.settles_deferred),
            keys::names::GRAPH_CAPTURES => stat(&stats.graph_captures),
            keys::names::GRAPH_CAPTURE_FAILURES => stat(&stats.graph_capture_failures),
            keys::names::GRAPH_KERNEL_UPDATES => stat(&stats.graph_kernel_updates),
            keys::names::GRAPH_BYPASSES => stat(&stats.graph_bypasses),
            keys::names::PEER_COPIES => stat(&stats.peer_copies),
            keys::names::QUEUED_ALLOCATIONS => stat(&stats.queued_allocations),
            keys::names::STATUS_CHECKS => stat(&stats.status_checks),
            keys::names::PINNED_LEASES => stat(&stats.pinned_leases),
            keys::names::PINNED_IDLE => core.pinned.idle() as i64,
            keys::names::PINNED_ALLOCATED => core.pinned.allocated() as i64,
            keys::names::DEFERRED_FREES => core.reclaim.deferred() as i64,
            keys::names::GRAPH_LAUNCHES | device_keys::names::GRAPH_REPLAYS => {
                stat(&stats.graph_launches)
            }
            keys::names::IN_FLIGHT => core.in_flight() as i64,
            keys::names::EVENTS_CREATED => events().created as i64,
            keys::names::EVENTS_ACQUIRED => events().acquired as i64,
            keys::names::EVENTS_FREE => events().free as i64,
            keys::names::TIMEPOINTS_CREATED => core.timepoints.stats().0 as i64,
            keys::names::TIMEPOINTS_ACQUIRED => core.timepoints.stats().1 as i64,
            keys::names::REACTOR_WAKEUPS | device_keys::names::REACTOR_WAKEUPS => {
                reactor()?.wakeups as i64
            }
            device_keys::names::PENDING_ACTIONS => {
                self.actions.iter().map(ActionQueue::pending).sum::<usize>() as i64
            }
            keys::names::REACTOR_POLLS => reactor()?.polls as i64,
            keys::names::TIMING_EVENTS => timing(|s| &s.timing_events),
            keys::names::TIMING_EVENTS_CREATED => {
                core.timing.as_ref().map_or(0, |t| t.events.stats().created) as i64
            }
            keys::names::DEVICE_TIMES => timing(|s| &s.device_times),
            keys::names::DEVICE_TIMES_SKIPPED => timing(|s| &s.skipped),
            keys::names::DEVICE_TIME_CORRECTIONS => timing(|s| &s.corrections),
            keys::names::DEVICE_TIME_CORRECTION_MAX_NS => timing(|s| &s.correction_max_ns),
            keys::names::TIMESTAMP_CALIBRATIONS => {
                core.timing
                    .as_ref()
                    .map_or(0, |t| t.calibrator.calibrations()) as i64
            }
            keys::names::TIMESTAMP_CALIBRATION_ERROR_NS => {
                i64::try_from(core.timing.as_ref()?.calibrator.error_ns()?).unwrap_or(i64::MAX)
            }
            _ => return None,
        })
    }

    fn queue_count(&self) -> u32 {
        self.actions.len() as u32
    }

    fn allocate(&self, size: u64, params: &BufferParams) -> Result<Arc<dyn BufferMemory>> {
        let core = &self.core;
        Ok(Arc::new(StreamMemory::allocate(core, size, params)?))
    }

    fn allocate_queued(
        &self,
        queue: u32,
        size: u64,
        params: &BufferParams,
    ) -> Option<Result<Arc<dyn BufferMemory>>> {
        let core = &self.core;
        let queue = core.queues.get(queue as usize)?;
        if !core.stream_ordered || params.memory.contains(MemoryType::HOST_VISIBLE) {
            return None;
        }
        Stats::bump(&core.stats.queued_allocations, 1);
        Some(
            StreamMemory::allocate_async(core, queue, size)
                .map(|m| Arc::new(m) as Arc<dyn BufferMemory>),
        )
    }

    fn executable_formats(&self) -> Vec<String> {
        self.core.api.module_formats()
    }

    fn load_executable(&self, spec: &ExecutableSpec) -> Result<Box<dyn ExecutableBackend>> {
        Ok(Box::new(StreamExecutable::load(&self.core, spec)?))
    }

    fn create_channel(
        &self,
        provider: &dyn halcyon::ChannelProvider,
        params: &halcyon::ChannelParams,
    ) -> Result<Box<dyn halcyon::backend::ChannelBackend>> {
        self.core.api.create_channel(provider, params)
    }

    fn gather_kernel(&self) -> Option<ExecutableSpec> {
        self.core.api.gather_kernel()
    }

    fn create_semaphore(&self, initial_value: u64) -> Result<Semaphore> {
        Ok(StreamSemaphore::create(self.core.id, initial_value))
    }

    fn peer_reach(&self, source: &dyn DeviceBackend) -> Reach {
        let source: &dyn std::any::Any = source;
        match source.downcast_ref::<StreamDevice<A>>() {
            Some(peer) if peer.core.id == self.core.id => Reach::Same,
            Some(peer) if self.core.reaches(peer.core.id, &peer.core.api) => Reach::Direct,
            _ => Reach::Staged,
        }
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
        let core = &self.core;
        let stats = &core.stats;
        Stats::bump(&stats.submissions, 1);
        if let Work::HostCall(call) = work {
            let unreached = wait.iter().filter(|(s, v)| !reached(s, *v)).count();
            Stats::bump(&stats.host_waits, unreached as u64);
            return actions.submit(wait, signal, move |signal: &Fence| {
                run_host_call(call, signal)
            });
        }
        // Park until every wait is reachable on the device: this device's semaphores once their
        // signal is scheduled on a stream, anything else once reached.
        let mut parked = Fence::new();
        for (semaphore, value) in wait.iter() {
            match core.own_timeline(semaphore) {
                Some(timeline) => {
                    let scheduled: &Semaphore = EventTimeline::scheduled(timeline);
                    if !reached(scheduled, value) {
                        Stats::bump(&stats.deferred_waits, 1);
                    }
                    parked.insert(scheduled, value);
                }
                None => {
                    if !reached(semaphore, value) {
                        Stats::bump(&stats.host_waits, 1);
                    }
                    parked.insert(semaphore, value);
                }
            }
        }
        let core = core.clone();
        let index = queue as usize;
        let order = failure_order(&wait, &signal);
        actions.submit_parked(parked, order, signal, move |signal: &Fence| {
            core.issue(index, &wait, signal, work)
        });
    }
}
