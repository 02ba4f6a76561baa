//! CUDA executables: a PTX or cubin image plus the entry-point metadata halcyon dispatches by.
//!
//! **One format, [`FORMAT_CUDA`] (`"cuda"`)**, for PTX and binary images alike: the metadata
//! header is the same for both, `cuModuleLoadData` tells PTX from cubin and fatbin by their
//! content, and a separate format name would give the loader nothing to act on. The image kind
//! is recorded in the module ([`CudaImage`]), so errors can say which one failed. A spec's
//! source is either
//!
//! * [`ExecutableSource::Native`] holding an `Arc<CudaModule>` ([`CudaModule::spec`]), or
//! * [`ExecutableSource::Bytes`] from [`CudaModule::to_bytes`]: a header with the entry points,
//!   then the image (layout below). Raw PTX or cubin bytes are refused with a message saying
//!   how to attach the metadata: device code does not say how many bindings and constants a
//!   kernel takes in halcyon's sense.
//!
//! **Kernel signature.** An entry point with `b` bindings and `c` constants is a kernel
//! `extern "C" __global__ void name(T0* binding0, ..., unsigned int constant0, ...)`: one device
//! pointer (8 bytes) per binding, then one 4-byte `u32` per constant (a `float` constant is
//! passed as its bits; declare it `float` or use `__uint_as_float`). Its block size is the
//! entry point's workgroup size. `extern "C"` keeps the name unmangled. Where the driver can
//! report a kernel's parameters (`cuFuncGetParamInfo`, drivers supporting CUDA 12.4+, R550),
//! loading checks the signature against the metadata ([`check_kernel_params`]): a kernel taking
//! more or larger parameters than halcyon passes would make `cuLaunchKernel` read past the
//! argument array. PTX is checked the same way from its text, on any driver
//! ([`ptx_status_word`], part of [`CudaModule::validate`]). A cubin on a CUDA 12.0 to 12.3
//! driver is not checked: the metadata must be right (a kernel taking fewer parameters than
//! halcyon passes is harmless; one taking more reads past the arguments).
//!
//! **Status word.** A kernel fails its dispatch through a status word (the stream layer's
//! convention, see [`halcyon::stream::api`]): one more parameter after the constants, an
//! 8-byte pointer to a `u32` that is zero when the kernel starts and that the kernel sets
//! nonzero to fail (`extern "C" __global__ void k(float* x, unsigned int n, unsigned int*
//! status)`). A trap or an illegal address would instead be a sticky fault that kills the
//! context. Whether a kernel takes the word is read from its parameters: from the `.param`s of
//! its `.entry` for PTX, from `cuFuncGetParamInfo` for a cubin. On a driver without
//! `cuFuncGetParamInfo` (before CUDA 12.4) every kernel of a cubin is launched with a status
//! word, which a kernel without the parameter never reads: its dispatches work either way, at
//! the status word's cost (they are checked on the host and never captured into graphs; ship
//! PTX, or run a 12.4+ driver, to avoid that). A kernel whose parameter count is neither
//! `b + c` nor `b + c + 1` is refused.
//!
//! **Dynamic shared memory.** A kernel using `extern __shared__` memory is launched with as
//! many bytes of it per block as its entry point declares ([`CudaModule::with_shared_memory`]);
//! one declaring none gets none, and its first access to that memory faults the context.
//! Loading checks the declaration against the device: the kernel's static shared memory plus
//! the declared bytes must fit `CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`
//! (227 KiB on Hopper), and a kernel declaring more than the 48 KiB every kernel may use is
//! opted in with `cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`, so
//! its launches do not fail with `CUDA_ERROR_INVALID_VALUE`.
//!
//! **Byte form** (little-endian):
//!
//! | bytes     | content                                                             |
//! |-----------|---------------------------------------------------------------------|
//! | 8         | magic `b"HLCNCUD1"`, or `b"HLCNCUD2"` when the module declares dynamic shared memory |
//! | 4         | image kind: 1 = PTX text, 2 = cubin or fatbin                       |
//! | 4         | entry-point count `n`                                               |
//! | n × (4 + len + 20) | name length, UTF-8 name, workgroup size x, y, z, binding count, constant count |
//! | n × 4     | `HLCNCUD2` only: each entry point's dynamic shared memory in bytes   |
//! | 8         | image length `L`                                                    |
//! | L         | the image (PTX without a terminating NUL)                           |
//!
//! Nothing may follow the image. A module without shared memory keeps the `HLCNCUD1` form,
//! so its bytes are what earlier releases wrote and read.
//!
//! **Validation** ([`CudaModule::validate`], run on every load): at least one entry point,
//! unique names without NUL bytes, a workgroup size within CUDA's block limits
//! (x, y ≤ 1024, z ≤ 64, x·y·z ≤ 1024), parameters within the 4 KiB every CUDA device accepts.
//! `cuModuleLoadData` takes no length and tells PTX, cubin and fatbin apart by their content;
//! the driver reads as far as the image's own headers say. The image checks:
//!
//! * **PTX** is text: it does not start with the ELF magic (the driver would read it as a
//!   cubin), and has no control bytes but tab, line feed and carriage return (no NUL, which
//!   would end it early). It does not use the C preprocessor: no line whose first character
//!   outside comments and string literals is `#` (or its digraph `%:` or trigraph `??=`), and
//!   no line continuation (a backslash ending a line) except between two `//` comment lines.
//!   ptxas 12.8 refuses a `#define` line outright; whether some driver's JIT would preprocess
//!   PTX is not documented, and halcyon reads each kernel's `.param` list from the text as
//!   written, so a `#define` or `#if` that a preprocessor applied could make the kernel
//!   compiled differ from the one checked. Every entry point is an `.entry` whose parameters match the
//!   metadata (see **Kernel signature** and **Status word** above); array parameters are
//!   sized with any spacing inside their brackets, and a size that overflows is refused.
//! * A **cubin** is a 64-bit little-endian ELF whose header, program header table (56-byte
//!   entries, no `PN_XNUM` extended numbering), segments' file bytes, section header table
//!   (64-byte entries, no extended numbering) and sections' bytes lie within the image, and
//!   whose references hold ([`halcyon::backend::elf::check_references`]): a section-name table
//!   (`e_shstrndx` not 0) holding every section name, `sh_link`s to sections that exist, the
//!   `sh_info` of `SHF_INFO_LINK` sections (`.nv.info.<kernel>`) too, symbol names within
//!   their string table and symbols in sections that exist, relocations of whole entries naming
//!   symbols that exist and applying to a section that exists.
//! * A **fatbin** has a 16-byte or larger header, entries within its declared size, and no byte
//!   after that size (executables concatenate fatbins; the driver could take trailing bytes
//!   for another). Each entry has a header of at least the 64 bytes the driver reads; its
//!   payload lies within the fatbin; its compressed size lies within its payload; its flags say
//!   compressed exactly when its uncompressed size is not 0; its options pair and the options
//!   string it points at, and its object name, lie within the entry. A payload that starts
//!   with the ELF magic passes the cubin checks, whatever the entry's kind and flags; an
//!   uncompressed cubin entry's payload must be an ELF file, and an uncompressed PTX entry's
//!   holds its terminating NUL. (Field meanings and the fixtures' values are in
//!   `validate_fatbin`'s comment.)
//!
//! Not checked, left to the driver: the contents of NVIDIA's own sections (`.nv.info`
//! records; the `sh_info` of `.text.<kernel>` sections, which holds the kernel's symbol index
//! without the `SHF_INFO_LINK` flag), symbol values and sizes, relocation offsets within their
//! target sections, what a compressed payload decompresses to, and a fatbin entry of a kind
//! other than PTX or cubin beyond its bounds. The checks keep what the image's headers
//! declare, and the references ELF itself defines, inside the bytes; offsets the driver reads
//! out of a section's contents are its own to bound. A binary image's kernel parameters are
//! checked only where the driver reports them (see above).
//!
//! **NVRTC.** [`CudaModule::compile`] compiles CUDA C to PTX at run time (see [`crate::nvrtc`]);
//! without libnvrtc it is `Unavailable`.

