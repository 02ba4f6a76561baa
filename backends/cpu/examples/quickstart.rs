//! The CPU pipeline: allocate, upload, dispatch saxpy, read back, check, all awaited in tokio and
//! ordered by one queue timeline (semaphores underneath).
//!
//! Run with `cargo run --example quickstart`.

use std::time::Instant;

use halcyon::{BufferParams, DriverRegistry, EntryPoint};
use halcyon_cpu::RustKernels;

const N: usize = 1 << 20;
const WORKGROUP: u32 = 256;

#[tokio::main]
async fn main() -> halcyon::Result<()> {
    let registry = DriverRegistry::new();
    halcyon_cpu::register(&registry)?;
    let device = registry.create_device("cpu://0")?;
    let queue = device.queue(0)?;
    println!("device: {} ({})", device.info().name, device.info().id);

    // y = a * x + y, one workgroup per 256 elements.
    let kernels = RustKernels::new().entry(
        EntryPoint {
            name: "saxpy".into(),
            workgroup_size: [WORKGROUP, 1, 1],
            binding_count: 2,
            constant_count: 2,
        },
        |ctx| {
            let a = f32::from_bits(ctx.constants()[0]);
            let n = ctx.constants()[1] as usize;
            let start = (ctx.workgroup_index() as usize * WORKGROUP as usize).min(n);
            // x is only read; each workgroup writes its own chunk of y, y[start..start + 256]:
            // no `unsafe`, and the views make sure no two workgroups alias.
            let x = ctx.binding::<f32>(0)?;
            let y = ctx.chunk_mut::<f32>(1, WORKGROUP as usize)?;
            let end = (start + y.len()).min(n);
            for (yi, xi) in y.iter_mut().zip(&x[start..end]) {
                *yi += a * xi;
            }
            Ok(())
        },
    );
    let saxpy = device.load_executable(&kernels.spec())?.kernel("saxpy")?;

    let t0 = Instant::now();
    let bytes = (N * 4) as u64;
    let x = device.allocator().allocate(bytes, BufferParams::DEVICE)?;
    let y = device.allocator().allocate(bytes, BufferParams::DEVICE)?;
    let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();

    // Every step waits for the previous one on the queue's timeline.
    let timeline = queue.timeline()?;
    let upload = queue.write(timeline.next(), &xs, &x.whole());
    let init = queue.fill(timeline.next(), 1.0f32, &y.whole());
    let groups = (N as u32).div_ceil(WORKGROUP);
    let dispatch = queue.dispatch(
        timeline.next(),
        &saxpy
            .launch([groups, 1, 1])
            .constant(2.0f32)
            .constant(N as u32)
            .binding(x.whole())
            .binding(y.whole()),
    );
    let readback = queue.read::<f32>(timeline.next(), &y.whole());
    println!("submitted 4 operations in {:?}", t0.elapsed());

    upload.await?;
    init.await?;
    dispatch.await?;
    let ys = readback.await?;
    let elapsed = t0.elapsed();

    let wrong = ys
        .iter()
        .enumerate()
        .filter(|(i, &y)| y != 2.0 * *i as f32 + 1.0)
        .count();
    println!(
        "saxpy over {N} f32: y[1] = {}, y[{}] = {}, {wrong} wrong, in {elapsed:?} (timeline at {})",
        ys[1],
        N - 1,
        ys[N - 1],
        timeline.semaphore().query()?
    );
    println!("allocator: {:?}", device.allocator().stats());
    if wrong != 0 {
        return Err(halcyon::Error::new(
            halcyon::StatusCode::DataLoss,
            format!("{wrong} results are wrong"),
        ));
    }
    Ok(())
}
