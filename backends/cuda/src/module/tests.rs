use super::binary::{validate_binary, ELF_MAGIC};
use super::ptx::strip_ptx_comments;
use super::*;

const PTX: &str = "//\n.version 8.0\n.target sm_52\n.address_size 64\n\n\
    .visible .entry add_one_u32(\n\t.param .u64 add_one_u32_param_0,\n\t.param .u32 \
    add_one_u32_param_1\n)\n{\n\tret;\n}\n.visible .entry fail()\n{\n\tret;\n}\n";

/// ptxas 12.8's cubin of tests/kernels/standard.ptx for sm_90.
const CUBIN: &[u8] = include_bytes!("../../tests/kernels/standard.sm_90.cubin");
/// fatbinary 13.0's fatbin of [`CUBIN`] and standard.ptx, uncompressed and compressed.
const FATBIN: &[u8] = include_bytes!("../../tests/kernels/standard.fatbin");
const COMPRESSED_FATBIN: &[u8] = include_bytes!("../../tests/kernels/standard.compressed.fatbin");

fn entry(name: &str, bindings: u32, constants: u32) -> EntryPoint {
    EntryPoint {
        name: name.into(),
        workgroup_size: [64, 1, 1],
        binding_count: bindings,
        constant_count: constants,
    }
}

fn module() -> CudaModule {
    CudaModule::ptx(PTX, vec![entry("add_one_u32", 1, 1), entry("fail", 0, 0)])
}

fn cubin_module() -> CudaModule {
    // SAFETY: CUBIN is ptxas's unmodified output, and add_one_u32 takes (u32*, u32).
    unsafe { CudaModule::binary(CUBIN, vec![entry("add_one_u32", 1, 1)]) }
}

