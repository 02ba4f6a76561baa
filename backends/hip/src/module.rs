//! HIP executables: AMDGPU code objects (HSACO) with halcyon's entry-point metadata.
//!
//! Format [`FORMAT_HSACO`] (`"hip-hsaco"`) takes either
//!
//! * [`ExecutableSource::Native`] holding an `Arc<HipModule>` ([`HipModule::spec`]): a code
//!   object plus the entry points to expose, in dispatch index order, or
//! * [`ExecutableSource::Bytes`] produced by [`HipModule::to_bytes`]: a small metadata header
//!   (`b"HLCNHIP1"`, the entry points; `b"HLCNHIP2"` adds each entry point's dynamic shared
//!   memory) followed by the code object. A bare code object without the header is refused
//!   with a message saying how to supply the metadata.
//!
//! A code object is what `hipModuleLoadData` loads: a linked AMDGPU ELF (`clang -x hip
//! --cuda-device-only --no-gpu-bundle-output`, or hiprtc's output, see [`crate::rtc`]), or a
//! clang offload bundle of them for several GPUs (`hipcc --genco --offload-arch=gfx90a
//! --offload-arch=gfx1100`), from which HIP loads the entry for the device's architecture.
//! Each entry point names a kernel
//! (its symbol: declare kernels `extern "C"` or give the mangled name) that takes, in order,
//! one device pointer per binding and one 4-byte value per `u32` constant, which is how
//! [`crate::api::HipStreamApi`] passes dispatch parameters.
//!
//! # Validation
//!
//! [`HipModule::validate`] checks, before anything reaches HIP:
//!
//! * the ELF header: magic `\x7fELF`, 64-bit, little-endian, `e_machine == EM_AMDGPU` (224),
//!   OS ABI `AMDGPU_HSA`, a shared object (a linked code object, not a relocatable `.o`), code
//!   object v3 or later;
//! * that every section and segment the headers describe lies inside the bytes (HIP reads the
//!   image through these headers and has no length argument: this is what makes handing it the
//!   bytes sound), and what ELF's structure points at inside them: section names, links,
//!   symbols and relocations ([`halcyon::backend::elf`]);
//! * the kernel metadata (the `NT_AMDGPU_METADATA` MessagePack note), against each declared
//!   entry point: the kernel exists, its explicit arguments are exactly `binding_count`
//!   8-byte global pointers then `constant_count` 4-byte values, optionally followed by one
//!   more 8-byte global pointer, the status word (a mismatch would make
//!   `hipModuleLaunchKernel` read the wrong number of argument pointers), and the workgroup size
//!   fits the kernel's `max_flat_workgroup_size` and equals its `reqd_workgroup_size` if it has
//!   one.
//!
//! # Dynamic shared memory
//!
//! A kernel using `extern __shared__` memory (dynamic LDS) is launched with as many bytes of it
//! per block as its entry point declares ([`HipModule::with_shared_memory`]); one declaring
//! none gets none. Loading checks that the kernel's static LDS (`.group_segment_fixed_size`
//! in its metadata) plus the declared bytes fit the device's
//! `hipDeviceAttributeMaxSharedMemoryPerBlock` (64 KiB on most AMD GPUs), which
//! `hipModuleLaunchKernel` would otherwise refuse at every dispatch.
//!
//! # Status word
//!
//! A kernel fails its dispatch through a status word (the stream layer's convention, see
//! [`halcyon::stream::api`]): its last explicit argument, after the constants, a pointer to a
//! `u32` that is zero when it starts and that it sets nonzero to fail
//! (`extern "C" __global__ void k(float* x, unsigned int n, unsigned int* status)`). A trap
//! (`abort()`, `__builtin_trap()`) would instead be a device fault, on which ROCm aborts the
//! whole process (see [`crate::api`], "Device faults").
//! [`CodeObject::check_entry_point`] tells from the argument metadata whether a kernel takes
//! one.
//!
//! # Offload bundles
//!
//! An offload bundle (`__CLANG_OFFLOAD_BUNDLE__`, what `hipcc --genco` writes) is a table of
//! entries, each an entry ID and a byte range: an empty host entry
//! (`host-x86_64-unknown-linux`) and one code object per GPU architecture
//! (`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+`). HIP reads the table in place (it has no length
//! either), loads the entry for the device, and copies the bundle's first 4096 bytes whatever
//! its size (the loader pads shorter images). [`HipModule::validate`] checks:
//!
//! * the table: every entry, even an empty one, inside the bytes;
//! * every entry of a kind HIP loads (`hip`, `hipv4`, `hcc`: the ID up to its first `-`): its
//!   ID must read `<kind>-amdgcn-amd-amdhsa--<target ID>`, and its bytes must pass the same
//!   checks as a code object loaded alone (its ELF, its metadata against the entry points),
//!   with the ELF's target the one the ID names, since HIP picks the entry by the ID. Other
//!   spellings of those kinds (the pre-target-ID `amdgcn-amd-amdhsa-gfx906`, SPIR-V entries
//!   HIP compiles at load time) are refused rather than handed to HIP unchecked, and so is a
//!   target ID spelled the same twice;
//! * at least one such entry. Entries of other kinds (the host's, OpenMP's) are only
//!   bounds-checked: HIP does not load them.
//!
//! Compressed bundles (`CCOB`, `--offload-compress`) are refused: checking the code objects
//! inside would mean decompressing them first. [`offload_bundle`] makes a bundle from code
//! objects built one target at a time (hiprtc's).
//!
//! Whether the code object's target (`gfx90a`, ...) matches the device is only known when HIP
//! loads it; a load error names the targets the module was built for.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use halcyon::backend::{
    read_entry_points, read_entry_table, set_entry_value, write_entry_points, write_entry_table,
};
use halcyon::{EntryPoint, Error, ExecutableSource, ExecutableSpec, Result, StatusCode};

/// The executable format name.
pub const FORMAT_HSACO: &str = "hip-hsaco";

/// `e_machine` of AMDGPU code objects.
pub const EM_AMDGPU: u16 = 224;

const HEADER_MAGIC: &[u8; 8] = b"HLCNHIP1";
/// The byte form with a dynamic shared memory table.
const HEADER_MAGIC_SHARED: &[u8; 8] = b"HLCNHIP2";
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const OFFLOAD_BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// A compressed offload bundle (clang `--offload-compress`).
const COMPRESSED_BUNDLE_MAGIC: &[u8] = b"CCOB";
/// `ELFOSABI_AMDGPU_HSA`.
const OSABI_AMDGPU_HSA: u8 = 64;
/// `ET_DYN`.
const ET_DYN: u16 = 3;
/// `ET_REL`.
const ET_REL: u16 = 1;
/// `SHT_NOTE`.
const SHT_NOTE: u32 = 7;
/// `SHT_NOBITS`.
const SHT_NOBITS: u32 = 8;
/// `NT_AMDGPU_METADATA`: the MessagePack kernel metadata of code object v3 and later.
const NT_AMDGPU_METADATA: u32 = 32;
/// Workgroup size limit of a kernel without `__launch_bounds__` / `amdgpu-flat-work-group-size`.
const DEFAULT_MAX_FLAT_WORKGROUP_SIZE: u32 = 1024;

fn invalid(message: impl Into<String>) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

/// A code object with the metadata of the entry points to expose, in dispatch index order.
#[derive(Clone, PartialEq, Eq)]
pub struct HipModule {
    /// The code object: a linked AMDGPU ELF, or an offload bundle of them (see the
    /// [module docs](self)).
    pub code_object: Vec<u8>,
    /// The kernels to expose, by symbol name, with their metadata.
    pub entry_points: Vec<EntryPoint>,
    /// Index-aligned with `entry_points`: the dynamic shared memory (LDS) each kernel is
    /// launched with, in bytes; entry points past its end take none. Set it with
    /// [`HipModule::with_shared_memory`].
    pub shared_memory_bytes: Vec<u32>,
}

impl fmt::Debug for HipModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipModule")
            .field(
                "code_object",
                &format_args!("{} bytes", self.code_object.len()),
            )
            .field("entry_points", &self.entry_points)
            .field("shared_memory_bytes", &self.shared_memory_bytes)
            .finish()
    }
}

impl HipModule {
    /// A module from a code object and entry points.
    pub fn new(code_object: Vec<u8>, entry_points: Vec<EntryPoint>) -> Self {
        HipModule {
            code_object,
            entry_points,
            shared_memory_bytes: Vec::new(),
        }
    }

