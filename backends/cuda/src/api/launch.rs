//! Kernel launches: the function and the stream held for the call, the launch checked against
//! the kernel's signature (registered by `get_function`), and `kernelParams` packed as a
//! pointer to each binding's `CUdeviceptr`, then to each `u32` constant, then to the status
//! word's `CUdeviceptr` if the kernel takes one (see [`crate::module`]).

use std::ffi::c_void;

use cudarc::driver::sys::CUdeviceptr;
use halcyon::{Error, Result, StatusCode};
use halcyon_stream::{FunctionHandle, KernelParams, LaunchConfig, StreamHandle};

use super::CudaApi;
use crate::result::check;
use crate::sys;

impl CudaApi {
    pub(super) fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        s: StreamHandle,
    ) -> Result<()> {
        let status = params.status;
        let _bound = self.bind()?;
        let f = self.functions.get(function.0).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "{function:?} is not a live CUDA function: get_function did not hand it out, \
                     or its module was unloaded"
                ),
            )
        })?;
        let live = self.enqueue_stream(s)?;
        f.signature.check(&f.name, params)?;
        // The word the kernel stores to: 4 aligned bytes of a live allocation of this API (a
        // made-up address would have the kernel write wherever it points, host memory
        // included where the device can reach it), held live until the launch is enqueued.
        let _status = status
            .map(|word| self.memory.check(word, 4, "status word"))
            .transpose()?;
        // The driver copies the values during the call, so they only need to outlive it: the
        // pointers (bindings, then the status word) are kept in `pointers`, the constants are
        // used in place.
        let bindings = params.bindings.len();
        let pointers: Vec<CUdeviceptr> = params
            .bindings
            .iter()
            .chain(status.as_ref())
            .map(|p| p.0)
            .collect();
        let mut args: Vec<*mut c_void> =
            Vec::with_capacity(pointers.len() + params.constants.len());
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
        let kernel_params = if args.is_empty() {
            std::ptr::null_mut()
        } else {
            args.as_mut_ptr()
        };
        let LaunchConfig {
            grid,
            block,
            shared_memory_bytes,
        } = *config;
        // SAFETY: a function of a loaded module and a live stream, both held for the call
        // (the function holds its module). The kernel's parameters were
        // checked against its entry point at load (from the PTX text, and with
        // check_kernel_params where the driver reports them), and the launch passes exactly
        // that signature (checked above), so it reads no more argument values, and no larger
        // ones, than `args` points at; `pointers` and the constants outlive the call; `extra`
        // is null.
        let r = unsafe {
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
        };
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
