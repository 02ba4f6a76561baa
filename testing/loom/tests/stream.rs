//! Model checks of the stream layer's timepoint and event-pool logic: the reference-counted
//! events of an [`EventPool`] and the `(value, event)` timepoints of an [`EventTimeline`], raced
//! against each other the way submissions, completions, host signals and failures race; and
//! the [`Handoff`] that feeds a completion thread, for lost wake-ups.
//!
//! The events come from a test factory whose bookkeeping is plain `std` (only touched outside
//! loom-visible critical sections, and read after the threads are joined), so it adds nothing to
//! explore.
#![cfg(loom)]

use std::collections::HashSet;
use std::sync::Mutex as StdMutex;

use std::time::Duration;

use halcyon::{Error, StatusCode};
use halcyon_stream::handoff::Handoff;
use halcyon_stream::{EventFactory, EventHandle, EventPool, EventTimeline, WaitSource};
use loom::future::block_on;
use loom::sync::Arc;
use loom::thread;
use loom_tests::model;

/// Hands out handles 1, 2, 3... and records which were destroyed (and whether one was twice).
#[derive(Default)]
struct Factory {
    state: std::sync::Arc<StdMutex<Ledger>>,
}

#[derive(Default)]
struct Ledger {
    created: u64,
    destroyed: HashSet<u64>,
    destroyed_twice: bool,
}

impl EventFactory for Factory {
    fn create(&self) -> halcyon::Result<EventHandle> {
        let mut ledger = self.state.lock().unwrap();
        ledger.created += 1;
        Ok(EventHandle(ledger.created))
    }

    fn destroy(&self, event: EventHandle) {
        let mut ledger = self.state.lock().unwrap();
        if !ledger.destroyed.insert(event.0) {
            ledger.destroyed_twice = true;
        }
    }
}

/// A pool over a fresh [`Factory`], and the factory's ledger.
fn owned_pool() -> (EventPool, std::sync::Arc<StdMutex<Ledger>>) {
    let factory = Factory::default();
    let ledger = factory.state.clone();
    (EventPool::new(Box::new(factory)), ledger)
}

/// [`owned_pool`], shared.
fn pool() -> (Arc<EventPool>, std::sync::Arc<StdMutex<Ledger>>) {
    let (pool, ledger) = owned_pool();
    (Arc::new(pool), ledger)
}

/// Every created event is destroyed exactly once after the pool is gone.
fn assert_all_destroyed_once(ledger: &StdMutex<Ledger>) {
    let ledger = ledger.lock().unwrap();
    assert!(!ledger.destroyed_twice, "an event was destroyed twice");
    assert_eq!(
        ledger.destroyed.len() as u64,
        ledger.created,
        "an event was never destroyed (stranded in a closed pool)"
    );
}

/// Two threads each take an event, clone it and drop the clones in either order, while the
/// other does the same: an event is never handed to a second holder (nor seen in the pool)
/// while a clone of it lives, every event comes back, and at most two were ever created.
#[test]
fn event_pool_never_shares_a_held_event() {
    model(|| {
        let (pool, ledger) = pool();
        let live = std::sync::Arc::new(StdMutex::new(HashSet::new()));
        let holders: Vec<_> = (0..2)
            .map(|_| {
                let (pool, live) = (pool.clone(), live.clone());
                thread::spawn(move || {
                    let event = pool.acquire().unwrap();
                    let handle = event.handle();
                    assert!(
                        live.lock().unwrap().insert(handle),
                        "{handle:?} handed out while another holder has it"
                    );
                    let clone = event.clone();
                    drop(event);
                    assert!(!pool.is_pooled(handle), "{handle:?} pooled while held");
                    live.lock().unwrap().remove(&handle);
                    drop(clone);
                })
            })
            .collect();
        for holder in holders {
            holder.join().unwrap();
        }
        let stats = pool.stats();
        assert!(stats.created <= 2);
        assert_eq!(stats.free, stats.created, "an event did not come back");
        assert_eq!(stats.acquired, 2);
        drop(pool);
        assert_all_destroyed_once(&ledger);
    });
}

