//! The event pool: vendor events recycled instead of created per submission, handed out as
//! reference-counted [`Event`]s that go back to the pool when their last reference drops.
//!
//! One event is recorded at the end of every submission. Several parties hold it at once: the
//! submission's in-flight record (until the reactor settled its signal fence), the timeline of
//! every semaphore the submission signals (until that value is reached), and, briefly, each
//! later submission that makes its stream wait on it. The event may be re-recorded only when all
//! of them are done, since re-recording changes what a query or a later wait refers to. An
//! [`Event`] is therefore an `Arc` around the handle: cloning it is the reference count, and
//! dropping the last clone returns the handle to the pool.
//!
//! **Closing.** When the pool is dropped (its device went away), the handles it holds are
//! destroyed, and so is every handle returned afterwards: the check and the push happen under the
//! same lock, so a handle returned while the pool closes is never stranded in the free list.
//! Every created event is destroyed exactly once (the loom models check it).

use std::fmt;
use std::sync::atomic::{AtomicU64 as StatCounter, Ordering as StatOrdering};

use crate::api::EventHandle;
use crate::sync::{lock, Arc, Mutex};
use halcyon::Result;

/// Creates and destroys the pool's events: a [`crate::StreamApi`] with fixed
/// [`crate::EventFlags`], or a test double.
pub trait EventFactory: Send + Sync + 'static {
    /// Creates a new event.
    fn create(&self) -> Result<EventHandle>;
    /// Destroys an event nobody uses any more. Errors cannot be reported (it runs on drop).
    fn destroy(&self, event: EventHandle);
}

struct Free {
    events: Vec<EventHandle>,
    closed: bool,
}

struct Shared {
    free: Mutex<Free>,
    factory: Box<dyn EventFactory>,
    created: StatCounter,
    acquired: StatCounter,
}

impl Shared {
    /// Takes back `event` from its last holder: pooled, or destroyed if the pool is closed.
    fn give_back(&self, event: EventHandle) {
        let mut free = lock(&self.free);
        if free.closed {
            drop(free);
            self.factory.destroy(event);
        } else {
            free.events.push(event);
        }
    }
}

/// A pool of recycled events. Dropping it destroys the pooled events; events still held are
/// destroyed when their last reference drops.
pub struct EventPool {
    shared: Arc<Shared>,
}

/// What an [`EventPool`] has done.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventPoolStats {
    /// Events created through the factory.
    pub created: u64,
    /// Events handed out (created or reused).
    pub acquired: u64,
    /// Events in the pool now, ready for reuse.
    pub free: u64,
}

impl EventPool {
    /// An empty pool creating its events with `factory`.
    pub fn new(factory: Box<dyn EventFactory>) -> Self {
        EventPool {
            shared: Arc::new(Shared {
                free: Mutex::new(Free {
                    events: Vec::new(),
                    closed: false,
                }),
                factory,
                created: StatCounter::new(0),
                acquired: StatCounter::new(0),
            }),
        }
    }

    /// An event from the pool, or a new one if the pool is empty. The event counts as complete
    /// until it is recorded.
    pub fn acquire(&self) -> Result<Event> {
        let pooled = lock(&self.shared.free).events.pop();
        let handle = match pooled {
            Some(handle) => handle,
            None => {
                let handle = self.shared.factory.create()?;
                self.shared.created.fetch_add(1, StatOrdering::Relaxed);
                handle
            }
        };
        self.shared.acquired.fetch_add(1, StatOrdering::Relaxed);
        Ok(Event {
            slot: Arc::new(Slot {
                handle,
                pool: self.shared.clone(),
            }),
        })
    }

    /// Counters, and how many events wait in the pool now.
    pub fn stats(&self) -> EventPoolStats {
        EventPoolStats {
            created: self.shared.created.load(StatOrdering::Relaxed),
            acquired: self.shared.acquired.load(StatOrdering::Relaxed),
            free: lock(&self.shared.free).events.len() as u64,
        }
    }

    /// Whether `event` is in the pool now (diagnostics: a held event never is).
    pub fn is_pooled(&self, event: EventHandle) -> bool {
        lock(&self.shared.free).events.contains(&event)
    }
}

impl Drop for EventPool {
    fn drop(&mut self) {
        let pooled = {
            let mut free = lock(&self.shared.free);
            free.closed = true;
            std::mem::take(&mut free.events)
        };
        for event in pooled {
            self.shared.factory.destroy(event);
        }
    }
}

impl fmt::Debug for EventPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventPool")
            .field("stats", &self.stats())
            .finish()
    }
}

struct Slot {
    handle: EventHandle,
    pool: Arc<Shared>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.give_back(self.handle);
    }
}

/// A pooled event. Clones share it; the handle returns to its pool when the last clone drops.
#[derive(Clone)]
pub struct Event {
    slot: Arc<Slot>,
}

impl Event {
    /// The vendor handle.
    pub fn handle(&self) -> EventHandle {
        self.slot.handle
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Event").field(&self.slot.handle).finish()
    }
}
