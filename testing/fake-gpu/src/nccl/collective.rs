//! Collectives and point-to-point operations: the checks at the call, the operation a stream
//! runs ([`Task`], in [`crate::model::ops::Op::Nccl`]), and what happens when the stream's
//! worker reaches it: a collective joins its round and waits for every rank, the last to
//! arrive computes every rank's result; a send leaves its bytes for the receiver at once; a
//! receive waits for the matching send.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use cudarc::nccl::sys::ncclResult_t;

use super::communicator::{wait_limit, CliqueState, Comm};
use super::group;
use super::reduce::{reduce, Dtype, RedOp};
use super::{fail, NRet};
use crate::model::contract::{sticky, violation};
use crate::model::copy::reachable;
use crate::model::driver::{driver, COLLECTIVES_RUN};
use crate::model::memory::{memory, Memory};
use crate::model::ops::{illegal_address, Op};
use crate::model::stream::{find_stream, Stream};

/// How long a rank's operation waits for its peers before the fake calls it a violation.
const COLLECTIVE_WAIT: Duration = Duration::from_secs(60);

/// The async error the next collective fails every rank with (0: none); see
/// [`fault_next_collective`].
static FAULT_NEXT: AtomicU32 = AtomicU32::new(0);

/// Makes the next collective to complete write nothing and set every rank's async error to
/// `code` (0: no fault).
pub(crate) fn fault_next_collective(code: ncclResult_t) {
    FAULT_NEXT.store(code as u32, Ordering::Relaxed);
}

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce(RedOp),
    Broadcast { root: usize },
    ReduceScatter(RedOp),
    AllGather,
}

/// A collective as one rank called it: every rank must call it alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    pub kind: Kind,
    /// The call's count (all-gather's send count, reduce-scatter's receive count).
    pub count: usize,
    pub dtype: Dtype,
}

impl Shape {
    /// The bytes each rank's send and receive buffers hold with `nranks` ranks.
    fn lens(&self, nranks: usize) -> Option<(usize, usize)> {
        let bytes = self.count.checked_mul(self.dtype.size())?;
        let all = bytes.checked_mul(nranks)?;
        Some(match self.kind {
            Kind::AllReduce(_) | Kind::Broadcast { .. } => (bytes, bytes),
            Kind::ReduceScatter(_) => (all, bytes),
            Kind::AllGather => (bytes, all),
        })
    }

    /// Whether rank `rank` reads its send buffer.
    fn sends(&self, rank: usize) -> bool {
        !matches!(self.kind, Kind::Broadcast { root } if root != rank)
    }

    /// Every rank's result from every rank's send bytes (`None` where a rank sends nothing).
    fn compute(&self, sends: &[Option<Vec<u8>>]) -> Vec<Vec<u8>> {
        let n = sends.len();
        let all = || -> Vec<Vec<u8>> { sends.iter().flatten().cloned().collect() };
        match self.kind {
            Kind::AllReduce(op) => vec![reduce(&all(), self.dtype, op); n],
            Kind::Broadcast { root } => vec![sends[root].clone().unwrap_or_default(); n],
            Kind::AllGather => vec![all().concat(); n],
            Kind::ReduceScatter(op) => {
                let full = reduce(&all(), self.dtype, op);
                let block = self.count * self.dtype.size();
                (0..n)
                    .map(|r| full[r * block..(r + 1) * block].to_vec())
                    .collect()
            }
        }
    }
}

/// One rank's part in a round.
#[derive(Clone, Copy)]
struct Part {
    send: u64,
    recv: u64,
    device: u32,
    stream: u64,
}

/// A collective under way: who joined it, and how it ended.
pub(crate) struct Round {
    /// The first rank's call, which every other must match.
    shape: Shape,
    first: usize,
    parts: Vec<Option<Part>>,
    /// Set when it ended: whether the results were written.
    written: Option<bool>,
    /// Ranks done with it.
    departed: usize,
}

/// A send waiting for its receive.
pub(crate) struct Mail {
    count: usize,
    dtype: Dtype,
    bytes: Vec<u8>,
}

/// What a [`Task`] does.
enum Work {
    /// The comm's `seq`-th collective.
    Collective {
        seq: u64,
        shape: Shape,
        send: u64,
        recv: u64,
    },
    /// The comm's `k`-th send to `peer`.
    Send {
        peer: usize,
        k: u64,
        count: usize,
        dtype: Dtype,
        buffer: u64,
    },
    /// The comm's `k`-th receive from `peer`.
    Recv {
        peer: usize,
        k: u64,
        count: usize,
        dtype: Dtype,
        buffer: u64,
    },
}

