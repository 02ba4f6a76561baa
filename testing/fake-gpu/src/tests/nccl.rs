//! The fake NCCL: communicators from unique ids joined from two threads on devices 0 and 1,
//! the collectives and send/receive, aborts of stalled work, and the contract's checks.

use std::ffi::{c_int, c_uint, CStr};
use std::sync::Barrier;
use std::time::Duration;

use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};
use half::f16;
use ncclResult_t::*;

use super::*;
use crate::ffi::handle;
use crate::nccl::*;

const F32: c_uint = ncclDataType_t::ncclFloat32 as c_uint;
const I32: c_uint = ncclDataType_t::ncclInt32 as c_uint;
const F16: c_uint = ncclDataType_t::ncclFloat16 as c_uint;
const U8: c_uint = ncclDataType_t::ncclUint8 as c_uint;
const SUM: c_uint = ncclRedOp_t::ncclSum as c_uint;
const MAX: c_uint = ncclRedOp_t::ncclMax as c_uint;
const MIN: c_uint = ncclRedOp_t::ncclMin as c_uint;

fn unique_id() -> ncclUniqueId {
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, ncclSuccess);
    id
}

fn last_error() -> String {
    // SAFETY: the fake's last error is a NUL-terminated string kept for the process.
    unsafe { CStr::from_ptr(ncclGetLastError(null_mut())) }
        .to_string_lossy()
        .into_owned()
}

/// Retains device `device`'s primary context (balanced by [`release`]).
fn retain(device: c_int) {
    let mut context = null_mut();
    // SAFETY: a valid out-pointer.
    let retained = unsafe { cuDevicePrimaryCtxRetain(&mut context, device) };
    assert_eq!(retained, CUresult::CUDA_SUCCESS);
}

fn release(device: c_int) {
    // SAFETY: balances a retain.
    let released = unsafe { cuDevicePrimaryCtxRelease_v2(device) };
    assert_eq!(released, CUresult::CUDA_SUCCESS);
}

/// A stream of device `device` (made current on this thread, and left current).
fn stream_on(device: u32) -> *mut c_void {
    make_current(device);
    let mut s = null_mut();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { cuStreamCreate(&mut s, 1) }, CUresult::CUDA_SUCCESS);
    s
}

fn upload<T: Copy>(values: &[T]) -> u64 {
    let p = alloc(std::mem::size_of_val(values).max(1));
    // SAFETY: `values` is valid for its bytes; `p` holds as many.
    let copied =
        unsafe { cuMemcpyHtoD_v2(p, values.as_ptr().cast(), std::mem::size_of_val(values)) };
    assert_eq!(copied, CUresult::CUDA_SUCCESS);
    p
}

fn download<T: Copy + Default>(src: u64, n: usize) -> Vec<T> {
    let mut out = vec![T::default(); n];
    // SAFETY: `out` holds `n` values.
    let copied = unsafe {
        cuMemcpyDtoH_v2(
            out.as_mut_ptr().cast(),
            src,
            std::mem::size_of_val(&out[..]),
        )
    };
    assert_eq!(copied, CUresult::CUDA_SUCCESS);
    out
}

fn sync(s: *mut c_void) {
    // SAFETY: a live stream.
    assert_eq!(unsafe { cuStreamSynchronize(s) }, CUresult::CUDA_SUCCESS);
}

/// Waits for everything enqueued on `s` so far, even on a faulted device (whose
/// `cuStreamSynchronize` answers at once).
fn drain(s: *mut c_void) {
    let stream = crate::model::stream::find_stream(handle(s), "drain").expect("a live stream");
    let _ = stream.synchronize();
}

fn free(p: u64) {
    // SAFETY: an allocation of this test's, freed once.
    assert_eq!(unsafe { cuMemFree_v2(p) }, CUresult::CUDA_SUCCESS);
}

