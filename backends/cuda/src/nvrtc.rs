//! Run-time compilation of CUDA C to PTX with NVRTC, guarded like the driver.
//!
//! **Which libnvrtc.** cudarc's own loader (with the CUDA 12.8 bindings) looks for
//! `libnvrtc.so`, `libnvrtc.so.12` and older, never `libnvrtc.so.13`, and panics if none opens
//! or a symbol is missing; on a CUDA 13 system NVRTC would be missing. So [`probe`] opens NVRTC
//! itself, once per process: every name of [`LIBNVRTC_SONAMES`] that opens and has every symbol
//! this module calls is a candidate, asked for its version (`nvrtcVersion`), and the newest is
//! kept, preferring one no newer than the CUDA driver when there is one (its version is read
//! with `cuDriverGetVersion`, without initialising CUDA). The PTX NVRTC writes has its CUDA
//! release's PTX ISA version, which a driver older than that release cannot load
//! (`CUDA_ERROR_UNSUPPORTED_PTX_VERSION`), so with CUDA 12.8 and 13.0 NVRTCs installed and a
//! CUDA 12.8 driver, NVRTC 12.8 is used. A missing or unusable libnvrtc is `Unavailable`,
//! never a panic. NVRTC's API is the same in CUDA 12 and 13 for the calls made here.
//!
//! The calls go through a `sys` layer: cudarc's declarations (checked at compile time) with the
//! result read as a number, since cudarc's `nvrtcResult` is a Rust enum of CUDA 12.8's codes
//! and a newer NVRTC may return one it lacks (CUDA 13.0 added
//! `NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED = 17`), which as that enum would be undefined
//! behaviour (see [`crate::sys`] for the driver's side of the same problem).
//!
//! NVRTC needs no GPU and no libcuda: it is a compiler.

use std::ffi::{c_char, c_int, CString};
use std::sync::OnceLock;

use cudarc::nvrtc::sys::{nvrtcProgram, nvrtcResult};
use halcyon::{Error, Result, StatusCode};
use libloading::Library;

/// The libnvrtc names [`probe`] tries (see the [module docs](self) for which one it keeps).
pub const LIBNVRTC_SONAMES: &[&str] = &["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"];

/// The libnvrtc [`probe`] kept; loaded for the rest of the process.
static LIBRARY: OnceLock<Library> = OnceLock::new();

/// The NVRTC calls [`compile_ptx`] makes, with cudarc's parameter types and the result as its
/// number (see the [module docs](self)). Each resolves its symbol on first use, from the
/// library [`probe`] kept, which it checked has every one.
mod sys {
    use std::ffi::{c_char, c_int};
    use std::sync::OnceLock;

    use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};

    /// Not an NVRTC result: the symbol or the library is missing (the probe rules both out
    /// before any call).
    pub(super) const MISSING_SYMBOL: u32 = u32::MAX;

    macro_rules! nvrtc_calls {
        ($( fn $name:ident($($arg:ident: $ty:ty),* $(,)?); )*) => {$(
            /// # Safety
            ///
            /// NVRTC's contract for this call, after a successful [`super::probe`].
            #[allow(non_snake_case)]
            pub(super) unsafe fn $name($($arg: $ty),*) -> u32 {
                // The same parameters as cudarc's declaration, generated from nvrtc.h.
                const _: unsafe fn($($ty),*) -> nvrtcResult = sys::$name;
                type F = unsafe extern "C" fn($($ty),*) -> u32;
                static FUNCTION: OnceLock<Option<F>> = OnceLock::new();
                // SAFETY: `F` is cudarc's C signature with the `repr(u32)` enum result read as
                // its number (same ABI); the library stays loaded for the process.
                let function = FUNCTION.get_or_init(|| unsafe {
                    super::LIBRARY
                        .get()?
                        .get::<F>(concat!(stringify!($name), "\0").as_bytes())
                        .ok()
                        .map(|s| *s)
                });
                match function {
                    // SAFETY: the caller upholds the call's contract.
                    Some(f) => unsafe { f($($arg),*) },
                    None => MISSING_SYMBOL,
                }
            }
        )*};
    }

    nvrtc_calls! {
        fn nvrtcCreateProgram(
            program: *mut nvrtcProgram,
            source: *const c_char,
            name: *const c_char,
            header_count: c_int,
            headers: *const *const c_char,
            include_names: *const *const c_char,
        );
        fn nvrtcCompileProgram(program: nvrtcProgram, option_count: c_int, options: *const *const c_char);
        fn nvrtcGetPTXSize(program: nvrtcProgram, size: *mut usize);
        fn nvrtcGetPTX(program: nvrtcProgram, ptx: *mut c_char);
        fn nvrtcGetProgramLogSize(program: nvrtcProgram, size: *mut usize);
        fn nvrtcGetProgramLog(program: nvrtcProgram, log: *mut c_char);
        fn nvrtcDestroyProgram(program: *mut nvrtcProgram);
    }
}

