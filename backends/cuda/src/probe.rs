//! The gate in front of the CUDA driver.
//!
//! cudarc (with `dynamic-loading`) panics when libcuda is missing, on every call. halcyon must
//! never panic for "no GPU" (and under `panic = "abort"` a panic is fatal), so it never calls
//! the driver through cudarc's loader: [`probe`] opens libcuda itself with [`libloading`],
//! reads `cuDriverGetVersion`, compares it with the oldest CUDA version this crate supports
//! ([`MIN_DRIVER_VERSION`], CUDA 12.0), and calls `cuInit(0)`; every driver call then resolves
//! its symbol from that same library ([`crate::sys`]), so the version checked is the version
//! called (cudarc's loader tries `libcuda.so` first, which may be another file: a toolkit's
//! stub on the loader path, or a second driver). Only a successful probe yields a [`Probe`],
//! and every function of this crate that calls the driver takes one; the result is cached for
//! the process.
//!
//! **Driver versions.** The bindings are CUDA 12.8's ([`BINDINGS_VERSION`]), but the driver
//! need not be that new: [`crate::sys`] resolves each driver symbol by name the first time it
//! is called (and fails that call with `Unimplemented` if the driver lacks it), so an older
//! driver works as long as nothing calls a function it does not have. Every driver function
//! this crate calls exists in CUDA 11.4 or earlier except `cuFuncGetParamInfo` (CUDA 12.4),
//! which is called only when [`Probe::supports`] says the driver has it
//! ([`PARAM_INFO_VERSION`]); on CUDA 12.0 to 12.3 drivers, loading a module skips the
//! kernel-signature check it provides. The minimum is CUDA 12.0 (driver R525) rather than 11.4
//! because the bindings are CUDA 12 headers: NVIDIA's minor-version compatibility covers CUDA
//! 12.x on any 12.x driver, and nothing is tested against CUDA 11 drivers. When adding a
//! driver call, check the version that introduced it and gate it like `cuFuncGetParamInfo` if
//! it is newer than [`MIN_DRIVER_VERSION`]. A driver newer than the bindings is fine too: its
//! new error codes stay numbers ([`crate::sys::Code`]).

use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::OnceLock;

use halcyon::{Error, Result, StatusCode};
use libloading::Library;

/// The sonames tried, in order.
pub const LIBCUDA_SONAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// The CUDA version of cudarc's bindings (the `cuda-XXXXX` feature), `1000 * major + 10 *
/// minor`. Informational: the driver need only support [`MIN_DRIVER_VERSION`].
pub const BINDINGS_VERSION: i32 = cudarc::driver::sys::CUDA_VERSION as i32;

/// The oldest CUDA version the driver must support (`cuDriverGetVersion`): CUDA 12.0, driver
/// R525 or newer. Every driver function this crate calls unconditionally exists there (see the
/// [module docs](self)).
pub const MIN_DRIVER_VERSION: i32 = 12000;

/// The CUDA version that introduced `cuFuncGetParamInfo` (12.4, driver R550): below it,
/// loading a module does not check kernel signatures against the entry points.
pub const PARAM_INFO_VERSION: i32 = 12040;

/// A successful probe: libcuda is loaded, new enough, and initialised. Only [`probe`] makes
/// one, so holding a `&Probe` proves the driver may be called.
#[derive(Debug)]
pub struct Probe {
    soname: String,
    driver_version: i32,
}

impl Probe {
    /// The soname that opened, for example `libcuda.so.1`.
    pub fn soname(&self) -> &str {
        &self.soname
    }

    /// The CUDA version the driver supports (`cuDriverGetVersion`), for example `12040`.
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    /// Whether the driver supports CUDA `version` (for example [`PARAM_INFO_VERSION`]), so
    /// functions introduced in it may be called (on an older driver they fail as missing).
    pub fn supports(&self, version: i32) -> bool {
        self.driver_version >= version
    }
}

