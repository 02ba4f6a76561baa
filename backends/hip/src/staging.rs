//! Pinned staging buffers for host↔device copies.
//!
//! In hipamd, `hipMemcpyAsync` with an ordinary (pageable) host pointer on either side waits on
//! the host for the stream: it returns only once the copy is done, that is after everything
//! enqueued before it. The threads issuing copies (the async executor, the reactor) must never
//! block on the device, so [`crate::api::HipStreamApi`] copies through pinned memory
//! (`hipHostMalloc`), which `hipMemcpyAsync` copies asynchronously:
//!
//! * host to device: the caller's bytes are copied into a pinned buffer at enqueue time, the
//!   device copies from that buffer, and a host function enqueued after the copy hands the
//!   buffer back to this pool;
//! * device to host: the device copies into a pinned buffer, and a host function enqueued after
//!   the copy moves the bytes to the caller's memory and hands the buffer back. The work
//!   enqueued after it (the submission's completion event) waits for the host function, so the
//!   bytes are in place when the event completes.
//!
//! The pool only holds buffers and chooses among them; it never calls HIP, because a host
//! function runs on a HIP thread that must not call HIP. Allocating (`hipHostMalloc`) is done by
//! the API when a copy is enqueued; freeing (`hipHostFree`, which in hipamd waits for the null
//! stream) only where the API may block: in `synchronize_*`, `free` (whose `hipFree` waits the
//! same way) and when the API is dropped. At most [`MAX_BUFFERS`] buffers and [`MAX_BYTES`]
//! bytes are kept idle; the excess is *retired* when a copy is enqueued and freed at the next
//! of those points.
//!
//! A buffer in use is held by a [`Lease`]. Released (the host function ran after the copy), it
//! goes back to the idle buffers. Dropped unreleased (the host function was dropped unrun: HIP
//! reported a stream error to the callback, or refused to enqueue it), the device may still be
//! using the buffer, so it is *orphaned*: kept, never reused, and freed only when the API is
//! dropped, after its streams were synchronised and destroyed. A host function HIP never calls
//! at all (a lost device) keeps its buffer for ever: leaked, never freed under the device.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

/// Idle buffers kept at most.
pub(crate) const MAX_BUFFERS: usize = 8;
/// Idle bytes kept at most.
pub(crate) const MAX_BYTES: usize = 64 << 20;
/// The smallest buffer allocated (small copies share sizes this way).
pub(crate) const MIN_BUFFER: usize = 64 << 10;

/// A pinned host buffer from `hipHostMalloc`. Not freed on drop (freeing calls HIP, which the
/// HIP thread that may drop one must not do): the API frees what the pool hands it.
#[derive(Debug)]
pub(crate) struct Pinned {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) capacity: usize,
}

// SAFETY: a `Pinned` owns its host allocation exclusively; pinned host memory may be used from
// any thread.
unsafe impl Send for Pinned {}

/// The size to allocate for a copy of `len` bytes: a power of two, at least [`MIN_BUFFER`].
pub(crate) fn capacity_for(len: usize) -> usize {
    len.max(MIN_BUFFER)
        .checked_next_power_of_two()
        .unwrap_or(len)
}

#[derive(Debug, Default)]
struct Buffers {
    /// Free to reuse.
    idle: Vec<Pinned>,
    /// Unused, beyond the limits: to be freed where the API may block.
    retired: Vec<Pinned>,
    /// Possibly still used by the device (their host function never ran): freed on drop only.
    orphaned: Vec<Pinned>,
}

/// Pinned staging buffers not in use.
#[derive(Debug, Default)]
pub(crate) struct StagingPool {
    buffers: Mutex<Buffers>,
}

impl StagingPool {
    fn buffers(&self) -> MutexGuard<'_, Buffers> {
        self.buffers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The smallest idle buffer of at least `len` bytes, if any.
    pub(crate) fn take(&self, len: usize) -> Option<Pinned> {
        let idle = &mut self.buffers().idle;
        let best = idle
            .iter()
            .enumerate()
            .filter(|(_, p)| p.capacity >= len)
            .min_by_key(|(_, p)| p.capacity)
            .map(|(i, _)| i)?;
        Some(idle.swap_remove(best))
    }

    /// Returns an unused buffer (from host functions too: no HIP call here).
    pub(crate) fn give(&self, buffer: Pinned) {
        self.buffers().idle.push(buffer);
    }

    /// Keeps a buffer the device may still use until [`StagingPool::drain`].
    fn orphan(&self, buffer: Pinned) {
        self.buffers().orphaned.push(buffer);
    }

