//! Timing events (`hipEventElapsedTime`) through the translation table, on whatever runtime the
//! including test runs against (ROCm on an AMD GPU, or the fake).

use halcyon::StatusCode;
use halcyon_conformance::harness::assert_error;
use halcyon_hip::{HipStreamApi, HostVisibleMemory};
use halcyon_stream::{Capabilities, EventFlags, MemoryPlacement, StreamApi};

/// Timing events measure the work between them; an event created with
/// `hipEventDisableTiming`, or never recorded, is refused with `hipErrorInvalidHandle`.
#[test]
fn elapsed_time_needs_recorded_timing_events() {
    let Some(hip) = super::super::runtime_with_a_device() else {
        return;
    };
    let api = HipStreamApi::new(hip, 0, HostVisibleMemory::Auto).unwrap();
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
        &["hipEventElapsedTime"],
    );
    let buffer = api.allocate(4096, MemoryPlacement::Device).unwrap();
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
            &["hipEventElapsedTime"],
        );
    }
    for event in [start, end, untimed] {
        api.destroy_event(event).unwrap();
    }
    api.free(buffer).unwrap();
    api.destroy_stream(stream).unwrap();
}
