//! RCCL: the collective engine of HIP devices, opened at run time.
//!
//! RCCL is AMD's NCCL: the same C API (`nccl*` symbols, `ncclUniqueId`, the same enums) over
//! HIP streams. Like the HIP runtime it is opened with `libloading` when the first channel is
//! made ([`Rccl::load`]: `librccl.so.1`, then `librccl.so`), never linked; a missing library,
//! or one without a call halcyon makes, is `Unavailable` with the reason. [`Rccl::use_library`]
//! chooses another file first (the fake GPU driver's in tests). The engine itself (joining
//! through a channel provider, the watchdog) is the stream layer's
//! ([`halcyon_stream::collectives`]), shared with NCCL; [`communicator`] is RCCL's table for
//! it.
//!
//! [RCCL](https://rocm.docs.amd.com/projects/rccl/en/latest/api-reference/api-library.html).

#![allow(non_camel_case_types)]

pub mod communicator;

use std::ffi::{c_char, c_int, c_void};
use std::path::Path;

use halcyon::{Error, Result, StatusCode};
use halcyon_stream::collectives::{c_text, result_error, LibraryChoice};
use libloading::Library;

/// The sonames [`Rccl::load`] tries, in order.
pub const LIBRCCL_SONAMES: &[&str] = &["librccl.so.1", "librccl.so"];

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    /// Its bytes.
    pub internal: [c_char; 128],
}

/// `ncclComm_t`.
pub type ncclComm_t = *mut c_void;
/// `hipStream_t`.
pub type hipStream_t = *mut c_void;
/// `ncclResult_t`, `ncclDataType_t` and `ncclRedOp_t`: C enums, passed as `int`.
pub type ncclEnum = c_int;

/// The RCCL functions halcyon calls, resolved from one library.
#[allow(non_snake_case)]
pub(crate) struct Calls {
    pub(crate) ncclGetVersion: unsafe extern "C" fn(*mut c_int) -> ncclEnum,
    pub(crate) ncclGetUniqueId: unsafe extern "C" fn(*mut ncclUniqueId) -> ncclEnum,
    pub(crate) ncclCommInitRank:
        unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> ncclEnum,
    pub(crate) ncclCommDestroy: unsafe extern "C" fn(ncclComm_t) -> ncclEnum,
    pub(crate) ncclCommAbort: unsafe extern "C" fn(ncclComm_t) -> ncclEnum,
    pub(crate) ncclCommGetAsyncError: unsafe extern "C" fn(ncclComm_t, *mut ncclEnum) -> ncclEnum,
    pub(crate) ncclAllReduce: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclEnum,
        ncclEnum,
        ncclComm_t,
        hipStream_t,
    ) -> ncclEnum,
    pub(crate) ncclAllGather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclEnum,
        ncclComm_t,
        hipStream_t,
    ) -> ncclEnum,
    pub(crate) ncclReduceScatter: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclEnum,
        ncclEnum,
        ncclComm_t,
        hipStream_t,
    ) -> ncclEnum,
    pub(crate) ncclBroadcast: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        ncclEnum,
        c_int,
        ncclComm_t,
        hipStream_t,
    ) -> ncclEnum,
    pub(crate) ncclSend: unsafe extern "C" fn(
        *const c_void,
        usize,
        ncclEnum,
        c_int,
        ncclComm_t,
        hipStream_t,
    ) -> ncclEnum,
    pub(crate) ncclRecv: unsafe extern "C" fn(
        *mut c_void,
        usize,
        ncclEnum,
        c_int,
        ncclComm_t,
        hipStream_t,
    ) -> ncclEnum,
    pub(crate) ncclGetErrorString: unsafe extern "C" fn(ncclEnum) -> *const c_char,
    pub(crate) ncclGetLastError: Option<unsafe extern "C" fn(ncclComm_t) -> *const c_char>,
}

/// Resolves `name` from `library` as a `T`.
///
/// # Safety
///
/// `T` must be the symbol's C signature.
unsafe fn symbol<T: Copy>(
    library: &Library,
    name: &'static str,
) -> std::result::Result<T, &'static str> {
    // SAFETY: the caller's contract.
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|_| name.trim_end_matches('\0'))
}

