//! Which device is current on the calling thread: HIP keeps it per thread, and every call of
//! [`HipStreamApi`] makes its device current for the call and the thread's previous device
//! current again afterwards (see [Threads](super#threads)).
//!
//! The threads the stream layer runs for the API ([`StreamApi::adopt_thread`]) keep the
//! device current for good. [`HipStreamApi::schedule_blocking_sync`] sets how the device's
//! synchronisations wait.
//!
//! [`StreamApi::adopt_thread`]: super::StreamApi::adopt_thread

use std::cell::Cell;

use halcyon::Result;

use super::HipStreamApi;
use crate::result::Hip;
use crate::sys;

thread_local! {
    /// The device a `HipStreamApi` left current on this thread: set on the threads the stream
    /// layer runs for the API ([`StreamApi::adopt_thread`]), where no other code's device needs
    /// giving back.
    ///
    /// [`StreamApi::adopt_thread`]: super::StreamApi::adopt_thread
    static LEFT: Cell<Option<i32>> = const { Cell::new(None) };
}

/// A device [`bind_device`] made current in place of another: dropping it makes the other
/// current again, so other HIP code on the thread finds the device it chose.
#[must_use = "the device is only bound while the guard lives"]
pub(crate) struct Bound {
    restore: Option<(Hip, i32)>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        if let Some((hip, previous)) = self.restore {
            let _ = hip.set_device(previous);
        }
    }
}

/// Makes `device` current on the calling thread (`hipSetDevice`) unless it is (`hipGetDevice`,
/// a thread-local read in the runtime). The device that was current is made current again when
/// the guard drops, unless it is one this backend left current on an adopted thread.
pub(crate) fn bind_device(hip: Hip, device: i32) -> Result<Bound> {
    let current = hip.get_device().ok();
    if current == Some(device) {
        return Ok(Bound { restore: None });
    }
    hip.set_device(device)?;
    match current {
        Some(previous) if LEFT.with(Cell::get) != Some(previous) => Ok(Bound {
            restore: Some((hip, previous)),
        }),
        _ => {
            LEFT.with(|left| left.set(Some(device)));
            Ok(Bound { restore: None })
        }
    }
}

impl HipStreamApi {
    /// Makes threads that wait for this device sleep until its work completed
    /// (`hipSetDeviceFlags(hipDeviceScheduleBlockingSync)`, keeping the flags' other bits)
    /// instead of polling. Before ROCm 6.3 the device's scheduling, not an event's
    /// `hipEventBlockingSync`, decides how `hipEventSynchronize` waits, and HIP starts every
    /// device polling (hipamd and clr `SetActiveWait(true)` at start-up), so each completion
    /// thread would keep a CPU core busy for as long as work is in flight. The flag is the
    /// device's, for the whole process: other HIP code's synchronisations on it sleep too.
    /// [`crate::HipDriver::create_device_with`] calls this where it matters (see
    /// [`crate::HipDeviceOptions::blocking_sync`]). `Unimplemented` where the runtime lacks
    /// `hipSetDeviceFlags`.
    pub fn schedule_blocking_sync(&self) -> Result<()> {
        let _bound = self.bind()?;
        let others = self
            .hip
            .device_flags()
            .map_or(0, |flags| flags & !sys::hipDeviceScheduleMask);
        self.hip
            .set_device_flags(others | sys::hipDeviceScheduleBlockingSync)
    }

    /// Makes this API's device current on the calling thread for as long as the returned guard
    /// lives (see [Threads](super#threads)).
    pub(super) fn bind(&self) -> Result<Bound> {
        bind_device(self.hip, self.device)
    }

    /// [`StreamApi::adopt_thread`](super::StreamApi::adopt_thread).
    pub(super) fn adopt_thread(&self) {
        // Only halcyon's work runs here: the device may stay current for good.
        if self.hip.set_device(self.device).is_ok() {
            LEFT.with(|left| left.set(Some(self.device)));
        }
    }
}
