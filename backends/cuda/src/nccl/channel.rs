//! An NCCL channel: one communicator of this process's rank, and its watchdog.
//!
//! # Enqueueing
//!
//! [`NcclChannel::enqueue`] translates one collective into its NCCL call on the queue's
//! stream: reductions with the element type's `ncclDataType_t`, the others on bytes
//! (`ncclUint8`). Each enqueued collective is remembered, with when it was enqueued, until
//! its stream passes it and the stream layer asks for the engine's verdict
//! ([`ChannelBackend::outcome`]).
//!
//! # The watchdog
//!
//! NCCL reports a communicator's failure asynchronously (`ncclCommGetAsyncError`), and a
//! collective whose peer never joins runs forever, holding its stream. A thread per channel
//! polls the error and the oldest collective's age. On an error, or a collective older than
//! the channel's timeout ([`halcyon::ChannelParams::timeout`], counted from when it was
//! enqueued), it aborts the communicator (`ncclCommAbort`), which ends its kernels so the
//! stream moves on; the collectives it passes then fail with the error (`DeadlineExceeded`
//! for the timeout), and the channel refuses later ones with `Unavailable`. Their memory is
//! safe to reuse: the aborted kernels no longer touch it.

use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUcontext, CUdevice};
use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};
use halcyon::backend::{ChannelBackend, CollectiveKind};
use halcyon::{ChannelParams, ChannelProvider, ElementType, Error, ReduceOp, Result, StatusCode};
use halcyon_stream::{DevicePtr, StreamHandle};

use super::sys::NcclCode;
use super::Nccl;
use crate::sys as driver;

/// A communicator handle, used from the issuing threads and the watchdog.
#[derive(Clone, Copy)]
struct Comm(ncclComm_t);

// SAFETY: an NCCL communicator may be used from any thread; calls that must not overlap
// (enqueueing, abort, destroy) are serialised by the channel's lock.
unsafe impl Send for Comm {}
// SAFETY: as above; `ncclCommGetAsyncError` may run concurrently with the others.
unsafe impl Sync for Comm {}

/// A retained primary context, released on drop: a communicator must not outlive it.
struct Retained {
    device: CUdevice,
    context: CUcontext,
}

// SAFETY: a context handle is valid on any thread while retained.
unsafe impl Send for Retained {}
// SAFETY: as above.
unsafe impl Sync for Retained {}

/// An NCCL channel (see the [module docs](self)).
pub struct NcclChannel {
    nccl: &'static Nccl,
    rank: u32,
    count: u32,
    /// The [`crate::CudaApi`] whose device it was made on (its process-unique id).
    owner: u64,
    watch: Arc<Watch>,
    watchdog: Option<JoinHandle<()>>,
    context: Retained,
}

struct Watch {
    nccl: &'static Nccl,
    comm: Comm,
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
    aborted: bool,
    closing: bool,
}

impl NcclChannel {
    /// Joins the communicator of `provider`'s ranks on device `device`, whose primary context
    /// is current on the calling thread: rank 0 makes the id, the provider hands it to the
    /// others. Blocks until every rank has joined. The channel retains the context.
    pub(crate) fn join(
        provider: &dyn ChannelProvider,
        params: &ChannelParams,
        owner: u64,
        device: CUdevice,
    ) -> Result<NcclChannel> {
        let nccl = Nccl::load()?;
        let calls = nccl.calls();
        let (rank, count) = (provider.rank(), provider.count());
        let mut id = ncclUniqueId { internal: [0; 128] };
        if rank == 0 {
            // SAFETY: a valid out-pointer.
            let code = NcclCode(unsafe { (calls.ncclGetUniqueId)(&mut id) });
            nccl.check(code, None, || "ncclGetUniqueId".into())?;
        }
        let mut bytes: Vec<u8> = id.internal.iter().map(|&c| c as u8).collect();
        provider
            .exchange_id(&mut bytes)
            .map_err(|e| e.context("handing NCCL's unique id to the other ranks"))?;
        for (to, from) in id.internal.iter_mut().zip(&bytes) {
            *to = *from as std::ffi::c_char;
        }
        let as_int = |n: u32, what: &str| {
            c_int::try_from(n).map_err(|_| {
                Error::new(
                    StatusCode::InvalidArgument,
                    format!("{what} {n} is too large"),
                )
            })
        };
        // Keeps the context (and so the communicator's resources) alive with the channel.
        let mut retained: CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and a device handle of the probed driver.
        crate::result::check(
            // SAFETY: as above.
            unsafe { driver::cuDevicePrimaryCtxRetain(&mut retained, device) },
            || "cuDevicePrimaryCtxRetain for an NCCL channel".into(),
        )?;
        let context = Retained {
            device,
            context: retained,
        };
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is an out-pointer; `id` is rank 0's; the device's context is
        // current on this thread (the caller's contract), so NCCL joins on this device.
        let code = NcclCode(unsafe {
            (calls.ncclCommInitRank)(
                &mut comm,
                as_int(count, "rank count")?,
                id,
                as_int(rank, "rank")?,
            )
        });
        nccl.check(code, None, || {
            format!("ncclCommInitRank (rank {rank} of {count})")
        })?;
        let mut channel = NcclChannel {
            nccl,
            rank,
            count,
            owner,
            watch: Arc::new(Watch {
                nccl,
                comm: Comm(comm),
                timeout: params.timeout,
                state: Mutex::default(),
                changed: Condvar::new(),
            }),
            watchdog: None,
            context,
        };
        let watching = channel.watch.clone();
        // On failure the channel drops: the communicator is destroyed, the context released.
        let watchdog = std::thread::Builder::new()
            .name(format!("halcyon-nccl-watch-{rank}"))
            .spawn(move || watching.run())
            .map_err(|e| {
                Error::new(
                    StatusCode::ResourceExhausted,
                    format!("cannot start an NCCL channel's watchdog: {e}"),
                )
            })?;
        channel.watchdog = Some(watchdog);
        Ok(channel)
    }

