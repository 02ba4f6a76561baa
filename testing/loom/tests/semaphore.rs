//! Model checks of the timeline semaphore: wait registration against signals, racing signalers,
//! failure, and cancelled waits.
//!
//! A `block_on` that is never woken parks forever, which loom reports as a deadlock, so every
//! model that awaits also checks that no wakeup is lost.
#![cfg(loom)]

use std::sync::Arc;
use std::task::Poll;

use halcyon::{Error, Semaphore, StatusCode};
use loom::future::block_on;
use loom::thread;
use loom_tests::{counting_waker, model, poll_once, spawn_fail, spawn_signal};

/// A wait that registers (inside `block_on`) while another thread signals its value is woken:
/// no lost wakeup, and nothing stays registered.
#[test]
fn wait_registration_vs_signal_no_lost_wakeup() {
    model(|| {
        let sem = Semaphore::new(0);
        let signaler = spawn_signal(&sem, 1);
        block_on(sem.wait(1)).expect("the wait completes with Ok");
        signaler.join().unwrap().expect("the only signal succeeds");
        assert_eq!(sem.query().unwrap(), 1);
        assert_eq!(sem.waiter_count(), 0);
    });
}

/// One manual poll races a signal. If the poll registered, the signal wakes the stored waker
/// exactly once and the next poll is ready; if the poll saw the value, nothing is woken. Either
/// way no clone of the waker is left behind in the semaphore.
#[test]
fn registered_waiter_is_woken_exactly_once() {
    model(|| {
        let sem = Semaphore::new(0);
        let (counter, waker) = counting_waker();
        let mut wait = Box::pin(sem.wait(1));
        let signaler = spawn_signal(&sem, 1);
        let first = poll_once(wait.as_mut(), &waker);
        signaler.join().unwrap().unwrap();
        match first {
            Poll::Ready(result) => {
                result.unwrap();
                assert_eq!(
                    counter.wakes(),
                    0,
                    "a wait that never registered is not woken"
                );
            }
            Poll::Pending => {
                assert_eq!(
                    counter.wakes(),
                    1,
                    "a registered wait is woken exactly once"
                );
                assert!(matches!(
                    poll_once(wait.as_mut(), &waker),
                    Poll::Ready(Ok(()))
                ));
            }
        }
        drop(wait);
        drop(waker);
        assert_eq!(sem.waiter_count(), 0);
        assert_eq!(Arc::strong_count(&counter), 1, "a waker clone leaked");
    });
}

/// A registered wait re-polled with a new waker while a signal races: the new waker replaces the
/// old one, so exactly one of the two is woken, and it is the new one whenever the re-poll
/// returned `Pending`.
#[test]
fn repoll_with_new_waker_vs_signal() {
    model(|| {
        let sem = Semaphore::new(0);
        let (old_counter, old_waker) = counting_waker();
        let (new_counter, new_waker) = counting_waker();
        let mut wait = Box::pin(sem.wait(1));
        assert!(poll_once(wait.as_mut(), &old_waker).is_pending());
        let signaler = spawn_signal(&sem, 1);
        let repoll = poll_once(wait.as_mut(), &new_waker);
        signaler.join().unwrap().unwrap();
        match repoll {
            // The signal came first and woke the waker registered then.
            Poll::Ready(result) => {
                result.unwrap();
                assert_eq!((old_counter.wakes(), new_counter.wakes()), (1, 0));
            }
            // The re-poll replaced the waker before the signal took it.
            Poll::Pending => assert_eq!((old_counter.wakes(), new_counter.wakes()), (0, 1)),
        }
        drop(wait);
        assert_eq!(sem.waiter_count(), 0);
    });
}