/// A minimal ELF64 LE header of `total` bytes (at least 256) with three 64-byte section
/// headers at byte 64.
fn elf(total: usize) -> Vec<u8> {
    let mut b = vec![0u8; total];
    b[..4].copy_from_slice(ELF_MAGIC);
    b[4] = 2;
    b[5] = 1;
    b[0x28..0x30].copy_from_slice(&64u64.to_le_bytes()); // e_shoff
    b[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    b[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
    b
}

#[test]
fn packed_modules_round_trip_for_both_image_kinds() {
    let m = module().with_shared_memory("fail", 64 << 10).unwrap();
    let packed = m.to_packed();
    assert_eq!(packed.format(), FORMAT_CUDA);
    assert_eq!(packed.shared_memory(1), 64 << 10);
    assert_eq!(packed.image(), PTX.as_bytes());
    let read = PackedExecutable::from_bytes(&packed.to_bytes()).unwrap();
    assert_eq!(CudaModule::from_packed(&read).unwrap(), m);
    assert_eq!(m.ptx_text(), Some(PTX));
    assert!(!m.is_binary());

    let c = cubin_module();
    assert!(c.is_binary() && c.ptx_text().is_none());
    assert_eq!(c.kind(), "cubin");
    // SAFETY: the packed image is CUBIN, unmodified.
    let back = unsafe { CudaModule::from_packed_unchecked(&c.to_packed()) }.unwrap();
    assert_eq!(back, c);
}

#[test]
fn the_safe_path_refuses_packed_binaries() {
    for (image, kind) in [
        (CUBIN, "cubin"),
        (FATBIN, "fatbin"),
        (COMPRESSED_FATBIN, "fatbin"),
    ] {
        // SAFETY: the fixtures are unmodified ptxas and fatbinary output.
        let module = unsafe { CudaModule::binary(image, vec![entry("add_one_u32", 1, 1)]) };
        module.validate().unwrap();
        let packed = module.to_packed();
        let e = CudaModule::from_packed(&packed).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains(&format!("holds a {kind}")), "{e}");
        assert!(e.message().contains("from_packed_unchecked"), "{e}");
        // A checked spec of the same bytes is refused, naming the unsafe paths...
        let e = CudaModule::from_spec(&packed.spec()).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(
            e.message().contains("ExecutableSpec::bytes_unchecked")
                && e.message().contains("PackedExecutable::spec_unchecked"),
            "{e}"
        );
        // ...and an unchecked one, whose caller vouches for them, passes.
        // SAFETY: as above.
        let spec = unsafe { packed.spec_unchecked() };
        assert_eq!(*CudaModule::from_spec(&spec).unwrap(), module);
    }
    // Packed PTX loads from a checked spec.
    let spec = module().to_packed().spec();
    assert!(!spec.is_unchecked());
    assert_eq!(*CudaModule::from_spec(&spec).unwrap(), module());
}

#[test]
fn packed_executables_of_another_format_or_not_utf8_are_refused() {
    let other = PackedExecutable::new("spirv", vec![entry("fail", 0, 0)], PTX.into());
    let e = CudaModule::from_packed(&other).unwrap_err();
    assert!(e.message().contains("packed 'spirv' executable"), "{e}");
    let bad = PackedExecutable::new(FORMAT_CUDA, vec![entry("fail", 0, 0)], vec![b'.', 0xff]);
    let e = CudaModule::from_packed(&bad).unwrap_err();
    assert!(e.message().contains("not UTF-8 (at byte 1)"), "{e}");
    // The packed metadata is checked like any module's.
    let e = CudaModule::from_packed(&PackedExecutable::new(FORMAT_CUDA, vec![], PTX.into()))
        .unwrap_err();
    assert!(e.message().contains("at least one entry point"), "{e}");
}

#[test]
fn specs_of_both_sources_load_the_same_module() {
    let native = module().spec();
    assert_eq!(native.format, FORMAT_CUDA);
    assert_eq!(*CudaModule::from_spec(&native).unwrap(), module());
    // A native binary module carries the trust of its unsafe constructor.
    assert!(CudaModule::from_spec(&cubin_module().spec()).is_ok());
    let e = CudaModule::from_spec(&ExecutableSpec::bytes("spirv", vec![1u8])).unwrap_err();
    assert!(e.message().contains("loads 'cuda'"), "{e}");
    let e =
        CudaModule::from_spec(&ExecutableSpec::native(FORMAT_CUDA, Arc::new(5u32))).unwrap_err();
    assert!(e.message().contains("Arc<halcyon_cuda::CudaModule>"), "{e}");
}

#[test]
fn raw_images_and_garbage_are_refused_with_advice() {
    for (raw, kind) in [
        (PTX.as_bytes(), "raw PTX"),
        (CUBIN, "raw cubin"),
        (FATBIN, "raw fatbin"),
    ] {
        let e = CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, raw)).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(e.message().contains(kind), "{e}");
        assert!(e.message().contains("no entry-point metadata"), "{e}");
        assert!(e.message().contains("CudaModule::to_packed"), "{e}");
    }
    let e = CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, &b"hello"[..])).unwrap_err();
    assert!(e.message().contains("b\"HLCNEXE1\""), "{e}");
    // The old container is gone: its bytes are garbage too.
    let e =
        CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, &b"HLCNCUD1"[..])).unwrap_err();
    assert!(e.message().contains("PackedExecutable"), "{e}");
    // A malformed packed executable is the core's refusal.
    let mut bytes = module().to_packed().to_bytes();
    bytes.pop();
    let e = CudaModule::from_spec(&ExecutableSpec::bytes(FORMAT_CUDA, bytes)).unwrap_err();
    assert!(
        e.message().starts_with("malformed packed executable"),
        "{e}"
    );
}

#[test]
fn shared_memory_is_declared_by_name() {
    let m = module().with_shared_memory("fail", 64 << 10).unwrap();
    assert_eq!((m.shared_memory(0), m.shared_memory(1)), (0, 64 << 10));
    assert_eq!(m.shared_memory(2), 0);
    let e = module().with_shared_memory("empty", 16).unwrap_err();
    assert_eq!(e.code(), StatusCode::NotFound);
    assert!(e.message().contains("[add_one_u32, fail]"), "{e}");
}

