//! The exported NCCL API (`nccl*`, NCCL 2.23.5's C signatures), in the same library as the
//! fake CUDA driver, so that halcyon-cuda's NCCL engine, which opens libnccl by path and
//! resolves its symbols by name, runs its collectives on the fake's devices.
//!
//! What is modelled, in one process (ranks are fake devices, each driven from its own thread
//! or several from one thread with `ncclCommInitAll` or a group):
//!
//! * **Ids and communicators.** `ncclGetUniqueId` makes an id naming a new group of ranks (a
//!   *clique*); an id this process did not make is `ncclInvalidArgument`.
//!   `ncclCommInitRank` joins the clique on the device of the calling thread's current
//!   context (none: a violation and `ncclInvalidUsage`) and blocks until all its ranks joined
//!   (inside `ncclGroupStart`/`ncclGroupEnd`: until the group's end), at most 30 s, then
//!   `ncclSystemError`. A rank out of range, twice, or a different `nranks` is
//!   `ncclInvalidArgument`; two ranks on one device, `ncclInvalidUsage` (NCCL's "duplicate
//!   GPU"). `ncclCommInitAll` makes a clique of one communicator per listed device (each
//!   device's primary context must be retained). A communicator belongs to its device's
//!   primary context: one still alive when the context's last reference goes is a leak.
//! * **Collectives** (all-reduce, broadcast, reduce-scatter, all-gather) and **send/receive**
//!   are checked at the call (a null or destroyed communicator and a stream of another
//!   device are violations; buffers must be memory the communicator's device reaches for the
//!   bytes the call implies: `ncclInvalidArgument`; a root or peer out of range,
//!   `ncclInvalidArgument`; a communicator with an async error returns it), then enqueued on
//!   the stream. When the stream gets there, the rank joins the communicator's n-th
//!   collective, and the last rank to arrive reads every rank's send buffer and writes every
//!   rank's receive buffer through the memory model (memory freed meanwhile is a violation
//!   and faults that device, as for copies). Ranks calling different collectives at one
//!   position (kind, count, type, operator or root) is a violation, and every rank's async
//!   error becomes `ncclInvalidUsage`. The k-th send from rank a to rank b matches the k-th
//!   receive at b from a; a send leaves its bytes when its stream gets to it and completes
//!   (as a buffered send), a receive waits for its send. Sum, product, max, min and average
//!   of the 8-, 32- and 64-bit integers, f16, bf16, f32 and f64; in place works.
//! * **Stalls and aborts.** A rank whose peers never come waits, as NCCL does, until
//!   `ncclCommAbort` of its communicator: its waiting and queued operations then complete
//!   without writing (the stream moves on), the communicator is gone (as in NCCL, which frees
//!   it), and every other rank's async error becomes `ncclRemoteError`. The fake bounds the
//!   wait (60 s, or `HALCYON_FAKE_GPU_NCCL_WAIT_MS`, or
//!   [`crate::client::Fake::nccl_wait_limit`]): then it is a violation, the operation
//!   completes without writing, and the async error is `ncclSystemError`.
//!   `ncclCommDestroy` with operations still queued is a violation (they are dropped, as by
//!   an abort). [`crate::client::Fake::fault_next_collective`] fails the next collective.
//!
//! What it does not model: other processes (ids cannot be shared between processes), NCCL's
//! non-blocking communicators and configuration (`ncclCommInitRankConfig`), splitting,
//! `ncclReduce`, custom reduction operators (`ncclRedOpCreatePreMulSum`) and 8-bit floats
//! (`ncclInvalidArgument`), NCCL operations in a stream capture (`ncclInvalidUsage`), user
//! buffer registration, and the timing of a real interconnect. Group semantics are reduced
//! to what a single process needs (see [`group`]).

#![allow(non_snake_case)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{Arc, LazyLock, Mutex};

use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclResult_t, ncclUniqueId};
use ncclResult_t::{ncclInvalidArgument, ncclInvalidUsage, ncclSuccess};

