//! Timeline semaphores: a monotonically increasing `u64` payload plus a failure state.
//!
//! The semantics are those of Vulkan timeline semaphores and IREE's HAL semaphores:
//!
//! * **Ordering.** The payload only moves up. [`Semaphore::signal`] with a value not strictly above
//!   the current one is rejected with [`StatusCode::InvalidArgument`] and the timeline does not
//!   move; of two racing signalers exactly one wins each value. A successful signal
//!   happens-before every wait it completes: memory written before `signal(v)` is visible to a
//!   task whose `wait(v)` returned `Ok`.
//! * **Failure.** [`Semaphore::fail`] poisons the semaphore. The first failure wins; every present
//!   and future waiter, query and signal gets that same [`Error`].
//! * **Waking.** A signal wakes exactly the waiters whose value it reached, in registration
//!   order, in `O(k + log N)` for `k` woken out of `N` registered (`O(k log k + log N)` when the
//!   woken waiters awaited different values). Wakers run after the internal lock is released.
//! * **Cancellation.** A [`Wait`] future registers its waker on first poll and removes it when
//!   dropped, so abandoned waits (a lost `select!` branch, a timeout) leave nothing behind.
//! * **Abandonment.** A wait never hangs on a semaphore nothing can signal any more. Every
//!   [`Semaphore`] handle (a clone, one held in a [`crate::Fence`] by pending work) could
//!   signal it; a [`Wait`] does not count. Once the last handle is dropped with the value not
//!   reached, the semaphore fails with [`StatusCode::Aborted`] ("abandoned"), as a tokio
//!   `oneshot` receiver errors once its sender is gone: waits present then and any polled later
//!   complete with that error.
//!
//! Device backends can back a semaphore with a native object (a Vulkan timeline semaphore, an
//! event timeline on a GPU stream) through [`crate::backend::NativeSemaphore`]; the waiters stay
//! here and the backend moves the payload with [`crate::backend::SemaphoreExt::advance`].

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::backend::NativeSemaphore;
use crate::error::{Error, Result, StatusCode};
use crate::sync::{lock, Arc, AtomicU64, Mutex, Ordering};

/// The payload stored once a semaphore has failed. Reserved: no signal may reach it.
const FAILED: u64 = u64::MAX;

/// How many waiters a signal pops one by one before it splits the rest off in one go; keeps the
/// common "wake one or two" case free of allocation and the "wake many" case `O(k + log N)`.
const POP_BEFORE_SPLIT: usize = 8;

/// A timeline semaphore. Cloning gives another handle to the same timeline; dropping the last
/// one while a [`Wait`] for an unreached value is pending fails it with `Aborted` ("abandoned"; a
/// `Wait` does not count as a handle), so no wait hangs on a semaphore nothing can signal.
///
/// ```
/// # futures::executor::block_on(async {
/// use halcyon::Semaphore;
///
/// let sem = Semaphore::new(0);
/// let waiter = sem.wait(2);
/// sem.signal(1)?;
/// sem.signal(2)?;
/// waiter.await?;
/// assert_eq!(sem.query()?, 2);
/// # Ok::<(), halcyon::Error>(())
/// # }).unwrap();
/// ```
pub struct Semaphore {
    shared: Arc<Shared>,
    /// Whether this handle counts in [`Shared::handles`]: every handle but the one inside a
    /// [`Wait`].
    counted: bool,
}

impl Clone for Semaphore {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        Semaphore {
            shared: self.shared.clone(),
            counted: true,
        }
    }
}

impl Drop for Semaphore {
    fn drop(&mut self) {
        if self.counted && self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.abandoned();
        }
    }
}

struct Shared {
    /// Live counted handles: what could still signal the semaphore.
    handles: AtomicU64,
    /// The payload, or [`FAILED`]. Written only with `state` locked; read without it.
    value: AtomicU64,
    state: Mutex<State>,
    native: Option<Box<dyn NativeSemaphore>>,
    /// Process-unique, for traces ([`Semaphore::id`]); 0 until first asked for, so that the
    /// semaphores nobody traces never touch the global counter.
    id: std::sync::atomic::AtomicU64,
    /// The profile record of the operation whose completion this semaphore marks (the core's
    /// per-submission semaphore, while its device profiles): told when it settles.
    trace: Option<crate::profile::OperationTrace>,
    label: crate::label::Label,
}

