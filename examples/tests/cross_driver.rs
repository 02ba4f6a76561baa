//! Copies between devices of two drivers (`Queue::copy_from`, and `BufferView::to` over it):
//! the CPU device and Vulkan's first device (lavapipe on CI), both ways, through the
//! conformance cases that check them between two devices of one driver. Skipped (and says why)
//! without a Vulkan device.

use halcyon::{Device, Error, Executable, Result, StatusCode};
use halcyon_conformance::cases::{buffer_views_move_between_devices, copy_between_devices};
use halcyon_conformance::run_pair;

/// The copy case loads no kernels.
fn no_kernels(_: &Device) -> Result<Executable> {
    Err(Error::new(
        StatusCode::Unimplemented,
        "the copy case loads no kernels",
    ))
}

fn cpu() -> Result<Device> {
    halcyon_cpu::create_device(halcyon_cpu::CpuDeviceOptions::default())
}

#[test]
fn copies_from_the_cpu_device_to_vulkan_and_back() {
    run_pair(
        "copy_between_devices (cpu, vulkan)",
        || Ok((cpu()?, halcyon_vulkan::create_device(0)?)),
        &no_kernels,
        copy_between_devices,
    );
}

#[test]
fn copies_from_vulkan_to_the_cpu_device_and_back() {
    run_pair(
        "copy_between_devices (vulkan, cpu)",
        || Ok((halcyon_vulkan::create_device(0)?, cpu()?)),
        &no_kernels,
        copy_between_devices,
    );
}

#[test]
fn buffer_views_move_from_the_cpu_device_to_vulkan() {
    run_pair(
        "buffer_views_move_between_devices (cpu, vulkan)",
        || Ok((cpu()?, halcyon_vulkan::create_device(0)?)),
        &no_kernels,
        buffer_views_move_between_devices,
    );
}

#[test]
fn buffer_views_move_from_vulkan_to_the_cpu_device() {
    run_pair(
        "buffer_views_move_between_devices (vulkan, cpu)",
        || Ok((halcyon_vulkan::create_device(0)?, cpu()?)),
        &no_kernels,
        buffer_views_move_between_devices,
    );
}
