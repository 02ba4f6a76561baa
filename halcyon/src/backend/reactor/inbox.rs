//! The reactor's inbox: a lock-free multi-producer, single-consumer stack whose head also
//! records whether the consumer is parked or gone.
//!
//! The head is one atomic pointer that holds one of:
//! * null: empty, the reactor is running;
//! * [`PARKED`]: empty, the reactor parked (or is about to): the next producer must unpark it;
//! * [`CLOSED`]: the reactor shut down; pushes are refused;
//! * a pointer to the newest node of a singly linked list.
//!
//! Every transition is a read-modify-write of that one word, so "the producer pushed" and "the
//! consumer decided to sleep" are totally ordered without fences: either the consumer sees the
//! node, or the producer sees [`PARKED`] and unparks. No wake is lost and a running reactor is
//! never unparked needlessly.
//!
//! **ABA.** A producer may read head `A`, stall while the consumer takes and frees `A`, and then
//! succeed its compare-exchange because a new node was allocated at `A`'s address and pushed. The
//! list is still right (the address the producer links to is the live head), but the link was
//! read from the dead node. Links are therefore stored as exposed addresses
//! ([`expose_provenance`](pointer::expose_provenance)) and turned back into pointers with
//! [`ptr::with_exposed_provenance_mut`], which picks up the provenance of the live node at that
//! address (every node is exposed when published).

use std::ptr;

use crate::sync::{AtomicPtr, Ordering};

struct Node<T> {
    value: T,
    /// The next (older) node's exposed address, or 0 (see the module docs on ABA).
    next: usize,
}

/// Sentinels: addresses that no allocation has (the first two bytes of the address space).
fn parked<T>() -> *mut Node<T> {
    ptr::without_provenance_mut(1)
}
fn closed<T>() -> *mut Node<T> {
    ptr::without_provenance_mut(2)
}

fn is_list<T>(head: *mut Node<T>) -> bool {
    !head.is_null() && head != parked() && head != closed()
}

pub(crate) struct Inbox<T> {
    head: AtomicPtr<Node<T>>,
}

/// What a push found.
pub(crate) enum Pushed<T> {
    /// Queued; the reactor is running and will see it.
    Queued,
    /// Queued; the reactor was parked and must be unparked by the caller.
    QueuedWasParked,
    /// Refused: the reactor is gone. The value is handed back.
    Closed(T),
}

// SAFETY: nodes are handed between threads only through the atomic head; the values they carry
// are `Send`, and only the single consumer dereferences nodes it took out.
unsafe impl<T: Send> Send for Inbox<T> {}
// SAFETY: as above: `push` only touches a node before publishing it, `take`/`close` only after
// taking exclusive ownership of the list with a swap.
unsafe impl<T: Send> Sync for Inbox<T> {}

impl<T> Inbox<T> {
    pub(crate) fn new() -> Self {
        Inbox {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Pushes `value`; lock-free, callable from any thread (including a GPU host callback).
    pub(crate) fn push(&self, value: T) -> Pushed<T> {
        let node = Box::into_raw(Box::new(Node { value, next: 0 }));
        // Consumers reach this node through an exposed address (an older node's `next`).
        node.expose_provenance();
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            if head == closed() {
                // SAFETY: `node` came from `Box::into_raw` above and was never published.
                let node = unsafe { Box::from_raw(node) };
                return Pushed::Closed(node.value);
            }
            let next = if is_list(head) {
                head.expose_provenance()
            } else {
                0
            };
            // SAFETY: `node` is not yet published, so this thread has exclusive access to it.
            unsafe { (*node).next = next };
            match self
                .head
                .compare_exchange_weak(head, node, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(previous) if previous == parked() => return Pushed::QueuedWasParked,
                Ok(_) => return Pushed::Queued,
                Err(actual) => head = actual,
            }
        }
    }

    /// Consumer only: takes every queued value, oldest first.
    pub(crate) fn take(&self) -> Vec<T> {
        let head = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: the swap made this thread the only owner of the list at `head` (if any).
        unsafe { drain(head) }
    }

    /// Consumer only: marks the inbox parked if it is empty. `true` means the consumer may
    /// sleep: any later push reports [`Pushed::QueuedWasParked`] and its producer unparks.
    pub(crate) fn try_park(&self) -> bool {
        let head = self.head.load(Ordering::Relaxed);
        if head == parked() {
            return true;
        }
        self.head
            .compare_exchange(
                ptr::null_mut(),
                parked(),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Consumer only: refuses every later push and returns what was still queued, oldest first.
    pub(crate) fn close(&self) -> Vec<T> {
        let head = self.head.swap(closed(), Ordering::Acquire);
        // SAFETY: the swap made this thread the only owner of the list at `head` (if any).
        unsafe { drain(head) }
    }
}

/// Turns a list taken from the head into values, oldest first, freeing the nodes.
///
/// # Safety
/// `head` is a sentinel, null, or a list the caller exclusively owns.
unsafe fn drain<T>(mut head: *mut Node<T>) -> Vec<T> {
    let mut values = Vec::new();
    while is_list(head) {
        // SAFETY: per the contract, `head` is an exclusively owned node from `Box::into_raw`.
        let node = unsafe { Box::from_raw(head) };
        head = ptr::with_exposed_provenance_mut(node.next);
        values.push(node.value);
    }
    values.reverse();
    values
}

impl<T> Drop for Inbox<T> {
    fn drop(&mut self) {
        let head = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        // SAFETY: `&mut self`: no producer or consumer is left, so the list is ours.
        drop(unsafe { drain(head) });
    }
}
