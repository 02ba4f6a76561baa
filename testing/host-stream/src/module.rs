//! "Modules" of the host stream API: named Rust kernels, loaded through the core's
//! [`ExecutableSpec`] mechanism (an in-process object of format [`FORMAT_HOST_KERNELS`]).
//!
//! A kernel is a `Fn(&LaunchArgs)` called once per block of the launch grid, in order, on the
//! launching stream's thread, like a GPU kernel whose blocks happen to run one after another. It
//! receives its parameters in halcyon's dispatch model: binding `i` is the device pointer the
//! launch passed (here a host address), then the `u32` constants. Returning `Err` fails the
//! launch: the stream skips its work up to the next event record, and that event (and so the
//! submission's fence) reports the error.
//!
//! A kernel added with [`HostModule::kernel_with_status_word`] takes a status word (the
//! status-word convention, docs/ARCHITECTURE.md): its launches pass the word's host address
//! after the constants ([`LaunchArgs::status_word`]), and the launch itself succeeds whatever
//! the kernel writes there.

use std::any::Any;
use std::fmt;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use bytemuck::Pod;

use halcyon::{EntryPoint, ExecutableSpec};
use halcyon::{Error, Result, StatusCode};

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
    /// The status word, for a kernel that takes one.
    pub(crate) status: Option<&'a AtomicU32>,
    /// The launch's dynamic shared memory, in bytes.
    pub(crate) shared_memory_bytes: u32,
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

    /// The dynamic shared memory the launch gave each block, in bytes
    /// ([`halcyon_stream::LaunchConfig::shared_memory_bytes`]; a stream device launches an
    /// entry point with what [`HostModule::with_shared_memory`] declared). A host kernel has
    /// no shared memory to address: this reports what a GPU kernel would have been given.
    pub fn shared_memory_bytes(&self) -> u32 {
        self.shared_memory_bytes
    }

    /// The status word the launch passed after the constants, for a kernel added with
    /// [`HostModule::kernel_with_status_word`] (`None` for other kernels): the word at the
    /// host address of the launch's status argument (used by the status-word convention,
    /// docs/ARCHITECTURE.md). No binding of the launch overlaps it (the launch is
    /// refused otherwise), so it may be used while binding slices live.
    pub fn status_word(&self) -> Option<&AtomicU32> {
        self.status
    }

    /// How many bytes binding `index` may address: from its pointer to the end of the
    /// allocation it points into (0 if there is no such binding).
    pub fn binding_len(&self, index: usize) -> usize {
        self.bindings.get(index).map_or(0, |&(_, len)| len)
    }

    fn raw<T: Pod>(&self, index: usize) -> (*mut T, usize) {
        match self.bindings.get(index) {
            Some(&(ptr, len)) if (ptr as usize).is_multiple_of(std::mem::align_of::<T>()) => {
                (ptr.cast(), len / std::mem::size_of::<T>().max(1))
            }
            _ => (std::ptr::NonNull::dangling().as_ptr(), 0),
        }
    }

    /// Binding `index` as a slice of `T`, up to the end of its allocation (empty if there is no
    /// such binding or it is not aligned for `T`).
    ///
    /// # Safety
    /// While the slice lives, nothing may write these elements: no other binding of this
    /// launch that overlaps them accessed mutably, and no launch, copy or fill running at the
    /// same time on another stream (streams order only their own work, and other streams'
    /// through events; a host kernel's blocks run one after another on one thread).
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
    /// Nothing else may access these elements while the slice lives: no other binding slice of
    /// this launch that overlaps them (two bindings may point into one allocation), and no
    /// launch, copy or fill running at the same time on another stream (streams order only
    /// their own work, and other streams' through events).
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

/// One kernel of a [`HostModule`].
#[derive(Clone)]
pub(crate) struct HostKernelEntry {
    pub(crate) entry: EntryPoint,
    pub(crate) run: Arc<HostKernel>,
    /// Whether it takes a status word after its constants.
    pub(crate) status_word: bool,
    /// The dynamic shared memory its launches declare, in bytes.
    pub(crate) shared_memory_bytes: u32,
}

