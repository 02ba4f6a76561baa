//! hiprtc, HIP's run-time compiler, opened at run time: HIP C++ source in, an AMDGPU code object
//! (what [`crate::HipModule`] carries) out. No ROCm compiler toolchain is needed beyond the
//! libraries: hiprtc compiles through `libamd_comgr`, which embeds clang and lld.
//!
//! The symbols live in `libhiprtc.so` from ROCm 5.3 on, and in `libamdhip64.so` itself up to
//! HIP 5.2 (Debian's `libamdhip64-5` is such a runtime; its `libamd-comgr2` dependency is the
//! compiler): [`HipRtc::load_default`] tries [`DEFAULT_SONAMES`] in that order.
//!
//! hiprtc compiles for the GPU the calling thread has current (`hipSetDevice`) unless given
//! `--offload-arch=gfxNNN`; on a machine without an AMD GPU the architecture must be given
//! (hiprtc otherwise fails with "Please provide architecture for which code is to be
//! generated"). Code objects for any architecture can be built on any machine.
//!
//! ```no_run
//! use halcyon_hip::rtc::HipRtc;
//!
//! let rtc = HipRtc::load_default()?;
//! let source = r#"extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }"#;
//! let code_object = rtc.compile(source, "twice.hip", &["--offload-arch=gfx90a", "-O3"])?;
//! assert!(code_object.starts_with(b"\x7fELF"));
//! # Ok::<(), halcyon::Error>(())
//! ```

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, CStr, CString};
use std::fmt;
use std::mem::ManuallyDrop;
use std::ptr;
use std::sync::{Mutex, OnceLock};

use halcyon::{Error, Result, StatusCode};
use libloading::Library;

