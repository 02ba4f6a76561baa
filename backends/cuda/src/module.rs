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
//! **Status word.** A kernel fails its dispatch through a status word (the stream layer's
//! convention, see [`halcyon::stream::api`]): one more parameter after the constants, an
//! 8-byte pointer to a `u32` that is zero when the kernel starts and that the kernel sets
//! nonzero to fail (`extern "C" __global__ void k(float* x, unsigned int n, unsigned int*
//! status)`). A trap or an illegal address would instead be a sticky fault that kills the
//! context. Whether a kernel takes the word is read from its parameters (`b + c` parameters:
//! no; `b + c + 1`, the last a pointer: yes; anything else is refused). On a driver without
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

use std::any::Any;
use std::borrow::Cow;
use std::sync::Arc;

use halcyon::{
    EntryPoint, Error, ExecutableSource, ExecutableSpec, PackedExecutable, Result, StatusCode,
};

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

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const FATBIN_MAGIC: u32 = 0xBA55_ED50;

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

/// Whether `bytes` start like a binary image: a cubin (ELF magic) or a fatbin (its magic,
/// little-endian). This is how `cuModuleLoadData` tells a binary from PTX.
fn is_binary_image(bytes: &[u8]) -> bool {
    bytes.starts_with(ELF_MAGIC) || is_fatbin(bytes)
}

fn is_fatbin(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == FATBIN_MAGIC
}

/// What a binary image is, for messages.
fn binary_kind(bytes: &[u8]) -> &'static str {
    if is_fatbin(bytes) {
        "fatbin"
    } else {
        "cubin"
    }
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
        let Some(index) = self.entry_points.iter().position(|e| e.name == entry) else {
            let names: Vec<&str> = self.entry_points.iter().map(|e| e.name.as_str()).collect();
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "the CUDA module has no entry point '{entry}'; its entry points are [{}]",
                    names.join(", ")
                ),
            ));
        };
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
        let mut packed = PackedExecutable::new(
            FORMAT_CUDA,
            self.entry_points.clone(),
            self.image().to_vec(),
        );
        for (entry, &bytes) in self.entry_points.iter().zip(&self.shared_memory_bytes) {
            if bytes != 0 {
                packed = packed
                    .with_shared_memory(&entry.name, bytes)
                    .expect("the packed executable has this module's entry points");
            }
        }
        packed
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

fn looks_like_ptx(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    let text = String::from_utf8_lossy(head);
    text.contains(".version") || text.contains(".target") || text.contains(".entry")
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

/// The names of the kernels (`.entry` directives) a PTX text defines, in order.
pub fn ptx_entries(ptx: &str) -> Vec<String> {
    let mut names = Vec::new();
    // Comments removed; a name may follow `.entry` on the next line.
    let code = strip_ptx_comments(ptx);
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        let before_ok = rest[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        rest = &rest[at + ".entry".len()..];
        if !before_ok || !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let name: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '%'))
            .collect();
        if !name.is_empty() && !name.starts_with('.') {
            names.push(name);
        }
    }
    names
}

/// The size in bytes of each parameter of the kernel `name` (its `.entry`'s `.param` list), in
/// order; `None` if the PTX defines no such kernel. A parameter of a type or array size the
/// parser does not know counts as 0 bytes, and one whose size overflows `usize` as
/// `usize::MAX`: either then matches no signature halcyon passes.
pub fn ptx_param_sizes(ptx: &str, name: &str) -> Option<Vec<usize>> {
    let params = ptx_params(ptx, name)?;
    Some(
        params
            .iter()
            .map(|(_, size)| size.unwrap_or(usize::MAX))
            .collect(),
    )
}

/// Each parameter declaration of the kernel `name`, with its size in bytes (`None` where the
/// size overflows); `None` if the PTX defines no such kernel.
fn ptx_params(ptx: &str, name: &str) -> Option<Vec<(String, Option<usize>)>> {
    let code = strip_ptx_comments(ptx);
    let mut rest = code.as_str();
    while let Some(at) = rest.find(".entry") {
        let before_ok = rest[..at]
            .chars()
            .next_back()
            .is_none_or(char::is_whitespace);
        rest = &rest[at + ".entry".len()..];
        if !before_ok || !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let after = rest.trim_start();
        let Some(tail) = after.strip_prefix(name) else {
            continue;
        };
        if tail
            .starts_with(|c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '.' | '%'))
        {
            continue; // a longer name
        }
        let tail = tail.trim_start();
        let Some(list) = tail.strip_prefix('(') else {
            return Some(Vec::new()); // `.entry name` without a parameter list
        };
        let list = &list[..list.find(')').unwrap_or(list.len())];
        return Some(
            list.split(',')
                .filter(|param| !param.trim().is_empty())
                .map(|param| {
                    (
                        param.split_whitespace().collect::<Vec<_>>().join(" "),
                        ptx_param_size(param),
                    )
                })
                .collect(),
        );
    }
    None
}

/// `ptx` with each `//` and `/* */` comment replaced by a space (the line ends inside a block
/// comment kept, so that line numbers stay). See [`lex_ptx`].
fn strip_ptx_comments(ptx: &str) -> String {
    lex_ptx(ptx).0
}

