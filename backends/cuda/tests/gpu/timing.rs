//! Timing events and profiled operations' device times (`cuEventElapsedTime`), on whatever
//! driver the including test runs against (a GPU's, or the fake's).
//!
//! **Tolerance.** The stream layer places device times through a reference whose calibration
//! error the device answers (`stream.timestamp_calibration_error_ns`); each time is late by at
//! most that, plus the timer's resolution (about 0.5 µs per event: the fake rounds its
//! timestamps down to 0.5 µs, as CUDA documents) and the `f32`'s rounding (31 ns within a
//! second). The stream layer clamps what strays beyond the host's own observations and counts
//! the largest such correction; these tests allow the calibration error plus [`SLACK_NS`]
//! (2 µs: two timer ticks, the rounding, and nanosecond rounding) for it.

use std::time::Duration;

use halcyon::StatusCode;
use halcyon_conformance::harness::assert_error;
use halcyon_cuda::CudaDeviceOptions;
use halcyon_stream::{keys, Capabilities, EventFlags, StreamApi};

use super::{api_or_skip, common, prepared};

/// What the tolerance allows beyond the calibration error (see the module docs).
const SLACK_NS: u64 = 2_000;

/// Timing events measure the work between them; an event created with
/// `CU_EVENT_DISABLE_TIMING`, or never recorded, is refused with `CUDA_ERROR_INVALID_HANDLE`.
#[test]
fn elapsed_time_needs_recorded_timing_events() {
    let Some(api) = api_or_skip("elapsed_time_needs_recorded_timing_events") else {
        return;
    };
    assert!(api.info().capabilities.contains(Capabilities::EVENT_TIMING));
    let stream = api.create_stream().unwrap();
    let (start, end) = (
        api.create_event(EventFlags::empty()).unwrap(),
        api.create_event(EventFlags::empty()).unwrap(),
    );
    let untimed = api
        .create_event(EventFlags::DISABLE_TIMING | EventFlags::BLOCKING_SYNC)
        .unwrap();
    assert_error(
        api.event_elapsed_ms(start, end),
        StatusCode::InvalidArgument,
        &["cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE"],
    );
    let buffer = api
        .allocate(4096, halcyon_stream::MemoryPlacement::Device)
        .unwrap();
    api.record_event(start, stream).unwrap();
    api.memset_async(buffer, 1, 4, 4096, stream).unwrap();
    api.record_event(end, stream).unwrap();
    api.record_event(untimed, stream).unwrap();
    api.synchronize_event(untimed).unwrap();
    let forward = api.event_elapsed_ms(start, end).unwrap();
    let backward = api.event_elapsed_ms(end, start).unwrap();
    assert!(forward >= 0.0 && backward <= 0.0, "{forward} {backward}");
    assert!((forward + backward).abs() < 1e-3, "{forward} {backward}");
    for (a, b) in [(untimed, end), (start, untimed)] {
        assert_error(
            api.event_elapsed_ms(a, b),
            StatusCode::InvalidArgument,
            &["cuEventElapsedTime", "CUDA_ERROR_INVALID_HANDLE"],
        );
    }
    for event in [start, end, untimed] {
        api.destroy_event(event).unwrap();
    }
    api.free(buffer).unwrap();
    api.destroy_stream(stream).unwrap();
}

/// With the profiler on, a fill, a dispatch and a read on one timeline get device times
/// within their host-observed ranges (the conformance case), from two timing events each,
/// through the one calibration made when the device was created; no correction exceeds the
/// calibration's stated error; work submitted with the profiler off records no timing event.
#[test]
fn profiled_operations_get_device_times() {
    if !prepared("profiled_operations_get_device_times") {
        return;
    }
    let options =
        CudaDeviceOptions::default().with_timestamp_recalibration(Duration::from_secs(3600));
    let device = match halcyon_cuda::create_device_with(0, options) {
        Ok(device) => device,
        Err(e) if e.code() == StatusCode::Unavailable => {
            eprintln!("skipped profiled_operations_get_device_times: {e}");
            return;
        }
        Err(e) => panic!("cuda://0: {e}"),
    };
    let stat = |key| device.query(key).unwrap();
    // The profiler is off: the suite's transfers, dispatch and reads record no timing event.
    halcyon_conformance::cases::fill_update_copy_round_trip(&device, &common::CudaKernels).unwrap();
    halcyon_conformance::cases::saxpy_dispatch(&device, &common::CudaKernels).unwrap();
    assert_eq!(stat(keys::TIMING_EVENTS), 0);
    halcyon_conformance::cases::profile_device_times(&device, &common::CudaKernels).unwrap();
    assert_eq!(stat(keys::DEVICE_TIMES), 3);
    assert_eq!(stat(keys::DEVICE_TIMES_SKIPPED), 0);
    assert_eq!(stat(keys::TIMING_EVENTS), 6);
    assert_eq!(stat(keys::TIMESTAMP_CALIBRATIONS), 1);
    let error = stat(keys::TIMESTAMP_CALIBRATION_ERROR_NS);
    let correction = stat(keys::DEVICE_TIME_CORRECTION_MAX_NS);
    eprintln!(
        "{}: calibration error {error} ns; {} corrections, the largest {correction} ns",
        device.info().id,
        stat(keys::DEVICE_TIME_CORRECTIONS)
    );
    assert!(
        correction <= error + SLACK_NS,
        "a correction of {correction} ns exceeds the calibration's error ({error} ns)"
    );
}
