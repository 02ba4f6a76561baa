//! HIP executables: AMDGPU code objects (HSACO) with halcyon's entry-point metadata.
//!
//! Format [`FORMAT_HSACO`] (`"hip-hsaco"`) takes either
//!
//! * [`ExecutableSource::Native`] holding an `Arc<HipModule>` ([`HipModule::spec`]): a code
//!   object plus the entry points to expose, in dispatch index order, or
//! * [`ExecutableSource::Bytes`] holding a [`PackedExecutable`] of format `"hip-hsaco"`
//!   ([`HipModule::to_packed`]), from an *unchecked* spec only
//!   ([`PackedExecutable::spec_unchecked`] or [`ExecutableSpec::bytes_unchecked`]): its entry
//!   points are hand-written metadata about code HIP reads unchecked. A bare code object
//!   without entry points is refused with a message saying how to supply them.
//!
//! A code object is what `hipModuleLoadData` loads: a linked AMDGPU ELF (`clang -x hip
//! --cuda-device-only --no-gpu-bundle-output`, or hiprtc's output, see [`crate::rtc`]), or a
//! clang offload bundle of them for several GPUs (`hipcc --genco --offload-arch=gfx90a
//! --offload-arch=gfx1100`), from which HIP loads the entry for the device's architecture.
//! Each entry point names a kernel (its symbol: declare kernels `extern "C"` or give the
//! mangled name) that takes, in order, one device pointer per binding and one 4-byte value per
//! `u32` constant, which is how [`crate::api::HipStreamApi`] passes dispatch parameters.
//!
//! # The trust boundary
//!
//! HIP reads a code object through its own headers, with no length, and runs it: halcyon
//! cannot validate one completely. So a code object or offload bundle from a file enters
//! through the `unsafe` [`HipModule::from_code_object_unchecked`], whose caller vouches that
//! it is unmodified clang/hipcc output for the device's architecture and that the entry points
//! agree with it. A code object halcyon compiled itself enters safely:
//! [`HipRtc::compile_module`](crate::rtc::HipRtc::compile_module).
//!
//! Both paths make the same cheap checks, which catch honest mistakes, not hostile bytes
//! ([`crate::code_object`]): the ELF header (an AMDGPU HSA shared object of code object v3 or
//! later, its sections and segments inside the bytes), and each entry point against its
//! kernel's metadata (the kernel exists; its explicit arguments are the binding pointers, the
//! 4-byte constants and optionally the status word; the workgroup size fits the kernel). An
//! offload bundle's table must lie inside the bytes, and every HIP code object in it must pass
//! these checks; a compressed bundle (`CCOB`) is passed to HIP unread.
//!
//! # Dynamic shared memory
//!
//! A kernel using `extern __shared__` memory (dynamic LDS) is launched with as many bytes of it
//! per block as its entry point declares ([`HipModule::with_shared_memory`]); one declaring
//! none gets none. Loading checks that the kernel's static LDS (`.group_segment_fixed_size`
//! in its metadata) plus the declared bytes fit the device's
//! `hipDeviceAttributeMaxSharedMemoryPerBlock` (64 KiB on most AMD GPUs), which
//! `hipModuleLaunchKernel` would otherwise refuse at every dispatch.
//!
//! # Status word
//!
//! A kernel may take a status word (the status-word convention, docs/ARCHITECTURE.md) as its
//! last explicit argument, a pointer after the constants. A trap (`abort()`,
//! `__builtin_trap()`) would instead be a device fault, on which ROCm aborts the whole process
//! (see [`crate::api`], "Device faults"):
//!
//! ```text
//! extern "C" __global__ void checked(const float* x, unsigned int n, unsigned int* status) {
//!     unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n && !isfinite(x[i])) *status = 1u;
//! }
//! ```
//!
//! [`CodeObject::check_entry_point`](crate::code_object::CodeObject::check_entry_point) tells
//! from the argument metadata whether a kernel takes one
//! ([`HipModule::takes_status_word`]).
//!
//! Whether the code object's target (`gfx90a`, ...) matches the device is only known when HIP
//! loads it; a load error names the targets the module was built for.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use halcyon::backend::find_entry_point;
use halcyon::{
    EntryPoint, Error, ExecutableSource, ExecutableSpec, PackedExecutable, Result, StatusCode,
};

use crate::code_object::{Image, ImageKind};

/// The executable format name.
pub const FORMAT_HSACO: &str = "hip-hsaco";

fn invalid(message: impl Into<String>) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