impl Shared {
    fn new(
        initial_value: u64,
        native: Option<Box<dyn NativeSemaphore>>,
        trace: Option<crate::profile::OperationTrace>,
    ) -> Self {
        Shared {
            handles: AtomicU64::new(1),
            value: AtomicU64::new(initial_value.min(Semaphore::MAX_VALUE)),
            state: Mutex::new(State {
                failure: None,
                failed_at: 0,
                waiters: BTreeMap::new(),
                next_waiter: 0,
                pending: PendingSignals::default(),
            }),
            native,
            id: std::sync::atomic::AtomicU64::new(0),
            trace,
            label: crate::label::Label::default(),
        }
    }
}

/// A semaphore's allocation kept for reuse ([`Semaphore::spent`], [`Semaphore::reuse`]): not
/// a handle, so it neither signals nor keeps the semaphore from being abandoned.
pub(crate) struct Spent(Arc<Shared>);

/// The next [`Semaphore::id`] (plain std: ids take no part in any synchronisation loom checks).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

struct State {
    failure: Option<Error>,
    /// The payload when the semaphore failed (meaningful once `failure` is set).
    failed_at: u64,
    /// Registered waiters ordered by the value they wait for, then by registration.
    waiters: BTreeMap<WaitKey, Waker>,
    next_waiter: u64,
    /// Values above the payload that submitted work will signal (or fail); see
    /// [`Semaphore::expect_signal`]. Emptied by a failure, and pruned as the payload passes them.
    pending: PendingSignals,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct WaitKey {
    value: u64,
    id: u64,
}

impl Semaphore {
    /// The largest payload a semaphore can be signalled to (`u64::MAX` is reserved internally).
    pub const MAX_VALUE: u64 = u64::MAX - 1;

    /// Creates a host semaphore whose payload starts at `initial_value`.
    ///
    /// An `initial_value` above [`Semaphore::MAX_VALUE`] is clamped to it.
    pub fn new(initial_value: u64) -> Self {
        Self::build(initial_value, None)
    }

    pub(crate) fn build(initial_value: u64, native: Option<Box<dyn NativeSemaphore>>) -> Self {
        Self::build_traced(initial_value, native, None)
    }

    /// A host semaphore at 0 marking one queue operation's completion, telling `trace` (the
    /// operation's profile record, if it is profiled) when it is signalled or fails.
    pub(crate) fn completion(trace: Option<crate::profile::OperationTrace>) -> Self {
        Self::build_traced(0, None, trace)
    }

    fn build_traced(
        initial_value: u64,
        native: Option<Box<dyn NativeSemaphore>>,
        trace: Option<crate::profile::OperationTrace>,
    ) -> Self {
        Semaphore {
            counted: true,
            shared: Arc::new(Shared::new(initial_value, native, trace)),
        }
    }

    /// [`Semaphore::completion`] of `trace`, built in `spent`'s allocation when nothing else
    /// holds it any more; `trace` back when something does. The queue's completion semaphores
    /// are recycled this way (`queue::completion`).
    pub(crate) fn reuse(
        spent: &mut Spent,
        trace: Option<crate::profile::OperationTrace>,
    ) -> std::result::Result<Semaphore, Option<crate::profile::OperationTrace>> {
        // Unique: no handle, wait or clone of the old semaphore is left anywhere, so nobody
        // can observe it being replaced.
        let Some(shared) = Arc::get_mut(&mut spent.0) else {
            return Err(trace);
        };
        *shared = Shared::new(0, None, trace);
        Ok(Semaphore {
            shared: spent.0.clone(),
            counted: true,
        })
    }

