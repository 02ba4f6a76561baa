//! The fake CUDA driver for the test processes that run on it (`fake_driver.rs`,
//! `fake_driver_counts.rs`): loading it, and `cuda://0` on it.

use std::time::Duration;

use halcyon::{Device, Error, StatusCode};
use halcyon_cuda::{create_device_with, CudaDeviceOptions};
use halcyon_fake_gpu::client::Fake;
use halcyon_stream::CompletionStrategy;

/// Loads the fake driver before anything opens libcuda. A fake that was not built is a test
/// failure; one that another libcuda.so.1 loaded first shadows skips.
pub fn prepare_driver() -> Result<&'static Fake, String> {
    let fake = Fake::load();
    if let Err(e) = &fake {
        assert!(!e.contains("was not built"), "{e}");
    }
    fake
}

/// `cuda://0` on the fake driver.
pub fn fake_device(options: CudaDeviceOptions) -> halcyon::Result<Device> {
    prepare_driver().map_err(|e| Error::new(StatusCode::Unavailable, e))?;
    create_device_with(0, options)
}

/// Two queues, `completion`, a 10 ms probe interval.
pub fn options(completion: CompletionStrategy) -> CudaDeviceOptions {
    CudaDeviceOptions::default()
        .with_queue_count(2)
        .with_completion(completion)
        .with_probe_interval(Duration::from_millis(10))
}
