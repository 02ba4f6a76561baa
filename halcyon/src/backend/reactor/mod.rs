//! The completion reactor: one thread per device that turns completions into wakes.
//!
//! Completions arrive from wherever the device reports progress: a host callback on a GPU
//! stream (which must not call the vendor API), a thread blocked on native semaphores, a CPU
//! worker. Each is [posted](ReactorHandle::post) through a lock-free inbox; posting never blocks
//! and unparks the reactor only if it sleeps. The reactor thread then
//!
//! 1. applies completions: advances or fails semaphores (waking their waiters), drops resources
//!    retained by finished work, runs backend callbacks that may call the vendor API;
//! 2. polls the **pending-action executor**: futures [spawned](ReactorHandle::spawn) onto it (queue
//!    actions waiting for their wait fences, see [`crate::queue`]) that were woken, in spawn
//!    order, so actions released together issue in submission order;
//! 3. parks until the next post. It never spins, and a post never waits for the reactor to
//!    acknowledge it.
//!
//! A backend whose completions come from a native wait (Vulkan's `vkWaitSemaphores`) replaces
//! the plain thread park with its own [`Parker`]: the reactor then blocks in the native wait and a
//! post interrupts it through the parker's [`Unpark`].
//!
//! **Shutdown.** Dropping the [`Reactor`] (with its device) stops the thread and joins it:
//! completions already posted are applied, woken actions get a last poll, and every action still
//! pending is dropped, which fails its signal fence ([`crate::StatusCode::Aborted`]), so no
//! waiter hangs. Posts after shutdown are handled on the posting thread (semaphore completions
//! are applied, releases dropped); [`Completion::Call`]s and spawns are refused with
//! [`crate::StatusCode::Unavailable`].

mod inbox;

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::AtomicU64 as StatCounter;
use std::task::{Context, Poll, Wake, Waker};

use crate::error::{Error, Result, StatusCode};
use crate::semaphore::Semaphore;
use crate::sync::{mpsc, thread, Arc, AtomicBool, Ordering};
use inbox::{Inbox, Pushed};

/// A unit of device progress, posted to the reactor from any thread.
pub enum Completion {
    /// The device reached `value` on this semaphore: advance it (never an error; a value not
    /// above the current payload is ignored) and wake the waiters it reaches.
    Signal(Semaphore, u64),
    /// Device work failed: fail this semaphore (first failure wins).
    Fail(Semaphore, Error),
    /// Work that retained resources (buffers, command buffers, executables) finished: drop them
    /// on the reactor thread, off the poster's (possibly callback) thread.
    Release(Box<dyn Any + Send>),
    /// Run a closure on the reactor thread; the only kind of completion that may call the
    /// vendor API. Refused after shutdown.
    Call(Box<dyn FnOnce() + Send>),
}

impl fmt::Debug for Completion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Completion::Signal(s, v) => f.debug_tuple("Signal").field(s).field(v).finish(),
            Completion::Fail(s, e) => f.debug_tuple("Fail").field(s).field(e).finish(),
            Completion::Release(_) => f.write_str("Release(..)"),
            Completion::Call(_) => f.write_str("Call(..)"),
        }
    }
}

impl Completion {
    /// Applies a completion that does not need the reactor thread; hands back a `Call`.
    fn apply_inline(self) -> Option<Box<dyn FnOnce() + Send>> {
        match self {
            Completion::Signal(semaphore, value) => semaphore.advance_to(value),
            Completion::Fail(semaphore, error) => semaphore.fail(error),
            Completion::Release(resources) => drop(resources),
            Completion::Call(call) => return Some(call),
        }
        None
    }
}

