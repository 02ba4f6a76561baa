//! Tests of the C-ABI format: specs, loading libraries built with the system `cc`, and
//! refusals of bad entry-point tables.

use std::process::Command;

use halcyon::ExecutableSource;

use super::*;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// A temporary directory removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new() -> TestDir {
        let path = std::env::temp_dir().join(format!(
            "halcyon-cpu-c-abi-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create test directory");
        TestDir(path)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// Compiles `source` into a shared library in `dir` and returns its path, or `None` (after
/// saying why) when there is no C compiler.
fn compile_in(dir: &TestDir, name: &str, source: &str, defines: &[&str]) -> Option<PathBuf> {
    let c_path = dir.0.join(format!("{name}.c"));
    std::fs::write(&c_path, source).expect("write C source");
    let so_path = dir.0.join(format!("{name}.so"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let output = Command::new(&cc)
        .args([
            "-shared", "-fPIC", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror",
        ])
        .arg("-I")
        .arg(include_dir())
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg("-o")
        .arg(&so_path)
        .arg(&c_path)
        .output();
    match output {
        Err(err) => {
            eprintln!("skipping: cannot run the C compiler '{cc}': {err}");
            None
        }
        Ok(output) if !output.status.success() => panic!(
            "{cc} failed to compile {name}.c:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ),
        Ok(_) => Some(so_path),
    }
}

/// Compiles `source` and returns the library image.
fn compile(name: &str, source: &str, defines: &[&str]) -> Option<Vec<u8>> {
    let dir = TestDir::new();
    let path = compile_in(&dir, name, source, defines)?;
    Some(std::fs::read(path).expect("read compiled library"))
}

fn saxpy_image() -> Option<Vec<u8>> {
    let source = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kernels/saxpy.c"),
    )
    .expect("read tests/kernels/saxpy.c");
    compile("saxpy", &source, &[])
}

/// The loader, for the tests' own libraries.
fn load(image: &[u8]) -> Result<CpuExecutable> {
    // SAFETY: every image the tests load is compiled by `cc` from this module's sources
    // (or saxpy.c) against halcyon_cpu.h and not modified, or is rejected by the cheap
    // checks before reaching the loader (`bytes_that_are_not_a_library_are_invalid_argument`:
    // empty, not ELF, or only an ELF header, which the loader refuses without mapping
    // anything).
    unsafe { super::load(image) }
}

fn load_err(image: &[u8]) -> halcyon::Error {
    match load(image) {
        Ok(executable) => panic!(
            "expected the load to fail, got entry points {:?}",
            executable.entry_points
        ),
        Err(err) => err,
    }
}

fn state(
    workgroup_count: [u32; 3],
    workgroup_size: [u32; 3],
    constants: &[u32],
    bindings: &mut [&mut [u8]],
) -> DispatchState {
    DispatchState::new(
        workgroup_count,
        workgroup_size,
        constants.into(),
        bindings.iter_mut().map(|b| b.as_mut_ptr()).collect(),
        bindings.iter().map(|b| b.len() as u64).collect(),
    )
}

#[test]
fn saxpy_library_loads_and_runs_concurrently() {
    let Some(image) = saxpy_image() else { return };
    let executable = load(&image).expect("load saxpy.so");
    assert_eq!(
        executable.entry_points,
        vec![
            EntryPoint {
                name: "saxpy".into(),
                workgroup_size: [64, 1, 1],
                binding_count: 2,
                constant_count: 2,
            },
            EntryPoint {
                name: "fail".into(),
                workgroup_size: [1, 1, 1],
                binding_count: 0,
                constant_count: 0,
            },
        ]
    );
    assert_eq!(executable.kernels.len(), 2);

    let n = 1000u32;
    let workgroups = n.div_ceil(64);
    let mut x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut y: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let a = 2.0f32;
    let dispatch = state(
        [workgroups, 1, 1],
        [64, 1, 1],
        &[a.to_bits(), n],
        &mut [
            bytemuck::cast_slice_mut(&mut x),
            bytemuck::cast_slice_mut(&mut y),
        ],
    );
    let saxpy = executable.kernels[0].clone();
    // Each thread runs every fourth workgroup, as a worker pool would.
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let (saxpy, dispatch) = (&saxpy, &dispatch);
            scope.spawn(move || {
                for wg in (thread..workgroups).step_by(4) {
                    saxpy.run(dispatch, [wg, 0, 0]).expect("saxpy workgroup");
                }
            });
        }
    });
    drop(dispatch);
    for (i, &yi) in y.iter().enumerate() {
        assert_eq!(yi, 2.0 * i as f32 + 0.5 * i as f32, "y[{i}]");
    }

    // The kernel keeps the library loaded after the executable is gone.
    drop(executable);
    let mut x = vec![1.0f32; 64];
    let mut y = vec![1.0f32; 64];
    let dispatch = state(
        [1, 1, 1],
        [64, 1, 1],
        &[3.0f32.to_bits(), 64],
        &mut [
            bytemuck::cast_slice_mut(&mut x),
            bytemuck::cast_slice_mut(&mut y),
        ],
    );
    saxpy.run(&dispatch, [0, 0, 0]).expect("saxpy after drop");
    drop(dispatch);
    assert!(y.iter().all(|&v| v == 4.0));
}

