//! What halcyon's fuzz targets share (see `docs/FUZZING.md`): the `command_buffer` target's
//! input and model ([`command_buffer`]), the checks of a module naga accepted
//! ([`check_checked_module`]), and the panic policy of targets whose code under test catches
//! panics itself.
//!
//! # Panics that halcyon catches
//!
//! `libfuzzer-sys` installs a panic hook that aborts the process on *any* panic, even one the
//! code under test catches. `SpirvModule::from_wgsl` and `from_spirv` run naga inside
//! `catch_unwind` and turn a naga panic into `InvalidArgument`, which is their documented
//! behaviour, so under that hook every naga panic would stop the fuzzer at a naga bug that
//! halcyon already handles. The naga targets call [`count_caught_panics`] in their `init`, and
//! run the code under test in [`no_escaping_panic`]: a panic that halcyon catches is counted
//! (and the first few printed), a panic that escapes the call under test aborts the process,
//! which libFuzzer reports as a crash and saves the input for.
//!
//! With `HALCYON_FUZZ_ABORT_ON_ANY_PANIC=1` in the environment, [`count_caught_panics`] leaves
//! libFuzzer's hook in place, so a naga panic is a crash even where halcyon catches it (for
//! hunting naga bugs to report upstream).

#![warn(missing_docs)]

pub mod command_buffer;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Panics seen by the hook [`count_caught_panics`] installs.
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// How many caught panics the hook prints before it only counts them.
const PRINTED: usize = 5;

/// Replaces libFuzzer's abort-on-any-panic hook with one that counts panics and prints the
/// first few, unless `HALCYON_FUZZ_ABORT_ON_ANY_PANIC` is set. Call it once, from the target's
/// `init`; pair it with [`no_escaping_panic`] around the code under test.
pub fn count_caught_panics() {
    if std::env::var_os("HALCYON_FUZZ_ABORT_ON_ANY_PANIC").is_some() {
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        let n = PANICS.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= PRINTED {
            eprintln!(
                "panic #{n} (the code under test catches it unless the process aborts next): \
                 {info}"
            );
        } else if n == PRINTED + 1 {
            eprintln!("more panics follow; counting them without printing");
        }
    }));
}

/// How many panics the hook of [`count_caught_panics`] has seen.
pub fn panics_seen() -> usize {
    PANICS.load(Ordering::Relaxed)
}

/// Runs `f`; a panic escaping it aborts the process (libFuzzer's crash) after printing its
/// message and `what`.
pub fn no_escaping_panic<T>(what: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(a non-string payload)".into());
            eprintln!("a panic escaped {what}: {message}");
            std::process::abort();
        }
    }
}

/// The invariants of a module that `SpirvModule::from_wgsl` or `from_spirv` accepted: naga
/// checked and reflected it, so it has compute entry points with distinct names whose
/// constants fit the 128-byte push-constant range and whose bindings are numbered below
/// `MAX_BINDINGS`; its words are SPIR-V, as little-endian bytes in `to_bytes` and in its
/// packed form; and naga's words, where `from_spirv` reads them back (the path a shader
/// compiler's output takes), use no more bindings and constants than were reflected.
pub fn check_checked_module(module: &halcyon_vulkan::SpirvModule) {
    use halcyon_vulkan::{SpirvModule, MAX_BINDINGS};

    assert!(!module.is_unchecked());
    let entries = module.entry_points();
    assert!(!entries.is_empty(), "an accepted module has entry points");
    let mut names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), entries.len(), "entry point names are distinct");
    for entry in entries {
        assert!(
            u64::from(entry.constant_count) * 4 <= 128,
            "{}: {} constants do not fit 128 bytes of push constants",
            entry.name,
            entry.constant_count
        );
        assert!(entry.binding_count <= MAX_BINDINGS, "{}", entry.name);
    }
    let words = module.words();
    assert!(
        words.len() >= 5 && words[0] == 0x0723_0203,
        "naga writes SPIR-V"
    );
    let bytes = module.to_bytes();
    assert_eq!(bytes.len(), words.len() * 4);
    let packed = module.to_packed();
    assert_eq!(packed.entry_points(), entries);
    assert_eq!(packed.image(), bytes.as_slice());
    assert_eq!(
        halcyon::PackedExecutable::from_bytes(&packed.to_bytes())
            .ok()
            .as_ref(),
        Some(&packed)
    );
    // naga's words through the SPIR-V path: never a panic, and where naga reads them back,
    // entry points of the same names and workgroup sizes that use no more bindings or
    // constants than reflected: the metadata dispatches follow covers the code the driver
    // gets. Not equality, nor success, for three of naga's limits the fuzzers found
    // (docs/FUZZING.md):
    // * naga's SPIR-V front end accepts some invalid modules (a result id defined twice) and
    //   keeps resource uses in its IR that its SPIR-V writer leaves out; reflected from the
    //   IR, the entry point takes more bindings than naga's words, read back, use;
    // * for an index of a runtime-sized array that is a signed, non-constant expression,
    //   naga's bounds check is a `UMin` of a signed and an unsigned operand (valid SPIR-V),
    //   which naga's SPIR-V front end turns into a `Min` its validator refuses;
    // * a push constant that is not a struct (a `vec3<u32>`, 12 bytes) comes back wrapped in
    //   a struct of 16 bytes.
    if let Ok(again) = SpirvModule::from_spirv(words) {
        let again = again.entry_points();
        assert_eq!(again.len(), entries.len(), "{again:?} against {entries:?}");
        for (read, reflected) in again.iter().zip(entries) {
            assert_eq!(read.name, reflected.name);
            assert_eq!(read.workgroup_size, reflected.workgroup_size);
            // naga's writer wraps a push constant that is not a struct in one, whose size
            // rounds up to its alignment (16 bytes for a `vec3<u32>`): allow the padding.
            let padded = reflected.constant_count.div_ceil(4) * 4;
            assert!(
                read.binding_count <= reflected.binding_count && read.constant_count <= padded,
                "naga's words use more than was reflected: {read:?} against {reflected:?}"
            );
        }
    }
}
