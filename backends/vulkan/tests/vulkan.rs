//! Vulkan-specific tests: the driver, native device-to-device waits, the reactor's native wait,
//! memory mapping paths, SPIR-V validation, and the idle reactor's CPU use.

mod common;

use std::time::{Duration, Instant};

use futures::FutureExt;
use halcyon::{BufferParams, Device, Fence, Semaphore, StatusCode, Timepoints};
use halcyon_conformance::harness::{block_on, bytes_u32, done, u32_bytes};
use halcyon_conformance::StandardKernels;
use halcyon_vulkan::SpirvModule;

use common::{device_or_skip, standard_module, VulkanKernels};

fn stat(device: &Device, key: &str) -> i64 {
    device.query_raw(key).unwrap()
}

#[test]
fn driver_enumerates_and_creates_devices() {
    let registry = halcyon::DriverRegistry::new();
    halcyon_vulkan::register(&registry).unwrap();
    let devices = match registry.enumerate_devices("vulkan") {
        Ok(devices) => devices,
        Err(error) if error.code() == StatusCode::Unavailable => {
            eprintln!("skipping: no Vulkan: {error}");
            return;
        }
        Err(error) => panic!("enumerate_devices: {error}"),
    };
    assert!(!devices.is_empty());
    assert_eq!(devices[0].uri, "vulkan://0");
    assert!(!devices[0].name.is_empty());
    let device = registry.create_device("vulkan://0").unwrap();
    assert_eq!(device.info().id, "vulkan://0");
    assert_eq!(device.info().driver, "vulkan");
    assert!(device.queue_count() >= 1);
    assert_eq!(device.supported_formats(), ["spirv", "wgsl"]);
    let missing = registry
        .create_device(&format!("vulkan://{}", devices.len() + 5))
        .unwrap_err();
    assert_eq!(missing.code(), StatusCode::NotFound, "{missing}");
}

/// A chain of dispatches, each waiting on the previous one's device semaphore, is handed to
/// the GPU entirely through `vkQueueSubmit` waits: no submission waits on the host, and the
/// host sees only the final value.
#[test]
fn device_to_device_waits_chain_without_host_wakes() {
    let Some(device) = device_or_skip("device_to_device_waits_chain_without_host_wakes") else {
        return;
    };
    // Each link is large enough (1 Mi elements, about a millisecond on lavapipe) that its
    // successor is submitted while it runs even on a loaded machine: with 256 elements every
    // link could finish before the next was submitted, and none would wait on the device.
    const N: u32 = 1 << 20;
    const CHAIN: usize = 50;
    block_on(async {
        let kernels = StandardKernels::load(&device, &VulkanKernels)?;
        let queue = device.queue(0)?;
        let buffer = device
            .allocator()
            .allocate(N as u64 * 4, BufferParams::DEVICE)?;
        let sems: Vec<Semaphore> = (0..CHAIN)
            .map(|_| device.create_semaphore(0))
            .collect::<halcyon::Result<_>>()?;
        let host_before = stat(&device, "vulkan.host_waits");
        let native_before = stat(&device, "vulkan.native_waits");
        let polls_before = stat(&device, "vulkan.reactor_polls");
        let mut submissions = vec![queue.fill(
            Timepoints::new(Fence::new(), Fence::at(&sems[0], 1)),
            0u32,
            &buffer.whole(),
        )];
        for i in 1..CHAIN {
            submissions.push(kernels.add_one(
                &queue,
                Timepoints::new(Fence::at(&sems[i - 1], 1), Fence::at(&sems[i], 1)),
                &buffer.whole(),
                N,
            ));
        }
        assert_eq!(
            stat(&device, "vulkan.host_waits") - host_before,
            0,
            "a device-to-device wait went through the host"
        );
        // A link whose predecessor already finished when it was submitted needs no wait at
        // all; every other link waits in vkQueueSubmit.
        let native = stat(&device, "vulkan.native_waits") - native_before;
        eprintln!("{native} of {} links waited on the device", CHAIN - 1);
        assert!((1..CHAIN as i64).contains(&native), "{native} native waits");
        done("the chain", sems[CHAIN - 1].wait(1)).await?;
        assert_eq!(
            stat(&device, "vulkan.reactor_polls") - polls_before,
            0,
            "a link of the chain became a pending action on the reactor"
        );
        for s in submissions {
            done("a link", s).await?;
        }
        let bytes = done("read", queue.read(Timepoints::default(), &buffer.whole())).await?;
        assert!(bytes_u32(&bytes)?.iter().all(|&v| v == CHAIN as u32 - 1));
        Ok(())
    })
    .unwrap();
}

