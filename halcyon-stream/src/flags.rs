//! [`Flags`]: completion words the device writes and one host thread reads.
//!
//! The flag-write completion strategy ([`crate::CompletionStrategy::FlagWrite`]) gives each
//! queue a 32-bit word in pinned host memory the device can write over the bus. After each
//! submission's work the queue's stream writes the submission's value into the word
//! (`cuStreamWriteValue32`, `hipStreamWriteValue32`); values go up by one per submission, and a
//! stream runs in order, so a word holding `v` means every submission of that queue up to `v`
//! finished. One scanner thread per device reads the words with plain loads: no driver call, no
//! interrupt, no OS wake-up between the device finishing and the host seeing it.
//!
//! # The protocol
//!
//! * **Registering** ([`Flags::register`]) hands out the lane's next value and enqueues the
//!   device's write of it under the lane's lock, so values reach the stream in the order they
//!   are handed out; the entry is queued in the same critical section. Only the registration
//!   that takes the device from idle to busy (no entry pending before it) may wake the
//!   scanner: it takes the idle lock and notifies if the scanner sleeps. A registration while
//!   the device is busy costs the issuing thread no lock beyond the lane's and no system call.
//! * **Scanning** ([`Flags::scan`]) reads each lane's word; where it moved past the last value
//!   the scanner completed, it takes the lane's lock and pops every entry the word reached.
//!   The scanner remembers the last value it *popped*, not the word: a word may reach a value
//!   whose entry is not queued yet (the device ran the write before its registration finished),
//!   and the next scan finds it.
//! * **Sleeping** ([`Flags::wait_for_work`]): with nothing pending the scanner reads the
//!   pending count and sets `sleeping` under the idle lock, and the wait releases the lock
//!   atomically; an idle-to-busy registration increments the count, then takes the same lock.
//!   Either its lock comes first, and the scanner's read sees the count, or the scanner is
//!   waiting by then, and the registration sees `sleeping` and notifies.
//! * **Busy**: while entries are pending, [`Flags::run`] scans continuously for a spin budget
//!   after the last progress, then between scans sleeps for a poll interval (the device cannot
//!   wake a host thread by writing memory). The fault probe covers a device that faulted and
//!   will never write (`device/completion.rs`).
//!
//! The loom models in `testing/loom/tests/flags.rs` check registration against scanning and
//! sleeping for lost completions and lost wake-ups.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::sync::{lock, AtomicBool, AtomicU32, AtomicUsize, Condvar, Mutex, Ordering};

/// The words a device writes, one per lane, as the scanner reads them.
pub trait Words: Send + Sync {
    /// Lane `lane`'s word now (an acquire load: what the device wrote before it is visible).
    fn read(&self, lane: usize) -> u32;
}

/// Whether a word holding `word` reached `value` (modulo 2³²: values in flight on one lane
/// stay within 2³¹ of each other).
fn reached(word: u32, value: u32) -> bool {
    (word.wrapping_sub(value) as i32) >= 0
}

/// One lane (queue): the values handed out, and the submissions waiting for theirs.
struct Lane {
    state: Mutex<LaneState>,
    /// The last value the scanner popped (only the scanner writes it).
    popped: AtomicU32,
}

struct LaneState {
    /// The value the next registration gets.
    next: u32,
    /// `(value, id)` in value order.
    waiting: VecDeque<(u32, u64)>,
}

/// Completion by device-written words (see the [module docs](self)): submissions registered
/// per lane, and one scanner that completes them.
pub struct Flags<W> {
    words: W,
    lanes: Box<[Lane]>,
    /// Entries registered and not yet completed, over all lanes.
    pending: AtomicUsize,
    /// Whether the scanner sleeps on `wake` (so an idle-to-busy registration must notify);
    /// written and read under `idle`.
    sleeping: AtomicBool,
    stopped: AtomicBool,
    idle: Mutex<()>,
    wake: Condvar,
}

