//! Errors: a [`StatusCode`] that programs match on, and a message a person can act on.
//!
//! One failure is often handed to many parties (every waiter on a failed semaphore, every action
//! downstream of a failed submission), so [`Error`] is a cheap, reference-counted `Clone`.

use std::fmt;
use std::sync::Arc;

/// The class of a failure, in the vocabulary of IREE and absl status codes.
///
/// Programs branch on the code; people read the [`Error`]'s message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StatusCode {
    /// The operation was cancelled, usually by the caller or because its owner went away.
    Cancelled,
    /// An error that fits no other code.
    Unknown,
    /// The caller passed an argument that is invalid whatever the state of the system.
    InvalidArgument,
    /// A deadline passed before the operation completed.
    DeadlineExceeded,
    /// A requested entity (driver, device, symbol, file) does not exist.
    NotFound,
    /// The entity a caller tried to create already exists.
    AlreadyExists,
    /// The caller lacks permission for the operation.
    PermissionDenied,
    /// Some resource (memory, handles, queue slots) is exhausted.
    ResourceExhausted,
    /// The system is not in a state the operation requires (for example a buffer still in use).
    FailedPrecondition,
    /// The operation was aborted, typically because of a failure elsewhere (device loss, shutdown).
    Aborted,
    /// A value or range lies outside what is valid (for example past the end of a buffer).
    OutOfRange,
    /// The operation is not implemented or not supported by this driver or device.
    Unimplemented,
    /// An invariant the implementation relies on was broken; a bug in halcyon or a driver.
    Internal,
    /// The service is unavailable: a driver library is missing or a device is absent.
    Unavailable,
    /// Unrecoverable data loss or corruption.
    DataLoss,
    /// A kernel reported that it failed: a Rust kernel returned `Err`, a C kernel returned
    /// nonzero, a GPU kernel set its status word (docs/ARCHITECTURE.md, "Status words"). The
    /// kernel's own outcome, not a fault of halcyon, a driver or the caller's use of the API.
    KernelFailed,
}

impl StatusCode {
    /// The code's name as IREE and absl spell it (`INVALID_ARGUMENT`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            StatusCode::Cancelled => "CANCELLED",
            StatusCode::Unknown => "UNKNOWN",
            StatusCode::InvalidArgument => "INVALID_ARGUMENT",
            StatusCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            StatusCode::NotFound => "NOT_FOUND",
            StatusCode::AlreadyExists => "ALREADY_EXISTS",
            StatusCode::PermissionDenied => "PERMISSION_DENIED",
            StatusCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            StatusCode::FailedPrecondition => "FAILED_PRECONDITION",
            StatusCode::Aborted => "ABORTED",
            StatusCode::OutOfRange => "OUT_OF_RANGE",
            StatusCode::Unimplemented => "UNIMPLEMENTED",
            StatusCode::Internal => "INTERNAL",
            StatusCode::Unavailable => "UNAVAILABLE",
            StatusCode::DataLoss => "DATA_LOSS",
            StatusCode::KernelFailed => "KERNEL_FAILED",
        }
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

struct Inner {
    code: StatusCode,
    message: String,
    source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
    /// The failure this one was inherited from ([`Error::inherited`]); then also the source.
    origin: Option<Error>,
}

/// A failure: a [`StatusCode`], a message for people, and optionally the error that caused it.
///
/// Cloning is an atomic reference-count increment, so one failure can be handed to every waiter
/// of a failed semaphore. `Display` prints `CODE: message` followed by the chain of sources.
///
/// ```
/// use halcyon::{Error, StatusCode};
///
/// let err = Error::new(StatusCode::InvalidArgument, "signal value 3 is not above current value 5");
/// assert_eq!(err.code(), StatusCode::InvalidArgument);
/// assert_eq!(err.to_string(), "INVALID_ARGUMENT: signal value 3 is not above current value 5");
/// ```
#[derive(Clone)]
pub struct Error {
    inner: Arc<Inner>,
}

impl Error {
    /// Creates an error with `code` and a message that tells a person what went wrong and,
    /// where possible, what to do about it.
    pub fn new(code: StatusCode, message: impl Into<String>) -> Self {
        Error {
            inner: Arc::new(Inner {
                code,
                message: message.into(),
                source: None,
                origin: None,
            }),
        }
    }