    /// An uncounted reference to this semaphore's allocation, for [`Semaphore::reuse`] once
    /// every handle is gone. Holding it keeps no waiter from learning that the semaphore was
    /// abandoned.
    pub(crate) fn spent(&self) -> Spent {
        Spent(self.shared.clone())
    }

    /// A number that names this semaphore in traces ([`crate::profile::Operation::waits`]):
    /// unique in the process, the same for every clone.
    pub fn id(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        match self.shared.id.load(Relaxed) {
            0 => {
                let fresh = NEXT_ID.fetch_add(1, Relaxed);
                match self.shared.id.compare_exchange(0, fresh, Relaxed, Relaxed) {
                    Ok(_) => fresh,
                    Err(taken) => taken, // another clone asked first
                }
            }
            id => id,
        }
    }

    /// Names the semaphore in error messages (a wait on it that failed) and profile records
    /// (`semaphore 4 'frame'`; see its `Display`). Every handle sees the new label.
    pub fn set_label(&self, label: &str) {
        self.shared.label.set(label);
    }

    /// The semaphore's label, if it has one.
    pub fn label(&self) -> Option<std::sync::Arc<str>> {
        self.shared.label.get()
    }

    /// The profile record this semaphore reports to, if it marks a profiled operation.
    pub(crate) fn trace(&self) -> Option<&crate::profile::OperationTrace> {
        self.shared.trace.as_ref()
    }

    /// The current payload, or the failure if the semaphore failed.
    ///
    /// For a host semaphore this is one atomic load. A natively backed semaphore also asks its
    /// native object, which may know of progress the device made that its reactor has not posted
    /// yet; that progress is then applied (waking its waiters).
    pub fn query(&self) -> Result<u64> {
        let value = self.shared.value.load(Ordering::Acquire);
        if value == FAILED {
            return Err(self.failure());
        }
        if let Some(native) = &self.shared.native {
            match native.query() {
                Some(Ok(native_value)) if native_value > value => {
                    self.advance_to(native_value);
                    return self.query_core();
                }
                Some(Err(error)) => {
                    self.fail(error);
                    return Err(self.failure());
                }
                _ => {}
            }
        }
        Ok(value)
    }

    fn query_core(&self) -> Result<u64> {
        match self.shared.value.load(Ordering::Acquire) {
            FAILED => Err(self.failure()),
            value => Ok(value),
        }
    }

    /// The stored failure; only called once the payload reads [`FAILED`].
    fn failure(&self) -> Error {
        lock(&self.shared.state).failure.clone().unwrap_or_else(|| {
            Error::new(
                StatusCode::Internal,
                "semaphore reads as failed but holds no failure",
            )
        })
    }