use crate::ffi::{as_ptr, handle};
use crate::model::contract::{current_context, enter, lock, sticky, violation, Needs};
use crate::model::driver::{context_device, device, driver};

mod collective;
pub(crate) mod communicator;
mod group;
mod reduce;

use collective::{enqueue_collective, enqueue_p2p, root_arg, Kind, Shape};
use communicator::{next_clique, parse_id, wait_limit, Clique, Comm, INIT_WAIT};
use reduce::{Dtype, RedOp};

pub(crate) use collective::{fault_next_collective, Task};
pub(crate) use communicator::set_wait_limit;

/// The NCCL version the fake reports (`ncclGetVersion`): 2.23.5.
pub(crate) const NCCL_VERSION: c_int = 22305;

/// Why an NCCL call failed: the code it returns, and what `ncclGetLastError` then says.
pub(crate) struct Failure {
    code: ncclResult_t,
    why: String,
}

/// What an NCCL call's body returns.
pub(crate) type NRet<T = ()> = Result<T, Failure>;

/// A failure with `code` because of `why`.
pub(crate) fn fail(code: ncclResult_t, why: impl Into<String>) -> Failure {
    Failure {
        code,
        why: why.into(),
    }
}

/// The last error's text, for `ncclGetLastError`. Texts are kept for the process (interned),
/// so a pointer handed out stays valid.
static LAST_ERROR: Mutex<&'static CStr> = Mutex::new(c"");
static TEXTS: LazyLock<Mutex<HashMap<String, &'static CStr>>> = LazyLock::new(Mutex::default);

fn set_last_error(text: String) {
    let text = text.replace('\0', " ");
    let interned = *lock(&TEXTS).entry(text.clone()).or_insert_with(|| {
        let owned = CString::new(text).expect("NULs replaced");
        Box::leak(owned.into_boxed_c_str())
    });
    *lock(&LAST_ERROR) = interned;
}

/// Runs an NCCL call: the contract's check that it is not made from a host function, then
/// `body`; a failure's text becomes the last error.
fn nccl_call(name: &'static str, body: impl FnOnce() -> NRet) -> ncclResult_t {
    let result = match enter(name, Needs::Nothing) {
        Err(_) => Err(fail(ncclInvalidUsage, "called from a host function")),
        Ok(()) => body(),
    };
    match result {
        Ok(()) => ncclSuccess,
        Err(Failure { code, why }) => {
            set_last_error(format!("{name}: {why}"));
            code
        }
    }
}

/// Writes `value` through the out-pointer `out`: `ncclInvalidArgument` for null.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T, what: &str) -> NRet {
    // SAFETY: the caller's contract.
    unsafe { crate::ffi::put(out, value) }
        .map_err(|_| fail(ncclInvalidArgument, format!("{what} is null")))
}

/// The live communicator `comm`: a null, destroyed or unknown one is a violation and
/// `ncclInvalidArgument`.
pub(crate) fn find_comm(comm: u64, call: &str) -> NRet<Arc<Comm>> {
    if comm == 0 {
        violation(format!("{call} was passed a null communicator"));
        return Err(fail(ncclInvalidArgument, "the communicator is null"));
    }
    driver()
        .find(|d| &d.comms, comm, "NCCL communicator", call)
        .map_err(|_| {
            fail(
                ncclInvalidArgument,
                format!("{comm:#x} is not a live communicator"),
            )
        })
}

/// The device of the calling thread's current context (the device `ncclCommInitRank` puts its
/// rank on): none is a violation and `ncclInvalidUsage`. On a thread that chose a HIP device
/// (`hipSetDevice`), that device: RCCL puts its rank on the HIP runtime's current device.
fn current_context_device(call: &str) -> NRet<u32> {
    if let Some(device) = crate::model::contract::hip_device() {
        return Ok(device);
    }
    enter(call, Needs::Context).map_err(|code| {
        match sticky(crate::model::contract::current_device()) {
            Some(sticky) if sticky == code => fail(
                ncclResult_t::ncclUnhandledCudaError,
                "the current context's device faulted",
            ),
            _ => fail(
                ncclInvalidUsage,
                "no usable current context: NCCL puts the rank on the current device",
            ),
        }
    })?;
    context_device(current_context()).ok_or_else(|| fail(ncclInvalidUsage, "no current context"))
}

