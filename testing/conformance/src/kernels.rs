//! The standard kernels every backend supplies to the suite, and helpers to dispatch them.
//!
//! A backend implements [`Kernels`] by loading one executable with these entry points (the
//! order does not matter; the suite looks them up by name), each with exactly the metadata the
//! functions below return:
//!
//! * [`ADD_ONE_U32`]: binding 0 is a `u32` array `x`; constant 0 is `n`; every invocation
//!   `i < n` (global index `workgroup_id.x * 64 + local_id.x`) does `x[i] += 1`.
//! * [`SAXPY_F32`]: bindings `x` and `y` are `f32` arrays; constants are `a` (as `f32` bits) and
//!   `n`; every invocation `i < n` does `y[i] = a * x[i] + y[i]`.
//! * [`FAIL`]: no bindings, no constants; always fails, so the dispatch fails its signal fence.

use halcyon::{
    BufferRef, Device, EntryPoint, Error, Executable, Kernel, Queue, Result, StatusCode,
    Submission, Timepoints,
};

/// Name of the increment kernel.
pub const ADD_ONE_U32: &str = "add_one_u32";
/// Name of the saxpy kernel.
pub const SAXPY_F32: &str = "saxpy_f32";
/// Name of the kernel that always fails.
pub const FAIL: &str = "fail";
/// Workgroup size of [`ADD_ONE_U32`] and [`SAXPY_F32`].
pub const WORKGROUP_SIZE: [u32; 3] = [64, 1, 1];

/// Entry-point metadata of [`ADD_ONE_U32`].
pub fn add_one_u32() -> EntryPoint {
    EntryPoint {
        name: ADD_ONE_U32.into(),
        workgroup_size: WORKGROUP_SIZE,
        binding_count: 1,
        constant_count: 1,
    }
}

/// Entry-point metadata of [`SAXPY_F32`].
pub fn saxpy_f32() -> EntryPoint {
    EntryPoint {
        name: SAXPY_F32.into(),
        workgroup_size: WORKGROUP_SIZE,
        binding_count: 2,
        constant_count: 2,
    }
}

/// Entry-point metadata of [`FAIL`].
pub fn fail() -> EntryPoint {
    EntryPoint {
        name: FAIL.into(),
        workgroup_size: [1, 1, 1],
        binding_count: 0,
        constant_count: 0,
    }
}

/// What a backend supplies: its implementation of the standard kernels.
pub trait Kernels {
    /// Loads, on `device`, one executable with the entry points [`add_one_u32`],
    /// [`saxpy_f32`] and [`fail`].
    fn load(&self, device: &Device) -> Result<Executable>;

    /// Whether the backend's [`FAIL`] kernel really fails its dispatch. A backend whose kernels
    /// have no way to report failure (a Vulkan compute shader has no return code) returns
    /// `false`: its `fail` entry point must still exist, and the failing-dispatch case prints
    /// why and skips instead of asserting.
    fn can_fail(&self) -> bool {
        true
    }
}

impl<F: Fn(&Device) -> Result<Executable>> Kernels for F {
    fn load(&self, device: &Device) -> Result<Executable> {
        self(device)
    }
}

/// The standard kernels loaded on a device.
#[derive(Clone, Debug)]
pub struct StandardKernels {
    /// The executable.
    pub executable: Executable,
    /// [`ADD_ONE_U32`].
    pub add_one: Kernel,
    /// [`SAXPY_F32`].
    pub saxpy: Kernel,
    /// [`FAIL`].
    pub fail: Kernel,
}

impl StandardKernels {
    /// Loads the provider's executable and checks that each standard entry point is present
    /// with the standard metadata (`InvalidArgument` naming the difference otherwise).
    pub fn load(device: &Device, provider: &dyn Kernels) -> Result<Self> {
        let executable = provider.load(device)?;
        let kernel = |expected: EntryPoint| -> Result<Kernel> {
            let kernel = executable.kernel(&expected.name)?;
            let actual = kernel.entry_point();
            if *actual != expected {
                return Err(Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "the backend's Kernels provider declares {actual:?}, but the suite's \
                         standard entry point is {expected:?}"
                    ),
                ));
            }
            Ok(kernel)
        };
        Ok(StandardKernels {
            add_one: kernel(add_one_u32())?,
            saxpy: kernel(saxpy_f32())?,
            fail: kernel(fail())?,
            executable,
        })
    }

    /// Dispatches [`ADD_ONE_U32`] over the first `n` `u32`s of `x`.
    pub fn add_one(
        &self,
        queue: &Queue,
        timepoints: impl Into<Timepoints>,
        x: &BufferRef,
        n: u32,
    ) -> Submission {
        queue.dispatch(
            timepoints,
            &self.add_one.launch(workgroups(n)).constant(n).binding(x),
        )
    }

    /// Dispatches [`SAXPY_F32`]: `y = a * x + y` over the first `n` elements.
    pub fn saxpy(
        &self,
        queue: &Queue,
        timepoints: impl Into<Timepoints>,
        a: f32,
        x: &BufferRef,
        y: &BufferRef,
        n: u32,
    ) -> Submission {
        queue.dispatch(
            timepoints,
            &self
                .saxpy
                .launch(workgroups(n))
                .constant(a)
                .constant(n)
                .binding(x)
                .binding(y),
        )
    }

    /// Dispatches [`FAIL`] (one workgroup).
    pub fn fail(&self, queue: &Queue, timepoints: impl Into<Timepoints>) -> Submission {
        queue.dispatch(timepoints, &self.fail.launch([1, 1, 1]))
    }
}

/// Workgroups covering `n` invocations of a [`WORKGROUP_SIZE`] kernel.
pub fn workgroups(n: u32) -> [u32; 3] {
    [n.div_ceil(WORKGROUP_SIZE[0]), 1, 1]
}
