//! The gather kernel on the fake HIP runtime: `Queue::copy_view` compiles halcyon-hip's HIP C++
//! gather with the real hiprtc for gfx900 (the fake device's architecture, named through
//! `HipDeviceOptions::offload_arch`, since the fake has no kernel driver to read it from), and
//! the fake runs the code object's `halcyon_gather` natively by name: elements of 1, 2, 4 and 8
//! bytes, ranks up to 6, ranges off the binding alignment. Skipped, saying why, without hiprtc
//! (CI installs Debian's HIP 5.2 runtime, which contains it).

// Shared with the other fake-runtime processes; this one does not use all of it.
#[allow(dead_code)]
mod fake;

use halcyon_hip::rtc::HipRtc;
use halcyon_hip::{HipDeviceOptions, HipDriver};

#[test]
fn strided_views_are_gathered_by_the_fake_device() {
    if let Err(e) = HipRtc::load_default() {
        return eprintln!("skipped: no hiprtc: {e}");
    }
    let options = HipDeviceOptions::default().with_offload_arch("gfx900");
    let device = HipDriver::with_hip(fake::hip())
        .create_device_with(0, &options)
        .expect("the fake runtime has hip://0");
    halcyon_conformance::cases::strided_views_gathered_on_device(&device);
    let stats = fake::fake().stats();
    assert_eq!(stats.violations, 0, "{:?}", fake::fake().violations());
}

#[test]
fn without_the_architecture_the_device_gathers_on_the_host() {
    // The fake has no kernel driver, so nothing names the architecture to compile for.
    if !halcyon_hip::rtc::kfd_gfx_targets().is_empty() {
        return eprintln!("skipped: this machine has AMD GPUs, whose architecture is known");
    }
    let device = HipDriver::with_hip(fake::hip())
        .create_device_with(0, &HipDeviceOptions::default())
        .expect("the fake runtime has hip://0");
    assert!(!device.gathers_on_device());
    halcyon_conformance::cases::copy_view_packs_strided_views(&device, &fake::FakeKernels)
        .expect("strided copies are right on the host");
}
