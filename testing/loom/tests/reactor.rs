//! Model checks of the completion reactor and the pending-action executor on it.
//!
//! Under loom the reactor runs on a loom thread, so every model drops its [`Reactor`] (which
//! joins that thread) inside the model. loom reports a reactor or a waiter that is never woken as
//! a deadlock, and an `Arc` kept alive by a cycle as a leak.
#![cfg(loom)]

use halcyon::backend::reactor::{Completion, Reactor};
use halcyon::backend::{ActionQueue, Issue};
use halcyon::{Error, Fence, Semaphore, StatusCode};
use loom::future::block_on;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::{model_with_bound, Quarantine};

/// Keeps freed inbox nodes from being reused within one execution; see [`Quarantine`].
#[global_allocator]
static ALLOCATOR: Quarantine = Quarantine;

/// Reactor models run three threads through a lock-free inbox, a channel and semaphore locks;
/// a bound of 3 keeps each to seconds (4 takes minutes).
const BOUND: usize = 3;

/// An issue closure that counts its calls and then signals its fence.
fn counting_issue(calls: &Arc<AtomicUsize>) -> Issue {
    let calls = calls.clone();
    Box::new(move |signal: &Fence| {
        calls.fetch_add(1, Ordering::Relaxed);
        signal.signal()
    })
}

/// A "device" thread posts the completion that releases an action while the host submits it.
/// The action is issued inline (the completion was applied first) or parked on the reactor and
/// released by it; either way it issues exactly once and its signal fence is reached.
#[test]
fn completion_vs_submit_issues_once() {
    model_with_bound(BOUND, || {
        let reactor = Reactor::new("loom").unwrap();
        let queue = ActionQueue::new(reactor.handle());
        let (input, output) = (Semaphore::new(0), Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let device = {
            let (handle, input) = (reactor.handle(), input.clone());
            thread::spawn(move || handle.post(Completion::Signal(input, 1)))
        };
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&output, 1),
            counting_issue(&calls),
        );
        block_on(output.wait(1)).expect("the action signals its fence");
        device.join().unwrap().unwrap();
        drop(reactor);
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "the action must issue exactly once"
        );
        assert_eq!(queue.pending(), 0);
        assert_eq!(input.waiter_count(), 0);
    });
}

/// A "device" thread posts the completion that releases a parked action, then awaits the
/// action's signal fence, while the host drops the reactor. The completion is applied (by the
/// reactor, or inline once it is gone); the waiter ends with `Ok` if the action issued, or with
/// `Aborted` if shutdown dropped it first, and never hangs. Afterwards posts are applied inline,
/// calls and spawns are refused with `Unavailable`, and a submission fails its fence.
#[test]
fn completion_vs_shutdown_never_hangs() {
    model_with_bound(BOUND, || {
        let reactor = Reactor::new("loom").unwrap();
        let handle = reactor.handle();
        let queue = ActionQueue::new(handle.clone());
        let (input, output) = (Semaphore::new(0), Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&output, 1),
            counting_issue(&calls),
        );
        assert_eq!(queue.pending(), 1, "an unreached wait parks the action");
        let device = {
            let (handle, input, output) = (handle.clone(), input.clone(), output.clone());
            thread::spawn(move || {
                handle.post(Completion::Signal(input, 1))?;
                block_on(output.wait(1))
            })
        };
        drop(reactor);
        let waited = device.join().unwrap();
        match &waited {
            Ok(()) => assert_eq!(calls.load(Ordering::Relaxed), 1),
            Err(error) => {
                assert_eq!(error.code(), StatusCode::Aborted, "unclear error: {error}");
                assert_eq!(calls.load(Ordering::Relaxed), 0, "issued yet aborted");
            }
        }
        assert_eq!(input.query().unwrap(), 1, "the posted completion was lost");
        assert_eq!(queue.pending(), 0);
        assert_eq!(input.waiter_count(), 0);

        // After shutdown: completions apply inline; calls and spawns are refused.
        handle.post(Completion::Signal(input.clone(), 2)).unwrap();
        assert_eq!(input.query().unwrap(), 2);
        let call = Completion::Call(Box::new(|| panic!("a call ran after shutdown")));
        assert_eq!(
            handle.post(call).unwrap_err().code(),
            StatusCode::Unavailable
        );
        assert_eq!(
            handle.spawn(async {}).unwrap_err().code(),
            StatusCode::Unavailable
        );
        let late = Semaphore::new(0);
        queue.submit(
            Fence::at(&input, 3),
            Fence::at(&late, 1),
            counting_issue(&calls),
        );
        assert_eq!(late.query().unwrap_err().code(), StatusCode::Aborted);
        assert!(calls.load(Ordering::Relaxed) <= 1);
    });
}

