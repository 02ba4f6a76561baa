//! Profiles on the Vulkan device: GPU timestamps, on the profile clock, where they belong.
//!
//! Tolerance. The backend clamps each device time into the window the device must have run the
//! work in (from just before `vkQueueSubmit` to the completion thread's read), which lies inside
//! issue to completion; so the profile's own ranges always satisfy issued ≤ start ≤ end ≤
//! completed, and checking them says little. What says whether the timestamps are right is how
//! far they had to be moved: `vulkan.timestamp_max_clamp_ns`, the largest correction, must not
//! exceed the calibration's stated error (`vulkan.timestamp_calibration_error_ns`) plus
//! [`SLACK_NS`]. Both calibrations bound their error rigorously while the device clock does not
//! drift from the host's during the test (lavapipe's device clock is the host's), so the slack
//! only absorbs rounding in the tick conversion; a wrong offset, period or wrap is off by far
//! more.

mod common;

use halcyon::profile::{Operation, OperationKind};
use halcyon::{BufferParams, Device, DeviceFeatures, Fence, Timepoints};
use halcyon_conformance::harness::{block_on, done};
use halcyon_conformance::StandardKernels;
use halcyon_vulkan::VulkanDeviceOptions;

use common::VulkanKernels;

/// What a device time may be off by beyond the stated calibration error (see the module docs).
const SLACK_NS: u64 = 1_000;

/// `vulkan://0` with `options`, or `None` (printed) where there is no Vulkan.
fn device_with(test: &str, options: VulkanDeviceOptions) -> Option<Device> {
    common::device_or_skip(test)?;
    Some(halcyon_vulkan::create_device_with(0, options).unwrap())
}

fn query(device: &Device, key: &str) -> u64 {
    let value = device
        .query_raw(key)
        .unwrap_or_else(|e| panic!("{key}: {e}"));
    u64::try_from(value).unwrap()
}

/// The calibration's stated error, after checking the device profiles with timestamps.
fn calibration_error(device: &Device) -> u64 {
    assert!(
        device.info().features.contains(DeviceFeatures::PROFILING),
        "{:?}",
        device.info()
    );
    query(device, "vulkan.timestamp_calibration_error_ns")
}

/// No device time had to move further than the calibration error allows.
fn check_corrections(device: &Device, what: &str) {
    let error = calibration_error(device);
    let moved = query(device, "vulkan.timestamp_max_clamp_ns");
    eprintln!(
        "{what}: calibration {} (1 calibrated timestamps, 2 measured offset), error {error} ns, \
         {} calibration(s), largest correction {moved} ns over {} clamp(s)",
        query(device, "vulkan.timestamp_calibration"),
        query(device, "vulkan.timestamp_calibrations"),
        query(device, "vulkan.timestamp_clamps"),
    );
    assert!(
        moved <= error + SLACK_NS,
        "{what}: a device time was {moved} ns outside the window the device ran the work in, \
         more than the calibration error {error} ns + {SLACK_NS} ns"
    );
    assert_eq!(query(device, "vulkan.timestamp_unavailable"), 0);
}

/// The operation's device range, inside issue to completion within `error`.
fn device_range(op: &Operation, error: u64) -> (u64, u64) {
    let (start, end) = op
        .device_ns
        .unwrap_or_else(|| panic!("no device times: {op:?}"));
    let issued = op.issued_ns.expect("issued");
    let completed = op.completed_ns.expect("completed");
    assert!(start <= end, "{op:?}");
    assert!(start + error >= issued, "starts before its issue: {op:?}");
    assert!(
        end <= completed + error,
        "ends after its completion: {op:?}"
    );
    (start, end)
}

