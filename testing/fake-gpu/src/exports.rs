//! What both APIs' exports share: out-pointers, handles, the lookups of live streams and
//! events, and the controls a test reads the fake through (`halcyon_fake_gpu_*`).

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use CUresult::CUDA_ERROR_INVALID_VALUE;

use crate::contract::{check_same_device, set_record_only, sticky, violation, violations, Ret};
use crate::driver::{
    device_count, driver, next_handle, CAPTURES_INVALIDATED, CONTEXTS_DESTROYED, GRAPH_LAUNCHES,
    HOST_FUNCS_RUN, KERNELS_RUN,
};
use crate::kernels::{Entry, Kernel, Launch, Module};
use crate::memory::memory;
use crate::stream::{Event, Op, Stream};
use crate::FakeStats;

/// Writes `value` through the out-pointer `out`.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> Ret {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and valid per the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

pub(crate) fn handle<T>(p: *mut T) -> u64 {
    p as usize as u64
}

pub(crate) fn as_ptr<T>(h: u64) -> *mut T {
    h as usize as *mut T
}

pub(crate) fn stream(h: u64, call: &str) -> Result<Arc<Stream>, CUresult> {
    driver().find(|d| &d.streams, h, "stream", call)
}

pub(crate) fn event(h: u64, call: &str) -> Result<Arc<Event>, CUresult> {
    driver().find(|d| &d.events, h, "event", call)
}

