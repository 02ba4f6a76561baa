//! halcyon-hip on the fake GPU runtime (`testing/fake-gpu`): the HIP runtime API on host
//! threads, which aborts the process, with a backtrace, when the caller breaks a rule of HIP's
//! that halcyon relies on (see `halcyon_fake_gpu`'s `hip` docs): creating things on a thread
//! that never called `hipSetDevice`, any call from a stream callback or host function, a
//! query, record or stream wait of an event another thread is synchronising on (HIP holds the
//! event's lock for the whole wait), a `hipMemcpyAsync` from or to pageable memory (hipamd
//! waits on the host there), a destroyed handle, memory freed before the device got to work
//! using it. It is opened by path, so a real `libamdhip64` on the machine does not matter.
//!
//! On it run, unchanged: the conformance suite (under completion threads, stream callbacks,
//! stream callbacks as on HIP 5.2, which has no `hipLaunchHostFunc`, and mapped host memory
//! for host-visible buffers), with the real gfx900 code object of `tests/data`, and the
//! runtime tests of `tests/gpu/mod.rs`. What it cannot show: that ROCm behaves as the fake
//! models it, or anything about speed.

mod fake;
mod gpu;

use std::time::Duration;

use halcyon::{Device, Driver, Result};
use halcyon_conformance::{kernels, Kernels as _};
use halcyon_hip::result::Hip;
use halcyon_hip::{HipDeviceOptions, HipDriver, HostVisibleMemory};
use halcyon_stream::CompletionStrategy;

use fake::{fake, hip, hip_5_2, FakeKernels, CODE_OBJECT};

/// `tests/data/shared.hip` compiled for gfx900: `block_sum_u32`, which uses dynamic shared
/// memory.
const SHARED_CODE_OBJECT: &[u8] = include_bytes!("data/shared-gfx900.hsaco");

/// For `gpu/mod.rs`: the fake runtime, which always has its device.
fn runtime_with_a_device() -> Option<Hip> {
    Some(hip())
}

fn device(hip: Hip, completion: CompletionStrategy, memory: HostVisibleMemory) -> Result<Device> {
    HipDriver::with_hip(hip).create_device_with(
        0,
        &HipDeviceOptions::default()
            .with_queue_count(2)
            .with_completion(completion)
            .with_probe_interval(Duration::from_millis(10))
            .with_host_visible_memory(memory),
    )
}

/// Completion threads blocked in `hipEventSynchronize` (the default).
mod completion_thread {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || device(
            hip(),
            CompletionStrategy::CompletionThread,
            HostVisibleMemory::Auto
        ),
        FakeKernels
    );
}

/// `hipLaunchHostFunc` callbacks posting to the reactor.
mod host_callback {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || device(
            hip(),
            CompletionStrategy::HostCallback,
            HostVisibleMemory::Auto
        ),
        FakeKernels
    );
}

/// `hipStreamWriteValue32` into pinned words read by one scanner thread (spinning 20 µs).
mod flag_write {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || HipDriver::with_hip(hip()).create_device_with(
            0,
            &HipDeviceOptions::default()
                .with_queue_count(2)
                .with_completion(CompletionStrategy::FlagWrite)
                .with_completion_spin(Duration::from_micros(20))
                .with_probe_interval(Duration::from_millis(10)),
        ),
        FakeKernels
    );
}

/// As on HIP 5.2: host functions (staging returns, completions) through
/// `hipStreamAddCallback`.
mod stream_callbacks {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || device(
            hip_5_2(),
            CompletionStrategy::HostCallback,
            HostVisibleMemory::Auto
        ),
        FakeKernels
    );
}

/// Host-visible buffers in mapped pinned host memory instead of managed memory.
mod mapped_host {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || device(
            hip(),
            CompletionStrategy::CompletionThread,
            HostVisibleMemory::MappedHost
        ),
        FakeKernels
    );
}

/// `hip://0` and `hip://1` on the fake runtime, with the same configuration.
fn devices(
    hip: Hip,
    completion: CompletionStrategy,
    memory: HostVisibleMemory,
) -> Result<(Device, Device)> {
    let options = HipDeviceOptions::default()
        .with_queue_count(2)
        .with_completion(completion)
        .with_probe_interval(Duration::from_millis(10))
        .with_host_visible_memory(memory);
    let driver = HipDriver::with_hip(hip);
    Ok((
        driver.create_device_with(0, &options)?,
        driver.create_device_with(1, &options)?,
    ))
}