/// A collective or point-to-point operation of one rank, which its stream runs in order.
pub(crate) struct Task {
    comm: Arc<Comm>,
    work: Work,
    call: &'static str,
}

impl Drop for Task {
    fn drop(&mut self) {
        self.comm.unqueue();
    }
}

type Guard<'a> = MutexGuard<'a, CliqueState>;

impl Task {
    fn new(comm: Arc<Comm>, work: Work, call: &'static str) -> Task {
        comm.queue();
        Task { comm, work, call }
    }

    /// The communicator it belongs to.
    pub(crate) fn comm(&self) -> &Comm {
        &self.comm
    }

    /// Whether it is a send (which `ncclGroupEnd` enqueues first).
    pub(crate) fn is_send(&self) -> bool {
        matches!(self.work, Work::Send { .. })
    }

    /// Runs it on stream `stream` (of the comm's device), when the stream's worker reaches
    /// it. Nothing is written if the comm left the clique (aborted, destroyed) meanwhile.
    pub(crate) fn run(&self, stream: u64) {
        let clique = &self.comm.clique;
        let mut state = clique.lock();
        if state.member(self.comm.rank).left {
            return;
        }
        match self.work {
            Work::Collective {
                seq,
                shape,
                send,
                recv,
            } => {
                let part = Part {
                    send,
                    recv,
                    device: self.comm.device,
                    stream,
                };
                self.collective(state, seq, shape, part);
            }
            Work::Send {
                peer,
                k,
                count,
                dtype,
                buffer,
            } => {
                let len = count * dtype.size();
                let mut bytes = vec![0u8; len];
                let Some(mut memory) = self.checked(memory(), buffer, len, stream) else {
                    return;
                };
                // SAFETY: the source was checked against a live allocation under this lock;
                // the destination is `bytes`, `len` long.
                unsafe { memory.copy(bytes.as_mut_ptr() as usize as u64, buffer, len) };
                drop(memory);
                let key = (self.comm.rank, peer, k);
                state.mail.insert(
                    key,
                    Mail {
                        count,
                        dtype,
                        bytes,
                    },
                );
                COLLECTIVES_RUN.fetch_add(1, Ordering::Relaxed);
                clique.notify();
            }
            Work::Recv {
                peer,
                k,
                count,
                dtype,
                buffer,
            } => self.receive(state, (peer, k, count, dtype), buffer, stream),
        }
    }

