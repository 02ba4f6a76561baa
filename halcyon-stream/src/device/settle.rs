//! Settling a submission once its event completed or failed, and the fault probe.
//!
//! [`Core::complete`] takes the submission out of flight (a no-op if another path did), then
//! places a profiled operation's device times in its record (see [`super::timing`]), then
//! decides its outcome: the event's status (its work's error, or the sticky device error), an
//! error from enqueueing part of it, a failed semaphore it waited on natively, a nonzero status
//! word of one of its dispatches (written into the submission's pinned lease before the event
//! completed; see [`crate::api`] for the convention); on success a read's bytes go to
//! its sink. Then the signal fence is settled in fence order: this device's semaphores are
//! advanced (the device reached the value) and their timelines retired, other semaphores are
//! signalled from the host; or every entry is failed with the error. Last, the timepoint is
//! cleared, dropping what the work held, its pinned lease goes back to the device's pool (or is
//! orphaned if its stream may still use it), and the record is recycled.
//!
//! A submission whose stream waited on the event of one not yet settled (its event completed
//! first, but its outcome may still be a failure: see [`crate::timeline`]) is settled
//! from a reactor task once that one is, failed with its error if it failed. Its own outcome
//! is resolved when its fence is: reached, or failed with the error.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::api::StreamApi;
use crate::device::core::{Core, Stats, Via};
use crate::device::reclaim::defer_frees;
use crate::timeline::StreamSemaphore;
use crate::timepoint::{ReadInto, StatusWords};
use halcyon::backend::reactor::ReactorHandle;
use halcyon::backend::SemaphoreExt;
use halcyon::backend::Work;
use halcyon::backend::{fail_in_order, failure_order};
use halcyon::Fence;
use halcyon::{Error, Result, StatusCode};
use halcyon::{Semaphore, Wait};

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
        // Device times go into the operation's record before its fence is settled (so device
        // end ≤ completed); its timing events completed before its completion event did. On an
        // API that reports a stream's error at its next record (the host stream API), they
        // captured the work's error (or a failed stream wait's) instead of the completion
        // event: their status counts too.
        let status = match (&self.timing, timepoint.timing.take()) {
            (Some(timing), Some(span)) if stream_done => {
                let captured = span.status(&*self.api);
                timing.settle(&*self.api, timepoint.queue, span);
                captured
            }
            (Some(timing), Some(span)) => {
                timing.abandon(span);
                status
            }
            _ => status,
        };
        let enqueued = timepoint.error.is_none();
        let mut result = status.and_then(|()| timepoint.error.take().map_or(Ok(()), Err));
        if let (true, Some(Work::Collective(collective))) = (enqueued, &timepoint.work) {
            // The engine's verdict: its communicator may have failed (or been aborted) after
            // the collective was enqueued, and the stream then passed it without it running.
            let verdict = collective.channel().backend().outcome();
            if result.is_ok() {
                result = verdict;
            }
        }
        if result.is_ok() {
            // A failure after the value was reached is a later operation's: the input was whole.
            let failed = |(s, v): &(Semaphore, u64)| SemaphoreExt::failure_before(s, *v);
            if let Some(error) = timepoint.waited.iter().find_map(failed) {
                result = Err(error);
            }
        }
        // The work behind the events its stream waited on may have failed after the event
        // completed (its own inputs, its status words): then this fails with it. One not
        // settled yet is waited for below, before the signal fence is settled.
        let mut unsettled = Vec::new();
        if result.is_ok() {
            for input in &timepoint.inputs {
                match input.query() {
                    Ok(0) if via != Via::Shutdown => unsettled.push(input.wait(1)),
                    Ok(_) => {}
                    Err(error) => {
                        result = Err(error);
                        break;
                    }
                }
            }
        }
        if result.is_ok() {
            let words = timepoint.host.as_ref().map(|h| h.start());
            result = self.check_status(&timepoint.status, words);
        }
        if result.is_ok() {
            if let Some((sink, into)) = timepoint.read.take() {
                match into {
                    ReadInto::Staging(bytes) => sink.deliver(bytes.into_vec()),
                    ReadInto::Pinned(ptr, len) => {
                        // SAFETY: `len` bytes of the submission's pinned lease, which the
                        // timepoint still holds; the device's copy into them completed with
                        // the event.
                        let bytes = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), len) };
                        sink.deliver_copy(bytes)
                    }
                }
            }
        }
        let by = match via {
            Via::Callback => Some(&self.stats.callback_completions),
            Via::Thread => Some(&self.stats.thread_completions),
            Via::Flag => Some(&self.stats.flag_completions),
            Via::Probe if result.is_ok() => Some(&self.stats.probe_completions),
            Via::Probe => Some(&self.stats.probe_failures),
            Via::Shutdown => None,
        };
        if let Some(counter) = by {
            Stats::bump(counter, 1);
        }
        // A failure the probe found is a sticky device fault: the device is lost.
        if let (Via::Probe, Err(error)) = (via, &result) {
            if !self.lost.swap(true, std::sync::atomic::Ordering::Relaxed) {
                halcyon::backend::device_lost(&self.name, error);
            }
        }
        Stats::bump(&self.stats.completed, 1);
        // The pinned lease goes back before the fence is settled, so work that awaited this
        // submission finds it idle.
        if let Some(host) = timepoint.host.take() {
            match stream_done {
                true => host.release(),
                false => host.orphan(),
            }
        }
        if !stream_done {
            self.keep_for_stream(&mut timepoint, None);
        }
        // What the work held goes before the fence is settled (frees of memory dropped with it
        // are made, or handed to the reclaimer, first), so an allocation made by a task that
        // awaited this submission finds the memory free, or pending (`Reclaim::flush`).
        let signal = std::mem::take(&mut timepoint.signal);
        // A failure waits for what the submission waited on its own signal semaphores (the
        // device ran it after those, but their completions may not have reached the host yet),
        // so it never overtakes the work before it on those timelines.
        let order = match (&result, unsettled.is_empty()) {
            (Ok(()), true) => Fence::new(),
            _ => {
                let waited: Fence = timepoint.waited.iter().map(|(s, v)| (s, *v)).collect();
                failure_order(&waited, &signal)
            }
        };
        let waited = std::mem::take(&mut timepoint.waited);
        let outcome = timepoint.outcome.take();
        self.timepoints.release(timepoint);
        let settle = Settle {
            owner: self.id,
            reactor: self.reactor.get().cloned(),
            signal,
            order,
            outcome,
            stats: self.stats.clone(),
        };
        if unsettled.is_empty() || result.is_err() {
            return settle.run(result);
        }
        Stats::bump(&self.stats.settles_deferred, 1);
        if let Some(reactor) = settle.reactor.clone() {
            // After shutdown the task comes straight back and is dropped, failing the fence.
            let _ = reactor.spawn(SettleAfter {
                unsettled,
                waited,
                failed: None,
                settle: Some(settle),
            });
        } else {
            settle.run(Err(shut_down()));
        }
    }

    /// After the submission's event completed successfully (so its kernels' writes to their
    /// status words, at `words`, are visible): a `KernelFailed` error naming the device, the entry
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
            StatusCode::KernelFailed,
            format!(
                "a dispatch of kernel '{entry}' on {} failed: it set its status word to \
                 {value}{more}",
                self.name
            ),
        ))
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

    /// After the reactor stopped: waits for every stream and stops the completion threads or
    /// the flag scanner (their handles are joined by the caller; what they leave in flight is
    /// settled by [`Core::settle_leftovers`]).
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
        if let Some(flags) = &self.flags {
            flags.flags.stop();
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

/// How a settled submission's signal fence is settled, and its outcome resolved.
struct Settle {
    /// The device whose timelines are advanced rather than signalled.
    owner: u64,
    reactor: Option<ReactorHandle>,
    signal: Fence,
    /// What a failure waits for (see [`fail_in_order`]).
    order: Fence,
    /// The submission's outcome, for the work that waited on its event.
    outcome: Option<Semaphore>,
    /// Where the failure is counted ([`keys::FAILED`](crate::keys::FAILED)): here,
    /// for every settle (those deferred to the reactor too), whatever failed (the work, its
    /// inputs, or the signals themselves).
    stats: Arc<Stats>,
}

impl Settle {
    /// Signals the fence in fence order, or fails it (once `order` has settled); then resolves
    /// the outcome: 1 if every entry was signalled, else failed with the error.
    fn run(self, result: Result<()>) {
        let result = result.and_then(|()| {
            let mut first_error = None;
            for (semaphore, value) in self.signal.iter() {
                match StreamSemaphore::timeline_of(semaphore).filter(|t| t.owner() == self.owner) {
                    Some(timeline) => {
                        semaphore.advance(value);
                        timeline.retire(value);
                    }
                    None => {
                        if let Err(error) = semaphore.signal(value) {
                            first_error.get_or_insert(error);
                        }
                    }
                }
            }
            first_error.map_or(Ok(()), Err)
        });
        Stats::bump(&self.stats.failed, u64::from(result.is_err()));
        match result {
            Ok(()) => {
                if let Some(outcome) = &self.outcome {
                    let _ = outcome.signal(1);
                }
            }
            Err(error) => {
                // The outcome first: work that waited on this submission's event fails with it,
                // in its own order, whatever holds this fence's failure back.
                if let Some(outcome) = &self.outcome {
                    outcome.fail(error.clone());
                }
                match &self.reactor {
                    Some(reactor) => fail_in_order(reactor, &self.order, self.signal, error),
                    None => self.signal.fail(error),
                }
            }
        }
    }
}

/// The error of a submission settled while its device shut down, before the work it waited on
/// had settled.
fn shut_down() -> Error {
    Error::new(
        StatusCode::Aborted,
        "the device shut down before the work a submission waited on settled",
    )
}

/// Settles a submission once the submissions whose events its stream waited on have settled:
/// failed with the first of their errors (or of its waited semaphores' failures), else
/// successfully. Dropped unfinished (the reactor shut down), it fails the fence.
struct SettleAfter {
    unsettled: Vec<Wait>,
    waited: Vec<(Semaphore, u64)>,
    failed: Option<Error>,
    settle: Option<Settle>,
}

impl Future for SettleAfter {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let failed = &mut this.failed;
        this.unsettled
            .retain_mut(|wait| match Pin::new(wait).poll(cx) {
                Poll::Pending => true,
                Poll::Ready(Ok(())) => false,
                Poll::Ready(Err(error)) => {
                    failed.get_or_insert(error);
                    false
                }
            });
        if !this.unsettled.is_empty() {
            return Poll::Pending;
        }
        let failure = this.failed.take().or_else(|| {
            this.waited
                .iter()
                .find_map(|(s, v)| SemaphoreExt::failure_before(s, *v))
        });
        if let Some(settle) = this.settle.take() {
            settle.run(failure.map_or(Ok(()), Err));
        }
        Poll::Ready(())
    }
}

impl Drop for SettleAfter {
    fn drop(&mut self) {
        if let Some(settle) = self.settle.take() {
            settle.run(Err(shut_down()));
        }
    }
}
