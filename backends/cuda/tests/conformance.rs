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

mod common;

use std::time::Duration;

use common::CudaKernels;
use halcyon::stream::CompletionStrategy;
use halcyon_cuda::{create_device_with, CudaDeviceOptions};

fn options(completion: CompletionStrategy) -> CudaDeviceOptions {
    CudaDeviceOptions {
        queue_count: 2,
        completion,
        probe_interval: Duration::from_millis(10),
        ..CudaDeviceOptions::default()
    }
}

fn with_graphs() -> CudaDeviceOptions {
    CudaDeviceOptions {
        graphs: true,
        ..options(CompletionStrategy::CompletionThread)
    }
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
            CudaDeviceOptions {
                completion_spin: Duration::from_micros(100),
                ..options(CompletionStrategy::CompletionThread)
            }
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

/// The default strategy with reusable command lists replayed as CUDA graphs (opt-in).
mod graphs {
    use super::*;

    halcyon_conformance::conformance_tests!(|| create_device_with(0, with_graphs()), CudaKernels);
}