#[test]
fn loading_the_same_image_twice_gives_independent_executables() {
    let Some(image) = saxpy_image() else { return };
    let first = load(&image).expect("first load");
    let second = load(&image).expect("second load");
    drop(first);
    let dispatch = state([1, 1, 1], [1, 1, 1], &[], &mut []);
    let err = second.kernels[1].run(&dispatch, [0, 0, 0]).unwrap_err();
    assert_eq!(err, "kernel 'fail' returned 7 for workgroup [0, 0, 0]");
}

#[test]
fn nonzero_return_names_kernel_and_workgroup() {
    let Some(image) = saxpy_image() else { return };
    let executable = load(&image).expect("load saxpy.so");
    let dispatch = state([3, 2, 5], [1, 1, 1], &[], &mut []);
    let err = executable.kernels[1].run(&dispatch, [2, 1, 4]).unwrap_err();
    assert_eq!(err, "kernel 'fail' returned 7 for workgroup [2, 1, 4]");

    // saxpy's own check: a binding shorter than n floats returns 2.
    let mut x = vec![0.0f32; 4];
    let mut y = vec![0.0f32; 4];
    let dispatch = state(
        [1, 1, 1],
        [64, 1, 1],
        &[1.0f32.to_bits(), 64],
        &mut [
            bytemuck::cast_slice_mut(&mut x),
            bytemuck::cast_slice_mut(&mut y),
        ],
    );
    let err = executable.kernels[0].run(&dispatch, [0, 0, 0]).unwrap_err();
    assert_eq!(err, "kernel 'saxpy' returned 2 for workgroup [0, 0, 0]");
}

#[test]
fn too_few_bindings_or_constants_never_reach_the_kernel() {
    let Some(image) = saxpy_image() else { return };
    let executable = load(&image).expect("load saxpy.so");
    let dispatch = state([1, 1, 1], [64, 1, 1], &[0, 0], &mut []);
    let err = executable.kernels[0].run(&dispatch, [0, 0, 0]).unwrap_err();
    assert!(
        err.contains("'saxpy' takes 2 bindings and 2 constants"),
        "{err}"
    );
    let mut dispatch = state([1, 1, 1], [64, 1, 1], &[0, 0], &mut []);
    dispatch.binding_lengths.push(4);
    let err = executable.kernels[0].run(&dispatch, [0, 0, 0]).unwrap_err();
    assert!(
        err.contains("0 binding pointers but 1 binding lengths"),
        "{err}"
    );
}