/// A set of named host kernels forming one module.
///
/// ```
/// use halcyon_host_stream::HostModule;
/// use halcyon::EntryPoint;
///
/// let spec = HostModule::new()
///     .kernel(
///         EntryPoint { name: "noop".into(), workgroup_size: [1, 1, 1], binding_count: 0, constant_count: 0 },
///         |_args| Ok(()),
///     )
///     .spec();
/// assert_eq!(spec.format, halcyon_host_stream::FORMAT_HOST_KERNELS);
/// ```
#[derive(Clone, Default)]
pub struct HostModule {
    pub(crate) kernels: Vec<HostKernelEntry>,
}

impl fmt::Debug for HostModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.kernels.iter().map(|k| &k.entry.name))
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
        self.kernels.push(HostKernelEntry {
            entry: entry_point,
            run: Arc::new(kernel),
            status_word: false,
            shared_memory_bytes: 0,
        });
        self
    }

    /// Adds a kernel that takes a status word after its constants (the status-word
    /// convention, docs/ARCHITECTURE.md): like [`HostModule::kernel`], but every launch passes
    /// the word's address, which the kernel reaches through [`LaunchArgs::status_word`]; the
    /// launch itself succeeds.
    ///
    /// ```
    /// use std::sync::atomic::Ordering;
    ///
    /// use halcyon_host_stream::HostModule;
    /// use halcyon::EntryPoint;
    ///
    /// let spec = HostModule::new()
    ///     .kernel_with_status_word(
    ///         EntryPoint { name: "check".into(), workgroup_size: [1, 1, 1], binding_count: 0, constant_count: 1 },
    ///         |args| {
    ///             if args.constants()[0] == 0 {
    ///                 // Fails the dispatch once the stream device checks the word.
    ///                 args.status_word().expect("a status word").store(7, Ordering::Relaxed);
    ///             }
    ///             Ok(())
    ///         },
    ///     )
    ///     .spec();
    /// # let _ = spec;
    /// ```
    pub fn kernel_with_status_word(
        mut self,
        entry_point: EntryPoint,
        kernel: impl Fn(&LaunchArgs<'_>) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.kernels.push(HostKernelEntry {
            entry: entry_point,
            run: Arc::new(kernel),
            status_word: true,
            shared_memory_bytes: 0,
        });
        self
    }

    /// Declares that kernel `entry` is launched with `bytes` of dynamic shared memory per
    /// block, as a CUDA or HIP module declares it for a kernel using `extern __shared__`:
    /// every launch a stream device makes of it passes `bytes` in
    /// [`halcyon_stream::LaunchConfig::shared_memory_bytes`], which the kernel reads back
    /// through [`LaunchArgs::shared_memory_bytes`]. `NotFound` if the module has no kernel
    /// named `entry`.
    ///
    /// ```
    /// use halcyon_host_stream::HostModule;
    /// use halcyon::EntryPoint;
    ///
    /// let module = HostModule::new()
    ///     .kernel(
    ///         EntryPoint { name: "tile".into(), workgroup_size: [64, 1, 1], binding_count: 0, constant_count: 0 },
    ///         |args| match args.shared_memory_bytes() {
    ///             4096 => Ok(()),
    ///             other => Err(format!("launched with {other} bytes of shared memory")),
    ///         },
    ///     )
    ///     .with_shared_memory("tile", 4096)?;
    /// assert!(module.clone().with_shared_memory("tiles", 4096).is_err());
    /// # Ok::<(), halcyon::Error>(())
    /// ```
    pub fn with_shared_memory(mut self, entry: &str, bytes: u32) -> Result<Self> {
        let names = || {
            self.kernels
                .iter()
                .map(|k| k.entry.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(index) = self.kernels.iter().position(|k| k.entry.name == entry) else {
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "cannot declare shared memory for host kernel '{entry}': the module has \
                     only [{}]",
                    names()
                ),
            ));
        };
        self.kernels[index].shared_memory_bytes = bytes;
        Ok(self)
    }

    /// The executable spec to load on a device over [`crate::HostStreamApi`].
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
                     halcyon_host_stream::HostModule::spec()"
                ),
            )
        })?;
        for (i, HostKernelEntry { entry, .. }) in module.kernels.iter().enumerate() {
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
                .any(|k| k.entry.name == entry.name)
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
