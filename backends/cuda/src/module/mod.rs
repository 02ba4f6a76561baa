//! CUDA executables: a PTX or binary (cubin, fatbin) image plus the entry-point metadata
//! halcyon dispatches by.
//!
//! **One format, [`FORMAT_CUDA`] (`"cuda"`)**, for PTX and binary images alike:
//! `cuModuleLoadData` tells them apart by their content, and so does halcyon (an image starting
//! with the ELF magic `7f 45 4c 46` or the fatbin magic `0xBA55ED50` is binary, anything else
//! PTX, which must be UTF-8). A spec's source is either
//!
//! * [`ExecutableSource::Native`] holding an `Arc<CudaModule>` ([`CudaModule::spec`]), which
//!   carries the trust of the constructor that made the module, or
//! * [`ExecutableSource::Bytes`] holding a [`PackedExecutable`] of format `"cuda"`
//!   ([`CudaModule::to_packed`]; its byte form is documented there). Raw PTX, cubin or fatbin
//!   bytes are refused with a message saying to pack them: device code does not say how many
//!   bindings and constants a kernel takes in halcyon's sense.
//!
//! **The trust boundary** (see `docs/ARCHITECTURE.md`). PTX enters safely
//! ([`CudaModule::ptx`], [`CudaModule::compile`], [`CudaModule::from_packed`], a checked spec of
//! packed PTX): the driver's JIT compiles it and reports bad PTX as an error. A cubin or fatbin
//! is consumed by the driver unchecked, so it enters only through an `unsafe` constructor whose
//! caller vouches that it is unmodified `ptxas`/`fatbinary`/`nvcc` output for the device and
//! that the metadata agrees with the code: [`CudaModule::binary`],
//! [`CudaModule::from_packed_unchecked`], or a spec made by
//! [`PackedExecutable::spec_unchecked`] (or [`ExecutableSpec::bytes_unchecked`]). A checked spec
//! or [`CudaModule::from_packed`] holding a binary image is refused with `InvalidArgument`
//! naming those.
//!
//! **Kernel signature.** An entry point with `b` bindings and `c` constants is a kernel
//! `extern "C" __global__ void name(T0* binding0, ..., unsigned int constant0, ...)`: one device
//! pointer (8 bytes) per binding, then one 4-byte `u32` per constant (a `float` constant is
//! passed as its bits; declare it `float` or use `__uint_as_float`). Its block size is the
//! entry point's workgroup size. `extern "C"` keeps the name unmangled. A kernel taking more or
//! larger parameters than halcyon passes would make `cuLaunchKernel` read past the argument
//! array, so loading checks the signature: against the driver's report where it has one
//! (`cuFuncGetParamInfo`, CUDA 12.4+ drivers, R550), for PTX and binaries alike
//! ([`check_kernel_params`]); for PTX also against the `.param` list of its `.entry`, read from
//! the text on any driver ([`ptx_status_word`]), and the two must agree. A binary image on a
//! CUDA 12.0 to 12.3 driver is not checked: that is part of [`CudaModule::binary`]'s contract.
//!
//! **Status word.** A kernel may take a status word (the status-word convention,
//! docs/ARCHITECTURE.md) as one more pointer parameter after the constants; a trap or an
//! illegal address would instead be a sticky fault that kills the context:
//!
//! ```text
//! extern "C" __global__ void checked(const float* x, unsigned int n, unsigned int* status) {
//!     unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n && !isfinite(x[i])) *status = 1u;
//! }
//! ```
//!
//! Whether a kernel takes the word is read from its parameters (`b + c` parameters: no;
//! `b + c + 1`, the last a pointer: yes; anything else is refused). On a driver without
//! `cuFuncGetParamInfo` every kernel of a binary image that declares parameters is launched
//! with a status word, which a kernel without the parameter never reads (its dispatches are
//! then checked on the host and never captured into graphs; ship PTX, or run a 12.4+ driver,
//! to avoid that).
//!
//! **Dynamic shared memory.** A kernel using `extern __shared__` memory is launched with as
//! many bytes of it per block as its entry point declares ([`CudaModule::with_shared_memory`]);
//! one declaring none gets none, and its first access to that memory faults the context.
//! Loading checks the declaration against the device: the kernel's static shared memory plus
//! the declared bytes must fit `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`
//! (227 KiB on Hopper), and a kernel declaring more than the 48 KiB every kernel may use is
//! opted in with `cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`.
//!
//! **Checks** ([`CudaModule::validate`], run on every load, on the safe and the unsafe path
//! alike). They catch honest mistakes; they do not make a binary image safe to load:
//!
//! * Entry points: at least one; unique names, non-empty and without NUL bytes; a workgroup
//!   size within CUDA's block limits (x, y ≤ 1024, z ≤ 64, x·y·z ≤ 1024); parameters within
//!   the 4 KiB every CUDA device accepts.
//! * **PTX** is text with no control bytes but tab, line feed and carriage return (no NUL,
//!   which would end it early), that does not start like a binary image (the driver would read
//!   it as one), with no preprocessor directive and no string literal a backslash continues
//!   onto the next line. Every entry point is an `.entry` whose `.param` list, read after
//!   removing comments (string literals kept whole), matches the metadata (see above).
//! * A **cubin** is a 64-bit little-endian ELF file with its 64-byte header, and program and
//!   section header tables (of ELF64's entry sizes) within its bytes.
//! * A **fatbin** has its 16-byte header, and the size it declares lies within its bytes.
//!
//! Everything else in a binary image (sections, symbols, relocations, fatbin entries, what a
//! compressed entry decompresses to) is the driver's to read. A binary is handed to the driver
//! as an aligned copy followed by zero bytes ([`halcyon::backend::loader_image`]).
//!
//! **NVRTC.** [`CudaModule::compile`] compiles CUDA C to PTX at run time (see [`crate::nvrtc`]);
//! without libnvrtc it is `Unavailable`.
//!
//! The checks live by what they read: `ptx.rs` reads PTX text (entry points, `.param` lists,
//! comments and string literals), `binary.rs` makes the cheap header checks of cubins and
//! fatbins, `signature.rs` matches a kernel's parameters against its entry point.

