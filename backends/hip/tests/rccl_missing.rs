//! A HIP device without a usable RCCL: channels are `Unavailable` with the reason, and nothing
//! panics. A process of its own: the RCCL a process loads is chosen once.

// Shared with the other fake-runtime processes; this one needs only the runtime.
#[allow(dead_code)]
mod fake;

use fake::hip;
use halcyon::channel::LocalGroup;
use halcyon::{ChannelParams, StatusCode};
use halcyon_hip::rccl::Rccl;
use halcyon_hip::{HipDeviceOptions, HipDriver};

#[test]
fn rccl_missing_library_is_unavailable() {
    // SAFETY: the file does not exist; nothing is loaded.
    let error = unsafe { Rccl::use_library("/nonexistent/librccl.so.1") }.unwrap_err();
    assert_eq!(error.code(), StatusCode::Unavailable, "{error}");
    assert!(
        error.to_string().contains("/nonexistent/librccl.so.1"),
        "{error}"
    );
    let device = HipDriver::with_hip(hip())
        .create_device_with(0, &HipDeviceOptions::default())
        .expect("hip://0 on the fake runtime");
    let group = LocalGroup::new(1);
    let error = device
        .channel(&group.rank(0).unwrap(), &ChannelParams::default())
        .unwrap_err();
    assert_eq!(error.code(), StatusCode::Unavailable, "{error}");
    assert!(error.to_string().contains("hip://0"), "{error}");
    // A second choice is refused: the first stays.
    // SAFETY: as above.
    let again = unsafe { Rccl::use_library("/nonexistent/other.so") }.unwrap_err();
    assert_eq!(again.code(), StatusCode::FailedPrecondition, "{again}");
}