/// A fill, a dispatch and a read on one timeline: each has device times inside issue to
/// completion, in timeline order, and none had to move further than the calibration error.
fn timeline_has_device_times(device: &Device, what: &str) {
    let kernels = StandardKernels::load(device, &VulkanKernels).unwrap();
    let queue = device.queue(0).unwrap();
    let buffer = device
        .allocator()
        .allocate(1 << 20, BufferParams::DEVICE)
        .unwrap();
    device.profiler().enable();
    let timeline = queue.timeline().unwrap();
    block_on(async {
        let fill = queue.fill(timeline.next(), 1u32, &buffer.whole());
        let add = kernels.add_one(&queue, timeline.next(), &buffer.whole(), 1 << 18);
        let read = queue.read::<u32>(timeline.next(), &buffer.slice(0..64)?);
        done("fill", fill).await?;
        done("add_one", add).await?;
        assert_eq!(read.await?, vec![2u32; 16]);
        Ok(())
    })
    .unwrap();
    let profile = device.profiler().take();
    let kinds: Vec<_> = profile.operations.iter().map(|op| op.kind).collect();
    assert_eq!(
        kinds,
        [
            OperationKind::Fill,
            OperationKind::Dispatch,
            OperationKind::Read
        ]
    );
    let error = calibration_error(device);
    let mut previous_end = 0;
    for op in &profile.operations {
        let (start, end) = device_range(op, error);
        assert!(start >= previous_end, "overlaps the one before: {op:?}");
        previous_end = end;
        eprintln!(
            "{what}: {} issued +{} ns, device {} ns, completed +{} ns after the device end",
            op.name,
            start - op.issued_ns.unwrap(),
            end - start,
            op.completed_ns.unwrap() - end
        );
    }
    assert_eq!(query(device, "vulkan.timestamp_queries"), 6);
    check_corrections(device, what);
}

#[test]
fn timeline_operations_get_device_times_with_the_default_calibration() {
    let name = "timeline_operations_get_device_times_with_the_default_calibration";
    let Some(device) = device_with(name, VulkanDeviceOptions::default()) else {
        return;
    };
    let method = query(&device, "vulkan.timestamp_calibration");
    assert!(method == 1 || method == 2, "calibration {method}");
    timeline_has_device_times(&device, "default calibration");
}

#[test]
fn timeline_operations_get_device_times_with_a_measured_offset() {
    let name = "timeline_operations_get_device_times_with_a_measured_offset";
    let options = VulkanDeviceOptions::default().with_force_measured_calibration(true);
    let Some(device) = device_with(name, options) else {
        return;
    };
    assert_eq!(query(&device, "vulkan.timestamp_calibration"), 2);
    assert_eq!(query(&device, "vulkan.timestamp_calibrations"), 1);
    timeline_has_device_times(&device, "measured offset");
}

/// A CPU device's operation, then a Vulkan operation waiting on its semaphore: both profiles are
/// on one clock, so the Vulkan device starts after the CPU device ended (within the calibration
/// error), and the Vulkan times needed no correction beyond it.
#[test]
fn a_cpu_operation_and_the_vulkan_one_waiting_on_it_share_one_clock() {
    let name = "a_cpu_operation_and_the_vulkan_one_waiting_on_it_share_one_clock";
    let Some(vulkan) = device_with(name, VulkanDeviceOptions::default()) else {
        return;
    };
    let cpu = halcyon_cpu::create_device(halcyon_cpu::CpuDeviceOptions::default()).unwrap();
    cpu.profiler().enable();
    vulkan.profiler().enable();
    let host = cpu
        .allocator()
        .allocate(8 << 20, BufferParams::DEVICE)
        .unwrap();
    let gpu = vulkan
        .allocator()
        .allocate(8 << 20, BufferParams::DEVICE)
        .unwrap();
    let produced = cpu.create_semaphore(0).unwrap();
    block_on(async {
        let produce = cpu.queue(0)?.fill(
            Timepoints::new(Fence::new(), Fence::at(&produced, 1)),
            3u32,
            &host.whole(),
        );
        let consume = vulkan.queue(0)?.fill(
            Timepoints::new(Fence::at(&produced, 1), Fence::new()),
            4u32,
            &gpu.whole(),
        );
        done("cpu fill", produce).await?;
        done("vulkan fill", consume).await
    })
    .unwrap();
    let cpu_ops = cpu.profiler().take().operations;
    let vulkan_ops = vulkan.profiler().take().operations;
    assert_eq!((cpu_ops.len(), vulkan_ops.len()), (1, 1));
    let (_, cpu_end) = cpu_ops[0].device_ns.expect("the CPU device times its work");
    let error = calibration_error(&vulkan);
    let (vulkan_start, _) = device_range(&vulkan_ops[0], error);
    assert!(
        vulkan_start + error >= cpu_end,
        "the Vulkan fill started {} ns before the CPU fill it waits on ended",
        cpu_end - vulkan_start
    );
    check_corrections(&vulkan, "cross-device");
}