    /// Checks under the memory lock `memory` that the comm's device may still reach `len`
    /// bytes at `ptr`: the lock back, or `None` when not (a violation and a device fault,
    /// reported after the lock is released) or when the device faulted meanwhile.
    fn checked<'a>(
        &self,
        memory: MutexGuard<'a, Memory>,
        ptr: u64,
        len: usize,
        stream: u64,
    ) -> Option<MutexGuard<'a, Memory>> {
        let device = self.comm.device;
        if sticky(device).is_some() {
            return None; // faulted meanwhile: the host may have freed what this uses
        }
        match memory.check_on(ptr, len, device) {
            Ok(()) => Some(memory),
            Err(why) => {
                drop(memory);
                illegal_address(device, stream, self.call, why);
                None
            }
        }
    }

    /// Joins collective `seq`, and waits for it to complete (or computes it, arriving last).
    fn collective(&self, mut state: Guard<'_>, seq: u64, shape: Shape, part: Part) {
        let clique = self.comm.clique.clone();
        let (rank, n) = (self.comm.rank, clique.nranks);
        let round = state.rounds.entry(seq).or_insert_with(|| Round {
            shape,
            first: rank,
            parts: vec![None; n],
            written: None,
            departed: 0,
        });
        if round.written.is_none() && round.shape != shape {
            let why = format!(
                "{} on stream {:#x}: rank {rank}'s collective #{seq} of communicator group \
                 {} is {shape:?}, but rank {} called {:?} (every rank must make the same \
                 collectives in the same order)",
                self.call, part.stream, clique.id, round.first, round.shape
            );
            round.written = Some(false);
            state.fail_all(ncclResult_t::ncclInvalidUsage);
            clique.notify();
            violation(why);
        } else if round.written.is_none() {
            round.parts[rank] = Some(part);
            if round.parts.iter().all(Option::is_some) {
                let parts: Vec<Part> = round.parts.iter().flatten().copied().collect();
                let written = complete(&mut state, shape, &parts, self.call);
                state.rounds.get_mut(&seq).expect("joined").written = Some(written);
                clique.notify();
            } else {
                let waited;
                (state, waited) = self.wait(state, |s| {
                    s.rounds
                        .get(&seq)
                        .is_some_and(|r| r.written.is_some())
                        .then_some(())
                });
                if let Err(limit) = waited {
                    let round = state.rounds.get_mut(&seq).expect("joined");
                    round.parts[rank] = None;
                    let missing: Vec<usize> =
                        (0..n).filter(|&r| round.parts[r].is_none()).collect();
                    if let Some(limit) = limit {
                        violation(format!(
                            "{} on stream {:#x}: rank {rank} waited {limit:?} for ranks \
                             {missing:?} to reach collective #{seq} of communicator group {} \
                             and gave up ({})",
                            self.call,
                            part.stream,
                            clique.id,
                            stalled(&state)
                        ));
                    }
                }
            }
        }
        let round = state.rounds.get_mut(&seq).expect("joined");
        round.departed += 1;
        if round.departed == n {
            state.rounds.remove(&seq);
        }
    }

    /// Waits for the send matching this receive (`peer`'s `k`-th to this rank, expected to
    /// carry `count` elements of `dtype`), and writes what it sent to `buffer`.
    fn receive(
        &self,
        state: Guard<'_>,
        (peer, k, count, dtype): (usize, u64, usize, Dtype),
        buffer: u64,
        stream: u64,
    ) {
        let rank = self.comm.rank;
        let key = (peer, rank, k);
        let (mut state, mail) = self.wait(state, |s| s.mail.remove(&key));
        let mail = match mail {
            Ok(mail) => mail,
            Err(None) => return,
            Err(Some(limit)) => {
                let why = format!(
                    "{} on stream {stream:#x}: rank {rank} waited {limit:?} for send #{k} from \
                     rank {peer} and gave up ({})",
                    self.call,
                    stalled(&state)
                );
                drop(state);
                return violation(why);
            }
        };
        if (mail.count, mail.dtype) != (count, dtype) {
            for r in [peer, rank] {
                state.member(r).async_error = ncclResult_t::ncclInvalidUsage;
            }
            drop(state);
            return violation(format!(
                "{} on stream {stream:#x}: rank {rank}'s receive #{k} from rank {peer} takes \
                 {count} × {dtype:?}, but the matching send sent {} × {:?}",
                self.call, mail.count, mail.dtype
            ));
        }
        drop(state);
        if let Some(mut memory) = self.checked(memory(), buffer, mail.bytes.len(), stream) {
            // SAFETY: the destination was checked against a live allocation under this
            // lock; the source is the mail's own bytes.
            unsafe {
                memory.copy(
                    buffer,
                    mail.bytes.as_ptr() as usize as u64,
                    mail.bytes.len(),
                )
            };
            COLLECTIVES_RUN.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until `ready` finds what this rank waits for. `Err(None)`: the comm left the
    /// clique (aborted) meanwhile; `Err(Some(limit))`: the fake's bound passed (the comm's
    /// async error becomes `ncclSystemError`).
    fn wait<'a, T>(
        &self,
        mut state: Guard<'a>,
        mut ready: impl FnMut(&mut CliqueState) -> Option<T>,
    ) -> (Guard<'a>, Result<T, Option<Duration>>) {
        let limit = wait_limit(COLLECTIVE_WAIT);
        let deadline = Instant::now() + limit;
        loop {
            if let Some(found) = ready(&mut state) {
                return (state, Ok(found));
            }
            let me = state.member(self.comm.rank);
            if me.left {
                return (state, Err(None));
            }
            if Instant::now() >= deadline {
                me.async_error = ncclResult_t::ncclSystemError;
                return (state, Err(Some(limit)));
            }
            state = self.comm.clique.wait(state, deadline);
        }
    }
}

/// Says which ranks of `state` are gone (never joined, or left), for a stall's violation.
fn stalled(state: &CliqueState) -> String {
    let gone = state.absent();
    let gone = if gone.is_empty() {
        "every rank is still in the communicator group".to_string()
    } else {
        format!("ranks {gone:?} are not in the communicator group")
    };
    format!("{gone}; a stalled NCCL operation must be ended with ncclCommAbort")
}

