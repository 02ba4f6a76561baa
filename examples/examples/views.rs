//! Buffer views in a small two-layer MLP forward pass: `y = relu(x·W1 + b1)·W2 + b2`.
//!
//! The weights and the input are uploaded as typed, shaped views (`BufferView::from_host`);
//! `W2` arrives as PyTorch stores a linear layer's weight, `[out, in]`, and its transpose is
//! packed into a contiguous view on the device (`Queue::copy_view`: a strided copy, no host
//! round trip). A `linear` kernel declares the type and rank of each binding
//! (`Kernel::expecting`) and takes views (`Launch::view`): a Rust kernel on the CPU device,
//! a WGSL compute shader on Vulkan.
//!
//! The pass runs on the CPU device, with the hidden activations moved to `vulkan://0` and
//! back (`BufferView::to`) between the layers. Where a Vulkan device is present it runs
//! again wholly there, its inputs moved from the CPU views with `to`. Each result is checked
//! against a plain Rust computation, a mis-typed binding is shown refused, and the time of
//! each device's pass is printed.
//!
//! Run with `cargo run --release --example views`; it prints `views ok` and exits 0.

use std::time::Instant;

use halcyon::{
    BufferParams, BufferView, Device, ElementType, EntryPoint, ExecutableSpec, Kernel, Queue,
    Timepoints,
};
use halcyon_cpu::RustKernels;

const BATCH: usize = 64;
const INPUT: usize = 128;
const HIDDEN: usize = 256;
const OUTPUT: usize = 10;

/// `y[m, :] = act(x[m, :] · w + b)`, one workgroup per row `m`; constants `k`, `n`, `relu`.
fn linear_kernel() -> RustKernels {
    let entry = EntryPoint {
        name: "linear".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 4,
        constant_count: 3,
    };
    RustKernels::new().entry(entry, |ctx| {
        let (k, n, relu) = match ctx.constants() {
            &[k, n, relu] => (k as usize, n as usize, relu != 0),
            other => return Err(format!("linear takes 3 constants, got {}", other.len())),
        };
        let m = ctx.workgroup_index() as usize;
        let (x, w, b) = (
            ctx.binding::<f32>(0)?,
            ctx.binding::<f32>(1)?,
            ctx.binding::<f32>(2)?,
        );
        let y = ctx.chunk_mut::<f32>(3, n)?;
        let row = &x[m * k..(m + 1) * k];
        for (j, out) in y.iter_mut().enumerate() {
            let dot: f32 = row
                .iter()
                .enumerate()
                .map(|(i, xi)| xi * w[i * n + j])
                .sum();
            let v = dot + b[j];
            *out = if relu { v.max(0.0) } else { v };
        }
        Ok(())
    })
}

/// The same as a compute shader: workgroup `m` computes row `m`, its 64 invocations taking
/// every 64th column.
const LINEAR_WGSL: &str = r#"
struct Shape {
    k: u32,
    n: u32,
    relu: u32,
}
var<push_constant> shape: Shape;
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64, 1, 1)
fn linear(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    let m = group.x;
    for (var j = local.x; j < shape.n; j = j + 64u) {
        var dot = 0.0;
        for (var i = 0u; i < shape.k; i = i + 1u) {
            dot = dot + x[m * shape.k + i] * w[i * shape.n + j];
        }
        var v = dot + b[j];
        if (shape.relu != 0u) {
            v = max(v, 0.0);
        }
        y[m * shape.n + j] = v;
    }
}
"#;

/// The `linear` kernel loaded on `device` (a Rust kernel on the CPU, WGSL elsewhere), with
/// each binding's element type and rank declared.
fn linear(device: &Device, spec: &ExecutableSpec) -> halcyon::Result<Kernel> {
    Ok(device
        .load_executable(spec)?
        .kernel("linear")?
        .expecting(0, ElementType::F32, 2)
        .expecting(1, ElementType::F32, 2)
        .expecting(2, ElementType::F32, 1)
        .expecting(3, ElementType::F32, 2))
}

