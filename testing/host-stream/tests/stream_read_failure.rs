//! A queue read whose device-to-host copy fails part way (a staged copy whose later chunk
//! cannot be enqueued): the chunks already enqueued still write the read's host destination,
//! so it must stay allocated until the stream has run them, and the read fails with the
//! copy's error. Likewise when the backend panics after the copy was enqueued (its
//! `record_event` here): the panic fails the read, and the destination stays allocated. The destination is watched through this binary's global allocator: the read's
//! length is an odd size that nothing else here allocates, and a free of that size is
//! recorded.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use halcyon::{BufferParams, Result, StatusCode, Timepoints};
use halcyon_conformance::harness::{assert_error, block_on, done, eventually, upload};
use halcyon_host_stream::HostStreamApi;

#[path = "common/stream.rs"]
mod common;

use common::{device, STRATEGIES};

/// Records frees of blocks of [`WATCHED`] bytes once a test arms it.
struct Watching;

/// The size of the read's destination: above the pinned lease limit (1 MiB), so it is host
/// memory of its own, and odd, so nothing else here frees a block of that size.
const READ_BYTES: usize = (3 << 20) + 4 * 17;
static WATCHED: AtomicUsize = AtomicUsize::new(0);
static FREED: AtomicBool = AtomicBool::new(false);
/// Held by each test: the watch is one for the whole binary.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

// SAFETY: every call is passed to the system allocator unchanged; the bookkeeping only reads
// the layout and stores to atomics (it allocates nothing).
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() == WATCHED.load(Ordering::SeqCst) {
            FREED.store(true, Ordering::SeqCst);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.size() == WATCHED.load(Ordering::SeqCst) {
            FREED.store(true, Ordering::SeqCst);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Watching = Watching;

/// A device over a fresh host API with `strategy`, its queue 0 and a buffer of [`READ_BYTES`]
/// uploaded: the setup both tests share.
fn read_setup(
    strategy: halcyon_stream::CompletionStrategy,
) -> Result<(
    HostStreamApi,
    halcyon::Device,
    halcyon::Queue,
    halcyon::Buffer,
)> {
    let api = HostStreamApi::new();
    let device = device(&api, strategy)?;
    let queue = device.queue(0)?;
    let data: Vec<u8> = (0..READ_BYTES).map(|i| (i % 251) as u8).collect();
    let buffer = block_on(upload(&queue, BufferParams::DEVICE, &data))?;
    Ok((api, device, queue, buffer))
}

/// Starts watching frees of [`READ_BYTES`]-byte blocks.
fn watch_reads() {
    FREED.store(false, Ordering::SeqCst);
    WATCHED.store(READ_BYTES, Ordering::SeqCst);
}

#[test]
fn a_read_whose_copy_fails_part_way_keeps_its_destination_until_the_stream_ran() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for strategy in STRATEGIES {
        let (api, device, queue, buffer) = read_setup(strategy)?;
        let hold = api.hold();
        api.fail_next_read_after_enqueue();
        watch_reads();
        let read = queue.read::<u8>(Timepoints::default(), &buffer.whole());
        // The read was issued (its copy enqueued, then failed) and the stream has not run it:
        // its destination must still be allocated.
        block_on(eventually("the read issued", || {
            common::stat(&device, halcyon_stream::keys::IN_FLIGHT) == 1
        }))?;
        assert!(
            !FREED.load(Ordering::SeqCst),
            "{strategy:?}: the read's destination was freed while its copy was still enqueued"
        );
        drop(hold);
        let result = block_on(done("read", read));
        assert_error(
            result.map(drop),
            StatusCode::Internal,
            &["failed after enqueuing part of it"],
        );
        // Once the stream ran the copy, the destination goes.
        block_on(eventually("the destination freed", || {
            FREED.load(Ordering::SeqCst)
        }))?;
        WATCHED.store(0, Ordering::SeqCst);
    }
    Ok(())
}

#[test]
fn a_backend_panic_after_the_copy_was_enqueued_keeps_the_destination() -> Result<()> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for strategy in STRATEGIES {
        let (api, device, queue, buffer) = read_setup(strategy)?;
        let hold = api.hold();
        api.panic_in_next_record();
        watch_reads();
        // The issue runs on this thread and panics inside; the panic fails the read.
        let read = queue.read::<u8>(Timepoints::default(), &buffer.whole());
        assert!(
            !FREED.load(Ordering::SeqCst),
            "{strategy:?}: the read's destination was freed while its copy was still enqueued"
        );
        // Whatever reuses the memory now must not be written by the stale copy.
        let victim = vec![0u8; READ_BYTES];
        drop(hold);
        // A fill on the same stream, after the held copy: once it completed, the copy ran.
        let small = device.allocator().allocate(4, BufferParams::DEVICE)?;
        block_on(done(
            "fill",
            queue.fill(Timepoints::default(), 0u8, &small.whole()),
        ))?;
        assert!(
            victim.iter().all(|&b| b == 0),
            "{strategy:?}: the stale copy wrote into memory reused after the panic"
        );
        let result = block_on(done("read", read));
        assert_error(result.map(drop), StatusCode::Internal, &["panicked"]);
        WATCHED.store(0, Ordering::SeqCst);
        drop(victim);
    }
    Ok(())
}
