//! The exported HIP runtime API: each `hip*` function halcyon-hip calls, with HIP's C
//! signature, a thin translation onto the same [`crate::model`] as the CUDA exports
//! ([`crate::cuda`]). HIP's error numbers are CUDA's for every error the fake returns
//! (`hipErrorInvalidValue` = 1 = `CUDA_ERROR_INVALID_VALUE`, ..., `hipErrorNotReady` = 600),
//! so the model's `CUresult`s are returned as their numbers.
//!
//! Where HIP differs from CUDA, the fake follows HIP (hipamd 5.2 and ROCm/clr, as
//! halcyon-hip's docs cite them), and checks what HIP would not say:
//!
//! * **No context.** The current device is per thread (`hipSetDevice`); a call that creates
//!   something on it (a stream, an event, memory, a module) on a thread that never chose a
//!   device is a violation: it works on one GPU by luck. What a call does on a stream happens
//!   on the stream's device, whichever is current; an event recorded on another device's
//!   stream, a function or pool of another device, and another device's memory without
//!   peer access enabled (`hipDeviceEnablePeerAccess`) are violations.
//! * **An event's lock.** HIP serialises everything done to an event under the event's lock,
//!   and `hipEventSynchronize` holds it for its whole wait: a `hipEventQuery`,
//!   `hipEventRecord` or `hipStreamWaitEvent` of an event another thread is synchronising on
//!   (whose record has not completed) waits for the device, which halcyon's `StreamApi` forbids
//!   outside its synchronising calls. The fake takes the same lock, and such a call is a
//!   violation (then waits, as HIP does).
//! * **Pageable copies block.** `hipMemcpyAsync` with a host side in pageable memory (not
//!   within a `hipHostMalloc` or managed allocation) waits on the host for the stream in
//!   hipamd: a violation, then done synchronously.
//! * **Frees synchronise.** `hipFree` and `hipHostFree` wait for every stream of the device
//!   before freeing, as they do in hipamd and ROCm/clr.
//! * **Host functions.** Both `hipLaunchHostFunc` and `hipStreamAddCallback` (HIP 5.2's only
//!   kind) run on the stream's worker, where any HIP call is a violation; a callback is given
//!   `hipSuccess`.
//! * **Code objects.** `hipModuleLoadData` reads an AMDGPU code object's ELF symbol table for
//!   its kernels ([`crate::hsaco`]), or an offload bundle's entry for the device; the device
//!   is a gfx900, and a code object (or a bundle without one) for another target is
//!   `hipErrorNoBinaryForGpu`. The kernels it runs are the CUDA exports' natives,
//!   by name and with their parameters (the argument metadata is not read).
//! * **No graphs.** The capture and graph calls are not exported (halcyon-hip does not offer
//!   graphs), so a caller finds them missing, as on a runtime without them.
//! * **Faults.** A device fault (only a use of freed memory can cause one here) is reported
//!   by later waits, as the CUDA side's sticky error; ROCm would abort the process instead.
//!
//! Every pointer a caller passes is trusted as HIP trusts it (valid for what the call writes
//! or reads), except that null out-pointers are `hipErrorInvalidValue`.

#![allow(non_snake_case, non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::atomic::Ordering;

use cudarc::driver::sys::CUresult;

use crate::ffi::{put, put_str};
use crate::model::contract::{current_device, enter_hip, set_hip_device, HipNeeds, Ret};
use crate::model::driver::{device, device_count, init};
use crate::model::memory::DEVICE_BYTES;

use CUresult::CUDA_ERROR_INVALID_VALUE as INVALID_VALUE;

pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod peer;
pub(crate) mod stream;

/// Every export, for the fake's own tests.
#[cfg(test)]
pub(crate) use self::{memory::*, module::*, stream::*};

/// `hipError_t`.
type hipError_t = c_int;

/// The HIP version the fake reports (`hipRuntimeGetVersion`, `hipDriverGetVersion`): 6.2.0.
const HIP_VERSION: c_int = 60_200_000;
/// The device's name.
const DEVICE_NAME: &str = "halcyon fake HIP device (host threads, gfx900)";

