//! `PackedExecutable::from_bytes` on arbitrary bytes (and on the same bytes behind the magic, so
//! mutations that break the magic still reach the parser). It never panics; a refusal is
//! `InvalidArgument` "malformed packed executable: ..."; what it accepts obeys the documented
//! bounds and writes back byte for byte (`to_bytes`), and parses again to an equal value.
//! Accepted executables in the `"spirv"` format also go through Vulkan's reading of them
//! (`SpirvModule::from_packed`, its cheap structural checks of the words), which must not
//! panic either.

#![no_main]

use std::collections::HashSet;

use halcyon::{PackedExecutable, StatusCode, MAX_ENTRY_POINTS};
use halcyon_vulkan::SpirvModule;
use libfuzzer_sys::fuzz_target;

fn check(bytes: &[u8]) {
    match PackedExecutable::from_bytes(bytes) {
        Ok(packed) => {
            assert!(PackedExecutable::is_packed(bytes));
            assert_eq!(
                packed.to_bytes(),
                bytes,
                "to_bytes must give back the bytes read"
            );
            assert_eq!(
                PackedExecutable::from_bytes(&packed.to_bytes())
                    .ok()
                    .as_ref(),
                Some(&packed)
            );
            assert!(packed.format().len() <= 256);
            let count = packed.entry_points().len();
            assert!(count <= MAX_ENTRY_POINTS as usize);
            assert_eq!(packed.shared_memory(count), 0);
            let (format, entries, shared, image) = packed.clone().into_parts();
            assert_eq!(shared.len(), entries.len());
            let names: HashSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
            let unique = names.len() == entries.len();
            if unique {
                // With distinct names, the public constructors rebuild the same value.
                let mut rebuilt = PackedExecutable::new(format, entries.clone(), image);
                for (entry, &bytes) in entries.iter().zip(&shared) {
                    rebuilt = rebuilt.with_shared_memory(&entry.name, bytes).unwrap();
                }
                assert_eq!(rebuilt, packed);
            }
            if packed.format() == halcyon_vulkan::FORMAT_SPIRV {
                // SAFETY: `from_packed`'s contract protects the Vulkan driver, which never sees
                // this module: it is only checked (its words walked) and dropped.
                let module = unsafe { SpirvModule::from_packed(&packed) };
                if let Ok(module) = module {
                    assert!(module.is_unchecked());
                    assert_eq!(module.entry_points(), packed.entry_points());
                    assert_eq!(module.to_bytes(), packed.image());
                }
            }
        }
        Err(error) => {
            assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
            assert!(
                error.message().starts_with("malformed packed executable: "),
                "{error}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if !PackedExecutable::is_packed(data) {
        let mut with_magic = PackedExecutable::MAGIC.to_vec();
        with_magic.extend_from_slice(data);
        check(&with_magic);
    }
});
