//! The one error type of the `keel` tool.
//!
//! Every failure `keel top` can meet (an address that does not answer, an
//! answer that is not a `/stats` document, a terminal that cannot be taken
//! over) ends up as a sentence for a person, built up with context as it
//! travels outwards, and exit code 1. Usage errors are clap's own (exit
//! code 2) and never reach this type.

use std::fmt;

/// A failure, as a message for a person.
#[derive(Debug)]
pub struct Error {
    /// What went wrong, outermost context first.
    message: String,
}

impl Error {
    /// A run-time failure.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// Prefixes the message with what was being done when it happened.
    pub fn context(self, context: impl fmt::Display) -> Self {
        Self::new(format!("{context}: {}", self.message))
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

    /// Context nests outermost first.
    #[test]
    fn context_prefixes() {
        let result: Result<(), Error> = Err(Error::new("no answer"));
        let error = result.context(|| "top").unwrap_err();
        assert_eq!(error.to_string(), "top: no answer");
        let io: Result<(), std::io::Error> = Err(std::io::Error::other("boom"));
        let error = io.context(|| "reading keys").unwrap_err();
        assert_eq!(error.to_string(), "reading keys: boom");
    }
}
