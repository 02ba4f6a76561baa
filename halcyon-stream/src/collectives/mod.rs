//! Collectives on stream APIs: one engine for the NCCL-shaped libraries (NCCL for CUDA, RCCL
//! for HIP, which share NCCL's API), over a small [`CommunicatorApi`] translation table.
//!
//! # Joining
//!
//! [`StreamChannel::join`] makes a communicator of a [`ChannelProvider`]'s ranks: rank 0 makes
//! the unique id, the provider hands it to the others ([`ChannelProvider::exchange_id`]), and
//! each rank joins on its device (`ncclCommInitRank`), which blocks until every rank has.
//!
//! # Enqueueing
//!
//! [`StreamChannel::enqueue`] translates one collective into its call on a stream:
//! reductions on elements of their type, the others on bytes. Each enqueued collective is
//! remembered, with when it was enqueued, until the stream passes it and the stream layer asks
//! for the engine's verdict ([`ChannelBackend::outcome`]).
//!
//! # The watchdog
//!
//! These libraries report a communicator's failure asynchronously (`ncclCommGetAsyncError`),
//! and a collective whose peer never joins runs forever, holding its stream. A thread per
//! channel polls the error and the oldest collective's age. On an error, or a collective older
//! than the channel's timeout ([`ChannelParams::timeout`], counted from when it was enqueued),
//! it aborts the communicator (`ncclCommAbort`), which ends its kernels so the stream moves on;
//! the collectives the stream then passes fail with the error (`DeadlineExceeded` for the
//! timeout), and the channel refuses later ones with `Unavailable`. Their memory is safe to
//! reuse: the aborted kernels no longer touch it. A collective that completed before the
//! failure was seen, but is passed after, fails too: the library cannot say which completed
//! whole.

mod library;

pub use library::{c_text, result_error, LibraryChoice};

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use halcyon::backend::{ChannelBackend, CollectiveKind};
use halcyon::{ChannelParams, ChannelProvider, ElementType, Error, ReduceOp, Result, StatusCode};

use crate::api::{DevicePtr, StreamHandle};

/// The size of an NCCL-shaped library's unique id (`ncclUniqueId`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// A communicator of a [`CommunicatorApi`] (`ncclComm_t`), as an opaque number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommHandle(pub u64);

/// One call on a communicator: what [`StreamChannel::enqueue`] asks of the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommCall {
    /// The collective; its element type and reduction, for the reducing kinds.
    pub kind: CollectiveKind,
    /// The range read (null for a receive).
    pub send: DevicePtr,
    /// The range written (null for a send).
    pub recv: DevicePtr,
    /// The count the library's call takes: elements of `element` per rank (`count` of
    /// `ncclAllReduce`, `recvcount` of `ncclReduceScatter`, `sendcount` of `ncclAllGather`,
    /// `count` of the others).
    pub count: usize,
    /// The element type of `count` (bytes, [`ElementType::U8`], for the kinds that do not
    /// reduce).
    pub element: ElementType,
    /// The reduction, for the reducing kinds.
    pub op: Option<ReduceOp>,
    /// The root of a broadcast, or the peer of a send or receive.
    pub rank: Option<u32>,
}

/// The calls of an NCCL-shaped collective library (NCCL, RCCL), as a translation table: each
/// method calls the library and turns its result into a [`halcyon::Error`] (with the library's
/// text), adding no policy. One value per communicator: it keeps what the communicator needs
/// alive (the device's context).
///
/// # Safety
///
/// Implementations must call the library as documented: [`CommunicatorApi::enqueue`] may be
/// called with any [`CommCall`] the stream layer builds from a checked collective, and must
/// not touch memory beyond what the call's ranges name.
pub unsafe trait CommunicatorApi: Send + Sync + 'static {
    /// The engine's name (`"nccl"`, `"rccl"`).
    fn engine(&self) -> &'static str;

    /// A fresh unique id (`ncclGetUniqueId`).
    fn unique_id(&self) -> Result<[u8; UNIQUE_ID_BYTES]>;

    /// Joins communicator `id` as `rank` of `count` on this value's device
    /// (`ncclCommInitRank`); blocks until every rank has joined.
    fn join(&self, count: u32, id: &[u8; UNIQUE_ID_BYTES], rank: u32) -> Result<CommHandle>;

    /// Enqueues `call` on `stream` (`ncclAllReduce` and the others).
    ///
    /// # Safety
    ///
    /// `comm` is live; the call's ranges are device memory of the communicator's device, of
    /// the sizes its kind and count imply, live until the stream has passed the call; `stream`
    /// is a live stream of that device.
    unsafe fn enqueue(&self, comm: CommHandle, call: &CommCall, stream: StreamHandle)
        -> Result<()>;

    /// The communicator's asynchronous error (`ncclCommGetAsyncError`), if it has one. May be
    /// called while another thread enqueues.
    fn async_error(&self, comm: CommHandle) -> Option<Error>;

    /// Aborts the communicator (`ncclCommAbort`): its kernels end, it is gone.
    ///
    /// # Safety
    ///
    /// `comm` is live, and not used again.
    unsafe fn abort(&self, comm: CommHandle);

    /// Destroys the communicator (`ncclCommDestroy`) once nothing is enqueued on it.
    ///
    /// # Safety
    ///
    /// As [`CommunicatorApi::abort`].
    unsafe fn destroy(&self, comm: CommHandle);
}

