//! Executables: loaded device code with entry-point metadata, and a cache keyed by content.
//!
//! An executable is loaded by a device from an [`ExecutableSpec`]: a format name the device
//! supports (see [`crate::Device::supported_formats`]) and either bytes (a shared library, SPIR-V,
//! PTX...) or an in-process object (Rust kernels on the CPU device). Each entry point states its
//! name, workgroup size, binding count and constant count; dispatches are validated against it
//! when recorded.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::{Error, Result, StatusCode};

mod kernel;
mod packed;

pub use kernel::{Kernel, Launch};
pub use packed::{PackedExecutable, MAX_ENTRY_POINTS};

/// One kernel of an executable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EntryPoint {
    /// The name dispatches look it up by.
    pub name: String,
    /// Invocations per workgroup in x, y, z.
    pub workgroup_size: [u32; 3],
    /// Buffer bindings a dispatch must supply.
    pub binding_count: u32,
    /// `u32` push constants a dispatch must supply.
    pub constant_count: u32,
}

/// The index of the entry point called `name` in `entry_points`, or `NotFound` reading "the
/// {what} has no entry point '{name}'; its entry points are [...]" (what a module builder such
/// as `with_shared_memory` says of a name it does not know).
pub fn find_entry_point(entry_points: &[EntryPoint], name: &str, what: &str) -> Result<usize> {
    entry_points
        .iter()
        .position(|e| e.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = entry_points.iter().map(|e| e.name.as_str()).collect();
            Error::new(
                StatusCode::NotFound,
                format!(
                    "the {what} has no entry point '{name}'; its entry points are [{}]",
                    names.join(", ")
                ),
            )
        })
}

/// The code of an executable.
#[derive(Clone)]
pub enum ExecutableSource {
    /// Bytes in the spec's format (a shared library image or path contents, SPIR-V, PTX...).
    Bytes(Arc<[u8]>),
    /// An in-process object the device understands (for example CPU Rust kernels).
    Native(Arc<dyn Any + Send + Sync>),
}

impl fmt::Debug for ExecutableSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecutableSource::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
            ExecutableSource::Native(_) => f.write_str("Native(..)"),
        }
    }
}

/// What to load: a format and its source.
///
/// # The trust boundary
///
/// A spec made by [`ExecutableSpec::bytes`] or [`ExecutableSpec::native`] is *checked*: a
/// device loads it only if the backend can validate it completely (itself, through a
/// well-kept crate such as naga, or through a driver that reports bad input as an error, as
/// CUDA's PTX JIT does), and refuses it otherwise with `InvalidArgument` naming the unsafe
/// path. Formats a driver or the dynamic loader consumes unchecked (CUDA cubins and fatbins,
/// HIP code objects, shared libraries, raw SPIR-V) load only from a spec made by the `unsafe`
/// [`ExecutableSpec::bytes_unchecked`], whose caller vouches for the bytes, as
/// `wgpu::Device::create_shader_module_spirv` and `libloading::Library::new` make theirs do.
#[derive(Clone, Debug)]
pub struct ExecutableSpec {
    /// The format name, for example `"cpu-rust"`, `"cpu-c-abi-v1"`, `"spirv"`.
    pub format: String,
    /// The code.
    pub source: ExecutableSource,
    /// Whether the caller vouched for the bytes ([`ExecutableSpec::bytes_unchecked`]).
    unchecked: bool,
}

impl ExecutableSpec {
    /// A checked spec from bytes: the device validates them completely or refuses them.
    pub fn bytes(format: impl Into<String>, bytes: impl Into<Arc<[u8]>>) -> Self {
        ExecutableSpec {
            format: format.into(),
            source: ExecutableSource::Bytes(bytes.into()),
            unchecked: false,
        }
    }

    /// A spec from bytes the device may hand its driver or loader without validating them
    /// completely (it still makes the cheap checks that catch honest mistakes: magic numbers,
    /// header extents, entry points present).
    ///
    /// # Safety
    ///
    /// The bytes must be what the format's own toolchain produced, unmodified, for the
    /// device's architecture: `ptxas`/`fatbinary`/`nvcc` output for CUDA binaries, `clang`/
    /// `hipcc` output for HIP code objects and bundles, SPIR-V valid under the Vulkan
    /// environment's rules for raw SPIR-V, a shared library built against the CPU backend's C
    /// ABI whose initialisers and kernels are sound to run. Any metadata the format carries
    /// (entry-point tables, shared-memory sizes) must agree with the code. A driver or loader
    /// given anything else may read or write out of bounds or run arbitrary code.
    pub unsafe fn bytes_unchecked(format: impl Into<String>, bytes: impl Into<Arc<[u8]>>) -> Self {
        ExecutableSpec {
            unchecked: true,
            ..ExecutableSpec::bytes(format, bytes)
        }
    }

