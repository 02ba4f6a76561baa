//! What halcyon reads of AMDGPU code objects and clang offload bundles, in one place: the ELF
//! header and the kernel metadata of a code object, the entry table of a bundle.
//!
//! This is no validation. A code object is handed to `hipModuleLoadData`, which reads it
//! unchecked, so it enters through the `unsafe`
//! [`HipModule::from_code_object_unchecked`](crate::HipModule::from_code_object_unchecked)
//! (or comes from hiprtc, which halcyon ran itself). What is read here serves the cheap checks
//! that catch honest mistakes on both paths, and dispatch:
//!
//! * the ELF header (through [`object`]): an AMDGPU (`e_machine` 224), HSA, 64-bit,
//!   little-endian shared object of code object v3 or later, whose section and segment
//!   headers, and what they describe, lie inside the bytes;
//! * the `NT_AMDGPU_METADATA` note (owner `AMDGPU`, type 32; in a `SHT_NOTE` section, else a
//!   `PT_NOTE` segment), decoded from MessagePack by [`rmpv`]: each kernel's `.name`,
//!   `.symbol`, `.args` (`.size`, `.offset`, `.value_kind`), `.max_flat_workgroup_size`,
//!   `.reqd_workgroup_size` and `.group_segment_fixed_size`. Entry points are checked against
//!   it ([`CodeObject::check_entry_point`]), and it says which kernels take a status word;
//! * an offload bundle's table (`__CLANG_OFFLOAD_BUNDLE__`, what `hipcc --genco` writes): each
//!   entry's byte range must lie inside the bundle, and every entry of a kind HIP loads
//!   (`hip`, `hipv4`, `hcc`: the entry ID up to its first `-`) is read as a code object, whose
//!   kernels every entry point must match. Which entry HIP loads is HIP's choice, by the
//!   device's architecture; nothing here reads target IDs out of entry IDs;
//! * a compressed bundle (`CCOB`, clang `--offload-compress`) is passed through unread: its
//!   code objects are compressed, so no kernel metadata is checked, and each of its kernels is
//!   launched with a status word pointer after its constants ([`Image::check_entry_point`]).

use halcyon::{EntryPoint, Error, Result, StatusCode};
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::LittleEndian as LE;

/// `e_machine` of AMDGPU code objects.
pub const EM_AMDGPU: u16 = elf::EM_AMDGPU;

const OFFLOAD_BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// A compressed offload bundle (clang `--offload-compress`).
const COMPRESSED_BUNDLE_MAGIC: &[u8] = b"CCOB";
/// `ELFOSABI_AMDGPU_HSA`.
const OSABI_AMDGPU_HSA: u8 = 64;
/// `NT_AMDGPU_METADATA`: the MessagePack kernel metadata of code object v3 and later.
const NT_AMDGPU_METADATA: u32 = 32;
/// Workgroup size limit of a kernel without `__launch_bounds__` / `amdgpu-flat-work-group-size`.
const DEFAULT_MAX_FLAT_WORKGROUP_SIZE: u32 = 1024;
/// How deep the metadata's MessagePack may nest (it nests four levels).
const MAX_METADATA_DEPTH: usize = 32;
/// The host entry clang writes into every HIP offload bundle.
const HOST_TRIPLE: &str = "host-x86_64-unknown-linux";

fn invalid(message: impl Into<String>) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

/// One explicit or hidden kernel argument, from the code object's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelArg {
    /// `.value_kind`: `global_buffer` (a pointer), `by_value`, `hidden_global_offset_x`, ...
    pub value_kind: String,
    /// `.size` in bytes.
    pub size: u64,
    /// `.offset` in the kernel argument segment.
    pub offset: u64,
}

impl KernelArg {
    /// Whether the runtime supplies it (hidden arguments follow the explicit ones).
    pub fn is_hidden(&self) -> bool {
        self.value_kind.starts_with("hidden_")
    }
}

/// A kernel of a code object, from its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// The symbol `hipModuleGetFunction` finds it by (`.symbol` without `.kd`).
    pub symbol: String,
    /// The source-level name (`.name`); differs from the symbol for C++-mangled kernels.
    pub name: String,
    /// Every argument, explicit then hidden.
    pub args: Vec<KernelArg>,
    /// `.max_flat_workgroup_size` (1024 when absent).
    pub max_flat_workgroup_size: u32,
    /// `.reqd_workgroup_size`, when the kernel requires one.
    pub reqd_workgroup_size: Option<[u32; 3]>,
    /// `.group_segment_fixed_size`: the static shared memory (LDS) a block of it uses, in
    /// bytes (0 when absent); dynamic shared memory comes on top.
    pub group_segment_fixed_size: u32,
}

impl KernelInfo {
    /// The explicit arguments (what a launch passes).
    pub fn explicit_args(&self) -> impl Iterator<Item = &KernelArg> {
        self.args.iter().filter(|a| !a.is_hidden())
    }
}

/// What a code object says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObject {
    /// The target it was compiled for, from `e_flags` ([`target_id`]), for messages.
    pub target: String,
    /// The code object version (3, 4, 5, ...).
    pub version: u32,
    /// Its kernels.
    pub kernels: Vec<KernelInfo>,
}

