//! Clang offload bundles (`__CLANG_OFFLOAD_BUNDLE__`, what `hipcc --genco` writes): reading
//! a bundle's entry table, every entry inside the bundle's bytes ([`bundle_entries`]), and
//! writing one from code objects built one target at a time ([`offload_bundle`]).
//!
//! Which entries hold HIP code objects, and reading them, is
//! [`Image::read`](super::Image::read)'s.

use halcyon::{Error, Result};

use super::{invalid, CodeObject, OFFLOAD_BUNDLE_MAGIC};

/// The host entry clang writes into every HIP offload bundle.
pub(super) const HOST_TRIPLE: &str = "host-x86_64-unknown-linux";

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
/// let gfx900 = include_bytes!("../../tests/data/conformance-gfx900.hsaco");
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
pub(super) fn write_bundle<T: AsRef<str>>(entries: &[(T, &[u8])]) -> Vec<u8> {
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
pub(super) struct BundleEntry<'a> {
    pub(super) triple: &'a str,
    /// `start..end` of its bytes, inside the bundle.
    pub(super) range: (usize, usize),
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
pub(super) fn bundle_entries(bytes: &[u8]) -> Result<Vec<BundleEntry<'_>>> {
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
