//! Model checks of the flag-write completion protocol ([`Flags`]): submissions registered on
//! lanes by issuing threads, words written by a "device" thread, and the scanner that reads the
//! words, completes the submissions and sleeps when nothing is pending. Loom reports a deadlock
//! if the scanner sleeps through a registration (a lost wake-up); the assertions catch a
//! completion lost, repeated or out of order.
#![cfg(loom)]

use halcyon_stream::flags::{Flags, Words};
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::model;

/// The words, shared between the flags and the device thread.
#[derive(Clone)]
struct Shared(Arc<Vec<AtomicU32>>);

impl Shared {
    fn new(lanes: usize) -> Self {
        Shared(Arc::new((0..lanes).map(|_| AtomicU32::new(0)).collect()))
    }

    /// The device's write, after the work before it (a release store, as the device's
    /// fence before the write makes its earlier writes visible first).
    fn write(&self, lane: usize, value: u32) {
        self.0[lane].store(value, Ordering::Release);
    }
}

impl Words for Shared {
    fn read(&self, lane: usize) -> u32 {
        self.0[lane].load(Ordering::Acquire)
    }
}

/// The scanner's loop without time: scans; with nothing pending sleeps until woken; otherwise
/// yields (the busy scanner's poll). Returns the ids completed, once `expected` were.
fn scanner(flags: &Flags<Shared>, expected: usize) -> Vec<u64> {
    let mut done = Vec::new();
    while done.len() < expected {
        if flags.scan(|id| done.push(id)) > 0 {
            continue;
        }
        if flags.pending() == 0 {
            assert!(flags.wait_for_work(), "stopped while work was expected");
        } else {
            thread::yield_now();
        }
    }
    done
}

/// Two issuing threads register one submission each on their own lane, and the device writes
/// each word as soon as its write is enqueued, while the scanner sleeps and scans: both are
/// completed, and the scanner never sleeps through the registration that woke the device.
#[test]
fn the_scanner_never_sleeps_through_a_registration() {
    model(|| {
        let words = Shared::new(2);
        let flags = Arc::new(Flags::new(words.clone(), 2));
        let issuers: Vec<_> = (0..2usize)
            .map(|lane| {
                let (flags, words) = (flags.clone(), words.clone());
                thread::spawn(move || {
                    flags
                        .register(lane, lane as u64 + 1, |value| {
                            words.write(lane, value);
                            Ok::<_, ()>(())
                        })
                        .unwrap();
                })
            })
            .collect();
        let mut done = scanner(&flags, 2);
        for issuer in issuers {
            issuer.join().unwrap();
        }
        done.sort();
        assert_eq!(done, [1, 2]);
        assert_eq!(flags.pending(), 0);
    });
}

/// The device writes the word (value 1) on its own thread, possibly before the registration
/// that handed out the value has queued its entry: the scanner must not take the word as seen
/// before it popped the entry, or the submission is never completed.
#[test]
fn a_word_written_before_its_entry_is_queued_is_not_lost() {
    model(|| {
        let words = Shared::new(1);
        let flags = Arc::new(Flags::new(words.clone(), 1));
        let device = {
            let words = words.clone();
            thread::spawn(move || words.write(0, 1))
        };
        let issuer = {
            let flags = flags.clone();
            thread::spawn(move || flags.register(0, 7, |_| Ok::<_, ()>(())).unwrap())
        };
        let done = scanner(&flags, 1);
        device.join().unwrap();
        issuer.join().unwrap();
        assert_eq!(done, [7]);
    });
}

/// Two submissions on one lane, the device writing each value after its registration: the
/// scanner completes them once each, in value order, whether it sees the words one at a time
/// or only the second (which covers the first).
#[test]
fn one_lane_completes_in_order_once_each() {
    model(|| {
        let words = Shared::new(1);
        let flags = Arc::new(Flags::new(words.clone(), 1));
        let issuer = {
            let (flags, words) = (flags.clone(), words.clone());
            thread::spawn(move || {
                for id in [5, 6] {
                    flags
                        .register(0, id, |value| {
                            words.write(0, value);
                            Ok::<_, ()>(())
                        })
                        .unwrap();
                }
            })
        };
        let done = scanner(&flags, 2);
        issuer.join().unwrap();
        assert_eq!(done, [5, 6]);
    });
}

/// A stop racing a sleeping scanner ends its sleep.
#[test]
fn stop_wakes_a_sleeping_scanner() {
    model(|| {
        let flags = Arc::new(Flags::new(Shared::new(1), 1));
        let stopper = {
            let flags = flags.clone();
            thread::spawn(move || flags.stop())
        };
        assert!(!flags.wait_for_work());
        stopper.join().unwrap();
    });
}