const ECHO: &str = r#"
#include <stdint.h>
#include "halcyon_cpu.h"

/* Writes everything it is given into binding 0 as uint64_t values. */
static int echo(const halcyon_cpu_dispatch_state_v1* s) {
uint64_t* out = (uint64_t*)s->bindings[0];
uint64_t k = 0;
for (int i = 0; i < 3; ++i) out[k++] = s->workgroup_id[i];
for (int i = 0; i < 3; ++i) out[k++] = s->workgroup_count[i];
for (int i = 0; i < 3; ++i) out[k++] = s->workgroup_size[i];
out[k++] = s->constant_count;
for (uint32_t i = 0; i < s->constant_count; ++i) out[k++] = s->constants[i];
out[k++] = s->binding_count;
for (uint32_t i = 0; i < s->binding_count; ++i) out[k++] = s->binding_lengths[i];
out[k++] = (uint64_t)(uintptr_t)s->bindings[1];
return 0;
}

static int add_one(const halcyon_cpu_dispatch_state_v1* s) {
uint32_t* data = (uint32_t*)s->bindings[0];
uint64_t n = s->binding_lengths[0] / sizeof(uint32_t);
uint64_t begin = (uint64_t)s->workgroup_id[0] * s->workgroup_size[0];
for (uint64_t i = begin; i < begin + s->workgroup_size[0] && i < n; ++i) data[i] += 1;
return 0;
}

static const halcyon_cpu_entry_point_v1 entry_points[] = {
{ "echo", echo, { 4, 2, 3 }, 2, 3 },
{ "add_one", add_one, { 16, 1, 1 }, 1, 0 },
};
static const halcyon_cpu_library_v1 library = { HALCYON_CPU_ABI_VERSION, 2, entry_points };

HALCYON_CPU_EXPORT const halcyon_cpu_library_v1* halcyon_cpu_library_query(uint32_t max_abi_version) {
return max_abi_version == 1 ? &library : NULL;
}

/* Layout of the header's structs, for the test that checks the Rust mirrors. */
HALCYON_CPU_EXPORT uint64_t halcyon_test_layout(int i) {
static const uint64_t values[] = {
    sizeof(halcyon_cpu_dispatch_state_v1),
    _Alignof(halcyon_cpu_dispatch_state_v1),
    offsetof(halcyon_cpu_dispatch_state_v1, workgroup_count),
    offsetof(halcyon_cpu_dispatch_state_v1, workgroup_size),
    offsetof(halcyon_cpu_dispatch_state_v1, constant_count),
    offsetof(halcyon_cpu_dispatch_state_v1, constants),
    offsetof(halcyon_cpu_dispatch_state_v1, binding_count),
    offsetof(halcyon_cpu_dispatch_state_v1, bindings),
    offsetof(halcyon_cpu_dispatch_state_v1, binding_lengths),
    sizeof(halcyon_cpu_entry_point_v1),
    _Alignof(halcyon_cpu_entry_point_v1),
    offsetof(halcyon_cpu_entry_point_v1, kernel),
    offsetof(halcyon_cpu_entry_point_v1, workgroup_size),
    offsetof(halcyon_cpu_entry_point_v1, binding_count),
    offsetof(halcyon_cpu_entry_point_v1, constant_count),
    sizeof(halcyon_cpu_library_v1),
    _Alignof(halcyon_cpu_library_v1),
    offsetof(halcyon_cpu_library_v1, entry_point_count),
    offsetof(halcyon_cpu_library_v1, entry_points),
};
return values[i];
}
"#;

