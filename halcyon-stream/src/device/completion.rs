//! How a stream device learns that submissions completed, and the fault probe.
//!
//! Three strategies, chosen by [`crate::CompletionStrategy`]:
//!
//! * **Host callbacks.** After a submission's completion event, the queue's dedicated callback
//!   stream waits on that event and runs a host function. The host function only posts a
//!   [`halcyon::backend::reactor::Completion::Call`] to the device's reactor (vendor host callbacks may not
//!   call the vendor API); the reactor settles the submission. A dedicated stream keeps the
//!   host function, which blocks the stream it runs on, off the work stream.
//! * **Completion threads.** One thread per queue takes the queue's submissions in order from a
//!   [`Fifo`] (a [`Handoff`]) and blocks in `synchronize_event` on each (events created with
//!   [`crate::EventFlags::BLOCKING_SYNC`], so it sleeps rather than spins), then settles
//!   it. The thread is idle on a condition variable while the queue is empty. With a nonzero
//!   spin budget ([`crate::StreamDeviceOptions::completion_spin`]) it first polls, for
//!   up to the budget, both for the next submission (`Fifo::next`) and for its event
//!   (`query_event`) before it sleeps: an OS wake-up (an interrupt, a futex wake of a sleeping
//!   thread) costs microseconds that a short poll saves when work completes quickly, and a
//!   bounded budget caps what the poll costs when it does not.
//! * **Device-written flags.** After each submission's completion event, its stream writes the
//!   submission's value into the queue's word of pinned memory, and one scanner thread per
//!   device reads the words with plain loads and settles what they reached ([`crate::flags`]
//!   holds the protocol, `flag_words.rs` the words). The scanner settles through
//!   [`Core::complete`] without a known status, so the event is queried once: an API that
//!   reports a stream's error at its next record (the host stream API) still fails the
//!   submission.
//!
//! **The fault probe.** After a sticky device error host functions never run and flags are
//! never written, so with host callbacks or flags a fault would leave every fence in flight
//! unsettled. The reactor therefore sleeps in
//! a [`ProbeParker`]: while submissions are in flight (or were recently), its sleep has a
//! timeout, and at most once per probe interval it queries the event of every submission in
//! flight ([`super::core::Core::probe`]), settling those that completed and failing those whose
//! event reports an error, with that error (whose message names the cause). An idle device's
//! reactor sleeps without a timeout. With completion threads there is no probe: a thread's
//! `synchronize_event` returns the sticky error itself, for its submission and, at once, for
//! each one queued behind it, so the probe would only duplicate the threads' work, waking the
//! reactor every interval while work runs. (It would also stall the reactor on HIP, whose
//! `hipEventQuery` waits while another thread is in `hipEventSynchronize` on the same event.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::api::StreamApi;
use crate::device::core::{Core, Via};
use crate::device::CompletionStrategy;
use crate::event_pool::Event;
use crate::handoff::Handoff;
use halcyon::backend::reactor::{Parker, Unpark};

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// One queue's submissions for its completion thread, in stream order: `(id, event)`.
pub(crate) type Fifo = Handoff<(u64, Event)>;

/// A completion thread: settles queue `index`'s submissions as their events complete.
pub(crate) fn completion_thread<A: StreamApi>(core: Arc<Core<A>>, index: usize) {
    let Some(fifo) = core.queues[index].fifo.as_ref() else {
        return;
    };
    core.api.adopt_thread();
    while let Some((id, event)) = fifo.next() {
        let status = wait(&*core.api, &event, fifo.spin());
        core.complete(id, Some(status), Via::Thread);
    }
}

/// Waits for `event`: polls `query_event` for up to `spin`, then sleeps in `synchronize_event`.
fn wait<A: StreamApi>(api: &A, event: &Event, spin: Duration) -> halcyon::Result<()> {
    if !spin.is_zero() {
        let start = Instant::now();
        loop {
            match api.query_event(event.handle()) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(error) => return Err(error),
            }
            if start.elapsed() >= spin {
                break;
            }
            std::hint::spin_loop();
        }
    }
    api.synchronize_event(event.handle())
}

/// The reactor's sleep: a flag and a condition variable, so the sleep can have a timeout.
#[derive(Default)]
pub(crate) struct ParkSignal {
    woken: Mutex<bool>,
    wake: Condvar,
    /// Set while the reactor sleeps (or decides to) without a timeout.
    indefinite: AtomicBool,
}

impl ParkSignal {
    fn unpark(&self) {
        *lock(&self.woken) = true;
        self.wake.notify_one();
    }

    /// A submission went in flight: if the reactor sleeps without a timeout (the device was
    /// idle), wake it so it sleeps with one and the probe covers the new work.
    pub(crate) fn work_arrived(&self) {
        // Pairs with the reactor's store of `indefinite` before its read of the in-flight count
        // (both SeqCst): either the reactor sees the new submission, or this sees it sleeping.
        if self.indefinite.load(Ordering::SeqCst) {
            self.unpark();
        }
    }
}

struct ParkUnpark(Arc<ParkSignal>);

impl Unpark for ParkUnpark {
    fn unpark(&self) {
        self.0.unpark();
    }
}

/// The reactor's [`Parker`]: sleeps until posted to, with the probe interval as timeout while
/// the device is busy, and runs the fault probe (see the [module docs](self)). With completion
/// threads there is no probe, and the reactor only sleeps until posted to.
pub(crate) struct ProbeParker<A: StreamApi> {
    core: Arc<Core<A>>,
    /// Whether the probe runs (host-callback completion).
    probing: bool,
    seen_epoch: u64,
    last_probe: Instant,
}

impl<A: StreamApi> ProbeParker<A> {
    pub(crate) fn new(core: Arc<Core<A>>) -> Self {
        ProbeParker {
            probing: core.strategy != CompletionStrategy::CompletionThread,
            core,
            seen_epoch: 0,
            last_probe: Instant::now(),
        }
    }
}

impl<A: StreamApi> Parker for ProbeParker<A> {
    fn park(&mut self) {
        let core = &self.core;
        let signal = &core.park;
        let mut woken = lock(&signal.woken);
        if !self.probing {
            // `indefinite` stays false: new work need not wake a reactor that never probes.
            while !*woken {
                woken = signal.wake.wait(woken).unwrap_or_else(|p| p.into_inner());
            }
        } else if !*woken {
            signal.indefinite.store(true, Ordering::SeqCst);
            let epoch = core.epoch.load(Ordering::SeqCst);
            let busy = core.in_flight_count.load(Ordering::SeqCst) > 0 || epoch != self.seen_epoch;
            self.seen_epoch = epoch;
            if busy {
                signal.indefinite.store(false, Ordering::SeqCst);
                woken = signal
                    .wake
                    .wait_timeout(woken, core.probe_interval)
                    .map(|(guard, _)| guard)
                    .unwrap_or_else(|p| p.into_inner().0);
            } else {
                while !*woken {
                    woken = signal.wake.wait(woken).unwrap_or_else(|p| p.into_inner());
                }
                signal.indefinite.store(false, Ordering::SeqCst);
            }
        }
        *woken = false;
        drop(woken);
        if self.probing && core.in_flight() > 0 && self.last_probe.elapsed() >= core.probe_interval
        {
            self.last_probe = Instant::now();
            core.probe();
        }
    }

    fn unparker(&self) -> Box<dyn Unpark> {
        Box::new(ParkUnpark(self.core.park.clone()))
    }

    fn started(&mut self) {
        self.core.api.adopt_thread();
    }
}
