//! The hiprtc-compiled gather kernel on a real AMD GPU: `Queue::copy_view` of strided views on
//! `hip://0`. Skipped, saying why, without a GPU or without hiprtc (then the device gathers on
//! the host, which the conformance cases cover).

use halcyon_hip::rtc::HipRtc;
use halcyon_hip::{HipDeviceOptions, HipDriver};

#[test]
fn strided_views_are_gathered_by_the_gpu() {
    if let Err(e) = HipRtc::load_default() {
        return eprintln!("skipped: no hiprtc: {e}");
    }
    let device = match HipDriver::new().create_device_with(0, &HipDeviceOptions::default()) {
        Ok(device) => device,
        Err(e) => return eprintln!("skipped: no hip://0: {e}"),
    };
    halcyon_conformance::cases::strided_views_gathered_on_device(&device);
}
