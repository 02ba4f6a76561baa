//! CUDA's reading of PTX, the one CUDA parser left on the safe path: `CudaModule::from_packed`
//! on a packed executable of format `"cuda"` built from the input (its image PTX text unless
//! the input starts with a binary magic), and the `.entry`/`.param` readers on the text. None
//! panics; a refusal is `InvalidArgument` (`NotFound` for a kernel the PTX does not define); a
//! packed binary image is always refused on this safe
//! path; a module that validates has, for each entry point, a kernel whose parameter list
//! matches (`ptx_status_word` answers `Ok`).

#![no_main]

use halcyon::{EntryPoint, PackedExecutable, StatusCode};
use halcyon_cuda::module::{ptx_entries, ptx_param_sizes, ptx_status_word};
use halcyon_cuda::{CudaModule, FORMAT_CUDA};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the entry point's binding and constant counts; the rest is the image.
    let Some((&shape, image)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(image);
    let names = ptx_entries(&text);
    let name = names.first().cloned().unwrap_or_else(|| "k".into());
    let entry = EntryPoint {
        name: name.clone(),
        workgroup_size: [32, 1, 1],
        binding_count: u32::from(shape & 7),
        constant_count: u32::from(shape >> 3 & 7),
    };
    let _ = ptx_param_sizes(&text, &name);
    let status = ptx_status_word(&text, &entry);
    if let Err(error) = &status {
        assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
    }
    let packed = PackedExecutable::new(FORMAT_CUDA, vec![entry], image.to_vec());
    let binary = image.starts_with(b"\x7fELF") || image.starts_with(&0xBA55_ED50u32.to_le_bytes());
    match CudaModule::from_packed(&packed) {
        Ok(module) => {
            assert!(!binary, "a binary image passed the safe path");
            assert!(!module.is_binary());
            assert!(status.is_ok(), "validated, but its parameters do not match");
            let again = CudaModule::from_packed(&module.to_packed()).expect("round trip");
            assert_eq!(again.image(), module.image());
        }
        Err(error) => assert!(
            matches!(
                error.code(),
                StatusCode::InvalidArgument | StatusCode::NotFound
            ),
            "{error}"
        ),
    }
});
