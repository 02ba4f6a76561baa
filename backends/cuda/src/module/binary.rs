//! The cheap checks of a binary image (see the [module docs](super)): a cubin's ELF header and
//! its header tables within its bytes, a fatbin's header and declared size. They catch honest
//! mistakes; everything else in a binary is the driver's to read.

use halcyon::Result;

use super::invalid;
use super::ptx::looks_like_ptx;

pub(super) const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const FATBIN_MAGIC: u32 = 0xBA55_ED50;

/// Whether `bytes` start like a binary image: a cubin (ELF magic) or a fatbin (its magic,
/// little-endian). This is how `cuModuleLoadData` tells a binary from PTX.
pub(super) fn is_binary_image(bytes: &[u8]) -> bool {
    bytes.starts_with(ELF_MAGIC) || is_fatbin(bytes)
}

fn is_fatbin(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) == FATBIN_MAGIC
}

/// What a binary image is, for messages.
pub(super) fn binary_kind(bytes: &[u8]) -> &'static str {
    if is_fatbin(bytes) {
        "fatbin"
    } else {
        "cubin"
    }
}

fn le(bytes: &[u8], at: usize, width: usize) -> u64 {
    let mut a = [0u8; 8];
    a[..width].copy_from_slice(&bytes[at..at + width]);
    u64::from_le_bytes(a)
}

/// The cheap checks of a binary image (see the [module docs](super)).
pub(super) fn validate_binary(bytes: &[u8]) -> Result<()> {
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
