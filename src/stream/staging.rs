//! Pinned staging buffers for host↔device copies, shared by the stream backends.
//!
//! GPU stream APIs copy asynchronously only to and from *pinned* (page-locked) host memory: an
//! asynchronous copy with an ordinary (pageable) host pointer on either side may wait on the
//! host for the stream, that is for everything enqueued before it. The threads issuing copies
//! (the async executor, the reactor) must never block on the device, so a backend copies
//! through pinned buffers held here:
//!
//! * host to device: the caller's bytes are copied into a pinned buffer at enqueue time (see
//!   [`Pinned::fill_from`]), the device copies from that buffer, and a host function enqueued
//!   after the copy hands the buffer back to the pool;
//! * device to host: the device copies into a pinned buffer, and a host function enqueued after
//!   the copy moves the bytes to the caller's memory and hands the buffer back. The work
//!   enqueued after it (the submission's completion event) waits for the host function, so the
//!   bytes are in place when the event completes.
//!
//! The pool only holds buffers and chooses among them; it never calls a vendor API, because a
//! host function runs on a driver thread that must not call the driver. Allocating and freeing
//! the pinned memory is the backend's job: it passes buffers in ([`StagingPool::give`],
//! [`Lease::new`]) and takes out the ones to free ([`StagingPool::take_retired`],
//! [`StagingPool::drain`]) where it may call the driver. At most [`MAX_BUFFERS`] buffers and
//! [`MAX_BYTES`] bytes are kept idle; [`StagingPool::trim`] *retires* the excess, for the
//! backend to free.
//!
//! A buffer in use may be held by a [`Lease`]. Released (the host function ran after the copy),
//! it goes back to the idle buffers. Dropped unreleased (the host function was dropped unrun:
//! the driver reported a stream error, or refused to enqueue it), the device may still be using
//! the buffer, so it is *orphaned*: kept, never reused, and handed out only by
//! [`StagingPool::drain`], which a backend calls once no device work can use it any more.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

/// Idle buffers kept at most.
pub const MAX_BUFFERS: usize = 8;
/// Idle bytes kept at most.
pub const MAX_BYTES: usize = 64 << 20;
/// The smallest buffer allocated (small copies share sizes this way).
pub const MIN_BUFFER: usize = 64 << 10;

/// A pinned host buffer allocated by a backend. Not freed on drop (freeing calls the driver,
/// which the driver thread that may drop one must not do): the backend frees what the pool
/// hands it.
#[derive(Debug)]
pub struct Pinned {
    /// The buffer's start.
    pub ptr: NonNull<u8>,
    /// The buffer's size in bytes.
    pub capacity: usize,
}

// SAFETY: a `Pinned` owns its host allocation exclusively (nothing here dereferences it but the
// unsafe `fill_from`, under its caller's guarantees); pinned host memory may be used from any
// thread.
unsafe impl Send for Pinned {}

impl Pinned {
    /// Copies `len` bytes from `src` into the start of the buffer.
    ///
    /// # Safety
    /// `ptr..ptr+capacity` must be valid for writes; `src..src+len` must be readable and must
    /// not overlap the buffer; the buffer must not be in use by a copy in flight.
    ///
    /// # Panics
    /// If `len` exceeds the buffer's capacity.
    pub unsafe fn fill_from(&self, src: *const u8, len: usize) {
        assert!(
            len <= self.capacity,
            "{len} bytes into {} of staging",
            self.capacity
        );
        // SAFETY: the buffer holds `capacity >= len` writable bytes; the caller guarantees the
        // source is readable, disjoint, and that nothing else uses the buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, self.ptr.as_ptr(), len) };
    }
}

/// The size to allocate for a copy of `len` bytes: a power of two, at least [`MIN_BUFFER`].
pub fn capacity_for(len: usize) -> usize {
    len.max(MIN_BUFFER)
        .checked_next_power_of_two()
        .unwrap_or(len)
}

