//! `UnixListener`: accepts connections on a Unix domain socket.

use std::future::poll_fn;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::task::{Context, Poll};

use super::stream::UnixStream;
use crate::io::readiness::Direction;
use crate::io::source::{current_runtime, IoSource};

/// A Unix domain socket that accepts connections, bound to a path.
///
/// ```
/// # let rt = keel::Runtime::new().unwrap();
/// # rt.block_on(async {
/// use keel::io::{AsyncReadExt, AsyncWriteExt};
/// use keel::net::{UnixListener, UnixStream};
///
/// let path = std::env::temp_dir().join(format!("keel-doc-{}.sock", std::process::id()));
/// let listener = UnixListener::options().replace_stale(true).bind(&path)?;
/// let client = keel::spawn({
///     let path = path.clone();
///     async move {
///         let mut stream = UnixStream::connect(&path).await?;
///         stream.write_all(b"show stat\n").await?;
///         std::io::Result::Ok(())
///     }
/// });
/// let (mut stream, _) = listener.accept().await?;
/// let mut command = String::new();
/// stream.read_to_string(&mut command).await?;
/// assert_eq!(command, "show stat\n");
/// client.await.unwrap()?;
/// std::fs::remove_file(&path)?;
/// # std::io::Result::Ok(())
/// # }).unwrap();
/// ```
///
/// Dropping the listener closes the socket but leaves its file on disk,
/// as the OS does; remove it, or bind with
/// [`replace_stale`](UnixListenOptions::replace_stale) next time.
#[derive(Debug)]
pub struct UnixListener {
    io: IoSource<mio::net::UnixListener>,
}

/// Options for binding a [`UnixListener`].
#[derive(Debug, Clone, Default)]
pub struct UnixListenOptions {
    replace_stale: bool,
    mode: Option<u32>,
}

impl UnixListenOptions {
    /// Defaults: a file in the way is an error.
    pub fn new() -> UnixListenOptions {
        UnixListenOptions::default()
    }

    /// Replaces a *stale* socket file at the path: one that is a socket
    /// and that nothing listens on any more (connecting to it is refused),
    /// as a server that crashed leaves behind. A socket that a live process
    /// still listens on, or a file that is not a socket, is never removed:
    /// binding then fails with `AddrInUse`. Default off, so that a second
    /// instance of a server cannot take a first one's socket from it.
    pub fn replace_stale(&mut self, replace: bool) -> &mut UnixListenOptions {
        self.replace_stale = replace;
        self
    }

    /// The permission bits of the socket file, which decide who may
    /// connect (connecting needs write permission on it). Default: none
    /// set here, so the process's umask decides, as for any new file.
    ///
    /// With a mode, the socket is bound under a temporary name in the same
    /// directory, given the mode, and only then renamed to `path`: no
    /// client can reach it at `path` while it still has the umask's bits.
    pub fn mode(&mut self, mode: u32) -> &mut UnixListenOptions {
        self.mode = Some(mode);
        self
    }

    /// Binds a listener to `path` (a new socket file) with these options.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a path longer than the OS allows (about 107
    /// bytes on Linux); `AddrInUse` when a file is in the way (see
    /// [`replace_stale`](Self::replace_stale)); the OS error otherwise
    /// (`NotFound` for a missing directory, `PermissionDenied`); `Other`
    /// outside a keel runtime. Each message names the path.
    pub fn bind(&self, path: impl AsRef<Path>) -> io::Result<UnixListener> {
        let path = path.as_ref();
        let shared = current_runtime()?;
        let listener = match self.mode {
            None => self.bind_at(path),
            Some(mode) => self.bind_with_mode(path, mode),
        }
        .map_err(|error| with_path(error, path))?;
        Ok(UnixListener {
            io: IoSource::listener(shared, listener)?,
        })
    }

    /// Binds `path` itself, replacing a stale socket if asked to.
    fn bind_at(&self, path: &Path) -> io::Result<mio::net::UnixListener> {
        match mio::net::UnixListener::bind(path) {
            Err(error) if error.kind() == io::ErrorKind::AddrInUse && self.replace_stale => {
                remove_if_stale(path)?;
                mio::net::UnixListener::bind(path)
            }
            result => result,
        }
    }

