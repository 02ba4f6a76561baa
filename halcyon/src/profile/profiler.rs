//! A device's profiler: the switch, the records of the operations submitted while it is on, and
//! counters that are always on.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::operation::OperationKind;
use super::record::{Header, Record};
use super::{DeviceProfile, QueueCounters};
use crate::label::Label;

/// The records a profiler keeps by default before it drops the oldest: 65,536, about 14 MiB
/// (a record and its place in the queue are about 220 bytes), so a profiler left on stays
/// bounded. Raise it with [`Profiler::set_limit`] for longer windows, or take records
/// regularly ([`Profiler::take`]).
pub const DEFAULT_RECORD_LIMIT: usize = 1 << 16;

/// One queue's counters (its submissions are the sum of its kinds'), two relaxed increments
/// per operation.
#[derive(Default)]
struct Counters {
    kinds: [AtomicU64; OperationKind::ALL.len()],
    bytes: AtomicU64,
}

/// Where a profiler reads its device's counters from (the allocator and the backend).
pub(crate) type DeviceCounters = Box<dyn Fn() -> Vec<(&'static str, u64)> + Send + Sync>;

/// Records a device's queue operations: off by default, turned on and off at run time
/// ([`Profiler::enable`]). [`Device::profiler`](crate::Device::profiler) is the device's own.
///
/// While it is on, each operation submitted gets a record of when it was submitted, issued to
/// the device, run by the device (where the backend can tell) and seen complete by the host;
/// [`Profiler::take`] hands the finished ones over as a [`DeviceProfile`] to export. Operations
/// submitted while it is off have no record, and cost one atomic load. The counters
/// ([`Profiler::counters`]) are kept whether it is on or not.
///
/// It keeps at most [`Profiler::set_limit`] records (default [`DEFAULT_RECORD_LIMIT`]),
/// dropping the oldest beyond that and counting them ([`DeviceProfile::dropped`]): a profiler
/// left on never grows without bound.
///
/// ```
/// # fn demo(device: &halcyon::Device) {
/// device.profiler().enable();
/// // ... submit and await work ...
/// let profile = device.profiler().take();
/// println!("{}", halcyon::profile::Profile::from(profile).to_chrome_trace());
/// # }
/// ```
pub struct Profiler {
    device: Arc<str>,
    device_counters: DeviceCounters,
    queue_labels: Arc<[Label]>,
    name: String,
    enabled: AtomicBool,
    next_id: AtomicU64,
    limit: AtomicUsize,
    dropped: AtomicU64,
    records: Mutex<VecDeque<Arc<Record>>>,
    queues: Vec<Counters>,
}

impl fmt::Debug for Profiler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Profiler")
            .field("device", &self.device)
            .field("enabled", &self.is_enabled())
            .field("records", &self.lock().len())
            .finish()
    }
}

