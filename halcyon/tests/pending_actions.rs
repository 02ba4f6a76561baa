//! The pending-action executor (`ActionQueue` on a reactor): issue after the waits, inline or on
//! the reactor, chains, failure propagation, failing and panicking issues, submission order, and
//! how many reactor wakes a host signal costs.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{recv, spawn_thread, wait_until, ParkProbe, HANG};
use halcyon::backend::reactor::{Reactor, ReactorHandle};
use halcyon::backend::{ActionQueue, Issue};
use halcyon::{Error, Fence, Semaphore, StatusCode};

/// An issue that signals its fence.
fn signal_issue() -> Issue {
    Box::new(|signal: &Fence| signal.signal())
}

/// An issue that records `id` (and the thread it ran on) in `log`, then signals its fence.
fn logging_issue(log: &Arc<Mutex<Vec<(usize, std::thread::ThreadId)>>>, id: usize) -> Issue {
    let log = log.clone();
    Box::new(move |signal: &Fence| {
        log.lock().unwrap().push((id, std::thread::current().id()));
        signal.signal()
    })
}

fn ids(log: &Mutex<Vec<(usize, std::thread::ThreadId)>>) -> Vec<usize> {
    log.lock().unwrap().iter().map(|(id, _)| *id).collect()
}

/// The reactor's thread id, learnt by running a call on it.
fn reactor_thread(handle: &ReactorHandle) -> std::thread::ThreadId {
    let (tx, rx) = std::sync::mpsc::channel();
    handle
        .post(halcyon::backend::reactor::Completion::Call(Box::new(
            move || {
                let _ = tx.send(std::thread::current().id());
            },
        )))
        .unwrap();
    recv(&rx, "reactor thread id")
}

#[test]
fn wait_before_signal_issues_on_the_reactor() {
    let reactor = Reactor::new("wait-first").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    let (input, output) = (Semaphore::new(0), Semaphore::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    queue.submit(
        Fence::at(&input, 2),
        Fence::at(&output, 1),
        logging_issue(&log, 0),
    );
    assert_eq!(queue.pending(), 1);
    assert!(ids(&log).is_empty(), "waits not reached: not issued");
    wait_until("action registered", || input.waiter_count() == 1);
    input.signal(1).unwrap();
    // Not reached yet: the action stays pending (checked after a round trip through the
    // reactor, which has then seen everything input.signal(1) could have caused).
    reactor_thread(&reactor.handle());
    assert!(ids(&log).is_empty());
    assert_eq!(output.query().unwrap(), 0);

    input.signal(2).unwrap();
    output.wait_blocking(1, Some(HANG)).unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].1, reactor_thread(&reactor.handle()));
    wait_until("action finished", || queue.pending() == 0);
    assert_eq!(input.waiter_count(), 0);
}

#[test]
fn signal_before_wait_issues_inline() {
    let reactor = Reactor::new("signal-first").unwrap();
    let handle = reactor.handle();
    let queue = ActionQueue::new(handle.clone());
    let (input, output) = (Semaphore::new(0), Semaphore::new(0));
    input.signal(1).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let polls = handle.stats().polls;
    queue.submit(
        Fence::at(&input, 1),
        Fence::at(&output, 1),
        logging_issue(&log, 0),
    );
    // Issued during submit, on this thread, without the reactor.
    assert_eq!(output.query().unwrap(), 1);
    assert_eq!(log.lock().unwrap()[0].1, std::thread::current().id());
    assert_eq!(queue.pending(), 0);
    assert_eq!(handle.stats().polls, polls);
    // An empty wait fence is always reached.
    queue.submit(Fence::new(), Fence::at(&output, 2), signal_issue());
    assert_eq!(output.query().unwrap(), 2);
}

