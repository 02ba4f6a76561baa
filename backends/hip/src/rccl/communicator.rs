//! RCCL as the stream layer's [`CommunicatorApi`]: the translation table from halcyon's
//! collectives to RCCL's calls, for one communicator on one HIP device.

use std::ffi::{c_int, c_void};

use halcyon::backend::CollectiveKind;
use halcyon::{ElementType, Error, ReduceOp, Result, StatusCode};
use halcyon_stream::collectives::{CommCall, CommHandle, CommunicatorApi, UNIQUE_ID_BYTES};
use halcyon_stream::StreamHandle;

use super::{hipStream_t, ncclComm_t, ncclEnum, ncclUniqueId, Rccl};
use crate::result::Hip;

/// One RCCL communicator's side of the table: the library, and the device it runs on (made
/// current around the calls that need it).
pub struct HipRccl {
    rccl: &'static Rccl,
    hip: Hip,
    device: i32,
}

impl HipRccl {
    /// The table for a communicator on `device`.
    pub(crate) fn new(rccl: &'static Rccl, hip: Hip, device: i32) -> HipRccl {
        HipRccl { rccl, hip, device }
    }
}

fn comm(handle: CommHandle) -> ncclComm_t {
    handle.0 as usize as ncclComm_t
}

/// RCCL's `ncclDataType_t` for `element` (`rccl.h`'s numbering, NCCL's).
fn datatype(element: ElementType) -> Result<ncclEnum> {
    Ok(match element {
        ElementType::I8 => 0,
        ElementType::U8 => 1,
        ElementType::I32 => 2,
        ElementType::U32 => 3,
        ElementType::I64 => 4,
        ElementType::U64 => 5,
        ElementType::F16 => 6,
        ElementType::F32 => 7,
        ElementType::F64 => 8,
        ElementType::BF16 => 9,
        other => {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!("halcyon-hip does not map {other} to an RCCL type"),
            ))
        }
    })
}

/// RCCL's `ncclRedOp_t` for `op`.
fn reduce(op: Option<ReduceOp>) -> Result<ncclEnum> {
    Ok(match op {
        Some(ReduceOp::Sum) => 0,
        Some(ReduceOp::Prod) => 1,
        Some(ReduceOp::Max) => 2,
        Some(ReduceOp::Min) => 3,
        other => {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!("halcyon-hip does not map {other:?} to an RCCL reduction"),
            ))
        }
    })
}

// SAFETY: each method calls RCCL as documented, and `enqueue` reaches only the call's ranges.
unsafe impl CommunicatorApi for HipRccl {
    fn engine(&self) -> &'static str {
        "rccl"
    }

    fn unique_id(&self) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let mut id = ncclUniqueId { internal: [0; 128] };
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.rccl.calls().ncclGetUniqueId)(&mut id) };
        self.rccl.check(code, None, || "ncclGetUniqueId".into())?;
        Ok(id.internal.map(|c| c as u8))
    }

    fn join(&self, count: u32, id: &[u8; UNIQUE_ID_BYTES], rank: u32) -> Result<CommHandle> {
        let id = ncclUniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        let int = |n: u32| c_int::try_from(n).unwrap_or(c_int::MAX);
        let _bound = crate::api::bind_device(self.hip, self.device)?;
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is an out-pointer; the device is current, so RCCL joins on it.
        let code =
            unsafe { (self.rccl.calls().ncclCommInitRank)(&mut comm, int(count), id, int(rank)) };
        self.rccl.check(code, None, || {
            format!("ncclCommInitRank (rank {rank} of {count})")
        })?;
        Ok(CommHandle(comm as usize as u64))
    }

    unsafe fn enqueue(
        &self,
        handle: CommHandle,
        call: &CommCall,
        stream: StreamHandle,
    ) -> Result<()> {
        let calls = self.rccl.calls();
        let comm = comm(handle);
        let stream = stream.0 as usize as hipStream_t;
        let send = call.send.0 as usize as *const c_void;
        let recv = call.recv.0 as usize as *mut c_void;
        let (count, dtype) = (call.count, datatype(call.element)?);
        let rank = call
            .rank
            .map_or(0, |r| c_int::try_from(r).unwrap_or(c_int::MAX));
        // SAFETY: the caller's contract: live communicator, stream and ranges of the sizes
        // `count` elements of `dtype` imply for the kind.
        let code = unsafe {
            match call.kind {
                CollectiveKind::AllReduce { .. } => {
                    let op = reduce(call.op)?;
                    (calls.ncclAllReduce)(send, recv, count, dtype, op, comm, stream)
                }
                CollectiveKind::ReduceScatter { .. } => {
                    let op = reduce(call.op)?;
                    (calls.ncclReduceScatter)(send, recv, count, dtype, op, comm, stream)
                }
                CollectiveKind::AllGather => {
                    (calls.ncclAllGather)(send, recv, count, dtype, comm, stream)
                }
                CollectiveKind::Broadcast { .. } => {
                    (calls.ncclBroadcast)(send, recv, count, dtype, rank, comm, stream)
                }
                CollectiveKind::Send { .. } => {
                    (calls.ncclSend)(send, count, dtype, rank, comm, stream)
                }
                CollectiveKind::Recv { .. } => {
                    (calls.ncclRecv)(recv, count, dtype, rank, comm, stream)
                }
                other => {
                    return Err(Error::new(
                        StatusCode::Unimplemented,
                        format!("RCCL channels do not run {other}"),
                    ))
                }
            }
        };
        self.rccl
            .check(code, Some(comm), || format!("RCCL's {}", call.kind.name()))
    }

    fn async_error(&self, handle: CommHandle) -> Option<Error> {
        let mut raw: ncclEnum = 0;
        // SAFETY: a live communicator and a valid out-pointer (an `int`).
        let code = unsafe { (self.rccl.calls().ncclCommGetAsyncError)(comm(handle), &mut raw) };
        // 7: `ncclInProgress`, not a failure.
        let failed = [code, raw].into_iter().find(|&c| c != 0 && c != 7)?;
        Some(
            self.rccl
                .error(failed, Some(comm(handle)), "ncclCommGetAsyncError".into()),
        )
    }

    unsafe fn abort(&self, handle: CommHandle) {
        // SAFETY: the caller's contract.
        let _ = unsafe { (self.rccl.calls().ncclCommAbort)(comm(handle)) };
    }

    unsafe fn destroy(&self, handle: CommHandle) {
        let _bound = crate::api::bind_device(self.hip, self.device);
        // SAFETY: the caller's contract.
        let _ = unsafe { (self.rccl.calls().ncclCommDestroy)(comm(handle)) };
    }
}
