//! Timeline semaphore semantics under real executors and OS threads: ordering of racing
//! signals, selective wakes, failure delivery and happens-before.

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use common::{poll_once, recv, spawn_thread, wait_until_async, within, CountingWaker, HANG};
use halcyon::{Error, Semaphore, StatusCode};

/// Thousands of tokio tasks await distinct values of one semaphore while several OS threads race
/// to signal every value in increasing order. Exactly one signaller wins each value, the others
/// get `InvalidArgument`; every waiter completes and sees the data written before the signal
/// that released it; the final value is the max.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_signallers_release_thousands_of_tasks() {
    const WAITERS: u64 = 4000;
    const SIGNALLERS: usize = 4;

    let sem = Semaphore::new(0);
    // data[v] is written (Relaxed) before signal(v); the semaphore must publish it.
    let data: Arc<Vec<AtomicU64>> = Arc::new((0..=WAITERS).map(|_| AtomicU64::new(0)).collect());

    let mut tasks = Vec::new();
    for value in 1..=WAITERS {
        let (sem, data) = (sem.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            sem.wait(value).await?;
            let seen = data[value as usize].load(Ordering::Relaxed);
            assert_eq!(
                seen, value,
                "waiter {value} did not see the data published before its signal"
            );
            Ok::<u64, Error>(value)
        }));
    }
    // Let (almost) every task register, so that the signals below really wake them.
    wait_until_async("all waiters registered", || {
        sem.waiter_count() == WAITERS as usize
    })
    .await;

    let wins: Arc<Vec<AtomicUsize>> =
        Arc::new((0..=WAITERS).map(|_| AtomicUsize::new(0)).collect());
    let signallers: Vec<_> = (0..SIGNALLERS)
        .map(|t| {
            let (sem, data, wins) = (sem.clone(), data.clone(), wins.clone());
            spawn_thread(&format!("signaller-{t}"), move || {
                for value in 1..=WAITERS {
                    data[value as usize].store(value, Ordering::Relaxed);
                    match sem.signal(value) {
                        Ok(()) => {
                            wins[value as usize].fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) if e.code() == StatusCode::InvalidArgument => {}
                        Err(e) => panic!("signal({value}) failed unexpectedly: {e}"),
                    }
                }
            })
        })
        .collect();
    for rx in &signallers {
        recv(rx, "signaller thread");
    }

    for (i, task) in tasks.into_iter().enumerate() {
        let value = within("waiter task", task)
            .await
            .expect("waiter task panicked")
            .expect("waiter got an error");
        assert_eq!(value, i as u64 + 1);
    }
    for value in 1..=WAITERS {
        assert_eq!(
            wins[value as usize].load(Ordering::SeqCst),
            1,
            "value {value} must be won by exactly one signaller"
        );
    }
    assert_eq!(sem.query().unwrap(), WAITERS);
    assert_eq!(sem.waiter_count(), 0);
}

