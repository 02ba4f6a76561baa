//! C-ABI kernels end to end: `tests/kernels/saxpy.c` is compiled with the system C compiler
//! against `include/halcyon_cpu.h`, loaded with the unsafe `c_library_spec`, and dispatched on CPU devices
//! in both execution modes. Skipped (with a message) when there is no `cc`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use halcyon::{
    BufferParams, Device, Executable, ExecutableSpec, Fence, Queue, Result, Semaphore, StatusCode,
    Timepoints,
};
use halcyon_cpu::{CpuDeviceOptions, ExecutionMode};

const HANG: Duration = Duration::from_secs(10);
const N: u32 = 1000;

/// Compiles the sample library once per test process; `None` if there is no C compiler.
fn library() -> Option<&'static Path> {
    static LIBRARY: OnceLock<Option<PathBuf>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            let output = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("halcyon-saxpy-{}.so", std::process::id()));
            let status = Command::new("cc")
                .args(["-shared", "-fPIC", "-O2", "-std=c99", "-I"])
                .arg(manifest.join("include"))
                .arg("-o")
                .arg(&output)
                .arg(manifest.join("tests/kernels/saxpy.c"))
                .status();
            match status {
                Ok(status) if status.success() => Some(output),
                Ok(status) => panic!("cc failed to compile tests/kernels/saxpy.c: {status}"),
                Err(error) => {
                    eprintln!("skipping the C-ABI kernel tests: cannot run cc: {error}");
                    None
                }
            }
        })
        .as_deref()
}

fn devices() -> Result<Vec<Device>> {
    [ExecutionMode::Pool { workers: 0 }, ExecutionMode::Inline]
        .into_iter()
        .map(|mode| halcyon_cpu::create_device(CpuDeviceOptions::default().with_mode(mode)))
        .collect()
}

fn load(device: &Device, library: &Path) -> Result<Executable> {
    // SAFETY: the library is tests/kernels/saxpy.c, compiled by `cc` against halcyon_cpu.h in
    // `library()` and not modified; it has no initialisers and its kernels check their inputs.
    let spec = unsafe { halcyon_cpu::c_library_spec(library)? };
    device.load_executable(&spec)
}

/// A checked spec (`ExecutableSpec::bytes`) of the C-ABI format is refused before anything
/// reaches the dynamic loader, with `InvalidArgument` naming the unsafe constructor to use;
/// needs no C compiler (the bytes are never looked at) and runs under Miri.
#[test]
fn a_checked_c_abi_spec_is_refused() -> Result<()> {
    for device in devices()? {
        // A valid-looking library header, then garbage: if it reached dlopen it could crash.
        let mut bytes = b"\x7fELF\x02\x01\x01".to_vec();
        bytes.resize(4096, 0xa5);
        let spec = ExecutableSpec::bytes(halcyon_cpu::FORMAT_C_ABI, bytes);
        assert!(!spec.is_unchecked());
        let error = device
            .load_executable(&spec)
            .expect_err("a checked C-ABI spec was loaded");
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
        assert!(
            error
                .message()
                .contains("unsafe { halcyon_cpu::c_library_spec(path) }"),
            "{error}"
        );
    }
    Ok(())
}

async fn upload(queue: &Queue, values: &[f32]) -> Result<halcyon::Buffer> {
    let allocator = queue.device().allocator();
    let buffer = allocator.allocate(std::mem::size_of_val(values) as u64, BufferParams::DEVICE)?;
    let write = queue.write(Timepoints::default(), values, &buffer.whole());
    tokio::time::timeout(HANG, write)
        .await
        .expect("upload hangs")?;
    Ok(buffer)
}

/// The library's entry points carry the metadata saxpy.c declares, and `saxpy` computes
/// `y = a * x + y` exactly on 1000 elements (values whose products and sums are exact), leaving
/// `x` and the element past `n` alone, in pool and inline mode.
#[cfg_attr(miri, ignore = "dlopen is foreign code Miri cannot run")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saxpy_through_the_c_abi() -> Result<()> {
    let Some(library) = library() else {
        return Ok(());
    };
    for device in devices()? {
        let executable = load(&device, library)?;
        assert_eq!(executable.format(), halcyon_cpu::FORMAT_C_ABI);
        let saxpy = executable.kernel("saxpy")?;
        let entry = saxpy.entry_point();
        assert_eq!(
            (
                entry.workgroup_size,
                entry.binding_count,
                entry.constant_count
            ),
            ([64, 1, 1], 2, 2)
        );

        let queue = device.queue(0)?;
        let xs: Vec<f32> = (0..N).map(|i| i as f32).collect();
        let ys: Vec<f32> = (0..=N).map(|i| 0.5 * i as f32).collect();
        let (x, y) = (upload(&queue, &xs).await?, upload(&queue, &ys).await?);
        let timeline = queue.timeline()?;
        let dispatch = queue.dispatch(
            timeline.next(),
            &saxpy
                .launch([N.div_ceil(64), 1, 1])
                .constant(2.5f32)
                .constant(N)
                .binding(x.whole())
                .binding(y.whole()),
        );
        let read_y = queue.read::<f32>(timeline.next(), &y.whole());
        let read_x = queue.read::<f32>(timeline.next(), &x.whole());
        let read_y = tokio::time::timeout(HANG, read_y).await.expect("hangs")?;
        let read_x = tokio::time::timeout(HANG, read_x).await.expect("hangs")?;
        tokio::time::timeout(HANG, dispatch).await.expect("hangs")?;

        let mut expected: Vec<f32> = (0..N as usize).map(|i| 2.5 * xs[i] + ys[i]).collect();
        expected.push(ys[N as usize]);
        assert_eq!(read_y, expected, "on {:?}", device);
        assert_eq!(read_x, xs, "saxpy modified x");
    }
    Ok(())
}

/// Dispatches that make the C kernel return non-zero fail their signal semaphore and their
/// `Submission` with the same error, whose message carries the kernel's return code and the
/// entry point's name: `fail` (returns 7), and `saxpy` with `n` past its bindings (returns 2).
#[cfg_attr(miri, ignore = "dlopen is foreign code Miri cannot run")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_errors_fail_the_signal_fence() -> Result<()> {
    let Some(library) = library() else {
        return Ok(());
    };
    for device in devices()? {
        let executable = load(&device, library)?;
        let queue = device.queue(0)?;
        let short = upload(&queue, &[1.0; 16]).await?;
        let failing = [
            ("fail", 7, vec![], vec![]),
            ("saxpy", 2, vec![0, 64], vec![short.whole(), short.whole()]),
        ];
        for (name, code, constants, bindings) in failing {
            let entry = executable.kernel(name)?;
            let signal = Semaphore::new(0);
            let dispatch = queue.dispatch(
                (Fence::new(), Fence::at(&signal, 1)),
                &entry
                    .launch([1, 1, 1])
                    .constants(&constants)
                    .bindings(&bindings),
            );
            let outcome = tokio::time::timeout(HANG, dispatch).await.expect("hangs");
            let error = outcome.expect_err("a failing C kernel's dispatch succeeded");
            let failure = signal
                .query()
                .expect_err("the signal semaphore did not fail");
            assert_eq!(failure.code(), error.code());
            assert_eq!(failure.message(), error.message());
            for mention in [name, &code.to_string()[..]] {
                assert!(
                    error.message().contains(mention),
                    "the error of '{name}' should mention '{mention}': {error}"
                );
            }
        }
    }
    Ok(())
}