    /// Signals the timeline to `value` from the host, waking every waiter at or below it.
    ///
    /// `value` must be strictly above the current payload: otherwise the call fails with
    /// [`StatusCode::InvalidArgument`] naming both values, and the timeline does not move. On a
    /// failed semaphore it returns that failure. For a natively backed semaphore the native object
    /// is signalled first (for example `vkSignalSemaphore`), so device work waiting on it is
    /// released too; if that fails, the error is returned and the timeline does not move.
    pub fn signal(&self, value: u64) -> Result<()> {
        if value > Self::MAX_VALUE {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "cannot signal semaphore to {value}: the largest allowed value is {}",
                    Self::MAX_VALUE
                ),
            ));
        }
        let mut state = lock(&self.shared.state);
        if let Some(failure) = &state.failure {
            return Err(failure.clone());
        }
        let current = self.shared.value.load(Ordering::Relaxed);
        if value <= current {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "cannot signal semaphore to {value}: it is already at {current} and a \
                     timeline only moves up (signal a value above {current})"
                ),
            ));
        }
        if let Some(native) = &self.shared.native {
            native.signal(value)?;
        }
        self.settle_trace(None);
        self.shared.value.store(value, Ordering::Release);
        state.pending.prune(value);
        let woken = take_reached(&mut state.waiters, value);
        drop(state);
        woken.wake();
        Ok(())
    }

    /// Completes the profile record this semaphore carries, if any: before the new payload is
    /// stored, so that whoever sees the payload (a waker, or a submission spinning on it) also
    /// finds the record complete.
    fn settle_trace(&self, error: Option<&Error>) {
        if let Some(record) = &self.shared.trace {
            record.0.settled(error);
        }
    }

    /// Moves the payload up to `value` if it is above the current one; never an error. Used when
    /// the device (not the host) reached `value`, so the native object is not signalled again.
    pub(crate) fn advance_to(&self, value: u64) {
        let value = value.min(Self::MAX_VALUE);
        if self.shared.value.load(Ordering::Acquire) >= value {
            return; // already there, or failed (FAILED is above every value)
        }
        let mut state = lock(&self.shared.state);
        let current = self.shared.value.load(Ordering::Relaxed);
        if state.failure.is_some() || value <= current {
            return;
        }
        self.settle_trace(None);
        self.shared.value.store(value, Ordering::Release);
        state.pending.prune(value);
        let woken = take_reached(&mut state.waiters, value);
        drop(state);
        woken.wake();
    }

    /// Fails the semaphore with `error`: every present and future waiter, query and signal gets
    /// it. The first failure wins; later calls are ignored.
    pub fn fail(&self, error: Error) {
        let mut state = lock(&self.shared.state);
        if state.failure.is_some() {
            return;
        }
        state.failure = Some(error.clone());
        state.failed_at = self.shared.value.load(Ordering::Relaxed);
        state.pending.clear();
        self.settle_trace(Some(&error));
        self.shared.value.store(FAILED, Ordering::Release);
        let woken = Woken::All(std::mem::take(&mut state.waiters));
        drop(state);
        if let Some(native) = &self.shared.native {
            native.fail(&error);
        }
        woken.wake();
    }

    /// Whether the payload had reached `value` before the semaphore failed: `true` once it has
    /// failed at a payload of `value` or more, `false` otherwise (not failed, or failed below it).
    ///
    /// Every wait on a failed semaphore gets its failure, whatever the value; this tells a
    /// [`crate::Submission`] that its own signal was reached, so the failure is a later one's.
    pub(crate) fn reached_before_failure(&self, value: u64) -> bool {
        self.is_failed() && self.failure_before(value).is_none()
    }

    /// The failure, if the semaphore failed before its payload reached `value`: what work that
    /// waited for `value` on the device (and so may have run on a failed input) must fail with.
    /// `None` if it has not failed, or reached `value` first.
    pub(crate) fn failure_before(&self, value: u64) -> Option<Error> {
        if self.shared.value.load(Ordering::Acquire) != FAILED {
            return None;
        }
        let state = lock(&self.shared.state);
        if state.failed_at >= value {
            return None;
        }
        state.failure.clone()
    }

    /// Records that submitted work will signal (or fail) `value`: until the payload reaches it
    /// (or the semaphore fails), a failure of a later value passed to
    /// [`fail_in_order`](crate::backend::fail_in_order) waits for it, so it never overtakes that
    /// work. Ignored for a value already reached or a failed semaphore.
    ///
    /// Every [`crate::Queue`] submission does this for its signal fence before handing the work
    /// to the backend; code that drives an [`ActionQueue`](crate::backend::ActionQueue) itself
    /// calls it the same way, before the work can complete. A value registered here must be
    /// signalled or failed eventually (as submitted work always is), or a later failure on the
    /// semaphore is held back for good.
    pub fn expect_signal(&self, value: u64) {
        if self.shared.value.load(Ordering::Acquire) >= value {
            return; // reached, or failed (FAILED is above every value)
        }
        let mut state = lock(&self.shared.state);
        if state.failure.is_none() && value > self.shared.value.load(Ordering::Relaxed) {
            state.pending.insert(value);
        }
    }

    /// The highest value below `value` that submitted work will still signal (registered with
    /// [`Semaphore::expect_signal`] and not yet reached): what a failure of `value` must wait
    /// for, so that it never overtakes the earlier work on this timeline.
    pub(crate) fn pending_below(&self, value: u64) -> Option<u64> {
        let state = lock(&self.shared.state);
        let payload = self.shared.value.load(Ordering::Relaxed);
        state
            .pending
            .below(value)
            // A failed semaphore reads FAILED, above every value: nothing is pending then.
            .filter(|v| *v > payload)
    }

    /// Whether the semaphore has failed.
    pub fn is_failed(&self) -> bool {
        self.shared.value.load(Ordering::Acquire) == FAILED
    }

    /// A future that completes with `Ok(())` once the payload reaches `value`, or with the
    /// failure if the semaphore fails first.
    ///
    /// The future is `Send`, ready at once if `value` was already reached, woken only by a signal
    /// that reaches `value`, and cancel-safe: dropping it removes its waiter.
    pub fn wait(&self, value: u64) -> Wait {
        Wait {
            semaphore: Semaphore {
                shared: self.shared.clone(),
                counted: false,
            },
            value,
            registered: None,
        }
    }

    /// Blocks the calling thread until the payload reaches `value`, the semaphore fails, or
    /// `timeout` passes ([`StatusCode::DeadlineExceeded`]). For code outside async; inside async,
    /// await [`Semaphore::wait`] instead.
    pub fn wait_blocking(&self, value: u64, timeout: Option<Duration>) -> Result<()> {
        crate::block::block_on_timeout(self.wait(value), timeout).unwrap_or_else(|| {
            let now = match self.query() {
                Ok(current) => format!("it is at {current}"),
                Err(error) => format!("it failed: {error}"),
            };
            Err(Error::new(
                StatusCode::DeadlineExceeded,
                format!(
                    "semaphore did not reach {value} within {:?} ({now})",
                    timeout.unwrap_or_default()
                ),
            ))
        })
    }

    /// Whether two handles refer to the same timeline.
    pub fn ptr_eq(&self, other: &Semaphore) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// How many waiters are registered now (woken or completed waiters are not counted).
    /// Diagnostics: lets tests and tools check that cancelled waits leave nothing behind.
    pub fn waiter_count(&self) -> usize {
        lock(&self.shared.state).waiters.len()
    }

    /// The smallest value any registered waiter awaits, if one does: what a backend's reactor
    /// should watch on the native object.
    pub(crate) fn min_awaited(&self) -> Option<u64> {
        lock(&self.shared.state)
            .waiters
            .first_key_value()
            .map(|(key, _)| key.value)
    }

    pub(crate) fn native(&self) -> Option<&dyn NativeSemaphore> {
        self.shared.native.as_deref()
    }

    /// Whether some handle that could signal the semaphore is alive (a [`Wait`]'s does not
    /// count).
    fn signallable(&self) -> bool {
        self.shared.handles.load(Ordering::Acquire) > 0
    }

    /// The last counted handle went: fails the semaphore if a waiter waits for a value it has
    /// not reached (a wait polled later fails it then, see [`Wait::poll`]).
    fn abandoned(&self) {
        let waiting = lock(&self.shared.state)
            .waiters
            .keys()
            .next_back()
            .map(|k| k.value);
        if let Some(value) = waiting {
            self.fail_abandoned(value);
        }
    }

    /// Fails the semaphore as abandoned if `value` is still unreached. With no handle left
    /// that could signal, the payload can no longer rise, so a value reached before the last
    /// handle went (a signal racing the waiter's registration) is never reported abandoned.
    fn fail_abandoned(&self, value: u64) {
        let current = self.shared.value.load(Ordering::Acquire);
        if current == FAILED || current >= value {
            return;
        }
        self.fail(Error::new(
            StatusCode::Aborted,
            format!(
                "semaphore{} abandoned at {current}: every handle that could signal it was \
                 dropped while a wait for {value} was pending, so nothing can reach it any more",
                crate::label::suffix(self.label())
            ),
        ));
    }
}

