//! Cancel-safety and timeouts: abandoned waits (dropped futures, lost `select!` branches,
//! timeouts, aborted tasks, timed-out blocking waits) leave no waiter behind.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{poll_once, recv, spawn_thread, wait_until_async, within, CountingWaker, HANG};
use futures::task::noop_waker;
use halcyon::{Fence, Semaphore, StatusCode};

#[test]
fn dropping_a_registered_wait_deregisters_it() {
    let sem = Semaphore::new(0);
    let waker = noop_waker();
    let mut waits: Vec<_> = (1..=50).map(|v| sem.wait(v % 7 + 1)).collect();
    for wait in &mut waits {
        assert!(poll_once(wait, &waker).is_pending());
    }
    assert_eq!(sem.waiter_count(), 50);
    // Drop every other one, then the rest.
    let mut i = 0;
    waits.retain(|_| {
        i += 1;
        i % 2 == 0
    });
    assert_eq!(sem.waiter_count(), 25);
    drop(waits);
    assert_eq!(sem.waiter_count(), 0);
    // The timeline still works afterwards.
    let counter = CountingWaker::new();
    let mut wait = sem.wait(1);
    assert!(poll_once(&mut wait, &counter.waker()).is_pending());
    sem.signal(1).unwrap();
    assert_eq!(counter.wakes(), 1);
}

#[test]
fn never_polled_and_completed_waits_leave_nothing() {
    let sem = Semaphore::new(0);
    drop(sem.wait(5)); // never polled: never registered
    let mut done = sem.wait(1);
    assert!(poll_once(&mut done, &noop_waker()).is_pending());
    sem.signal(1).unwrap();
    assert!(matches!(
        poll_once(&mut done, &noop_waker()),
        Poll::Ready(Ok(()))
    ));
    drop(done);
    // A wait that was woken (removed by the signal) but is dropped without being polled again.
    let mut woken = sem.wait(2);
    assert!(poll_once(&mut woken, &noop_waker()).is_pending());
    sem.signal(2).unwrap();
    drop(woken);
    assert_eq!(sem.waiter_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_timeout_on_wait_leaves_no_waiter() {
    let sem = Semaphore::new(0);
    let result = tokio::time::timeout(Duration::from_millis(20), sem.wait(1)).await;
    assert!(result.is_err(), "the wait cannot complete: nothing signals");
    assert_eq!(sem.waiter_count(), 0);

    // A zero timeout still polls the wait once (registering it), then drops it.
    for v in 1..=100 {
        assert!(tokio::time::timeout(Duration::ZERO, sem.wait(v))
            .await
            .is_err());
    }
    assert_eq!(sem.waiter_count(), 0);

    // A timeout that is long enough completes normally.
    let signaller = {
        let sem = sem.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            sem.signal(1).unwrap();
        })
    };
    tokio::time::timeout(HANG, sem.wait(1))
        .await
        .expect("signalled wait timed out")
        .unwrap();
    signaller.await.unwrap();
    assert_eq!(sem.waiter_count(), 0);
}

