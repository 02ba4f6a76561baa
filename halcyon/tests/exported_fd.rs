//! `Semaphore::export_fd`: a semaphore's value as an eventfd that epoll, io_uring or tokio's
//! `AsyncFd` can wait on.
#![cfg(target_os = "linux")]

use std::os::fd::AsRawFd;
use std::time::Duration;

use halcyon::{Error, Semaphore, SemaphoreFd, StatusCode};

/// Whether `fd` is readable within `timeout_ms` (`poll(2)`).
fn readable(fd: &SemaphoreFd, timeout_ms: i32) -> bool {
    let mut pollfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the call.
    let n = unsafe { libc::poll(&mut pollfd, 1, timeout_ms) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    n == 1 && pollfd.revents & libc::POLLIN != 0
}

/// Reads the eventfd's count (8 bytes).
fn read_count(fd: &SemaphoreFd) -> u64 {
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into a live u64.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
    assert_eq!(n, 8, "read: {}", std::io::Error::last_os_error());
    count
}

#[test]
fn exported_fd_becomes_readable_when_the_value_is_reached() {
    let semaphore = Semaphore::new(0);
    let fd = semaphore.export_fd(2).unwrap();
    assert!(!readable(&fd, 0));
    assert_eq!(semaphore.waiter_count(), 1);
    semaphore.signal(1).unwrap();
    assert!(!readable(&fd, 0), "1 is not 2");
    assert!(fd.result().is_none());
    semaphore.signal(2).unwrap();
    assert!(readable(&fd, 0));
    assert!(matches!(fd.result(), Some(Ok(()))));
    assert_eq!(read_count(&fd), 1);
    assert!(!readable(&fd, 0), "read once, the count is spent");
    assert!(matches!(fd.result(), Some(Ok(()))), "the outcome stays");
    assert_eq!(semaphore.waiter_count(), 0);
}

#[test]
fn exported_fd_of_a_reached_value_is_readable_at_once() {
    let semaphore = Semaphore::new(5);
    let fd = semaphore.export_fd(3).unwrap();
    assert!(readable(&fd, 0));
    assert!(matches!(fd.result(), Some(Ok(()))));
    assert_eq!(semaphore.waiter_count(), 0);
}

#[test]
fn exported_fd_reports_a_failure() {
    let semaphore = Semaphore::new(0);
    let fd = semaphore.export_fd(1).unwrap();
    semaphore.fail(Error::new(StatusCode::Internal, "the device fell over"));
    assert!(readable(&fd, 0));
    let error = fd.result().unwrap().unwrap_err();
    assert_eq!(error.code(), StatusCode::Internal);
    assert!(error.message().contains("fell over"), "{error}");
}

/// The descriptor does not keep the semaphore alive: once nothing can signal it, the wait
/// fails as abandoned and the descriptor becomes readable; no wait hangs.
#[test]
fn exported_fd_of_an_abandoned_semaphore_is_readable() {
    let semaphore = Semaphore::new(0);
    let fd = semaphore.export_fd(1).unwrap();
    drop(semaphore);
    assert!(readable(&fd, 0));
    assert_eq!(
        fd.result().unwrap().unwrap_err().code(),
        StatusCode::Aborted
    );
}

#[test]
fn dropping_an_exported_fd_removes_its_waiter() {
    let semaphore = Semaphore::new(0);
    let fds: Vec<_> = (1..=3).map(|v| semaphore.export_fd(v).unwrap()).collect();
    assert_eq!(semaphore.waiter_count(), 3);
    drop(fds);
    assert_eq!(semaphore.waiter_count(), 0);
    semaphore.signal(3).unwrap();
}

/// Signalled from another thread while a thread sleeps in `poll(2)` on the descriptor, many
/// times over: no wake-up is lost.
#[test]
fn exported_fd_wakes_a_thread_blocked_in_poll() {
    let semaphore = Semaphore::new(0);
    for value in 1..=200u64 {
        let fd = semaphore.export_fd(value).unwrap();
        let signaller = {
            let semaphore = semaphore.clone();
            std::thread::spawn(move || semaphore.signal(value).unwrap())
        };
        assert!(readable(&fd, 10_000), "value {value}");
        signaller.join().unwrap();
        assert!(matches!(fd.result(), Some(Ok(()))));
    }
}

/// The point of it: a tokio task gates on a semaphore through `AsyncFd`, as it would on a
/// socket, while another task signals it.
#[test]
fn exported_fd_gates_a_tokio_task_through_async_fd() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let semaphore = Semaphore::new(0);
        let exported = semaphore.export_fd(3).unwrap();
        // SAFETY: a `SemaphoreFd` owns its descriptor, open (and always the same) for as long
        // as it lives, which the `AsyncFd` owns it.
        let fd = unsafe { tokio::io::unix::AsyncFd::register(exported) }.unwrap();
        let signaller = {
            let semaphore = semaphore.clone();
            tokio::spawn(async move {
                for v in 1..=3 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    semaphore.signal(v).unwrap();
                }
            })
        };
        let mut guard = tokio::time::timeout(Duration::from_secs(10), fd.readable())
            .await
            .expect("readable within 10 s")
            .unwrap();
        assert!(matches!(guard.get_inner().result(), Some(Ok(()))));
        assert_eq!(semaphore.query().unwrap(), 3);
        guard.clear_ready();
        signaller.await.unwrap();
    });
}
