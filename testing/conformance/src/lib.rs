//! # halcyon-conformance
//!
//! The backend-independent conformance suite: every case is written once against
//! [`halcyon::Device`], and each backend instantiates all of them with
//! [`conformance_tests!`], supplying a device factory and a [`Kernels`] provider (the backend's
//! implementation of the suite's [standard entry points](kernels)).
//!
//! ```ignore
//! struct MyKernels;
//! impl halcyon_conformance::Kernels for MyKernels {
//!     fn load(&self, device: &halcyon::Device) -> halcyon::Result<halcyon::Executable> {
//!         // an executable with entry points "add_one_u32", "saxpy_f32" and "fail"
//!         # unimplemented!()
//!     }
//! }
//!
//! halcyon_conformance::conformance_tests!(|| my_backend::create_device(), MyKernels);
//! ```
//!
//! A factory that returns an [`halcyon::StatusCode::Unavailable`] error (no driver library, no
//! hardware) makes every test print why and pass as skipped; any other error fails the test.
//!
//! ## Two devices
//!
//! The [multi-device cases](cases#multi-device-cases) (each a [`PairCase`]) take two devices of
//! one driver: two GPUs, or two logical devices over one. They check what crosses a device
//! boundary: work on one device waiting on another device's semaphores, failures travelling
//! across, foreign buffers and executables, and one device dropped while the other waits on it.
//! A backend instantiates them with [`multi_device_tests!`], with a factory returning both
//! devices (called once per test; [`run_pair`] skips the case the same way when it returns
//! `Unavailable`):
//!
//! ```ignore
//! halcyon_conformance::multi_device_tests!(
//!     || Ok((my_backend::create_device()?, my_backend::create_device()?)),
//!     MyKernels
//! );
//! ```
//!
//! Cases never assert on elapsed time: every await is guarded by a generous deadline
//! ([`harness::HANG`]) that only turns a hang into a failure.

#![warn(missing_docs)]

pub mod allocations;
pub mod cases;
pub mod harness;
pub mod kernels;

pub use kernels::{Kernels, StandardKernels};

use halcyon::{Device, Result, StatusCode};

/// The signature of every case: the device under test and the backend's kernels.
pub type Case = fn(&Device, &dyn Kernels) -> Result<()>;

/// Runs one case: creates the device (skipping the case if the device is `Unavailable`), runs
/// the case, and panics with the case name, the device and the error if it fails.
pub fn run(
    name: &str,
    make_device: impl FnOnce() -> Result<Device>,
    kernels: &dyn Kernels,
    case: Case,
) {
    let device = match make_device() {
        Ok(device) => device,
        Err(error) if error.code() == StatusCode::Unavailable => {
            eprintln!("skipping conformance case '{name}': the device is unavailable: {error}");
            return;
        }
        Err(error) => panic!("conformance case '{name}': cannot create the device: {error}"),
    };
    if let Err(error) = case(&device, kernels) {
        panic!(
            "conformance case '{name}' failed on device {}: {error}",
            device.info().id
        );
    }
}

/// The signature of every multi-device case: the two devices under test (owned, so that a
/// case can drop one of them) and the backend's kernels, which the case loads on each device.
pub type PairCase = fn(Device, Device, &dyn Kernels) -> Result<()>;

/// Runs one multi-device case: creates both devices (skipping the case if the factory returns
/// `Unavailable`), runs the case, and panics with the case name, both devices and the error if
/// it fails.
pub fn run_pair(
    name: &str,
    make_devices: impl FnOnce() -> Result<(Device, Device)>,
    kernels: &dyn Kernels,
    case: PairCase,
) {
    let (a, b) = match make_devices() {
        Ok(devices) => devices,
        Err(error) if error.code() == StatusCode::Unavailable => {
            eprintln!("skipping conformance case '{name}': the devices are unavailable: {error}");
            return;
        }
        Err(error) => panic!("conformance case '{name}': cannot create the two devices: {error}"),
    };
    let ids = format!("{} and {}", a.info().id, b.info().id);
    if let Err(error) = case(a, b, kernels) {
        panic!("conformance case '{name}' failed on devices {ids}: {error}");
    }
}

/// Expands to one `#[test]` per conformance case.
///
/// `conformance_tests!(make_device, kernels)`: `make_device` is an expression callable as
/// `FnOnce() -> halcyon::Result<halcyon::Device>` (evaluated once per test, so each test gets a
/// fresh device); `kernels` is an expression whose value implements [`Kernels`]. Invoke it once
/// per device configuration, each in its own module.
#[macro_export]
macro_rules! conformance_tests {
    ($make_device:expr, $kernels:expr $(,)?) => {
        $crate::conformance_tests!(@cases ($make_device, $kernels)
            // ordering
            wait_before_signal,
            signal_before_wait,
            chain_of_100_submissions,
            concurrent_chains_across_queues,
            timeline_in_order,
            host_call_in_queue_order,
            barrier_waits_for_every_semaphore,
            command_buffer_barrier_orders_commands,
            refusal_fails_in_order,
            dropped_timeline_step_does_not_stall,
            semaphore_exported_fd_follows_device_work,
            buffer_views_read_back_and_move,
            copy_view_packs_strided_views,
            // failure propagation
            failing_dispatch_fails_the_chain,
            failed_wait_semaphore_fails_the_chain,
            failing_host_call_fails_the_chain,
            submission_outlives_a_later_failure,
            later_failure_waits_for_earlier_work,
            failure_through_another_semaphore_waits_for_earlier_work,
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
            shared_write_and_read_into_round_trip,
            saxpy_dispatch,
            binding_table_replay,
            // profiles
            profile_records_every_operation,
            profile_device_times,
            // random programs checked against a model
            random_programs,
            // random byte-granular transfers on one timeline checked against a byte model
            queue_ops_match_byte_model,
            // validation
            fill_pattern_length_3,
            fill_misaligned,
            update_too_large,
            update_length_mismatch,
            copy_length_mismatch,
            copy_overlapping,
            copy_overlapping_through_slots,
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
    };
    (@cases ($make_device:expr, $kernels:expr) $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::run(
                    ::std::stringify!($case),
                    $make_device,
                    &$kernels,
                    $crate::cases::$case,
                );
            }
        )*
    };
}

/// Expands to one `#[test]` per multi-device case ([`PairCase`], run with [`run_pair`]).
///
/// `multi_device_tests!(make_devices, kernels)`: `make_devices` is an expression callable as
/// `FnOnce() -> halcyon::Result<(halcyon::Device, halcyon::Device)>`, returning two distinct
/// devices of the backend (two GPUs, or two logical devices over one; evaluated once per test,
/// so each test gets fresh devices); `kernels` is an expression whose value implements
/// [`Kernels`]. Invoke it once per device configuration, each in its own module.
#[macro_export]
macro_rules! multi_device_tests {
    ($make_devices:expr, $kernels:expr $(,)?) => {
        $crate::multi_device_tests!(@cases ($make_devices, $kernels)
            cross_device_wait,
            cross_device_ping_pong,
            cross_device_failure_propagates,
            concurrent_devices,
            foreign_resources,
            device_dropped_while_other_waits,
            random_programs_across_devices,
            copy_between_devices,
            copy_between_devices_keeps_order,
            buffer_views_move_between_devices,
        );
    };
    (@cases ($make_devices:expr, $kernels:expr) $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                $crate::run_pair(
                    ::std::stringify!($case),
                    $make_devices,
                    &$kernels,
                    $crate::cases::$case,
                );
            }
        )*
    };
}