/// `semaphore 4`, or `semaphore 4 'frame'` once labelled ([`Semaphore::set_label`]); the
/// number is [`Semaphore::id`].
impl fmt::Display for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::label::write(f, "semaphore", self.id(), &self.shared.label)
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Semaphore");
        match self.query_core() {
            Ok(value) => d.field("value", &value),
            Err(error) => d.field("failure", &error),
        };
        d.field("native", &self.shared.native.is_some())
            .field("label", &self.shared.label)
            .finish()
    }
}

/// The values submitted work will still signal on one semaphore ([`Semaphore::expect_signal`]),
/// ascending and without repeats. Work is almost always submitted in timeline order, so a new
/// value is usually the largest, appended in O(1), and the payload passes them from the front,
/// removed in O(1) each; an out-of-order value is inserted where it belongs. (A `BTreeSet`
/// did the same with a tree walk per insert and per removal: measured, it cost a gated chain
/// of 10 000 submissions about 6% of its time.)
#[derive(Default)]
struct PendingSignals(VecDeque<u64>);

impl PendingSignals {
    fn insert(&mut self, value: u64) {
        match self.0.back() {
            Some(&last) if last >= value => {
                if let Err(at) = self.0.binary_search(&value) {
                    self.0.insert(at, value);
                }
            }
            _ => self.0.push_back(value),
        }
    }