fn destroy_stream(s: *mut c_void) {
    // SAFETY: a live stream, destroyed once.
    assert_eq!(unsafe { cuStreamDestroy_v2(s) }, CUresult::CUDA_SUCCESS);
}

fn async_error(comm: ncclComm_t) -> ncclResult_t {
    let mut result = ncclInternalError;
    // SAFETY: a live communicator; a valid out-pointer.
    let code = unsafe { ncclCommGetAsyncError(comm, &mut result) };
    assert_eq!(code, ncclSuccess);
    result
}

fn all_reduce(
    send: u64,
    recv: u64,
    count: usize,
    dtype: c_uint,
    op: c_uint,
    comm: ncclComm_t,
    s: *mut c_void,
) -> ncclResult_t {
    // SAFETY: device addresses and handles of the fake's; the fake checks them.
    unsafe { ncclAllReduce(as_ptr(send), as_ptr(recv), count, dtype, op, comm, s.cast()) }
}

fn stats() -> crate::FakeStats {
    let mut stats = crate::FakeStats::default();
    // SAFETY: a valid out-pointer.
    unsafe { crate::controls::halcyon_fake_gpu_stats(&mut stats) };
    stats
}

fn as_ptr<T>(address: u64) -> *mut T {
    address as usize as *mut T
}

/// One rank, on its own thread: its device's primary context retained and current, a
/// stream, and a communicator once [`Rank::init`] joined.
struct Rank {
    rank: usize,
    device: u32,
    stream: *mut c_void,
    comm: ncclComm_t,
    memory: Vec<u64>,
}

impl Rank {
    fn open(device: u32) -> Rank {
        retain(device as c_int);
        Rank {
            rank: device as usize,
            device,
            stream: stream_on(device),
            comm: null_mut(),
            memory: Vec::new(),
        }
    }

    fn init(&mut self, id: ncclUniqueId, nranks: c_int) -> ncclResult_t {
        // SAFETY: a valid out-pointer.
        unsafe { ncclCommInitRank(&mut self.comm, nranks, id, self.rank as c_int) }
    }

    fn upload<T: Copy>(&mut self, values: &[T]) -> u64 {
        let p = upload(values);
        self.memory.push(p);
        p
    }

    fn zeroed(&mut self, bytes: usize) -> u64 {
        let p = alloc(bytes);
        self.memory.push(p);
        p
    }

    /// The `n` values at `src` once the stream's work is done.
    fn read<T: Copy + Default>(&self, src: u64, n: usize) -> Vec<T> {
        sync(self.stream);
        download(src, n)
    }

    fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        dtype: c_uint,
        op: c_uint,
    ) -> ncclResult_t {
        all_reduce(send, recv, count, dtype, op, self.comm, self.stream)
    }

    /// Destroys the communicator (if any), frees the memory and the stream, and releases the
    /// context.
    fn close(self) {
        sync(self.stream);
        if !self.comm.is_null() {
            // SAFETY: a live communicator, destroyed once.
            assert_eq!(unsafe { ncclCommDestroy(self.comm) }, ncclSuccess);
        }
        self.memory.into_iter().for_each(free);
        destroy_stream(self.stream);
        release(self.device as c_int);
    }
}

/// Runs `body` for ranks 0 and 1 of a communicator of `id`, each on its own thread on its
/// own device, joined there with `ncclCommInitRank`; the ranks are closed after.
fn on_two_ranks<T: Send>(
    id: ncclUniqueId,
    body: impl Fn(&mut Rank, &Barrier) -> T + Sync,
) -> Vec<T> {
    let barrier = Barrier::new(2);
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2)
            .map(|device| {
                let (body, barrier) = (&body, &barrier);
                scope.spawn(move || {
                    let mut rank = Rank::open(device);
                    assert_eq!(rank.init(id, 2), ncclSuccess, "{}", last_error());
                    let out = body(&mut rank, barrier);
                    rank.close();
                    out
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("the rank's thread"))
            .collect()
    })
}