    /// A spec from an in-process object (a module type a backend defines; such a type carries
    /// its own trust, made by a safe constructor that validated it or an unsafe one).
    pub fn native(format: impl Into<String>, object: Arc<dyn Any + Send + Sync>) -> Self {
        ExecutableSpec {
            format: format.into(),
            source: ExecutableSource::Native(object),
            unchecked: false,
        }
    }

    /// Whether the spec was made by [`ExecutableSpec::bytes_unchecked`]: a backend may then
    /// load formats it cannot validate completely.
    pub fn is_unchecked(&self) -> bool {
        self.unchecked
    }
}

/// A backend's loaded executable (the SPI).
pub trait ExecutableBackend: Send + Sync + 'static {
    /// Entry points, in the order dispatches index them.
    fn entry_points(&self) -> &[EntryPoint];
    /// The object as `Any`, so the backend can reach its own type when dispatching.
    fn as_any(&self) -> &dyn Any;
}

struct Inner {
    id: u64,
    format: String,
    device: String,
    backend: Box<dyn ExecutableBackend>,
    /// Each entry point's name, shared with the profile records of its dispatches (built on
    /// the first profiled dispatch).
    trace_names: std::sync::OnceLock<Vec<std::sync::Arc<str>>>,
    label: crate::label::Label,
}

static NEXT_EXECUTABLE_ID: AtomicU64 = AtomicU64::new(1);

/// A loaded executable. Cloning gives another handle; submissions keep it alive.
///
/// A device loads one from an [`ExecutableSpec`] in a format it supports (each backend makes
/// its own: `halcyon_cpu::RustKernels::spec`, `halcyon_vulkan::SpirvModule::from_wgsl`, ...);
/// loading the same spec again returns the cached executable.
///
/// ```
/// use halcyon::{Device, ExecutableSpec};
///
/// fn load(device: &Device, spec: &ExecutableSpec) -> halcyon::Result<halcyon::Kernel> {
///     let executable = device.load_executable(spec)?;
///     for entry in executable.entry_points() {
///         println!("{}: {:?} per workgroup", entry.name, entry.workgroup_size);
///     }
///     executable.kernel("main")
/// }
/// ```
#[derive(Clone)]
pub struct Executable {
    inner: Arc<Inner>,
}

impl Executable {
    /// Wraps a backend executable (the SPI; users load through a device).
    pub fn from_backend(
        format: impl Into<String>,
        device: impl Into<String>,
        backend: Box<dyn ExecutableBackend>,
    ) -> Self {
        Executable {
            inner: Arc::new(Inner {
                id: NEXT_EXECUTABLE_ID.fetch_add(1, Ordering::Relaxed),
                format: format.into(),
                device: device.into(),
                backend,
                trace_names: std::sync::OnceLock::new(),
                label: crate::label::Label::default(),
            }),
        }
    }

    /// The name of entry point `index`, shared: a clone costs no allocation (for profile
    /// records and a backend's messages about a dispatch).
    pub fn entry_name(&self, index: u32) -> Option<std::sync::Arc<str>> {
        let names = self.inner.trace_names.get_or_init(|| {
            self.entry_points()
                .iter()
                .map(|e| std::sync::Arc::from(e.name.as_str()))
                .collect()
        });
        names.get(index as usize).cloned()
    }

    /// Names the executable in error messages (`executable 3 'kernels'`; see its `Display`).
    /// Every handle sees the new label.
    pub fn set_label(&self, label: &str) {
        self.inner.label.set(label);
    }

    /// The executable's label, if it has one.
    pub fn label(&self) -> Option<Arc<str>> {
        self.inner.label.get()
    }

    /// The format it was loaded from.
    pub fn format(&self) -> &str {
        &self.inner.format
    }

    /// The id of the device that loaded it.
    pub fn device_id(&self) -> &str {
        &self.inner.device
    }

    /// Entry points, in index order.
    pub fn entry_points(&self) -> &[EntryPoint] {
        self.inner.backend.entry_points()
    }