    /// Forgets the values at or below `payload`; a large buffer left empty (after a burst of
    /// submissions) is given back.
    fn prune(&mut self, payload: u64) {
        while self.0.front().is_some_and(|v| *v <= payload) {
            self.0.pop_front();
        }
        if self.0.is_empty() && self.0.capacity() > 1024 {
            self.0 = VecDeque::new();
        }
    }

    /// The largest value below `value`.
    fn below(&self, value: u64) -> Option<u64> {
        let at = self.0.partition_point(|v| *v < value);
        at.checked_sub(1).map(|i| self.0[i])
    }

    fn clear(&mut self) {
        self.0 = VecDeque::new();
    }
}

/// Wakers taken out of the waiter map, woken once the lock is released.
enum Woken {
    None,
    /// Exactly one waiter reached: the common case, kept free of allocation.
    One(Waker),
    /// Woken by a signal: `(registration id, waker)`, in registration order.
    Reached(Vec<(u64, Waker)>),
    /// Woken by a failure: everything.
    All(BTreeMap<WaitKey, Waker>),
}

impl Woken {
    fn wake(self) {
        match self {
            Woken::None => {}
            Woken::One(waker) => waker.wake(),
            Woken::Reached(reached) => reached.into_iter().for_each(|(_, w)| w.wake()),
            Woken::All(all) => all.into_values().for_each(Waker::wake),
        }
    }
}

/// Removes every waiter whose value is at or below `value`, in registration order.
///
/// Registration order matters to the pending-action executor: actions of a queue register in
/// submission order, so waking in registration order lets the reactor see (and issue) the actions
/// one signal releases in submission order, even when they waited for different values.
///
/// Pops the first few one at a time (no allocation beyond the result for the usual one or two);
/// if more remain, splits the map at `value + 1` (`O(log N)` plus the smaller side). Waiters that
/// all awaited one value come out already in registration order; otherwise they are sorted, so
/// waking `k` of `N` costs `O(k + log N)`, or `O(k log k + log N)` when they span several values.
fn take_reached(waiters: &mut BTreeMap<WaitKey, Waker>, value: u64) -> Woken {
    let reached = |w: &BTreeMap<WaitKey, Waker>| matches!(w.first_key_value(), Some((k, _)) if k.value <= value);
    if !reached(waiters) {
        return Woken::None;
    }
    let Some((key, waker)) = waiters.pop_first() else {
        return Woken::None;
    };
    if !reached(waiters) {
        // Exactly one waiter reached, the common case: no allocation.
        return Woken::One(waker);
    }
    let mut woken = Vec::with_capacity(POP_BEFORE_SPLIT);
    woken.push((key.id, waker));
    let mut first_value = Some(key.value);
    let mut one_value = true;
    while woken.len() < POP_BEFORE_SPLIT && reached(waiters) {
        if let Some((key, waker)) = waiters.pop_first() {
            one_value &= *first_value.get_or_insert(key.value) == key.value;
            woken.push((key.id, waker));
        }
    }
    if reached(waiters) {
        let above = waiters.split_off(&WaitKey {
            value: value + 1, // value <= MAX_VALUE, so no overflow
            id: 0,
        });
        let rest = std::mem::replace(waiters, above);
        one_value &= rest.keys().next_back().map(|k| k.value) == first_value;
        woken.extend(rest.into_iter().map(|(key, waker)| (key.id, waker)));
    }
    if !one_value {
        woken.sort_unstable_by_key(|(id, _)| *id);
    }
    Woken::Reached(woken)
}