mod binary;
mod ptx;
mod signature;
#[cfg(test)]
mod tests;

use std::any::Any;
use std::borrow::Cow;
use std::sync::Arc;

use halcyon::backend::find_entry_point;
use halcyon::{
    EntryPoint, Error, ExecutableSource, ExecutableSpec, PackedExecutable, Result, StatusCode,
};

use binary::{binary_kind, is_binary_image, validate_binary};
use ptx::{looks_like_ptx, validate_ptx};

pub use ptx::{ptx_entries, ptx_param_sizes, ptx_status_word};
pub use signature::check_kernel_params;

/// The executable format name of [`CudaModule`]s.
pub const FORMAT_CUDA: &str = "cuda";

/// The kernel parameter space every CUDA device accepts, in bytes (CUDA 12.1 raised it to
/// 32764 bytes on Volta and newer; halcyon keeps to the portable limit).
pub const MAX_PARAM_BYTES: u32 = 4096;
/// Threads per block on every CUDA device since compute capability 2.0.
pub const MAX_BLOCK_THREADS: u32 = 1024;
/// Block size limits in x, y, z.
pub const MAX_BLOCK_DIM: [u32; 3] = [1024, 1024, 64];
/// Grid size limits in x, y, z on every CUDA device since compute capability 3.0
/// ([CUDA C++ Programming Guide, technical specifications](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications)).
pub const MAX_GRID_DIM: [u32; 3] = [(1 << 31) - 1, 65535, 65535];

