//! Thin, checked wrappers over [`crate::sys`]: one method per HIP call, each returning a
//! [`halcyon::Result`] whose error names the call, the HIP error and its number, for example
//! `hipMalloc(1048576 bytes) failed: hipErrorOutOfMemory (2)`.
//!
//! Calls that only create objects or read device properties are safe. Calls that take a
//! stream, event, module, function, graph or pointer are `unsafe`: the caller guarantees the
//! handle came from this runtime and is still alive, and that memory stays valid until the
//! stream-ordered work using it completes.

use std::ffi::CStr;

use halcyon::{Error, Result, StatusCode};

use crate::sys::{self, hipError_t, HipApi};

// The wrappers by concern; each file adds an `impl Hip` block.
mod device;
mod graphs;
mod memory;
mod modules;
mod peer;
mod streams;

/// The [`StatusCode`] for a HIP error.
pub fn status_code(error: hipError_t) -> StatusCode {
    match error {
        sys::hipErrorInvalidValue
        | sys::hipErrorInvalidHandle
        | sys::hipErrorInvalidImage
        | 9   // hipErrorInvalidConfiguration
        | 12  // hipErrorInvalidPitchValue
        | 13  // hipErrorInvalidSymbol
        | 17  // hipErrorInvalidDevicePointer
        | 21  // hipErrorInvalidMemcpyDirection
        | 98  // hipErrorInvalidDeviceFunction
        | 218 // hipErrorInvalidKernelFile
        | 300 // hipErrorInvalidSource
        => StatusCode::InvalidArgument,
        sys::hipErrorOutOfMemory | sys::hipErrorLaunchOutOfResources => {
            StatusCode::ResourceExhausted
        }
        sys::hipErrorNotInitialized
        | sys::hipErrorInvalidContext
        | 202..=208 // context and mapping states
        | 210..=216 // mapping, ECC and context states
        | 401       // hipErrorIllegalState
        | 708..=709 // hipErrorSetOnActiveProcess, hipErrorContextIsDestroyed
        | 900..=910 // stream capture and graph states
        => StatusCode::FailedPrecondition,
        sys::hipErrorNoDevice
        | sys::hipErrorInvalidDevice
        | sys::hipErrorInsufficientDriver
        | sys::hipErrorDeinitialized
        | sys::hipErrorNotReady => StatusCode::Unavailable,
        sys::hipErrorNotFound | sys::hipErrorFileNotFound | 302 => StatusCode::NotFound,
        sys::hipErrorNoBinaryForGpu | sys::hipErrorNotSupported | 217 => {
            StatusCode::Unimplemented
        }
        702 => StatusCode::DeadlineExceeded, // hipErrorLaunchTimeOut
        sys::hipErrorIllegalAddress
        | sys::hipErrorLaunchFailure
        | 53   // hipErrorPriorLaunchFailure
        | 710  // hipErrorAssert
        | 1052 // hipErrorRuntimeMemory
        | 1053 // hipErrorRuntimeOther
        => StatusCode::Internal,
        _ => StatusCode::Unknown,
    }
}

/// The loaded HIP runtime: cheap to copy, valid for the whole process.
///
/// ```no_run
/// let hip = halcyon_hip::result::Hip::load_default()?;
/// println!("HIP runtime {}", halcyon_hip::version_string(hip.runtime_version()?));
/// hip.init()?;
/// println!("{} devices", hip.device_count()?);
/// # Ok::<(), halcyon::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Hip {
    api: &'static HipApi,
}

impl Hip {
    /// Wraps a symbol table.
    pub fn new(api: &'static HipApi) -> Self {
        Hip { api }
    }

    /// Loads the runtime from [`sys::DEFAULT_SONAMES`] (cached per process); `Unavailable`
    /// naming every soname tried and its `dlopen` error when none opens.
    pub fn load_default() -> Result<Self> {
        HipApi::load_default().map(Hip::new).map_err(load_error)
    }

