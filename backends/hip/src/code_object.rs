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

mod bundle;
mod metadata;
#[cfg(test)]
mod tests;

use bundle::bundle_entries;
pub use bundle::offload_bundle;
use metadata::{metadata_note, parse_kernels};

/// `e_machine` of AMDGPU code objects.
pub const EM_AMDGPU: u16 = elf::EM_AMDGPU;

const OFFLOAD_BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";

/// A compressed offload bundle (clang `--offload-compress`).
const COMPRESSED_BUNDLE_MAGIC: &[u8] = b"CCOB";

/// `ELFOSABI_AMDGPU_HSA`.
const OSABI_AMDGPU_HSA: u8 = 64;

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
