//! The conformance suite on `vulkan://0` (lavapipe on CI), with the standard kernels written in
//! WGSL and compiled to SPIR-V by naga. Every case prints why and passes as skipped when there
//! is no Vulkan loader or device.
//!
//! `failing_dispatch_fails_the_chain` prints why and skips: it needs a kernel that fails, and a
//! Vulkan compute shader has no return code (a device-side error channel, e.g. a hidden status
//! buffer the backend checks on completion, is future work; see `VulkanKernels::can_fail`).

mod common;

use common::VulkanKernels;

halcyon_conformance::conformance_tests!(|| halcyon_vulkan::create_device(0), VulkanKernels);