/// The future returned by [`Semaphore::wait`].
///
/// Completes with `Ok(())` once the semaphore reaches the value, or with its failure.
/// Dropping it before completion removes its waiter.
#[must_use = "futures do nothing unless awaited"]
pub struct Wait {
    semaphore: Semaphore,
    value: u64,
    /// Our waiter's id and the waker stored with it, once registered.
    registered: Option<(u64, Waker)>,
}

impl Wait {
    /// The semaphore this waits on.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// The value this waits for.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// Whether the semaphore has reached the value or failed: one load, for watching it in a
    /// loop ([`crate::spin::spin_until`]).
    pub(crate) fn is_settled(&self) -> bool {
        self.resolved(self.semaphore.shared.value.load(Ordering::Acquire))
    }

    /// Whether the waiter is certainly gone from the map: the value was reached or the
    /// semaphore failed, and whoever did that removed every such waiter under the lock (the
    /// payload store and the removal happen in one critical section, so seeing the payload means
    /// the removal is done or about to be done by that thread).
    fn resolved(&self, payload: u64) -> bool {
        payload == FAILED || payload >= self.value
    }
}

impl Future for Wait {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        let shared = &this.semaphore.shared;
        let payload = shared.value.load(Ordering::Acquire);
        if this.resolved(payload) {
            this.registered = None; // removed by the signaler/failer
            return Poll::Ready(if payload == FAILED {
                Err(this.semaphore.failure())
            } else {
                Ok(())
            });
        }
        if let Some((_, waker)) = &this.registered {
            if waker.will_wake(cx.waker()) {
                // The stored waker is still ours; a signal that reaches us after the load above
                // wakes it.
                return Poll::Pending;
            }
        }
        let mut state = lock(&shared.state);
        let payload = shared.value.load(Ordering::Relaxed);
        if this.resolved(payload) {
            this.registered = None;
            return Poll::Ready(match &state.failure {
                Some(error) if payload == FAILED => Err(error.clone()),
                _ => Ok(()),
            });
        }
        let first_registration = this.registered.is_none();
        let id = match &this.registered {
            Some((id, _)) => *id,
            None => {
                let id = state.next_waiter;
                state.next_waiter += 1;
                id
            }
        };
        state.waiters.insert(
            WaitKey {
                value: this.value,
                id,
            },
            cx.waker().clone(),
        );
        drop(state);
        this.registered = Some((id, cx.waker().clone()));
        // Registered before this check: a last handle dropped after it sees the waiter and
        // fails the semaphore, one dropped before it is seen here.
        if !this.semaphore.signallable() {
            // Nothing can signal any more: the payload is final. Either it reached this wait's
            // value (the signal removed the waiter) or the semaphore fails as abandoned (which
            // removes every waiter).
            this.semaphore.fail_abandoned(this.value);
            this.registered = None;
            let payload = shared.value.load(Ordering::Acquire);
            return Poll::Ready(if payload == FAILED {
                Err(this.semaphore.failure())
            } else {
                Ok(())
            });
        }
        if first_registration {
            if let Some(native) = &shared.native {
                native.watch(this.value);
            }
        }
        Poll::Pending
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        let Some((id, _)) = self.registered.take() else {
            return;
        };
        let shared = &self.semaphore.shared;
        if self.resolved(shared.value.load(Ordering::Acquire)) {
            return;
        }
        lock(&shared.state).waiters.remove(&WaitKey {
            value: self.value,
            id,
        });
    }
}