#[test]
fn nccl_version_ids_and_argument_errors() {
    let mut session = Session::new();
    let mut version = 0;
    // SAFETY: valid out-pointers and arguments; some wrong on purpose (the cases under test).
    unsafe {
        assert_eq!(ncclGetVersion(&mut version), ncclSuccess);
        assert_eq!(version, 22305);
        let id = unique_id();
        let mut forged = id;
        forged.internal[0] ^= 1;
        let zeroed = ncclUniqueId { internal: [0; 128] };
        let mut comm = null_mut();
        for bad in [forged, zeroed] {
            assert_eq!(ncclCommInitRank(&mut comm, 2, bad, 0), ncclInvalidArgument);
            assert!(last_error().contains("ncclGetUniqueId"), "{}", last_error());
        }
        assert_eq!(ncclCommInitRank(&mut comm, 2, id, 2), ncclInvalidArgument);
        assert_eq!(ncclCommInitRank(&mut comm, 0, id, 0), ncclInvalidArgument);
        assert!(comm.is_null());
        let text = CStr::from_ptr(ncclGetErrorString(ncclInvalidUsage as c_uint));
        assert_eq!(text.to_str(), Ok("invalid usage"));
        let text = CStr::from_ptr(ncclGetErrorString(1000));
        assert_eq!(text.to_str(), Ok("unknown result code"));
        assert_eq!(ncclGroupEnd(), ncclInvalidUsage);
        assert!(last_error().contains("without ncclGroupStart"));
        // Null communicators: destroy and abort accept them, queries are violations.
        assert_eq!(ncclCommDestroy(null_mut()), ncclSuccess);
        assert_eq!(ncclCommAbort(null_mut()), ncclSuccess);
        let mut count = 0;
        assert_eq!(ncclCommCount(null_mut(), &mut count), ncclInvalidArgument);
    }
    // A thread without a current context cannot say which device its rank is on.
    let id = unique_id();
    std::thread::spawn(move || {
        let mut comm = null_mut();
        // SAFETY: a valid out-pointer; no current context (the case under test).
        let code = unsafe { ncclCommInitRank(&mut comm, 2, id, 0) };
        assert_eq!(code, ncclInvalidUsage);
    })
    .join()
    .expect("the thread");
    let found = session.release();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].contains("null communicator"), "{found:?}");
    assert!(
        found[1].contains("without a usable current context"),
        "{found:?}"
    );
}

#[test]
fn nccl_init_rank_from_two_threads_and_all_reduce() {
    let mut session = Session::new();
    let before = stats();
    let id = unique_id();
    let n = 1000;
    let results = on_two_ranks(id, |rank, _| {
        let (mut count, mut device, mut user_rank) = (0, -1, -1);
        // SAFETY: a live communicator; valid out-pointers.
        unsafe {
            assert_eq!(ncclCommCount(rank.comm, &mut count), ncclSuccess);
            assert_eq!(ncclCommCuDevice(rank.comm, &mut device), ncclSuccess);
            assert_eq!(ncclCommUserRank(rank.comm, &mut user_rank), ncclSuccess);
        }
        assert_eq!(
            (count, device, user_rank),
            (2, rank.device as c_int, rank.rank as c_int)
        );
        assert_eq!(stats().nccl_comms, 2);
        let r = rank.rank as f32;
        // Sum of f32.
        let values: Vec<f32> = (0..n).map(|i| i as f32 + 1000.0 * r).collect();
        let send = rank.upload(&values);
        let recv = rank.zeroed(4 * n);
        assert_eq!(rank.all_reduce(send, recv, n, F32, SUM), ncclSuccess);
        let sums: Vec<f32> = rank.read(recv, n);
        // Max of i32, in place.
        let ints: Vec<i32> = (0..n as i32)
            .map(|i| if rank.rank == 0 { i } else { 500 - i })
            .collect();
        let both = rank.upload(&ints);
        assert_eq!(rank.all_reduce(both, both, n, I32, MAX), ncclSuccess);
        let maxes: Vec<i32> = rank.read(both, n);
        // Sum of f16.
        let halves: Vec<f16> = (0..n)
            .map(|i| f16::from_f32((i % 64) as f32 * 0.5 + r))
            .collect();
        let hsend = rank.upload(&halves);
        let hrecv = rank.zeroed(2 * n);
        assert_eq!(rank.all_reduce(hsend, hrecv, n, F16, SUM), ncclSuccess);
        let hsums: Vec<f16> = rank.read(hrecv, n);
        (sums, maxes, hsums)
    });
    for (sums, maxes, hsums) in &results {
        for i in 0..n {
            assert_eq!(sums[i], 2.0 * i as f32 + 1000.0);
            assert_eq!(maxes[i], (i as i32).max(500 - i as i32));
            assert_eq!(hsums[i], f16::from_f32((i % 64) as f32 + 1.0));
        }
    }
    let after = stats();
    assert_eq!(after.nccl_comms, 0);
    assert_eq!(after.collectives_run - before.collectives_run, 6);
    assert!(session.release().is_empty());
}

