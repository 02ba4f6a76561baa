//! The completion reactor: posts from many threads, where releases and calls run, spawned
//! futures, wakes, shutdown and what happens to posts and spawns after it.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use common::{recv, spawn_thread, wait_until, ParkProbe, HANG};
use halcyon::backend::reactor::{Completion, Reactor};
use halcyon::backend::ActionQueue;
use halcyon::{Error, Fence, Semaphore, StatusCode};

fn thread_name() -> Option<String> {
    std::thread::current().name().map(str::to_owned)
}

/// Reports, through a channel, the name of the thread that dropped it.
struct DropRecorder(mpsc::Sender<Option<String>>);

impl Drop for DropRecorder {
    fn drop(&mut self) {
        let _ = self.0.send(thread_name());
    }
}

/// Runs a `Call` on the reactor and waits for it: every completion posted before it by this
/// thread has been applied once this returns.
fn flush(reactor: &halcyon::backend::reactor::ReactorHandle) {
    let (tx, rx) = mpsc::channel();
    reactor
        .post(Completion::Call(Box::new(move || {
            let _ = tx.send(());
        })))
        .unwrap();
    recv(&rx, "flush call");
}

#[test]
fn completions_from_many_threads_advance_semaphores() {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 500;
    let reactor = Reactor::new("many-posters").unwrap();
    let before = reactor.handle().stats();
    let shared = Semaphore::new(0);
    let own: Vec<_> = (0..THREADS).map(|_| Semaphore::new(0)).collect();

    // Waiters: a blocking thread per semaphore, for the last value each will reach.
    let waiters: Vec<_> = own
        .iter()
        .map(|s| {
            let s = s.clone();
            spawn_thread("waiter", move || {
                s.wait_blocking(PER_THREAD + 1, Some(HANG))
            })
        })
        .collect();
    let shared_waiter = {
        let shared = shared.clone();
        spawn_thread("shared-waiter", move || {
            shared.wait_blocking(THREADS * PER_THREAD, Some(HANG))
        })
    };

    let posters: Vec<_> = own
        .iter()
        .enumerate()
        .map(|(t, sem)| {
            let (handle, sem, shared) = (reactor.handle(), sem.clone(), shared.clone());
            spawn_thread(&format!("poster-{t}"), move || {
                for v in 1..=PER_THREAD {
                    handle.post(Completion::Signal(sem.clone(), v)).unwrap();
                    // Interleaved values on a shared semaphore: stale ones are ignored.
                    let shared_value = v * THREADS - t as u64;
                    handle
                        .post(Completion::Signal(shared.clone(), shared_value))
                        .unwrap();
                }
                // Last post of this thread: once it is applied, all of them are.
                handle
                    .post(Completion::Signal(sem.clone(), PER_THREAD + 1))
                    .unwrap();
            })
        })
        .collect();
    for rx in &posters {
        recv(rx, "poster");
    }
    for rx in &waiters {
        recv(rx, "waiter").unwrap();
    }
    recv(&shared_waiter, "shared waiter").unwrap();
    assert_eq!(shared.query().unwrap(), THREADS * PER_THREAD);
    for sem in &own {
        assert_eq!(sem.query().unwrap(), PER_THREAD + 1);
    }
    let after = reactor.handle().stats();
    assert_eq!(
        after.completions - before.completions,
        THREADS * (2 * PER_THREAD + 1),
        "every posted completion is applied exactly once"
    );
}