#[derive(Debug, Default)]
struct Buffers {
    /// Free to reuse.
    idle: Vec<Pinned>,
    /// Unused, beyond the limits: to be freed by the backend.
    retired: Vec<Pinned>,
    /// Possibly still used by the device (their host function never ran): drained only.
    orphaned: Vec<Pinned>,
}

/// Pinned staging buffers not in use (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct StagingPool {
    buffers: Mutex<Buffers>,
}

impl StagingPool {
    fn buffers(&self) -> MutexGuard<'_, Buffers> {
        self.buffers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The smallest idle buffer of at least `len` bytes, if any.
    pub fn take(&self, len: usize) -> Option<Pinned> {
        let idle = &mut self.buffers().idle;
        let best = idle
            .iter()
            .enumerate()
            .filter(|(_, p)| p.capacity >= len)
            .min_by_key(|(_, p)| p.capacity)
            .map(|(i, _)| i)?;
        Some(idle.swap_remove(best))
    }

    /// The smallest unused buffer of at least `len` bytes, idle or retired. Retired buffers are
    /// unused too, only waiting for a call that may block to free them: reusing them before
    /// allocating keeps the pinned memory bounded by what the most copies in flight at once
    /// needed, while the frees wait for such a call. The caller trims the pool afterwards,
    /// which retires the excess again.
    pub fn take_unused(&self, len: usize) -> Option<Pinned> {
        if let Some(buffer) = self.take(len) {
            return Some(buffer);
        }
        let mut buffers = self.buffers();
        let Buffers { idle, retired, .. } = &mut *buffers;
        if retired.is_empty() {
            return None;
        }
        idle.append(retired);
        let best = idle
            .iter()
            .enumerate()
            .filter(|(_, p)| p.capacity >= len)
            .min_by_key(|(_, p)| p.capacity)
            .map(|(i, _)| i)?;
        Some(idle.swap_remove(best))
    }

    /// Returns an unused buffer to the idle buffers (from host functions too: no driver call).
    pub fn give(&self, buffer: Pinned) {
        self.buffers().idle.push(buffer);
    }

    /// Keeps a buffer the device may still use until [`StagingPool::drain`].
    fn orphan(&self, buffer: Pinned) {
        self.buffers().orphaned.push(buffer);
    }

    /// Retires the largest idle buffers until at most [`MAX_BUFFERS`] and [`MAX_BYTES`] remain
    /// (see [`StagingPool::take_retired`]).
    pub fn trim(&self) {
        self.trim_to(MAX_BUFFERS, MAX_BYTES);
    }

    /// Retires the largest idle buffers until at most `max_buffers` and `max_bytes` remain.
    pub fn trim_to(&self, max_buffers: usize, max_bytes: usize) {
        let mut buffers = self.buffers();
        let Buffers { idle, retired, .. } = &mut *buffers;
        idle.sort_by_key(|p| p.capacity);
        while idle.len() > max_buffers || idle.iter().map(|p| p.capacity).sum::<usize>() > max_bytes
        {
            match idle.pop() {
                Some(p) => retired.push(p),
                None => break,
            }
        }
    }

    /// Takes the retired buffers (the caller frees them).
    pub fn take_retired(&self) -> Vec<Pinned> {
        std::mem::take(&mut self.buffers().retired)
    }

    /// Takes every idle and retired buffer, leaving the orphaned ones (the caller frees them).
    pub fn drain_unused(&self) -> Vec<Pinned> {
        let mut buffers = self.buffers();
        let Buffers { idle, retired, .. } = &mut *buffers;
        let mut all = std::mem::take(idle);
        all.append(retired);
        all
    }

