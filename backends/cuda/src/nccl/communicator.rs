//! NCCL as the stream layer's [`CommunicatorApi`]: the translation table from halcyon's
//! collectives to NCCL's calls, for one communicator on one CUDA device.

use std::ffi::c_int;

use cudarc::driver::sys::{CUcontext, CUdevice};
use cudarc::nccl::sys::{
    cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId,
};
use halcyon::backend::CollectiveKind;
use halcyon::{ElementType, Error, ReduceOp, Result, StatusCode};
use halcyon_stream::collectives::{CommCall, CommHandle, CommunicatorApi, UNIQUE_ID_BYTES};
use halcyon_stream::StreamHandle;

use super::sys::NcclCode;
use super::Nccl;
use crate::sys as driver;

/// One NCCL communicator's side of the table: the library, and the device's primary context,
/// retained for as long as the communicator may use it.
pub struct CudaNccl {
    nccl: &'static Nccl,
    device: CUdevice,
    context: CUcontext,
}

// SAFETY: a retained context handle is valid on any thread; NCCL is thread-safe as the stream
// layer uses it (calls on one communicator serialised, `ncclCommGetAsyncError` from any thread).
unsafe impl Send for CudaNccl {}
// SAFETY: as above.
unsafe impl Sync for CudaNccl {}

impl CudaNccl {
    /// The table for a communicator on `device`, retaining its primary context.
    pub(crate) fn new(nccl: &'static Nccl, device: CUdevice) -> Result<CudaNccl> {
        let mut context: CUcontext = std::ptr::null_mut();
        crate::result::check(
            // SAFETY: a valid out-pointer and a device handle of the probed driver.
            unsafe { driver::cuDevicePrimaryCtxRetain(&mut context, device) },
            || "cuDevicePrimaryCtxRetain for an NCCL channel".into(),
        )?;
        Ok(CudaNccl {
            nccl,
            device,
            context,
        })
    }

    fn check(
        &self,
        code: u32,
        comm: Option<ncclComm_t>,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        self.nccl.check(NcclCode(code), comm, what)
    }
}

impl Drop for CudaNccl {
    fn drop(&mut self) {
        // SAFETY: retained in `new`, released once.
        let _ = unsafe { driver::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

fn comm(handle: CommHandle) -> ncclComm_t {
    handle.0 as usize as ncclComm_t
}

/// NCCL's type for `element` (NCCL has every [`ElementType`]).
fn datatype(element: ElementType) -> Result<ncclDataType_t> {
    use ncclDataType_t::*;
    Ok(match element {
        ElementType::F16 => ncclFloat16,
        ElementType::BF16 => ncclBfloat16,
        ElementType::F32 => ncclFloat32,
        ElementType::F64 => ncclFloat64,
        ElementType::I8 => ncclInt8,
        ElementType::U8 => ncclUint8,
        ElementType::I32 => ncclInt32,
        ElementType::U32 => ncclUint32,
        ElementType::I64 => ncclInt64,
        ElementType::U64 => ncclUint64,
        other => {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!("halcyon-cuda does not map {other} to an NCCL type"),
            ))
        }
    })
}

fn reduce(op: Option<ReduceOp>) -> Result<ncclRedOp_t> {
    use ncclRedOp_t::*;
    Ok(match op {
        Some(ReduceOp::Sum) => ncclSum,
        Some(ReduceOp::Prod) => ncclProd,
        Some(ReduceOp::Min) => ncclMin,
        Some(ReduceOp::Max) => ncclMax,
        other => {
            return Err(Error::new(
                StatusCode::Unimplemented,
                format!("halcyon-cuda does not map {other:?} to an NCCL reduction"),
            ))
        }
    })
}

// SAFETY: each method calls NCCL as documented, and `enqueue` reaches only the call's ranges.
unsafe impl CommunicatorApi for CudaNccl {
    fn engine(&self) -> &'static str {
        "nccl"
    }

    fn unique_id(&self) -> Result<[u8; UNIQUE_ID_BYTES]> {
        let mut id = ncclUniqueId { internal: [0; 128] };
        // SAFETY: a valid out-pointer.
        let code = unsafe { (self.nccl.calls().ncclGetUniqueId)(&mut id) };
        self.check(code, None, || "ncclGetUniqueId".into())?;
        Ok(id.internal.map(|c| c as u8))
    }

    fn join(&self, count: u32, id: &[u8; UNIQUE_ID_BYTES], rank: u32) -> Result<CommHandle> {
        let id = ncclUniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        let int = |n: u32| c_int::try_from(n).unwrap_or(c_int::MAX);
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is an out-pointer; the caller made this device's context current, so
        // NCCL joins on this device.
        let code =
            unsafe { (self.nccl.calls().ncclCommInitRank)(&mut comm, int(count), id, int(rank)) };
        self.check(code, None, || {
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
        let calls = self.nccl.calls();
        let comm = comm(handle);
        let stream = stream.0 as usize as cudaStream_t;
        let send = call.send.0 as usize as *const std::ffi::c_void;
        let recv = call.recv.0 as usize as *mut std::ffi::c_void;
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
                        format!("NCCL channels do not run {other}"),
                    ))
                }
            }
        };
        self.check(code, Some(comm), || format!("NCCL's {}", call.kind.name()))
    }

    fn async_error(&self, handle: CommHandle) -> Option<Error> {
        let mut raw: u32 = 0;
        // SAFETY: a live communicator; the out-pointer is a `u32`'s, read as a number only
        // (see `super::sys`).
        let code = NcclCode(unsafe {
            (self.nccl.calls().ncclCommGetAsyncError)(
                comm(handle),
                (&mut raw as *mut u32).cast::<ncclResult_t>(),
            )
        });
        let failed = [code, NcclCode(raw)]
            .into_iter()
            .find(|c| *c != NcclCode::SUCCESS && *c != NcclCode::IN_PROGRESS)?;
        Some(
            self.nccl
                .error(failed, Some(comm(handle)), "ncclCommGetAsyncError".into()),
        )
    }

    unsafe fn abort(&self, handle: CommHandle) {
        // SAFETY: the caller's contract.
        let _ = unsafe { (self.nccl.calls().ncclCommAbort)(comm(handle)) };
    }

    unsafe fn destroy(&self, handle: CommHandle) {
        let mut previous: CUcontext = std::ptr::null_mut();
        // SAFETY: the caller's contract; the context is retained by `self`; the thread's
        // previous context is restored.
        unsafe {
            let _ = driver::cuCtxGetCurrent(&mut previous);
            let _ = driver::cuCtxSetCurrent(self.context);
            let _ = (self.nccl.calls().ncclCommDestroy)(comm(handle));
            let _ = driver::cuCtxSetCurrent(previous);
        }
    }
}
