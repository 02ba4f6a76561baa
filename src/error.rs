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
            }),
        }
    }

    /// Whether two handles refer to the very same failure (not merely equal codes and messages).
    pub fn same_as(&self, other: &Error) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.inner.code, self.inner.message)?;
        let mut source = std::error::Error::source(self);
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
        d.finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
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
