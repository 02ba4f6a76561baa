//! The stream device's own pinned host memory: where a submission's status words, staged
//! update bytes and read-back bytes live while the device uses them.
//!
//! A GPU copies asynchronously only to and from page-locked memory, so a copy from or into
//! ordinary host memory makes the API stage it, recycling its staging buffer from a *host
//! function* enqueued after the copy (see [`crate::staging`]): one more host round trip
//! inside the stream for every queue update and read (IREE measured `hipLaunchHostFunc` at about
//! 6 µs). The stream device knows exactly when a submission's host memory is free again: when
//! its completion event completed and it is settled. So it leases
//! [`MemoryPlacement::Pinned`] memory of the API itself, one lease per submission, hands the API
//! addresses inside it (a plain DMA, no staging, no host function), and releases the lease when
//! the submission is settled. Status words need no copies at all: the kernel writes its word
//! straight into the lease over the bus, the host zeroes it before the launch and reads it after
//! the completion event.
//!
//! Only small transfers take a lease: a list whose update bytes, or a read whose bytes, exceed
//! [`PinnedMemory::LEASE_MAX`] (1 MiB) copies through the API as before. Those are
//! bandwidth-bound, so the host function costs them nothing that matters, while a lease would
//! pin memory twice their size and copy their bytes out on the completion path. Status words
//! always take a lease (a few bytes each).
//!
//! Buffers come from a [`StagingPool`] (powers of two from 64 KiB), and up to
//! [`PinnedMemory::KEEP_BYTES`] (64 MiB) of idle buffers are kept whatever their number, so a
//! pipeline of many submissions in flight reaches a steady state that allocates and frees
//! nothing. Allocating and freeing pinned memory calls the API, which may block (a pinned free
//! may wait for the device). A lease allocates where a submission is issued (the submitting
//! task, or the reactor for a parked one) when no idle buffer fits; the idle buffers beyond the
//! limit (only after more than 64 MiB of leases were in flight at once) are handed to the
//! device's reclaimer thread to be freed (see `reclaim.rs`), and the rest are freed when the
//! device is dropped: no free on an issuing or completing thread.
//!
//! A lease goes back to the pool when its submission is settled after its completion event
//! completed. If the stream may still be using it (the event reported an error, whose cause
//! the stream layer cannot always tell from a stopped device, or the device was dropped while
//! a stream had not finished), the lease is *orphaned* instead: never reused. The device frees
//! its orphans when it is dropped, if every stream synchronised cleanly then; after a device
//! fault they are left allocated (a few buffers, at most one per submission that was in flight)
//! rather than freed under a stream that might still write them.
//!
//! An API that cannot allocate pinned memory (`Unimplemented`) is asked once; then updates and
//! reads go through the API's own copies, and status words fail the submission that needs them.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::api::{DevicePtr, MemoryPlacement, StreamApi};
use crate::device::reclaim::{Reclaim, Reclaimed};
use crate::staging::{capacity_for, Lease, PinnedBuffer, StagingPool};
use halcyon::{Error, Result, StatusCode};

/// Pinned host memory leased to submissions (see the [module docs](self)).
pub(crate) struct PinnedMemory {
    pool: Arc<StagingPool>,
    /// Where idle buffers beyond the limit go to be freed (a pinned free may wait for the
    /// device; the issuing thread must not).
    reclaim: Arc<Reclaim>,
    /// Set once the API answered `Unimplemented` to a pinned allocation.
    refused: AtomicBool,
    /// Buffers allocated so far.
    allocated: AtomicU64,
}

impl PinnedMemory {
    /// An empty pool whose excess buffers are freed through `reclaim`.
    pub(crate) fn new(reclaim: Arc<Reclaim>) -> Self {
        PinnedMemory {
            pool: Arc::default(),
            reclaim,
            refused: AtomicBool::new(false),
            allocated: AtomicU64::new(0),
        }
    }

    /// The most update or read-back bytes a submission stages in a lease (larger transfers go
    /// through the API's own copies).
    pub(crate) const LEASE_MAX: usize = 1 << 20;
    /// Idle bytes kept, however many buffers.
    pub(crate) const KEEP_BYTES: usize = 64 << 20;

    /// A lease of at least `len` bytes (an idle buffer, else a new allocation), after freeing
    /// the idle buffers beyond the pool's limits. `Unimplemented` if the API has no pinned
    /// memory.
    pub(crate) fn lease<A: StreamApi>(&self, api: &A, name: &str, len: usize) -> Result<Lease> {
        let buffer = match self.pool.take(len) {
            Some(buffer) => buffer,
            None => self.allocate(api, name, capacity_for(len))?,
        };
        self.pool.trim_to(usize::MAX, Self::KEEP_BYTES);
        for retired in self.pool.take_retired() {
            if !self.reclaim.hand_over(Reclaimed::Memory(address(&retired))) {
                let _ = api.free(address(&retired));
            }
        }
        Ok(Lease::new(buffer, self.pool.clone()))
    }