/// The last holder of an event drops it while the pool closes (its device is dropped): the
/// event is destroyed exactly once, whichever comes first, never stranded in the closed pool.
#[test]
fn event_returned_while_the_pool_closes_is_destroyed_once() {
    model(|| {
        let (pool, ledger) = owned_pool();
        let event = pool.acquire().unwrap();
        let other = pool.acquire().unwrap();
        drop(other); // pooled before the race
        let holder = thread::spawn(move || drop(event));
        drop(pool);
        holder.join().unwrap();
        assert_all_destroyed_once(&ledger);
    });
}

/// A submission issues a signal of 1 (schedules the timepoint) while another, parked until 1
/// is scheduled, is released by that: it always finds the event to wait on.
#[test]
fn schedule_releases_the_parked_wait_with_its_event() {
    model(|| {
        let (pool, _ledger) = pool();
        let timeline = Arc::new(EventTimeline::new(1, 0));
        let issuer = {
            let (pool, timeline) = (pool.clone(), timeline.clone());
            thread::spawn(move || {
                let event = pool.acquire().unwrap();
                timeline.schedule(1, &event);
            })
        };
        block_on(timeline.scheduled().wait(1)).unwrap();
        match timeline.wait_source(1) {
            WaitSource::Event(event) => assert!(!pool.is_pooled(event.handle())),
            other => panic!("released for 1 but found {other:?}"),
        }
        issuer.join().unwrap();
        assert_eq!(timeline.timepoint_count(), 1);
        timeline.retire(1);
        assert_eq!(pool.stats().free, pool.stats().created);
    });
}

/// The device reaches 1 (retire) while a submission looks for a way to wait for 1: it sees the
/// value reached, or gets the event, which cannot be back in the pool while it holds it; the
/// event returns to the pool once both are done.
#[test]
fn retire_never_recycles_an_event_a_waiter_holds() {
    model(|| {
        let (pool, _ledger) = pool();
        let timeline = Arc::new(EventTimeline::new(1, 0));
        let event = pool.acquire().unwrap();
        timeline.schedule(1, &event);
        drop(event);
        let completion = {
            let timeline = timeline.clone();
            thread::spawn(move || timeline.retire(1))
        };
        match timeline.wait_source(1) {
            WaitSource::Reached => {}
            WaitSource::Event(event) => {
                assert!(!pool.is_pooled(event.handle()), "held event is pooled");
            }
            WaitSource::Unscheduled => panic!("1 was scheduled, then reached: never neither"),
        }
        completion.join().unwrap();
        assert!(matches!(timeline.wait_source(1), WaitSource::Reached));
        assert_eq!(timeline.timepoint_count(), 0);
        assert_eq!(
            pool.stats().free,
            pool.stats().created,
            "event not returned"
        );
    });
}

/// A device signal of 1 is scheduled while the host signals 1 (or the device completes it):
/// whatever the order, no timepoint is left behind holding an event, and 1 is reached.
#[test]
fn schedule_vs_host_signal_leaves_no_stale_timepoint() {
    model(|| {
        let (pool, _ledger) = pool();
        let timeline = Arc::new(EventTimeline::new(1, 0));
        let event = pool.acquire().unwrap();
        let issuer = {
            let timeline = timeline.clone();
            thread::spawn(move || timeline.schedule(1, &event))
        };
        timeline.host_signal(1);
        issuer.join().unwrap();
        assert_eq!(
            timeline.timepoint_count(),
            0,
            "stale timepoint after reaching 1"
        );
        assert!(matches!(timeline.wait_source(1), WaitSource::Reached));
        assert_eq!(timeline.scheduled().query().unwrap(), 1);
        assert_eq!(pool.stats().free, pool.stats().created);
    });
}

