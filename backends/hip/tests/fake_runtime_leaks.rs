//! Nothing leaks: on the fake GPU runtime (see `tests/fake_runtime.rs`), a device that ran
//! dispatches, transfers, stream-ordered allocations and failures, and was dropped, leaves no
//! stream, event, module, memory pool or allocation alive in the runtime, under each
//! completion strategy and host-function kind. One test in a process of its own, because the
//! fake's counts are the whole process's.

mod fake;

use std::time::{Duration, Instant};

use halcyon_conformance::{cases, Case};
use halcyon_fake_gpu::FakeStats;
use halcyon_hip::{HipDeviceOptions, HipDriver, HostVisibleMemory};
use halcyon_stream::CompletionStrategy;

/// What is alive in the runtime (not what ran).
fn alive(stats: FakeStats) -> [u64; 5] {
    [
        stats.streams,
        stats.events,
        stats.modules,
        stats.pools,
        stats.allocations,
    ]
}

#[test]
fn a_dropped_device_leaves_nothing_alive_in_the_runtime() {
    let fake = fake::fake();
    let workload: [(&str, Case); 8] = [
        ("saxpy_dispatch", cases::saxpy_dispatch),
        ("binding_table_replay", cases::binding_table_replay),
        (
            "write_read_large_round_trip",
            cases::write_read_large_round_trip,
        ),
        (
            "alloca_dealloca_reuses_memory",
            cases::alloca_dealloca_reuses_memory,
        ),
        (
            "failing_dispatch_fails_the_chain",
            cases::failing_dispatch_fails_the_chain,
        ),
        (
            "failing_host_call_fails_the_chain",
            cases::failing_host_call_fails_the_chain,
        ),
        ("map_after_signal_reached", cases::map_after_signal_reached),
        (
            "dropped_handles_outlive_in_flight_work",
            cases::dropped_handles_outlive_in_flight_work,
        ),
    ];
    for (hip, completion, memory) in [
        (
            fake::hip(),
            CompletionStrategy::CompletionThread,
            HostVisibleMemory::Auto,
        ),
        (
            fake::hip(),
            CompletionStrategy::HostCallback,
            HostVisibleMemory::MappedHost,
        ),
        (
            fake::hip_5_2(),
            CompletionStrategy::HostCallback,
            HostVisibleMemory::Auto,
        ),
    ] {
        let options = HipDeviceOptions::default()
            .with_queue_count(2)
            .with_completion(completion)
            .with_host_visible_memory(memory);
        let device = HipDriver::with_hip(hip)
            .create_device_with(0, &options)
            .unwrap();
        for (name, case) in workload {
            halcyon_conformance::run(name, || Ok(device.clone()), &fake::FakeKernels, case);
        }
        let busy = alive(fake.stats());
        assert!(
            busy[0] > 0 && busy[1] > 0,
            "the device's streams and events: {busy:?}"
        );
        drop(device);
        // The device's threads let go of what they hold as they exit: wait for them.
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(fake.stats()) != [0; 5] && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            alive(fake.stats()),
            [0; 5],
            "alive after the device went ({completion:?}, {memory:?}): streams, events, \
             modules, pools, allocations"
        );
    }
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
}