/// A chain of 100 actions, action `i` waiting on `S_i >= 1` and signalling `S_{i+1} = 1`, is
/// released by one host signal, in either submission order.
#[test]
fn chain_of_dependent_actions_released_by_one_signal() {
    const LEN: usize = 100;
    let reactor = Reactor::new("chain").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    for reverse in [false, true] {
        let sems: Vec<_> = (0..=LEN).map(|_| Semaphore::new(0)).collect();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut order: Vec<usize> = (0..LEN).collect();
        if reverse {
            order.reverse();
        }
        for &i in &order {
            queue.submit(
                Fence::at(&sems[i], 1),
                Fence::at(&sems[i + 1], 1),
                logging_issue(&log, i),
            );
        }
        assert_eq!(queue.pending(), LEN);
        sems[0].signal(1).unwrap();
        sems[LEN].wait_blocking(1, Some(HANG)).unwrap();
        assert_eq!(ids(&log), (0..LEN).collect::<Vec<_>>(), "reverse={reverse}");
        wait_until("chain finished", || queue.pending() == 0);
    }
}

/// Failing the first semaphore of the chain fails every later one with the very same error, and
/// nothing issues.
#[test]
fn failure_propagates_through_the_chain() {
    const LEN: usize = 100;
    let reactor = Reactor::new("chain-failure").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    let sems: Vec<_> = (0..=LEN).map(|_| Semaphore::new(0)).collect();
    let issued = Arc::new(AtomicUsize::new(0));
    for i in 0..LEN {
        let issued = issued.clone();
        queue.submit(
            Fence::at(&sems[i], 1),
            Fence::at(&sems[i + 1], 1),
            Box::new(move |signal: &Fence| {
                issued.fetch_add(1, Ordering::SeqCst);
                signal.signal()
            }),
        );
    }
    let end = {
        let end = sems[LEN].clone();
        spawn_thread("end-waiter", move || end.wait_blocking(1, Some(HANG)))
    };
    let err = Error::new(StatusCode::DataLoss, "upload failed");
    sems[0].fail(err.clone());
    let got = recv(&end, "end of chain").unwrap_err();
    // Downstream work reports the failure it inherited: the code, a message saying so, and
    // the original as its source and origin (one origin, however long the chain).
    assert!(got.origin().same_as(&err), "the end of the chain got {got}");
    assert!(
        got.is_inherited() && got.code() == StatusCode::DataLoss,
        "{got}"
    );
    assert!(
        got.to_string()
            .starts_with("DATA_LOSS: waits on a failed semaphore (value 1): upload failed"),
        "{got}"
    );
    let source = std::error::Error::source(&got).expect("an inherited error has a source");
    assert_eq!(source.to_string(), err.to_string());
    assert!(sems[0].query().unwrap_err().same_as(&err));
    for (i, sem) in sems.iter().enumerate() {
        assert!(sem.query().unwrap_err().origin().same_as(&err), "S_{i}");
    }
    assert_eq!(issued.load(Ordering::SeqCst), 0);
    wait_until("chain finished", || queue.pending() == 0);

    // A wait fence that has already failed at submit: the signal fence fails at once.
    let out = Semaphore::new(0);
    queue.submit(
        Fence::at(&sems[0], 1),
        Fence::at(&out, 1),
        Box::new(|_: &Fence| panic!("must not issue")),
    );
    assert!(out.query().unwrap_err().origin().same_as(&err));
}

/// A failed entry of a multi-entry wait fence fails the action even if the others are reached.
#[test]
fn failure_of_one_of_several_waits() {
    let reactor = Reactor::new("multi-wait-failure").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    let (a, b, out1, out2) = (
        Semaphore::new(0),
        Semaphore::new(0),
        Semaphore::new(0),
        Semaphore::new(0),
    );
    let mut signal = Fence::at(&out1, 1);
    signal.insert(&out2, 5);
    queue.submit(
        Fence::at(&a, 1).join(&Fence::at(&b, 1)),
        signal,
        Box::new(|_: &Fence| panic!("must not issue")),
    );
    a.signal(1).unwrap();
    let err = Error::new(StatusCode::Cancelled, "b cancelled");
    b.fail(err.clone());
    out2.wait_blocking(5, Some(HANG)).unwrap_err();
    assert!(out1.query().unwrap_err().origin().same_as(&err));
    assert!(out2.query().unwrap_err().origin().same_as(&err));
}

