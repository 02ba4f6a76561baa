//! The CUDA driver against whatever this machine has. Without libcuda (this CI), enumeration
//! and creation must return `Unavailable` naming libcuda and must not panic: cudarc would
//! panic here, so this also proves no cudarc function runs before the probe. The child-process
//! test repeats that with every panic turned into an abort, as under `panic = "abort"`.
//! With a driver and a GPU, the devices are printed, and [`gpu`] drives the translation table
//! ([`halcyon_cuda::CudaApi`]) and a device directly (each test prints why and passes without
//! one). The NVRTC tests run wherever a libnvrtc can be opened (none on CI).

mod common;

use halcyon::{Driver, DriverRegistry, StatusCode};
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
    let bytes = common::standard_module().to_bytes();
    assert_eq!(
        CudaModule::from_bytes(&bytes).unwrap(),
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
    let halcyon_cuda::CudaImage::Ptx(ptx) = &module.image else {
        panic!("NVRTC returns PTX");
    };
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
}

/// Assembles the checked-in PTX with ptxas for sm_52, sm_70, sm_75 and sm_90 where ptxas is
/// found (`$PTXAS`, or on `PATH`): it rejects any instruction newer than the declared PTX ISA.
/// Prints why and passes without one. An architecture this ptxas no longer targets (CUDA 13
/// dropped sm_52 and sm_70) is skipped, but at least one must assemble.
#[test]
fn checked_in_ptx_assembles_with_ptxas() {
    let ptxas = std::env::var("PTXAS").unwrap_or_else(|_| "ptxas".into());
    let dir = std::env::temp_dir().join(format!("halcyon-cuda-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("standard.ptx");
    std::fs::write(&input, common::STANDARD_PTX).unwrap();
    let mut assembled = 0;
    let mut ran = false;
    for arch in ["sm_52", "sm_70", "sm_75", "sm_90"] {
        let out = std::process::Command::new(&ptxas)
            .arg(format!("-arch={arch}"))
            .arg(&input)
            .arg("-o")
            .arg(dir.join(format!("standard.{arch}.cubin")))
            .output();
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                eprintln!("skipped: cannot run {ptxas}: {e}");
                break;
            }
        };
        ran = true;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && stderr.contains("is not defined for option 'gpu-name'") {
            eprintln!("skipped {arch}: this ptxas no longer targets it");
            continue;
        }
        assert!(out.status.success(), "ptxas -arch={arch} failed: {stderr}");
        assembled += 1;
    }
    assert!(
        !ran || assembled > 0,
        "ptxas targets none of the architectures"
    );
    let _ = std::fs::remove_dir_all(&dir);
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

/// Direct tests of the translation table and a device: each prints why and passes without a
/// CUDA device.
mod gpu {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use halcyon::stream::{
        Capabilities, EventFlags, KernelParams, LaunchConfig, MemoryPlacement, StreamApi,
    };
    use halcyon::{BufferParams, Fence, StatusCode, Timepoints};
    use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
    use halcyon_conformance::kernels;
    use halcyon_cuda::{probe, CudaApi, CudaModule};

    use super::common;

    fn api_or_skip(test: &str) -> Option<CudaApi> {
        let probe = match probe::probe() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("skipped {test}: {e}");
                return None;
            }
        };
        match CudaApi::new(probe, 0) {
            Ok(api) => Some(api),
            Err(e) if e.code() == StatusCode::Unavailable => {
                eprintln!("skipped {test}: {e}");
                None
            }
            Err(e) => panic!("{test}: {e}"),
        }
    }

    /// Streams, events, copies, fills, host functions, a kernel and a captured graph, through
    /// the raw table.
    #[test]
    fn translation_table_round_trip() {
        let Some(api) = api_or_skip("translation_table_round_trip") else {
            return;
        };
        let info = api.info();
        println!("{info:?}");
        assert!(info.capabilities.contains(Capabilities::HOST_FUNC));
        assert!(!info.capabilities.contains(Capabilities::GRAPHS));
        let s = api.create_stream().unwrap();
        let e = api
            .create_event(EventFlags::DISABLE_TIMING | EventFlags::BLOCKING_SYNC)
            .unwrap();
        assert!(
            api.query_event(e).unwrap(),
            "a new event counts as complete"
        );

        const N: u32 = 1000;
        let bytes = u64::from(N) * 4;
        let buf = api.allocate(bytes, MemoryPlacement::Device).unwrap();
        assert!(api.host_pointer(buf).is_none());
        api.memset_async(buf, 7, 4, bytes, s).unwrap();
        let module = api.load_module(&common::standard_module().spec()).unwrap();
        let add_one = api.get_function(module.module, "add_one_u32").unwrap();
        let config = LaunchConfig {
            grid: [N.div_ceil(64), 1, 1],
            block: [64, 1, 1],
            shared_memory_bytes: 0,
        };
        let bindings = [buf];
        let constants = [N - 1]; // the last element stays 7
        let params = KernelParams {
            bindings: &bindings,
            constants: &constants,
            status: None,
        };
        // A launch must pass exactly the entry point's signature: nothing reaches the driver.
        for wrong in [
            KernelParams {
                constants: &[],
                ..params
            },
            KernelParams {
                status: Some(buf),
                ..params
            },
        ] {
            let err = api.launch_kernel(add_one, &config, &wrong, s).unwrap_err();
            assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");
            assert!(
                err.message().contains("takes 1 bindings and 1 constants"),
                "{err}"
            );
        }
        api.launch_kernel(add_one, &config, &params, s).unwrap();

        // Two more increments in a captured graph, launched twice.
        api.begin_capture(s).unwrap();
        api.launch_kernel(add_one, &config, &params, s).unwrap();
        api.launch_kernel(add_one, &config, &params, s).unwrap();
        // One-shot host functions (and reads, which use one) cannot be replayed by a graph.
        let err = api.launch_host_func(s, Box::new(|| {})).unwrap_err();
        assert_eq!(err.code(), StatusCode::FailedPrecondition, "{err}");
        let graph = api.end_capture(s).unwrap();
        api.launch_graph(graph, s).unwrap();
        api.launch_graph(graph, s).unwrap();

        let ran = Arc::new(AtomicU32::new(0));
        let flag = ran.clone();
        api.launch_host_func(
            s,
            Box::new(move || {
                flag.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
        let mut out = vec![0u32; N as usize];
        // SAFETY: `out` lives, untouched, until the stream is synchronised below.
        unsafe {
            api.copy_device_to_host_async(out.as_mut_ptr().cast(), buf, bytes, s)
                .unwrap()
        };
        api.record_event(e, s).unwrap();
        api.synchronize_event(e).unwrap();
        assert!(api.query_event(e).unwrap());
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(
            out[..N as usize - 1].iter().all(|&v| v == 12),
            "{:?}",
            &out[..8]
        );
        assert_eq!(out[N as usize - 1], 7);
        assert_eq!(api.pending_host_funcs(), 0);

        // Host to device, device to device, 1- and 2-byte fills.
        let other = api.allocate(bytes, MemoryPlacement::Device).unwrap();
        let input: Vec<u32> = (0..N).collect();
        // SAFETY: `input` lives, unmodified, until the stream is synchronised.
        unsafe {
            api.copy_host_to_device_async(other, input.as_ptr().cast(), bytes, s)
                .unwrap()
        };
        api.copy_device_to_device_async(buf, other, bytes, s)
            .unwrap();
        api.memset_async(buf, 0xab, 1, 4, s).unwrap();
        api.memset_async(buf.offset(4), 0xcdef, 2, 4, s).unwrap();
        let mut back = vec![0u32; N as usize];
        // SAFETY: as above.
        unsafe {
            api.copy_device_to_host_async(back.as_mut_ptr().cast(), buf, bytes, s)
                .unwrap()
        };
        api.synchronize_stream(s).unwrap();
        assert_eq!(back[0], 0xabab_abab);
        assert_eq!(back[1], 0xcdef_cdef);
        assert_eq!(&back[2..], &input[2..]);
        let err = api.memset_async(buf.offset(2), 1, 4, 4, s).unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument);

        // Stream-ordered allocation, where the device has memory pools.
        if info
            .capabilities
            .contains(Capabilities::STREAM_ORDERED_ALLOC)
        {
            let p = api.allocate_async(4096, s).unwrap();
            api.memset_async(p, 0, 4, 4096, s).unwrap();
            api.free_async(p, s).unwrap();
            api.synchronize_stream(s).unwrap();
        }

        // Managed memory has one address for host and device.
        if let Ok(managed) = api.allocate(4096, MemoryPlacement::HostVisible) {
            let host = api
                .host_pointer(managed)
                .expect("managed memory has a host address");
            assert_eq!(host.as_ptr() as u64, managed.0);
            api.free(managed).unwrap();
        }

        api.destroy_graph(graph).unwrap();
        api.unload_module(module.module).unwrap();
        api.free(buf).unwrap();
        api.free(other).unwrap();
        api.destroy_event(e).unwrap();
        api.destroy_stream(s).unwrap();
    }

    /// Pinned memory: one address for host and device, read and written by kernels over the
    /// bus, and copied to and from device memory as a plain DMA (no staging, no host function):
    /// pinned → device → pinned → device, then read back through ordinary (staged) memory.
    #[test]
    fn pinned_memory_round_trip() {
        let Some(api) = api_or_skip("pinned_memory_round_trip") else {
            return;
        };
        let err = api.allocate(0, MemoryPlacement::Pinned).unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument, "{err}");

        const N: u32 = 1024;
        let bytes = u64::from(N) * 4;
        // Two halves: the source of the first copy, then the destination of the second.
        let pinned = match api.allocate(2 * bytes, MemoryPlacement::Pinned) {
            Ok(pinned) => pinned,
            Err(e) if e.code() == StatusCode::Unimplemented => {
                eprintln!("skipped pinned_memory_round_trip: {e}");
                return;
            }
            Err(e) => panic!("pinned_memory_round_trip: {e}"),
        };
        let host = api
            .host_pointer(pinned)
            .expect("pinned memory has a host address");
        assert_eq!(host.as_ptr() as u64, pinned.0, "the same address");
        assert_eq!(
            api.host_pointer(pinned.offset(bytes + 4))
                .map(|p| p.as_ptr() as u64),
            Some(pinned.0 + bytes + 4),
            "inside the allocation too"
        );
        let words = host.as_ptr().cast::<u32>();
        let input: Vec<u32> = (0..N).map(|i| i * 3).collect();
        // SAFETY: the allocation holds 2 * N words, 4-byte aligned (page-aligned); no device
        // work uses it yet.
        unsafe {
            std::ptr::copy_nonoverlapping(input.as_ptr(), words, N as usize);
            std::ptr::write_bytes(words.add(N as usize), 0, N as usize);
        }

        let s = api.create_stream().unwrap();
        let buf = api.allocate(bytes, MemoryPlacement::Device).unwrap();
        let other = api.allocate(bytes, MemoryPlacement::Device).unwrap();
        let module = api.load_module(&common::standard_module().spec()).unwrap();
        let add_one = api.get_function(module.module, "add_one_u32").unwrap();
        let config = LaunchConfig {
            grid: [N.div_ceil(64), 1, 1],
            block: [64, 1, 1],
            shared_memory_bytes: 0,
        };
        let constants = [N];

        let host_funcs = api.host_funcs_enqueued();
        // SAFETY: the first half of `pinned` stays valid and unmodified until the stream is
        // synchronised below; the second half is touched by nothing else until then.
        unsafe {
            api.copy_host_to_device_async(buf, host.as_ptr(), bytes, s)
                .unwrap();
        }
        let bindings = [buf];
        let params = KernelParams {
            bindings: &bindings,
            constants: &constants,
            status: None,
        };
        api.launch_kernel(add_one, &config, &params, s).unwrap();
        // A kernel reads and writes the pinned memory itself, at its host address.
        let bindings = [pinned];
        let params = KernelParams {
            bindings: &bindings,
            constants: &constants,
            status: None,
        };
        api.launch_kernel(add_one, &config, &params, s).unwrap();
        // SAFETY: as above.
        unsafe {
            api.copy_device_to_host_async(host.as_ptr().add(bytes as usize), buf, bytes, s)
                .unwrap();
            api.copy_host_to_device_async(other, host.as_ptr().add(bytes as usize), bytes, s)
                .unwrap();
        }
        assert_eq!(
            api.host_funcs_enqueued(),
            host_funcs,
            "copies to and from pinned memory enqueue no host function"
        );
        api.synchronize_stream(s).unwrap();
        let expected: Vec<u32> = input.iter().map(|v| v + 1).collect();
        // SAFETY: every copy and kernel using `pinned` completed (synchronised above).
        let (first, second) = unsafe {
            (
                std::slice::from_raw_parts(words, N as usize).to_vec(),
                std::slice::from_raw_parts(words.add(N as usize), N as usize).to_vec(),
            )
        };
        assert_eq!(first, expected, "the kernel incremented the pinned memory");
        assert_eq!(second, expected, "device to pinned");
        // Pinned to device: read back through ordinary (pageable, so staged) memory.
        let mut back = vec![0u32; N as usize];
        // SAFETY: `back` lives, untouched, until the stream is synchronised.
        unsafe {
            api.copy_device_to_host_async(back.as_mut_ptr().cast(), other, bytes, s)
                .unwrap();
        }
        api.synchronize_stream(s).unwrap();
        assert_eq!(back, expected, "pinned to device");

        // While capturing, a read is refused even into pinned memory.
        api.begin_capture(s).unwrap();
        api.memset_async(buf, 0, 4, bytes, s).unwrap();
        // SAFETY: refused before anything is enqueued.
        let err = unsafe {
            api.copy_device_to_host_async(host.as_ptr().add(bytes as usize), buf, bytes, s)
        }
        .unwrap_err();
        assert_eq!(err.code(), StatusCode::FailedPrecondition, "{err}");
        let graph = api.end_capture(s).unwrap();
        api.destroy_graph(graph).unwrap();

        api.free(pinned).unwrap();
        // One left for the API to free when it drops.
        let kept = api.allocate(4096, MemoryPlacement::Pinned).unwrap();
        assert!(api.host_pointer(kept).is_some());
        api.unload_module(module.module).unwrap();
        api.free(buf).unwrap();
        api.free(other).unwrap();
        api.destroy_stream(s).unwrap();
    }

    /// Loading reports bad PTX with the JIT log, a signature that does not match the
    /// metadata, and a missing kernel.
    #[test]
    fn module_load_errors() {
        let Some(api) = api_or_skip("module_load_errors") else {
            return;
        };
        let bad = CudaModule::ptx(
            ".version 8.0\n.target sm_52\n.address_size 64\n.visible .entry empty()\n{\n\tbogus;\n}\n",
            vec![common::empty()],
        );
        let e = api.load_module(&bad.spec()).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains("CUDA_ERROR_INVALID_PTX"), "{e}");
        println!("{e}");

        // add_one_u32 takes (pointer, u32); declaring two bindings is refused on every driver:
        // the PTX's `.param`s say so (and cuFuncGetParamInfo, on CUDA 12.4+ drivers).
        let mut wrong = kernels::add_one_u32();
        wrong.binding_count = 2;
        wrong.constant_count = 0;
        let wrong = CudaModule::ptx(common::STANDARD_PTX, vec![wrong]).spec();
        let e = api.load_module(&wrong).unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(
            e.message().contains("takes 2 parameters of sizes [8, 4]"),
            "{e}"
        );

        // The standard kernels: only `fail` takes a status word, in PTX and as the driver
        // reports it where it can (CUDA 12.4+).
        let mut entry_points = common::standard_entry_points();
        entry_points.push(common::empty());
        let loaded = api
            .load_module(&CudaModule::ptx(common::STANDARD_PTX, entry_points).spec())
            .unwrap();
        assert_eq!(loaded.status_words, [false, false, true, false]);

        // `fail` writes 1 to the word it is launched with, and nothing else.
        let fail = api.get_function(loaded.module, "fail").unwrap();
        let s = api.create_stream().unwrap();
        let words = api.allocate(16, MemoryPlacement::Device).unwrap();
        api.memset_async(words, 0, 4, 16, s).unwrap();
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [1, 1, 1],
            shared_memory_bytes: 0,
        };
        let params = KernelParams {
            bindings: &[],
            constants: &[],
            status: Some(words.offset(8)),
        };
        api.launch_kernel(fail, &config, &params, s).unwrap();
        let mut out = [7u32; 4];
        // SAFETY: `out` outlives the copy (the stream is synchronised below).
        unsafe {
            api.copy_device_to_host_async(out.as_mut_ptr().cast(), words, 16, s)
                .unwrap()
        };
        api.synchronize_stream(s).unwrap();
        assert_eq!(out, [0, 0, 1, 0]);
        api.free(words).unwrap();
        api.destroy_stream(s).unwrap();
        api.unload_module(loaded.module).unwrap();

        let loaded = api.load_module(&common::standard_module().spec()).unwrap();
        let e = api.get_function(loaded.module, "nope").unwrap_err();
        assert_eq!(e.code(), StatusCode::NotFound, "{e}");
        api.unload_module(loaded.module).unwrap();
    }

    /// The device end to end: upload, dispatch with a parked wait released by the host,
    /// download; and host-visible buffers mapped by the host.
    #[test]
    fn device_dispatch_and_mapping() {
        let Some(device) = common::device_or_skip("device_dispatch_and_mapping") else {
            return;
        };
        println!("{}", device.info().name);
        let executable = device
            .load_executable(&common::standard_module().spec())
            .unwrap();
        let add_one = executable.entry_point_index("add_one_u32").unwrap();
        let queue = device.queue(0).unwrap();
        block_on(async {
            let data: Vec<u32> = (0..4096).collect();
            let buffer = upload_u32(&queue, &data).await?;
            let gate = device.create_semaphore(0)?;
            let mut wait = Fence::new();
            wait.insert(&gate, 1);
            let dispatch = queue.dispatch(
                Timepoints::new(wait, Fence::new()),
                &executable,
                add_one,
                [64, 1, 1],
                &[4096],
                &[buffer.whole()],
            );
            gate.signal(1)?;
            dispatch.await?;
            let out = download_u32(&queue, Fence::new(), &buffer.whole()).await?;
            assert_eq!(out, data.iter().map(|v| v + 1).collect::<Vec<_>>());
            Ok(())
        })
        .unwrap();
        // Host-visible (managed) memory: written by the host, incremented by the device, read
        // back by the host.
        let buffer = match device.allocator().allocate(256 * 4, BufferParams::HOST) {
            Ok(buffer) => buffer,
            Err(e) => {
                println!("no host-visible buffers: {e}");
                return;
            }
        };
        {
            let mut map = buffer.map_write(..).unwrap();
            for (i, chunk) in map.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&(i as u32 * 3).to_le_bytes());
            }
        }
        block_on(queue.dispatch(
            Timepoints::default(),
            &executable,
            add_one,
            [4, 1, 1],
            &[256],
            &[buffer.whole()],
        ))
        .unwrap();
        let map = buffer.map_read(..).unwrap();
        let values: &[u32] = map.as_slice().unwrap();
        assert!(values
            .iter()
            .enumerate()
            .all(|(i, &v)| v == i as u32 * 3 + 1));
    }
}