/// Runs a call: the contract's checks, then `body`; the result as a `hipError_t`.
fn call(name: &'static str, needs: HipNeeds, body: impl FnOnce() -> Ret) -> hipError_t {
    match enter_hip(name, needs).and_then(|()| body()) {
        Ok(()) => 0,
        Err(code) => code as hipError_t,
    }
}

// ------------------------------------------------------------------ errors and versions

/// The codes the fake returns, with their names and descriptions.
const ERRORS: &[(c_int, &CStr, &CStr)] = &[
    (0, c"hipSuccess", c"no error"),
    (1, c"hipErrorInvalidValue", c"invalid argument"),
    (2, c"hipErrorOutOfMemory", c"out of memory"),
    (3, c"hipErrorNotInitialized", c"initialization error"),
    (101, c"hipErrorInvalidDevice", c"invalid device ordinal"),
    (
        200,
        c"hipErrorInvalidImage",
        c"device kernel image is invalid",
    ),
    (
        209,
        c"hipErrorNoBinaryForGpu",
        c"no kernel image is available for execution on the device",
    ),
    (400, c"hipErrorInvalidHandle", c"invalid resource handle"),
    (
        401,
        c"hipErrorIllegalState",
        c"the operation cannot be performed in the present state",
    ),
    (500, c"hipErrorNotFound", c"named symbol not found"),
    (600, c"hipErrorNotReady", c"device not ready"),
    (
        700,
        c"hipErrorIllegalAddress",
        c"an illegal memory access was encountered",
    ),
    (
        704,
        c"hipErrorPeerAccessAlreadyEnabled",
        c"peer access is already enabled",
    ),
    (719, c"hipErrorLaunchFailure", c"unspecified launch failure"),
    (800, c"hipErrorNotPermitted", c"operation not permitted"),
    (801, c"hipErrorNotSupported", c"operation not supported"),
    (999, c"hipErrorUnknown", c"unknown error"),
];

fn error_entry(code: hipError_t) -> (c_int, &'static CStr, &'static CStr) {
    ERRORS
        .iter()
        .copied()
        .find(|(c, _, _)| *c == code)
        .unwrap_or(ERRORS[ERRORS.len() - 1])
}

/// `hipGetErrorName`: the code's name (`hipErrorUnknown` for a code the fake does not know).
#[no_mangle]
pub extern "C" fn hipGetErrorName(code: hipError_t) -> *const c_char {
    error_entry(code).1.as_ptr()
}

/// `hipGetErrorString`: the code's description.
#[no_mangle]
pub extern "C" fn hipGetErrorString(code: hipError_t) -> *const c_char {
    error_entry(code).2.as_ptr()
}

/// `hipDriverGetVersion`: [`HIP_VERSION`].
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDriverGetVersion(version: *mut c_int) -> hipError_t {
    call("hipDriverGetVersion", HipNeeds::Nothing, || {
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(version, HIP_VERSION) }
    })
}

/// `hipRuntimeGetVersion`: [`HIP_VERSION`].
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> hipError_t {
    call("hipRuntimeGetVersion", HipNeeds::Nothing, || {
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(version, HIP_VERSION) }
    })
}

/// `hipInit`: flags must be 0.
#[no_mangle]
pub extern "C" fn hipInit(flags: c_uint) -> hipError_t {
    call("hipInit", HipNeeds::Nothing, || init(flags))
}

// ------------------------------------------------------------------ devices

/// `hipGetDeviceCount`: [`device_count`] devices.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> hipError_t {
    call("hipGetDeviceCount", HipNeeds::Nothing, || {
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(count, device_count() as c_int) }
    })
}

/// `hipSetDevice`: the device becomes current on this thread.
#[no_mangle]
pub extern "C" fn hipSetDevice(ordinal: c_int) -> hipError_t {
    call("hipSetDevice", HipNeeds::Nothing, || {
        set_hip_device(device(ordinal)?);
        Ok(())
    })
}

/// Each device's flags (`hipSetDeviceFlags`), by ordinal; 0 is `hipDeviceScheduleAuto`.
static DEVICE_FLAGS: [std::sync::atomic::AtomicU32; 8] =
    [const { std::sync::atomic::AtomicU32::new(0) }; 8];

