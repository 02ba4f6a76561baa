//! CUDA's modules (PTX and cubins), functions and kernel launches.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::Ordering;

use cudarc::driver::sys::{CUjit_option, CUresult};
use CUresult::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED};

use super::{call, cuda_stream, sync_context};
use crate::ffi::{as_ptr, handle, put};
use crate::model::contract::{current_device, Needs};
use crate::model::kernels::MAX_SHARED_OPTIN;
use crate::model::launch::{launch, Limits, Shape};
use crate::model::module::{
    find_function, function, register_module, register_named, unload_module,
};
use crate::model::ptx::parse_ptx;
use crate::{cubin, hsaco};

/// CUDA's launch limits: blocks at most 64 deep, grids at most 65535 high and deep, dynamic
/// shared memory up to the kernel's limit, blocks within the kernel's own limit.
pub(crate) const LIMITS: Limits = Limits {
    grid_yz: 65535,
    block_z: 64,
    shared: None,
    kernel_threads: true,
};

/// Writes `message` into the JIT error log the options name, if they name one.
///
/// # Safety
/// `options` and `values` must be valid for `count` entries, and a log buffer they name valid
/// for its declared size.
unsafe fn write_jit_log(
    count: c_uint,
    options: *const c_uint,
    values: *const *mut c_void,
    message: &str,
) {
    if count == 0 || options.is_null() || values.is_null() {
        return;
    }
    // SAFETY: the caller's contract: both arrays hold `count` entries.
    let (options, values) = unsafe {
        (
            std::slice::from_raw_parts(options, count as usize),
            std::slice::from_raw_parts(values, count as usize),
        )
    };
    let find = |option: CUjit_option| {
        options
            .iter()
            .position(|&o| o == option as c_uint)
            .map(|i| values[i])
    };
    let (Some(buffer), Some(size)) = (
        find(CUjit_option::CU_JIT_ERROR_LOG_BUFFER),
        find(CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES),
    ) else {
        return;
    };
    let size = size as usize;
    if buffer.is_null() || size == 0 {
        return;
    }
    let n = message.len().min(size - 1);
    // SAFETY: the caller's contract: the buffer holds `size` bytes; `n + 1 <= size`.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), buffer.cast::<u8>(), n);
        buffer.cast::<u8>().add(n).write(0);
    }
}

/// `cuModuleLoadData`: see [`cuModuleLoadDataEx`].
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(out: *mut *mut c_void, image: *const c_void) -> CUresult {
    // SAFETY: forwarded; no options.
    unsafe { cuModuleLoadDataEx(out, image, 0, std::ptr::null_mut(), std::ptr::null_mut()) }
}

/// `cuModuleLoadDataEx`: NUL-terminated PTX, read for its entry points (PTX without
/// `.version` and `.target`, or with a parameter list the fake cannot read, is
/// `CUDA_ERROR_INVALID_PTX` with a JIT log), or an sm_90 cubin, read for its kernels' names
/// (see [`crate::cubin`]; another architecture is `CUDA_ERROR_NO_BINARY_FOR_GPU`); a fatbin is
/// `CUDA_ERROR_NOT_SUPPORTED`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    out: *mut *mut c_void,
    image: *const c_void,
    count: c_uint,
    options: *mut c_uint,
    values: *mut *mut c_void,
) -> CUresult {
    call("cuModuleLoadData", Needs::Context, || {
        if image.is_null() || out.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // The first bytes, stopping at a NUL (PTX text may be shorter than a binary header).
        let mut head = Vec::with_capacity(4);
        for i in 0..4 {
            // SAFETY: CUDA's contract: the image is a binary (with a header of more than 4
            // bytes) or NUL-terminated PTX, and this stops at the NUL.
            let byte = unsafe { image.cast::<u8>().add(i).read() };
            if byte == 0 {
                break;
            }
            head.push(byte);
        }
        let log = |message: &str| {
            // SAFETY: CUDA's contract for the options.
            unsafe { write_jit_log(count, options, values, message) }
        };
        if head == b"\x7fELF" {
            // SAFETY: CUDA's contract: a complete cubin, whose headers describe its bytes.
            let image = unsafe { hsaco::image(image.cast()) };
            let names = image
                .map_err(|(_, why)| cubin::Refusal::Invalid(why))
                .and_then(cubin::kernel_names)
                .map_err(|refusal| match refusal {
                    cubin::Refusal::Invalid(why) => {
                        log(&why);
                        CUresult::CUDA_ERROR_INVALID_IMAGE
                    }
                    cubin::Refusal::OtherArchitecture(why) => {
                        log(&why);
                        CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
                    }
                })?;
            let module = register_named(&names, current_device());
            // SAFETY: CUDA's contract: `out` is valid for one CUmodule.
            return unsafe { put(out, as_ptr(module)) };
        }
        if head == [0x50, 0xed, 0x55, 0xba] {
            log("the fake CUDA driver loads PTX and cubins, not fatbins");
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        // SAFETY: CUDA's contract: PTX is NUL-terminated.
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) }.to_string_lossy();
        let entries = parse_ptx(&text)
            .inspect_err(|message| log(message))
            .map_err(|_| CUresult::CUDA_ERROR_INVALID_PTX)?;
        let module = register_module(&entries, current_device());
        // SAFETY: CUDA's contract: `out` is valid for one CUmodule.
        unsafe { put(out, as_ptr(module)) }
    })
}

