//! HIP's modules (AMDGPU code objects), functions and kernel launches.

use std::ffi::{c_char, c_uint, c_void};

use cudarc::driver::sys::CUresult;

use super::{call, hipError_t, INVALID_VALUE};
use crate::ffi::{as_ptr, handle, put};
use crate::hsaco;
use crate::model::contract::{current_device, HipNeeds};
use crate::model::launch::{launch, Limits, Shape};
use crate::model::module::{find_function, function, register_named, unload_module};
use crate::model::stream::find_stream;

/// HIP's launch limits: grids at most 65536 high and deep (as ROCm 5.7 on), 64 KiB of
/// dynamic shared memory, any block depth and any block within 1024 threads.
const LIMITS: Limits = Limits {
    grid_yz: 65536,
    block_z: u32::MAX,
    shared: Some(64 << 10),
    kernel_threads: false,
};

/// `hipModuleLoadData`: an AMDGPU code object for gfx900, or an offload bundle holding one,
/// read for its kernels (see [`crate::hsaco`]; why one is refused is said on stderr).
///
/// # Safety
/// HIP's contract for the call: `image` is a complete code object or offload bundle.
#[no_mangle]
pub unsafe extern "C" fn hipModuleLoadData(
    out: *mut *mut c_void,
    image: *const c_void,
) -> hipError_t {
    call("hipModuleLoadData", HipNeeds::Device, || {
        if image.is_null() || out.is_null() {
            return Err(INVALID_VALUE);
        }
        // SAFETY: HIP's contract: a complete code object or offload bundle.
        let names = unsafe { hsaco::code_object(image.cast()) }.and_then(hsaco::kernel_names);
        let names = names.map_err(|(code, why)| {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("halcyon-fake-gpu: hipModuleLoadData: {why}\n").as_bytes(),
            );
            // The refusals are hipErrorInvalidImage (200) and hipErrorNoBinaryForGpu (209).
            if code == 209 {
                CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
            } else {
                CUresult::CUDA_ERROR_INVALID_IMAGE
            }
        })?;
        let module = register_named(&names, current_device());
        // SAFETY: HIP's contract: valid for one hipModule_t.
        unsafe { put(out, as_ptr(module)) }
    })
}

/// `hipModuleUnload`: the module's functions die with it; launches still queued must not run
/// (a violation when they do).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipModuleUnload(m: *mut c_void) -> hipError_t {
    call("hipModuleUnload", HipNeeds::Nothing, || {
        unload_module(handle(m), "hipModuleUnload")
    })
}

/// `hipModuleGetFunction`: `hipErrorNotFound` for a name the module lacks.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipModuleGetFunction(
    out: *mut *mut c_void,
    m: *mut c_void,
    name: *const c_char,
) -> hipError_t {
    call("hipModuleGetFunction", HipNeeds::Nothing, || {
        // SAFETY: HIP's contract: `name` is NUL-terminated.
        let function = unsafe { find_function(handle(m), name, "hipModuleGetFunction") }?;
        // SAFETY: HIP's contract: valid for one hipFunction_t.
        unsafe { put(out, as_ptr(function)) }
    })
}

/// `hipModuleLaunchKernel`: the grid in blocks (as CUDA's), read each parameter's value now
/// through `kernelParams` and run the kernel natively when the stream gets there. Kernels the
/// fake cannot run, and `extra`, are `hipErrorNotSupported`.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    f: *mut c_void,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_memory_bytes: c_uint,
    s: *mut c_void,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> hipError_t {
    const CALL: &str = "hipModuleLaunchKernel";
    call(CALL, HipNeeds::Nothing, || {
        let kernel = function(handle(f), CALL)?;
        let stream = find_stream(handle(s), CALL)?;
        let shape = Shape {
            grid: [grid_x, grid_y, grid_z],
            block: [block_x, block_y, block_z],
            shared_memory_bytes,
        };
        // SAFETY: HIP's contract for `kernelParams`.
        unsafe { launch(CALL, &kernel, &stream, shape, kernel_params, extra, &LIMITS) }
    })
}