    /// Takes every buffer the pool holds, orphaned ones included (the caller frees them, once
    /// no device work can use them any more).
    pub fn drain(&self) -> Vec<Pinned> {
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

    /// How many buffers are `(idle, retired, orphaned)`.
    pub fn counts(&self) -> (usize, usize, usize) {
        let b = self.buffers();
        (b.idle.len(), b.retired.len(), b.orphaned.len())
    }
}

/// A buffer in use by one copy: [`Lease::release`] returns it to the pool once the copy
/// completed; dropping it unreleased orphans it (see the [module docs](self)).
#[derive(Debug)]
pub struct Lease {
    buffer: Option<Pinned>,
    pool: Arc<StagingPool>,
}

impl Lease {
    /// Leases `buffer` (taken from `pool` or newly allocated) for one copy.
    pub fn new(buffer: Pinned, pool: Arc<StagingPool>) -> Self {
        Lease {
            buffer: Some(buffer),
            pool,
        }
    }

    /// The buffer's start.
    pub fn ptr(&self) -> *mut u8 {
        self.buffer
            .as_ref()
            .map_or(std::ptr::null_mut(), |b| b.ptr.as_ptr())
    }

    /// The buffer's size in bytes (0 once released).
    pub fn capacity(&self) -> usize {
        self.buffer.as_ref().map_or(0, |b| b.capacity)
    }

    /// Returns the buffer to the idle buffers: the copy using it is known to be over (or was
    /// never enqueued). No driver call.
    pub fn release(mut self) {
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
    fn fill_from_copies_into_the_start_of_the_buffer() {
        let mut backing = vec![0u8; 16];
        let buffer = Pinned {
            ptr: NonNull::new(backing.as_mut_ptr()).unwrap(),
            capacity: backing.len(),
        };
        let src = [1u8, 2, 3, 4, 5];
        // SAFETY: `backing` is writable and outlives `buffer`; `src` is readable and disjoint.
        unsafe { buffer.fill_from(src.as_ptr(), src.len()) };
        assert_eq!(&backing[..5], &src);
        assert!(backing[5..].iter().all(|&b| b == 0));
    }

    #[test]
    #[should_panic(expected = "staging")]
    fn fill_from_refuses_more_than_the_capacity() {
        let mut backing = vec![0u8; 4];
        let buffer = Pinned {
            ptr: NonNull::new(backing.as_mut_ptr()).unwrap(),
            capacity: backing.len(),
        };
        let src = [0u8; 8];
        // SAFETY: as above; the length check fires before anything is copied.
        unsafe { buffer.fill_from(src.as_ptr(), src.len()) };
    }

    #[test]
    fn a_returned_buffer_is_reused_by_the_next_staging() {
        // What a write's host function does: hand the buffer back, then the next take reuses it.
        let pool = Arc::new(StagingPool::default());
        let give_back = {
            let pool = pool.clone();
            let buffer = fake(capacity_for(100));
            move || pool.give(buffer)
        };
        assert!(pool.take(100).is_none());
        give_back();
        assert_eq!(pool.take(100).unwrap().capacity, MIN_BUFFER);
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
    fn retired_buffers_are_reused_before_anything_is_allocated() {
        let pool = StagingPool::default();
        assert!(pool.take_unused(1).is_none(), "an empty pool");
        // Nine idle buffers: trimming retires the largest beyond the limit of eight.
        for i in 0..9 {
            pool.give(fake(MIN_BUFFER << i));
        }
        pool.trim();
        assert_eq!(pool.counts(), (8, 1, 0));
        // Only the retired buffer is large enough: it is handed out instead of a new one.
        let big = pool
            .take_unused(MIN_BUFFER << 8)
            .expect("the retired buffer");
        assert_eq!(big.capacity, MIN_BUFFER << 8);
        assert_eq!(pool.counts(), (8, 0, 0));
        // Nothing fits: none, and the retired buffers stay unused in the pool.
        pool.give(big);
        pool.trim();
        assert!(pool.take_unused(MIN_BUFFER << 9).is_none());
        pool.trim();
        assert_eq!(pool.counts(), (8, 1, 0));
        assert_eq!(pool.drain().len(), 9);
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