/// A module's device code. Private: which variant a module holds decides whether it loads from
/// a checked spec, so only the constructors (safe for PTX, `unsafe` for a binary) choose it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Image {
    /// PTX assembly text, JIT-compiled by the driver at load time (a NUL is added when
    /// loading).
    Ptx(String),
    /// A cubin (ELF) or a fatbin, vouched for by the caller of an `unsafe` constructor.
    Binary(Vec<u8>),
}

/// A CUDA module: PTX or a binary image, with the metadata of the entry points to expose, in
/// dispatch index order (see the [module docs](self)).
///
/// Its fields are private: a module holding a cubin or fatbin can only be made through an
/// `unsafe` constructor ([`CudaModule::binary`], [`CudaModule::from_packed_unchecked`]), so
/// safe code cannot put a binary image where PTX was checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaModule {
    image: Image,
    entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points` and as long: the dynamic shared memory
    /// (`extern __shared__`) each kernel is launched with, in bytes.
    shared_memory_bytes: Vec<u32>,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

impl CudaModule {
    fn with_image(image: Image, entry_points: Vec<EntryPoint>) -> Self {
        CudaModule {
            image,
            shared_memory_bytes: vec![0; entry_points.len()],
            entry_points,
        }
    }

    /// A module from PTX text. Safe: the driver's JIT compiles the text and reports bad PTX as
    /// an error, and loading checks the text as the [module docs](self) say (a text that
    /// starts like a cubin or fatbin is refused there).
    pub fn ptx(ptx: impl Into<String>, entry_points: Vec<EntryPoint>) -> Self {
        Self::with_image(Image::Ptx(ptx.into()), entry_points)
    }

    /// A module from a binary image: a cubin, or a fatbin holding cubins (and possibly PTX to
    /// fall back on). Loading makes the cheap checks of the [module docs](self) (magic
    /// numbers, header extents, entry points); `cuModuleLoadData` reads everything else in the
    /// image unchecked.
    ///
    /// # Safety
    ///
    /// `image` must be unmodified output of NVIDIA's toolchain (`ptxas`, `fatbinary`, `nvcc`,
    /// `nvlink`) for the architecture of the device that loads it (or, in a fatbin, PTX the
    /// driver can compile for it): the driver follows the offsets in its headers, sections
    /// and entries without bounds, and may read or write out of bounds for anything else.
    /// The entry points must agree with the code: each names an `extern "C"` kernel of the
    /// image whose parameters are the signature of the [module docs](self) (`b` 8-byte
    /// pointers, `c` 4-byte values, optionally the status-word pointer), since on a driver
    /// older than CUDA 12.4 nothing checks it and a kernel taking more or larger parameters
    /// reads past the arguments; shared memory declared with
    /// [`CudaModule::with_shared_memory`] must cover what each kernel uses.
    pub unsafe fn binary(image: impl Into<Vec<u8>>, entry_points: Vec<EntryPoint>) -> Self {
        Self::with_image(Image::Binary(image.into()), entry_points)
    }

    /// Compiles CUDA C `source` to PTX with NVRTC (`options` as NVRTC takes them, e.g.
    /// `--gpu-architecture=compute_90`) and checks that every entry point is a kernel of the
    /// result. `Unavailable` when libnvrtc cannot be used; `InvalidArgument` with NVRTC's log
    /// for a compilation error; `NotFound` for an entry point the source does not define as
    /// an `extern "C" __global__` function. Needs no GPU.
    pub fn compile(
        source: &str,
        entry_points: Vec<EntryPoint>,
        options: &[&str],
    ) -> Result<CudaModule> {
        let ptx = crate::nvrtc::compile_ptx(source, "halcyon_module.cu", options)?;
        let module = CudaModule::ptx(ptx, entry_points);
        module.validate()?;
        Ok(module)
    }

    /// Declares that kernel `entry` is launched with `bytes` of dynamic shared memory
    /// (`extern __shared__`) per block: every dispatch of it passes them to `cuLaunchKernel`.
    /// Loading checks that the device can give the kernel that much (see the
    /// [module docs](self)). `NotFound`, listing the entry points, if none is named `entry`.
    ///
    /// ```
    /// use halcyon::EntryPoint;
    /// use halcyon_cuda::CudaModule;
    ///
    /// let entry = EntryPoint { name: "block_sum".into(), workgroup_size: [256, 1, 1], binding_count: 2, constant_count: 0 };
    /// let module = CudaModule::ptx(".version 8.0 ...", vec![entry])
    ///     .with_shared_memory("block_sum", 64 << 10)?;
    /// assert_eq!(module.shared_memory(0), 64 << 10);
    /// # Ok::<(), halcyon::Error>(())
    /// ```
    pub fn with_shared_memory(mut self, entry: &str, bytes: u32) -> Result<Self> {
        let index = find_entry_point(&self.entry_points, entry, "CUDA module")?;
        self.shared_memory_bytes[index] = bytes;
        Ok(self)
    }

    /// The dynamic shared memory entry point `index` is launched with, in bytes (0 past the
    /// last entry point).
    pub fn shared_memory(&self, index: usize) -> u32 {
        self.shared_memory_bytes.get(index).copied().unwrap_or(0)
    }

    /// The entry points, in dispatch index order.
    pub fn entry_points(&self) -> &[EntryPoint] {
        &self.entry_points
    }

    /// The device code: the PTX text's bytes (without a NUL) or the binary image.
    pub fn image(&self) -> &[u8] {
        match &self.image {
            Image::Ptx(text) => text.as_bytes(),
            Image::Binary(bytes) => bytes,
        }
    }

    /// Whether the module holds a binary image (cubin or fatbin), which loads only from an
    /// unchecked spec once packed.
    pub fn is_binary(&self) -> bool {
        matches!(self.image, Image::Binary(_))
    }

    /// The PTX text, if the module holds PTX.
    pub fn ptx_text(&self) -> Option<&str> {
        match &self.image {
            Image::Ptx(text) => Some(text),
            Image::Binary(_) => None,
        }
    }

    /// The device code, for the loader.
    pub(crate) fn code(&self) -> &Image {
        &self.image
    }

    /// An executable spec (format [`FORMAT_CUDA`], native source; it carries the module's
    /// trust, so a module made by [`CudaModule::binary`] loads from it).
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_CUDA, Arc::new(self))
    }

    /// The module as a [`PackedExecutable`]: format `"cuda"`, the entry points, each one's
    /// dynamic shared memory, the image (PTX text without a NUL, or the binary). Packed PTX
    /// loads from a checked spec ([`PackedExecutable::spec`]); a packed binary only from an
    /// unchecked one ([`PackedExecutable::spec_unchecked`], whose caller vouches for it as
    /// [`CudaModule::binary`] requires).
    ///
    /// ```
    /// use halcyon::EntryPoint;
    /// use halcyon_cuda::CudaModule;
    ///
    /// let entry = EntryPoint { name: "k".into(), workgroup_size: [64, 1, 1], binding_count: 1, constant_count: 0 };
    /// let module = CudaModule::ptx(".version 8.0\n.target sm_52\n.address_size 64\n\
    ///     .visible .entry k(.param .u64 k_0)\n{\n\tret;\n}\n", vec![entry]);
    /// let bytes = module.to_packed().to_bytes();
    /// let read = halcyon::PackedExecutable::from_bytes(&bytes)?;
    /// assert_eq!(CudaModule::from_packed(&read)?, module);
    /// # Ok::<(), halcyon::Error>(())
    /// ```
    pub fn to_packed(&self) -> PackedExecutable {
        PackedExecutable::from_parts(
            FORMAT_CUDA,
            self.entry_points.clone(),
            self.shared_memory_bytes.clone(),
            self.image().to_vec(),
        )
    }

    /// The PTX module of a [`PackedExecutable`] of format `"cuda"`, checked
    /// ([`CudaModule::validate`]). `InvalidArgument` for another format, for an image that is
    /// neither a binary nor UTF-8, and for a binary image (cubin or fatbin): that loads only
    /// through [`CudaModule::from_packed_unchecked`] or a spec made by
    /// [`PackedExecutable::spec_unchecked`].
    pub fn from_packed(packed: &PackedExecutable) -> Result<CudaModule> {
        if is_binary_image(packed.image()) {
            return Err(invalid(format!(
                "this packed 'cuda' executable holds a {}, which the CUDA driver loads \
                 unchecked and halcyon cannot validate: load it from a spec made by the unsafe \
                 PackedExecutable::spec_unchecked (or ExecutableSpec::bytes_unchecked), or read \
                 it with the unsafe CudaModule::from_packed_unchecked; the safe path takes PTX \
                 only",
                binary_kind(packed.image())
            )));
        }
        // SAFETY: the image is not binary, so this makes a PTX module, which needs no vouching.
        unsafe { Self::from_packed_unchecked(packed) }
    }

    /// The module of a [`PackedExecutable`] of format `"cuda"`, PTX or binary (told by its
    /// content), checked ([`CudaModule::validate`]). `InvalidArgument` for another format or
    /// an image that is neither a binary nor UTF-8 PTX.
    ///
    /// # Safety
    ///
    /// A binary image and its metadata must meet [`CudaModule::binary`]'s contract (for PTX
    /// there is none).
    pub unsafe fn from_packed_unchecked(packed: &PackedExecutable) -> Result<CudaModule> {
        if packed.format() != FORMAT_CUDA {
            return Err(invalid(format!(
                "a packed '{}' executable is not a CUDA module (format '{FORMAT_CUDA}')",
                packed.format()
            )));
        }
        let image = if is_binary_image(packed.image()) {
            Image::Binary(packed.image().to_vec())
        } else {
            let text = String::from_utf8(packed.image().to_vec()).map_err(|e| {
                invalid(format!(
                    "the packed 'cuda' image is neither a cubin (7f 45 4c 46) nor a fatbin \
                     (50 ed 55 ba) nor PTX text: it is not UTF-8 (at byte {})",
                    e.utf8_error().valid_up_to()
                ))
            })?;
            Image::Ptx(text)
        };
        let entry_points = packed.entry_points().to_vec();
        let shared_memory_bytes = (0..entry_points.len())
            .map(|index| packed.shared_memory(index))
            .collect();
        let module = CudaModule {
            image,
            entry_points,
            shared_memory_bytes,
        };
        module.validate()?;
        Ok(module)
    }

    /// Makes the checks of the [module docs](self): the entry points, and the image's cheap
    /// checks (for PTX, also each kernel's `.param` list against its entry point).
    pub fn validate(&self) -> Result<()> {
        if self.entry_points.is_empty() {
            return Err(invalid(
                "a CUDA executable must declare at least one entry point",
            ));
        }
        for (i, entry) in self.entry_points.iter().enumerate() {
            validate_entry_point(entry)?;
            if self.entry_points[..i].iter().any(|e| e.name == entry.name) {
                return Err(invalid(format!(
                    "CUDA entry point name '{}' is declared twice",
                    entry.name
                )));
            }
        }
        match &self.image {
            Image::Ptx(text) => validate_ptx(text, &self.entry_points),
            Image::Binary(bytes) => validate_binary(bytes),
        }
    }

    /// The module a spec of format [`FORMAT_CUDA`] holds, validated: a native module as it is;
    /// bytes as a [`PackedExecutable`], a binary image only from an unchecked spec.
    pub(crate) fn from_spec(spec: &ExecutableSpec) -> Result<Cow<'_, CudaModule>> {
        if spec.format != FORMAT_CUDA {
            return Err(invalid(format!(
                "cannot load executable format '{}'; the CUDA device loads '{FORMAT_CUDA}' \
                 (halcyon_cuda::CudaModule::spec, or CudaModule::to_packed's spec)",
                spec.format
            )));
        }
        let bytes = match &spec.source {
            ExecutableSource::Native(object) => {
                let module = (&**object as &dyn Any)
                    .downcast_ref::<CudaModule>()
                    .ok_or_else(|| {
                        invalid(
                            "a native 'cuda' executable source must be an \
                             Arc<halcyon_cuda::CudaModule> (CudaModule::spec)",
                        )
                    })?;
                module.validate()?;
                return Ok(Cow::Borrowed(module));
            }
            ExecutableSource::Bytes(bytes) => bytes,
        };
        if !PackedExecutable::is_packed(bytes) {
            return Err(unpacked(bytes));
        }
        let packed = PackedExecutable::from_bytes(bytes)?;
        let module = if spec.is_unchecked() {
            // SAFETY: the spec was made by the unsafe `ExecutableSpec::bytes_unchecked` (or
            // `PackedExecutable::spec_unchecked`), whose caller vouches for the image and its
            // metadata as `CudaModule::binary` requires.
            unsafe { CudaModule::from_packed_unchecked(&packed)? }
        } else {
            CudaModule::from_packed(&packed)?
        };
        Ok(Cow::Owned(module))
    }

    /// The image kind, for messages (`PTX`, `cubin`, `fatbin`).
    pub(crate) fn kind(&self) -> &'static str {
        match &self.image {
            Image::Ptx(_) => "PTX",
            Image::Binary(bytes) => binary_kind(bytes),
        }
    }
}