/// With a completion budget, an awaited submission waits in `vkWaitSemaphores` on its first
/// poll and completes itself on the awaiting thread: the dispatches of a run awaited one by one
/// are completed so (all but those already complete when first polled), with the right
/// results. Without one, none is.
#[test]
fn awaited_submissions_wait_natively_with_a_budget() {
    let Some(device) = device_or_skip("awaited_submissions_wait_natively_with_a_budget") else {
        return;
    };
    // Large enough (a quarter of a million elements) that a dispatch is still running when
    // its submission is first polled, right after it is submitted.
    const N: u32 = 1 << 18;
    const ROUNDS: i64 = 20;
    let kernels = block_on(async { StandardKernels::load(&device, &VulkanKernels) }).unwrap();
    let queue = device.queue(0).unwrap();
    let buffer = device
        .allocator()
        .allocate(u64::from(N) * 4, BufferParams::DEVICE)
        .unwrap();
    block_on(queue.fill(Timepoints::default(), 0u32, &buffer.whole())).unwrap();
    let run = |budget: Duration| {
        device.set_completion_spin(budget);
        let before = stat(&device, "vulkan.awaiting_waits");
        for _ in 0..ROUNDS {
            // Polled at once on this thread (the harness's `block_on` builds a runtime first,
            // by which time the dispatch may be done).
            let submission = kernels.add_one(&queue, Timepoints::default(), &buffer.whole(), N);
            futures::executor::block_on(submission).unwrap();
        }
        stat(&device, "vulkan.awaiting_waits") - before
    };
    assert_eq!(
        run(Duration::ZERO),
        0,
        "no budget: the completion thread completes"
    );
    // A second covers a dispatch however loaded the machine is, and the thread sleeps in the
    // driver meanwhile.
    let waited = run(Duration::from_secs(1));
    assert!(waited >= ROUNDS / 2, "{waited} of {ROUNDS} waited natively");
    let bytes = block_on(queue.read(Timepoints::default(), &buffer.whole())).unwrap();
    assert!(bytes_u32(&bytes)
        .unwrap()
        .iter()
        .all(|&v| v == 2 * ROUNDS as u32));
}

/// A wait on a host semaphore goes through the pending-action executor, and a host semaphore
/// in a signal fence is signalled by the reactor once the device completes.
#[test]
fn host_semaphores_wait_on_the_host() {
    let Some(device) = device_or_skip("host_semaphores_wait_on_the_host") else {
        return;
    };
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::HOST)?;
        let (gate, after) = (Semaphore::new(0), Semaphore::new(0));
        let before = stat(&device, "vulkan.host_waits");
        let fill = queue.fill(
            Timepoints::new(Fence::at(&gate, 1), Fence::at(&after, 1)),
            7u8,
            &buffer.whole(),
        );
        assert_eq!(stat(&device, "vulkan.host_waits") - before, 1);
        gate.signal(1)?;
        done("host-signalled fill", fill).await?;
        assert_eq!(after.query()?, 1);
        assert!(buffer.map_read(..)?.iter().all(|&b| b == 7));
        Ok(())
    })
    .unwrap();
}