/// A code object with the metadata of the entry points to expose, in dispatch index order;
/// made by [`HipModule::from_code_object_unchecked`] (unsafe) or
/// [`HipRtc::compile_module`](crate::rtc::HipRtc::compile_module).
#[derive(Clone, PartialEq, Eq)]
pub struct HipModule {
    /// A linked AMDGPU ELF, or an offload bundle of them.
    code_object: Vec<u8>,
    entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points`, as long.
    shared_memory: Vec<u32>,
    /// What the bytes say about themselves.
    image: Image,
    /// Index-aligned with `entry_points`: whether each kernel takes a status word.
    status_words: Vec<bool>,
}

impl fmt::Debug for HipModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipModule")
            .field(
                "code_object",
                &format_args!("{} bytes", self.code_object.len()),
            )
            .field("entry_points", &self.entry_points)
            .field("shared_memory", &self.shared_memory)
            .field("targets", &self.image.targets())
            .finish()
    }
}

impl HipModule {
    /// A module from a code object or an offload bundle of them (see the
    /// [module docs](self)) and the entry points to expose, handed to HIP as they are. Only
    /// cheap checks are made ([`crate::code_object`]): `InvalidArgument` for bytes that are
    /// no AMDGPU code object or bundle of them, for no entry points or one named twice, or for
    /// an entry point whose workgroup size or argument counts disagree with its kernel's
    /// metadata (`NotFound` for a kernel the code object lacks). A compressed bundle (`CCOB`)
    /// is not read: its entry points are not checked, and each of its kernels is passed a
    /// status word pointer after its constants (see [`crate::code_object`]).
    ///
    /// # Safety
    ///
    /// `code_object` must be unmodified output of clang or hipcc (a linked code object, or an
    /// offload bundle as `hipcc --genco` or [`offload_bundle`](crate::code_object::offload_bundle)
    /// writes it) for the architecture of the device it is loaded on, whose metadata (the
    /// `NT_AMDGPU_METADATA` note) agrees with its code. HIP reads the image through its own
    /// headers, with no length, and runs its kernels: given anything else it may read out of
    /// bounds, and the kernels may read and write any device memory. Each entry point must
    /// agree with its kernel (which for a compressed bundle nothing checks), and a kernel
    /// taking a status word writes at most one `u32` through it.
    pub unsafe fn from_code_object_unchecked(
        code_object: Vec<u8>,
        entry_points: Vec<EntryPoint>,
    ) -> Result<HipModule> {
        HipModule::checked(code_object, entry_points)
    }

    /// The cheap checks of [`HipModule::from_code_object_unchecked`], for code objects of
    /// either path.
    pub(crate) fn checked(code_object: Vec<u8>, entry_points: Vec<EntryPoint>) -> Result<Self> {
        let image = Image::read(&code_object)?;
        if entry_points.is_empty() {
            let whose = match (image.kind(), image.code_objects().first()) {
                (ImageKind::CodeObject, Some(code)) => {
                    format!("; its code object ({}) has kernels", code.target)
                }
                (ImageKind::Bundle, Some(code)) => format!(
                    "; its offload bundle holds code objects for [{}]; the {} one has kernels",
                    image.targets().join(", "),
                    code.target
                ),
                _ => String::new(),
            };
            let kernels = image
                .code_objects()
                .first()
                .map(|code| format!(" [{}]", code.kernel_names().join(", ")))
                .unwrap_or_default();
            return Err(invalid(format!(
                "HIP executable declares no entry points{whose}{kernels}"
            )));
        }
        let mut status_words = Vec::with_capacity(entry_points.len());
        for (i, entry) in entry_points.iter().enumerate() {
            if entry_points[..i].iter().any(|e| e.name == entry.name) {
                return Err(invalid(format!(
                    "entry point name '{}' is used twice",
                    entry.name
                )));
            }
            status_words.push(image.check_entry_point(entry)?);
        }
        Ok(HipModule {
            code_object,
            shared_memory: vec![0; entry_points.len()],
            entry_points,
            image,
            status_words,
        })
    }

    /// Declares that kernel `entry` is launched with `bytes` of dynamic shared memory (LDS,
    /// `extern __shared__`) per block: every dispatch of it passes them to
    /// `hipModuleLaunchKernel`. Loading checks that the device can give the kernel that much
    /// (see the [module docs](self)). `NotFound`, listing the entry points, if none is named
    /// `entry`.
    pub fn with_shared_memory(mut self, entry: &str, bytes: u32) -> Result<Self> {
        let index = find_entry_point(&self.entry_points, entry, "HIP module")?;
        self.shared_memory[index] = bytes;
        Ok(self)
    }

    /// The code object (or offload bundle) HIP loads.
    pub fn code_object(&self) -> &[u8] {
        &self.code_object
    }

    /// The entry points, in dispatch index order.
    pub fn entry_points(&self) -> &[EntryPoint] {
        &self.entry_points
    }

    /// The dynamic shared memory entry point `index` is launched with, in bytes (0 past the
    /// last entry point).
    pub fn shared_memory(&self, index: usize) -> u32 {
        self.shared_memory.get(index).copied().unwrap_or(0)
    }

    /// Whether the kernel of entry point `index` takes a status word (false past the last
    /// entry point).
    pub fn takes_status_word(&self, index: usize) -> bool {
        self.status_words.get(index).copied().unwrap_or(false)
    }

    /// What the code object says about itself: its kind, targets and kernels.
    pub fn image(&self) -> &Image {
        &self.image
    }

    /// An executable spec (format [`FORMAT_HSACO`], native source; it carries the module's
    /// trust).
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_HSACO, Arc::new(self))
    }

    /// The module as a [`PackedExecutable`] (format [`FORMAT_HSACO`], the entry points, their
    /// dynamic shared memory, the code object): the byte form. It loads only from an unchecked
    /// spec ([`PackedExecutable::spec_unchecked`]), whose caller vouches for it as
    /// [`HipModule::from_code_object_unchecked`] requires.
    pub fn to_packed(&self) -> PackedExecutable {
        PackedExecutable::from_parts(
            FORMAT_HSACO,
            self.entry_points.clone(),
            self.shared_memory.clone(),
            self.code_object.clone(),
        )
    }

    /// The module of a [`PackedExecutable`] written by [`HipModule::to_packed`], making the
    /// checks of [`HipModule::from_code_object_unchecked`]. `InvalidArgument` for another
    /// format.
    ///
    /// # Safety
    ///
    /// As for [`HipModule::from_code_object_unchecked`]: the image and the metadata (entry
    /// points, dynamic shared memory) must meet its contract.
    pub unsafe fn from_packed(packed: &PackedExecutable) -> Result<HipModule> {
        if packed.format() != FORMAT_HSACO {
            return Err(invalid(format!(
                "a packed '{}' executable is not a HIP code object (format '{FORMAT_HSACO}')",
                packed.format()
            )));
        }
        let mut module =
            HipModule::checked(packed.image().to_vec(), packed.entry_points().to_vec())?;
        for (index, bytes) in module.shared_memory.iter_mut().enumerate() {
            *bytes = packed.shared_memory(index);
        }
        Ok(module)
    }

    /// The module a `"hip-hsaco"` spec carries: the native module, or the
    /// [`PackedExecutable`] of an unchecked bytes spec.
    pub fn from_spec(spec: &ExecutableSpec) -> Result<Arc<HipModule>> {
        if spec.format != FORMAT_HSACO {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!(
                    "HIP devices load '{FORMAT_HSACO}' executables, not '{}'",
                    spec.format
                ),
            ));
        }
        let bytes = match &spec.source {
            ExecutableSource::Native(object) => {
                let object: Arc<dyn Any + Send + Sync> = object.clone();
                return object.downcast::<HipModule>().map_err(|_| {
                    invalid(format!(
                        "a native '{FORMAT_HSACO}' executable source must be an \
                         Arc<halcyon_hip::HipModule> (HipModule::spec)"
                    ))
                });
            }
            ExecutableSource::Bytes(bytes) => bytes,
        };
        if !PackedExecutable::is_packed(bytes) {
            return Err(invalid(
                "a bare code object carries no entry-point metadata (workgroup size, binding \
                 and constant counts): make a halcyon_hip::HipModule \
                 (HipModule::from_code_object_unchecked, unsafe) and pass HipModule::spec, or \
                 its HipModule::to_packed form through PackedExecutable::spec_unchecked",
            ));
        }
        let packed = PackedExecutable::from_bytes(bytes)?;
        if !spec.is_unchecked() {
            return Err(invalid(
                "this 'hip-hsaco' executable is a packed code object, which HIP reads \
                 unchecked and whose hand-written entry points halcyon cannot fully check: \
                 load it from PackedExecutable::spec_unchecked or \
                 ExecutableSpec::bytes_unchecked (unsafe), or compile the source with \
                 HipRtc::compile_module and pass HipModule::spec",
            ));
        }
        // SAFETY: the spec was made by the unsafe `ExecutableSpec::bytes_unchecked`, whose
        // caller vouches for the bytes as `from_code_object_unchecked` requires.
        unsafe { HipModule::from_packed(&packed) }.map(Arc::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The conformance kernels (`crate::rtc::CONFORMANCE_KERNELS_SOURCE`) compiled by hiprtc
    /// for gfx900 (HIP 5.2.3, code object v4).
    const GFX900: &[u8] = include_bytes!("../tests/data/conformance-gfx900.hsaco");
    /// `tests/data/conformance.hip` built by `hipcc --genco --offload-arch=gfx900
    /// --offload-arch=gfx90a:xnack+ -O3` (HIP 5.2.3, clang 15): an offload bundle.
    const BUNDLE: &[u8] = include_bytes!("../tests/data/conformance-bundle.co");

