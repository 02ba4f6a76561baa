//! Kernel launches (`hipModuleLaunchKernel`): the arguments checked against the counts the
//! entry point declared, the status word against the live allocations, and the grid against
//! the device's limits and 32-bit work-item counts, before HIP sees them.
//!
//! `kernelParams` is one pointer per argument ([`KernelArgs`]): each binding's device pointer,
//! then each `u32` constant, then the status word's device pointer for a kernel that takes
//! one ([`crate::module`]).

use std::ffi::c_void;

use halcyon::Result;
use halcyon_stream::{FunctionHandle, KernelParams, LaunchConfig, StreamHandle};

use super::{invalid, HipStreamApi};

/// The grid limits assumed where `hipDeviceAttributeMaxGridDim{X,Y,Z}` cannot be read: what
/// ROCm reports from 5.7 on (`INT32_MAX`, 65536, 65536; ROCm/clr `hip_device.cpp`).
pub(crate) const DEFAULT_MAX_GRID: [u32; 3] = [i32::MAX as u32, 1 << 16, 1 << 16];

/// Checks the shape of a launch of kernel `name` before `hipModuleLaunchKernel` sees it:
/// at most `max_grid[i]` blocks in each dimension (the device's `hipDeviceAttributeMaxGridDim*`),
/// and at most `u32::MAX` work-items (blocks × threads per block) in each. HIP computes the
/// work-items in 64 bits but hands them on as 32-bit values, and not every release checks
/// every dimension: HIP 5.2.3 refuses an overflow in any dimension, ROCm 5.7 checks only x and
/// truncates y and z to 32 bits, later releases bound y and z by their grid limit (6.0 – 6.2:
/// `INT32_MAX / 1024`; later clr: 65536, the limit the device reports from 5.7 on). This check
/// gives the same answer on every release.
pub(crate) fn check_grid(
    name: &str,
    grid: [u32; 3],
    block: [u32; 3],
    max_grid: [u32; 3],
) -> Result<()> {
    for (i, axis) in ["X", "Y", "Z"].into_iter().enumerate() {
        let lower = axis.to_ascii_lowercase();
        if grid[i] > max_grid[i] {
            return Err(invalid(format!(
                "kernel '{name}': a grid of {} blocks in {lower} exceeds the device's limit of {} \
                 (hipDeviceAttributeMaxGridDim{axis}); grid {grid:?}, block {block:?}",
                grid[i], max_grid[i]
            )));
        }
        let items = u64::from(grid[i]) * u64::from(block[i]);
        if items > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "kernel '{name}': {} blocks of {} threads in {lower} are {items} work-items, more \
                 than the {} (u32::MAX) hipModuleLaunchKernel takes in one dimension; grid \
                 {grid:?}, block {block:?}",
                grid[i],
                block[i],
                u32::MAX
            )));
        }
    }
    Ok(())
}

/// The `kernelParams` of a launch: storage for each argument's value, and the array of
/// pointers to them that `hipModuleLaunchKernel` reads (it copies the values during the call).
pub(crate) struct KernelArgs {
    /// One slot per argument: a binding's device pointer, or a constant in the low 4 bytes
    /// (little-endian, so a pointer to the slot is a pointer to the `u32`).
    values: Vec<u64>,
}

impl KernelArgs {
    /// The bindings, the constants, then the status word's address if there is one.
    pub(crate) fn new(params: &KernelParams<'_>) -> Self {
        let values = params
            .bindings
            .iter()
            .map(|p| p.0)
            .chain(params.constants.iter().map(|&c| u64::from(c)))
            .chain(params.status.map(|p| p.0))
            .collect();
        KernelArgs { values }
    }

    /// The pointer array: element `i` points at argument `i`'s value. Valid while `self` lives
    /// and is not moved or changed.
    pub(crate) fn pointers(&mut self) -> Vec<*mut c_void> {
        self.values
            .iter_mut()
            .map(|v| (v as *mut u64).cast::<c_void>())
            .collect()
    }
}

impl HipStreamApi {
    /// [`StreamApi::launch_kernel`](super::StreamApi::launch_kernel).
    pub(super) fn launch_kernel(
        &self,
        function: FunctionHandle,
        config: &LaunchConfig,
        params: &KernelParams<'_>,
        stream: StreamHandle,
    ) -> Result<()> {
        let status = params.status;
        let function = self.functions.get(function.0)?;
        function.signature.check(&function.name, params)?;
        check_grid(&function.name, config.grid, config.block, self.max_grid)?;
        // The word the kernel stores to: 4 aligned bytes of a live allocation of this API (a
        // made-up address would have the kernel write wherever it points, host memory
        // included where the device can reach it), held live until the launch is enqueued.
        let _status = status
            .map(|word| self.memory.check(word, 4, "status word"))
            .transpose()?;
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        let mut args = KernelArgs::new(params);
        let mut pointers = args.pointers();
        let kernel_params = if pointers.is_empty() {
            std::ptr::null_mut()
        } else {
            pointers.as_mut_ptr()
        };
        // SAFETY: a live function (its module held) and stream. The module's metadata was
        // checked at load to take exactly `binding_count` 8-byte pointers then
        // `constant_count` 4-byte values, then an 8-byte pointer if it takes a status word, and
        // the launch matches (checked above), so HIP reads exactly one valid pointer per
        // argument, each to a value at least as large as the argument; it copies the values
        // during the call, so `args` may go afterwards.
        unsafe {
            self.hip.module_launch_kernel(
                function.raw,
                config.grid,
                config.block,
                config.shared_memory_bytes,
                stream.raw,
                kernel_params,
                std::ptr::null_mut(),
            )
        }
    }
}
