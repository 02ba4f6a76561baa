//! The conformance suite on `vulkan://0` (lavapipe on CI), with the standard kernels written in
//! WGSL and compiled to SPIR-V by naga. Every case prints why and passes as skipped when there
//! is no Vulkan loader or device.
//!
//! `failing_dispatch_fails_the_chain` is not instantiated: it needs a kernel that fails, and a
//! Vulkan compute shader has no return code (a device-side error channel, e.g. a hidden status
//! buffer the backend checks on completion, is future work). It is listed below as an ignored
//! test so the gap stays visible.

mod common;

use common::VulkanKernels;

halcyon_conformance::conformance_tests!(@cases (|| halcyon_vulkan::create_device(0), VulkanKernels)
    // ordering
    wait_before_signal,
    signal_before_wait,
    chain_of_100_submissions,
    timeline_in_order,
    host_call_in_queue_order,
    barrier_waits_for_every_semaphore,
    command_buffer_barrier_orders_commands,
    // failure propagation (failing_dispatch_fails_the_chain: see below)
    failed_wait_semaphore_fails_the_chain,
    failing_host_call_fails_the_chain,
    // memory
    alloca_dealloca_reuses_memory,
    deallocated_buffer_is_refused,
    map_refused_while_device_writes,
    submission_refused_while_mapped,
    map_after_signal_reached,
    dropped_handles_outlive_in_flight_work,
    // transfers and dispatches
    fill_update_copy_round_trip,
    write_read_large_round_trip,
    queue_read_returns_bytes,
    saxpy_dispatch,
    binding_table_replay,
    // validation
    fill_pattern_length_3,
    fill_misaligned,
    update_too_large,
    update_length_mismatch,
    copy_length_mismatch,
    copy_overlapping,
    fill_without_transfer_target,
    dispatch_without_dispatch_storage,
    map_without_mapping_usage,
    slice_out_of_range,
    wrong_constant_count,
    wrong_binding_count,
    bad_entry_point_index,
    empty_binding_table_slot,
    one_shot_submitted_twice,
    zero_size_allocation,
    queue_index_out_of_range,
    unknown_driver,
);

#[test]
#[ignore = "needs a device-side failure channel: a Vulkan kernel cannot fail its dispatch"]
fn failing_dispatch_fails_the_chain() {
    halcyon_conformance::run(
        "failing_dispatch_fails_the_chain",
        || halcyon_vulkan::create_device(0),
        &VulkanKernels,
        halcyon_conformance::cases::failing_dispatch_fails_the_chain,
    );
}