    fn entry(name: &str, wg: [u32; 3], bindings: u32, constants: u32) -> EntryPoint {
        EntryPoint {
            name: name.into(),
            workgroup_size: wg,
            binding_count: bindings,
            constant_count: constants,
        }
    }

    fn standard() -> Vec<EntryPoint> {
        vec![
            entry("add_one_u32", [64, 1, 1], 1, 1),
            entry("saxpy_f32", [64, 1, 1], 2, 2),
            entry("fail", [1, 1, 1], 0, 0),
        ]
    }

    fn module(code: &[u8], entries: Vec<EntryPoint>) -> Result<HipModule> {
        // SAFETY: the fixtures are unmodified hiprtc and hipcc output whose metadata agrees
        // with their code; the cases that alter bytes only read them, never load them.
        unsafe { HipModule::from_code_object_unchecked(code.to_vec(), entries) }
    }

    fn err(result: Result<impl fmt::Debug>) -> Error {
        result.expect_err("expected an error")
    }

    #[test]
    fn the_packed_form_round_trips_and_loads_only_from_an_unchecked_spec() {
        let m = module(GFX900, standard())
            .unwrap()
            .with_shared_memory("saxpy_f32", 32 << 10)
            .unwrap();
        assert_eq!(m.shared_memory(1), 32 << 10);
        assert_eq!(m.shared_memory(7), 0);
        let packed = m.to_packed();
        assert_eq!(packed.format(), FORMAT_HSACO);
        assert_eq!(packed.image(), GFX900);
        assert_eq!(packed.shared_memory(1), 32 << 10);
        // SAFETY: unmodified hiprtc output, as `module` says.
        assert_eq!(unsafe { HipModule::from_packed(&packed) }.unwrap(), m);

        // A checked spec of it is refused, naming the unsafe ways in.
        let e = err(HipModule::from_spec(&packed.spec()));
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        for name in [
            "ExecutableSpec::bytes_unchecked",
            "PackedExecutable::spec_unchecked",
        ] {
            assert!(e.message().contains(name), "{name}: {e}");
        }
        // SAFETY: as above.
        let unchecked = unsafe { packed.spec_unchecked() };
        assert_eq!(*HipModule::from_spec(&unchecked).unwrap(), m);
        assert_eq!(*HipModule::from_spec(&m.clone().spec()).unwrap(), m);

        // Another format, packed or not.
        let other = PackedExecutable::new("cuda", standard(), GFX900.to_vec());
        // SAFETY: refused before anything is read.
        let e = err(unsafe { HipModule::from_packed(&other) });
        assert!(e.message().contains("not a HIP code object"), "{e}");
        let other = ExecutableSpec::bytes("spirv", packed.to_bytes());
        assert_eq!(
            err(HipModule::from_spec(&other)).code(),
            StatusCode::Unimplemented
        );
        let wrong = ExecutableSpec::native(FORMAT_HSACO, Arc::new(5u32));
        assert!(err(HipModule::from_spec(&wrong))
            .message()
            .contains("Arc<halcyon_hip::HipModule>"));
    }