/// The same in plain Rust.
fn reference(x: &[f32], w: &[f32], b: &[f32], k: usize, n: usize, relu: bool) -> Vec<f32> {
    x.chunks(k)
        .flat_map(|row| {
            (0..n).map(move |j| {
                let v = row
                    .iter()
                    .enumerate()
                    .map(|(i, xi)| xi * w[i * n + j])
                    .sum::<f32>()
                    + b[j];
                if relu {
                    v.max(0.0)
                } else {
                    v
                }
            })
        })
        .collect()
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// Dispatches `linear` of `x` and `w` plus `b` into a new `m × n` view.
async fn layer(
    queue: &Queue,
    linear: &Kernel,
    (x, w, b): (&BufferView, &BufferView, &BufferView),
    relu: bool,
) -> halcyon::Result<BufferView> {
    let (m, k, n) = (x.shape()[0], x.shape()[1], w.shape()[1]);
    let bytes = m * n * 4;
    let buffer = queue
        .device()
        .allocator()
        .allocate(bytes, BufferParams::DEVICE)?;
    let y = BufferView::new(buffer.whole(), ElementType::F32, &[m, n])?;
    let launch = linear
        .launch([m as u32, 1, 1])
        .constants(&[k as u32, n as u32, u32::from(relu)])
        .view(x)
        .view(w)
        .view(b)
        .view(&y);
    queue.dispatch(Timepoints::default(), &launch).await?;
    Ok(y)
}

/// `W2` as a contiguous `[in, out]` view: its `[out, in]` upload, transposed, packed by the
/// device.
async fn packed_transpose(queue: &Queue, w2t: &BufferView) -> halcyon::Result<BufferView> {
    let (out, inner) = (w2t.shape()[0], w2t.shape()[1]);
    let buffer = queue
        .device()
        .allocator()
        .allocate(out * inner * 4, BufferParams::DEVICE)?;
    let w2 = BufferView::new(buffer.whole(), ElementType::F32, &[inner, out])?;
    queue
        .copy_view(Timepoints::default(), &w2t.transpose(0, 1)?, &w2)
        .await?;
    Ok(w2)
}

/// The largest difference between `y` and `expected`, relative to each expected value (or to
/// 1 where it is smaller).
fn worst_error(y: &[f32], expected: &[f32]) -> f32 {
    assert_eq!(y.len(), expected.len());
    (y.iter().zip(expected))
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0.0f32, f32::max)
}

/// The pass on `device`: `x`, `W1`, `b1`, `W2ᵀ` and `b2` moved there from the CPU's queue
/// `from`, `W2` packed, both layers, the output read back.
async fn vulkan_pass(
    from: &Queue,
    device: &Device,
    linear: &Kernel,
    views: [&BufferView; 5],
) -> halcyon::Result<Vec<f32>> {
    let queue = device.queue(0)?;
    let mut moved = Vec::new();
    for view in views {
        let (there, done) = view.to(from, &queue, Timepoints::default())?;
        done.await?;
        moved.push(there);
    }
    let [x, w1, b1, w2t, b2] = <[BufferView; 5]>::try_from(moved).expect("five views");
    let w2 = packed_transpose(&queue, &w2t).await?;
    let hidden = layer(&queue, linear, (&x, &w1, &b1), true).await?;
    let output = layer(&queue, linear, (&hidden, &w2, &b2), false).await?;
    output.to_host(&queue, Timepoints::default()).await
}