impl<W: Words> Flags<W> {
    /// `lanes` lanes over `words`, whose words start at 0 (the first value handed out is 1).
    pub fn new(words: W, lanes: usize) -> Self {
        Flags {
            words,
            lanes: (0..lanes)
                .map(|_| Lane {
                    state: Mutex::new(LaneState {
                        next: 1,
                        waiting: VecDeque::new(),
                    }),
                    popped: AtomicU32::new(0),
                })
                .collect(),
            pending: AtomicUsize::new(0),
            sleeping: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            idle: Mutex::new(()),
            wake: Condvar::new(),
        }
    }

    /// Registers submission `id` on `lane`: `write(value)` must enqueue the device's write of
    /// `value` into the lane's word after the submission's work. It is called under the lane's
    /// lock, so the writes reach the device in value order. If it fails nothing is registered
    /// (the value is handed out again) and its error is returned. Panics if `lane` is out of
    /// range.
    pub fn register<E>(
        &self,
        lane: usize,
        id: u64,
        write: impl FnOnce(u32) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut state = lock(&self.lanes[lane].state);
        let value = state.next;
        write(value)?;
        state.next = value.wrapping_add(1);
        state.waiting.push_back((value, id));
        drop(state);
        if self.pending.fetch_add(1, Ordering::SeqCst) == 0 {
            // Idle to busy: under the idle lock, so either the scanner's check of `pending`
            // (under the same lock) comes after this increment, or it is asleep by now and
            // this sees `sleeping`.
            let _idle = lock(&self.idle);
            if self.sleeping.load(Ordering::Relaxed) {
                self.wake.notify_one();
            }
        }
        Ok(())
    }

    /// One pass over the lanes: pops every entry whose word reached its value and calls
    /// `complete(id)` for it (outside the lane's lock), in value order per lane. Returns how
    /// many it completed. Only the scanner calls it.
    pub fn scan(&self, mut complete: impl FnMut(u64)) -> usize {
        let mut done = 0;
        for (index, lane) in self.lanes.iter().enumerate() {
            let word = self.words.read(index);
            let popped = lane.popped.load(Ordering::Relaxed);
            if word == popped {
                continue; // nothing new: no lock taken
            }
            loop {
                let mut state = lock(&lane.state);
                let id = match state.waiting.front() {
                    Some(&(value, id)) if reached(word, value) => {
                        state.waiting.pop_front();
                        lane.popped.store(value, Ordering::Relaxed);
                        id
                    }
                    _ => break,
                };
                drop(state);
                complete(id);
                done += 1;
            }
        }
        if done > 0 {
            self.pending.fetch_sub(done, Ordering::SeqCst);
        }
        done
    }

