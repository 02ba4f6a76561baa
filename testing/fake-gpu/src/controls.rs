//! The controls a test reads and steers the fake through (`halcyon_fake_gpu_*`, see
//! [`crate::client::Fake`]).

use std::ffi::{c_int, c_uint};
use std::sync::atomic::Ordering;

use cudarc::driver::sys::CUresult;

use crate::ffi::put;
use crate::model::alloc::set_offset_mapped;
use crate::model::contract::{set_record_only, sticky, violations};
use crate::model::driver::{
    device_count, driver, CAPTURES_INVALIDATED, COLLECTIVES_RUN, CONTEXTS_DESTROYED,
    GRAPH_LAUNCHES, HOST_FUNCS_RUN, KERNELS_RUN, TIMED_RECORDS,
};
use crate::model::memory::memory;
use crate::FakeStats;

/// Makes `cuMemHostGetDevicePointer` and `hipHostGetDevicePointer` answer a device address
/// that differs from the host address (non-zero), as on a system where pinned memory has no
/// single address, or the host address again (0, the default).
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_offset_mapped_pointers(offset: c_int) {
    set_offset_mapped(offset != 0);
}

/// Writes the fake's [`FakeStats`] to `out`.
///
/// # Safety
/// `out` must be valid for a write of [`FakeStats`].
#[no_mangle]
pub unsafe extern "C" fn halcyon_fake_gpu_stats(out: *mut FakeStats) {
    let stats = {
        let d = driver();
        let (allocations, largest_pinned) = {
            let m = memory();
            (m.count() as u64, m.largest_pinned() as u64)
        };
        FakeStats {
            context_retains: d.retains.iter().sum(),
            contexts_destroyed: CONTEXTS_DESTROYED.load(Ordering::Relaxed),
            streams: d.streams.len() as u64,
            events: d.events.len() as u64,
            modules: d.modules.len() as u64,
            graphs: (d.graphs.len() + d.execs.len()) as u64,
            pools: d.pools.len() as u64,
            allocations,
            largest_pinned,
            kernels_run: KERNELS_RUN.load(Ordering::Relaxed),
            timed_records: TIMED_RECORDS.load(Ordering::Relaxed),
            host_funcs_run: HOST_FUNCS_RUN.load(Ordering::Relaxed),
            graph_launches: GRAPH_LAUNCHES.load(Ordering::Relaxed),
            captures_invalidated: CAPTURES_INVALIDATED.load(Ordering::Relaxed),
            peer_copies: crate::model::peer::PEER_COPIES.load(Ordering::Relaxed),
            peer_copies_unenabled: crate::model::peer::PEER_COPIES_UNENABLED
                .load(Ordering::Relaxed),
            violations: violations().len() as u64,
            nccl_comms: d.comms.len() as u64,
            collectives_run: COLLECTIVES_RUN.load(Ordering::Relaxed),
        }
    };
    // SAFETY: the caller's contract.
    let _ = unsafe { put(out, stats) };
}

/// Copies the violations so far (one per line) into `buffer` (at most `capacity` bytes) and
/// returns their full length.
///
/// # Safety
/// `buffer` must be valid for `capacity` bytes.
#[no_mangle]
pub unsafe extern "C" fn halcyon_fake_gpu_violations(buffer: *mut u8, capacity: usize) -> usize {
    let text = violations().join("\n");
    if !buffer.is_null() {
        // SAFETY: the caller's contract; at most `capacity` bytes.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buffer, text.len().min(capacity)) };
    }
    text.len()
}

/// Makes violations recorded only (non-zero) or fatal (0, the default).
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_record_only(record_only: c_int) {
    set_record_only(record_only != 0);
}

/// Makes the next kernel that runs fault the device with `code` (one the fake names; others
/// are `CUDA_ERROR_LAUNCH_FAILED`).
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_fault_next_kernel(code: c_uint) {
    use CUresult::*;
    let code = [CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED]
        .into_iter()
        .find(|c| *c as c_uint == code)
        .unwrap_or(CUDA_ERROR_LAUNCH_FAILED);
    crate::model::kernels::fault_next_kernel(code);
}

/// Whether a device has faulted: the sticky error's number of the first device that has, or
/// 0.
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_sticky_error() -> c_uint {
    (0..device_count())
        .find_map(sticky)
        .map_or(0, |code| code as c_uint)
}

/// Makes the next NCCL collective to complete write nothing and set the async error of every
/// rank of its communicator group to `code` (an `ncclResult_t`: 1, 2, 3, 6 or 8; others are
/// `ncclSystemError`); 0 cancels.
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_fault_next_collective(code: c_uint) {
    use cudarc::nccl::sys::ncclResult_t::*;
    let found = [
        ncclUnhandledCudaError,
        ncclSystemError,
        ncclInternalError,
        ncclRemoteError,
        ncclTimeout,
    ]
    .into_iter()
    .find(|c| *c as c_uint == code);
    crate::nccl::fault_next_collective(match found {
        Some(found) => found,
        None if code == 0 => ncclSuccess,
        None => ncclSystemError,
    });
}

/// Sets how long an NCCL rank waits for its peers before the fake gives up, in milliseconds
/// (0: the defaults, 30 s for an initialisation and 60 s for an operation).
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_nccl_wait_limit_ms(ms: u64) {
    crate::nccl::set_wait_limit(ms);
}

/// Lets every pair of devices access each other's memory (non-zero, the default) or none
/// (0): what `cuDeviceCanAccessPeer` and `hipDeviceCanAccessPeer` answer from now on. Access
/// already enabled stays enabled.
#[no_mangle]
pub extern "C" fn halcyon_fake_gpu_peer_access(supported: c_int) {
    crate::model::peer::set_supported(supported != 0);
}
