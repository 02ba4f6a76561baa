//! `cpu_to_vulkan` and `vulkan_to_cpu`: 16 MiB between the CPU device and `vulkan://0`
//! (staged through host memory) against one queue write or read of the same bytes.
//! `view_to_vulkan_64m`: `BufferView::to` of a 64 MiB f32 view from the CPU device to
//! `vulkan://0` (the new view dropped each time, so its memory comes back from the pool)
//! against the `copy_from` it issues, into a buffer allocated once.

use std::sync::Arc;

use criterion::Criterion;
use futures::executor::block_on;
use halcyon::{BufferParams, BufferView, ElementType, Timepoints};

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

    const VIEW_BYTES: u64 = 64 << 20;
    let source = cpu
        .allocator()
        .allocate(VIEW_BYTES, BufferParams::DEVICE)
        .unwrap();
    let target = vulkan
        .allocator()
        .allocate(VIEW_BYTES, BufferParams::DEVICE)
        .unwrap();
    let view = BufferView::new(source.whole(), ElementType::F32, &[16 << 20]).unwrap();
    let mut group = configured(c, "view_to_vulkan_64m");
    group.bench_function("to", |b| {
        b.iter(|| {
            let (moved, done) = view.to(&cq, &vq, Timepoints::default()).unwrap();
            block_on(done).unwrap();
            drop(moved);
        })
    });
    group.bench_function("copy_from", |b| {
        b.iter(|| {
            let copy = vq.copy_from(Timepoints::default(), &cq, &source.whole(), &target.whole());
            block_on(copy).unwrap()
        })
    });
    group.finish();
}