#[tokio::main]
async fn main() -> halcyon::Result<()> {
    let cpu = halcyon_cpu::default_device()?;
    let queue = cpu.queue(0)?;
    let linear_cpu = linear(&cpu, &linear_kernel().spec())?;

    // W2 as PyTorch holds it, [out, in]; `w2t_host` is its row-major data.
    let (x, w1, b1, w2, b2) = (
        values(BATCH * INPUT, 1),
        values(INPUT * HIDDEN, 2),
        values(HIDDEN, 3),
        values(HIDDEN * OUTPUT, 4),
        values(OUTPUT, 5),
    );
    let w2t_host: Vec<f32> = (0..OUTPUT)
        .flat_map(|o| (0..HIDDEN).map(|h| w2[h * OUTPUT + o]).collect::<Vec<_>>())
        .collect();
    let expected = reference(
        &reference(&x, &w1, &b1, INPUT, HIDDEN, true),
        &w2,
        &b2,
        HIDDEN,
        OUTPUT,
        false,
    );

    let start = Instant::now();
    let now = Timepoints::default;
    let upload = |data: &[f32], shape: &[u64]| BufferView::from_host(&queue, now(), data, shape);
    let (xv, a) = upload(&x, &[BATCH as u64, INPUT as u64])?;
    let (w1v, b) = upload(&w1, &[INPUT as u64, HIDDEN as u64])?;
    let (b1v, c) = upload(&b1, &[HIDDEN as u64])?;
    let (w2tv, d) = upload(&w2t_host, &[OUTPUT as u64, HIDDEN as u64])?;
    let (b2v, e) = upload(&b2, &[OUTPUT as u64])?;
    for uploaded in [a, b, c, d, e] {
        uploaded.await?;
    }
    let w2v = packed_transpose(&queue, &w2tv).await?;
    let uploaded = start.elapsed();

    let start = Instant::now();
    let hidden = layer(&queue, &linear_cpu, (&xv, &w1v, &b1v), true).await?;
    let first = start.elapsed();

    // The activations go to Vulkan and back, when there is a Vulkan device.
    let vulkan = halcyon_vulkan::create_device(0);
    let start = Instant::now();
    let (hidden, trip) = match &vulkan {
        Ok(vulkan) => {
            let vq = vulkan.queue(0)?;
            let (on_vulkan, there) = hidden.to(&queue, &vq, now())?;
            there.await?;
            let (back, here) = on_vulkan.to(&vq, &queue, now())?;
            here.await?;
            (back, format!("to {} and back", vulkan.info().id))
        }
        Err(e) => (hidden, format!("no Vulkan device ({e}); stayed on the CPU")),
    };
    let moved = start.elapsed();

    let start = Instant::now();
    let output = layer(&queue, &linear_cpu, (&hidden, &w2v, &b2v), false).await?;
    let y: Vec<f32> = output.to_host(&queue, now()).await?;
    let second = start.elapsed();
    let cpu_total = uploaded + first + moved + second;

    let worst = worst_error(&y, &expected);
    assert_eq!(output.shape(), &[BATCH as u64, OUTPUT as u64]);
    assert!(
        worst < 1e-4,
        "the MLP's output is off by {worst} (relative)"
    );

    // A transposed input is a strided view: the kernel's declared binding refuses it.
    let refused = layer(
        &queue,
        &linear_cpu,
        (&w1v.transpose(0, 1)?, &w2v, &b2v),
        true,
    )
    .await;
    let refused = refused.expect_err("a strided input must be refused");
    assert_eq!(refused.code(), halcyon::StatusCode::InvalidArgument);

    println!(
        "{}: upload and pack {uploaded:.2?}, layer 1 {first:.2?}, layer 2 and read back \
         {second:.2?}; pass {cpu_total:.2?}",
        cpu.info().id
    );
    println!("hidden activations {trip}: {moved:.2?}");

    // The whole pass on Vulkan, from the CPU's views: twice, the first loading the gather
    // kernel.
    if let Ok(vulkan) = &vulkan {
        let linear_vulkan = linear(
            vulkan,
            &ExecutableSpec::bytes("wgsl", LINEAR_WGSL.as_bytes()),
        )?;
        let cpu_views = [&xv, &w1v, &b1v, &w2tv, &b2v];
        let mut passes = Vec::new();
        for _ in 0..2 {
            let start = Instant::now();
            let y = vulkan_pass(&queue, vulkan, &linear_vulkan, cpu_views).await?;
            passes.push(start.elapsed());
            let worst_vulkan = worst_error(&y, &expected);
            assert!(
                worst_vulkan < 1e-4,
                "the MLP's output on {} is off by {worst_vulkan} (relative)",
                vulkan.info().id
            );
        }
        println!(
            "{} ({}): inputs moved from the CPU, W2 packed, both layers, read back: pass \
             {:.2?} (loading the gather kernel), then {:.2?}",
            vulkan.info().id,
            vulkan.info().name,
            passes[0],
            passes[1]
        );
    }
    println!("worst relative error {worst:.2e}; a transposed input was refused: {refused}");
    println!("views ok");
    Ok(())
}
