//! The flag-write strategy's words: one per queue in a slab of the API's pinned host memory,
//! which the device writes after each submission (`StreamApi::write_value32`) and the scanner
//! thread reads (see [`crate::flags`] for the protocol).
//!
//! Each word has a cache line of its own, so the device's write to one queue's word does not
//! invalidate the line the scanner reads for another's. The slab lives as long as the device's
//! core and is freed after its streams were destroyed, unless a stream may still write into it
//! (a synchronisation failed at shutdown): then it is leaked, like the pinned leases.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::api::{DevicePtr, MemoryPlacement, StreamApi};
use crate::flags::{Flags, Words};
use halcyon::{Error, Result, StatusCode};

/// Bytes between two queues' words: a cache line.
const STRIDE: usize = 64;

/// The slab's words as the host reads them.
pub(crate) struct SlabWords {
    host: NonNull<u8>,
}

// SAFETY: the slab is pinned host memory the core owns for its whole life; the words in it are
// only accessed atomically (by the host) or by the device's write-value operations.
unsafe impl Send for SlabWords {}
// SAFETY: as for `Send`: shared access is atomic loads only.
unsafe impl Sync for SlabWords {}

impl SlabWords {
    fn word(&self, lane: usize) -> &AtomicU32 {
        // SAFETY: `lane` is below the lane count the slab was allocated for (the flags only
        // pass their own lanes), so the word lies within the allocation, 4-aligned (the slab
        // is at least 256-aligned, the stride 64); the allocation outlives `self`, and the word
        // is only accessed atomically by the host.
        unsafe { AtomicU32::from_ptr(self.host.as_ptr().add(lane * STRIDE).cast()) }
    }
}

impl Words for SlabWords {
    fn read(&self, lane: usize) -> u32 {
        self.word(lane).load(Ordering::Acquire)
    }
}

/// A device's completion flags: the protocol over the slab, and the scanner's timing.
pub(crate) struct DeviceFlags {
    pub(crate) flags: Flags<SlabWords>,
    slab: DevicePtr,
    /// How long the scanner keeps scanning after its last progress.
    pub(crate) spin: Duration,
    /// How often it scans beyond that while work is pending.
    pub(crate) poll: Duration,
}

impl DeviceFlags {
    /// Allocates the slab for `lanes` queues and zeroes its words.
    pub(crate) fn new<A: StreamApi>(
        api: &A,
        lanes: usize,
        spin: Duration,
        poll: Duration,
    ) -> Result<Self> {
        let bytes = (lanes.max(1) * STRIDE) as u64;
        let slab = api
            .allocate(bytes, MemoryPlacement::Pinned)
            .map_err(|e| e.context("cannot allocate the pinned words of flag-write completion"))?;
        let Some(host) = api.host_pointer(slab) else {
            let _ = api.free(slab);
            return Err(Error::new(
                StatusCode::Unimplemented,
                "the API's pinned memory has no host address, which flag-write completion \
                 needs; use CompletionStrategy::CompletionThread",
            ));
        };
        let words = SlabWords { host };
        for lane in 0..lanes {
            words.word(lane).store(0, Ordering::Release);
        }
        Ok(DeviceFlags {
            flags: Flags::new(words, lanes),
            slab,
            spin,
            poll,
        })
    }

    /// Where the device writes queue `lane`'s word.
    pub(crate) fn word(&self, lane: usize) -> DevicePtr {
        self.slab.offset((lane * STRIDE) as u64)
    }

    /// Frees the slab if no stream can still write into it (`finished`), else leaks it.
    pub(crate) fn free<A: StreamApi>(&self, api: &A, finished: bool) {
        if finished {
            let _ = api.free(self.slab);
        }
    }
}
