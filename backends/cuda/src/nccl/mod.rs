//! NCCL: the collective engine of CUDA devices, opened at run time.
//!
//! # Loading
//!
//! Like libcuda, libnccl is opened with `libloading` when the first channel is made
//! ([`Nccl::load`]: `libnccl.so.2`, then `libnccl.so`), never linked, and every call resolves
//! from that library ([`sys`]). A missing library, or one without a call halcyon makes, is
//! `Unavailable` with the reason: a machine without NCCL still runs every other CUDA path.
//! [`Nccl::use_library`] chooses another file first (a wheel's `libnccl.so.2`, or the fake
//! GPU driver's NCCL in tests).
//!
//! # Channels
//!
//! A CUDA device's channel ([`halcyon::Device::channel`]) is an NCCL communicator: rank 0
//! makes the unique id (`ncclGetUniqueId`), the channel provider hands it to the other ranks
//! (MPI across processes, [`halcyon::channel::LocalGroup`] in one), and each rank joins with
//! `ncclCommInitRank` on its device. Collectives are enqueued on the stream of the queue they
//! are submitted to, ordered against other queues with events like any operation: submit them
//! on a queue of their own to overlap them with compute. The engine itself (joining, the
//! watchdog that turns a stalled or failed communicator into errors instead of hangs) is the
//! stream layer's ([`halcyon_stream::collectives`]), shared with RCCL; [`communicator`] is
//! NCCL's translation table for it.
//!
//! [NCCL's API](https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api.html).

pub mod communicator;
pub mod sys;

use std::ffi::c_int;
use std::path::Path;

use cudarc::nccl::sys::{ncclComm_t, ncclResult_t};
use halcyon::{Error, Result, StatusCode};
use halcyon_stream::collectives::{c_text, result_error, LibraryChoice};
use libloading::Library;

use sys::{Calls, NcclCode};

/// The sonames [`Nccl::load`] tries, in order.
pub const LIBNCCL_SONAMES: &[&str] = &["libnccl.so.2", "libnccl.so"];

/// An opened NCCL (see the [module docs](self)).
pub struct Nccl {
    calls: Calls,
    version: i32,
    name: String,
    /// Kept loaded for the process (the calls point into it).
    _library: Library,
}

static NCCL: LibraryChoice<Nccl> = LibraryChoice::new();

impl Nccl {
    /// The process's NCCL: the one [`Nccl::use_library`] chose, else the first of
    /// [`LIBNCCL_SONAMES`] that opens, loaded once. `Unavailable` with the reason if none is
    /// usable.
    pub fn load() -> Result<&'static Nccl> {
        // SAFETY: opening NCCL runs its initialisers, which are sound at any time.
        let open = |soname: &str| unsafe { Nccl::open(soname) };
        NCCL.load(
            LIBNCCL_SONAMES,
            open,
            "NCCL is not installed, so CUDA devices have no collectives; install libnccl2, or \
             the nvidia-nccl-cu12 wheel and choose its libnccl.so.2 with Nccl::use_library",
        )
    }

    /// Makes the library at `path` the process's NCCL, before anything loaded one.
    /// `FailedPrecondition` if an NCCL was loaded already (that one stays).
    ///
    /// # Safety
    ///
    /// `path` must be an NCCL (or a library with NCCL's ABI for the calls in [`sys`]):
    /// nothing can check what its functions do when called.
    pub unsafe fn use_library(path: impl AsRef<Path>) -> Result<&'static Nccl> {
        // SAFETY: the caller's contract.
        let open = |path: &Path| unsafe { Nccl::open(path) };
        NCCL.choose(path.as_ref(), open, "Nccl::use_library")
    }

    /// Opens `name` (a path or soname) and resolves every call.
    ///
    /// # Safety
    ///
    /// As [`Nccl::use_library`].
    unsafe fn open(name: impl AsRef<std::ffi::OsStr>) -> Result<Nccl> {
        let name = name.as_ref();
        let shown = name.to_string_lossy().into_owned();
        // SAFETY: the caller's contract.
        let library = unsafe { Library::new(name) }.map_err(|e| {
            Error::new(StatusCode::Unavailable, format!("cannot open {shown}: {e}"))
        })?;
        // SAFETY: as above.
        let calls = unsafe { Calls::resolve(&library) }.map_err(|missing| {
            Error::new(
                StatusCode::Unavailable,
                format!("{shown} has no {missing}: it is not an NCCL 2 library halcyon can use"),
            )
        })?;
        let mut version: c_int = 0;
        // SAFETY: a valid out-pointer.
        let code = NcclCode(unsafe { (calls.ncclGetVersion)(&mut version) });
        let nccl = Nccl {
            calls,
            version,
            name: shown,
            _library: library,
        };
        nccl.check(code, None, || "ncclGetVersion".into())?;
        Ok(nccl)
    }

    /// The version NCCL reports (`ncclGetVersion`: 22305 for 2.23.5).
    pub fn version(&self) -> i32 {
        self.version
    }

    /// The file it was opened from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The raw calls (see [`sys::Calls`]).
    pub fn calls(&self) -> &Calls {
        &self.calls
    }

    /// `code` as a result: an error naming `what`, NCCL's name for the code, and the
    /// communicator's last error text where there is one.
    pub(crate) fn check(
        &self,
        code: NcclCode,
        comm: Option<ncclComm_t>,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        if code == NcclCode::SUCCESS {
            return Ok(());
        }
        Err(self.error(code, comm, what()))
    }

    /// The error for `code`, from `what` (see [`Nccl::check`], [`result_error`]).
    pub(crate) fn error(&self, code: NcclCode, comm: Option<ncclComm_t>, what: String) -> Error {
        use ncclResult_t::*;
        const KNOWN: [ncclResult_t; 8] = [
            ncclSuccess,
            ncclUnhandledCudaError,
            ncclSystemError,
            ncclInternalError,
            ncclInvalidArgument,
            ncclInvalidUsage,
            ncclRemoteError,
            ncclInProgress,
        ];
        let known = KNOWN.iter().copied().find(|&r| r as u32 == code.0);
        let name = match known {
            // SAFETY: a code the enum names; the result is a static C string.
            Some(result) => unsafe { c_text((self.calls.ncclGetErrorString)(result)) },
            None => None,
        };
        let last = match (comm, self.calls.ncclGetLastError) {
            // SAFETY: a live communicator; the result is NCCL's C string (or null).
            (Some(comm), Some(last)) => unsafe { c_text(last(comm)) },
            _ => None,
        };
        result_error(code.0, name, last, what)
    }
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl")
            .field("name", &self.name)
            .field("version", &self.version)
            .finish()
    }
}
