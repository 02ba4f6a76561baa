//! Fences: one entry per semaphore (the max), `wait_all`, `wait_any`, failure, empty fences,
//! `query`, `signal` and `fail`.

mod common;

use std::task::Poll;

use common::{poll_once, recv, spawn_thread, wait_until_async, within, CountingWaker, HANG};
use futures::task::noop_waker;
use halcyon::{Error, Fence, Semaphore, StatusCode};

#[test]
fn keeps_the_max_per_semaphore_in_insertion_order() {
    let (a, b, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let mut fence = Fence::new();
    assert!(fence.is_empty());
    fence.insert(&a, 5);
    fence.insert(&b, 2);
    fence.insert(&a.clone(), 7); // a clone is the same semaphore
    fence.insert(&a, 3); // lower: ignored
    fence.insert(&c, 1);
    assert_eq!(fence.len(), 3);
    let entries: Vec<_> = fence.iter().map(|(s, v)| (s.clone(), v)).collect();
    assert!(entries[0].0.ptr_eq(&a) && entries[0].1 == 7);
    assert!(entries[1].0.ptr_eq(&b) && entries[1].1 == 2);
    assert!(entries[2].0.ptr_eq(&c) && entries[2].1 == 1);

    let mut other = Fence::at(&b, 9);
    other.insert(&Semaphore::new(0), 4);
    let joined = fence.clone().join(&other);
    assert_eq!(joined.len(), 4);
    assert_eq!(joined.iter().nth(1).unwrap().1, 9);
    let mut extended = fence.clone();
    extended.extend(&other);
    assert_eq!(
        extended.iter().map(|(_, v)| v).collect::<Vec<_>>(),
        joined.iter().map(|(_, v)| v).collect::<Vec<_>>()
    );

    let collected: Fence = [(&a, 4), (&b, 1), (&a, 1)].into_iter().collect();
    assert_eq!(collected.iter().map(|(_, v)| v).collect::<Vec<_>>(), [4, 1]);
}

/// `wait_all` for the max of duplicate inserts: a lower value does not complete it.
#[test]
fn wait_all_waits_for_the_max() {
    let a = Semaphore::new(0);
    let mut fence = Fence::at(&a, 5);
    fence.insert(&a, 2);
    let counter = CountingWaker::new();
    let mut all = fence.wait_all();
    assert!(poll_once(&mut all, &counter.waker()).is_pending());
    a.signal(2).unwrap();
    assert_eq!(counter.wakes(), 0, "a value below the max does not wake");
    a.signal(5).unwrap();
    assert_eq!(counter.wakes(), 1);
    assert!(matches!(
        poll_once(&mut all, &counter.waker()),
        Poll::Ready(Ok(()))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_all_completes_when_every_entry_is_reached() {
    let sems: Vec<_> = (0..4).map(|_| Semaphore::new(0)).collect();
    let fence: Fence = sems
        .iter()
        .enumerate()
        .map(|(i, s)| (s, i as u64 + 1))
        .collect();
    let task = tokio::spawn({
        let fence = fence.clone();
        async move { fence.wait_all().await }
    });
    wait_until_async("wait_all registered", || {
        sems.iter().all(|s| s.waiter_count() == 1)
    })
    .await;
    // Reach entries one at a time, from other threads; the task must not finish early.
    for (i, sem) in sems.iter().enumerate().rev() {
        assert!(!task.is_finished());
        assert!(!fence.query().unwrap());
        let sem = sem.clone();
        recv(
            &spawn_thread("signaller", move || sem.signal(i as u64 + 1)),
            "signaller",
        )
        .unwrap();
    }
    within("wait_all", task).await.unwrap().unwrap();
    assert!(fence.query().unwrap());
    assert!(sems.iter().all(|s| s.waiter_count() == 0));
}

#[test]
fn wait_any_returns_the_index_of_a_reached_entry() {
    for target in [3, 0, 4] {
        let sems: Vec<_> = (0..5).map(|_| Semaphore::new(0)).collect();
        let fence: Fence = sems.iter().map(|s| (s, 1)).collect();
        let counter = CountingWaker::new();
        let mut any = fence.wait_any();
        assert!(poll_once(&mut any, &counter.waker()).is_pending());
        assert!(sems.iter().all(|s| s.waiter_count() == 1));
        sems[target].signal(1).unwrap();
        assert_eq!(counter.wakes(), 1);
        match poll_once(&mut any, &counter.waker()) {
            Poll::Ready(Ok(index)) => assert_eq!(index, target),
            other => panic!("expected Ready(Ok({target})), got {other:?}"),
        }
        // Completing removed the other entries' waiters.
        assert!(sems.iter().all(|s| s.waiter_count() == 0));
    }
    // Several reached: the index returned must be one of them.
    let sems: Vec<_> = (0..5).map(|_| Semaphore::new(0)).collect();
    let fence: Fence = sems.iter().map(|s| (s, 1)).collect();
    for i in [0, 3, 4] {
        sems[i].signal(1).unwrap();
    }
    let reached = common::block_on_within("wait_any", fence.wait_any()).unwrap();
    assert!(
        [0, 3, 4].contains(&reached),
        "index {reached} is not reached"
    );
    assert!(sems.iter().all(|s| s.waiter_count() == 0));
}

#[test]
fn failure_ends_wait_all_and_wait_any() {
    let (a, b, c) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let mut fence = Fence::at(&a, 1);
    fence.insert(&b, 1);
    fence.insert(&c, 1);
    a.signal(1).unwrap(); // one reached entry does not hide a later failure for wait_all
    let waker = noop_waker();
    let mut all = fence.wait_all();
    assert!(poll_once(&mut all, &waker).is_pending());

    let any_fence = Fence::at(&b, 1).join(&Fence::at(&c, 1));
    let mut any = any_fence.wait_any();
    assert!(poll_once(&mut any, &waker).is_pending());

    let err = Error::new(StatusCode::Aborted, "device lost");
    c.fail(err.clone());
    match poll_once(&mut all, &waker) {
        Poll::Ready(Err(e)) => assert!(e.same_as(&err)),
        other => panic!("wait_all: {other:?}"),
    }
    match poll_once(&mut any, &waker) {
        Poll::Ready(Err(e)) => assert!(e.same_as(&err)),
        other => panic!("wait_any: {other:?}"),
    }
    assert_eq!(
        b.waiter_count(),
        0,
        "ending a wait removes the other entries' waiters"
    );
    assert!(fence.query().unwrap_err().same_as(&err));
    let blocking = fence.wait_all_blocking(Some(HANG)).unwrap_err();
    assert!(blocking.same_as(&err));
}

#[test]
fn empty_fence() {
    let fence = Fence::new();
    let waker = noop_waker();
    assert!(matches!(
        poll_once(&mut fence.wait_all(), &waker),
        Poll::Ready(Ok(()))
    ));
    match poll_once(&mut fence.wait_any(), &waker) {
        Poll::Ready(Err(e)) => assert_eq!(e.code(), StatusCode::InvalidArgument),
        other => panic!("wait_any on an empty fence: {other:?}"),
    }
    assert!(fence.query().unwrap());
    fence.signal().unwrap();
    fence.fail(Error::new(StatusCode::Unknown, "nothing to fail"));
    fence
        .wait_all_blocking(Some(std::time::Duration::ZERO))
        .unwrap();
    assert_eq!(format!("{fence:?}"), "[]");
}

#[test]
fn query_reports_progress_and_failure() {
    let (a, b) = (Semaphore::new(0), Semaphore::new(3));
    let mut fence = Fence::at(&a, 2);
    fence.insert(&b, 3);
    assert!(!fence.query().unwrap());
    a.signal(1).unwrap();
    assert!(!fence.query().unwrap());
    a.signal(2).unwrap();
    assert!(fence.query().unwrap());
    let err = Error::new(StatusCode::Internal, "b broke");
    b.fail(err.clone());
    assert!(fence.query().unwrap_err().same_as(&err));
}

#[test]
fn signal_and_fail_every_entry() {
    let (a, b, c) = (Semaphore::new(0), Semaphore::new(5), Semaphore::new(0));
    let fence: Fence = [(&a, 1), (&b, 2), (&c, 3)].into_iter().collect();
    // b is already past its value: an error, but every other entry is still signalled.
    let err = fence.signal().unwrap_err();
    assert_eq!(err.code(), StatusCode::InvalidArgument);
    assert_eq!(a.query().unwrap(), 1);
    assert_eq!(b.query().unwrap(), 5);
    assert_eq!(c.query().unwrap(), 3);
    assert!(fence.query().unwrap());

    let first = Error::new(StatusCode::Cancelled, "a failed first");
    a.fail(first.clone());
    let err = Error::new(StatusCode::Aborted, "fence failure");
    fence.fail(err.clone());
    assert!(
        a.query().unwrap_err().same_as(&first),
        "each keeps its first failure"
    );
    assert!(b.query().unwrap_err().same_as(&err));
    assert!(c.query().unwrap_err().same_as(&err));
    assert!(format!("{fence:?}").contains("failed (ABORTED)"));
}

/// A fence signalled from the host releases a `wait_all` on the same fence in another task.
#[test]
fn fence_signal_releases_wait_all() {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let fence = Fence::at(&a, 1).join(&Fence::at(&b, 1));
    let waiter = {
        let fence = fence.clone();
        spawn_thread("wait_all_blocking", move || {
            fence.wait_all_blocking(Some(HANG))
        })
    };
    common::wait_until("waiter registered", || {
        a.waiter_count() + b.waiter_count() >= 1
    });
    fence.signal().unwrap();
    recv(&waiter, "wait_all_blocking").unwrap();
}