impl CodeObject {
    /// Reads the ELF header and the kernel metadata of `bytes` (see the
    /// [module docs](self)); `InvalidArgument` naming what is wrong otherwise.
    pub fn parse(bytes: &[u8]) -> Result<CodeObject> {
        let header = elf_header(bytes)?;
        let version = u32::from(header.e_ident().abi_version) + 2;
        let target = target_id(header.e_flags(LE), version);
        let malformed = |what: String| {
            invalid(format!(
                "truncated or malformed {target} code object ({} bytes): {what}",
                bytes.len()
            ))
        };
        // The extents of everything the headers describe; the notes are looked for meanwhile.
        let sections = header
            .sections(LE, bytes)
            .map_err(|e| malformed(format!("its section headers: {e}")))?;
        let mut metadata = None;
        for (index, section) in sections.enumerate() {
            section.data(LE, bytes).map_err(|_| {
                malformed(format!(
                    "section {} ({} bytes at offset {}) extends past the end",
                    index.0,
                    section.sh_size(LE),
                    section.sh_offset(LE)
                ))
            })?;
            if let Some(notes) = section
                .notes(LE, bytes)
                .map_err(|e| malformed(format!("note section {}: {e}", index.0)))?
            {
                metadata = metadata.or(metadata_note(notes).map_err(&malformed)?);
            }
        }
        let segments = header
            .program_headers(LE, bytes)
            .map_err(|e| malformed(format!("its program headers: {e}")))?;
        for (index, segment) in segments.iter().enumerate() {
            segment.data(LE, bytes).map_err(|_| {
                malformed(format!(
                    "segment {index} ({} bytes at offset {}) extends past the end",
                    segment.p_filesz(LE),
                    segment.p_offset(LE)
                ))
            })?;
            if metadata.is_none() {
                if let Some(notes) = segment
                    .notes(LE, bytes)
                    .map_err(|e| malformed(format!("note segment {index}: {e}")))?
                {
                    metadata = metadata_note(notes).map_err(&malformed)?;
                }
            }
        }
        let metadata = metadata.ok_or_else(|| {
            invalid(format!(
                "the {target} code object has no NT_AMDGPU_METADATA note, so its kernels' \
                 arguments cannot be checked"
            ))
        })?;
        let kernels = parse_kernels(metadata)
            .map_err(|e| invalid(format!("the {target} code object's kernel metadata: {e}")))?;
        Ok(CodeObject {
            target,
            version,
            kernels,
        })
    }

    /// The kernels' symbol names.
    pub fn kernel_names(&self) -> Vec<&str> {
        self.kernels.iter().map(|k| k.symbol.as_str()).collect()
    }

    /// The kernel whose symbol is `symbol`.
    pub fn kernel(&self, symbol: &str) -> Option<&KernelInfo> {
        self.kernels.iter().find(|k| k.symbol == symbol)
    }

    /// Checks `entry` against the kernel of that symbol: it exists, its workgroup size fits
    /// the kernel's `.max_flat_workgroup_size` and equals its `.reqd_workgroup_size` if it has
    /// one, and its explicit arguments are `binding_count` 8-byte global pointers then
    /// `constant_count` 4-byte values, optionally followed by one more 8-byte global pointer,
    /// the status word (a mismatch would make `hipModuleLaunchKernel` read the wrong number of
    /// argument pointers). Returns whether the kernel takes the status word.
    pub fn check_entry_point(&self, entry: &EntryPoint) -> Result<bool> {
        let name = &entry.name;
        let Some(kernel) = self.kernel(name) else {
            if let Some(k) = self.kernels.iter().find(|k| k.name == *name) {
                return Err(Error::new(
                    StatusCode::NotFound,
                    format!(
                        "kernel '{name}' of the {} code object has the C++-mangled symbol \
                         '{}': declare it extern \"C\" or name the entry point '{}'",
                        self.target, k.symbol, k.symbol
                    ),
                ));
            }
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "the {} code object has no kernel '{name}'; it has: [{}]",
                    self.target,
                    self.kernel_names().join(", ")
                ),
            ));
        };
        let [x, y, z] = entry.workgroup_size;
        if x == 0 || y == 0 || z == 0 {
            return Err(invalid(format!(
                "entry point '{name}' has workgroup size {:?}; every dimension must be at least 1",
                entry.workgroup_size
            )));
        }
        // Three u32s multiply to at most 2^96: u128 cannot overflow.
        let threads = u128::from(x) * u128::from(y) * u128::from(z);
        if threads > u128::from(kernel.max_flat_workgroup_size) {
            return Err(invalid(format!(
                "entry point '{name}' has workgroup size {:?} ({threads} threads), but kernel \
                 '{name}' was compiled for at most {} threads per workgroup (raise it with \
                 __launch_bounds__)",
                entry.workgroup_size, kernel.max_flat_workgroup_size
            )));
        }
        if let Some(reqd) = kernel.reqd_workgroup_size {
            if reqd != entry.workgroup_size {
                return Err(invalid(format!(
                    "entry point '{name}' has workgroup size {:?}, but kernel '{name}' requires \
                     {reqd:?}",
                    entry.workgroup_size
                )));
            }
        }
        let explicit: Vec<&KernelArg> = kernel.explicit_args().collect();
        let expected = entry.binding_count as usize + entry.constant_count as usize;
        let pointer = |arg: &KernelArg| arg.value_kind == "global_buffer" && arg.size == 8;
        let status_word = explicit.len() == expected + 1 && pointer(explicit[expected]);
        let matches = (explicit.len() == expected || status_word)
            && explicit[..expected].iter().enumerate().all(|(i, arg)| {
                if i < entry.binding_count as usize {
                    pointer(arg)
                } else {
                    arg.value_kind == "by_value" && arg.size == 4
                }
            });
        if !matches {
            let found: Vec<String> = explicit
                .iter()
                .map(|a| format!("{} ({} bytes)", a.value_kind, a.size))
                .collect();
            return Err(invalid(format!(
                "entry point '{name}' declares {} bindings and {} constants, so its kernel must \
                 take {} global pointers then {} 4-byte values (then optionally one more global \
                 pointer, the status word); kernel '{name}' takes [{}]",
                entry.binding_count,
                entry.constant_count,
                entry.binding_count,
                entry.constant_count,
                found.join(", ")
            )));
        }
        Ok(status_word)
    }
}