#[test]
fn nccl_all_gather_reduce_scatter_and_broadcast() {
    let mut session = Session::new();
    let results = on_two_ranks(unique_id(), |rank, _| {
        let r = rank.rank as i32;
        // All-gather: block r of every rank's recv is rank r's send.
        let send = rank.upload(&[10 * r, 10 * r + 1, 10 * r + 2]);
        let gathered = rank.zeroed(4 * 6);
        // SAFETY: the fake's addresses and handles.
        let code = unsafe {
            ncclAllGather(
                as_ptr(send),
                as_ptr(gathered),
                3,
                I32,
                rank.comm,
                rank.stream.cast(),
            )
        };
        assert_eq!(code, ncclSuccess);
        // Reduce-scatter (min): rank r gets block r of the reduction.
        let values: Vec<i32> = (0..4).map(|i| if r == 0 { i } else { 3 - i }).collect();
        let send = rank.upload(&values);
        let scattered = rank.zeroed(4 * 2);
        // SAFETY: as above.
        let code = unsafe {
            ncclReduceScatter(
                as_ptr(send),
                as_ptr(scattered),
                2,
                I32,
                MIN,
                rank.comm,
                rank.stream.cast(),
            )
        };
        assert_eq!(code, ncclSuccess);
        // Broadcast from rank 1 (rank 0's send is not read: null).
        let (send, recv) = if r == 1 {
            let b = rank.upload(&[7u8, 8, 9]);
            (b, b)
        } else {
            (0, rank.zeroed(3))
        };
        // SAFETY: as above.
        let code = unsafe {
            ncclBroadcast(
                as_ptr(send),
                as_ptr(recv),
                3,
                U8,
                1,
                rank.comm,
                rank.stream.cast(),
            )
        };
        assert_eq!(code, ncclSuccess);
        // SAFETY: as above; a root that is no rank.
        let code = unsafe {
            ncclBroadcast(
                as_ptr(send),
                as_ptr(recv),
                3,
                U8,
                2,
                rank.comm,
                rank.stream.cast(),
            )
        };
        assert_eq!(code, ncclInvalidArgument);
        (
            rank.read::<i32>(gathered, 6),
            rank.read::<i32>(scattered, 2),
            rank.read::<u8>(recv, 3),
        )
    });
    assert_eq!(results[0].0, [0, 1, 2, 10, 11, 12]);
    assert_eq!(results[1].0, [0, 1, 2, 10, 11, 12]);
    assert_eq!(results[0].1, [0, 1]);
    assert_eq!(results[1].1, [1, 0]);
    assert_eq!(results[0].2, [7, 8, 9]);
    assert_eq!(results[1].2, [7, 8, 9]);
    assert!(session.release().is_empty());
}

