//! A kernel's parameters against its entry point: an 8-byte device pointer per binding, then a
//! 4-byte `u32` per constant, optionally followed by an 8-byte pointer to the status word (see
//! the [module docs](super)). The sizes come from the driver (`cuFuncGetParamInfo`) or from
//! the PTX text ([`super::ptx_status_word`]).

use halcyon::{EntryPoint, Result};

use super::invalid;

/// Checks a kernel's real parameters — `(offset, size)` per parameter as `cuFuncGetParamInfo`
/// reports them — against what halcyon passes for `entry`: an 8-byte device pointer per
/// binding, then a 4-byte `u32` per constant, then, for a kernel that takes a status word, an
/// 8-byte pointer to it. Returns whether the kernel takes the status word.
///
/// An empty `params` is taken as "unknown" and accepted as a kernel without a status word (the
/// driver reports nothing for a kernel without parameters, and passing a kernel more arguments
/// than it takes is harmless). Anything else must match one of the two signatures exactly: a
/// kernel taking more or larger parameters would make `cuLaunchKernel` read past the argument
/// values halcyon provides.
pub fn check_kernel_params(entry: &EntryPoint, params: &[(usize, usize)]) -> Result<bool> {
    if params.is_empty() {
        return Ok(false);
    }
    let sizes: Vec<usize> = params.iter().map(|&(_, size)| size).collect();
    match_params(entry, &sizes)
}

/// Whether parameters of `sizes` bytes are `entry`'s signature (`false`) or its signature and a
/// status word (`true`); `InvalidArgument` naming both otherwise.
pub(super) fn match_params(entry: &EntryPoint, sizes: &[usize]) -> Result<bool> {
    let expected: Vec<usize> = std::iter::repeat_n(8, entry.binding_count as usize)
        .chain(std::iter::repeat_n(4, entry.constant_count as usize))
        .collect();
    if sizes == expected {
        return Ok(false);
    }
    if sizes.len() == expected.len() + 1
        && sizes[..expected.len()] == expected[..]
        && sizes[expected.len()] == 8
    {
        return Ok(true);
    }
    Err(invalid(format!(
        "kernel '{}' takes {} parameters of sizes {sizes:?} bytes, but its entry point declares \
         {} bindings and {} constants, which halcyon passes as {expected:?} bytes (an 8-byte \
         device pointer per binding, then a 4-byte u32 per constant), optionally followed by an \
         8-byte pointer to the status word; fix the kernel's signature or the EntryPoint",
        entry.name,
        sizes.len(),
        entry.binding_count,
        entry.constant_count
    )))
}
