//! Timepoints: the record a stream device keeps of one submission between issuing it to a stream
//! and settling its signal fence, recycled through a [`TimepointPool`].
//!
//! A timepoint is IREE's `iree_hal_hip_timepoint_t` for a device signal: the event recorded after
//! the submission's work, and what completing it means: the fence to signal, the semaphores
//! waited on natively (if one failed, the submission fails too), and everything the work uses,
//! kept alive until the fence is settled (the command list with its buffers and executables,
//! the buffer memory resolved for it, a read's staging bytes). Submissions come and go at a high
//! rate, so the records and their vectors are reused instead of reallocated: the pool keeps up to
//! [`TimepointPool::KEEP`] cleared records.

use std::sync::atomic::{AtomicU64 as StatCounter, Ordering as StatOrdering};
use std::sync::Arc;

use crate::buffer::BufferMemory;
use crate::device::Work;
use crate::error::Error;
use crate::fence::Fence;
use crate::queue::ReadSink;
use crate::semaphore::Semaphore;
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
    }
}

/// Recycled [`Timepoint`]s.
#[derive(Default)]
pub(crate) struct TimepointPool {
    free: Mutex<Vec<Timepoint>>,
    created: StatCounter,
    acquired: StatCounter,
}

impl TimepointPool {
    /// How many cleared records the pool keeps.
    pub(crate) const KEEP: usize = 64;

    /// A cleared record, reused if one is pooled.
    pub(crate) fn acquire(&self) -> Timepoint {
        self.acquired.fetch_add(1, StatOrdering::Relaxed);
        let pooled = lock(&self.free).pop();
        pooled.unwrap_or_else(|| {
            self.created.fetch_add(1, StatOrdering::Relaxed);
            Timepoint::default()
        })
    }

    /// Clears `timepoint` (dropping what the submission held, here) and keeps it for reuse.
    pub(crate) fn release(&self, mut timepoint: Timepoint) {
        timepoint.clear();
        let mut free = lock(&self.free);
        if free.len() < Self::KEEP {
            free.push(timepoint);
        }
    }

    /// Records created so far, and records handed out (created or reused).
    pub(crate) fn stats(&self) -> (u64, u64) {
        (
            self.created.load(StatOrdering::Relaxed),
            self.acquired.load(StatOrdering::Relaxed),
        )
    }
}