/// A channel of an NCCL-shaped library (see the [module docs](self)).
pub struct StreamChannel<C: CommunicatorApi> {
    rank: u32,
    count: u32,
    /// Who made it (the stream API instance's id), so that it enqueues on that API only.
    owner: u64,
    watch: Arc<Watch<C>>,
    watchdog: Option<JoinHandle<()>>,
}

struct Watch<C> {
    api: C,
    comm: CommHandle,
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// When each collective the stream has not passed yet was enqueued, oldest first.
    in_flight: VecDeque<Instant>,
    /// Why the channel no longer runs collectives.
    broken: Option<Error>,
    /// The communicator was aborted (and so is gone).
    aborted: bool,
    closing: bool,
}

impl<C: CommunicatorApi> StreamChannel<C> {
    /// Joins the communicator of `provider`'s ranks through `api` (see the
    /// [module docs](self)); `owner` names the stream API that will enqueue its collectives.
    pub fn join(
        api: C,
        provider: &dyn ChannelProvider,
        params: &ChannelParams,
        owner: u64,
    ) -> Result<StreamChannel<C>> {
        let (rank, count) = (provider.rank(), provider.count());
        let mut id = match rank {
            0 => api.unique_id()?,
            _ => [0; UNIQUE_ID_BYTES],
        };
        provider.exchange_id(&mut id).map_err(|e| {
            e.context(format!(
                "handing {}'s unique id to the other ranks",
                api.engine()
            ))
        })?;
        let comm = api.join(count, &id, rank)?;
        let mut channel = StreamChannel {
            rank,
            count,
            owner,
            watch: Arc::new(Watch {
                api,
                comm,
                timeout: params.timeout,
                state: Mutex::default(),
                changed: Condvar::new(),
            }),
            watchdog: None,
        };
        let watching = channel.watch.clone();
        // On failure the channel drops, destroying the communicator.
        let watchdog = std::thread::Builder::new()
            .name(format!(
                "halcyon-{}-watch-{rank}",
                channel.watch.api.engine()
            ))
            .spawn(move || watching.run())
            .map_err(|e| {
                Error::new(
                    StatusCode::ResourceExhausted,
                    format!("cannot start a collective channel's watchdog: {e}"),
                )
            })?;
        channel.watchdog = Some(watchdog);
        Ok(channel)
    }

    /// Whether the stream API instance `owner` made it.
    pub fn belongs_to(&self, owner: u64) -> bool {
        self.owner == owner
    }

    /// The library's table, for the backend.
    pub fn api(&self) -> &C {
        &self.watch.api
    }

    /// Enqueues `kind` on `stream`, reading `send` and writing `recv` (device addresses and
    /// byte lengths; see the [module docs](self)). `Unavailable` once the channel broke.
    ///
    /// # Safety
    ///
    /// As [`crate::StreamApi::enqueue_collective`]: the ranges are device memory of the
    /// channel's device, live until the stream has passed the collective; `stream` is a live
    /// stream of that device, in the state the library needs (its context current).
    pub unsafe fn enqueue(
        &self,
        kind: &CollectiveKind,
        send: Option<(DevicePtr, u64)>,
        recv: Option<(DevicePtr, u64)>,
        stream: StreamHandle,
    ) -> Result<()> {
        let call = self.call(kind, send, recv)?;
        let mut state = self.watch.lock();
        if let Some(broken) = &state.broken {
            return Err(Error::new(
                StatusCode::Unavailable,
                format!(
                    "{} channel rank {} of {} is broken ({broken}); create a new channel",
                    self.watch.api.engine(),
                    self.rank,
                    self.count
                ),
            ));
        }
        // SAFETY: the caller's contract; the communicator is live (not aborted: the channel
        // is not broken), and the lock serialises calls on it.
        unsafe { self.watch.api.enqueue(self.watch.comm, &call, stream) }
            .map_err(|e| e.context(format!("{kind} on rank {} of {}", self.rank, self.count)))?;
        state.in_flight.push_back(Instant::now());
        drop(state);
        self.watch.changed.notify_all();
        Ok(())
    }