/// How a backend's reactor sleeps, when the plain thread park is not enough.
///
/// The reactor calls [`Parker::park`] when it has nothing to do. A backend that learns of
/// completions by blocking in a native wait (for example `vkWaitSemaphores` over the values being
/// awaited plus a control semaphore) does that wait here and applies what it observed (with
/// [`crate::backend::SemaphoreExt::advance`]) before returning.
pub trait Parker: Send + 'static {
    /// Blocks until the [`Unpark`] handle is used or native progress happened. May return
    /// spuriously. Runs on the reactor thread.
    fn park(&mut self);

    /// The handle posters use to end a park. Called once, when the reactor starts.
    fn unparker(&self) -> Box<dyn Unpark>;

    /// Called once on the reactor thread when it starts, before it runs anything: a backend
    /// may prepare the thread (bind its device to it, say). Default: nothing.
    fn started(&mut self) {}

    /// Called on the reactor thread after the last action was dropped at shutdown: fail or
    /// release whatever the backend still watches.
    fn shutdown(&mut self) {}
}

/// Ends a [`Parker::park`] from any thread.
///
/// Must be sticky: an `unpark` that happens before `park` makes that `park` return at once.
pub trait Unpark: Send + Sync + 'static {
    /// Wakes the parked reactor.
    fn unpark(&self);
}

enum Message {
    Completion(Completion),
    Spawn(Task),
    Wake(u64),
    Shutdown,
}

enum Unparker {
    Thread(thread::Thread),
    Custom(Box<dyn Unpark>),
}

struct Shared {
    name: String,
    inbox: Inbox<Message>,
    unparker: Unparker,
    /// Spawn order; also the task id.
    next_task: crate::sync::AtomicU64,
    thread_id: thread::ThreadId,
    stats: Stats,
}

#[derive(Default)]
struct Stats {
    wakeups: StatCounter,
    completions: StatCounter,
    polls: StatCounter,
}

impl Shared {
    fn push(&self, message: Message) -> std::result::Result<(), Message> {
        match self.inbox.push(message) {
            Pushed::Queued => Ok(()),
            Pushed::QueuedWasParked => {
                match &self.unparker {
                    Unparker::Thread(thread) => thread.unpark(),
                    Unparker::Custom(unpark) => unpark.unpark(),
                }
                Ok(())
            }
            Pushed::Closed(message) => Err(message),
        }
    }

    fn shut_down_error(&self, what: &str) -> Error {
        Error::new(
            StatusCode::Unavailable,
            format!(
                "reactor '{}' has shut down (its device was dropped); cannot {what}",
                self.name
            ),
        )
    }
}

/// Counters describing what a reactor has done, for diagnostics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReactorStats {
    /// Times the reactor thread woke from a park.
    pub wakeups: u64,
    /// Completions applied.
    pub completions: u64,
    /// Polls of pending actions.
    pub polls: u64,
}

/// Owns a reactor thread; dropping it shuts the reactor down and joins the thread.
///
/// Devices own one each and hand out [`ReactorHandle`]s.
///
/// ```
/// use halcyon::backend::reactor::{Completion, Reactor};
/// use halcyon::Semaphore;
///
/// let reactor = Reactor::new("example")?;
/// let sem = Semaphore::new(0);
/// // A "device" thread reports that it reached 1; the reactor applies it.
/// let handle = reactor.handle();
/// let device_sem = sem.clone();
/// std::thread::spawn(move || handle.post(Completion::Signal(device_sem, 1))).join().unwrap()?;
/// sem.wait_blocking(1, None)?;
/// # Ok::<(), halcyon::Error>(())
/// ```
pub struct Reactor {
    handle: ReactorHandle,
    thread: Option<thread::JoinHandle<()>>,
}

/// A cheap, cloneable handle for posting completions and spawning pending actions.
#[derive(Clone)]
pub struct ReactorHandle {
    shared: Arc<Shared>,
}

impl Reactor {
    /// Starts a reactor thread named `halcyon-reactor-{name}` that parks with the plain thread
    /// park. Fails with [`StatusCode::ResourceExhausted`] if the thread cannot be spawned.
    pub fn new(name: impl Into<String>) -> Result<Reactor> {
        Self::start(name.into(), None)
    }

    /// Starts a reactor that sleeps in `parker` (a backend's native wait).
    pub fn with_parker(name: impl Into<String>, parker: Box<dyn Parker>) -> Result<Reactor> {
        Self::start(name.into(), Some(parker))
    }

