//! Profiles a two-queue pipeline on the CPU device (and on `vulkan://0` when there is one),
//! then writes `DIR/trace.json` (open it in <https://ui.perfetto.dev> or `chrome://tracing`),
//! `DIR/timeline.svg` (open it in a browser) and `DIR/operations.jsonl`.
//!
//! Run with `cargo run --release --example trace -- DIR`.
//!
//! On each device, queue 0 uploads `x` and runs saxpy rounds on its half of `y` while queue 1
//! fills and runs rounds on the other half; then queue 1 copies queue 0's half once queue 0's
//! timeline says it is done (a cross-queue dependency) and reads everything back. The devices
//! run at once, and the Vulkan device's copy also waits for the CPU device's pipeline (a
//! cross-device dependency). A one-queue device (lavapipe has one) uses queue 0 for both.

use std::path::PathBuf;

use halcyon::profile::{DeviceProfile, Profile};
use halcyon::{
    BufferParams, Device, DriverRegistry, EntryPoint, Executable, Kernel, Result, Semaphore,
};
use halcyon_cpu::{CpuDeviceOptions, RustKernels};

const N: usize = 1 << 20;
const WORKGROUP: u32 = 256;
const ROUNDS: usize = 4;

const SAXPY_WGSL: &str = r#"
struct Params { a: f32, n: u32 }
var<push_constant> params: Params;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256, 1, 1)
fn saxpy(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i < params.n) {
        y[i] = params.a * x[i] + y[i];
    }
}
"#;

fn saxpy_entry() -> EntryPoint {
    EntryPoint {
        name: "saxpy".into(),
        workgroup_size: [WORKGROUP, 1, 1],
        binding_count: 2,
        constant_count: 2,
    }
}

/// `y = a * x + y` over the first `n` elements, one workgroup per 256.
fn cpu_saxpy(device: &Device) -> Result<Executable> {
    let kernels = RustKernels::new().entry(saxpy_entry(), |ctx| {
        let a = f32::from_bits(ctx.constants()[0]);
        let n = ctx.constants()[1] as usize;
        let start = (ctx.workgroup_index() as usize * WORKGROUP as usize).min(n);
        let x = ctx.binding::<f32>(0)?;
        let y = ctx.chunk_mut::<f32>(1, WORKGROUP as usize)?;
        let end = (start + y.len()).min(n);
        for (yi, xi) in y.iter_mut().zip(&x[start..end]) {
            *yi += a * xi;
        }
        Ok(())
    });
    device.load_executable(&kernels.spec())
}

/// Runs the pipeline on `device` with queues 0 and 1 (queue 0 twice on a one-queue device) and
/// checks the result. With `gate`, queue 1's copy also waits for that semaphore value, so a
/// second device's work can depend on the first's.
async fn pipeline(device: &Device, saxpy: &Kernel, gate: Option<(&Semaphore, u64)>) -> Result<()> {
    let q0 = device.queue(0)?;
    let q1 = device.queue(1.min(device.queue_count() - 1))?;
    let half = N / 2;
    let bytes = |n: usize| (n * 4) as u64;
    let x = device
        .allocator()
        .allocate(bytes(half), BufferParams::DEVICE)?;
    let y = device
        .allocator()
        .allocate(bytes(N), BufferParams::DEVICE)?;
    let out = device
        .allocator()
        .allocate(bytes(half), BufferParams::DEVICE)?;
    // Labels name the tracks and the operations in the trace.
    q0.set_label("left half");
    if q1.index() != q0.index() {
        q1.set_label("right half");
    }
    x.set_label("x");
    y.set_label("y");
    out.set_label("out");
    let (y0, y1) = (y.slice(0..bytes(half))?, y.slice(bytes(half)..bytes(N))?);
    let xs: Vec<f32> = (0..half).map(|i| (i % 1000) as f32).collect();
    let groups = [(half as u32).div_ceil(WORKGROUP), 1, 1];
    let launch = |target| {
        saxpy
            .launch(groups)
            .constant(0.5f32)
            .constant(half as u32)
            .binding(x.whole())
            .binding(target)
    };

    let (t0, t1) = (q0.timeline()?, q1.timeline()?);
    // Queue 0: upload x, zero its half of y, saxpy rounds.
    let mut work = vec![
        q0.write(t0.next(), &xs, &x.whole()),
        q0.fill(t0.next(), 0.0f32, &y0),
    ];
    // Queue 1: its half starts at 1.0; its rounds need x, so they wait for the upload.
    let mut first = t1.next();
    first.wait.insert(t0.semaphore(), 1);
    work.push(q1.fill(first, 1.0f32, &y1));
    for _ in 0..ROUNDS {
        work.push(q0.dispatch(t0.next(), &launch(y0.clone())));
        work.push(q1.dispatch(t1.next(), &launch(y1.clone())));
    }
    // The cross-queue dependency: queue 1 copies queue 0's half once queue 0 is done.
    let mut copy = t1.next();
    copy.wait.insert(t0.semaphore(), t0.last());
    if let Some((semaphore, value)) = gate {
        copy.wait.insert(semaphore, value);
    }
    work.push(q1.copy(copy, &y0, &out.whole()));
    let copied = q1.read::<f32>(t1.next(), &out.whole());
    let second = q1.read::<f32>(t1.next(), &y1);
    for submission in work {
        submission.await?;
    }
    let (copied, second) = (copied.await?, second.await?);
    let rounds = ROUNDS as f32;
    for (i, (c, s)) in copied.iter().zip(&second).enumerate() {
        let xi = (i % 1000) as f32;
        assert_eq!(*c, rounds * 0.5 * xi, "element {i} of queue 0's half");
        assert_eq!(*s, 1.0 + rounds * 0.5 * xi, "element {i} of queue 1's half");
    }
    Ok(())
}