use std::any::Any;
use std::borrow::Cow;
use std::sync::Arc;

use halcyon::backend::{
    read_entry_points, read_entry_table, set_entry_value, write_entry_points, write_entry_table,
};
use halcyon::{EntryPoint, Error, ExecutableSource, ExecutableSpec, Result, StatusCode};

/// The executable format name of [`CudaModule`]s.
pub const FORMAT_CUDA: &str = "cuda";

const MAGIC: &[u8; 8] = b"HLCNCUD1";
/// The byte form with a dynamic shared memory table.
const MAGIC_SHARED: &[u8; 8] = b"HLCNCUD2";
const KIND_PTX: u32 = 1;
const KIND_BINARY: u32 = 2;
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

/// A module's device code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaImage {
    /// PTX assembly text, JIT-compiled by the driver for the device at load time (no
    /// terminating NUL needed; one is added when loading).
    Ptx(String),
    /// A binary image: a cubin (ELF) for the device's architecture, or a fatbin holding one
    /// (and possibly PTX to fall back on).
    Cubin(Vec<u8>),
}

impl CudaImage {
    fn kind(&self) -> &'static str {
        match self {
            CudaImage::Ptx(_) => "PTX",
            CudaImage::Cubin(_) => "cubin",
        }
    }
}

/// A CUDA module with the metadata of the entry points to expose, in dispatch index order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaModule {
    /// The device code.
    pub image: CudaImage,
    /// The kernels to expose (by name), with their metadata.
    pub entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points`: the dynamic shared memory (`extern __shared__`)
    /// each kernel is launched with, in bytes; entry points past its end take none. Set it
    /// with [`CudaModule::with_shared_memory`].
    pub shared_memory_bytes: Vec<u32>,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

impl CudaModule {
    /// A module from an image and entry points.
    pub fn new(image: CudaImage, entry_points: Vec<EntryPoint>) -> Self {
        CudaModule {
            image,
            entry_points,
            shared_memory_bytes: Vec::new(),
        }
    }

    /// Declares that kernel `entry` is launched with `bytes` of dynamic shared memory
    /// (`extern __shared__`) per block: every dispatch of it passes them to `cuLaunchKernel`.
    /// Loading checks that the device can give the kernel that much (see the
    /// [module docs](self)). `NotFound` if no entry point is named `entry`.
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
        let what = "CUDA module";
        set_entry_value(
            &mut self.shared_memory_bytes,
            &self.entry_points,
            entry,
            bytes,
            what,
        )?;
        Ok(self)
    }

    /// The dynamic shared memory entry point `index` is launched with, in bytes
    /// ([`CudaModule::shared_memory_bytes`]).
    pub fn shared_memory(&self, index: usize) -> u32 {
        self.shared_memory_bytes.get(index).copied().unwrap_or(0)
    }

    /// A module from PTX text.
    pub fn ptx(ptx: impl Into<String>, entry_points: Vec<EntryPoint>) -> Self {
        Self::new(CudaImage::Ptx(ptx.into()), entry_points)
    }

    /// A module from a cubin or fatbin.
    pub fn cubin(image: impl Into<Vec<u8>>, entry_points: Vec<EntryPoint>) -> Self {
        Self::new(CudaImage::Cubin(image.into()), entry_points)
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

    /// An executable spec (format [`FORMAT_CUDA`], native source).
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_CUDA, Arc::new(self))
    }

    /// The byte form (see the [module docs](self)).
    pub fn to_bytes(&self) -> Vec<u8> {
        let (kind, image) = match &self.image {
            CudaImage::Ptx(text) => (KIND_PTX, text.as_bytes()),
            CudaImage::Cubin(bytes) => (KIND_BINARY, &bytes[..]),
        };
        let shared = !self.shared_memory_bytes.is_empty();
        let mut out = if shared { MAGIC_SHARED } else { MAGIC }.to_vec();
        out.extend_from_slice(&kind.to_le_bytes());
        write_entry_points(&mut out, &self.entry_points);
        if shared {
            let n = self.entry_points.len();
            write_entry_table(&mut out, &self.shared_memory_bytes, n);
        }
        out.extend_from_slice(&(image.len() as u64).to_le_bytes());
        out.extend_from_slice(image);
        out
    }

    /// Parses [`CudaModule::to_bytes`] output (the structure only; [`CudaModule::validate`]
    /// checks the content).
    pub fn from_bytes(bytes: &[u8]) -> Result<CudaModule> {
        let bad = |what: &str| invalid(format!("malformed halcyon CUDA executable: {what}"));
        let (shared, rest) = match (bytes.strip_prefix(MAGIC), bytes.strip_prefix(MAGIC_SHARED)) {
            (Some(rest), _) => (false, Some(rest)),
            (None, rest) => (true, rest),
        };
        let Some(rest) = rest else {
            if bytes.starts_with(ELF_MAGIC) || looks_like_ptx(bytes) || is_fatbin(bytes) {
                return Err(invalid(
                    "raw PTX or cubin carries no entry-point metadata (binding and constant \
                     counts, workgroup size): pass a halcyon_cuda::CudaModule \
                     (CudaModule::spec) or its to_bytes() form",
                ));
            }
            return Err(bad(
                "missing the b\"HLCNCUD1\" header (build it with CudaModule::to_bytes)",
            ));
        };
        let (kind, rest) = match rest.split_first_chunk::<4>() {
            Some((kind, rest)) => (u32::from_le_bytes(*kind), rest),
            None => return Err(bad("truncated header")),
        };
        let (entry_points, rest) = read_entry_points(rest, "halcyon CUDA executable")?;
        let (shared_memory_bytes, rest) = if shared {
            read_entry_table(rest, entry_points.len(), "halcyon CUDA executable")?
        } else {
            (Vec::new(), rest)
        };
        let Some((len, image)) = rest.split_first_chunk::<8>() else {
            return Err(bad("truncated before the image length"));
        };
        let len = u64::from_le_bytes(*len);
        if len != image.len() as u64 {
            return Err(bad(&format!(
                "the header declares a {len}-byte image but {} bytes follow it",
                image.len()
            )));
        }
        let image = match kind {
            KIND_PTX => CudaImage::Ptx(String::from_utf8(image.to_vec()).map_err(|e| {
                bad(&format!(
                    "the PTX image is not UTF-8 (at byte {})",
                    e.utf8_error().valid_up_to()
                ))
            })?),
            KIND_BINARY => CudaImage::Cubin(image.to_vec()),
            other => {
                return Err(bad(&format!(
                    "unknown image kind {other} (1 is PTX, 2 is cubin/fatbin)"
                )))
            }
        };
        Ok(CudaModule {
            image,
            entry_points,
            shared_memory_bytes,
        })
    }

    /// Checks the metadata and the image (see the [module docs](self)).
    pub fn validate(&self) -> Result<()> {
        if self.entry_points.is_empty() {
            return Err(invalid(
                "a CUDA executable must declare at least one entry point",
            ));
        }
        if self.shared_memory_bytes.len() > self.entry_points.len() {
            return Err(invalid(format!(
                "the CUDA module declares shared memory for {} entry points but has {}",
                self.shared_memory_bytes.len(),
                self.entry_points.len()
            )));
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
            CudaImage::Ptx(text) => validate_ptx(text, &self.entry_points),
            CudaImage::Cubin(bytes) => validate_binary(bytes),
        }
    }

    /// The module a spec of format [`FORMAT_CUDA`] holds, validated.
    pub(crate) fn from_spec(spec: &ExecutableSpec) -> Result<Cow<'_, CudaModule>> {
        if spec.format != FORMAT_CUDA {
            return Err(invalid(format!(
                "cannot load executable format '{}'; the CUDA device loads '{FORMAT_CUDA}' \
                 (halcyon_cuda::CudaModule::spec or to_bytes)",
                spec.format
            )));
        }
        let module = match &spec.source {
            ExecutableSource::Native(object) => Cow::Borrowed(
                (&**object as &dyn Any)
                    .downcast_ref::<CudaModule>()
                    .ok_or_else(|| {
                        invalid(
                            "a native 'cuda' executable source must be an \
                             Arc<halcyon_cuda::CudaModule> (CudaModule::spec)",
                        )
                    })?,
            ),
            ExecutableSource::Bytes(bytes) => Cow::Owned(CudaModule::from_bytes(bytes)?),
        };
        module.validate()?;
        Ok(module)
    }

    /// The image kind, for messages (`PTX`, `cubin`).
    pub(crate) fn kind(&self) -> &'static str {
        self.image.kind()
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

fn looks_like_ptx(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    let text = String::from_utf8_lossy(head);
    text.contains(".version") || text.contains(".target") || text.contains(".entry")
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

/// Whether `b` ends a line for the C preprocessor (a lone carriage return does too).
fn line_end(b: u8) -> bool {
    b == b'\n' || b == b'\r'
}

/// Whether the backslash at `at` ends its line (spaces and tabs may follow it, as GCC allows):
/// a line continuation, which the C preprocessor removes, joining the line to the next.
fn continues_line(bytes: &[u8], at: usize) -> bool {
    let rest = &bytes[at + 1..];
    let blanks = rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    rest.get(blanks).is_some_and(|&b| line_end(b))
}

/// The byte after the line end at `at` (`\r\n` is one line end).
fn next_line(bytes: &[u8], at: usize) -> usize {
    if bytes[at] == b'\r' && bytes.get(at + 1) == Some(&b'\n') {
        at + 2
    } else {
        at + 1
    }
}

/// `ptx` lexed as a C preprocessor would (see the [module docs](self)): its `//` and `/* */`
/// comments each replaced by a space (the line ends inside a block comment kept, so that line
/// numbers stay), string and character literals kept whole (a `/*` in a `.file` name starts no
/// comment). With it, the byte offset of the first line continuation (a backslash ending a
/// line) that could change what is code, if there is one: a continuation is harmless only at
/// the end of a `//` comment followed by another `//` comment line.
fn lex_ptx(ptx: &str) -> (String, Option<usize>) {
    let bytes = ptx.as_bytes();
    let n = bytes.len();
    let mut code = String::with_capacity(n);
    let mut continuation = None;
    // `from..` is code not yet copied; every cut is at an ASCII byte.
    let (mut i, mut from) = (0, 0);
    while i < n {
        match bytes[i] {
            b'\\' if continues_line(bytes, i) => {
                continuation.get_or_insert(i);
                i += 1;
            }
            quote @ (b'"' | b'\'') => {
                i += 1;
                while i < n && bytes[i] != quote && !line_end(bytes[i]) {
                    if bytes[i] == b'\\' {
                        if continues_line(bytes, i) {
                            continuation.get_or_insert(i);
                        }
                        i += 1;
                    }
                    i += 1;
                }
                i = (i + 1).min(n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                code.push_str(&ptx[from..i]);
                code.push(' ');
                let end = bytes[i..]
                    .iter()
                    .position(|&b| line_end(b))
                    .map_or(n, |end| i + end);
                let backslash = bytes[i..end].iter().rposition(|&b| b == b'\\');
                if let Some(at) = backslash.map(|at| i + at) {
                    let commented = end < n && {
                        let next = &ptx[next_line(bytes, end)..];
                        next.trim_start_matches([' ', '\t']).starts_with("//")
                    };
                    if continues_line(bytes, at) && !commented {
                        continuation.get_or_insert(at);
                    }
                }
                (i, from) = (end, end);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                code.push_str(&ptx[from..i]);
                code.push(' ');
                let end = ptx[i + 2..].find("*/").map_or(n, |end| i + 2 + end + 2);
                let comment = &bytes[i..end];
                if let Some(at) = (0..comment.len())
                    .find(|&at| comment[at] == b'\\' && continues_line(comment, at))
                {
                    continuation.get_or_insert(i + at);
                }
                code.extend(comment.iter().filter(|&&b| line_end(b)).map(|&b| b as char));
                (i, from) = (end, end);
            }
            _ => i += 1,
        }
    }
    code.push_str(&ptx[from..]);
    (code, continuation)
}

/// `ptx` without its comments (see [`lex_ptx`]).
fn strip_ptx_comments(ptx: &str) -> String {
    lex_ptx(ptx).0
}

/// Where `ptx` uses the C preprocessor, described for a message: a directive (a line whose
/// first character outside comments is `#`, or the digraph `%:` or trigraph `??=` for it), or
/// a line continuation that could change what is code (see [`lex_ptx`]). halcyon reads the
/// kernels' parameters from the text as written, so a `#define` or an `#if` that a
/// preprocessor applied could make the kernel compiled differ from the one halcyon checked.
fn ptx_preprocessor_use(ptx: &str) -> Option<String> {
    let (code, continuation) = lex_ptx(ptx);
    let line_of = |at: usize| ptx.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
    let directive = code.split('\n').enumerate().find_map(|(line, text)| {
        text.split('\r').find_map(|text| {
            let text = text.trim_start_matches([' ', '\t']);
            ["#", "%:", "??="]
                .iter()
                .any(|start| text.starts_with(start))
                .then(|| {
                    let word: String = text
                        .chars()
                        .take_while(|c| !c.is_whitespace())
                        .take(24)
                        .collect();
                    (
                        line + 1,
                        format!("the preprocessor directive `{word}` on line {}", line + 1),
                    )
                })
        })
    });
    let continuation = continuation.map(|at| {
        (
            line_of(at),
            format!(
                "a line continuation (a backslash ending line {}, at byte offset {at})",
                line_of(at)
            ),
        )
    });
    [directive, continuation]
        .into_iter()
        .flatten()
        .min_by_key(|(line, _)| *line)
        .map(|(_, what)| what)
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
    // cuModuleLoadData tells PTX from a cubin or fatbin by its content: text with the ELF magic
    // would be read as a cubin (through headers no check here has looked at). A fatbin's magic
    // (50 ed 55 ba) is not UTF-8, so no String starts with it.
    if text.as_bytes().starts_with(ELF_MAGIC) {
        return Err(invalid(
            "the PTX text starts with the ELF magic (7f 45 4c 46 at byte offset 0): the driver \
             would read it as a cubin, not as PTX; pass a cubin as CudaImage::Cubin",
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
    if let Some(what) = ptx_preprocessor_use(text) {
        return Err(invalid(format!(
            "the PTX text uses the C preprocessor ({what}), which ptxas does not run; halcyon \
             reads the kernels' parameters from the PTX text as written and cannot follow \
             preprocessor directives, so preprocess the PTX first (e.g. `cpp -P`, or emit it \
             with the directives expanded)"
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

fn is_fatbin(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == FATBIN_MAGIC
}

fn le(bytes: &[u8], at: usize, width: usize) -> u64 {
    let mut a = [0u8; 8];
    a[..width].copy_from_slice(&bytes[at..at + width]);
    u64::from_le_bytes(a)
}

fn validate_binary(bytes: &[u8]) -> Result<()> {
    if is_fatbin(bytes) {
        return validate_fatbin(bytes);
    }
    validate_cubin(bytes)
}

/// A fatbin entry's kind: PTX text.
const FATBIN_PTX: u64 = 1;
/// A fatbin entry's kind: a cubin.
const FATBIN_CUBIN: u64 = 2;
/// An entry's flags that mark its payload compressed (LZ4 in older toolkits, zstd since).
const FATBIN_COMPRESSED: u64 = 0x2000 | 0x8000;
/// The bytes of an entry header the driver reads (`fatBinaryEntry`): every entry of the
/// fixtures has at least these (64 for the cubin entries, 80 for the PTX ones).
const FATBIN_ENTRY_HEADER: u64 = 64;

/// Checks a fatbin: its header, then entry by entry that each entry's header and payload lie
/// within the fatbin's declared size, which lies within the bytes and ends them; that the
/// header's sizes, flags and inner offsets agree with its payload; that a payload that is an
/// ELF file passes the same checks as a cubin loaded alone ([`validate_cubin`]), and an
/// uncompressed PTX entry holds its terminating NUL (the driver reads PTX as a C string).
/// Compressed payloads are bounds-checked and their sizes compared; what they decompress to is
/// the driver's to check.
///
/// Layout, little-endian: a 16-byte header `{ u32 magic, u16 version, u16 header_size,
/// u64 entries_size }`, then entries, each a header followed by its payload:
///
/// | at | field |
/// |----|-------|
/// | 0  | `u16` kind: 1 PTX, 2 cubin |
/// | 4  | `u32` header size (payload starts there) |
/// | 8  | `u64` payload size (padded) |
/// | 16 | `u32` compressed size (0 if uncompressed) |
/// | 20 | `u32` options offset: 0, or where a `{ u32 offset, u32 size }` of the options lies |
/// | 28 | `u32` arch (`90` is sm_90) |
/// | 32 | `u32`, `u32`: object-name offset and length |
/// | 40 | `u64` flags (`0x2000` LZ4, `0x8000` zstd compressed) |
/// | 56 | `u64` uncompressed size (0 if uncompressed) |
///
/// Offsets within an entry count from the entry's start.
///
/// Verified against the fixtures (`fatbinary` 13.0): `standard.fatbin` has a cubin entry
/// (header 64, payload 7752, compressed size 0, options offset 0, flags 0x11, uncompressed
/// size 0) and a PTX entry (header 80, payload 1712, compressed size 0, options offset 64,
/// where `{72, 0}` points at an empty options string inside the header, flags 0x11,
/// uncompressed size 0), and no byte after its declared end; `standard.compressed.fatbin` the
/// same entries compressed (flags 0x8011; compressed sizes 1215 and 531 of padded payloads of
/// 1216 and 536; uncompressed sizes 7752, the cubin's, and 1705, the PTX text's 1704 bytes
/// and its NUL, padded to 1712 in the uncompressed fatbin). The
/// object-name fields are 0 in every fixture entry; their meaning is that of public readers
/// of the format (n-eiling/cuda-fatbin-decompression, jiegec/fatbinary), and the check on
/// them, 0 or within the entry, holds for anything a writer of the format puts there.
fn validate_fatbin(bytes: &[u8]) -> Result<()> {
    let len = bytes.len() as u64;
    let beyond = |what: &str, end: u64| {
        invalid(format!(
            "fatbin image is {len} bytes but its {what} at byte {end}: the image is truncated \
             or corrupt (cuModuleLoadData would read past it)"
        ))
    };
    if len < 16 {
        return Err(beyond("header ends", 16));
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
        return Err(beyond("entries end", end));
    }
    let (mut at, mut index) = (header, 0);
    while at < end {
        let corrupt = |what: String| {
            invalid(format!(
                "fatbin entry {index} (at byte {at}) {what}: the image is truncated or corrupt \
                 (cuModuleLoadData would read past it)"
            ))
        };
        if end - at < FATBIN_ENTRY_HEADER {
            return Err(corrupt(format!(
                "has {} bytes left for its {FATBIN_ENTRY_HEADER}-byte header before the \
                 entries end at byte {end}",
                end - at
            )));
        }
        let i = at as usize;
        let (kind, entry_header) = (le(bytes, i, 2), le(bytes, i + 4, 4));
        if entry_header < FATBIN_ENTRY_HEADER {
            return Err(corrupt(format!(
                "declares a {entry_header}-byte header, less than the \
                 {FATBIN_ENTRY_HEADER} bytes of the entry header the driver reads"
            )));
        }
        let start = at.saturating_add(entry_header);
        let payload_size = le(bytes, i + 8, 8);
        let payload_end = start.saturating_add(payload_size);
        if payload_end > end {
            return Err(corrupt(format!(
                "extends to byte {payload_end}, past the entries' end at byte {end}"
            )));
        }
        // The whole header lies within the entries from here on.
        let field = |offset: usize, width: usize| le(bytes, i + offset, width);
        let entry_len = payload_end - at;
        let flags = field(40, 8);
        let compressed = flags & FATBIN_COMPRESSED != 0;
        let (compressed_size, uncompressed_size) = (field(16, 4), field(56, 8));
        if compressed != (uncompressed_size != 0) {
            return Err(corrupt(format!(
                "has flags {flags:#x} ({}) but an uncompressed size of {uncompressed_size}, \
                 which is 0 exactly when the entry is not compressed",
                if compressed {
                    "compressed"
                } else {
                    "not compressed"
                }
            )));
        }
        if compressed_size > payload_size {
            return Err(corrupt(format!(
                "declares {compressed_size} compressed bytes in a {payload_size}-byte payload"
            )));
        }
        let within = |what: &str, offset: u64, size: u64| {
            if offset + size > entry_len {
                return Err(corrupt(format!(
                    "has its {what} ({size} bytes at byte {offset} of the entry) past the \
                     entry's {entry_len} bytes"
                )));
            }
            Ok(())
        };
        let options = field(20, 4);
        if options != 0 {
            within("options offset/size pair", options, 8)?;
            let pair = i + options as usize;
            within("ptxas options", le(bytes, pair, 4), le(bytes, pair + 4, 4))?;
        }
        within("object name", field(32, 4), field(36, 4))?;
        let payload = &bytes[start as usize..payload_end as usize];
        // The driver may tell an image by its content: any ELF payload is checked as a cubin.
        if payload.starts_with(ELF_MAGIC) {
            let arch = format!("sm_{}", field(28, 4));
            validate_cubin(payload).map_err(|e| {
                e.context(format!(
                    "fatbin entry {index} (a cubin for {arch}, bytes {start}..{payload_end})"
                ))
            })?;
        } else if !compressed && kind == FATBIN_CUBIN {
            let head: Vec<String> = payload.iter().take(4).map(|b| format!("{b:02x}")).collect();
            return Err(corrupt(format!(
                "is an uncompressed cubin entry (kind 2) whose payload is not an ELF file \
                 (it starts with [{}])",
                head.join(" ")
            )));
        }
        if !compressed && kind == FATBIN_PTX && !payload.contains(&0) {
            return Err(corrupt(format!(
                "holds {} bytes of PTX without the terminating NUL the driver reads up to",
                payload.len()
            )));
        }
        at = payload_end;
        index += 1;
    }
    if end < len {
        return Err(invalid(format!(
            "fatbin image is {len} bytes but the fatbin ends at byte {end} (its {header}-byte \
             header and {} bytes of entries): {} bytes follow it, which the driver could take \
             for another fatbin (executables concatenate them); pass only the fatbin's own \
             bytes",
            end - header,
            len - end
        )));
    }
    Ok(())
}

/// Checks a cubin: a 64-bit little-endian ELF whose headers, sections and segments lie within
/// the bytes, and whose inner references hold ([`halcyon::backend::elf::check_references`]).
fn validate_cubin(bytes: &[u8]) -> Result<()> {
    let len = bytes.len() as u64;
    let beyond = |what: &str, end: u64| {
        invalid(format!(
            "cubin image is {len} bytes but its {what} extends to byte {end}: the image is \
             truncated or corrupt (cuModuleLoadData would read past it)"
        ))
    };
    if !bytes.starts_with(ELF_MAGIC) {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        let hint = if looks_like_ptx(bytes) {
            "; this looks like PTX text: use CudaImage::Ptx"
        } else {
            ""
        };
        return Err(invalid(format!(
            "a CUDA binary image must be a cubin (ELF, 7f 45 4c 46) or a fatbin (50 ed 55 ba); \
             this one starts with [{}]{hint}",
            head.join(" ")
        )));
    }
    // ELF64 little-endian: e_ident[EI_CLASS] = 2, e_ident[EI_DATA] = 1; header is 64 bytes.
    if bytes.len() < 64 || bytes[4] != 2 || bytes[5] != 1 {
        return Err(invalid(
            "a cubin must be a 64-bit little-endian ELF file with a complete 64-byte header",
        ));
    }
    let (phoff, shoff) = (le(bytes, 0x20, 8), le(bytes, 0x28, 8));
    let (phentsize, phnum) = (le(bytes, 0x36, 2), le(bytes, 0x38, 2));
    let (shentsize, shnum) = (le(bytes, 0x3a, 2), le(bytes, 0x3c, 2));
    // ELF64's entry sizes, which ptxas writes; the driver need not read e_*entsize.
    if phnum > 0 && phentsize != 56 {
        return Err(invalid(format!(
            "cubin image is corrupt: its program headers are {phentsize} bytes each, not \
             ELF64's 56"
        )));
    }
    if shnum > 0 && shentsize != 64 {
        return Err(invalid(format!(
            "cubin image is corrupt: its section headers are {shentsize} bytes each, not \
             ELF64's 64"
        )));
    }
    if phnum == 0xffff {
        return Err(invalid(
            "cubin image is corrupt: it uses extended program-header numbering (e_phnum \
             0xffff), which no kernel image needs",
        ));
    }
    let ph_end = phoff.saturating_add(phentsize * phnum);
    if phnum > 0 && ph_end > len {
        return Err(beyond("program header table", ph_end));
    }
    let sh_end = shoff.saturating_add(shentsize * shnum);
    if shnum > 0 && sh_end > len {
        return Err(beyond("section header table", sh_end));
    }
    for i in 0..shnum {
        let at = (shoff + i * shentsize) as usize;
        let kind = le(bytes, at + 4, 4);
        let (offset, size) = (le(bytes, at + 0x18, 8), le(bytes, at + 0x20, 8));
        let end = offset.saturating_add(size);
        if kind != 8 /* SHT_NOBITS occupies no bytes */ && end > len {
            return Err(beyond(&format!("section {i}"), end));
        }
    }
    for i in 0..phnum {
        let at = (phoff + i * phentsize) as usize;
        let (offset, size) = (le(bytes, at + 8, 8), le(bytes, at + 0x20, 8));
        let end = offset.saturating_add(size);
        if end > len {
            return Err(beyond(&format!("segment {i}"), end));
        }
    }
    halcyon::backend::elf::check_references(bytes).map_err(|what| {
        invalid(format!(
            "cubin image is corrupt: {what} (cuModuleLoadData would follow it outside the image)"
        ))
    })
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

    /// A minimal valid ELF64 LE image of `total` bytes (at least 257): the header, three
    /// section headers at byte 64 (the null section; section 1, whose data lies at
    /// `offset..+size`; section 2, the section-name table, one NUL at byte 256).
    fn elf(offset: u64, size: u64, total: usize) -> Vec<u8> {
        let mut b = vec![0u8; total];
        b[..4].copy_from_slice(ELF_MAGIC);
        b[4] = 2;
        b[5] = 1;
        b[0x28..0x30].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
        b[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
        b[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
        b[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes()); // e_shstrndx
        b[128 + 4..128 + 8].copy_from_slice(&1u32.to_le_bytes()); // SHT_PROGBITS
        b[128 + 0x18..128 + 0x20].copy_from_slice(&offset.to_le_bytes());
        b[128 + 0x20..128 + 0x28].copy_from_slice(&size.to_le_bytes());
        b[192 + 4..192 + 8].copy_from_slice(&3u32.to_le_bytes()); // SHT_STRTAB
        b[192 + 0x18..192 + 0x20].copy_from_slice(&256u64.to_le_bytes());
        b[192 + 0x20..192 + 0x28].copy_from_slice(&1u64.to_le_bytes());
        b
    }

    #[test]
    fn bytes_round_trip_for_both_image_kinds() {
        let m = module();
        let bytes = m.to_bytes();
        assert!(bytes.starts_with(b"HLCNCUD1"));
        assert_eq!(CudaModule::from_bytes(&bytes).unwrap(), m);
        m.validate().unwrap();

        let c = CudaModule::cubin(elf(512, 16, 528), vec![entry("k", 2, 3)]);
        let back = CudaModule::from_bytes(&c.to_bytes()).unwrap();
        assert_eq!(back, c);
        back.validate().unwrap();
    }

    #[test]
    fn shared_memory_declarations_round_trip_and_are_checked() {
        let m = module().with_shared_memory("fail", 64 << 10).unwrap();
        assert_eq!(m.shared_memory_bytes, [0, 64 << 10]);
        let bytes = m.to_bytes();
        assert!(bytes.starts_with(b"HLCNCUD2"));
        assert_eq!(CudaModule::from_bytes(&bytes).unwrap(), m);
        m.validate().unwrap();
        // The table is part of the structure: cutting into it is a malformed executable.
        let table = bytes.len() - PTX.len() - 8 - 8;
        let e = CudaModule::from_bytes(&bytes[..table + 2]).unwrap_err();
        assert!(e.message().contains("per-entry-point values"), "{e}");

        let e = module().with_shared_memory("empty", 16).unwrap_err();
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(e.message().contains("[add_one_u32, fail]"), "{e}");
        let mut long = module();
        long.shared_memory_bytes = vec![0; 3];
        let e = long.validate().unwrap_err();
        assert!(e.message().contains("for 3 entry points but has 2"), "{e}");
    }

    #[test]
    fn specs_of_both_sources_load_the_same_module() {
        let native = module().spec();
        assert_eq!(native.format, FORMAT_CUDA);
        assert_eq!(*CudaModule::from_spec(&native).unwrap(), module());
        let bytes = ExecutableSpec::bytes(FORMAT_CUDA, module().to_bytes());
        assert_eq!(*CudaModule::from_spec(&bytes).unwrap(), module());
        let e = CudaModule::from_spec(&ExecutableSpec::bytes("spirv", vec![1u8])).unwrap_err();
        assert!(e.message().contains("loads 'cuda'"), "{e}");
        let e = CudaModule::from_spec(&ExecutableSpec::native(FORMAT_CUDA, Arc::new(5u32)))
            .unwrap_err();
        assert!(e.message().contains("Arc<halcyon_cuda::CudaModule>"), "{e}");
    }

    #[test]
    fn raw_images_and_garbage_are_refused_with_advice() {
        for raw in [PTX.as_bytes(), &elf(512, 16, 528)[..]] {
            let e = CudaModule::from_bytes(raw).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument);
            assert!(e.message().contains("no entry-point metadata"), "{e}");
        }
        let e = CudaModule::from_bytes(b"hello").unwrap_err();
        assert!(
            e.message().contains("missing the b\"HLCNCUD1\" header"),
            "{e}"
        );
    }

    #[test]
    fn truncation_and_trailing_bytes_are_refused() {
        let bytes = module().to_bytes();
        for cut in [9, 16, 20, 30, bytes.len() - PTX.len() - 3, bytes.len() - 1] {
            let e = CudaModule::from_bytes(&bytes[..cut]).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "cut {cut}: {e}");
            assert!(
                e.message().starts_with("malformed halcyon CUDA executable"),
                "{e}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        let e = CudaModule::from_bytes(&long).unwrap_err();
        assert!(e.message().contains("bytes follow it"), "{e}");
        let mut kind = bytes.clone();
        kind[8] = 7;
        let e = CudaModule::from_bytes(&kind).unwrap_err();
        assert!(e.message().contains("unknown image kind 7"), "{e}");
        let mut count = bytes;
        count[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = CudaModule::from_bytes(&count).unwrap_err();
        assert!(e.message().contains("entry points; at most 4096"), "{e}");
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
    fn binary_images_must_stay_within_their_bytes() {
        let ok = elf(512, 16, 528);
        validate_binary(&ok).unwrap();
        let e = validate_binary(&elf(512, 17, 528)).unwrap_err();
        assert!(e.message().contains("section 1 extends to byte 529"), "{e}");
        let e = validate_binary(&ok[..200]).unwrap_err();
        assert!(
            e.message()
                .contains("section header table extends to byte 256"),
            "{e}"
        );
        let mut nobits = elf(512, 1 << 40, 528);
        nobits[128 + 4..128 + 8].copy_from_slice(&8u32.to_le_bytes());
        validate_binary(&nobits).unwrap();
        // One program header (all zero: an empty segment) of ELF64's 56 bytes, or of 64.
        let mut segment = ok.clone();
        segment[0x20..0x28].copy_from_slice(&264u64.to_le_bytes()); // e_phoff
        segment[0x36..0x38].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        segment[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        validate_binary(&segment).unwrap();
        segment[0x36..0x38].copy_from_slice(&64u16.to_le_bytes());
        let e = validate_binary(&segment).unwrap_err();
        assert!(
            e.message().contains("program headers are 64 bytes each"),
            "{e}"
        );
        let mut class32 = ok.clone();
        class32[4] = 1;
        assert!(validate_binary(&class32)
            .unwrap_err()
            .message()
            .contains("64-bit"));

        // A fatbin header with no entries passes (the driver then finds no image for the
        // device); one declaring more than the bytes hold does not.
        let mut fatbin = vec![0u8; 16];
        fatbin[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        fatbin[6..8].copy_from_slice(&16u16.to_le_bytes());
        validate_binary(&fatbin).unwrap();
        fatbin[8..16].copy_from_slice(&49u64.to_le_bytes());
        let e = validate_binary(&fatbin).unwrap_err();
        assert!(e.message().contains("its entries end at byte 65"), "{e}");
        // Nothing may follow the fatbin's declared end.
        fatbin[8..16].fill(0);
        fatbin.push(0);
        let e = validate_binary(&fatbin).unwrap_err();
        assert!(e.message().contains("1 bytes follow it"), "{e}");

        let e = validate_binary(PTX.as_bytes()).unwrap_err();
        assert!(e.message().contains("looks like PTX"), "{e}");
        let e = validate_binary(&[1, 2, 3]).unwrap_err();
        assert!(e.message().contains("starts with [01 02 03]"), "{e}");
    }

    /// ELF section types the corruptions look for.
    const SHT_SYMTAB: u64 = 2;
    const SHT_RELA: u64 = 4;

    /// ptxas 12.8's cubin of tests/kernels/standard.ptx for sm_90: a real image, to corrupt.
    const CUBIN: &[u8] = include_bytes!("../tests/kernels/standard.sm_90.cubin");

    /// The byte offset of section `index`'s header in `image`.
    fn header(image: &[u8], index: u64) -> usize {
        (le(image, 0x28, 8) + index * le(image, 0x3a, 2)) as usize
    }

    /// The index of the first section of ELF type `kind` in `image`.
    fn first_of(image: &[u8], kind: u64) -> u64 {
        (0..le(image, 0x3c, 2))
            .find(|&i| le(image, header(image, i) + 4, 4) == kind)
            .unwrap()
    }

    /// [`CUBIN`] with `value` written over `width` bytes at `at`.
    fn patched(at: usize, width: usize, value: u64) -> Vec<u8> {
        patched_image(CUBIN, at, width, value)
    }

    /// `image` with `value` written over `width` bytes at `at`.
    fn patched_image(image: &[u8], at: usize, width: usize, value: u64) -> Vec<u8> {
        let mut image = image.to_vec();
        image[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        image
    }

    #[test]
    fn a_real_cubin_passes_and_its_inner_references_are_checked() {
        validate_binary(CUBIN).unwrap();
        CudaModule::cubin(CUBIN, vec![entry("add_one_u32", 1, 1)])
            .validate()
            .unwrap();
        let symtab = first_of(CUBIN, SHT_SYMTAB);
        let rela = first_of(CUBIN, SHT_RELA);
        let sym_at = |n: u64| le(CUBIN, header(CUBIN, symtab) + 0x18, 8) as usize + 24 * n as usize;
        let rela_at = le(CUBIN, header(CUBIN, rela) + 0x18, 8) as usize;
        let cases: Vec<(Vec<u8>, String)> = vec![
            (
                patched(0x3e, 2, 99),
                "the section-name table is section 99".into(),
            ),
            (
                patched(0x3e, 2, symtab),
                "not a string table (type 2)".into(),
            ),
            (
                patched(header(CUBIN, 2), 4, 1 << 20),
                "section 2's name lies at byte 1048576".into(),
            ),
            (
                patched(header(CUBIN, 4) + 0x28, 4, 300),
                "section 4's link is section 300".into(),
            ),
            (
                patched(header(CUBIN, symtab) + 0x38, 8, 16),
                format!("symbol table {symtab} has 16-byte entries"),
            ),
            (
                patched(sym_at(1), 4, 1 << 20),
                format!("symbol 1 of table {symtab} has its name at byte 1048576"),
            ),
            (
                patched(sym_at(1) + 6, 2, 500),
                format!("symbol 1 of table {symtab} lies in section 500"),
            ),
            (
                patched(rela_at + 12, 4, 1000),
                format!("relocation 0 of table {rela} names symbol 1000"),
            ),
            (
                patched(header(CUBIN, rela) + 0x28, 4, 0),
                format!("relocation table {rela} names section 0 for its symbols"),
            ),
            (
                patched(header(CUBIN, rela) + 0x2c, 4, 77),
                format!("the section relocation table {rela} applies to is section 77"),
            ),
            (patched(0x3c, 2, 0), "extended section numbering".into()),
        ];
        for (image, expected) in cases {
            let e = validate_binary(&image).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains("cubin image is corrupt"), "{e}");
            assert!(
                e.message().contains(&expected),
                "expected {expected:?}: {e}"
            );
        }
        // A symbol in a reserved section (absolute, common) is not a section reference.
        validate_binary(&patched(sym_at(1) + 6, 2, 0xfff1)).unwrap();
    }

    /// fatbinary 13.0's fatbin of [`CUBIN`] (sm_90) and tests/kernels/standard.ptx
    /// (compute_52), uncompressed: `fatbinary --64 --compress=false
    /// --image3=kind=elf,sm=90,file=standard.sm_90.cubin
    /// --image3=kind=ptx,sm=52,file=standard.ptx --create=standard.fatbin`.
    const FATBIN: &[u8] = include_bytes!("../tests/kernels/standard.fatbin");
    /// The same with `--compress-all` (zstd): entries flagged compressed.
    const COMPRESSED_FATBIN: &[u8] = include_bytes!("../tests/kernels/standard.compressed.fatbin");

    /// The byte offsets of `fatbin`'s entries.
    fn fatbin_entries(fatbin: &[u8]) -> Vec<usize> {
        let end = (le(fatbin, 6, 2) + le(fatbin, 8, 8)) as usize;
        let mut at = le(fatbin, 6, 2) as usize;
        let mut entries = Vec::new();
        while at < end {
            entries.push(at);
            at += (le(fatbin, at + 4, 4) + le(fatbin, at + 8, 8)) as usize;
        }
        entries
    }

    /// [`FATBIN`] with `value` written over `width` bytes at `at`.
    fn patched_fatbin(at: usize, width: usize, value: u64) -> Vec<u8> {
        patched_image(FATBIN, at, width, value)
    }

    #[test]
    fn a_real_fatbin_passes_and_its_entries_are_checked() {
        for fatbin in [FATBIN, COMPRESSED_FATBIN] {
            validate_binary(fatbin).unwrap();
            CudaModule::cubin(fatbin, vec![entry("add_one_u32", 1, 1)])
                .validate()
                .unwrap();
        }
        let entries = fatbin_entries(FATBIN);
        let (cubin, ptx) = (entries[0], entries[1]);
        assert_eq!((le(FATBIN, cubin, 2), le(FATBIN, ptx, 2)), (2, 1));
        // The cubin entry's payload is the cubin.
        let cubin_at = cubin + le(FATBIN, cubin + 4, 4) as usize;
        assert_eq!(&FATBIN[cubin_at..cubin_at + CUBIN.len()], CUBIN);
        let ptx_end = ptx + (le(FATBIN, ptx + 4, 4) + le(FATBIN, ptx + 8, 8)) as usize;
        assert_eq!(ptx_end, FATBIN.len());
        let trailing_nuls = FATBIN.iter().rposition(|&b| b != 0).unwrap() + 1;

        let cases: Vec<(Vec<u8>, String)> = vec![
            (
                FATBIN[..FATBIN.len() - 8].to_vec(),
                format!("its entries end at byte {}", FATBIN.len()),
            ),
            (
                patched_fatbin(6, 2, 8),
                "declares itself 8 bytes long".into(),
            ),
            (
                patched_fatbin(ptx + 8, 8, 1 << 20),
                format!(
                    "fatbin entry 1 (at byte {ptx}) extends to byte {}, past the entries' end",
                    ptx + le(FATBIN, ptx + 4, 4) as usize + (1 << 20)
                ),
            ),
            (
                patched_fatbin(cubin + 4, 4, 8),
                format!("fatbin entry 0 (at byte {cubin}) declares a 8-byte header"),
            ),
            (
                // The entries' size cut to end inside the second entry's header.
                patched_fatbin(8, 8, (ptx + 8 - 16) as u64),
                format!("fatbin entry 1 (at byte {ptx}) has 8 bytes left for its 64-byte header"),
            ),
            (
                // The inner cubin's section-name table index (e_shstrndx) made out of range.
                patched_fatbin(cubin_at + 0x3e, 2, 99),
                format!(
                    "fatbin entry 0 (a cubin for sm_90, bytes {cubin_at}..{ptx}): cubin image is \
                     corrupt: the section-name table is section 99"
                ),
            ),
            (
                // The inner cubin's section header table moved past its payload.
                patched_fatbin(cubin_at + 0x28, 8, CUBIN.len() as u64),
                "fatbin entry 0 (a cubin for sm_90".into(),
            ),
            (
                // The PTX's terminating NUL (and padding) overwritten.
                {
                    let mut image = FATBIN.to_vec();
                    image[trailing_nuls..].fill(b'\n');
                    image
                },
                format!(
                    "fatbin entry 1 (at byte {ptx}) holds {} bytes of PTX without the \
                     terminating NUL",
                    le(FATBIN, ptx + 8, 8)
                ),
            ),
        ];
        for (image, expected) in cases {
            let e = validate_binary(&image).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(
                e.message().contains(&expected),
                "expected {expected:?}: {e}"
            );
        }
        // Compressed payloads are bounds-checked only: zstd bytes are not an ELF file.
        let entries = fatbin_entries(COMPRESSED_FATBIN);
        assert_eq!(
            le(COMPRESSED_FATBIN, entries[0] + 40, 8) & FATBIN_COMPRESSED,
            0x8000
        );
        let truncated = patched_image(COMPRESSED_FATBIN, entries[1] + 8, 8, 1 << 16);
        let e = validate_binary(&truncated).unwrap_err();
        assert!(e.message().contains("fatbin entry 1"), "{e}");
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
    }

    #[test]
    fn ptx_kernels_with_one_more_pointer_take_a_status_word() {
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
        // Loading (validation, no GPU) refuses a PTX signature that matches neither.
        let e = CudaModule::ptx(PARAMS_PTX, vec![entry("saxpy_f32", 2, 1)])
            .validate()
            .unwrap_err();
        assert!(
            e.message()
                .contains("takes 4 parameters of sizes [8, 8, 4, 4]"),
            "{e}"
        );
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
        assert!(e.message().contains("CudaImage::Cubin"), "{e}");
        let bytes = CudaModule::ptx(elf_text, vec![entry("k", 1, 0)]).to_bytes();
        CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, bytes)).unwrap_err();
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

    #[test]
    fn ptx_using_the_preprocessor_is_refused() {
        let head = ".version 8.0\n.target sm_52\n.address_size 64\n";
        let kernel = ".visible .entry k(.param .u64 a, .param .u32 n)\n{\n\tret;\n}\n";
        for (text, what) in [
            (
                format!("{head}#define u32 u64\n{kernel}"),
                "`#define` on line 4",
            ),
            (
                format!("{head}#if 0\n{kernel}#else\n{kernel}#endif\n"),
                "`#if` on line 4",
            ),
            (
                format!("{head}  \t#include \"x.ptx\"\n{kernel}"),
                "`#include` on line 4",
            ),
            (
                format!("{head}/* x */ # define u32 u64\n{kernel}"),
                "`#` on line 4",
            ),
            (
                format!("{head}%:define u32 u64\n{kernel}"),
                "`%:define` on line 4",
            ),
            (
                format!("{head}.visible .entry j()\r#define u32 u64\r{kernel}"),
                "on line 4",
            ),
            (
                // A comment marker in a string starts no comment: the directive is code.
                format!("{head}.file 1 \"/*\"\n#define u32 u64\n// */\n{kernel}"),
                "`#define` on line 5",
            ),
            (
                // A line continuation would hide the first definition of `k` in a comment.
                format!("{head}// x \\\n{kernel}.visible .entry k(.param .u64 a, .param .u64 b)\n"),
                "a line continuation (a backslash ending line 4, at byte offset 49)",
            ),
            (
                format!("{head}.visible .entry \\  \nk(.param .u64 a)\n"),
                "ending line 4",
            ),
        ] {
            let e = ptx_error(&text, vec![entry("k", 1, 1)]);
            assert!(e.message().contains("uses the C preprocessor"), "{e}");
            assert!(e.message().contains(what), "expected {what:?}: {e}");
            assert!(
                e.message()
                    .contains("cannot follow preprocessor directives")
                    && e.message().contains("preprocess the PTX first"),
                "{e}"
            );
        }
        // In comments, directives and continuations (between line comments) are text.
        let commented = format!(
            "{head}// #define u32 u64\n/*\n#if 0\n*/ // a \\\n// b \\  \r\n\t// c\n{kernel}"
        );
        CudaModule::ptx(commented, vec![entry("k", 1, 1)])
            .validate()
            .unwrap();
        // The checked-in PTX (NVRTC's) uses none of it.
        for text in [
            include_str!("../tests/kernels/standard.ptx"),
            include_str!("../tests/kernels/shared.ptx"),
        ] {
            assert_eq!(ptx_preprocessor_use(text), None);
            assert!(!ptx_entries(text).is_empty());
        }
    }

    #[test]
    fn fatbin_fixture_fields_are_what_the_checks_read() {
        // (kind, header size, payload size, compressed size, options offset, arch,
        // object-name offset and length, flags, uncompressed size) of each entry.
        let fields = |fatbin: &[u8]| -> Vec<[u64; 10]> {
            fatbin_entries(fatbin)
                .into_iter()
                .map(|at| {
                    [
                        (0, 2),
                        (4, 4),
                        (8, 8),
                        (16, 4),
                        (20, 4),
                        (28, 4),
                        (32, 4),
                        (36, 4),
                        (40, 8),
                        (56, 8),
                    ]
                    .map(|(offset, width)| le(fatbin, at + offset, width))
                })
                .collect()
        };
        assert_eq!(
            fields(FATBIN),
            [
                [2, 64, 7752, 0, 0, 90, 0, 0, 0x11, 0],
                [1, 80, 1712, 0, 64, 52, 0, 0, 0x11, 0]
            ]
        );
        assert_eq!(
            fields(COMPRESSED_FATBIN),
            [
                [2, 64, 1216, 1215, 0, 90, 0, 0, 0x8011, 7752],
                [1, 80, 536, 531, 64, 52, 0, 0, 0x8011, 1705]
            ]
        );
        for fatbin in [FATBIN, COMPRESSED_FATBIN] {
            // The PTX entry's options pair, at its options offset: an empty string at 72.
            let ptx = fatbin_entries(fatbin)[1];
            assert_eq!((le(fatbin, ptx + 64, 4), le(fatbin, ptx + 68, 4)), (72, 0));
            // Nothing follows the declared end.
            assert_eq!((le(fatbin, 6, 2) + le(fatbin, 8, 8)) as usize, fatbin.len());
        }
    }

    #[test]
    fn fatbin_entry_headers_must_agree_with_their_payloads() {
        let entries = fatbin_entries(FATBIN);
        let (cubin, ptx) = (entries[0], entries[1]);
        let cubin_at = cubin + 64;
        let compressed = fatbin_entries(COMPRESSED_FATBIN);
        let mut tiny = vec![0u8; 32];
        tiny[..4].copy_from_slice(&FATBIN_MAGIC.to_le_bytes());
        tiny[4] = 1;
        tiny[6] = 16;
        tiny[8] = 16;
        tiny[16] = 2;
        tiny[20] = 16;
        let mut nested = FATBIN.to_vec();
        nested[cubin_at..cubin_at + 16].copy_from_slice(&tiny[..16]);
        nested[cubin_at + 8..cubin_at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let mut concatenated = FATBIN.to_vec();
        concatenated.extend_from_slice(&FATBIN[..16]);
        // The cubin entry flagged compressed (sizes to match) still holds an ELF file, and
        // the driver may take it for one: it is checked as a cubin.
        let flagged = patched_image(
            &patched_image(
                &patched_image(&patched_fatbin(cubin + 40, 8, 0x8011), cubin + 56, 8, 7752),
                cubin + 16,
                4,
                7752,
            ),
            cubin_at + 0x3e,
            2,
            99,
        );
        let cases: Vec<(Vec<u8>, String)> = vec![
            (tiny, "has 16 bytes left for its 64-byte header".into()),
            (
                patched_image(COMPRESSED_FATBIN, compressed[1] + 16, 4, 0xffff_fff0),
                format!(
                    "fatbin entry 1 (at byte {}) declares 4294967280 compressed bytes in a \
                     536-byte payload",
                    compressed[1]
                ),
            ),
            (
                patched_image(COMPRESSED_FATBIN, compressed[0] + 56, 8, 0),
                "has flags 0x8011 (compressed) but an uncompressed size of 0".into(),
            ),
            (
                // Flags saying uncompressed, with an uncompressed size: the cubin check would
                // have been skipped.
                patched_image(
                    &patched_fatbin(cubin_at + 0x28, 8, 1 << 40),
                    cubin + 56,
                    8,
                    1,
                ),
                format!(
                    "fatbin entry 0 (at byte {cubin}) has flags 0x11 (not compressed) but an \
                     uncompressed size of 1"
                ),
            ),
            (
                patched_fatbin(ptx + 20, 4, 0x7fff_fff0),
                format!(
                    "fatbin entry 1 (at byte {ptx}) has its options offset/size pair (8 bytes \
                     at byte 2147483632 of the entry) past the entry's 1792 bytes"
                ),
            ),
            (
                patched_image(
                    &patched_fatbin(ptx + 64, 4, 0x7fff_fff0),
                    ptx + 68,
                    4,
                    1 << 28,
                ),
                "has its ptxas options (268435456 bytes at byte 2147483632".into(),
            ),
            (
                patched_fatbin(ptx + 68, 4, 1721),
                "has its ptxas options (1721 bytes at byte 72 of the entry) past the entry's \
                 1792 bytes"
                    .into(),
            ),
            (
                patched_image(
                    &patched_fatbin(cubin + 32, 4, 0x7fff_fff0),
                    cubin + 36,
                    4,
                    4096,
                ),
                format!(
                    "fatbin entry 0 (at byte {cubin}) has its object name (4096 bytes at byte \
                     2147483632 of the entry) past the entry's 7816 bytes"
                ),
            ),
            (
                patched_fatbin(cubin + 36, 4, 7817),
                "has its object name (7817 bytes at byte 0 of the entry)".into(),
            ),
            (
                nested,
                format!(
                    "fatbin entry 0 (at byte {cubin}) is an uncompressed cubin entry (kind 2) \
                     whose payload is not an ELF file (it starts with [50 ed 55 ba])"
                ),
            ),
            (
                flagged,
                "fatbin entry 0 (a cubin for sm_90, bytes 80..7832): cubin image is corrupt: \
                 the section-name table is section 99"
                    .into(),
            ),
            (
                concatenated,
                format!(
                    "fatbin image is {} bytes but the fatbin ends at byte {}",
                    FATBIN.len() + 16,
                    FATBIN.len()
                ),
            ),
        ];
        for (image, expected) in cases {
            let e = validate_binary(&image).expect_err(&expected);
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(
                e.message().contains(&expected),
                "expected {expected:?}: {e}"
            );
        }
        // A PTX entry with the cubin's kind: refused as not an ELF file; an ELF payload in a
        // PTX entry with a corrupt ELF: refused by the cubin check.
        let e = validate_binary(&patched_fatbin(ptx, 2, 2)).unwrap_err();
        assert!(e.message().contains("is not an ELF file"), "{e}");
        let kind_ptx = patched_image(&patched_fatbin(cubin, 2, 1), cubin_at + 0x3e, 2, 99);
        let e = validate_binary(&kind_ptx).unwrap_err();
        assert!(
            e.message().contains("the section-name table is section 99"),
            "{e}"
        );
        // Offsets within the entry pass: a PTX entry whose options string runs to the entry's
        // end, a cubin entry naming itself with its payload's first byte.
        validate_binary(&patched_fatbin(ptx + 68, 4, 1720)).unwrap();
        validate_binary(&patched_image(
            &patched_fatbin(cubin + 32, 4, 64),
            cubin + 36,
            4,
            1,
        ))
        .unwrap();
    }

    #[test]
    fn cubin_headers_and_segments_are_checked() {
        let phoff = le(CUBIN, 0x20, 8) as usize;
        let segment = |n: usize| phoff + 56 * n;
        let (shoff, len) = (le(CUBIN, 0x28, 8), CUBIN.len() as u64);
        let cases: Vec<(Vec<u8>, String)> = vec![
            (
                patched(segment(2) + 0x20, 8, len),
                format!(
                    "segment 2 extends to byte {}",
                    le(CUBIN, segment(2) + 8, 8) + len
                ),
            ),
            (
                patched(segment(4) + 8, 8, len - 100),
                format!(
                    "segment 4 extends to byte {}",
                    len - 100 + le(CUBIN, segment(4) + 0x20, 8)
                ),
            ),
            (
                patched(0x20, 8, len - 56),
                format!("program header table extends to byte {}", len - 56 + 5 * 56),
            ),
            (
                patched(0x36, 2, 64),
                "program headers are 64 bytes each".into(),
            ),
            (
                patched(0x36, 2, 48),
                "program headers are 48 bytes each".into(),
            ),
            (
                patched(0x3a, 2, 72),
                "section headers are 72 bytes each".into(),
            ),
            (
                patched(0x38, 2, 0xffff),
                "extended program-header numbering (e_phnum 0xffff)".into(),
            ),
            (
                patched(0x3e, 2, 0),
                "21 sections but no section-name table (e_shstrndx 0, SHN_UNDEF)".into(),
            ),
            (
                // .nv.info.<kernel> names its kernel's code section through sh_info.
                patched(header(CUBIN, 6) + 0x2c, 4, 100_000),
                "section 6's info link (sh_info, flagged SHF_INFO_LINK) is section 100000, \
                 but the image has 21 sections"
                    .into(),
            ),
            (
                patched(header(CUBIN, 17) + 0x2c, 4, 21),
                "section 17's info link (sh_info, flagged SHF_INFO_LINK) is section 21".into(),
            ),
        ];
        for (image, expected) in cases {
            let e = validate_binary(&image).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains("cubin image is"), "{e}");
            assert!(
                e.message().contains(&expected),
                "expected {expected:?}: {e}"
            );
        }
        assert!(shoff > 0);
        // The review's image: no name table, and section 0 made a section whose name would
        // be read from wherever.
        let mut image = patched(0x3e, 2, 0);
        let sh0 = header(CUBIN, 0);
        image[sh0 + 4..sh0 + 8].copy_from_slice(&1u32.to_le_bytes());
        image[sh0 + 0x18..sh0 + 0x20].copy_from_slice(&(len - 1).to_le_bytes());
        image[sh0 + 0x20..sh0 + 0x28].copy_from_slice(&1u64.to_le_bytes());
        let image = patched_image(&image, header(CUBIN, 5), 4, 0x7fff_0000);
        validate_binary(&image).unwrap_err();
        // The shared check refuses extended program-header numbering for every backend.
        let e = halcyon::backend::elf::check_references(&patched(0x38, 2, 0xffff)).unwrap_err();
        assert!(e.contains("e_phnum 0xffff"), "{e}");
        // Every SHF_INFO_LINK section of the real cubin names a section that exists.
        let linked: Vec<u64> = (0..le(CUBIN, 0x3c, 2))
            .filter(|&i| le(CUBIN, header(CUBIN, i) + 8, 8) & 0x40 != 0)
            .collect();
        assert_eq!(linked, [6, 7, 8, 9, 11, 17, 18, 19, 20]);
    }
}
