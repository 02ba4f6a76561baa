//! cubins (CUDA ELF images), read as far as `cuModuleLoadData` needs for the fake: the ELF
//! header and the section names, where each kernel's code is a `.text.<kernel>` section.
//!
//! Like the driver, the fake finds the image's extent from its ELF headers, trusting the caller
//! that they describe bytes it may read ([`crate::hsaco::image`] reads any ELF64 image that
//! way). The kernel parameter metadata (`.nv.info.<kernel>`) is not read: the kernels the fake
//! runs are known by name (see [`crate::model::kernels`]). Fatbins are not modelled.

/// `e_machine` of CUDA images.
const EM_CUDA: u16 = 190;
/// `e_flags`' architecture field and the fake device's, sm_90.
const EF_CUDA_SM: u32 = 0xff;
const SM_DEVICE: u32 = 90;
/// `SHF_EXECINSTR`: a section of code.
const SHF_EXECINSTR: u64 = 0x4;

/// Why a cubin cannot be loaded: the CUDA error and a message for the JIT log.
pub(crate) enum Refusal {
    /// Not a CUDA ELF image (`CUDA_ERROR_INVALID_IMAGE`).
    Invalid(String),
    /// Built for another architecture than the device's (`CUDA_ERROR_NO_BINARY_FOR_GPU`).
    OtherArchitecture(String),
}

fn read<const N: usize>(elf: &[u8], at: usize) -> Option<[u8; N]> {
    elf.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn u16_at(elf: &[u8], at: usize) -> Option<u16> {
    read(elf, at).map(u16::from_le_bytes)
}

fn u32_at(elf: &[u8], at: usize) -> Option<u32> {
    read(elf, at).map(u32::from_le_bytes)
}

fn u64_at(elf: &[u8], at: usize) -> Option<u64> {
    read(elf, at).map(u64::from_le_bytes)
}

/// The kernels of a cubin (`elf`, as far as its headers reach), by name, in section order.
pub(crate) fn kernel_names(elf: &[u8]) -> Result<Vec<String>, Refusal> {
    let corrupt = || Refusal::Invalid("the cubin's section headers lie outside it".into());
    if u16_at(elf, 0x12) != Some(EM_CUDA) {
        return Err(Refusal::Invalid(
            "not a CUDA image (e_machine is not EM_CUDA)".into(),
        ));
    }
    let sm = u32_at(elf, 0x30).ok_or_else(corrupt)? & EF_CUDA_SM;
    if sm != SM_DEVICE {
        return Err(Refusal::OtherArchitecture(format!(
            "the cubin is for sm_{sm}; the fake device is sm_{SM_DEVICE}"
        )));
    }
    let shoff = u64_at(elf, 0x28).ok_or_else(corrupt)? as usize;
    let shnum = usize::from(u16_at(elf, 0x3c).ok_or_else(corrupt)?);
    let names_index = usize::from(u16_at(elf, 0x3e).ok_or_else(corrupt)?);
    let header = |i: usize| shoff.checked_add(i.checked_mul(64)?);
    let names_at = header(names_index)
        .and_then(|at| u64_at(elf, at + 0x18))
        .ok_or_else(corrupt)? as usize;
    let mut kernels = Vec::new();
    for i in 0..shnum {
        let at = header(i).ok_or_else(corrupt)?;
        let (name, flags) = (
            u32_at(elf, at).ok_or_else(corrupt)? as usize,
            u64_at(elf, at + 8).ok_or_else(corrupt)?,
        );
        let name = elf
            .get(names_at.saturating_add(name)..)
            .and_then(|n| n.split(|&b| b == 0).next())
            .ok_or_else(corrupt)?;
        let name = String::from_utf8_lossy(name);
        if let Some(kernel) = name.strip_prefix(".text.") {
            if flags & SHF_EXECINSTR != 0 {
                kernels.push(kernel.to_string());
            }
        }
    }
    if kernels.is_empty() {
        return Err(Refusal::Invalid(
            "the cubin has no kernels (.text.<name> sections)".into(),
        ));
    }
    Ok(kernels)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ptxas 12.8's sm_90 cubin of halcyon-cuda's standard kernels.
    const CUBIN: &[u8] =
        include_bytes!("../../../backends/cuda/tests/kernels/standard.sm_90.cubin");

    fn patched(at: usize, bytes: &[u8]) -> Vec<u8> {
        let mut image = CUBIN.to_vec();
        image[at..at + bytes.len()].copy_from_slice(bytes);
        image
    }

    #[test]
    fn kernels_are_found_by_their_code_sections() {
        let names = kernel_names(CUBIN).ok().unwrap();
        assert_eq!(names, ["empty", "fail", "saxpy_f32", "add_one_u32"]);
        // e_flags' architecture: sm_80 is not the device's.
        let Err(Refusal::OtherArchitecture(why)) = kernel_names(&patched(0x30, &[80])) else {
            panic!("an sm_80 cubin loads on the sm_90 fake");
        };
        assert!(why.contains("sm_80"), "{why}");
        // e_machine: an AMDGPU image is not a CUDA one.
        let Err(Refusal::Invalid(why)) = kernel_names(&patched(0x12, &224u16.to_le_bytes())) else {
            panic!("an AMDGPU image loads as a cubin");
        };
        assert!(why.contains("EM_CUDA"), "{why}");
        // Section headers past the bytes are refused, not read.
        let Err(Refusal::Invalid(why)) = kernel_names(&patched(0x28, &u64::MAX.to_le_bytes()))
        else {
            panic!("section headers outside the image were read");
        };
        assert!(why.contains("outside"), "{why}");
    }
}