#[test]
fn kernel_sees_the_whole_dispatch_state() {
    let Some(image) = compile("echo", ECHO, &[]) else {
        return;
    };
    let executable = load(&image).expect("load echo.so");
    assert_eq!(
        executable.entry_points[0],
        EntryPoint {
            name: "echo".into(),
            workgroup_size: [4, 2, 3],
            binding_count: 2,
            constant_count: 3,
        }
    );
    let mut out = vec![0u64; 32];
    let mut second = vec![0u8; 12];
    let second_ptr = second.as_ptr() as u64;
    let dispatch = state(
        [7, 8, 9],
        [4, 2, 3],
        &[10, 11, 12],
        &mut [bytemuck::cast_slice_mut(&mut out), &mut second],
    );
    executable.kernels[0]
        .run(&dispatch, [1, 2, 3])
        .expect("echo");
    drop(dispatch);
    assert_eq!(
        out[..18],
        [1, 2, 3, 7, 8, 9, 4, 2, 3, 3, 10, 11, 12, 2, 256, 12, second_ptr, 0]
    );

    let mut data = vec![5u32; 40];
    let dispatch = state(
        [3, 1, 1],
        [16, 1, 1],
        &[],
        &mut [bytemuck::cast_slice_mut(&mut data)],
    );
    for wg in 0..3 {
        executable.kernels[1]
            .run(&dispatch, [wg, 0, 0])
            .expect("add_one");
    }
    drop(dispatch);
    assert!(data.iter().all(|&v| v == 6));
}

#[test]
fn rust_mirrors_match_the_header_layout() {
    use std::mem::{align_of, offset_of, size_of};
    let dir = TestDir::new();
    let Some(path) = compile_in(&dir, "layout", ECHO, &[]) else {
        return;
    };
    // SAFETY: the library is the test's own ECHO source, whose initialisers do nothing.
    let library = unsafe { Library::new(&path) }.expect("dlopen layout.so");
    // SAFETY: ECHO defines `uint64_t halcyon_test_layout(int)`.
    let layout = unsafe {
        library
            .get::<unsafe extern "C" fn(c_int) -> u64>(b"halcyon_test_layout\0")
            .expect("halcyon_test_layout")
    };
    let expected = [
        size_of::<DispatchStateV1>(),
        align_of::<DispatchStateV1>(),
        offset_of!(DispatchStateV1, workgroup_count),
        offset_of!(DispatchStateV1, workgroup_size),
        offset_of!(DispatchStateV1, constant_count),
        offset_of!(DispatchStateV1, constants),
        offset_of!(DispatchStateV1, binding_count),
        offset_of!(DispatchStateV1, bindings),
        offset_of!(DispatchStateV1, binding_lengths),
        size_of::<EntryPointV1>(),
        align_of::<EntryPointV1>(),
        offset_of!(EntryPointV1, kernel),
        offset_of!(EntryPointV1, workgroup_size),
        offset_of!(EntryPointV1, binding_count),
        offset_of!(EntryPointV1, constant_count),
        size_of::<LibraryV1>(),
        align_of::<LibraryV1>(),
        offset_of!(LibraryV1, entry_point_count),
        offset_of!(LibraryV1, entry_points),
    ];
    for (i, &expected) in expected.iter().enumerate() {
        // SAFETY: `i` indexes the C array, which has `expected.len()` values.
        let actual = unsafe { layout(i as c_int) };
        assert_eq!(actual, expected as u64, "layout value {i}");
    }
}

#[test]
fn bytes_that_are_not_a_library_are_invalid_argument() {
    let err = load_err(b"");
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert!(err.message().contains("empty"), "{err}");

    let err = load_err(b"this is not a shared library");
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert!(err.message().contains("not an ELF"), "{err}");

    let err = load_err(b"\x7fELF and too short");
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert!(
        err.message().contains("shorter than an ELF header"),
        "{err}"
    );

    // An ELF header and nothing else: the loader's own message.
    let Some(image) = saxpy_image() else { return };
    let err = load_err(&image[..64]);
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert!(err.message().contains("cannot load"), "{err}");
}

