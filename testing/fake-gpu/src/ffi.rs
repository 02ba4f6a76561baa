//! What the CUDA and HIP shims share at the C boundary: out-pointers, handles as pointers,
//! strings, and flags that must be 0.

use std::ffi::{c_char, c_int, c_void, CStr};

use cudarc::driver::sys::CUresult;
use CUresult::CUDA_ERROR_INVALID_VALUE;

use crate::model::contract::Ret;

/// Writes `value` through the out-pointer `out`.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> Ret {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and valid per the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Makes something with `make` and writes its handle through `out`, checking `out` first so
/// that nothing is made (and leaked) for a null one.
///
/// # Safety
/// `out` must be null or valid for a write of a pointer.
pub(crate) unsafe fn put_new(
    out: *mut *mut c_void,
    make: impl FnOnce() -> Result<u64, CUresult>,
) -> Ret {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let h = make()?;
    // SAFETY: non-null; the caller's contract.
    unsafe { put(out, as_ptr(h)) }
}

/// Copies `text` into the C string buffer `name` of `len` bytes, truncated to `len - 1` bytes
/// and NUL-terminated.
///
/// # Safety
/// `name` must be null or valid for `len` bytes.
pub(crate) unsafe fn put_str(name: *mut c_char, len: c_int, text: &str) -> Ret {
    if name.is_null() || len <= 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let bytes = text.as_bytes();
    let n = bytes.len().min(len as usize - 1);
    // SAFETY: the caller's contract: `name` is valid for `len` bytes; `n + 1 <= len`.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
        name.add(n).write(0);
    }
    Ok(())
}

/// The NUL-terminated string at `name`: `CUDA_ERROR_INVALID_VALUE` for null.
///
/// # Safety
/// `name` must be null or a NUL-terminated string.
pub(crate) unsafe fn read_str(name: *const c_char) -> Result<String, CUresult> {
    if name.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the caller's contract: NUL-terminated.
    Ok(unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned())
}

/// Checks that `flags` are 0: `CUDA_ERROR_INVALID_VALUE` otherwise.
pub(crate) fn no_flags<F: Default + PartialEq>(flags: F) -> Ret {
    if flags == F::default() {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_VALUE)
    }
}

/// A pointer's value as a handle or address.
pub(crate) fn handle<T>(p: *mut T) -> u64 {
    p as usize as u64
}

/// A handle or address as a pointer.
pub(crate) fn as_ptr<T>(h: u64) -> *mut T {
    h as usize as *mut T
}
