//! Helpers shared by the integration tests: counting wakers, hang guards, and a reactor parker
//! whose sleeps a test can observe and steer.
//!
//! Nothing here asserts on elapsed time: deadlines only turn a hang into a failure.

#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use halcyon::backend::reactor::{Parker, Unpark};

/// How long anything may take before the test calls it a hang.
pub const HANG: Duration = Duration::from_secs(10);

/// A waker that counts its wakes.
#[derive(Default)]
pub struct CountingWaker {
    wakes: AtomicUsize,
}

impl CountingWaker {
    pub fn new() -> Arc<Self> {
        Arc::new(CountingWaker::default())
    }

    pub fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(self.clone())
    }

    pub fn wakes(&self) -> usize {
        self.wakes.load(Ordering::SeqCst)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `future` once with `waker`.
pub fn poll_once<F: Future + Unpin>(future: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(waker))
}

/// Awaits `future`, failing the test if it is not done within [`HANG`] (tokio only).
pub async fn within<F: Future>(what: &str, future: F) -> F::Output {
    match tokio::time::timeout(HANG, future).await {
        Ok(output) => output,
        Err(_) => panic!("{what}: not done after {HANG:?}; treating it as a hang"),
    }
}

/// Blocks until `condition` holds, failing the test if it does not within [`HANG`].
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "{what}: condition not reached after {HANG:?}; treating it as a hang"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Async version of [`wait_until`] for tokio tests.
pub async fn wait_until_async(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "{what}: condition not reached after {HANG:?}; treating it as a hang"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Receives from `rx`, failing the test after [`HANG`].
pub fn recv<T>(rx: &mpsc::Receiver<T>, what: &str) -> T {
    rx.recv_timeout(HANG)
        .unwrap_or_else(|e| panic!("{what}: nothing received after {HANG:?} ({e})"))
}

/// `futures::executor::block_on` on a helper thread, failing the test if the future is not done
/// within [`HANG`] (a plain `block_on` would turn a lost wake into a hung test run).
pub fn block_on_within<F>(what: &str, future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    recv(
        &spawn_thread(what, move || futures::executor::block_on(future)),
        what,
    )
}

/// Runs `f` on a new OS thread and returns a receiver for its result, so that the test can
/// wait for it with [`recv`] instead of an unbounded `join`.
pub fn spawn_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawn test thread");
    rx
}

#[derive(Default)]
struct ParkState {
    /// An unpark not yet consumed by a park (the `Unpark` contract: sticky).
    token: bool,
    /// The reactor is inside `park` and has not consumed a token yet.
    parked: bool,
    /// Calls to `park`.
    parks: u64,
    /// Returns from `park`.
    returns: u64,
    /// While set, every `unpark` blocks its caller until the reactor has woken for it, done
    /// everything it could, and parked again: each wake is handled on its own, the most
    /// adversarial interleaving for ordering guarantees.
    serialize_unparks: bool,
    /// Set if a serialized unpark gave up waiting (the reactor never parked again).
    serialize_gave_up: bool,
    /// `Parker::shutdown` was called.
    shut_down: bool,
    /// While set, `park` does not return even if unparked: posts and wakes pile up in the
    /// reactor's inbox and are handled as one batch once the gate opens.
    gate_closed: bool,
}

/// A [`Parker`] for [`halcyon::backend::reactor::Reactor::with_parker`] with the semantics of a thread
/// park (sticky unpark, no spurious returns) whose state the test can observe and steer.
#[derive(Default)]
pub struct ParkProbe {
    state: Mutex<ParkState>,
    changed: Condvar,
}

impl ParkProbe {
    pub fn new() -> Arc<Self> {
        Arc::new(ParkProbe::default())
    }

    pub fn parker(self: &Arc<Self>) -> Box<dyn Parker> {
        Box::new(ProbeParker(self.clone()))
    }

    fn lock(&self) -> MutexGuard<'_, ParkState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until the reactor sleeps in `park` with no unpark pending: it has nothing left to
    /// do, and the next post (or wake of one of its tasks) is what wakes it.
    pub fn wait_idle(&self) {
        let deadline = Instant::now() + HANG;
        let mut state = self.lock();
        while !state.parked || state.token {
            let now = Instant::now();
            assert!(now < deadline, "reactor did not go idle within {HANG:?}");
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// How many times the reactor has returned from `park`.
    pub fn park_returns(&self) -> u64 {
        self.lock().returns
    }

    /// See `ParkState::serialize_unparks`.
    pub fn set_serialize_unparks(&self, on: bool) {
        self.lock().serialize_unparks = on;
    }

    pub fn serialize_gave_up(&self) -> bool {
        self.lock().serialize_gave_up
    }

    /// Holds the reactor in `park` (see `ParkState::gate_closed`). Call once it is idle.
    pub fn close_gate(&self) {
        self.lock().gate_closed = true;
    }

    /// Lets the reactor return from `park` again.
    pub fn open_gate(&self) {
        self.lock().gate_closed = false;
        self.changed.notify_all();
    }

    /// Whether the reactor called `Parker::shutdown`.
    pub fn shut_down(&self) -> bool {
        self.lock().shut_down
    }
}

struct ProbeParker(Arc<ParkProbe>);

impl Parker for ProbeParker {
    fn park(&mut self) {
        let probe = &self.0;
        let mut state = probe.lock();
        state.parks += 1;
        state.parked = true;
        probe.changed.notify_all();
        while !state.token || state.gate_closed {
            state = probe.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        state.token = false;
        state.parked = false;
        state.returns += 1;
        probe.changed.notify_all();
    }

    fn unparker(&self) -> Box<dyn Unpark> {
        Box::new(ProbeUnpark(self.0.clone()))
    }

    fn shutdown(&mut self) {
        self.0.lock().shut_down = true;
    }
}

struct ProbeUnpark(Arc<ParkProbe>);

impl Unpark for ProbeUnpark {
    fn unpark(&self) {
        let probe = &self.0;
        let mut state = probe.lock();
        state.token = true;
        probe.changed.notify_all();
        if !state.serialize_unparks {
            return;
        }
        // Wait until the reactor has returned from a park after this unpark and parked again.
        let returns_before = state.returns;
        let deadline = Instant::now() + HANG;
        while !(state.returns > returns_before && state.parked) {
            let now = Instant::now();
            if now >= deadline {
                state.serialize_gave_up = true;
                return;
            }
            state = probe
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}
