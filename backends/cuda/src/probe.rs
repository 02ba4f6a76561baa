//! The gate in front of cudarc.
//!
//! cudarc (with `dynamic-loading`) panics when libcuda is missing, on every call, and when a
//! symbol its bindings expect is missing from an older driver. halcyon must never panic for
//! "no GPU" (and under `panic = "abort"` a panic is fatal), so before any cudarc function runs,
//! [`probe`] opens libcuda itself with [`libloading`], reads `cuDriverGetVersion`, compares it
//! with the CUDA version of the bindings this crate was built with ([`BINDINGS_VERSION`]), and
//! calls `cuInit(0)`. Only a successful probe yields a [`Probe`], and every function of this
//! crate that calls cudarc takes one; the result is cached for the process.

use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::OnceLock;

use halcyon::{Error, Result, StatusCode};
use libloading::Library;

/// The sonames tried, in order.
pub const LIBCUDA_SONAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// The CUDA version of cudarc's bindings (the `cuda-XXXXX` feature), `1000 * major + 10 *
/// minor`: the driver must support at least this version.
pub const BINDINGS_VERSION: i32 = cudarc::driver::sys::CUDA_VERSION as i32;

/// A successful probe: libcuda is loaded, new enough, and initialised. Only [`probe`] makes
/// one, so holding a `&Probe` proves cudarc may be called.
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

/// Probes once per process and caches the outcome: `Unavailable` with the reason when libcuda
/// is missing, too old for the bindings, or fails to initialise (no device).
pub fn probe() -> Result<&'static Probe> {
    static PROBE: OnceLock<Result<Probe>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let probe = probe_with(LIBCUDA_SONAMES, BINDINGS_VERSION)?;
            // cudarc opens libcuda by its own list of names; make sure it finds one, since
            // its loader panics when it does not.
            // SAFETY: only tries dlopen on cudarc's candidate names (a driver that just
            // loaded and initialised above); it calls no CUDA function.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err(Error::new(
                    StatusCode::Unavailable,
                    format!(
                        "{} loaded, but cudarc could not open libcuda by any of its names",
                        probe.soname
                    ),
                ));
            }
            Ok(probe)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The error when the driver is older than the bindings; `Ok` otherwise.
pub fn check_driver_version(driver_version: i32, bindings_version: i32) -> Result<()> {
    if driver_version >= bindings_version {
        return Ok(());
    }
    Err(Error::new(
        StatusCode::Unavailable,
        format!(
            "driver supports CUDA {} but halcyon-cuda was built against CUDA {} bindings; \
             update the NVIDIA driver or build with an older cudarc cuda-XXXXX feature",
            version_string(driver_version),
            version_string(bindings_version)
        ),
    ))
}

type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuGetErrorName = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;

/// The probe proper, uncached, against `sonames` and `bindings_version`. Calls no cudarc
/// function.
pub(crate) fn probe_with(sonames: &[&str], bindings_version: i32) -> Result<Probe> {
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
    // libcuda starts threads in cuInit and does not survive being unloaded: keep it loaded
    // for the process (cudarc opens it again by name and shares this copy).
    std::mem::forget(library);

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
    check_driver_version(driver_version, bindings_version)?;

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
    Ok(Probe {
        soname: soname.to_string(),
        driver_version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_names_each_soname() {
        let err = probe_with(&["libhalcyon-no-such-cuda.so.1"], BINDINGS_VERSION).unwrap_err();
        assert_eq!(err.code(), StatusCode::Unavailable);
        assert!(
            err.message()
                .starts_with("no NVIDIA driver: dlopen libhalcyon-no-such-cuda.so.1: "),
            "{err}"
        );
    }

    #[test]
    fn old_driver_is_refused_with_both_versions() {
        let err = check_driver_version(11040, 12080).unwrap_err();
        assert_eq!(err.code(), StatusCode::Unavailable);
        assert!(
            err.message().starts_with(
                "driver supports CUDA 11.4 but halcyon-cuda was built against CUDA 12.8 bindings"
            ),
            "{err}"
        );
        check_driver_version(12080, 12080).unwrap();
        check_driver_version(13000, 12080).unwrap();
    }

    #[test]
    fn bindings_version_is_the_selected_feature() {
        assert_eq!(BINDINGS_VERSION, 12080);
    }
}
