//! `CUresult` → [`halcyon::Error`]: the status code a CUDA error maps to, and messages such as
//! `cuMemAlloc(1048576 bytes) failed: CUDA_ERROR_OUT_OF_MEMORY (2)`.
//!
//! Results arrive as [`Code`]s, the driver's number (see [`crate::sys`]). The error's name is
//! the `CUresult`'s C name (`CUDA_ERROR_OUT_OF_MEMORY`), which is exactly what `cuGetErrorName`
//! returns; for the codes cudarc's bindings have it is taken from them, so formatting an error
//! does not call back into the driver (which may be the thing that is broken) and works in unit
//! tests without one. Only a code newer than the bindings is named by the driver's
//! `cuGetErrorName`; it maps to `Internal`, except those listed below by number.
//!
//! | CUDA error                                             | [`StatusCode`]        |
//! |--------------------------------------------------------|-----------------------|
//! | out of memory, launch out of resources, too many peers | `ResourceExhausted`   |
//! | invalid value / handle / image / PTX / source / context, no binary for this GPU | `InvalidArgument` |
//! | not found, function not loaded                         | `NotFound`            |
//! | no device, invalid device, not initialised, stub library, driver mismatch, ... | `Unavailable` |
//! | not supported, JIT compiler missing or disabled        | `Unimplemented`       |
//! | PTX newer than the driver, stream-capture misuse, illegal state | `FailedPrecondition` |
//! | not permitted                                          | `PermissionDenied`    |
//! | timeout                                                | `DeadlineExceeded`    |
//! | **sticky device faults**: illegal address, launch failed, trap/assert, illegal or misaligned instruction/address, invalid PC, hardware stack error, launch timeout, uncorrectable ECC / NVLink, context destroyed | `Aborted` (the message says the context is dead) |
//! | a function the driver does not export ([`Code::MISSING_SYMBOL`]); CUDA 13's `CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER` (36) | `Unimplemented` |
//! | anything else, and codes newer than the bindings       | `Internal`            |

use std::ffi::{c_char, CStr};
use std::sync::OnceLock;

use cudarc::driver::sys::CUresult;
use halcyon::{Error, StatusCode};

use crate::sys::Code;

/// Whether `code` is a sticky error: once it happened the CUDA context is unusable and every
/// later call in it fails with the same error (host functions enqueued in it never run).
pub fn is_sticky(code: Code) -> bool {
    use CUresult as R;
    let Some(code) = code.known() else {
        return false;
    };
    matches!(
        code,
        R::CUDA_ERROR_ILLEGAL_ADDRESS
            | R::CUDA_ERROR_LAUNCH_FAILED
            | R::CUDA_ERROR_LAUNCH_TIMEOUT
            | R::CUDA_ERROR_ASSERT
            | R::CUDA_ERROR_HARDWARE_STACK_ERROR
            | R::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | R::CUDA_ERROR_MISALIGNED_ADDRESS
            | R::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | R::CUDA_ERROR_INVALID_PC
            | R::CUDA_ERROR_ECC_UNCORRECTABLE
            | R::CUDA_ERROR_NVLINK_UNCORRECTABLE
            | R::CUDA_ERROR_CONTEXT_IS_DESTROYED
            | R::CUDA_ERROR_EXTERNAL_DEVICE
            | R::CUDA_ERROR_CONTAINED
            | R::CUDA_ERROR_TENSOR_MEMORY_LEAK
    )
}

/// `CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER` (CUDA 13.0), which CUDA 12.8's bindings lack.
const CALL_REQUIRES_NEWER_DRIVER: Code = Code::from_number(36);

