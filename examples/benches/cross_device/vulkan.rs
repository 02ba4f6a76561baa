//! `cpu_to_vulkan` and `vulkan_to_cpu`: 16 MiB between the CPU device and `vulkan://0`
//! (staged through host memory) against one queue write or read of the same bytes.

use std::sync::Arc;

use criterion::Criterion;
use futures::executor::block_on;
use halcyon::{BufferParams, Timepoints};

use crate::{configured, BYTES};

/// The CPU device and `vulkan://0` (skipped, saying why, without one).
pub fn run(c: &mut Criterion) {
    let cpu = halcyon_cpu::create_device(halcyon_cpu::CpuDeviceOptions::default()).expect("cpu");
    let vulkan = match halcyon_vulkan::create_device(0) {
        Ok(device) => device,
        Err(error) => {
            println!("cross_device cpu/vulkan groups skipped: no vulkan://0: {error}");
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

    let mut group = configured(c, "cpu_to_vulkan");
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

    let mut group = configured(c, "vulkan_to_cpu");
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
}
