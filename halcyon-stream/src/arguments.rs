//! Arguments a stream backend checks before a driver sees them.
//!
//! The rules are the stream layer's, not a vendor's: CUDA and HIP apply the same ones, so they
//! are stated and tested here once, and each backend passes in only what its driver names
//! differently (the device's URI, the attribute a limit was read from).
//!
//! # Errors
//! Each check answers `InvalidArgument` with a message that names the offending value and the
//! limit it broke; nothing has been enqueued or allocated when it fails.

use halcyon::{Error, Result, StatusCode};

use crate::api::{DevicePtr, KernelParams};

fn invalid(message: String) -> Error {
    Error::new(StatusCode::InvalidArgument, message)
}

/// `len` bytes of `what` (such as "a copy") as a host length: at most `isize::MAX`, the most a
/// host allocation can hold.
pub fn host_len(len: u64, what: &str) -> Result<usize> {
    usize::try_from(len)
        .ok()
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| {
            invalid(format!(
                "{what} of {len} bytes is larger than this host can address"
            ))
        })
}

/// The element count of a fill of `len` bytes at `dst` with a `pattern_len`-byte pattern: the
/// pattern is 1, 2 or 4 bytes (what `memsetD8/D16/D32` take), and the address and length are
/// multiples of it.
pub fn fill_elements(dst: DevicePtr, pattern_len: u8, len: u64) -> Result<usize> {
    if !matches!(pattern_len, 1 | 2 | 4) {
        return Err(invalid(format!(
            "a fill pattern is 1, 2 or 4 bytes, not {pattern_len}"
        )));
    }
    let width = u64::from(pattern_len);
    if !dst.0.is_multiple_of(width) || !len.is_multiple_of(width) {
        return Err(invalid(format!(
            "a fill with a {pattern_len}-byte pattern needs an address and length that are \
             multiples of {pattern_len}: {dst:?}, {len} bytes"
        )));
    }
    host_len(len / width, "a fill")
}

/// The shared memory a kernel declares against what a block of the device may have.
#[derive(Clone, Copy, Debug)]
pub struct SharedMemory<'a> {
    /// The kernel's name.
    pub kernel: &'a str,
    /// Its static shared memory in bytes, where the backend could read it.
    pub statik: Option<u32>,
    /// The dynamic shared memory its entry point declares, in bytes.
    pub dynamic: u32,
    /// The most shared memory a block of the device may have, static and dynamic together.
    pub max: u32,
    /// The device, as a URI (`cuda://0`).
    pub device: &'a str,
    /// Where `max` came from (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`), for the
    /// message.
    pub attribute: &'a str,
}

impl SharedMemory<'_> {
    /// Checks that static and dynamic shared memory together fit a block: otherwise every
    /// launch of the kernel would fail, so its module is refused at load time instead. Nothing
    /// to check for a kernel declaring no dynamic shared memory (its static memory is the
    /// compiler's business).
    pub fn check(&self) -> Result<()> {
        let statik = self.statik.unwrap_or(0);
        if self.dynamic == 0 || u64::from(statik) + u64::from(self.dynamic) <= u64::from(self.max) {
            return Ok(());
        }
        Err(invalid(format!(
            "kernel '{}' declares {} bytes of dynamic shared memory{}, but a block on {} may \
             have at most {} bytes of shared memory ({}): declare less",
            self.kernel,
            self.dynamic,
            if statik > 0 {
                format!(" on top of its {statik} bytes of static")
            } else {
                String::new()
            },
            self.device,
            self.max,
            self.attribute,
        )))
    }
}

/// What a launch of one kernel must pass: the checked signature of its entry point, kept by
/// the backend for each function it hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSignature {
    /// Device addresses, one per binding.
    pub bindings: usize,
    /// `u32` constants after them.
    pub constants: usize,
    /// Whether a status word's address follows the constants.
    pub status_word: bool,
}

