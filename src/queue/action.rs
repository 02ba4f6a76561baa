//! Queue actions: "await the wait fence, then issue", inline when possible, on the reactor
//! otherwise. See the [module docs](super) for the ordering and failure semantics.

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::error::{Error, Result, StatusCode};
use crate::fence::{Fence, WaitAll};
use crate::reactor::ReactorHandle;
use crate::sync::{Arc, AtomicUsize, Ordering};

/// What issuing an action does: hand the work to the device (or run it, for host work). Called
/// at most once, with the signal fence the work must signal when it completes. An `Err` (or a
/// panic) fails that fence.
pub type Issue = Box<dyn FnOnce(&Fence) -> Result<()> + Send>;

/// One queue's submission path into the pending-action executor.
///
/// Backends own one per device queue; it decides between issuing at once and parking the action
/// on the reactor, and keeps ready actions in submission order.
///
/// ```
/// use halcyon::queue::ActionQueue;
/// use halcyon::reactor::Reactor;
/// use halcyon::{Fence, Semaphore};
///
/// let reactor = Reactor::new("doc")?;
/// let queue = ActionQueue::new(reactor.handle());
/// let (input, output) = (Semaphore::new(0), Semaphore::new(0));
/// // A host "kernel" that runs once `input` reaches 1 and then signals `output` to 1.
/// queue.submit(Fence::at(&input, 1), Fence::at(&output, 1), Box::new(|signal: &Fence| signal.signal()));
/// input.signal(1)?; // releases the pending action within one reactor wake
/// output.wait_blocking(1, None)?;
/// # Ok::<(), halcyon::Error>(())
/// ```
pub struct ActionQueue {
    reactor: ReactorHandle,
    /// Actions of this queue spawned on the reactor and not yet finished.
    pending: Arc<AtomicUsize>,
}

impl ActionQueue {
    /// A queue whose pending actions run on `reactor`.
    pub fn new(reactor: ReactorHandle) -> Self {
        ActionQueue {
            reactor,
            pending: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Submits an action: once `wait` is reached, calls `issue(&signal)`.
    ///
    /// Never blocks. If `wait` is already reached and nothing of this queue is pending, `issue`
    /// runs now on this thread; otherwise the action is parked on the reactor. Failures go to
    /// `signal` (see the [module docs](super)); this call itself cannot fail.
    pub fn submit(&self, wait: Fence, signal: Fence, issue: Issue) {
        if self.pending.load(Ordering::Acquire) == 0 {
            match wait.query() {
                Ok(true) => return issue_now(issue, &signal),
                Err(error) => return signal.fail(error),
                Ok(false) => {}
            }
        }
        self.pending.fetch_add(1, Ordering::AcqRel);
        let action = PendingAction {
            waits: wait.wait_all(),
            signal,
            issue: Some(issue),
            pending: self.pending.clone(),
        };
        // After shutdown the action comes straight back and is dropped here, failing its fence.
        let _ = self.reactor.spawn(action);
    }

    /// How many actions of this queue wait on the reactor now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// The reactor pending actions run on.
    pub fn reactor(&self) -> &ReactorHandle {
        &self.reactor
    }
}

impl fmt::Debug for ActionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActionQueue")
            .field("reactor", &self.reactor.name())
            .field("pending", &self.pending())
            .finish()
    }
}

fn issue_now(issue: Issue, signal: &Fence) {
    let result = catch_unwind(AssertUnwindSafe(|| issue(signal))).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".into());
        Err(Error::new(
            StatusCode::Internal,
            format!("issuing a queue action panicked: {what}"),
        ))
    });
    if let Err(error) = result {
        signal.fail(error);
    }
}

/// An action parked on the reactor until its wait fence is reached.
struct PendingAction {
    waits: WaitAll,
    signal: Fence,
    issue: Option<Issue>,
    pending: Arc<AtomicUsize>,
}

impl Future for PendingAction {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let result = match Pin::new(&mut self.waits).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(result) => result,
        };
        let issue = self.issue.take();
        match (result, issue) {
            (Ok(()), Some(issue)) => issue_now(issue, &self.signal),
            (Err(error), Some(_)) => self.signal.fail(error),
            (_, None) => {}
        }
        Poll::Ready(())
    }
}

impl Drop for PendingAction {
    fn drop(&mut self) {
        if self.issue.take().is_some() {
            self.signal.fail(Error::new(
                StatusCode::Aborted,
                "queue action dropped before its waits were reached: its device (and reactor) \
                 shut down; keep the device alive until submitted work completes",
            ));
        }
        self.pending.fetch_sub(1, Ordering::AcqRel);
    }
}