#[test]
fn nccl_send_and_recv_pair_in_order_in_groups() {
    let mut session = Session::new();
    let results = on_two_ranks(unique_id(), |rank, _| {
        let r = rank.rank as u32;
        let peer = 1 - rank.rank as c_int;
        let first = rank.upload(&[100 + r, 200 + r]);
        let second = rank.upload(&[300 + r, 400 + r]);
        let (a, b) = (rank.zeroed(8), rank.zeroed(8));
        let (comm, s) = (rank.comm, rank.stream.cast());
        // Receives before sends on both ranks: the group makes it work.
        // SAFETY: the fake's addresses and handles.
        unsafe {
            assert_eq!(ncclGroupStart(), ncclSuccess);
            assert_eq!(ncclRecv(as_ptr(a), 2, I32, peer, comm, s), ncclSuccess);
            assert_eq!(ncclRecv(as_ptr(b), 2, I32, peer, comm, s), ncclSuccess);
            assert_eq!(ncclSend(as_ptr(first), 2, I32, peer, comm, s), ncclSuccess);
            assert_eq!(ncclSend(as_ptr(second), 2, I32, peer, comm, s), ncclSuccess);
            assert_eq!(
                ncclSend(as_ptr(first), 2, I32, 2, comm, s),
                ncclInvalidArgument
            );
            assert_eq!(ncclGroupEnd(), ncclSuccess);
        }
        (rank.read::<u32>(a, 2), rank.read::<u32>(b, 2))
    });
    assert_eq!(results[0], (vec![101, 201], vec![301, 401]));
    assert_eq!(results[1], (vec![100, 200], vec![300, 400]));
    assert!(session.release().is_empty());
}

#[test]
fn nccl_abort_releases_a_stalled_collective_and_fails_the_peer() {
    let mut session = Session::new();
    on_two_ranks(unique_id(), |rank, barrier| {
        let send = rank.upload(&[1.0f32; 16]);
        let recv = rank.zeroed(64);
        if rank.rank == 0 {
            assert_eq!(rank.all_reduce(send, recv, 16, F32, SUM), ncclSuccess);
            std::thread::sleep(Duration::from_millis(50));
            let stream =
                crate::model::stream::find_stream(handle(rank.stream), "test").expect("live");
            assert!(!stream.is_idle(), "waits for rank 1, which never comes");
            // SAFETY: a live communicator, aborted once.
            assert_eq!(unsafe { ncclCommAbort(rank.comm) }, ncclSuccess);
            rank.comm = null_mut();
            assert_eq!(rank.read::<f32>(recv, 16), vec![0.0; 16], "nothing written");
        }
        barrier.wait();
        if rank.rank == 1 {
            assert_eq!(async_error(rank.comm), ncclRemoteError);
            assert_eq!(rank.all_reduce(send, recv, 16, F32, SUM), ncclRemoteError);
        }
    });
    assert!(session.release().is_empty());
}

#[test]
fn nccl_contract_violations_wrong_stream_and_mismatched_collectives() {
    let mut session = Session::new();
    let codes = on_two_ranks(unique_id(), |rank, barrier| {
        let send = rank.upload(&[1i32; 8]);
        let recv = rank.zeroed(32);
        let mut codes = Vec::new();
        if rank.rank == 0 {
            // A stream of device 1 with device 0's communicator (rank 1 holds device 1's
            // context until the barrier).
            let other = stream_on(1);
            make_current(0);
            codes.push(all_reduce(send, recv, 8, I32, SUM, rank.comm, other));
            destroy_stream(other);
        }
        barrier.wait();
        // Mismatched counts at collective #1.
        let count = if rank.rank == 0 { 4 } else { 8 };
        codes.push(rank.all_reduce(send, recv, count, I32, SUM));
        sync(rank.stream);
        codes.push(async_error(rank.comm));
        codes
    });
    assert_eq!(codes[0], [ncclInvalidUsage, ncclSuccess, ncclInvalidUsage]);
    assert_eq!(codes[1], [ncclSuccess, ncclInvalidUsage]);
    let found = session.release();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].contains("on a stream of device 1 with communicator"),
        "{found:?}"
    );
    assert!(
        found[1].contains("every rank must make the same collectives"),
        "{found:?}"
    );
}

