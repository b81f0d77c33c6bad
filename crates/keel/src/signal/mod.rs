//! Signals as futures: [`ctrl_c`] and, on Unix, [`unix::signal`].
//!
//! A server that stops on `SIGTERM` or Ctrl-C should stop *gracefully*:
//! stop accepting, let the requests in flight finish, flush what must be
//! flushed, then exit. That needs the signal to arrive as an event in a
//! task, not as the default action that kills the process at once.
//!
//! # How a signal reaches a task
//!
//! 1. [`unix::signal`] installs a handler for the signal (through
//!    `signal-hook`, which chains handlers, so several listeners and other
//!    libraries coexist) and gives it the write end of a socket pair. The
//!    read end is registered with the runtime's reactor like any socket.
//! 2. In the handler, the only work is one non-blocking `send` of a byte
//!    to that socket: async-signal-safe, and never blocking (a full
//!    socket drops the byte, which only merges that signal with the ones
//!    already queued).
//! 3. The reactor sees the socket readable and wakes the task waiting in
//!    [`Signal::recv`](unix::Signal::recv), which drains the bytes.
//!
//! So a signal costs the worker one readiness event, and nothing runs in
//! the handler that could deadlock or allocate.
//!
//! # What to expect
//!
//! - A listener sees the signals that arrive after it was created.
//!   Deliveries between two `recv` calls merge into one: count signals
//!   by what they ask for, not by how many arrived.
//! - Every listener of a signal is woken by each delivery; creating two
//!   listeners for one signal is allowed and both see it.
//! - Once a signal has been listened for, its default action does not
//!   come back for the life of the process, even when every listener is
//!   dropped: a `SIGINT` or `SIGTERM` that arrives afterwards is ignored
//!   instead of ending the process. Keep a listener for as long as the
//!   signal should mean something.
//! - `SIGKILL`, `SIGSTOP`, `SIGSEGV`, `SIGILL` and `SIGFPE` cannot be listened
//!   for: [`unix::signal`] refuses them with an error.

#[cfg(unix)]
pub mod unix;

use std::io;

/// Waits for the next Ctrl-C (`SIGINT`) after its first poll.
///
/// The handler is installed on that first poll: a Ctrl-C before it takes
/// the default action (the process ends). Keep one such future (or a
/// [`unix::Signal`]) alive from the start of `main` if that matters.
///
/// ```no_run
/// # let rt = keel::Runtime::new().unwrap();
/// # rt.block_on(async {
/// keel::signal::ctrl_c().await?;
/// println!("Ctrl-C: shutting down");
/// # std::io::Result::Ok(())
/// # }).unwrap();
/// ```
///
/// # Errors
///
/// If the handler cannot be installed, outside a keel runtime, or if the
/// runtime shuts down while waiting.
#[cfg(unix)]
pub async fn ctrl_c() -> io::Result<()> {
    let mut interrupt = unix::signal(unix::SignalKind::interrupt())?;
    match interrupt.recv().await {
        Some(()) => Ok(()),
        None => Err(io::Error::other(
            "the keel runtime shut down while waiting for Ctrl-C",
        )),
    }
}
