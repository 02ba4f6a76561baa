//! The standard kernels as CUDA modules, and device helpers that skip without a GPU.

#![allow(dead_code)]

use halcyon::{Device, EntryPoint, Executable, Result, StatusCode};
use halcyon_conformance::kernels;
use halcyon_cuda::CudaModule;

/// CUDA C of the standard kernels (and `empty`).
pub const STANDARD_CU: &str = include_str!("../kernels/standard.cu");
/// The PTX for [`STANDARD_CU`]: the tests load this, so they need no libnvrtc. NVRTC 12.8's
/// output with [`STANDARD_NVRTC_OPTIONS`], passed through [`standard_ptx_from_nvrtc`].
pub const STANDARD_PTX: &str = include_str!("../kernels/standard.ptx");
/// The NVRTC options [`STANDARD_PTX`] is compiled with (`.target sm_52`: every GPU since
/// Maxwell JITs it).
pub const STANDARD_NVRTC_OPTIONS: &[&str] = &["--gpu-architecture=compute_52"];
/// The PTX ISA version of [`STANDARD_PTX`]: CUDA 12.0's, the oldest driver the probe accepts
/// (`probe::MIN_DRIVER_VERSION`). NVRTC writes its own release's ISA (8.7 for 12.8), which a
/// CUDA 12.2 or 12.4 driver (R535, R550) refuses with `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`.
pub const STANDARD_PTX_ISA: &str = "8.0";

/// [`STANDARD_PTX`] from NVRTC's PTX for [`STANDARD_CU`]: the `.version` directive lowered to
/// [`STANDARD_PTX_ISA`], with a comment saying so (one that does not spell the directive:
/// `fatbinary` takes the first `.version` in the text for it). Sound because the kernels use nothing newer
/// (ptxas checks each instruction against the declared ISA: see standard.cu).
pub fn standard_ptx_from_nvrtc(ptx: &str) -> String {
    ptx.split_inclusive('\n')
        .map(|line| match line.trim_end().strip_prefix(".version ") {
            Some(from) => format!(
                "// halcyon: PTX ISA lowered from {from} to {STANDARD_PTX_ISA} (CUDA 12.0's) so every driver \
                 halcyon-cuda accepts\n// can JIT it; checked with ptxas -arch=sm_52, sm_70 and \
                 sm_90. See standard.cu.\n.version {STANDARD_PTX_ISA}\n"
            ),
            None => line.to_string(),
        })
        .collect()
}

/// PTX of `tests/kernels/shared.cu`: `block_sum_u32`, a kernel using dynamic shared memory.
pub const SHARED_PTX: &str = include_str!("../kernels/shared.ptx");

/// `block_sum_u32`'s metadata: 64 threads, bindings `x` and `out`, constants `n` and `words`.
pub fn block_sum() -> EntryPoint {
    EntryPoint {
        name: "block_sum_u32".into(),
        workgroup_size: [64, 1, 1],
        binding_count: 2,
        constant_count: 2,
    }
}

/// [`SHARED_PTX`] with `block_sum_u32` launched with `bytes` of dynamic shared memory.
pub fn shared_module(bytes: u32) -> CudaModule {
    CudaModule::ptx(SHARED_PTX, vec![block_sum()])
        .with_shared_memory("block_sum_u32", bytes)
        .expect("block_sum_u32 is the module's entry point")
}

/// The `empty` kernel's metadata.
pub fn empty() -> EntryPoint {
    EntryPoint {
        name: "empty".into(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 0,
    }
}

/// The standard entry points.
pub fn standard_entry_points() -> Vec<EntryPoint> {
    vec![
        kernels::add_one_u32(),
        kernels::saxpy_f32(),
        kernels::fail(),
    ]
}

/// The standard kernels from the checked-in PTX.
pub fn standard_module() -> CudaModule {
    CudaModule::ptx(STANDARD_PTX, standard_entry_points())
}

/// The conformance [`halcyon_conformance::Kernels`] provider for CUDA.
pub struct CudaKernels;

impl halcyon_conformance::Kernels for CudaKernels {
    fn load(&self, device: &Device) -> Result<Executable> {
        device.load_executable(&standard_module().spec())
    }

    /// The `fail` kernel fails its dispatch through its status word (`fail(unsigned int*
    /// status)` sets it to 1; the stream device checks it on completion), not with a trap or an
    /// illegal address, which would be a sticky fault that kills the device's context and with
    /// it every later test sharing the primary context.
    fn can_fail(&self) -> bool {
        true
    }
}

/// `cuda://0`, or `None` (the reason printed) when there is no usable CUDA device.
pub fn device_or_skip(test: &str) -> Option<Device> {
    match halcyon_cuda::create_device(0) {
        Ok(device) => Some(device),
        Err(e) if e.code() == StatusCode::Unavailable => {
            eprintln!("skipped {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: cannot create cuda://0: {e}"),
    }
}
