//! Timepoints: the record a stream device keeps of one submission between issuing it to a stream
//! and settling its signal fence, recycled through a [`TimepointPool`].
//!
//! A timepoint is IREE's `iree_hal_hip_timepoint_t` for a device signal: the event recorded after
//! the submission's work, and what completing it means: the fence to signal, the semaphores
//! waited on natively (if one failed, the submission fails too), and everything the work uses,
//! kept alive until the fence is settled (the command list with its buffers and executables,
//! the buffer memory resolved for it, a read's staging bytes, its dispatches' status words).
//! Submissions come and go at a high rate, so the records and their vectors are reused instead
//! of reallocated: the pool keeps up to [`TimepointPool::KEEP`] cleared records, and up to
//! [`TimepointPool::KEEP_ARRAYS`] device status arrays ([`StatusArray`]) for the next
//! submissions whose dispatches take status words.

use std::sync::atomic::{AtomicU64 as StatCounter, Ordering as StatOrdering};
use std::sync::Arc;

use crate::buffer::BufferMemory;
use crate::device::Work;
use crate::error::Error;
use crate::fence::Fence;
use crate::queue::ReadSink;
use crate::semaphore::Semaphore;
use crate::stream::api::DevicePtr;
use crate::stream::event_pool::Event;
use crate::sync::{lock, Mutex};

/// One submission in flight on a stream (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct Timepoint {
    /// The device queue it was issued on.
    pub(crate) queue: usize,
    /// Recorded after its work; complete means the work is done.
    pub(crate) event: Option<Event>,
    /// Settled (in order) once the event completes.
    pub(crate) signal: Fence,
    /// Semaphores its stream waited on through their events.
    pub(crate) waited: Vec<Semaphore>,
    /// Buffer memory its commands address.
    pub(crate) memory: Vec<Arc<dyn BufferMemory>>,
    /// The work itself (commands, executables, captured bytes).
    pub(crate) work: Option<Work>,
    /// A read's sink and the staging bytes the device copies into.
    pub(crate) read: Option<(ReadSink, Box<[u8]>)>,
    /// An error from enqueueing part of the work: the fence fails with it once the event
    /// completes (not before: what was enqueued still runs).
    pub(crate) error: Option<Error>,
    /// The status words of its dispatches that take one (none for most submissions).
    pub(crate) status: StatusWords,
}

/// Device memory for the status words of one submission's dispatches: `slots` `u32`s, freed
/// when dropped (its memory is a stream device buffer allocation).
pub(crate) struct StatusArray {
    /// The first word.
    pub(crate) ptr: DevicePtr,
    /// How many words it holds.
    pub(crate) slots: usize,
    /// The allocation, kept alive (and freed on drop) here.
    pub(crate) _memory: Arc<dyn BufferMemory>,
}

impl StatusArray {
    /// Fewest words an array is made with (a power of two: arrays of one size are shared by
    /// submissions with up to that many status-word dispatches).
    pub(crate) const MIN_SLOTS: usize = 64;

    /// The size to allocate for `needed` words: a power of two, at least
    /// [`StatusArray::MIN_SLOTS`].
    pub(crate) fn slots_for(needed: usize) -> usize {
        needed
            .max(Self::MIN_SLOTS)
            .checked_next_power_of_two()
            .unwrap_or(needed)
    }
}

/// The status words of a submission's dispatches that take one: dispatch `i` of them (in
/// command order) writes slot `i` of the device array, which is zeroed before the first such
/// launch and copied into `host` after the last.
#[derive(Default)]
pub(crate) struct StatusWords {
    /// The device words (taken from the pool or allocated at issue, returned at release).
    pub(crate) array: Option<StatusArray>,
    /// The host copy the device copies the words into; read once the event completed.
    pub(crate) host: Vec<u32>,
    /// The entry point of each slot's dispatch, for the error message.
    pub(crate) entries: Vec<String>,
}

impl StatusWords {
    /// Whether the submission has dispatches with status words (then its signals are made from
    /// the host, after the check).
    pub(crate) fn checked(&self) -> bool {
        !self.entries.is_empty()
    }
}

impl Timepoint {
    /// Drops everything the submission held, keeping the vectors' capacity.
    fn clear(&mut self) {
        self.event = None;
        self.signal = Fence::new();
        self.waited.clear();
        self.memory.clear();
        self.work = None;
        self.read = None;
        self.error = None;
        self.status.array = None;
        self.status.host.clear();
        self.status.entries.clear();
    }
}

/// Recycled [`Timepoint`]s.
#[derive(Default)]
pub(crate) struct TimepointPool {
    free: Mutex<Vec<Timepoint>>,
    /// Status arrays of settled submissions, for reuse.
    arrays: Mutex<Vec<StatusArray>>,
    created: StatCounter,
    acquired: StatCounter,
}

impl TimepointPool {
    /// How many cleared records the pool keeps.
    pub(crate) const KEEP: usize = 64;
    /// How many idle status arrays the pool keeps (the smallest are kept; the others are freed).
    pub(crate) const KEEP_ARRAYS: usize = 16;

    /// A cleared record, reused if one is pooled.
    pub(crate) fn acquire(&self) -> Timepoint {
        self.acquired.fetch_add(1, StatOrdering::Relaxed);
        let pooled = lock(&self.free).pop();
        pooled.unwrap_or_else(|| {
            self.created.fetch_add(1, StatOrdering::Relaxed);
            Timepoint::default()
        })
    }

    /// Clears `timepoint` (dropping what the submission held, here) and keeps it for reuse;
    /// its status array, if any, goes back to the idle arrays.
    pub(crate) fn release(&self, mut timepoint: Timepoint) {
        let array = timepoint.status.array.take();
        timepoint.clear();
        if let Some(array) = array {
            self.give_status_array(array);
        }
        let mut free = lock(&self.free);
        if free.len() < Self::KEEP {
            free.push(timepoint);
        }
    }

    /// The smallest idle status array of at least `slots` words, if any.
    pub(crate) fn take_status_array(&self, slots: usize) -> Option<StatusArray> {
        let mut arrays = lock(&self.arrays);
        let best = arrays
            .iter()
            .enumerate()
            .filter(|(_, a)| a.slots >= slots)
            .min_by_key(|(_, a)| a.slots)
            .map(|(i, _)| i)?;
        Some(arrays.swap_remove(best))
    }

    /// Keeps `array` (no longer used by any device work) for reuse; beyond
    /// [`TimepointPool::KEEP_ARRAYS`] the largest idle array is freed (outside the lock).
    pub(crate) fn give_status_array(&self, array: StatusArray) {
        let excess = {
            let mut arrays = lock(&self.arrays);
            arrays.push(array);
            if arrays.len() > Self::KEEP_ARRAYS {
                let largest = arrays
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, a)| a.slots)
                    .map(|(i, _)| i);
                largest.map(|i| arrays.swap_remove(i))
            } else {
                None
            }
        };
        drop(excess);
    }

    /// Records created so far, and records handed out (created or reused).
    pub(crate) fn stats(&self) -> (u64, u64) {
        (
            self.created.load(StatOrdering::Relaxed),
            self.acquired.load(StatOrdering::Relaxed),
        )
    }
}
