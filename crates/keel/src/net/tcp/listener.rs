//! `TcpListener`: accepts TCP connections.

use std::future::poll_fn;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::task::{Context, Poll};

use socket2::{Domain, Protocol, Socket, Type};

use super::stream::TcpStream;
use crate::io::readiness::Direction;
use crate::io::source::{current_runtime, IoSource};
use crate::net::{each_addr, resolve};

/// Default listen backlog of [`TcpListenOptions`]: 1024 pending
/// connections. The kernel caps it at `net.core.somaxconn`.
pub const DEFAULT_BACKLOG: u32 = 1024;

/// A TCP socket that accepts connections.
///
/// ```
/// # let rt = keel::Runtime::new().unwrap();
/// # rt.block_on(async {
/// let listener = keel::net::TcpListener::bind("127.0.0.1:0")?;
/// let addr = listener.local_addr()?;
/// let client = keel::spawn(keel::net::TcpStream::connect(addr));
/// let (stream, peer) = listener.accept().await?;
/// assert_eq!(stream.peer_addr()?, peer);
/// client.await.unwrap()?;
/// # std::io::Result::Ok(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct TcpListener {
    io: IoSource<mio::net::TcpListener>,
}

/// Options for binding a [`TcpListener`]: `SO_REUSEPORT` and the backlog.
/// `SO_REUSEADDR` is always set, so a restarted server can bind while old
/// connections linger in `TIME_WAIT`.
#[derive(Debug, Clone)]
pub struct TcpListenOptions {
    reuse_port: bool,
    backlog: u32,
}

impl Default for TcpListenOptions {
    fn default() -> Self {
        TcpListenOptions::new()
    }
}

impl TcpListenOptions {
    /// No `SO_REUSEPORT`, a backlog of [`DEFAULT_BACKLOG`].
    pub fn new() -> TcpListenOptions {
        TcpListenOptions {
            reuse_port: false,
            backlog: DEFAULT_BACKLOG,
        }
    }

    /// Sets `SO_REUSEPORT`, so several processes (or listeners) can bind the
    /// same address and the kernel spreads connections across them: how a
    /// keel server scales out over processes on one host. Default off.
    pub fn reuse_port(&mut self, reuse: bool) -> &mut TcpListenOptions {
        self.reuse_port = reuse;
        self
    }

    /// How many connections the kernel queues before `accept`. Default
    /// [`DEFAULT_BACKLOG`]; a short backlog drops connections (clients see
    /// SYN retries, a second's delay each) under bursts of new connections.
    pub fn backlog(&mut self, backlog: u32) -> &mut TcpListenOptions {
        self.backlog = backlog;
        self
    }

    /// Binds a listener with these options, trying each address `addr`
    /// resolves to in turn.
    ///
    /// # Errors
    ///
    /// The OS error of the last address tried (`AddrInUse`,
    /// `PermissionDenied`, ...), or `Other` outside a keel runtime.
    pub fn bind(&self, addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        let shared = current_runtime()?;
        let listener = each_addr(resolve(addr)?, |addr| self.bind_one(addr))?;
        Ok(TcpListener {
            io: IoSource::listener(shared, listener)?,
        })
    }

    fn bind_one(&self, addr: SocketAddr) -> io::Result<mio::net::TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        if self.reuse_port {
            socket.set_reuse_port(true)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        let backlog = i32::try_from(self.backlog).unwrap_or(i32::MAX);
        socket.listen(backlog)?;
        Ok(mio::net::TcpListener::from_std(socket.into()))
    }
}

impl TcpListener {
    /// Binds a listener to `addr` with the default [`TcpListenOptions`].
    ///
    /// # Errors
    ///
    /// See [`TcpListenOptions::bind`].
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<TcpListener> {
        TcpListenOptions::new().bind(addr)
    }

    /// Options for [`TcpListenOptions::bind`].
    pub fn options() -> TcpListenOptions {
        TcpListenOptions::new()
    }

    /// Takes over a bound and listening std listener (made non-blocking
    /// here).
    ///
    /// # Errors
    ///
    /// If it cannot be made non-blocking or registered, or outside a keel
    /// runtime.
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        let shared = current_runtime()?;
        listener.set_nonblocking(true)?;
        let listener = mio::net::TcpListener::from_std(listener);
        Ok(TcpListener {
            io: IoSource::listener(shared, listener)?,
        })
    }

    /// Waits for a connection; returns it with the peer's address. The
    /// stream is registered with the listener's runtime.
    ///
    /// # Errors
    ///
    /// The OS error of `accept`: notably `EMFILE`/`ENFILE` when out of file
    /// descriptors, or `ConnectionAborted` for a connection reset before it
    /// was accepted. The listener stays usable after any of them. Out of
    /// descriptors, the listener stays readable (the connection waits in
    /// the backlog), so an accept loop should pause before retrying rather
    /// than retry at once.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// The poll form of [`TcpListener::accept`].
    ///
    /// # Errors
    ///
    /// See [`TcpListener::accept`].
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        self.io
            .poll_io(cx, Direction::Read, |listener| listener.accept())
            .map(|result| {
                let (stream, peer) = result?;
                let stream = TcpStream::registered(self.io.runtime().clone(), stream, true)?;
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
}