/// `ptx` without its comments, and the byte offset of the first string literal that a
/// backslash continues past its line's end, if any. String literals (PTX has them in `.file`
/// directives) are kept whole, as the compiler reads them: a `/*` or `//` in a file name
/// starts no comment, so this reader never takes text for code that the compiler skips, or
/// the other way round. A string ends at its closing quote or its line's end; a backslash in
/// it escapes the next character. Whether a compiler would continue a string onto the next
/// line is not documented, so [`validate_ptx`] refuses a text that asks for it.
fn lex_ptx(ptx: &str) -> (String, Option<usize>) {
    let bytes = ptx.as_bytes();
    let mut code = String::with_capacity(ptx.len());
    let mut continued = None;
    // `from..` is code not yet copied; every cut is at an ASCII byte.
    let (mut at, mut from) = (0, 0);
    while at < bytes.len() {
        let end = match (bytes[at], bytes.get(at + 1)) {
            (b'"', _) => {
                at += 1;
                while at < bytes.len() && !matches!(bytes[at], b'"' | b'\n' | b'\r') {
                    if bytes[at] == b'\\' {
                        if matches!(bytes.get(at + 1), Some(b'\n' | b'\r')) {
                            continued.get_or_insert(at);
                            break;
                        }
                        at += 1;
                    }
                    at += 1;
                }
                at += 1;
                continue;
            }
            (b'/', Some(b'/')) => ptx[at..].find('\n').map_or(ptx.len(), |end| at + end),
            (b'/', Some(b'*')) => ptx[at + 2..]
                .find("*/")
                .map_or(ptx.len(), |end| at + end + 4),
            _ => {
                at += 1;
                continue;
            }
        };
        code.push_str(&ptx[from..at]);
        code.push(' ');
        code.extend(ptx[at..end].chars().filter(|&c| c == '\n'));
        (at, from) = (end, end);
    }
    code.push_str(&ptx[from..]);
    (code, continued)
}

/// The size of one `.param` declaration: `.param .u64 name`, `.param .u64 .ptr .global .align 4
/// name`, `.param .align 8 .b8 name[16]` (whitespace may stand inside the brackets, and an
/// array may have several dimensions, `name[2][3]`), `.param .v2 .u32 name`. A type or an
/// array size it does not know is 0 bytes; `None` if the size overflows.
fn ptx_param_size(param: &str) -> Option<usize> {
    let (declaration, dimensions) = match param.split_once('[') {
        Some((declaration, dimensions)) => (declaration, Some(dimensions)),
        None => (param, None),
    };
    let tokens: Vec<&str> = declaration.split_whitespace().collect();
    let element = tokens.iter().find_map(|t| match *t {
        ".u8" | ".s8" | ".b8" => Some(1usize),
        ".u16" | ".s16" | ".b16" | ".f16" => Some(2),
        ".u32" | ".s32" | ".b32" | ".f32" => Some(4),
        ".u64" | ".s64" | ".b64" | ".f64" => Some(8),
        _ => None,
    });
    let lanes = tokens.iter().find_map(|t| match *t {
        ".v2" => Some(2usize),
        ".v4" => Some(4),
        ".v8" => Some(8),
        _ => None,
    });
    let mut size = element.unwrap_or(0).checked_mul(lanes.unwrap_or(1))?;
    let Some(dimensions) = dimensions else {
        return Some(size);
    };
    // `16]`, `2 ]`, ` 2][3]`: each a decimal count, then `]`, then `[` before the next.
    let mut rest = dimensions;
    loop {
        let Some((count, tail)) = rest.split_once(']') else {
            return Some(0);
        };
        let Ok(count) = count.trim().parse::<usize>() else {
            return Some(0);
        };
        size = size.checked_mul(count)?;
        let tail = tail.trim_start();
        if tail.is_empty() {
            return Some(size);
        }
        let Some(tail) = tail.strip_prefix('[') else {
            return Some(0);
        };
        rest = tail;
    }
}

/// Whether the PTX kernel of `entry` takes a status word after its constants (see the
/// [module docs](self)), from its `.param` list: `b` 8-byte pointers then `c` 4-byte values
/// is `false`, followed by one more 8-byte pointer is `true`; anything else is
/// `InvalidArgument`, as is a PTX without the kernel.
pub fn ptx_status_word(ptx: &str, entry: &EntryPoint) -> Result<bool> {
    let params = ptx_params(ptx, &entry.name).ok_or_else(|| {
        invalid(format!(
            "the PTX defines no kernel '{}' whose parameters could be checked",
            entry.name
        ))
    })?;
    let mut sizes = Vec::with_capacity(params.len());
    for (declaration, size) in params {
        sizes.push(size.ok_or_else(|| {
            invalid(format!(
                "kernel '{}' declares the parameter `{declaration}`, whose size in bytes \
                 overflows (element size times count); no kernel can take it",
                entry.name
            ))
        })?);
    }
    match_params(entry, &sizes)
}