/// The [`StatusCode`] for a CUDA error (see the [module docs](self) for the table).
pub fn status_code(code: Code) -> StatusCode {
    use CUresult as R;
    if is_sticky(code) {
        return StatusCode::Aborted;
    }
    let Some(known) = code.known() else {
        return if code == Code::MISSING_SYMBOL || code == CALL_REQUIRES_NEWER_DRIVER {
            StatusCode::Unimplemented
        } else {
            StatusCode::Internal
        };
    };
    match known {
        R::CUDA_ERROR_OUT_OF_MEMORY
        | R::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
        | R::CUDA_ERROR_TOO_MANY_PEERS
        | R::CUDA_ERROR_MPS_MAX_CLIENTS_REACHED
        | R::CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED => StatusCode::ResourceExhausted,
        R::CUDA_ERROR_INVALID_VALUE
        | R::CUDA_ERROR_INVALID_HANDLE
        | R::CUDA_ERROR_INVALID_IMAGE
        | R::CUDA_ERROR_INVALID_PTX
        | R::CUDA_ERROR_INVALID_SOURCE
        | R::CUDA_ERROR_INVALID_CONTEXT
        | R::CUDA_ERROR_NO_BINARY_FOR_GPU
        | R::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
        | R::CUDA_ERROR_INVALID_CLUSTER_SIZE
        | R::CUDA_ERROR_INVALID_RESOURCE_TYPE
        | R::CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION => StatusCode::InvalidArgument,
        R::CUDA_ERROR_NOT_FOUND
        | R::CUDA_ERROR_FUNCTION_NOT_LOADED
        | R::CUDA_ERROR_FILE_NOT_FOUND
        | R::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND => StatusCode::NotFound,
        R::CUDA_ERROR_NO_DEVICE
        | R::CUDA_ERROR_INVALID_DEVICE
        | R::CUDA_ERROR_NOT_INITIALIZED
        | R::CUDA_ERROR_DEINITIALIZED
        | R::CUDA_ERROR_STUB_LIBRARY
        | R::CUDA_ERROR_DEVICE_UNAVAILABLE
        | R::CUDA_ERROR_DEVICE_NOT_LICENSED
        | R::CUDA_ERROR_SYSTEM_NOT_READY
        | R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
        | R::CUDA_ERROR_MPS_CONNECTION_FAILED
        | R::CUDA_ERROR_MPS_RPC_FAILURE
        | R::CUDA_ERROR_MPS_SERVER_NOT_READY
        | R::CUDA_ERROR_MPS_CLIENT_TERMINATED => StatusCode::Unavailable,
        R::CUDA_ERROR_NOT_SUPPORTED
        | R::CUDA_ERROR_JIT_COMPILER_NOT_FOUND
        | R::CUDA_ERROR_JIT_COMPILATION_DISABLED
        | R::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
        | R::CUDA_ERROR_CDP_NOT_SUPPORTED => StatusCode::Unimplemented,
        R::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        | R::CUDA_ERROR_ILLEGAL_STATE
        | R::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        | R::CUDA_ERROR_STREAM_CAPTURE_MERGE
        | R::CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
        | R::CUDA_ERROR_STREAM_CAPTURE_UNJOINED
        | R::CUDA_ERROR_STREAM_CAPTURE_ISOLATION
        | R::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
        | R::CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
        | R::CUDA_ERROR_CAPTURED_EVENT
        | R::CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
        | R::CUDA_ERROR_CONTEXT_ALREADY_IN_USE => StatusCode::FailedPrecondition,
        R::CUDA_ERROR_NOT_PERMITTED => StatusCode::PermissionDenied,
        R::CUDA_ERROR_TIMEOUT => StatusCode::DeadlineExceeded,
        R::CUDA_ERROR_UNKNOWN => StatusCode::Unknown,
        _ => StatusCode::Internal,
    }
}

/// `CUDA_ERROR_OUT_OF_MEMORY (2)`: the C name (what `cuGetErrorName` returns) and the number.
/// A code newer than the bindings is named by the driver if it can
/// (`CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER (36)`), else shown as `CUDA error 36`; a missing
/// symbol says so.
pub fn describe(code: Code) -> String {
    if code == Code::MISSING_SYMBOL {
        return "the function could not be resolved: the NVIDIA driver does not export it (it \
                is older than the call needs: update it), or no libcuda is loaded"
            .into();
    }
    let number = code.number();
    match code.known() {
        // The bindings' enum variants carry the C names, so `Debug` prints exactly them.
        Some(known) => format!("{known:?} ({number})"),
        None => match driver_error_name(code) {
            Some(name) => format!("{name} ({number})"),
            None => format!("CUDA error {number}"),
        },
    }
}