/// A `Completion::Fail` posted while the reactor shuts down: the failure is applied either way
/// and the parked action's fence fails with that failure (or `Aborted`), never hangs.
#[test]
fn failure_vs_shutdown_never_hangs() {
    model_with_bound(BOUND, || {
        let reactor = Reactor::new("loom").unwrap();
        let queue = ActionQueue::new(reactor.handle());
        let (input, output) = (Semaphore::new(0), Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let failure = Error::new(StatusCode::DataLoss, "device lost");
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&output, 1),
            counting_issue(&calls),
        );
        let device = {
            let (handle, input, failure) = (reactor.handle(), input.clone(), failure.clone());
            thread::spawn(move || handle.post(Completion::Fail(input, failure)))
        };
        drop(reactor);
        device.join().unwrap().unwrap();
        let error = block_on(output.wait(1)).expect_err("the action can never issue");
        assert!(
            error.origin().same_as(&failure) || error.code() == StatusCode::Aborted,
            "unclear error: {error}"
        );
        assert!(input.query().unwrap_err().same_as(&failure));
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        assert_eq!(queue.pending(), 0);
    });
}

/// A host thread signals an action's wait while it is submitted: whether the action is issued
/// inline or from the reactor (and whatever wakes race its first poll), the issue closure runs
/// exactly once and the signal fence is reached.
#[test]
fn host_signal_vs_submit_issues_once() {
    model_with_bound(BOUND, || {
        let reactor = Reactor::new("loom").unwrap();
        let queue = ActionQueue::new(reactor.handle());
        let (input, output) = (Semaphore::new(0), Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let host = {
            let input = input.clone();
            thread::spawn(move || input.signal(1))
        };
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&output, 1),
            counting_issue(&calls),
        );
        block_on(output.wait(1)).expect("the action signals its fence");
        host.join().unwrap().unwrap();
        drop(reactor);
        assert_eq!(
            calls.load(Ordering::Relaxed),
            1,
            "the action must issue exactly once"
        );
        assert_eq!(queue.pending(), 0);
        assert_eq!(input.waiter_count(), 0);
    });
}

/// A host thread fails an action's wait while it is submitted: the action never issues and its
/// signal fence fails with that very error.
#[test]
fn host_fail_vs_submit_propagates() {
    model_with_bound(BOUND, || {
        let reactor = Reactor::new("loom").unwrap();
        let queue = ActionQueue::new(reactor.handle());
        let (input, output) = (Semaphore::new(0), Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let failure = Error::new(StatusCode::DataLoss, "upload failed");
        let host = {
            let (input, failure) = (input.clone(), failure.clone());
            thread::spawn(move || input.fail(failure))
        };
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&output, 1),
            counting_issue(&calls),
        );
        let error = block_on(output.wait(1)).expect_err("the wait failed");
        assert!(error.origin().same_as(&failure), "wrong error: {error}");
        assert!(error.is_inherited(), "not marked inherited: {error}");
        host.join().unwrap();
        drop(reactor);
        assert_eq!(
            calls.load(Ordering::Relaxed),
            0,
            "issued despite a failed wait"
        );
        assert_eq!(queue.pending(), 0);
    });
}

/// A chain through the reactor: action A waits on `input` and signals `mid`, action B waits on
/// `mid` and signals `output`, while a host thread signals `input`. A's issue runs on the
/// reactor and wakes B from the reactor thread itself (a post to its own inbox); each issues
/// exactly once, A before B, and `output` is reached.
#[test]
fn chained_actions_issue_once_in_dependency_order() {
    model_with_bound(BOUND, || {
        let reactor = Reactor::new("loom").unwrap();
        let queue = ActionQueue::new(reactor.handle());
        let (input, mid, output) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        let (calls_a, calls_b) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let host = {
            let input = input.clone();
            thread::spawn(move || input.signal(1))
        };
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&mid, 1),
            counting_issue(&calls_a),
        );
        let b_saw_a = Arc::new(AtomicUsize::new(usize::MAX));
        let issue_b: Issue = {
            let (calls_a, calls_b, b_saw_a) = (calls_a.clone(), calls_b.clone(), b_saw_a.clone());
            Box::new(move |signal: &Fence| {
                b_saw_a.store(calls_a.load(Ordering::Relaxed), Ordering::Relaxed);
                calls_b.fetch_add(1, Ordering::Relaxed);
                signal.signal()
            })
        };
        queue.submit(Fence::at(&mid, 1), Fence::at(&output, 1), issue_b);
        block_on(output.wait(1)).expect("the chain reaches its end");
        host.join().unwrap().unwrap();
        drop(reactor);
        assert_eq!(calls_a.load(Ordering::Relaxed), 1);
        assert_eq!(calls_b.load(Ordering::Relaxed), 1);
        assert_eq!(b_saw_a.load(Ordering::Relaxed), 1, "B issued before A");
        assert_eq!(queue.pending(), 0);
    });
}

