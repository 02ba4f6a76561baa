//! Queue actions: "await the wait fence, then issue", inline when possible, on the reactor
//! otherwise. See the [module docs](super) for the ordering and failure semantics.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::backend::reactor::ReactorHandle;
use crate::error::{Error, Result, StatusCode};
use crate::fence::{Fence, WaitAll};
use crate::profile::OperationTrace;
use crate::queue::ordered::{fail_in_order, failure_order, inherited};
use crate::sync::{lock, Arc, Mutex};

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
/// use halcyon::backend::ActionQueue;
/// use halcyon::backend::reactor::Reactor;
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
    pending: Arc<Mutex<Pending>>,
}

/// The queue's actions parked on the reactor and not yet issued, by submission number.
#[derive(Default)]
struct Pending {
    actions: BTreeMap<u64, Parked>,
    next: u64,
    /// Actions a release took out of `actions` whose issues have not all run yet. While it is
    /// non-zero, new submissions go through the reactor too, so they cannot overtake them.
    releasing: usize,
}

struct Parked {
    wait: Fence,
    /// What a failure of the action waits for (see [`ActionQueue::submit_parked`]).
    order: Fence,
    signal: Fence,
    issue: Issue,
}

/// What to do with a parked action taken out of [`Pending`].
enum Release {
    Issue(Parked),
    Fail(Parked, Error),
}

impl Release {
    fn run(self, reactor: &ReactorHandle) {
        match self {
            Release::Issue(action) => {
                issue_now(reactor, action.issue, &action.order, action.signal)
            }
            Release::Fail(action, error) => {
                let error = inherited(&action.wait, &error);
                fail_in_order(reactor, &action.order, action.signal, error)
            }
        }
    }
}

impl ActionQueue {
    /// A queue whose pending actions run on `reactor`.
    pub fn new(reactor: ReactorHandle) -> Self {
        ActionQueue {
            reactor,
            pending: Arc::new(Mutex::new(Pending::default())),
        }
    }

    /// Submits an action: once `wait` is reached, calls `issue(&signal)`.
    ///
    /// Never blocks. If `wait` is already reached and nothing of this queue is pending, `issue`
    /// runs now on this thread (and is never boxed: no allocation); otherwise the action is
    /// parked on the reactor, boxed as an [`Issue`]. Failures go to
    /// `signal` (see the [module docs](super)), after the entries of `wait` on semaphores that
    /// `signal` also signals have settled; this call itself cannot fail.
    pub fn submit<F>(&self, wait: Fence, signal: Fence, issue: F)
    where
        F: FnOnce(&Fence) -> Result<()> + Send + 'static,
    {
        let order = failure_order(&wait, &signal);
        self.submit_parked(wait, order, signal, issue)
    }

    /// [`ActionQueue::submit`] for a backend that parks an action on other semaphores than the
    /// ones the operation waits on: the action issues once `park` is reached (a backend parks on
    /// "signal scheduled on the device" for waits the device honours itself, say), while a
    /// failure (of a wait in `park`, or of the issue) fails each entry of `signal` only once the
    /// entries of `order` on its semaphore have settled (see [`fail_in_order`]). Pass
    /// [`failure_order`] of the operation's own wait and signal fences, so that the failure
    /// never overtakes the work before it on those timelines.
    pub fn submit_parked<F>(&self, park: Fence, order: Fence, signal: Fence, issue: F)
    where
        F: FnOnce(&Fence) -> Result<()> + Send + 'static,
    {
        let mut pending = lock(&self.pending);
        if pending.actions.is_empty() && pending.releasing == 0 {
            match park.query() {
                Ok(true) => {
                    drop(pending);
                    return issue_now(&self.reactor, issue, &order, signal);
                }
                Err(error) => {
                    drop(pending);
                    let error = inherited(&park, &error);
                    return fail_in_order(&self.reactor, &order, signal, error);
                }
                Ok(false) => {}
            }
        }
        let number = pending.next;
        pending.next += 1;
        let waits = park.wait_all();
        pending.actions.insert(
            number,
            Parked {
                wait: park,
                order,
                signal,
                issue: Box::new(issue),
            },
        );
        drop(pending);
        // After shutdown the action comes straight back and is dropped here, failing its fence.
        let _ = self.reactor.spawn(PendingAction {
            number,
            waits,
            queue: self.pending.clone(),
            reactor: self.reactor.clone(),
        });
    }

    /// How many actions of this queue are parked on the reactor now, or released there and not
    /// yet issued. While it is zero, a submission whose waits are reached issues inline.
    pub fn pending(&self) -> usize {
        let pending = lock(&self.pending);
        pending.actions.len() + pending.releasing
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

fn issue_now(
    reactor: &ReactorHandle,
    issue: impl FnOnce(&Fence) -> Result<()>,
    order: &Fence,
    signal: Fence,
) {
    if let Some(trace) = OperationTrace::of(&signal) {
        trace.issued();
    }
    let result = catch_unwind(AssertUnwindSafe(|| issue(&signal))).unwrap_or_else(|panic| {
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
        fail_in_order(reactor, order, signal, error);
    }
}

/// The reactor-side future of a parked action: awaits its wait fence, then releases it.
///
/// Its wake can trail the wait being reached (a signal stores the payload before it wakes), so
/// a later action of the queue may see its own waits reached first. To keep ready actions in
/// submission order, whichever action releases itself first also releases every earlier parked
/// action whose waits are reached, in order; an action released that way finds itself gone from
/// [`Pending`] when its own future runs.
struct PendingAction {
    number: u64,
    waits: WaitAll,
    queue: Arc<Mutex<Pending>>,
    reactor: ReactorHandle,
}

impl Future for PendingAction {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let result = match Pin::new(&mut self.waits).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(result) => result,
        };
        let mut pending = lock(&self.queue);
        let Some(own) = pending.actions.remove(&self.number) else {
            return Poll::Ready(()); // an earlier release took it
        };
        let mut released = Vec::new();
        let earlier: Vec<u64> = pending
            .actions
            .range(..self.number)
            .map(|(n, _)| *n)
            .collect();
        for number in earlier {
            let reached = pending.actions[&number].wait.query();
            match reached {
                Ok(false) => {}
                Ok(true) => released.extend(pending.actions.remove(&number).map(Release::Issue)),
                Err(error) => released.extend(
                    pending
                        .actions
                        .remove(&number)
                        .map(|action| Release::Fail(action, error)),
                ),
            }
        }
        released.push(match result {
            Ok(()) => Release::Issue(own),
            Err(error) => Release::Fail(own, error),
        });
        let count = released.len();
        pending.releasing += count;
        drop(pending);
        // Decrements `releasing` even if a wake during the releases panics.
        let _releasing = Releasing {
            queue: &self.queue,
            count,
        };
        released
            .into_iter()
            .for_each(|release| release.run(&self.reactor));
        Poll::Ready(())
    }
}

/// Actions taken out of [`Pending`] whose releases are running; see [`Pending::releasing`].
struct Releasing<'a> {
    queue: &'a Mutex<Pending>,
    count: usize,
}

impl Drop for Releasing<'_> {
    fn drop(&mut self) {
        lock(self.queue).releasing -= self.count;
    }
}

impl Drop for PendingAction {
    fn drop(&mut self) {
        let unissued = lock(&self.queue).actions.remove(&self.number);
        if let Some(action) = unissued {
            action.signal.fail(Error::new(
                StatusCode::Aborted,
                "queue action dropped before its waits were reached: its device (and reactor) \
                 shut down; keep the device alive until submitted work completes",
            ));
        }
    }
}
