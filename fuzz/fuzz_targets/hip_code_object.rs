//! HIP's reading of code objects and offload bundles (`halcyon_hip::code_object`, through the
//! `object` and `rmpv` crates): the cheap checks and the kernel metadata read on the unsafe
//! path. `Image::read` never panics and refuses with `InvalidArgument`; for what it reads,
//! checking an entry point shaped like each listed kernel's explicit arguments (leading 8-byte
//! pointers as bindings, the rest as constants) never panics, whether it is accepted or not.

#![no_main]

use halcyon::{EntryPoint, StatusCode};
use halcyon_hip::code_object::Image;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let image = match Image::read(data) {
        Ok(image) => image,
        Err(error) => {
            assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
            return;
        }
    };
    let _ = image.targets();
    for code in image.code_objects() {
        for name in code.kernel_names() {
            let kernel = code.kernel(name).expect("a listed kernel");
            let args: Vec<_> = kernel.explicit_args().collect();
            let bindings = args.iter().take_while(|a| a.size == 8).count() as u32;
            let constants = args.len() as u32 - bindings;
            let entry = EntryPoint {
                name: name.to_string(),
                workgroup_size: [1, 1, 1],
                binding_count: bindings,
                constant_count: constants,
            };
            let _ = code.check_entry_point(&entry);
            let _ = image.check_entry_point(&entry);
        }
    }
});