/// An action with several waits signalled from several threads issues once, after the last.
#[test]
fn several_waits_from_several_threads_issue_once() {
    let reactor = Reactor::new("multi-wait").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    let inputs: Vec<_> = (0..4).map(|_| Semaphore::new(0)).collect();
    let output = Semaphore::new(0);
    let issued = Arc::new(AtomicUsize::new(0));
    for round in 1..=50u64 {
        let wait: Fence = inputs.iter().map(|s| (s, round)).collect();
        let issued = issued.clone();
        let check: Vec<_> = inputs.clone();
        queue.submit(
            wait,
            Fence::at(&output, round),
            Box::new(move |signal: &Fence| {
                assert!(check.iter().all(|s| s.query().unwrap() >= round));
                issued.fetch_add(1, Ordering::SeqCst);
                signal.signal()
            }),
        );
    }
    let signallers: Vec<_> = inputs
        .iter()
        .map(|s| {
            let s = s.clone();
            spawn_thread("signaller", move || {
                for round in 1..=50 {
                    s.signal(round).unwrap();
                }
            })
        })
        .collect();
    for rx in &signallers {
        recv(rx, "signaller");
    }
    output.wait_blocking(50, Some(HANG)).unwrap();
    wait_until("actions finished", || queue.pending() == 0);
    assert_eq!(issued.load(Ordering::SeqCst), 50);
}

#[test]
fn issue_error_fails_the_signal_fence() {
    let reactor = Reactor::new("issue-error").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    for inline in [true, false] {
        let (input, out, downstream) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
        if inline {
            input.signal(1).unwrap();
        }
        let err = Error::new(StatusCode::ResourceExhausted, "out of command buffers");
        let issue_err = err.clone();
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&out, 1),
            Box::new(move |_: &Fence| Err(issue_err)),
        );
        // Downstream work sees the same failure.
        queue.submit(
            Fence::at(&out, 1),
            Fence::at(&downstream, 1),
            signal_issue(),
        );
        if !inline {
            input.signal(1).unwrap();
        }
        let got = downstream.wait_blocking(1, Some(HANG)).unwrap_err();
        assert!(got.origin().same_as(&err), "inline={inline}: {got}");
        assert!(got.is_inherited(), "inline={inline}: {got}");
        assert!(out.query().unwrap_err().same_as(&err));
        wait_until("actions finished", || queue.pending() == 0);
    }
}

#[test]
fn issue_panic_fails_the_signal_fence_with_internal() {
    let reactor = Reactor::new("issue-panic").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    for inline in [true, false] {
        let (input, out) = (Semaphore::new(0), Semaphore::new(0));
        if inline {
            input.signal(1).unwrap();
        }
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&out, 1),
            Box::new(|_: &Fence| panic!("driver bug #{}", 42)),
        );
        if !inline {
            input.signal(1).unwrap();
        }
        let err = out.wait_blocking(1, Some(HANG)).unwrap_err();
        assert_eq!(err.code(), StatusCode::Internal, "inline={inline}: {err}");
        assert!(err.message().contains("driver bug #42"), "{err}");
        wait_until("action finished", || queue.pending() == 0);
    }
    // The reactor survived the panic.
    let (input, out) = (Semaphore::new(0), Semaphore::new(0));
    queue.submit(Fence::at(&input, 1), Fence::at(&out, 1), signal_issue());
    input.signal(1).unwrap();
    out.wait_blocking(1, Some(HANG)).unwrap();
}

/// Ready actions of one queue issue in submission order: several actions waiting on the same
/// value, all registered, released by one signal.
#[test]
fn ready_actions_issue_in_submission_order() {
    const N: usize = 32;
    let reactor = Reactor::new("order").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    for round in 0..20 {
        let sem = Semaphore::new(0);
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..N {
            queue.submit(Fence::at(&sem, 1), Fence::new(), logging_issue(&log, i));
        }
        wait_until("actions registered", || sem.waiter_count() == N);
        sem.signal(1).unwrap();
        wait_until("all issued", || log.lock().unwrap().len() == N);
        assert_eq!(ids(&log), (0..N).collect::<Vec<_>>(), "round {round}");
        wait_until("actions finished", || queue.pending() == 0);
    }
}