#[test]
fn entry_point_metadata_is_validated() {
    let check = |e: EntryPoint| CudaModule::ptx(PTX, vec![e]).validate();
    let mut e = entry("add_one_u32", 1, 1);
    e.workgroup_size = [64, 0, 1];
    assert!(check(e.clone())
        .unwrap_err()
        .message()
        .contains("[64, 0, 1]"));
    e.workgroup_size = [1024, 2, 1];
    assert!(check(e.clone())
        .unwrap_err()
        .message()
        .contains("1024 threads"));
    e.workgroup_size = [1, 1, 65];
    check(e.clone()).unwrap_err();
    e.workgroup_size = [u32::MAX, u32::MAX, u32::MAX];
    check(e.clone()).unwrap_err();
    e.workgroup_size = [32, 32, 1];
    check(e.clone()).unwrap();
    let e = check(entry("add_one_u32", 500, 100)).unwrap_err();
    assert!(
        e.message().contains("4400 bytes of kernel parameters"),
        "{e}"
    );
    let e = CudaModule::ptx(PTX, vec![]).validate().unwrap_err();
    assert!(e.message().contains("at least one entry point"), "{e}");
    let twice = vec![entry("fail", 0, 0), entry("fail", 0, 0)];
    let e = CudaModule::ptx(PTX, twice).validate().unwrap_err();
    assert!(e.message().contains("'fail' is declared twice"), "{e}");
    let e = check(entry("a\0b", 0, 0)).unwrap_err();
    assert!(e.message().contains("NUL"), "{e}");
    // The same checks on the unsafe path.
    // SAFETY: validated only, never loaded.
    let e = unsafe { CudaModule::binary(CUBIN, vec![entry("", 0, 0)]) }
        .validate()
        .unwrap_err();
    assert!(e.message().contains("non-empty"), "{e}");
}

#[test]
fn ptx_must_define_every_entry_point() {
    assert_eq!(ptx_entries(PTX), ["add_one_u32", "fail"]);
    let e = CudaModule::ptx(PTX, vec![entry("saxpy_f32", 2, 2)])
        .validate()
        .unwrap_err();
    assert_eq!(e.code(), StatusCode::NotFound);
    assert!(
        e.message()
            .contains("no kernel 'saxpy_f32' (it defines: [add_one_u32, fail])"),
        "{e}"
    );
    assert!(e.message().contains("extern \"C\""), "{e}");
    let e = CudaModule::ptx(format!("{PTX}\0"), vec![entry("fail", 0, 0)])
        .validate()
        .unwrap_err();
    assert!(e.message().contains("NUL byte at offset"), "{e}");
    assert_eq!(
        ptx_entries(".entryx y\n// .entry\n.entry  _Z3fooPf ("),
        ["_Z3fooPf"]
    );
}

#[test]
fn binary_images_get_the_cheap_header_checks() {
    for image in [CUBIN, FATBIN, COMPRESSED_FATBIN] {
        validate_binary(image).unwrap();
    }
    validate_binary(&elf(256)).unwrap();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            elf(255),
            "cubin image is 255 bytes but its section header table extends to byte 256",
        ),
        (CUBIN[..63].to_vec(), "complete 64-byte header"),
        (
            {
                let mut b = elf(256);
                b[4] = 1;
                b
            },
            "64-bit little-endian",
        ),
        (
            {
                let mut b = elf(256);
                b[0x3a] = 72;
                b
            },
            "section headers are 72 bytes each",
        ),
        (
            {
                let mut b = elf(256);
                b[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes()); // e_phoff
                b[0x36] = 56;
                b[0x38] = 1;
                b
            },
            "program header table extends to byte 18446744073709551615",
        ),
        (FATBIN[..15].to_vec(), "less than its 16-byte header"),
        (
            FATBIN[..FATBIN.len() - 8].to_vec(),
            "its header declares it ends at byte",
        ),
        (
            {
                let mut b = FATBIN.to_vec();
                b[6..8].copy_from_slice(&8u16.to_le_bytes());
                b
            },
            "declares itself 8 bytes long",
        ),
        (PTX.as_bytes().to_vec(), "looks like PTX"),
        (vec![1, 2, 3], "starts with [01 02 03]"),
    ];
    for (image, expected) in cases {
        let e = validate_binary(&image).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains(expected), "expected {expected:?}: {e}");
    }
}