    /// The kernel called `name`, to dispatch ([`Kernel::launch`]); `NotFound` listing the
    /// names there are. Look it up once and keep it: a [`Kernel`] is cheap to clone.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        self.entry_points()
            .iter()
            .position(|e| e.name == name)
            .map(|i| Kernel::new(self.clone(), i as u32))
            .ok_or_else(|| {
                Error::new(
                    StatusCode::NotFound,
                    format!(
                        "executable has no entry point '{name}'; it has: {}",
                        self.entry_points()
                            .iter()
                            .map(|e| e.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
    }

    /// The kernel at `index` of [`Executable::entry_points`] (for code that walks them all);
    /// `OutOfRange` naming the index and the count if there is none.
    pub fn kernel_at(&self, index: u32) -> Result<Kernel> {
        self.entry_point(index)?;
        Ok(Kernel::new(self.clone(), index))
    }

    /// The entry point at `index`; `OutOfRange` if there is none.
    pub fn entry_point(&self, index: u32) -> Result<&EntryPoint> {
        self.entry_points().get(index as usize).ok_or_else(|| {
            Error::new(
                StatusCode::OutOfRange,
                format!(
                    "entry point index {index} is out of range: the executable has {} entry points",
                    self.entry_points().len()
                ),
            )
        })
    }

    /// The backend object (the SPI).
    pub fn backend(&self) -> &dyn ExecutableBackend {
        &*self.inner.backend
    }

    /// Whether two handles refer to the same executable.
    pub fn ptr_eq(&self, other: &Executable) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A process-unique id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }
}

/// `executable 3`, or `executable 3 'kernels'` once labelled ([`Executable::set_label`]).
impl fmt::Display for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::label::write(f, "executable", self.inner.id, &self.inner.label)
    }
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executable")
            .field("id", &self.inner.id)
            .field("label", &self.inner.label)
            .field("format", &self.inner.format)
            .field("entry_points", &self.entry_points())
            .finish()
    }
}

#[derive(PartialEq, Eq, Hash)]
enum Key {
    /// Format, content hash, length, and whether the spec was unchecked (a checked spec never
    /// finds what an unchecked one loaded, so the same bytes fail the same way every time).
    Bytes(String, u64, usize, bool),
    Native(String, usize),
}

/// The source an executable was loaded from, and the executable while it lives.
type CacheEntry = (ExecutableSource, Weak<Inner>);

/// A cache of loaded executables keyed by content (format and bytes, or the native object's
/// identity). Holds executables weakly: an entry lives as long as some handle does.
#[derive(Default)]
pub struct ExecutableCache {
    entries: Mutex<HashMap<Key, Vec<CacheEntry>>>,
}

impl fmt::Debug for ExecutableCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutableCache")
            .field("live", &self.len())
            .finish()
    }
}

impl ExecutableCache {
    /// Returns the cached executable for `spec`, or loads it with `load` and caches it.
    pub fn get_or_load(
        &self,
        spec: &ExecutableSpec,
        load: impl FnOnce(&ExecutableSpec) -> Result<Executable>,
    ) -> Result<Executable> {
        let key = match &spec.source {
            ExecutableSource::Bytes(bytes) => {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut hasher);
                Key::Bytes(
                    spec.format.clone(),
                    hasher.finish(),
                    bytes.len(),
                    spec.unchecked,
                )
            }
            ExecutableSource::Native(object) => Key::Native(
                spec.format.clone(),
                Arc::as_ptr(object) as *const () as usize,
            ),
        };
        let same = |a: &ExecutableSource, b: &ExecutableSource| match (a, b) {
            (ExecutableSource::Bytes(a), ExecutableSource::Bytes(b)) => a[..] == b[..],
            (ExecutableSource::Native(a), ExecutableSource::Native(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = entries.entry(key).or_default();
        bucket.retain(|(_, weak)| weak.strong_count() > 0);
        for (source, weak) in bucket.iter() {
            if same(source, &spec.source) {
                if let Some(inner) = weak.upgrade() {
                    return Ok(Executable { inner });
                }
            }
        }
        let executable = load(spec)?;
        bucket.push((spec.source.clone(), Arc::downgrade(&executable.inner)));
        Ok(executable)
    }

    /// Live cached executables.
    pub fn len(&self) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .values()
            .flatten()
            .filter(|(_, w)| w.strong_count() > 0)
            .count()
    }

    /// Whether no executable is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