/// Unprofiled submissions write no timestamp query and make no query pool; profiled ones write
/// two queries each from one pool that is reused; turned off again, no more are written.
#[test]
fn only_profiled_submissions_write_timestamps_and_pools_are_reused() {
    let name = "only_profiled_submissions_write_timestamps_and_pools_are_reused";
    let Some(device) = device_with(name, VulkanDeviceOptions::default()) else {
        return;
    };
    let queue = device.queue(0).unwrap();
    let buffer = device
        .allocator()
        .allocate(4096, BufferParams::DEVICE)
        .unwrap();
    let fills = |n: u32| {
        block_on(async {
            for i in 0..n {
                done(
                    "fill",
                    queue.fill(Timepoints::default(), i, &buffer.whole()),
                )
                .await?;
            }
            Ok(())
        })
        .unwrap()
    };
    fills(10);
    assert_eq!(query(&device, "vulkan.timestamp_queries"), 0);
    assert_eq!(query(&device, "vulkan.timestamp_query_pools"), 0);
    device.profiler().enable();
    // More than one pool holds: stamps must come back to be used again.
    fills(100);
    assert_eq!(query(&device, "vulkan.timestamp_queries"), 200);
    assert_eq!(query(&device, "vulkan.timestamp_query_pools"), 1);
    let profile = device.profiler().take();
    assert_eq!(profile.operations.len(), 100);
    let error = calibration_error(&device);
    for op in &profile.operations {
        device_range(op, error);
    }
    device.profiler().disable();
    fills(10);
    assert_eq!(query(&device, "vulkan.timestamp_queries"), 200);
    check_corrections(&device, "reuse");
}

/// Set in the child processes of [`the_validation_layer_reports_nothing_on_profiled_work`].
const CHILD: &str = "HALCYON_VULKAN_PROFILE_LAYER_CHILD";

/// Profiled work on both calibration paths, under the Khronos validation layer in a child
/// process, raises no validation error (query resets, timestamp writes, reads). A child that
/// loads under-declared metadata through the unsafe path shows the layer is there. Skips where
/// the layer is not installed.
#[test]
fn the_validation_layer_reports_nothing_on_profiled_work() {
    let name = "the_validation_layer_reports_nothing_on_profiled_work";
    if let Ok(mode) = std::env::var(CHILD) {
        return layer_child(&mode);
    }
    if common::device_or_skip(name).is_none() {
        return;
    }
    let run = |mode: &str| common::run_under_validation_layer(name, CHILD, mode);
    let invalid = run("invalid");
    if !invalid.contains("Validation Error") {
        eprintln!("skipping {name}: the Khronos validation layer did not load:\n{invalid}");
        return;
    }
    for mode in ["calibrated", "measured"] {
        let text = run(mode);
        assert!(!text.contains("Validation Error"), "{mode}: {text}");
        assert!(text.contains("test result: ok. 1 passed"), "{mode}: {text}");
    }
}

