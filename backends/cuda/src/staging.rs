//! Pinned staging buffers for host↔device copies.
//!
//! `cuMemcpyDtoHAsync` into *pageable* host memory (a `Vec`, which is what the stream layer
//! hands a queue read) is synchronous: per CUDA's "API synchronization behavior" it returns
//! only once the copy has completed, that is after everything enqueued before it on the stream.
//! The thread issuing a submission is an executor thread or the reactor, which must never block
//! on the device. So `CudaApi::copy_device_to_host_async` copies into pinned memory
//! (`cuMemAllocHost`, truly asynchronous) and enqueues a host function after the copy that moves
//! the bytes to the caller's memory and returns the pinned buffer to this pool. The work
//! enqueued after it (the submission's completion event) waits for the host function, so the
//! bytes are in place when the event completes.
//!
//! Writes are staged the same way. `cuMemcpyHtoDAsync` from pageable memory may also wait for
//! the stream while the driver stages the bytes, so `CudaApi::copy_host_to_device_async` copies
//! the caller's bytes into a pooled pinned buffer at enqueue time (they are valid then, per the
//! trait's safety contract), enqueues the copy from it, and then a host function that only
//! returns the buffer to this pool once the stream has passed the copy. (Sources are always
//! staged: the API keeps no registry telling which host pointers are already pinned or
//! managed.) On a stream being captured into a graph, writes instead use a pinned copy kept
//! until the API is dropped, and reads are refused (host functions run once, a graph replays).
//!
//! The pool itself only holds buffers and chooses among them; allocating and freeing
//! (`cuMemAllocHost` / `cuMemFreeHost`) is done by the API on its own threads, because a host
//! function runs on a CUDA thread that may not call CUDA: it only [`StagingPool::give`]s back.
//! At most [`MAX_BUFFERS`] buffers and [`MAX_BYTES`] bytes are kept idle.

use std::ptr::NonNull;
use std::sync::Mutex;

/// Idle buffers kept at most.
pub(crate) const MAX_BUFFERS: usize = 8;
/// Idle bytes kept at most.
pub(crate) const MAX_BYTES: usize = 64 << 20;
/// The smallest buffer allocated (small reads share sizes this way).
pub(crate) const MIN_BUFFER: usize = 64 << 10;

/// A pinned host buffer from `cuMemAllocHost`. Not freed on drop: freeing calls CUDA, which the
/// CUDA thread that may drop one (a host function) must not do. Buffers are freed by the API
/// (from [`StagingPool::excess`] and [`StagingPool::drain`]); one dropped any other way (only
/// when a host function is dropped unrun, after a device fault) is reclaimed when the CUDA
/// context is destroyed.
#[derive(Debug)]
pub(crate) struct Pinned {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) capacity: usize,
}

// SAFETY: a `Pinned` owns its host allocation exclusively; page-locked host memory may be used
// from any thread.
unsafe impl Send for Pinned {}

impl Pinned {
    /// Copies `len` bytes from `src` into the start of the buffer.
    ///
    /// # Safety
    /// `src..src+len` must be readable and must not overlap the buffer; the buffer must not be
    /// in use by a copy in flight.
    ///
    /// # Panics
    /// If `len` exceeds the buffer's capacity.
    pub(crate) unsafe fn fill_from(&self, src: *const u8, len: usize) {
        assert!(
            len <= self.capacity,
            "{len} bytes into {} of staging",
            self.capacity
        );
        // SAFETY: the buffer holds `capacity >= len` bytes; the caller guarantees the source
        // is readable, disjoint, and that nothing else uses the buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, self.ptr.as_ptr(), len) };
    }
}

/// The size to allocate for a read of `len` bytes: a power of two, at least [`MIN_BUFFER`].
pub(crate) fn capacity_for(len: usize) -> usize {
    len.max(MIN_BUFFER)
        .checked_next_power_of_two()
        .unwrap_or(len)
}

/// Idle pinned buffers.
#[derive(Debug, Default)]
pub(crate) struct StagingPool {
    idle: Mutex<Vec<Pinned>>,
}

impl StagingPool {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Pinned>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The smallest idle buffer of at least `len` bytes, if any.
    pub(crate) fn take(&self, len: usize) -> Option<Pinned> {
        let mut idle = self.idle();
        let best = idle
            .iter()
            .enumerate()
            .filter(|(_, p)| p.capacity >= len)
            .min_by_key(|(_, p)| p.capacity)
            .map(|(i, _)| i)?;
        Some(idle.swap_remove(best))
    }

    /// Returns a buffer (called from host functions: no CUDA calls here).
    pub(crate) fn give(&self, buffer: Pinned) {
        self.idle().push(buffer);
    }

    /// Removes the largest idle buffers until at most [`MAX_BUFFERS`] and [`MAX_BYTES`] remain;
    /// the caller frees what is returned.
    pub(crate) fn excess(&self) -> Vec<Pinned> {
        let mut idle = self.idle();
        let mut out = Vec::new();
        idle.sort_by_key(|p| p.capacity);
        while idle.len() > MAX_BUFFERS || idle.iter().map(|p| p.capacity).sum::<usize>() > MAX_BYTES
        {
            match idle.pop() {
                Some(p) => out.push(p),
                None => break,
            }
        }
        out
    }

    /// Removes every idle buffer (the caller frees them).
    pub(crate) fn drain(&self) -> Vec<Pinned> {
        std::mem::take(&mut *self.idle())
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
        // SAFETY: `src` is readable and disjoint from `backing`, which outlives `buffer`.
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
    fn a_returned_write_buffer_is_reused_by_the_next_staging() {
        // What a write's host function does: hand the buffer back, then the next take reuses it.
        let pool = std::sync::Arc::new(StagingPool::default());
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
    fn excess_trims_count_and_bytes_largest_first() {
        let pool = StagingPool::default();
        for _ in 0..10 {
            pool.give(fake(MIN_BUFFER));
        }
        assert_eq!(pool.excess().len(), 2);
        pool.give(fake(MAX_BYTES));
        let trimmed = pool.excess();
        assert_eq!(trimmed.len(), 1);
        assert_eq!(trimmed[0].capacity, MAX_BYTES);
        assert_eq!(pool.drain().len(), MAX_BUFFERS);
    }
}