#[test]
fn failed_loads_leave_no_temporary_files() {
    let prefix = format!("halcyon-cpu-{}-", std::process::id());
    let count = || {
        std::fs::read_dir(std::env::temp_dir())
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .count()
            })
            .unwrap_or(0)
    };
    // Other tests in this process load concurrently, so allow for their files in flight,
    // but a failed load must not leave one behind for good.
    for _ in 0..20 {
        let _ = load(b"garbage");
    }
    let mut leftover = count();
    for _ in 0..100 {
        if leftover == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        leftover = count();
    }
    assert_eq!(leftover, 0);
}

#[test]
fn a_library_without_the_query_symbol_is_not_found() {
    let source = r#"
#include "halcyon_cpu.h"
HALCYON_CPU_EXPORT int something_else(void) { return 1; }
"#;
    let Some(image) = compile("nosym", source, &[]) else {
        return;
    };
    let err = load_err(&image);
    assert_eq!(err.code(), StatusCode::NotFound);
    assert!(err.message().contains("halcyon_cpu_library_query"), "{err}");
}

const VERSIONED: &str = r#"
#include <stddef.h>
#include "halcyon_cpu.h"
static int k(const halcyon_cpu_dispatch_state_v1* s) { (void)s; return 0; }
static const halcyon_cpu_entry_point_v1 entry_points[] = { { "k", k, { 1, 1, 1 }, 0, 0 } };
static const halcyon_cpu_library_v1 library = { VERSION, 1, entry_points };
HALCYON_CPU_EXPORT const halcyon_cpu_library_v1* halcyon_cpu_library_query(uint32_t max) {
(void)max;
return RETURN_NULL ? NULL : &library;
}
"#;

#[test]
fn abi_version_mismatch_is_unimplemented() {
    for (version, needle) in [(2, "ABI version 2"), (0, "ABI version 0")] {
        let defines = [&format!("VERSION={version}")[..], "RETURN_NULL=0"];
        let Some(image) = compile("versioned", VERSIONED, &defines) else {
            return;
        };
        let err = load_err(&image);
        assert_eq!(err.code(), StatusCode::Unimplemented, "{err}");
        assert!(err.message().contains(needle), "{err}");
        assert!(err.message().contains("ABI version 1"), "{err}");
    }
    let Some(image) = compile("versioned", VERSIONED, &["VERSION=1", "RETURN_NULL=1"]) else {
        return;
    };
    let err = load_err(&image);
    assert_eq!(err.code(), StatusCode::Unimplemented, "{err}");
    assert!(err.message().contains("NULL"), "{err}");
    assert!(err.message().contains("ABI version 1"), "{err}");

    // The control: the same source with version 1 loads.
    let Some(image) = compile("versioned", VERSIONED, &["VERSION=1", "RETURN_NULL=0"]) else {
        return;
    };
    assert_eq!(load(&image).expect("version 1 loads").entry_points.len(), 1);
}

const BAD_METADATA: &str = r#"
#include <stddef.h>
#include "halcyon_cpu.h"
static int k(const halcyon_cpu_dispatch_state_v1* s) { (void)s; return 0; }
static const halcyon_cpu_entry_point_v1 entry_points[] = {
{ "good", k, { 1, 1, 1 }, 0, 0 },
#if CASE == 1
{ NULL, k, { 1, 1, 1 }, 0, 0 },
#elif CASE == 2
{ "bad", NULL, { 1, 1, 1 }, 0, 0 },
#elif CASE == 3
{ "bad", k, { 8, 0, 1 }, 0, 0 },
#elif CASE == 4
{ "\xff\xfe", k, { 1, 1, 1 }, 0, 0 },
#elif CASE == 5
{ "", k, { 1, 1, 1 }, 0, 0 },
#elif CASE == 6
{ "good", k, { 1, 1, 1 }, 0, 0 },
#else
{ "also_good", k, { 1, 1, 1 }, 0, 0 },
#endif
};
#if CASE == 7
static const halcyon_cpu_library_v1 library = { 1, 5000, entry_points };
#elif CASE == 8
static const halcyon_cpu_library_v1 library = { 1, 2, NULL };
#elif CASE == 9
static const halcyon_cpu_library_v1 library = { 1, 0, NULL };
#else
static const halcyon_cpu_library_v1 library = { 1, 2, entry_points };
#endif
HALCYON_CPU_EXPORT const halcyon_cpu_library_v1* halcyon_cpu_library_query(uint32_t max) {
(void)max;
(void)entry_points;
return &library;
}
"#;