/// The multi-device cases on `hip://0` and `hip://1` with completion threads: every thread
/// that calls HIP for a device makes that device current first (the fake checks that each
/// stream, event, allocation and module lands on its own device and that no call mixes the
/// two).
mod completion_thread_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || devices(
            hip(),
            CompletionStrategy::CompletionThread,
            HostVisibleMemory::Auto
        ),
        FakeKernels
    );
}

/// The multi-device cases on `hip://0` and `hip://1` with stream callbacks, as on HIP 5.2.
mod stream_callbacks_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || devices(
            hip_5_2(),
            CompletionStrategy::HostCallback,
            HostVisibleMemory::MappedHost
        ),
        FakeKernels
    );
}

#[test]
fn the_fake_device_is_listed() {
    let driver = HipDriver::with_hip(hip());
    let devices = driver.enumerate_devices().unwrap();
    let uris: Vec<&str> = devices.iter().map(|d| d.uri.as_str()).collect();
    assert_eq!(uris, ["hip://0", "hip://1"], "the fake has two devices");
    for device in &devices {
        assert!(
            device.name.contains("fake HIP device") && device.name.contains("compute 9.0"),
            "{device:?}"
        );
    }
    assert!(
        driver.info().full_name.contains("HIP 6.2.0"),
        "{:?}",
        driver.info()
    );
}

#[test]
fn work_reaches_the_fake_runtime() {
    let before = fake().stats();
    // hipDeviceTotalMem answers the fake's 1 GiB.
    let memory = device(
        hip(),
        CompletionStrategy::CompletionThread,
        HostVisibleMemory::Auto,
    )
    .and_then(|device| device.query(halcyon::device::keys::MEMORY_BYTES));
    assert_eq!(memory.unwrap(), 1 << 30);
    halcyon_conformance::run(
        "saxpy_dispatch",
        || {
            device(
                hip(),
                CompletionStrategy::CompletionThread,
                HostVisibleMemory::Auto,
            )
        },
        &FakeKernels,
        halcyon_conformance::cases::saxpy_dispatch,
    );
    halcyon_conformance::run(
        "host_call_in_queue_order",
        || {
            device(
                hip_5_2(),
                CompletionStrategy::HostCallback,
                HostVisibleMemory::Auto,
            )
        },
        &FakeKernels,
        halcyon_conformance::cases::host_call_in_queue_order,
    );
    let after = fake().stats();
    assert!(after.kernels_run > before.kernels_run, "{after:?}");
    assert!(after.host_funcs_run > before.host_funcs_run, "{after:?}");
    assert_eq!(after.violations, 0, "{:?}", fake().violations());
}

/// A kernel using dynamic shared memory gets what its entry point declares (all 64 KiB of the
/// device's LDS), also through the module's byte form; a declaration beyond the device's
/// `hipDeviceAttributeMaxSharedMemoryPerBlock` is refused at load, naming the limit.
#[test]
fn dynamic_shared_memory_reaches_the_kernel() {
    use halcyon::{EntryPoint, ExecutableSpec, Fence, StatusCode, Timepoints};
    use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
    const WORDS: u32 = 16 << 10;
    let entry = EntryPoint {
        name: "block_sum_u32".into(),
        workgroup_size: [64, 1, 1],
        binding_count: 2,
        constant_count: 2,
    };
    let module = |bytes| {
        fake::module(SHARED_CODE_OBJECT, vec![entry.clone()])
            .unwrap()
            .with_shared_memory("block_sum_u32", bytes)
            .unwrap()
    };
    let device = device(
        hip(),
        CompletionStrategy::CompletionThread,
        HostVisibleMemory::Auto,
    )
    .unwrap();
    let queue = device.queue(0).unwrap();
    const N: u32 = 1000;
    let blocks = N.div_ceil(64);
    let data: Vec<u32> = (0..N).map(|i| i * 7 + 1).collect();
    let expected: Vec<u32> = data.chunks(64).map(|c| c.iter().sum()).collect();
    let packed = module(4 * WORDS).to_packed();
    // The packed form carries the shared memory declaration.
    assert_eq!(packed.shared_memory(0), 4 * WORDS);
    let specs = [
        module(4 * WORDS).spec(),
        // SAFETY: unmodified hiprtc output; the entry point agrees with the kernel.
        unsafe { packed.spec_unchecked() },
        // SAFETY: as above.
        unsafe { ExecutableSpec::bytes_unchecked(halcyon_hip::FORMAT_HSACO, packed.to_bytes()) },
    ];
    for spec in specs {
        let executable = device.load_executable(&spec).unwrap();
        block_on(async {
            let x = upload_u32(&queue, &data).await?;
            let out = upload_u32(&queue, &vec![0; blocks as usize]).await?;
            queue
                .dispatch(
                    Timepoints::default(),
                    &executable
                        .kernel_at(0)?
                        .launch([blocks, 1, 1])
                        .constant(N)
                        .constant(WORDS)
                        .binding(x.whole())
                        .binding(out.whole()),
                )
                .await?;
            assert_eq!(
                download_u32(&queue, Fence::new(), &out.whole()).await?,
                expected
            );
            Ok::<(), halcyon::Error>(())
        })
        .unwrap();
    }
    let Err(e) = device.load_executable(&module(4 * WORDS + 4).spec()) else {
        panic!("more than the device's LDS is refused");
    };
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(
        e.message().contains("may have at most 65536 bytes") && e.message().contains("hip://0"),
        "{e}"
    );
    assert_eq!(fake().stats().violations, 0, "{:?}", fake().violations());
}