/// Checks that device `device` may reach `len` bytes at `ptr` now: `CUDA_ERROR_INVALID_VALUE`
/// otherwise (CUDA checks pointers when the call is made). Memory of another device is also
/// a violation: the fake has no peer access, and halcyon never asks for it.
pub(crate) fn reachable(ptr: u64, len: usize, device: u32, call: &str) -> Ret {
    let memory = memory();
    memory
        .check(ptr, len)
        .map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    if let Err(why) = memory.check_on(ptr, len, device) {
        drop(memory);
        violation(format!("{call}: {why}"));
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}

/// Enqueues a memset of `count` elements of `width` bytes at `dst` on `stream` (checked now,
/// and again when the device gets to it): the address must be `width`-aligned.
pub(crate) fn memset_async(
    dst: u64,
    value: u32,
    width: usize,
    count: usize,
    stream: &Stream,
    call: &str,
) -> Ret {
    if dst % width as u64 != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let len = count.checked_mul(width).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    reachable(dst, len, stream.device, call)?;
    stream.enqueue(Op::Memset {
        dst,
        value,
        width,
        count,
    });
    Ok(())
}

/// Enqueues a launch of `kernel` on `stream`, reading each parameter's value now through
/// `kernel_params` (one pointer per parameter, as CUDA and HIP take them). A kernel the fake
/// cannot run is `CUDA_ERROR_NOT_SUPPORTED` (said on stderr).
///
/// # Safety
/// `kernel_params` must hold one pointer per parameter of `kernel`, each valid for a read of
/// that parameter's size.
pub(crate) unsafe fn enqueue_launch(
    call: &str,
    kernel: &Arc<Kernel>,
    stream: &Stream,
    grid: [u32; 3],
    block: [u32; 3],
    shared_memory_bytes: u32,
    kernel_params: *mut *mut c_void,
) -> Ret {
    let function_device = driver().owner(kernel.function);
    check_same_device(
        call,
        ("a function", function_device),
        ("a stream", stream.device),
    )?;
    let Some(native) = kernel.native else {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("halcyon-fake-gpu: cannot run kernel {}\n", kernel.name).as_bytes(),
        );
        return Err(CUresult::CUDA_ERROR_NOT_SUPPORTED);
    };
    if !kernel.params.is_empty() && kernel_params.is_null() {
        violation(format!(
            "{call}({}): no kernelParams for {} parameters",
            kernel.name,
            kernel.params.len()
        ));
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let args = kernel
        .params
        .iter()
        .enumerate()
        .map(|(i, &(_, size))| {
            let mut bytes = [0u8; 8];
            // SAFETY: the caller's contract; 8 bytes at most for the kernels the fake runs.
            unsafe {
                let p = kernel_params.add(i).read();
                std::ptr::copy_nonoverlapping(p.cast::<u8>(), bytes.as_mut_ptr(), size.min(8));
            }
            u64::from_le_bytes(bytes)
        })
        .collect();
    stream.enqueue(Op::Kernel(Arc::new(Launch {
        kernel: kernel.clone(),
        native,
        grid,
        block,
        shared_memory_bytes,
        args,
    })));
    Ok(())
}

/// Checks that `pool` is a live memory pool: its device; a violation and
/// `CUDA_ERROR_INVALID_HANDLE` otherwise.
pub(crate) fn pool(pool: *mut c_void, call: &str) -> Result<u32, CUresult> {
    let driver = driver();
    if driver.pools.contains(&handle(pool)) {
        return Ok(driver.owner(handle(pool)));
    }
    drop(driver);
    violation(format!("{call}({:#x}): not a live pool", handle(pool)));
    Err(CUresult::CUDA_ERROR_INVALID_HANDLE)
}

/// Destroys pool `pool` (allocations still outstanding stay valid): a violation and
/// `CUDA_ERROR_INVALID_HANDLE` if it is not live. Checked and removed under one lock, so two
/// destroys of one pool cannot both succeed.
pub(crate) fn destroy_pool(pool: *mut c_void, call: &str) -> Ret {
    let mut driver = driver();
    if driver.pools.remove(&handle(pool)) {
        driver.retire(handle(pool));
        return Ok(());
    }
    drop(driver);
    violation(format!("{call}({:#x}): not a live pool", handle(pool)));
    Err(CUresult::CUDA_ERROR_INVALID_HANDLE)
}

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

/// The function handle of kernel `name` in module `m`: `CUDA_ERROR_NOT_FOUND` if it has none.
pub(crate) fn find_function(m: u64, name: &str, call: &str) -> Result<u64, CUresult> {
    let module = driver().find(|d| &d.modules, m, "module", call)?;
    let kernel = module.kernels.iter().find(|k| k.name == name);
    kernel
        .map(|k| k.function)
        .ok_or(CUresult::CUDA_ERROR_NOT_FOUND)
}

/// Set by [`halcyon_fake_gpu_offset_mapped_pointers`].
static OFFSET_MAPPED: AtomicBool = AtomicBool::new(false);

/// How far a mapped pinned allocation's device address lies from its host address while
/// [`OFFSET_MAPPED`] is set: past the 47-bit user address space, so never a live address.
const MAPPED_OFFSET: u64 = 1 << 47;

/// The device address of mapped pinned memory at host address `host`
/// (`cuMemHostGetDevicePointer`, `hipHostGetDevicePointer`): the host address, as with unified
/// addressing, or one that differs from it, as on a system without.
pub(crate) fn mapped_address(host: u64) -> u64 {
    if OFFSET_MAPPED.load(Ordering::Relaxed) {
        host + MAPPED_OFFSET
    } else {
        host
    }
}

// ------------------------------------------------------------------ the test's controls

/// Makes `cuMemHostGetDevicePointer` and `hipHostGetDevicePointer` answer a device address
/// that differs from the host address (non-zero), as on a system where pinned memory has no
/// single address, or the host address again (0, the default).
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_offset_mapped_pointers(offset: c_int) {
    OFFSET_MAPPED.store(offset != 0, Ordering::Relaxed);
}

/// Writes the fake's [`FakeStats`] to `out`.
///
/// # Safety
/// `out` must be valid for a write of [`FakeStats`].
#[no_mangle]
pub unsafe extern "C" fn halcyon_fake_gpu_stats(out: *mut FakeStats) {
    let stats = {
        let d = driver();
        let (allocations, largest_pinned) = {
            let m = memory();
            (m.count() as u64, m.largest_pinned() as u64)
        };
        FakeStats {
            context_retains: d.retains.iter().sum(),
            contexts_destroyed: CONTEXTS_DESTROYED.load(Ordering::Relaxed),
            streams: d.streams.len() as u64,
            events: d.events.len() as u64,
            modules: d.modules.len() as u64,
            graphs: (d.graphs.len() + d.execs.len()) as u64,
            pools: d.pools.len() as u64,
            allocations,
            largest_pinned,
            kernels_run: KERNELS_RUN.load(Ordering::Relaxed),
            host_funcs_run: HOST_FUNCS_RUN.load(Ordering::Relaxed),
            graph_launches: GRAPH_LAUNCHES.load(Ordering::Relaxed),
            captures_invalidated: CAPTURES_INVALIDATED.load(Ordering::Relaxed),
            violations: violations().len() as u64,
        }
    };
    // SAFETY: the caller's contract.
    let _ = unsafe { put(out, stats) };
}

/// Copies the violations so far (one per line) into `buffer` (at most `capacity` bytes) and
/// returns their full length.
///
/// # Safety
/// `buffer` must be valid for `capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn halcyon_fake_gpu_violations(buffer: *mut u8, capacity: usize) -> usize {
    let text = violations().join("\n");
    if !buffer.is_null() {
        // SAFETY: the caller's contract; at most `capacity` bytes.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buffer, text.len().min(capacity)) };
    }
    text.len()
}

/// Makes violations recorded only (non-zero) or fatal (0, the default).
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_record_only(record_only: c_int) {
    set_record_only(record_only != 0);
}

/// Makes the next kernel that runs fault the device with `code` (one the fake names; others
/// are `CUDA_ERROR_LAUNCH_FAILED`).
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_fault_next_kernel(code: c_uint) {
    use CUresult::*;
    let code = [CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED]
        .into_iter()
        .find(|c| *c as c_uint == code)
        .unwrap_or(CUDA_ERROR_LAUNCH_FAILED);
    crate::kernels::fault_next_kernel(code);
}

/// Whether a device has faulted: the sticky error's number of the first device that has, or
/// 0.
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_sticky_error() -> c_uint {
    (0..device_count())
        .find_map(sticky)
        .map_or(0, |code| code as c_uint)
}