    #[test]
    fn bare_code_objects_and_the_old_byte_form_are_refused() {
        for unchecked in [false, true] {
            for bytes in [GFX900, BUNDLE] {
                let spec = if unchecked {
                    // SAFETY: refused before HIP sees it.
                    unsafe { ExecutableSpec::bytes_unchecked(FORMAT_HSACO, bytes) }
                } else {
                    ExecutableSpec::bytes(FORMAT_HSACO, bytes)
                };
                let e = err(HipModule::from_spec(&spec));
                assert_eq!(e.code(), StatusCode::InvalidArgument);
                assert!(e.message().contains("no entry-point metadata"), "{e}");
                assert!(e.message().contains("spec_unchecked"), "{e}");
            }
        }
        let mut old = b"HLCNHIP1".to_vec();
        old.extend_from_slice(&0u32.to_le_bytes());
        // SAFETY: refused before HIP sees it.
        let spec = unsafe { ExecutableSpec::bytes_unchecked(FORMAT_HSACO, old) };
        assert!(err(HipModule::from_spec(&spec))
            .message()
            .contains("no entry-point metadata"));
    }

    #[test]
    fn entry_points_are_checked_against_the_kernel_metadata() {
        let check = |entries: Vec<EntryPoint>| err(module(GFX900, entries));
        let e = check(vec![]);
        assert!(
            e.message().contains(
                "declares no entry points; its code object (gfx900) has kernels [add_one_u32"
            ),
            "{e}"
        );
        let e = check(vec![entry("nope", [64, 1, 1], 1, 1)]);
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(e.message().contains("no kernel 'nope'"), "{e}");
        assert!(e.message().contains("add_one_u32"), "{e}");
        // A wrong binding count: the message names the kernel's arguments.
        let e = check(vec![entry("add_one_u32", [64, 1, 1], 2, 1)]);
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(
            e.message().contains(
                "entry point 'add_one_u32' declares 2 bindings and 1 constants, so its kernel \
                 must take 2 global pointers then 1 4-byte values"
            ),
            "{e}"
        );
        assert!(
            e.message()
                .contains("takes [global_buffer (8 bytes), by_value (4 bytes)]"),
            "{e}"
        );
        let e = check(vec![entry("saxpy_f32", [64, 1, 1], 1, 3)]);
        assert!(e.message().contains("1 bindings and 3 constants"), "{e}");
        let e = check(vec![entry("add_one_u32", [2048, 1, 1], 1, 1)]);
        assert!(e.message().contains("__launch_bounds__"), "{e}");
        let e = check(vec![entry("add_one_u32", [64, 0, 1], 1, 1)]);
        assert!(e.message().contains("at least 1"), "{e}");
        let e = check(vec![
            entry("fail", [1, 1, 1], 0, 0),
            entry("fail", [1, 1, 1], 0, 0),
        ]);
        assert!(e.message().contains("used twice"), "{e}");
        let e = err(module(GFX900, standard())
            .unwrap()
            .with_shared_memory("nope", 4));
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(
            e.message().contains("[add_one_u32, saxpy_f32, fail]"),
            "{e}"
        );
        // A subset, in any order, is fine; status words follow the kernels.
        let m = module(
            GFX900,
            vec![
                entry("fail", [32, 2, 1], 0, 0),
                entry("add_one_u32", [256, 1, 1], 1, 1),
            ],
        )
        .unwrap();
        assert!(m.takes_status_word(0));
        assert!(!m.takes_status_word(1));
        assert!(!m.takes_status_word(2));
    }