/// The refusal of bytes that are not a [`PackedExecutable`], with advice.
fn unpacked(bytes: &[u8]) -> Error {
    let raw = if is_binary_image(bytes) {
        Some(binary_kind(bytes))
    } else if looks_like_ptx(bytes) {
        Some("PTX")
    } else {
        None
    };
    match raw {
        Some(kind) => invalid(format!(
            "raw {kind} bytes carry no entry-point metadata (binding and constant counts, \
             workgroup size): pack them with their entry points (CudaModule::to_packed, or \
             halcyon::PackedExecutable::new(\"cuda\", ..)) and load the packed executable's \
             spec (the unsafe PackedExecutable::spec_unchecked for a cubin or fatbin), or pass \
             a halcyon_cuda::CudaModule (CudaModule::spec)"
        )),
        None => invalid(
            "the bytes of a 'cuda' executable must be a halcyon::PackedExecutable (starting \
             with b\"HLCNEXE1\"): write them with CudaModule::to_packed().to_bytes()",
        ),
    }
}

fn validate_entry_point(entry: &EntryPoint) -> Result<()> {
    let name = &entry.name;
    if name.is_empty() || name.contains('\0') {
        return Err(invalid(format!(
            "CUDA entry point name {name:?} must be non-empty and free of NUL bytes"
        )));
    }
    let [x, y, z] = entry.workgroup_size;
    // Three u32s multiply to at most 2^96: u128 cannot overflow.
    let threads = u128::from(x) * u128::from(y) * u128::from(z);
    let fits = entry
        .workgroup_size
        .iter()
        .zip(MAX_BLOCK_DIM)
        .all(|(&v, max)| (1..=max).contains(&v));
    if !fits || threads > u128::from(MAX_BLOCK_THREADS) {
        return Err(invalid(format!(
            "CUDA entry point '{name}' has workgroup size {:?}; a CUDA block needs every \
             dimension at least 1, at most {MAX_BLOCK_DIM:?}, and at most {MAX_BLOCK_THREADS} \
             threads in all",
            entry.workgroup_size
        )));
    }
    // At most 2^35 + 2^34: no overflow in u64.
    let bytes = u64::from(entry.binding_count) * 8 + u64::from(entry.constant_count) * 4;
    if bytes > u64::from(MAX_PARAM_BYTES) {
        return Err(invalid(format!(
            "CUDA entry point '{name}' takes {} bindings and {} constants, {bytes} bytes of \
             kernel parameters; at most {MAX_PARAM_BYTES} bytes are portable",
            entry.binding_count, entry.constant_count
        )));
    }
    Ok(())
}