#[test]
fn kernel_params_must_match_the_metadata() {
    let e = entry("saxpy_f32", 2, 2);
    assert!(!check_kernel_params(&e, &[(0, 8), (8, 8), (16, 4), (20, 4)]).unwrap());
    assert!(!check_kernel_params(&e, &[]).unwrap());
    // One more 8-byte pointer after the constants: the status word.
    assert!(check_kernel_params(&e, &[(0, 8), (8, 8), (16, 4), (20, 4), (24, 8)]).unwrap());
    let status_only = entry("fail", 0, 0);
    assert!(check_kernel_params(&status_only, &[(0, 8)]).unwrap());
    check_kernel_params(&status_only, &[(0, 8), (8, 8)]).unwrap_err();
    let err = check_kernel_params(&e, &[(0, 8), (8, 8), (16, 4)]).unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert!(
        err.message()
            .contains("takes 3 parameters of sizes [8, 8, 4] bytes"),
        "{err}"
    );
    assert!(err.message().contains("[8, 8, 4, 4]"), "{err}");
    check_kernel_params(&e, &[(0, 8), (8, 8), (16, 8), (24, 4)]).unwrap_err();
    let e = check_kernel_params(&e, &[(0, 8), (8, 8), (16, 4), (20, 4), (24, 4)]).unwrap_err();
    assert!(e.message().contains("pointer to the status word"), "{e}");
}

/// PTX with NVRTC's layout (and hand-written variants) for the parameter parser.
const PARAMS_PTX: &str = ".version 8.0\n.target sm_52\n.address_size 64\n\n\
    \t// .globl\tfail\n.visible .entry fail(\n\t.param .u64 fail_param_0\n)\n{\n\tret;\n}\n\
    .visible .entry saxpy_f32(\n\t.param .u64 saxpy_f32_param_0,\n\t.param .u64 \
    saxpy_f32_param_1,\n\t.param .u32 saxpy_f32_param_2,\n\t.param .u32 \
    saxpy_f32_param_3 // n\n)\n{\n\tret;\n}\n\
    .entry checked(.param .u64 .ptr .global .align 4 checked_param_0, .param .f32 \
    checked_param_1, .param .u64 .ptr .align 1 checked_param_2)\n{\n\tret;\n}\n\
    .visible .entry wide(.param .align 8 .b8 wide_param_0[16], .param .u32 wide_param_1)\n\
    {\n\tret;\n}\n.visible .entry bare\n{\n\tret;\n}\n\
    .visible .entry narrow(.param .u64 narrow_param_0, .param .u32 narrow_param_1)\n{\n\tret;\n}\n";

#[test]
fn ptx_parameters_are_counted_per_entry() {
    assert_eq!(ptx_param_sizes(PTX, "add_one_u32"), Some(vec![8, 4]));
    assert_eq!(ptx_param_sizes(PTX, "fail"), Some(vec![]));
    assert_eq!(ptx_param_sizes(PTX, "add_one"), None, "a prefix of a name");
    assert_eq!(ptx_param_sizes(PTX, "nope"), None);
    assert_eq!(ptx_param_sizes(PARAMS_PTX, "fail"), Some(vec![8]));
    assert_eq!(
        ptx_param_sizes(PARAMS_PTX, "saxpy_f32"),
        Some(vec![8, 8, 4, 4])
    );
    assert_eq!(ptx_param_sizes(PARAMS_PTX, "checked"), Some(vec![8, 4, 8]));
    assert_eq!(ptx_param_sizes(PARAMS_PTX, "wide"), Some(vec![16, 4]));
    assert_eq!(ptx_param_sizes(PARAMS_PTX, "bare"), Some(vec![]));
    let commented = ".visible .entry c(/* x, y */ .param .u64 c_0, // n, m\n/* n */\n\
                     .param .u32 c_1)\n// .entry c(.param .u32 z)\n";
    assert_eq!(ptx_param_sizes(commented, "c"), Some(vec![8, 4]));
    // An unterminated block comment hides the rest; a lone slash is code.
    assert_eq!(
        ptx_param_sizes(".entry c(.param .u64 a) / 2 /* .entry d(", "d"),
        None
    );
    assert_eq!(strip_ptx_comments("a/b/*x\ny*/c//z\nd"), "a/b \nc \nd");
    // A comment marker in a string starts no comment: the compiler sees the first `k`,
    // with three parameters, and `// */ ...` as a comment.
    let file = ".file 1 \"/*\"\n.visible .entry k(.param .u64 a, .param .u64 b, .param \
                .u64 c)\n{\n}\n// */ .visible .entry k(.param .u64 a)\n";
    assert_eq!(ptx_param_sizes(file, "k"), Some(vec![8, 8, 8]));
    let escaped = ".file 1 \"a\\\"//\" .entry k(.param .u64 a)\n";
    assert_eq!(ptx_param_sizes(escaped, "k"), Some(vec![8]));
    // An unterminated string ends with its line; a multi-byte character is copied whole.
    assert_eq!(strip_ptx_comments("\"é/*\nx//y"), "\"é/*\nx ");
    assert_eq!(strip_ptx_comments("\"\\é/*\"//"), "\"\\é/*\" ");
    // A string a backslash continues onto the next line is refused.
    for end in ["\n", "\r\n"] {
        let text = format!("{PTX}.file 1 \"a\\{end}/*\"\n");
        let e = ptx_error(&text, vec![entry("fail", 0, 0)]);
        let line = PTX.lines().count() + 1;
        assert!(e.message().contains(&format!("ending line {line}")), "{e}");
    }
}