/// `cuModuleUnload`: the module's functions die with it.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(m: *mut c_void) -> CUresult {
    call("cuModuleUnload", Needs::ContextEvenFaulted, || {
        sync_context();
        unload_module(handle(m), "cuModuleUnload")
    })
}

/// `cuModuleGetFunction`: `CUDA_ERROR_NOT_FOUND` for a name the module lacks.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    out: *mut *mut c_void,
    m: *mut c_void,
    name: *const c_char,
) -> CUresult {
    call("cuModuleGetFunction", Needs::Context, || {
        // SAFETY: CUDA's contract: `name` is NUL-terminated.
        let function = unsafe { find_function(handle(m), name, "cuModuleGetFunction") }?;
        // SAFETY: CUDA's contract: `out` is valid for one CUfunction.
        unsafe { put(out, as_ptr(function)) }
    })
}

/// `cuFuncGetParamInfo`: offset and size of parameter `index` (`CUDA_ERROR_INVALID_VALUE`
/// past the last).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetParamInfo(
    f: *mut c_void,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    call("cuFuncGetParamInfo", Needs::Context, || {
        let kernel = function(handle(f), "cuFuncGetParamInfo")?;
        let &(at, n) = kernel.params.get(index).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: CUDA's contract: both are valid for one size_t.
        unsafe {
            put(offset, at)?;
            put(size, n)
        }
    })
}

/// `cuFuncGetAttribute`: `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK` is the kernel's limit
/// (see `Entry::max_threads`), `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` its dynamic
/// shared memory limit (see `Kernel::max_dynamic_shared`); the other attributes CUDA 12
/// defines read 0 (static shared memory among them).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    out: *mut c_int,
    attribute: c_uint,
    f: *mut c_void,
) -> CUresult {
    call("cuFuncGetAttribute", Needs::Context, || {
        let kernel = function(handle(f), "cuFuncGetAttribute")?;
        let value = match attribute {
            0 => kernel.max_threads as c_int,
            8 => kernel.max_dynamic_shared.load(Ordering::Relaxed) as c_int,
            // Up to CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE.
            1..=15 => 0,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        // SAFETY: CUDA's contract: `out` is valid for one int.
        unsafe { put(out, value) }
    })
}

/// `cuFuncSetAttribute`: `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` up to
/// [`MAX_SHARED_OPTIN`] (the fake models no static shared memory) and
/// `CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT` (-1 to 100, ignored); anything else
/// is `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(
    f: *mut c_void,
    attribute: c_uint,
    value: c_int,
) -> CUresult {
    call("cuFuncSetAttribute", Needs::Context, || {
        let kernel = function(handle(f), "cuFuncSetAttribute")?;
        match (attribute, value) {
            (8, v) if (0..=MAX_SHARED_OPTIN as c_int).contains(&v) => {
                kernel.max_dynamic_shared.store(v as u32, Ordering::Relaxed);
                Ok(())
            }
            (9, -1..=100) => Ok(()),
            _ => Err(CUDA_ERROR_INVALID_VALUE),
        }
    })
}

/// `cuLaunchKernel`: reads each parameter's value now (through `kernelParams`, one pointer
/// per parameter, as CUDA does) and runs the kernel natively when the stream gets there.
/// Kernels the fake cannot run, and `extra`, are `CUDA_ERROR_NOT_SUPPORTED`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
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
) -> CUresult {
    call("cuLaunchKernel", Needs::Context, || {
        let kernel = function(handle(f), "cuLaunchKernel")?;
        let stream = cuda_stream(s, "cuLaunchKernel")?;
        let shape = Shape {
            grid: [grid_x, grid_y, grid_z],
            block: [block_x, block_y, block_z],
            shared_memory_bytes,
        };
        // SAFETY: CUDA's contract for `kernelParams`.
        unsafe {
            launch(
                "cuLaunchKernel",
                &kernel,
                &stream,
                shape,
                kernel_params,
                extra,
                &LIMITS,
            )
        }
    })
}
