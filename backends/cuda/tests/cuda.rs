//! The CUDA driver against whatever this machine has. Without libcuda (this CI), enumeration
//! and creation must return `Unavailable` naming libcuda and must not panic: cudarc would
//! panic here, so this also proves no cudarc function runs before the probe. The child-process
//! test repeats that with every panic turned into an abort, as under `panic = "abort"`.
//! With a driver and a GPU, the devices are printed, and [`gpu`] drives the translation table
//! ([`halcyon_cuda::CudaApi`]) and a device directly (each test prints why and passes without
//! one). The NVRTC tests run wherever a libnvrtc can be opened (none on CI).

mod common;

use halcyon::{Driver, DriverRegistry, Fence, StatusCode, Timepoints};
use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
use halcyon_cuda::module::ptx_entries;
use halcyon_cuda::{nvrtc, probe, CudaDriver, CudaModule};

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
    assert_eq!(probe::MIN_DRIVER_VERSION, 12000);
    assert!(info.full_name.contains("driver CUDA 12.0+"), "{info:?}");
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
            let device = driver.create_device(0).unwrap();
            println!("{}: {}", device.info().id, device.info().name);
            assert_eq!(device.info().id, "cuda://0");
            assert!(device.info().name.contains("completion threads"));
            let err = driver.create_device(devices.len() as u32).unwrap_err();
            assert_eq!(err.code(), StatusCode::NotFound, "{err}");
        }
        Err(e) => {
            assert_eq!(e.code(), StatusCode::Unavailable, "{e}");
            println!("no devices: {e}");
        }
    }
}

#[test]
fn checked_in_ptx_defines_the_standard_kernels() {
    common::standard_module().validate().unwrap();
    assert_eq!(
        ptx_entries(common::STANDARD_PTX),
        ["add_one_u32", "saxpy_f32", "fail", "empty"]
    );
    let bytes = common::standard_module().to_packed().to_bytes();
    let packed = halcyon::PackedExecutable::from_bytes(&bytes).unwrap();
    assert_eq!(
        CudaModule::from_packed(&packed).unwrap(),
        common::standard_module()
    );
}

#[test]
fn nvrtc_compiles_the_standard_kernels() {
    if let Err(e) = nvrtc::probe() {
        eprintln!("skipped: {e}");
        return;
    }
    let mut entry_points = common::standard_entry_points();
    entry_points.push(common::empty());
    let module = CudaModule::compile(common::STANDARD_CU, entry_points.clone(), &[]).unwrap();
    let ptx = module.ptx_text().expect("NVRTC returns PTX");
    assert_eq!(ptx_entries(ptx), ptx_entries(common::STANDARD_PTX));
    // With the NVRTC that produced it, the checked-in PTX is reproduced exactly. (Only there:
    // NVRTC 13 no longer compiles for compute_52, the checked-in PTX's target.)
    if nvrtc::probe().unwrap().version() == (12, 8) {
        let regenerated = nvrtc::compile_ptx(
            common::STANDARD_CU,
            "standard.cu",
            common::STANDARD_NVRTC_OPTIONS,
        )
        .unwrap();
        assert_eq!(
            common::standard_ptx_from_nvrtc(&regenerated),
            common::STANDARD_PTX,
            "tests/kernels/standard.ptx is stale: regenerate it (see write_standard_ptx)"
        );
    }
    // A kernel the source does not define (or defines without extern "C") is NotFound.
    let mut missing = entry_points;
    missing[0].name = "add_two_u32".into();
    let e = CudaModule::compile(common::STANDARD_CU, missing, &[]).unwrap_err();
    assert_eq!(e.code(), StatusCode::NotFound, "{e}");
    let e = CudaModule::compile("__global__ void k(", vec![common::empty()], &[]).unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
}

/// The checked-in PTX declares CUDA 12.0's PTX ISA and a Maxwell target, so every driver the
/// probe accepts (CUDA 12.0 and newer) can JIT it for any GPU it supports.
#[test]
fn checked_in_ptx_loads_on_every_supported_driver() {
    let directive = |name: &str| {
        common::STANDARD_PTX
            .lines()
            .find_map(|line| line.trim().strip_prefix(name))
            .map(str::trim)
    };
    assert_eq!(directive(".version "), Some(common::STANDARD_PTX_ISA));
    assert_eq!(directive(".target "), Some("sm_52"));
    // PTX ISA 8.0 is CUDA 12.0's.
    assert_eq!(probe::version_string(probe::MIN_DRIVER_VERSION), "12.0");
    assert_eq!(common::STANDARD_PTX_ISA, "8.0");
    // fatbinary takes the first ".version" in the text for the directive, comments included.
    for ptx in [common::STANDARD_PTX, common::SHARED_PTX] {
        let first = ptx.find(".version").unwrap();
        assert!(
            ptx[first..].starts_with(".version 8.0\n") && ptx[..first].ends_with('\n'),
            "a comment spells .version before the directive: fatbinary cannot bundle this PTX"
        );
    }
}