    /// Every HIP code object of a bundle is checked against the entry points, each named.
    #[test]
    fn every_code_object_of_a_bundle_is_checked() {
        let m = module(BUNDLE, standard()).unwrap();
        assert_eq!(m.image().kind(), ImageKind::Bundle);
        assert_eq!(m.image().targets(), ["gfx900", "gfx90a:xnack+"]);
        assert_eq!(m.image().kernels("saxpy_f32").count(), 2);
        assert!(m.takes_status_word(2));
        let mut wrong = standard();
        wrong[1].constant_count = 1;
        let e = err(module(BUNDLE, wrong));
        assert!(
            e.message()
                .starts_with("offload bundle code object for gfx900: entry point 'saxpy_f32'"),
            "{e}"
        );
        let e = err(module(BUNDLE, vec![]));
        assert!(
            e.message().contains(
                "its offload bundle holds code objects for [gfx900, gfx90a:xnack+]; the gfx900 \
                 one has kernels ["
            ),
            "{e}"
        );
    }

    /// A compressed bundle is passed through: its kernels cannot be read, so every entry point
    /// takes a status word pointer, which a kernel without one never reads.
    #[test]
    fn a_compressed_bundle_passes_through_unread() {
        let mut compressed = b"CCOB".to_vec();
        compressed.extend_from_slice(&[0; 60]);
        let m = module(&compressed, standard()).unwrap();
        assert_eq!(m.image().kind(), ImageKind::CompressedBundle);
        assert!(m.image().code_objects().is_empty());
        assert!((0..3).all(|i| m.takes_status_word(i)));
        let e = err(module(&compressed, vec![]));
        assert_eq!(e.message(), "HIP executable declares no entry points");
    }
}
