//! Run-time compilation of CUDA C to PTX with NVRTC, guarded like the driver.
//!
//! cudarc opens libnvrtc on first use (trying `libnvrtc.so`, `libnvrtc.so.12`, ... in order)
//! and **panics** if none opens or a symbol is missing. [`probe`] therefore checks first, once
//! per process: [`cudarc::nvrtc::sys::is_culib_present`] (dlopen of the same candidate list, in
//! the same order, as cudarc's loader), then every symbol this module calls, looked up in the
//! very library cudarc opened. Only then is any NVRTC function called. A missing or unusable
//! libnvrtc is `Unavailable`, never a panic.
//!
//! NVRTC needs no GPU and no libcuda: it is a compiler. The PTX it produces has the PTX ISA
//! version of its CUDA release, and the driver that loads it must be at least as new
//! (otherwise loading fails with `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`): use an NVRTC no newer
//! than the driver.

use std::ffi::{c_char, c_int, CString};
use std::sync::OnceLock;

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};
use halcyon::{Error, Result, StatusCode};

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
    version: (i32, i32),
}

impl Nvrtc {
    /// NVRTC's CUDA version, `(major, minor)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }
}

/// Checks once per process that libnvrtc can be used (see the [module docs](self)):
/// `Unavailable` saying why otherwise.
pub fn probe() -> Result<&'static Nvrtc> {
    static PROBE: OnceLock<Result<Nvrtc>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            // SAFETY: only dlopens cudarc's candidate names; calls nothing in them.
            if !unsafe { sys::is_culib_present() } {
                return Err(Error::new(
                    StatusCode::Unavailable,
                    "NVRTC is not available: no libnvrtc could be opened (install the CUDA \
                     toolkit's NVRTC, e.g. Debian's libnvrtc12 or pip's nvidia-cuda-nvrtc-cu12, \
                     and make it findable through LD_LIBRARY_PATH); or load precompiled PTX or \
                     cubin with CudaModule::ptx / CudaModule::cubin",
                ));
            }
            // SAFETY: `is_culib_present` just opened one of the same names in the same order,
            // so cudarc's loader (which panics only if none opens) finds it too.
            let library = unsafe { sys::culib() };
            for symbol in SYMBOLS {
                // SAFETY: only looks the symbol up; the pointer type is never called through.
                if let Err(e) = unsafe { library.get::<unsafe extern "C" fn()>(symbol.as_bytes()) }
                {
                    return Err(Error::new(
                        StatusCode::Unavailable,
                        format!("the libnvrtc that opened lacks {symbol} ({e}); it is not usable"),
                    ));
                }
            }
            let (mut major, mut minor): (c_int, c_int) = (0, 0);
            // SAFETY: the symbol exists (checked above); both out-pointers are valid.
            let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
            check(r, "nvrtcVersion")?;
            Ok(Nvrtc {
                version: (major, minor),
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

fn check(r: nvrtcResult, call: &str) -> Result<()> {
    if r == nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    let code = match r {
        nvrtcResult::NVRTC_ERROR_OUT_OF_MEMORY => StatusCode::ResourceExhausted,
        nvrtcResult::NVRTC_ERROR_INVALID_INPUT
        | nvrtcResult::NVRTC_ERROR_INVALID_OPTION
        | nvrtcResult::NVRTC_ERROR_COMPILATION => StatusCode::InvalidArgument,
        _ => StatusCode::Internal,
    };
    Err(Error::new(
        code,
        format!("{call} failed: {r:?} ({})", r as c_int),
    ))
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
    if compiled != nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(&program).unwrap_or_default();
        let error = check(compiled, &format!("nvrtcCompileProgram({name})")).unwrap_err();
        return Err(Error::new(
            error.code(),
            format!("{}:\n{}", error.message(), log.trim_end()),
        ));
    }

    let mut size = 0usize;
    // SAFETY: a live, compiled program; the out-pointer is valid.
    check(
        unsafe { sys::nvrtcGetPTXSize(program.0, &mut size) },
        "nvrtcGetPTXSize",
    )?;
    let mut ptx: Vec<c_char> = vec![0; size.max(1)];
    // SAFETY: the buffer holds `size` bytes, which nvrtcGetPTXSize says the PTX (with its NUL)
    // takes.
    check(
        unsafe { sys::nvrtcGetPTX(program.0, ptx.as_mut_ptr()) },
        "nvrtcGetPTX",
    )?;
    drop(program);
    drop((c_source, c_name));
    Ok(text(&ptx))
}

fn program_log(program: &Program) -> Result<String> {
    let mut size = 0usize;
    // SAFETY: a live program; the out-pointer is valid.
    check(
        unsafe { sys::nvrtcGetProgramLogSize(program.0, &mut size) },
        "nvrtcGetProgramLogSize",
    )?;
    let mut log: Vec<c_char> = vec![0; size.max(1)];
    // SAFETY: the buffer holds the `size` bytes the log (with its NUL) takes.
    check(
        unsafe { sys::nvrtcGetProgramLog(program.0, log.as_mut_ptr()) },
        "nvrtcGetProgramLog",
    )?;
    Ok(text(&log))
}

#[cfg(test)]
mod tests {
    use super::*;

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