/// Ready actions of one queue issue in submission order also when the signal that releases them
/// lands while the reactor is still giving them their first poll.
///
/// Deterministic schedule: the reactor is held asleep while queue `q1` gets action 0 (waits
/// `S >= 1`), queue `q2` gets an action B (waits `G >= 1`, then signals `S = 1`), and `q1` gets
/// action 1 (waits `S >= 1`); `G` is signalled; then the reactor runs them as one batch in
/// spawn order: action 0 registers on `S`, B issues and signals `S` (waking action 0), action 1
/// is polled for the first time and finds `S` reached. Both `q1` actions became ready by that
/// one signal, so action 0 must issue first.
///
/// Without a schedule this happens at random, see
/// `ready_actions_issue_in_submission_order_racing_first_polls`.
#[test]
fn ready_actions_issue_in_submission_order_when_released_during_first_polls() {
    let probe = ParkProbe::new();
    let reactor = Reactor::with_parker("order-first-poll", probe.parker()).unwrap();
    let (q1, q2) = (
        ActionQueue::new(reactor.handle()),
        ActionQueue::new(reactor.handle()),
    );
    let (s, g) = (Semaphore::new(0), Semaphore::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));

    probe.wait_idle();
    probe.close_gate();
    q1.submit(Fence::at(&s, 1), Fence::new(), logging_issue(&log, 0));
    q2.submit(Fence::at(&g, 1), Fence::at(&s, 1), signal_issue());
    q1.submit(Fence::at(&s, 1), Fence::new(), logging_issue(&log, 1));
    g.signal(1).unwrap();
    probe.open_gate();

    wait_until("both issued", || log.lock().unwrap().len() == 2);
    assert_eq!(
        ids(&log),
        [0, 1],
        "action 1 overtook action 0 although one signal made both ready"
    );
}

/// A ready action submitted while earlier ready actions of the queue are being released (taken
/// off the queue, their issues not yet run) must not issue before them.
///
/// Deterministic schedule, as in `..._when_released_during_first_polls`: action 1's poll finds
/// action 0 ready as well and releases both, in order; action 0's issue then blocks (on the
/// reactor thread) until the test has submitted action 2, whose waits are already reached.
/// Action 1 is not issued yet at that point, so action 2 must go after it.
#[test]
fn ready_action_does_not_overtake_actions_being_released() {
    let probe = ParkProbe::new();
    let reactor = Reactor::with_parker("order-releasing", probe.parker()).unwrap();
    let (q1, q2) = (
        ActionQueue::new(reactor.handle()),
        ActionQueue::new(reactor.handle()),
    );
    let (s, g, hold) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (started_tx, started_rx) = std::sync::mpsc::channel();

    probe.wait_idle();
    probe.close_gate();
    {
        let (log, hold) = (log.clone(), hold.clone());
        q1.submit(
            Fence::at(&s, 1),
            Fence::new(),
            Box::new(move |_: &Fence| {
                log.lock().unwrap().push((0, std::thread::current().id()));
                let _ = started_tx.send(());
                hold.wait_blocking(1, Some(HANG))
            }),
        );
    }
    q2.submit(Fence::at(&g, 1), Fence::at(&s, 1), signal_issue());
    q1.submit(Fence::at(&s, 1), Fence::new(), logging_issue(&log, 1));
    g.signal(1).unwrap();
    probe.open_gate();

    recv(&started_rx, "action 0 issuing");
    // Action 1 is released or about to be; action 2 is ready at submission.
    q1.submit(Fence::new(), Fence::new(), logging_issue(&log, 2));
    hold.signal(1).unwrap();
    wait_until("all issued", || log.lock().unwrap().len() == 3);
    assert_eq!(ids(&log), [0, 1, 2], "action 2 overtook action 1");
}

