//! Channels: collectives (all-reduce, all-gather, reduce-scatter, broadcast, send and
//! receive) across devices, processes and hosts, as queue operations.
//!
//! # Channels
//!
//! A [`Channel`] is one device's place in a communicator of some engine (MPI, NCCL, RCCL):
//! its rank, the number of ranks, the device whose buffers it reads and writes. A device makes
//! one through a [`ChannelProvider`], the rendezvous that tells each rank who it is and hands
//! rank 0's engine id to the others ([`crate::Device::channel`]). Making a channel blocks until
//! every rank has made its own. The providers: `halcyon_mpi::Mpi` across processes and
//! hosts (and MPI's engine for the CPU device), [`LocalGroup`] for several devices of one
//! process.
//!
//! # Collectives are queue operations
//!
//! [`crate::Queue::all_reduce`] and the others wait on a fence and signal a fence like any
//! queue operation, and return a [`crate::Submission`]. Each rank submits the same
//! collectives on a channel in the same order; the engines see them in that order whatever
//! order their waits are reached in (each waits for the one submitted before it on the channel
//! to reach its engine). A collective that cannot run on this rank (refused, or a semaphore it
//! waits on failed) fails, and so do this rank's later collectives on the channel, which could
//! no longer match the other ranks'.
//!
//! # Failure
//!
//! An engine's failure fails the collective's signal fence with the engine's error text. A
//! peer that is gone or stalled never hangs a waiter: after the channel's timeout
//! ([`ChannelParams::timeout`]) the engine gives up on the collective and fails it with
//! `DeadlineExceeded`. The engine may still write its buffers then, so they refuse any further
//! use (the memory is kept), and the channel refuses later collectives with `Unavailable`.

mod engine;
mod local;
mod op;
mod order;
mod provider;

use std::fmt;
use std::sync::Arc;

pub use crate::element::ElementType;
pub use engine::{ChannelBackend, CollectiveDone, HostEngine, HostJob};
pub use local::{LocalGroup, LocalRank};
pub use op::{Collective, CollectiveKind, ReduceOp};
pub(crate) use order::Turn;
pub use provider::{ChannelParams, ChannelProvider};

use crate::device::{Device, WeakDevice};

/// One device's place in a communicator (see the [module docs](self)). Cheap to clone.
///
/// ```no_run
/// use halcyon::{Channel, ElementType, ReduceOp, Timepoints};
///
/// /// Sums `grads` (f32) across every rank of `channel`, in place.
/// async fn sum(channel: &Channel, grads: &halcyon::Buffer) -> halcyon::Result<()> {
///     let queue = channel.device()?.queue(0)?;
///     let all = grads.whole();
///     queue.all_reduce(Timepoints::default(), channel, ReduceOp::Sum, ElementType::F32, &all, &all).await
/// }
/// ```
#[derive(Clone)]
pub struct Channel {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Box<dyn ChannelBackend>,
    /// Weak: a collective waiting in its device's action queue holds its channel, and must
    /// not keep the device alive (dropping a device aborts its pending work).
    device: WeakDevice,
    order: Arc<order::Order>,
}

impl Channel {
    /// Wraps an engine's channel for `device` (what [`crate::Device::channel`] does with its
    /// backend's).
    pub(crate) fn new(device: &Device, backend: Box<dyn ChannelBackend>) -> Channel {
        let name = format!(
            "channel {} rank {} of {} on {}",
            backend.engine(),
            backend.rank(),
            backend.count(),
            device.info().id
        );
        Channel {
            inner: Arc::new(Inner {
                backend,
                device: device.downgrade(),
                order: order::Order::new(name),
            }),
        }
    }

    /// This rank, in `0..count()`.
    pub fn rank(&self) -> u32 {
        self.inner.backend.rank()
    }

    /// How many ranks the channel spans.
    pub fn count(&self) -> u32 {
        self.inner.backend.count()
    }

    /// The engine running its collectives (`"mpi"`, `"nccl"`, `"rccl"`).
    pub fn engine(&self) -> &str {
        self.inner.backend.engine()
    }

    /// The device whose buffers its collectives read and write; `Aborted` if it was dropped.
    pub fn device(&self) -> crate::Result<Device> {
        self.inner.device.upgrade().ok_or_else(|| {
            crate::Error::new(
                crate::StatusCode::Aborted,
                format!("the device of {self} was dropped"),
            )
        })
    }

    /// The engine's side (for backends).
    pub fn backend(&self) -> &dyn ChannelBackend {
        &*self.inner.backend
    }

    pub(crate) fn is_on(&self, device: &Device) -> bool {
        self.inner
            .device
            .upgrade()
            .is_some_and(|d| d.ptr_eq(device))
    }

    pub(crate) fn order(&self) -> &Arc<order::Order> {
        &self.inner.order
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("engine", &self.engine())
            .field("rank", &self.rank())
            .field("count", &self.count())
            .finish()
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.inner.order.name())
    }
}