/// Formats a CUDA version number: `12080` as `12.8`.
///
/// ```
/// assert_eq!(halcyon_cuda::probe::version_string(12080), "12.8");
/// assert_eq!(halcyon_cuda::probe::version_string(11040), "11.4");
/// ```
pub fn version_string(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// The cached outcome of [`probe`].
static PROBE: OnceLock<Result<Probe>> = OnceLock::new();

/// The library a successful [`probe`] opened, kept loaded for the process.
static LIBRARY: OnceLock<Library> = OnceLock::new();

/// The libcuda a successful [`probe`] opened, initialised and checked; `None` before one.
/// [`crate::sys`] resolves every driver call from it.
pub(crate) fn library() -> Option<&'static Library> {
    LIBRARY.get()
}

/// The CUDA version the driver supports, for example `12040`, found without initialising CUDA:
/// the probe's, if it already succeeded, else `cuDriverGetVersion` (which needs no `cuInit`)
/// from a libcuda opened for the question (and kept loaded). `None` without a usable driver.
/// For choosing an NVRTC ([`crate::nvrtc`]) without making compilation initialise CUDA in the
/// process (which, for one, a process that forks afterwards must not have done).
pub(crate) fn driver_version_without_init() -> Option<i32> {
    if let Some(Ok(probe)) = PROBE.get() {
        return Some(probe.driver_version);
    }
    LIBCUDA_SONAMES.iter().find_map(|&soname| {
        // SAFETY: opening libcuda runs its initialisers, which are sound at any time.
        let library = unsafe { Library::new(soname) }.ok()?;
        let mut version: c_int = 0;
        // SAFETY: `CUresult cuDriverGetVersion(int*)`, with the result read as its number;
        // the out-pointer is valid; the function needs no cuInit.
        let r = unsafe {
            let get_version = library
                .get::<CuDriverGetVersion>(b"cuDriverGetVersion\0")
                .ok()?;
            get_version(&mut version)
        };
        // Never unloaded (see `probe_with`).
        std::mem::forget(library);
        (r == 0).then_some(version)
    })
}

