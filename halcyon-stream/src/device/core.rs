//! The state a stream device shares with its completion paths: its queues' streams, the event
//! and timepoint pools, and the map of submissions in flight.
//!
//! A submission goes in flight when it is issued to a stream ([`super::issue`]) and leaves
//! when it is settled ([`super::settle`]): exactly one path settles it, whoever removes it from
//! the map (its host callback through the reactor, its completion thread, the fault probe, or the
//! device's shutdown).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::api::{Capabilities, StreamApi, StreamHandle};
use crate::device::completion::{Fifo, ParkSignal};
use crate::device::flag_words::DeviceFlags;
use crate::device::graphs::GraphCache;
use crate::device::memory::StreamOrder;
use crate::device::pinned::PinnedMemory;
use crate::device::reclaim::Reclaim;
use crate::device::timing::Timing;
use crate::device::CompletionStrategy;
use crate::event_pool::{Event, EventPool};
use crate::timeline::{EventTimeline, StreamSemaphore};
use crate::timepoint::{ReadInto, Timepoint, TimepointPool};
use halcyon::backend::reactor::ReactorHandle;
use halcyon::backend::BufferMemory;
use halcyon::backend::ReadSink;
use halcyon::backend::Work;
use halcyon::command_buffer::Command;
use halcyon::Semaphore;

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counters behind the `stream.*` query keys.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) submissions: AtomicU64,
    pub(crate) native_waits: AtomicU64,
    pub(crate) host_waits: AtomicU64,
    pub(crate) deferred_waits: AtomicU64,
    pub(crate) completed: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) callback_completions: AtomicU64,
    pub(crate) thread_completions: AtomicU64,
    pub(crate) flag_completions: AtomicU64,
    pub(crate) probe_completions: AtomicU64,
    pub(crate) probe_failures: AtomicU64,
    pub(crate) probes: AtomicU64,
    pub(crate) settles_deferred: AtomicU64,
    pub(crate) graph_captures: AtomicU64,
    pub(crate) graph_capture_failures: AtomicU64,
    pub(crate) graph_launches: AtomicU64,
    pub(crate) graph_kernel_updates: AtomicU64,
    pub(crate) graph_bypasses: AtomicU64,
    pub(crate) queued_allocations: AtomicU64,
    pub(crate) status_checks: AtomicU64,
    pub(crate) pinned_leases: AtomicU64,
    pub(crate) peer_copies: AtomicU64,
}

impl Stats {
    pub(crate) fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }
}

/// Who settles a submission (for the statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    Callback,
    Thread,
    Flag,
    Probe,
    Shutdown,
}

/// One device queue: its stream and how its completions are observed.
pub(crate) struct QueueStreams {
    pub(crate) stream: StreamHandle,
    /// The dedicated stream its completion host functions run on (host-callback strategy), so
    /// a waiting host function never blocks the work stream.
    pub(crate) callback: Option<StreamHandle>,
    /// Its lock is held while one submission is enqueued, so submissions reach the stream whole
    /// (and nothing else lands in a graph being captured); see [`StreamOrder`].
    pub(crate) order: Arc<StreamOrder>,
    /// Submissions for the completion thread (completion-thread strategy).
    pub(crate) fifo: Option<Fifo>,
    /// Graphs of resubmitted command lists.
    pub(crate) graphs: GraphCache,
}

