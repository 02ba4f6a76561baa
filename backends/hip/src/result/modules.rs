//! Modules and kernels: loading code objects, looking up functions, launching kernels.

use std::ffi::{c_void, CString};
use std::ptr;

use halcyon::{Error, Result, StatusCode};

use super::Hip;
use crate::sys;

impl Hip {
    /// `hipModuleLoadData`: loads a code object (HSACO ELF or offload bundle) on the current
    /// device.
    ///
    /// # Safety
    /// `image` is a complete code object or offload bundle: HIP reads a code object's size from
    /// the headers inside it, a bundle's entries from its table, and may read a bundle's first
    /// 4096 bytes whatever its size (so `image` holds at least 4096 bytes).
    pub unsafe fn module_load_data(self, image: &[u8]) -> Result<sys::hipModule_t> {
        let mut m: sys::hipModule_t = ptr::null_mut();
        // SAFETY: the out-pointer is valid; the image's integrity is guaranteed by the caller.
        let e = unsafe { (self.api.hipModuleLoadData)(&mut m, image.as_ptr().cast()) };
        self.check(e, || format!("hipModuleLoadData({} bytes)", image.len()))
            .map(|()| m)
    }

    /// `hipModuleUnload`.
    ///
    /// # Safety
    /// `module` is live, unloaded once, and none of its functions is used or running after.
    pub unsafe fn module_unload(self, module: sys::hipModule_t) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { (self.api.hipModuleUnload)(module) };
        self.check(e, || "hipModuleUnload".into())
    }

    /// `hipModuleGetFunction`; `InvalidArgument` when `name` contains a NUL.
    ///
    /// # Safety
    /// `module` is a live module of this runtime.
    pub unsafe fn module_get_function(
        self,
        module: sys::hipModule_t,
        name: &str,
    ) -> Result<sys::hipFunction_t> {
        let cname = CString::new(name).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!("kernel name {name:?} contains a NUL byte"),
            )
        })?;
        let mut f: sys::hipFunction_t = ptr::null_mut();
        // SAFETY: the out-pointer and the name are valid; the module is guaranteed by the
        // caller.
        let e = unsafe { (self.api.hipModuleGetFunction)(&mut f, module, cname.as_ptr()) };
        self.check(e, || format!("hipModuleGetFunction(\"{name}\")"))
            .map(|()| f)
    }

    /// `hipModuleLaunchKernel` with `grid` blocks of `block` threads.
    ///
    /// # Safety
    /// `function` and `stream` are live; `kernel_params` (or `extra`) matches the kernel's
    /// parameters exactly; everything the kernel touches stays valid until it completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn module_launch_kernel(
        self,
        function: sys::hipFunction_t,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: sys::hipStream_t,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> Result<()> {
        // SAFETY: guaranteed by the caller.
        let e = unsafe {
            (self.api.hipModuleLaunchKernel)(
                function,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem_bytes,
                stream,
                kernel_params,
                extra,
            )
        };
        self.check(e, || {
            format!("hipModuleLaunchKernel(grid {grid:?}, block {block:?}, {shared_mem_bytes} bytes shared)")
        })
    }
}
