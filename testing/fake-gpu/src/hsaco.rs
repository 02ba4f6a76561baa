//! AMDGPU code objects (HSACO), read as far as `hipModuleLoadData` needs: the ELF header and
//! the symbol table, whose kernel descriptors (`<name>.kd` symbols) name the kernels.
//!
//! `hipModuleLoadData` takes no length: like HIP, the fake finds the image's extent from its
//! ELF headers, trusting the caller that the headers describe bytes it may read. A clang
//! offload bundle (`hipcc --genco` output) is read through its entry table, as HIP does: the
//! first HIP code object entry for the device's target (`gfx900`, with xnack off) is loaded,
//! and a bundle with none is `hipErrorNoBinaryForGpu`. Kernel
//! argument metadata (the MessagePack note) is not read: the kernels the fake runs are known
//! by name (see [`crate::model::kernels`]).

/// `e_machine` of AMDGPU code objects.
const EM_AMDGPU: u16 = 224;
/// `ET_DYN`: a linked code object (what HIP loads).
const ET_DYN: u16 = 3;
/// `SHT_SYMTAB` and `SHT_DYNSYM`.
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
/// `SHT_NOBITS` (no bytes in the file).
const SHT_NOBITS: u32 = 8;
/// `EF_AMDGPU_MACH` mask of `e_flags`, and its value for gfx900.
const EF_AMDGPU_MACH: u32 = 0xff;
/// The one target the fake device runs: gfx900 (`tests/data/conformance-gfx900.hsaco` of
/// halcyon-hip is built for it).
pub(crate) const MACH_GFX900: u32 = 0x2c;

/// Why an image cannot be loaded: the HIP error number and a message for stderr.
pub(crate) type Refusal = (i32, String);

/// `hipErrorInvalidImage`, `hipErrorNoBinaryForGpu`.
const INVALID_IMAGE: i32 = 200;
const NO_BINARY_FOR_GPU: i32 = 209;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The offload bundle magic.
const BUNDLE_MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";

/// The code object HIP loads from the image at `image`: the image itself, or the device's
/// entry of an offload bundle.
///
/// # Safety
/// `image` must point at a complete ELF image or offload bundle (or at least at 64 readable
/// bytes that start with neither magic, then refused), as `hipModuleLoadData` requires.
pub(crate) unsafe fn code_object<'a>(image: *const u8) -> Result<&'a [u8], Refusal> {
    // SAFETY: the caller's contract: at least 64 readable bytes.
    let head = unsafe { std::slice::from_raw_parts(image, 32) };
    if &head[..24] != BUNDLE_MAGIC {
        // SAFETY: the caller's contract.
        return unsafe { self::image(image) };
    }
    let count = u64_at(head, 24) as usize;
    let mut at = 32;
    let mut triples = Vec::new();
    for _ in 0..count {
        // SAFETY: the caller's contract: a complete bundle, whose table holds `count` entries.
        let entry = unsafe { std::slice::from_raw_parts(image.add(at), 24) };
        let (offset, size, len) = (
            u64_at(entry, 0) as usize,
            u64_at(entry, 8) as usize,
            u64_at(entry, 16) as usize,
        );
        // SAFETY: as above: the triple follows its entry's three numbers.
        let triple = unsafe { std::slice::from_raw_parts(image.add(at + 24), len) };
        let triple = String::from_utf8_lossy(triple).into_owned();
        at += 24 + len;
        if size > 0 && runs_on_the_device(&triple) {
            // SAFETY: the caller's contract: the entry's bytes are the bundle's.
            return unsafe { self::image(image.add(offset)) };
        }
        triples.push(triple);
    }
    Err((
        NO_BINARY_FOR_GPU,
        format!(
            "the offload bundle has no code object for the device (gfx900:xnack-); its entries \
             are [{}]",
            triples.join(", ")
        ),
    ))
}

/// Whether a bundle entry's triple is a HIP code object HIP would load on the fake's gfx900
/// (xnack off): `hip-` or `hipv4-amdgcn-amd-amdhsa--gfx900`, with no feature but `xnack-`.
fn runs_on_the_device(triple: &str) -> bool {
    let Some(rest) = triple
        .strip_prefix("hipv4-")
        .or_else(|| triple.strip_prefix("hip-"))
    else {
        return false;
    };
    let Some(target) = rest.strip_prefix("amdgcn-amd-amdhsa--") else {
        return false;
    };
    let mut parts = target.split(':');
    parts.next() == Some("gfx900") && parts.all(|feature| feature == "xnack-")
}

