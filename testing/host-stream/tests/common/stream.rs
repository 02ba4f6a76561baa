//! Devices over the host stream API, for the stream layer's integration tests.

use std::time::Duration;

use halcyon::{Device, Result};
use halcyon_host_stream::HostStreamApi;
use halcyon_stream::{create_device, CompletionStrategy, StreamDeviceOptions};

/// Every completion strategy, for tests that run under each.
pub const STRATEGIES: [CompletionStrategy; 3] = [
    CompletionStrategy::HostCallback,
    CompletionStrategy::CompletionThread,
    CompletionStrategy::FlagWrite,
];

/// A one-queue device over `api` with `completion` (and a short probe interval).
pub fn device(api: &HostStreamApi, completion: CompletionStrategy) -> Result<Device> {
    create_device(
        api.clone(),
        StreamDeviceOptions::default()
            .with_completion(completion)
            .with_probe_interval(Duration::from_millis(5)),
    )
}

/// A counter the device answers under `key`.
pub fn stat(device: &Device, key: halcyon::device::Key<u64>) -> i64 {
    device.query(key).unwrap() as i64
}
