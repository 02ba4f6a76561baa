//! Kernel launches: the function and the stream held for the call, the launch checked against
//! the kernel's signature (registered by `get_function`), and `kernelParams` packed as a
//! pointer to each binding's `CUdeviceptr`, then to each `u32` constant, then to the status
//! word's `CUdeviceptr` if the kernel takes one (see [`crate::module`]).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use halcyon::{Error, Result, StatusCode};
use halcyon_stream::allocations::AllocationGuard;
use halcyon_stream::{FunctionHandle, KernelParams, LaunchConfig, StreamHandle};

use super::memory::AllocKind;
use super::CudaApi;
use crate::objects::Function;
use crate::result::check;
use crate::sys;

impl CudaApi {
    /// The live function `function`, with `params` checked against its kernel's signature and
    /// its status word (if any) against this API's memory, held live while the guard lives;
    /// `InvalidArgument` otherwise.
    pub(super) fn launchable(
        &self,
        function: FunctionHandle,
        params: &KernelParams<'_>,
    ) -> Result<(Arc<Function>, Option<AllocationGuard<'_, AllocKind>>)> {
        let f = self.functions.get(function.0).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "{function:?} is not a live CUDA function: get_function did not hand it out, \
                     or its module was unloaded"
                ),
            )
        })?;
        f.signature.check(&f.name, params)?;
        // The word the kernel stores to: 4 aligned bytes of a live allocation of this API (a
        // made-up address would have the kernel write wherever it points, host memory
        // included where the device can reach it).
        let status = params
            .status
            .map(|word| self.memory.check(word, 4, "status word"))
            .transpose()?;
        Ok((f, status))
    }

    pub(super) fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        s: StreamHandle,
    ) -> Result<()> {
        let status = params.status;
        let _bound = self.bind()?;
        // The status word is held live until the launch is enqueued.
        let (f, _status) = self.launchable(function, params)?;
        let live = self.enqueue_stream(s)?;
        let LaunchConfig {
            grid,
            block,
            shared_memory_bytes,
        } = *config;
        let r = with_kernel_params(params, |kernel_params| {
            // SAFETY: a function of a loaded module and a live stream, both held for the call
            // (the function holds its module). The kernel's parameters were checked against
            // its entry point at load (from the PTX text, and with check_kernel_params where
            // the driver reports them), and the launch passes exactly that signature (checked
            // above), so it reads no more argument values, and no larger ones, than
            // `kernel_params` points at, which outlive the call; `extra` is null.
            unsafe {
                sys::cuLaunchKernel(
                    f.raw(),
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    shared_memory_bytes,
                    live.raw(),
                    kernel_params,
                    std::ptr::null_mut(),
                )
            }
        });
        check(r, || {
            format!(
                "cuLaunchKernel(grid {grid:?}, block {block:?}, {} bindings, {} constants{}, \
                 {s:?})",
                params.bindings.len(),
                params.constants.len(),
                if status.is_some() {
                    ", a status word"
                } else {
                    ""
                }
            )
        })
    }
}

/// Calls `f` with the `kernelParams` array for `params`: a pointer to each binding's
/// `CUdeviceptr`, then to each `u32` constant, then to the status word's `CUdeviceptr` if
/// there is one (null for a kernel without parameters). The driver copies the values during
/// the call, so the array and what it points at only live until `f` returns.
pub(super) fn with_kernel_params<R>(
    params: &KernelParams<'_>,
    f: impl FnOnce(*mut *mut c_void) -> R,
) -> R {
    let bindings = params.bindings.len();
    let pointers: Vec<CUdeviceptr> = params
        .bindings
        .iter()
        .chain(params.status.as_ref())
        .map(|p| p.0)
        .collect();
    let mut args: Vec<*mut c_void> = Vec::with_capacity(pointers.len() + params.constants.len());
    args.extend(
        pointers[..bindings]
            .iter()
            .map(|p| p as *const CUdeviceptr as *mut c_void),
    );
    args.extend(
        params
            .constants
            .iter()
            .map(|c| c as *const u32 as *mut c_void),
    );
    args.extend(
        pointers[bindings..]
            .iter()
            .map(|p| p as *const CUdeviceptr as *mut c_void),
    );
    if args.is_empty() {
        f(std::ptr::null_mut())
    } else {
        f(args.as_mut_ptr())
    }
}