/// Runs the pipeline on every device at once; each later device's copy waits for the first
/// device's pipeline (a cross-device dependency).
async fn run_all(devices: &[(Device, Kernel)]) -> Result<()> {
    let first_done = halcyon::Semaphore::new(0);
    let mut runs = Vec::new();
    for (index, (device, saxpy)) in devices.iter().enumerate() {
        let gate = (index > 0).then_some((&first_done, 1));
        let first_done = &first_done;
        runs.push(async move {
            let result = pipeline(device, saxpy, gate).await;
            if index == 0 {
                match &result {
                    Ok(()) => first_done.signal(1)?,
                    Err(error) => first_done.fail(error.clone()),
                }
            }
            result
        });
    }
    for result in futures::future::join_all(runs).await {
        result?;
    }
    Ok(())
}

/// How long queue `a` and queue `b` of `profile` ran at the same time, and each one's busy
/// time, in nanoseconds (device ranges where reported, else issue to completion).
fn overlap(profile: &DeviceProfile) -> (u64, u64, u64) {
    let ranges = |queue: u32| -> Vec<(u64, u64)> {
        profile
            .operations
            .iter()
            .filter(|op| op.queue == queue)
            .filter_map(|op| {
                op.device_ns
                    .or_else(|| Some((op.issued_ns?, op.completed_ns?)))
            })
            .collect()
    };
    let (a, b) = (ranges(0), ranges(1));
    let busy = |r: &[(u64, u64)]| r.iter().map(|(s, e)| e - s).sum::<u64>();
    let both = a
        .iter()
        .flat_map(|&(s0, e0)| {
            b.iter()
                .map(move |&(s1, e1)| e0.min(e1).saturating_sub(s0.max(s1)))
        })
        .sum();
    (both, busy(&a), busy(&b))
}

#[tokio::main]
async fn main() -> Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "trace".into()));
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;

    let registry = DriverRegistry::new();
    registry.register(std::sync::Arc::new(halcyon_cpu::CpuDriver::new(
        CpuDeviceOptions::default().with_queue_count(2),
    )))?;
    halcyon_vulkan::register(&registry)?;
    let mut devices = vec![registry.create_device("cpu://0")?];
    match registry.create_device("vulkan://0") {
        Ok(device) => devices.push(device),
        Err(error) => println!("vulkan://0: skipped ({error})"),
    }
    let mut loaded = Vec::new();
    for device in devices {
        let executable = match device.info().driver.as_str() {
            "cpu" => cpu_saxpy(&device)?,
            _ => device
                .load_executable(&halcyon_vulkan::SpirvModule::from_wgsl(SAXPY_WGSL)?.spec())?,
        };
        let saxpy = executable.kernel("saxpy")?;
        loaded.push((device, saxpy));
    }

    // One unprofiled run first, so the trace shows steady state (allocations, pipelines).
    run_all(&loaded).await?;
    for (device, _) in &loaded {
        device.profiler().enable();
    }
    run_all(&loaded).await?;
    let mut profile = Profile::new();
    for (device, _) in &loaded {
        device.profiler().disable();
        let recorded = device.profiler().take();
        let (both, busy0, busy1) = overlap(&recorded);
        println!(
            "{} ({}): {} operations on {} queue(s); queue 0 busy {:.2} ms, queue 1 busy {:.2} \
             ms, both at once {:.2} ms",
            recorded.device,
            recorded.name,
            recorded.operations.len(),
            recorded.queues,
            busy0 as f64 / 1e6,
            busy1 as f64 / 1e6,
            both as f64 / 1e6,
        );
        profile.push(recorded);
    }

    for (name, text) in [
        ("trace.json", profile.to_chrome_trace()),
        ("timeline.svg", profile.to_svg()),
        ("operations.jsonl", profile.to_jsonl()),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| io_error(&path, e))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn io_error(path: &std::path::Path, error: std::io::Error) -> halcyon::Error {
    halcyon::Error::new(
        halcyon::StatusCode::Unavailable,
        format!("cannot write {}: {error}", path.display()),
    )
}