/// Computes a round every rank joined (`parts`, by rank): reads every rank's send bytes and
/// writes every rank's result, after checking every buffer is still reachable. Whether it
/// wrote: not when a buffer was freed (a violation and a fault of that rank's device), a
/// rank's device faulted meanwhile, or [`fault_next_collective`] failed it.
fn complete(state: &mut CliqueState, shape: Shape, parts: &[Part], call: &str) -> bool {
    let n = parts.len();
    let (send_len, recv_len) = shape.lens(n).expect("checked at the call");
    match FAULT_NEXT.swap(0, Ordering::Relaxed) {
        0 => {}
        code => {
            let code = [
                ncclResult_t::ncclUnhandledCudaError,
                ncclResult_t::ncclSystemError,
                ncclResult_t::ncclInternalError,
                ncclResult_t::ncclRemoteError,
                ncclResult_t::ncclTimeout,
            ]
            .into_iter()
            .find(|c| *c as u32 == code)
            .unwrap_or(ncclResult_t::ncclSystemError);
            state.fail_all(code);
            return false;
        }
    }
    let mut memory = memory();
    if parts.iter().any(|p| sticky(p.device).is_some()) {
        return false; // a rank's device faulted while it waited: its host may free anything
    }
    for (rank, p) in parts.iter().enumerate() {
        let send = (shape.sends(rank), p.send, send_len);
        for (used, ptr, len) in [send, (true, p.recv, recv_len)] {
            if let (true, Err(why)) = (used, memory.check_on(ptr, len, p.device)) {
                drop(memory);
                let why = format!("rank {rank}'s buffer: {why}");
                illegal_address(p.device, p.stream, call, why);
                state.fail_all(ncclResult_t::ncclUnhandledCudaError);
                return false;
            }
        }
    }
    let sends: Vec<Option<Vec<u8>>> = parts
        .iter()
        .enumerate()
        .map(|(rank, p)| {
            shape.sends(rank).then(|| {
                let mut bytes = vec![0u8; send_len];
                // SAFETY: the source was checked against a live allocation under this lock;
                // the destination is `bytes`, `send_len` long.
                unsafe { memory.copy(bytes.as_mut_ptr() as usize as u64, p.send, send_len) };
                bytes
            })
        })
        .collect();
    for (p, result) in parts.iter().zip(shape.compute(&sends)) {
        // SAFETY: the destination was checked against a live allocation under this lock; the
        // source is the result's own bytes, `recv_len` long.
        unsafe { memory.copy(p.recv, result.as_ptr() as usize as u64, recv_len) };
    }
    COLLECTIVES_RUN.fetch_add(n as u64, Ordering::Relaxed);
    true
}

// ------------------------------------------------------------------ the checks at the call

/// The communicator and stream of an operation, checked: the comm is live and ready, has no
/// async error and its device has not faulted; the stream is live, of the comm's device, and
/// not capturing.
fn prepare(call: &'static str, comm: u64, stream: u64) -> NRet<(Arc<Comm>, Arc<Stream>)> {
    let comm = super::find_comm(comm, call)?;
    if !group::in_group() && !comm.ready() {
        return Err(fail(
            ncclResult_t::ncclInvalidUsage,
            "the communicator's initialisation has not completed (its ncclGroupEnd)",
        ));
    }
    match comm.async_error() {
        ncclResult_t::ncclSuccess => {}
        code => {
            return Err(fail(
                code,
                "the communicator has an asynchronous error (see ncclCommGetAsyncError)",
            ))
        }
    }
    if sticky(comm.device).is_some() {
        return Err(fail(
            ncclResult_t::ncclUnhandledCudaError,
            format!("device {} faulted", comm.device),
        ));
    }
    let stream = find_stream(stream, call).map_err(|_| {
        fail(
            ncclResult_t::ncclInvalidArgument,
            "not a live stream of the driver",
        )
    })?;
    if stream.device != comm.device {
        let why = format!(
            "{call} on a stream of device {} with communicator {:#x} of device {} (rank {}): \
             NCCL runs the operation on the communicator's device",
            stream.device, comm.handle, comm.device, comm.rank
        );
        violation(why.clone());
        return Err(fail(ncclResult_t::ncclInvalidUsage, why));
    }
    if stream.capture_status().is_some() {
        return Err(fail(
            ncclResult_t::ncclInvalidUsage,
            "NCCL operations in a stream capture are not modelled by the fake",
        ));
    }
    Ok((comm, stream))
}