    /// Declares that kernel `entry` is launched with `bytes` of dynamic shared memory (LDS,
    /// `extern __shared__`) per block: every dispatch of it passes them to
    /// `hipModuleLaunchKernel`. Loading checks that the device can give the kernel that much
    /// (see the [module docs](self)). `NotFound` if no entry point is named `entry`.
    pub fn with_shared_memory(mut self, entry: &str, bytes: u32) -> Result<Self> {
        let what = "HIP module";
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
    /// ([`HipModule::shared_memory_bytes`]).
    pub fn shared_memory(&self, index: usize) -> u32 {
        self.shared_memory_bytes.get(index).copied().unwrap_or(0)
    }

    /// An executable spec (format [`FORMAT_HSACO`], native source).
    pub fn spec(self) -> ExecutableSpec {
        ExecutableSpec::native(FORMAT_HSACO, Arc::new(self))
    }

    /// The byte form: `b"HLCNHIP1"`, the entry-point count, each entry point (name length,
    /// name, workgroup size x, y, z, binding count, constant count; every number a
    /// little-endian `u32`), then the code object. A module declaring dynamic shared memory
    /// starts with `b"HLCNHIP2"` instead and has each entry point's bytes (a `u32` each)
    /// between the entry points and the code object.
    pub fn to_bytes(&self) -> Vec<u8> {
        let shared = !self.shared_memory_bytes.is_empty();
        let mut out = if shared {
            HEADER_MAGIC_SHARED
        } else {
            HEADER_MAGIC
        }
        .to_vec();
        write_entry_points(&mut out, &self.entry_points);
        if shared {
            let n = self.entry_points.len();
            write_entry_table(&mut out, &self.shared_memory_bytes, n);
        }
        out.extend_from_slice(&self.code_object);
        out
    }

    /// Parses [`HipModule::to_bytes`] output (the code object itself is checked by
    /// [`HipModule::validate`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<HipModule> {
        let bad = |what: &str| invalid(format!("malformed halcyon HIP executable: {what}"));
        if bytes.starts_with(ELF_MAGIC) || bytes.starts_with(OFFLOAD_BUNDLE_MAGIC) {
            return Err(invalid(
                "a bare code object carries no entry-point metadata (workgroup size, binding \
                 and constant counts): pass a halcyon_hip::HipModule (HipModule::spec) or its \
                 to_bytes() form",
            ));
        }
        let (shared, rest) = match bytes.strip_prefix(HEADER_MAGIC) {
            Some(rest) => (false, Some(rest)),
            None => (true, bytes.strip_prefix(HEADER_MAGIC_SHARED)),
        };
        let rest = rest.ok_or_else(|| {
            bad("missing the b\"HLCNHIP1\" header (build it with HipModule::to_bytes)")
        })?;
        let what = "halcyon HIP executable";
        let (entry_points, rest) = read_entry_points(rest, what)?;
        let (shared_memory_bytes, code_object) = if shared {
            read_entry_table(rest, entry_points.len(), what)?
        } else {
            (Vec::new(), rest)
        };
        Ok(HipModule {
            code_object: code_object.to_vec(),
            entry_points,
            shared_memory_bytes,
        })
    }

    /// The module a `"hip-hsaco"` spec carries (native or byte form), not yet validated.
    pub fn from_spec(spec: &ExecutableSpec) -> Result<Arc<HipModule>> {
        if spec.format != FORMAT_HSACO {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!(
                    "HIP devices load '{FORMAT_HSACO}' executables, not '{}'",
                    spec.format
                ),
            ));
        }
        match &spec.source {
            ExecutableSource::Native(object) => {
                let object: Arc<dyn Any + Send + Sync> = object.clone();
                object.downcast::<HipModule>().map_err(|_| {
                    invalid(format!(
                        "a native '{FORMAT_HSACO}' executable source must be an \
                         Arc<halcyon_hip::HipModule> (HipModule::spec)"
                    ))
                })
            }
            ExecutableSource::Bytes(bytes) => HipModule::from_bytes(bytes).map(Arc::new),
        }
    }

    /// Checks the code object (or each code object of an offload bundle) and the entry points
    /// against its kernel metadata (see the [module docs](self)); returns what the code
    /// objects say about themselves.
    pub fn validate(&self) -> Result<ValidatedImage> {
        let image = ValidatedImage::parse(&self.code_object)?;
        if self.entry_points.is_empty() {
            let code = &image.code_objects[0];
            let whose = if image.is_bundle() {
                format!(
                    "its offload bundle holds code objects for [{}]; the {} one has kernels",
                    image.targets().join(", "),
                    code.target
                )
            } else {
                format!("its code object ({}) has kernels", code.target)
            };
            return Err(invalid(format!(
                "HIP executable declares no entry points; {whose} [{}]",
                code.kernel_names().join(", ")
            )));
        }
        if self.shared_memory_bytes.len() > self.entry_points.len() {
            return Err(invalid(format!(
                "the HIP module declares shared memory for {} entry points but has {}",
                self.shared_memory_bytes.len(),
                self.entry_points.len()
            )));
        }
        for (i, entry) in self.entry_points.iter().enumerate() {
            if self.entry_points[..i].iter().any(|e| e.name == entry.name) {
                return Err(invalid(format!(
                    "entry point name '{}' is used twice",
                    entry.name
                )));
            }
            image.check_entry_point(entry)?;
        }
        Ok(image)
    }
}

/// What [`HipModule::validate`] found in a module's bytes: one code object, or the HIP code
/// objects of an offload bundle (at least one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedImage {
    code_objects: Vec<CodeObject>,
    bundle_triples: Vec<String>,
}

impl ValidatedImage {
    /// Parses and checks a code object or an offload bundle (see the [module docs](self)).
    pub fn parse(bytes: &[u8]) -> Result<ValidatedImage> {
        if bytes.starts_with(COMPRESSED_BUNDLE_MAGIC) {
            return Err(invalid(
                "this is a compressed offload bundle (CCOB, clang --offload-compress): halcyon \
                 cannot check the code objects inside without decompressing them, so build \
                 without --offload-compress",
            ));
        }
        if !bytes.starts_with(OFFLOAD_BUNDLE_MAGIC) {
            return Ok(ValidatedImage {
                code_objects: vec![CodeObject::parse(bytes)?],
                bundle_triples: Vec::new(),
            });
        }
        let entries = bundle_entries(bytes)?;
        let mut image = ValidatedImage {
            code_objects: Vec::new(),
            bundle_triples: Vec::new(),
        };
        for (index, entry) in entries.iter().enumerate() {
            let context = |e: Error| {
                let (start, end) = entry.range;
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
            };
            let target = match bundle_target(entry.triple) {
                BundleTarget::Other => continue,
                BundleTarget::Hip(target) => target,
                BundleTarget::Unrecognised(why) => return Err(context(invalid(why))),
            };
            if let Some(earlier) = image
                .bundle_triples
                .iter()
                .position(|t| bundle_target(t) == BundleTarget::Hip(target))
            {
                return Err(context(invalid(format!(
                    "the bundle already has a code object for {target} ({})",
                    image.bundle_triples[earlier]
                ))));
            }
            let code = CodeObject::parse(&bytes[entry.range.0..entry.range.1]).map_err(context)?;
            if !target_matches(target, &code.target, code.version) {
                return Err(context(invalid(format!(
                    "the entry is labelled {target} but holds a code object for {}; HIP picks \
                     the entry by its label, so rebuild the bundle",
                    code.target
                ))));
            }
            image.code_objects.push(code);
            image.bundle_triples.push(entry.triple.to_string());
        }
        if image.code_objects.is_empty() {
            let triples: Vec<&str> = entries.iter().map(|e| e.triple).collect();
            return Err(invalid(format!(
                "the offload bundle holds no HIP code object (an entry labelled \
                 hipv4-amdgcn-amd-amdhsa--<target>); its entries are [{}]",
                triples.join(", ")
            )));
        }
        Ok(image)
    }

    /// The code object, or each HIP code object of the bundle in the bundle's order (at least
    /// one).
    pub fn code_objects(&self) -> &[CodeObject] {
        &self.code_objects
    }

    /// Each code object's offload bundle entry ID (`hipv4-amdgcn-amd-amdhsa--gfx90a`), in the
    /// order of [`ValidatedImage::code_objects`], when the bytes are a bundle; empty for a bare
    /// code object.
    pub fn bundle_triples(&self) -> &[String] {
        &self.bundle_triples
    }

    /// Whether the bytes were an offload bundle.
    pub fn is_bundle(&self) -> bool {
        !self.bundle_triples.is_empty()
    }

    /// The target ID of each code object (`gfx90a:xnack+`).
    pub fn targets(&self) -> Vec<&str> {
        self.code_objects
            .iter()
            .map(|c| c.target.as_str())
            .collect()
    }

