//! Heap allocations per steady-state submission on `vulkan://0` (lavapipe in CI), counted by a
//! counting global allocator over every thread of the process: the application's, halcyon's
//! reactor and completion threads, and the driver's own. A dispatch of a launch kept across
//! iterations, and a reusable command buffer executed, each on a queue timeline and awaited.
//!
//! None is allocated (issue 28's goal): a change that adds an allocation fails here. The driver's own allocations are C `malloc`s that this allocator
//! does not see (lavapipe starts threads per submission).

mod common;

use futures::executor::block_on;
use halcyon::{BufferParams, CommandBuffer, CommandBufferMode};

#[global_allocator]
static GLOBAL: halcyon_conformance::allocations::Counting =
    halcyon_conformance::allocations::Counting;

const WARM_UP: u64 = 100;
const ROUNDS: u64 = 500;

/// Allocations per call of `round_trip`, after a warm-up.
fn per_round_trip(round_trip: impl FnMut()) -> f64 {
    halcyon_conformance::allocations::per_call(WARM_UP, ROUNDS, round_trip)
}

/// One test, so no other test's threads allocate while it counts.
#[test]
fn allocations_per_steady_state_submission() {
    let Some(device) = common::device_or_skip("allocations_per_steady_state_submission") else {
        return;
    };
    let module = common::standard_module().expect("standard module");
    let executable = device.load_executable(&module.spec()).expect("load");
    let kernel = executable.kernel("add_one_u32").expect("kernel");
    let buffer = (device.allocator())
        .allocate(1024, BufferParams::DEVICE)
        .expect("allocate");
    let launch = kernel
        .launch([4, 1, 1])
        .constant(256u32)
        .binding(buffer.whole());
    let mut builder = CommandBuffer::builder(CommandBufferMode::Reusable);
    builder.dispatch(&launch).expect("record");
    let command_buffer = builder.finish();
    let queue = device.queue(0).expect("queue");
    let timeline = queue.timeline().expect("timeline");
    let dispatch =
        per_round_trip(|| block_on(queue.dispatch(timeline.next(), &launch)).expect("dispatch"));
    let execute = per_round_trip(|| {
        block_on(queue.execute(timeline.next(), &command_buffer, None)).expect("execute")
    });
    eprintln!(
        "allocations per round trip on vulkan://0: dispatch {dispatch:.2}, execute {execute:.2}"
    );
    // Zero: the recording is reused (its list and buffer memories kept in the recording's own
    // fields), the retirement list is recycled, and retired recordings go back to the cache
    // before the completion wakes the next submission. The limit allows one allocation in 20
    // round trips: a fresh completion semaphore when the one 64 operations back is still held
    // on a loaded machine (the core's recycling, `queue/completion.rs`).
    for (what, count, limit) in [("dispatch", dispatch, 0.05), ("execute", execute, 0.05)] {
        assert!(
            count <= limit,
            "{what}: {count:.2} allocations per round trip (limit {limit})"
        );
    }
}