#[test]
fn bad_metadata_is_invalid_argument() {
    let cases = [
        (1, "entry point 1 has a NULL name"),
        (2, "entry point 1 ('bad') has a NULL kernel function"),
        (3, "entry point 1 ('bad') has workgroup size [8, 0, 1]"),
        (4, "entry point 1 has a name that is not valid UTF-8"),
        (5, "entry point 1 has an empty name"),
        (
            6,
            "entry point 1 ('good') has the same name as entry point 0",
        ),
        (7, "declares 5000 entry points; at most 4096"),
        (
            8,
            "declares 2 entry points but its entry_points pointer is NULL",
        ),
    ];
    for (case, needle) in cases {
        let define = format!("CASE={case}");
        let Some(image) = compile("bad", BAD_METADATA, &[&define]) else {
            return;
        };
        let err = load_err(&image);
        assert_eq!(
            err.code(),
            StatusCode::InvalidArgument,
            "case {case}: {err}"
        );
        assert!(err.message().contains(needle), "case {case}: {err}");
    }
    // The controls: no entry points at all, and two good ones.
    let Some(image) = compile("bad", BAD_METADATA, &["CASE=9"]) else {
        return;
    };
    let executable = load(&image).expect("empty table loads");
    assert!(executable.entry_points.is_empty() && executable.kernels.is_empty());
    let Some(image) = compile("bad", BAD_METADATA, &["CASE=0"]) else {
        return;
    };
    let executable = load(&image).expect("good table loads");
    let names: Vec<_> = executable
        .entry_points
        .iter()
        .map(|e| &e.name[..])
        .collect();
    assert_eq!(names, ["good", "also_good"]);
}

#[test]
fn c_library_spec_reads_the_file_and_maps_io_errors() {
    let dir = TestDir::new();
    let missing = dir.0.join("missing.so");
    // SAFETY: the spec is never loaded.
    let err = unsafe { c_library_spec(&missing) }.unwrap_err();
    assert_eq!(err.code(), StatusCode::NotFound);
    assert!(err.message().contains(&*missing.to_string_lossy()), "{err}");

    // SAFETY: the spec is never loaded.
    let err = unsafe { c_library_spec(&dir.0) }.unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");
    assert!(err.message().contains(&*dir.0.to_string_lossy()), "{err}");

    let empty = dir.0.join("empty.so");
    std::fs::write(&empty, b"").unwrap();
    // SAFETY: the spec is never loaded.
    let err = unsafe { c_library_spec(&empty) }.unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert!(err.message().contains("empty"), "{err}");

    let text = dir.0.join("text.so");
    std::fs::write(&text, b"#!/bin/sh\necho not a library\n").unwrap();
    // SAFETY: the spec is never loaded.
    let err = unsafe { c_library_spec(&text) }.unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert!(err.message().contains("not an ELF"), "{err}");

    let file = dir.0.join("lib.so");
    let mut image = b"\x7fELF".to_vec();
    image.resize(64, 0);
    std::fs::write(&file, &image).unwrap();
    // SAFETY: the spec is never loaded.
    let spec = unsafe { c_library_spec(&file) }.expect("spec");
    assert_eq!(spec.format, FORMAT_C_ABI);
    assert!(spec.is_unchecked());
    match &spec.source {
        ExecutableSource::Bytes(bytes) => assert_eq!(&bytes[..], &image[..]),
        other => panic!("expected bytes, got {other:?}"),
    }
}
