//! Unix signals: [`signal`] returns a [`Signal`] that yields each time
//! the signal arrives (see the [parent module](super) for how, and what
//! to expect).

use std::fmt;
use std::future::poll_fn;
use std::io::{self, Read};
use std::os::raw::c_int;
use std::task::{Context, Poll};

use signal_hook::SigId;

use crate::io::readiness::Direction;
use crate::io::source::{current_runtime, IoSource};

/// A signal number, with constructors for the common ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SignalKind(c_int);

impl SignalKind {
    /// A signal by its raw number, e.g. `libc::SIGRTMIN() + 1`. A number
    /// that names no signal is refused by [`signal`], not here.
    pub const fn from_raw(signum: c_int) -> SignalKind {
        SignalKind(signum)
    }

    /// The raw signal number.
    pub const fn as_raw_value(&self) -> c_int {
        self.0
    }

    /// `SIGINT`: Ctrl-C in a terminal.
    pub const fn interrupt() -> SignalKind {
        SignalKind(libc::SIGINT)
    }

    /// `SIGTERM`: the polite request to stop (what `kill`, systemd and
    /// Kubernetes send first).
    pub const fn terminate() -> SignalKind {
        SignalKind(libc::SIGTERM)
    }

    /// `SIGHUP`: the terminal went away; daemons take it as "reload".
    pub const fn hangup() -> SignalKind {
        SignalKind(libc::SIGHUP)
    }

    /// `SIGQUIT`: Ctrl-\ in a terminal.
    pub const fn quit() -> SignalKind {
        SignalKind(libc::SIGQUIT)
    }

    /// `SIGUSR1`, free for the application.
    pub const fn user_defined1() -> SignalKind {
        SignalKind(libc::SIGUSR1)
    }

    /// `SIGUSR2`, free for the application.
    pub const fn user_defined2() -> SignalKind {
        SignalKind(libc::SIGUSR2)
    }

    /// `SIGCHLD`: a child process changed state.
    pub const fn child() -> SignalKind {
        SignalKind(libc::SIGCHLD)
    }

    /// `SIGPIPE`: a write to a pipe or socket whose reader is gone (Rust
    /// programs ignore it from the start; writes get `BrokenPipe`).
    pub const fn pipe() -> SignalKind {
        SignalKind(libc::SIGPIPE)
    }

    /// `SIGALRM`: a timer set with `alarm(2)` expired.
    pub const fn alarm() -> SignalKind {
        SignalKind(libc::SIGALRM)
    }

    /// `SIGWINCH`: the terminal changed size.
    pub const fn window_change() -> SignalKind {
        SignalKind(libc::SIGWINCH)
    }
}

/// Listens for `kind` from now on, on the current runtime's reactor.
///
/// ```
/// use keel::signal::unix::{signal, SignalKind};
///
/// # let rt = keel::Runtime::new().unwrap();
/// # rt.block_on(async {
/// let mut reload = signal(SignalKind::user_defined1())?;
/// // Another process would send it; here the process sends it to itself.
/// // SAFETY: raise(3) is safe to call; the handler is installed above.
/// unsafe { libc::raise(libc::SIGUSR1) };
/// reload.recv().await.expect("the runtime is alive");
/// # std::io::Result::Ok(())
/// # }).unwrap();
/// ```
///
/// # Errors
///
/// `InvalidInput` for a number that is not a signal, or one that cannot
/// be listened for (`SIGKILL`, `SIGSTOP`, `SIGSEGV`, `SIGILL`, `SIGFPE`); the OS error if the socket pair cannot be made (out of
/// descriptors); `Other` outside a keel runtime. The message names the
/// signal. Nothing is left installed after an error.
pub fn signal(kind: SignalKind) -> io::Result<Signal> {
    let shared = current_runtime()?;
    let signum = kind.0;
    // Numbers above the platform's last signal are refused by
    // `sigaction` itself (EINVAL), below.
    if signum < 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{signum} is not a signal number"),
        ));
    }
    if signal_hook::consts::FORBIDDEN.contains(&signum) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "signal {signum} cannot be listened for: it cannot be caught, \
                 or catching it would hide a fault"
            ),
        ));
    }
    let (read, write) = std::os::unix::net::UnixStream::pair()?;
    read.set_nonblocking(true)?;
    write.set_nonblocking(true)?;
    let id = signal_hook::low_level::pipe::register(signum, write).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("cannot listen for signal {signum}: {error}"),
        )
    })?;
    let io =
        IoSource::new(shared, mio::net::UnixStream::from_std(read), false).inspect_err(|_| {
            signal_hook::low_level::unregister(id);
        })?;
    Ok(Signal { kind, id, io })
}

/// Deliveries of one signal, from [`signal`]. Dropping it stops
/// listening (see the [parent module](super) about the default action).
pub struct Signal {
    kind: SignalKind,
    id: SigId,
    /// The read end of the pipe the handler writes to.
    io: IoSource<mio::net::UnixStream>,
}

impl Signal {
    /// The signal this listens for.
    pub fn kind(&self) -> SignalKind {
        self.kind
    }

    /// Waits for the next delivery of the signal (deliveries since the
    /// last `recv` merge into one). `None` once the runtime has shut down:
    /// no delivery can come any more.
    pub async fn recv(&mut self) -> Option<()> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// The poll form of [`Signal::recv`].
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<()>> {
        // One byte per delivery; a read takes up to this many at once, and
        // a later `recv` finds any rest at once: they merge either way.
        let mut buf = [0u8; 64];
        self.io
            .poll_io(cx, Direction::Read, |mut socket| socket.read(&mut buf))
            .map(|result| match result {
                Ok(n) if n > 0 => Some(()),
                // End-of-file cannot come while the handler holds the write
                // end; an error means the runtime is gone.
                _ => None,
            })
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signal")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        // Removes this listener's action; the handler closes its write
        // end with it. The read end is closed when `io` drops.
        signal_hook::low_level::unregister(self.id);
    }
}