/// The sonames [`HipRtc::load_default`] tries, in order: the stand-alone hiprtc (ROCm 5.3 and
/// later), then the HIP runtimes that still contain it.
pub const DEFAULT_SONAMES: &[&str] = &[
    "libhiprtc.so",
    "libhiprtc.so.6",
    "libhiprtc.so.5",
    "libamdhip64.so",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// `hiprtcResult` (a C enum).
pub type hiprtcResult = c_int;
/// `HIPRTC_SUCCESS`.
pub const HIPRTC_SUCCESS: hiprtcResult = 0;
/// `HIPRTC_ERROR_OUT_OF_MEMORY`.
pub const HIPRTC_ERROR_OUT_OF_MEMORY: hiprtcResult = 1;
/// `HIPRTC_ERROR_INVALID_INPUT`.
pub const HIPRTC_ERROR_INVALID_INPUT: hiprtcResult = 3;
/// `HIPRTC_ERROR_INVALID_OPTION`.
pub const HIPRTC_ERROR_INVALID_OPTION: hiprtcResult = 5;
/// `HIPRTC_ERROR_COMPILATION`: the log says why.
pub const HIPRTC_ERROR_COMPILATION: hiprtcResult = 6;

/// The opaque program object.
#[repr(C)]
pub struct _hiprtcProgram {
    _data: [u8; 0],
}
/// `hiprtcProgram`.
pub type hiprtcProgram = *mut _hiprtcProgram;

/// hiprtc's entry points (signatures of `hiprtc.h`, unchanged since HIP 4.2).
struct RtcApi {
    create_program: unsafe extern "C" fn(
        prog: *mut hiprtcProgram,
        src: *const c_char,
        name: *const c_char,
        num_headers: c_int,
        headers: *const *const c_char,
        include_names: *const *const c_char,
    ) -> hiprtcResult,
    compile_program: unsafe extern "C" fn(
        prog: hiprtcProgram,
        num_options: c_int,
        options: *const *const c_char,
    ) -> hiprtcResult,
    get_program_log_size:
        unsafe extern "C" fn(prog: hiprtcProgram, size: *mut usize) -> hiprtcResult,
    get_program_log: unsafe extern "C" fn(prog: hiprtcProgram, log: *mut c_char) -> hiprtcResult,
    get_code_size: unsafe extern "C" fn(prog: hiprtcProgram, size: *mut usize) -> hiprtcResult,
    get_code: unsafe extern "C" fn(prog: hiprtcProgram, code: *mut c_char) -> hiprtcResult,
    destroy_program: unsafe extern "C" fn(prog: *mut hiprtcProgram) -> hiprtcResult,
    get_error_string: unsafe extern "C" fn(result: hiprtcResult) -> *const c_char,
    version: unsafe extern "C" fn(major: *mut c_int, minor: *mut c_int) -> hiprtcResult,
    soname: String,
    _library: ManuallyDrop<Library>,
}

impl RtcApi {
    /// # Safety
    /// `library` must export the hiprtc symbols with the signatures of `hiprtc.h`.
    unsafe fn resolve(library: Library, soname: &str) -> std::result::Result<RtcApi, String> {
        macro_rules! symbol {
            ($name:literal) => {
                // SAFETY: the caller guarantees the signature; the pointer stays valid because
                // the library is kept, never unloaded, in the returned table.
                unsafe {
                    *library
                        .get(concat!($name, "\0").as_bytes())
                        .map_err(|e| format!("{soname} lacks {}: {e}", $name))?
                }
            };
        }
        Ok(RtcApi {
            create_program: symbol!("hiprtcCreateProgram"),
            compile_program: symbol!("hiprtcCompileProgram"),
            get_program_log_size: symbol!("hiprtcGetProgramLogSize"),
            get_program_log: symbol!("hiprtcGetProgramLog"),
            get_code_size: symbol!("hiprtcGetCodeSize"),
            get_code: symbol!("hiprtcGetCode"),
            destroy_program: symbol!("hiprtcDestroyProgram"),
            get_error_string: symbol!("hiprtcGetErrorString"),
            version: symbol!("hiprtcVersion"),
            soname: soname.to_string(),
            _library: ManuallyDrop::new(library),
        })
    }
}

/// The loaded hiprtc: cheap to copy, valid for the whole process (the library is never
/// unloaded).
#[derive(Clone, Copy)]
pub struct HipRtc {
    api: &'static RtcApi,
}

impl fmt::Debug for HipRtc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipRtc")
            .field("soname", &self.api.soname)
            .finish()
    }
}

/// Frees a program on every path.
struct Program<'a> {
    api: &'a RtcApi,
    raw: hiprtcProgram,
}

impl Drop for Program<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by hiprtcCreateProgram and is destroyed once, here.
        unsafe { (self.api.destroy_program)(&mut self.raw) };
    }
}

impl HipRtc {
    /// Opens the first of `sonames` that exports hiprtc; `Unavailable` naming each one tried
    /// and why it did not do.
    pub fn load(sonames: &[&str]) -> Result<HipRtc> {
        let mut tried = Vec::new();
        for &soname in sonames {
            // SAFETY: opening a HIP library runs its initialisers, which only register the
            // runtime (as for the HIP runtime itself, see `sys::HipApi::load`).
            match unsafe { Library::new(soname) } {
                // SAFETY: a library exporting these names is hiprtc, with hiprtc.h's signatures.
                Ok(library) => match unsafe { RtcApi::resolve(library, soname) } {
                    Ok(api) => {
                        return Ok(HipRtc {
                            api: Box::leak(Box::new(api)),
                        })
                    }
                    Err(e) => tried.push(e),
                },
                Err(e) => tried.push(format!("dlopen {soname}: {e}")),
            }
        }
        Err(Error::new(
            StatusCode::Unavailable,
            format!(
                "no hiprtc (HIP run-time compiler): {} (install ROCm's hiprtc, or Debian's \
                 libamdhip64-5, whose runtime contains it)",
                tried.join("; ")
            ),
        ))
    }