/// `Signal` never errors: values not above the current one are ignored. `Fail` fails.
#[test]
fn signal_and_fail_completions() {
    let reactor = Reactor::new("signal-fail").unwrap();
    let handle = reactor.handle();
    let sem = Semaphore::new(0);
    handle.post(Completion::Signal(sem.clone(), 5)).unwrap();
    handle.post(Completion::Signal(sem.clone(), 3)).unwrap();
    handle.post(Completion::Signal(sem.clone(), 5)).unwrap();
    flush(&handle);
    assert_eq!(sem.query().unwrap(), 5);

    let waiter = {
        let sem = sem.clone();
        spawn_thread("waiter", move || sem.wait_blocking(6, Some(HANG)))
    };
    wait_until("waiter registered", || sem.waiter_count() == 1);
    let err = Error::new(StatusCode::DataLoss, "device reported corruption");
    handle
        .post(Completion::Fail(sem.clone(), err.clone()))
        .unwrap();
    assert!(recv(&waiter, "waiter").unwrap_err().same_as(&err));
    // A signal completion on a failed semaphore is ignored too.
    handle.post(Completion::Signal(sem.clone(), 10)).unwrap();
    flush(&handle);
    assert!(sem.query().unwrap_err().same_as(&err));
    assert!(format!("{:?}", Completion::Signal(sem, 1)).starts_with("Signal"));
}

#[test]
fn release_drops_its_box_on_the_reactor_thread() {
    let reactor = Reactor::new("release").unwrap();
    let (tx, rx) = mpsc::channel();
    let handle = reactor.handle();
    // Posted from a thread that is neither the test's nor the reactor's.
    recv(
        &spawn_thread("poster", move || {
            handle.post(Completion::Release(Box::new(DropRecorder(tx))))
        }),
        "poster",
    )
    .unwrap();
    let dropped_on = recv(&rx, "release drop");
    assert_eq!(dropped_on.as_deref(), Some("halcyon-reactor-release"));
}

#[test]
fn call_runs_on_the_reactor_thread() {
    let reactor = Reactor::new("calls").unwrap();
    let handle = reactor.handle();
    assert_eq!(handle.name(), "calls");
    assert!(!handle.on_reactor_thread());
    let (tx, rx) = mpsc::channel();
    let inner = handle.clone();
    handle
        .post(Completion::Call(Box::new(move || {
            let _ = tx.send((thread_name(), inner.on_reactor_thread()));
        })))
        .unwrap();
    let (name, on_reactor) = recv(&rx, "call");
    assert_eq!(name.as_deref(), Some("halcyon-reactor-calls"));
    assert!(on_reactor);
    assert!(format!("{handle:?}").contains("calls"));
}

/// A panicking call or spawned future does not take the reactor down.
#[test]
fn panics_on_the_reactor_are_contained() {
    let reactor = Reactor::new("panics").unwrap();
    let handle = reactor.handle();
    handle
        .post(Completion::Call(Box::new(|| {
            panic!("backend callback bug")
        })))
        .unwrap();
    handle
        .spawn(async { panic!("spawned future bug") })
        .unwrap();
    let sem = Semaphore::new(0);
    handle.post(Completion::Signal(sem.clone(), 1)).unwrap();
    sem.wait_blocking(1, Some(HANG)).unwrap();
    flush(&handle);
}

/// Futures spawned on the reactor run there and are woken by semaphores.
#[test]
fn spawned_futures_run_on_the_reactor_when_woken() {
    let reactor = Reactor::new("spawn").unwrap();
    let handle = reactor.handle();
    let sem = Semaphore::new(0);
    let (tx, rx) = mpsc::channel();
    for i in 0..10u64 {
        let (sem, tx) = (sem.clone(), tx.clone());
        handle
            .spawn(async move {
                sem.wait(i + 1).await.unwrap();
                let _ = tx.send((i, thread_name()));
            })
            .unwrap();
    }
    wait_until("spawned futures registered", || sem.waiter_count() == 10);
    sem.signal(4).unwrap();
    let mut done: Vec<_> = (0..4).map(|_| recv(&rx, "spawned future")).collect();
    done.sort();
    for (i, (index, name)) in done.into_iter().enumerate() {
        assert_eq!(index, i as u64);
        assert_eq!(name.as_deref(), Some("halcyon-reactor-spawn"));
    }
    assert_eq!(sem.waiter_count(), 6);
    sem.signal(10).unwrap();
    for _ in 0..6 {
        recv(&rx, "spawned future");
    }
    assert!(rx.try_recv().is_err());
}