    /// Loads the runtime from the first of `sonames` that opens (paths work too).
    ///
    /// # Safety
    /// As for [`HipApi::load`]: each of `sonames` that opens must be a HIP runtime.
    pub unsafe fn load(sonames: &[&str]) -> Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { HipApi::load(sonames) }
            .map(Hip::new)
            .map_err(load_error)
    }

    /// Loads the runtime as [`Hip::load`] does, treating the optional symbols named in
    /// `absent` as missing (see [`HipApi::load_without`]): to run the fallbacks an older
    /// runtime takes.
    ///
    /// # Safety
    /// As for [`HipApi::load`]: each of `sonames` that opens must be a HIP runtime.
    pub unsafe fn load_without(sonames: &[&str], absent: &[&str]) -> Result<Self> {
        // SAFETY: the caller's contract.
        unsafe { HipApi::load_without(sonames, absent) }
            .map(Hip::new)
            .map_err(load_error)
    }

    /// The raw symbol table.
    pub fn api(self) -> &'static HipApi {
        self.api
    }

    /// `hipGetErrorName`, for example `hipErrorOutOfMemory`.
    pub fn error_name(self, error: hipError_t) -> String {
        // SAFETY: hipGetErrorName accepts any value and returns a static string (or null).
        let name = unsafe { (self.api.hipGetErrorName)(error) };
        static_str(name).unwrap_or_else(|| "hipErrorUnknown".to_string())
    }

    /// `hipGetErrorString`: a description (HIP 5.2 returns the name again).
    pub fn error_string(self, error: hipError_t) -> String {
        // SAFETY: hipGetErrorString accepts any value and returns a static string (or null).
        let text = unsafe { (self.api.hipGetErrorString)(error) };
        static_str(text).unwrap_or_default()
    }

    /// The error for `error` returned by `call`: `"{call} failed: {name} ({number})"`, plus the
    /// description where it says more than the name.
    pub fn error(self, error: hipError_t, call: &str) -> Error {
        let name = self.error_name(error);
        let text = self.error_string(error);
        let mut message = format!("{call} failed: {name} ({error})");
        if !text.is_empty() && text != name {
            message.push_str(": ");
            message.push_str(&text);
        }
        Error::new(status_code(error), message)
    }

    /// `Ok` for `hipSuccess`, otherwise [`Hip::error`] with the call described by `call`
    /// (only evaluated on failure).
    pub fn check(self, error: hipError_t, call: impl FnOnce() -> String) -> Result<()> {
        if error == sys::hipSuccess {
            Ok(())
        } else {
            Err(self.error(error, &call()))
        }
    }

    /// For queries: `Ok(true)` on success, `Ok(false)` on `hipErrorNotReady`.
    pub(super) fn check_ready(
        self,
        error: hipError_t,
        call: impl FnOnce() -> String,
    ) -> Result<bool> {
        match error {
            sys::hipSuccess => Ok(true),
            sys::hipErrorNotReady => Ok(false),
            _ => Err(self.error(error, &call())),
        }
    }

    /// The runtime's name and version, `HIP 5.2.21153 (libamdhip64.so.5)`, or the reason the
    /// version could not be read.
    pub fn describe(self) -> String {
        match self.runtime_version() {
            Ok(v) => format!("HIP {} ({})", crate::version_string(v), self.api.soname()),
            Err(e) => format!("HIP ({}; {})", self.api.soname(), e.message()),
        }
    }

    pub(super) fn optional<F>(self, f: Option<F>, name: &str) -> Result<F> {
        f.ok_or_else(|| {
            Error::new(
                StatusCode::Unimplemented,
                format!(
                    "{name} is not exported by {} (HIP {})",
                    self.api.soname(),
                    self.runtime_version()
                        .map(crate::version_string)
                        .unwrap_or_else(|_| "?".into())
                ),
            )
        })
    }
}

/// The error for a failed load, `Unavailable`.
pub fn load_error(e: sys::LoadError) -> Error {
    Error::new(StatusCode::Unavailable, e.to_string())
}

/// Copies a static C string the runtime returned; `None` for null.
fn static_str(p: *const std::ffi::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null strings from hipGetErrorName/hipGetErrorString are static and
    // NUL-terminated.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}
