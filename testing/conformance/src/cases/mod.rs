//! The conformance cases. Each is a [`crate::Case`]: it gets the device under test and the
//! backend's [`crate::Kernels`], returns `Err` for unexpected failures and panics on violated
//! expectations. Their doc comments say what each checks.
//!
//! # Multi-device cases
//!
//! [`cross_device_wait`], [`cross_device_ping_pong`], [`cross_device_failure_propagates`],
//! [`concurrent_devices`], [`foreign_resources`], [`device_dropped_while_other_waits`],
//! [`copy_between_devices`], [`copy_between_devices_keeps_order`] and
//! [`buffer_views_move_between_devices`] are
//! [`crate::PairCase`]s: they take two devices of one driver (see
//! [`crate::multi_device_tests!`]). [`random_programs_across_devices`] is one too.

mod across;
mod binding_table;
mod byte_model;
mod devices;
#[cfg(target_os = "linux")]
mod exported_fd;
mod failure;
mod lifetime;
mod mapping;
mod ordering;
mod peer;
mod pool;
mod profile;
mod random;
mod transfer;
mod validation_dispatch;
mod validation_resources;
mod validation_transfer;
mod view;

pub use across::*;
pub use binding_table::*;
pub use byte_model::*;
pub use devices::*;
#[cfg(target_os = "linux")]
pub use exported_fd::*;
pub use failure::*;
pub use lifetime::*;
pub use mapping::*;
pub use ordering::*;
pub use peer::*;
pub use pool::*;
pub use profile::*;
pub use random::*;
pub use transfer::*;
pub use validation_dispatch::*;
pub use validation_resources::*;
pub use validation_transfer::*;
pub use view::*;