fn validate_ptx(text: &str, entry_points: &[EntryPoint]) -> Result<()> {
    // cuModuleLoadData tells PTX from a cubin or fatbin by its content: text starting with the
    // ELF magic would be read as a cubin. (A fatbin's magic, 50 ed 55 ba, is not UTF-8.)
    if is_binary_image(text.as_bytes()) {
        return Err(invalid(
            "the PTX text starts with the ELF magic (7f 45 4c 46 at byte offset 0): the driver \
             would read it as a cubin, not as PTX; a cubin enters through the unsafe \
             CudaModule::binary",
        ));
    }
    let control = text
        .bytes()
        .position(|b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')) || b == 0x7f);
    if let Some(at) = control {
        let byte = text.as_bytes()[at];
        if byte == 0 {
            // cuModuleLoadData reads PTX up to its NUL: anything after an inner one is lost.
            return Err(invalid(format!(
                "PTX text contains a NUL byte at offset {at}; PTX is text without NULs"
            )));
        }
        return Err(invalid(format!(
            "PTX text contains the control byte 0x{byte:02x} at byte offset {at}; PTX is text \
             whose only control characters are tab, line feed and carriage return"
        )));
    }
    if text.trim().is_empty() {
        return Err(invalid("the PTX text is empty"));
    }
    let (code, continued) = lex_ptx(text);
    if let Some(at) = continued {
        return Err(invalid(format!(
            "the PTX text continues a string literal past its line's end (a backslash ending \
             line {}); halcyon reads kernel parameters from the text and does not guess how a \
             compiler joins such lines: write the string on one line",
            text.as_bytes()[..at]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1
        )));
    }
    // ptxas refuses preprocessor directives (`#define` is a syntax error to it), and halcyon
    // reads each kernel's `.param` list from the text as written: refusing them here keeps the
    // text checked the text compiled, should some JIT preprocess PTX.
    if let Some((line, _)) = code
        .lines()
        .enumerate()
        .find(|(_, line)| line.trim_start().starts_with('#'))
    {
        return Err(invalid(format!(
            "the PTX text has a preprocessor directive on line {}; PTX is not preprocessed, so \
             expand it first (e.g. `cpp -P`)",
            line + 1
        )));
    }
    let entries = ptx_entries(text);
    for entry in entry_points {
        if !entries.contains(&entry.name) {
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "the PTX defines no kernel '{}' (it defines: [{}]); declare it \
                     `extern \"C\" __global__` so its name is not mangled",
                    entry.name,
                    entries.join(", ")
                ),
            ));
        }
        ptx_status_word(text, entry)?;
    }
    Ok(())
}

fn le(bytes: &[u8], at: usize, width: usize) -> u64 {
    let mut a = [0u8; 8];
    a[..width].copy_from_slice(&bytes[at..at + width]);
    u64::from_le_bytes(a)
}

/// The cheap checks of a binary image (see the [module docs](self)).
fn validate_binary(bytes: &[u8]) -> Result<()> {
    if is_fatbin(bytes) {
        return validate_fatbin(bytes);
    }
    if !bytes.starts_with(ELF_MAGIC) {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        let hint = if looks_like_ptx(bytes) {
            "; this looks like PTX text: use CudaModule::ptx"
        } else {
            ""
        };
        return Err(invalid(format!(
            "a CUDA binary image must be a cubin (ELF, 7f 45 4c 46) or a fatbin (50 ed 55 ba); \
             this one starts with [{}]{hint}",
            head.join(" ")
        )));
    }
    validate_cubin(bytes)
}

/// A fatbin's header: `{ u32 magic, u16 version, u16 header_size, u64 entries_size }`, the
/// declared size (header plus entries) within the bytes.
fn validate_fatbin(bytes: &[u8]) -> Result<()> {
    let len = bytes.len() as u64;
    if len < 16 {
        return Err(invalid(format!(
            "fatbin image is {len} bytes, less than its 16-byte header: it is truncated"
        )));
    }
    let header = le(bytes, 6, 2);
    if header < 16 {
        return Err(invalid(format!(
            "fatbin header declares itself {header} bytes long, less than its own 16: the \
             image is corrupt"
        )));
    }
    let end = header.saturating_add(le(bytes, 8, 8));
    if end > len {
        return Err(invalid(format!(
            "fatbin image is {len} bytes but its header declares it ends at byte {end}: the \
             image is truncated or corrupt"
        )));
    }
    Ok(())
}

/// A cubin's ELF header: 64-bit little-endian, complete, and its program and section header
/// tables (of ELF64's entry sizes) within the bytes.
fn validate_cubin(bytes: &[u8]) -> Result<()> {
    // ELF64 little-endian: e_ident[EI_CLASS] = 2, e_ident[EI_DATA] = 1; header is 64 bytes.
    if bytes.len() < 64 || bytes[4] != 2 || bytes[5] != 1 {
        return Err(invalid(
            "a cubin must be a 64-bit little-endian ELF file with a complete 64-byte header",
        ));
    }
    let len = bytes.len() as u64;
    for (what, offset_at, size_at, count_at, size) in [
        ("program header", 0x20, 0x36, 0x38, 56),
        ("section header", 0x28, 0x3a, 0x3c, 64),
    ] {
        let (offset, declared, count) = (
            le(bytes, offset_at, 8),
            le(bytes, size_at, 2),
            le(bytes, count_at, 2),
        );
        if count == 0 {
            continue;
        }
        if declared != size {
            return Err(invalid(format!(
                "cubin image is corrupt: its {what}s are {declared} bytes each, not ELF64's \
                 {size}"
            )));
        }
        // At most 65535 × 64 bytes: no overflow before the addition, which saturates.
        let end = offset.saturating_add(count * size);
        if end > len {
            return Err(invalid(format!(
                "cubin image is {len} bytes but its {what} table extends to byte {end}: the \
                 image is truncated or corrupt"
            )));
        }
    }
    Ok(())
}

