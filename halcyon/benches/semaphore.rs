//! Benchmarks of the host timeline [`Semaphore`]: the uncontended fast paths (`query`, `signal`
//! with nobody waiting), cross-thread wake latency (ping-pong round trips against
//! `tokio::sync::Notify` and bare `std::thread` park/unpark), and the cost of a signal that wakes
//! one waiter out of 10 000 registered.
//!
//! Run with `cargo bench --bench semaphore`. Every ping-pong variant has the same shape:
//!
//! * the **bench thread** (an OS thread, outside any executor) starts round trip `i` and then
//!   blocks until the other side answers `i`;
//! * the **other side** waits for `i`, answers `i`, and waits for `i + 1`. In the "task" variants
//!   it is a task spawned on a tokio `current_thread` runtime that runs alone on its own OS thread
//!   (built once per variant, without I/O or time drivers, so it parks on tokio's plain thread
//!   parker); in the "os thread" variants it is a plain OS thread.
//!
//! One criterion iteration is one full round trip (two cross-thread wakes); `iter_custom` times a
//! run of `iters` back-to-back round trips and criterion divides by `iters`.

// `criterion_group!` defines the group's function without a doc comment.
#![allow(missing_docs)]

use std::collections::VecDeque;
use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use halcyon::{Error, Semaphore, StatusCode, Wait};
use tokio::sync::Notify;

/// Runs `task` as a spawned task on a fresh tokio `current_thread` runtime that lives alone on a
/// new OS thread; the returned handle joins once the task has returned.
fn spawn_on_runtime_thread<F>(task: F) -> thread::JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    thread::Builder::new()
        .name("bench-tokio".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("build tokio runtime");
            runtime.block_on(async { tokio::spawn(task).await.expect("task panicked") });
        })
        .expect("spawn runtime thread")
}

/// The error used to stop a halcyon ping-pong partner: failing its semaphore ends its wait.
fn stop_error() -> Error {
    Error::new(StatusCode::Cancelled, "benchmark finished")
}

/// `Semaphore::query` on a host semaphore (no native object) nobody waits on: the Acquire load
/// of the payload, the failed-check and the `Ok` wrapping. The semaphore handle goes through
/// `black_box` each iteration so the load cannot be hoisted out of the loop.
fn query(c: &mut Criterion) {
    let sem = Semaphore::new(7);
    c.bench_function("semaphore/query", |b| {
        b.iter(|| black_box(&sem).query());
    });
}

/// `Semaphore::signal(v)` with `v` one above the current payload and no registered waiters: the
/// range check, the uncontended state lock, the payload store and the (empty) waiter-map probe.
fn signal_no_waiters(c: &mut Criterion) {
    let sem = Semaphore::new(0);
    let mut value = 0u64;
    c.bench_function("semaphore/signal_no_waiters", |b| {
        b.iter(|| {
            value += 1;
            black_box(&sem).signal(value)
        });
    });
}

/// The settings shared by every ping-pong variant.
fn ping_pong_group(c: &mut Criterion) -> BenchmarkGroup<'_, WallTime> {
    let mut group = c.benchmark_group("pingpong");
    group
        .sample_size(40)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group
}

/// The tokio-task side of both halcyon ping-pongs: for `i = 1, 2, ...`, `a.wait(i).await` then
/// `b.signal(i)`, until `a` fails.
async fn halcyon_task_partner(a: Semaphore, b: Semaphore) {
    let mut i = 1;
    while a.wait(i).await.is_ok() {
        b.signal(i).expect("signal b");
        i += 1;
    }
}

/// One round trip between the bench thread and a tokio task through two halcyon semaphores.
/// Thread: `a.signal(i)`, then `b.wait_blocking(i, None)` (halcyon's own blocking helper: polls
/// the `Wait` with a thread-unparking waker and parks). Task: `a.wait(i).await`, then
/// `b.signal(i)`.
fn pingpong_halcyon_wait_blocking(c: &mut Criterion) {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let partner = spawn_on_runtime_thread(halcyon_task_partner(a.clone(), b.clone()));
    let mut i = 0u64;
    ping_pong_group(c).bench_function("halcyon/thread_wait_blocking-vs-task", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                i += 1;
                a.signal(i).expect("signal a");
                b.wait_blocking(i, None).expect("wait b");
            }
            start.elapsed()
        });
    });
    a.fail(stop_error());
    partner.join().expect("partner thread");
}

/// As [`pingpong_halcyon_wait_blocking`], but the thread blocks with
/// `futures::executor::block_on(b.wait(i))`, exactly like the Notify baseline's thread side; the
/// difference between the two isolates the cost of `wait_blocking`'s blocking helper.
fn pingpong_halcyon_block_on(c: &mut Criterion) {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let partner = spawn_on_runtime_thread(halcyon_task_partner(a.clone(), b.clone()));
    let mut i = 0u64;
    ping_pong_group(c).bench_function("halcyon/thread_block_on-vs-task", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                i += 1;
                a.signal(i).expect("signal a");
                futures::executor::block_on(b.wait(i)).expect("wait b");
            }
            start.elapsed()
        });
    });
    a.fail(stop_error());
    partner.join().expect("partner thread");
}

