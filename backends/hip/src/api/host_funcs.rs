//! Host functions on a stream: `hipLaunchHostFunc` where the runtime exports it, else a
//! stream callback (`hipStreamAddCallback`, all HIP 5.2 has). See
//! [Host functions](super#host-functions).
//!
//! HIP gets the boxed [`HostFunc`] as user data and hands it back to an `extern "C"`
//! trampoline, which runs it (or drops it unrun after a stream error) and never lets a panic
//! unwind into HIP.

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use halcyon::Result;
use halcyon_stream::{HostFunc, StreamHandle};

use super::streams::RawStream;
use super::HipStreamApi;
use crate::sys;

/// A host function handed to HIP as user data: HIP holds one reference of the `Arc`
/// ([`host_func_user_data`]), given back to a trampoline. Whoever takes the function first runs
/// it (or drops it unrun); see [`HipStreamApi`]'s `enqueue_host_func` for why the enqueuing
/// thread may be that one.
type HostFuncCell = Mutex<Option<HostFunc>>;

/// `func` in a fresh cell, and the user data for HIP: one reference to the cell, consumed by
/// [`consume_host_func`].
pub(super) fn host_func_user_data(func: HostFunc) -> (Arc<HostFuncCell>, *mut c_void) {
    let cell = Arc::new(Mutex::new(Some(func)));
    let user_data = Arc::into_raw(cell.clone()).cast_mut().cast::<c_void>();
    (cell, user_data)
}

/// Takes the cell's function, if it is still there, and runs it (or drops it, when `run` is
/// false), never letting a panic unwind out: not from the function, nor from its payload.
pub(super) fn settle_host_func(cell: &HostFuncCell, run: bool) {
    let func = cell.lock().unwrap_or_else(|p| p.into_inner()).take();
    let Some(func) = func else {
        return;
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        if run {
            func()
        } else {
            drop(func)
        }
    }));
    if let Err(payload) = outcome {
        // Its `Drop` could panic too, and nothing may unwind into HIP.
        std::mem::forget(payload);
    }
}

/// Settles (see [`settle_host_func`]) the cell HIP hands back as user data, and lets go of
/// HIP's reference to it.
///
/// # Safety
/// `user_data` is the pointer [`host_func_user_data`] made, consumed here: HIP hands it back
/// once.
unsafe fn consume_host_func(user_data: *mut c_void, run: bool) {
    // SAFETY: guaranteed by the caller: HIP's reference to the cell, given back once.
    let cell = unsafe { Arc::from_raw(user_data.cast_const().cast::<HostFuncCell>()) };
    settle_host_func(&cell, run);
}

/// `hipStreamCallback_t` trampoline: runs the host function on success, drops it unrun when
/// the stream reports an error.
pub(super) unsafe extern "C" fn stream_callback(
    _stream: sys::hipStream_t,
    status: sys::hipError_t,
    user_data: *mut c_void,
) {
    // SAFETY: HIP passes back the user data `launch_host_func` gave it, once.
    unsafe { consume_host_func(user_data, status == sys::hipSuccess) }
}

/// `hipHostFn_t` trampoline (`hipLaunchHostFunc`, which reports no status).
pub(super) unsafe extern "C" fn host_fn(user_data: *mut c_void) {
    // SAFETY: HIP passes back the user data `launch_host_func` gave it, once.
    unsafe { consume_host_func(user_data, true) }
}

impl HipStreamApi {
    /// Enqueues `func` on `stream`: `hipLaunchHostFunc` if exported, else a stream callback.
    /// If HIP refuses it, `func` is dropped unrun on this thread.
    pub(super) fn enqueue_host_func(&self, stream: &RawStream, func: HostFunc) -> Result<()> {
        let (cell, user_data) = host_func_user_data(func);
        // SAFETY: a live stream; `user_data` is HIP's reference to the cell, handed back to the
        // trampoline at most once, which consumes it; the trampolines call no HIP function and
        // never unwind.
        let enqueued = unsafe {
            if self.hip.has_launch_host_func() {
                self.hip.launch_host_func(stream.raw, host_fn, user_data)
            } else {
                self.hip
                    .stream_add_callback(stream.raw, stream_callback, user_data)
            }
        };
        if enqueued.is_err() {
            // The function is taken here and dropped unrun, on this thread, which may call HIP.
            // HIP's reference stays with HIP, leaked if it never calls back: an error does not
            // prove that the callback was not queued (clr's hipStreamAddCallback queues the
            // callback's marker before a second marker whose creation may fail), and a callback
            // that still comes finds the cell empty.
            settle_host_func(&cell, false);
        }
        enqueued
    }

    /// [`StreamApi::launch_host_func`](super::StreamApi::launch_host_func).
    pub(super) fn launch_host_func(&self, stream: StreamHandle, func: HostFunc) -> Result<()> {
        let stream = self.stream(stream)?;
        let _bound = self.bind()?;
        self.enqueue_host_func(&stream, func)
    }
}
