//! The conformance suite on `vulkan://0` (lavapipe on CI), with the standard kernels written in
//! WGSL and compiled to SPIR-V by naga. Every case prints why and passes as skipped when there
//! is no Vulkan loader or device.
//!
//! The `fail` kernel fails its dispatch through the status word (a `uint` storage buffer at
//! `STATUS_SET`, `STATUS_BINDING`) that the backend checks on completion, so every case runs,
//! `failing_dispatch_fails_the_chain` included.
//!
//! The multi-device cases run on two logical devices created over `vulkan://0` (two
//! `VkDevice`s on one physical device). A second instance of the suite awaits every submission
//! with a completion budget, so each first poll waits in `vkWaitSemaphores` itself and
//! completes what finished on the awaiting thread (`DeviceBackend::wait_native`).

mod common;

use common::VulkanKernels;

halcyon_conformance::conformance_tests!(|| halcyon_vulkan::create_device(0), VulkanKernels);

/// Awaited submissions wait natively on their first poll, up to 2 ms.
mod awaiting_waits {
    use super::VulkanKernels;

    halcyon_conformance::conformance_tests!(
        || {
            let device = halcyon_vulkan::create_device(0)?;
            device.set_completion_spin(std::time::Duration::from_millis(2));
            Ok(device)
        },
        VulkanKernels
    );
}

/// The multi-device cases on two logical devices over the same physical device.
mod pair {
    use super::VulkanKernels;

    halcyon_conformance::multi_device_tests!(
        || Ok((
            halcyon_vulkan::create_device(0)?,
            halcyon_vulkan::create_device(0)?
        )),
        VulkanKernels
    );
}