/// `ncclCommInitAll` and a group from one thread; memory freed before a collective ran;
/// destroying a communicator with work queued; a leaked communicator.
#[test]
fn nccl_init_all_freed_memory_queued_destroy_and_leak() {
    let mut session = Session::new();
    retain(1);
    let mut comms: [ncclComm_t; 2] = [null_mut(); 2];
    // SAFETY: room for two communicators.
    let code = unsafe { ncclCommInitAll(comms.as_mut_ptr(), 2, null_mut()) };
    assert_eq!(code, ncclSuccess);
    let streams = [stream_on(0), stream_on(1)];
    let x1 = upload(&[3.0f32, 4.0]);
    make_current(0);
    let x0 = upload(&[1.0f32, 2.0]);
    // One thread drives both ranks: a group keeps the first rank's wait from blocking it.
    assert_eq!(ncclGroupStart(), ncclSuccess);
    for (r, x) in [x0, x1].into_iter().enumerate() {
        assert_eq!(
            all_reduce(x, x, 2, F32, SUM, comms[r], streams[r]),
            ncclSuccess
        );
    }
    assert_eq!(ncclGroupEnd(), ncclSuccess);
    sync(streams[0]);
    assert_eq!(download::<f32>(x0, 2), [4.0, 6.0]);
    assert_eq!(download::<f32>(x1, 2), [4.0, 6.0]);
    // Rank 1's buffer freed while its collective waits for rank 0 (held at the gate): found
    // when rank 0 arrives; device 1 faults.
    gate(streams[0]);
    for (r, x) in [x0, x1].into_iter().enumerate() {
        assert_eq!(
            all_reduce(x, x, 2, F32, SUM, comms[r], streams[r]),
            ncclSuccess
        );
    }
    std::thread::sleep(Duration::from_millis(20));
    make_current(1);
    free(x1);
    open_gate();
    make_current(0);
    sync(streams[0]);
    drain(streams[1]);
    let found = session.new_violations();
    assert!(
        found.len() == 1
            && found[0].contains("rank 1's buffer")
            && found[0].contains("already freed"),
        "{found:?}"
    );
    assert_eq!(async_error(comms[0]), ncclUnhandledCudaError);
    assert_eq!(async_error(comms[1]), ncclUnhandledCudaError);
    assert_eq!(
        all_reduce(x0, x0, 2, F32, SUM, comms[0], streams[0]),
        ncclUnhandledCudaError,
        "the async error, at the call"
    );
    // SAFETY: live communicators, each destroyed once.
    unsafe {
        assert_eq!(ncclCommDestroy(comms[0]), ncclSuccess);
        assert_eq!(ncclCommDestroy(comms[1]), ncclSuccess);
    }
    // Device 1 faulted: what it still holds is excused.
    release(1);
    // A fresh pair: destroying a communicator with work queued is a violation (the work is
    // dropped); one left alive is a leak when its context goes.
    retain(1);
    // SAFETY: room for two communicators; two device ordinals.
    let code = unsafe { ncclCommInitAll(comms.as_mut_ptr(), 2, [0, 1].as_ptr()) };
    assert_eq!(code, ncclSuccess);
    let s1 = stream_on(1);
    let y1 = upload(&[1u8]);
    gate(s1);
    assert_eq!(all_reduce(y1, y1, 1, U8, SUM, comms[1], s1), ncclSuccess);
    // SAFETY: a live communicator with work queued (the case under test).
    assert_eq!(unsafe { ncclCommDestroy(comms[1]) }, ncclInvalidUsage);
    open_gate();
    sync(s1);
    assert_eq!(download::<u8>(y1, 1), [1], "dropped");
    free(y1);
    destroy_stream(s1);
    make_current(0);
    free(x0);
    destroy_stream(streams[0]);
    release(1);
    assert_eq!(stats().nccl_comms, 1);
    let found = session.release();
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[1].contains("operations still queued"), "{found:?}");
    assert!(found[2].contains("1 NCCL communicators"), "{found:?}");
    assert_eq!(stats().nccl_comms, 0);
}