/// Ready actions of one queue issue in submission order also when a later action is polled
/// because of a wake for another of its semaphores while the releasing signal is still waking.
///
/// Deterministic schedule: action 0 waits `S >= 1`; action 1 waits `T >= 1` and `S >= 1`. The
/// first waiter registered on `S` is a foreign waker that, when woken, signals `T` (wakers may do
/// work; this one stands for another thread's signal landing at that moment). `S.signal(1)`
/// stores the payload and wakes that waker first: `T` is signalled, action 1 is woken and
/// polled (each wake handled on its own), and finds both `T` and `S` reached, while action 0's
/// wake has not been sent yet. Both actions became ready by `S.signal(1)`; action 0 must still
/// issue first.
#[test]
fn ready_actions_issue_in_submission_order_when_a_later_one_is_woken_by_another_semaphore() {
    use std::task::{Wake, Waker};

    struct SignalOnWake(Semaphore);
    impl Wake for SignalOnWake {
        fn wake(self: Arc<Self>) {
            self.0.signal(1).unwrap();
        }
    }

    let probe = ParkProbe::new();
    let reactor = Reactor::with_parker("order-other-wake", probe.parker()).unwrap();
    let queue = ActionQueue::new(reactor.handle());
    let (s, t) = (Semaphore::new(0), Semaphore::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));

    let mut foreign = s.wait(1);
    let foreign_waker = Waker::from(Arc::new(SignalOnWake(t.clone())));
    assert!(common::poll_once(&mut foreign, &foreign_waker).is_pending());
    queue.submit(Fence::at(&s, 1), Fence::new(), logging_issue(&log, 0));
    queue.submit(
        Fence::at(&t, 1).join(&Fence::at(&s, 1)),
        Fence::new(),
        logging_issue(&log, 1),
    );
    wait_until("actions registered", || {
        s.waiter_count() == 3 && t.waiter_count() == 1
    });
    probe.wait_idle();
    probe.set_serialize_unparks(true);
    s.signal(1).unwrap();
    probe.set_serialize_unparks(false);
    assert!(!probe.serialize_gave_up());

    wait_until("both issued", || log.lock().unwrap().len() == 2);
    assert_eq!(
        ids(&log),
        [0, 1],
        "action 1 overtook action 0 although S.signal(1) made both ready"
    );
}

/// The unscheduled version of the two tests above: a host thread signals right after submitting,
/// while the reactor may still be giving the actions their first poll. Passes every time on a
/// correct queue; with the overtaking bug (fixed in 8faebfb) it failed about half the runs of 30
/// rounds on a 2-core machine.
#[test]
fn ready_actions_issue_in_submission_order_racing_first_polls() {
    const N: usize = 32;
    let reactor = Reactor::new("order-racing").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    for round in 0..30 {
        let sem = Semaphore::new(0);
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..N {
            queue.submit(Fence::at(&sem, 1), Fence::new(), logging_issue(&log, i));
        }
        sem.signal(1).unwrap();
        wait_until("all issued", || log.lock().unwrap().len() == N);
        assert_eq!(ids(&log), (0..N).collect::<Vec<_>>(), "round {round}");
        wait_until("actions finished", || queue.pending() == 0);
    }
}

/// The same when the actions awaited different values of the semaphore (later submissions
/// awaiting lower values), and the reactor is forced to handle every wake on its own, the
/// interleaving most likely to let a later action overtake an earlier one.
#[test]
fn ready_actions_issue_in_submission_order_across_values() {
    const N: usize = 24;
    let probe = ParkProbe::new();
    let reactor = Reactor::with_parker("order-values", probe.parker()).unwrap();
    let queue = ActionQueue::new(reactor.handle());
    for serialize in [false, true] {
        let sem = Semaphore::new(0);
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..N {
            let value = (N - i) as u64; // 24, 23, ..., 1
            queue.submit(Fence::at(&sem, value), Fence::new(), logging_issue(&log, i));
        }
        wait_until("actions registered", || sem.waiter_count() == N);
        probe.wait_idle();
        probe.set_serialize_unparks(serialize);
        sem.signal(N as u64).unwrap();
        probe.set_serialize_unparks(false);
        assert!(!probe.serialize_gave_up());
        wait_until("all issued", || log.lock().unwrap().len() == N);
        assert_eq!(
            ids(&log),
            (0..N).collect::<Vec<_>>(),
            "serialize={serialize}"
        );
        wait_until("actions finished", || queue.pending() == 0);
    }
}

