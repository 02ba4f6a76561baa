//! Unit tests of the code-object reading: the fixtures' metadata read exactly, bundles and
//! their tables, the ELF header checks, status words, bad metadata and target IDs.

use super::bundle::{bundle_entries, write_bundle, HOST_TRIPLE};
use super::metadata::parse_kernels;
use super::*;

/// The conformance kernels (`tests/data/conformance.hip`) compiled by hiprtc for gfx900
/// (HIP 5.2.3, code object v4).
const GFX900: &[u8] = include_bytes!("../../tests/data/conformance-gfx900.hsaco");
/// `tests/data/conformance.hip` built by `hipcc --genco --offload-arch=gfx900
/// --offload-arch=gfx90a:xnack+ -O3` (HIP 5.2.3, clang 15): an offload bundle.
const BUNDLE: &[u8] = include_bytes!("../../tests/data/conformance-bundle.co");
/// `tests/data/shared.hip` (`block_sum_u32`, dynamic LDS) for gfx900.
const SHARED: &[u8] = include_bytes!("../../tests/data/shared-gfx900.hsaco");

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
    let kernels = parse_kernels(&encode(&kernel((".args", rmpv::Value::Array(vec![]))))).unwrap();
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