// ------------------------------------------------------------------ versions, ids, errors

/// `ncclGetVersion`: [`NCCL_VERSION`] (2.23.5).
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclGetVersion(version: *mut c_int) -> ncclResult_t {
    nccl_call("ncclGetVersion", || {
        // SAFETY: NCCL's contract: `version` is valid for one int.
        unsafe { put(version, NCCL_VERSION, "version") }
    })
}

/// `ncclGetUniqueId`: a fresh id naming a new communicator group of this process.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclGetUniqueId(id: *mut ncclUniqueId) -> ncclResult_t {
    nccl_call("ncclGetUniqueId", || {
        // SAFETY: NCCL's contract: `id` is valid for one ncclUniqueId.
        unsafe { put(id, communicator::new_id(), "id") }
    })
}

/// The result codes' descriptions (`ncclGetErrorString`).
fn describe(result: c_uint) -> &'static CStr {
    use ncclResult_t::*;
    let texts: [(ncclResult_t, &'static CStr); 9] = [
        (ncclSuccess, c"no error"),
        (
            ncclUnhandledCudaError,
            c"unhandled cuda error (a CUDA call failed)",
        ),
        (
            ncclSystemError,
            c"unhandled system error (a wait timed out, or a resource ran out)",
        ),
        (ncclInternalError, c"internal error"),
        (ncclInvalidArgument, c"invalid argument"),
        (ncclInvalidUsage, c"invalid usage"),
        (
            ncclRemoteError,
            c"remote process exited or there was a network error",
        ),
        (ncclInProgress, c"NCCL operation in progress"),
        (ncclTimeout, c"operation timed out"),
    ];
    texts
        .into_iter()
        .find(|(code, _)| *code as c_uint == result)
        .map_or(c"unknown result code", |(_, text)| text)
}

/// `ncclGetErrorString`: a static description of `result` (a number, so that any value a
/// caller passes is valid here).
#[no_mangle]
pub extern "C" fn ncclGetErrorString(result: c_uint) -> *const c_char {
    describe(result).as_ptr()
}

/// `ncclGetLastError`: the text of the last failure of any NCCL call in the process (as
/// NCCL's, whatever `comm` is), valid for the process's lifetime; empty if none failed.
#[no_mangle]
pub extern "C" fn ncclGetLastError(_comm: ncclComm_t) -> *const c_char {
    lock(&LAST_ERROR).as_ptr()
}

// ------------------------------------------------------------------ communicators

/// `ncclCommInitRank`: joins the communicator group `id` names as rank `rank` of `nranks`,
/// on the device of the calling thread's current context, and waits for every rank (inside a
/// group: `ncclGroupEnd` waits). See the [module docs](self).
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut ncclComm_t,
    nranks: c_int,
    id: ncclUniqueId,
    rank: c_int,
) -> ncclResult_t {
    nccl_call("ncclCommInitRank", || {
        if comm.is_null() {
            return Err(fail(ncclInvalidArgument, "comm is null"));
        }
        let device = current_context_device("ncclCommInitRank")?;
        let id = parse_id(&id).ok_or_else(|| {
            fail(
                ncclInvalidArgument,
                "the id was not made by this process's ncclGetUniqueId",
            )
        })?;
        let n = usize::try_from(nranks)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| {
                fail(
                    ncclInvalidArgument,
                    format!("nranks {nranks} is not positive"),
                )
            })?;
        let r = usize::try_from(rank)
            .ok()
            .filter(|&r| r < n)
            .ok_or_else(|| {
                fail(
                    ncclInvalidArgument,
                    format!("rank {rank} is not a rank of {n}"),
                )
            })?;
        let clique = Clique::of(id, n)?;
        let made = Comm::join(&clique, r, device)?;
        if group::in_group() {
            let h = made.handle;
            group::defer_init(made);
            // SAFETY: NCCL's contract: `comm` is valid for one ncclComm_t.
            return unsafe { put(comm, as_ptr(h), "comm") };
        }
        made.wait_ready(std::time::Instant::now() + wait_limit(INIT_WAIT))?;
        // SAFETY: NCCL's contract: `comm` is valid for one ncclComm_t.
        unsafe { put(comm, as_ptr(made.handle), "comm") }
    })
}

