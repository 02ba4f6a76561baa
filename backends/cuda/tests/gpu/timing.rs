//! Timing events and profiled operations' device times (`cuEventElapsedTime`), on whatever
//! driver the including test runs against (a GPU's, or the fake's).

use halcyon::StatusCode;
use halcyon_conformance::harness::assert_error;
use halcyon_stream::{Capabilities, EventFlags, StreamApi};

use super::api_or_skip;

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