    /// [`HipRtc::load`] of [`DEFAULT_SONAMES`], once per process.
    pub fn load_default() -> Result<HipRtc> {
        static DEFAULT: OnceLock<Result<HipRtc>> = OnceLock::new();
        DEFAULT
            .get_or_init(|| HipRtc::load(DEFAULT_SONAMES))
            .clone()
    }

    /// The soname hiprtc was found in.
    pub fn soname(&self) -> &str {
        &self.api.soname
    }

    /// `hiprtcVersion`: `(major, minor)` (HIP 5.2's reports `(9, 0)`).
    pub fn version(&self) -> Result<(i32, i32)> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: both out-pointers are valid for one int.
        let r = unsafe { (self.api.version)(&mut major, &mut minor) };
        self.check(r, "hiprtcVersion").map(|()| (major, minor))
    }

    fn error_string(&self, result: hiprtcResult) -> String {
        // SAFETY: hiprtcGetErrorString accepts any value and returns a static string or null.
        let text = unsafe { (self.api.get_error_string)(result) };
        if text.is_null() {
            return format!("hiprtcResult {result}");
        }
        // SAFETY: non-null: a static NUL-terminated string.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    fn check(&self, result: hiprtcResult, call: &str) -> Result<()> {
        if result == HIPRTC_SUCCESS {
            return Ok(());
        }
        let code = match result {
            HIPRTC_ERROR_OUT_OF_MEMORY => StatusCode::ResourceExhausted,
            HIPRTC_ERROR_INVALID_INPUT | HIPRTC_ERROR_INVALID_OPTION | HIPRTC_ERROR_COMPILATION => {
                StatusCode::InvalidArgument
            }
            _ => StatusCode::Internal,
        };
        Err(Error::new(
            code,
            format!("{call} failed: {} ({result})", self.error_string(result)),
        ))
    }

    /// Compiles HIP C++ `source` (named `name` in diagnostics) with `options` (for example
    /// `--offload-arch=gfx90a`, `-O3`, `-DN=4`) and returns the code object. A compilation
    /// error is `InvalidArgument` with hiprtc's log (the compiler's diagnostics) in the message.
    pub fn compile(&self, source: &str, name: &str, options: &[&str]) -> Result<Vec<u8>> {
        let cstring = |what: &str, s: &str| {
            CString::new(s).map_err(|_| {
                Error::new(
                    StatusCode::InvalidArgument,
                    format!("hiprtc {what} contains a NUL byte: {s:?}"),
                )
            })
        };
        let c_source = cstring("source", source)?;
        let c_name = cstring("program name", name)?;
        let c_options = options
            .iter()
            .map(|o| cstring("option", o))
            .collect::<Result<Vec<_>>>()?;
        let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();

        // HIP 5.2's hiprtc crashes (SIGSEGV inside hiprtcCompileProgram) when two threads
        // compile at once, even separate programs: compiles are serialised process-wide.
        static COMPILING: Mutex<()> = Mutex::new(());
        let _serial = COMPILING.lock().unwrap_or_else(|p| p.into_inner());

        let mut raw: hiprtcProgram = ptr::null_mut();
        // SAFETY: the out-pointer is valid; source and name are NUL-terminated and outlive the
        // call (hiprtc copies them); no headers are passed.
        let r = unsafe {
            (self.api.create_program)(
                &mut raw,
                c_source.as_ptr(),
                c_name.as_ptr(),
                0,
                ptr::null(),
                ptr::null(),
            )
        };
        self.check(r, &format!("hiprtcCreateProgram({name})"))?;
        let program = Program { api: self.api, raw };

        // SAFETY: a live program; `option_ptrs` holds `len` valid C strings (kept alive by
        // `c_options`) for the duration of the call.
        let r = unsafe {
            (self.api.compile_program)(
                program.raw,
                option_ptrs.len() as c_int,
                if option_ptrs.is_empty() {
                    ptr::null()
                } else {
                    option_ptrs.as_ptr()
                },
            )
        };
        if r != HIPRTC_SUCCESS {
            let log = self.log(&program);
            let error = self
                .check(r, &format!("hiprtcCompileProgram({name}, {options:?})"))
                .unwrap_err();
            return Err(Error::new(
                error.code(),
                format!("{}; compiler log:\n{}", error.message(), log.trim_end()),
            ));
        }

        let mut size = 0usize;
        // SAFETY: a live, compiled program; the out-pointer is valid.
        let r = unsafe { (self.api.get_code_size)(program.raw, &mut size) };
        self.check(r, "hiprtcGetCodeSize")?;
        let mut code = vec![0u8; size];
        if size > 0 {
            // SAFETY: `code` has exactly the `size` bytes hiprtc reported it will write.
            let r = unsafe { (self.api.get_code)(program.raw, code.as_mut_ptr().cast()) };
            self.check(r, "hiprtcGetCode")?;
        }
        Ok(code)
    }

    /// The program's log (empty if it cannot be read).
    fn log(&self, program: &Program<'_>) -> String {
        let mut size = 0usize;
        // SAFETY: a live program; the out-pointer is valid.
        let r = unsafe { (self.api.get_program_log_size)(program.raw, &mut size) };
        if r != HIPRTC_SUCCESS || size == 0 {
            return String::new();
        }
        // One spare byte in case the reported size leaves out the NUL.
        let mut log = vec![0u8; size + 1];
        // SAFETY: the buffer holds the reported size plus one byte.
        let r = unsafe { (self.api.get_program_log)(program.raw, log.as_mut_ptr().cast()) };
        if r != HIPRTC_SUCCESS {
            return String::new();
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::HipModule;
    use halcyon::EntryPoint;

    const SOURCE: &str = include_str!("../tests/data/conformance.hip");

    fn rtc() -> Option<HipRtc> {
        match HipRtc::load_default() {
            Ok(rtc) => Some(rtc),
            Err(e) => {
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    #[test]
    fn missing_libraries_are_unavailable_naming_each() {
        let e = HipRtc::load(&["libhalcyon-no-hiprtc.so"]).unwrap_err();
        assert_eq!(e.code(), StatusCode::Unavailable);
        assert!(
            e.message().contains("dlopen libhalcyon-no-hiprtc.so: "),
            "{e}"
        );
    }

    #[test]
    fn compiles_the_conformance_kernels_for_gfx900_without_a_gpu() {
        let Some(rtc) = rtc() else { return };
        eprintln!("hiprtc {:?} from {}", rtc.version(), rtc.soname());
        let code = rtc
            .compile(SOURCE, "conformance.hip", &["--offload-arch=gfx900", "-O3"])
            .unwrap();
        let entry = |name: &str, wg, bindings, constants| EntryPoint {
            name: name.into(),
            workgroup_size: wg,
            binding_count: bindings,
            constant_count: constants,
        };
        let module = HipModule::new(
            code,
            vec![
                entry("add_one_u32", [64, 1, 1], 1, 1),
                entry("saxpy_f32", [64, 1, 1], 2, 2),
                entry("fail", [1, 1, 1], 0, 0),
            ],
        );
        let info = module.validate().unwrap();
        assert!(info.target.starts_with("gfx900"), "{}", info.target);
    }

    #[test]
    fn compile_errors_carry_the_compiler_log() {
        let Some(rtc) = rtc() else { return };
        let e = rtc
            .compile("this is not C++", "broken.hip", &["--offload-arch=gfx900"])
            .unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(e.message().contains("HIPRTC_ERROR_COMPILATION (6)"), "{e}");
        assert!(e.message().contains("error:"), "{e}");
        let e = rtc.compile("\0", "nul.hip", &[]).unwrap_err();
        assert!(e.message().contains("NUL"), "{e}");
    }
}