/// The byte form of a module is a `PackedExecutable`: a checked spec of it is refused, naming
/// the unsafe ways in, and an unchecked one loads and runs on the fake runtime.
#[test]
fn a_packed_code_object_loads_only_from_an_unchecked_spec() {
    use halcyon::StatusCode;
    let packed = fake::module(CODE_OBJECT, fake::standard())
        .unwrap()
        .to_packed();
    let new_device = || {
        device(
            hip(),
            CompletionStrategy::CompletionThread,
            HostVisibleMemory::Auto,
        )
    };
    let e = new_device()
        .unwrap()
        .load_executable(&packed.spec())
        .unwrap_err();
    assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
    assert!(
        e.message().contains("ExecutableSpec::bytes_unchecked")
            && e.message().contains("PackedExecutable::spec_unchecked"),
        "{e}"
    );
    struct Unchecked(halcyon::PackedExecutable);
    impl halcyon_conformance::Kernels for Unchecked {
        fn load(&self, device: &Device) -> Result<halcyon::Executable> {
            // SAFETY: the gfx900 fixture, unmodified hiprtc output, with the standard entry
            // points, which agree with its kernels.
            device.load_executable(&unsafe { self.0.spec_unchecked() })
        }

        fn can_fail(&self) -> bool {
            true
        }
    }
    let before = fake().stats();
    let kernels = Unchecked(packed);
    halcyon_conformance::run(
        "saxpy_dispatch",
        new_device,
        &kernels,
        halcyon_conformance::cases::saxpy_dispatch,
    );
    halcyon_conformance::run(
        "failing_dispatch_fails_the_chain",
        new_device,
        &kernels,
        halcyon_conformance::cases::failing_dispatch_fails_the_chain,
    );
    assert!(fake().stats().kernels_run > before.kernels_run);
    assert_eq!(fake().stats().violations, 0, "{:?}", fake().violations());
}

/// A compressed offload bundle (`CCOB`) is passed to HIP unread: the fake runtime, like HIP
/// without the decompressor, refuses it, and the error says what halcyon passed.
#[test]
fn a_compressed_bundle_is_handed_to_hip_unread() {
    let mut compressed = b"CCOB".to_vec();
    compressed.extend_from_slice(&[0; 60]);
    let module = fake::module(&compressed, fake::standard()).unwrap();
    let device = device(
        hip(),
        CompletionStrategy::CompletionThread,
        HostVisibleMemory::Auto,
    )
    .unwrap();
    let err = device.load_executable(&module.spec()).unwrap_err();
    assert!(
        err.message()
            .contains("the compressed offload bundle (CCOB, not read by halcyon)"),
        "{err}"
    );
    assert_eq!(fake().stats().violations, 0, "{:?}", fake().violations());
}

/// A code object for another GPU than the device's loads nowhere: HIP's
/// `hipErrorNoBinaryForGpu`, with a message that names the code object's target.
#[test]
fn a_code_object_for_another_gpu_is_refused_naming_its_target() {
    let mut code = CODE_OBJECT.to_vec();
    // e_flags' EF_AMDGPU_MACH: gfx900 (0x2c) becomes gfx90a (0x3f).
    assert_eq!(code[0x30], 0x2c);
    code[0x30] = 0x3f;
    let device = device(
        hip(),
        CompletionStrategy::CompletionThread,
        HostVisibleMemory::Auto,
    )
    .unwrap();
    let module = fake::module(&code, vec![kernels::add_one_u32()]).unwrap();
    let err = device.load_executable(&module.spec()).unwrap_err();
    assert!(err.message().contains("hipErrorNoBinaryForGpu"), "{err}");
    assert!(err.message().contains("gfx90a"), "{err}");
}

