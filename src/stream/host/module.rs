//! "Modules" of the host stream API: named Rust kernels, loaded through the core's
//! [`ExecutableSpec`] mechanism (an in-process object of format [`FORMAT_HOST_KERNELS`]).
//!
//! A kernel is a `Fn(&LaunchArgs)` called once per block of the launch grid, in order, on the
//! launching stream's thread, like a GPU kernel whose blocks happen to run one after another. It
//! receives its parameters in halcyon's dispatch model: binding `i` is the device pointer the
//! launch passed (here a host address), then the `u32` constants. Returning `Err` fails the
//! launch: the stream skips its work up to the next event record, and that event (and so the
//! submission's fence) reports the error.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use bytemuck::Pod;

use crate::error::{Error, Result, StatusCode};
use crate::executable::{EntryPoint, ExecutableSpec};

/// The executable format of [`HostModule`]s.
pub const FORMAT_HOST_KERNELS: &str = "host-stream-kernels";

/// What one block of a host kernel launch sees.
pub struct LaunchArgs<'a> {
    pub(crate) block_id: [u32; 3],
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    pub(crate) constants: &'a [u32],
    /// Each binding's host address and the bytes from there to the end of its allocation.
    pub(crate) bindings: &'a [(*mut u8, usize)],
}

impl LaunchArgs<'_> {
    /// This block's index in x, y, z.
    pub fn block_id(&self) -> [u32; 3] {
        self.block_id
    }

    /// The grid: blocks in x, y, z (halcyon's workgroup count).
    pub fn grid(&self) -> [u32; 3] {
        self.grid
    }

    /// Threads per block in x, y, z (the entry point's workgroup size).
    pub fn block(&self) -> [u32; 3] {
        self.block
    }

    /// The launch's `u32` constants.
    pub fn constants(&self) -> &[u32] {
        self.constants
    }

    /// How many bytes binding `index` may address: from its pointer to the end of the
    /// allocation it points into (0 if there is no such binding).
    pub fn binding_len(&self, index: usize) -> usize {
        self.bindings.get(index).map_or(0, |&(_, len)| len)
    }

    fn raw<T: Pod>(&self, index: usize) -> (*mut T, usize) {
        match self.bindings.get(index) {
            Some(&(ptr, len)) if (ptr as usize) % std::mem::align_of::<T>() == 0 => {
                (ptr.cast(), len / std::mem::size_of::<T>().max(1))
            }
            _ => (std::ptr::NonNull::dangling().as_ptr(), 0),
        }
    }

    /// Binding `index` as a slice of `T`, up to the end of its allocation (empty if there is no
    /// such binding or it is not aligned for `T`).
    ///
    /// # Safety
    /// No other binding of this launch that overlaps these elements may be accessed mutably
    /// while the slice lives.
    pub unsafe fn binding<T: Pod>(&self, index: usize) -> &[T] {
        let (ptr, len) = self.raw::<T>(index);
        // SAFETY: `ptr..ptr+len` lies in a live allocation the launch holds, aligned for `T`
        // (checked in `raw`); streams order launches against every other access, and the caller
        // guarantees no overlapping mutable binding is used meanwhile.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }

    /// Binding `index` as a mutable slice of `T`, up to the end of its allocation (empty if there
    /// is no such binding or it is not aligned for `T`).
    ///
    /// # Safety
    /// No other binding slice of this launch that overlaps these elements may live at the same
    /// time (two bindings may point into one allocation).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn binding_mut<T: Pod>(&self, index: usize) -> &mut [T] {
        let (ptr, len) = self.raw::<T>(index);
        // SAFETY: as in `binding`; the caller guarantees this is the only live view of these
        // elements.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }
}

/// A host kernel: called once per block; `Err` fails the launch with that message.
pub type HostKernel = dyn Fn(&LaunchArgs<'_>) -> std::result::Result<(), String> + Send + Sync;

/// A set of named host kernels forming one module.
///
/// ```
/// use halcyon::stream::host::HostModule;
/// use halcyon::EntryPoint;
///
/// let spec = HostModule::new()
///     .kernel(
///         EntryPoint { name: "noop".into(), workgroup_size: [1, 1, 1], binding_count: 0, constant_count: 0 },
///         |_args| Ok(()),
///     )
///     .spec();
/// assert_eq!(spec.format, halcyon::stream::host::FORMAT_HOST_KERNELS);
/// ```
#[derive(Clone, Default)]
pub struct HostModule {
    pub(crate) kernels: Vec<(EntryPoint, Arc<HostKernel>)>,
}

impl fmt::Debug for HostModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.kernels.iter().map(|(e, _)| &e.name))
            .finish()
    }
}

impl HostModule {
    /// No kernels yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a kernel under `entry_point`'s name; its workgroup size is the launch's block size.
    pub fn kernel(
        mut self,
        entry_point: EntryPoint,
        kernel: impl Fn(&LaunchArgs<'_>) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.kernels.push((entry_point, Arc::new(kernel)));
        self
    }

    /// The executable spec to load on a device over [`crate::stream::host::HostStreamApi`].
    /// Loading the same spec (a clone of it) again returns the cached executable.
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_HOST_KERNELS, Arc::new(self))
    }

    /// Checks the module loaded from `object`: a `HostModule` with unique names and non-zero
    /// workgroup sizes.
    pub(crate) fn from_object(object: &(dyn Any + Send + Sync)) -> Result<HostModule> {
        let module = object.downcast_ref::<HostModule>().ok_or_else(|| {
            Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "a '{FORMAT_HOST_KERNELS}' executable must be made with \
                     halcyon::stream::host::HostModule::spec()"
                ),
            )
        })?;
        for (i, (entry, _)) in module.kernels.iter().enumerate() {
            if entry.workgroup_size.contains(&0) {
                return Err(Error::new(
                    StatusCode::InvalidArgument,
                    format!(
                        "host kernel '{}' has workgroup size {:?}; every dimension must be at \
                         least 1",
                        entry.name, entry.workgroup_size
                    ),
                ));
            }
            if module.kernels[..i]
                .iter()
                .any(|(e, _)| e.name == entry.name)
            {
                return Err(Error::new(
                    StatusCode::InvalidArgument,
                    format!("host kernel name '{}' is used twice", entry.name),
                ));
            }
        }
        Ok(module.clone())
    }
}
