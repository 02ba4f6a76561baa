//! Timepoints: the record a stream device keeps of one submission between issuing it to a stream
//! and settling its signal fence, recycled through a [`TimepointPool`].
//!
//! A timepoint is IREE's `iree_hal_hip_timepoint_t` for a device signal: the event recorded after
//! the submission's work, and what completing it means: the fence to signal, the semaphores
//! waited on natively (if one failed, the submission fails too), and everything the work uses,
//! kept alive until the fence is settled (the command list with its buffers and executables,
//! the buffer memory resolved for it, its lease of the device's pinned host memory with its
//! status words, staged update bytes and read-back bytes). Submissions come and go at a high
//! rate, so the records and their vectors are reused instead of reallocated: the pool keeps up
//! to [`TimepointPool::KEEP`] cleared records. Releasing a record returns its pinned lease to
//! the device's pool.

use std::sync::atomic::{AtomicU64 as StatCounter, Ordering as StatOrdering};
use std::sync::Arc;

use crate::device::pinned::HostArea;
use crate::device::timing::TimedSpan;
use crate::event_pool::Event;
use crate::sync::{lock, Mutex};
use halcyon::backend::BufferMemory;
use halcyon::backend::ReadSink;
use halcyon::backend::Work;
use halcyon::Fence;
use halcyon::Semaphore;
use halcyon::{Error, StatusCode};

/// One submission in flight on a stream (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct Timepoint {
    /// The device queue it was issued on.
    pub(crate) queue: usize,
    /// Recorded after its work; complete means the work is done.
    pub(crate) event: Option<Event>,
    /// Settled (in order) once the event completes.
    pub(crate) signal: Fence,
    /// Semaphores its stream waited on through their events, with the values waited for.
    pub(crate) waited: Vec<(Semaphore, u64)>,
    /// The outcomes of the submissions behind those events, where they have one (see
    /// [`crate::timeline`]): it settles only after them.
    pub(crate) inputs: Vec<Semaphore>,
    /// Its own outcome, if it scheduled device signals: 1 once it settled successfully, failed
    /// with its error otherwise (and if it is cleared unsettled).
    pub(crate) outcome: Option<Semaphore>,
    /// Buffer memory its commands address.
    pub(crate) memory: Vec<Arc<dyn BufferMemory>>,
    /// The work itself (commands, executables, captured bytes).
    pub(crate) work: Option<Work>,
    /// A read's sink and where the device copies its bytes.
    pub(crate) read: Option<(ReadSink, ReadInto)>,
    /// Its lease of the device's pinned host memory, if it needed one: status words at the
    /// start, then staged update bytes or read-back bytes.
    pub(crate) host: Option<HostArea>,
    /// An error from enqueueing part of the work: the fence fails with it once the event
    /// completes (not before: what was enqueued still runs).
    pub(crate) error: Option<Error>,
    /// The status words of its dispatches that take one (none for most submissions).
    pub(crate) status: StatusWords,
    /// Its timing events, if it is profiled on a device with event timing.
    pub(crate) timing: Option<TimedSpan>,
}

/// Where a read's bytes land.
pub(crate) enum ReadInto {
    /// In the submission's pinned lease, at this address, this many bytes.
    Pinned(std::ptr::NonNull<u8>, usize),
    /// In host memory of its own (copied through the API's staging).
    Staging(HostBytes),
}

// SAFETY: `Pinned` addresses bytes of the submission's pinned lease, which the same timepoint
// owns and which any thread may read once the copy completed.
unsafe impl Send for ReadInto {}

/// Host memory a read's copies write: a heap allocation held by address only, so that the
/// device and the API's host functions may write it while the timepoint holding it moves (a
/// `Box` or `Vec` would assert unique access whenever it moved). Freed on drop.
pub(crate) struct HostBytes {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    /// The allocation's size: `len`, or a reused vector's capacity.
    capacity: usize,
}

// SAFETY: it owns its allocation; who may touch the bytes, and when, is the read's contract.
unsafe impl Send for HostBytes {}