    /// Checks `entry` against its kernel in every code object (see
    /// [`CodeObject::check_entry_point`]); returns whether the kernel takes a status word, which
    /// every code object must agree on.
    pub fn check_entry_point(&self, entry: &EntryPoint) -> Result<bool> {
        let mut status_word = None;
        for (index, code) in self.code_objects.iter().enumerate() {
            let takes = code.check_entry_point(entry).map_err(|e| {
                if self.is_bundle() {
                    Error::new(
                        e.code(),
                        format!(
                            "offload bundle code object for {}: {}",
                            code.target,
                            e.message()
                        ),
                    )
                } else {
                    e
                }
            })?;
            match status_word {
                Some((first, first_index)) if first != takes => {
                    let target = |i: usize| self.code_objects[i].target.as_str();
                    let (with, without) = if first {
                        (target(first_index), target(index))
                    } else {
                        (target(index), target(first_index))
                    };
                    return Err(invalid(format!(
                        "kernel '{}' takes a status word in the bundle's {with} code object but \
                         not in its {without} one: build every target from the same source",
                        entry.name
                    )));
                }
                _ => status_word = Some((takes, index)),
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

/// An offload bundle of code objects for several GPUs, from which HIP loads the device's
/// (see the [module docs](self)): what `hipcc --genco` writes for several `--offload-arch`s,
/// made here from code objects built one target at a time, for example by hiprtc
/// ([`crate::rtc`]). Each code object is checked ([`CodeObject::parse`]) and labelled with its
/// own target (`hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+`); an empty host entry comes first, as
/// clang's does. `InvalidArgument` if there is no code object, one is not valid, or two are
/// for the same target.
///
/// ```
/// # fn main() -> halcyon::Result<()> {
/// // Any code object will do; this one is the test suite's, built for gfx900.
/// let gfx900 = include_bytes!("../tests/data/conformance-gfx900.hsaco");
/// let bundle = halcyon_hip::module::offload_bundle(&[gfx900])?;
/// let image = halcyon_hip::module::ValidatedImage::parse(&bundle)?;
/// assert_eq!(image.bundle_triples(), ["hipv4-amdgcn-amd-amdhsa--gfx900"]);
/// # Ok(())
/// # }
/// ```
pub fn offload_bundle(code_objects: &[&[u8]]) -> Result<Vec<u8>> {
    if code_objects.is_empty() {
        return Err(invalid("an offload bundle needs at least one code object"));
    }
    let mut entries: Vec<(String, &[u8])> = vec![(HOST_TRIPLE.to_string(), &[])];
    for (index, bytes) in code_objects.iter().enumerate() {
        let code = CodeObject::parse(bytes)
            .map_err(|e| Error::new(e.code(), format!("code object {index}: {}", e.message())))?;
        let kind = if code.version >= 4 { "hipv4" } else { "hip" };
        entries.push((format!("{kind}-amdgcn-amd-amdhsa--{}", code.target), bytes));
    }
    let bundle = write_bundle(&entries);
    // The same checks as any bundle's: two code objects for one target are refused here.
    ValidatedImage::parse(&bundle)?;
    Ok(bundle)
}

/// The host entry clang writes into every HIP offload bundle.
const HOST_TRIPLE: &str = "host-x86_64-unknown-linux";

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

/// The entries of an offload bundle: the magic, a `u64` entry count, then per entry its
/// offset, size and triple length (`u64`s) and the triple's bytes. Every entry lies inside
/// `bytes` (HIP reads the bundle through this table and has no length argument).
fn bundle_entries(bytes: &[u8]) -> Result<Vec<BundleEntry<'_>>> {
    let malformed = |what: String| {
        invalid(format!(
            "malformed offload bundle ({} bytes): {what}",
            bytes.len()
        ))
    };
    let mut at = OFFLOAD_BUNDLE_MAGIC.len();
    let count = read::<8>(bytes, at)
        .map(u64::from_le_bytes)
        .ok_or_else(|| malformed("it ends before its entry count".into()))?;
    at += 8;
    // Each entry takes at least 24 bytes of table, so a count the bytes cannot hold is refused
    // before anything is allocated for it.
    if count == 0 || count > (bytes.len() - at) as u64 / 24 {
        return Err(malformed(format!(
            "it declares {count} entries, which its table cannot hold"
        )));
    }
    // The whole table first, then where the entries lie: a cut table is named as such.
    let mut table = Vec::with_capacity(count as usize);
    for index in 0..count {
        let field = |at: usize, what: &str| {
            read::<8>(bytes, at)
                .map(u64::from_le_bytes)
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

/// What an offload bundle entry ID says the entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BundleTarget<'a> {
    /// A HIP code object for this target ID (`gfx90a:xnack-`).
    Hip(&'a str),
    /// An entry HIP does not load (the host's, OpenMP's).
    Other,
    /// An entry of a kind HIP loads (`hip`, `hipv4`, `hcc`) whose label is not a code object's
    /// for an AMD GPU, as current toolchains write it: why it is refused.
    Unrecognised(&'static str),
}

/// Reads an offload bundle entry ID the way HIP does: the offload kind is what precedes the
/// first `-`. HIP loads entries of kind `hip`, `hipv4` and `hcc` (ROCm 5 picks the first two by
/// the ELF header at the entry's offset, whatever the rest of the label says), so each of those
/// must be `<kind>-amdgcn-amd-amdhsa--<target ID>`, which every code object checked here is;
/// anything else of those kinds is refused rather than handed to HIP unchecked.
fn bundle_target(triple: &str) -> BundleTarget<'_> {
    let (kind, rest) = triple.split_once('-').unwrap_or((triple, ""));
    if !matches!(kind, "hip" | "hipv4" | "hcc") {
        return BundleTarget::Other;
    }
    if rest.starts_with("spirv64-") {
        return BundleTarget::Unrecognised(
            "a SPIR-V entry, which HIP compiles at load time: halcyon cannot check what it \
             would load, so bundle code objects for the GPUs instead (--offload-arch=gfxNNN)",
        );
    }
    match rest.strip_prefix("amdgcn-amd-amdhsa--") {
        Some(target) if !target.is_empty() => BundleTarget::Hip(target),
        _ => BundleTarget::Unrecognised(
            "a HIP entry whose label is not <kind>-amdgcn-amd-amdhsa--<target ID> (older \
             toolchains wrote amdgcn-amd-amdhsa-gfxNNN): rebuild it with a current hipcc or \
             clang-offload-bundler",
        ),
    }
}

/// Whether a code object whose ELF says `elf` is what a bundle entry labelled `label` promises:
/// the same processor, and every feature the label sets (`xnack+`) set the same way. Code
/// object v3 has one bit per feature, so there an unset feature is the label's `xnack-`.
fn target_matches(label: &str, elf: &str, version: u32) -> bool {
    let mut label = label.split(':');
    let mut elf = elf.split(':');
    let processor = label.next() == elf.next();
    let features: Vec<&str> = elf.collect();
    processor
        && label.all(|feature| {
            features.contains(&feature)
                || (version == 3
                    && feature
                        .strip_suffix('-')
                        .is_some_and(|name| !features.contains(&format!("{name}+").as_str())))
        })
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

/// What a validated code object says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeObject {
    /// The target ID it was compiled for, for example `gfx90a:sramecc+:xnack-`.
    pub target: String,
    /// The code object version (3, 4, 5, ...).
    pub version: u32,
    /// Its kernels.
    pub kernels: Vec<KernelInfo>,
}

impl CodeObject {
    /// Parses and checks the ELF headers and the kernel metadata of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<CodeObject> {
        let elf = Elf::parse(bytes)?;
        let version = match elf.abi_version {
            0 => {
                return Err(invalid(
                    "code object v2 (YAML metadata) is not supported: compile for code object \
                     v3 or later (-mcode-object-version=4)",
                ))
            }
            v => u32::from(v) + 2,
        };
        let target = target_id(elf.flags, version);
        let metadata = elf.metadata_note()?.ok_or_else(|| {
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

    /// Checks `entry` against the kernel of that name (see the [module docs](self)); returns
    /// whether the kernel takes a status word (one more global pointer after the constants).
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

/// The parts of an ELF64 image this module needs, after checking that every header, section
/// and segment lies inside the bytes.
struct Elf<'a> {
    bytes: &'a [u8],
    abi_version: u8,
    flags: u32,
    /// `(type, offset, size)` of each section.
    sections: Vec<(u32, usize, usize)>,
}

fn read<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    read(bytes, at).map_or(0, u16::from_le_bytes)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    read(bytes, at).map_or(0, u32::from_le_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    read(bytes, at).map_or(0, u64::from_le_bytes)
}

/// `offset..offset + size` as a range inside `len` bytes, if it is one.
fn span(offset: u64, size: u64, len: usize) -> Option<(usize, usize)> {
    let end = offset.checked_add(size)?;
    (end <= len as u64).then_some((offset as usize, size as usize))
}

impl<'a> Elf<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Elf<'a>> {
        if bytes.starts_with(OFFLOAD_BUNDLE_MAGIC) {
            return Err(invalid(
                "this is a clang offload bundle, not a single code object: bundles are read by \
                 HipModule::validate (ValidatedImage::parse), and do not nest",
            ));
        }
        if !bytes.starts_with(ELF_MAGIC) {
            let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
            return Err(invalid(format!(
                "not an AMDGPU code object: it does not start with the ELF magic 7f 45 4c 46 \
                 (it starts with [{}], {} bytes in all)",
                head.join(" "),
                bytes.len()
            )));
        }
        if bytes.len() < 64 {
            return Err(invalid(format!(
                "truncated code object: {} bytes, shorter than an ELF64 header (64)",
                bytes.len()
            )));
        }
        if bytes[4] != 2 {
            return Err(invalid(format!(
                "not an AMDGPU code object: a {}-bit ELF (EI_CLASS {}); AMDGPU code objects are \
                 64-bit",
                if bytes[4] == 1 { "32" } else { "?" },
                bytes[4]
            )));
        }
        if bytes[5] != 1 {
            return Err(invalid(format!(
                "not an AMDGPU code object: EI_DATA {} (AMDGPU code objects are little-endian, 1)",
                bytes[5]
            )));
        }
        let machine = u16_at(bytes, 18);
        if machine != EM_AMDGPU {
            let what = match machine {
                62 => " (x86-64: a host object?)",
                183 => " (AArch64: a host object?)",
                190 => " (NVIDIA CUDA)",
                _ => "",
            };
            return Err(invalid(format!(
                "not an AMDGPU code object: e_machine is {machine}{what}, not EM_AMDGPU \
                 ({EM_AMDGPU})"
            )));
        }
        let osabi = bytes[7];
        if osabi != OSABI_AMDGPU_HSA {
            let what = match osabi {
                65 => " (AMDGPU PAL: a graphics shader)",
                66 => " (Mesa3D)",
                _ => "",
            };
            return Err(invalid(format!(
                "not a HIP code object: OS ABI {osabi}{what}, not AMDGPU HSA \
                 ({OSABI_AMDGPU_HSA})"
            )));
        }
        let kind = u16_at(bytes, 16);
        if kind != ET_DYN {
            let what = if kind == ET_REL {
                "a relocatable object (clang -c output): link it into a code object \
                 (ld.lld -shared)"
                    .to_string()
            } else {
                format!("ELF type {kind}")
            };
            return Err(invalid(format!(
                "not a loadable code object: {what}; hipModuleLoadData needs a shared object \
                 (ET_DYN)"
            )));
        }
        let truncated = |what: String| {
            invalid(format!(
                "truncated or malformed code object ({} bytes): {what}",
                bytes.len()
            ))
        };
        // Program headers: HIP's loader maps the segments through them.
        let (phoff, phentsize, phnum) = (u64_at(bytes, 32), u16_at(bytes, 54), u16_at(bytes, 56));
        if phnum > 0 {
            if phentsize != 56 {
                return Err(truncated(format!(
                    "program header size {phentsize}, expected 56"
                )));
            }
            span(phoff, u64::from(phnum) * 56, bytes.len())
                .ok_or_else(|| truncated(format!("{phnum} program headers at offset {phoff}")))?;
            for i in 0..u64::from(phnum) {
                let at = (phoff + i * 56) as usize;
                let (offset, filesz) = (u64_at(bytes, at + 8), u64_at(bytes, at + 32));
                span(offset, filesz, bytes.len()).ok_or_else(|| {
                    truncated(format!(
                        "segment {i} ({filesz} bytes at offset {offset}) extends past the end"
                    ))
                })?;
            }
        }
        // Section headers: notes, symbols.
        let (shoff, shentsize, shnum) = (u64_at(bytes, 40), u16_at(bytes, 58), u16_at(bytes, 60));
        let mut sections = Vec::new();
        if shnum > 0 {
            if shentsize != 64 {
                return Err(truncated(format!(
                    "section header size {shentsize}, expected 64"
                )));
            }
            span(shoff, u64::from(shnum) * 64, bytes.len())
                .ok_or_else(|| truncated(format!("{shnum} section headers at offset {shoff}")))?;
            for i in 0..u64::from(shnum) {
                let at = (shoff + i * 64) as usize;
                let kind = u32_at(bytes, at + 4);
                let (offset, size) = (u64_at(bytes, at + 24), u64_at(bytes, at + 32));
                if kind == SHT_NOBITS {
                    continue;
                }
                let (offset, size) = span(offset, size, bytes.len()).ok_or_else(|| {
                    truncated(format!(
                        "section {i} ({size} bytes at offset {offset}) extends past the end"
                    ))
                })?;
                sections.push((kind, offset, size));
            }
        }
        halcyon::backend::elf::check_references(bytes).map_err(|what| {
            invalid(format!(
                "corrupt code object: {what} (hipModuleLoadData would follow it outside the \
                 image)"
            ))
        })?;
        Ok(Elf {
            bytes,
            abi_version: bytes[8],
            flags: u32_at(bytes, 48),
            sections,
        })
    }

    /// The descriptor of the `AMDGPU` / `NT_AMDGPU_METADATA` note, if there is one.
    fn metadata_note(&self) -> Result<Option<&'a [u8]>> {
        let malformed = || invalid("malformed ELF note section in the code object");
        for &(kind, offset, size) in &self.sections {
            if kind != SHT_NOTE {
                continue;
            }
            let notes = &self.bytes[offset..offset + size];
            let mut at = 0usize;
            while at + 12 <= notes.len() {
                let namesz = u32_at(notes, at) as usize;
                let descsz = u32_at(notes, at + 4) as usize;
                let note_type = u32_at(notes, at + 8);
                let name_at = at + 12;
                let desc_at = name_at
                    .checked_add(namesz.next_multiple_of(4))
                    .ok_or_else(malformed)?;
                let next = desc_at
                    .checked_add(descsz.next_multiple_of(4))
                    .ok_or_else(malformed)?;
                let name = notes.get(name_at..name_at + namesz).ok_or_else(malformed)?;
                let desc = notes.get(desc_at..desc_at + descsz).ok_or_else(malformed)?;
                if name == b"AMDGPU\0" && note_type == NT_AMDGPU_METADATA {
                    return Ok(Some(desc));
                }
                at = next;
            }
        }
        Ok(None)
    }
}

/// The LLVM target ID of an AMDGPU `e_flags` (`EF_AMDGPU_MACH` plus the xnack and sramecc
/// feature bits), for example `gfx90a:sramecc+:xnack-`.
pub fn target_id(flags: u32, code_object_version: u32) -> String {
    let mach = flags & 0xff;
    let name = match mach {
        0x20 => "gfx600",
        0x21 => "gfx601",
        0x22 => "gfx700",
        0x23 => "gfx701",
        0x24 => "gfx702",
        0x25 => "gfx703",
        0x26 => "gfx704",
        0x28 => "gfx801",
        0x29 => "gfx802",
        0x2a => "gfx803",
        0x2b => "gfx810",
        0x2c => "gfx900",
        0x2d => "gfx902",
        0x2e => "gfx904",
        0x2f => "gfx906",
        0x30 => "gfx908",
        0x31 => "gfx909",
        0x32 => "gfx90c",
        0x33 => "gfx1010",
        0x34 => "gfx1011",
        0x35 => "gfx1012",
        0x36 => "gfx1030",
        0x37 => "gfx1031",
        0x38 => "gfx1032",
        0x39 => "gfx1033",
        0x3a => "gfx602",
        0x3b => "gfx705",
        0x3c => "gfx805",
        0x3d => "gfx1035",
        0x3e => "gfx1034",
        0x3f => "gfx90a",
        0x40 => "gfx940",
        0x41 => "gfx1100",
        0x42 => "gfx1013",
        0x43 => "gfx1150",
        0x44 => "gfx1103",
        0x45 => "gfx1036",
        0x46 => "gfx1101",
        0x47 => "gfx1102",
        0x48 => "gfx1200",
        0x4a => "gfx1151",
        0x4b => "gfx941",
        0x4c => "gfx942",
        0x4e => "gfx1201",
        0x4f => "gfx950",
        _ => "",
    };
    let mut id = if name.is_empty() {
        format!("EF_AMDGPU_MACH {mach:#x}")
    } else {
        name.to_string()
    };
    if code_object_version == 3 {
        // v3: one bit each, set = on.
        if flags & 0x200 != 0 {
            id.push_str(":sramecc+");
        }
        if flags & 0x100 != 0 {
            id.push_str(":xnack+");
        }
    } else {
        // v4 and later: two bits each: unsupported (0), any (1), off (2), on (3).
        let setting = |bits: u32| match bits {
            2 => "-",
            3 => "+",
            _ => "",
        };
        let sramecc = setting((flags >> 10) & 3);
        let xnack = setting((flags >> 8) & 3);
        if !sramecc.is_empty() {
            id.push_str(&format!(":sramecc{sramecc}"));
        }
        if !xnack.is_empty() {
            id.push_str(&format!(":xnack{xnack}"));
        }
    }
    id
}

/// The kernels of a `NT_AMDGPU_METADATA` note.
fn parse_kernels(note: &[u8]) -> std::result::Result<Vec<KernelInfo>, String> {
    let root = msgpack::decode(note)?;
    let kernels = root
        .get("amdhsa.kernels")
        .ok_or("no amdhsa.kernels entry")?
        .as_array()
        .ok_or("amdhsa.kernels is not an array")?;
    kernels
        .iter()
        .map(|k| {
            let str_field = |key: &str| -> std::result::Result<String, String> {
                k.get(key)
                    .and_then(msgpack::Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| format!("a kernel has no string {key}"))
            };
            let name = str_field(".name")?;
            let symbol = str_field(".symbol")?;
            let symbol = symbol.strip_suffix(".kd").unwrap_or(&symbol).to_string();
            let args = match k.get(".args") {
                None => Vec::new(),
                Some(args) => args
                    .as_array()
                    .ok_or_else(|| format!("kernel {name}: .args is not an array"))?
                    .iter()
                    .map(|a| {
                        let int = |key: &str| {
                            a.get(key)
                                .and_then(msgpack::Value::as_u64)
                                .ok_or_else(|| format!("kernel {name}: an argument has no {key}"))
                        };
                        Ok(KernelArg {
                            value_kind: a
                                .get(".value_kind")
                                .and_then(msgpack::Value::as_str)
                                .ok_or_else(|| {
                                    format!("kernel {name}: an argument has no .value_kind")
                                })?
                                .to_string(),
                            size: int(".size")?,
                            offset: int(".offset")?,
                        })
                    })
                    .collect::<std::result::Result<Vec<_>, String>>()?,
            };
            let max_flat_workgroup_size = match k.get(".max_flat_workgroup_size") {
                None => DEFAULT_MAX_FLAT_WORKGROUP_SIZE,
                Some(v) => v
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| format!("kernel {name}: bad .max_flat_workgroup_size"))?,
            };
            let reqd_workgroup_size = match k.get(".reqd_workgroup_size") {
                None => None,
                Some(v) => {
                    let dims: Option<Vec<u32>> = v.as_array().map(|a| {
                        a.iter()
                            .filter_map(|d| d.as_u64().and_then(|d| u32::try_from(d).ok()))
                            .collect()
                    });
                    match dims.as_deref() {
                        Some(&[x, y, z]) => Some([x, y, z]),
                        _ => return Err(format!("kernel {name}: bad .reqd_workgroup_size")),
                    }
                }
            };
            let group_segment_fixed_size = match k.get(".group_segment_fixed_size") {
                None => 0,
                Some(v) => v
                    .as_u64()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| format!("kernel {name}: bad .group_segment_fixed_size"))?,
            };
            Ok(KernelInfo {
                symbol,
                name,
                args,
                max_flat_workgroup_size,
                reqd_workgroup_size,
                group_segment_fixed_size,
            })
        })
        .collect()
}

/// A MessagePack decoder, just enough for AMDGPU kernel metadata: every type is decoded, and
/// hostile input (lengths past the end, nesting deeper than [`msgpack::MAX_DEPTH`]) is an
/// error, never a panic or an unbounded allocation.
pub(crate) mod msgpack {
    /// Nesting limit.
    pub(crate) const MAX_DEPTH: usize = 32;

    /// A decoded value.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) enum Value {
        Nil,
        Bool(bool),
        Int(i128),
        Float(f64),
        Str(String),
        Bin(Vec<u8>),
        Array(Vec<Value>),
        Map(Vec<(Value, Value)>),
        Ext(i8, Vec<u8>),
    }

    impl Value {
        /// The value of string key `key` of a map.
        pub(crate) fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Map(entries) => entries
                    .iter()
                    .find(|(k, _)| k.as_str() == Some(key))
                    .map(|(_, v)| v),
                _ => None,
            }
        }

        pub(crate) fn as_str(&self) -> Option<&str> {
            match self {
                Value::Str(s) => Some(s),
                _ => None,
            }
        }

        pub(crate) fn as_u64(&self) -> Option<u64> {
            match self {
                Value::Int(v) => u64::try_from(*v).ok(),
                _ => None,
            }
        }

        pub(crate) fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(items) => Some(items),
                _ => None,
            }
        }
    }

    struct Reader<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    type R<T> = std::result::Result<T, String>;

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> R<&'a [u8]> {
            let end = self
                .at
                .checked_add(n)
                .filter(|&end| end <= self.bytes.len())
                .ok_or_else(|| format!("MessagePack truncated at byte {}", self.at))?;
            let out = &self.bytes[self.at..end];
            self.at = end;
            Ok(out)
        }

        fn uint(&mut self, n: usize) -> R<u64> {
            Ok(self
                .take(n)?
                .iter()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b)))
        }

        fn int(&mut self, n: usize) -> R<i64> {
            let v = self.uint(n)?;
            let shift = 64 - 8 * n as u32;
            Ok(((v << shift) as i64) >> shift)
        }

        /// A container of `n` items: each needs at least one byte, so a count past the end is
        /// refused before allocating.
        fn count(&self, n: u64, per_item: u64) -> R<usize> {
            let left = (self.bytes.len() - self.at) as u64;
            if n.saturating_mul(per_item) > left {
                return Err(format!(
                    "MessagePack container of {n} items at byte {} exceeds the data",
                    self.at
                ));
            }
            Ok(n as usize)
        }

        fn str(&mut self, n: u64) -> R<Value> {
            let bytes = self.take(n as usize)?;
            String::from_utf8(bytes.to_vec())
                .map(Value::Str)
                .map_err(|_| "MessagePack string is not UTF-8".to_string())
        }

        fn array(&mut self, n: u64, depth: usize) -> R<Value> {
            let n = self.count(n, 1)?;
            (0..n)
                .map(|_| self.value(depth + 1))
                .collect::<R<_>>()
                .map(Value::Array)
        }

        fn map(&mut self, n: u64, depth: usize) -> R<Value> {
            let n = self.count(n, 2)?;
            (0..n)
                .map(|_| Ok((self.value(depth + 1)?, self.value(depth + 1)?)))
                .collect::<R<_>>()
                .map(Value::Map)
        }

        fn ext(&mut self, n: usize) -> R<Value> {
            let kind = self.take(1)?[0] as i8;
            Ok(Value::Ext(kind, self.take(n)?.to_vec()))
        }

        fn value(&mut self, depth: usize) -> R<Value> {
            if depth > MAX_DEPTH {
                return Err(format!("MessagePack nested deeper than {MAX_DEPTH}"));
            }
            let tag = self.take(1)?[0];
            Ok(match tag {
                0x00..=0x7f => Value::Int(i128::from(tag)),
                0x80..=0x8f => self.map(u64::from(tag & 0x0f), depth)?,
                0x90..=0x9f => self.array(u64::from(tag & 0x0f), depth)?,
                0xa0..=0xbf => self.str(u64::from(tag & 0x1f))?,
                0xc0 => Value::Nil,
                0xc2 => Value::Bool(false),
                0xc3 => Value::Bool(true),
                0xc4..=0xc6 => {
                    let n = self.uint(1 << (tag - 0xc4))? as usize;
                    Value::Bin(self.take(n)?.to_vec())
                }
                0xc7..=0xc9 => {
                    let n = self.uint(1 << (tag - 0xc7))? as usize;
                    self.ext(n)?
                }
                0xca => Value::Float(f64::from(f32::from_bits(self.uint(4)? as u32))),
                0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
                0xcc..=0xcf => Value::Int(i128::from(self.uint(1 << (tag - 0xcc))?)),
                0xd0..=0xd3 => Value::Int(i128::from(self.int(1 << (tag - 0xd0))?)),
                0xd4..=0xd8 => self.ext(1 << (tag - 0xd4))?,
                0xd9..=0xdb => {
                    let n = self.uint(1 << (tag - 0xd9))?;
                    self.str(n)?
                }
                0xdc | 0xdd => {
                    let n = self.uint(if tag == 0xdc { 2 } else { 4 })?;
                    self.array(n, depth)?
                }
                0xde | 0xdf => {
                    let n = self.uint(if tag == 0xde { 2 } else { 4 })?;
                    self.map(n, depth)?
                }
                0xe0..=0xff => Value::Int(i128::from(tag as i8)),
                0xc1 => return Err("MessagePack byte 0xc1 is never used".into()),
            })
        }
    }

    /// Decodes one value from `bytes` (trailing bytes are ignored: notes are padded).
    pub(crate) fn decode(bytes: &[u8]) -> std::result::Result<Value, String> {
        Reader { bytes, at: 0 }.value(0)
    }
}

