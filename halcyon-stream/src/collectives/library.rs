//! What the NCCL-shaped libraries share besides the engine: the process's choice of library,
//! and the meaning of their result codes.

use std::ffi::{c_char, CStr};
use std::path::Path;
use std::sync::OnceLock;

use halcyon::{Error, Result, StatusCode};

/// The library a process uses for one engine, chosen once: by [`LibraryChoice::choose`] before
/// anything loaded one, else by the first [`LibraryChoice::load`], from the default names.
pub struct LibraryChoice<T> {
    chosen: OnceLock<Result<T>>,
}

impl<T> LibraryChoice<T> {
    /// No library chosen yet.
    pub const fn new() -> Self {
        LibraryChoice {
            chosen: OnceLock::new(),
        }
    }

    /// The chosen library, else the first of `sonames` that `open` opens (kept for the
    /// process). `Unavailable`, with `missing` (what to install) and why each name failed, if
    /// none does; the outcome is kept too.
    pub fn load(
        &self,
        sonames: &[&str],
        open: impl Fn(&str) -> Result<T>,
        missing: &str,
    ) -> Result<&T> {
        self.chosen
            .get_or_init(|| {
                let mut why = Vec::new();
                for soname in sonames {
                    match open(soname) {
                        Ok(library) => return Ok(library),
                        Err(e) => why.push(e.to_string()),
                    }
                }
                Err(Error::new(
                    StatusCode::Unavailable,
                    format!("{missing} ({})", why.join("; ")),
                ))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Chooses the library `open` makes of `path`, before anything loaded one: its outcome,
    /// kept for the process. `FailedPrecondition` if one was loaded already (that one stays);
    /// `what` names the call in the message.
    pub fn choose(
        &self,
        path: &Path,
        open: impl FnOnce(&Path) -> Result<T>,
        what: &str,
    ) -> Result<&T> {
        let mut opened = false;
        let chosen = self.chosen.get_or_init(|| {
            opened = true;
            open(path)
        });
        if !opened {
            return Err(Error::new(
                StatusCode::FailedPrecondition,
                format!(
                    "a library was loaded before {what}({}); choose it before making any \
                     channel",
                    path.display()
                ),
            ));
        }
        chosen.as_ref().map_err(Clone::clone)
    }
}

impl<T> Default for LibraryChoice<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// The error for result `code` (`ncclResult_t`, which NCCL and RCCL number alike) of `what`:
/// `name` is the library's name for the code, `last` its last error text.
/// `ncclInvalidArgument` (4) and `ncclInvalidUsage` (5) are `InvalidArgument`,
/// `ncclRemoteError` (6) `Unavailable` (a peer is gone), the rest `Internal`.
pub fn result_error(code: u32, name: Option<String>, last: Option<String>, what: String) -> Error {
    let status = match code {
        4 | 5 => StatusCode::InvalidArgument,
        6 => StatusCode::Unavailable,
        _ => StatusCode::Internal,
    };
    let name = name.unwrap_or_else(|| format!("error {code}"));
    let detail = last.filter(|t| !t.is_empty()).map(|t| format!(": {t}"));
    Error::new(
        status,
        format!("{what}: {name}{}", detail.unwrap_or_default()),
    )
}

/// The C string at `ptr`, if any.
///
/// # Safety
///
/// `ptr` must be null or a valid NUL-terminated string.
pub unsafe fn c_text(ptr: *const c_char) -> Option<String> {
    (!ptr.is_null()).then(|| {
        // SAFETY: the caller's contract, and `ptr` is not null.
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned()
    })
}
