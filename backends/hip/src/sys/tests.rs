//! Unit tests of the raw table: the memory-pool types' C layout and enum values.

use std::mem::{align_of, offset_of, size_of};

use super::*;

/// Sizes and offsets from `hip_runtime_api.h` (x86-64 Linux: `int` 4 bytes, pointers and
/// `size_t` 8), the same in ROCm 5.2 through 7.x (see the comment on the types).
#[test]
fn mem_pool_types_have_the_c_layout() {
    assert_eq!(size_of::<hipMemLocation>(), 8);
    assert_eq!(align_of::<hipMemLocation>(), 4);
    assert_eq!(offset_of!(hipMemLocation, type_), 0);
    assert_eq!(offset_of!(hipMemLocation, id), 4);

    assert_eq!(size_of::<hipMemPoolProps>(), 88);
    assert_eq!(align_of::<hipMemPoolProps>(), 8);
    assert_eq!(offset_of!(hipMemPoolProps, allocType), 0);
    assert_eq!(offset_of!(hipMemPoolProps, handleTypes), 4);
    assert_eq!(offset_of!(hipMemPoolProps, location), 8);
    assert_eq!(offset_of!(hipMemPoolProps, win32SecurityAttributes), 16);
    // ROCm 6.2+; before, `reserved[64]` starts here and runs to the same end.
    assert_eq!(offset_of!(hipMemPoolProps, maxSize), 24);
    assert_eq!(offset_of!(hipMemPoolProps, reserved), 32);
    assert_eq!(32 + 56, 24 + 64, "both layouts end at the same byte");
}

#[test]
fn mem_pool_enum_values_match_the_header() {
    assert_eq!(hipMemLocationTypeInvalid, 0);
    assert_eq!(hipMemLocationTypeDevice, 1);
    assert_eq!(hipMemAllocationTypeInvalid, 0);
    assert_eq!(hipMemAllocationTypePinned, 1);
    assert_eq!(hipMemHandleTypeNone, 0);
    assert_eq!(hipMemPoolAttrReleaseThreshold, 4);
}

#[test]
fn default_pool_props_are_all_zero_bytes() {
    let props = hipMemPoolProps::default();
    // SAFETY: `props` is a live, initialised repr(C) value of exactly this many bytes, and
    // has no padding (4 + 4 + 8 + 8 + 8 + 56 = 88), so every byte is initialised.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&props as *const hipMemPoolProps).cast::<u8>(),
            size_of::<hipMemPoolProps>(),
        )
    };
    assert!(bytes.iter().all(|&b| b == 0), "{bytes:?}");
}
