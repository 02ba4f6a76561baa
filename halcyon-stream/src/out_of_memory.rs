//! Out of device memory: trim the pool, try once more.
//!
//! A stream backend with a stream-ordered pool (`cuMemAllocAsync`, `hipMallocAsync`) keeps the
//! blocks freed into it for reuse, so a call that takes device memory *outside* the pool can run
//! out while the memory it needs sits idle there. Every such call (allocation, module loading,
//! graph instantiation) goes through [`retry_after_trim`].

/// Makes `call`; if `out_of_memory` says it ran out of device memory, gives back what the
/// backend's stream-ordered pool keeps (`trim`, which answers whether it released anything)
/// and makes it once more. For every call that takes device memory outside the pool
/// (allocation, module loading, graph instantiation): freed blocks the pool keeps for reuse
/// would otherwise make such a call fail while the memory it needs is idle. The stream layer
/// waits for frees still on their way before it retries an allocation of its own, so by then
/// the host has seen them complete and the trim releases them.
pub fn retry_after_trim<R>(
    mut call: impl FnMut() -> R,
    out_of_memory: impl FnOnce(&R) -> bool,
    trim: impl FnOnce() -> bool,
) -> R {
    let first = call();
    if out_of_memory(&first) && trim() {
        call()
    } else {
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_is_retried_once_after_a_trim_that_released_something() {
        for (trimmed, calls_expected) in [(true, 2), (false, 1)] {
            let mut calls = 0;
            let r = retry_after_trim(
                || {
                    calls += 1;
                    calls
                },
                |&r| r == 1,
                || trimmed,
            );
            assert_eq!((r, calls), (calls_expected, calls_expected));
        }
        let mut calls = 0;
        let r = retry_after_trim(
            || {
                calls += 1;
                "ok"
            },
            |_| false,
            || panic!("no trim without running out of memory"),
        );
        assert_eq!((r, calls), ("ok", 1));
    }
}
