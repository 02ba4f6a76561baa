//! The exported CUDA driver API: each `cu*` function with CUDA's C signature (enum parameters as
//! their numbers, so no value a caller passes is an invalid Rust enum), a thin translation
//! onto the [`crate::model`]. Every call starts with the contract's checks
//! ([`crate::model::contract::enter`]).
//!
//! Every pointer a caller passes is trusted as CUDA trusts it (valid for what the call writes
//! or reads), except that null out-pointers are `CUDA_ERROR_INVALID_VALUE`.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::{Arc, LazyLock};

use cudarc::driver::sys::{CUdevice, CUdevice_attribute as Attr, CUresult};
use CUresult::{CUDA_ERROR_INVALID_VALUE, CUDA_SUCCESS};

use crate::ffi::{as_ptr, handle, put, put_str};
use crate::model::contract::{
    check_current, current_context, current_device, enter, set_current, sticky, violation, Needs,
    Ret,
};
use crate::model::driver::{context_device, device, device_count, driver, init, primary_context};
use crate::model::kernels::{DEFAULT_DYNAMIC_SHARED, MAX_SHARED_OPTIN};
use crate::model::memory::DEVICE_BYTES;
use crate::model::stream::{find_stream, invalidate_captures, Stream};

pub(crate) mod graph;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod peer;
pub(crate) mod stream;

/// Every export, for the fake's own tests.
#[cfg(test)]
pub(crate) use self::{graph::*, memory::*, module::*, peer::*, stream::*};

/// The CUDA version the fake reports (`cuDriverGetVersion`).
pub(crate) const DRIVER_VERSION: c_int = 13000;
/// The device's name.
const DEVICE_NAME: &str = "halcyon fake CUDA device (host threads)";

/// Runs a call: the contract's checks, then `body`.
/// Calls that release something ([`Needs::ContextEvenFaulted`]) do so after a fault too, and
/// then report the fault, as CUDA reports an earlier asynchronous error.
fn call(name: &'static str, needs: Needs, body: impl FnOnce() -> Ret) -> CUresult {
    match enter(name, needs).and_then(|()| body()) {
        Ok(()) if needs == Needs::ContextEvenFaulted => {
            sticky(current_device()).unwrap_or(CUDA_SUCCESS)
        }
        Ok(()) => CUDA_SUCCESS,
        Err(code) => code,
    }
}

/// The live stream `s`, which work is enqueued on: it must belong to the current context
/// ([`check_current`]).
fn cuda_stream(s: *mut c_void, call: &str) -> Result<Arc<Stream>, CUresult> {
    let stream = find_stream(handle(s), call)?;
    check_current(call, stream.device, "a stream")?;
    Ok(stream)
}

/// What a call that may synchronise the whole context (`cuMemFree`, `cuMemFreeHost`,
/// `cuModuleUnload`) does to graph captures: CUDA calls synchronising a context while one of
/// its streams captures invalid, so every capture running on the current context's device is
/// invalidated (its end reports `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`; its operations never
/// run) and counted in `FakeStats::captures_invalidated`.
fn sync_context() {
    invalidate_captures(
        current_device(),
        CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
    );
}

// ------------------------------------------------------------------ errors and versions

/// The codes the fake returns, plus CUDA 13's `CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER` (36),
/// with their names.
static NAMES: LazyLock<Vec<(u32, &'static CStr)>> = LazyLock::new(|| {
    use CUresult::*;
    let mut names: Vec<(u32, &'static CStr)> = [
        CUDA_SUCCESS,
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_INVALID_DEVICE,
        CUDA_ERROR_INVALID_CONTEXT,
        CUDA_ERROR_INVALID_PTX,
        CUDA_ERROR_INVALID_HANDLE,
        CUDA_ERROR_ILLEGAL_STATE,
        CUDA_ERROR_NOT_FOUND,
        CUDA_ERROR_NOT_READY,
        CUDA_ERROR_ILLEGAL_ADDRESS,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_NOT_PERMITTED,
        CUDA_ERROR_NOT_SUPPORTED,
        CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
        CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
        CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
        CUDA_ERROR_CAPTURED_EVENT,
        CUDA_ERROR_CONTEXT_IS_DESTROYED,
        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
        CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
    ]
    .into_iter()
    .map(|code| {
        let name = std::ffi::CString::new(format!("{code:?}")).expect("no NUL");
        (code as u32, &*Box::leak(name.into_boxed_c_str()))
    })
    .collect();
    names.push((36, c"CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER"));
    names
});

fn error_name(code: c_uint) -> Option<&'static CStr> {
    NAMES.iter().find(|(c, _)| *c == code).map(|(_, n)| *n)
}

/// `cuGetErrorName`: the code's name; `CUDA_ERROR_INVALID_VALUE` for a code it does not know.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(code: c_uint, out: *mut *const c_char) -> CUresult {
    call("cuGetErrorName", Needs::Nothing, || {
        let name = error_name(code).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: CUDA's contract: `out` is valid for one pointer.
        unsafe { put(out, name.as_ptr()) }
    })
}

/// `cuGetErrorString`: the code's name, as its description.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(code: c_uint, out: *mut *const c_char) -> CUresult {
    call("cuGetErrorString", Needs::Nothing, || {
        let name = error_name(code).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: CUDA's contract: `out` is valid for one pointer.
        unsafe { put(out, name.as_ptr()) }
    })
}

/// `cuDriverGetVersion`: [`DRIVER_VERSION`].
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    call("cuDriverGetVersion", Needs::Nothing, || {
        // SAFETY: CUDA's contract: `version` is valid for one int.
        unsafe { put(version, DRIVER_VERSION) }
    })
}