/// Assembles the checked-in PTX with ptxas where ptxas is found (`$PTXAS`, or on `PATH`):
/// standard.ptx for sm_52, sm_70, sm_75 and sm_90, shared.ptx for its sm_75 and sm_90. ptxas
/// rejects any instruction newer than the declared PTX ISA, and each cubin it makes must pass
/// `CudaModule::validate`'s cheap checks, as must the fatbins fatbinary makes of them
/// ([`bundle_with_fatbinary`]). Prints why and passes without ptxas.
/// An architecture this ptxas no longer targets (CUDA 13 dropped sm_52 and sm_70) is skipped,
/// but each file must assemble for at least one.
#[test]
fn checked_in_ptx_assembles_with_ptxas() {
    let ptxas = std::env::var("PTXAS").unwrap_or_else(|_| "ptxas".into());
    let dir = std::env::temp_dir().join(format!("halcyon-cuda-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: [(&str, &str, &[&str]); 2] = [
        (
            "standard",
            common::STANDARD_PTX,
            &["sm_52", "sm_70", "sm_75", "sm_90"],
        ),
        ("shared", common::SHARED_PTX, &["sm_75", "sm_90"]),
    ];
    'files: for (name, text, archs) in files {
        let input = dir.join(format!("{name}.ptx"));
        std::fs::write(&input, text).unwrap();
        let mut assembled = Vec::new();
        let mut ran = false;
        for arch in archs {
            let out = std::process::Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg(&input)
                .arg("-o")
                .arg(dir.join(format!("{name}.{arch}.cubin")))
                .output();
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    eprintln!("skipped: cannot run {ptxas}: {e}");
                    break 'files;
                }
            };
            ran = true;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() && stderr.contains("is not defined for option 'gpu-name'") {
                eprintln!("skipped {name}.ptx for {arch}: this ptxas no longer targets it");
                continue;
            }
            assert!(
                out.status.success(),
                "ptxas -arch={arch} {name}.ptx failed: {stderr}"
            );
            // The cubin ptxas made passes halcyon's cheap image checks (the ELF header).
            let cubin = std::fs::read(dir.join(format!("{name}.{arch}.cubin"))).unwrap();
            // SAFETY: ptxas's unmodified output; only validated here, never loaded.
            let module = unsafe { CudaModule::binary(cubin, image_entry_points(text)) };
            if let Err(e) = module.validate() {
                panic!("ptxas's {name}.{arch}.cubin fails validation: {e}");
            }
            assembled.push(*arch);
        }
        assert!(
            !ran || !assembled.is_empty(),
            "ptxas targets none of {name}.ptx's architectures"
        );
        if !assembled.is_empty() {
            bundle_with_fatbinary(&dir, name, text, &assembled);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Binary images run on the GPU: the checked-in fatbins (an sm_90 cubin and compute_52 PTX,
/// uncompressed and zstd-compressed; a device that is not sm_90 JITs the PTX) and, on an
/// sm_9x device, the cubin alone, each dispatching `add_one_u32`, from the module's native
/// spec and from an unchecked spec of its packed form (a checked one is refused). (The fake
/// driver loads no fatbins: `tests/fake_driver.rs` loads the cubin.)
#[test]
fn binary_images_load_and_run() {
    let Some(device) = common::device_or_skip("binary_images_load_and_run") else {
        return;
    };
    let name = device.info().name.clone();
    let mut images = vec![
        ("standard.fatbin", FATBIN.to_vec()),
        ("standard.compressed.fatbin", COMPRESSED_FATBIN.to_vec()),
    ];
    if name.contains("(sm_9") {
        images.push(("standard.sm_90.cubin", CUBIN.to_vec()));
    }
    let queue = device.queue(0).unwrap();
    for (file, image) in images {
        // SAFETY: the fixtures are unmodified ptxas and fatbinary output (see
        // tests/kernels), for sm_90 with compute_52 PTX to JIT elsewhere, and add_one_u32
        // takes (unsigned int*, unsigned int), as its entry point declares.
        let module =
            unsafe { CudaModule::binary(image, vec![halcyon_conformance::kernels::add_one_u32()]) };
        let packed = module.to_packed();
        let e = device.load_executable(&packed.spec()).unwrap_err();
        assert!(e.message().contains("bytes_unchecked"), "{file}: {e}");
        // SAFETY: as above.
        let unchecked = unsafe { packed.spec_unchecked() };
        device
            .load_executable(&unchecked)
            .unwrap_or_else(|e| panic!("{file}, packed, on {name}: {e}"));
        let executable = device
            .load_executable(&module.spec())
            .unwrap_or_else(|e| panic!("{file} on {name}: {e}"));
        let data: Vec<u32> = (0..1000).collect();
        let out = block_on(async {
            let buffer = upload_u32(&queue, &data).await?;
            queue
                .dispatch(
                    Timepoints::default(),
                    &executable
                        .kernel_at(0)?
                        .launch([16, 1, 1])
                        .constant(1000u32)
                        .binding(buffer.whole()),
                )
                .await?;
            download_u32(&queue, Fence::new(), &buffer.whole()).await
        })
        .unwrap_or_else(|e| panic!("add_one_u32 from {file} on {name}: {e}"));
        assert_eq!(
            out,
            data.iter().map(|v| v + 1).collect::<Vec<_>>(),
            "{file}"
        );
        println!("{file}: add_one_u32 ran on {name}");
    }
}

const CUBIN: &[u8] = include_bytes!("kernels/standard.sm_90.cubin");
const FATBIN: &[u8] = include_bytes!("kernels/standard.fatbin");
const COMPRESSED_FATBIN: &[u8] = include_bytes!("kernels/standard.compressed.fatbin");

/// Entry points for every kernel `text` (PTX) defines, for validating the binary images made
/// from it (the cheap checks read no parameter metadata from a binary).
fn image_entry_points(text: &str) -> Vec<halcyon::EntryPoint> {
    ptx_entries(text)
        .into_iter()
        .map(|name| halcyon::EntryPoint {
            name,
            workgroup_size: [64, 1, 1],
            binding_count: 0,
            constant_count: 0,
        })
        .collect()
}

/// Bundles `name`'s cubins for `archs` (in `dir`, from ptxas) and its PTX into fatbins with
/// fatbinary where it is found (`$FATBINARY`, or on `PATH`), uncompressed and compressed, and
/// checks that each passes `CudaModule::validate`'s cheap checks (the fatbin header). Prints
/// why and returns without fatbinary.
fn bundle_with_fatbinary(dir: &std::path::Path, name: &str, text: &str, archs: &[&str]) {
    let fatbinary = std::env::var("FATBINARY").unwrap_or_else(|_| "fatbinary".into());
    let target = text
        .lines()
        .find_map(|line| line.trim().strip_prefix(".target sm_"))
        .unwrap();
    for compress in ["--compress=false", "--compress-all"] {
        let out = dir.join(format!("{name}{compress}.fatbin"));
        let mut command = std::process::Command::new(&fatbinary);
        command
            .arg("--64")
            .arg(compress)
            .arg(format!("--create={}", out.display()));
        for arch in archs {
            let cubin = dir.join(format!("{name}.{arch}.cubin"));
            let sm = arch.trim_start_matches("sm_");
            command.arg(format!(
                "--image3=kind=elf,sm={sm},file={}",
                cubin.display()
            ));
        }
        let ptx = dir.join(format!("{name}.ptx"));
        command.arg(format!(
            "--image3=kind=ptx,sm={target},file={}",
            ptx.display()
        ));
        let result = match command.output() {
            Ok(result) => result,
            Err(e) => {
                eprintln!("skipped fatbins: cannot run {fatbinary}: {e}");
                return;
            }
        };
        assert!(
            result.status.success(),
            "fatbinary {compress} for {name} failed: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        let fatbin = std::fs::read(&out).unwrap();
        // SAFETY: fatbinary's unmodified output; only validated here, never loaded.
        let module = unsafe { CudaModule::binary(fatbin, image_entry_points(text)) };
        if let Err(e) = module.validate() {
            panic!("fatbinary {compress}'s fatbin of {name} {archs:?} fails validation: {e}");
        }
    }
}

/// Regenerates tests/kernels/standard.ptx: NVRTC 12.8's PTX for standard.cu with
/// `STANDARD_NVRTC_OPTIONS`, its `.version` lowered to PTX ISA 8.0 (CUDA 12.0) by
/// `standard_ptx_from_nvrtc`. Then check it with ptxas (`checked_in_ptx_assembles_with_ptxas`).
#[test]
#[ignore = "writes tests/kernels/standard.ptx; run by hand with NVRTC 12.8"]
fn write_standard_ptx() {
    assert_eq!(nvrtc::probe().unwrap().version(), (12, 8), "use NVRTC 12.8");
    let ptx = nvrtc::compile_ptx(
        common::STANDARD_CU,
        "standard.cu",
        common::STANDARD_NVRTC_OPTIONS,
    )
    .unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernels/standard.ptx");
    std::fs::write(path, common::standard_ptx_from_nvrtc(&ptx)).unwrap();
}

/// Direct tests of the translation table and a device (in `gpu/mod.rs`, shared with the fake
/// driver's tests): each prints why and passes without a CUDA device.
mod gpu;

/// Nothing to prepare: these tests take whatever driver the machine has.
fn prepare_driver() -> Result<(), String> {
    Ok(())
}