impl fmt::Debug for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wait")
            .field("value", &self.value)
            .field("registered", &self.registered.is_some())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct CountWaker(AtomicUsize);
    impl Wake for CountWaker {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once(wait: &mut Wait, waker: &Waker) -> Poll<Result<()>> {
        Pin::new(wait).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn pending_signals_stay_sorted_and_unique_in_any_order() {
        let mut pending = PendingSignals::default();
        for value in [5, 9, 7, 9, 2, 12, 7] {
            pending.insert(value);
        }
        assert_eq!(pending.0, [2, 5, 7, 9, 12]);
        assert_eq!(pending.below(9), Some(7));
        assert_eq!(pending.below(10), Some(9));
        assert_eq!(pending.below(2), None);
        pending.prune(7);
        assert_eq!(pending.0, [9, 12]);
        assert_eq!(pending.below(100), Some(12));
        pending.prune(100);
        assert_eq!(pending.below(100), None);
        for value in 0..5000 {
            pending.insert(value);
        }
        pending.prune(u64::MAX);
        assert_eq!(
            pending.0.capacity(),
            0,
            "a large empty buffer is given back"
        );
    }

    #[test]
    fn signal_wakes_only_reached_waiters() {
        let sem = Semaphore::new(0);
        let counters: Vec<_> = (0..20)
            .map(|_| std::sync::Arc::new(CountWaker(AtomicUsize::new(0))))
            .collect();
        let wakers: Vec<Waker> = counters.iter().map(|c| Waker::from(c.clone())).collect();
        let mut waits: Vec<Wait> = (0..20).map(|i| sem.wait(i as u64 + 1)).collect();
        for (wait, waker) in waits.iter_mut().zip(&wakers) {
            assert!(poll_once(wait, waker).is_pending());
        }
        assert_eq!(sem.waiter_count(), 20);
        sem.signal(15).unwrap();
        for (i, c) in counters.iter().enumerate() {
            assert_eq!(
                c.0.load(Ordering::SeqCst),
                usize::from(i < 15),
                "waiter {i}"
            );
        }
        assert_eq!(sem.waiter_count(), 5);
        assert_eq!(sem.min_awaited(), Some(16));
        drop(waits.drain(15..));
        assert_eq!(sem.waiter_count(), 0);
    }

    #[test]
    fn rejects_non_increasing_signal() {
        let sem = Semaphore::new(5);
        let err = sem.signal(5).unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument);
        assert!(err.message().contains('5'));
        let err = sem.signal(3).unwrap_err();
        assert!(err.message().contains("3") && err.message().contains("5"));
        assert_eq!(sem.query().unwrap(), 5);
        let err = sem.signal(u64::MAX).unwrap_err();
        assert_eq!(err.code(), StatusCode::InvalidArgument);
    }

    #[test]
    fn failure_is_sticky_and_first_wins() {
        let sem = Semaphore::new(0);
        let first = Error::new(StatusCode::Aborted, "first");
        sem.fail(first.clone());
        sem.fail(Error::new(StatusCode::Internal, "second"));
        assert!(sem.query().unwrap_err().same_as(&first));
        assert!(sem.signal(1).unwrap_err().same_as(&first));
        let waker = Waker::noop();
        let mut wait = sem.wait(1);
        match poll_once(&mut wait, waker) {
            Poll::Ready(Err(e)) => assert!(e.same_as(&first)),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn wait_blocking_times_out() {
        let sem = Semaphore::new(1);
        let err = sem
            .wait_blocking(2, Some(Duration::from_millis(10)))
            .unwrap_err();
        assert_eq!(err.code(), StatusCode::DeadlineExceeded);
        assert!(err.to_string().contains("at 1"), "{err}");
        assert_eq!(sem.waiter_count(), 0);
        sem.wait_blocking(1, None).unwrap();
    }
}