/// `cuInit`: flags must be 0.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    call("cuInit", Needs::Nothing, || init(flags))
}

// ------------------------------------------------------------------ devices and the context

/// `cuDeviceGetCount`: [`device_count`] devices.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    call("cuDeviceGetCount", Needs::Init, || {
        // SAFETY: CUDA's contract: `count` is valid for one int.
        unsafe { put(count, device_count() as c_int) }
    })
}

/// `cuDeviceGet`: ordinal `n` is device `n`.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(out: *mut CUdevice, ordinal: c_int) -> CUresult {
    call("cuDeviceGet", Needs::Init, || {
        device(ordinal)?;
        // SAFETY: CUDA's contract: `out` is valid for one CUdevice.
        unsafe { put(out, ordinal) }
    })
}

/// `cuDeviceGetAttribute`: a compute capability 9.0 device with 4 multiprocessors, memory
/// pools, concurrent managed access and Hopper's shared memory limits; 0 for attributes it
/// does not model.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_uint,
    dev: CUdevice,
) -> CUresult {
    call("cuDeviceGetAttribute", Needs::Init, || {
        device(dev)?;
        let answer = match attribute {
            a if a == Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as u32 => 9,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as u32 => 0,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as u32 => 4,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR as u32 => 2,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK as u32 => 1024,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK as u32 => {
                DEFAULT_DYNAMIC_SHARED as c_int
            }
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN as u32 => {
                MAX_SHARED_OPTIN as c_int
            }
            a if a == Attr::CU_DEVICE_ATTRIBUTE_WARP_SIZE as u32 => 32,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY as u32 => 1,
            a if a == Attr::CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM as u32 => 1,
            _ => 0,
        };
        // SAFETY: CUDA's contract: `value` is valid for one int.
        unsafe { put(value, answer) }
    })
}

/// `cuDeviceGetName`: [`DEVICE_NAME`], truncated to `len - 1` bytes and NUL-terminated.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    call("cuDeviceGetName", Needs::Init, || {
        device(dev)?;
        // SAFETY: CUDA's contract: `name` is valid for `len` bytes.
        unsafe { put_str(name, len, DEVICE_NAME) }
    })
}

/// `cuDeviceTotalMem`: [`DEVICE_BYTES`].
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    call("cuDeviceTotalMem", Needs::Init, || {
        device(dev)?;
        // SAFETY: CUDA's contract: `bytes` is valid for one size_t.
        unsafe { put(bytes, DEVICE_BYTES) }
    })
}

/// `cuDevicePrimaryCtxRetain`: one more reference to the device's primary context.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    out: *mut *mut c_void,
    dev: CUdevice,
) -> CUresult {
    call("cuDevicePrimaryCtxRetain", Needs::Init, || {
        let dev = device(dev)?;
        // SAFETY: CUDA's contract: `out` is valid for one CUcontext.
        unsafe { put(out, as_ptr(primary_context(dev) as u64)) }?;
        driver().retains[dev as usize] += 1;
        Ok(())
    })
}

/// `cuDevicePrimaryCtxRelease`: one reference fewer; the last one destroys the context and
/// everything in it (what is still alive then was leaked: a violation, unless it faulted),
/// leaving the other devices' contexts as they are.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    call("cuDevicePrimaryCtxRelease", Needs::Init, || {
        let dev = device(dev)?;
        let mut driver = driver();
        let retains = &mut driver.retains[dev as usize];
        if *retains == 0 {
            drop(driver);
            violation(format!(
                "cuDevicePrimaryCtxRelease({dev}) without a matching retain"
            ));
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        *retains -= 1;
        if *retains == 0 {
            driver.destroy_context(dev);
        }
        Ok(())
    })
}

/// `cuDevicePrimaryCtxGetState`: whether the device's primary context is alive (retained by
/// someone); its flags are always 0.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut c_uint,
    active: *mut c_int,
) -> CUresult {
    call("cuDevicePrimaryCtxGetState", Needs::Init, || {
        let dev = device(dev)?;
        let retained = driver().retains[dev as usize] > 0;
        // SAFETY: CUDA's contract: `flags` and `active` are valid for one value each.
        unsafe { put(flags, 0 as c_uint) }?;
        // SAFETY: as above.
        unsafe { put(active, c_int::from(retained)) }
    })
}

/// `cuCtxSetCurrent`: a device's primary context or null. As in CUDA, a primary context whose
/// last reference was released stays on the thread stacks it was current on (its release
/// resets it and pops nothing), so making it current again (code giving back the context it
/// found current) is allowed; any call that needs it then is a violation (`Needs::Context`).
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(context: *mut c_void) -> CUresult {
    call("cuCtxSetCurrent", Needs::Init, || {
        let context = context as usize;
        if context != 0 && context_device(context).is_none() {
            violation(format!(
                "cuCtxSetCurrent({context:#x}): not a context of this driver"
            ));
            return Err(CUresult::CUDA_ERROR_INVALID_CONTEXT);
        }
        set_current(context);
        Ok(())
    })
}

/// `cuCtxGetCurrent`: the context `cuCtxSetCurrent` made current on this thread, or null.
///
/// # Safety
/// CUDA's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(out: *mut *mut c_void) -> CUresult {
    call("cuCtxGetCurrent", Needs::Init, || {
        // SAFETY: CUDA's contract: `out` is valid for one CUcontext.
        unsafe { put(out, current_context() as *mut c_void) }
    })
}
