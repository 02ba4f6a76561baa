//! The stream device's own pinned host memory: where a submission's status words, staged
//! update bytes and read-back bytes live while the device uses them.
//!
//! A GPU copies asynchronously only to and from page-locked memory, so a copy from or into
//! ordinary host memory makes the API stage it, recycling its staging buffer from a *host
//! function* enqueued after the copy (see [`crate::stream::staging`]): one more host round trip
//! inside the stream for every queue update and read (IREE measured `hipLaunchHostFunc` at about
//! 6 µs). The stream device knows exactly when a submission's host memory is free again: when
//! its completion event completed and it is settled. So it leases
//! [`MemoryPlacement::Pinned`] memory of the API itself, one lease per submission, hands the API
//! addresses inside it (a plain DMA, no staging, no host function), and releases the lease when
//! the submission is settled. Status words need no copies at all: the kernel writes its word
//! straight into the lease over the bus, the host zeroes it before the launch and reads it after
//! the completion event.
//!
//! Buffers come from a [`StagingPool`] (powers of two from 64 KiB, at most 8 buffers and
//! 64 MiB kept idle). Allocating and freeing pinned memory calls the API, which may block (a
//! pinned free may wait for the device), so both happen on the issuing thread when a lease is
//! taken, never on a completion path. A lease dropped unreleased (a submission still pending
//! when the device shut down after a failed synchronisation) is orphaned: never reused, freed
//! only with the device. An API that cannot allocate pinned memory (`Unimplemented`) is asked
//! once; then updates and reads go through the API's own copies, and status words fail the
//! submission that needs them.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result, StatusCode};
use crate::stream::api::{DevicePtr, MemoryPlacement, StreamApi};
use crate::stream::staging::{capacity_for, Lease, Pinned, StagingPool};

/// Pinned host memory leased to submissions (see the [module docs](self)).
#[derive(Default)]
pub(crate) struct PinnedMemory {
    pool: Arc<StagingPool>,
    /// Set once the API answered `Unimplemented` to a pinned allocation.
    refused: AtomicBool,
}

impl PinnedMemory {
    /// A lease of at least `len` bytes (an idle buffer, else a new allocation), after freeing
    /// the idle buffers beyond the pool's limits. `Unimplemented` if the API has no pinned
    /// memory.
    pub(crate) fn lease<A: StreamApi>(&self, api: &A, name: &str, len: usize) -> Result<Lease> {
        let buffer = match self.pool.take(len) {
            Some(buffer) => buffer,
            None => self.allocate(api, name, capacity_for(len))?,
        };
        self.pool.trim();
        for retired in self.pool.take_retired() {
            let _ = api.free(address(&retired));
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

    fn allocate<A: StreamApi>(&self, api: &A, name: &str, capacity: usize) -> Result<Pinned> {
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
            Some(host) if host.as_ptr() as usize as u64 == ptr.0 => Ok(Pinned {
                ptr: host,
                capacity,
            }),
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

    /// Frees every buffer the pool holds. Only once no device work can use them: after the
    /// device's streams were synchronised (an orphan is left only by a device whose
    /// synchronisation failed, which does no more work).
    pub(crate) fn free_all<A: StreamApi>(&self, api: &A) {
        for buffer in self.pool.drain() {
            let _ = api.free(address(&buffer));
        }
    }

    /// Pinned buffers `(idle, orphaned)`, for tests and statistics.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let (idle, retired, orphaned) = self.pool.counts();
        (idle + retired, orphaned)
    }
}

/// The API address of a pinned buffer: its host address ([`MemoryPlacement::Pinned`] memory has
/// one address on both sides).
fn address(buffer: &Pinned) -> DevicePtr {
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

    /// Returns the lease to the pool: the submission's work is over (its event completed, or
    /// its stream was synchronised, or the device failed).
    pub(crate) fn release(self) {
        self.lease.release();
    }

    /// The room a piece of `len` bytes takes, alignment included.
    pub(crate) fn room_for(len: usize) -> usize {
        len.next_multiple_of(Self::ALIGN)
    }
}