/// The baseline for the halcyon ping-pongs: one round trip through two `tokio::sync::Notify`s.
/// Thread: `a.notify_one()`, then `futures::executor::block_on(b.notified())`. Task:
/// `a.notified().await`, then `b.notify_one()`. (`notify_one` stores a permit when nobody waits,
/// so no wake is lost.)
fn pingpong_tokio_notify(c: &mut Criterion) {
    let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let partner = spawn_on_runtime_thread({
        let (a, b, stop) = (a.clone(), b.clone(), stop.clone());
        async move {
            loop {
                a.notified().await;
                if stop.load(Ordering::Acquire) {
                    break;
                }
                b.notify_one();
            }
        }
    });
    ping_pong_group(c).bench_function("tokio_notify/thread_block_on-vs-task", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                a.notify_one();
                futures::executor::block_on(b.notified());
            }
            start.elapsed()
        });
    });
    stop.store(true, Ordering::Release);
    a.notify_one();
    partner.join().expect("partner thread");
}

/// One round trip through two halcyon semaphores between two OS threads, no executor anywhere.
/// Bench thread: `a.signal(i)`, then `b.wait_blocking(i, None)`. Partner thread:
/// `a.wait_blocking(i, None)`, then `b.signal(i)`. Compare with [`pingpong_std_park_unpark`].
fn pingpong_halcyon_threads(c: &mut Criterion) {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let partner = thread::spawn({
        let (a, b) = (a.clone(), b.clone());
        move || {
            let mut i = 1;
            while a.wait_blocking(i, None).is_ok() {
                b.signal(i).expect("signal b");
                i += 1;
            }
        }
    });
    let mut i = 0u64;
    ping_pong_group(c).bench_function("halcyon/thread_wait_blocking-vs-thread", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                i += 1;
                a.signal(i).expect("signal a");
                b.wait_blocking(i, None).expect("wait b");
            }
            start.elapsed()
        });
    });
    a.fail(stop_error());
    partner.join().expect("partner thread");
}

/// The floor for any blocking cross-thread handoff: one round trip with bare `std::thread`
/// park/unpark between two OS threads. Bench thread: stores `i` into atomic `a`, unparks the
/// partner, then parks until atomic `b` reads `i`. Partner: parks until `a` reads `i`, stores `i`
/// into `b`, unparks the bench thread.
fn pingpong_std_park_unpark(c: &mut Criterion) {
    const STOP: u64 = u64::MAX;
    let (a, b) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let bench_thread = thread::current();
    let partner = thread::spawn({
        let (a, b) = (a.clone(), b.clone());
        move || {
            let mut i = 1;
            loop {
                let seen = loop {
                    match a.load(Ordering::Acquire) {
                        seen if seen >= i => break seen,
                        _ => thread::park(),
                    }
                };
                if seen == STOP {
                    break;
                }
                b.store(i, Ordering::Release);
                bench_thread.unpark();
                i += 1;
            }
        }
    });
    let mut i = 0u64;
    ping_pong_group(c).bench_function("std_park_unpark/thread-vs-thread", |bench| {
        bench.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                i += 1;
                a.store(i, Ordering::Release);
                partner.thread().unpark();
                while b.load(Ordering::Acquire) < i {
                    thread::park();
                }
            }
            start.elapsed()
        });
    });
    a.store(STOP, Ordering::Release);
    partner.thread().unpark();
    partner.join().expect("partner thread");
}

/// A waker that only counts its wakes, so the benchmark can check each signal woke exactly one.
struct CountingWaker(AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Registers `n` more waiters on `sem`, one each at the values `top + 1 ..= top + n`.
fn arm(sem: &Semaphore, waker: &Waker, waits: &mut VecDeque<Wait>, top: &mut u64, n: u64) {
    let mut cx = Context::from_waker(waker);
    for _ in 0..n {
        *top += 1;
        let mut wait = sem.wait(*top);
        assert!(Pin::new(&mut wait).poll(&mut cx).is_pending());
        waits.push_back(wait);
    }
}

/// `Semaphore::signal(v)` that wakes exactly one waiter while 10 000 others, at distinct higher
/// values, stay registered: the lock, the payload store, taking the lowest waiter out of the
/// waiter map, and waking its (counting) waker after the unlock.
///
/// Waiters sit at every value above the payload, so `signal(payload + 1)` reaches exactly the
/// lowest one. Before each timed run of up to 100 signals, as many new waiters are registered at
/// the top (untimed), so 10 001 to 10 100 waiters are registered at every timed signal; the woken
/// `Wait`s are dropped after the timed run (also untimed).
fn signal_wake_one_of_10k(c: &mut Criterion) {
    const REGISTERED: u64 = 10_000;
    const CHUNK: u64 = 100;
    let sem = Semaphore::new(0);
    let counter = Arc::new(CountingWaker(AtomicUsize::new(0)));
    let waker = Waker::from(counter.clone());
    let mut waits = VecDeque::new();
    let mut top = 0u64;
    arm(&sem, &waker, &mut waits, &mut top, REGISTERED);
    let mut signalled = 0u64;
    c.bench_function("semaphore/signal_wake_1_of_10k_waiters", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(CHUNK);
                arm(&sem, &waker, &mut waits, &mut top, n);
                let start = Instant::now();
                for _ in 0..n {
                    signalled += 1;
                    black_box(&sem).signal(signalled).expect("signal");
                }
                total += start.elapsed();
                waits.drain(..n as usize);
                left -= n;
            }
            total
        });
    });
    assert_eq!(counter.0.load(Ordering::Relaxed) as u64, signalled);
    assert_eq!(sem.waiter_count() as u64, REGISTERED);
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = query, signal_no_waiters, signal_wake_one_of_10k,
        pingpong_halcyon_wait_blocking, pingpong_tokio_notify, pingpong_halcyon_block_on,
        pingpong_std_park_unpark, pingpong_halcyon_threads
}
criterion_main!(benches);