#[test]
fn ptx_kernels_with_more_parameters_than_the_metadata_are_refused() {
    // b + c parameters: no status word; b + c + 1 with a trailing pointer: a status word.
    assert!(!ptx_status_word(PTX, &entry("add_one_u32", 1, 1)).unwrap());
    assert!(!ptx_status_word(PTX, &entry("fail", 0, 0)).unwrap());
    assert!(ptx_status_word(PARAMS_PTX, &entry("fail", 0, 0)).unwrap());
    assert!(!ptx_status_word(PARAMS_PTX, &entry("saxpy_f32", 2, 2)).unwrap());
    assert!(ptx_status_word(PARAMS_PTX, &entry("checked", 1, 1)).unwrap());
    assert!(ptx_status_word(PARAMS_PTX, &entry("narrow", 1, 0))
        .unwrap_err()
        .message()
        .contains("sizes [8, 4]"));
    // Neither b + c nor b + c + 1, or a trailing parameter that is not a pointer.
    for (name, bindings, constants) in [
        ("saxpy_f32", 2, 1),
        ("saxpy_f32", 1, 1),
        ("saxpy_f32", 2, 3),
        ("saxpy_f32", 3, 2),
        ("fail", 1, 1),
        ("wide", 0, 2),
        ("bare", 1, 0),
    ] {
        let e = ptx_status_word(PARAMS_PTX, &entry(name, bindings, constants)).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{name}: {e}");
        assert!(
            e.message().contains(&format!("kernel '{name}' takes")),
            "{e}"
        );
        assert!(e.message().contains("status word"), "{e}");
    }
    let e = ptx_status_word(PARAMS_PTX, &entry("nope", 0, 0)).unwrap_err();
    assert!(e.message().contains("no kernel 'nope'"), "{e}");
    // Loading (validation, no GPU) refuses a PTX signature that matches neither, whichever
    // way the module came.
    let module = CudaModule::ptx(PARAMS_PTX, vec![entry("saxpy_f32", 2, 1)]);
    let e = module.validate().unwrap_err();
    assert!(
        e.message()
            .contains("takes 4 parameters of sizes [8, 8, 4, 4]"),
        "{e}"
    );
    CudaModule::from_spec(&module.to_packed().spec()).unwrap_err();
    CudaModule::ptx(
        PARAMS_PTX,
        vec![entry("fail", 0, 0), entry("checked", 1, 1)],
    )
    .validate()
    .unwrap();
}

/// `validate`'s error for the PTX `text` declaring the entry points `entries`.
fn ptx_error(text: &str, entries: Vec<EntryPoint>) -> Error {
    let e = CudaModule::ptx(text, entries).validate().unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    e
}