/// The NVRTC symbols [`compile_ptx`] calls.
const SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcDestroyProgram",
];

/// A usable NVRTC: the library opened and has every symbol needed.
#[derive(Debug)]
pub struct Nvrtc {
    soname: &'static str,
    version: (i32, i32),
}

impl Nvrtc {
    /// NVRTC's CUDA version, `(major, minor)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The name it was opened by, one of [`LIBNVRTC_SONAMES`].
    pub fn soname(&self) -> &'static str {
        self.soname
    }
}

/// A libnvrtc that opened and has every symbol needed, with its version.
struct Candidate {
    soname: &'static str,
    library: Library,
    version: (i32, i32),
}

/// Opens `soname` and asks its version; `Err` says why it cannot be used.
fn open(soname: &'static str) -> std::result::Result<Candidate, String> {
    // SAFETY: opening libnvrtc runs its initialisers, which are sound at any time.
    let library = unsafe { Library::new(soname) }.map_err(|e| format!("dlopen {soname}: {e}"))?;
    for symbol in SYMBOLS {
        // SAFETY: only looks the symbol up; the pointer type is never called through.
        if let Err(e) = unsafe { library.get::<unsafe extern "C" fn()>(symbol.as_bytes()) } {
            return Err(format!("{soname} lacks {symbol} ({e})"));
        }
    }
    type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> u32;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: `nvrtcResult nvrtcVersion(int*, int*)` (present: checked above), with the enum
    // result read as its number; both out-pointers are valid.
    let r = unsafe {
        let version = library
            .get::<Version>(b"nvrtcVersion")
            .map_err(|e| e.to_string())?;
        version(&mut major, &mut minor)
    };
    check(r, "nvrtcVersion").map_err(|e| format!("{soname}: {}", e.message()))?;
    Ok(Candidate {
        soname,
        library,
        version: (major, minor),
    })
}

/// Which candidate to keep: the newest no newer than `driver` (the CUDA version the driver
/// supports, `(major, minor)`, when known), else the newest. `None` for no candidates.
fn choose(versions: &[(i32, i32)], driver: Option<(i32, i32)>) -> Option<usize> {
    let newest = |fits: &dyn Fn(&(i32, i32)) -> bool| {
        (0..versions.len())
            .filter(|&i| fits(&versions[i]))
            .max_by_key(|&i| versions[i])
    };
    driver
        .and_then(|driver| newest(&|v| *v <= driver))
        .or_else(|| newest(&|_| true))
}

