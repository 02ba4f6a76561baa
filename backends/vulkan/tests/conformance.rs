//! The conformance suite on `vulkan://0` (lavapipe on CI), with the standard kernels written in
//! WGSL and compiled to SPIR-V by naga. Every case prints why and passes as skipped when there
//! is no Vulkan loader or device.
//!
//! The `fail` kernel fails its dispatch through the status word (a `uint` storage buffer at
//! `STATUS_SET`, `STATUS_BINDING`) that the backend checks on completion, so every case runs,
//! `failing_dispatch_fails_the_chain` included.

mod common;

use common::VulkanKernels;

halcyon_conformance::conformance_tests!(|| halcyon_vulkan::create_device(0), VulkanKernels);
