//! hiprtc, HIP's run-time compiler, opened at run time: HIP C++ source in, an AMDGPU code object
//! (what [`crate::HipModule`] carries) out: [`HipRtc::compile`] returns the code object,
//! [`HipRtc::compile_module`] a module of it, safely, since halcyon ran the compiler itself. No ROCm compiler toolchain is needed beyond the
//! libraries: hiprtc compiles through `libamd_comgr`, which embeds clang and lld.
//!
//! The symbols live in `libhiprtc.so` from ROCm 5.3 on, and in `libamdhip64.so` itself up to
//! HIP 5.2 (Debian's `libamdhip64-5` is such a runtime; its `libamd-comgr2` dependency is the
//! compiler). ROCm 5.3 through 6.x still export them from `libamdhip64` too; ROCm 7 does not,
//! so there only `libhiprtc.so.7` (or the unversioned link) will do. [`HipRtc::load_default`]
//! tries [`DEFAULT_SONAMES`] in that order.
//!
//! Give the architecture: `--offload-arch=gfxNNN`. Without it hiprtc compiles for the GPU the
//! calling thread has current (`hipSetDevice`), which it learns by opening the HIP runtime
//! itself, and the stand-alone hiprtc (ROCm 5.3 on) opens it by the unversioned name
//! `libamdhip64.so` only (ROCm/clr `hipamd/src/hiprtc/hiprtcInternal.cpp`, `findIsa`), which
//! installs with only the versioned runtime names (TheRock, distribution runtime packages)
//! lack. There, and on a machine without an AMD GPU, a compile without the option fails with
//! "Please provide architecture for which code is to be generated" in the log
//! ([`is_missing_architecture`]). [`kfd_offload_arch`] reads the architecture of this
//! machine's GPUs from the kernel driver, with no HIP call. Code objects for any architecture
//! can be built on any machine.
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

use halcyon::{EntryPoint, Error, Result, StatusCode};
use libloading::Library;

use crate::module::HipModule;

