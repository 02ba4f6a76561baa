//! Spinning before sleeping, A/B from one build: the tiny dispatch round trip (a 256-element
//! add, one workgroup) on the pool device with each combination of the two spins, and what an
//! awaiting thread pays when the work is longer than its budget.
//!
//! * `worker`: [`CpuDeviceOptions::worker_spin`], a pool worker watching for the next job
//!   before it sleeps (the submission then starts without waking a thread);
//! * `await`: [`halcyon::Device::set_completion_spin`], the awaited submission watching for its
//!   completion on its first poll (the awaiting thread then is not woken).
//!
//! Ids: `tiny_spin/worker_{0,50us}/await_{0,20us}/{block_on,tokio}`, and
//! `long_spin/await_{0,20us}`: a 1 ms host call awaited, timing the awaiting thread's CPU time
//! (what an executor thread pays for a spin that finds nothing). Run with
//! `cargo bench -p halcyon-cpu --bench spin` (about a minute).

// `criterion_group!` defines the group's function without a doc comment.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use futures::executor::block_on;
use halcyon::Timepoints;
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode};

#[path = "../tests/common/tiny_add.rs"]
mod tiny_add;

use tiny_add::tiny_add;
const WORKER: [(&str, Duration); 2] = [("0", Duration::ZERO), ("50us", Duration::from_micros(50))];
const AWAIT: [(&str, Duration); 2] = [("0", Duration::ZERO), ("20us", Duration::from_micros(20))];

fn device(worker_spin: Duration) -> halcyon::Device {
    halcyon_cpu::create_device(
        CpuDeviceOptions::default()
            .with_mode(ExecutionMode::Pool { workers: 0 })
            .with_worker_spin(worker_spin),
    )
    .expect("device")
}

fn tiny_spin(c: &mut Criterion) {
    let mut group = c.benchmark_group("tiny_spin");
    group
        .sample_size(40)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (worker_name, worker_spin) in WORKER {
        let device = device(worker_spin);
        let (launch, _buffers) = tiny_add(&device);
        let queue = device.queue(0).expect("queue");
        let timeline = queue.timeline().expect("timeline");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("tokio runtime");
        for (await_name, await_spin) in AWAIT {
            device.set_completion_spin(await_spin);
            let id = format!("worker_{worker_name}/await_{await_name}");
            group.bench_function(format!("{id}/block_on"), |b| {
                b.iter(|| block_on(queue.dispatch(timeline.next(), &launch)).expect("dispatch"))
            });
            group.bench_function(format!("{id}/tokio"), |b| {
                b.iter_custom(|iters| {
                    runtime.block_on(async {
                        let start = Instant::now();
                        for _ in 0..iters {
                            let step = timeline.next();
                            queue.dispatch(step, &launch).await.expect("dispatch");
                        }
                        start.elapsed()
                    })
                })
            });
        }
    }
    group.finish();
}

/// The calling thread's CPU time.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_THREAD_CPUTIME_ID exists on every Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn long_spin(c: &mut Criterion) {
    let mut group = c.benchmark_group("long_spin");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(200))
        .measurement_time(Duration::from_secs(2));
    let device = device(Duration::ZERO);
    let queue = device.queue(0).expect("queue");
    for (await_name, await_spin) in AWAIT {
        device.set_completion_spin(await_spin);
        group.bench_function(format!("await_{await_name}"), |b| {
            b.iter_custom(|iters| {
                let mut busy = Duration::ZERO;
                for _ in 0..iters {
                    let submission = queue.host_call(Timepoints::default(), || {
                        std::thread::sleep(Duration::from_millis(1));
                        Ok(())
                    });
                    let start = thread_cpu_time();
                    block_on(submission).expect("host call");
                    busy += thread_cpu_time() - start;
                }
                busy
            })
        });
    }
    group.finish();
}

criterion_group!(benches, tiny_spin, long_spin);
criterion_main!(benches);