#[tokio::test(flavor = "current_thread")]
async fn tokio_select_losing_branch_deregisters() {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    b.signal(1).unwrap();
    for _ in 0..100 {
        tokio::select! {
            biased;
            r = a.wait(1) => panic!("a was never signalled: {r:?}"),
            r = b.wait(1) => r.unwrap(),
        }
    }
    assert_eq!(a.waiter_count(), 0);

    // The losing branch registered (it was polled first and was pending).
    let mut registered_then_lost = 0;
    for v in 1..=100 {
        tokio::select! {
            biased;
            r = a.wait(v) => panic!("{r:?}"),
            () = async { registered_then_lost += usize::from(a.waiter_count() == 1) } => {}
        }
    }
    assert_eq!(registered_then_lost, 100);
    assert_eq!(a.waiter_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_task_deregisters_its_wait() {
    let sem = Semaphore::new(0);
    let tasks: Vec<_> = (1..=20)
        .map(|v| {
            let sem = sem.clone();
            tokio::spawn(async move { sem.wait(v).await })
        })
        .collect();
    wait_until_async("tasks registered", || sem.waiter_count() == 20).await;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let err = within("aborted task", task).await.unwrap_err();
        assert!(err.is_cancelled());
    }
    assert_eq!(sem.waiter_count(), 0);
}

/// Dropping `WaitAll` / `WaitAny` removes the waiters of every entry.
#[test]
fn dropping_fence_waits_deregisters_every_entry() {
    let sems: Vec<_> = (0..5).map(|_| Semaphore::new(0)).collect();
    let fence: Fence = sems.iter().map(|s| (s, 3)).collect();
    let mut all = fence.wait_all();
    let mut any = fence.wait_any();
    assert!(poll_once(&mut all, &noop_waker()).is_pending());
    assert!(poll_once(&mut any, &noop_waker()).is_pending());
    assert!(sems.iter().all(|s| s.waiter_count() == 2));
    drop(all);
    assert!(sems.iter().all(|s| s.waiter_count() == 1));
    drop(any);
    assert!(sems.iter().all(|s| s.waiter_count() == 0));

    // Partially satisfied, then dropped.
    let mut all = fence.wait_all();
    sems[1].signal(3).unwrap();
    sems[3].signal(5).unwrap();
    assert!(poll_once(&mut all, &noop_waker()).is_pending());
    assert_eq!(
        sems.iter().map(Semaphore::waiter_count).collect::<Vec<_>>(),
        [1, 0, 1, 0, 1]
    );
    drop(all);
    assert!(sems.iter().all(|s| s.waiter_count() == 0));
}

/// Waits dropped while another thread signals: a drop racing a wake must neither leak the waiter
/// nor corrupt the map.
#[test]
fn drops_racing_signals_leave_nothing() {
    const ROUNDS: u64 = 20_000;
    let sem = Semaphore::new(0);
    let signaller = {
        let sem = sem.clone();
        spawn_thread("signaller", move || {
            for v in 1..=ROUNDS {
                sem.signal(v).unwrap();
            }
        })
    };
    let waker = noop_waker();
    let deadline = std::time::Instant::now() + HANG;
    let mut v = 0;
    while v < ROUNDS {
        assert!(
            std::time::Instant::now() < deadline,
            "signaller stalled at {v}"
        );
        v = sem.query().unwrap();
        let mut waits = [sem.wait(v + 1), sem.wait(v + 2), sem.wait(v + 1000)];
        for wait in &mut waits {
            let _ = poll_once(wait, &waker);
        }
    }
    recv(&signaller, "signaller");
    assert_eq!(sem.waiter_count(), 0);
}

#[test]
fn wait_blocking_deadline_says_where_the_semaphore_is() {
    let sem = Semaphore::new(0);
    sem.signal(41).unwrap();
    let err = sem
        .wait_blocking(42, Some(Duration::from_millis(20)))
        .unwrap_err();
    assert_eq!(err.code(), StatusCode::DeadlineExceeded);
    let message = err.to_string();
    assert!(message.contains("42"), "names the awaited value: {message}");
    assert!(
        message.contains("at 41"),
        "names the current value: {message}"
    );
    assert_eq!(
        sem.waiter_count(),
        0,
        "a timed-out blocking wait leaves nothing behind"
    );

    // Zero timeout: an unreached value times out at once, a reached one succeeds.
    let err = sem.wait_blocking(42, Some(Duration::ZERO)).unwrap_err();
    assert_eq!(err.code(), StatusCode::DeadlineExceeded);
    sem.wait_blocking(41, Some(Duration::ZERO)).unwrap();
    assert_eq!(sem.waiter_count(), 0);
}

#[test]
fn wait_blocking_is_released_by_another_thread() {
    let sem = Semaphore::new(0);
    let waiters: Vec<_> = [None, Some(HANG), Some(Duration::MAX)]
        .into_iter()
        .enumerate()
        .map(|(i, timeout)| {
            let sem = sem.clone();
            spawn_thread(&format!("blocking-{i}"), move || {
                sem.wait_blocking(i as u64 + 1, timeout)
            })
        })
        .collect();
    common::wait_until("blocking waiters registered", || sem.waiter_count() == 3);
    sem.signal(3).unwrap();
    for rx in &waiters {
        recv(rx, "blocking waiter").unwrap();
    }
    assert_eq!(sem.waiter_count(), 0);
}

#[test]
fn fence_wait_all_blocking_deadline() {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let mut fence = Fence::at(&a, 1);
    fence.insert(&b, 2);
    a.signal(1).unwrap();
    b.signal(1).unwrap();
    let err = fence
        .wait_all_blocking(Some(Duration::from_millis(20)))
        .unwrap_err();
    assert_eq!(err.code(), StatusCode::DeadlineExceeded);
    let message = err.to_string();
    assert!(
        message.contains("1 -> 2"),
        "describes the unreached entry: {message}"
    );
    assert_eq!(a.waiter_count() + b.waiter_count(), 0);
    b.signal(2).unwrap();
    fence.wait_all_blocking(Some(HANG)).unwrap();
}

/// A future polled by hand whose inner wait is dropped mid-way (as a combinator would).
#[test]
fn wait_dropped_inside_a_combinator() {
    struct FirstPollOnly<F>(Option<F>);
    impl<F: Future + Unpin> Future for FirstPollOnly<F> {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if let Some(mut inner) = self.0.take() {
                let _ = Pin::new(&mut inner).poll(cx);
                // `inner` is dropped here, after registering.
            }
            Poll::Ready(())
        }
    }
    let sem = Semaphore::new(0);
    futures::executor::block_on(async {
        for v in 1..=10 {
            FirstPollOnly(Some(sem.wait(v))).await;
        }
    });
    assert_eq!(sem.waiter_count(), 0);
}