    /// Whether the channel was made by the API with id `owner`.
    pub(crate) fn belongs_to(&self, owner: u64) -> bool {
        self.owner == owner
    }

    /// Enqueues `kind` on `stream` (see the [module docs](self)).
    ///
    /// # Safety
    ///
    /// The ranges must be device memory of the channel's device, live until the stream has
    /// passed the collective; `stream` a live stream of that device, whose context is current.
    pub(crate) unsafe fn enqueue(
        &self,
        kind: &CollectiveKind,
        send: Option<(DevicePtr, u64)>,
        recv: Option<(DevicePtr, u64)>,
        stream: StreamHandle,
    ) -> Result<()> {
        let calls = self.nccl.calls();
        let mut state = self.watch.lock();
        if let Some(broken) = &state.broken {
            return Err(Error::new(
                StatusCode::Unavailable,
                format!(
                    "NCCL channel rank {} of {} is broken ({broken}); create a new channel",
                    self.rank, self.count
                ),
            ));
        }
        let comm = self.watch.comm.0;
        let stream = stream.0 as usize as cudarc::nccl::sys::cudaStream_t;
        let ptr = |r: Option<(DevicePtr, u64)>| r.map_or((0, 0), |(p, len)| (p.0, len));
        let ((send, send_len), (recv, recv_len)) = (ptr(send), ptr(recv));
        let (send, recv) = (send as usize as *const _, recv as usize as *mut _);
        let bytes = ncclDataType_t::ncclUint8;
        let len = |n: u64| {
            usize::try_from(n).map_err(|_| {
                Error::new(
                    StatusCode::InvalidArgument,
                    format!("{n} bytes is too large"),
                )
            })
        };
        let rank = |r: u32| c_int::try_from(r).unwrap_or(c_int::MAX);
        let (send_len, recv_len) = (len(send_len)?, len(recv_len)?);
        let elements = |element: ElementType| recv_len / element.size() as usize;
        // SAFETY: the ranges are live device memory of this device of the lengths given (the
        // caller's contract, and the core checked their sizes against the kind); `stream` is
        // live; calls on the communicator are serialised by `state`'s lock.
        let code = NcclCode(unsafe {
            match *kind {
                CollectiveKind::AllReduce { op, element } => (calls.ncclAllReduce)(
                    send,
                    recv,
                    elements(element),
                    datatype(element),
                    reduce(op),
                    comm,
                    stream,
                ),
                CollectiveKind::AllGather => {
                    (calls.ncclAllGather)(send, recv, send_len, bytes, comm, stream)
                }
                CollectiveKind::ReduceScatter { op, element } => (calls.ncclReduceScatter)(
                    send,
                    recv,
                    elements(element),
                    datatype(element),
                    reduce(op),
                    comm,
                    stream,
                ),
                CollectiveKind::Broadcast { root } => {
                    (calls.ncclBroadcast)(send, recv, recv_len, bytes, rank(root), comm, stream)
                }
                CollectiveKind::Send { peer } => {
                    (calls.ncclSend)(send, send_len, bytes, rank(peer), comm, stream)
                }
                CollectiveKind::Recv { peer } => {
                    (calls.ncclRecv)(recv, recv_len, bytes, rank(peer), comm, stream)
                }
                _ => {
                    return Err(Error::new(
                        StatusCode::Unimplemented,
                        format!("NCCL channels do not run {kind}"),
                    ))
                }
            }
        });
        self.nccl.check(code, Some(comm), || {
            format!("{kind} on NCCL rank {}", self.rank)
        })?;
        state.in_flight.push_back(Instant::now());
        drop(state);
        self.watch.changed.notify_all();
        Ok(())
    }
}

