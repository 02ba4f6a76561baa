//! The HIP driver against whatever this machine has: no runtime, the runtime without an AMD
//! GPU (CI: Debian's libamdhip64-5), or a GPU. Each test finds out which case applies by
//! opening the sonames itself, and checks exactly what that case allows.

mod gpu;

use halcyon::{Driver, DriverRegistry, StatusCode};
use halcyon_hip::result::{status_code, Hip};
use halcyon_hip::{sys, HipDeviceOptions, HipDriver, HipStreamApi, HostVisibleMemory};
use halcyon_stream::CompletionStrategy;

const SONAMES: [&str; 4] = [
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

/// The first soname this machine can open, if any.
/// The machine's runtime, if it has one and it sees an AMD GPU (for `gpu/mod.rs`).
fn runtime_with_a_device() -> Option<Hip> {
    let Ok(hip) = Hip::load_default() else {
        eprintln!("skipped: no libamdhip64 on this machine");
        return None;
    };
    if hip.init().is_err() || hip.device_count().map_or(true, |n| n == 0) {
        eprintln!("skipped: no AMD GPU");
        return None;
    }
    Some(hip)
}

fn hip_soname() -> Option<&'static str> {
    SONAMES.into_iter().find(|name| {
        // SAFETY: opening the HIP runtime only runs its initialisers.
        let library = unsafe { libloading::Library::new(*name) };
        // Never unload it again (as the driver does): HIP's teardown is not reentrant.
        library.map(std::mem::forget).is_ok()
    })
}

#[test]
fn default_sonames_are_the_documented_ones() {
    assert_eq!(sys::DEFAULT_SONAMES, SONAMES);
}

#[test]
fn missing_library_is_unavailable_naming_each_soname() {
    let names = ["libhalcyon-missing-hip.so", "libhalcyon-missing-hip.so.5"];
    // SAFETY: no such libraries: nothing opens.
    let driver = unsafe { HipDriver::with_sonames(names) };
    for err in [
        driver.enumerate_devices().unwrap_err(),
        driver.create_device(0).unwrap_err(),
        driver.hip().unwrap_err(),
    ] {
        assert_eq!(err.code(), StatusCode::Unavailable, "{err}");
        for name in names {
            assert!(err.message().contains(&format!("dlopen {name}: ")), "{err}");
        }
    }
    assert!(driver.info().full_name.contains("runtime not loaded"));
}

#[test]
fn a_library_lacking_hip_symbols_is_skipped_for_the_next_soname() {
    // libc opens on every Linux machine and has none of HIP's symbols: it stands for a stale
    // or unrelated library under one of the names.
    // SAFETY: libc has none of HIP's symbols, so none is called; the other does not exist.
    let err = unsafe { Hip::load(&["libc.so.6", "libhalcyon-missing-hip.so.5"]) }.unwrap_err();
    assert_eq!(err.code(), StatusCode::Unavailable, "{err}");
    assert!(
        err.message()
            .starts_with("libc.so.6 lacks the required symbol hip"),
        "the library that opened is the one to name: {err}"
    );
    assert!(err.message().contains("HIP 5.2 or later"), "{err}");

    let Some(name) = hip_soname() else {
        eprintln!("skipped the rest: no libamdhip64 on this machine");
        return;
    };
    // SAFETY: libc as above; `name` is the machine's HIP runtime.
    let hip = unsafe { Hip::load(&["libc.so.6", name]) }.expect("the search goes on past libc");
    assert_eq!(hip.api().soname(), name);
    assert!(hip.runtime_version().unwrap() >= 50_000_000);
}

#[test]
fn without_the_runtime_the_default_driver_names_the_sonames() {
    if let Some(name) = hip_soname() {
        eprintln!("skipped: {name} is installed (covered by the tests with the runtime)");
        return;
    }
    let driver = HipDriver::new();
    for err in [
        driver.enumerate_devices().unwrap_err(),
        driver.create_device(0).unwrap_err(),
    ] {
        assert_eq!(err.code(), StatusCode::Unavailable, "{err}");
        assert!(err.message().starts_with("no HIP runtime: "), "{err}");
        for name in SONAMES {
            assert!(err.message().contains(&format!("dlopen {name}: ")), "{err}");
        }
    }
}

