//! The conformance suite on `cuda://0`, once per completion strategy, with the standard kernels
//! from checked-in PTX (tests/kernels/standard.ptx: standard.cu by NVRTC 12.8, PTX ISA 8.0).
//! Without libcuda or a device, every case prints why and passes as skipped (the suite skips
//! a device factory that returns `Unavailable`). `tests/fake_driver.rs` runs the same four
//! instances on the fake CUDA driver, so CI exercises them without a GPU.
//!
//! A third instance opts into graph replay ([`CudaDeviceOptions::graphs`]), a fourth into
//! completion threads that poll before they sleep ([`CudaDeviceOptions::completion_spin`]).
//!
//! `failing_dispatch_fails_the_chain` runs the `fail` kernel, which fails its dispatch through
//! its status word (see `CudaKernels::can_fail`).
//!
//! The multi-device cases run on `cuda://0` and `cuda://1` where the machine has two GPUs, and
//! otherwise on two halcyon devices over `cuda://0` (two `CudaApi`s on one primary context).

mod common;

use std::time::Duration;

use common::CudaKernels;
use halcyon::{Device, Result};
use halcyon_cuda::{create_device_with, CudaDeviceOptions};
use halcyon_stream::CompletionStrategy;

fn options(completion: CompletionStrategy) -> CudaDeviceOptions {
    CudaDeviceOptions::default()
        .with_queue_count(2)
        .with_completion(completion)
        .with_probe_interval(Duration::from_millis(10))
}

fn with_graphs() -> CudaDeviceOptions {
    options(CompletionStrategy::CompletionThread).with_graphs(true)
}

/// A thread per queue blocked in `cuEventSynchronize` (the default).
mod completion_thread {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device_with(0, options(CompletionStrategy::CompletionThread)),
        CudaKernels
    );
}

/// Completion threads that poll `cuEventQuery` for up to 100 µs before they sleep
/// ([`CudaDeviceOptions::completion_spin`]).
mod completion_thread_spin {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device_with(
            0,
            options(CompletionStrategy::CompletionThread)
                .with_completion_spin(Duration::from_micros(100))
        ),
        CudaKernels
    );
}

/// `cuLaunchHostFunc` callbacks on a callback stream per queue, posting to the reactor.
mod host_callback {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device_with(0, options(CompletionStrategy::HostCallback)),
        CudaKernels
    );
}

/// `cuStreamWriteValue32` into pinned words read by one scanner thread, which spins 20 µs
/// after its last progress ([`CompletionStrategy::FlagWrite`]).
mod flag_write {
    use super::*;

    halcyon_conformance::conformance_tests!(
        || create_device_with(
            0,
            options(CompletionStrategy::FlagWrite).with_completion_spin(Duration::from_micros(20))
        ),
        CudaKernels
    );
}

/// The default strategy with reusable command lists replayed as CUDA graphs (opt-in).
mod graphs {
    use super::*;

    halcyon_conformance::conformance_tests!(|| create_device_with(0, with_graphs()), CudaKernels);
}

/// `cuda://0` and a second device: `cuda://1` if there is one, else `cuda://0` again.
fn pair(options: CudaDeviceOptions) -> Result<(Device, Device)> {
    let first = create_device_with(0, options)?;
    let second = create_device_with(1, options).or_else(|_| create_device_with(0, options))?;
    Ok((first, second))
}

/// The multi-device cases with completion threads.
mod completion_thread_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || pair(options(CompletionStrategy::CompletionThread)),
        CudaKernels
    );
}

/// The multi-device cases with host callbacks.
mod host_callback_pair {
    use super::*;

    halcyon_conformance::multi_device_tests!(
        || pair(options(CompletionStrategy::HostCallback)),
        CudaKernels
    );
}