/// Dropping the reactor with actions whose waits are never signalled: their signal fences fail
/// with `Aborted`, every waiter downstream is released, spawned futures are dropped on the
/// reactor thread, and the drop returns (the thread is joined).
#[test]
fn shutdown_aborts_pending_actions() {
    let probe = ParkProbe::new();
    let reactor = Reactor::with_parker("shutdown", probe.parker()).unwrap();
    let queue = ActionQueue::new(reactor.handle());
    let (never, mid, out) = (Semaphore::new(0), Semaphore::new(0), Semaphore::new(0));
    let issued = Arc::new(AtomicUsize::new(0));
    let counting_issue = |issued: &Arc<AtomicUsize>| -> halcyon::backend::Issue {
        let issued = issued.clone();
        Box::new(move |signal: &Fence| {
            issued.fetch_add(1, Ordering::SeqCst);
            signal.signal()
        })
    };
    queue.submit(
        Fence::at(&never, 1),
        Fence::at(&mid, 1),
        counting_issue(&issued),
    );
    queue.submit(
        Fence::at(&mid, 1),
        Fence::at(&out, 1),
        counting_issue(&issued),
    );
    assert_eq!(queue.pending(), 2);

    // Waiters on both signal fences: a blocking thread and a future on another executor.
    let blocking = {
        let out = out.clone();
        spawn_thread("out-waiter", move || out.wait_blocking(1, Some(HANG)))
    };
    let (drop_tx, drop_rx) = mpsc::channel();
    let guard = DropRecorder(drop_tx);
    reactor
        .handle()
        .spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await
        })
        .unwrap();
    wait_until("waiters registered", || {
        never.waiter_count() == 1 && mid.waiter_count() == 1 && out.waiter_count() == 1
    });

    drop(reactor);

    for (name, sem) in [("mid", &mid), ("out", &out)] {
        let err = sem.query().unwrap_err();
        assert_eq!(err.code(), StatusCode::Aborted, "{name}: {err}");
    }
    assert_eq!(
        recv(&blocking, "out waiter").unwrap_err().code(),
        StatusCode::Aborted
    );
    assert_eq!(
        recv(&drop_rx, "spawned future dropped").as_deref(),
        Some("halcyon-reactor-shutdown")
    );
    assert_eq!(issued.load(Ordering::SeqCst), 0, "nothing was issued");
    assert_eq!(queue.pending(), 0);
    assert_eq!(
        never.waiter_count(),
        0,
        "dropped actions deregistered their waits"
    );
    assert!(!never.is_failed(), "the wait semaphore itself is untouched");
    assert!(probe.shut_down(), "the parker was told about the shutdown");
}

/// Work released before shutdown (a host signal, a posted completion) still happens.
#[test]
fn shutdown_applies_what_was_posted_before_it() {
    for via_post in [false, true] {
        let reactor = Reactor::new("drain").unwrap();
        let queue = ActionQueue::new(reactor.handle());
        let (input, output) = (Semaphore::new(0), Semaphore::new(0));
        queue.submit(
            Fence::at(&input, 1),
            Fence::at(&output, 1),
            Box::new(|signal: &Fence| signal.signal()),
        );
        wait_until("action registered", || input.waiter_count() == 1);
        if via_post {
            reactor
                .handle()
                .post(Completion::Signal(input.clone(), 1))
                .unwrap();
        } else {
            input.signal(1).unwrap();
        }
        let (tx, rx) = mpsc::channel();
        reactor
            .handle()
            .post(Completion::Release(Box::new(DropRecorder(tx))))
            .unwrap();
        drop(reactor);
        assert_eq!(output.query().unwrap(), 1, "via_post={via_post}");
        assert_eq!(
            recv(&rx, "release").as_deref(),
            Some("halcyon-reactor-drain")
        );
        assert_eq!(queue.pending(), 0);
    }
}