/// While an action of the queue is pending on the reactor, a later action whose waits are
/// already reached goes through the reactor too (it does not issue inline on the submitting
/// thread); one released together with it by a signal does not overtake it.
#[test]
fn later_ready_action_goes_through_the_reactor() {
    let reactor = Reactor::new("no-overtake").unwrap();
    let reactor_id = reactor_thread(&reactor.handle());
    let queue = ActionQueue::new(reactor.handle());
    for _ in 0..50 {
        let (gate, ready) = (Semaphore::new(0), Semaphore::new(1));
        let log = Arc::new(Mutex::new(Vec::new()));
        queue.submit(Fence::at(&gate, 1), Fence::new(), logging_issue(&log, 0));
        gate.signal(1).unwrap();
        queue.submit(Fence::at(&ready, 1), Fence::new(), logging_issue(&log, 1));
        wait_until("both issued", || log.lock().unwrap().len() == 2);
        let log = log.lock().unwrap().clone();
        assert_eq!(log.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(log[0].1, reactor_id);
        wait_until("actions finished", || queue.pending() == 0);
    }
    // An action pending on an unreached wait does not hold back a later one that is ready: the
    // order between them is what their semaphores say. The later one issues on the reactor.
    let (gate, ready) = (Semaphore::new(0), Semaphore::new(1));
    let log = Arc::new(Mutex::new(Vec::new()));
    queue.submit(Fence::at(&gate, 1), Fence::new(), logging_issue(&log, 0));
    queue.submit(Fence::at(&ready, 1), Fence::new(), logging_issue(&log, 1));
    wait_until("ready action issued", || log.lock().unwrap().len() == 1);
    assert_eq!(log.lock().unwrap()[0], (1, reactor_id));
    gate.signal(1).unwrap();
    wait_until("gated action issued", || log.lock().unwrap().len() == 2);
    assert_eq!(ids(&log), [1, 0]);
}

/// A host signal releases the dependent actions within one reactor wake: from an idle reactor,
/// one signal costs exactly one wakeup, also for a whole chain of dependent actions (the chain
/// advances inside that wake; each link wakes the next while the reactor runs).
///
/// Uses a parker the test can observe, so "the reactor is idle" is known, not guessed.
#[test]
fn host_signal_releases_actions_within_one_wake() {
    let probe = ParkProbe::new();
    let reactor = Reactor::with_parker("one-wake", probe.parker()).unwrap();
    let handle = reactor.handle();
    let queue = ActionQueue::new(handle.clone());
    for len in [1usize, 2, 10, 100] {
        let sems: Vec<_> = (0..=len).map(|_| Semaphore::new(0)).collect();
        for i in 0..len {
            queue.submit(
                Fence::at(&sems[i], 1),
                Fence::at(&sems[i + 1], 1),
                signal_issue(),
            );
        }
        wait_until("actions registered", || {
            sems[..len].iter().all(|s| s.waiter_count() == 1)
        });
        probe.wait_idle();
        let before = handle.stats();
        let returns = probe.park_returns();
        sems[0].signal(1).unwrap();
        sems[len].wait_blocking(1, Some(HANG)).unwrap();
        // Count until the reactor is idle again, so that a wake it would take after the chain
        // completed (a stale unpark, say) is counted too.
        probe.wait_idle();
        let after = handle.stats();
        assert_eq!(
            after.wakeups - before.wakeups,
            1,
            "chain of {len}: reactor wakeups for one host signal"
        );
        assert_eq!(probe.park_returns() - returns, 1, "chain of {len}");
        assert_eq!(
            after.polls - before.polls,
            len as u64,
            "one poll per action"
        );
        wait_until("actions finished", || queue.pending() == 0);
    }
}

/// The same with the default thread park. The test needs to know that the reactor thread is
/// asleep before it signals (otherwise the signal may be handled by a reactor that is still
/// running, without any wakeup); on Linux it reads the thread's state from /proc.
#[cfg(target_os = "linux")]
#[test]
fn host_signal_releases_actions_within_one_wake_default_parker() {
    let reactor = Reactor::new("one-wake-default").unwrap();
    let handle = reactor.handle();
    let queue = ActionQueue::new(handle.clone());
    // The reactor thread's kernel thread id.
    let (tx, rx) = std::sync::mpsc::channel();
    handle
        .post(halcyon::backend::reactor::Completion::Call(Box::new(
            move || {
                let link = std::fs::read_link("/proc/thread-self").ok();
                let _ = tx.send(link);
            },
        )))
        .unwrap();
    let Some(link) = recv(&rx, "reactor tid") else {
        eprintln!("/proc/thread-self is unavailable; skipping the default-parker variant");
        return;
    };
    let tid = link.file_name().unwrap().to_string_lossy().into_owned();
    let status_path = format!("/proc/self/task/{tid}/status");
    // (state, voluntary context switches) of the reactor thread.
    let sample = || -> (char, u64) {
        let status = std::fs::read_to_string(&status_path).expect("reactor thread status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        let state = field("State:").chars().next().unwrap_or('?');
        let switches = field("voluntary_ctxt_switches:").parse().unwrap_or(0);
        (state, switches)
    };
    // Asleep, and still in the same sleep a little later: parked, since nothing else in this
    // test could block it.
    let wait_asleep = || {
        wait_until("reactor thread asleep", || {
            let first = sample();
            if first.0 != 'S' {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
            sample() == first
        })
    };

    for len in [1usize, 10, 100] {
        let sems: Vec<_> = (0..=len).map(|_| Semaphore::new(0)).collect();
        for i in 0..len {
            queue.submit(
                Fence::at(&sems[i], 1),
                Fence::at(&sems[i + 1], 1),
                signal_issue(),
            );
        }
        wait_until("actions registered", || {
            sems[..len].iter().all(|s| s.waiter_count() == 1)
        });
        wait_asleep();
        let before = handle.stats();
        sems[0].signal(1).unwrap();
        sems[len].wait_blocking(1, Some(HANG)).unwrap();
        wait_until("actions finished", || queue.pending() == 0);
        wait_asleep();
        let after = handle.stats();
        assert_eq!(
            after.wakeups - before.wakeups,
            1,
            "chain of {len}: reactor wakeups for one host signal"
        );
        wait_until("actions finished", || queue.pending() == 0);
    }
}

/// Every action issues exactly once, with many actions and concurrent signals.
#[test]
fn each_action_issues_exactly_once() {
    const N: u64 = 1000;
    let reactor = Reactor::new("exactly-once").unwrap();
    let queue = ActionQueue::new(reactor.handle());
    let sem = Semaphore::new(0);
    let done = Semaphore::new(0);
    let counts: Arc<Vec<AtomicUsize>> = Arc::new((0..N).map(|_| AtomicUsize::new(0)).collect());
    let total = Arc::new(AtomicUsize::new(0));
    for i in 0..N {
        let (counts, total, done) = (counts.clone(), total.clone(), done.clone());
        queue.submit(
            Fence::at(&sem, i % 50 + 1),
            Fence::new(),
            Box::new(move |_: &Fence| {
                counts[i as usize].fetch_add(1, Ordering::SeqCst);
                if total.fetch_add(1, Ordering::SeqCst) + 1 == N as usize {
                    done.signal(1)?;
                }
                Ok(())
            }),
        );
    }
    let signallers: Vec<_> = (0..2)
        .map(|_| {
            let sem = sem.clone();
            spawn_thread("signaller", move || {
                for v in 1..=50 {
                    let _ = sem.signal(v);
                }
            })
        })
        .collect();
    for rx in &signallers {
        recv(rx, "signaller");
    }
    done.wait_blocking(1, Some(HANG)).unwrap();
    wait_until("actions finished", || queue.pending() == 0);
    assert!(counts.iter().all(|c| c.load(Ordering::SeqCst) == 1));
    assert!(format!("{queue:?}").contains("exactly-once"));
    assert_eq!(queue.reactor().name(), "exactly-once");
}
