//! Checks of an ELF64 image's inner references, for backends that hand a binary kernel image
//! (a CUDA cubin, an AMDGPU code object) to a vendor loader that takes no length.
//!
//! Such a loader reads wherever the image's own headers point. Checking the header and the
//! extents of sections and segments keeps the loader's first reads inside the bytes; this
//! module checks what it follows next, as ELF defines it:
//!
//! * the section header table and every section's bytes lie within the image (`SHT_NOBITS`
//!   sections occupy none); extended section numbering (`e_shnum` 0) is refused, as no kernel
//!   image needs 65280 sections;
//! * an image with sections has a section-name table (`e_shstrndx` is not 0, `SHN_UNDEF`),
//!   which is a section and a string table, and every section name lies in it, NUL-terminated;
//! * every `sh_link` names a section, and so does the `sh_info` of a section flagged
//!   `SHF_INFO_LINK` (CUDA's `.nv.info.<kernel>` and `.nv.constant0.<kernel>` sections name
//!   their kernel's code section that way);
//! * extended program-header numbering (`e_phnum` `PN_XNUM`, 0xffff) is refused, like extended
//!   section numbering (the caller checks the program header table's extent);
//! * symbol tables (`SHT_SYMTAB`, `SHT_DYNSYM`) hold whole 24-byte entries, link to a string
//!   table, and each symbol's name lies in it NUL-terminated and its section exists (or is a
//!   reserved index: absolute, common);
//! * relocation tables (`SHT_REL`, `SHT_RELA`) hold whole 16- or 24-byte entries, link to a
//!   symbol table whose symbols they name, and apply to a section that exists (`sh_info`).
//!
//! What a vendor puts inside its own sections (CUDA's `.nv.info` records, AMDGPU notes) is the
//! backend's or the driver's to check. The image must be 64-bit little-endian; the caller
//! checked the identification bytes.
//!
//! ```
//! use halcyon::backend::elf::check_references;
//!
//! // A 64-byte ELF64 header with no sections refers to nothing.
//! let mut image = vec![0u8; 64];
//! image[..4].copy_from_slice(b"\x7fELF");
//! image[4] = 2; // ELFCLASS64
//! image[5] = 1; // little-endian
//! assert!(check_references(&image).is_ok());
//! // A section-header table past the end is refused, with what points where.
//! image[0x28] = 200; // e_shoff
//! image[0x3a] = 64; // e_shentsize
//! image[0x3c] = 1; // e_shnum
//! let e = check_references(&image).unwrap_err();
//! assert!(e.contains("section header table"), "{e}");
//! ```

/// `SHT_SYMTAB`.
const SYMTAB: u64 = 2;
/// `SHT_STRTAB`.
const STRTAB: u64 = 3;
/// `SHT_RELA`.
const RELA: u64 = 4;
/// `SHT_NOBITS`: occupies no bytes of the image.
const NOBITS: u64 = 8;
/// `SHT_REL`.
const REL: u64 = 9;
/// `SHT_DYNSYM`.
const DYNSYM: u64 = 11;
/// `SHF_INFO_LINK`: the section's `sh_info` is a section index.
const INFO_LINK: u64 = 0x40;
/// `PN_XNUM`: the program-header count lives in section 0's `sh_info`.
const PN_XNUM: u64 = 0xffff;
/// Section indices from here up are reserved (absolute, common, extended): not sections.
const LORESERVE: u64 = 0xff00;
/// Bytes of an `Elf64_Sym`.
const SYM_BYTES: u64 = 24;
/// Bytes of an `Elf64_Shdr`.
const SHDR_BYTES: u64 = 64;

/// Reads a little-endian integer of `width` bytes at `at`, or `None` past the end.
fn le(bytes: &[u8], at: u64, width: usize) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    let field = bytes.get(at..at.checked_add(width)?)?;
    let mut a = [0u8; 8];
    a[..width].copy_from_slice(field);
    Some(u64::from_le_bytes(a))
}

/// An ELF section header's fields a loader follows.
struct Section<'a> {
    name: u64,
    kind: u64,
    flags: u64,
    link: u64,
    info: u64,
    entsize: u64,
    /// The section's bytes (none for `SHT_NOBITS`).
    data: &'a [u8],
}

