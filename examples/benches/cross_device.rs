//! Copies between devices of two drivers (`Queue::copy_from`) against the least any such copy
//! needs, in the same run: 16 MiB between the CPU device and `vulkan://0` (lavapipe on the VM).
//!
//! * `cpu_to_vulkan/copy_from`: `vulkan_queue.copy_from(cpu_queue, ..)`, awaited: the CPU
//!   device copies into host-visible staging, a host call hands the bytes to a Vulkan queue
//!   write.
//! * `cpu_to_vulkan/write_shared`: the floor, the same bytes already in host memory written to
//!   the Vulkan buffer with one `write_shared`.
//! * `vulkan_to_cpu/copy_from` and `vulkan_to_cpu/read_into`: the other way, against one
//!   `read_into` of the Vulkan buffer into a reused vector.
//!
//! Skipped (and says why) without a Vulkan device.

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput};
use futures::executor::block_on;
use halcyon::{BufferParams, Timepoints};

const BYTES: u64 = 16 << 20;

/// A group of 20 samples over about four seconds, in bytes per second.
fn configured<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Bytes(BYTES));
    group
}

fn main() {
    let cpu = halcyon_cpu::create_device(halcyon_cpu::CpuDeviceOptions::default()).expect("cpu");
    let vulkan = match halcyon_vulkan::create_device(0) {
        Ok(device) => device,
        Err(error) => {
            println!("cross_device bench skipped: no vulkan://0: {error}");
            return;
        }
    };
    let (cq, vq) = (cpu.queue(0).unwrap(), vulkan.queue(0).unwrap());
    let on_cpu = cpu
        .allocator()
        .allocate(BYTES, BufferParams::DEVICE)
        .unwrap();
    let on_vulkan = vulkan
        .allocator()
        .allocate(BYTES, BufferParams::DEVICE)
        .unwrap();
    let bytes: Arc<[u8]> = (0..BYTES).map(|i| (i % 251) as u8).collect();
    block_on(cq.write_shared(Timepoints::default(), bytes.clone(), &on_cpu.whole())).unwrap();

    let mut c = Criterion::default().configure_from_args();
    let mut group = configured(&mut c, "cpu_to_vulkan");
    group.bench_function("copy_from", |b| {
        b.iter(|| {
            let copy = vq.copy_from(
                Timepoints::default(),
                &cq,
                &on_cpu.whole(),
                &on_vulkan.whole(),
            );
            block_on(copy).unwrap()
        })
    });
    group.bench_function("write_shared", |b| {
        b.iter(|| {
            let write = vq.write_shared(Timepoints::default(), bytes.clone(), &on_vulkan.whole());
            block_on(write).unwrap()
        })
    });
    group.finish();

    let mut group = configured(&mut c, "vulkan_to_cpu");
    group.bench_function("copy_from", |b| {
        b.iter(|| {
            let copy = cq.copy_from(
                Timepoints::default(),
                &vq,
                &on_vulkan.whole(),
                &on_cpu.whole(),
            );
            block_on(copy).unwrap()
        })
    });
    let mut reused = Some(Vec::new());
    group.bench_function("read_into", |b| {
        b.iter(|| {
            let buffer = reused.take().unwrap_or_default();
            let read = vq.read_into::<u8>(Timepoints::default(), &on_vulkan.whole(), buffer);
            reused = Some(block_on(read).unwrap());
        })
    });
    group.finish();
    c.final_summary();
}
