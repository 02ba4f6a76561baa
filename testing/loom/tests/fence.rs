//! Model checks of fence waits over two semaphores moved by two other threads.
#![cfg(loom)]

use halcyon::{Error, Fence, Semaphore, StatusCode};
use loom::future::block_on;
use loom_tests::{model, spawn_fail, spawn_signal};

/// Two fresh semaphores and the fence `{a >= 1, b >= 1}`.
fn two_entry_fence() -> (Semaphore, Semaphore, Fence) {
    let (a, b) = (Semaphore::new(0), Semaphore::new(0));
    let fence = [(&a, 1), (&b, 1)].into_iter().collect();
    (a, b, fence)
}

/// `wait_all` while two threads each signal one entry: it completes (no lost wakeup from either
/// semaphore) only once both are reached, and leaves no waiter behind.
#[test]
fn wait_all_vs_two_signalers() {
    model(|| {
        let (a, b, fence) = two_entry_fence();
        let signal_a = spawn_signal(&a, 1);
        let signal_b = spawn_signal(&b, 1);
        block_on(fence.wait_all()).unwrap();
        assert!(
            fence.query().unwrap(),
            "wait_all completed before every entry"
        );
        signal_a.join().unwrap().unwrap();
        signal_b.join().unwrap().unwrap();
        assert_eq!((a.waiter_count(), b.waiter_count()), (0, 0));
    });
}

/// `wait_any` while two threads each signal one entry: it completes with the index of an entry
/// that is reached, and the wait it abandoned is deregistered.
#[test]
fn wait_any_vs_two_signalers() {
    model(|| {
        let (a, b, fence) = two_entry_fence();
        let signal_a = spawn_signal(&a, 1);
        let signal_b = spawn_signal(&b, 1);
        let index = block_on(fence.wait_any()).unwrap();
        let (sem, value) = fence.iter().nth(index).expect("index within the fence");
        assert!(
            sem.query().unwrap() >= value,
            "entry {index} reported but not reached"
        );
        signal_a.join().unwrap().unwrap();
        signal_b.join().unwrap().unwrap();
        assert_eq!((a.waiter_count(), b.waiter_count()), (0, 0));
    });
}

/// `wait_all` while one entry is signalled and the other fails: it ends with that very failure
/// (never `Ok`, never a hang) and drops its remaining wait.
#[test]
fn wait_all_vs_signal_and_fail() {
    model(|| {
        let (a, b, fence) = two_entry_fence();
        let failure = Error::new(StatusCode::DataLoss, "b lost");
        let signal_a = spawn_signal(&a, 1);
        let fail_b = spawn_fail(&b, &failure);
        let error = block_on(fence.wait_all()).expect_err("b can never be reached");
        assert!(error.same_as(&failure), "wrong error: {error:?}");
        signal_a.join().unwrap().unwrap();
        fail_b.join().unwrap();
        assert_eq!((a.waiter_count(), b.waiter_count()), (0, 0));
    });
}

/// `wait_any` while one entry is signalled and the other fails: it ends with the signalled
/// entry's index or with the very failure, and drops its remaining wait.
#[test]
fn wait_any_vs_signal_and_fail() {
    model(|| {
        let (a, b, fence) = two_entry_fence();
        let failure = Error::new(StatusCode::DataLoss, "b lost");
        let signal_a = spawn_signal(&a, 1);
        let fail_b = spawn_fail(&b, &failure);
        match block_on(fence.wait_any()) {
            Ok(index) => {
                assert_eq!(index, 0, "only a can be reached");
                assert_eq!(a.query().unwrap(), 1);
            }
            Err(error) => {
                assert!(error.same_as(&failure), "wrong error: {error:?}");
                assert!(b.is_failed());
            }
        }
        signal_a.join().unwrap().unwrap();
        fail_b.join().unwrap();
        assert_eq!((a.waiter_count(), b.waiter_count()), (0, 0));
    });
}
