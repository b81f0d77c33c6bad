//! The one error type of the command-line tool.
//!
//! Every failure the tool can meet (a flag that makes no sense, a server
//! that cannot bind, a child process that dies) ends up as a sentence for a
//! person and an exit code, so the type is just that: a message, built up
//! with context as it travels outwards, and the code to exit with. Usage
//! errors exit 2 like clap's own; everything else exits 1.

use std::fmt;

/// A failure, as a message for a person and the exit code it deserves.
#[derive(Debug)]
pub struct Error {
    /// What went wrong, outermost context first.
    message: String,
    /// The process exit code this error should produce.
    code: i32,
}

impl Error {
    /// A run-time failure (exit code 1).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 1,
        }
    }

    /// A usage error: the command line asked for something that does not
    /// exist (exit code 2, as for clap's own errors).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 2,
        }
    }

    /// The exit code this error should produce.
    pub fn code(&self) -> i32 {
        self.code
    }

    /// Prefixes the message with what was being done when it happened.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self {
            message: format!("{context}: {}", self.message),
            code: self.code,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(error: std::io::Error) -> Self {
        Self::new(error.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(error: serde_json::Error) -> Self {
        Self::new(error.to_string())
    }
}

/// Adds context to the error of a `Result`, lazily.
pub trait Context<T> {
    /// On error, prefixes the message with `context()`.
    fn context<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Error>;
}

impl<T, E: Into<Error>> Context<T> for Result<T, E> {
    fn context<C: fmt::Display>(self, context: impl FnOnce() -> C) -> Result<T, Error> {
        self.map_err(|error| error.into().context(context()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Context nests outermost first and keeps the exit code.
    #[test]
    fn context_prefixes_and_keeps_code() {
        let result: Result<(), Error> = Err(Error::usage("no such scenario"));
        let error = result.context(|| "bench").unwrap_err();
        assert_eq!(error.to_string(), "bench: no such scenario");
        assert_eq!(error.code(), 2);
        let io: Result<(), std::io::Error> = Err(std::io::Error::other("boom"));
        let error = io.context(|| "reading x").unwrap_err();
        assert_eq!(error.to_string(), "reading x: boom");
        assert_eq!(error.code(), 1);
    }
}