/// Waiters register while signals are already racing: registration and signalling interleave in
/// every way, and still every waiter completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_registering_during_signals_all_complete() {
    const VALUES: u64 = 3000;
    let sem = Semaphore::new(0);

    let signallers: Vec<_> = (0..3)
        .map(|t| {
            let sem = sem.clone();
            spawn_thread(&format!("signaller-{t}"), move || {
                for value in 1..=VALUES {
                    if let Err(e) = sem.signal(value) {
                        assert_eq!(e.code(), StatusCode::InvalidArgument, "{e}");
                    }
                    if value % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let mut tasks = Vec::new();
    for value in (1..=VALUES).rev() {
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move { sem.wait(value).await }));
    }
    for rx in &signallers {
        recv(rx, "signaller thread");
    }
    for task in tasks {
        within("waiter task", task).await.unwrap().unwrap();
    }
    assert_eq!(sem.query().unwrap(), VALUES);
    assert_eq!(sem.waiter_count(), 0);
}

/// A signal wakes exactly the waiters whose value it reaches, once each, in both the
/// pop-one-by-one and the split-the-map paths, with several waiters per value.
#[test]
fn signal_wakes_exactly_the_reached_waiters() {
    const N: u64 = 100;
    let sem = Semaphore::new(0);
    // Two waiters per value, the second registered after all the first ones.
    let mut waiters: Vec<(u64, _, _)> = (1..=N)
        .chain(1..=N)
        .map(|value| (value, sem.wait(value), CountingWaker::new()))
        .collect();
    for (_, wait, counter) in &mut waiters {
        assert!(poll_once(wait, &counter.waker()).is_pending());
    }
    assert_eq!(sem.waiter_count(), 2 * N as usize);

    // 1 (two waiters: one-by-one path), 5 (eight), 60 (110: split path), then the rest.
    for k in [1u64, 5, 60, N] {
        sem.signal(k).unwrap();
        for (value, _, counter) in &waiters {
            let expected = usize::from(*value <= k);
            assert_eq!(
                counter.wakes(),
                expected,
                "after signal({k}), waiter on {value} was woken {} times",
                counter.wakes()
            );
        }
        let still_waiting = waiters.iter().filter(|(v, _, _)| *v > k).count();
        assert_eq!(sem.waiter_count(), still_waiting);
        assert_eq!(still_waiting, 2 * (N - k) as usize);
    }
    for (value, wait, counter) in &mut waiters {
        assert!(
            matches!(poll_once(wait, &counter.waker()), Poll::Ready(Ok(()))),
            "waiter on {value} not ready after the signal"
        );
    }
}

/// The same with tokio tasks: after `signal(k)` exactly the tasks on `1..=k` finish, the others
/// stay pending and registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_completes_exactly_the_reached_tasks() {
    const N: usize = 64;
    const K: usize = 23;
    let sem = Semaphore::new(0);
    let done: Arc<Vec<AtomicBool>> = Arc::new((0..=N).map(|_| AtomicBool::new(false)).collect());
    let mut tasks = Vec::new();
    for value in 1..=N {
        let (sem, done) = (sem.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            sem.wait(value as u64).await.unwrap();
            done[value].store(true, Ordering::SeqCst);
        }));
    }
    wait_until_async("all tasks registered", || sem.waiter_count() == N).await;

    sem.signal(K as u64).unwrap();
    let mut pending = tasks.split_off(K);
    for task in tasks {
        within("released task", task).await.unwrap();
    }
    // The released tasks are done; the others were never woken, so they cannot have finished.
    for value in 1..=N {
        assert_eq!(
            done[value].load(Ordering::SeqCst),
            value <= K,
            "task {value}"
        );
    }
    assert!(pending.iter().all(|t| !t.is_finished()));
    assert_eq!(sem.waiter_count(), N - K);

    sem.signal(N as u64).unwrap();
    for task in pending.drain(..) {
        within("task released by the second signal", task)
            .await
            .unwrap();
    }
    assert!(done[1..].iter().all(|d| d.load(Ordering::SeqCst)));
    assert_eq!(sem.waiter_count(), 0);
}

/// Re-polling a registered wait with the same waker does not register twice; with a different
/// waker it replaces the stored one, and only the latest waker is woken.
#[test]
fn repoll_keeps_one_registration_and_the_latest_waker() {
    let sem = Semaphore::new(0);
    let (first, second) = (CountingWaker::new(), CountingWaker::new());
    let mut wait = sem.wait(1);
    assert!(poll_once(&mut wait, &first.waker()).is_pending());
    assert!(poll_once(&mut wait, &first.waker()).is_pending());
    assert_eq!(sem.waiter_count(), 1);
    assert!(poll_once(&mut wait, &second.waker()).is_pending());
    assert_eq!(sem.waiter_count(), 1);
    sem.signal(1).unwrap();
    assert_eq!(first.wakes(), 0, "a replaced waker must not be woken");
    assert_eq!(second.wakes(), 1);
    assert!(matches!(
        poll_once(&mut wait, &second.waker()),
        Poll::Ready(Ok(()))
    ));
    assert_eq!(sem.waiter_count(), 0);
}

/// A wait for a value already reached is ready on its first poll and registers nothing.
#[test]
fn reached_value_is_ready_without_registering() {
    let sem = Semaphore::new(7);
    let counter = CountingWaker::new();
    for value in [0, 1, 7] {
        let mut wait = sem.wait(value);
        assert_eq!(wait.value(), value);
        assert!(wait.semaphore().ptr_eq(&sem));
        assert!(matches!(
            poll_once(&mut wait, &counter.waker()),
            Poll::Ready(Ok(()))
        ));
    }
    assert_eq!(sem.waiter_count(), 0);
    assert_eq!(counter.wakes(), 0);
}

