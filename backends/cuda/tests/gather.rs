//! The PTX gather kernel on a real GPU: `Queue::copy_view` of strided views on `cuda://0`
//! (JIT-compiled by the driver). Skipped, saying why, without a GPU; the fake driver's run is
//! `fake_driver_gather.rs`.

#[test]
fn strided_views_are_gathered_by_the_gpu() {
    match halcyon_cuda::create_device_with(0, halcyon_cuda::CudaDeviceOptions::default()) {
        Ok(device) => halcyon_conformance::cases::strided_views_gathered_on_device(&device),
        Err(e) => eprintln!("skipped: no cuda://0: {e}"),
    }
}
