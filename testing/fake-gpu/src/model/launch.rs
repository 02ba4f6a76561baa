//! Kernel launches: the grid and block checks, and the launch enqueued with its arguments.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use CUresult::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED};

use crate::model::contract::{check_same_device, violation, Ret};
use crate::model::driver::driver;
use crate::model::kernels::{Kernel, Launch, MAX_BLOCK_THREADS};
use crate::model::ops::Op;
use crate::model::stream::Stream;

/// An API's launch limits.
pub(crate) struct Limits {
    /// The largest grid in y and z.
    pub grid_yz: u32,
    /// The largest block in z.
    pub block_z: u32,
    /// The most dynamic shared memory (`None`: the kernel's own limit, which
    /// `cuFuncSetAttribute` raises).
    pub shared: Option<u32>,
    /// Whether a block larger than the kernel's own limit (`.maxntid`, registers) is
    /// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`.
    pub kernel_threads: bool,
}

/// The shape of a launch: grid and block (x, y, z) and dynamic shared memory in bytes.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_memory_bytes: u32,
}

/// Checks a launch of `kernel` with `shape` against `limits` (`CUDA_ERROR_INVALID_VALUE`;
/// `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` for a block too large for the kernel), refuses
/// `extra` (`CUDA_ERROR_NOT_SUPPORTED`), and enqueues it on `stream`, reading each
/// parameter's value now through `kernel_params` (one pointer per parameter, as CUDA and HIP
/// take them). A kernel the fake cannot run is `CUDA_ERROR_NOT_SUPPORTED` (said on stderr).
///
/// # Safety
/// `kernel_params` must hold one pointer per parameter of `kernel`, each valid for a read of
/// that parameter's size.
pub(crate) unsafe fn launch(
    call: &str,
    kernel: &Arc<Kernel>,
    stream: &Stream,
    shape: Shape,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    limits: &Limits,
) -> Ret {
    // SAFETY: the caller's contract.
    let launch = unsafe {
        prepare(
            call,
            kernel,
            stream.device,
            shape,
            kernel_params,
            extra,
            limits,
        )
    }?;
    stream.enqueue(Op::Kernel(Arc::new(launch)));
    Ok(())
}

/// The launch [`launch`] would enqueue on a stream of device `device`, checked as it checks
/// it: what a graph's kernel node is set to (`cuGraphExecKernelNodeSetParams`).
///
/// # Safety
/// As for [`launch`].
pub(crate) unsafe fn prepare(
    call: &str,
    kernel: &Arc<Kernel>,
    device: u32,
    shape: Shape,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
    limits: &Limits,
) -> Result<Launch, CUresult> {
    let Shape {
        grid,
        block,
        shared_memory_bytes,
    } = shape;
    let threads = block.iter().map(|&n| u64::from(n)).product::<u64>();
    let shared_limit = limits
        .shared
        .unwrap_or_else(|| kernel.max_dynamic_shared.load(Ordering::Relaxed));
    if grid.contains(&0)
        || block.contains(&0)
        || threads > u64::from(MAX_BLOCK_THREADS)
        || block[2] > limits.block_z
        || grid[0] > i32::MAX as u32
        || grid[1] > limits.grid_yz
        || grid[2] > limits.grid_yz
        || shared_memory_bytes > shared_limit
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if limits.kernel_threads && threads > u64::from(kernel.max_threads) {
        // What a driver says to a block too large for the kernel's registers or its
        // `.maxntid`.
        return Err(CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
    }
    if !extra.is_null() {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let function_device = driver().owner(kernel.function);
    check_same_device(call, ("a function", function_device), ("a stream", device))?;
    let Some(native) = kernel.native else {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("halcyon-fake-gpu: cannot run kernel {}\n", kernel.name).as_bytes(),
        );
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    };
    if !kernel.params.is_empty() && kernel_params.is_null() {
        violation(format!(
            "{call}({}): no kernelParams for {} parameters",
            kernel.name,
            kernel.params.len()
        ));
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let args = kernel
        .params
        .iter()
        .enumerate()
        .map(|(i, &(_, size))| {
            let mut bytes = [0u8; 8];
            // SAFETY: the caller's contract; 8 bytes at most for the kernels the fake runs.
            unsafe {
                let p = kernel_params.add(i).read();
                std::ptr::copy_nonoverlapping(p.cast::<u8>(), bytes.as_mut_ptr(), size.min(8));
            }
            u64::from_le_bytes(bytes)
        })
        .collect();
    Ok(Launch {
        kernel: kernel.clone(),
        native,
        grid,
        block,
        shared_memory_bytes,
        args,
    })
}