/// The flags `hipSetDeviceFlags` accepts: the scheduling mask (7), `hipDeviceMapHost` (8),
/// `hipDeviceLmemResizeToMax` (0x10).
const DEVICE_FLAGS_SUPPORTED: c_uint = 0x7 | 0x8 | 0x10;

/// `hipSetDeviceFlags`: the flags of the thread's current device (which the runtime accepts
/// after the device was used, as hipamd and clr do); recorded, with no effect on the fake's
/// waits. Unknown bits are `hipErrorInvalidValue`.
#[no_mangle]
pub extern "C" fn hipSetDeviceFlags(flags: c_uint) -> hipError_t {
    call("hipSetDeviceFlags", HipNeeds::Nothing, || {
        if flags & !DEVICE_FLAGS_SUPPORTED != 0 {
            return Err(INVALID_VALUE);
        }
        DEVICE_FLAGS[current_device() as usize].store(flags, Ordering::SeqCst);
        Ok(())
    })
}

/// `hipGetDeviceFlags`: the flags of the thread's current device.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipGetDeviceFlags(out: *mut c_uint) -> hipError_t {
    call("hipGetDeviceFlags", HipNeeds::Nothing, || {
        let flags = DEVICE_FLAGS[current_device() as usize].load(Ordering::SeqCst);
        // SAFETY: HIP's contract: valid for one unsigned int.
        unsafe { put(out, flags) }
    })
}

/// `hipGetDevice`: the device current on this thread (device 0 before any `hipSetDevice`, as
/// in HIP). A thread that asked knows which device its calls act on, so from then on it counts
/// as having chosen it (the contract check that device calls follow a `hipSetDevice` is about
/// threads that never looked).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipGetDevice(out: *mut c_int) -> hipError_t {
    call("hipGetDevice", HipNeeds::Nothing, || {
        let device = current_device();
        set_hip_device(device);
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(out, device as c_int) }
    })
}

/// `hipDeviceGet`: the device of an ordinal (its ordinal).
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGet(out: *mut c_int, ordinal: c_int) -> hipError_t {
    call("hipDeviceGet", HipNeeds::Nothing, || {
        device(ordinal)?;
        // SAFETY: HIP's contract: valid for one hipDevice_t.
        unsafe { put(out, ordinal) }
    })
}

/// `hipDeviceGetName`: [`DEVICE_NAME`], truncated to `len - 1` bytes and NUL-terminated.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> hipError_t {
    call("hipDeviceGetName", HipNeeds::Nothing, || {
        device(dev)?;
        // SAFETY: HIP's contract: `name` is valid for `len` bytes.
        unsafe { put_str(name, len, DEVICE_NAME) }
    })
}

/// `hipDeviceGetAttribute`: a gfx900 (compute 9.0) with 4 compute units, wavefronts of 64,
/// managed memory and memory pools; 0 for attributes it does not model.
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    dev: c_int,
) -> hipError_t {
    call("hipDeviceGetAttribute", HipNeeds::Nothing, || {
        device(dev)?;
        let answer = match attribute {
            23 => 9,          // ComputeCapabilityMajor
            61 => 0,          // ComputeCapabilityMinor
            24 => 1,          // ManagedMemory
            29 => i32::MAX,   // MaxGridDimX
            30 | 31 => 65536, // MaxGridDimY, MaxGridDimZ (as ROCm 5.7 on)
            56 => 1024,       // MaxThreadsPerBlock
            63 => 4,          // MultiprocessorCount
            74 => 64 << 10,   // MaxSharedMemoryPerBlock
            87 => 64,         // WarpSize
            88 => 1,          // MemoryPoolsSupported
            _ => 0,
        };
        // SAFETY: HIP's contract: valid for one int.
        unsafe { put(value, answer) }
    })
}

/// `hipDeviceTotalMem`: [`DEVICE_BYTES`].
///
/// # Safety
/// HIP's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceTotalMem(bytes: *mut usize, dev: c_int) -> hipError_t {
    call("hipDeviceTotalMem", HipNeeds::Nothing, || {
        device(dev)?;
        // SAFETY: HIP's contract: valid for one size_t.
        unsafe { put(bytes, DEVICE_BYTES) }
    })
}
