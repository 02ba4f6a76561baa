//! The conformance suite on the CPU device, in both execution modes, with the standard kernels
//! written as Rust kernels; and the multi-device cases on two CPU devices, in both modes.

use std::ops::Range;

use halcyon::{Device, Executable, Result};
use halcyon_conformance::kernels;
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode, RustKernels, WorkgroupContext};

/// The suite's standard kernels as `cpu-rust` kernels.
struct CpuKernels;

impl halcyon_conformance::Kernels for CpuKernels {
    fn load(&self, device: &Device) -> Result<Executable> {
        let spec = RustKernels::new()
            .entry(kernels::add_one_u32(), add_one_u32)
            .entry(kernels::saxpy_f32(), saxpy_f32)
            .entry(kernels::fail(), |_| {
                Err("the conformance suite's 'fail' kernel always fails".into())
            })
            .spec();
        device.load_executable(&spec)
    }
}

/// The global x indices of this workgroup's invocations that are below `n`, or an error if a
/// binding of `len` elements is too short for `n`.
fn invocations(ctx: &WorkgroupContext<'_>, n: usize, len: usize) -> Result<Range<usize>, String> {
    if len < n {
        return Err(format!("n = {n} but a binding holds only {len} elements"));
    }
    let size = ctx.workgroup_size()[0] as usize;
    let start = ctx.workgroup_id()[0] as usize * size;
    Ok(start.min(n)..(start + size).min(n))
}

fn add_one_u32(ctx: &WorkgroupContext<'_>) -> Result<(), String> {
    let n = ctx.constants()[0] as usize;
    let size = ctx.workgroup_size()[0] as usize;
    let len = ctx.binding_len(0) / 4;
    let range = invocations(ctx, n, len)?;
    // The dispatches are one-dimensional, so this workgroup's chunk of `size` elements starts
    // at `range.start`.
    for x in ctx.chunk_mut::<u32>(0, size)?.iter_mut().take(range.len()) {
        *x = x.wrapping_add(1);
    }
    Ok(())
}

fn saxpy_f32(ctx: &WorkgroupContext<'_>) -> Result<(), String> {
    let a = f32::from_bits(ctx.constants()[0]);
    let n = ctx.constants()[1] as usize;
    let size = ctx.workgroup_size()[0] as usize;
    let x = ctx.binding::<f32>(0)?;
    let range = invocations(ctx, n, x.len().min(ctx.binding_len(1) / 4))?;
    let y = ctx.chunk_mut::<f32>(1, size)?;
    for (yi, xi) in y.iter_mut().zip(&x[range]) {
        *yi += a * xi;
    }
    Ok(())
}

/// A worker per core, two queues (so the cross-queue chain case has two to use).
mod pool {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || halcyon_cpu::create_device(
            CpuDeviceOptions::default()
                .with_mode(ExecutionMode::Pool { workers: 0 })
                .with_queue_count(2)
        ),
        CpuKernels
    );
}

/// Work runs on the thread that issues it.
mod inline {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || halcyon_cpu::create_device(CpuDeviceOptions::default().with_mode(ExecutionMode::Inline)),
        CpuKernels
    );
}

/// Two devices of the pool configuration (each with its own reactor and worker pool).
mod pool_pair {
    use super::*;

    fn device() -> Result<Device> {
        halcyon_cpu::create_device(
            CpuDeviceOptions::default()
                .with_mode(ExecutionMode::Pool { workers: 0 })
                .with_queue_count(2),
        )
    }

    halcyon_conformance::multi_device_tests!(|| Ok((device()?, device()?)), CpuKernels);
}

/// Two inline devices: work runs on the thread that issues it, which for work released by the
/// other device is this device's reactor thread.
mod inline_pair {
    use super::*;

    fn device() -> Result<Device> {
        halcyon_cpu::create_device(CpuDeviceOptions::default().with_mode(ExecutionMode::Inline))
    }

    halcyon_conformance::multi_device_tests!(|| Ok((device()?, device()?)), CpuKernels);
}