    /// Creates an error caused by `source` (an OS error, a vendor error, another [`Error`]).
    pub fn with_source(
        code: StatusCode,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error {
            inner: Arc::new(Inner {
                code,
                message: message.into(),
                source: Some(Arc::new(source)),
                origin: None,
            }),
        }
    }

    /// The status code programs branch on.
    pub fn code(&self) -> StatusCode {
        self.inner.code
    }

    /// The message, without the code or the sources.
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// Returns a new error with the same code and source and `context` prepended to the message
    /// (`"context: message"`), for adding where a failure happened as it travels up.
    pub fn context(&self, context: impl fmt::Display) -> Self {
        Error {
            inner: Arc::new(Inner {
                code: self.inner.code,
                message: format!("{context}: {}", self.inner.message),
                source: self.inner.source.clone(),
                origin: self.inner.origin.clone(),
            }),
        }
    }

    /// Whether two handles refer to the very same failure (not merely equal codes and messages).
    pub fn same_as(&self, other: &Error) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// This failure as work that did not run because of it reports it: work that waited on a
    /// semaphore this error failed (`what` says which, for example "waits on a failed
    /// semaphore (value 3)"). The result keeps the code, reads "`what`: `<original message>`",
    /// and has the original failure as its [`source`](std::error::Error::source) and
    /// [`Error::origin`]. Inheriting an inherited error names the same origin (no nesting), so
    /// everything downstream of one failure shares it.
    ///
    /// ```
    /// use halcyon::{Error, StatusCode};
    ///
    /// let original = Error::new(StatusCode::InvalidArgument, "fill pattern must be 1, 2 or 4 bytes");
    /// let inherited = original.inherited("waits on a failed semaphore (value 1)");
    /// assert_eq!(inherited.code(), StatusCode::InvalidArgument);
    /// assert!(inherited.is_inherited() && inherited.origin().same_as(&original));
    /// assert_eq!(
    ///     inherited.to_string(),
    ///     "INVALID_ARGUMENT: waits on a failed semaphore (value 1): fill pattern must be 1, 2 or 4 bytes"
    /// );
    /// let source = std::error::Error::source(&inherited).unwrap();
    /// assert_eq!(source.to_string(), original.to_string());
    /// let again = inherited.inherited("waits on a failed semaphore (value 2)");
    /// assert!(again.origin().same_as(&original));
    /// ```
    pub fn inherited(&self, what: impl fmt::Display) -> Error {
        let origin = self.origin().clone();
        Error {
            inner: Arc::new(Inner {
                code: origin.code(),
                message: format!("{what}: {}", origin.message()),
                source: None,
                origin: Some(origin),
            }),
        }
    }

    /// The failure this error was [inherited](Error::inherited) from; the error itself if it
    /// was not inherited.
    pub fn origin(&self) -> &Error {
        self.inner.origin.as_ref().unwrap_or(self)
    }

    /// Whether this error was [inherited](Error::inherited) from an earlier failure.
    pub fn is_inherited(&self) -> bool {
        self.inner.origin.is_some()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.inner.code, self.inner.message)?;
        // An inherited error's message already holds its origin's: go on with the origin's
        // sources.
        let mut source = match &self.inner.origin {
            Some(origin) => std::error::Error::source(origin),
            None => std::error::Error::source(self),
        };
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("code", &self.inner.code)
            .field("message", &self.inner.message);
        if let Some(source) = &self.inner.source {
            d.field("source", source);
        }
        if let Some(origin) = &self.inner.origin {
            d.field("origin", origin);
        }
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        if let Some(origin) = &self.inner.origin {
            return Some(origin);
        }
        self.inner
            .source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// `Result<T, halcyon::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_includes_sources() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "libfoo.so: no such file");
        let err = Error::with_source(StatusCode::Unavailable, "cannot load driver", io);
        assert_eq!(
            err.to_string(),
            "UNAVAILABLE: cannot load driver: libfoo.so: no such file"
        );
        let clone = err.clone();
        assert!(clone.same_as(&err));
        assert_eq!(clone.code(), StatusCode::Unavailable);
    }

    #[test]
    fn is_send_sync_static() {
        fn check<T: Send + Sync + 'static + Clone>() {}
        check::<Error>();
    }
}