/// Two actions of one queue wait on the same semaphore, which a host thread signals while they
/// are submitted. Ready actions of one queue issue in submission order, so A must issue before B
/// even in the interleaving where the reactor polls A (which registers), the signal lands and
/// queues A's wake, and B's first poll then sees the value before A's wake is processed.
#[test]
fn ready_actions_issue_in_submission_order() {
    model_with_bound(BOUND, || {
        let reactor = Reactor::new("loom").unwrap();
        let queue = ActionQueue::new(reactor.handle());
        let input = Semaphore::new(0);
        let (done_a, done_b) = (Semaphore::new(0), Semaphore::new(0));
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let recording = |name: char| -> Issue {
            let order = order.clone();
            Box::new(move |signal: &Fence| {
                order.lock().unwrap().push(name);
                signal.signal()
            })
        };
        let host = {
            let input = input.clone();
            thread::spawn(move || input.signal(1))
        };
        queue.submit(Fence::at(&input, 1), Fence::at(&done_a, 1), recording('A'));
        queue.submit(Fence::at(&input, 1), Fence::at(&done_b, 1), recording('B'));
        let done: Fence = [(&done_a, 1), (&done_b, 1)].into_iter().collect();
        block_on(done.wait_all()).unwrap();
        host.join().unwrap().unwrap();
        drop(reactor);
        assert_eq!(
            *order.lock().unwrap(),
            ['A', 'B'],
            "a later action overtook an earlier one"
        );
    });
}

/// A task on the reactor awaits two semaphores that two host threads signal. The second wake
/// can land while the reactor is between taking the task off its ready set and polling it, when
/// the first wake is still marked queued and so the second pushes nothing: the poll must then see
/// the second signal. (With `queued` reset by a plain store it could not, store-buffering style,
/// and the task slept forever; this model found that.)
#[test]
fn wake_during_a_poll_is_not_lost() {
    // Four threads, as below: a bound of 2.
    model_with_bound(2, || {
        let reactor = Reactor::new("loom").unwrap();
        let (a, b, done) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        let both: Fence = [(&a, 1), (&b, 1)].into_iter().collect();
        let task_done = done.clone();
        reactor
            .handle()
            .spawn(async move {
                both.wait_all().await.unwrap();
                task_done.signal(1).unwrap();
            })
            .unwrap();
        let signallers: Vec<_> = [a, b]
            .into_iter()
            .map(|s| thread::spawn(move || s.signal(1)))
            .collect();
        block_on(done.wait(1)).expect("the task saw both signals");
        for signaller in signallers {
            signaller.join().unwrap().unwrap();
        }
        drop(reactor);
    });
}

/// An action waits on `s` at 1 and on `doomed`, and signals `s` to 2, while one host thread
/// signals `s` to 1 and another fails `doomed`. The action never issues, and its failure is
/// ordered after `s` reaches 1 (see `halcyon::queue`): the host's signal to 1 always succeeds,
/// and `s` then fails with `doomed`'s error, so its waiter ends and nothing is left pending.
#[test]
fn failure_waits_for_the_earlier_signal() {
    // Four threads: a bound of 2 takes seconds (and finds the lost wake above), 3 takes minutes.
    model_with_bound(2, || {
        let reactor = Reactor::new("loom").unwrap();
        let queue = ActionQueue::new(reactor.handle());
        let (s, doomed) = (Semaphore::new(0), Semaphore::new(0));
        let calls = Arc::new(AtomicUsize::new(0));
        let failure = Error::new(StatusCode::DataLoss, "upload failed");
        let signaller = {
            let s = s.clone();
            thread::spawn(move || s.signal(1))
        };
        let failer = {
            let (doomed, failure) = (doomed.clone(), failure.clone());
            thread::spawn(move || doomed.fail(failure))
        };
        let wait: Fence = [(&s, 1), (&doomed, 1)].into_iter().collect();
        queue.submit(wait, Fence::at(&s, 2), counting_issue(&calls));
        let error = block_on(s.wait(2)).expect_err("the action's wait failed");
        assert!(error.origin().same_as(&failure), "wrong error: {error}");
        signaller.join().unwrap().unwrap();
        failer.join().unwrap();
        drop(reactor);
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        assert_eq!(queue.pending(), 0);
    });
}