/// The state a stream device shares with its completion paths.
pub(crate) struct Core<A: StreamApi> {
    pub(crate) api: Arc<A>,
    /// Whether resubmitted command lists become graphs (the API has them).
    pub(crate) graphs: bool,
    /// Whether a graph's kernels can be pointed at new buffers in place
    /// ([`StreamApi::update_graph_kernel`]).
    pub(crate) graph_updates: bool,
    /// Whether queue `alloca` uses stream-ordered allocation (the API has it).
    pub(crate) stream_ordered: bool,
    /// Process-unique device id: semaphores, buffers and executables of other devices are
    /// recognised by it.
    pub(crate) id: u64,
    /// The device URI, for messages.
    pub(crate) name: String,
    /// Set once the fault probe found the device faulted (reported through
    /// `halcyon::backend::device_lost` once).
    pub(crate) lost: AtomicBool,
    pub(crate) queues: Vec<QueueStreams>,
    pub(crate) events: EventPool,
    /// Device times of profiled operations, where the API has event timing (see
    /// [`super::timing`]).
    pub(crate) timing: Option<Timing>,
    pub(crate) timepoints: TimepointPool,
    /// Pinned host memory leased to submissions (status words, staged updates, read-backs).
    pub(crate) pinned: PinnedMemory,
    /// Set by [`Core::drain`]: whether every stream synchronised cleanly when the device was
    /// dropped (then no orphaned pinned lease can still be in use).
    pub(crate) streams_finished: AtomicBool,
    /// What submissions whose stream may still run their work held (see
    /// [`Core::keep_for_stream`]): dropped with the device if every stream finished, else
    /// leaked.
    kept: Mutex<Vec<Kept>>,
    /// Frees of buffer memory and unloads of modules dropped while a submission is settled,
    /// for the reclaimer thread.
    pub(crate) reclaim: Arc<Reclaim>,
    in_flight: Mutex<HashMap<u64, Timepoint>>,
    /// `in_flight.len()`, readable without the lock (the probe parker's decision, and the
    /// reclaim queue's: a free while work is in flight goes to the reclaimer).
    pub(crate) in_flight_count: Arc<AtomicUsize>,
    /// Bumped by every registration: a reactor that saw it move keeps probing for a while.
    pub(crate) epoch: AtomicU64,
    next_id: AtomicU64,
    pub(crate) reactor: OnceLock<ReactorHandle>,
    pub(crate) strategy: CompletionStrategy,
    /// With [`CompletionStrategy::FlagWrite`]: the words and the scanner's protocol.
    pub(crate) flags: Option<DeviceFlags>,
    pub(crate) park: Arc<ParkSignal>,
    pub(crate) probe_interval: Duration,
    pub(crate) stats: Arc<Stats>,
    /// What this device learnt about peer devices (see `peer.rs`).
    pub(crate) peers: crate::device::peer::Peers,
}