/// Waiting on a new value of a device semaphore interrupts the reactor's vkWaitSemaphores
/// (through the control semaphore) so it waits on that value; a host signal then releases it.
#[test]
fn reactor_is_interrupted_when_a_new_value_is_watched() {
    let Some(device) = device_or_skip("reactor_is_interrupted_when_a_new_value_is_watched") else {
        return;
    };
    // Let the reactor settle into its park.
    std::thread::sleep(Duration::from_millis(50));
    let sem = device.create_semaphore(0).unwrap();
    let interrupts = stat(&device, "vulkan.watch_interrupts");
    let parks = stat(&device, "vulkan.reactor_parks");
    let mut wait = Box::pin(sem.wait(5));
    assert!((&mut wait).now_or_never().is_none());
    assert_eq!(stat(&device, "vulkan.watch_interrupts") - interrupts, 1);
    // A second waiter on a higher value does not interrupt again.
    let mut higher = Box::pin(sem.wait(9));
    assert!((&mut higher).now_or_never().is_none());
    assert_eq!(stat(&device, "vulkan.watch_interrupts") - interrupts, 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while stat(&device, "vulkan.reactor_parks") == parks {
        assert!(Instant::now() < deadline, "the reactor was not interrupted");
        std::thread::sleep(Duration::from_millis(1));
    }
    sem.signal(5).unwrap();
    futures::executor::block_on(wait).unwrap();
    drop(higher);
}

/// Host-visible memory round trips through mappings and queue operations. lavapipe only has
/// coherent memory types, so flush/invalidate are exercised as far as they go there (no-ops);
/// the range arithmetic for non-coherent memory is tested directly.
#[test]
fn mapping_and_flush_paths() {
    assert_eq!(halcyon_vulkan::atom_range(5, 10, 64, 4096), (0, 64));
    assert_eq!(halcyon_vulkan::atom_range(64, 64, 64, 4096), (64, 64));
    assert_eq!(halcyon_vulkan::atom_range(100, 100, 64, 4096), (64, 192));
    assert_eq!(
        halcyon_vulkan::atom_range(4000, 96, 64, 4096),
        (3968, ash_whole_size())
    );
    // Ends past u64::MAX (offset + len, or rounding up to the atom) reach the end: checked
    // arithmetic, not a panic or a wrapped, tiny range.
    assert_eq!(
        halcyon_vulkan::atom_range(u64::MAX - 10, 64, 64, u64::MAX),
        (u64::MAX / 64 * 64, ash_whole_size())
    );
    assert_eq!(
        halcyon_vulkan::atom_range(u64::MAX - 100, 90, 64, u64::MAX),
        (u64::MAX / 64 * 64 - 64, ash_whole_size())
    );
    let Some(device) = device_or_skip("mapping_and_flush_paths") else {
        return;
    };
    let non_coherent = stat(&device, "vulkan.non_coherent_host_memory_types");
    if non_coherent == 0 {
        eprintln!(
            "note: {} has no non-coherent host-visible memory type; flush/invalidate are no-ops \
             here",
            device.info().name
        );
    }
    block_on(async {
        let queue = device.queue(0)?;
        for params in [
            BufferParams::HOST,
            BufferParams {
                memory: halcyon::MemoryType::HOST_VISIBLE | halcyon::MemoryType::HOST_CACHED,
                usage: halcyon::BufferUsage::all(),
            },
        ] {
            let buffer = device.allocator().allocate(1000, params)?;
            {
                let mut guard = buffer.map_write(..)?;
                for (i, b) in guard.iter_mut().enumerate() {
                    *b = i as u8;
                }
            }
            let bytes = done(
                "read",
                queue.read::<u8>(Timepoints::default(), &buffer.whole()),
            )
            .await?;
            assert!(bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
            done(
                "fill",
                queue.fill(Timepoints::default(), 0xEEu8, &buffer.slice(3..999)?),
            )
            .await?;
            let guard = buffer.map_read(..)?;
            assert_eq!(&guard[..3], &[0, 1, 2]);
            assert!(guard[3..999].iter().all(|&b| b == 0xEE));
            assert_eq!(guard[999], 999u32 as u8);
        }
        Ok(())
    })
    .unwrap();
}

fn ash_whole_size() -> u64 {
    !0
}

#[test]
fn spirv_executables_are_validated() {
    let Some(device) = device_or_skip("spirv_executables_are_validated") else {
        return;
    };
    let module = standard_module().unwrap();
    // The checked byte forms (SPIR-V words, WGSL text) load through naga like the native form.
    let from_words = device
        .load_executable(&halcyon::ExecutableSpec::bytes("spirv", module.to_bytes()))
        .unwrap();
    assert_eq!(from_words.entry_points(), module.entry_points());
    let from_text = device
        .load_executable(&halcyon::ExecutableSpec::bytes(
            "wgsl",
            common::STANDARD_WGSL.as_bytes(),
        ))
        .unwrap();
    assert_eq!(from_text.entry_points(), module.entry_points());

    let words = common::spirv(common::STANDARD_WGSL);
    let mut bad_magic = words.clone();
    bad_magic[0] = 0xdead_beef;
    let error = SpirvModule::from_spirv(&bad_magic).unwrap_err();
    assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
    assert!(error.message().contains("magic"), "{error}");

    let mut odd = module.to_bytes();
    odd.push(0);
    let error = device
        .load_executable(&halcyon::ExecutableSpec::bytes("spirv", odd))
        .unwrap_err();
    assert!(error.message().contains("multiple of 4"), "{error}");

    // The unchecked path keeps its cheap checks.
    let unchecked = |entries: Vec<halcyon::EntryPoint>| {
        // SAFETY: naga wrote the words from a validated module and the metadata is the
        // standard kernels' (or refused by the cheap checks, which is what is tested).
        unsafe { SpirvModule::from_words_unchecked(words.clone(), entries) }
    };
    let standard = module.entry_points().to_vec();
    let mut missing = standard.clone();
    missing[0].name = "no_such_kernel".into();
    let error = unchecked(missing).unwrap_err();
    assert_eq!(error.code(), StatusCode::NotFound, "{error}");
    assert!(error.message().contains("no_such_kernel"), "{error}");
    let mut wrong_size = standard.clone();
    wrong_size[0].workgroup_size = [32, 1, 1];
    let error = unchecked(wrong_size).unwrap_err();
    assert!(error.message().contains("LocalSize"), "{error}");
    let error = unchecked(Vec::new()).unwrap_err();
    assert!(error.message().contains("no entry points"), "{error}");

    // Its byte form loads only from an unchecked spec.
    let vouched = unchecked(standard.clone()).unwrap();
    assert!(vouched.is_unchecked() && !module.is_unchecked());
    let packed = vouched.to_packed();
    let error = device.load_executable(&packed.spec()).unwrap_err();
    assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
    assert!(error.message().contains("bytes_unchecked"), "{error}");
    // SAFETY: as above: naga's words with their true metadata.
    let spec = unsafe { packed.spec_unchecked() };
    let loaded = device.load_executable(&spec).unwrap();
    assert_eq!(loaded.entry_points(), standard.as_slice());
}

/// CPU seconds used so far by halcyon's own threads (reactors, completion threads: named
/// `halcyon-*`), not by the driver's or other tests' work in this process.
fn cpu_seconds() -> f64 {
    let mut ticks = 0.0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue; // the thread ended
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if !stat[open + 1..close].starts_with("halcyon-") {
            continue;
        }
        // Fields after the command name: utime is field 14, stime 15.
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        ticks += fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    }
    ticks / 100.0 // USER_HZ
}

/// An idle device's reactor blocks in vkWaitSemaphores: halcyon's threads use (almost) no CPU
/// over an idle second (lavapipe's threads, busy with other tests of this binary, are not
/// counted). The measured figure is printed.
#[test]
fn idle_reactor_does_not_spin() {
    let Some(device) = device_or_skip("idle_reactor_does_not_spin") else {
        return;
    };
    // Some work first, so the reactor has parked after completions too.
    block_on(async {
        let queue = device.queue(0)?;
        let buffer = device.allocator().allocate(64, BufferParams::HOST)?;
        done(
            "write",
            queue.write(Timepoints::default(), &u32_bytes(&[1; 16]), &buffer.whole()),
        )
        .await
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let (cpu, wall) = (cpu_seconds(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_seconds() - cpu;
    let fraction = used / wall.elapsed().as_secs_f64();
    eprintln!(
        "idle reactor: {:.1} ms CPU over {:.2} s ({:.2}%)",
        used * 1000.0,
        wall.elapsed().as_secs_f64(),
        fraction * 100.0
    );
    // Other tests of this binary may run concurrently, so allow some slack above the 1% goal.
    assert!(
        fraction < 0.05,
        "the idle reactor used {:.1}% CPU",
        fraction * 100.0
    );
    drop(device);
}

/// Device queries answer from the physical device's properties and limits.
#[test]
fn queries_report_physical_device_properties() {
    let Some(device) = device_or_skip("queries_report_physical_device_properties") else {
        return;
    };
    let api = stat(&device, "vulkan.api_version");
    assert!(api >= ash::vk::API_VERSION_1_2 as i64, "api {api:#x}");
    // The spec's minimum limits for every conformant compute device.
    assert!(stat(&device, "vulkan.max_compute_workgroup_invocations") >= 128);
    assert!(stat(&device, "vulkan.max_compute_workgroup_size.x") >= 128);
    assert!(stat(&device, "vulkan.max_compute_workgroup_count.z") >= 65535);
    assert!(stat(&device, "vulkan.max_push_constants_size") >= 128);
    assert!(stat(&device, "vulkan.max_memory_allocation_count") >= 4096);
    assert!(stat(&device, "vulkan.device_local_bytes") > 0);
    assert!((0..=4).contains(&stat(&device, "vulkan.device_type")));
    assert!(device
        .query_raw("vulkan.max_compute_workgroup_size.w")
        .is_err());
    assert!(device.query_raw("vulkan.no_such_key").is_err());
}

/// Queues of a dedicated transfer family (where the device has one) move memory and refuse
/// dispatches; every other queue runs everything.
#[test]
fn transfer_queues_move_memory_and_refuse_dispatches() {
    use halcyon::QueueCapabilities;
    let Some(device) = device_or_skip("transfer_queues_move_memory_and_refuse_dispatches") else {
        return;
    };
    let all = (1u64 << device.queue_count()) - 1;
    assert_eq!(device.queue_affinity(QueueCapabilities::TRANSFER), all);
    let dispatch = device.queue_affinity(QueueCapabilities::DISPATCH);
    assert_ne!(dispatch, 0, "no queue can dispatch");
    let transfer_only = all & !dispatch;
    if transfer_only == 0 {
        eprintln!(
            "note: {} has no dedicated transfer family; all {} queues run everything",
            device.info().name,
            device.queue_count()
        );
    }
    block_on(async {
        let kernels = StandardKernels::load(&device, &VulkanKernels)?;
        for queue in device.queues(all)? {
            let buffer = device.allocator().allocate(1024, BufferParams::DEVICE)?;
            let copy = device.allocator().allocate(1024, BufferParams::DEVICE)?;
            done(
                "fill",
                queue.fill(Timepoints::default(), 0x5au8, &buffer.whole()),
            )
            .await?;
            done(
                "copy",
                queue.copy(Timepoints::default(), &buffer.whole(), &copy.whole()),
            )
            .await?;
            let bytes = done(
                "read",
                queue.read::<u8>(Timepoints::default(), &copy.whole()),
            )
            .await?;
            assert!(bytes.iter().all(|&b| b == 0x5a), "queue {}", queue.index());
            let add = kernels.add_one(&queue, Timepoints::default(), &buffer.whole(), 256);
            if transfer_only & (1 << queue.index()) != 0 {
                let error = add.await.unwrap_err();
                assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
            } else {
                done("dispatch", add).await?;
            }
        }
        Ok(())
    })
    .unwrap();
}

/// An executable holds pipelines of the `VkDevice` that loaded it, so another device (two
/// logical devices over one physical device here) refuses to dispatch it, with
/// `InvalidArgument` naming the mix-up, before recording anything: binding a foreign pipeline is
/// invalid usage even where it happens to work (lavapipe runs it). The same dispatch of the
/// device's own executable works.
#[test]
fn dispatch_of_another_devices_executable_is_refused() {
    let Some(a) = device_or_skip("dispatch_of_another_devices_executable_is_refused") else {
        return;
    };
    let b = halcyon_vulkan::create_device(0).unwrap();
    block_on(async {
        let foreign = StandardKernels::load(&a, &VulkanKernels)?;
        let own = StandardKernels::load(&b, &VulkanKernels)?;
        let queue = b.queue(0)?;
        let buffer = b.allocator().allocate(256 * 4, BufferParams::DEVICE)?;
        done(
            "fill",
            queue.fill(Timepoints::default(), 0u8, &buffer.whole()),
        )
        .await?;
        let signal = b.create_semaphore(0)?;
        let refused = foreign
            .add_one(
                &queue,
                (Fence::new(), Fence::at(&signal, 1)),
                &buffer.whole(),
                256,
            )
            .await
            .unwrap_err();
        assert_eq!(refused.code(), StatusCode::InvalidArgument, "{refused}");
        assert!(
            refused.message().contains("another Vulkan device"),
            "{refused}"
        );
        assert_eq!(signal.query().unwrap_err().message(), refused.message());
        done(
            "own dispatch",
            own.add_one(&queue, Timepoints::default(), &buffer.whole(), 256),
        )
        .await?;
        let bytes = done("read", queue.read(Timepoints::default(), &buffer.whole())).await?;
        assert!(bytes_u32(&bytes)?.iter().all(|&v| v == 1), "one increment");
        Ok(())
    })
    .unwrap();
}

const CHECK_WGSL: &str = r#"
@group(0) @binding(0) var<storage, read_write> flag: array<u32>;
@group(1) @binding(0) var<storage, read_write> status: atomic<u32>;

@compute @workgroup_size(1, 1, 1)
fn check() {
    if (flag[0] != 0u) {
        atomicMax(&status, flag[0]);
    }
}
"#;

/// A kernel fails its dispatch through the status word: the submission fails naming the entry
/// point and the value, dependents wait on the host (never on the device), and a reused
/// recording starts each submission with the word cleared.
#[test]
fn kernels_fail_dispatches_through_the_status_word() {
    use halcyon::{CommandBuffer, CommandBufferMode, EntryPoint};
    let Some(device) = device_or_skip("kernels_fail_dispatches_through_the_status_word") else {
        return;
    };
    block_on(async {
        let module = SpirvModule::from_wgsl(CHECK_WGSL)?;
        let entry = EntryPoint {
            name: "check".into(),
            workgroup_size: [1, 1, 1],
            binding_count: 1,
            constant_count: 0,
        };
        assert_eq!(module.entry_points(), [entry]);
        let executable = device.load_executable(&module.spec())?;
        let queue = device.queue(0)?;
        let flag = device.allocator().allocate(16, BufferParams::DEVICE)?;
        let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
        builder.dispatch(
            &executable
                .kernel_at(0)?
                .launch([1, 1, 1])
                .binding(flag.whole()),
        )?;
        let check = builder.finish();

        done(
            "a passing check",
            queue.execute(Timepoints::default(), &check, None),
        )
        .await?;
        done(
            "flag = 7",
            queue.fill(Timepoints::default(), 7u32, &flag.whole()),
        )
        .await?;
        let sem = device.create_semaphore(0)?;
        let host_waits = stat(&device, "vulkan.host_waits");
        let failing = queue.execute(
            Timepoints::new(Fence::new(), Fence::at(&sem, 1)),
            &check,
            None,
        );
        let dependent = queue.fill(
            Timepoints::new(Fence::at(&sem, 1), Fence::new()),
            0u8,
            &flag.whole(),
        );
        assert_eq!(
            stat(&device, "vulkan.host_waits") - host_waits,
            1,
            "the dependent must wait on the host check, not on the device"
        );
        let error = failing.await.unwrap_err();
        assert_eq!(error.code(), StatusCode::KernelFailed, "{error}");
        let message = error.to_string();
        assert!(
            message.contains("'check'") && message.contains("to 7"),
            "{message}"
        );
        assert_eq!(sem.query().unwrap_err().code(), StatusCode::KernelFailed);
        assert_eq!(
            dependent.await.unwrap_err().code(),
            StatusCode::KernelFailed
        );
        let bytes = done(
            "read",
            queue.read::<u8>(Timepoints::default(), &flag.whole()),
        )
        .await?;
        assert_eq!(&bytes[..4], &7u32.to_le_bytes(), "the dependent fill ran");

        done(
            "flag = 0",
            queue.fill(Timepoints::default(), 0u8, &flag.whole()),
        )
        .await?;
        let reuses = stat(&device, "vulkan.recording_reuses");
        done(
            "a passing check again",
            queue.execute(Timepoints::default(), &check, None),
        )
        .await?;
        assert!(
            stat(&device, "vulkan.recording_reuses") > reuses,
            "the recording was not reused, so its status reset went untested"
        );
        Ok(())
    })
    .unwrap();
}