fn layer_child(mode: &str) {
    if mode == "invalid" {
        let device = halcyon_vulkan::create_device(0).unwrap();
        let mut entries = common::standard_module().unwrap().entry_points().to_vec();
        let saxpy = entries.iter_mut().find(|e| e.name == "saxpy_f32").unwrap();
        saxpy.binding_count = 1;
        saxpy.constant_count = 0;
        // SAFETY: deliberately breaks the contract (saxpy uses two bindings and push
        // constants), in a child process, to show the validation layer is loaded; lavapipe
        // tolerates the layout mismatch for this shader.
        let module = unsafe {
            halcyon_vulkan::SpirvModule::from_words_unchecked(
                common::spirv(common::STANDARD_WGSL),
                entries,
            )
        }
        .unwrap();
        device.load_executable(&module.spec()).unwrap();
        return;
    }
    let options =
        VulkanDeviceOptions::default().with_force_measured_calibration(mode == "measured");
    let device = halcyon_vulkan::create_device_with(0, options).unwrap();
    timeline_has_device_times(&device, mode);
    // Past one pool of stamps, with several submissions in flight at once.
    device.profiler().enable();
    let queue = device.queue(0).unwrap();
    let buffer = device
        .allocator()
        .allocate(4096, BufferParams::DEVICE)
        .unwrap();
    let timeline = queue.timeline().unwrap();
    block_on(async {
        let fills: Vec<_> = (0..80u32)
            .map(|i| queue.fill(timeline.next(), i, &buffer.whole()))
            .collect();
        for fill in fills {
            done("fill", fill).await?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(device.profiler().take().operations.len(), 80);
}

/// The two calibration paths are independent measurements of one device clock: they agree on
/// the profile time of device tick 0 within the sum of their stated errors (plus [`SLACK_NS`]).
/// Where the device has no calibrated timestamps, both devices measure, and the check is the
/// same.
#[test]
fn both_calibrations_agree_within_their_errors() {
    let name = "both_calibrations_agree_within_their_errors";
    let Some(default) = device_with(name, VulkanDeviceOptions::default()) else {
        return;
    };
    let measured_options = VulkanDeviceOptions::default().with_force_measured_calibration(true);
    let measured = halcyon_vulkan::create_device_with(0, measured_options).unwrap();
    let offset = |d: &Device| d.query_raw("vulkan.timestamp_offset_ns").unwrap();
    let (a, b) = (offset(&default), offset(&measured));
    let (ea, eb) = (calibration_error(&default), calibration_error(&measured));
    eprintln!(
        "calibration {}: offset {a} ns ± {ea}; measured: offset {b} ns ± {eb}; they differ by {} ns",
        query(&default, "vulkan.timestamp_calibration"),
        a.abs_diff(b)
    );
    assert!(
        a.abs_diff(b) <= ea + eb + SLACK_NS,
        "offsets {a} ± {ea} and {b} ± {eb} ns disagree"
    );
}

/// With calibrated timestamps, a read more than a second after the last calibration samples it
/// again, and the times stay within the error of the mapping in use.
#[test]
fn a_stale_calibration_is_sampled_again() {
    let name = "a_stale_calibration_is_sampled_again";
    let Some(device) = device_with(name, VulkanDeviceOptions::default()) else {
        return;
    };
    if query(&device, "vulkan.timestamp_calibration") != 1 {
        eprintln!("skipping {name}: the device has no calibrated timestamps");
        return;
    }
    let queue = device.queue(0).unwrap();
    let buffer = device
        .allocator()
        .allocate(4096, BufferParams::DEVICE)
        .unwrap();
    device.profiler().enable();
    let fill = |value: u32| {
        block_on(done(
            "fill",
            queue.fill(Timepoints::default(), value, &buffer.whole()),
        ))
        .unwrap()
    };
    fill(1);
    let calibrations = query(&device, "vulkan.timestamp_calibrations");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    fill(2);
    assert_eq!(
        query(&device, "vulkan.timestamp_calibrations"),
        calibrations + 1
    );
    let profile = device.profiler().take();
    let error = calibration_error(&device);
    for op in &profile.operations {
        device_range(op, error);
    }
    check_corrections(&device, "recalibrated");
}

/// A profiled submission whose `vkQueueSubmit` fails gives its stamp back (later ones still get
/// device times from the same pool) and gets no device times; after a device loss, profiled
/// work in flight fails without device times and the device drops cleanly.
#[test]
fn failed_and_lost_submissions_get_no_device_times() {
    let name = "failed_and_lost_submissions_get_no_device_times";
    let faults = halcyon_vulkan::FaultInjector::new();
    let options = VulkanDeviceOptions::default().with_faults(Some(faults.clone()));
    let Some(device) = device_with(name, options) else {
        return;
    };
    let queue = device.queue(0).unwrap();
    let buffer = device
        .allocator()
        .allocate(4096, BufferParams::DEVICE)
        .unwrap();
    device.profiler().enable();
    let fill = |value: u32| queue.fill(Timepoints::default(), value, &buffer.whole());
    faults.fail_next_submit(ash::vk::Result::ERROR_OUT_OF_DEVICE_MEMORY);
    assert!(block_on(fill(1)).is_err());
    for value in 2..5 {
        block_on(done("fill", fill(value))).unwrap();
    }
    assert_eq!(query(&device, "vulkan.timestamp_query_pools"), 1);
    assert_eq!(query(&device, "vulkan.timestamp_queries"), 6);
    let ops = device.profiler().take().operations;
    assert_eq!(ops.len(), 4);
    assert!(
        ops[0].error.is_some() && ops[0].device_ns.is_none(),
        "{:?}",
        ops[0]
    );
    let error = calibration_error(&device);
    for op in &ops[1..] {
        device_range(op, error);
    }
    faults.fail_next_completion_wait(ash::vk::Result::ERROR_DEVICE_LOST);
    assert!(block_on(fill(5)).is_err());
    assert!(block_on(fill(6)).is_err());
    let ops = device.profiler().take().operations;
    assert!(ops.iter().all(|op| op.device_ns.is_none()), "{ops:?}");
    check_corrections(&device, "failures");
    drop(device);
}