/// Signals must move strictly up; rejected signals leave the timeline and the waiters alone.
#[test]
fn non_increasing_signals_are_rejected_without_effect() {
    let sem = Semaphore::new(3);
    let counter = CountingWaker::new();
    let mut wait = sem.wait(4);
    assert!(poll_once(&mut wait, &counter.waker()).is_pending());
    for bad in [0, 2, 3] {
        let err = sem.signal(bad).unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument);
        assert!(err.message().contains(&bad.to_string()), "{err}");
        assert!(err.message().contains('3'), "{err}");
    }
    let err = sem.signal(u64::MAX).unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert_eq!(sem.query().unwrap(), 3);
    assert_eq!(counter.wakes(), 0);
    assert_eq!(sem.waiter_count(), 1);
    assert!(!sem.is_failed());
}

/// The top of the timeline: `MAX_VALUE` can be signalled, `u64::MAX` is reserved, initial values
/// are clamped, and a wait for `u64::MAX` can only end by failure.
#[test]
fn max_value_edges() {
    let clamped = Semaphore::new(u64::MAX);
    assert_eq!(clamped.query().unwrap(), Semaphore::MAX_VALUE);
    assert!(!clamped.is_failed());

    let sem = Semaphore::new(0);
    sem.signal(Semaphore::MAX_VALUE).unwrap();
    assert_eq!(sem.query().unwrap(), Semaphore::MAX_VALUE);
    let counter = CountingWaker::new();
    let mut unreachable = sem.wait(u64::MAX);
    assert!(poll_once(&mut unreachable, &counter.waker()).is_pending());
    assert_eq!(sem.waiter_count(), 1);
    let err = Error::new(StatusCode::Aborted, "end of the line");
    sem.fail(err.clone());
    assert_eq!(counter.wakes(), 1);
    match poll_once(&mut unreachable, &counter.waker()) {
        Poll::Ready(Err(e)) => assert!(e.same_as(&err)),
        other => panic!("expected the failure, got {other:?}"),
    }
}

/// A failure reaches every waiter (tokio tasks and threads in `wait_blocking`) as the very same
/// error; later signals, queries, waits and failures all see that first error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failure_reaches_every_waiter_as_the_same_error() {
    const TASKS: u64 = 500;
    const THREADS: u64 = 8;
    let sem = Semaphore::new(0);
    sem.signal(1).unwrap();

    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move { sem.wait(2 + i % 50).await }));
    }
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let sem = sem.clone();
            spawn_thread(&format!("blocking-waiter-{i}"), move || {
                sem.wait_blocking(10 + i, Some(HANG))
            })
        })
        .collect();
    wait_until_async("all waiters registered", || {
        sem.waiter_count() == (TASKS + THREADS) as usize
    })
    .await;

    let err = Error::new(StatusCode::DataLoss, "device lost");
    sem.fail(err.clone());
    sem.fail(Error::new(
        StatusCode::Internal,
        "a later failure is ignored",
    ));

    for task in tasks {
        let e = within("failed waiter task", task)
            .await
            .unwrap()
            .unwrap_err();
        assert!(e.same_as(&err), "task got a different error: {e}");
    }
    for rx in &threads {
        let e = recv(rx, "blocking waiter").unwrap_err();
        assert!(e.same_as(&err), "thread got a different error: {e}");
    }
    assert_eq!(sem.waiter_count(), 0);
    assert!(sem.is_failed());
    assert!(sem.query().unwrap_err().same_as(&err));
    assert!(sem.signal(100).unwrap_err().same_as(&err));
    // Future waits, even for values reached before the failure, get it too.
    assert!(sem.wait(0).await.unwrap_err().same_as(&err));
    assert!(sem.wait(1000).await.unwrap_err().same_as(&err));
    assert!(sem.wait_blocking(1, Some(HANG)).unwrap_err().same_as(&err));
    let debug = format!("{sem:?}");
    assert!(debug.contains("device lost"), "{debug}");
}

/// Waiters that completed before a failure keep their `Ok`; the failure reaches only the rest.
#[test]
fn failure_after_partial_progress() {
    let sem = Semaphore::new(0);
    let counter = CountingWaker::new();
    let mut early = sem.wait(1);
    let mut late = sem.wait(2);
    assert!(poll_once(&mut early, &counter.waker()).is_pending());
    assert!(poll_once(&mut late, &counter.waker()).is_pending());
    sem.signal(1).unwrap();
    assert!(matches!(
        poll_once(&mut early, &counter.waker()),
        Poll::Ready(Ok(()))
    ));
    let err = Error::new(StatusCode::Aborted, "queue torn down");
    sem.fail(err.clone());
    assert!(
        matches!(poll_once(&mut late, &counter.waker()), Poll::Ready(Err(e)) if e.same_as(&err))
    );
    assert_eq!(counter.wakes(), 2);
}