    /// Binds a temporary name beside `path`, gives it `mode`, and renames
    /// it to `path` if nothing (but a stale socket, when asked to replace
    /// one) is there.
    fn bind_with_mode(&self, path: &Path, mode: u32) -> io::Result<mio::net::UnixListener> {
        use std::os::unix::fs::PermissionsExt;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(
            ".{}.{}.binding",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let temporary = path.with_file_name(name);
        let listener = mio::net::UnixListener::bind(&temporary)?;
        let placed = std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode))
            .and_then(|()| match std::fs::symlink_metadata(path) {
                Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(error),
                Ok(_) if self.replace_stale => remove_if_stale(path),
                Ok(_) => Err(io::Error::from(io::ErrorKind::AddrInUse)),
            })
            .and_then(|()| std::fs::rename(&temporary, path));
        match placed {
            Ok(()) => Ok(listener),
            Err(error) => {
                let _ = std::fs::remove_file(&temporary);
                Err(error)
            }
        }
    }
}

/// Removes the socket file at `path` if nothing listens on it; otherwise
/// the `AddrInUse` error that binding met.
fn remove_if_stale(path: &Path) -> io::Result<()> {
    let in_use = || io::Error::from(io::ErrorKind::AddrInUse);
    let metadata = std::fs::symlink_metadata(path)?;
    if !metadata.file_type().is_socket() {
        return Err(in_use());
    }
    // A non-blocking connect answers at once: accepted (or queued) by a
    // live listener, `WouldBlock` from a live one whose backlog is full,
    // refused by a stale file.
    match mio::net::UnixStream::connect(path) {
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path)
        }
        _ => Err(in_use()),
    }
}

/// `error`, its message prefixed by the path it concerns.
pub(super) fn with_path(error: io::Error, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

impl UnixListener {
    /// Binds a listener to `path` with the default [`UnixListenOptions`].
    ///
    /// # Errors
    ///
    /// See [`UnixListenOptions::bind`].
    pub fn bind(path: impl AsRef<Path>) -> io::Result<UnixListener> {
        UnixListenOptions::new().bind(path)
    }

    /// Options for [`UnixListenOptions::bind`].
    pub fn options() -> UnixListenOptions {
        UnixListenOptions::new()
    }

    /// Takes over a bound and listening std listener (made non-blocking
    /// here).
    ///
    /// # Errors
    ///
    /// If it cannot be made non-blocking or registered, or outside a keel
    /// runtime.
    pub fn from_std(listener: std::os::unix::net::UnixListener) -> io::Result<UnixListener> {
        let shared = current_runtime()?;
        listener.set_nonblocking(true)?;
        Ok(UnixListener {
            io: IoSource::listener(shared, mio::net::UnixListener::from_std(listener))?,
        })
    }

    /// Waits for a connection; returns it with the peer's address (usually
    /// unnamed: clients rarely bind a path).
    ///
    /// # Errors
    ///
    /// The OS error of `accept`, as for
    /// [`TcpListener::accept`](crate::net::TcpListener::accept): out of file
    /// descriptors, pause before retrying. The listener stays usable.
    pub async fn accept(&self) -> io::Result<(UnixStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// The poll form of [`UnixListener::accept`].
    ///
    /// # Errors
    ///
    /// See [`UnixListener::accept`].
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(UnixStream, SocketAddr)>> {
        self.io
            .poll_io(cx, Direction::Read, |listener| listener.accept())
            .map(|result| {
                let (stream, peer) = result?;
                let stream = UnixStream::registered(self.io.runtime().clone(), stream, true)?;
                Ok((stream, peer))
            })
    }

    /// The address the listener is bound to.
    ///
    /// # Errors
    ///
    /// The OS error of `getsockname`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// The path the listener is bound to, if it has one.
    pub fn path(&self) -> Option<PathBuf> {
        let addr = self.local_addr().ok()?;
        addr.as_pathname().map(Path::to_path_buf)
    }
}