    /// [`PinnedMemory::lease`] where staging in the device's own memory is an optimisation:
    /// `None` (the caller uses the API's copies instead) if the API has no pinned memory or
    /// cannot allocate more now.
    pub(crate) fn try_lease<A: StreamApi>(&self, api: &A, name: &str, len: usize) -> Option<Lease> {
        if self.refused.load(Ordering::Relaxed) {
            return None;
        }
        self.lease(api, name, len).ok()
    }

    fn allocate<A: StreamApi>(&self, api: &A, name: &str, capacity: usize) -> Result<PinnedBuffer> {
        if self.refused.load(Ordering::Relaxed) {
            return Err(no_pinned(name, "it refused an earlier allocation"));
        }
        let ptr = match api.allocate(capacity as u64, MemoryPlacement::Pinned) {
            Ok(ptr) => ptr,
            Err(error) => {
                if error.code() == StatusCode::Unimplemented {
                    self.refused.store(true, Ordering::Relaxed);
                }
                return Err(error.context(format!(
                    "{name}: cannot allocate {capacity} bytes of pinned host memory"
                )));
            }
        };
        match api.host_pointer(ptr) {
            Some(host) if host.as_ptr() as usize as u64 == ptr.0 => {
                self.allocated.fetch_add(1, Ordering::Relaxed);
                Ok(PinnedBuffer {
                    ptr: host,
                    capacity,
                })
            }
            _ => {
                let _ = api.free(ptr);
                self.refused.store(true, Ordering::Relaxed);
                Err(no_pinned(
                    name,
                    "its pinned allocation has no host address equal to its device address",
                ))
            }
        }
    }

    /// Frees the pool's buffers once the device is going away: the idle ones, and the orphans
    /// too if `streams_finished` (every stream synchronised cleanly, so none of them can still
    /// use one); otherwise the orphans stay allocated.
    pub(crate) fn free_all<A: StreamApi>(&self, api: &A, streams_finished: bool) {
        let buffers = match streams_finished {
            true => self.pool.drain(),
            false => self.pool.drain_unused(),
        };
        for buffer in buffers {
            let _ = api.free(address(&buffer));
        }
    }

    /// Pinned buffers not leased (idle, or retired and not yet freed).
    pub(crate) fn idle(&self) -> usize {
        let (idle, retired, _) = self.pool.counts();
        idle + retired
    }

    /// Pinned buffers allocated so far.
    pub(crate) fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }
}

/// The API address of a pinned buffer: its host address ([`MemoryPlacement::Pinned`] memory has
/// one address on both sides).
fn address(buffer: &PinnedBuffer) -> DevicePtr {
    DevicePtr(buffer.ptr.as_ptr() as usize as u64)
}

fn no_pinned(name: &str, why: &str) -> Error {
    Error::new(
        StatusCode::Unimplemented,
        format!("{name}: the stream API offers no usable pinned host memory ({why})"),
    )
}

/// A submission's pinned bytes: its lease, and how much of it is handed out so far. Status
/// words come first (their offset is 0), staged update bytes and read-back bytes after them.
pub(crate) struct HostArea {
    lease: Lease,
    used: usize,
}

impl HostArea {
    /// Alignment of each piece handed out (a cache line: DMA engines copy aligned blocks
    /// faster, and a status word never shares a line with staged bytes).
    const ALIGN: usize = 64;

    pub(crate) fn new(lease: Lease) -> HostArea {
        HostArea { lease, used: 0 }
    }

    /// The next `len` bytes of the lease (aligned), or `None` if they do not fit.
    pub(crate) fn carve(&mut self, len: usize) -> Option<NonNull<u8>> {
        let start = self.used.checked_next_multiple_of(Self::ALIGN)?;
        let end = start.checked_add(len)?;
        if end > self.lease.capacity() {
            return None;
        }
        self.used = end;
        // SAFETY: `start < end <= capacity`, so the offset stays inside the lease's buffer.
        NonNull::new(unsafe { self.lease.ptr().add(start) })
    }

    /// The lease's start (where status words are).
    pub(crate) fn start(&self) -> *mut u8 {
        self.lease.ptr()
    }

    /// Returns the lease to the pool: the submission's work is over (its event completed
    /// successfully, or its stream was synchronised).
    pub(crate) fn release(self) {
        self.lease.release();
    }

    /// Orphans the lease: a stream may still use it, so it is never reused (see the
    /// [module docs](self)).
    pub(crate) fn orphan(self) {
        drop(self.lease);
    }

    /// The room a piece of `len` bytes takes, alignment included.
    pub(crate) fn room_for(len: usize) -> usize {
        len.next_multiple_of(Self::ALIGN)
    }
}