    /// Retires the largest idle buffers until at most [`MAX_BUFFERS`] and [`MAX_BYTES`] remain.
    pub(crate) fn trim(&self) {
        let mut buffers = self.buffers();
        let Buffers { idle, retired, .. } = &mut *buffers;
        idle.sort_by_key(|p| p.capacity);
        while idle.len() > MAX_BUFFERS || idle.iter().map(|p| p.capacity).sum::<usize>() > MAX_BYTES
        {
            match idle.pop() {
                Some(p) => retired.push(p),
                None => break,
            }
        }
    }

    /// Takes the retired buffers (the caller frees them).
    pub(crate) fn take_retired(&self) -> Vec<Pinned> {
        std::mem::take(&mut self.buffers().retired)
    }

    /// Takes every buffer the pool holds, orphaned ones included (the caller frees them, once
    /// no device work can use them any more).
    pub(crate) fn drain(&self) -> Vec<Pinned> {
        let mut buffers = self.buffers();
        let Buffers {
            idle,
            retired,
            orphaned,
        } = &mut *buffers;
        let mut all = std::mem::take(idle);
        all.append(retired);
        all.append(orphaned);
        all
    }

    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let b = self.buffers();
        (b.idle.len(), b.retired.len(), b.orphaned.len())
    }
}

/// A buffer in use by one copy: [`Lease::release`] returns it to the pool once the copy
/// completed; dropping it unreleased orphans it (see the [module docs](self)).
#[derive(Debug)]
pub(crate) struct Lease {
    buffer: Option<Pinned>,
    pool: Arc<StagingPool>,
}

impl Lease {
    pub(crate) fn new(buffer: Pinned, pool: Arc<StagingPool>) -> Self {
        Lease {
            buffer: Some(buffer),
            pool,
        }
    }

    /// The buffer's start.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.buffer
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| b.ptr.as_ptr())
    }

    /// Returns the buffer to the idle buffers: the copy using it is known to be over (or was
    /// never enqueued). No HIP call.
    pub(crate) fn release(mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.pool.give(buffer);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            self.pool.orphan(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(capacity: usize) -> Pinned {
        Pinned {
            ptr: NonNull::dangling(),
            capacity,
        }
    }

    #[test]
    fn capacities_are_powers_of_two_from_64_kib() {
        assert_eq!(capacity_for(1), MIN_BUFFER);
        assert_eq!(capacity_for(MIN_BUFFER), MIN_BUFFER);
        assert_eq!(capacity_for(MIN_BUFFER + 1), 2 * MIN_BUFFER);
        assert_eq!(capacity_for(3 << 20), 4 << 20);
    }

    #[test]
    fn take_returns_the_smallest_fitting_buffer() {
        let pool = StagingPool::default();
        pool.give(fake(1 << 20));
        pool.give(fake(64 << 10));
        pool.give(fake(256 << 10));
        assert_eq!(pool.take(100 << 10).unwrap().capacity, 256 << 10);
        assert_eq!(pool.take(1).unwrap().capacity, 64 << 10);
        assert!(pool.take(2 << 20).is_none());
        assert_eq!(pool.drain().len(), 1);
    }

    #[test]
    fn trim_retires_count_and_bytes_largest_first() {
        let pool = StagingPool::default();
        for _ in 0..10 {
            pool.give(fake(MIN_BUFFER));
        }
        pool.trim();
        assert_eq!(pool.counts(), (MAX_BUFFERS, 2, 0));
        assert_eq!(pool.take_retired().len(), 2);
        pool.give(fake(MAX_BYTES));
        pool.trim();
        let retired = pool.take_retired();
        assert_eq!(retired.len(), 1);
        assert_eq!(retired[0].capacity, MAX_BYTES);
        assert!(pool.take_retired().is_empty());
        assert_eq!(pool.drain().len(), MAX_BUFFERS);
    }

    #[test]
    fn released_leases_are_reused_and_dropped_ones_orphaned_until_drain() {
        let pool = Arc::new(StagingPool::default());
        let lease = Lease::new(fake(MIN_BUFFER), pool.clone());
        assert!(!lease.ptr().is_null());
        lease.release();
        assert_eq!(pool.counts(), (1, 0, 0));
        let lease = Lease::new(pool.take(1).unwrap(), pool.clone());
        drop(lease); // as when its host function is dropped unrun
        assert_eq!(pool.counts(), (0, 0, 1));
        assert!(pool.take(1).is_none(), "an orphan is never reused");
        pool.trim();
        assert!(pool.take_retired().is_empty(), "nor freed before drain");
        assert_eq!(pool.drain().len(), 1);
        assert_eq!(pool.counts(), (0, 0, 0));
    }
}
