//! A fixed number of tiny inline dispatch round trips, for counting instructions with callgrind
//! (`scripts/profile-cost.sh`): `profile_cost off|on [ROUND_TRIPS] [inline|pool]`.

use futures::executor::block_on;
use halcyon::{BufferParams, EntryPoint};
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode, RustKernels};

fn main() -> halcyon::Result<()> {
    let mut args = std::env::args().skip(1);
    let on = args.next().as_deref() == Some("on");
    let round_trips: u32 = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let mode = match args.next().as_deref() {
        Some("pool") => ExecutionMode::Pool { workers: 2 },
        _ => ExecutionMode::Inline,
    };
    let device = halcyon_cpu::create_device(CpuDeviceOptions::default().with_mode(mode))?;
    let kernels = RustKernels::new().entry(
        EntryPoint {
            name: "add".into(),
            workgroup_size: [256, 1, 1],
            binding_count: 3,
            constant_count: 0,
        },
        |ctx| {
            let (a, b) = (ctx.binding::<f32>(0)?, ctx.binding::<f32>(1)?);
            for ((c, a), b) in ctx.chunk_mut::<f32>(2, 256)?.iter_mut().zip(a).zip(b) {
                *c = a + b;
            }
            Ok(())
        },
    );
    let add = device.load_executable(&kernels.spec())?.kernel("add")?;
    let buffers = (0..3)
        .map(|_| device.allocator().allocate(1024, BufferParams::DEVICE))
        .collect::<halcyon::Result<Vec<_>>>()?;
    let launch = add
        .launch([1, 1, 1])
        .bindings(buffers.iter().map(|b| b.whole()));
    let queue = device.queue(0)?;
    let timeline = queue.timeline()?;
    device.profiler().set_limit(1024); // profiler
    if on {
        device.profiler().enable(); // profiler
    }
    for _ in 0..round_trips {
        block_on(queue.dispatch(timeline.next(), &launch))?;
    }
    Ok(())
}
