//! What one collective does: its kind, its buffers, and its turn on the channel.

use std::fmt;

use crate::buffer::BufferRef;

use super::order::Turn;
use super::{Channel, ElementType};

/// How a reduction combines the ranks' elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The product.
    Prod,
    /// The minimum.
    Min,
    /// The maximum.
    Max,
}

impl ReduceOp {
    /// The operation's name (`"sum"`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }
}

/// One collective operation, as the engine runs it. Ranks and buffers are described on the
/// queue operations ([`crate::Queue::all_reduce`] and the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollectiveKind {
    /// Every rank's `recv` becomes the elementwise reduction of every rank's `send`.
    AllReduce {
        /// How elements combine.
        op: ReduceOp,
        /// What the bytes hold.
        element: ElementType,
    },
    /// Every rank's `recv` becomes every rank's `send`, concatenated in rank order.
    AllGather,
    /// Rank `r`'s `recv` becomes block `r` of the reduction of every rank's `send`.
    ReduceScatter {
        /// How elements combine.
        op: ReduceOp,
        /// What the bytes hold.
        element: ElementType,
    },
    /// Every rank's buffer becomes rank `root`'s (`send` and `recv` are that one range).
    Broadcast {
        /// The rank whose bytes every rank receives.
        root: u32,
    },
    /// `send` goes to rank `peer`, which receives it with a [`CollectiveKind::Recv`].
    Send {
        /// The receiving rank.
        peer: u32,
    },
    /// `recv` is filled with what rank `peer` sends.
    Recv {
        /// The sending rank.
        peer: u32,
    },
}

impl CollectiveKind {
    /// The operation's name (`"all_reduce"`).
    pub fn name(&self) -> &'static str {
        match self {
            CollectiveKind::AllReduce { .. } => "all_reduce",
            CollectiveKind::AllGather => "all_gather",
            CollectiveKind::ReduceScatter { .. } => "reduce_scatter",
            CollectiveKind::Broadcast { .. } => "broadcast",
            CollectiveKind::Send { .. } => "send",
            CollectiveKind::Recv { .. } => "recv",
        }
    }

    /// The reduction and element type, for the reducing kinds.
    pub fn reduction(&self) -> Option<(ReduceOp, ElementType)> {
        match *self {
            CollectiveKind::AllReduce { op, element }
            | CollectiveKind::ReduceScatter { op, element } => Some((op, element)),
            _ => None,
        }
    }
}

impl fmt::Display for CollectiveKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reduction() {
            Some((op, element)) => write!(f, "{} ({} of {})", self.name(), op.name(), element),
            None => f.write_str(self.name()),
        }
    }
}

/// A collective submitted to a queue: the work a backend hands its channel's engine
/// ([`crate::backend::Work::Collective`]).
///
/// Every collective on a channel takes a turn, in the order they were submitted, and reaches
/// the engine only after the one before it did, so that every rank's engine sees one
/// channel's collectives in the same order (the order NCCL and MPI require), whatever order
/// their waits are reached in. The backend calls [`Collective::issued`] once the engine has
/// it; a collective dropped before that (its waits failed, its device went away) fails the
/// channel's turns from it on, with an error saying why: this rank can no longer match the
/// other ranks' collectives.
pub struct Collective {
    pub(crate) channel: Channel,
    pub(crate) kind: CollectiveKind,
    pub(crate) send: Option<BufferRef>,
    pub(crate) recv: Option<BufferRef>,
    pub(crate) turn: Turn,
}

impl Collective {
    /// The channel it runs on.
    pub fn channel(&self) -> &Channel {
        &self.channel
    }

    /// What it does.
    pub fn kind(&self) -> CollectiveKind {
        self.kind
    }

    /// The range it reads (the broadcast's one range; `None` for a receive).
    pub fn send(&self) -> Option<&BufferRef> {
        self.send.as_ref()
    }

    /// The range it writes (the broadcast's one range; `None` for a send).
    pub fn recv(&self) -> Option<&BufferRef> {
        self.recv.as_ref()
    }

    /// The engine has the collective: the channel's next one may reach it. Call once it is
    /// queued in the engine (or failed there), before the engine can see another.
    pub fn issued(&mut self) {
        self.turn.pass();
    }
}

impl fmt::Debug for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collective")
            .field("kind", &self.kind)
            .field("turn", &self.turn.value())
            .field("send", &self.send)
            .field("recv", &self.recv)
            .finish()
    }
}