#[test]
fn ptx_the_driver_could_take_for_a_binary_is_refused() {
    // The driver sniffs the content: PTX text starting with the ELF magic is read as a cubin.
    let elf_text = format!(
        "\x7fELF\x02\x01\x01{}\n.visible .entry k(.param .u64 p)\n{{\n\tret;\n}}\n",
        "\x01".repeat(57)
    );
    let e = ptx_error(&elf_text, vec![entry("k", 1, 0)]);
    assert!(e.message().contains("starts with the ELF magic"), "{e}");
    assert!(e.message().contains("CudaModule::binary"), "{e}");
    // Packed, the same text is a binary image by its content: the safe path refuses it.
    let packed = CudaModule::ptx(elf_text, vec![entry("k", 1, 0)]).to_packed();
    let e = CudaModule::from_spec(&packed.spec()).unwrap_err();
    assert!(e.message().contains("bytes_unchecked"), "{e}");
    // Control bytes but tab, line feed and carriage return, anywhere.
    for (at, byte) in [(3, '\x01'), (20, '\x0c'), (PTX.len() - 2, '\x7f')] {
        let mut text = PTX.to_string();
        text.insert(at, byte);
        let e = ptx_error(&text, vec![entry("fail", 0, 0)]);
        assert!(
            e.message().contains(&format!(
                "control byte 0x{:02x} at byte offset {at}",
                byte as u8
            )),
            "{e}"
        );
    }
    let crlf = PTX.replace('\n', "\r\n").replace("    ", "\t");
    CudaModule::ptx(crlf, vec![entry("add_one_u32", 1, 1)])
        .validate()
        .unwrap();
    // A binary constructor given PTX: refused by the cheap checks.
    // SAFETY: validated only, never loaded.
    let e = unsafe { CudaModule::binary(PTX, vec![entry("fail", 0, 0)]) }
        .validate()
        .unwrap_err();
    assert!(e.message().contains("use CudaModule::ptx"), "{e}");
}

#[test]
fn ptx_with_preprocessor_directives_is_refused() {
    let head = ".version 8.0\n.target sm_52\n.address_size 64\n";
    let kernel = ".visible .entry k(.param .u64 a, .param .u32 n)\n{\n\tret;\n}\n";
    for text in [
        format!("{head}#define u32 u64\n{kernel}"),
        format!("{head}  \t#include \"x.ptx\"\n{kernel}"),
        format!("{head}/* x */ # define u32 u64\n{kernel}"),
    ] {
        let e = ptx_error(&text, vec![entry("k", 1, 1)]);
        assert!(
            e.message().contains("preprocessor directive on line 4"),
            "{e}"
        );
    }
    // In comments, a directive is text.
    let commented = format!("{head}// #define u32 u64\n/*\n#if 0\n*/\n{kernel}");
    CudaModule::ptx(commented, vec![entry("k", 1, 1)])
        .validate()
        .unwrap();
}

#[test]
fn ptx_parameter_arrays_are_sized_whatever_their_spacing() {
    let kernel = |param: &str| format!(".visible .entry k(.param .u64 a, {param})\n{{\n}}\n");
    for (param, size) in [
        (".param .u32 n[2]", 8),
        (".param .u32 n[2 ]", 8),
        (".param .u32 n[ 2]", 8),
        (".param .u32 n [ 2 ] ", 8),
        (".param .align 4 .b8 n[2][3]", 6),
        (".param .b8 n[ 2 ] [ 3 ]", 6),
        (".param .v4 .u32 n", 16),
        (".param .u32 n[two]", 0),
        (".param .u32 n[2", 0),
        (".param .u32 n[2]x", 0),
    ] {
        assert_eq!(
            ptx_param_sizes(&kernel(param), "k"),
            Some(vec![8, size]),
            "{param}"
        );
    }
    // An array of two u32 is 8 bytes: not the one u32 constant the metadata declares.
    let e = ptx_error(&kernel(".param .u32 n[2 ]"), vec![entry("k", 1, 1)]);
    assert!(e.message().contains("sizes [8, 8]"), "{e}");
}

#[test]
fn ptx_parameter_sizes_that_overflow_are_refused() {
    // 8 × 3e18 overflows; 8 × (2^61 + 1) wraps to 8, one pointer's size.
    for count in ["3000000000000000000", "2305843009213693953"] {
        let ptx = format!(".version 8.0\n.visible .entry k(.param .b64 p[{count}])\n{{\n}}\n");
        assert_eq!(ptx_param_sizes(&ptx, "k"), Some(vec![usize::MAX]));
        let e = ptx_error(&ptx, vec![entry("k", 1, 0)]);
        assert!(
            e.message()
                .contains(&format!("parameter `.param .b64 p[{count}]`, whose size")),
            "{e}"
        );
        assert!(e.message().contains("overflows"), "{e}");
    }
}