    /// The library call for `kind` over the ranges.
    fn call(
        &self,
        kind: &CollectiveKind,
        send: Option<(DevicePtr, u64)>,
        recv: Option<(DevicePtr, u64)>,
    ) -> Result<CommCall> {
        let len = |r: Option<(DevicePtr, u64)>| r.map_or(0, |(_, len)| len);
        let ptr = |r: Option<(DevicePtr, u64)>| r.map_or(DevicePtr(0), |(p, _)| p);
        let (element, op, bytes, rank) = match *kind {
            CollectiveKind::AllReduce { op, element }
            | CollectiveKind::ReduceScatter { op, element } => (element, Some(op), len(recv), None),
            CollectiveKind::AllGather => (ElementType::U8, None, len(send), None),
            CollectiveKind::Broadcast { root } => (ElementType::U8, None, len(recv), Some(root)),
            CollectiveKind::Send { peer } => (ElementType::U8, None, len(send), Some(peer)),
            CollectiveKind::Recv { peer } => (ElementType::U8, None, len(recv), Some(peer)),
            _ => {
                return Err(Error::new(
                    StatusCode::Unimplemented,
                    format!("{} channels do not run {kind}", self.watch.api.engine()),
                ))
            }
        };
        let count = usize::try_from(bytes / element.size()).map_err(|_| {
            Error::new(
                StatusCode::InvalidArgument,
                format!("{kind} of {bytes} bytes is too large for this host"),
            )
        })?;
        Ok(CommCall {
            kind: *kind,
            send: ptr(send),
            recv: ptr(recv),
            count,
            element,
            op,
            rank,
        })
    }
}

impl<C: CommunicatorApi> ChannelBackend for StreamChannel<C> {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn count(&self) -> u32 {
        self.count
    }

    fn engine(&self) -> &str {
        self.watch.api.engine()
    }

    /// NCCL and RCCL reduce the floats and the 8-, 32- and 64-bit integers.
    fn check(&self, kind: &CollectiveKind) -> Result<()> {
        match kind.reduction() {
            Some((_, element @ (ElementType::I16 | ElementType::U16 | ElementType::Bool))) => {
                Err(Error::new(
                    StatusCode::Unimplemented,
                    format!(
                        "{} has no {element} type to reduce; widen to i32 or u32",
                        self.watch.api.engine()
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    fn outcome(&self) -> Result<()> {
        let mut state = self.watch.lock();
        state.in_flight.pop_front();
        match &state.broken {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl<C> Watch<C> {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<C: CommunicatorApi> Watch<C> {
    /// The watchdog thread (see the [module docs](self)).
    fn run(&self) {
        let poll = (self.timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let mut state = self.lock();
        while !state.closing && state.broken.is_none() {
            let stalled = (state.in_flight.front()).is_some_and(|t| t.elapsed() >= self.timeout);
            let failed = if stalled {
                Some(Error::new(
                    StatusCode::DeadlineExceeded,
                    format!(
                        "a {} collective did not complete within the channel's timeout of \
                         {:?}: a peer is gone or stalled; the communicator was aborted",
                        self.api.engine(),
                        self.timeout
                    ),
                ))
            } else {
                self.api.async_error(self.comm).map(|e| {
                    e.context(format!(
                        "the {} communicator failed and was aborted",
                        self.api.engine()
                    ))
                })
            };
            if let Some(error) = failed {
                state.broken = Some(error);
                // SAFETY: the communicator is live (destroyed only after this thread ends) and
                // never used again: the channel is broken; the lock keeps enqueues out.
                unsafe { self.api.abort(self.comm) };
                state.aborted = true;
                break;
            }
            state = (self.changed.wait_timeout(state, poll))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl<C: CommunicatorApi> Drop for StreamChannel<C> {
    fn drop(&mut self) {
        self.watch.lock().closing = true;
        self.watch.changed.notify_all();
        if let Some(watchdog) = self.watchdog.take() {
            let _ = watchdog.join();
        }
        // Every collective holds its channel until its stream passed it, so nothing is
        // enqueued any more: the communicator can go, unless the watchdog aborted it.
        if !self.watch.lock().aborted {
            // SAFETY: live (not aborted) and never used again.
            unsafe { self.watch.api.destroy(self.watch.comm) };
        }
    }
}
