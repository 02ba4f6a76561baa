//! The NCCL calls halcyon-cuda makes, resolved from the library [`super::Nccl`] opened.
//!
//! As for the driver ([`crate::sys`]), each call is declared with the parameter types of
//! cudarc's declaration (checked at compile time against `cudarc::nccl::sys`, generated from
//! `nccl.h`) and its result read as a plain number ([`NcclCode`]): a newer NCCL may return a
//! `ncclResult_t` that cudarc's enum lacks, and such an enum value would be undefined
//! behaviour. cudarc's own loader is never used: it panics when libnccl is missing.

use std::ffi::{c_char, c_int, c_void};

use cudarc::nccl::sys::{
    self, cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId,
};
use libloading::Library;

/// An NCCL call's result as the library returned it (`ncclSuccess` is 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NcclCode(pub u32);

impl NcclCode {
    /// `ncclSuccess`.
    pub const SUCCESS: NcclCode = NcclCode(ncclResult_t::ncclSuccess as u32);
    /// `ncclInProgress`: a non-blocking communicator's operation is still running.
    pub const IN_PROGRESS: NcclCode = NcclCode(ncclResult_t::ncclInProgress as u32);
}

/// Declares the calls: a table of function pointers resolved by name, each checked against
/// cudarc's declaration.
macro_rules! nccl_calls {
    ($( $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?); )*) => {
        /// The NCCL functions, resolved from one library: the raw calls, each with NCCL's
        /// contract (valid handles and pointers, a current context where NCCL needs one), for
        /// the engine and for calling NCCL directly alongside it (benchmarks).
        #[allow(non_snake_case)]
        pub struct Calls {
            $( $(#[$doc])* pub $name: unsafe extern "C" fn($($ty),*) -> u32, )*
            /// `ncclGetErrorString` (call it with a code cudarc's enum names only).
            pub ncclGetErrorString: unsafe extern "C" fn(ncclResult_t) -> *const c_char,
            /// `ncclGetLastError` (NCCL 2.13+): the text of the last error.
            pub ncclGetLastError: Option<unsafe extern "C" fn(ncclComm_t) -> *const c_char>,
        }

        impl Calls {
            /// Resolves every call from `library`; the name of the first one it lacks.
            ///
            /// # Safety
            ///
            /// `library` must be an NCCL (or a library with NCCL's ABI), kept loaded while the
            /// table is used.
            pub(crate) unsafe fn resolve(library: &Library) -> Result<Calls, &'static str> {
                Ok(Calls {
                    $( $name: {
                        // The same parameters as cudarc's declaration.
                        const _: unsafe fn($($ty),*) -> ncclResult_t = sys::$name;
                        let name = concat!(stringify!($name), "\0");
                        // SAFETY: the symbol has this C signature (above), with the enum
                        // result read as its `repr(u32)` number, the same ABI.
                        *unsafe { library.get(name.as_bytes()) }
                            .map_err(|_| stringify!($name))?
                    }, )*
                    ncclGetErrorString: {
                        const _: unsafe fn(ncclResult_t) -> *const c_char =
                            sys::ncclGetErrorString;
                        // SAFETY: as above; this one returns a C string.
                        *unsafe { library.get(b"ncclGetErrorString\0") }
                            .map_err(|_| "ncclGetErrorString")?
                    },
                    ncclGetLastError: {
                        const _: unsafe fn(ncclComm_t) -> *const c_char = sys::ncclGetLastError;
                        // SAFETY: as above.
                        unsafe { library.get(b"ncclGetLastError\0") }.ok().map(|f| *f)
                    },
                })
            }
        }
    };
}

nccl_calls! {
    /// `ncclGetVersion`.
    fn ncclGetVersion(version: *mut c_int);
    /// `ncclGetUniqueId`.
    fn ncclGetUniqueId(id: *mut ncclUniqueId);
    /// `ncclCommInitRank`.
    fn ncclCommInitRank(comm: *mut ncclComm_t, nranks: c_int, id: ncclUniqueId, rank: c_int);
    /// `ncclCommDestroy`.
    fn ncclCommDestroy(comm: ncclComm_t);
    /// `ncclCommAbort`.
    fn ncclCommAbort(comm: ncclComm_t);
    /// `ncclCommGetAsyncError`: pass a `u32`'s address (cast), never an enum's, so that a
    /// code cudarc's enum lacks is only ever a number.
    fn ncclCommGetAsyncError(comm: ncclComm_t, error: *mut ncclResult_t);
    /// `ncclAllReduce`.
    fn ncclAllReduce(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    );
    /// `ncclAllGather`.
    fn ncclAllGather(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    );
    /// `ncclReduceScatter`.
    fn ncclReduceScatter(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    );
    /// `ncclBroadcast`.
    fn ncclBroadcast(
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    );
    /// `ncclSend`.
    fn ncclSend(
        send: *const c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    );
    /// `ncclRecv`.
    fn ncclRecv(
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    );
}
