//! halcyon-cpu: the CPU device. (Being written.)

mod c_abi;
mod kernel;