/// Two threads signal the same value while a third waits for it: exactly one signal wins, the
/// other fails with `InvalidArgument`, the timeline stays at that value and the waiter is woken.
#[test]
fn equal_signals_exactly_one_wins() {
    model(|| {
        let sem = Semaphore::new(0);
        let first = spawn_signal(&sem, 1);
        let second = spawn_signal(&sem, 1);
        block_on(sem.wait(1)).unwrap();
        let results = (first.join().unwrap(), second.join().unwrap());
        let loser = match results {
            (Ok(()), Err(error)) | (Err(error), Ok(())) => error,
            other => panic!("exactly one of two equal signals must win, got {other:?}"),
        };
        assert_eq!(loser.code(), StatusCode::InvalidArgument);
        assert_eq!(sem.query().unwrap(), 1);
        assert_eq!(sem.waiter_count(), 0);
    });
}

/// `signal(1)` races `signal(2)`: the payload any thread observes never goes down, `signal(2)`
/// always wins, `signal(1)` is rejected with `InvalidArgument` exactly when it comes second, and
/// the timeline ends at the max.
#[test]
fn unequal_signals_are_monotonic() {
    model(|| {
        let sem = Semaphore::new(0);
        let signal_after = |value: u64| {
            let sem = sem.clone();
            thread::spawn(move || {
                let result = sem.signal(value);
                let after = sem.query().unwrap();
                if result.is_ok() {
                    assert!(after >= value, "payload {after} below own signal {value}");
                }
                (result, after)
            })
        };
        let one = signal_after(1);
        let two = signal_after(2);
        let observed = [sem.query().unwrap(), sem.query().unwrap()];
        assert!(
            observed[0] <= observed[1],
            "payload went down: {observed:?}"
        );
        let (one, one_saw) = one.join().unwrap();
        let (two, _) = two.join().unwrap();
        two.expect("signal(2) is above anything the timeline can hold before it");
        match one {
            Ok(()) => assert!(one_saw >= 1),
            Err(error) => {
                assert_eq!(error.code(), StatusCode::InvalidArgument);
                assert_eq!(one_saw, 2, "signal(1) may only lose to signal(2)");
            }
        }
        assert_eq!(sem.query().unwrap(), 2);
    });
}

/// `fail` races a `signal` and a waiter of the signalled value: the waiter ends with `Ok` (only
/// if the signal won) or with the very failure, never hangs; the signal fails only with that
/// failure; afterwards every query reports it.
#[test]
fn fail_vs_wait_vs_signal() {
    model(|| {
        let sem = Semaphore::new(0);
        let failure = Error::new(StatusCode::Aborted, "device lost");
        let signaler = spawn_signal(&sem, 1);
        let failer = spawn_fail(&sem, &failure);
        let waited = block_on(sem.wait(1));
        let signalled = signaler.join().unwrap();
        failer.join().unwrap();
        match &waited {
            Ok(()) => assert!(signalled.is_ok(), "a wait succeeded without a signal"),
            Err(error) => assert!(error.same_as(&failure), "wrong error: {error:?}"),
        }
        if let Err(error) = &signalled {
            assert!(error.same_as(&failure), "wrong error: {error:?}");
        }
        assert!(sem.is_failed());
        assert!(sem.query().unwrap_err().same_as(&failure));
        assert_eq!(sem.waiter_count(), 0);
    });
}

/// A waiter for a value no signal reaches is ended by a racing `fail` with that failure, while an
/// unrelated signal moves the timeline below it.
#[test]
fn fail_ends_unreached_wait() {
    model(|| {
        let sem = Semaphore::new(0);
        let failure = Error::new(StatusCode::Aborted, "device lost");
        let signaler = spawn_signal(&sem, 1);
        let failer = spawn_fail(&sem, &failure);
        let error = block_on(sem.wait(2)).expect_err("only the failure can end this wait");
        assert!(error.same_as(&failure));
        let _ = signaler.join().unwrap();
        failer.join().unwrap();
        assert!(sem.query().unwrap_err().same_as(&failure));
        assert_eq!(sem.waiter_count(), 0);
    });
}