/// Clones are handles to one timeline.
#[test]
fn clones_share_the_timeline() {
    let a = Semaphore::new(0);
    let b = a.clone();
    let other = Semaphore::new(0);
    assert!(a.ptr_eq(&b));
    assert!(!a.ptr_eq(&other));
    b.signal(4).unwrap();
    assert_eq!(a.query().unwrap(), 4);
    assert_eq!(other.query().unwrap(), 0);
    let debug = format!("{a:?}");
    assert!(debug.contains('4'), "{debug}");
}

/// Futures and errors cross threads.
#[test]
fn wait_and_error_are_send() {
    fn send<T: Send + 'static>(_: &T) {}
    let sem = Semaphore::new(0);
    send(&sem);
    send(&sem.wait(1));
    send(&Error::new(StatusCode::Unknown, "x"));
}

/// A signal wakes the waiters it reaches in registration order, even when they awaited
/// different values (the pending-action executor relies on this for submission order).
#[test]
fn signal_wakes_in_registration_order() {
    use std::sync::Mutex;
    use std::task::{Wake, Waker};

    struct Recorder {
        id: usize,
        log: Arc<Mutex<Vec<usize>>>,
    }
    impl Wake for Recorder {
        fn wake(self: Arc<Self>) {
            self.log.lock().unwrap().push(self.id);
        }
    }

    // Values in a scrambled order, repeated so that both the pop and the split paths run.
    let values: Vec<u64> = (0..40u64).map(|i| 1 + (i * 17) % 23).collect();
    let sem = Semaphore::new(0);
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut waits: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(id, &value)| {
            let waker = Waker::from(Arc::new(Recorder {
                id,
                log: log.clone(),
            }));
            let mut wait = sem.wait(value);
            assert!(poll_once(&mut wait, &waker).is_pending());
            wait
        })
        .collect();

    sem.signal(12).unwrap();
    let expected: Vec<usize> = (0..values.len()).filter(|&i| values[i] <= 12).collect();
    assert!(expected.len() > 8, "the split path must be exercised");
    assert_eq!(*log.lock().unwrap(), expected);

    log.lock().unwrap().clear();
    sem.signal(23).unwrap();
    let expected: Vec<usize> = (0..values.len()).filter(|&i| values[i] > 12).collect();
    assert_eq!(*log.lock().unwrap(), expected);
    waits.clear();
    assert_eq!(sem.waiter_count(), 0);
}

/// A wait on a semaphore nothing can signal any more ends with `Aborted` instead of hanging:
/// a pending wait when the last handle goes, a wait first polled after it went; a wait whose
/// value was reached still succeeds, and a live clone keeps the semaphore signallable.
#[test]
fn waits_on_an_abandoned_semaphore_fail() {
    let sem = Semaphore::new(0);
    let clone = sem.clone();
    let mut pending = Box::pin(sem.wait(1));
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    assert!(pending.as_mut().poll(&mut cx).is_pending());
    drop(sem);
    assert!(
        pending.as_mut().poll(&mut cx).is_pending(),
        "a clone still lives: the semaphore can be signalled"
    );
    let late = clone.wait(2);
    drop(clone);
    let error = futures::executor::block_on(pending).unwrap_err();
    assert_eq!(error.code(), StatusCode::Aborted, "{error}");
    assert!(error.message().contains("abandoned"), "{error}");
    assert!(error.message().contains("wait for"), "{error}");
    let error = futures::executor::block_on(late).unwrap_err();
    assert_eq!(error.code(), StatusCode::Aborted, "{error}");

    // Never polled before the last handle went: fails on its first poll.
    let sem = Semaphore::new(3);
    let (reached, unreached) = (sem.wait(3), sem.wait(4));
    drop(sem);
    futures::executor::block_on(reached).expect("a reached value needs no signaller");
    let error = futures::executor::block_on(unreached).unwrap_err();
    assert_eq!(error.code(), StatusCode::Aborted, "{error}");
}
