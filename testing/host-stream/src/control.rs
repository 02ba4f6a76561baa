//! The host stream API's device-wide state: the sticky fault, test holds, and which operations
//! are running.
//!
//! Every operation a stream thread runs is **admitted** first: admission blocks while a
//! [`crate::StreamHold`] exists (so tests can keep work in flight), and refuses
//! once a fault is being injected. Admitted operations count as running until they finish.
//! [`Control::inject_fault`] stops admissions, waits for the running operations to finish, and
//! only then publishes the fault: so once a fault is visible (queries fail, fences get failed),
//! no operation touches memory any more, exactly what failing fences early requires.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

use halcyon::{Error, StatusCode};

thread_local! {
    /// Whether this thread is running an admitted operation (a kernel or host function).
    static IN_OPERATION: Cell<bool> = const { Cell::new(false) };
}

#[derive(Default)]
struct State {
    holds: usize,
    running: usize,
    stopping: bool,
    /// The API is shutting down: nothing is admitted, holds or not.
    closed: bool,
    fault: Option<Error>,
}

/// See the [module docs](self).
#[derive(Default)]
pub(crate) struct Control {
    state: Mutex<State>,
    changed: Condvar,
    /// Set once the fault is published (the fast path of [`Control::check`]).
    faulted: AtomicBool,
}

/// Why an operation was not admitted: the device faulted (or is faulting), or the API is
/// shutting down. Either way the operation is dropped unrun.
pub(crate) struct Refused;

impl Control {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Err(fault)` once the device faulted: every API call that touches the device fails.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if !self.faulted.load(Ordering::Acquire) {
            return Ok(());
        }
        Err(self.fault().unwrap_or_else(|| {
            Error::new(
                StatusCode::Internal,
                "host stream API faulted without a cause",
            )
        }))
    }

    /// The published fault, if any.
    pub(crate) fn fault(&self) -> Option<Error> {
        if !self.faulted.load(Ordering::Acquire) {
            return None;
        }
        self.lock().fault.clone()
    }

    /// Whether the fault is published (cheap; for wait loops holding other locks).
    pub(crate) fn is_faulted(&self) -> bool {
        self.faulted.load(Ordering::Acquire)
    }

    /// Admits one operation: waits while held; refuses once stopping. Pair with
    /// [`Control::finish`].
    pub(crate) fn admit(&self) -> Result<(), Refused> {
        let mut state = self.lock();
        loop {
            if state.stopping || state.closed {
                return Err(Refused);
            }
            if state.holds == 0 {
                state.running += 1;
                IN_OPERATION.with(|f| f.set(true));
                return Ok(());
            }
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits while held; refuses once stopping; does not count as running (for waits on events,
    /// which may block for long and touch no memory).
    pub(crate) fn admit_wait(&self) -> Result<(), Refused> {
        let mut state = self.lock();
        loop {
            if state.stopping || state.closed {
                return Err(Refused);
            }
            if state.holds == 0 {
                return Ok(());
            }
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// An admitted operation finished.
    pub(crate) fn finish(&self) {
        IN_OPERATION.with(|f| f.set(false));
        let mut state = self.lock();
        state.running -= 1;
        let notify = state.stopping && state.running <= 1;
        drop(state);
        if notify {
            self.changed.notify_all();
        }
    }

    /// The API is shutting down: refuses every admission from now on (held ones included).
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Starts a hold: no operation is admitted until every hold ended.
    pub(crate) fn hold(&self) {
        self.lock().holds += 1;
    }

    /// Ends a hold.
    pub(crate) fn release(&self) {
        let mut state = self.lock();
        state.holds -= 1;
        let open = state.holds == 0;
        drop(state);
        if open {
            self.changed.notify_all();
        }
    }

    /// Stops admissions, waits for running operations (other than the caller's own, when called
    /// from a kernel or host function) and publishes `fault`. Returns `false` if a fault was
    /// already published (the first one stays). The caller then wakes every waiter.
    pub(crate) fn inject_fault(&self, fault: Error) -> bool {
        let own = usize::from(IN_OPERATION.with(|f| f.get()));
        let mut state = self.lock();
        if state.stopping {
            // Another injection came first: its fault stands once published.
            while state.fault.is_none() {
                state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            return false;
        }
        state.stopping = true;
        self.changed.notify_all(); // held admissions now refuse
        while state.running > own {
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.fault = Some(fault);
        self.faulted.store(true, Ordering::Release);
        drop(state);
        self.changed.notify_all();
        true
    }
}