/// The ELF header of an AMDGPU HSA code object, after the checks that name honest mistakes
/// (a host object, a relocatable object, a graphics shader, code object v2).
fn elf_header(bytes: &[u8]) -> Result<&elf::FileHeader64<LE>> {
    if bytes.starts_with(OFFLOAD_BUNDLE_MAGIC) {
        return Err(invalid(
            "this is a clang offload bundle, not a single code object: bundles are read by \
             Image::read, and do not nest",
        ));
    }
    if !bytes.starts_with(&elf::ELFMAG) {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(invalid(format!(
            "not an AMDGPU code object: it does not start with the ELF magic 7f 45 4c 46 \
             (it starts with [{}], {} bytes in all)",
            head.join(" "),
            bytes.len()
        )));
    }
    let header: &elf::FileHeader64<LE> = object::pod::from_bytes(bytes)
        .map_err(|()| {
            invalid(format!(
                "truncated code object: {} bytes, shorter than an ELF64 header (64)",
                bytes.len()
            ))
        })?
        .0;
    let ident = header.e_ident();
    if ident.class != elf::ELFCLASS64 {
        return Err(invalid(format!(
            "not an AMDGPU code object: EI_CLASS {} (a 32-bit ELF is 1); AMDGPU code objects \
             are 64-bit (2)",
            ident.class
        )));
    }
    if ident.data != elf::ELFDATA2LSB {
        return Err(invalid(format!(
            "not an AMDGPU code object: EI_DATA {} (AMDGPU code objects are little-endian, 1)",
            ident.data
        )));
    }
    elf::FileHeader64::<LE>::parse(bytes)
        .map_err(|e| invalid(format!("not an AMDGPU code object: {e}")))?;
    let machine = header.e_machine(LE);
    if machine != EM_AMDGPU {
        let what = match machine {
            elf::EM_X86_64 => " (x86-64: a host object?)",
            elf::EM_AARCH64 => " (AArch64: a host object?)",
            elf::EM_CUDA => " (NVIDIA CUDA)",
            _ => "",
        };
        return Err(invalid(format!(
            "not an AMDGPU code object: e_machine is {machine}{what}, not EM_AMDGPU \
             ({EM_AMDGPU})"
        )));
    }
    if ident.os_abi != OSABI_AMDGPU_HSA {
        let what = match ident.os_abi {
            65 => " (AMDGPU PAL: a graphics shader)",
            66 => " (Mesa3D)",
            _ => "",
        };
        return Err(invalid(format!(
            "not a HIP code object: OS ABI {}{what}, not AMDGPU HSA ({OSABI_AMDGPU_HSA})",
            ident.os_abi
        )));
    }
    let kind = header.e_type(LE);
    if kind != elf::ET_DYN {
        let what = if kind == elf::ET_REL {
            "a relocatable object (clang -c output): link it into a code object (ld.lld -shared)"
                .to_string()
        } else {
            format!("ELF type {kind}")
        };
        return Err(invalid(format!(
            "not a loadable code object: {what}; hipModuleLoadData needs a shared object \
             (ET_DYN)"
        )));
    }
    if ident.abi_version == 0 {
        return Err(invalid(
            "code object v2 (YAML metadata) is not supported: compile for code object v3 or \
             later (-mcode-object-version=4)",
        ));
    }
    Ok(header)
}

/// The descriptor of the `AMDGPU` / `NT_AMDGPU_METADATA` note among `notes`, if there is one.
fn metadata_note<'a>(
    mut notes: object::read::elf::NoteIterator<'a, elf::FileHeader64<LE>>,
) -> std::result::Result<Option<&'a [u8]>, String> {
    while let Some(note) = notes.next().map_err(|e| e.to_string())? {
        if note.name() == b"AMDGPU" && note.n_type(LE) == NT_AMDGPU_METADATA {
            return Ok(Some(note.desc()));
        }
    }
    Ok(None)
}

/// The value of string key `key` of a MessagePack map.
fn field<'v>(map: &'v rmpv::Value, key: &str) -> Option<&'v rmpv::Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// A `u32` field of `map`: `default` when absent, an error naming it when not a `u32`.
fn u32_field(map: &rmpv::Value, key: &str, kernel: &str, default: u32) -> Result<u32, String> {
    field(map, key).map_or(Ok(default), |v| {
        v.as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| format!("kernel {kernel}: {key} is not a u32"))
    })
}

/// The kernels of a `NT_AMDGPU_METADATA` note (MessagePack, decoded by [`rmpv`]).
fn parse_kernels(note: &[u8]) -> std::result::Result<Vec<KernelInfo>, String> {
    let root = rmpv::decode::read_value_with_max_depth(&mut &note[..], MAX_METADATA_DEPTH)
        .map_err(|e| format!("not MessagePack: {e}"))?;
    let kernels = field(&root, "amdhsa.kernels")
        .ok_or("no amdhsa.kernels entry")?
        .as_array()
        .ok_or("amdhsa.kernels is not an array")?;
    kernels
        .iter()
        .map(|k| {
            let string = |key: &str| {
                field(k, key)
                    .and_then(rmpv::Value::as_str)
                    .ok_or_else(|| format!("a kernel has no string {key}"))
            };
            let name = string(".name")?.to_string();
            let symbol = string(".symbol")?;
            let symbol = symbol.strip_suffix(".kd").unwrap_or(symbol).to_string();
            let no_args = Vec::new();
            let args = match field(k, ".args") {
                None => &no_args,
                Some(args) => args
                    .as_array()
                    .ok_or_else(|| format!("kernel {name}: .args is not an array"))?,
            };
            let args = args
                .iter()
                .map(|a| {
                    let int = |key: &str| {
                        field(a, key)
                            .and_then(rmpv::Value::as_u64)
                            .ok_or_else(|| format!("kernel {name}: an argument has no {key}"))
                    };
                    let value_kind = field(a, ".value_kind")
                        .and_then(rmpv::Value::as_str)
                        .ok_or_else(|| format!("kernel {name}: an argument has no .value_kind"))?;
                    Ok(KernelArg {
                        value_kind: value_kind.to_string(),
                        size: int(".size")?,
                        offset: int(".offset")?,
                    })
                })
                .collect::<std::result::Result<Vec<_>, String>>()?;
            let reqd_workgroup_size = match field(k, ".reqd_workgroup_size") {
                None => None,
                Some(v) => {
                    let dims: Option<Vec<u32>> = v.as_array().and_then(|a| {
                        a.iter()
                            .map(|d| d.as_u64().and_then(|d| u32::try_from(d).ok()))
                            .collect()
                    });
                    match dims.as_deref() {
                        Some(&[x, y, z]) => Some([x, y, z]),
                        _ => return Err(format!("kernel {name}: bad .reqd_workgroup_size")),
                    }
                }
            };
            Ok(KernelInfo {
                max_flat_workgroup_size: u32_field(
                    k,
                    ".max_flat_workgroup_size",
                    &name,
                    DEFAULT_MAX_FLAT_WORKGROUP_SIZE,
                )?,
                group_segment_fixed_size: u32_field(k, ".group_segment_fixed_size", &name, 0)?,
                reqd_workgroup_size,
                symbol,
                name,
                args,
            })
        })
        .collect()
}