#[test]
fn nccl_bounded_waits_and_faulted_collectives() {
    let mut session = Session::new();
    set_wait_limit(200);
    // A rank alone: its initialisation gives up.
    let mut comm = null_mut();
    // SAFETY: a valid out-pointer.
    let code = unsafe { ncclCommInitRank(&mut comm, 2, unique_id(), 0) };
    assert_eq!(code, ncclSystemError);
    assert!(comm.is_null());
    assert_eq!(stats().nccl_comms, 0);
    retain(1);
    let streams = [stream_on(0), stream_on(1)];
    let x1 = upload(&[5i32]);
    make_current(0);
    let x0 = upload(&[5i32]);
    let mut comms: [ncclComm_t; 2] = [null_mut(); 2];
    // A faulted collective: nothing written, every rank's async error set.
    // SAFETY: room for two communicators; the fake's addresses and handles.
    unsafe {
        assert_eq!(
            ncclCommInitAll(comms.as_mut_ptr(), 2, null_mut()),
            ncclSuccess
        );
        crate::controls::halcyon_fake_gpu_fault_next_collective(ncclRemoteError as c_uint);
        assert_eq!(ncclGroupStart(), ncclSuccess);
        assert_eq!(
            all_reduce(x0, x0, 1, I32, SUM, comms[0], streams[0]),
            ncclSuccess
        );
        assert_eq!(ncclGroupStart(), ncclSuccess, "nested");
        assert_eq!(
            all_reduce(x1, x1, 1, I32, SUM, comms[1], streams[1]),
            ncclSuccess
        );
        assert_eq!(ncclGroupEnd(), ncclSuccess);
        let s0 = crate::model::stream::find_stream(handle(streams[0]), "test").expect("live");
        assert!(s0.is_idle(), "held by the group until its end");
        assert_eq!(ncclGroupEnd(), ncclSuccess);
    }
    sync(streams[0]);
    drain(streams[1]);
    assert_eq!(download::<i32>(x0, 1), [5]);
    assert_eq!(async_error(comms[0]), ncclRemoteError);
    assert_eq!(async_error(comms[1]), ncclRemoteError);
    // SAFETY: live communicators, each destroyed once; room for two.
    unsafe {
        assert_eq!(ncclCommDestroy(comms[0]), ncclSuccess);
        assert_eq!(ncclCommDestroy(comms[1]), ncclSuccess);
        assert_eq!(
            ncclCommInitAll(comms.as_mut_ptr(), 2, null_mut()),
            ncclSuccess
        );
    }
    // Rank 0 alone in a collective: after the bound, a violation, and the stream moves on.
    assert_eq!(
        all_reduce(x0, x0, 1, I32, SUM, comms[0], streams[0]),
        ncclSuccess
    );
    sync(streams[0]);
    assert_eq!(async_error(comms[0]), ncclSystemError);
    assert_eq!(async_error(comms[1]), ncclSuccess);
    let found = session.new_violations();
    assert!(
        found.len() == 1 && found[0].contains("gave up"),
        "{found:?}"
    );
    set_wait_limit(0);
    // SAFETY: live communicators, each ended once.
    unsafe {
        assert_eq!(ncclCommAbort(comms[0]), ncclSuccess);
        assert_eq!(async_error(comms[1]), ncclRemoteError);
        assert_eq!(ncclCommDestroy(comms[1]), ncclSuccess);
    }
    free(x0);
    destroy_stream(streams[0]);
    make_current(1);
    free(x1);
    destroy_stream(streams[1]);
    make_current(0);
    release(1);
    assert_eq!(session.release().len(), 1);
}
