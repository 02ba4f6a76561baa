//! [`Handoff`]: the queue from the threads that issue submissions to the one thread that waits
//! for them (a stream device's completion thread), which sleeps only when it must.
//!
//! The consumer takes items in push order. With a spin budget it first polls for an item for
//! up to that long, which costs CPU but no OS wake-up; then it sleeps on a condition variable.
//! A producer notifies only a consumer that sleeps, so a busy consumer costs its producers no
//! system call. The protocol that makes this safe: the consumer sets `sleeping` while it holds
//! the lock, after it found the queue empty, and the wait releases the lock atomically; a
//! producer pushes under the lock and reads `sleeping` after releasing it. A producer whose
//! push came first is seen by the consumer's check; one whose push came after the consumer set
//! `sleeping` (it took the lock later) reads `true` and notifies. The loom models in
//! `testing/loom/tests/stream.rs` check exactly this.

use std::collections::VecDeque;
use std::time::Duration;

use crate::sync::{lock, AtomicBool, Condvar, Mutex, Ordering};

/// A queue to one consumer thread that polls, then sleeps (see the [module docs](self)).
pub struct Handoff<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
    /// Whether the consumer sleeps on `ready` (so a push must notify).
    sleeping: AtomicBool,
    /// How long the consumer polls before it sleeps (zero: it sleeps at once).
    spin: Duration,
}

struct State<T> {
    pending: VecDeque<T>,
    stopped: bool,
}

impl<T> State<T> {
    /// `Some(Some(item))`, or `Some(None)` once stopped and drained: the consumer need not
    /// wait. `None`: it must.
    fn take(&mut self) -> Option<Option<T>> {
        match self.pending.pop_front() {
            Some(item) => Some(Some(item)),
            None if self.stopped => Some(None),
            None => None,
        }
    }
}

impl<T> Handoff<T> {
    /// An empty queue whose consumer polls for up to `spin` before it sleeps.
    pub fn new(spin: Duration) -> Self {
        Handoff {
            state: Mutex::new(State {
                pending: VecDeque::new(),
                stopped: false,
            }),
            ready: Condvar::new(),
            sleeping: AtomicBool::new(false),
            spin,
        }
    }

    /// The consumer's spin budget.
    pub fn spin(&self) -> Duration {
        self.spin
    }

    /// Adds `item` after those already pushed; wakes the consumer if it sleeps.
    pub fn push(&self, item: T) {
        lock(&self.state).pending.push_back(item);
        if self.sleeping.load(Ordering::SeqCst) {
            self.ready.notify_one();
        }
    }

    /// The next item: polls for up to the spin budget, then sleeps until one is pushed. `None`
    /// once [`Handoff::stop`] was called and every item pushed before it was taken.
    pub fn next(&self) -> Option<T> {
        if !self.spin.is_zero() {
            let start = std::time::Instant::now();
            loop {
                if let Some(taken) = self.take() {
                    return taken;
                }
                // loom has no model of time: one poll stands for the whole budget.
                if cfg!(loom) || start.elapsed() >= self.spin {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let mut state = lock(&self.state);
        loop {
            if let Some(taken) = state.take() {
                self.sleeping.store(false, Ordering::SeqCst);
                return taken;
            }
            self.sleeping.store(true, Ordering::SeqCst);
            state = self.ready.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// See [`State::take`].
    fn take(&self) -> Option<Option<T>> {
        lock(&self.state).take()
    }

    /// Ends the consumer's loop once it has taken the items already pushed.
    pub fn stop(&self) {
        lock(&self.state).stopped = true;
        self.ready.notify_all();
    }
}