/// The image at `image`, as far as its ELF headers say it reaches.
///
/// # Safety
/// `image` must point at a complete ELF image (or at least at 64 readable bytes that do not
/// start with the ELF magic, then refused), as `hipModuleLoadData` requires.
pub(crate) unsafe fn image<'a>(image: *const u8) -> Result<&'a [u8], Refusal> {
    // SAFETY: the caller's contract: an image has at least the 64-byte ELF header.
    let header = unsafe { std::slice::from_raw_parts(image, 64) };
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Err((
            INVALID_IMAGE,
            "not a 64-bit little-endian ELF image (a bundled or non-AMDGPU image?)".into(),
        ));
    }
    let (shoff, shentsize, shnum) = (
        u64_at(header, 0x28) as usize,
        usize::from(u16_at(header, 0x3a)),
        usize::from(u16_at(header, 0x3c)),
    );
    let (phoff, phentsize, phnum) = (
        u64_at(header, 0x20) as usize,
        usize::from(u16_at(header, 0x36)),
        usize::from(u16_at(header, 0x38)),
    );
    if shentsize < 64 || shnum == 0 {
        return Err((INVALID_IMAGE, "no section headers".into()));
    }
    // SAFETY: the caller's contract: the headers describe bytes of the image.
    let sections = unsafe { std::slice::from_raw_parts(image.add(shoff), shentsize * shnum) };
    // At least the header, which every later read of the image takes for granted.
    let mut end = (shoff + shentsize * shnum)
        .max(phoff + phentsize * phnum)
        .max(64);
    for i in 0..shnum {
        let s = &sections[i * shentsize..];
        if u32_at(s, 4) != SHT_NOBITS {
            end = end.max(u64_at(s, 0x18) as usize + u64_at(s, 0x20) as usize);
        }
    }
    // SAFETY: as above: every section lies within `end` bytes of the image.
    Ok(unsafe { std::slice::from_raw_parts(image, end) })
}

/// The kernels of a code object, by name: what `hipModuleLoadData` would find, or why it
/// refuses the image (not AMDGPU, not linked, or built for another GPU than gfx900).
pub(crate) fn kernel_names(elf: &[u8]) -> Result<Vec<String>, Refusal> {
    if u16_at(elf, 0x12) != EM_AMDGPU {
        return Err((INVALID_IMAGE, "not an AMDGPU code object".into()));
    }
    if u16_at(elf, 0x10) != ET_DYN {
        return Err((
            INVALID_IMAGE,
            "not a linked code object (ET_DYN): a relocatable .o?".into(),
        ));
    }
    let mach = u32_at(elf, 0x30) & EF_AMDGPU_MACH;
    if mach != MACH_GFX900 {
        return Err((
            NO_BINARY_FOR_GPU,
            format!("the code object's target (EF_AMDGPU_MACH {mach:#x}) is not the device's, gfx900 ({MACH_GFX900:#x})"),
        ));
    }
    let shoff = u64_at(elf, 0x28) as usize;
    let shentsize = usize::from(u16_at(elf, 0x3a));
    let shnum = usize::from(u16_at(elf, 0x3c));
    let section = |i: usize| &elf[shoff + i * shentsize..shoff + (i + 1) * shentsize];
    let bytes = |s: &[u8]| {
        let (at, len) = (u64_at(s, 0x18) as usize, u64_at(s, 0x20) as usize);
        &elf[at..at + len]
    };
    let mut names = Vec::new();
    for i in 0..shnum {
        let s = section(i);
        let kind = u32_at(s, 4);
        if kind != SHT_SYMTAB && kind != SHT_DYNSYM {
            continue;
        }
        let link = u32_at(s, 0x28) as usize;
        if link >= shnum {
            return Err((INVALID_IMAGE, "a symbol table without strings".into()));
        }
        let strings = bytes(section(link));
        for symbol in bytes(s).chunks_exact(24) {
            let at = u32_at(symbol, 0) as usize;
            let Some(name) = strings.get(at..).and_then(|n| n.split(|&b| b == 0).next()) else {
                continue;
            };
            let name = String::from_utf8_lossy(name);
            if let Some(kernel) = name.strip_suffix(".kd") {
                if !names.iter().any(|n| n == kernel) {
                    names.push(kernel.to_string());
                }
            }
        }
    }
    if names.is_empty() {
        return Err((INVALID_IMAGE, "no kernel descriptors (.kd symbols)".into()));
    }
    Ok(names)
}