/// `ncclCommInitAll`: one communicator per device of `devlist` (`ndev` of them; null: devices
/// 0 to `ndev - 1`), ranks in list order, into `comms`. Each device's primary context must be
/// retained (the fake's communicators belong to it): a violation and `ncclInvalidUsage`
/// otherwise.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut ncclComm_t,
    ndev: c_int,
    devlist: *const c_int,
) -> ncclResult_t {
    nccl_call("ncclCommInitAll", || {
        let n = usize::try_from(ndev)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| fail(ncclInvalidArgument, format!("ndev {ndev} is not positive")))?;
        if comms.is_null() {
            return Err(fail(ncclInvalidArgument, "comms is null"));
        }
        let ordinals: Vec<c_int> = if devlist.is_null() {
            (0..ndev).collect()
        } else {
            // SAFETY: NCCL's contract: `devlist` holds `ndev` ints.
            unsafe { std::slice::from_raw_parts(devlist, n) }.to_vec()
        };
        let mut devices = Vec::with_capacity(n);
        for ordinal in ordinals {
            let d = device(ordinal)
                .map_err(|_| fail(ncclInvalidArgument, format!("{ordinal} is not a device")))?;
            if devices.contains(&d) {
                return Err(fail(ncclInvalidUsage, format!("duplicate GPU: device {d}")));
            }
            if driver().retains[d as usize] == 0 {
                let why = format!(
                    "ncclCommInitAll on device {d}, whose primary context nobody retains (the \
                     fake's communicators belong to the device's primary context)"
                );
                violation(why.clone());
                return Err(fail(ncclInvalidUsage, why));
            }
            devices.push(d);
        }
        let clique = Clique::of(next_clique(), n)?;
        let made: Vec<Arc<Comm>> = devices
            .iter()
            .enumerate()
            .map(|(r, &d)| Comm::join(&clique, r, d))
            .collect::<NRet<_>>()?;
        for (r, c) in made.iter().enumerate() {
            // SAFETY: NCCL's contract: `comms` holds `ndev` ncclComm_t.
            unsafe { comms.add(r).write(as_ptr(c.handle)) };
        }
        Ok(())
    })
}

/// Removes communicator `comm` from the driver (`None` for null, which NCCL accepts).
fn remove_comm(comm: ncclComm_t, call: &str) -> NRet<Option<Arc<Comm>>> {
    let h = handle(comm);
    if h == 0 {
        return Ok(None);
    }
    driver()
        .remove(|d| &mut d.comms, h, "NCCL communicator", call)
        .map(Some)
        .map_err(|_| {
            fail(
                ncclInvalidArgument,
                format!("{h:#x} is not a live communicator"),
            )
        })
}

/// `ncclCommDestroy`: the communicator is gone (null: nothing). Operations of it still queued
/// are a violation (NCCL requires them complete; `ncclCommAbort` drops them): they are
/// dropped, and the call returns `ncclInvalidUsage`.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t {
    nccl_call("ncclCommDestroy", || {
        let Some(c) = remove_comm(comm, "ncclCommDestroy")? else {
            return Ok(());
        };
        let queued = c.queued();
        c.leave(None);
        if queued > 0 {
            let why = format!(
                "ncclCommDestroy({:#x}) (rank {} of communicator group {}) with {queued} \
                 operations still queued: synchronise their streams first, or abort",
                c.handle, c.rank, c.clique.id
            );
            violation(why.clone());
            return Err(fail(ncclInvalidUsage, why));
        }
        Ok(())
    })
}

