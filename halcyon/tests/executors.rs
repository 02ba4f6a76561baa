//! Executor-agnostic use: the same futures under `futures::executor`, `futures` combinators,
//! tokio's `select!`, and moved between executors.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{block_on_within, poll_once, recv, spawn_thread, within};
use futures::future::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use halcyon::{Fence, Semaphore};

#[test]
fn futures_block_on_with_a_signalling_thread() {
    let sem = Semaphore::new(0);
    let signaller = {
        let sem = sem.clone();
        spawn_thread("signaller", move || {
            for v in 1..=100 {
                sem.signal(v).unwrap();
            }
        })
    };
    let waiter = sem.clone();
    block_on_within("block_on", async move {
        for v in 1..=100 {
            waiter.wait(v).await.unwrap();
        }
    });
    recv(&signaller, "signaller");
    assert_eq!(sem.waiter_count(), 0);
}

#[test]
fn futures_join_and_select() {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let signaller = {
        let (a, b) = (a.clone(), b.clone());
        spawn_thread("signaller", move || {
            common::wait_until("joined waits registered", || {
                a.waiter_count() == 1 && b.waiter_count() == 1
            });
            b.signal(2).unwrap();
            a.signal(1).unwrap();
        })
    };
    let (wa, wb) = (a.wait(1), b.wait(2));
    block_on_within("join!", async move {
        let (ra, rb) = futures::join!(wa, wb);
        ra.unwrap();
        rb.unwrap();
    });
    recv(&signaller, "signaller");

    // select!: the branch whose semaphore is signalled wins; the loser is deregistered.
    let signaller = {
        let b = b.clone();
        spawn_thread("signaller", move || {
            common::wait_until("selected waits registered", || b.waiter_count() == 1);
            b.signal(3).unwrap();
        })
    };
    let (wa, wb) = (a.wait(10), b.wait(3));
    let winner = block_on_within("select!", async move {
        futures::select! {
            r = wa.fuse() => { r.unwrap(); "a" }
            r = wb.fuse() => { r.unwrap(); "b" }
        }
    });
    recv(&signaller, "signaller");
    assert_eq!(winner, "b");
    assert_eq!(a.waiter_count(), 0);
    assert_eq!(b.waiter_count(), 0);
}

#[test]
fn futures_unordered_and_local_pool() {
    let sem = Semaphore::new(0);
    let mut waits: FuturesUnordered<_> = (1..=500u64)
        .rev()
        .map(|v| sem.wait(v).map(move |r| r.map(|()| v)))
        .collect();
    let signaller = {
        let sem = sem.clone();
        spawn_thread("signaller", move || {
            for v in (50..=500).step_by(50) {
                sem.signal(v).unwrap();
            }
        })
    };
    let mut seen = block_on_within("FuturesUnordered", async move {
        let mut seen = Vec::new();
        while let Some(r) = waits.next().await {
            seen.push(r.unwrap());
        }
        seen
    });
    recv(&signaller, "signaller");
    seen.sort_unstable();
    assert_eq!(seen, (1..=500).collect::<Vec<_>>());

    // A LocalPool running many tasks that wait on one fence.
    let mut pool = futures::executor::LocalPool::new();
    let spawner = pool.spawner();
    let done = std::rc::Rc::new(std::cell::Cell::new(0));
    let gate = Semaphore::new(0);
    for i in 0..100u64 {
        use futures::task::LocalSpawnExt;
        let fence = Fence::at(&gate, 1 + i % 3).join(&Fence::at(&sem, 500));
        let done = done.clone();
        spawner
            .spawn_local(async move {
                fence.wait_all().await.unwrap();
                done.set(done.get() + 1);
            })
            .unwrap();
    }
    pool.run_until_stalled();
    assert_eq!(done.get(), 0);
    assert_eq!(gate.waiter_count(), 100);
    gate.signal(2).unwrap();
    pool.run_until_stalled();
    assert_eq!(done.get(), 67);
    gate.signal(3).unwrap();
    pool.run_until_stalled();
    assert_eq!(done.get(), 100);
    assert_eq!(gate.waiter_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_select_between_semaphores_and_a_timer() {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let signaller = {
        let b = b.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            b.signal(1).unwrap();
        })
    };
    let winner = within("select", async {
        tokio::select! {
            r = a.wait(1) => { r.unwrap(); 'a' }
            r = b.wait(1) => { r.unwrap(); 'b' }
        }
    })
    .await;
    assert_eq!(winner, 'b');
    signaller.await.unwrap();
    assert_eq!(a.waiter_count(), 0);

    // Against a timer that fires: the wait is dropped and deregistered.
    tokio::select! {
        r = a.wait(1) => panic!("{r:?}"),
        () = tokio::time::sleep(Duration::from_millis(1)) => {}
    }
    assert_eq!(a.waiter_count(), 0);
}

/// A wait registered under one executor (a noop waker) and then awaited under tokio, woken from a
/// plain thread: the stored waker is replaced and the tokio task is woken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_moves_between_executors() {
    let sem = Semaphore::new(0);
    let mut wait = sem.wait(1);
    assert!(poll_once(&mut wait, &futures::task::noop_waker()).is_pending());
    assert_eq!(sem.waiter_count(), 1);
    // The task records when the wait has been polled (and re-registered) with tokio's waker.
    let polled = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn({
        let polled = polled.clone();
        futures::future::poll_fn(move |cx| {
            let result = Pin::new(&mut wait).poll(cx);
            if result.is_pending() {
                polled.store(true, Ordering::SeqCst);
            }
            result
        })
    });
    common::wait_until_async("task polled", || polled.load(Ordering::SeqCst)).await;
    assert_eq!(
        sem.waiter_count(),
        1,
        "re-polling with a new waker does not add a waiter"
    );
    // If the noop waker were still the stored one, nothing would wake the task.
    let signaller = {
        let sem = sem.clone();
        spawn_thread("signaller", move || sem.signal(1))
    };
    recv(&signaller, "signaller").unwrap();
    within("moved wait", task).await.unwrap().unwrap();
    assert_eq!(sem.waiter_count(), 0);

    // And the other way: a tokio-created future finished on futures' executor in a thread.
    let wait = sem.wait(2);
    let finisher = spawn_thread("block_on", move || futures::executor::block_on(wait));
    common::wait_until_async("block_on registered", || sem.waiter_count() == 1).await;
    sem.signal(2).unwrap();
    // `recv` blocks this worker thread for at most HANG; the runtime has another.
    recv(&finisher, "block_on").unwrap();
}