/// The sonames [`HipRtc::load_default`] tries, in order: the stand-alone hiprtc (ROCm 5.3 and
/// later; ROCm 7 has it nowhere else), then the HIP runtimes that still contain it (5.x, 6.x).
pub const DEFAULT_SONAMES: &[&str] = &[
    "libhiprtc.so",
    "libhiprtc.so.7",
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
#[derive(Debug)]
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
    ///
    /// # Safety
    /// Opening a library runs its initialisers, and its symbols of hiprtc's names are then
    /// called with hiprtc's signatures: each of `sonames` that opens must be hiprtc or a HIP
    /// runtime containing it (or a library without those names, which is skipped). The default
    /// names ([`HipRtc::load_default`]) are hiprtc's own.
    pub unsafe fn load(sonames: &[&str]) -> Result<HipRtc> {
        let mut tried = Vec::new();
        for &soname in sonames {
            // SAFETY: the caller's contract: a HIP library, whose initialisers only register
            // the runtime (as for the HIP runtime itself, see `sys::HipApi::load`).
            match unsafe { Library::new(soname) } {
                // SAFETY: the caller's contract: a library exporting these names is hiprtc,
                // with hiprtc.h's signatures.
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
            // SAFETY: hiprtc's own sonames.
            .get_or_init(|| unsafe { HipRtc::load(DEFAULT_SONAMES) })
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

    /// Compiles `source` as [`HipRtc::compile`] does and makes a [`HipModule`] of the code
    /// object with `entry_points`, making the checks of
    /// [`HipModule::from_code_object_unchecked`] (each entry point against its kernel's
    /// metadata). Safe, unlike that constructor: the code object is hiprtc's own output,
    /// unmodified, for the architecture `options` name (or the current device's), so its
    /// metadata describes its code and the checks against it are complete.
    ///
    /// ```no_run
    /// use halcyon::EntryPoint;
    /// use halcyon_hip::rtc::HipRtc;
    ///
    /// let source = r#"extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }"#;
    /// let entry = EntryPoint {
    ///     name: "twice".into(),
    ///     workgroup_size: [64, 1, 1],
    ///     binding_count: 1,
    ///     constant_count: 0,
    /// };
    /// let module = HipRtc::load_default()?.compile_module(
    ///     source,
    ///     "twice.hip",
    ///     &["--offload-arch=gfx90a", "-O3"],
    ///     vec![entry],
    /// )?;
    /// let spec = module.spec(); // for Device::load_executable
    /// # Ok::<(), halcyon::Error>(())
    /// ```
    pub fn compile_module(
        &self,
        source: &str,
        name: &str,
        options: &[&str],
        entry_points: Vec<EntryPoint>,
    ) -> Result<HipModule> {
        let code = self.compile(source, name, options)?;
        HipModule::checked(code, entry_points)
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

/// Whether `error` (from [`HipRtc::compile`]) is hiprtc's failure to find the architecture to
/// compile for: no `--offload-arch` was given, and hiprtc could not ask the HIP runtime (see
/// the [module docs](self)).
pub fn is_missing_architecture(error: &Error) -> bool {
    error.message().contains("Please provide architecture")
}

/// Where the kernel driver (amdkfd) lists its topology nodes, one directory each.
pub const KFD_TOPOLOGY_NODES: &str = "/sys/class/kfd/kfd/topology/nodes";

/// The name of the gfx target with KFD's `gfx_target_version` `version`
/// (`major * 10000 + minor * 100 + stepping`, minor and stepping printed as one hex digit each,
/// as ROCm names them): `90010` is `gfx90a`, `110000` `gfx1100`, `90402` `gfx942`. `None` for
/// 0 (a CPU node) and for values no target name can spell.
///
/// ```
/// assert_eq!(halcyon_hip::rtc::gfx_target_name(90010).as_deref(), Some("gfx90a"));
/// ```
pub fn gfx_target_name(version: u32) -> Option<String> {
    let (major, minor, stepping) = (version / 10_000, version / 100 % 100, version % 100);
    (major > 0 && minor < 16 && stepping < 16).then(|| format!("gfx{major}{minor:x}{stepping:x}"))
}

/// `HSA_OVERRIDE_GFX_VERSION`'s `major.minor.stepping` as a `gfx_target_version`.
fn parse_gfx_override(text: &str) -> Option<u32> {
    let mut parts = text.trim().split('.').map(|p| p.parse::<u32>().ok());
    let (major, minor, stepping) = (parts.next()??, parts.next()??, parts.next()??);
    if parts.next().is_some() || major > 63 || minor > 255 || stepping > 255 {
        return None;
    }
    Some(major * 10_000 + minor * 100 + stepping)
}

/// The gfx targets of the GPU nodes listed under `nodes` (a KFD topology directory), in node
/// order, as the HSA runtime sees them: `HSA_OVERRIDE_GFX_VERSION_<node>` or
/// `HSA_OVERRIDE_GFX_VERSION` (looked up with `env`) replaces a node's own version, as in
/// ROCm's libhsakmt. Nodes without SIMDs (CPUs) are left out, as are GPUs whose version has no
/// target name. Empty if the directory cannot be read.
pub fn kfd_gfx_targets_in(
    nodes: &std::path::Path,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(nodes) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, String)> = entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let id: u32 = entry.file_name().to_str()?.parse().ok()?;
            let properties = std::fs::read_to_string(entry.path().join("properties")).ok()?;
            let property = |name: &str| {
                properties.lines().find_map(|line| {
                    let (key, value) = line.split_once(char::is_whitespace)?;
                    (key == name)
                        .then(|| value.trim().parse::<u64>().ok())
                        .flatten()
                })
            };
            if property("simd_count").unwrap_or(0) == 0 {
                return None;
            }
            let version = env(&format!("HSA_OVERRIDE_GFX_VERSION_{id}"))
                .or_else(|| env("HSA_OVERRIDE_GFX_VERSION"))
                .and_then(|text| parse_gfx_override(&text))
                .or_else(|| u32::try_from(property("gfx_target_version")?).ok())?;
            Some((id, gfx_target_name(version)?))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, target)| target).collect()
}

/// The gfx targets of this machine's GPUs, from [`KFD_TOPOLOGY_NODES`] (see
/// [`kfd_gfx_targets_in`]); empty without the amdgpu kernel driver.
pub fn kfd_gfx_targets() -> Vec<String> {
    kfd_gfx_targets_in(std::path::Path::new(KFD_TOPOLOGY_NODES), |name| {
        std::env::var(name).ok()
    })
}

/// The `--offload-arch` value for this machine's HIP devices when it is unambiguous: the one
/// gfx target all of its GPUs share ([`kfd_gfx_targets`]), else `None` (no GPU, no readable
/// topology, or GPUs of several architectures, where which HIP device is which node depends
/// on `HIP_VISIBLE_DEVICES` and friends).
///
/// Read from the kernel driver rather than asked of HIP: `hipDeviceProp_t`, which has the
/// architecture's name, changed its layout across ROCm releases (see [`crate::sys`]).
pub fn kfd_offload_arch() -> Option<String> {
    let targets = kfd_gfx_targets();
    let first = targets.first()?;
    targets.iter().all(|t| t == first).then(|| first.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn hiprtc_is_looked_for_alone_first_then_in_the_runtimes_that_contain_it() {
        assert_eq!(
            DEFAULT_SONAMES,
            [
                "libhiprtc.so",
                "libhiprtc.so.7",
                "libhiprtc.so.6",
                "libhiprtc.so.5",
                // ROCm 7's libamdhip64 has no hiprtc: no libamdhip64.so.7 here.
                "libamdhip64.so",
                "libamdhip64.so.6",
                "libamdhip64.so.5",
            ]
        );
    }

    #[test]
    fn missing_libraries_are_unavailable_naming_each() {
        // SAFETY: no such library: nothing opens.
        let e = unsafe { HipRtc::load(&["libhalcyon-no-hiprtc.so"]) }.unwrap_err();
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
        let entry = |name: &str, wg, bindings, constants| EntryPoint {
            name: name.into(),
            workgroup_size: wg,
            binding_count: bindings,
            constant_count: constants,
        };
        let entries = vec![
            entry("add_one_u32", [64, 1, 1], 1, 1),
            entry("saxpy_f32", [64, 1, 1], 2, 2),
            entry("fail", [1, 1, 1], 0, 0),
        ];
        let options = ["--offload-arch=gfx900", "-O3"];
        let module = rtc
            .compile_module(SOURCE, "conformance.hip", &options, entries.clone())
            .unwrap();
        let image = module.image();
        assert!(!image.is_bundle());
        assert!(
            image.targets()[0].starts_with("gfx900"),
            "{:?}",
            image.targets()
        );
        assert!(module.takes_status_word(2) && !module.takes_status_word(0));
        // The entry points are checked on the safe path too.
        let mut wrong = entries;
        wrong[0].binding_count = 2;
        let e = rtc
            .compile_module(SOURCE, "conformance.hip", &options, wrong)
            .unwrap_err();
        assert!(e.message().contains("kernel 'add_one_u32' takes ["), "{e}");
    }

    #[test]
    fn kfd_gfx_target_versions_name_their_targets() {
        for (version, name) in [
            (90006, "gfx906"),
            (90008, "gfx908"),
            (90010, "gfx90a"),
            (90012, "gfx90c"),
            (90402, "gfx942"),
            (100300, "gfx1030"),
            (110000, "gfx1100"),
            (110501, "gfx1151"),
            (120001, "gfx1201"),
        ] {
            assert_eq!(gfx_target_name(version).as_deref(), Some(name), "{version}");
        }
        for version in [0, 99, 91600, 90016] {
            assert_eq!(gfx_target_name(version), None, "{version}");
        }
        assert_eq!(parse_gfx_override("10.3.0"), Some(100300));
        assert_eq!(parse_gfx_override(" 9.0.10\n"), Some(90010));
        for bad in ["", "10.3", "10.3.0.1", "a.b.c", "64.0.0"] {
            assert_eq!(parse_gfx_override(bad), None, "{bad:?}");
        }
    }

    /// A KFD topology in a fresh temporary directory: `(node, properties)`.
    fn topology(name: &str, nodes: &[(&str, &str)]) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("halcyon-hip-kfd-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (node, properties) in nodes {
            std::fs::create_dir_all(dir.join(node)).unwrap();
            std::fs::write(dir.join(node).join("properties"), properties).unwrap();
        }
        dir
    }

    #[test]
    fn kfd_topology_lists_the_gpu_nodes_targets_in_node_order() {
        let cpu = "cpu_cores_count 16\nsimd_count 0\ngfx_target_version 0\n";
        let mi210 =
            "cpu_cores_count 0\nsimd_count 416\ngfx_target_version 90010\nmax_waves_per_simd 8\n";
        let navi = "cpu_cores_count 0\nsimd_count 192\ngfx_target_version 110000\n";
        let no_version = "cpu_cores_count 0\nsimd_count 64\n";
        let dir = topology(
            "mixed",
            &[
                ("0", cpu),
                ("2", navi),
                ("1", mi210),
                ("10", mi210),
                ("3", no_version),
                ("x", navi),
            ],
        );
        let none = |_: &str| None;
        assert_eq!(
            kfd_gfx_targets_in(&dir, none),
            ["gfx90a", "gfx1100", "gfx90a"]
        );
        // Overrides, per node first, as libhsakmt applies them.
        let env = |name: &str| match name {
            "HSA_OVERRIDE_GFX_VERSION_2" => Some("10.3.0".to_string()),
            "HSA_OVERRIDE_GFX_VERSION" => Some("9.4.2".to_string()),
            _ => None,
        };
        assert_eq!(
            kfd_gfx_targets_in(&dir, env),
            ["gfx942", "gfx1030", "gfx942", "gfx942"],
            "the node without a version of its own takes the override too"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(kfd_gfx_targets_in(&dir, none).is_empty(), "no topology");
    }

    #[test]
    fn this_machines_offload_arch_is_unambiguous_or_none() {
        let targets = kfd_gfx_targets();
        match kfd_offload_arch() {
            Some(arch) => assert!(targets.iter().all(|t| *t == arch), "{targets:?}"),
            None => assert!(targets.windows(2).any(|w| w[0] != w[1]) || targets.is_empty()),
        }
        eprintln!("KFD gfx targets: {targets:?}");
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
        assert!(!is_missing_architecture(&e), "{e}");
        let e = rtc.compile("\0", "nul.hip", &[]).unwrap_err();
        assert!(e.message().contains("NUL"), "{e}");
    }
}