/// `tests/data/conformance.hip` built by `hipcc --genco --offload-arch=gfx900
/// --offload-arch=gfx90a:xnack+`: an offload bundle, as HIP's module workflow makes them.
const BUNDLE: &[u8] = include_bytes!("data/conformance-bundle.co");

/// The suite's standard kernels from a code object or bundle.
struct KernelsFrom(Vec<u8>);

impl halcyon_conformance::Kernels for KernelsFrom {
    fn load(&self, device: &Device) -> Result<halcyon::Executable> {
        device.load_executable(&fake::module(&self.0, fake::standard())?.spec())
    }

    fn can_fail(&self) -> bool {
        true
    }
}

/// A `hipcc --genco` offload bundle for gfx900 and gfx90a loads as is: HIP picks the device's
/// (gfx900) code object, whose kernels run and fail through their status word. So does a
/// bundle halcyon_hip makes; one with no code object for the device is
/// `hipErrorNoBinaryForGpu`, naming the targets the bundle has.
#[test]
fn an_offload_bundle_runs_the_devices_code_object() {
    use halcyon_hip::code_object::offload_bundle;
    let new_device = || {
        device(
            hip(),
            CompletionStrategy::CompletionThread,
            HostVisibleMemory::Auto,
        )
    };
    let before = fake().stats();
    let mut gfx90a = CODE_OBJECT.to_vec();
    // e_flags' EF_AMDGPU_MACH: gfx900 (0x2c) becomes gfx90a (0x3f).
    gfx90a[0x30] = 0x3f;
    // The device's entry second, after another GPU's.
    let ours = offload_bundle(&[&gfx90a, CODE_OBJECT]).unwrap();
    for bytes in [BUNDLE.to_vec(), ours] {
        let kernels = KernelsFrom(bytes);
        halcyon_conformance::run(
            "saxpy_dispatch",
            new_device,
            &kernels,
            halcyon_conformance::cases::saxpy_dispatch,
        );
        halcyon_conformance::run(
            "failing_dispatch_fails_the_chain",
            new_device,
            &kernels,
            halcyon_conformance::cases::failing_dispatch_fails_the_chain,
        );
    }
    assert!(fake().stats().kernels_run > before.kernels_run);

    let elsewhere = offload_bundle(&[&gfx90a]).unwrap();
    let err = KernelsFrom(elsewhere)
        .load(&new_device().unwrap())
        .unwrap_err();
    assert!(err.message().contains("hipErrorNoBinaryForGpu"), "{err}");
    assert!(
        err.message()
            .contains("the offload bundle holds code objects for [gfx90a]: is hip://0's"),
        "{err}"
    );
    assert_eq!(fake().stats().violations, 0, "{:?}", fake().violations());
}

/// A kernel's status word must be 4 aligned bytes of the API's own live memory: the kernel
/// stores to it, so a made-up, freed or misaligned address is refused before HIP sees it.
#[test]
fn a_status_word_outside_the_apis_memory_is_refused() {
    use halcyon::StatusCode;
    use halcyon_hip::HipStreamApi;
    use halcyon_stream::{DevicePtr, KernelParams, LaunchConfig, MemoryPlacement, StreamApi};
    let api = HipStreamApi::new(hip(), 0, HostVisibleMemory::Auto).unwrap();
    let module = fake::module(CODE_OBJECT, vec![kernels::fail()]).unwrap();
    let loaded = api.load_module(&module.spec()).unwrap();
    assert_eq!(loaded.status_words, [true]);
    let fail = api.get_function(loaded.module, "fail").unwrap();
    let stream = api.create_stream().unwrap();
    let words = api.allocate(16, MemoryPlacement::Pinned).unwrap();
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [1, 1, 1],
        shared_memory_bytes: 0,
    };
    let freed = api.allocate(16, MemoryPlacement::Device).unwrap();
    api.free(freed).unwrap();
    for (word, expected) in [
        (DevicePtr(0x10), "status word: 4 bytes at"),
        (freed, "status word: 4 bytes at"),
        (words.offset(14), "not 4-byte aligned"),
        (words.offset(16), "status word: 4 bytes at"),
    ] {
        let params = KernelParams {
            bindings: &[],
            constants: &[],
            status: Some(word),
        };
        let e = api
            .launch_kernel(fail, &config, &params, stream)
            .unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(e.message().contains(expected), "{expected}: {e}");
    }
    let params = KernelParams {
        bindings: &[],
        constants: &[],
        status: Some(words.offset(12)),
    };
    api.launch_kernel(fail, &config, &params, stream).unwrap();
    api.synchronize_stream(stream).unwrap();
    let host = api.host_pointer(words).unwrap().as_ptr().cast::<u32>();
    // SAFETY: the launch writing the word completed (synchronised above); 4 words, aligned.
    let back = unsafe { std::slice::from_raw_parts(host, 4).to_vec() };
    assert_eq!(back[3], 1);
    api.free(words).unwrap();
    api.destroy_stream(stream).unwrap();
    api.unload_module(loaded.module).unwrap();
    assert_eq!(fake().stats().violations, 0, "{:?}", fake().violations());
}

