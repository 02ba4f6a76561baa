//! `halcyon_vulkan::SpirvModule::from_spirv` on arbitrary words (the input's little-endian
//! words; a trailing partial word is dropped). It returns `Ok` or `InvalidArgument` and never
//! lets a panic escape (naga runs inside halcyon's `catch_unwind` guard; see the crate docs for
//! how caught panics are counted rather than crashing); what it accepts obeys
//! `halcyon_fuzz::check_checked_module`. No Vulkan device is needed.

#![no_main]

use halcyon::StatusCode;
use halcyon_fuzz::{check_checked_module, count_caught_panics, no_escaping_panic};
use halcyon_vulkan::SpirvModule;
use libfuzzer_sys::fuzz_target;

fuzz_target!(init: count_caught_panics(), |data: &[u8]| {
    let words: Vec<u32> = data
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    no_escaping_panic("SpirvModule::from_spirv", || {
        match SpirvModule::from_spirv(&words) {
            Ok(module) => check_checked_module(&module),
            Err(error) => assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}"),
        }
    });
});