#[cfg(test)]
mod tests {
    use super::msgpack::{decode, Value};
    use super::*;

    /// The conformance kernels (`crate::rtc::CONFORMANCE_KERNELS_SOURCE`) compiled by hiprtc
    /// for gfx900 (HIP 5.2.3, code object v4): a real code object to validate without a GPU.
    const GFX900: &[u8] = include_bytes!("../tests/data/conformance-gfx900.hsaco");
    /// `tests/data/conformance.hip` built by `hipcc --genco --offload-arch=gfx900
    /// --offload-arch=gfx90a:xnack+ -O3` (HIP 5.2.3, clang 15): an offload bundle.
    const BUNDLE: &[u8] = include_bytes!("../tests/data/conformance-bundle.co");

    /// The byte range of each entry of a bundle, with its triple.
    fn entries(bytes: &[u8]) -> Vec<(String, std::ops::Range<usize>)> {
        bundle_entries(bytes)
            .unwrap()
            .into_iter()
            .map(|e| (e.triple.to_string(), e.range.0..e.range.1))
            .collect()
    }

    #[test]
    fn a_hipcc_offload_bundle_validates_every_code_object() {
        let image = module(BUNDLE, standard()).validate().unwrap();
        assert!(image.is_bundle());
        assert_eq!(image.targets(), ["gfx900", "gfx90a:xnack+"]);
        assert_eq!(image.bundle_triples(), image::BUNDLE_TRIPLES);
        assert_eq!(image.kernels("saxpy_f32").count(), 2);
        assert!(image.check_entry_point(&standard()[2]).unwrap());
        assert!(!image.check_entry_point(&standard()[0]).unwrap());
        // The host entry is empty; the gfx900 entry is the same kernels hiprtc builds.
        let found = entries(BUNDLE);
        assert_eq!(found[0].0, "host-x86_64-unknown-linux");
        assert!(found[0].1.is_empty());
        let gfx900 = CodeObject::parse(&BUNDLE[found[1].1.clone()]).unwrap();
        let mut names = gfx900.kernel_names();
        names.sort();
        assert_eq!(names, ["add_one_u32", "fail", "saxpy_f32"]);
        // A bundle made here from the hiprtc code object validates too, laid out as hipcc's.
        let ours = offload_bundle(&[GFX900]).unwrap();
        let image = module(&ours, standard()).validate().unwrap();
        assert_eq!(image.bundle_triples(), [TRIPLE_900]);
        assert_eq!(entries(&ours)[1].1.start, entries(BUNDLE)[1].1.start);
        let gfx90a = &BUNDLE[entries(BUNDLE)[2].1.clone()];
        let both = offload_bundle(&[GFX900, gfx90a]).unwrap();
        assert_eq!(
            ValidatedImage::parse(&both).unwrap().bundle_triples(),
            image::BUNDLE_TRIPLES
        );
        assert!(err(offload_bundle(&[])).message().contains("at least one"));
        let e = err(offload_bundle(&[GFX900, GFX900]));
        assert!(
            e.message().contains("already has a code object for gfx900"),
            "{e}"
        );
        let e = err(offload_bundle(&[GFX900, &GFX900[..100]]));
        assert!(e.message().starts_with("code object 1: truncated"), "{e}");
    }