/// Two racing failures: the first wins, and the waiter, later queries and later signals all see
/// that same one.
#[test]
fn first_failure_wins() {
    model(|| {
        let sem = Semaphore::new(0);
        let a = Error::new(StatusCode::Aborted, "a");
        let b = Error::new(StatusCode::Internal, "b");
        let fail_a = spawn_fail(&sem, &a);
        let fail_b = spawn_fail(&sem, &b);
        let error = block_on(sem.wait(1)).unwrap_err();
        assert!(
            error.same_as(&a) || error.same_as(&b),
            "unknown error {error:?}"
        );
        fail_a.join().unwrap();
        fail_b.join().unwrap();
        assert!(sem.query().unwrap_err().same_as(&error));
        assert!(sem.signal(1).unwrap_err().same_as(&error));
    });
}

/// A registered wait is dropped on one thread while another signals its value: nothing panics,
/// the waker is woken at most once, and no waiter or waker clone is left behind.
#[test]
fn dropped_wait_vs_signal() {
    model(|| {
        let sem = Semaphore::new(0);
        let (counter, waker) = counting_waker();
        let mut wait = Box::pin(sem.wait(1));
        assert!(poll_once(wait.as_mut(), &waker).is_pending());
        assert_eq!(sem.waiter_count(), 1);
        let dropper = thread::spawn(move || drop(wait));
        sem.signal(1).unwrap();
        dropper.join().unwrap();
        assert_eq!(sem.waiter_count(), 0);
        assert!(counter.wakes() <= 1);
        drop(waker);
        assert_eq!(Arc::strong_count(&counter), 1, "a waker clone leaked");
    });
}

/// A registered wait is dropped while a signal below its value runs: the signal must not wake
/// it, and the drop alone must deregister it.
#[test]
fn dropped_wait_vs_signal_below() {
    model(|| {
        let sem = Semaphore::new(0);
        let (counter, waker) = counting_waker();
        let mut wait = Box::pin(sem.wait(2));
        assert!(poll_once(wait.as_mut(), &waker).is_pending());
        let dropper = thread::spawn(move || drop(wait));
        sem.signal(1).unwrap();
        dropper.join().unwrap();
        assert_eq!(sem.waiter_count(), 0);
        assert_eq!(
            counter.wakes(),
            0,
            "a signal below the awaited value woke it"
        );
        drop(waker);
        assert_eq!(Arc::strong_count(&counter), 1, "a waker clone leaked");
    });
}

/// A registered wait is dropped while the semaphore fails: at most one wake, nothing left behind.
#[test]
fn dropped_wait_vs_fail() {
    model(|| {
        let sem = Semaphore::new(0);
        let (counter, waker) = counting_waker();
        let mut wait = Box::pin(sem.wait(1));
        assert!(poll_once(wait.as_mut(), &waker).is_pending());
        let dropper = thread::spawn(move || drop(wait));
        sem.fail(Error::new(StatusCode::Aborted, "device lost"));
        dropper.join().unwrap();
        assert_eq!(sem.waiter_count(), 0);
        assert!(counter.wakes() <= 1);
        drop(waker);
        assert_eq!(Arc::strong_count(&counter), 1, "a waker clone leaked");
    });
}

/// The last handle that could signal signals the awaited value and is dropped while the wait
/// registers: the wait completes `Ok` and the semaphore stays at the value. (An abandonment
/// check that did not look at the payload failed a wait whose value had just been reached.)
#[test]
fn signal_then_drop_last_handle_vs_wait() {
    model(|| {
        let sem = Semaphore::new(0);
        let wait = sem.wait(1);
        let signaler = thread::spawn(move || {
            sem.signal(1).expect("the only signal succeeds");
            drop(sem);
        });
        block_on(wait).expect("a reached value is never reported abandoned");
        signaler.join().unwrap();
    });
}

/// The last handle that could signal is dropped unsignalled while the wait registers: the wait
/// ends with `Aborted` ("abandoned") instead of hanging.
#[test]
fn drop_last_handle_vs_wait_ends_it() {
    model(|| {
        let sem = Semaphore::new(0);
        let wait = sem.wait(1);
        let dropper = thread::spawn(move || drop(sem));
        let error = block_on(wait).expect_err("nothing can signal any more");
        assert_eq!(error.code(), StatusCode::Aborted, "{error}");
        dropper.join().unwrap();
    });
}
