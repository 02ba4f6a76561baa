//! What profiling costs on the tiny dispatch round trip (the 256-element add).
//!
//! `profile_cost off|on [ROUND_TRIPS] [inline|pool]` runs a fixed number of round trips with
//! the profiler off or on, for counting instructions with callgrind (`scripts/profile-cost.sh`).
//!
//! `profile_cost paired [ROUNDS] [inline|pool]` measures wall time with the two interleaved:
//! each round times a block of round trips off, then the same block on, and the round's
//! ratio is on/off; it prints the median ratio and its quartiles over the rounds. On a shared
//! machine whose speed drifts over seconds, this compares like with like where two separate
//! runs (criterion's `off`, then `on`) would not. The window is `LIMIT` records (default 1024).

use futures::executor::block_on;
use halcyon::profile::Profiler; // profiler
use halcyon::{BufferParams, EntryPoint};
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode, RustKernels};

fn main() -> halcyon::Result<()> {
    let mut args = std::env::args().skip(1);
    let what = args.next().unwrap_or_default();
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
    let limit: usize = std::env::var("LIMIT").map_or(1024, |l| l.parse().unwrap_or(1024)); // profiler
    device.profiler().set_limit(limit); // profiler
    let round_trip = || block_on(queue.dispatch(timeline.next(), &launch));
    if what != "paired" {
        if what == "on" {
            device.profiler().enable(); // profiler
        }
        for _ in 0..round_trips {
            round_trip()?;
        }
        return Ok(());
    }
    // Interleaved blocks of about 5 ms each.
    let block = match mode {
        ExecutionMode::Inline => 2_000,
        _ => 200,
    };
    let time = |on: bool| -> halcyon::Result<f64> {
        let _ = on;
        [Profiler::disable, Profiler::enable][usize::from(on)](device.profiler()); // profiler
        let start = std::time::Instant::now();
        for _ in 0..block {
            round_trip()?;
        }
        Ok(start.elapsed().as_secs_f64() / f64::from(block))
    };
    time(false)?; // warm up, and fill the window
    time(true)?;
    let (mut off, mut ratios) = (Vec::new(), Vec::new());
    // `PAIRED_CONTROL=1` measures off against off: the method's own bias and spread.
    let control = std::env::var("PAIRED_CONTROL").is_ok_and(|v| v == "1");
    for round in 0..round_trips {
        // Alternate which goes first, so that neither gains from its place in the round.
        let (a, b) = if round % 2 == 0 {
            let a = time(false)?;
            (a, time(!control)?)
        } else {
            let b = time(!control)?;
            (time(false)?, b)
        };
        off.push(a);
        ratios.push(b / a);
    }
    let median = |v: &mut Vec<f64>, q: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    };
    println!(
        "{mode:?}: off {:.3} us (median of {} blocks of {block}); on/off median {:.4}, \
         quartiles {:.4} .. {:.4}",
        median(&mut off, 0.5) * 1e6,
        off.len(),
        median(&mut ratios, 0.5),
        median(&mut ratios, 0.25),
        median(&mut ratios, 0.75),
    );
    Ok(())
}
