//! A host stream: an in-order queue of operations and the thread that runs them.
//!
//! The thread takes operations one at a time, in enqueue order, each admitted by the device's
//! [`Control`] first (so holds and faults apply), and sleeps on a condition variable when the
//! queue is empty. A failed operation leaves an error pending on the stream: the memory and
//! kernel operations after it are skipped until the next event record, which completes with
//! that error; a wait on an event whose work failed makes the waiting stream's work fail the same
//! way, so a failure travels along device-to-device dependencies like it travels along fences.
//! Host functions and records are never skipped for such an error; after a device fault nothing
//! runs any more and host functions are dropped unrun.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};

use crate::event::{HostEvent, Ticket, Waited};
use crate::Shared;
use halcyon::{Error, Result, StatusCode};
use halcyon_stream::api::HostFunc;

/// A memory or kernel operation; skipped while an error is pending on the stream. Shared and
/// callable more than once, so a captured graph can run it on every launch.
pub(crate) type Exec = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// One enqueued operation.
pub(crate) enum Op {
    Exec(Exec),
    HostFunc(HostFunc),
    /// Complete this generation of the event.
    Record(Arc<HostEvent>, u64),
    /// Wait until the event's record captured by the ticket completed.
    Wait(Ticket),
}

#[derive(Default)]
struct Queue {
    ops: VecDeque<Op>,
    enqueued: u64,
    done: u64,
    destroyed: bool,
}

/// A stream's queue, shared by its thread and the API.
#[derive(Default)]
pub(crate) struct Stream {
    queue: Mutex<Queue>,
    /// The thread waits here for operations.
    work: Condvar,
    /// Synchronising callers wait here for progress.
    progress: Condvar,
}

impl Stream {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enqueues the operation `make` builds (under the queue lock, so a record's generation is
    /// taken in enqueue order). `InvalidArgument` if the stream was destroyed.
    pub(crate) fn push(&self, make: impl FnOnce() -> Op) -> Result<()> {
        let mut queue = self.lock();
        if queue.destroyed {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                "host stream API: the stream was destroyed",
            ));
        }
        queue.ops.push_back(make());
        queue.enqueued += 1;
        let wake = queue.ops.len() == 1;
        drop(queue);
        if wake {
            self.work.notify_one();
        }
        Ok(())
    }

    /// Blocks until everything enqueued before the call ran (or was dropped by a fault).
    pub(crate) fn synchronize(&self, shared: &Shared) -> Result<()> {
        let mut queue = self.lock();
        let target = queue.enqueued;
        while queue.done < target
            && !shared.control.is_faulted()
            && !shared.closing.load(Ordering::Acquire)
        {
            queue = self.progress.wait(queue).unwrap_or_else(|p| p.into_inner());
        }
        drop(queue);
        shared.control.check()
    }

    /// Lets the thread end once the queue is empty.
    pub(crate) fn destroy(&self) {
        self.lock().destroyed = true;
        self.work.notify_all();
    }

    /// Wakes the thread and synchronising callers to re-check the fault and shutdown flags.
    pub(crate) fn wake_all(&self) {
        drop(self.lock());
        self.work.notify_all();
        self.progress.notify_all();
    }

    /// The stream's thread.
    pub(crate) fn run(&self, shared: &Shared) {
        let mut pending: Option<Error> = None;
        loop {
            let op = {
                let mut queue = self.lock();
                loop {
                    if shared.closing.load(Ordering::Acquire) {
                        return;
                    }
                    if let Some(op) = queue.ops.pop_front() {
                        break op;
                    }
                    if queue.destroyed {
                        return;
                    }
                    queue = self.work.wait(queue).unwrap_or_else(|p| p.into_inner());
                }
            };
            execute(op, &mut pending, shared);
            self.lock().done += 1;
            self.progress.notify_all();
        }
    }
}

/// Runs one operation (see the [module docs](self)).
fn execute(op: Op, pending: &mut Option<Error>, shared: &Shared) {
    let control = &shared.control;
    let stats = &shared.stats;
    match op {
        Op::Wait(ticket) => {
            if control.admit_wait().is_err() {
                return stats.bump(&stats.discarded);
            }
            if let Waited::Done(Some(error)) = ticket.wait(control, &shared.closing) {
                pending.get_or_insert(error);
            }
        }
        Op::Record(event, generation) => {
            if control.admit().is_err() {
                return stats.bump(&stats.discarded);
            }
            event.complete(generation, pending.take());
            control.finish();
        }
        Op::Exec(exec) => {
            if control.admit().is_err() {
                return stats.bump(&stats.discarded);
            }
            if pending.is_some() {
                stats.bump(&stats.skipped);
            } else {
                stats.bump(&stats.executed);
                let outcome = catch_unwind(AssertUnwindSafe(|| exec())).unwrap_or_else(|panic| {
                    Err(Error::new(
                        StatusCode::Internal,
                        format!("host stream operation panicked: {}", panic_message(&*panic)),
                    ))
                });
                if let Err(error) = outcome {
                    *pending = Some(error);
                }
            }
            control.finish();
        }
        Op::HostFunc(func) => {
            if control.admit().is_err() {
                return stats.bump(&stats.discarded);
            }
            stats.bump(&stats.host_funcs);
            let _ = catch_unwind(AssertUnwindSafe(func));
            control.finish();
        }
    }
}

/// The message of a panic payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".into())
}