/// The LLVM target ID of an AMDGPU `e_flags` (`EF_AMDGPU_MACH` plus the xnack and sramecc
/// feature bits), for example `gfx90a:sramecc+:xnack-`: what messages name a code object by.
pub fn target_id(flags: u32, code_object_version: u32) -> String {
    /// `EF_AMDGPU_MACH` 0x20 onwards (LLVM's `ELF.h`); "" where no processor has the value.
    const NAMES: [&str; 48] = [
        "gfx600", "gfx601", "gfx700", "gfx701", "gfx702", "gfx703", "gfx704", "", "gfx801",
        "gfx802", "gfx803", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909",
        "gfx90c", "gfx1010", "gfx1011", "gfx1012", "gfx1030", "gfx1031", "gfx1032", "gfx1033",
        "gfx602", "gfx705", "gfx805", "gfx1035", "gfx1034", "gfx90a", "gfx940", "gfx1100",
        "gfx1013", "gfx1150", "gfx1103", "gfx1036", "gfx1101", "gfx1102", "gfx1200", "", "gfx1151",
        "gfx941", "gfx942", "", "gfx1201", "gfx950",
    ];
    let mach = flags & 0xff;
    let mut id = match (mach as usize).checked_sub(0x20).map(|i| NAMES.get(i)) {
        Some(Some(name)) if !name.is_empty() => name.to_string(),
        _ => format!("EF_AMDGPU_MACH {mach:#x}"),
    };
    // v3: one bit each, set = on; v4 and later: two bits each: unsupported (0), any (1),
    // off (2), on (3).
    let setting = |shift: u32| match (code_object_version, (flags >> shift) & 3) {
        (3, bits) if bits & 1 != 0 => "+",
        (3, _) => "",
        (_, 2) => "-",
        (_, 3) => "+",
        _ => "",
    };
    let (sramecc, xnack) = if code_object_version == 3 {
        (setting(9), setting(8))
    } else {
        (setting(10), setting(8))
    };
    if !sramecc.is_empty() {
        id.push_str(&format!(":sramecc{sramecc}"));
    }
    if !xnack.is_empty() {
        id.push_str(&format!(":xnack{xnack}"));
    }
    id
}

/// What kind of image a module's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageKind {
    /// One code object.
    CodeObject,
    /// An offload bundle of code objects.
    Bundle,
    /// A compressed offload bundle (`CCOB`), passed to HIP unread.
    CompressedBundle,
}

/// What a module's bytes say about themselves: one code object, the HIP code objects of an
/// offload bundle (at least one), or nothing for a compressed bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    kind: ImageKind,
    code_objects: Vec<CodeObject>,
}

impl Image {
    /// Reads a code object, an offload bundle or a compressed bundle (see the
    /// [module docs](self)).
    pub fn read(bytes: &[u8]) -> Result<Image> {
        if bytes.starts_with(COMPRESSED_BUNDLE_MAGIC) {
            return Ok(Image {
                kind: ImageKind::CompressedBundle,
                code_objects: Vec::new(),
            });
        }
        if !bytes.starts_with(OFFLOAD_BUNDLE_MAGIC) {
            return Ok(Image {
                kind: ImageKind::CodeObject,
                code_objects: vec![CodeObject::parse(bytes)?],
            });
        }
        let entries = bundle_entries(bytes)?;
        let mut code_objects = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            // The offload kind: what HIP loads is `hip`, `hipv4` or `hcc`.
            let kind = entry.triple.split('-').next().unwrap_or_default();
            if !matches!(kind, "hip" | "hipv4" | "hcc") {
                continue;
            }
            let (start, end) = entry.range;
            let code = CodeObject::parse(&bytes[start..end]).map_err(|e| {
                let place = if start == end {
                    format!("empty, at offset {start}")
                } else {
                    format!("bytes {start}..{end}")
                };
                Error::new(
                    e.code(),
                    format!(
                        "offload bundle entry {index} ({}, {place}): {}",
                        entry.triple,
                        e.message()
                    ),
                )
            })?;
            code_objects.push(code);
        }
        if code_objects.is_empty() {
            let triples: Vec<&str> = entries.iter().map(|e| e.triple).collect();
            return Err(invalid(format!(
                "the offload bundle holds no HIP code object (an entry labelled \
                 hipv4-amdgcn-amd-amdhsa--<target>); its entries are [{}]",
                triples.join(", ")
            )));
        }
        Ok(Image {
            kind: ImageKind::Bundle,
            code_objects,
        })
    }

    /// What kind of image it is.
    pub fn kind(&self) -> ImageKind {
        self.kind
    }

    /// Whether the bytes were an offload bundle (compressed or not).
    pub fn is_bundle(&self) -> bool {
        self.kind != ImageKind::CodeObject
    }

    /// The code object, or each HIP code object of the bundle in the bundle's order; empty
    /// for a compressed bundle.
    pub fn code_objects(&self) -> &[CodeObject] {
        &self.code_objects
    }

    /// The target of each code object (`gfx90a:xnack+`).
    pub fn targets(&self) -> Vec<&str> {
        self.code_objects
            .iter()
            .map(|c| c.target.as_str())
            .collect()
    }

    /// Checks `entry` against its kernel in every code object
    /// ([`CodeObject::check_entry_point`]); returns whether the kernel takes a status word,
    /// which every code object must agree on. A compressed bundle's kernels are unread: each
    /// is launched with a status word pointer after its constants, which a kernel without one
    /// never reads (HIP reads as many argument pointers as the kernel's own metadata lists).
    pub fn check_entry_point(&self, entry: &EntryPoint) -> Result<bool> {
        if self.kind == ImageKind::CompressedBundle {
            return Ok(true);
        }
        let mut status_word: Option<(bool, &str)> = None;
        for code in &self.code_objects {
            let takes = code.check_entry_point(entry).map_err(|e| {
                if self.is_bundle() {
                    let message = format!(
                        "offload bundle code object for {}: {}",
                        code.target,
                        e.message()
                    );
                    Error::new(e.code(), message)
                } else {
                    e
                }
            })?;
            match status_word {
                Some((first, first_target)) if first != takes => {
                    let (with, without) = if first {
                        (first_target, code.target.as_str())
                    } else {
                        (code.target.as_str(), first_target)
                    };
                    return Err(invalid(format!(
                        "kernel '{}' takes a status word in the bundle's {with} code object but \
                         not in its {without} one: build every target from the same source",
                        entry.name
                    )));
                }
                _ => status_word = Some((takes, &code.target)),
            }
        }
        Ok(status_word.is_some_and(|(takes, _)| takes))
    }

    /// The kernel `symbol` of each code object that has it.
    pub fn kernels<'a>(&'a self, symbol: &'a str) -> impl Iterator<Item = &'a KernelInfo> + 'a {
        self.code_objects
            .iter()
            .filter_map(move |c| c.kernel(symbol))
    }
}

