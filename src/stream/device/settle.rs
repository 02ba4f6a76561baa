//! Settling a submission once its event completed or failed, and the fault probe.
//!
//! [`Core::complete`] takes the submission out of flight (a no-op if another path did), then
//! decides its outcome: the event's status (its work's error, or the sticky device error), an
//! error from enqueueing part of it, a failed semaphore it waited on natively, a nonzero status
//! word of one of its dispatches (written into the submission's pinned lease before the event
//! completed; see [`crate::stream::api`] for the convention); on success a read's bytes go to
//! its sink. Then the signal fence is settled in fence order: this device's semaphores are
//! advanced (the device reached the value) and their timelines retired, other semaphores are
//! signalled from the host; or every entry is failed with the error. Last, the timepoint is
//! cleared, dropping what the work held, its pinned lease goes back to the device's pool (or is
//! orphaned if its stream may still use it), and the record is recycled.

use std::sync::atomic::Ordering;

use crate::error::{Error, Result, StatusCode};
use crate::fence::Fence;
use crate::queue::{fail_in_order, failure_order};
use crate::semaphore::Semaphore;
use crate::stream::api::StreamApi;
use crate::stream::device::core::{Core, Stats, Via};
use crate::stream::device::reclaim::defer_frees;
use crate::stream::timepoint::{ReadInto, StatusWords};