/// Checks a kernel's real parameters — `(offset, size)` per parameter as `cuFuncGetParamInfo`
/// reports them — against what halcyon passes for `entry`: an 8-byte device pointer per
/// binding, then a 4-byte `u32` per constant, then, for a kernel that takes a status word, an
/// 8-byte pointer to it. Returns whether the kernel takes the status word.
///
/// An empty `params` is taken as "unknown" and accepted as a kernel without a status word (the
/// driver reports nothing for a kernel without parameters, and passing a kernel more arguments
/// than it takes is harmless). Anything else must match one of the two signatures exactly: a
/// kernel taking more or larger parameters would make `cuLaunchKernel` read past the argument
/// values halcyon provides.
pub fn check_kernel_params(entry: &EntryPoint, params: &[(usize, usize)]) -> Result<bool> {
    if params.is_empty() {
        return Ok(false);
    }
    let sizes: Vec<usize> = params.iter().map(|&(_, size)| size).collect();
    match_params(entry, &sizes)
}

/// Whether parameters of `sizes` bytes are `entry`'s signature (`false`) or its signature and a
/// status word (`true`); `InvalidArgument` naming both otherwise.
fn match_params(entry: &EntryPoint, sizes: &[usize]) -> Result<bool> {
    let expected: Vec<usize> = std::iter::repeat_n(8, entry.binding_count as usize)
        .chain(std::iter::repeat_n(4, entry.constant_count as usize))
        .collect();
    if sizes == expected {
        return Ok(false);
    }
    if sizes.len() == expected.len() + 1
        && sizes[..expected.len()] == expected[..]
        && sizes[expected.len()] == 8
    {
        return Ok(true);
    }
    Err(invalid(format!(
        "kernel '{}' takes {} parameters of sizes {sizes:?} bytes, but its entry point declares \
         {} bindings and {} constants, which halcyon passes as {expected:?} bytes (an 8-byte \
         device pointer per binding, then a 4-byte u32 per constant), optionally followed by an \
         8-byte pointer to the status word; fix the kernel's signature or the EntryPoint",
        entry.name,
        sizes.len(),
        entry.binding_count,
        entry.constant_count
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "//\n.version 8.0\n.target sm_52\n.address_size 64\n\n\
        .visible .entry add_one_u32(\n\t.param .u64 add_one_u32_param_0,\n\t.param .u32 \
        add_one_u32_param_1\n)\n{\n\tret;\n}\n.visible .entry fail()\n{\n\tret;\n}\n";

    /// ptxas 12.8's cubin of tests/kernels/standard.ptx for sm_90.
    const CUBIN: &[u8] = include_bytes!("../tests/kernels/standard.sm_90.cubin");
    /// fatbinary 13.0's fatbin of [`CUBIN`] and standard.ptx, uncompressed and compressed.
    const FATBIN: &[u8] = include_bytes!("../tests/kernels/standard.fatbin");
    const COMPRESSED_FATBIN: &[u8] = include_bytes!("../tests/kernels/standard.compressed.fatbin");

    fn entry(name: &str, bindings: u32, constants: u32) -> EntryPoint {
        EntryPoint {
            name: name.into(),
            workgroup_size: [64, 1, 1],
            binding_count: bindings,
            constant_count: constants,
        }
    }

    fn module() -> CudaModule {
        CudaModule::ptx(PTX, vec![entry("add_one_u32", 1, 1), entry("fail", 0, 0)])
    }

    fn cubin_module() -> CudaModule {
        // SAFETY: CUBIN is ptxas's unmodified output, and add_one_u32 takes (u32*, u32).
        unsafe { CudaModule::binary(CUBIN, vec![entry("add_one_u32", 1, 1)]) }
    }

    /// A minimal ELF64 LE header of `total` bytes (at least 256) with three 64-byte section
    /// headers at byte 64.
    fn elf(total: usize) -> Vec<u8> {
        let mut b = vec![0u8; total];
        b[..4].copy_from_slice(ELF_MAGIC);
        b[4] = 2;
        b[5] = 1;
        b[0x28..0x30].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
        b[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        b[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
        b
    }

    #[test]
    fn packed_modules_round_trip_for_both_image_kinds() {
        let m = module().with_shared_memory("fail", 64 << 10).unwrap();
        let packed = m.to_packed();
        assert_eq!(packed.format(), FORMAT_CUDA);
        assert_eq!(packed.shared_memory(1), 64 << 10);
        assert_eq!(packed.image(), PTX.as_bytes());
        let read = PackedExecutable::from_bytes(&packed.to_bytes()).unwrap();
        assert_eq!(CudaModule::from_packed(&read).unwrap(), m);
        assert_eq!(m.ptx_text(), Some(PTX));
        assert!(!m.is_binary());

        let c = cubin_module();
        assert!(c.is_binary() && c.ptx_text().is_none());
        assert_eq!(c.kind(), "cubin");
        // SAFETY: the packed image is CUBIN, unmodified.
        let back = unsafe { CudaModule::from_packed_unchecked(&c.to_packed()) }.unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn the_safe_path_refuses_packed_binaries() {
        for (image, kind) in [
            (CUBIN, "cubin"),
            (FATBIN, "fatbin"),
            (COMPRESSED_FATBIN, "fatbin"),
        ] {
            // SAFETY: the fixtures are unmodified ptxas and fatbinary output.
            let module = unsafe { CudaModule::binary(image, vec![entry("add_one_u32", 1, 1)]) };
            module.validate().unwrap();
            let packed = module.to_packed();
            let e = CudaModule::from_packed(&packed).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains(&format!("holds a {kind}")), "{e}");
            assert!(e.message().contains("from_packed_unchecked"), "{e}");
            // A checked spec of the same bytes is refused, naming the unsafe paths...
            let e = CudaModule::from_spec(&packed.spec()).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(
                e.message().contains("ExecutableSpec::bytes_unchecked")
                    && e.message().contains("PackedExecutable::spec_unchecked"),
                "{e}"
            );
            // ...and an unchecked one, whose caller vouches for them, passes.
            // SAFETY: as above.
            let spec = unsafe { packed.spec_unchecked() };
            assert_eq!(*CudaModule::from_spec(&spec).unwrap(), module);
        }
        // Packed PTX loads from a checked spec.
        let spec = module().to_packed().spec();
        assert!(!spec.is_unchecked());
        assert_eq!(*CudaModule::from_spec(&spec).unwrap(), module());
    }

    #[test]
    fn packed_executables_of_another_format_or_not_utf8_are_refused() {
        let other = PackedExecutable::new("spirv", vec![entry("fail", 0, 0)], PTX.into());
        let e = CudaModule::from_packed(&other).unwrap_err();
        assert!(e.message().contains("packed 'spirv' executable"), "{e}");
        let bad = PackedExecutable::new(FORMAT_CUDA, vec![entry("fail", 0, 0)], vec![b'.', 0xff]);
        let e = CudaModule::from_packed(&bad).unwrap_err();
        assert!(e.message().contains("not UTF-8 (at byte 1)"), "{e}");
        // The packed metadata is checked like any module's.
        let e = CudaModule::from_packed(&PackedExecutable::new(FORMAT_CUDA, vec![], PTX.into()))
            .unwrap_err();
        assert!(e.message().contains("at least one entry point"), "{e}");
    }

    #[test]
    fn specs_of_both_sources_load_the_same_module() {
        let native = module().spec();
        assert_eq!(native.format, FORMAT_CUDA);
        assert_eq!(*CudaModule::from_spec(&native).unwrap(), module());
        // A native binary module carries the trust of its unsafe constructor.
        assert!(CudaModule::from_spec(&cubin_module().spec()).is_ok());
        let e = CudaModule::from_spec(&ExecutableSpec::bytes("spirv", vec![1u8])).unwrap_err();
        assert!(e.message().contains("loads 'cuda'"), "{e}");
        let e = CudaModule::from_spec(&ExecutableSpec::native(FORMAT_CUDA, Arc::new(5u32)))
            .unwrap_err();
        assert!(e.message().contains("Arc<halcyon_cuda::CudaModule>"), "{e}");
    }

    #[test]
    fn raw_images_and_garbage_are_refused_with_advice() {
        for (raw, kind) in [
            (PTX.as_bytes(), "raw PTX"),
            (CUBIN, "raw cubin"),
            (FATBIN, "raw fatbin"),
        ] {
            let e = CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, raw)).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument);
            assert!(e.message().contains(kind), "{e}");
            assert!(e.message().contains("no entry-point metadata"), "{e}");
            assert!(e.message().contains("CudaModule::to_packed"), "{e}");
        }
        let e =
            CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, &b"hello"[..])).unwrap_err();
        assert!(e.message().contains("b\"HLCNEXE1\""), "{e}");
        // The old container is gone: its bytes are garbage too.
        let e = CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, &b"HLCNCUD1"[..]))
            .unwrap_err();
        assert!(e.message().contains("PackedExecutable"), "{e}");
        // A malformed packed executable is the core's refusal.
        let mut bytes = module().to_packed().to_bytes();
        bytes.pop();
        let e = CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, bytes)).unwrap_err();
        assert!(
            e.message().starts_with("malformed packed executable"),
            "{e}"
        );
    }

    #[test]
    fn shared_memory_is_declared_by_name() {
        let m = module().with_shared_memory("fail", 64 << 10).unwrap();
        assert_eq!((m.shared_memory(0), m.shared_memory(1)), (0, 64 << 10));
        assert_eq!(m.shared_memory(2), 0);
        let e = module().with_shared_memory("empty", 16).unwrap_err();
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(e.message().contains("[add_one_u32, fail]"), "{e}");
    }

    #[test]
    fn entry_point_metadata_is_validated() {
        let check = |e: EntryPoint| CudaModule::ptx(PTX, vec![e]).validate();
        let mut e = entry("add_one_u32", 1, 1);
        e.workgroup_size = [64, 0, 1];
        assert!(check(e.clone())
            .unwrap_err()
            .message()
            .contains("[64, 0, 1]"));
        e.workgroup_size = [1024, 2, 1];
        assert!(check(e.clone())
            .unwrap_err()
            .message()
            .contains("1024 threads"));
        e.workgroup_size = [1, 1, 65];
        check(e.clone()).unwrap_err();
        e.workgroup_size = [u32::MAX, u32::MAX, u32::MAX];
        check(e.clone()).unwrap_err();
        e.workgroup_size = [32, 32, 1];
        check(e.clone()).unwrap();
        let e = check(entry("add_one_u32", 500, 100)).unwrap_err();
        assert!(
            e.message().contains("4400 bytes of kernel parameters"),
            "{e}"
        );
        let e = CudaModule::ptx(PTX, vec![]).validate().unwrap_err();
        assert!(e.message().contains("at least one entry point"), "{e}");
        let twice = vec![entry("fail", 0, 0), entry("fail", 0, 0)];
        let e = CudaModule::ptx(PTX, twice).validate().unwrap_err();
        assert!(e.message().contains("'fail' is declared twice"), "{e}");
        let e = check(entry("a\0b", 0, 0)).unwrap_err();
        assert!(e.message().contains("NUL"), "{e}");
        // The same checks on the unsafe path.
        // SAFETY: validated only, never loaded.
        let e = unsafe { CudaModule::binary(CUBIN, vec![entry("", 0, 0)]) }
            .validate()
            .unwrap_err();
        assert!(e.message().contains("non-empty"), "{e}");
    }

    #[test]
    fn ptx_must_define_every_entry_point() {
        assert_eq!(ptx_entries(PTX), ["add_one_u32", "fail"]);
        let e = CudaModule::ptx(PTX, vec![entry("saxpy_f32", 2, 2)])
            .validate()
            .unwrap_err();
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(
            e.message()
                .contains("no kernel 'saxpy_f32' (it defines: [add_one_u32, fail])"),
            "{e}"
        );
        assert!(e.message().contains("extern \"C\""), "{e}");
        let e = CudaModule::ptx(format!("{PTX}\0"), vec![entry("fail", 0, 0)])
            .validate()
            .unwrap_err();
        assert!(e.message().contains("NUL byte at offset"), "{e}");
        assert_eq!(
            ptx_entries(".entryx y\n// .entry\n.entry  _Z3fooPf ("),
            ["_Z3fooPf"]
        );
    }

    #[test]
    fn binary_images_get_the_cheap_header_checks() {
        for image in [CUBIN, FATBIN, COMPRESSED_FATBIN] {
            validate_binary(image).unwrap();
        }
        validate_binary(&elf(256)).unwrap();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                elf(255),
                "cubin image is 255 bytes but its section header table extends to byte 256",
            ),
            (CUBIN[..63].to_vec(), "complete 64-byte header"),
            (
                {
                    let mut b = elf(256);
                    b[4] = 1;
                    b
                },
                "64-bit little-endian",
            ),
            (
                {
                    let mut b = elf(256);
                    b[0x3a] = 72;
                    b
                },
                "section headers are 72 bytes each",
            ),
            (
                {
                    let mut b = elf(256);
                    b[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes()); // e_phoff
                    b[0x36] = 56;
                    b[0x38] = 1;
                    b
                },
                "program header table extends to byte 18446744073709551615",
            ),
            (FATBIN[..15].to_vec(), "less than its 16-byte header"),
            (
                FATBIN[..FATBIN.len() - 8].to_vec(),
                "its header declares it ends at byte",
            ),
            (
                {
                    let mut b = FATBIN.to_vec();
                    b[6..8].copy_from_slice(&8u16.to_le_bytes());
                    b
                },
                "declares itself 8 bytes long",
            ),
            (PTX.as_bytes().to_vec(), "looks like PTX"),
            (vec![1, 2, 3], "starts with [01 02 03]"),
        ];
        for (image, expected) in cases {
            let e = validate_binary(&image).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains(expected), "expected {expected:?}: {e}");
        }
    }

    #[test]
    fn kernel_params_must_match_the_metadata() {
        let e = entry("saxpy_f32", 2, 2);
        assert!(!check_kernel_params(&e, &[(0, 8), (8, 8), (16, 4), (20, 4)]).unwrap());
        assert!(!check_kernel_params(&e, &[]).unwrap());
        // One more 8-byte pointer after the constants: the status word.
        assert!(check_kernel_params(&e, &[(0, 8), (8, 8), (16, 4), (20, 4), (24, 8)]).unwrap());
        let status_only = entry("fail", 0, 0);
        assert!(check_kernel_params(&status_only, &[(0, 8)]).unwrap());
        check_kernel_params(&status_only, &[(0, 8), (8, 8)]).unwrap_err();
        let err = check_kernel_params(&e, &[(0, 8), (8, 8), (16, 4)]).unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument);
        assert!(
            err.message()
                .contains("takes 3 parameters of sizes [8, 8, 4] bytes"),
            "{err}"
        );
        assert!(err.message().contains("[8, 8, 4, 4]"), "{err}");
        check_kernel_params(&e, &[(0, 8), (8, 8), (16, 8), (24, 4)]).unwrap_err();
        let e = check_kernel_params(&e, &[(0, 8), (8, 8), (16, 4), (20, 4), (24, 4)]).unwrap_err();
        assert!(e.message().contains("pointer to the status word"), "{e}");
    }

    /// PTX with NVRTC's layout (and hand-written variants) for the parameter parser.
    const PARAMS_PTX: &str = ".version 8.0\n.target sm_52\n.address_size 64\n\n\
        \t// .globl\tfail\n.visible .entry fail(\n\t.param .u64 fail_param_0\n)\n{\n\tret;\n}\n\
        .visible .entry saxpy_f32(\n\t.param .u64 saxpy_f32_param_0,\n\t.param .u64 \
        saxpy_f32_param_1,\n\t.param .u32 saxpy_f32_param_2,\n\t.param .u32 \
        saxpy_f32_param_3 // n\n)\n{\n\tret;\n}\n\
        .entry checked(.param .u64 .ptr .global .align 4 checked_param_0, .param .f32 \
        checked_param_1, .param .u64 .ptr .align 1 checked_param_2)\n{\n\tret;\n}\n\
        .visible .entry wide(.param .align 8 .b8 wide_param_0[16], .param .u32 wide_param_1)\n\
        {\n\tret;\n}\n.visible .entry bare\n{\n\tret;\n}\n\
        .visible .entry narrow(.param .u64 narrow_param_0, .param .u32 narrow_param_1)\n{\n\tret;\n}\n";

    #[test]
    fn ptx_parameters_are_counted_per_entry() {
        assert_eq!(ptx_param_sizes(PTX, "add_one_u32"), Some(vec![8, 4]));
        assert_eq!(ptx_param_sizes(PTX, "fail"), Some(vec![]));
        assert_eq!(ptx_param_sizes(PTX, "add_one"), None, "a prefix of a name");
        assert_eq!(ptx_param_sizes(PTX, "nope"), None);
        assert_eq!(ptx_param_sizes(PARAMS_PTX, "fail"), Some(vec![8]));
        assert_eq!(
            ptx_param_sizes(PARAMS_PTX, "saxpy_f32"),
            Some(vec![8, 8, 4, 4])
        );
        assert_eq!(ptx_param_sizes(PARAMS_PTX, "checked"), Some(vec![8, 4, 8]));
        assert_eq!(ptx_param_sizes(PARAMS_PTX, "wide"), Some(vec![16, 4]));
        assert_eq!(ptx_param_sizes(PARAMS_PTX, "bare"), Some(vec![]));
        let commented = ".visible .entry c(/* x, y */ .param .u64 c_0, // n, m\n/* n */\n\
                         .param .u32 c_1)\n// .entry c(.param .u32 z)\n";
        assert_eq!(ptx_param_sizes(commented, "c"), Some(vec![8, 4]));
        // An unterminated block comment hides the rest; a lone slash is code.
        assert_eq!(
            ptx_param_sizes(".entry c(.param .u64 a) / 2 /* .entry d(", "d"),
            None
        );
        assert_eq!(strip_ptx_comments("a/b/*x\ny*/c//z\nd"), "a/b \nc \nd");
        // A comment marker in a string starts no comment: the compiler sees the first `k`,
        // with three parameters, and `// */ ...` as a comment.
        let file = ".file 1 \"/*\"\n.visible .entry k(.param .u64 a, .param .u64 b, .param \
                    .u64 c)\n{\n}\n// */ .visible .entry k(.param .u64 a)\n";
        assert_eq!(ptx_param_sizes(file, "k"), Some(vec![8, 8, 8]));
        let escaped = ".file 1 \"a\\\"//\" .entry k(.param .u64 a)\n";
        assert_eq!(ptx_param_sizes(escaped, "k"), Some(vec![8]));
        // An unterminated string ends with its line; a multi-byte character is copied whole.
        assert_eq!(strip_ptx_comments("\"é/*\nx//y"), "\"é/*\nx ");
        assert_eq!(strip_ptx_comments("\"\\é/*\"//"), "\"\\é/*\" ");
        // A string a backslash continues onto the next line is refused.
        for end in ["\n", "\r\n"] {
            let text = format!("{PTX}.file 1 \"a\\{end}/*\"\n");
            let e = ptx_error(&text, vec![entry("fail", 0, 0)]);
            let line = PTX.lines().count() + 1;
            assert!(e.message().contains(&format!("ending line {line}")), "{e}");
        }
    }

    #[test]
    fn ptx_kernels_with_more_parameters_than_the_metadata_are_refused() {
        // b + c parameters: no status word; b + c + 1 with a trailing pointer: a status word.
        assert!(!ptx_status_word(PTX, &entry("add_one_u32", 1, 1)).unwrap());
        assert!(!ptx_status_word(PTX, &entry("fail", 0, 0)).unwrap());
        assert!(ptx_status_word(PARAMS_PTX, &entry("fail", 0, 0)).unwrap());
        assert!(!ptx_status_word(PARAMS_PTX, &entry("saxpy_f32", 2, 2)).unwrap());
        assert!(ptx_status_word(PARAMS_PTX, &entry("checked", 1, 1)).unwrap());
        assert!(ptx_status_word(PARAMS_PTX, &entry("narrow", 1, 0))
            .unwrap_err()
            .message()
            .contains("sizes [8, 4]"));
        // Neither b + c nor b + c + 1, or a trailing parameter that is not a pointer.
        for (name, bindings, constants) in [
            ("saxpy_f32", 2, 1),
            ("saxpy_f32", 1, 1),
            ("saxpy_f32", 2, 3),
            ("saxpy_f32", 3, 2),
            ("fail", 1, 1),
            ("wide", 0, 2),
            ("bare", 1, 0),
        ] {
            let e = ptx_status_word(PARAMS_PTX, &entry(name, bindings, constants)).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{name}: {e}");
            assert!(
                e.message().contains(&format!("kernel '{name}' takes")),
                "{e}"
            );
            assert!(e.message().contains("status word"), "{e}");
        }
        let e = ptx_status_word(PARAMS_PTX, &entry("nope", 0, 0)).unwrap_err();
        assert!(e.message().contains("no kernel 'nope'"), "{e}");
        // Loading (validation, no GPU) refuses a PTX signature that matches neither, whichever
        // way the module came.
        let module = CudaModule::ptx(PARAMS_PTX, vec![entry("saxpy_f32", 2, 1)]);
        let e = module.validate().unwrap_err();
        assert!(
            e.message()
                .contains("takes 4 parameters of sizes [8, 8, 4, 4]"),
            "{e}"
        );
        CudaModule::from_spec(&module.to_packed().spec()).unwrap_err();
        CudaModule::ptx(
            PARAMS_PTX,
            vec![entry("fail", 0, 0), entry("checked", 1, 1)],
        )
        .validate()
        .unwrap();
    }

    /// `validate`'s error for the PTX `text` declaring the entry points `entries`.
    fn ptx_error(text: &str, entries: Vec<EntryPoint>) -> Error {
        let e = CudaModule::ptx(text, entries).validate().unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        e
    }

    #[test]
    fn ptx_the_driver_could_take_for_a_binary_is_refused() {
        // The driver sniffs the content: PTX text starting with the ELF magic is read as a cubin.
        let elf_text = format!(
            "\x7fELF\x02\x01\x01{}\n.visible .entry k(.param .u64 p)\n{{\n\tret;\n}}\n",
            "\x01".repeat(57)
        );
        let e = ptx_error(&elf_text, vec![entry("k", 1, 0)]);
        assert!(e.message().contains("starts with the ELF magic"), "{e}");
        assert!(e.message().contains("CudaModule::binary"), "{e}");
        // Packed, the same text is a binary image by its content: the safe path refuses it.
        let packed = CudaModule::ptx(elf_text, vec![entry("k", 1, 0)]).to_packed();
        let e = CudaModule::from_spec(&packed.spec()).unwrap_err();
        assert!(e.message().contains("bytes_unchecked"), "{e}");
        // Control bytes but tab, line feed and carriage return, anywhere.
        for (at, byte) in [(3, '\x01'), (20, '\x0c'), (PTX.len() - 2, '\x7f')] {
            let mut text = PTX.to_string();
            text.insert(at, byte);
            let e = ptx_error(&text, vec![entry("fail", 0, 0)]);
            assert!(
                e.message().contains(&format!(
                    "control byte 0x{:02x} at byte offset {at}",
                    byte as u8
                )),
                "{e}"
            );
        }
        let crlf = PTX.replace('\n', "\r\n").replace("    ", "\t");
        CudaModule::ptx(crlf, vec![entry("add_one_u32", 1, 1)])
            .validate()
            .unwrap();
        // A binary constructor given PTX: refused by the cheap checks.
        // SAFETY: validated only, never loaded.
        let e = unsafe { CudaModule::binary(PTX, vec![entry("fail", 0, 0)]) }
            .validate()
            .unwrap_err();
        assert!(e.message().contains("use CudaModule::ptx"), "{e}");
    }

    #[test]
    fn ptx_with_preprocessor_directives_is_refused() {
        let head = ".version 8.0\n.target sm_52\n.address_size 64\n";
        let kernel = ".visible .entry k(.param .u64 a, .param .u32 n)\n{\n\tret;\n}\n";
        for text in [
            format!("{head}#define u32 u64\n{kernel}"),
            format!("{head}  \t#include \"x.ptx\"\n{kernel}"),
            format!("{head}/* x */ # define u32 u64\n{kernel}"),
        ] {
            let e = ptx_error(&text, vec![entry("k", 1, 1)]);
            assert!(
                e.message().contains("preprocessor directive on line 4"),
                "{e}"
            );
        }
        // In comments, a directive is text.
        let commented = format!("{head}// #define u32 u64\n/*\n#if 0\n*/\n{kernel}");
        CudaModule::ptx(commented, vec![entry("k", 1, 1)])
            .validate()
            .unwrap();
    }

    #[test]
    fn ptx_parameter_arrays_are_sized_whatever_their_spacing() {
        let kernel = |param: &str| format!(".visible .entry k(.param .u64 a, {param})\n{{\n}}\n");
        for (param, size) in [
            (".param .u32 n[2]", 8),
            (".param .u32 n[2 ]", 8),
            (".param .u32 n[ 2]", 8),
            (".param .u32 n [ 2 ] ", 8),
            (".param .align 4 .b8 n[2][3]", 6),
            (".param .b8 n[ 2 ] [ 3 ]", 6),
            (".param .v4 .u32 n", 16),
            (".param .u32 n[two]", 0),
            (".param .u32 n[2", 0),
            (".param .u32 n[2]x", 0),
        ] {
            assert_eq!(
                ptx_param_sizes(&kernel(param), "k"),
                Some(vec![8, size]),
                "{param}"
            );
        }
        // An array of two u32 is 8 bytes: not the one u32 constant the metadata declares.
        let e = ptx_error(&kernel(".param .u32 n[2 ]"), vec![entry("k", 1, 1)]);
        assert!(e.message().contains("sizes [8, 8]"), "{e}");
    }

    #[test]
    fn ptx_parameter_sizes_that_overflow_are_refused() {
        // 8 × 3e18 overflows; 8 × (2^61 + 1) wraps to 8, one pointer's size.
        for count in ["3000000000000000000", "2305843009213693953"] {
            let ptx = format!(".version 8.0\n.visible .entry k(.param .b64 p[{count}])\n{{\n}}\n");
            assert_eq!(ptx_param_sizes(&ptx, "k"), Some(vec![usize::MAX]));
            let e = ptx_error(&ptx, vec![entry("k", 1, 0)]);
            assert!(
                e.message()
                    .contains(&format!("parameter `.param .b64 p[{count}]`, whose size")),
                "{e}"
            );
            assert!(e.message().contains("overflows"), "{e}");
        }
    }
}