/// Probes once per process and caches the outcome: `Unavailable` with the reason when libcuda
/// is missing, older than [`MIN_DRIVER_VERSION`], or fails to initialise (no device).
pub fn probe() -> Result<&'static Probe> {
    PROBE
        .get_or_init(|| {
            let (probe, library) = probe_with(LIBCUDA_SONAMES, MIN_DRIVER_VERSION)?;
            // Set once: only this closure sets it, and it runs once.
            let _ = LIBRARY.set(library);
            Ok(probe)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The error when the driver supports an older CUDA version than `minimum_version`
/// ([`MIN_DRIVER_VERSION`] in the probe); `Ok` otherwise.
pub fn check_driver_version(driver_version: i32, minimum_version: i32) -> Result<()> {
    if driver_version >= minimum_version {
        return Ok(());
    }
    Err(Error::new(
        StatusCode::Unavailable,
        format!(
            "driver supports CUDA {} but halcyon-cuda needs CUDA {} or newer; update the NVIDIA \
             driver",
            version_string(driver_version),
            version_string(minimum_version)
        ),
    ))
}

type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuGetErrorName = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;

/// The probe proper, uncached, against `sonames` and `minimum_version`: the probe and the
/// library it opened. Calls no cudarc function.
pub(crate) fn probe_with(sonames: &[&str], minimum_version: i32) -> Result<(Probe, Library)> {
    let mut tried = Vec::new();
    let mut opened = None;
    for &soname in sonames {
        // SAFETY: opening libcuda runs its initialisers, which are sound at any time.
        match unsafe { Library::new(soname) } {
            Ok(library) => {
                opened = Some((soname, library));
                break;
            }
            Err(e) => tried.push(format!("dlopen {soname}: {e}")),
        }
    }
    let Some((soname, library)) = opened else {
        return Err(Error::new(
            StatusCode::Unavailable,
            format!("no NVIDIA driver: {}", tried.join("; ")),
        ));
    };

    let missing = |symbol: &str, e: libloading::Error| {
        Error::new(
            StatusCode::Unavailable,
            format!("{soname} lacks {symbol} ({e}); it is not a usable CUDA driver"),
        )
    };
    // SAFETY: these are the CUDA driver API's signatures:
    // CUresult cuDriverGetVersion(int*), CUresult cuInit(unsigned int),
    // CUresult cuGetErrorName(CUresult, const char**). The pointers are used only while
    // `library` is alive (it is never closed, below).
    let (get_version, init, error_name) = unsafe {
        (
            *library
                .get::<CuDriverGetVersion>(b"cuDriverGetVersion\0")
                .map_err(|e| missing("cuDriverGetVersion", e))?,
            *library
                .get::<CuInit>(b"cuInit\0")
                .map_err(|e| missing("cuInit", e))?,
            library
                .get::<CuGetErrorName>(b"cuGetErrorName\0")
                .ok()
                .map(|s| *s),
        )
    };
    // libcuda starts threads in cuInit and does not survive being unloaded: a library that
    // fails below is kept loaded for the process, and one that succeeds lives in `LIBRARY`.
    let library = std::mem::ManuallyDrop::new(library);

    let describe = |code: c_int| -> String {
        let mut name: *const c_char = std::ptr::null();
        let known = error_name.is_some_and(|f| {
            // SAFETY: cuGetErrorName writes a static string pointer for known codes.
            unsafe { f(code, &mut name) == 0 && !name.is_null() }
        });
        if known {
            // SAFETY: non-null, static and NUL-terminated (checked above).
            let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
            format!("{name} ({code})")
        } else {
            format!("CUresult {code}")
        }
    };

    let mut driver_version: c_int = 0;
    // SAFETY: the out-pointer is valid for one int.
    let e = unsafe { get_version(&mut driver_version) };
    if e != 0 {
        return Err(Error::new(
            StatusCode::Unavailable,
            format!("{soname}: cuDriverGetVersion failed: {}", describe(e)),
        ));
    }
    check_driver_version(driver_version, minimum_version)?;

    // SAFETY: cuInit takes a flags value, which must be 0.
    let e = unsafe { init(0) };
    if e != 0 {
        return Err(Error::new(
            StatusCode::Unavailable,
            format!(
                "NVIDIA driver {soname} (CUDA {}) loaded, but cuInit(0) failed: {}",
                version_string(driver_version),
                describe(e)
            ),
        ));
    }
    Ok((
        Probe {
            soname: soname.to_string(),
            driver_version,
        },
        std::mem::ManuallyDrop::into_inner(library),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_names_each_soname() {
        let err = probe_with(&["libhalcyon-no-such-cuda.so.1"], MIN_DRIVER_VERSION).unwrap_err();
        assert_eq!(err.code(), StatusCode::Unavailable);
        assert!(
            err.message()
                .starts_with("no NVIDIA driver: dlopen libhalcyon-no-such-cuda.so.1: "),
            "{err}"
        );
    }

    #[test]
    fn old_driver_is_refused_with_both_versions() {
        let err = check_driver_version(11080, MIN_DRIVER_VERSION).unwrap_err();
        assert_eq!(err.code(), StatusCode::Unavailable);
        assert!(
            err.message()
                .starts_with("driver supports CUDA 11.8 but halcyon-cuda needs CUDA 12.0 or newer"),
            "{err}"
        );
        let err = check_driver_version(11040, 12080).unwrap_err();
        assert!(
            err.message()
                .starts_with("driver supports CUDA 11.4 but halcyon-cuda needs CUDA 12.8"),
            "{err}"
        );
    }

    #[test]
    fn drivers_older_than_the_bindings_are_accepted() {
        // CUDA 12.0 (R525), 12.2 (R535), 12.4 (R550), 12.8 (R570), 13.0.
        for version in [12000, 12020, 12040, 12080, 13000] {
            check_driver_version(version, MIN_DRIVER_VERSION).unwrap();
        }
    }

    #[test]
    fn newer_calls_are_gated_on_the_driver_version() {
        let probe = |driver_version| Probe {
            soname: "libcuda.so.1".into(),
            driver_version,
        };
        for (version, param_info) in [(12000, false), (12020, false), (12030, false)] {
            assert_eq!(probe(version).supports(PARAM_INFO_VERSION), param_info);
        }
        assert!(probe(12040).supports(PARAM_INFO_VERSION));
        assert!(probe(12080).supports(PARAM_INFO_VERSION));
        assert!(probe(12000).supports(MIN_DRIVER_VERSION));
    }

    #[test]
    fn bindings_version_is_the_selected_feature() {
        assert_eq!(BINDINGS_VERSION, 12080);
        assert_eq!(version_string(MIN_DRIVER_VERSION), "12.0");
        assert_eq!(version_string(PARAM_INFO_VERSION), "12.4");
    }
}