/// An offload bundle of code objects for several GPUs, from which HIP loads the device's:
/// what `hipcc --genco` writes for several `--offload-arch`s, made here from code objects
/// built one target at a time, for example by hiprtc ([`crate::rtc`]). Each code object is
/// read ([`CodeObject::parse`]) and labelled with its own target
/// (`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+`); an empty host entry comes first, as clang's
/// does, and each code object starts at a 4096-byte boundary. `InvalidArgument` if there is
/// no code object, one cannot be read, or two are for the same target.
///
/// ```
/// # fn main() -> halcyon::Result<()> {
/// use halcyon_hip::code_object::{offload_bundle, Image};
/// // Any code object will do; this one is the test suite's, built for gfx900.
/// let gfx900 = include_bytes!("../tests/data/conformance-gfx900.hsaco");
/// let bundle = offload_bundle(&[gfx900])?;
/// assert_eq!(Image::read(&bundle)?.targets(), ["gfx900"]);
/// # Ok(())
/// # }
/// ```
pub fn offload_bundle(code_objects: &[&[u8]]) -> Result<Vec<u8>> {
    if code_objects.is_empty() {
        return Err(invalid("an offload bundle needs at least one code object"));
    }
    let mut entries: Vec<(String, &[u8])> = vec![(HOST_TRIPLE.to_string(), &[])];
    let mut targets: Vec<String> = Vec::new();
    for (index, bytes) in code_objects.iter().enumerate() {
        let code = CodeObject::parse(bytes)
            .map_err(|e| Error::new(e.code(), format!("code object {index}: {}", e.message())))?;
        if let Some(earlier) = targets.iter().position(|t| *t == code.target) {
            return Err(invalid(format!(
                "code objects {earlier} and {index} are both for {}: HIP would load only one",
                code.target
            )));
        }
        let kind = if code.version >= 4 { "hipv4" } else { "hip" };
        entries.push((format!("{kind}-amdgcn-amd-amdhsa--{}", code.target), bytes));
        targets.push(code.target);
    }
    Ok(write_bundle(&entries))
}

/// An offload bundle laid out as clang-offload-bundler lays one out: the table, then each
/// entry's bytes at the next 4096-byte boundary (an empty entry takes none).
fn write_bundle<T: AsRef<str>>(entries: &[(T, &[u8])]) -> Vec<u8> {
    let mut out = OFFLOAD_BUNDLE_MAGIC.to_vec();
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    let table_len = out.len()
        + entries
            .iter()
            .map(|(t, _)| 24 + t.as_ref().len())
            .sum::<usize>();
    let mut offset = table_len.next_multiple_of(4096);
    let mut offsets = Vec::new();
    for (triple, bytes) in entries {
        offsets.push(offset);
        out.extend_from_slice(&(offset as u64).to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(&(triple.as_ref().len() as u64).to_le_bytes());
        out.extend_from_slice(triple.as_ref().as_bytes());
        offset = (offset + bytes.len()).next_multiple_of(4096);
    }
    for ((_, bytes), at) in entries.iter().zip(offsets) {
        if !bytes.is_empty() {
            out.resize(at, 0);
            out.extend_from_slice(bytes);
        }
    }
    out
}

/// One entry of an offload bundle's table.
struct BundleEntry<'a> {
    triple: &'a str,
    /// `start..end` of its bytes, inside the bundle.
    range: (usize, usize),
}

/// The little-endian `u64` at `at`, if the bytes hold one there.
fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let field = bytes.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(field.try_into().ok()?))
}

/// `offset..offset + size` as `(start, len)` inside `len` bytes, if it is inside.
fn span(offset: u64, size: u64, len: usize) -> Option<(usize, usize)> {
    let end = offset.checked_add(size)?;
    (end <= len as u64).then_some((offset as usize, size as usize))
}

