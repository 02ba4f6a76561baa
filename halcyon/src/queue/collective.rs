//! Collectives as queue operations ([`Queue::all_reduce`] and the others).
//!
//! Each one takes its turn on the channel (see [`crate::channel`]), adds the turn before it
//! to its waits, checks its arguments and submits [`Work::Collective`] like any operation:
//! the buffers it reads and writes are tracked for mapping, its signal fence settles with the
//! engine's outcome. A collective refused here still takes its turn, and fails it in order:
//! this rank's later collectives on the channel fail with it (they could no longer match the
//! other ranks').

use crate::buffer::{Access, BufferRef};
use crate::channel::{Channel, Collective, CollectiveKind, ElementType, ReduceOp, Turn};
use crate::device::{QueueCapabilities, Work};
use crate::error::{Error, Result, StatusCode};
use crate::queue::touched::Touched;

use super::{Queue, Submission, Timepoints};

impl Queue {
    /// Reduces `send` (elements of type `element`) across every rank of `channel` with `op`
    /// into every rank's `recv`, once `timepoints.wait` is reached; signals
    /// `timepoints.signal` once `recv` holds the result on this rank. `send` and `recv` are
    /// ranges of this queue's device of the same length (a multiple of the element size), and
    /// may be the same range (in place), but not partly overlap.
    ///
    /// Like every collective: each rank submits the same collectives on `channel` in the same
    /// order; the engine's failure fails the signal fence with its error, and a peer that
    /// never joins fails it with `DeadlineExceeded` after the channel's timeout (see
    /// [`crate::channel`]). A refused collective (`InvalidArgument` for bad ranges or a channel
    /// of another device, `Unimplemented` for a type the engine does not reduce) fails in
    /// order, and this rank's later collectives on the channel fail with it. The submission
    /// holds its buffers until it completes.
    pub fn all_reduce(
        &self,
        timepoints: impl Into<Timepoints>,
        channel: &Channel,
        op: ReduceOp,
        element: ElementType,
        send: &BufferRef,
        recv: &BufferRef,
    ) -> Submission {
        let kind = CollectiveKind::AllReduce { op, element };
        let check = || {
            reducible(element)?;
            same_length(send, recv, 1)?;
            whole_elements(recv, element)?;
            in_place_or_apart(send, recv)
        };
        self.collective(
            timepoints.into(),
            channel,
            kind,
            Some(send),
            Some(recv),
            check,
        )
    }

    /// Gathers every rank's `send` into every rank's `recv`, in rank order: `recv` is
    /// `channel.count()` times as long as `send`, and block `r` of it receives rank `r`'s
    /// `send`. Otherwise as [`Queue::all_reduce`]; the ranges may not overlap.
    pub fn all_gather(
        &self,
        timepoints: impl Into<Timepoints>,
        channel: &Channel,
        send: &BufferRef,
        recv: &BufferRef,
    ) -> Submission {
        let count = u64::from(channel.count());
        let check = || {
            same_length(recv, send, count)?;
            apart(send, recv)
        };
        let kind = CollectiveKind::AllGather;
        self.collective(
            timepoints.into(),
            channel,
            kind,
            Some(send),
            Some(recv),
            check,
        )
    }

    /// Reduces `send` across every rank with `op` and leaves block `r` of the result in rank
    /// `r`'s `recv`: `send` is `channel.count()` times as long as `recv`, which holds whole
    /// elements. Otherwise as [`Queue::all_reduce`]; the ranges may not overlap.
    pub fn reduce_scatter(
        &self,
        timepoints: impl Into<Timepoints>,
        channel: &Channel,
        op: ReduceOp,
        element: ElementType,
        send: &BufferRef,
        recv: &BufferRef,
    ) -> Submission {
        let count = u64::from(channel.count());
        let check = || {
            reducible(element)?;
            same_length(send, recv, count)?;
            whole_elements(recv, element)?;
            apart(send, recv)
        };
        let kind = CollectiveKind::ReduceScatter { op, element };
        self.collective(
            timepoints.into(),
            channel,
            kind,
            Some(send),
            Some(recv),
            check,
        )
    }

    /// Copies rank `root`'s `buffer` into every other rank's `buffer` (the same length on
    /// every rank). Otherwise as [`Queue::all_reduce`].
    pub fn broadcast(
        &self,
        timepoints: impl Into<Timepoints>,
        channel: &Channel,
        root: u32,
        buffer: &BufferRef,
    ) -> Submission {
        let check = || rank_in(channel, root, "root");
        let kind = CollectiveKind::Broadcast { root };
        self.collective(
            timepoints.into(),
            channel,
            kind,
            Some(buffer),
            Some(buffer),
            check,
        )
    }

    /// Sends `source` to rank `peer`, which receives it with [`Queue::recv`] of a range of the
    /// same length. Sends and receives are collectives of the channel: each takes its turn, so
    /// pair them in the same order on both ranks (a send waits for the matching receive when
    /// the engine does not buffer it). Otherwise as [`Queue::all_reduce`].
    pub fn send(
        &self,
        timepoints: impl Into<Timepoints>,
        channel: &Channel,
        peer: u32,
        source: &BufferRef,
    ) -> Submission {
        let check = || peer_of(channel, peer);
        let kind = CollectiveKind::Send { peer };
        self.collective(timepoints.into(), channel, kind, Some(source), None, check)
    }

    /// Receives into `target` what rank `peer` sends with [`Queue::send`]. As
    /// [`Queue::send`].
    pub fn recv(
        &self,
        timepoints: impl Into<Timepoints>,
        channel: &Channel,
        peer: u32,
        target: &BufferRef,
    ) -> Submission {
        let check = || peer_of(channel, peer);
        let kind = CollectiveKind::Recv { peer };
        self.collective(timepoints.into(), channel, kind, None, Some(target), check)
    }

