//! A semaphore's value as a file descriptor the OS can wait on (Linux).
//!
//! Device work ordered by semaphores often has to gate, or be gated by, code that waits on file
//! descriptors: a tokio `AsyncFd`, an epoll loop, io_uring. [`Semaphore::export_fd`] turns
//! "this semaphore reached `value`" into an eventfd that becomes readable then, for any
//! semaphore of any backend (host semaphores, queue timelines, device semaphores): whoever
//! settles the wait (a signal, a failure, the last handle dropping) writes the eventfd, on the
//! thread that did it, without blocking. The outcome is kept with the descriptor
//! ([`SemaphoreFd::result`]): a failed semaphore makes it readable too.
//!
//! Importing the other way (a semaphore signalled when a descriptor becomes readable) needs no
//! export: a task awaiting the descriptor signals the semaphore.

use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

use crate::error::{Error, Result, StatusCode};
use crate::semaphore::{Semaphore, Wait};

/// An eventfd that becomes readable once a semaphore reaches a value, or fails (made by
/// [`Semaphore::export_fd`]).
///
/// It becomes readable exactly once, when the wait settles; reading it (8 bytes, the count 1)
/// makes it unreadable again, while [`SemaphoreFd::result`] keeps the outcome. It owns its
/// descriptor, which stays open and the same for as long as it lives: what registering it
/// with a reactor (tokio's `AsyncFd::register`, epoll) asks of it. Dropping it
/// cancels the wait: nothing is left registered on the semaphore. It does not keep the
/// semaphore alive: if every handle that could signal it drops first, the wait fails
/// (`Aborted`, as for any [`Wait`]) and the descriptor becomes readable.
///
/// ```
/// # fn main() -> halcyon::Result<()> {
/// use std::os::fd::AsRawFd;
/// use halcyon::Semaphore;
///
/// let semaphore = Semaphore::new(0);
/// let fd = semaphore.export_fd(2)?;
/// assert!(fd.result().is_none());
/// semaphore.signal(2)?;
/// // Readable now: poll(2), epoll, tokio's AsyncFd or io_uring see it.
/// let mut pollfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
/// // SAFETY: one valid pollfd.
/// assert_eq!(unsafe { libc::poll(&mut pollfd, 1, 0) }, 1);
/// assert!(matches!(fd.result(), Some(Ok(()))));
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SemaphoreFd {
    watch: Arc<Watch>,
}

/// The wait behind a [`SemaphoreFd`], polled by its own waker.
struct Watch {
    /// Written once when the wait settles.
    fd: OwnedFd,
    slot: Mutex<Slot>,
    outcome: OnceLock<Result<()>>,
}

/// Where the wait is. It is polled outside the lock (a poll may wake this watch on the same
/// thread: a semaphore found abandoned fails its waiters), so a wake during a poll only leaves
/// a note for the poller to poll again.
enum Slot {
    Idle(Wait),
    Polling { woken: bool },
    Settled,
    Cancelled,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("outcome", &self.outcome.get())
            .finish()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watch {
    /// Polls the wait with this watch's waker (or, if a poll is under way, has it poll again);
    /// once it settles, keeps the outcome and makes the descriptor readable.
    fn poll(self: &Arc<Self>) {
        let mut pending = {
            let mut slot = lock(&self.slot);
            match std::mem::replace(&mut *slot, Slot::Polling { woken: false }) {
                Slot::Idle(wait) => wait,
                Slot::Polling { .. } => {
                    *slot = Slot::Polling { woken: true };
                    return;
                }
                other => {
                    *slot = other;
                    return;
                }
            }
        };
        let waker = Waker::from(self.clone());
        loop {
            let polled = Pin::new(&mut pending).poll(&mut Context::from_waker(&waker));
            let mut slot = lock(&self.slot);
            match polled {
                Poll::Ready(outcome) => {
                    if !matches!(*slot, Slot::Cancelled) {
                        *slot = Slot::Settled;
                    }
                    drop(slot);
                    let _ = self.outcome.set(outcome);
                    let one: u64 = 1;
                    // SAFETY: writes 8 bytes from a live u64 to the eventfd, which `self.fd`
                    // keeps open. An eventfd written once cannot overflow, and the descriptor
                    // is non-blocking.
                    unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
                    return;
                }
                Poll::Pending => match *slot {
                    Slot::Polling { woken: true } => *slot = Slot::Polling { woken: false },
                    Slot::Polling { woken: false } => {
                        *slot = Slot::Idle(pending);
                        return;
                    }
                    // Cancelled meanwhile: `pending` drops here, removing its waiter.
                    _ => return,
                },
            }
        }
    }

    /// Cancels the wait (the descriptor's owner let go): its waiter is removed, now or by the
    /// poll under way.
    fn cancel(&self) {
        let previous = std::mem::replace(&mut *lock(&self.slot), Slot::Cancelled);
        drop(previous);
    }
}

impl Wake for Watch {
    fn wake(self: Arc<Self>) {
        self.poll();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.poll();
    }
}

impl SemaphoreFd {
    /// The outcome once the wait settled: `Ok` if the semaphore reached the value, else its
    /// failure. `None` while it waits.
    pub fn result(&self) -> Option<Result<()>> {
        self.watch.outcome.get().cloned()
    }
}

impl AsFd for SemaphoreFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.watch.fd.as_fd()
    }
}

impl AsRawFd for SemaphoreFd {
    fn as_raw_fd(&self) -> RawFd {
        self.watch.fd.as_raw_fd()
    }
}

impl Drop for SemaphoreFd {
    fn drop(&mut self) {
        // Removes the waiter (and with it the waker that holds the watch) from the semaphore.
        self.watch.cancel();
    }
}

impl Semaphore {
    /// A file descriptor that becomes readable once this semaphore reaches `value` or fails
    /// (see [`SemaphoreFd`]): an eventfd, non-blocking and close-on-exec, readable at once if
    /// the value is reached already. For gating epoll, io_uring or tokio's `AsyncFd` on device
    /// work. `Unavailable` if the process cannot create another descriptor (the OS error
    /// says why).
    pub fn export_fd(&self, value: u64) -> Result<SemaphoreFd> {
        // SAFETY: eventfd takes no pointers; it returns a new descriptor or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(Error::new(
                StatusCode::Unavailable,
                format!(
                    "cannot create an eventfd for semaphore {}: {}",
                    self.id(),
                    std::io::Error::last_os_error()
                ),
            ));
        }
        // SAFETY: a descriptor eventfd just returned, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let watch = Arc::new(Watch {
            fd,
            slot: Mutex::new(Slot::Idle(self.wait(value))),
            outcome: OnceLock::new(),
        });
        watch.poll();
        Ok(SemaphoreFd { watch })
    }
}
