//! Spinning before sleeping (a pool worker watching for the next job, an awaited submission
//! watching for its completion) never loses work: whatever the gap between submissions (within
//! the spin, around its end, long after), every submission completes, with the spins on, off,
//! and on one side only.

use std::sync::mpsc;
use std::time::Duration;

use futures::executor::block_on;
use halcyon::{BufferParams, Timepoints};
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode};

/// Gaps between submissions: none, inside a spin, around where it ends, well after.
const GAPS_US: [u64; 6] = [0, 5, 45, 55, 120, 2_000];

/// Submits fills separated by each gap, awaiting each; fails (instead of hanging) if one does
/// not complete within 10 s.
fn every_submission_completes(worker_spin: Duration, completion_spin: Duration) {
    let device = halcyon_cpu::create_device(
        CpuDeviceOptions::default()
            .with_mode(ExecutionMode::Pool { workers: 2 })
            .with_worker_spin(worker_spin),
    )
    .expect("device");
    device.set_completion_spin(completion_spin);
    assert_eq!(device.completion_spin(), completion_spin);
    let (done, finished) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let queue = device.queue(0).expect("queue");
        let buffer = (device.allocator())
            .allocate(1024, BufferParams::DEVICE)
            .expect("allocate");
        let timeline = queue.timeline().expect("timeline");
        for (round, gap) in GAPS_US.iter().cycle().take(60).enumerate() {
            std::thread::sleep(Duration::from_micros(*gap));
            block_on(queue.fill(timeline.next(), round as u8, &buffer.whole())).expect("fill");
            // Some without a timeline wait too, and one awaited only after a second is queued.
            let a = queue.fill(Timepoints::default(), 1u8, &buffer.whole());
            let b = queue.fill(timeline.next(), 2u8, &buffer.whole());
            block_on(b).expect("second");
            block_on(a).expect("first");
        }
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| {
            panic!(
                "a submission never completed (worker spin {worker_spin:?}, completion spin \
                 {completion_spin:?})"
            )
        });
    worker.join().expect("submitting thread");
}

#[test]
fn both_spins() {
    every_submission_completes(Duration::from_micros(50), Duration::from_micros(20));
}

#[test]
fn worker_spin_only() {
    every_submission_completes(Duration::from_micros(50), Duration::ZERO);
}

#[test]
fn completion_spin_only() {
    every_submission_completes(Duration::ZERO, Duration::from_micros(20));
}

#[test]
fn no_spin() {
    every_submission_completes(Duration::ZERO, Duration::ZERO);
}

/// The backend's default: the pool device spins, the inline one has nothing to wait for.
#[test]
fn defaults_follow_the_mode() {
    let pool = halcyon_cpu::default_device().expect("pool device");
    assert_eq!(pool.completion_spin(), halcyon_cpu::DEFAULT_COMPLETION_SPIN);
    let inline =
        halcyon_cpu::create_device(CpuDeviceOptions::default().with_mode(ExecutionMode::Inline))
            .expect("inline device");
    assert_eq!(inline.completion_spin(), Duration::ZERO);
}
