//! The gather kernel on a Vulkan device: strided views packed by a compute shader, for
//! elements of 1, 2, 4 and 8 bytes (the smaller ones with atomics on shared words), ranks up
//! to 6, and ranges that start off the device's binding alignment. Skipped (and says why)
//! without a Vulkan device.

#[test]
fn strided_views_are_gathered_by_the_device() {
    match halcyon_vulkan::create_device(0) {
        Ok(device) => halcyon_conformance::cases::strided_views_gathered_on_device(&device),
        Err(e) => eprintln!("skipped: no vulkan://0: {e}"),
    }
}
