//! `halcyon_vulkan::SpirvModule::from_wgsl` on arbitrary UTF-8. It returns `Ok` or
//! `InvalidArgument` and never lets a panic escape (naga runs inside halcyon's `catch_unwind`
//! guard; see the crate docs for how caught panics are counted rather than crashing); what it
//! accepts obeys `halcyon_fuzz::check_checked_module`. No Vulkan device is needed.

#![no_main]

use halcyon::StatusCode;
use halcyon_fuzz::{check_checked_module, count_caught_panics, no_escaping_panic};
use halcyon_vulkan::SpirvModule;
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: count_caught_panics(), |data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    no_escaping_panic("SpirvModule::from_wgsl", || {
        match SpirvModule::from_wgsl(source) {
            Ok(module) => check_checked_module(&module),
            Err(error) => assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}"),
        }
    });
});
