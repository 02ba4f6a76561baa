//! The CUDA driver against whatever this machine has. Without libcuda (this CI), enumeration
//! and creation must return `Unavailable` naming libcuda and must not panic: cudarc would
//! panic here, so this also proves no cudarc function runs before the probe. The child-process
//! test repeats that with every panic turned into an abort, as under `panic = "abort"`.
//! With a driver and a GPU, the devices are printed.

use halcyon::{Driver, DriverRegistry, StatusCode};
use halcyon_cuda::{probe, CudaDriver};

const ABORT_CHILD: &str = "HALCYON_CUDA_TEST_ABORT_ON_PANIC";

fn libcuda_present() -> bool {
    probe::LIBCUDA_SONAMES.iter().any(|name| {
        // SAFETY: opening libcuda only runs its initialisers.
        let library = unsafe { libloading::Library::new(*name) };
        // Never unload it again (as the probe does).
        library.map(std::mem::forget).is_ok()
    })
}

/// Everything the driver does, twice (the second time from the cached probe).
fn exercise() -> Vec<halcyon::Result<()>> {
    let driver = CudaDriver;
    let registry = DriverRegistry::new();
    halcyon_cuda::register(&registry).unwrap();
    let mut results = Vec::new();
    for _ in 0..2 {
        let _ = driver.info();
        results.push(driver.enumerate_devices().map(|_| ()));
        results.push(driver.create_device(0).map(|_| ()));
        results.push(registry.create_device("cuda://0").map(|_| ()));
    }
    results
}

#[test]
fn sonames_and_bindings() {
    assert_eq!(probe::LIBCUDA_SONAMES, ["libcuda.so.1", "libcuda.so"]);
    assert_eq!(probe::BINDINGS_VERSION, 12080);
    let info = CudaDriver.info();
    assert_eq!(info.id, "cuda");
    assert!(info.full_name.contains("CUDA 12.8 bindings"), "{info:?}");
}

#[test]
fn without_libcuda_everything_is_unavailable_naming_libcuda() {
    if libcuda_present() {
        eprintln!("skipped: libcuda is installed");
        return;
    }
    // SAFETY: only tries dlopen; this is what cudarc would panic on.
    assert!(!unsafe { cudarc::driver::sys::is_culib_present() });
    let err = probe::probe().unwrap_err();
    assert_eq!(err.code(), StatusCode::Unavailable);
    assert!(
        err.message()
            .starts_with("no NVIDIA driver: dlopen libcuda.so.1: "),
        "{err}"
    );
    assert!(err.message().contains("; dlopen libcuda.so: "), "{err}");
    for result in exercise() {
        let err = result.unwrap_err();
        assert_eq!(err.code(), StatusCode::Unavailable, "{err}");
        assert!(err.message().contains("libcuda.so.1"), "{err}");
    }
    assert!(CudaDriver.info().full_name.contains("no NVIDIA driver"));
}

/// Runs [`exercise`] in a child process whose panic hook aborts: any panic (cudarc's
/// included) kills the child, which the parent sees as a failed exit status.
#[test]
fn never_panics_even_when_panics_abort() {
    if std::env::var_os(ABORT_CHILD).is_some() {
        std::panic::set_hook(Box::new(|info| {
            eprintln!("panic in the CUDA driver: {info}");
            std::process::abort();
        }));
        for result in exercise() {
            if let Err(e) = result {
                eprintln!("{e}");
            }
        }
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "never_panics_even_when_panics_abort",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ABORT_CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed ({}): {stderr}",
        out.status
    );
    assert!(!stderr.contains("panic"), "{stderr}");
}

#[test]
fn with_a_driver_devices_are_listed() {
    let probe = match probe::probe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    println!(
        "{}: CUDA {}",
        probe.soname(),
        probe::version_string(probe.driver_version())
    );
    let driver = CudaDriver;
    match driver.enumerate_devices() {
        Ok(devices) => {
            assert!(!devices.is_empty());
            for d in &devices {
                println!("{}: {}", d.uri, d.name);
            }
            let err = driver.create_device(0).unwrap_err();
            assert_eq!(err.code(), StatusCode::Unavailable);
            assert!(err.message().contains("not wired yet"), "{err}");
            let err = driver.create_device(devices.len() as u32).unwrap_err();
            assert_eq!(err.code(), StatusCode::NotFound, "{err}");
        }
        Err(e) => {
            assert_eq!(e.code(), StatusCode::Unavailable, "{e}");
            println!("no devices: {e}");
        }
    }
}