    fn start(name: String, parker: Option<Box<dyn Parker>>) -> Result<Reactor> {
        let custom_unparker = parker.as_ref().map(|p| p.unparker());
        let (sender, receiver) = mpsc::channel::<Arc<Shared>>();
        let thread = thread::Builder::new()
            .name(format!("halcyon-reactor-{name}"))
            .spawn(move || {
                if let Ok(shared) = receiver.recv() {
                    run(&shared, parker);
                }
            })
            .map_err(|e| {
                Error::with_source(
                    StatusCode::ResourceExhausted,
                    format!("cannot spawn the reactor thread for '{name}'"),
                    e,
                )
            })?;
        let unparker = match custom_unparker {
            Some(custom) => Unparker::Custom(custom),
            None => Unparker::Thread(thread.thread().clone()),
        };
        let shared = Arc::new(Shared {
            thread_id: thread.thread().id(),
            name,
            inbox: Inbox::new(),
            unparker,
            next_task: crate::sync::AtomicU64::new(0),
            stats: Stats::default(),
        });
        // The thread only ends after receiving; a send can only fail if it panicked already.
        let _ = sender.send(shared.clone());
        Ok(Reactor {
            handle: ReactorHandle { shared },
            thread: Some(thread),
        })
    }

    /// A handle to post to and spawn on this reactor.
    pub fn handle(&self) -> ReactorHandle {
        self.handle.clone()
    }

    /// Shuts the reactor down and joins its thread (what dropping it does).
    pub fn shutdown(self) {}
}

impl Drop for Reactor {
    fn drop(&mut self) {
        // Unparks the reactor if it sleeps; it then drains, fails what is pending, and exits.
        // Pushing fails only if a previous drop already closed the inbox.
        let _ = self.handle.shared.push(Message::Shutdown);
        if let Some(thread) = self.thread.take() {
            if self.handle.on_reactor_thread() {
                // Dropped from a task on the reactor itself: it exits after this task returns;
                // joining here would wait for ourselves.
                return;
            }
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for Reactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.handle.fmt(f)
    }
}

impl ReactorHandle {
    /// Posts a completion. Lock-free and never blocks: safe from a GPU host callback or a signal
    /// of any thread. The reactor applies it on its thread, in posting order per poster.
    ///
    /// After shutdown, `Signal`, `Fail` and `Release` are applied on the calling thread (they
    /// need no device), and a `Call` is dropped unrun with [`StatusCode::Unavailable`].
    pub fn post(&self, completion: Completion) -> Result<()> {
        match self.shared.push(Message::Completion(completion)) {
            Ok(()) => Ok(()),
            Err(Message::Completion(completion)) => match completion.apply_inline() {
                None => Ok(()),
                Some(_unrun) => Err(self.shared.shut_down_error("run a posted call")),
            },
            Err(_) => unreachable!("the inbox hands back the message it was given"),
        }
    }

    /// Spawns `future` onto the pending-action executor. The reactor polls it when woken, in
    /// spawn order among the futures woken together, until it completes. If the reactor shuts
    /// down first the future is dropped on the reactor thread (so its `Drop` must release
    /// whatever waits on it).
    ///
    /// Fails with [`StatusCode::Unavailable`] after shutdown; the future is then dropped here.
    pub fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let id = self.shared.next_task.fetch_add(1, Ordering::Relaxed);
        let task = Task {
            waker: std::sync::Arc::new(TaskWaker {
                id,
                queued: AtomicBool::new(true), // the Spawn message is its queue entry
                reactor: self.shared.clone(),
            }),
            future: Box::pin(future),
        };
        self.shared
            .push(Message::Spawn(task))
            .map_err(|_| self.shared.shut_down_error("spawn a pending action"))
    }