/// Checks the references inside `image`, an ELF64 little-endian image (see the
/// [module docs](self)). `Err` says what points where, for the backend to put in its error.
pub fn check_references(image: &[u8]) -> Result<(), String> {
    let field = |at: u64, width: usize| {
        le(image, at, width).ok_or_else(|| {
            format!(
                "its ELF header is cut short ({} bytes, ELF64 needs 64)",
                image.len()
            )
        })
    };
    let (shoff, shentsize) = (field(0x28, 8)?, field(0x3a, 2)?);
    let (count, names) = (field(0x3c, 2)?, field(0x3e, 2)?);
    if field(0x38, 2)? == PN_XNUM {
        return Err(
            "it uses extended program-header numbering (e_phnum 0xffff), which no kernel image \
             needs"
                .into(),
        );
    }
    if count == 0 {
        if shoff != 0 {
            return Err(
                "it uses extended section numbering (e_shnum 0), which no kernel image needs"
                    .into(),
            );
        }
        return Ok(());
    }
    let table_end = shoff.saturating_add(count * shentsize.max(SHDR_BYTES));
    if shentsize < SHDR_BYTES || table_end > image.len() as u64 {
        return Err(format!(
            "its section header table ({count} entries of {shentsize} bytes at byte {shoff}) \
             does not fit its {} bytes",
            image.len()
        ));
    }
    let mut sections = Vec::with_capacity(count as usize);
    for i in 0..count {
        let at = shoff + i * shentsize;
        let header = |offset: u64, width: usize| le(image, at + offset, width).unwrap_or(0);
        let (kind, offset, size) = (header(4, 4), header(0x18, 8), header(0x20, 8));
        let data = if kind == NOBITS {
            &[][..]
        } else {
            usize::try_from(offset)
                .ok()
                .zip(usize::try_from(offset.saturating_add(size)).ok())
                .and_then(|(start, end)| image.get(start..end))
                .ok_or_else(|| {
                    format!(
                        "section {i} ({size} bytes at byte {offset}) runs past its {} bytes",
                        image.len()
                    )
                })?
        };
        sections.push(Section {
            name: header(0, 4),
            kind,
            flags: header(8, 8),
            link: header(0x28, 4),
            info: header(0x2c, 4),
            entsize: header(0x38, 8),
            data,
        });
    }
    let section = |index: u64, what: &dyn Fn() -> String| {
        sections.get(index as usize).ok_or_else(|| {
            format!(
                "{} is section {index}, but the image has {count} sections",
                what()
            )
        })
    };
    // SHN_UNDEF would leave the section names unchecked; every toolchain writes the table.
    if names == 0 {
        return Err(format!(
            "it has {count} sections but no section-name table (e_shstrndx 0, SHN_UNDEF)"
        ));
    }
    let table = section(names, &|| "the section-name table".into())?;
    if table.kind != STRTAB {
        return Err(format!(
            "the section-name table is not a string table (type {})",
            table.kind
        ));
    }
    for (i, s) in sections.iter().enumerate() {
        if !has_string(table.data, s.name) {
            return Err(format!(
                "section {i}'s name lies at byte {} of a {}-byte name table, or is not \
                 NUL-terminated there",
                s.name,
                table.data.len()
            ));
        }
        let linked = section(s.link, &|| format!("section {i}'s link"))?;
        match s.kind {
            SYMTAB | DYNSYM => check_symbols(i, s, linked, count)?,
            REL | RELA => {
                section(s.info, &|| {
                    format!("the section relocation table {i} applies to")
                })?;
                check_relocations(i, s, linked)?;
            }
            _ => {}
        }
        if s.flags & INFO_LINK != 0 {
            section(s.info, &|| {
                format!("section {i}'s info link (sh_info, flagged SHF_INFO_LINK)")
            })?;
        }
    }
    Ok(())
}

/// Whether a NUL-terminated string starts at `at` within the string table `table`.
fn has_string(table: &[u8], at: u64) -> bool {
    usize::try_from(at)
        .ok()
        .and_then(|at| table.get(at..))
        .is_some_and(|rest| rest.contains(&0))
}

/// Symbol table `i`: whole entries, names in its string table, sections that exist.
fn check_symbols(
    i: usize,
    s: &Section<'_>,
    strings: &Section<'_>,
    count: u64,
) -> Result<(), String> {
    if s.entsize != SYM_BYTES || s.data.len() as u64 % SYM_BYTES != 0 {
        return Err(format!(
            "symbol table {i} has {}-byte entries over {} bytes, not 24-byte ones",
            s.entsize,
            s.data.len()
        ));
    }
    if strings.kind != STRTAB {
        return Err(format!(
            "symbol table {i} names section {} for its strings, which is not a string table",
            s.link
        ));
    }
    for (n, symbol) in s.data.chunks_exact(SYM_BYTES as usize).enumerate() {
        let name = le(symbol, 0, 4).unwrap_or(0);
        let home = le(symbol, 6, 2).unwrap_or(0);
        if !has_string(strings.data, name) {
            return Err(format!(
                "symbol {n} of table {i} has its name at byte {name} of a {}-byte string \
                 table, or it is not NUL-terminated there",
                strings.data.len()
            ));
        }
        if home >= count && home < LORESERVE {
            return Err(format!(
                "symbol {n} of table {i} lies in section {home}, but the image has {count} \
                 sections"
            ));
        }
    }
    Ok(())
}

/// Relocation table `i`: whole entries naming symbols of the symbol table it links to.
fn check_relocations(i: usize, s: &Section<'_>, symbols: &Section<'_>) -> Result<(), String> {
    let width = if s.kind == RELA { 24 } else { 16 };
    if s.entsize != width || s.data.len() as u64 % width != 0 {
        return Err(format!(
            "relocation table {i} has {}-byte entries over {} bytes, not {width}-byte ones",
            s.entsize,
            s.data.len()
        ));
    }
    if symbols.kind != SYMTAB && symbols.kind != DYNSYM {
        return Err(format!(
            "relocation table {i} names section {} for its symbols, which is not a symbol table",
            s.link
        ));
    }
    let held = symbols.data.len() as u64 / SYM_BYTES;
    for (n, entry) in s.data.chunks_exact(width as usize).enumerate() {
        let symbol = le(entry, 8, 8).unwrap_or(0) >> 32;
        if symbol >= held {
            return Err(format!(
                "relocation {n} of table {i} names symbol {symbol}, but its symbol table holds \
                 {held}"
            ));
        }
    }
    Ok(())
}
