//! Binding the device's primary context to the calling thread ([`CudaApi::bind`]; the rules
//! are in the [module docs](super), "Context binding"): a thread-local remembers which
//! `CudaApi` left its context current there, and a guard ([`Bound`]) makes current again a
//! context that other code on the thread had current.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use cudarc::driver::sys::{CUcontext, CUdevice};
use halcyon::Result;

use super::CudaApi;
use crate::result::check;
use crate::sys;

/// The `CudaApi` that last left its context current on a thread.
struct Left {
    id: u64,
    context: CUcontext,
    /// The device whose primary context `context` is.
    device: CUdevice,
    /// Dead once that `CudaApi` dropped: its release may have destroyed the context.
    alive: Weak<()>,
}

/// Whether a context a dropped `CudaApi` left current on this thread is gone: its device's
/// primary context is no longer retained by anyone (another `CudaApi`, the CUDA runtime, the
/// application), so making it current again would hand the driver a destroyed context. While
/// anyone still retains it the context lives, and other code on the thread may be using it:
/// it is given back like any other. A state the driver cannot tell counts as gone.
fn left_context_is_gone(device: CUdevice) -> bool {
    let mut flags: std::ffi::c_uint = 0;
    let mut active: std::ffi::c_int = 0;
    // SAFETY: valid out-pointers; `device` is a device handle the driver gave a `CudaApi`
    // (devices are never destroyed).
    let code = unsafe { sys::cuDevicePrimaryCtxGetState(device, &mut flags, &mut active) };
    !code.is_success() || active == 0
}

thread_local! {
    /// The `CudaApi` that last made its context current on this thread and left it there.
    static BOUND: RefCell<Option<Left>> = const { RefCell::new(None) };
}

/// A context [`CudaApi::bind`] made current in place of another: dropping it makes the other
/// current again, so code that shares the thread (the CUDA runtime after `cudaSetDevice`, a
/// library that pushed its own context) finds its context where it left it.
#[must_use = "the context is only bound while the guard lives"]
pub(super) struct Bound {
    /// The context that was current before, to make current again.
    restore: Option<CUcontext>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some(previous) = self.restore {
            // SAFETY: `previous` was current on this thread when the guard was made, and making
            // a context current is allowed from any thread; if its owner destroyed it since,
            // the driver refuses it, which leaves this thread's context to that owner.
            let _ = unsafe { sys::cuCtxSetCurrent(previous) };
        }
    }
}

impl CudaApi {
    /// Makes this device's context current on the calling thread, unless it already is, for as
    /// long as the returned guard lives (see the [module docs](super)): if another context was
    /// current, dropping the guard makes it current again.
    pub(super) fn bind(&self) -> Result<Bound> {
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        if !unsafe { sys::cuCtxGetCurrent(&mut current) }.is_success() {
            current = std::ptr::null_mut();
        }
        // Who left `current` current: (whether it was this API, whether it was a `CudaApi` now
        // dropped). `None`: no `CudaApi` left it (another library, the CUDA runtime, nothing).
        let left = BOUND.with(|b| {
            b.borrow()
                .as_ref()
                .filter(|l| l.context == current)
                .map(|l| (l.id == self.id, l.alive.strong_count() == 0, l.device))
        });
        if left.is_some_and(|(this, _, _)| this) {
            return Ok(Bound { restore: None });
        }
        // SAFETY: the context is retained for as long as `self` lives.
        check(unsafe { sys::cuCtxSetCurrent(self.context) }, || {
            format!(
                "cuCtxSetCurrent(primary context of device {})",
                self.ordinal
            )
        })?;
        // A context a dropped `CudaApi` left behind is not given back once nobody retains it
        // (destroyed); while someone does, it is given back like any other context, since the
        // application may be using it on this thread.
        let stale =
            left.is_some_and(|(_, dropped, device)| dropped && left_context_is_gone(device));
        if !stale && left.is_some_and(|(_, dropped, _)| dropped) {
            // Someone else's context from now on: later calls give it back without asking.
            BOUND.with(|b| *b.borrow_mut() = None);
        }
        if current.is_null() || current == self.context || stale {
            // Nobody else's context to give back: this one stays current for the next call.
            BOUND.with(|b| {
                *b.borrow_mut() = Some(Left {
                    id: self.id,
                    context: self.context,
                    device: self.device,
                    alive: Arc::downgrade(&self.alive),
                })
            });
            Ok(Bound { restore: None })
        } else {
            Ok(Bound {
                restore: Some(current),
            })
        }
    }
}