impl HostBytes {
    /// `len` zeroed bytes, or `None` if the host cannot allocate them. Zeroed by the allocator
    /// (pages the OS hands out zeroed are not touched), as `vec![0; len]` is.
    pub(crate) fn zeroed(len: usize) -> Option<HostBytes> {
        if len == 0 {
            return Some(HostBytes::from_vec(Vec::new()));
        }
        let layout = std::alloc::Layout::array::<u8>(len).ok()?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = std::ptr::NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some(HostBytes {
            ptr,
            len,
            capacity: len,
        })
    }

    /// The bytes of `vec` (its allocation taken over, to be written and handed back by
    /// [`HostBytes::into_vec`]).
    pub(crate) fn from_vec(vec: Vec<u8>) -> HostBytes {
        let mut vec = std::mem::ManuallyDrop::new(vec);
        let (len, capacity) = (vec.len(), vec.capacity());
        // A vector's pointer is never null (dangling when it has no allocation).
        let ptr = std::ptr::NonNull::new(vec.as_mut_ptr()).unwrap_or(std::ptr::NonNull::dangling());
        HostBytes { ptr, len, capacity }
    }

    /// Where the bytes start (valid for writes of `len` bytes while `self` lives).
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes, once nothing writes them any more.
    pub(crate) fn into_vec(self) -> Vec<u8> {
        let this = std::mem::ManuallyDrop::new(self);
        if this.capacity == 0 {
            return Vec::new();
        }
        // SAFETY: allocated by the global allocator for `capacity` bytes (align 1): in
        // `zeroed` with the layout of `len == capacity` bytes, or by a vector taken over in
        // `from_vec`; its first `len` bytes initialised (zeroed or the vector's, then
        // written); owned here and not freed (ManuallyDrop): handed to the vector once.
        unsafe { Vec::from_raw_parts(this.ptr.as_ptr(), this.len, this.capacity) }
    }
}

impl Drop for HostBytes {
    fn drop(&mut self) {
        if self.capacity > 0 {
            // SAFETY: as in `into_vec`: the allocation of `capacity` bytes, freed once, here.
            drop(unsafe { Vec::from_raw_parts(self.ptr.as_ptr(), self.len, self.capacity) });
        }
    }
}

/// The status words of a submission's dispatches that take one: dispatch `i` of them (in
/// command order) writes `u32` number `i` at the start of the submission's pinned lease, which
/// the host zeroed before the launch and reads once the completion event completed.
#[derive(Default)]
pub(crate) struct StatusWords {
    /// The entry point of each word's dispatch, for the error message.
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
        self.inputs.clear();
        if let Some(outcome) = self.outcome.take() {
            if matches!(outcome.query(), Ok(0)) {
                outcome.fail(Error::new(
                    StatusCode::Aborted,
                    "a submission this work waited on was dropped before it settled",
                ));
            }
        }
        self.memory.clear();
        self.work = None;
        self.read = None;
        self.host = None;
        self.error = None;
        self.status.entries.clear();
        self.timing = None;
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

    /// Clears `timepoint` (dropping what the submission held, here) and keeps it for reuse; its
    /// pinned lease, if any, goes back to the device's pool. Only once its work is over (its
    /// event completed or its stream was synchronised); a lease still in use is dropped from the
    /// timepoint before (which orphans it).
    pub(crate) fn release(&self, mut timepoint: Timepoint) {
        if let Some(host) = timepoint.host.take() {
            host.release();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_bytes_are_zeroed_written_through_their_address_and_handed_over() {
        let bytes = HostBytes::zeroed(4096).unwrap();
        // SAFETY: 4096 writable bytes, written by nothing else.
        unsafe { bytes.as_mut_ptr().add(4095).write(7) };
        let vec = bytes.into_vec();
        assert_eq!(vec.len(), 4096);
        assert!(vec[..4095].iter().all(|&b| b == 0));
        assert_eq!(vec[4095], 7);
        assert!(HostBytes::zeroed(0).unwrap().into_vec().is_empty());
        drop(HostBytes::zeroed(100).unwrap());
        drop(HostBytes::zeroed(0).unwrap());
    }

    #[test]
    fn host_bytes_beyond_the_address_space_are_refused_not_aborted() {
        assert!(HostBytes::zeroed(usize::MAX).is_none());
        assert!(HostBytes::zeroed(isize::MAX as usize + 1).is_none());
    }
}