#[test]
fn with_the_runtime_the_driver_loads_it_and_reports_its_version() {
    let Some(name) = hip_soname() else {
        eprintln!("skipped: no libamdhip64 on this machine");
        return;
    };
    let hip = Hip::load_default().expect("the runtime opens");
    assert_eq!(hip.api().soname(), name);
    let version = hip.runtime_version().unwrap();
    assert!(version >= 50_000_000, "runtime version {version}");
    let version = halcyon_hip::version_string(version);
    eprintln!(
        "{name}: HIP runtime {version}, driver {:?}, optional symbols {:?}",
        hip.driver_version(),
        hip.api().optional_symbols()
    );
    let info = HipDriver::new().info();
    assert_eq!(info.id, "hip");
    assert!(
        info.full_name.contains(&format!("HIP {version} ({name})")),
        "{info:?}"
    );

    // Errors are named by the runtime itself.
    let err = hip.error(sys::hipErrorOutOfMemory, "hipMalloc(1048576 bytes)");
    assert_eq!(err.code(), StatusCode::ResourceExhausted);
    assert!(
        err.message()
            .starts_with("hipMalloc(1048576 bytes) failed: hipErrorOutOfMemory (2)"),
        "{err}"
    );
    assert_eq!(hip.error_name(sys::hipErrorNoDevice), "hipErrorNoDevice");
    assert_eq!(
        hip.error_name(sys::hipErrorInvalidDevice),
        "hipErrorInvalidDevice"
    );
    assert_eq!(hip.error_name(sys::hipErrorNotReady), "hipErrorNotReady");

    // Missing optional entry points are Unimplemented, not a crash.
    if !hip.has_launch_host_func() {
        unsafe extern "C" fn noop(_: *mut std::ffi::c_void) {}
        // SAFETY: the runtime lacks the symbol, so nothing is enqueued.
        let err = unsafe { hip.launch_host_func(std::ptr::null_mut(), noop, std::ptr::null_mut()) }
            .unwrap_err();
        assert_eq!(err.code(), StatusCode::Unimplemented);
        assert!(
            err.message()
                .starts_with("hipLaunchHostFunc is not exported by"),
            "{err}"
        );
    }
}

/// The memory-pool calls `HipStreamApi` allocates stream-ordered memory with (declared from
/// ROCm 5.2 on; Debian's libamdhip64.so.5, HIP 5.2.3, exports them all).
const POOL_SYMBOLS: [&str; 5] = [
    "hipMemPoolCreate",
    "hipMemPoolDestroy",
    "hipMallocFromPoolAsync",
    "hipMemPoolSetAttribute",
    "hipMemPoolTrimTo",
];

#[test]
fn with_the_runtime_the_memory_pool_symbols_resolve() {
    let Some(name) = hip_soname() else {
        eprintln!("skipped: no libamdhip64 on this machine");
        return;
    };
    let hip = Hip::load_default().expect("the runtime opens");
    let api = hip.api();
    let resolved = [
        api.hipMemPoolCreate.is_some(),
        api.hipMemPoolDestroy.is_some(),
        api.hipMallocFromPoolAsync.is_some(),
        api.hipMemPoolSetAttribute.is_some(),
        api.hipMemPoolTrimTo.is_some(),
    ];
    let version = hip.runtime_version().unwrap();
    eprintln!(
        "{name} (HIP {}): {:?}",
        halcyon_hip::version_string(version),
        POOL_SYMBOLS.iter().zip(resolved).collect::<Vec<_>>()
    );
    let listed = api.optional_symbols();
    for (symbol, present) in POOL_SYMBOLS.into_iter().zip(resolved) {
        assert_eq!(listed.contains(&symbol), present, "{symbol} in {listed:?}");
    }
    if version < 50_200_000 {
        eprintln!("skipped: this runtime predates the memory-pool API (ROCm 5.2)");
        return;
    }
    for (symbol, present) in POOL_SYMBOLS.into_iter().zip(resolved) {
        assert!(present, "{name} lacks {symbol}");
    }
    assert!(api.hipFreeAsync.is_some(), "{name} lacks hipFreeAsync");
    assert!(hip.has_mem_pools());
}