/// The semaphore fails while a signal is scheduled and a submission is parked until it is:
/// the parked wait ends (reached or with the failure), never hangs, and the failed timeline
/// holds no event.
#[test]
fn failure_vs_schedule_releases_the_parked_wait() {
    model(|| {
        let (pool, _ledger) = pool();
        let timeline = Arc::new(EventTimeline::new(1, 0));
        let failure = Error::new(StatusCode::DataLoss, "semaphore failed");
        let event = pool.acquire().unwrap();
        let issuer = {
            let timeline = timeline.clone();
            thread::spawn(move || timeline.schedule(1, &event))
        };
        let failer = {
            let (timeline, failure) = (timeline.clone(), failure.clone());
            thread::spawn(move || timeline.fail(&failure))
        };
        if let Err(error) = block_on(timeline.scheduled().wait(1)) {
            assert!(error.same_as(&failure), "unexpected error {error}");
        }
        issuer.join().unwrap();
        failer.join().unwrap();
        assert!(timeline.scheduled().is_failed());
        assert_eq!(
            timeline.timepoint_count(),
            0,
            "a failed timeline holds an event"
        );
        assert!(matches!(timeline.wait_source(1), WaitSource::Unscheduled));
        assert_eq!(pool.stats().free, pool.stats().created);
    });
}

/// Two producers push to a [`Handoff`] while its consumer takes two items, sleeping when it
/// finds none (no spin budget): the consumer is never left asleep with an item queued (loom
/// reports a deadlock if it is), and gets both items, each producer's in its push order.
#[test]
fn handoff_never_sleeps_through_a_push() {
    handoff_model(Duration::ZERO);
}

/// The same with a spin budget: the consumer polls once (loom has no time) before it sleeps.
#[test]
fn handoff_polling_consumer_never_sleeps_through_a_push() {
    handoff_model(Duration::from_micros(1));
}

fn handoff_model(spin: Duration) {
    model(move || {
        let handoff = Arc::new(Handoff::new(spin));
        let producers: Vec<_> = (0..2u32)
            .map(|p| {
                let handoff = handoff.clone();
                thread::spawn(move || handoff.push(p))
            })
            .collect();
        let mut got = vec![handoff.next().unwrap(), handoff.next().unwrap()];
        for producer in producers {
            producer.join().unwrap();
        }
        got.sort();
        assert_eq!(got, [0, 1]);
    });
}

/// A push, then a stop, racing the consumer: it takes the pushed item first, then sees the
/// stop; never hangs and never loses the item.
#[test]
fn handoff_drains_before_it_stops() {
    model(|| {
        let handoff = Arc::new(Handoff::new(Duration::ZERO));
        let producer = {
            let handoff = handoff.clone();
            thread::spawn(move || {
                handoff.push(7u32);
                handoff.stop();
            })
        };
        assert_eq!(handoff.next(), Some(7));
        assert_eq!(handoff.next(), None);
        producer.join().unwrap();
    });
}

/// [`Allocations`]: a free (`remove`) racing a checked driver call never completes while the
/// call's guard lives, and a check racing the free either pins the allocation before the
/// removal began (and the removal waits for it) or fails: no interleaving frees memory a
/// checked call still uses, and the removal always ends once the guards drop.
#[test]
fn allocation_removal_waits_for_checked_calls() {
    use halcyon_stream::allocations::Allocations;
    use halcyon_stream::DevicePtr;
    use loom::sync::atomic::{AtomicBool, Ordering};

    model(|| {
        let memory = Arc::new(Allocations::new("HIP"));
        memory.insert(0x1000, 0x100, ());
        // Set by the remover once `remove` returned: the memory is freed from then on.
        let freed = Arc::new(AtomicBool::new(false));
        let caller = {
            let (memory, freed) = (memory.clone(), freed.clone());
            thread::spawn(move || {
                if let Ok(pinned) = memory.check(DevicePtr(0x1080), 0x10, "copy") {
                    // The driver call using the range.
                    assert!(!freed.load(Ordering::SeqCst), "freed under a live guard");
                    thread::yield_now();
                    assert!(!freed.load(Ordering::SeqCst), "freed under a live guard");
                    drop(pinned);
                }
            })
        };
        assert_eq!(memory.remove(0x1000, |_| Ok(())).unwrap(), (0x100, ()));
        freed.store(true, Ordering::SeqCst);
        caller.join().unwrap();
        assert!(memory.is_empty());
    });
}