impl<A: StreamApi> Core<A> {
    /// Settles submission `id` if nobody did yet. `observed` is the event's status if the
    /// caller already knows it; otherwise the event is queried (and a still pending event
    /// leaves the submission in flight for the probe).
    pub(crate) fn complete(&self, id: u64, observed: Option<Result<()>>, via: Via) {
        let Some(mut timepoint) = self.take(id) else {
            return;
        };
        // What the submission held is dropped below; memory freed by that goes to the
        // reclaimer, off this completion path.
        let _defer = defer_frees();
        let status = match observed {
            Some(status) => status,
            None => match timepoint
                .event
                .as_ref()
                .map(|e| self.api.query_event(e.handle()))
            {
                None | Some(Ok(true)) => Ok(()),
                Some(Ok(false)) if via != Via::Shutdown => {
                    self.put_back(id, timepoint);
                    return;
                }
                Some(Ok(false)) => Err(Error::new(
                    StatusCode::Aborted,
                    format!(
                        "{} was dropped while a submission was in flight and its stream did not \
                         finish it; keep the device alive until submitted work completes",
                        self.name
                    ),
                )),
                Some(Err(error)) => Err(error),
            },
        };
        // Unless the event completed successfully, the stream may still run the submission's
        // work (a device dropped before its stream finished it, or an event error that may not
        // have stopped the device): then its pinned lease must never be reused.
        let stream_done = status.is_ok();
        let mut result = status.and_then(|()| timepoint.error.take().map_or(Ok(()), Err));
        if result.is_ok() {
            // A failure after the value was reached is a later operation's: the input was whole.
            let failed = |(s, v): &(Semaphore, u64)| s.failure_before(*v);
            if let Some(error) = timepoint.waited.iter().find_map(failed) {
                result = Err(error);
            }
        }
        if result.is_ok() {
            let words = timepoint.host.as_ref().map(|h| h.start());
            result = self.check_status(&timepoint.status, words);
        }
        if result.is_ok() {
            if let Some((sink, into)) = timepoint.read.take() {
                let bytes = match into {
                    ReadInto::Staging(bytes) => bytes.into_vec(),
                    // SAFETY: `len` bytes of the submission's pinned lease, which the timepoint
                    // still holds; the device's copy into them completed with the event.
                    ReadInto::Pinned(ptr, len) => {
                        unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) }.to_vec()
                    }
                };
                sink.deliver(bytes);
            }
        }
        let by = match via {
            Via::Callback => Some(&self.stats.callback_completions),
            Via::Thread => Some(&self.stats.thread_completions),
            Via::Probe if result.is_ok() => Some(&self.stats.probe_completions),
            Via::Probe => Some(&self.stats.probe_failures),
            Via::Shutdown => None,
        };
        if let Some(counter) = by {
            Stats::bump(counter, 1);
        }
        Stats::bump(&self.stats.completed, 1);
        Stats::bump(&self.stats.failed, u64::from(result.is_err()));
        // The pinned lease goes back before the fence is settled, so work that awaited this
        // submission finds it idle.
        if let Some(host) = timepoint.host.take() {
            match stream_done {
                true => host.release(),
                false => host.orphan(),
            }
        }
        // What the work held goes before the fence is settled (frees of memory dropped with it
        // are made, or handed to the reclaimer, first), so an allocation made by a task that
        // awaited this submission finds the memory free, or pending (`Reclaim::flush`).
        let signal = std::mem::take(&mut timepoint.signal);
        // A failure waits for what the submission waited on its own signal semaphores (the
        // device ran it after those, but their completions may not have reached the host yet),
        // so it never overtakes the work before it on those timelines.
        let order = match result {
            Ok(()) => Fence::new(),
            Err(_) => {
                let waited: Fence = timepoint.waited.iter().map(|(s, v)| (s, *v)).collect();
                failure_order(&waited, &signal)
            }
        };
        self.timepoints.release(timepoint);
        self.settle(&signal, result, &order);
    }

    /// After the submission's event completed successfully (so its kernels' writes to their
    /// status words, at `words`, are visible): an `Internal` error naming the device, the entry
    /// point and the value if one of its dispatches set its status word.
    fn check_status(&self, status: &StatusWords, words: Option<*mut u8>) -> Result<()> {
        if status.entries.is_empty() {
            return Ok(());
        }
        let Some(words) = words else {
            return Err(Error::new(
                StatusCode::Internal,
                format!(
                    "{}: a submission's status words have no host memory",
                    self.name
                ),
            ));
        };
        let words = words.cast::<u32>();
        let mut failed = status
            .entries
            .iter()
            .enumerate()
            // SAFETY: the lease starts with one aligned `u32` per entry (zeroed at issue); the
            // kernels that write them completed with the event. Volatile: the device wrote them.
            .map(|(i, entry)| (unsafe { words.add(i).read_volatile() }, entry))
            .filter(|(value, _)| *value != 0);
        let Some((value, entry)) = failed.next() else {
            return Ok(());
        };
        let more = match failed.count() {
            0 => String::new(),
            n => format!(" ({n} more of the submission's dispatches set theirs too)"),
        };
        Err(Error::new(
            StatusCode::Internal,
            format!(
                "a dispatch of kernel '{entry}' on {} failed: it set its status word to \
                 {value}{more}",
                self.name
            ),
        ))
    }

    /// Signals `signal` in fence order (or fails it, once `order` has settled).
    fn settle(&self, signal: &Fence, result: Result<()>, order: &Fence) {
        if let Err(error) = result {
            return match self.reactor.get() {
                Some(reactor) => fail_in_order(reactor, order, signal.clone(), error),
                None => signal.fail(error),
            };
        }
        let mut first_error = None;
        for (semaphore, value) in signal.iter() {
            match self.own_timeline(semaphore) {
                Some(timeline) => {
                    semaphore.advance_to(value);
                    timeline.retire(value);
                }
                None => {
                    if let Err(error) = semaphore.signal(value) {
                        first_error.get_or_insert(error);
                    }
                }
            }
        }
        if let Some(error) = first_error {
            signal.fail(error);
        }
    }

    /// The fault probe: queries the event of every submission in flight and settles those whose
    /// event completed or failed. After a sticky device error host functions never run, so this
    /// is what turns the fault into errors on every affected fence. Runs on the reactor thread.
    pub(crate) fn probe(&self) {
        Stats::bump(&self.stats.probes, 1);
        for (id, event) in self.in_flight_events() {
            match self.api.query_event(event.handle()) {
                Ok(false) => {}
                Ok(true) => self.complete(id, Some(Ok(())), Via::Probe),
                Err(error) => self.complete(id, Some(Err(error)), Via::Probe),
            }
        }
    }

    /// After the reactor stopped: waits for every stream, stops the completion threads (their
    /// handles are joined by the caller) and settles whatever is still in flight.
    pub(crate) fn drain(&self) {
        let mut finished = true;
        for queue in &self.queues {
            finished &= self.api.synchronize_stream(queue.stream).is_ok();
            if let Some(callback) = queue.callback {
                finished &= self.api.synchronize_stream(callback).is_ok();
            }
        }
        self.streams_finished.store(finished, Ordering::Relaxed);
        for queue in &self.queues {
            if let Some(fifo) = &queue.fifo {
                fifo.stop();
            }
        }
    }

    /// Settles everything still in flight (after [`Core::drain`] and the completion threads
    /// ended).
    pub(crate) fn settle_leftovers(&self) {
        for id in self.in_flight_ids() {
            self.complete(id, None, Via::Shutdown);
        }
    }
}
