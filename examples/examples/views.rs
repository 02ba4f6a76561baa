//! Buffer views in a small two-layer MLP forward pass: `y = relu(x·W1 + b1)·W2 + b2`.
//!
//! The weights and the input are uploaded as typed, shaped views (`BufferView::from_host`);
//! a `linear` kernel on the CPU device declares the type and rank of each binding
//! (`Kernel::expecting`) and takes views (`Launch::view`). The hidden activations move to
//! `vulkan://0` and back (`BufferView::to`) when a Vulkan device is present. The result is
//! checked against a plain Rust computation, and a mis-typed binding is shown refused.
//!
//! Run with `cargo run --release --example views`; it prints `views ok` and exits 0.

use std::time::Instant;

use halcyon::{BufferParams, BufferView, ElementType, EntryPoint, Kernel, Queue, Timepoints};
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

#[tokio::main]
async fn main() -> halcyon::Result<()> {
    let cpu = halcyon_cpu::default_device()?;
    let queue = cpu.queue(0)?;
    let linear = cpu
        .load_executable(&linear_kernel().spec())?
        .kernel("linear")?
        .expecting(0, ElementType::F32, 2)
        .expecting(1, ElementType::F32, 2)
        .expecting(2, ElementType::F32, 1)
        .expecting(3, ElementType::F32, 2);

    let (x, w1, b1, w2, b2) = (
        values(BATCH * INPUT, 1),
        values(INPUT * HIDDEN, 2),
        values(HIDDEN, 3),
        values(HIDDEN * OUTPUT, 4),
        values(OUTPUT, 5),
    );
    let start = Instant::now();
    let now = Timepoints::default;
    let upload = |data: &[f32], shape: &[u64]| BufferView::from_host(&queue, now(), data, shape);
    let (xv, a) = upload(&x, &[BATCH as u64, INPUT as u64])?;
    let (w1v, b) = upload(&w1, &[INPUT as u64, HIDDEN as u64])?;
    let (b1v, c) = upload(&b1, &[HIDDEN as u64])?;
    let (w2v, d) = upload(&w2, &[HIDDEN as u64, OUTPUT as u64])?;
    let (b2v, e) = upload(&b2, &[OUTPUT as u64])?;
    for uploaded in [a, b, c, d, e] {
        uploaded.await?;
    }
    let uploaded = start.elapsed();

    let start = Instant::now();
    let hidden = layer(&queue, &linear, (&xv, &w1v, &b1v), true).await?;
    let first = start.elapsed();

    // The activations go to Vulkan and back, when there is a Vulkan device.
    let vulkan = halcyon_vulkan::create_device(0);
    let start = Instant::now();
    let (hidden, trip) = match vulkan {
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
    let output = layer(&queue, &linear, (&hidden, &w2v, &b2v), false).await?;
    let y: Vec<f32> = output.to_host(&queue, now()).await?;
    let second = start.elapsed();

    let expected = reference(
        &reference(&x, &w1, &b1, INPUT, HIDDEN, true),
        &w2,
        &b2,
        HIDDEN,
        OUTPUT,
        false,
    );
    let worst = (y.iter().zip(&expected))
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0.0f32, f32::max);
    assert_eq!(output.shape(), &[BATCH as u64, OUTPUT as u64]);
    assert!(
        worst < 1e-4,
        "the MLP's output is off by {worst} (relative)"
    );

    // A transposed input is a strided view: the kernel's declared binding refuses it.
    let refused = layer(&queue, &linear, (&w1v.transpose(0, 1)?, &w2v, &b2v), true).await;
    let refused = refused.expect_err("a strided input must be refused");
    assert_eq!(refused.code(), halcyon::StatusCode::InvalidArgument);

    println!(
        "device {}: upload {uploaded:.2?}, layer 1 {first:.2?}, layer 2 and read back {second:.2?}",
        cpu.info().id
    );
    println!("hidden activations {trip}: {moved:.2?}");
    println!("worst relative error {worst:.2e}; a transposed input was refused: {refused}");
    println!("views ok");
    Ok(())
}
