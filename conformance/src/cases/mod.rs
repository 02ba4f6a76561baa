//! The conformance cases. Each is a [`crate::Case`]: it gets the device under test and the
//! backend's [`crate::Kernels`], returns `Err` for unexpected failures and panics on violated
//! expectations. Their doc comments say what each checks.

mod binding_table;
mod failure;
mod lifetime;
mod mapping;
mod ordering;
mod pool;
mod transfer;
mod validation_dispatch;
mod validation_resources;
mod validation_transfer;

pub use binding_table::*;
pub use failure::*;
pub use lifetime::*;
pub use mapping::*;
pub use ordering::*;
pub use pool::*;
pub use transfer::*;
pub use validation_dispatch::*;
pub use validation_resources::*;
pub use validation_transfer::*;