    /// Takes `channel`'s next turn and submits the collective, or refuses it in order if
    /// `check` (or a check common to every collective) fails.
    fn collective(
        &self,
        timepoints: Timepoints,
        channel: &Channel,
        kind: CollectiveKind,
        send: Option<&BufferRef>,
        recv: Option<&BufferRef>,
        check: impl FnOnce() -> Result<()>,
    ) -> Submission {
        let (order, before, mut turn) = channel.order().take();
        let Timepoints { mut wait, signal } = timepoints;
        turn.waits_on(&wait);
        if before > 0 {
            wait.insert(&order, before);
        }
        let timepoints = Timepoints { wait, signal };
        let checked = self
            .common_checks(channel, &kind)
            .and_then(|()| check())
            .map_err(|e| e.context(format!("{kind} on {channel}")));
        if let Err(error) = checked {
            return self.refuse(timepoints, turn, error);
        }
        let mut touched = Touched::default();
        if let Some(send) = send {
            touched.add(send.buffer(), Access::Read);
        }
        if let Some(recv) = recv {
            touched.add(recv.buffer(), Access::Write);
        }
        let work = Work::Collective(Collective {
            channel: channel.clone(),
            kind,
            send: send.cloned(),
            recv: recv.cloned(),
            turn,
        });
        self.submit(timepoints, touched, work, Box::new(|| Ok(())))
    }

    /// The checks every collective makes: the channel is this device's, the queue can
    /// transfer, the engine runs `kind`.
    fn common_checks(&self, channel: &Channel, kind: &CollectiveKind) -> Result<()> {
        if !channel.is_on(self.device()) {
            return Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "the channel belongs to another device than {self}; submit its \
                     collectives on a queue of the channel's device"
                ),
            ));
        }
        let missing = QueueCapabilities::TRANSFER - self.capabilities();
        if !missing.is_empty() {
            return Err(self.cannot_run(missing));
        }
        channel.backend().check(kind)
    }

    /// Refuses a collective in order: a host call after its waits (its turn's included) fails
    /// its turn and its signal fence with `error`.
    fn refuse(&self, timepoints: Timepoints, mut turn: Turn, error: Error) -> Submission {
        let failure = error.clone();
        let signalled = self.submit(
            timepoints,
            Touched::default(),
            Work::HostCall(Box::new(move || {
                turn.fail(failure.clone());
                Err(failure)
            })),
            Box::new(|| Ok(())),
        );
        Submission::rejected(signalled, error)
    }
}

/// `InvalidArgument` unless `long` is `times` times as long as `short`.
fn same_length(long: &BufferRef, short: &BufferRef, times: u64) -> Result<()> {
    match short.len().checked_mul(times) {
        Some(expected) if expected == long.len() => Ok(()),
        _ if times == 1 => Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "the ranges are {} and {} bytes long: they must be the same length",
                long.len(),
                short.len()
            ),
        )),
        _ => Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "a range of {} bytes must be {times} (the channel's ranks) times as long as \
                 the other, of {} bytes",
                long.len(),
                short.len()
            ),
        )),
    }
}

/// `InvalidArgument` for `bool`, which no reduction combines.
fn reducible(element: ElementType) -> Result<()> {
    if element != ElementType::Bool {
        return Ok(());
    }
    Err(Error::new(
        StatusCode::InvalidArgument,
        "bool elements are not reduced; reduce them as u8 (max for any, min for all)",
    ))
}

/// `InvalidArgument` unless `range` holds whole elements of `element`.
fn whole_elements(range: &BufferRef, element: ElementType) -> Result<()> {
    if range.len().is_multiple_of(element.size()) {
        return Ok(());
    }
    Err(Error::new(
        StatusCode::InvalidArgument,
        format!(
            "{} bytes are not whole {element} elements ({} bytes each)",
            range.len(),
            element.size()
        ),
    ))
}

/// `InvalidArgument` if the ranges overlap.
fn apart(a: &BufferRef, b: &BufferRef) -> Result<()> {
    if !a.overlaps(b) {
        return Ok(());
    }
    Err(Error::new(
        StatusCode::InvalidArgument,
        "the ranges it reads and writes overlap; use ranges apart",
    ))
}

/// `InvalidArgument` if the ranges partly overlap (the same range is in place).
fn in_place_or_apart(a: &BufferRef, b: &BufferRef) -> Result<()> {
    let same = a.buffer().ptr_eq(b.buffer()) && a.offset() == b.offset() && a.len() == b.len();
    if same || !a.overlaps(b) {
        return Ok(());
    }
    Err(Error::new(
        StatusCode::InvalidArgument,
        "the ranges it reads and writes partly overlap; use one range (in place) or ranges \
         apart",
    ))
}

/// `InvalidArgument` unless `rank` is one of the channel's.
fn rank_in(channel: &Channel, rank: u32, what: &str) -> Result<()> {
    if rank < channel.count() {
        return Ok(());
    }
    Err(Error::new(
        StatusCode::InvalidArgument,
        format!(
            "{what} rank {rank} is not one of the channel's {} ranks",
            channel.count()
        ),
    ))
}

/// `InvalidArgument` unless `peer` is another of the channel's ranks.
fn peer_of(channel: &Channel, peer: u32) -> Result<()> {
    rank_in(channel, peer, "peer")?;
    if peer == channel.rank() {
        return Err(Error::new(
            StatusCode::InvalidArgument,
            format!("peer rank {peer} is this rank; send to another rank"),
        ));
    }
    Ok(())
}
