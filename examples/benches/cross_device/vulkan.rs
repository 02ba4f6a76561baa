//! `cpu_to_vulkan` and `vulkan_to_cpu`: 16 MiB between the CPU device and `vulkan://0`
//! (staged through host memory) against one queue write or read of the same bytes.
//! `view_to_vulkan_64m`: `BufferView::to` of a 64 MiB f32 view from the CPU device to
//! `vulkan://0` (the new view dropped each time, so its memory comes back from the pool)
//! against the `copy_from` it issues, into a buffer allocated once.
//! `transpose_on_vulkan_16m`: `Queue::copy_view` of a transposed 16 MiB view on `vulkan://0`
//! (the gather shader), f32 and f16, against a device copy of the same bytes (the floor) and
//! the host round trip the copy took before the shader covered it (read back, picked out on
//! the host, written).

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
    transpose(c, &vulkan);
}

/// `transpose_on_vulkan_16m` (see the module docs).
fn transpose(c: &mut Criterion, vulkan: &halcyon::Device) {
    let vq = vulkan.queue(0).unwrap();
    let allocate = || {
        (vulkan.allocator())
            .allocate(BYTES, BufferParams::DEVICE)
            .unwrap()
    };
    let (source, target) = (allocate(), allocate());
    block_on(vq.fill(Timepoints::default(), 0x3c00_4000u32, &source.whole())).unwrap();
    let mut group = configured(c, "transpose_on_vulkan_16m");
    group.bench_function("copy", |b| {
        b.iter(|| {
            block_on(vq.copy(Timepoints::default(), &source.whole(), &target.whole())).unwrap()
        })
    });
    let side = |element: ElementType| {
        let n = BYTES / element.size();
        let rows = 1u64 << (n.ilog2() / 2);
        [rows, n / rows]
    };
    for element in [ElementType::F32, ElementType::F16] {
        let shape = side(element);
        let x = BufferView::new(source.whole(), element, &shape).unwrap();
        let xt = x.transpose(0, 1).unwrap();
        let packed = BufferView::new(target.whole(), element, &[shape[1], shape[0]]).unwrap();
        group.bench_function(format!("copy_view_{element}"), |b| {
            b.iter(|| block_on(vq.copy_view(Timepoints::default(), &xt, &packed)).unwrap())
        });
    }
    let x = BufferView::new(source.whole(), ElementType::F16, &side(ElementType::F16)).unwrap();
    let xt = x.transpose(0, 1).unwrap();
    group.bench_function("host_round_trip_f16", |b| {
        b.iter(|| {
            let picked: Vec<u16> = block_on(xt.to_host_as(&vq, Timepoints::default())).unwrap();
            block_on(vq.write(Timepoints::default(), &picked, &target.whole())).unwrap()
        })
    });
    group.finish();
}
