//! Sockets: TCP listeners and streams, UDP sockets.
//!
//! Each type wraps a non-blocking `mio` socket registered with the reactor
//! of the runtime it was created in (see [`crate::io`]), so it must be
//! created inside a keel runtime: in a task, or in `Runtime::block_on`.
//! Streams implement [`AsyncRead`](crate::io::AsyncRead) and
//! [`AsyncWrite`](crate::io::AsyncWrite), for `&TcpStream` too, so one task
//! may read while another writes.
//!
//! Errors are the `io::Error`s of the system calls, with their OS codes
//! (`ConnectionRefused`, `ConnectionReset`, `AddrInUse`, ...). Dropping a
//! socket takes it off the reactor and closes it, including while a task
//! waits on it; a pending `accept`, `read` or `connect` future may simply
//! be dropped. The close is at once, except for a stream dropped on the
//! worker whose io_uring watches it (a ring per worker): its close goes
//! in with that worker's next look at IO, within `io_interval` of its own
//! time or when it next sleeps, which saves two system calls a
//! connection. A listener stops listening at once on every driver.
//!
//! [`TcpStream::connect`] takes keel's [`ToSocketAddrs`]: a literal
//! address is used as it is, a host name is resolved on the blocking pool
//! ([`lookup_host`]), so a slow resolver never blocks a worker. The
//! binding calls (`TcpListener::bind`, `UdpSocket::bind` and `connect`),
//! which are not async, take `std::net::ToSocketAddrs` and resolve a name
//! on the calling thread: give them literal addresses inside tasks.
//!
//! Unix domain sockets ([`UnixListener`], [`UnixStream`]) serve local
//! clients: a control socket beside a process, a proxy's stats socket.
//!
//! A TCP stream may deliver its input in batches rather than per packet
//! ([`BatchPolicy`], set with [`TcpStream::set_batch`]), so that a peer
//! writing small pieces does not wake its reader for each; [`batch`]
//! explains the rules and what they cost.

mod addr;
pub mod batch;
mod tcp;
mod udp;
#[cfg(unix)]
mod unix;

pub use addr::{lookup_host, ToSocketAddrs};
pub(crate) use batch::BatchMode;
pub use batch::BatchPolicy;
pub use tcp::listener::{TcpListenOptions, TcpListener, DEFAULT_BACKLOG};
pub use tcp::split::{OwnedReadHalf, OwnedWriteHalf};
pub use tcp::stream::TcpStream;
pub use udp::UdpSocket;
#[cfg(unix)]
pub use unix::{UnixListenOptions, UnixListener, UnixStream};

use std::io;
use std::net::SocketAddr;

/// Resolves `addr`, failing clearly when it names no address.
fn resolve(addr: impl std::net::ToSocketAddrs) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the address resolved to no socket address",
        ));
    }
    Ok(addrs)
}

/// Tries `f` on each address in turn; the first success, or the last error.
fn each_addr<T>(
    addrs: Vec<SocketAddr>,
    mut f: impl FnMut(SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for addr in addrs {
        match f(addr) {
            Ok(value) => return Ok(value),
            Err(error) => last = Some(error),
        }
    }
    Err(last.expect("resolve returns at least one address"))
}

/// `recv(2)` from `socket` into memory that may be uninitialised; on
/// `Ok(n)`, the first `n` bytes of `buf` are initialised.
#[cfg(all(unix, any(feature = "hyper", feature = "tokio-io")))]
pub(crate) fn recv_uninit(
    socket: &impl std::os::fd::AsRawFd,
    buf: &mut [std::mem::MaybeUninit<u8>],
) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the whole
    // call (it is borrowed mutably), and `recv` writes at most that many
    // bytes into it; the fd is the socket's own, open while `socket` is
    // borrowed.
    let n = unsafe { libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n.unsigned_abs())
    }
}
