//! Fences: sets of `(semaphore, value)` timepoints, the currency of queue ordering.
//!
//! A queue operation waits on one fence and signals another. A fence keeps at most one entry per
//! semaphore (the largest value inserted, since reaching it implies reaching every smaller one),
//! in insertion order.
//!
//! * [`Fence::wait_all`] completes when every entry is reached; [`Fence::wait_any`] when one is,
//!   with its index. Any failed semaphore ends either wait with that semaphore's error.
//! * [`Fence::signal`] signals every entry from the host; [`Fence::fail`] fails every entry.
//!
//! Both futures are `Send` and cancel-safe: dropping them removes all their waiters.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use smallvec::SmallVec;

use crate::error::{Error, Result, StatusCode};
use crate::semaphore::{Semaphore, Wait};

/// A set of timeline points: at most one `(semaphore, value)` per semaphore.
///
/// ```
/// # futures::executor::block_on(async {
/// use halcyon::{Fence, Semaphore};
///
/// let (a, b) = (Semaphore::new(0), Semaphore::new(0));
/// let mut fence = Fence::new();
/// fence.insert(&a, 1);
/// fence.insert(&b, 2);
/// fence.insert(&a, 3); // keeps the max: a >= 3
/// assert_eq!(fence.len(), 2);
///
/// let all = fence.wait_all();
/// fence.signal()?;
/// all.await?;
/// # Ok::<(), halcyon::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone, Default)]
pub struct Fence {
    /// Two inline: a timeline step waits on one entry and a submission signals its own
    /// completion and one more.
    entries: SmallVec<[(Semaphore, u64); 2]>,
}

impl Fence {
    /// An empty fence: waiting on it completes at once; signalling it does nothing.
    pub fn new() -> Self {
        Fence::default()
    }

    /// A fence with a single entry.
    pub fn at(semaphore: &Semaphore, value: u64) -> Self {
        let mut entries = SmallVec::new();
        entries.push((semaphore.clone(), value));
        Fence { entries }
    }

    /// Adds `semaphore >= value`; if the semaphore is already present, keeps the larger value.
    pub fn insert(&mut self, semaphore: &Semaphore, value: u64) {
        match self.entries.iter_mut().find(|(s, _)| s.ptr_eq(semaphore)) {
            Some((_, existing)) => *existing = (*existing).max(value),
            None => self.entries.push((semaphore.clone(), value)),
        }
    }

    /// Adds every entry of `other` (the union, keeping the max per semaphore).
    pub fn extend(&mut self, other: &Fence) {
        for (semaphore, value) in &other.entries {
            self.insert(semaphore, *value);
        }
    }

    /// The union of two fences.
    pub fn join(mut self, other: &Fence) -> Fence {
        self.extend(other);
        self
    }

    /// The number of distinct semaphores.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the fence has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries in insertion order; [`Fence::wait_any`] indexes into this order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&Semaphore, u64)> + '_ {
        self.entries.iter().map(|(s, v)| (s, *v))
    }

    /// Signals every entry to its value from the host.
    ///
    /// Every entry is attempted even if one fails; the first error is returned. An entry already
    /// at or above its value is an error ([`StatusCode::InvalidArgument`]) like
    /// [`Semaphore::signal`].
    pub fn signal(&self) -> Result<()> {
        let mut first_error = None;
        for (semaphore, value) in &self.entries {
            if let Err(error) = semaphore.signal(*value) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Fails every semaphore in the fence with `error` (each keeps its own first failure).
    pub fn fail(&self, error: Error) {
        for (semaphore, _) in &self.entries {
            semaphore.fail(error.clone());
        }
    }

    /// Without blocking: `Ok(true)` if every entry is reached, `Ok(false)` if some is not, or the
    /// error of a failed semaphore.
    pub fn query(&self) -> Result<bool> {
        let mut reached = true;
        for (semaphore, value) in &self.entries {
            reached &= semaphore.query()? >= *value;
        }
        Ok(reached)
    }

    /// A future that completes when every entry is reached (at once for an empty fence), or
    /// with the error of the first failed semaphore it sees.
    pub fn wait_all(&self) -> WaitAll {
        WaitAll {
            pending: self.entries.iter().map(|(s, v)| s.wait(*v)).collect(),
        }
    }

    /// A future that completes with the index (in [`Fence::iter`] order) of a reached entry, or
    /// with the error of a failed semaphore. On an empty fence it fails with
    /// [`StatusCode::InvalidArgument`], since nothing could ever complete it.
    pub fn wait_any(&self) -> WaitAny {
        WaitAny {
            waits: self.entries.iter().map(|(s, v)| s.wait(*v)).collect(),
        }
    }

    /// Blocks the calling thread until every entry is reached, a semaphore fails, or `timeout`
    /// passes ([`StatusCode::DeadlineExceeded`]).
    pub fn wait_all_blocking(&self, timeout: Option<Duration>) -> Result<()> {
        crate::block::block_on_timeout(self.wait_all(), timeout).unwrap_or_else(|| {
            Err(Error::new(
                StatusCode::DeadlineExceeded,
                format!(
                    "fence {self:?} was not reached within {:?}",
                    timeout.unwrap_or_default()
                ),
            ))
        })
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(s, v)| {
                let now = match s.query() {
                    Ok(current) => current.to_string(),
                    Err(error) => format!("failed ({})", error.code()),
                };
                format!("{now} -> {v}")
            }))
            .finish()
    }
}

impl<'a> FromIterator<(&'a Semaphore, u64)> for Fence {
    fn from_iter<I: IntoIterator<Item = (&'a Semaphore, u64)>>(iter: I) -> Self {
        let mut fence = Fence::new();
        for (semaphore, value) in iter {
            fence.insert(semaphore, value);
        }
        fence
    }
}

/// The future returned by [`Fence::wait_all`].
#[must_use = "futures do nothing unless awaited"]
#[derive(Debug)]
pub struct WaitAll {
    pending: SmallVec<[Wait; 2]>,
}

impl Future for WaitAll {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let mut i = 0;
        while i < this.pending.len() {
            match Pin::new(&mut this.pending[i]).poll(cx) {
                Poll::Ready(Ok(())) => {
                    drop(this.pending.swap_remove(i));
                }
                Poll::Ready(Err(error)) => {
                    this.pending.clear();
                    return Poll::Ready(Err(error));
                }
                Poll::Pending => i += 1,
            }
        }
        if this.pending.is_empty() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
}

/// The future returned by [`Fence::wait_any`].
#[must_use = "futures do nothing unless awaited"]
#[derive(Debug)]
pub struct WaitAny {
    waits: Vec<Wait>,
}

impl Future for WaitAny {
    type Output = Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<usize>> {
        let this = self.get_mut();
        if this.waits.is_empty() {
            return Poll::Ready(Err(Error::new(
                StatusCode::InvalidArgument,
                "wait_any on an empty fence can never complete; insert at least one semaphore",
            )));
        }
        for (index, wait) in this.waits.iter_mut().enumerate() {
            if let Poll::Ready(result) = Pin::new(wait).poll(cx) {
                this.waits.clear();
                return Poll::Ready(result.map(|()| index));
            }
        }
        Poll::Pending
    }
}
