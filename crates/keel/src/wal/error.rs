//! The errors appends and `open` return: each says what the log was doing
//! and keeps the operating system's error as its cause.
//!
//! One failed `write` or `fdatasync` fails every append of its batch, and
//! an `io::Error` cannot be cloned, so the writer keeps the cause once, in
//! a [`Failure`], and makes a fresh `io::Error` for each append from it.
//! Each of those has the cause's [`io::ErrorKind`], a message that names
//! the operation, the file and the offset, and the cause as its
//! [`source`](std::error::Error::source).

use std::error::Error;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// What went wrong, once, for every append it fails.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    /// What the log was doing, e.g. "writing 3 records to ... failed".
    what: String,
    /// The error the operating system returned.
    cause: Arc<io::Error>,
}

impl Failure {
    /// A failure of `what`, caused by `cause`.
    pub(crate) fn new(what: impl Into<String>, cause: io::Error) -> Failure {
        Failure {
            what: what.into(),
            cause: Arc::new(cause),
        }
    }

    /// The error for one append of a batch that failed while the log
    /// stayed usable.
    pub(crate) fn to_error(&self) -> io::Error {
        self.error_with("wal: ")
    }

    /// The error for appends once this failure has closed the log.
    pub(crate) fn closed_error(&self) -> io::Error {
        self.error_with("wal: log closed after an IO error: ")
    }

    fn error_with(&self, prefix: &str) -> io::Error {
        io::Error::new(
            self.cause.kind(),
            WalError {
                message: format!("{prefix}{}", self.what),
                cause: Some(self.cause.clone()),
            },
        )
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.cause)
    }
}

/// The error inside every `io::Error` this module makes: a message and,
/// when there is one, the operating system's error behind it.
#[derive(Debug)]
struct WalError {
    message: String,
    cause: Option<Arc<io::Error>>,
}

impl fmt::Display for WalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(cause) = &self.cause {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

impl Error for WalError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause
            .as_deref()
            .map(|cause| cause as &(dyn Error + 'static))
    }
}

/// The error for an append to a log that was closed by [`Log::close`] or
/// by dropping every handle.
///
/// [`Log::close`]: super::Log::close
pub(crate) fn closed() -> io::Error {
    plain(
        io::ErrorKind::BrokenPipe,
        "wal: the log is closed".to_owned(),
    )
}

/// An error of `kind` with `message` and no underlying cause.
pub(crate) fn plain(kind: io::ErrorKind, message: String) -> io::Error {
    io::Error::new(
        kind,
        WalError {
            message,
            cause: None,
        },
    )
}

/// Damage found where the log holds records that may have been
/// acknowledged: an [`io::ErrorKind::InvalidData`] error naming the file
/// and the offset.
pub(crate) fn corrupt(path: &Path, offset: u64, what: impl fmt::Display) -> io::Error {
    plain(
        io::ErrorKind::InvalidData,
        format!("wal: {} at offset {offset}: {what}", path.display()),
    )
}

/// Wraps an error from `op` on `path` so that its message names both.
pub(crate) fn context(op: &str, path: &Path, cause: io::Error) -> io::Error {
    Failure::new(format!("{op} {}", path.display()), cause).to_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_the_kind_and_the_cause() {
        let failure = Failure::new(
            "writing 2 records to x.wal at offset 32 failed",
            io::Error::from_raw_os_error(libc::ENOSPC),
        );
        for (error, prefix) in [
            (failure.to_error(), "wal: writing"),
            (
                failure.closed_error(),
                "wal: log closed after an IO error: writing",
            ),
        ] {
            assert_eq!(error.kind(), io::ErrorKind::StorageFull);
            let text = error.to_string();
            assert!(text.starts_with(prefix), "{text}");
            assert!(text.contains("offset 32"), "{text}");
            let source = error.source().expect("the OS error is the source");
            let os = source.downcast_ref::<io::Error>().expect("an io::Error");
            assert_eq!(os.raw_os_error(), Some(libc::ENOSPC));
        }
    }
}