impl Calls {
    /// # Safety
    ///
    /// `library` must have RCCL's (NCCL's) API, and stay loaded while the table is used.
    unsafe fn resolve(library: &Library) -> std::result::Result<Calls, &'static str> {
        // SAFETY: each signature is `rccl.h`'s, with C enums as `int`.
        unsafe {
            Ok(Calls {
                ncclGetVersion: symbol(library, "ncclGetVersion\0")?,
                ncclGetUniqueId: symbol(library, "ncclGetUniqueId\0")?,
                ncclCommInitRank: symbol(library, "ncclCommInitRank\0")?,
                ncclCommDestroy: symbol(library, "ncclCommDestroy\0")?,
                ncclCommAbort: symbol(library, "ncclCommAbort\0")?,
                ncclCommGetAsyncError: symbol(library, "ncclCommGetAsyncError\0")?,
                ncclAllReduce: symbol(library, "ncclAllReduce\0")?,
                ncclAllGather: symbol(library, "ncclAllGather\0")?,
                ncclReduceScatter: symbol(library, "ncclReduceScatter\0")?,
                ncclBroadcast: symbol(library, "ncclBroadcast\0")?,
                ncclSend: symbol(library, "ncclSend\0")?,
                ncclRecv: symbol(library, "ncclRecv\0")?,
                ncclGetErrorString: symbol(library, "ncclGetErrorString\0")?,
                ncclGetLastError: symbol(library, "ncclGetLastError\0").ok(),
            })
        }
    }
}

/// An opened RCCL (see the [module docs](self)).
pub struct Rccl {
    calls: Calls,
    version: i32,
    name: String,
    /// Kept loaded for the process (the calls point into it).
    _library: Library,
}

static RCCL: LibraryChoice<Rccl> = LibraryChoice::new();

impl Rccl {
    /// The process's RCCL: the one [`Rccl::use_library`] chose, else the first of
    /// [`LIBRCCL_SONAMES`] that opens, loaded once. `Unavailable` with the reason if none is
    /// usable.
    pub fn load() -> Result<&'static Rccl> {
        // SAFETY: opening RCCL runs its initialisers, which are sound at any time.
        let open = |soname: &str| unsafe { Rccl::open(soname) };
        RCCL.load(
            LIBRCCL_SONAMES,
            open,
            "RCCL is not installed, so HIP devices have no collectives; install ROCm's rccl, \
             or choose a librccl.so.1 with Rccl::use_library",
        )
    }

    /// Makes the library at `path` the process's RCCL, before anything loaded one.
    /// `FailedPrecondition` if one was loaded already (that one stays).
    ///
    /// # Safety
    ///
    /// `path` must be an RCCL (or a library with its API): nothing can check what its
    /// functions do when called.
    pub unsafe fn use_library(path: impl AsRef<Path>) -> Result<&'static Rccl> {
        // SAFETY: the caller's contract.
        let open = |path: &Path| unsafe { Rccl::open(path) };
        RCCL.choose(path.as_ref(), open, "Rccl::use_library")
    }

    /// # Safety
    ///
    /// As [`Rccl::use_library`].
    unsafe fn open(name: impl AsRef<std::ffi::OsStr>) -> Result<Rccl> {
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
                format!("{shown} has no {missing}: it is not an RCCL halcyon can use"),
            )
        })?;
        let mut version: c_int = 0;
        // SAFETY: a valid out-pointer.
        let code = unsafe { (calls.ncclGetVersion)(&mut version) };
        let rccl = Rccl {
            calls,
            version,
            name: shown,
            _library: library,
        };
        rccl.check(code, None, || "ncclGetVersion".into())?;
        Ok(rccl)
    }

    /// The version RCCL reports (`ncclGetVersion`).
    pub fn version(&self) -> i32 {
        self.version
    }

    /// The file it was opened from.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn calls(&self) -> &Calls {
        &self.calls
    }

    /// `code` as a result (see [`Rccl::error`]).
    pub(crate) fn check(
        &self,
        code: ncclEnum,
        comm: Option<ncclComm_t>,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        match code {
            0 => Ok(()),
            _ => Err(self.error(code, comm, what())),
        }
    }

    /// The error for `code` from `what`: RCCL's name for it and the communicator's last error
    /// text ([`result_error`]).
    pub(crate) fn error(&self, code: ncclEnum, comm: Option<ncclComm_t>, what: String) -> Error {
        // SAFETY: `ncclGetErrorString` takes any int and returns a static string.
        let name = unsafe { c_text((self.calls.ncclGetErrorString)(code)) };
        let last = match (comm, self.calls.ncclGetLastError) {
            // SAFETY: a live communicator; the result is RCCL's C string (or null).
            (Some(comm), Some(last)) => unsafe { c_text(last(comm)) },
            _ => None,
        };
        result_error(code as u32, name, last, what)
    }
}

impl std::fmt::Debug for Rccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rccl")
            .field("name", &self.name)
            .field("version", &self.version)
            .finish()
    }
}