    /// Entries registered and not yet completed.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::SeqCst)
    }

    /// Sleeps while nothing is pending: `true` once something is, `false` once stopped.
    pub fn wait_for_work(&self) -> bool {
        let mut idle = lock(&self.idle);
        loop {
            if self.stopped.load(Ordering::SeqCst) {
                return false;
            }
            if self.pending.load(Ordering::SeqCst) > 0 {
                self.sleeping.store(false, Ordering::Relaxed);
                return true;
            }
            self.sleeping.store(true, Ordering::Relaxed);
            idle = self.wake.wait(idle).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Whether [`Flags::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Ends the scanner's [`Flags::run`] (entries still pending stay registered; whoever stops
    /// the scanner settles them another way).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _idle = lock(&self.idle);
        self.wake.notify_all();
    }

    /// The scanner's loop, until [`Flags::stop`]: scans continuously while it made progress in
    /// the last `spin` (pending or not), then, while entries are pending, scans every `poll`,
    /// and with nothing pending sleeps until a registration wakes it.
    pub fn run(&self, spin: Duration, poll: Duration, mut complete: impl FnMut(u64)) {
        let mut progress = Instant::now();
        while !self.is_stopped() {
            if self.scan(&mut complete) > 0 {
                progress = Instant::now();
                continue;
            }
            if progress.elapsed() < spin {
                std::hint::spin_loop();
                continue;
            }
            if self.pending() == 0 {
                if !self.wait_for_work() {
                    return;
                }
                progress = Instant::now();
            } else {
                std::thread::sleep(poll);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32 as StdAtomicU32;
    use std::sync::Arc;

    struct Plain(Vec<StdAtomicU32>);

    impl Words for Arc<Plain> {
        fn read(&self, lane: usize) -> u32 {
            self.0[lane].load(std::sync::atomic::Ordering::Acquire)
        }
    }

    fn flags(lanes: usize) -> (Flags<Arc<Plain>>, Arc<Plain>) {
        let words = Arc::new(Plain((0..lanes).map(|_| StdAtomicU32::new(0)).collect()));
        (Flags::new(words.clone(), lanes), words)
    }

    #[test]
    fn values_wrap_around() {
        assert!(reached(1, 1) && reached(2, 1) && !reached(0, 1));
        assert!(reached(3, u32::MAX) && !reached(u32::MAX, 3));
    }

    #[test]
    fn a_word_completes_every_entry_up_to_it_in_order() {
        let (flags, words) = flags(2);
        let mut values = Vec::new();
        for id in 10..13 {
            flags
                .register(0, id, |v| {
                    values.push(v);
                    Ok::<_, ()>(())
                })
                .unwrap();
        }
        assert_eq!(values, [1, 2, 3]);
        assert_eq!(flags.pending(), 3);
        let mut done = Vec::new();
        assert_eq!(flags.scan(|id| done.push(id)), 0);
        words.0[0].store(2, std::sync::atomic::Ordering::Release);
        assert_eq!(flags.scan(|id| done.push(id)), 2);
        assert_eq!(done, [10, 11]);
        // Another lane's word says nothing about this one.
        words.0[1].store(9, std::sync::atomic::Ordering::Release);
        assert_eq!(flags.scan(|id| done.push(id)), 0);
        words.0[0].store(3, std::sync::atomic::Ordering::Release);
        assert_eq!(flags.scan(|id| done.push(id)), 1);
        assert_eq!((done, flags.pending()), (vec![10, 11, 12], 0));
    }

    #[test]
    fn a_failed_write_registers_nothing_and_reuses_its_value() {
        let (flags, words) = flags(1);
        assert_eq!(flags.register(0, 1, |_| Err("no")), Err("no"));
        assert_eq!(flags.pending(), 0);
        flags
            .register(0, 2, |v| {
                assert_eq!(v, 1);
                Ok::<_, ()>(())
            })
            .unwrap();
        words.0[0].store(1, std::sync::atomic::Ordering::Release);
        let mut done = Vec::new();
        flags.scan(|id| done.push(id));
        assert_eq!(done, [2]);
    }

    #[test]
    fn the_scanner_sleeps_when_idle_and_wakes_for_new_work() {
        let (flags, words) = flags(1);
        let flags = Arc::new(flags);
        let done = Arc::new(std::sync::Mutex::new(Vec::new()));
        let scanner = {
            let (flags, done) = (flags.clone(), done.clone());
            std::thread::spawn(move || {
                flags.run(Duration::ZERO, Duration::from_micros(50), |id| {
                    done.lock().unwrap().push(id)
                })
            })
        };
        for id in 1..=3u64 {
            // Let the scanner fall asleep between submissions.
            std::thread::sleep(Duration::from_millis(5));
            flags
                .register(0, id, |v| {
                    words.0[0].store(v, std::sync::atomic::Ordering::Release);
                    Ok::<_, ()>(())
                })
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while done.lock().unwrap().len() < id as usize {
                assert!(
                    Instant::now() < deadline,
                    "submission {id} was never completed"
                );
                std::thread::yield_now();
            }
        }
        flags.stop();
        scanner.join().unwrap();
        assert_eq!(*done.lock().unwrap(), [1, 2, 3]);
    }
}