    /// Whether the calling thread is this reactor's thread.
    pub fn on_reactor_thread(&self) -> bool {
        thread::current().id() == self.shared.thread_id
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// What the reactor has done so far.
    pub fn stats(&self) -> ReactorStats {
        let s = &self.shared.stats;
        ReactorStats {
            wakeups: s.wakeups.load(std::sync::atomic::Ordering::Relaxed),
            completions: s.completions.load(std::sync::atomic::Ordering::Relaxed),
            polls: s.polls.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for ReactorHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reactor")
            .field("name", &self.shared.name)
            .field("stats", &self.stats())
            .finish()
    }
}

struct Task {
    waker: std::sync::Arc<TaskWaker>,
    future: Pin<Box<dyn Future<Output = ()> + Send>>,
}

struct TaskWaker {
    id: u64,
    /// Whether a wake is already queued (or the task is about to be polled anyway).
    queued: AtomicBool,
    reactor: Arc<Shared>,
}

impl Wake for TaskWaker {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            // Refused only after shutdown, when the task is gone anyway.
            let _ = self.reactor.push(Message::Wake(self.id));
        }
    }
}

/// The reactor's own state, touched only by its thread.
struct Executor {
    tasks: HashMap<u64, (Task, Waker)>,
    /// Woken tasks, in spawn order.
    ready: BTreeSet<u64>,
}

impl Executor {
    fn handle(&mut self, shared: &Shared, message: Message) -> bool {
        match message {
            Message::Completion(completion) => {
                shared
                    .stats
                    .completions
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if let Some(call) = completion.apply_inline() {
                    // A panicking backend callback must not take the reactor (and every waiter
                    // on the device) down with it.
                    let _ = catch_unwind(AssertUnwindSafe(call));
                }
            }
            Message::Spawn(task) => {
                let waker = Waker::from(task.waker.clone());
                self.ready.insert(task.waker.id);
                self.tasks.insert(task.waker.id, (task, waker));
            }
            Message::Wake(id) => {
                if self.tasks.contains_key(&id) {
                    self.ready.insert(id);
                }
            }
            Message::Shutdown => return true,
        }
        false
    }

    fn poll_ready(&mut self, shared: &Shared) {
        while let Some(id) = self.ready.pop_first() {
            let Some((task, waker)) = self.tasks.get_mut(&id) else {
                continue;
            };
            // A read-modify-write, not a store: a wake racing with this poll either swaps
            // `queued` before it (and this swap reads its value, so the poll sees what the waker
            // published before waking) or after it (and queues the task again). With a plain
            // store both could miss each other (store buffering): the waker reading a stale
            // `true` and pushing nothing, the poll reading the state from before the wake.
            task.waker.queued.swap(false, Ordering::AcqRel);
            shared
                .stats
                .polls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut cx = Context::from_waker(waker);
            let done = match catch_unwind(AssertUnwindSafe(|| task.future.as_mut().poll(&mut cx))) {
                Ok(Poll::Ready(())) | Err(_) => true,
                Ok(Poll::Pending) => false,
            };
            if done {
                self.tasks.remove(&id);
            }
        }
    }
}

/// The reactor thread.
fn run(shared: &Shared, mut parker: Option<Box<dyn Parker>>) {
    if let Some(parker) = parker.as_mut() {
        parker.started();
    }
    let mut executor = Executor {
        tasks: HashMap::new(),
        ready: BTreeSet::new(),
    };
    loop {
        let messages = shared.inbox.take();
        let mut shutdown = false;
        {
            let _turn = crate::log::trace_span!("halcyon::reactor", "reactor turn");
            for message in messages {
                shutdown |= executor.handle(shared, message);
            }
            executor.poll_ready(shared);
        }
        if shutdown {
            break;
        }
        if shared.inbox.try_park() {
            match &mut parker {
                Some(parker) => parker.park(),
                None => thread::park(),
            }
            shared
                .stats
                .wakeups
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    // Shutdown: nothing new gets in; finish what did, then drop what cannot finish.
    for message in shared.inbox.close() {
        executor.handle(shared, message);
    }
    executor.poll_ready(shared);
    // Dropping a pending action fails its signal fence; that may wake other tasks, whose wakes
    // are now refused: they are dropped here too.
    drop(executor);
    if let Some(parker) = &mut parker {
        parker.shutdown();
    }
}