/// Checks once per process that libnvrtc can be used, and picks which (see the
/// [module docs](self)): `Unavailable` saying why otherwise.
pub fn probe() -> Result<&'static Nvrtc> {
    static PROBE: OnceLock<Result<Nvrtc>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            let mut candidates = Vec::new();
            let mut refused = Vec::new();
            for &soname in LIBNVRTC_SONAMES {
                match open(soname) {
                    Ok(candidate) => candidates.push(candidate),
                    Err(why) => refused.push(why),
                }
            }
            let versions: Vec<_> = candidates.iter().map(|c| c.version).collect();
            let driver =
                crate::probe::driver_version_without_init().map(|v| (v / 1000, (v % 1000) / 10));
            let Some(index) = choose(&versions, driver) else {
                return Err(Error::new(
                    StatusCode::Unavailable,
                    format!(
                        "NVRTC is not available: no usable libnvrtc ({}); install the CUDA \
                         toolkit's NVRTC (e.g. Debian's libnvrtc12, or pip's \
                         nvidia-cuda-nvrtc-cu12 or nvidia-cuda-nvrtc for CUDA 13) and make it \
                         findable through LD_LIBRARY_PATH; or load precompiled PTX with \
                         CudaModule::ptx (or a cubin with the unsafe CudaModule::binary)",
                        refused.join("; ")
                    ),
                ));
            };
            let chosen = candidates.swap_remove(index);
            // The others stay loaded too (unloading a library is never needed here, and
            // `libnvrtc.so` is usually the same file as one of the versioned names).
            for other in candidates {
                std::mem::forget(other.library);
            }
            let _ = LIBRARY.set(chosen.library);
            Ok(Nvrtc {
                soname: chosen.soname,
                version: chosen.version,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The names of CUDA 12.8's NVRTC results, by number; `None` for a newer one.
fn result_name(r: u32) -> Option<nvrtcResult> {
    use nvrtcResult::*;
    [
        NVRTC_SUCCESS,
        NVRTC_ERROR_OUT_OF_MEMORY,
        NVRTC_ERROR_PROGRAM_CREATION_FAILURE,
        NVRTC_ERROR_INVALID_INPUT,
        NVRTC_ERROR_INVALID_PROGRAM,
        NVRTC_ERROR_INVALID_OPTION,
        NVRTC_ERROR_COMPILATION,
        NVRTC_ERROR_BUILTIN_OPERATION_FAILURE,
        NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION,
        NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION,
        NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID,
        NVRTC_ERROR_INTERNAL_ERROR,
        NVRTC_ERROR_TIME_FILE_WRITE_FAILED,
        NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED,
        NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED,
        NVRTC_ERROR_PCH_CREATE,
        NVRTC_ERROR_CANCELLED,
    ]
    .into_iter()
    .find(|&known| known as u32 == r)
}

/// `Ok` for `NVRTC_SUCCESS`, else an error naming `call` and the result.
fn check(r: u32, call: &str) -> Result<()> {
    use nvrtcResult as R;
    let known = result_name(r);
    let code = match known {
        Some(R::NVRTC_SUCCESS) => return Ok(()),
        Some(R::NVRTC_ERROR_OUT_OF_MEMORY) => StatusCode::ResourceExhausted,
        Some(
            R::NVRTC_ERROR_INVALID_INPUT
            | R::NVRTC_ERROR_INVALID_OPTION
            | R::NVRTC_ERROR_COMPILATION,
        ) => StatusCode::InvalidArgument,
        None if r == sys::MISSING_SYMBOL => StatusCode::Unavailable,
        _ => StatusCode::Internal,
    };
    let what = match known {
        Some(known) => format!("{known:?} ({r})"),
        None if r == sys::MISSING_SYMBOL => "libnvrtc lacks this function".into(),
        None => format!("NVRTC error {r} (newer than halcyon-cuda's CUDA 12.8 bindings)"),
    };
    Err(Error::new(code, format!("{call} failed: {what}")))
}

/// Destroys the program on every path out of [`compile_ptx`].
struct Program(nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        let _ = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn c_string(what: &str, text: &str) -> Result<CString> {
    CString::new(text).map_err(|e| {
        Error::new(
            StatusCode::InvalidArgument,
            format!("{what} contains a NUL byte at offset {}", e.nul_position()),
        )
    })
}

/// NUL-terminated C characters → `String` (up to the first NUL).
fn text(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .map(|&c| c as u8)
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles CUDA C `source` (named `name` in diagnostics) to PTX with `options` (NVRTC's
/// command-line options, e.g. `--gpu-architecture=compute_90`, `-lineinfo`). A compilation
/// error is `InvalidArgument` carrying NVRTC's log.
pub fn compile_ptx(source: &str, name: &str, options: &[&str]) -> Result<String> {
    probe()?;
    let c_source = c_string("the CUDA source", source)?;
    let c_name = c_string("the program name", name)?;
    let c_options = options
        .iter()
        .map(|o| c_string(&format!("NVRTC option {o:?}"), o))
        .collect::<Result<Vec<_>>>()?;
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();

    let mut raw: nvrtcProgram = std::ptr::null_mut();
    // SAFETY: symbols checked by the probe; source and name are NUL-terminated and outlive the
    // program (NVRTC may keep pointers to them until it is destroyed; `Program` is dropped
    // before them, below); no headers are passed (count 0, null arrays).
    let r = unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            c_source.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    check(r, "nvrtcCreateProgram")?;
    let program = Program(raw);

    // SAFETY: a live program; `option_ptrs` holds `len` valid C strings that outlive the call.
    let compiled = unsafe {
        sys::nvrtcCompileProgram(program.0, option_ptrs.len() as c_int, option_ptrs.as_ptr())
    };
    if compiled != nvrtcResult::NVRTC_SUCCESS as u32 {
        let log = program_log(&program).unwrap_or_default();
        let error = check(compiled, &format!("nvrtcCompileProgram({name})")).unwrap_err();
        return Err(Error::new(
            error.code(),
            format!("{}:\n{}", error.message(), log.trim_end()),
        ));
    }

    let mut size = 0usize;
    check(
        // SAFETY: a live, compiled program; the out-pointer is valid.
        unsafe { sys::nvrtcGetPTXSize(program.0, &mut size) },
        "nvrtcGetPTXSize",
    )?;
    let mut ptx: Vec<c_char> = vec![0; size.max(1)];
    check(
        // SAFETY: the buffer holds `size` bytes, which nvrtcGetPTXSize says the PTX (with its NUL)
        // takes.
        unsafe { sys::nvrtcGetPTX(program.0, ptx.as_mut_ptr()) },
        "nvrtcGetPTX",
    )?;
    drop(program);
    drop((c_source, c_name));
    Ok(text(&ptx))
}

fn program_log(program: &Program) -> Result<String> {
    let mut size = 0usize;
    check(
        // SAFETY: a live program; the out-pointer is valid.
        unsafe { sys::nvrtcGetProgramLogSize(program.0, &mut size) },
        "nvrtcGetProgramLogSize",
    )?;
    let mut log: Vec<c_char> = vec![0; size.max(1)];
    check(
        // SAFETY: the buffer holds the `size` bytes the log (with its NUL) takes.
        unsafe { sys::nvrtcGetProgramLog(program.0, log.as_mut_ptr()) },
        "nvrtcGetProgramLog",
    )?;
    Ok(text(&log))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_nvrtc_no_newer_than_the_driver_is_chosen() {
        let both = [(12, 8), (13, 0)];
        assert_eq!(choose(&both, None), Some(1), "no driver: the newest");
        assert_eq!(choose(&both, Some((13, 0))), Some(1));
        assert_eq!(
            choose(&both, Some((12, 9))),
            Some(0),
            "12 cannot load 13's PTX"
        );
        assert_eq!(
            choose(&[(12, 4), (12, 8)], Some((12, 6))),
            Some(0),
            "nor 12.6 12.8's"
        );
        assert_eq!(
            choose(&[(13, 0)], Some((12, 8))),
            Some(0),
            "better than none"
        );
        assert_eq!(choose(&[(12, 4), (12, 8), (12, 8)], Some((13, 0))), Some(2));
        assert_eq!(choose(&[], Some((12, 8))), None);
    }

    #[test]
    fn results_are_named_by_number_and_newer_ones_stay_numbers() {
        check(0, "nvrtcVersion").unwrap();
        let e = check(
            nvrtcResult::NVRTC_ERROR_COMPILATION as u32,
            "nvrtcCompileProgram(k)",
        )
        .unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert_eq!(
            e.message(),
            "nvrtcCompileProgram(k) failed: NVRTC_ERROR_COMPILATION (6)"
        );
        // CUDA 13.0's NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED.
        let e = check(17, "nvrtcCompileProgram(k)").unwrap_err();
        assert_eq!(e.code(), StatusCode::Internal);
        assert!(e.message().contains("NVRTC error 17"), "{e}");
        let e = check(sys::MISSING_SYMBOL, "nvrtcGetPTX").unwrap_err();
        assert_eq!(e.code(), StatusCode::Unavailable);
    }

    #[test]
    fn missing_or_present_nvrtc_never_panics() {
        match probe() {
            Ok(nvrtc) => {
                let (major, minor) = nvrtc.version();
                println!("NVRTC {major}.{minor}");
                assert!(major >= 11);
            }
            Err(e) => {
                assert_eq!(e.code(), StatusCode::Unavailable, "{e}");
                assert!(e.message().contains("libnvrtc"), "{e}");
            }
        }
    }

    #[test]
    fn nul_bytes_are_refused_before_nvrtc_is_needed() {
        let e = c_string("the CUDA source", "a\0b").unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert_eq!(
            e.message(),
            "the CUDA source contains a NUL byte at offset 1"
        );
    }

    #[test]
    fn compile_errors_carry_the_log() {
        if let Err(e) = probe() {
            eprintln!("skipped: {e}");
            return;
        }
        let e = compile_ptx(
            "extern \"C\" __global__ void k() { undeclared = 1; }",
            "broken.cu",
            &[],
        )
        .unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(
            e.message()
                .starts_with("nvrtcCompileProgram(broken.cu) failed: NVRTC_ERROR_COMPILATION (6):"),
            "{e}"
        );
        assert!(e.message().contains("undeclared"), "{e}");
        let e = compile_ptx("", "x.cu", &["--no-such-option"]).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    }
}