#[test]
fn with_the_runtime_and_no_gpu_everything_is_unavailable_naming_the_hip_error() {
    let Some(_) = hip_soname() else {
        eprintln!("skipped: no libamdhip64 on this machine");
        return;
    };
    let hip = Hip::load_default().unwrap();
    // The raw calls, to know which case this is and what the runtime said.
    let api = hip.api();
    // SAFETY: hipInit takes only flags.
    let init = unsafe { (api.hipInit)(0) };
    let mut count = -1;
    // SAFETY: the out-pointer is valid.
    let counted = unsafe { (api.hipGetDeviceCount)(&mut count) };
    eprintln!("hipInit(0) = {init}, hipGetDeviceCount = {counted} with count {count}");
    if init == sys::hipSuccess && counted == sys::hipSuccess && count > 0 {
        eprintln!("skipped: this machine has {count} AMD GPUs (see the GPU test)");
        return;
    }
    assert!(count <= 0, "count {count}");

    let driver = HipDriver::new();
    let registry = DriverRegistry::new();
    halcyon_hip::register(&registry).unwrap();
    for err in [
        driver.enumerate_devices().unwrap_err(),
        driver.create_device(0).unwrap_err(),
        registry.enumerate_devices("hip").unwrap_err(),
        registry.create_device("hip://0").unwrap_err(),
    ] {
        eprintln!("{err}");
        assert_eq!(err.code(), StatusCode::Unavailable, "{err}");
        assert!(
            err.message().starts_with("no usable AMD GPU: HIP "),
            "{err}"
        );
        assert!(
            err.message()
                .contains("hipGetDeviceCount reports 0 devices"),
            "{err}"
        );
        for code in [init, counted] {
            if code != sys::hipSuccess {
                let named = format!("{} ({code})", hip.error_name(code));
                assert!(err.message().contains(&named), "{err} lacks {named}");
            }
        }
        assert!(err.message().contains("/dev/kfd"), "{err}");
    }

    // The checked wrappers fail cleanly, naming the call and the error.
    let err = hip.malloc(1 << 20).unwrap_err();
    assert!(
        err.message()
            .starts_with("hipMalloc(1048576 bytes) failed: hipError"),
        "{err}"
    );
    let err = hip.stream_create(sys::hipStreamNonBlocking).unwrap_err();
    assert!(
        err.message()
            .starts_with("hipStreamCreateWithFlags(flags 0x1) failed: hipError"),
        "{err}"
    );
    assert!(hip.set_device(0).is_err());
    assert!(matches!(hip.device_count(), Err(_) | Ok(0)));
    if hip.has_mem_pools() {
        // The real hipMemPoolCreate reads these properties and refuses: there is no device 0.
        let props = sys::hipMemPoolProps {
            allocType: sys::hipMemAllocationTypePinned,
            handleTypes: sys::hipMemHandleTypeNone,
            location: sys::hipMemLocation {
                type_: sys::hipMemLocationTypeDevice,
                id: 0,
            },
            ..sys::hipMemPoolProps::default()
        };
        let err = hip.mem_pool_create(&props).unwrap_err();
        eprintln!("{err}");
        assert!(
            err.message().starts_with(
                "hipMemPoolCreate(device 0, allocation type 1, handle types 0x0) failed: hipError"
            ),
            "{err}"
        );
    }
}

#[test]
fn without_a_gpu_the_stream_api_names_the_hipsetdevice_error() {
    let Ok(hip) = Hip::load_default() else {
        eprintln!("skipped: no libamdhip64 on this machine");
        return;
    };
    let _ = hip.init();
    if hip.device_count().is_ok_and(|n| n > 0) {
        eprintln!("skipped: this machine has an AMD GPU");
        return;
    }
    let err = HipStreamApi::new(hip, 0, HostVisibleMemory::Auto).unwrap_err();
    assert_eq!(err.code(), StatusCode::Unavailable, "{err}");
    assert!(
        err.message()
            .starts_with("hipSetDevice(0) failed: hipError"),
        "{err}"
    );
    // Options go through the same no-device path as Driver::create_device.
    let err = HipDriver::new()
        .create_device_with(0, &HipDeviceOptions::default())
        .unwrap_err();
    assert_eq!(err.code(), StatusCode::Unavailable, "{err}");
    assert!(err.message().starts_with("no usable AMD GPU: "), "{err}");
}

#[test]
fn default_device_options() {
    let options = HipDeviceOptions::default();
    assert_eq!(options.queue_count, 1);
    assert_eq!(options.completion, CompletionStrategy::CompletionThread);
    assert_eq!(options.host_visible_memory, HostVisibleMemory::Auto);
    assert_eq!(options.pool_release_threshold, u64::MAX);
    assert!(!options.probe_interval.is_zero());
}

#[test]
fn status_codes() {
    assert_eq!(
        status_code(sys::hipErrorOutOfMemory),
        StatusCode::ResourceExhausted
    );
    assert_eq!(
        status_code(sys::hipErrorInvalidValue),
        StatusCode::InvalidArgument
    );
    assert_eq!(status_code(sys::hipErrorNoDevice), StatusCode::Unavailable);
    assert_eq!(
        status_code(sys::hipErrorInvalidDevice),
        StatusCode::Unavailable
    );
    assert_eq!(status_code(sys::hipErrorNotFound), StatusCode::NotFound);
    assert_eq!(
        status_code(sys::hipErrorNotSupported),
        StatusCode::Unimplemented
    );
    assert_eq!(
        status_code(sys::hipErrorLaunchFailure),
        StatusCode::Internal
    );
    assert_eq!(status_code(sys::hipErrorUnknown), StatusCode::Unknown);
}
