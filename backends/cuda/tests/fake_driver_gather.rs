//! The gather kernel on the fake CUDA driver: `Queue::copy_view` dispatches halcyon-cuda's PTX
//! gather (which the fake runs natively by its name and signature) for elements of 1, 2, 4
//! and 8 bytes, ranks up to 6 (several launches past 4) and ranges off the binding alignment.

// Shared with the other fake-driver processes; this one does not use all of it.
#[allow(dead_code)]
mod fake;

use fake::{fake_device, options};
use halcyon_stream::CompletionStrategy;

#[test]
fn strided_views_are_gathered_by_the_fake_device() {
    let device = match fake_device(options(CompletionStrategy::CompletionThread)) {
        Ok(device) => device,
        Err(e) => return eprintln!("skipped: {e}"),
    };
    halcyon_conformance::cases::strided_views_gathered_on_device(&device);
}
