//! 300k cancelled waits leave memory flat.
//!
//! This file holds a single test on purpose: it counts the bytes live on the heap with a global
//! allocator, and other tests running in parallel in the same process would disturb the count.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use common::poll_once;
use futures::future::FutureExt;
use futures::task::noop_waker;
use halcyon::{Fence, Semaphore};

/// The system allocator, counting the bytes currently allocated.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to `System` unchanged; only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::SeqCst)
}

const BATCH: u64 = 100_000;
const BOUND: isize = 64 * 1024;

/// Zero-duration tokio timeouts per batch: each costs a timer-driver tick (about a
/// millisecond), so they are a small share of the batch.
const TIMEOUTS: u64 = 200;

/// One batch: 100k waits registered and abandoned, in four ways.
async fn batch(sems: &[Semaphore], round: u64) {
    let waker = noop_waker();
    let sem_for = |i: u64| &sems[(i % sems.len() as u64) as usize];
    let value_for = |i: u64| 1 + round * BATCH + i;
    let per_kind = (BATCH - TIMEOUTS) / 3;
    for i in 0..per_kind {
        let (sem, value) = (sem_for(i), value_for(i));
        // 1. Polled once by hand with a noop waker, then dropped.
        let mut wait = sem.wait(value);
        assert!(poll_once(&mut wait, &waker).is_pending());
        drop(wait);
        // 2. The losing branch of tokio::select! (polled first, then dropped).
        tokio::select! {
            biased;
            r = sem.wait(value) => panic!("never signalled: {r:?}"),
            () = std::future::ready(()) => {}
        }
        // 3. A fence wait over every semaphore, lost in futures::select!.
        let fence: Fence = sems.iter().map(|s| (s, value)).collect();
        futures::select_biased! {
            r = fence.wait_all().fuse() => panic!("never signalled: {r:?}"),
            () = std::future::ready(()).fuse() => {}
        }
    }
    // 4. tokio::time::timeout with a zero duration (polls the wait once, then drops it).
    for i in 0..BATCH - 3 * per_kind {
        let (sem, value) = (sem_for(i), value_for(i));
        assert!(tokio::time::timeout(Duration::ZERO, sem.wait(value))
            .await
            .is_err());
    }
}

#[test]
fn three_hundred_thousand_cancelled_waits_leave_memory_flat() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let sems: Vec<_> = (0..4).map(|_| Semaphore::new(0)).collect();
    runtime.block_on(async {
        // Warm-up: let lazily allocated runtime and test-harness state settle first.
        batch(&sems, 0).await;
        let warm = live();
        assert!(sems.iter().all(|s| s.waiter_count() == 0));

        // A plain array: the bookkeeping must not allocate between the measurements.
        let mut after = [0isize; 3];
        for round in 1..=3 {
            batch(&sems, round).await;
            assert!(
                sems.iter().all(|s| s.waiter_count() == 0),
                "round {round}: cancelled waits left waiters behind"
            );
            after[round as usize - 1] = live();
        }
        let growth = after[2] - warm;
        assert!(
            growth.abs() < BOUND,
            "300k cancelled waits changed live heap bytes by {growth} (bound {BOUND}); \
             after each batch: {after:?}, before: {warm}"
        );
        assert!(
            after[2] <= after[0],
            "live heap grew between batch 1 ({}) and batch 3 ({})",
            after[0],
            after[2]
        );
    });
    // The semaphores still work.
    sems[0].signal(u64::MAX - 1).unwrap();
    sems[0].wait_blocking(1, None).unwrap();
}
