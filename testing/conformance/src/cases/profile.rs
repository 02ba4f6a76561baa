//! Profiles: every backend's operations get records whose stages are in order.

use halcyon::device::DeviceFeatures;
use halcyon::profile::{OperationKind, Profile};
use halcyon::{BufferParams, Device, Result};

use crate::harness::{block_on, done};
use crate::kernels::{Kernels, StandardKernels};

/// With the device's profiler on, a fill, a dispatch and a read on one timeline each get a
/// record: submitted ≤ issued ≤ completed, and a device range, where the backend reports one,
/// inside issue to completion; the timeline's operations are recorded, issued and completed in
/// order, and their device ranges do not overlap. (A backend that waits on the device issues
/// an operation before the one before it completed, so host-observed ranges may overlap.) The
/// Chrome trace has a range per operation. Turned off, nothing more is recorded.
pub fn profile_records_every_operation(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    let kernels = StandardKernels::load(device, kernels)?;
    let queue = device.queue(0)?;
    let buffer = device.allocator().allocate(4096, BufferParams::DEVICE)?;
    device.profiler().enable();
    let timeline = queue.timeline()?;
    block_on(async {
        let fill = queue.fill(timeline.next(), 1u32, &buffer.whole());
        let add = kernels.add_one(&queue, timeline.next(), &buffer.slice(0..64)?, 16);
        let read = queue.read::<u32>(timeline.next(), &buffer.slice(0..64)?);
        done("fill", fill).await?;
        done("add_one", add).await?;
        assert_eq!(read.await?, vec![2u32; 16]);
        Ok::<_, halcyon::Error>(())
    })?;
    device.profiler().disable();
    let profile = device.profiler().take();
    let kinds: Vec<OperationKind> = profile.operations.iter().map(|op| op.kind).collect();
    assert_eq!(
        kinds,
        [
            OperationKind::Fill,
            OperationKind::Dispatch,
            OperationKind::Read
        ],
        "{:#?}",
        profile.operations
    );
    let (mut previous_end, mut previous_issue, mut previous_completion) = (0, 0, 0);
    for op in &profile.operations {
        let issued = op.issued_ns.expect("every operation is issued");
        let completed = op.completed_ns.expect("every operation completed");
        assert!(op.submitted_ns <= issued && issued <= completed, "{op:?}");
        assert!(op.error.is_none(), "{op:?}");
        assert!(
            issued >= previous_issue && completed >= previous_completion,
            "{op:?}"
        );
        (previous_issue, previous_completion) = (issued, completed);
        if let Some((start, end)) = op.device_ns {
            assert!(
                issued <= start && start <= end && end <= completed,
                "{op:?}"
            );
            assert!(
                start + calibration_error(device) >= previous_end,
                "overlaps the previous operation by more than the calibration's error: {op:?}"
            );
            previous_end = end;
        }
    }
    let trace = Profile::from(profile).to_chrome_trace();
    assert_eq!(trace.matches(r#""ph":"X""#).count(), 3, "{trace}");
    block_on(queue.fill(timeline.next(), 0u32, &buffer.whole()))?;
    assert!(
        device.profiler().take().operations.is_empty(),
        "recorded while off"
    );
    Ok(())
}

/// A device that advertises [`DeviceFeatures::PROFILING`] gives a fill, a dispatch and a read
/// on one timeline device times (`device_ns`) while its profiler is on: each within its
/// operation's issue to completion, in timeline order without overlap. A device without the
/// feature has nothing to check here ([`profile_records_every_operation`] checks the host
/// times every device records).
pub fn profile_device_times(device: &Device, kernels: &dyn Kernels) -> Result<()> {
    if !device.info().features.contains(DeviceFeatures::PROFILING) {
        return Ok(());
    }
    let kernels = StandardKernels::load(device, kernels)?;
    let queue = device.queue(0)?;
    let buffer = device.allocator().allocate(4096, BufferParams::DEVICE)?;
    let timeline = queue.timeline()?;
    device.profiler().enable();
    block_on(async {
        let fill = queue.fill(timeline.next(), 7u32, &buffer.whole());
        let add = kernels.add_one(&queue, timeline.next(), &buffer.slice(0..256)?, 64);
        let read = queue.read::<u32>(timeline.next(), &buffer.slice(0..256)?);
        done("fill", fill).await?;
        done("add_one", add).await?;
        assert_eq!(read.await?, vec![8u32; 64]);
        Ok::<_, halcyon::Error>(())
    })?;
    device.profiler().disable();
    let operations = device.profiler().take().operations;
    assert_eq!(operations.len(), 3, "{operations:#?}");
    let mut previous_end = 0;
    for op in &operations {
        let (start, end) = op
            .device_ns
            .unwrap_or_else(|| panic!("a PROFILING device gave no device times: {op:?}"));
        let issued = op.issued_ns.expect("issued");
        let completed = op.completed_ns.expect("completed");
        assert!(
            issued <= start && start <= end && end <= completed,
            "device range outside issue..completion: {op:?}"
        );
        assert!(
            start + calibration_error(device) >= previous_end,
            "overlaps the previous operation by more than the calibration's error: {op:?}"
        );
        previous_end = end;
    }
    Ok(())
}

/// The error a device states for placing its own timestamps on the host clock (its backend's
/// `*.timestamp_calibration_error_ns`), 0 for a device that reads the host clock itself. Two
/// operations placed through different calibrations (the reference is refreshed between them)
/// may overlap by up to this much.
fn calibration_error(device: &Device) -> u64 {
    [
        "stream.timestamp_calibration_error_ns",
        "vulkan.timestamp_calibration_error_ns",
    ]
    .iter()
    .find_map(|key| device.query_raw(key).ok())
    .map_or(0, |ns| ns.max(0) as u64)
}
