//! Model checks of failing a signal fence in timeline order through the pending-signal
//! registry: `Semaphore::expect_signal` records work that will signal a value, and
//! `fail_in_order` holds a failure of a later value until that work settled (see
//! `halcyon::queue`). Unlike the reactor models, the earlier work here is known only through
//! the registry, not through the failing action's own waits.
#![cfg(loom)]

use halcyon::backend::fail_in_order;
use halcyon::backend::reactor::Reactor;
use halcyon::{Error, Fence, Semaphore, StatusCode};
use loom::future::block_on;
use loom::thread;
use loom_tests::{model, spawn_signal, Quarantine};

/// Keeps freed inbox nodes from being reused within one execution (see [`Quarantine`]).
#[global_allocator]
static ALLOCATOR: Quarantine = Quarantine;

/// Work expected to signal `s` to 1 completes on one thread while the host fails `s` at 2
/// because later work failed. The failure never overtakes the earlier signal: the signal to 1
/// always succeeds, whether the failure saw it pending (and was held on the reactor until it
/// landed) or already reached; then `s` fails, and its waiter at 2 ends with the error.
#[test]
fn failure_waits_for_an_expected_earlier_signal() {
    model(|| {
        let reactor = Reactor::new("loom").unwrap();
        let s = Semaphore::new(0);
        s.expect_signal(1);
        let failure = Error::new(StatusCode::Aborted, "later work failed");
        let earlier = spawn_signal(&s, 1);
        fail_in_order(
            &reactor.handle(),
            &Fence::new(),
            Fence::at(&s, 2),
            failure.clone(),
        );
        let error = block_on(s.wait(2)).expect_err("the later value failed");
        assert!(error.same_as(&failure), "wrong error: {error}");
        earlier
            .join()
            .unwrap()
            .expect("the earlier work's signal is never overtaken by the later failure");
        drop(reactor);
        assert_eq!(s.waiter_count(), 0);
    });
}

/// Registering an expected signal races the signal itself. Whichever lands first, nothing is
/// left pending at or below the payload: a failure of a later value then fails at once, with
/// nothing for it to wait for (a stale entry would hold it on the reactor, and `s` would not
/// read failed when `fail_in_order` returns).
#[test]
fn expect_signal_vs_its_signal_leaves_nothing_pending() {
    model(|| {
        let reactor = Reactor::new("loom").unwrap();
        let s = Semaphore::new(0);
        let expecter = {
            let s = s.clone();
            thread::spawn(move || s.expect_signal(2))
        };
        let signaller = spawn_signal(&s, 2);
        expecter.join().unwrap();
        signaller.join().unwrap().unwrap();
        let failure = Error::new(StatusCode::Aborted, "later work failed");
        fail_in_order(&reactor.handle(), &Fence::new(), Fence::at(&s, 3), failure);
        assert!(s.is_failed(), "a reached value held the failure back");
        drop(reactor);
    });
}

/// Registering an expected signal races a failure of the semaphore. A registration after the
/// failure is ignored, and one before it is emptied by it, so the semaphore stays failed with
/// the first error, and a later failure through `fail_in_order` neither waits nor replaces it.
#[test]
fn expect_signal_vs_failure_holds_nothing_back() {
    model(|| {
        let reactor = Reactor::new("loom").unwrap();
        let s = Semaphore::new(0);
        let first = Error::new(StatusCode::DataLoss, "the device faulted");
        let expecter = {
            let s = s.clone();
            thread::spawn(move || s.expect_signal(1))
        };
        let failer = {
            let (s, first) = (s.clone(), first.clone());
            thread::spawn(move || s.fail(first))
        };
        expecter.join().unwrap();
        failer.join().unwrap();
        let later = Error::new(StatusCode::Aborted, "later work failed");
        fail_in_order(&reactor.handle(), &Fence::new(), Fence::at(&s, 2), later);
        let error = s.query().expect_err("failed");
        assert!(error.same_as(&first), "the first failure wins: {error}");
        drop(reactor);
    });
}
