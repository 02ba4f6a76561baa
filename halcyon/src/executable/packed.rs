//! [`PackedExecutable`]: the one byte form of an executable whose device code carries no
//! entry-point metadata of halcyon's kind (PTX, cubins, HIP code objects, raw SPIR-V).

use std::sync::Arc;

use super::{find_entry_point, EntryPoint, ExecutableSpec};
use crate::error::{Error, Result, StatusCode};

/// The most entry points a [`PackedExecutable`] may declare (a bound against hostile input).
pub const MAX_ENTRY_POINTS: u32 = 4096;

/// The longest format name a [`PackedExecutable`] may carry, in bytes.
const MAX_FORMAT_LEN: u32 = 256;

/// Device code plus the metadata halcyon dispatches by, as one value with one byte form.
///
/// Device code does not say how many bindings and constants a kernel takes in halcyon's sense,
/// nor how much dynamic shared memory to launch it with; a packed executable carries that next
/// to the code, so a build step can write one file and a program load it with
/// [`ExecutableSpec::bytes`]. Backends whose formats need the metadata (CUDA, HIP, Vulkan's raw
/// SPIR-V) read their byte specs through [`PackedExecutable::from_bytes`].
///
/// Packing decides nothing about trust: a packed cubin is still a cubin, which a device loads
/// only from a spec made by the `unsafe` [`ExecutableSpec::bytes_unchecked`] (see
/// [`PackedExecutable::spec_unchecked`]); packed PTX loads from a checked spec.
///
/// # Byte form
///
/// Every number is little-endian.
///
/// | bytes              | content                                                     |
/// |--------------------|-------------------------------------------------------------|
/// | 8                  | magic `b"HLCNEXE1"` ([`PackedExecutable::MAGIC`])           |
/// | 4 + f              | format name length `f` (at most 256), the name in UTF-8     |
/// | 4                  | entry-point count `n` (at most [`MAX_ENTRY_POINTS`])        |
/// | n × (4 + len + 20) | name length, UTF-8 name, workgroup size x, y, z, binding count, constant count |
/// | n × 4              | each entry point's dynamic shared memory in bytes           |
/// | 8 + L              | image length `L`, the image                                 |
///
/// Nothing may follow the image. [`PackedExecutable::from_bytes`] checks exactly this
/// structure; what the image and the entry points mean is the backend's to check when it
/// loads them.
///
/// ```
/// use halcyon::{EntryPoint, PackedExecutable};
///
/// let entry = EntryPoint { name: "scale".into(), workgroup_size: [64, 1, 1], binding_count: 1, constant_count: 1 };
/// let packed = PackedExecutable::new("cuda", vec![entry], b".version 8.0\n...".to_vec())
///     .with_shared_memory("scale", 1024)?;
/// let bytes = packed.to_bytes();
/// assert_eq!(PackedExecutable::from_bytes(&bytes)?, packed);
/// assert_eq!(packed.shared_memory(0), 1024);
/// # Ok::<(), halcyon::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PackedExecutable {
    format: String,
    entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points`, as long.
    shared_memory: Vec<u32>,
    image: Vec<u8>,
}

fn malformed(why: impl std::fmt::Display) -> Error {
    Error::new(
        StatusCode::InvalidArgument,
        format!("malformed packed executable: {why}"),
    )
}

/// Reads the byte form front to back, refusing what is truncated.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(malformed(format!("{} is truncated", what())));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self, len: u32, what: &dyn Fn() -> String) -> Result<String> {
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| malformed(format!("{} is not UTF-8", what())))
    }
}

impl PackedExecutable {
    /// The first eight bytes of the byte form.
    pub const MAGIC: [u8; 8] = *b"HLCNEXE1";

    /// Device code `image` in `format` (a format name a device supports, such as `"cuda"`)
    /// with its entry points, none of them using dynamic shared memory.
    pub fn new(format: impl Into<String>, entry_points: Vec<EntryPoint>, image: Vec<u8>) -> Self {
        let shared_memory = vec![0; entry_points.len()];
        PackedExecutable {
            format: format.into(),
            entry_points,
            shared_memory,
            image,
        }
    }

    /// Declares that kernel `entry` is launched with `bytes` of dynamic shared memory per
    /// workgroup. `NotFound`, listing the entry points, when none is called `entry`.
    pub fn with_shared_memory(mut self, entry: &str, bytes: u32) -> Result<Self> {
        let what = format!("{} executable", self.format);
        let index = find_entry_point(&self.entry_points, entry, &what)?;
        self.shared_memory[index] = bytes;
        Ok(self)
    }

    /// A packed executable from its parts, as [`PackedExecutable::into_parts`] gives them:
    /// `shared_memory` is index-aligned with `entry_points` (padded with zeros, or cut, to
    /// their number).
    pub fn from_parts(
        format: impl Into<String>,
        entry_points: Vec<EntryPoint>,
        mut shared_memory: Vec<u32>,
        image: Vec<u8>,
    ) -> Self {
        shared_memory.resize(entry_points.len(), 0);
        PackedExecutable {
            format: format.into(),
            entry_points,
            shared_memory,
            image,
        }
    }

    /// The format name.
    pub fn format(&self) -> &str {
        &self.format
    }

    /// The entry points, in the order dispatches index them.
    pub fn entry_points(&self) -> &[EntryPoint] {
        &self.entry_points
    }

    /// The dynamic shared memory entry point `index` is launched with, in bytes (0 past the
    /// last entry point).
    pub fn shared_memory(&self, index: usize) -> u32 {
        self.shared_memory.get(index).copied().unwrap_or(0)
    }

    /// The device code.
    pub fn image(&self) -> &[u8] {
        &self.image
    }

    /// The parts: format, entry points, per-entry-point dynamic shared memory (as long as the
    /// entry points), image.
    pub fn into_parts(self) -> (String, Vec<EntryPoint>, Vec<u32>, Vec<u8>) {
        (
            self.format,
            self.entry_points,
            self.shared_memory,
            self.image,
        )
    }

    /// Whether `bytes` start with [`PackedExecutable::MAGIC`] (a cheap test a backend makes
    /// before telling a packed executable from bare device code).
    pub fn is_packed(bytes: &[u8]) -> bool {
        bytes.starts_with(&Self::MAGIC)
    }

    /// The byte form (see the [type docs](PackedExecutable)).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Self::MAGIC.to_vec();
        let put = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
        put(&mut out, self.format.len() as u32);
        out.extend_from_slice(self.format.as_bytes());
        put(&mut out, self.entry_points.len() as u32);
        for e in &self.entry_points {
            put(&mut out, e.name.len() as u32);
            out.extend_from_slice(e.name.as_bytes());
            for v in e.workgroup_size {
                put(&mut out, v);
            }
            put(&mut out, e.binding_count);
            put(&mut out, e.constant_count);
        }
        for &bytes in &self.shared_memory {
            put(&mut out, bytes);
        }
        out.extend_from_slice(&(self.image.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.image);
        out
    }

    /// Parses [`PackedExecutable::to_bytes`] output. `InvalidArgument` reading "malformed
    /// packed executable: ..." for anything else: another magic, a truncated field, a name
    /// that is not UTF-8, more than [`MAX_ENTRY_POINTS`] entry points, an image length that
    /// disagrees with the bytes left.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let Some(rest) = bytes.strip_prefix(&Self::MAGIC) else {
            return Err(malformed(
                "it does not start with b\"HLCNEXE1\" (write it with PackedExecutable::to_bytes)",
            ));
        };
        let mut r = Reader { rest };
        let format_len = r.u32(&|| "the header".into())?;
        if format_len > MAX_FORMAT_LEN {
            return Err(malformed(format!(
                "its format name is {format_len} bytes long; at most {MAX_FORMAT_LEN} are allowed"
            )));
        }
        let format = r.string(format_len, &|| "the format name".into())?;
        let count = r.u32(&|| "the entry-point count".into())?;
        if count > MAX_ENTRY_POINTS {
            return Err(malformed(format!(
                "it declares {count} entry points; at most {MAX_ENTRY_POINTS} are allowed"
            )));
        }
        let mut entry_points = Vec::with_capacity(count as usize);
        for index in 0..count {
            let what = move || format!("entry point {index}");
            let len = r.u32(&what)?;
            let name = r.string(len, &|| format!("entry point {index}'s name"))?;
            let workgroup_size = [r.u32(&what)?, r.u32(&what)?, r.u32(&what)?];
            let binding_count = r.u32(&what)?;
            let constant_count = r.u32(&what)?;
            entry_points.push(EntryPoint {
                name,
                workgroup_size,
                binding_count,
                constant_count,
            });
        }
        let shared_memory = (0..count)
            .map(|_| r.u32(&|| "the shared-memory table".into()))
            .collect::<Result<Vec<u32>>>()?;
        let len = r.take(8, &|| "the image length".into())?;
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
        if len != r.rest.len() as u64 {
            return Err(malformed(format!(
                "it declares a {len}-byte image but {} bytes follow the header",
                r.rest.len()
            )));
        }
        Ok(PackedExecutable {
            format,
            entry_points,
            shared_memory,
            image: r.rest.to_vec(),
        })
    }

    /// A checked spec of the byte form: a device loads it only if it can validate the image
    /// completely (PTX through the CUDA JIT, SPIR-V through naga).
    pub fn spec(&self) -> ExecutableSpec {
        ExecutableSpec::bytes(self.format.clone(), Arc::<[u8]>::from(self.to_bytes()))
    }

    /// An unchecked spec of the byte form, for images a driver consumes unchecked (cubins,
    /// fatbins, HIP code objects and bundles, raw SPIR-V).
    ///
    /// # Safety
    ///
    /// As [`ExecutableSpec::bytes_unchecked`]: the image is its toolchain's unmodified output
    /// for the device's architecture, and the entry points and shared-memory sizes agree with
    /// the code.
    pub unsafe fn spec_unchecked(&self) -> ExecutableSpec {
        // SAFETY: the caller's contract is `bytes_unchecked`'s.
        unsafe {
            ExecutableSpec::bytes_unchecked(self.format.clone(), Arc::<[u8]>::from(self.to_bytes()))
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn sample() -> PackedExecutable {
        let entries = vec![
            EntryPoint {
                name: "a".into(),
                workgroup_size: [64, 1, 1],
                binding_count: 2,
                constant_count: 1,
            },
            EntryPoint {
                name: "bé".into(),
                workgroup_size: [8, 8, 2],
                binding_count: 0,
                constant_count: 0,
            },
        ];
        PackedExecutable::new("cuda", entries, b"image bytes".to_vec())
            .with_shared_memory("bé", 4096)
            .unwrap()
    }

    #[test]
    fn packed_executables_round_trip() {
        let packed = sample();
        let bytes = packed.to_bytes();
        assert!(PackedExecutable::is_packed(&bytes));
        let read = PackedExecutable::from_bytes(&bytes).unwrap();
        assert_eq!(read, packed);
        assert_eq!((read.shared_memory(0), read.shared_memory(1)), (0, 4096));
        assert_eq!(read.shared_memory(7), 0);
        assert_eq!(read.format(), "cuda");
        assert_eq!(read.image(), b"image bytes");
        let error = packed.with_shared_memory("c", 1).unwrap_err();
        assert_eq!(error.code(), StatusCode::NotFound);
        assert!(error.message().contains("[a, bé]"), "{error}");
    }

    #[test]
    fn every_truncation_and_any_trailing_byte_is_refused() {
        let bytes = sample().to_bytes();
        for cut in 0..bytes.len() {
            let error = PackedExecutable::from_bytes(&bytes[..cut]).unwrap_err();
            assert_eq!(error.code(), StatusCode::InvalidArgument);
            assert!(
                error.message().starts_with("malformed packed executable"),
                "{cut}: {error}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let error = PackedExecutable::from_bytes(&longer).unwrap_err();
        assert!(error.message().contains("12 bytes follow"), "{error}");
    }

    #[test]
    fn hostile_counts_are_refused_before_allocating() {
        let mut bytes = PackedExecutable::MAGIC.to_vec();
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        let error = PackedExecutable::from_bytes(&bytes).unwrap_err();
        assert!(error.message().contains("at most 256"), "{error}");
        let mut bytes = PackedExecutable::MAGIC.to_vec();
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&(MAX_ENTRY_POINTS + 1).to_le_bytes());
        let error = PackedExecutable::from_bytes(&bytes).unwrap_err();
        assert!(error.message().contains("at most 4096"), "{error}");
        let mut bytes = sample().to_bytes();
        let name_at = 8 + 4 + 4 + 4 + 4; // magic, format length, "cuda", count, name length
        bytes[name_at] = 0xff;
        let error = PackedExecutable::from_bytes(&bytes).unwrap_err();
        assert!(error.message().contains("not UTF-8"), "{error}");
    }
}