    const TRIPLE_900: &str = "hipv4-amdgcn-amd-amdhsa--gfx900";

    mod image {
        /// The GPU entries of `BUNDLE`.
        pub const BUNDLE_TRIPLES: [&str; 2] = [
            "hipv4-amdgcn-amd-amdhsa--gfx900",
            "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+",
        ];
    }

    #[test]
    fn a_bundle_entry_that_is_bad_is_refused_naming_it() {
        let found = entries(BUNDLE);
        let gfx90a = found[2].1.clone();
        let check = |bytes: &[u8], expected: &str| {
            let e = module(bytes, standard()).validate().unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains(expected), "{expected}: {e}");
        };
        // The table: the count, an entry's numbers, its triple, its bytes.
        check(&BUNDLE[..30], "ends before its entry count");
        let patched = |at: usize, value: &[u8]| {
            let mut bytes = BUNDLE.to_vec();
            bytes[at..at + value.len()].copy_from_slice(value);
            bytes
        };
        check(&patched(24, &0u64.to_le_bytes()), "declares 0 entries");
        check(
            &patched(24, &u64::MAX.to_le_bytes()),
            "which its table cannot hold",
        );
        // The table is 32 bytes, then (24 + triple) per entry: entry 2 starts at 136.
        check(&BUNDLE[..140], "entry 2's offset lies past the end");
        check(
            &BUNDLE[..100],
            "declares 3 entries, which its table cannot hold",
        );
        // Entry 1's offset is at 32 + 24 + 25 (the host entry and its triple).
        let entry1 = 32 + 24 + 25;
        check(
            &patched(entry1 + 8, &(BUNDLE.len() as u64).to_le_bytes()),
            "entry 1 (hipv4-amdgcn-amd-amdhsa--gfx900) declares bytes",
        );
        check(&patched(entry1, &u64::MAX.to_le_bytes()), "past the end");
        check(
            &patched(entry1 + 16, &(1u64 << 40).to_le_bytes()),
            "entry 1's triple",
        );
        check(&patched(entry1 + 24, b"\0"), "is not printable text");
        // An entry's code object, checked as one loaded alone, and named.
        check(
            &patched(gfx90a.start + 18, &62u16.to_le_bytes()),
            "offload bundle entry 2 (hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+, bytes",
        );
        check(
            &patched(gfx90a.start + 18, &62u16.to_le_bytes()),
            "e_machine is 62",
        );
        let cut = &BUNDLE[..gfx90a.end - 1];
        check(
            cut,
            "entry 2 (hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+) declares bytes",
        );
        // A label that does not name the code object's target: HIP would pick it by label.
        let at = BUNDLE
            .windows(13)
            .position(|w| w == b"gfx90a:xnack+")
            .unwrap();
        check(
            &patched(at, b"gfx906:xnack+"),
            "labelled gfx906:xnack+ but holds a code object for gfx90a:xnack+",
        );
        check(
            &patched(at, b"gfx90a:xnack-"),
            "labelled gfx90a:xnack- but holds a code object for gfx90a:xnack+",
        );
        // Every entry lies inside, even an empty one that HIP does not load.
        let host_offset = 32;
        check(
            &patched(host_offset, &(BUNDLE.len() as u64 + 1).to_le_bytes()),
            "entry 0 (host-x86_64-unknown-linux) declares bytes",
        );
        // An empty HIP entry is no code object.
        check(
            &write_bundle(&[
                (TRIPLE_900, &[]),
                ("hipv4-amdgcn-amd-amdhsa--gfx90a", GFX900),
            ]),
            "offload bundle entry 0 (hipv4-amdgcn-amd-amdhsa--gfx900, empty, at offset 4096): \
             not an AMDGPU code object",
        );
        // Entries of every kind HIP loads are checked, and labels it may read otherwise
        // than the checks here are refused.
        let mut x86 = GFX900.to_vec();
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        check(
            &write_bundle(&[
                (TRIPLE_900, GFX900),
                ("hcc-amdgcn-amd-amdhsa--gfx906", &x86),
            ]),
            "offload bundle entry 1 (hcc-amdgcn-amd-amdhsa--gfx906, bytes 12288..",
        );
        for (label, expected) in [
            ("hip-amdgcn-amd-amdhsa-gfx906", "older toolchains wrote"),
            ("hip-spirv64-amd-amdhsa--amdgcnspirv", "a SPIR-V entry"),
            (
                "hipv4",
                "whose label is not <kind>-amdgcn-amd-amdhsa--<target ID>",
            ),
        ] {
            let e = module(
                &write_bundle(&[(TRIPLE_900, GFX900), (label, &x86)]),
                standard(),
            )
            .validate()
            .unwrap_err();
            assert!(
                e.message()
                    .starts_with(&format!("offload bundle entry 1 ({label}, bytes 12288..")),
                "{e}"
            );
            assert!(e.message().contains(expected), "{expected}: {e}");
        }
        // The same target twice, no HIP entry, a nested or compressed bundle.
        check(
            &write_bundle(&[(TRIPLE_900, GFX900), (TRIPLE_900, GFX900)]),
            "the bundle already has a code object for gfx900",
        );
        check(
            &write_bundle(&[
                (HOST_TRIPLE, &[]),
                ("openmp-amdgcn-amd-amdhsa--gfx900", GFX900),
            ]),
            "holds no HIP code object (an entry labelled hipv4-amdgcn-amd-amdhsa--<target>); its \
             entries are [host-x86_64-unknown-linux, openmp-amdgcn-amd-amdhsa--gfx900]",
        );
        check(&write_bundle(&[(TRIPLE_900, BUNDLE)]), "do not nest");
        let mut compressed = b"CCOB".to_vec();
        compressed.extend_from_slice(&BUNDLE[4..]);
        check(&compressed, "compressed offload bundle (CCOB");
        let e = module(BUNDLE, vec![]).validate().unwrap_err();
        assert!(
            e.message().contains(
                "its offload bundle holds code objects for [gfx900, gfx90a:xnack+]; the gfx900 \
                 one has kernels ["
            ),
            "{e}"
        );
        // Entry points are checked against every code object, naming the one that fails.
        let mut wrong = standard();
        wrong[1].constant_count = 1;
        let e = module(BUNDLE, wrong).validate().unwrap_err();
        assert!(
            e.message()
                .starts_with("offload bundle code object for gfx900: entry point 'saxpy_f32'"),
            "{e}"
        );
    }

    #[test]
    fn bundle_triples_name_their_targets() {
        assert_eq!(bundle_target(TRIPLE_900), BundleTarget::Hip("gfx900"));
        assert_eq!(
            bundle_target("hip-amdgcn-amd-amdhsa--gfx90a:sramecc-:xnack-"),
            BundleTarget::Hip("gfx90a:sramecc-:xnack-")
        );
        assert_eq!(
            bundle_target("hcc-amdgcn-amd-amdhsa--gfx906"),
            BundleTarget::Hip("gfx906")
        );
        for other in [
            "host-x86_64-unknown-linux",
            "openmp-amdgcn-amd-amdhsa--gfx900",
            "hipx-amdgcn-amd-amdhsa--gfx900",
        ] {
            assert_eq!(bundle_target(other), BundleTarget::Other, "{other}");
        }
        // Kinds HIP loads, labelled in a way no code object checked here is: refused.
        for unrecognised in [
            "hipv4-nvptx64-nvidia-cuda--sm_90",
            "hipv4-amdgcn-amd-amdhsa--",
            "hipv4-amdgcn-amd-amdhsa",
            "hip-amdgcn-amd-amdhsa-gfx906",
            "hipv4-amdgcn-amd-amdhsa-gnu-gfx900",
            "hipv4",
            "hcc",
            "hip-spirv64-amd-amdhsa--amdgcnspirv",
        ] {
            assert!(
                matches!(bundle_target(unrecognised), BundleTarget::Unrecognised(_)),
                "{unrecognised}"
            );
        }
        assert!(target_matches("gfx90a", "gfx90a:sramecc+:xnack-", 4));
        assert!(target_matches("gfx90a:xnack-", "gfx90a:sramecc+:xnack-", 4));
        assert!(!target_matches(
            "gfx90a:xnack+",
            "gfx90a:sramecc+:xnack-",
            4
        ));
        assert!(!target_matches("gfx90a:xnack-", "gfx90a", 4));
        assert!(!target_matches("gfx90", "gfx90a", 4));
        // v3: xnack off is no feature at all.
        assert!(target_matches("gfx906:xnack-", "gfx906", 3));
        assert!(!target_matches("gfx906:xnack-", "gfx906:xnack+", 3));
        assert!(target_matches("gfx906:xnack+", "gfx906:xnack+", 3));
    }

    fn entry(name: &str, wg: [u32; 3], bindings: u32, constants: u32) -> EntryPoint {
        EntryPoint {
            name: name.into(),
            workgroup_size: wg,
            binding_count: bindings,
            constant_count: constants,
        }
    }

    fn standard() -> Vec<EntryPoint> {
        vec![
            entry("add_one_u32", [64, 1, 1], 1, 1),
            entry("saxpy_f32", [64, 1, 1], 2, 2),
            entry("fail", [1, 1, 1], 0, 0),
        ]
    }

    fn module(code: &[u8], entries: Vec<EntryPoint>) -> HipModule {
        HipModule::new(code.to_vec(), entries)
    }

    fn err(result: Result<impl fmt::Debug>) -> Error {
        result.expect_err("expected an error")
    }

    #[test]
    fn real_code_object_validates_with_its_metadata() {
        let image = module(GFX900, standard()).validate().unwrap();
        assert!(!image.is_bundle());
        let code = &image.code_objects()[0];
        assert_eq!(code.version, 4);
        assert!(code.target.starts_with("gfx900"), "{}", code.target);
        let mut names = code.kernel_names();
        names.sort();
        assert_eq!(names, ["add_one_u32", "fail", "saxpy_f32"]);
        let saxpy = code.kernel("saxpy_f32").unwrap();
        let explicit: Vec<_> = saxpy
            .explicit_args()
            .map(|a| (a.value_kind.as_str(), a.size))
            .collect();
        assert_eq!(
            explicit,
            [
                ("global_buffer", 8),
                ("global_buffer", 8),
                ("by_value", 4),
                ("by_value", 4)
            ]
        );
        // Hidden arguments (global offsets, ...) follow; -O3 drops those the kernel ignores.
        assert!(saxpy.args.iter().skip(4).all(KernelArg::is_hidden));
        assert!(saxpy.max_flat_workgroup_size >= 64);
    }

    #[test]
    fn shared_memory_declarations_round_trip_and_are_checked() {
        let m = module(GFX900, standard())
            .with_shared_memory("saxpy_f32", 32 << 10)
            .unwrap();
        assert_eq!(m.shared_memory(1), 32 << 10);
        assert_eq!(m.shared_memory(7), 0);
        let bytes = m.to_bytes();
        assert!(bytes.starts_with(b"HLCNHIP2"));
        assert_eq!(HipModule::from_bytes(&bytes).unwrap(), m);
        m.validate().unwrap();
        let e = err(module(GFX900, standard()).with_shared_memory("nope", 4));
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(
            e.message().contains("[add_one_u32, saxpy_f32, fail]"),
            "{e}"
        );
        let mut long = module(GFX900, standard());
        long.shared_memory_bytes = vec![0; 4];
        let e = err(long.validate());
        assert!(e.message().contains("for 4 entry points but has 3"), "{e}");
    }

    #[test]
    fn byte_form_round_trips_and_bare_code_objects_are_refused() {
        let m = module(GFX900, standard());
        let bytes = m.to_bytes();
        assert!(bytes.starts_with(b"HLCNHIP1"));
        assert_eq!(HipModule::from_bytes(&bytes).unwrap(), m);
        let spec = ExecutableSpec::bytes(FORMAT_HSACO, bytes.clone());
        assert_eq!(*HipModule::from_spec(&spec).unwrap(), m);
        let native = m.clone().spec();
        assert_eq!(native.format, FORMAT_HSACO);
        assert_eq!(*HipModule::from_spec(&native).unwrap(), m);

        let e = err(HipModule::from_bytes(GFX900));
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(e.message().contains("no entry-point metadata"), "{e}");
        let e = err(HipModule::from_bytes(b"not a module"));
        assert!(e.message().contains("HLCNHIP1"), "{e}");
        for cut in [9, 12, 20, 30] {
            let e = err(HipModule::from_bytes(&bytes[..cut]));
            assert!(e.message().contains("truncated"), "{cut}: {e}");
        }
        let mut huge = HEADER_MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(HipModule::from_bytes(&huge))
            .message()
            .contains("entry points"));

        let other = ExecutableSpec::bytes("spirv", bytes);
        assert_eq!(
            err(HipModule::from_spec(&other)).code(),
            StatusCode::Unimplemented
        );
        let wrong = ExecutableSpec::native(FORMAT_HSACO, Arc::new(5u32));
        assert!(err(HipModule::from_spec(&wrong))
            .message()
            .contains("Arc<halcyon_hip::HipModule>"));
    }

    #[test]
    fn elf_header_checks_name_what_is_wrong() {
        let patched = |at: usize, value: &[u8]| {
            let mut code = GFX900.to_vec();
            code[at..at + value.len()].copy_from_slice(value);
            module(&code, standard()).validate().unwrap_err()
        };
        let cases: [(usize, &[u8], &str); 7] = [
            (0, b"\x7fELG", "ELF magic 7f 45 4c 46"),
            (4, &[1], "32-bit ELF"),
            (5, &[2], "little-endian"),
            (18, &62u16.to_le_bytes(), "e_machine is 62 (x86-64"),
            (7, &[65], "AMDGPU PAL"),
            (16, &ET_REL.to_le_bytes(), "relocatable object"),
            (8, &[0], "code object v2"),
        ];
        for (at, value, expected) in cases {
            let e = patched(at, value);
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().contains(expected), "{expected}: {e}");
        }

        let e = module(&[], standard()).validate().unwrap_err();
        assert!(e.message().contains("0 bytes in all"), "{e}");
        let e = module(&GFX900[..40], standard()).validate().unwrap_err();
        assert!(e.message().contains("shorter than an ELF64 header"), "{e}");
    }

    #[test]
    fn sections_and_segments_must_lie_inside_the_bytes() {
        // Cut before the section headers (at the end of the file), then inside the contents.
        for len in [GFX900.len() - 1, GFX900.len() / 2, 100] {
            let e = module(&GFX900[..len], standard()).validate().unwrap_err();
            assert!(e.message().contains("truncated or malformed"), "{len}: {e}");
        }
        // A section whose size runs past the end.
        let shoff = u64_at(GFX900, 40) as usize;
        let mut code = GFX900.to_vec();
        code[shoff + 64 + 32..shoff + 64 + 40].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = module(&code, standard()).validate().unwrap_err();
        assert!(e.message().contains("section 1"), "{e}");
        // Without sections (and so notes) there is no metadata.
        let mut code = GFX900.to_vec();
        code[40..48].copy_from_slice(&0u64.to_le_bytes());
        code[60..62].copy_from_slice(&0u16.to_le_bytes());
        let e = module(&code, standard()).validate().unwrap_err();
        assert!(e.message().contains("NT_AMDGPU_METADATA"), "{e}");
        // A section count of 0 with a section table is ELF's extended numbering: refused.
        let mut code = GFX900.to_vec();
        code[60..62].copy_from_slice(&0u16.to_le_bytes());
        let e = module(&code, standard()).validate().unwrap_err();
        assert!(e.message().contains("extended section numbering"), "{e}");
    }

    /// What ELF's structure points at inside the code object is checked before HIP follows it
    /// (`halcyon::backend::elf`): here a symbol name, a link and the section-name table.
    #[test]
    fn inner_references_must_stay_inside_the_code_object() {
        let header = |i: usize| u64_at(GFX900, 40) as usize + 64 * i;
        let dynsym = (0..usize::from(u16_at(GFX900, 60)))
            .find(|&i| u32_at(GFX900, header(i) + 4) == 11)
            .unwrap();
        let symbol = u64_at(GFX900, header(dynsym) + 24) as usize + 24;
        let patch = |at: usize, value: &[u8]| {
            let mut code = GFX900.to_vec();
            code[at..at + value.len()].copy_from_slice(value);
            code
        };
        let cases = [
            (
                patch(symbol, &u32::MAX.to_le_bytes()),
                format!("symbol 1 of table {dynsym} has its name at byte 4294967295"),
            ),
            (
                patch(header(dynsym) + 40, &99u32.to_le_bytes()),
                format!("section {dynsym}'s link is section 99"),
            ),
            (
                patch(62, &500u16.to_le_bytes()),
                "the section-name table is section 500".to_string(),
            ),
        ];
        for (code, expected) in cases {
            let e = module(&code, standard()).validate().unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
            assert!(e.message().starts_with("corrupt code object: "), "{e}");
            assert!(
                e.message().contains(&expected),
                "expected {expected:?}: {e}"
            );
        }
    }

    #[test]
    fn entry_points_are_checked_against_the_kernel_metadata() {
        let check = |entries: Vec<EntryPoint>| module(GFX900, entries).validate().unwrap_err();
        let e = check(vec![]);
        assert!(e.message().contains("no entry points"), "{e}");
        let e = check(vec![entry("nope", [64, 1, 1], 1, 1)]);
        assert_eq!(e.code(), StatusCode::NotFound);
        assert!(e.message().contains("no kernel 'nope'"), "{e}");
        assert!(e.message().contains("add_one_u32"), "{e}");
        let e = check(vec![entry("add_one_u32", [64, 1, 1], 1, 0)]);
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(
            e.message()
                .contains("takes [global_buffer (8 bytes), by_value (4 bytes)]"),
            "{e}"
        );
        let e = check(vec![entry("saxpy_f32", [64, 1, 1], 1, 3)]);
        assert!(e.message().contains("1 bindings and 3 constants"), "{e}");
        let e = check(vec![entry("add_one_u32", [2048, 1, 1], 1, 1)]);
        assert!(e.message().contains("__launch_bounds__"), "{e}");
        let e = check(vec![entry("add_one_u32", [64, 0, 1], 1, 1)]);
        assert!(e.message().contains("at least 1"), "{e}");
        let e = check(vec![
            entry("fail", [1, 1, 1], 0, 0),
            entry("fail", [1, 1, 1], 0, 0),
        ]);
        assert!(e.message().contains("used twice"), "{e}");
        // A subset, in any order, is fine.
        module(
            GFX900,
            vec![
                entry("fail", [32, 2, 1], 0, 0),
                entry("add_one_u32", [256, 1, 1], 1, 1),
            ],
        )
        .validate()
        .unwrap();
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
        let plain = code(vec![
            arg("global_buffer", 8),
            arg("by_value", 4),
            hidden.clone(),
        ]);
        assert!(!plain
            .check_entry_point(&entry("k", [64, 1, 1], 1, 1))
            .unwrap());
        let with_word = code(vec![
            arg("global_buffer", 8),
            arg("by_value", 4),
            arg("global_buffer", 8),
            hidden.clone(),
        ]);
        assert!(with_word
            .check_entry_point(&entry("k", [64, 1, 1], 1, 1))
            .unwrap());
        // Declared as two bindings and a constant, the same kernel is refused: its second
        // argument is no pointer.
        let e = with_word
            .check_entry_point(&entry("k", [64, 1, 1], 2, 1))
            .unwrap_err();
        assert!(e.message().contains("the status word"), "{e}");
        // Only a word of its own: `fail(unsigned int*)`.
        let word_only = code(vec![arg("global_buffer", 8), hidden.clone()]);
        assert!(word_only
            .check_entry_point(&entry("k", [1, 1, 1], 0, 0))
            .unwrap());
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
            let e = code(args)
                .check_entry_point(&entry("k", [64, 1, 1], 1, 1))
                .unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        }
        // A real code object: the checked-in gfx900 `fail(unsigned int* status)` takes the
        // word, `add_one_u32(x, n)` does not.
        let gfx900 = CodeObject::parse(GFX900).unwrap();
        assert!(gfx900
            .check_entry_point(&entry("fail", [1, 1, 1], 0, 0))
            .unwrap());
        assert!(!gfx900
            .check_entry_point(&entry("add_one_u32", [64, 1, 1], 1, 1))
            .unwrap());
    }

    #[test]
    fn target_ids() {
        assert_eq!(target_id(0x12c, 4), "gfx900");
        assert_eq!(target_id(0x23f | 0xc00, 4), "gfx90a:sramecc+:xnack-");
        assert_eq!(target_id(0x33f, 5), "gfx90a:xnack+");
        assert_eq!(target_id(0x341, 4), "gfx1100:xnack+");
        assert_eq!(target_id(0x84c, 5), "gfx942:sramecc-");
        assert_eq!(target_id(0x32c, 3), "gfx900:sramecc+:xnack+");
        assert_eq!(target_id(0x7f, 4), "EF_AMDGPU_MACH 0x7f");
    }

    #[test]
    fn msgpack_decodes_every_kind_and_refuses_hostile_input() {
        let bytes = [
            0x87, // map of 7
            0xa1, b'a', 0x05, // "a": 5
            0xa1, b'b', 0xd0, 0xfe, // "b": -2 (int8)
            0xa1, b'c', 0x92, 0xc3, 0xc0, // "c": [true, nil]
            0xa1, b'd', 0xcd, 0x01, 0x00, // "d": 256 (uint16)
            0xa1, b'e', 0xd9, 0x02, b'h', b'i', // "e": "hi" (str8)
            0xa1, b'f', 0xc4, 0x01, 0x07, // "f": bin [7]
            0xa1, b'g', 0xff, // "g": -1
        ];
        let v = decode(&bytes).unwrap();
        assert_eq!(v.get("a").unwrap().as_u64(), Some(5));
        assert_eq!(v.get("b"), Some(&Value::Int(-2)));
        assert_eq!(
            v.get("c").unwrap().as_array().unwrap(),
            [Value::Bool(true), Value::Nil]
        );
        assert_eq!(v.get("d").unwrap().as_u64(), Some(256));
        assert_eq!(v.get("e").unwrap().as_str(), Some("hi"));
        assert_eq!(v.get("f"), Some(&Value::Bin(vec![7])));
        assert_eq!(v.get("g"), Some(&Value::Int(-1)));
        assert_eq!(v.get("zz"), None);
        assert_eq!(
            decode(&[0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0]).unwrap(),
            Value::Float(1.0)
        );

        // Truncation, huge counts, deep nesting, the unused byte.
        assert!(decode(&[0xa5, b'x']).unwrap_err().contains("truncated"));
        assert!(decode(&[0xdd, 0xff, 0xff, 0xff, 0xff])
            .unwrap_err()
            .contains("exceeds"));
        assert!(decode(&[0x91; 100]).unwrap_err().contains("deeper"));
        assert!(decode(&[0xc1]).is_err());
        assert!(decode(&[]).is_err());
    }
}
