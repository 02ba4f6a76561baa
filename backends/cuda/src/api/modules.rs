//! Module loading and function lookup: `cuModuleLoadDataEx` with a JIT error log, the checks
//! each kernel gets at load (its signature, from `cuFuncGetParamInfo` and the PTX text, its
//! block size, its dynamic shared memory), and the functions `get_function` hands out, each
//! registered with its kernel's checked signature.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::Arc;

use cudarc::driver::sys::{CUfunction, CUfunction_attribute, CUjit_option, CUmodule};
use halcyon::{EntryPoint, Error, ExecutableSpec, Result, StatusCode};
use halcyon_stream::arguments::{KernelSignature, SharedMemory};
use halcyon_stream::{FunctionHandle, LoadedModule, ModuleHandle};

use super::CudaApi;
use crate::module::{check_kernel_params, ptx_status_word, CudaModule, Image};
use crate::objects::{destroy_last, Function, Module};
use crate::probe::{Probe, PARAM_INFO_VERSION};
use crate::result::{check, cuda_error};
use crate::sys::{self, Code};

/// Bytes of JIT error log kept when loading a module fails.
pub(super) const JIT_LOG_BYTES: usize = 16 << 10;

impl CudaApi {
    /// `cuModuleGetFunction`: the kernel called `name` in `module` (loaded by this API and
    /// held by the caller).
    fn function(&self, module: CUmodule, name: &str) -> Result<CUfunction> {
        let c_name = CString::new(name).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!("kernel name {name:?} contains a NUL byte"),
            )
        })?;
        let _bound = self.bind()?;
        let mut f: CUfunction = std::ptr::null_mut();
        // SAFETY: a loaded module; a NUL-terminated name; valid out-pointer.
        let r = unsafe { sys::cuModuleGetFunction(&mut f, module, c_name.as_ptr()) };
        check(r, || {
            format!(
                "cuModuleGetFunction({name:?}) (the module has no such kernel; declare it \
                 extern \"C\" so its name is not mangled)"
            )
        })?;
        Ok(f)
    }

    /// Refuses an entry point whose workgroup is larger than the loaded kernel can launch
    /// (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`, which the kernel's registers, shared memory
    /// and `.maxntid` / `__launch_bounds__` lower below the device's 1024): every dispatch of
    /// it would fail with `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`. A driver that cannot answer
    /// leaves it to the launch.
    fn check_block_size(&self, function: FunctionHandle, entry: &EntryPoint) -> Result<()> {
        let attribute = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
        let max = function_attribute(function, attribute).unwrap_or(0);
        let threads: u64 = entry.workgroup_size.iter().map(|&d| u64::from(d)).product();
        if max <= 0 || threads <= max as u64 {
            return Ok(());
        }
        Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "kernel '{}' declares workgroup size {:?} ({threads} threads), but CUDA can \
                 launch it with at most {max} threads per block on device {} (its registers, \
                 shared memory or .maxntid / __launch_bounds__ limit it): declare a workgroup \
                 of at most {max} threads, or build the kernel for {threads} (for example \
                 __launch_bounds__({threads}))",
                entry.name, entry.workgroup_size, self.ordinal
            ),
        ))
    }

    /// Readies `function` for launches with `bytes` of dynamic shared memory, the entry point's
    /// declaration ([`CudaModule::with_shared_memory`]): refuses a kernel whose static shared
    /// memory (`CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`) plus `bytes` exceeds what a block of this
    /// device may have, and raises the kernel's dynamic limit
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`, 48 KiB less its static memory by
    /// default) to `bytes` where that is below, which kernels above 48 KiB must opt in to.
    /// Nothing for a kernel declaring none.
    fn set_shared_memory(
        &self,
        function: FunctionHandle,
        entry: &EntryPoint,
        bytes: u32,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let f = function.0 as usize as CUfunction;
        let read = |attribute| function_attribute(function, attribute).map(|v| v.max(0) as u32);
        let name = &entry.name;
        SharedMemory {
            kernel: name,
            statik: read(CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            dynamic: bytes,
            max: self.max_shared_memory,
            device: &format!("cuda://{}", self.ordinal),
            attribute: "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
        }
        .check()?;
        let dynamic = CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
        if read(dynamic).is_some_and(|limit| limit >= bytes) {
            return Ok(());
        }
        // SAFETY: as above; the attribute takes an int, and `bytes` fits one (it is below the
        // device's limit, itself an int).
        let r = unsafe { sys::cuFuncSetAttribute(f, dynamic, bytes as c_int) };
        check(r, || {
            format!(
                "cuFuncSetAttribute(kernel '{name}', MAX_DYNAMIC_SHARED_SIZE_BYTES, {bytes}): \
                 the kernel cannot have the dynamic shared memory its entry point declares"
            )
        })
        .map_err(|e| Error::new(StatusCode::InvalidArgument, e.message().to_owned()))
    }

    pub(super) fn load_module(&self, spec: &ExecutableSpec) -> Result<LoadedModule> {
        let module = CudaModule::from_spec(spec)?;
        let _bound = self.bind()?;
        // Loading may synchronise the context (a JIT compile, lazy loading waiting for the
        // device), which would invalidate a capture under way: the capture gate keeps the two
        // apart. A load that fails unloads what it loaded from inside this call, which the
        // gate lets through (the thread is inside a call already).
        let _no_captures = self.no_captures();
        let ptx;
        let binary;
        let image: *const c_void = match module.code() {
            Image::Ptx(text) => {
                // NUL-free (validated); cuModuleLoadData reads PTX up to the NUL.
                ptx = CString::new(text.as_str()).map_err(|_| {
                    Error::new(StatusCode::InvalidArgument, "PTX text contains a NUL byte")
                })?;
                ptx.as_ptr().cast()
            }
            Image::Binary(bytes) => {
                // Aligned for the ELF headers, and followed by 4096 zero bytes (see
                // `loader_image`): cheap defence for a fixed-size read past the end of an
                // image that is shorter than its caller vouched.
                binary = halcyon::backend::loader_image(bytes, bytes.len() + 4096);
                binary.as_ptr().cast()
            }
        };
        let mut log = vec![0 as c_char; JIT_LOG_BYTES];
        // The JIT budgets registers so that a block of the largest workgroup among the entry
        // points can launch (without it, a kernel using many registers compiles to fewer
        // threads per block than its workgroup; a cubin was sized when it was built).
        let threads_per_block = module
            .entry_points()
            .iter()
            .map(|e| e.workgroup_size.iter().product::<u32>())
            .max()
            .unwrap_or(1);
        let mut options = [
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            CUjit_option::CU_JIT_THREADS_PER_BLOCK,
        ];
        let log_ptr: *mut c_void = log.as_mut_ptr().cast();
        let mut handle: CUmodule = std::ptr::null_mut();
        let r = self.trimming_on_oom(|| {
            // JIT option values are passed as pointer-sized words: the buffer, its size, the
            // threads per block. The driver overwrites the last two (with the log's length and
            // what it targeted), so every attempt passes fresh ones.
            let mut values: [*mut c_void; 3] = [
                log_ptr,
                std::ptr::without_provenance_mut(JIT_LOG_BYTES),
                std::ptr::without_provenance_mut(threads_per_block as usize),
            ];
            // SAFETY: `image` is NUL-terminated PTX (which the JIT checks), or a binary image
            // that reached here only through an unsafe constructor or an unchecked spec, whose
            // caller vouched for it (`CudaModule::binary`'s contract); it, the log buffer,
            // `options` and `values` outlive the call; the option count matches both arrays.
            unsafe {
                sys::cuModuleLoadDataEx(
                    &mut handle,
                    image,
                    options.len() as c_uint,
                    options.as_mut_ptr(),
                    values.as_mut_ptr(),
                )
            }
        });
        if !r.is_success() {
            let bytes: Vec<u8> = log
                .iter()
                .map(|&c| c as u8)
                .take_while(|&b| b != 0)
                .collect();
            let log = String::from_utf8_lossy(&bytes);
            let mut error = cuda_error(
                &format!(
                    "cuModuleLoadData({} image with entry points [{}])",
                    module.kind(),
                    module
                        .entry_points()
                        .iter()
                        .map(|e| e.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                r,
            );
            if !log.trim().is_empty() {
                error = Error::new(
                    error.code(),
                    format!("{}; JIT log:\n{}", error.message(), log.trim_end()),
                );
            }
            return Err(error);
        }
        // Owned from here: an error below drops it, which unloads it (from inside this call,
        // which the capture gate lets through).
        let mut loaded = Module::new(handle, self.device);
        let mut status_words = Vec::with_capacity(module.entry_points().len());
        for (index, entry) in module.entry_points().iter().enumerate() {
            // The driver's report where it has one (CUDA 12.4+); for PTX also its text, which
            // says whether the kernel takes a status word on any driver (validated above). For
            // a cubin kernel the driver cannot report on, see `cubin_status_word`.
            // Where both the driver and the PTX text answer, they must agree.
            let checked = self.function(loaded.raw(), &entry.name).and_then(|f| {
                let f = FunctionHandle(f as usize as u64);
                let params = kernel_params(self.probe, f);
                let reported = match &params {
                    Some(params) if !params.is_empty() => Some(check_kernel_params(entry, params)?),
                    _ => None,
                };
                let status_word = match module.code() {
                    Image::Ptx(text) => {
                        let parsed = ptx_status_word(text, entry)?;
                        if reported.is_some_and(|reported| reported != parsed) {
                            return Err(Error::new(
                                StatusCode::InvalidArgument,
                                format!(
                                    "kernel '{}': the driver reports {} status word, but its \
                                     PTX text declares {}; refusing to guess how to launch it",
                                    entry.name,
                                    if parsed { "no" } else { "a" },
                                    if parsed { "one" } else { "none" }
                                ),
                            ));
                        }
                        parsed
                    }
                    Image::Binary(_) => {
                        cubin_status_word(reported, params.is_some_and(|p| p.is_empty()), entry)
                    }
                };
                self.check_block_size(f, entry)?;
                self.set_shared_memory(f, entry, module.shared_memory(index))?;
                Ok((f, status_word))
            });
            let (_, status_word) = checked?;
            status_words.push(status_word);
            loaded.signatures.insert(
                entry.name.clone(),
                KernelSignature {
                    bindings: entry.binding_count as usize,
                    constants: entry.constant_count as usize,
                    status_word,
                },
            );
        }
        let handle = ModuleHandle(loaded.raw() as usize as u64);
        self.modules.insert(handle.0, loaded);
        Ok(LoadedModule {
            module: handle,
            entry_points: module.entry_points().to_vec(),
            status_words,
            shared_memory_bytes: (0..module.entry_points().len())
                .map(|index| module.shared_memory(index))
                .collect(),
        })
    }

    pub(super) fn unload_module(&self, module: ModuleHandle) -> Result<()> {
        let _bound = self.bind()?;
        let module = self.modules.remove(module.0)?;
        // Its functions go too (dropped here, before the module: they hold it).
        drop(
            self.functions
                .retain(|_, f| !Arc::ptr_eq(&f.module, &module)),
        );
        // cuModuleUnload (behind the capture gate) here, or when the last launch of one of its
        // kernels returns; the stream layer unloads only after the work using it completed.
        destroy_last(module)
    }

    pub(super) fn get_function(
        &self,
        module_handle: ModuleHandle,
        name: &str,
    ) -> Result<FunctionHandle> {
        let _bound = self.bind()?;
        let module = self.modules.get(module_handle.0)?;
        let Some(signature) = module.signatures.get(name).copied() else {
            let mut names: Vec<&str> = module.signatures.keys().map(String::as_str).collect();
            names.sort_unstable();
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "the CUDA module has no entry point '{name}'; it declares: [{}]",
                    names.join(", ")
                ),
            ));
        };
        let function = self.function(module.raw(), name)?;
        let handle = FunctionHandle(function as usize as u64);
        let held = module.clone();
        self.functions
            .insert(handle.0, Function::new(function, name, signature, module));
        if !self
            .modules
            .get(module_handle.0)
            .is_ok_and(|live| Arc::ptr_eq(&live, &held))
        {
            // An unload raced this call and dropped the module's functions before the insert:
            // this one would keep the unloaded module alive until the API goes.
            drop(self.functions.remove(handle.0));
            return Err(self.modules.missing(module_handle.0));
        }
        Ok(handle)
    }
}

/// `cuFuncGetAttribute(attribute)` of `function`, a kernel of a module this API loaded, on a
/// thread where its context is bound; `None` where the driver cannot answer.
fn function_attribute(function: FunctionHandle, attribute: CUfunction_attribute) -> Option<c_int> {
    let mut value: c_int = 0;
    // SAFETY: a valid out-pointer; the caller's contract: a function of a loaded module, with
    // its context bound.
    let r = unsafe {
        sys::cuFuncGetAttribute(&mut value, attribute, function.0 as usize as CUfunction)
    };
    r.is_success().then_some(value)
}

/// Whether a cubin kernel is launched with a status word: as the driver reports
/// (`cuFuncGetParamInfo`) where it reported parameters; none where it reported no parameters
/// at all for an entry point that declares none (a kernel without parameters); otherwise
/// (the driver cannot say, or reports none for an entry point that declares some) one, since
/// an argument past a kernel's last parameter is never read, while a missing one would be read
/// from past the argument array.
pub(super) fn cubin_status_word(
    reported: Option<bool>,
    reported_none: bool,
    entry: &EntryPoint,
) -> bool {
    match reported {
        Some(reported) => reported,
        None => !(reported_none && entry.binding_count == 0 && entry.constant_count == 0),
    }
}

/// The `(offset, size)` of each parameter of kernel `f` as the driver reports them
/// (`cuFuncGetParamInfo`, CUDA 12.4+); empty if it reports none or cannot say, and without
/// calling it on a driver older than CUDA 12.4 (which lacks the symbol: cudarc would panic).
fn kernel_params(probe: &Probe, f: FunctionHandle) -> Option<Vec<(usize, usize)>> {
    if !probe.supports(PARAM_INFO_VERSION) {
        return None;
    }
    let function = f.0 as usize as CUfunction;
    let mut params = Vec::new();
    // More parameters than the portable parameter space could hold is certainly a mismatch.
    for index in 0..=crate::module::MAX_PARAM_BYTES as usize {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: a function of a loaded module; valid out-pointers.
        match unsafe { sys::cuFuncGetParamInfo(function, index, &mut offset, &mut size) } {
            Code::SUCCESS => params.push((offset, size)),
            // Past the last parameter.
            Code::INVALID_VALUE => break,
            // The driver cannot say (e.g. not supported).
            _ => return None,
        }
    }
    Some(params)
}