impl<A: StreamApi> Core<A> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        api: Arc<A>,
        id: u64,
        name: String,
        queues: Vec<QueueStreams>,
        events: EventPool,
        timing: Option<Timing>,
        strategy: CompletionStrategy,
        flags: Option<DeviceFlags>,
        probe_interval: Duration,
    ) -> Self {
        let capabilities = api.info().capabilities;
        let in_flight_count = Arc::new(AtomicUsize::new(0));
        let reclaim = Arc::new(Reclaim::new(in_flight_count.clone()));
        Core {
            api,
            graphs: capabilities.contains(Capabilities::GRAPHS),
            graph_updates: capabilities.contains(Capabilities::GRAPHS | Capabilities::GRAPH_UPDATE),
            stream_ordered: capabilities.contains(Capabilities::STREAM_ORDERED_ALLOC),
            id,
            name,
            lost: AtomicBool::new(false),
            queues,
            events,
            timing,
            timepoints: TimepointPool::default(),
            pinned: PinnedMemory::new(reclaim.clone()),
            streams_finished: AtomicBool::new(false),
            kept: Mutex::default(),
            reclaim,
            in_flight: Mutex::new(HashMap::new()),
            in_flight_count,
            epoch: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
            reactor: OnceLock::new(),
            strategy,
            flags,
            park: Arc::new(ParkSignal::default()),
            probe_interval,
            stats: Arc::default(),
            peers: Default::default(),
        }
    }

    /// The timeline of `semaphore` if this device created it.
    pub(crate) fn own_timeline<'a>(&self, semaphore: &'a Semaphore) -> Option<&'a EventTimeline> {
        StreamSemaphore::timeline_of(semaphore).filter(|t| t.owner() == self.id)
    }

    /// Puts a submission in the in-flight map and tells the probe parker.
    pub(super) fn register(&self, timepoint: Timepoint) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.in_flight).insert(id, timepoint);
        self.in_flight_count.fetch_add(1, Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.park.work_arrived();
        id
    }

    /// Takes submission `id` out of flight (whoever gets it settles it).
    pub(super) fn take(&self, id: u64) -> Option<Timepoint> {
        let taken = lock(&self.in_flight).remove(&id);
        if taken.is_some() {
            self.in_flight_count.fetch_sub(1, Ordering::SeqCst);
        }
        taken
    }

    /// Puts a submission taken out too early (its event is still pending) back in flight.
    pub(super) fn put_back(&self, id: u64, timepoint: Timepoint) {
        lock(&self.in_flight).insert(id, timepoint);
        self.in_flight_count.fetch_add(1, Ordering::SeqCst);
    }

    /// The submissions in flight and their completion events.
    pub(super) fn in_flight_events(&self) -> Vec<(u64, Event)> {
        lock(&self.in_flight)
            .iter()
            .filter_map(|(id, t)| t.event.clone().map(|e| (*id, e)))
            .collect()
    }

    /// The ids of the submissions in flight.
    pub(super) fn in_flight_ids(&self) -> Vec<u64> {
        lock(&self.in_flight).keys().copied().collect()
    }

    /// Keeps what `timepoint` holds that its stream may still use (the host memory a read's
    /// copies write, the work with its update bytes and executables, the buffer memory it
    /// addresses) out of reach of the drops that settling it makes: its event reported an
    /// error, or its completion could not be observed and its stream did not synchronise, so
    /// the device may still be running it. Dropped with the device; if not every stream
    /// synchronised cleanly then, the host bytes the API's copies read or write (a read's, an
    /// update's) are leaked instead of freed under a stream that might still use them, a few
    /// submissions' worth after a device fault. Device memory and modules are released as
    /// usual: their frees and unloads wait for the device (or are stream-ordered), and they
    /// hold the API, which must go for a faulted context to be released.
    pub(crate) fn keep_for_stream(&self, timepoint: &mut Timepoint, work: Option<Work>) {
        let kept = Kept {
            read: timepoint.read.take(),
            work: timepoint.work.take().or(work),
            _memory: std::mem::take(&mut timepoint.memory),
        };
        lock(&self.kept).push(kept);
    }

    /// How many submissions are in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight_count.load(Ordering::Relaxed)
    }
}

impl<A: StreamApi> Drop for Core<A> {
    fn drop(&mut self) {
        for queue in &self.queues {
            for graph in queue.graphs.drain() {
                let _ = self.api.destroy_graph(graph);
            }
            queue.order.free_deferred_now(&*self.api);
            let _ = self.api.destroy_stream(queue.stream);
            if let Some(callback) = queue.callback {
                let _ = self.api.destroy_stream(callback);
            }
        }
        if let Some(timing) = &self.timing {
            let _ = self.api.destroy_stream(timing.stream);
        }
        // Every timepoint was settled, and every stream synchronised when the device was dropped
        // (`drain`): the idle pinned buffers are unused, and the orphaned ones too (and what
        // was kept for the streams) if every synchronisation succeeded.
        let finished = self.streams_finished.load(Ordering::Relaxed);
        for kept in std::mem::take(&mut *lock(&self.kept)) {
            if !finished {
                kept.leak_host_bytes();
            }
        }
        self.pinned.free_all(&*self.api, finished);
        if let Some(flags) = &self.flags {
            flags.free(&*self.api, finished);
        }
    }
}

/// What a submission held that its stream may still use ([`Core::keep_for_stream`]).
struct Kept {
    read: Option<(ReadSink, ReadInto)>,
    work: Option<Work>,
    _memory: Vec<Arc<dyn BufferMemory>>,
}

impl Kept {
    /// Leaks the host bytes a stream that did not finish may still read or write (a read's
    /// destination, the update bytes of the work's commands); the rest drops.
    fn leak_host_bytes(mut self) {
        std::mem::forget(self.read.take());
        if let Some(Work::Commands { commands, .. }) = &self.work {
            for command in commands.iter() {
                if let Command::Update { data, .. } = command {
                    std::mem::forget(data.clone());
                }
            }
        }
    }
}