/// NCCL's type for `element` (NCCL has every [`ElementType`]).
fn datatype(element: ElementType) -> ncclDataType_t {
    use ncclDataType_t::*;
    match element {
        ElementType::F16 => ncclFloat16,
        ElementType::BF16 => ncclBfloat16,
        ElementType::F32 => ncclFloat32,
        ElementType::F64 => ncclFloat64,
        ElementType::I8 => ncclInt8,
        ElementType::U8 => ncclUint8,
        ElementType::I32 => ncclInt32,
        ElementType::U32 => ncclUint32,
        ElementType::I64 => ncclInt64,
        // `ElementType` is non-exhaustive; U64 and anything the core adds later map here
        // only once it is listed above.
        _ => ncclUint64,
    }
}

fn reduce(op: ReduceOp) -> ncclRedOp_t {
    use ncclRedOp_t::*;
    match op {
        ReduceOp::Sum => ncclSum,
        ReduceOp::Prod => ncclProd,
        ReduceOp::Min => ncclMin,
        _ => ncclMax,
    }
}

impl Watch {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

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
                        "an NCCL collective did not complete within the channel's timeout of \
                         {:?}: a peer is gone or stalled; the communicator was aborted",
                        self.timeout
                    ),
                ))
            } else {
                self.async_error()
            };
            if let Some(error) = failed {
                state.broken = Some(error);
                // SAFETY: the communicator is live (not destroyed while the watchdog runs);
                // the lock keeps enqueues out.
                let _ = unsafe { (self.nccl.calls().ncclCommAbort)(self.comm.0) };
                state.aborted = true;
                break;
            }
            state = (self.changed.wait_timeout(state, poll))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The communicator's asynchronous error, if it has one.
    fn async_error(&self) -> Option<Error> {
        let mut raw: u32 = 0;
        // SAFETY: a live communicator; the out-pointer is a `u32`'s, read as a number only
        // (see `sys`).
        let code = NcclCode(unsafe {
            (self.nccl.calls().ncclCommGetAsyncError)(
                self.comm.0,
                (&mut raw as *mut u32).cast::<ncclResult_t>(),
            )
        });
        let failed = [code, NcclCode(raw)]
            .into_iter()
            .find(|c| *c != NcclCode::SUCCESS && *c != NcclCode::IN_PROGRESS)?;
        Some(self.nccl.error(
            failed,
            Some(self.comm.0),
            "the NCCL communicator failed; it was aborted".into(),
        ))
    }
}

impl ChannelBackend for NcclChannel {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn count(&self) -> u32 {
        self.count
    }

    fn engine(&self) -> &str {
        "nccl"
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

impl Drop for NcclChannel {
    fn drop(&mut self) {
        self.watch.lock().closing = true;
        self.watch.changed.notify_all();
        if let Some(watchdog) = self.watchdog.take() {
            let _ = watchdog.join();
        }
        let state = self.watch.lock();
        // Every collective holds its channel until its stream passed it, so none is queued:
        // the communicator can go.
        if !state.aborted {
            let mut previous: CUcontext = std::ptr::null_mut();
            // SAFETY: the context is retained by this channel; the previous one is restored.
            unsafe {
                let _ = driver::cuCtxGetCurrent(&mut previous);
                let _ = driver::cuCtxSetCurrent(self.context.context);
                let _ = (self.nccl.calls().ncclCommDestroy)(self.watch.comm.0);
                let _ = driver::cuCtxSetCurrent(previous);
            }
        }
        // `context` is released after this, when the fields drop.
    }
}

impl Drop for Retained {
    fn drop(&mut self) {
        // SAFETY: retained in `NcclChannel::join`, released once.
        let _ = unsafe { driver::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}
