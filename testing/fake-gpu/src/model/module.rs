//! Modules: the kernels a loaded image holds, each with a function handle.

use std::ffi::c_char;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cudarc::driver::sys::CUresult;

use crate::model::contract::Ret;
use crate::model::driver::{driver, next_handle};
use crate::model::kernels::{Entry, Kernel, Module};

/// Registers a module loaded on device `device` with a kernel (and function handle) per entry
/// point: its handle.
pub(crate) fn register_module(entries: &[Entry], device: u32) -> u64 {
    let module = next_handle();
    let kernels: Vec<Arc<Kernel>> = entries
        .iter()
        .map(|entry| Arc::new(Kernel::new(next_handle(), entry)))
        .collect();
    let mut driver = driver();
    for kernel in &kernels {
        driver.functions.insert(kernel.function, kernel.clone());
        driver.adopt(kernel.function, device);
    }
    driver.modules.insert(module, Arc::new(Module { kernels }));
    driver.adopt(module, device);
    module
}

/// Registers a module of the kernels `names` (from an image whose parameter metadata the
/// fake does not read: each takes its native kernel's parameters): its handle.
pub(crate) fn register_named(names: &[String], device: u32) -> u64 {
    let entries: Vec<Entry> = names.iter().map(|name| Entry::by_name(name)).collect();
    register_module(&entries, device)
}

/// Unloads module `m`: its functions die with it, and launches of them still queued must not
/// run (a violation when they do).
pub(crate) fn unload_module(m: u64, call: &str) -> Ret {
    let mut driver = driver();
    let module = driver.remove(|d| &mut d.modules, m, "module", call)?;
    for kernel in &module.kernels {
        kernel.unloaded.store(true, Ordering::Release);
        driver.functions.remove(&kernel.function);
        driver.retire(kernel.function);
    }
    Ok(())
}

/// The function handle of the kernel named by the C string `name` in module `m`:
/// `CUDA_ERROR_INVALID_VALUE` for a null name, `CUDA_ERROR_NOT_FOUND` if it has none.
///
/// # Safety
/// `name` must be null or NUL-terminated.
pub(crate) unsafe fn find_function(
    m: u64,
    name: *const c_char,
    call: &str,
) -> Result<u64, CUresult> {
    // SAFETY: the caller's contract.
    let name = unsafe { crate::ffi::read_str(name) }?;
    let module = driver().find(|d| &d.modules, m, "module", call)?;
    let kernel = module.kernels.iter().find(|k| k.name == name);
    kernel
        .map(|k| k.function)
        .ok_or(CUresult::CUDA_ERROR_NOT_FOUND)
}

/// The live function `f`: a violation and `CUDA_ERROR_INVALID_HANDLE` otherwise.
pub(crate) fn function(f: u64, call: &str) -> Result<Arc<Kernel>, CUresult> {
    driver().find(|d| &d.functions, f, "function", call)
}