/// `ncclCommAbort`: the communicator is gone (null: nothing); its waiting and queued
/// operations complete without writing, and the other ranks' async error becomes
/// `ncclRemoteError`.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t {
    nccl_call("ncclCommAbort", || {
        if let Some(c) = remove_comm(comm, "ncclCommAbort")? {
            c.leave(Some(ncclResult_t::ncclRemoteError));
        }
        Ok(())
    })
}

/// `ncclCommGetAsyncError`: `ncclSuccess`, or the error an operation of the communicator met
/// (`ncclRemoteError`: a peer aborted; `ncclInvalidUsage`: mismatched collectives;
/// `ncclSystemError`: the fake's bound on a wait passed; `ncclUnhandledCudaError`: a device
/// faulted in a collective, or the communicator's device faulted).
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: ncclComm_t,
    result: *mut ncclResult_t,
) -> ncclResult_t {
    nccl_call("ncclCommGetAsyncError", || {
        let c = find_comm(handle(comm), "ncclCommGetAsyncError")?;
        let answer = match c.async_error() {
            ncclSuccess if sticky(c.device).is_some() => ncclResult_t::ncclUnhandledCudaError,
            answer => answer,
        };
        // SAFETY: NCCL's contract: `result` is valid for one ncclResult_t.
        unsafe { put(result, answer, "asyncError") }
    })
}

/// Answers `what(comm)` into `out` for a live communicator.
///
/// # Safety
/// `out` must be null or valid for one int.
unsafe fn query(
    call: &'static str,
    comm: ncclComm_t,
    out: *mut c_int,
    what: impl FnOnce(&Comm) -> usize,
) -> ncclResult_t {
    nccl_call(call, || {
        let c = find_comm(handle(comm), call)?;
        // SAFETY: the caller's contract.
        unsafe { put(out, what(&c) as c_int, "the out-pointer") }
    })
}

/// `ncclCommCount`: the communicator's number of ranks.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t {
    // SAFETY: NCCL's contract: `count` is valid for one int.
    unsafe { query("ncclCommCount", comm, count, |c| c.clique.nranks) }
}

/// `ncclCommCuDevice`: the communicator's device.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t {
    // SAFETY: NCCL's contract: `device` is valid for one int.
    unsafe { query("ncclCommCuDevice", comm, device, |c| c.device as usize) }
}

/// `ncclCommUserRank`: the communicator's rank.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t {
    // SAFETY: NCCL's contract: `rank` is valid for one int.
    unsafe { query("ncclCommUserRank", comm, rank, |c| c.rank) }
}

// ------------------------------------------------------------------ collectives

fn dtype_arg(datatype: c_uint) -> NRet<Dtype> {
    Dtype::from_raw(datatype).ok_or_else(|| {
        fail(
            ncclInvalidArgument,
            format!("data type {datatype} is not one the fake models"),
        )
    })
}

fn op_arg(op: c_uint) -> NRet<RedOp> {
    RedOp::from_raw(op).ok_or_else(|| {
        fail(
            ncclInvalidArgument,
            format!("reduction operator {op} is not one the fake models"),
        )
    })
}

/// `ncclAllReduce`: every rank's `recv` gets the element-wise reduction of every rank's
/// `send` (`count` elements). `datatype` and `op` are `ncclDataType_t` and `ncclRedOp_t`
/// values, taken as their numbers (the same ABI) so that any value is valid here.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclAllReduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_uint,
    op: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    nccl_call("ncclAllReduce", || {
        let shape = Shape {
            kind: Kind::AllReduce(op_arg(op)?),
            count,
            dtype: dtype_arg(datatype)?,
        };
        let (send, recv) = (handle(send.cast_mut()), handle(recv));
        enqueue_collective(
            "ncclAllReduce",
            handle(comm),
            handle(stream),
            shape,
            send,
            recv,
        )
    })
}

