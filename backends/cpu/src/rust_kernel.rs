//! Kernels written in Rust and registered in-process (format [`FORMAT_RUST`]).

use std::any::Any;
use std::sync::Arc;

use bytemuck::Pod;
use halcyon::{EntryPoint, Error, ExecutableSpec, Result, StatusCode};

use crate::kernel::{CpuExecutable, DispatchState, Kernel};

/// The executable format of [`RustKernels`].
pub const FORMAT_RUST: &str = "cpu-rust";

/// What a Rust kernel sees of one workgroup.
pub struct WorkgroupContext<'a> {
    dispatch: &'a DispatchState,
    workgroup_id: [u32; 3],
    /// Set when a binding was asked for as a type it is not aligned for: the workgroup then
    /// fails with this message, instead of silently seeing an empty slice.
    misaligned: std::sync::OnceLock<String>,
}

impl WorkgroupContext<'_> {
    /// This workgroup's id in x, y, z.
    pub fn workgroup_id(&self) -> [u32; 3] {
        self.workgroup_id
    }

    /// The dispatch's workgroup count in x, y, z.
    pub fn workgroup_count(&self) -> [u32; 3] {
        self.dispatch.workgroup_count
    }

    /// Invocations per workgroup (the entry point's workgroup size).
    pub fn workgroup_size(&self) -> [u32; 3] {
        self.dispatch.workgroup_size
    }

    /// The dispatch's push constants.
    pub fn constants(&self) -> &[u32] {
        &self.dispatch.constants
    }

    /// Length of binding `index` in bytes (0 if there is no such binding).
    pub fn binding_len(&self, index: usize) -> usize {
        self.dispatch
            .binding_lengths
            .get(index)
            .map_or(0, |&l| l as usize)
    }

    fn raw<T: Pod>(&self, index: usize) -> (*mut T, usize) {
        let (Some(&ptr), Some(&len)) = (
            self.dispatch.binding_ptrs.get(index),
            self.dispatch.binding_lengths.get(index),
        ) else {
            return (std::ptr::NonNull::dangling().as_ptr(), 0);
        };
        let size = std::mem::size_of::<T>().max(1);
        let align = std::mem::align_of::<T>();
        if (ptr as usize) % align == 0 {
            (ptr.cast(), len as usize / size)
        } else {
            let _ = self.misaligned.set(format!(
                "binding {index} is not aligned for {} ({align}-byte alignment): bind it at an \
                 offset that is a multiple of {align}",
                std::any::type_name::<T>()
            ));
            (std::ptr::NonNull::dangling().as_ptr(), 0)
        }
    }

    /// Binding `index` as a slice of `T` (whole elements; empty if the binding does not exist
    /// or is not aligned for `T`, and then the workgroup fails with an error naming the
    /// binding, even if the kernel returns `Ok`).
    ///
    /// # Safety
    /// No other workgroup of this dispatch (nor any other work the semaphores let run at the
    /// same time) may write the elements this workgroup reads while it reads them.
    pub unsafe fn binding<T: Pod>(&self, index: usize) -> &[T] {
        let (ptr, len) = self.raw::<T>(index);
        // SAFETY: `ptr..ptr+len` lies within the binding's live buffer memory and is aligned for
        // `T` (checked in `raw`); the caller guarantees no concurrent writes.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// Binding `index` as a mutable slice of `T` (whole elements; empty if the binding does
    /// not exist or is not aligned for `T`, which fails the workgroup as in
    /// [`WorkgroupContext::binding`]).
    ///
    /// # Safety
    /// The workgroups of a dispatch run concurrently: each must only touch elements no other
    /// workgroup reads or writes at the same time (for example its own tile).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn binding_mut<T: Pod>(&self, index: usize) -> &mut [T] {
        let (ptr, len) = self.raw::<T>(index);
        // SAFETY: as in `binding`; the caller guarantees this workgroup's accesses are disjoint
        // from every other concurrent access.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }
}

type KernelFn = dyn Fn(&WorkgroupContext<'_>) -> std::result::Result<(), String> + Send + Sync;

struct RustKernel(Arc<KernelFn>);

impl Kernel for RustKernel {
    fn run(
        &self,
        dispatch: &DispatchState,
        workgroup_id: [u32; 3],
    ) -> std::result::Result<(), String> {
        let context = WorkgroupContext {
            dispatch,
            workgroup_id,
            misaligned: std::sync::OnceLock::new(),
        };
        (self.0)(&context)?;
        match context.misaligned.into_inner() {
            Some(message) => Err(message),
            None => Ok(()),
        }
    }
}

/// A set of Rust kernels forming one executable.
///
/// ```
/// use halcyon::EntryPoint;
/// use halcyon_cpu::RustKernels;
///
/// let spec = RustKernels::new()
///     .entry(
///         EntryPoint { name: "noop".into(), workgroup_size: [1, 1, 1], binding_count: 0, constant_count: 0 },
///         |_ctx| Ok(()),
///     )
///     .spec();
/// assert_eq!(spec.format, halcyon_cpu::FORMAT_RUST);
/// ```
#[derive(Clone, Default)]
pub struct RustKernels {
    entries: Vec<(EntryPoint, Arc<KernelFn>)>,
}

impl RustKernels {
    /// No kernels yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an entry point and its kernel, called once per workgroup (concurrently from the
    /// worker pool). An `Err` fails the dispatch with that message.
    pub fn entry(
        mut self,
        entry_point: EntryPoint,
        kernel: impl Fn(&WorkgroupContext<'_>) -> std::result::Result<(), String>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        self.entries.push((entry_point, Arc::new(kernel)));
        self
    }

    /// The executable spec to load on a CPU device. Loading the same spec (a clone of it)
    /// again returns the cached executable.
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_RUST, Arc::new(self))
    }
}

pub(crate) fn load(object: &(dyn Any + Send + Sync)) -> Result<CpuExecutable> {
    let kernels = object.downcast_ref::<RustKernels>().ok_or_else(|| {
        Error::new(
            StatusCode::InvalidArgument,
            "a 'cpu-rust' executable must be made with halcyon_cpu::RustKernels::spec()",
        )
    })?;
    for (i, (entry, _)) in kernels.entries.iter().enumerate() {
        if entry.workgroup_size.contains(&0) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "entry point '{}' has workgroup size {:?}; every dimension must be at least 1",
                    entry.name, entry.workgroup_size
                ),
            ));
        }
        if kernels.entries[..i]
            .iter()
            .any(|(e, _)| e.name == entry.name)
        {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!("entry point name '{}' is used twice", entry.name),
            ));
        }
    }
    Ok(CpuExecutable {
        entry_points: kernels.entries.iter().map(|(e, _)| e.clone()).collect(),
        kernels: kernels
            .entries
            .iter()
            .map(|(_, f)| Arc::new(RustKernel(f.clone())) as Arc<dyn Kernel>)
            .collect(),
        _keep_alive: None,
    })
}
