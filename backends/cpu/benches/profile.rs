//! What profiling costs on the smallest round trip: the 256-element add of `benches/cpu.rs`
//! (one workgroup), dispatched on a queue timeline and awaited with `block_on`, with the
//! device's profiler off and on, in the same run.
//!
//! Run with `cargo bench --bench profile` (about half a minute). Ids:
//! `tiny_profile/{pool,inline}/{off,on}`. With the profiler on, each operation fills a record
//! and reads the clock three (inline) or four (pool) times; the profiler keeps at most 4096
//! records here, so the steady state includes recycling the oldest, as a profiler left on does.
//!
//! Criterion measures `off`, then `on`: on a shared machine whose speed drifts over seconds
//! (the pool round trip, two thread wake-ups, swings by tens of percent between runs on a VM)
//! the two can differ by more than profiling costs. `cargo run --release -p halcyon-cpu
//! --example profile_cost -- paired 600 pool` interleaves them and gives the ratio with its
//! spread; `scripts/profile-cost.sh` runs both that and a callgrind instruction count (and,
//! for "off costs nothing", compares with a build from before profiling existed).

// `criterion_group!` defines the group's function without a doc comment.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use futures::executor::block_on;
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode};

#[path = "../tests/common/tiny_add.rs"]
mod tiny_add;

use tiny_add::tiny_add;

fn tiny_profile(c: &mut Criterion) {
    let mut group = c.benchmark_group("tiny_profile");
    group
        .sample_size(60)
        .warm_up_time(Duration::from_millis(700))
        .measurement_time(Duration::from_secs(3));
    for (name, mode) in [
        ("pool", ExecutionMode::Pool { workers: 0 }),
        ("inline", ExecutionMode::Inline),
    ] {
        let device = halcyon_cpu::create_device(CpuDeviceOptions::default().with_mode(mode))
            .expect("device");
        let (launch, _buffers) = tiny_add(&device);
        let queue = device.queue(0).expect("queue");
        let timeline = queue.timeline().expect("timeline");
        device.profiler().set_limit(4096);
        for on in [false, true] {
            if on {
                device.profiler().enable();
            } else {
                device.profiler().disable();
            }
            let id = format!("{name}/{}", if on { "on" } else { "off" });
            group.bench_function(id, |b| {
                b.iter(|| block_on(queue.dispatch(timeline.next(), &launch)).expect("dispatch"))
            });
        }
        device.profiler().disable();
        let kept = device.profiler().take();
        assert!(kept.operations.len() <= 4096); // empty when a filter skipped these
    }
    group.finish();
}

criterion_group!(benches, tiny_profile);
criterion_main!(benches);