/// The entries of an offload bundle: the magic, a `u64` entry count, then per entry its
/// offset, size and entry ID length (`u64`s) and the ID's bytes. Every entry lies inside
/// `bytes` (HIP reads the bundle through this table and has no length argument).
fn bundle_entries(bytes: &[u8]) -> Result<Vec<BundleEntry<'_>>> {
    let malformed = |what: String| {
        invalid(format!(
            "malformed offload bundle ({} bytes): {what}",
            bytes.len()
        ))
    };
    let mut at = OFFLOAD_BUNDLE_MAGIC.len();
    let count =
        u64_at(bytes, at).ok_or_else(|| malformed("it ends before its entry count".into()))?;
    at += 8;
    // Each entry takes at least 24 bytes of table, so a count the bytes cannot hold is refused
    // before anything is allocated for it.
    if count == 0 || count > (bytes.len() - at) as u64 / 24 {
        return Err(malformed(format!(
            "it declares {count} entries, which its table cannot hold"
        )));
    }
    let mut table = Vec::with_capacity(count as usize);
    for index in 0..count {
        let field = |at: usize, what: &str| {
            u64_at(bytes, at)
                .ok_or_else(|| malformed(format!("entry {index}'s {what} lies past the end")))
        };
        let (offset, size, triple_len) = (
            field(at, "offset")?,
            field(at + 8, "size")?,
            field(at + 16, "triple length")?,
        );
        at += 24;
        let triple = span(at as u64, triple_len, bytes.len())
            .and_then(|(start, len)| std::str::from_utf8(&bytes[start..start + len]).ok())
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| {
                malformed(format!(
                    "entry {index}'s triple ({triple_len} bytes at {at}) is not printable text \
                     inside the bundle"
                ))
            })?;
        at += triple.len();
        table.push((triple, offset, size));
    }
    // The whole table first, then where the entries lie: a cut table is named as such.
    table
        .into_iter()
        .enumerate()
        .map(|(index, (triple, offset, size))| {
            // Even an empty entry (the host's) lies inside: ROCm 5 reads an ELF header at a
            // HIP entry's offset whatever its size says.
            let (start, len) = span(offset, size, bytes.len()).ok_or_else(|| {
                malformed(format!(
                    "entry {index} ({triple}) declares bytes {offset}..{} past the end",
                    offset.saturating_add(size)
                ))
            })?;
            Ok(BundleEntry {
                triple,
                range: (start, start + len),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The conformance kernels (`tests/data/conformance.hip`) compiled by hiprtc for gfx900
    /// (HIP 5.2.3, code object v4).
    const GFX900: &[u8] = include_bytes!("../tests/data/conformance-gfx900.hsaco");
    /// `tests/data/conformance.hip` built by `hipcc --genco --offload-arch=gfx900
    /// --offload-arch=gfx90a:xnack+ -O3` (HIP 5.2.3, clang 15): an offload bundle.
    const BUNDLE: &[u8] = include_bytes!("../tests/data/conformance-bundle.co");
    /// `tests/data/shared.hip` (`block_sum_u32`, dynamic LDS) for gfx900.
    const SHARED: &[u8] = include_bytes!("../tests/data/shared-gfx900.hsaco");

    fn entry(name: &str, wg: [u32; 3], bindings: u32, constants: u32) -> EntryPoint {
        EntryPoint {
            name: name.into(),
            workgroup_size: wg,
            binding_count: bindings,
            constant_count: constants,
        }
    }

    /// `(value_kind, size, offset)` of each explicit argument of `kernel`.
    fn explicit(code: &CodeObject, kernel: &str) -> Vec<(String, u64, u64)> {
        code.kernel(kernel)
            .unwrap()
            .explicit_args()
            .map(|a| (a.value_kind.clone(), a.size, a.offset))
            .collect()
    }

    fn args(list: &[(&str, u64, u64)]) -> Vec<(String, u64, u64)> {
        list.iter()
            .map(|&(k, s, o)| (k.to_string(), s, o))
            .collect()
    }

    /// The metadata read through `object` and `rmpv` is the fixtures' exactly: each kernel's
    /// explicit arguments (kinds, sizes, offsets), then only hidden ones.
    #[test]
    fn the_fixture_kernels_metadata_is_read_exactly() {
        let code = CodeObject::parse(GFX900).unwrap();
        assert_eq!(code.version, 4);
        assert_eq!(code.target, "gfx900");
        let mut names = code.kernel_names();
        names.sort();
        assert_eq!(names, ["add_one_u32", "fail", "saxpy_f32"]);
        let pointer = "global_buffer";
        assert_eq!(
            explicit(&code, "add_one_u32"),
            args(&[(pointer, 8, 0), ("by_value", 4, 8)])
        );
        assert_eq!(
            explicit(&code, "saxpy_f32"),
            args(&[
                (pointer, 8, 0),
                (pointer, 8, 8),
                ("by_value", 4, 16),
                ("by_value", 4, 20)
            ])
        );
        assert_eq!(explicit(&code, "fail"), args(&[(pointer, 8, 0)]));
        for kernel in &code.kernels {
            let first_hidden = kernel.args.iter().position(KernelArg::is_hidden);
            let hidden = first_hidden.map_or(0, |at| kernel.args.len() - at);
            assert_eq!(
                kernel.explicit_args().count() + hidden,
                kernel.args.len(),
                "{}: hidden arguments follow the explicit ones",
                kernel.symbol
            );
            assert_eq!(kernel.name, kernel.symbol, "extern \"C\"");
            assert!(kernel.max_flat_workgroup_size >= 64);
            assert_eq!(kernel.reqd_workgroup_size, None);
        }
        // No fixture kernel has static LDS (`block_sum_u32`'s is all dynamic).
        assert!(code.kernels.iter().all(|k| k.group_segment_fixed_size == 0));
        let shared = CodeObject::parse(SHARED).unwrap();
        let block_sum = shared.kernel("block_sum_u32").unwrap();
        assert_eq!(
            explicit(&shared, "block_sum_u32"),
            args(&[
                (pointer, 8, 0),
                (pointer, 8, 8),
                ("by_value", 4, 16),
                ("by_value", 4, 20)
            ])
        );
        assert_eq!(block_sum.group_segment_fixed_size, 0);
    }

    #[test]
    fn a_bundles_hip_code_objects_are_all_read() {
        let image = Image::read(BUNDLE).unwrap();
        assert_eq!(image.kind(), ImageKind::Bundle);
        assert_eq!(image.targets(), ["gfx900", "gfx90a:xnack+"]);
        for code in image.code_objects() {
            assert_eq!(explicit(code, "add_one_u32").len(), 2, "{}", code.target);
            assert_eq!(explicit(code, "saxpy_f32").len(), 4, "{}", code.target);
        }
        assert!(image
            .check_entry_point(&entry("fail", [1, 1, 1], 0, 0))
            .unwrap());
        assert!(!image
            .check_entry_point(&entry("add_one_u32", [64, 1, 1], 1, 1))
            .unwrap());
        // Not only the first: a later code object without the kernel is named.
        let mut other = SHARED.to_vec();
        other[0x30] = 0x3f; // EF_AMDGPU_MACH gfx90a
        let mixed = offload_bundle(&[GFX900, &other]).unwrap();
        let e = Image::read(&mixed)
            .unwrap()
            .check_entry_point(&entry("add_one_u32", [64, 1, 1], 1, 1))
            .unwrap_err();
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(
            e.message().starts_with(
                "offload bundle code object for gfx90a: the gfx90a code object has no kernel \
                 'add_one_u32'; it has: [block_sum_u32]"
            ),
            "{e}"
        );
        // The host entry is empty and unread; the gfx900 entry is what hiprtc builds.
        let entries = bundle_entries(BUNDLE).unwrap();
        assert_eq!(entries[0].triple, HOST_TRIPLE);
        assert_eq!(entries[0].range.0, entries[0].range.1);
        // A bundle made here reads back, laid out as hipcc's.
        let ours = offload_bundle(&[GFX900]).unwrap();
        assert_eq!(Image::read(&ours).unwrap().targets(), ["gfx900"]);
        assert_eq!(
            bundle_entries(&ours).unwrap()[1].range.0,
            entries[1].range.0
        );
        let (start, end) = entries[2].range;
        let both = offload_bundle(&[GFX900, &BUNDLE[start..end]]).unwrap();
        assert_eq!(
            Image::read(&both).unwrap().targets(),
            ["gfx900", "gfx90a:xnack+"]
        );
        let e = offload_bundle(&[]).unwrap_err();
        assert!(e.message().contains("at least one"), "{e}");
        let e = offload_bundle(&[GFX900, GFX900]).unwrap_err();
        assert!(
            e.message()
                .contains("code objects 0 and 1 are both for gfx900"),
            "{e}"
        );
        let e = offload_bundle(&[GFX900, &GFX900[..100]]).unwrap_err();
        assert!(e.message().starts_with("code object 1: truncated"), "{e}");
    }

    /// The minimal table read: every entry inside the bundle, a HIP entry a code object.
    #[test]
    fn a_bundle_table_is_read_within_its_bytes() {
        let check = |bytes: &[u8], expected: &str| {
            let e = Image::read(bytes).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains(expected), "{expected}: {e}");
        };
        let patched = |at: usize, value: &[u8]| {
            let mut bytes = BUNDLE.to_vec();
            bytes[at..at + value.len()].copy_from_slice(value);
            bytes
        };
        check(&BUNDLE[..30], "ends before its entry count");
        check(&patched(24, &0u64.to_le_bytes()), "declares 0 entries");
        check(
            &patched(24, &u64::MAX.to_le_bytes()),
            "which its table cannot hold",
        );
        // The table is 32 bytes, then (24 + triple) per entry: entry 2 starts at 136.
        check(&BUNDLE[..140], "entry 2's offset lies past the end");
        // Entry 1's offset is at 32 + 24 + 25 (the host entry and its triple).
        let entry1 = 32 + 24 + 25;
        check(
            &patched(entry1 + 8, &(BUNDLE.len() as u64).to_le_bytes()),
            "entry 1 (hipv4-amdgcn-amd-amdhsa--gfx900) declares bytes",
        );
        check(&patched(entry1, &u64::MAX.to_le_bytes()), "past the end");
        check(&patched(entry1 + 24, b"\0"), "is not printable text");
        check(
            &patched(32, &(BUNDLE.len() as u64 + 1).to_le_bytes()),
            "entry 0 (host-x86_64-unknown-linux) declares bytes",
        );
        // A HIP entry that is no code object is named.
        let (start, _) = bundle_entries(BUNDLE).unwrap()[2].range;
        check(
            &patched(start + 18, &62u16.to_le_bytes()),
            "offload bundle entry 2 (hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+, bytes",
        );
        check(
            &write_bundle(&[
                (HOST_TRIPLE, &[]),
                ("openmp-amdgcn-amd-amdhsa--gfx900", GFX900),
            ]),
            "holds no HIP code object",
        );
        check(
            &write_bundle(&[("hipv4-amdgcn-amd-amdhsa--gfx900", BUNDLE)]),
            "do not nest",
        );
        // Entry points are checked against each code object, naming the failing one.
        let image = Image::read(BUNDLE).unwrap();
        let e = image
            .check_entry_point(&entry("saxpy_f32", [64, 1, 1], 2, 1))
            .unwrap_err();
        assert!(
            e.message()
                .starts_with("offload bundle code object for gfx900: entry point 'saxpy_f32'"),
            "{e}"
        );
    }

    #[test]
    fn elf_header_checks_name_what_is_wrong() {
        let patched = |at: usize, value: &[u8]| {
            let mut code = GFX900.to_vec();
            code[at..at + value.len()].copy_from_slice(value);
            CodeObject::parse(&code).unwrap_err()
        };
        let cases: [(usize, &[u8], &str); 7] = [
            (0, b"\x7fELG", "ELF magic 7f 45 4c 46"),
            (4, &[1], "EI_CLASS 1"),
            (5, &[2], "little-endian"),
            (18, &62u16.to_le_bytes(), "e_machine is 62 (x86-64"),
            (7, &[65], "AMDGPU PAL"),
            (16, &elf::ET_REL.to_le_bytes(), "relocatable object"),
            (8, &[0], "code object v2"),
        ];
        for (at, value, expected) in cases {
            let e = patched(at, value);
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains(expected), "{expected}: {e}");
        }
        let e = CodeObject::parse(&[]).unwrap_err();
        assert!(e.message().contains("0 bytes in all"), "{e}");
        let e = CodeObject::parse(&GFX900[..40]).unwrap_err();
        assert!(e.message().contains("shorter than an ELF64 header"), "{e}");
        // Cut before the section headers (at the end of the file), or inside the contents.
        for len in [GFX900.len() - 1, GFX900.len() / 2, 100] {
            let e = CodeObject::parse(&GFX900[..len]).unwrap_err();
            assert!(e.message().contains("truncated or malformed"), "{len}: {e}");
        }
        // Without sections or segments, there is no metadata.
        let mut code = GFX900.to_vec();
        code[32..48].copy_from_slice(&[0; 16]);
        let e = CodeObject::parse(&code).unwrap_err();
        assert!(e.message().contains("no NT_AMDGPU_METADATA note"), "{e}");
    }

    #[test]
    fn mangled_and_required_workgroup_sizes() {
        let code = CodeObject {
            target: "gfx90a".into(),
            version: 5,
            kernels: vec![KernelInfo {
                symbol: "_Z3fooPj".into(),
                name: "foo".into(),
                args: vec![KernelArg {
                    value_kind: "global_buffer".into(),
                    size: 8,
                    offset: 0,
                }],
                max_flat_workgroup_size: 256,
                reqd_workgroup_size: Some([16, 16, 1]),
                group_segment_fixed_size: 0,
            }],
        };
        let e = code
            .check_entry_point(&entry("foo", [16, 16, 1], 1, 0))
            .unwrap_err();
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(e.message().contains("extern \"C\""), "{e}");
        assert!(e.message().contains("_Z3fooPj"), "{e}");
        code.check_entry_point(&entry("_Z3fooPj", [16, 16, 1], 1, 0))
            .unwrap();
        let e = code
            .check_entry_point(&entry("_Z3fooPj", [256, 1, 1], 1, 0))
            .unwrap_err();
        assert!(e.message().contains("requires [16, 16, 1]"), "{e}");
    }

    #[test]
    fn a_trailing_global_pointer_is_the_status_word() {
        let arg = |kind: &str, size: u64| KernelArg {
            value_kind: kind.into(),
            size,
            offset: 0,
        };
        let code = |args: Vec<KernelArg>| CodeObject {
            target: "gfx90a".into(),
            version: 5,
            kernels: vec![KernelInfo {
                symbol: "k".into(),
                name: "k".into(),
                args,
                max_flat_workgroup_size: 1024,
                reqd_workgroup_size: None,
                group_segment_fixed_size: 0,
            }],
        };
        let hidden = arg("hidden_global_offset_x", 8);
        let k = entry("k", [64, 1, 1], 1, 1);
        let plain = code(vec![
            arg("global_buffer", 8),
            arg("by_value", 4),
            hidden.clone(),
        ]);
        assert!(!plain.check_entry_point(&k).unwrap());
        let with_word = code(vec![
            arg("global_buffer", 8),
            arg("by_value", 4),
            arg("global_buffer", 8),
            hidden.clone(),
        ]);
        assert!(with_word.check_entry_point(&k).unwrap());
        // Declared as two bindings and a constant, the same kernel is refused: its second
        // argument is no pointer.
        let e = with_word
            .check_entry_point(&entry("k", [64, 1, 1], 2, 1))
            .unwrap_err();
        assert!(e.message().contains("the status word"), "{e}");
        // One extra argument that is not a pointer, or two extra: refused.
        for args in [
            vec![
                arg("global_buffer", 8),
                arg("by_value", 4),
                arg("by_value", 4),
            ],
            vec![
                arg("global_buffer", 8),
                arg("by_value", 4),
                arg("global_buffer", 4),
            ],
            vec![
                arg("global_buffer", 8),
                arg("by_value", 4),
                arg("global_buffer", 8),
                arg("global_buffer", 8),
            ],
        ] {
            let e = code(args).check_entry_point(&k).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        }
    }

    /// Metadata that is not what clang writes is refused, never a panic.
    #[test]
    fn bad_metadata_is_refused() {
        let map = |entries: &[(&str, rmpv::Value)]| {
            rmpv::Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| (rmpv::Value::from(*k), v.clone()))
                    .collect(),
            )
        };
        let encode = |v: &rmpv::Value| {
            let mut out = Vec::new();
            rmpv::encode::write_value(&mut out, v).unwrap();
            out
        };
        let kernel = |extra: (&str, rmpv::Value)| {
            map(&[(
                "amdhsa.kernels",
                rmpv::Value::Array(vec![map(&[
                    (".name", "k".into()),
                    (".symbol", "k.kd".into()),
                    extra,
                ])]),
            )])
        };
        let kernels =
            parse_kernels(&encode(&kernel((".args", rmpv::Value::Array(vec![]))))).unwrap();
        assert_eq!(kernels[0].symbol, "k");
        assert_eq!(kernels[0].max_flat_workgroup_size, 1024);
        for (bad, expected) in [
            (kernel((".args", 5.into())), ".args is not an array"),
            (
                kernel((".args", rmpv::Value::Array(vec![map(&[])]))),
                "an argument has no .value_kind",
            ),
            (
                kernel((".max_flat_workgroup_size", (-1).into())),
                ".max_flat_workgroup_size is not a u32",
            ),
            (
                kernel((".reqd_workgroup_size", rmpv::Value::Array(vec![1.into()]))),
                "bad .reqd_workgroup_size",
            ),
            (map(&[]), "no amdhsa.kernels"),
        ] {
            let e = parse_kernels(&encode(&bad)).unwrap_err();
            assert!(e.contains(expected), "{expected}: {e}");
        }
        for bytes in [
            &[][..],
            &[0xa5, b'x'],
            &[0xdd, 0xff, 0xff, 0xff, 0xff],
            &[0x91; 100],
        ] {
            assert!(parse_kernels(bytes).is_err(), "{bytes:?}");
        }
    }

    #[test]
    fn target_ids() {
        assert_eq!(target_id(0x12c, 4), "gfx900");
        assert_eq!(target_id(0x23f | 0xc00, 4), "gfx90a:sramecc+:xnack-");
        assert_eq!(target_id(0x33f, 5), "gfx90a:xnack+");
        assert_eq!(target_id(0x341, 4), "gfx1100:xnack+");
        assert_eq!(target_id(0x84c, 5), "gfx942:sramecc-");
        assert_eq!(target_id(0x32c, 3), "gfx900:sramecc+:xnack+");
        assert_eq!(target_id(0x4f, 5), "gfx950");
        assert_eq!(target_id(0x7f, 4), "EF_AMDGPU_MACH 0x7f");
        assert_eq!(target_id(0x27, 4), "EF_AMDGPU_MACH 0x27");
        assert_eq!(target_id(0x10, 4), "EF_AMDGPU_MACH 0x10");
    }
}