/// `ncclBroadcast`: every rank's `recv` gets rank `root`'s `send` (`count` elements; only
/// the root's `send` is read).
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclBroadcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: c_uint,
    root: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    nccl_call("ncclBroadcast", || {
        let shape = Shape {
            kind: Kind::Broadcast {
                root: root_arg(root)?,
            },
            count,
            dtype: dtype_arg(datatype)?,
        };
        let (send, recv) = (handle(send.cast_mut()), handle(recv));
        enqueue_collective(
            "ncclBroadcast",
            handle(comm),
            handle(stream),
            shape,
            send,
            recv,
        )
    })
}

/// `ncclReduceScatter`: each rank's `send` holds `nranks × recvcount` elements; rank r's
/// `recv` gets block r of their element-wise reduction.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclReduceScatter(
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    datatype: c_uint,
    op: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    nccl_call("ncclReduceScatter", || {
        let shape = Shape {
            kind: Kind::ReduceScatter(op_arg(op)?),
            count: recvcount,
            dtype: dtype_arg(datatype)?,
        };
        let (send, recv) = (handle(send.cast_mut()), handle(recv));
        enqueue_collective(
            "ncclReduceScatter",
            handle(comm),
            handle(stream),
            shape,
            send,
            recv,
        )
    })
}

/// `ncclAllGather`: every rank's `recv` (`nranks × sendcount` elements) gets rank r's `send`
/// as block r.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclAllGather(
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    datatype: c_uint,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    nccl_call("ncclAllGather", || {
        let shape = Shape {
            kind: Kind::AllGather,
            count: sendcount,
            dtype: dtype_arg(datatype)?,
        };
        let (send, recv) = (handle(send.cast_mut()), handle(recv));
        enqueue_collective(
            "ncclAllGather",
            handle(comm),
            handle(stream),
            shape,
            send,
            recv,
        )
    })
}

/// `ncclSend`: `count` elements of `send` to rank `peer`, matched with `peer`'s receive from
/// this rank of the same number (the k-th send with the k-th receive).
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclSend(
    send: *const c_void,
    count: usize,
    datatype: c_uint,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    nccl_call("ncclSend", || {
        let dtype = dtype_arg(datatype)?;
        let buffer = handle(send.cast_mut());
        enqueue_p2p(
            "ncclSend",
            handle(comm),
            handle(stream),
            peer,
            count,
            dtype,
            buffer,
            true,
        )
    })
}

/// `ncclRecv`: `count` elements from rank `peer` into `recv`.
///
/// # Safety
/// NCCL's contract for the call.
#[no_mangle]
pub unsafe extern "C" fn ncclRecv(
    recv: *mut c_void,
    count: usize,
    datatype: c_uint,
    peer: c_int,
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> ncclResult_t {
    nccl_call("ncclRecv", || {
        let dtype = dtype_arg(datatype)?;
        enqueue_p2p(
            "ncclRecv",
            handle(comm),
            handle(stream),
            peer,
            count,
            dtype,
            handle(recv),
            false,
        )
    })
}

/// `ncclGroupStart`: opens a group on the calling thread (see [`group`]).
#[no_mangle]
pub extern "C" fn ncclGroupStart() -> ncclResult_t {
    nccl_call("ncclGroupStart", || {
        group::start();
        Ok(())
    })
}

/// `ncclGroupEnd`: closes the calling thread's group; the outermost waits for the
/// communicators initialised in it and enqueues its operations (see [`group`]).
#[no_mangle]
pub extern "C" fn ncclGroupEnd() -> ncclResult_t {
    nccl_call("ncclGroupEnd", group::end)
}
