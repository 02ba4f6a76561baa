//! The kernel metadata of a code object: the `NT_AMDGPU_METADATA` note (owner `AMDGPU`,
//! type 32), MessagePack decoded by [`rmpv`] with a bounded nesting depth, read into each
//! kernel's [`KernelInfo`]: `.name`, `.symbol`, `.args`, `.max_flat_workgroup_size`,
//! `.reqd_workgroup_size` and `.group_segment_fixed_size`.
//!
//! Errors are plain strings here; [`CodeObject::parse`](super::CodeObject::parse) names the
//! code object they come from.

use halcyon::Result;
use object::elf;
use object::LittleEndian as LE;

use super::{KernelArg, KernelInfo};

/// `NT_AMDGPU_METADATA`: the MessagePack kernel metadata of code object v3 and later.
const NT_AMDGPU_METADATA: u32 = 32;

/// Workgroup size limit of a kernel without `__launch_bounds__` / `amdgpu-flat-work-group-size`.
const DEFAULT_MAX_FLAT_WORKGROUP_SIZE: u32 = 1024;

/// How deep the metadata's MessagePack may nest (it nests four levels).
const MAX_METADATA_DEPTH: usize = 32;

/// The descriptor of the `AMDGPU` / `NT_AMDGPU_METADATA` note among `notes`, if there is one.
pub(super) fn metadata_note<'a>(
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
pub(super) fn parse_kernels(note: &[u8]) -> std::result::Result<Vec<KernelInfo>, String> {
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