/// A write and a read larger than a staging chunk go through pinned staging of at most
/// two chunks (`staging_len` of an unbounded copy: the halves the chunks take turns through), and arrive whole, without a contract violation (such as a
/// copy from or to pageable memory).
#[test]
fn large_transfers_stage_in_bounded_chunks() {
    use halcyon_conformance::harness::{block_on, download_u32, upload_u32};
    // The staging one copy needs at most: two chunks.
    let chunk_bytes = halcyon_stream::staging::staging_len(usize::MAX);

    let before = fake().stats();
    for hip in [hip(), hip_5_2()] {
        let device = device(
            hip,
            CompletionStrategy::CompletionThread,
            HostVisibleMemory::Auto,
        )
        .unwrap();
        let queue = device.queue(0).unwrap();
        // Two and a half chunks, and a few words more.
        let words = 5 * chunk_bytes / 8 + 3;
        let data: Vec<u32> = (0..words as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let buffer = block_on(upload_u32(&queue, &data)).unwrap();
        let back = block_on(download_u32(&queue, halcyon::Fence::new(), &buffer.whole())).unwrap();
        assert!(back == data, "the bytes arrive whole");
    }
    let after = fake().stats();
    assert!(
        after.largest_pinned <= chunk_bytes as u64,
        "staging of at most two chunks: {after:?}"
    );
    // Per device: two hand-overs and a release for the write, three copies out for the read.
    assert!(
        after.host_funcs_run >= before.host_funcs_run + 12,
        "{before:?} → {after:?}"
    );
    assert_eq!(after.violations, 0, "{:?}", fake().violations());
}

/// With the profiler on, a fill, a dispatch and a read on one timeline get device times
/// within their host-observed ranges (the conformance case), from two timing events each,
/// through the one calibration made when the device was created. No correction the stream
/// layer made exceeds the calibration's stated error plus 2 µs (two of the fake's 0.5 µs timer
/// ticks, the `f32` rounding and nanosecond rounding); work submitted with the profiler off
/// records no timing event.
#[test]
fn profiled_operations_get_device_times() -> Result<()> {
    use halcyon_stream::keys;
    let device = HipDriver::with_hip(hip()).create_device_with(
        0,
        &HipDeviceOptions::default().with_timestamp_recalibration(Duration::from_secs(3600)),
    )?;
    let stat = |key| device.query(key).unwrap();
    halcyon_conformance::cases::fill_update_copy_round_trip(&device, &FakeKernels)?;
    halcyon_conformance::cases::saxpy_dispatch(&device, &FakeKernels)?;
    assert_eq!(stat(keys::TIMING_EVENTS), 0, "profiler off");
    halcyon_conformance::cases::profile_device_times(&device, &FakeKernels)?;
    assert_eq!(stat(keys::DEVICE_TIMES), 3);
    assert_eq!(stat(keys::DEVICE_TIMES_SKIPPED), 0);
    assert_eq!(stat(keys::TIMING_EVENTS), 6);
    assert_eq!(stat(keys::TIMESTAMP_CALIBRATIONS), 1);
    let error = stat(keys::TIMESTAMP_CALIBRATION_ERROR_NS);
    let correction = stat(keys::DEVICE_TIME_CORRECTION_MAX_NS);
    eprintln!(
        "hip://0: calibration error {error} ns; {} corrections, the largest {correction} ns",
        stat(keys::DEVICE_TIME_CORRECTIONS)
    );
    assert!(
        correction <= error + 2_000,
        "a correction of {correction} ns exceeds the calibration's error ({error} ns)"
    );
    Ok(())
}