#[test]
fn posts_and_spawns_after_shutdown() {
    let reactor = Reactor::new("gone").unwrap();
    let handle = reactor.handle();
    reactor.shutdown();

    // Signal: applied inline.
    let sem = Semaphore::new(0);
    handle.post(Completion::Signal(sem.clone(), 3)).unwrap();
    assert_eq!(sem.query().unwrap(), 3);
    // Fail: applied inline.
    let failed = Semaphore::new(0);
    let err = Error::new(StatusCode::Aborted, "late failure");
    handle
        .post(Completion::Fail(failed.clone(), err.clone()))
        .unwrap();
    assert!(failed.query().unwrap_err().same_as(&err));
    // Release: dropped inline, on this thread.
    let (tx, rx) = mpsc::channel();
    handle
        .post(Completion::Release(Box::new(DropRecorder(tx))))
        .unwrap();
    assert_eq!(rx.try_recv().unwrap(), thread_name());
    // Call: refused, not run.
    let ran = Arc::new(AtomicBool::new(false));
    let call = {
        let ran = ran.clone();
        Completion::Call(Box::new(move || ran.store(true, Ordering::SeqCst)))
    };
    let err = handle.post(call).unwrap_err();
    assert_eq!(err.code(), StatusCode::Unavailable);
    assert!(err.message().contains("gone"), "names the reactor: {err}");
    assert!(!ran.load(Ordering::SeqCst));
    // Spawn: refused; the future is dropped here.
    let (tx, rx) = mpsc::channel();
    let guard = DropRecorder(tx);
    let err = handle
        .spawn(async move {
            let _guard = guard;
        })
        .unwrap_err();
    assert_eq!(err.code(), StatusCode::Unavailable);
    assert_eq!(rx.try_recv().unwrap(), thread_name());

    // Queue actions: ready ones issue inline; waiting ones fail their signal fence (Aborted).
    let queue = ActionQueue::new(handle.clone());
    let out = Semaphore::new(0);
    queue.submit(
        Fence::at(&sem, 3),
        Fence::at(&out, 1),
        Box::new(|signal: &Fence| signal.signal()),
    );
    assert_eq!(out.query().unwrap(), 1);
    let never = Semaphore::new(0);
    queue.submit(
        Fence::at(&never, 1),
        Fence::at(&out, 2),
        Box::new(|_: &Fence| panic!("must not issue")),
    );
    assert_eq!(out.query().unwrap_err().code(), StatusCode::Aborted);
    assert_eq!(queue.pending(), 0);
    assert_eq!(never.waiter_count(), 0);
}

/// Dropping the reactor from a call on its own thread must not deadlock (it cannot join
/// itself); the reactor still shuts down.
#[test]
fn reactor_dropped_on_its_own_thread() {
    let reactor = Reactor::new("self-drop").unwrap();
    let handle = reactor.handle();
    let (tx, rx) = mpsc::channel();
    handle
        .post(Completion::Call(Box::new(move || {
            drop(reactor);
            let _ = tx.send(());
        })))
        .unwrap();
    recv(&rx, "self-drop call returned");
    wait_until("reactor shut down", || {
        matches!(
            handle.post(Completion::Call(Box::new(|| {}))),
            Err(e) if e.code() == StatusCode::Unavailable
        )
    });
}

/// A post to an idle reactor wakes it exactly once; posts to a running one do not wake it.
#[test]
fn a_post_to_an_idle_reactor_wakes_it_once() {
    let probe = ParkProbe::new();
    let reactor = Reactor::with_parker("probe", probe.parker()).unwrap();
    let handle = reactor.handle();
    for round in 1..=20u64 {
        probe.wait_idle();
        let (wakeups, returns) = (handle.stats().wakeups, probe.park_returns());
        let sem = Semaphore::new(0);
        handle.post(Completion::Signal(sem.clone(), round)).unwrap();
        sem.wait_blocking(round, Some(HANG)).unwrap();
        probe.wait_idle();
        assert_eq!(handle.stats().wakeups - wakeups, 1, "round {round}");
        assert_eq!(probe.park_returns() - returns, 1, "round {round}");
    }
}