impl KernelSignature {
    /// Checks that `params` match the signature of `kernel`, and that a status word is 4-byte
    /// aligned. A kernel reads its parameters without knowing how many were passed, so a
    /// mismatch would have it read past them; the backend still checks that the status word
    /// lies in a live allocation of its own.
    pub fn check(&self, kernel: &str, params: &KernelParams<'_>) -> Result<()> {
        let passed = KernelSignature {
            bindings: params.bindings.len(),
            constants: params.constants.len(),
            status_word: params.status.is_some(),
        };
        if passed != *self {
            let word = |takes| if takes { " and a status word" } else { "" };
            return Err(invalid(format!(
                "kernel '{kernel}' takes {} bindings and {} constants{}; the launch passes {} \
                 and {}{}",
                self.bindings,
                self.constants,
                word(self.status_word),
                passed.bindings,
                passed.constants,
                word(passed.status_word),
            )));
        }
        match params.status {
            Some(word) if !word.0.is_multiple_of(4) => Err(invalid(format!(
                "kernel '{kernel}': the status word at {word:?} is not 4-byte aligned"
            ))),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lengths_fit_the_address_space() {
        assert_eq!(host_len(4096, "a copy").unwrap(), 4096);
        let e = host_len(u64::MAX, "a copy").unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        assert!(
            e.message().contains("a copy of 18446744073709551615 bytes"),
            "{e}"
        );
    }

    #[test]
    fn fills_check_pattern_and_alignment() {
        assert_eq!(fill_elements(DevicePtr(0x1000), 4, 64).unwrap(), 16);
        assert_eq!(fill_elements(DevicePtr(0x1002), 2, 6).unwrap(), 3);
        assert_eq!(fill_elements(DevicePtr(0x1003), 1, 5).unwrap(), 5);
        assert_eq!(fill_elements(DevicePtr(0x1000), 4, 0).unwrap(), 0);
        for (ptr, pattern, len) in [(0x1000, 3, 6), (0x1002, 4, 8), (0x1000, 4, 6), (0, 8, 8)] {
            let e = fill_elements(DevicePtr(ptr), pattern, len).unwrap_err();
            assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
        }
    }

    #[test]
    fn static_and_dynamic_shared_memory_must_fit_a_block() {
        let max = 64 << 10;
        let shared = |statik, dynamic, max| SharedMemory {
            kernel: "k",
            statik,
            dynamic,
            max,
            device: "hip://3",
            attribute: "hipDeviceAttributeMaxSharedMemoryPerBlock",
        };
        shared(Some(1024), 0, 512).check().unwrap();
        shared(Some(1024), max - 1024, max).check().unwrap();
        shared(None, max, max).check().unwrap();
        let e = shared(Some(1024), max - 1023, max).check().unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(
            e.message().contains(
                "on top of its 1024 bytes of static, but a block on hip://3 may have at most \
                 65536 bytes of shared memory (hipDeviceAttributeMaxSharedMemoryPerBlock)"
            ),
            "{e}"
        );
        let e = shared(None, max + 1, max).check().unwrap_err();
        assert!(e
            .message()
            .contains("declares 65537 bytes of dynamic shared memory, but"));
    }

    #[test]
    fn launches_match_the_kernel_signature() {
        let signature = KernelSignature {
            bindings: 2,
            constants: 1,
            status_word: true,
        };
        let bindings = [DevicePtr(0x1000), DevicePtr(0x2000)];
        let params = |bindings, constants, status| KernelParams {
            bindings,
            constants,
            status,
        };
        signature
            .check("k", &params(&bindings, &[7], Some(DevicePtr(0x3004))))
            .unwrap();
        let e = signature
            .check("k", &params(&bindings[..1], &[7], None))
            .unwrap_err();
        assert_eq!(e.code(), StatusCode::InvalidArgument);
        assert!(
            e.message().contains(
                "kernel 'k' takes 2 bindings and 1 constants and a status word; the launch \
                 passes 1 and 1"
            ),
            "{e}"
        );
        let e = signature
            .check("k", &params(&bindings, &[7], Some(DevicePtr(0x3002))))
            .unwrap_err();
        assert!(e.message().contains("not 4-byte aligned"), "{e}");
    }
}