impl Profiler {
    pub(crate) fn new(
        device: &str,
        name: &str,
        queue_labels: Arc<[Label]>,
        device_counters: DeviceCounters,
    ) -> Self {
        let queues = queue_labels.len().max(1);
        Profiler {
            device: Arc::from(device),
            device_counters,
            queue_labels,
            name: name.to_owned(),
            enabled: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            limit: AtomicUsize::new(DEFAULT_RECORD_LIMIT),
            dropped: AtomicU64::new(0),
            records: Mutex::new(VecDeque::new()),
            queues: (0..queues).map(|_| Counters::default()).collect(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Record>>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records operations submitted from now on.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    /// Stops recording new operations; those recorded already still complete their records.
    pub fn disable(&self) {
        self.enabled.store(false, Ordering::Release);
    }

    /// Whether operations submitted now are recorded.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Keeps at most `limit` records (at least 1), dropping the oldest beyond it.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit.max(1), Ordering::Relaxed);
    }

    /// Counts an operation, and starts its record if the profiler is on.
    pub(crate) fn submitted(
        &self,
        queue: u32,
        kind: OperationKind,
        bytes: u64,
        header: impl FnOnce() -> Header,
    ) -> Option<Arc<Record>> {
        if let Some(counters) = self.queues.get(queue as usize) {
            counters.kinds[kind.index()].fetch_add(1, Ordering::Relaxed);
            counters.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        let enabled = self.is_enabled();
        if !enabled && !crate::log::enabled!("halcyon::queue", DEBUG) {
            return None;
        }
        let mut header = header();
        let limit = self.limit.load(Ordering::Relaxed);
        let mut records = self.lock();
        // Under the lock, so ids follow the records' order; a plain increment, since every
        // writer holds it (as for `dropped`).
        header.id = self.next_id.load(Ordering::Relaxed);
        self.next_id.store(header.id + 1, Ordering::Relaxed);
        if !enabled {
            // For the `tracing` events only.
            drop(records);
            return Some(Arc::new(Record::new(&self.device, header)));
        }
        let mut dropped = 0;
        let mut oldest = None;
        while records.len() >= limit {
            // More than one only when the limit was lowered.
            oldest = records.pop_front();
            dropped += 1;
        }
        if dropped > 0 {
            let total = self.dropped.load(Ordering::Relaxed) + dropped;
            self.dropped.store(total, Ordering::Relaxed);
        }
        // A full profiler drops its oldest record for each new one: when nothing else holds
        // the dropped one any more (its operation long settled), its allocation takes the new
        // record, so a profiler left on allocates nothing per operation.
        let record = match oldest.as_mut().and_then(Arc::get_mut) {
            Some(slot) => {
                *slot = Record::new(&self.device, header);
                oldest.take().expect("the slot came from it")
            }
            None => Arc::new(Record::new(&self.device, header)),
        };
        records.push_back(record.clone());
        drop(records);
        drop(oldest); // a dropped record still held elsewhere: released outside the lock
        Some(record)
    }

    /// Takes the records of the operations that have completed (their signal reached or
    /// failed), oldest first; those still running stay for a later call.
    pub fn take(&self) -> DeviceProfile {
        let mut records = self.lock();
        let (done, running): (VecDeque<_>, VecDeque<_>) =
            records.drain(..).partition(|r| r.is_settled());
        *records = running;
        drop(records);
        self.profile(done.iter())
    }

    /// Every record kept, completed or not, without taking them.
    pub fn snapshot(&self) -> DeviceProfile {
        let records = self.lock().clone();
        self.profile(records.iter())
    }

    fn profile<'a>(&self, records: impl Iterator<Item = &'a Arc<Record>>) -> DeviceProfile {
        let mut semaphores = std::collections::BTreeMap::new();
        let operations = records
            .map(|r| {
                for (id, label) in r.semaphore_labels() {
                    semaphores.insert(*id, label.to_string());
                }
                r.operation()
            })
            .collect();
        DeviceProfile {
            device: self.device.to_string(),
            name: self.name.clone(),
            queues: self.queues.len() as u32,
            queue_labels: (0..self.queues.len())
                .map(|q| {
                    let label = self.queue_labels.get(q).and_then(Label::get);
                    label.map(|l| l.to_string())
                })
                .collect(),
            semaphores: semaphores.into_iter().collect(),
            operations,
            counters: self.counters(),
            device_counters: self.device_counters(),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }

    /// The device's counters now, profiling on or off: its allocator's (`allocations`,
    /// `bytes_in_use`, `peak_bytes_in_use`) and those its backend answers
    /// (`pending_actions`, `reactor_wakeups`, `graph_replays`; see
    /// [`crate::device::keys`]).
    pub fn device_counters(&self) -> Vec<(String, u64)> {
        (self.device_counters)()
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect()
    }

    /// Each queue's counters since the device was created, profiling on or off.
    pub fn counters(&self) -> Vec<QueueCounters> {
        self.queues
            .iter()
            .map(|c| {
                let by_kind: Vec<_> = OperationKind::ALL
                    .iter()
                    .map(|&k| (k, c.kinds[k.index()].load(Ordering::Relaxed)))
                    .filter(|&(_, n)| n > 0)
                    .collect();
                QueueCounters {
                    submissions: by_kind.iter().map(|&(_, n)| n).sum(),
                    by_kind,
                    bytes: c.bytes.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}
