//! The one model both APIs' exports translate onto: devices and their contexts, memory,
//! streams and the operations they run, events, modules and kernel launches, and the contract
//! each call is checked against. Its calls take handles and addresses as numbers and answer
//! CUDA's error codes (HIP's are the same numbers).

pub(crate) mod alloc;
pub(crate) mod contract;
pub(crate) mod copy;
pub(crate) mod driver;
pub(crate) mod event;
pub(crate) mod kernels;
pub(crate) mod launch;
pub(crate) mod memory;
pub(crate) mod module;
pub(crate) mod ops;
pub(crate) mod peer;
pub(crate) mod ptx;
pub(crate) mod stream;