/// Checks that `len` bytes at `ptr` (a `what` buffer) are memory the comm's device reaches:
/// `ncclInvalidArgument` if not (and another device's memory is a violation).
fn check_buffer(call: &str, ptr: u64, len: usize, device: u32, what: &str) -> NRet {
    reachable(ptr, len, device, call).map_err(|_| {
        fail(
            ncclResult_t::ncclInvalidArgument,
            format!(
                "the {what} buffer ({len} bytes at {ptr:#x}) is not memory device {device} \
                 reaches"
            ),
        )
    })
}

/// A rank number from the caller (`what`: root or peer): `ncclInvalidArgument` out of range.
fn rank_arg(value: std::ffi::c_int, nranks: usize, what: &str) -> NRet<usize> {
    usize::try_from(value)
        .ok()
        .filter(|&r| r < nranks)
        .ok_or_else(|| {
            fail(
                ncclResult_t::ncclInvalidArgument,
                format!("{what} {value} is not a rank of {nranks}"),
            )
        })
}

/// Enqueues `task` on `stream`, or keeps it for `ncclGroupEnd` inside a group.
fn submit(stream: Arc<Stream>, task: Task) {
    let op = Op::Nccl(Arc::new(task));
    if group::in_group() {
        group::defer(stream, op);
    } else {
        stream.enqueue(op);
    }
}

/// Checks and enqueues a collective of `shape` (a `root` rank number for broadcast is
/// checked here) with buffers `send` and `recv` on `stream`.
pub(crate) fn enqueue_collective(
    call: &'static str,
    comm: u64,
    stream: u64,
    shape: Shape,
    send: u64,
    recv: u64,
) -> NRet {
    let (comm, stream) = prepare(call, comm, stream)?;
    let n = comm.clique.nranks;
    let (send_len, recv_len) = shape.lens(n).ok_or_else(|| {
        fail(
            ncclResult_t::ncclInvalidArgument,
            "the count overflows the address space",
        )
    })?;
    if let Kind::Broadcast { root } = shape.kind {
        if root >= n {
            return Err(fail(
                ncclResult_t::ncclInvalidArgument,
                format!("root {root} is not a rank of {n}"),
            ));
        }
    }
    if shape.sends(comm.rank) {
        check_buffer(call, send, send_len, comm.device, "send")?;
    }
    check_buffer(call, recv, recv_len, comm.device, "receive")?;
    let seq = comm.next_collective();
    let work = Work::Collective {
        seq,
        shape,
        send,
        recv,
    };
    submit(stream, Task::new(comm, work, call));
    Ok(())
}

/// The root of a broadcast, checked as a rank of the communicator later
/// ([`enqueue_collective`]): `ncclInvalidArgument` if negative.
pub(crate) fn root_arg(root: std::ffi::c_int) -> NRet<usize> {
    usize::try_from(root).map_err(|_| {
        fail(
            ncclResult_t::ncclInvalidArgument,
            format!("root {root} is negative"),
        )
    })
}

/// Checks and enqueues a send (`send`) of `count` elements of `dtype` at `buffer` to `peer`,
/// or a receive from it into `buffer`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn enqueue_p2p(
    call: &'static str,
    comm: u64,
    stream: u64,
    peer: std::ffi::c_int,
    count: usize,
    dtype: Dtype,
    buffer: u64,
    send: bool,
) -> NRet {
    let (comm, stream) = prepare(call, comm, stream)?;
    let peer = rank_arg(peer, comm.clique.nranks, "peer")?;
    let len = count.checked_mul(dtype.size()).ok_or_else(|| {
        fail(
            ncclResult_t::ncclInvalidArgument,
            "the count overflows the address space",
        )
    })?;
    let what = if send { "send" } else { "receive" };
    check_buffer(call, buffer, len, comm.device, what)?;
    let k = comm.next_p2p(peer, send);
    let work = if send {
        Work::Send {
            peer,
            k,
            count,
            dtype,
            buffer,
        }
    } else {
        Work::Recv {
            peer,
            k,
            count,
            dtype,
            buffer,
        }
    };
    submit(stream, Task::new(comm, work, call));
    Ok(())
}

/// Whether the driver still has communicator `handle` (for `ncclGroupEnd`'s bookkeeping).
pub(crate) fn live(handle: u64) -> bool {
    driver().comms.contains_key(&handle)
}