/// The driver's name for a code the bindings lack, from `cuGetErrorName`; `None` before a
/// successful probe (no driver to ask) or when the driver does not know it either.
fn driver_error_name(code: Code) -> Option<String> {
    type GetErrorName = unsafe extern "C" fn(u32, *mut *const c_char) -> u32;
    static FUNCTION: OnceLock<Option<GetErrorName>> = OnceLock::new();
    let library = crate::probe::library()?;
    // SAFETY: `CUresult cuGetErrorName(CUresult, const char**)`, with the enum passed and
    // returned as its `repr(u32)` number, from the library the probe opened (loaded for good).
    let function = FUNCTION.get_or_init(|| unsafe {
        library
            .get::<GetErrorName>(b"cuGetErrorName\0")
            .ok()
            .map(|s| *s)
    });
    let mut name: *const c_char = std::ptr::null();
    let ok = (*function).is_some_and(|f| {
        // SAFETY: the out-pointer is valid; cuGetErrorName only reads a static table (it
        // answers CUDA_ERROR_INVALID_VALUE for a code it does not know).
        let status = unsafe { f(code.number(), &mut name) };
        status == 0 && !name.is_null()
    });
    ok.then(|| {
        // SAFETY: on success the driver points at a static NUL-terminated string.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    })
}

/// The error for `call` failing with `code`: `"{call} failed: CUDA_ERROR_X (n)"`, plus, for a
/// sticky fault, what it means for the device.
pub fn cuda_error(call: &str, code: Code) -> Error {
    let mut message = format!("{call} failed: {}", describe(code));
    if is_sticky(code) {
        message.push_str(
            "; this is a sticky CUDA device fault: the device's context is unusable from now on \
             (every call fails, enqueued host functions never run), and CUDA documents that \
             the process must be restarted to use the GPU again",
        );
    }
    Error::new(status_code(code), message)
}

/// `Ok` for `CUDA_SUCCESS`, else [`cuda_error`] naming `call` (built only on failure).
pub fn check(code: Code, call: impl FnOnce() -> String) -> halcyon::Result<()> {
    if code.is_success() {
        Ok(())
    } else {
        Err(cuda_error(&call(), code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_call_the_error_and_its_number() {
        let e = cuda_error(
            "cuMemAlloc(1048576 bytes)",
            CUresult::CUDA_ERROR_OUT_OF_MEMORY.into(),
        );
        assert_eq!(e.code(), StatusCode::ResourceExhausted);
        assert_eq!(
            e.message(),
            "cuMemAlloc(1048576 bytes) failed: CUDA_ERROR_OUT_OF_MEMORY (2)"
        );
    }

    #[test]
    fn sticky_faults_are_aborted_and_say_so() {
        for code in [
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_ECC_UNCORRECTABLE,
            CUresult::CUDA_ERROR_ASSERT,
        ] {
            let e = cuda_error("cuEventQuery", code.into());
            assert_eq!(e.code(), StatusCode::Aborted, "{e}");
            assert!(e.message().contains("sticky CUDA device fault"), "{e}");
        }
        let e = cuda_error("cuEventQuery", CUresult::CUDA_ERROR_ILLEGAL_ADDRESS.into());
        assert!(
            e.message()
                .starts_with("cuEventQuery failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)"),
            "{e}"
        );
    }

    #[test]
    fn status_codes() {
        use CUresult as R;
        let cases = [
            (R::CUDA_ERROR_INVALID_VALUE, StatusCode::InvalidArgument),
            (R::CUDA_ERROR_INVALID_PTX, StatusCode::InvalidArgument),
            (R::CUDA_ERROR_NOT_FOUND, StatusCode::NotFound),
            (R::CUDA_ERROR_NO_DEVICE, StatusCode::Unavailable),
            (R::CUDA_ERROR_NOT_SUPPORTED, StatusCode::Unimplemented),
            (
                R::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
                StatusCode::FailedPrecondition,
            ),
            (
                R::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
                StatusCode::ResourceExhausted,
            ),
            (R::CUDA_ERROR_NOT_READY, StatusCode::Internal),
            (R::CUDA_ERROR_UNKNOWN, StatusCode::Unknown),
        ];
        for (code, status) in cases {
            assert_eq!(status_code(code.into()), status, "{code:?}");
            assert!(!is_sticky(code.into()), "{code:?}");
        }
    }

    #[test]
    fn check_builds_the_message_only_on_failure() {
        check(Code::SUCCESS, || unreachable!()).unwrap();
        let e = check(CUresult::CUDA_ERROR_INVALID_HANDLE.into(), || {
            "cuStreamSynchronize".into()
        })
        .unwrap_err();
        assert_eq!(
            e.message(),
            "cuStreamSynchronize failed: CUDA_ERROR_INVALID_HANDLE (400)"
        );
    }

    #[test]
    fn codes_newer_than_the_bindings_and_missing_symbols() {
        // No driver here (or not probed in this test): the number is all there is.
        let newer = Code::from_number(36);
        assert!(!is_sticky(newer));
        let e = cuda_error("cuMemAlloc(64 bytes)", newer);
        assert_eq!(e.code(), StatusCode::Unimplemented);
        assert!(
            e.message().starts_with("cuMemAlloc(64 bytes) failed: "),
            "{e}"
        );
        assert!(
            e.message().contains("(36)") || e.message().ends_with("CUDA error 36"),
            "{e}"
        );
        let e = cuda_error("cuMemAlloc(64 bytes)", Code::from_number(990));
        assert_eq!(e.code(), StatusCode::Internal);

        let e = cuda_error("cuFuncGetParamInfo", Code::MISSING_SYMBOL);
        assert_eq!(e.code(), StatusCode::Unimplemented);
        assert_eq!(
            e.message(),
            "cuFuncGetParamInfo failed: the function could not be resolved: the NVIDIA driver \
             does not export it (it is older than the call needs: update it), or no libcuda is \
             loaded"
        );
    }
}
