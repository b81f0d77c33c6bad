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
//! socket deregisters it from the reactor and closes it at once, including
//! while a task waits on it; a pending `accept`, `read` or `connect`
//! future may simply be dropped.
//!
//! Address arguments take [`ToSocketAddrs`] like
//! `std::net`; a host name is resolved with the blocking system resolver,
//! so pass a [`SocketAddr`] from inside tasks.
//!
//! A TCP stream may deliver its input in batches rather than per packet
//! ([`BatchPolicy`], set with [`TcpStream::set_batch`]), so that a peer
//! writing small pieces does not wake its reader for each; [`batch`]
//! explains the rules and what they cost.

pub mod batch;
mod tcp;
mod udp;

pub(crate) use batch::BatchMode;
pub use batch::BatchPolicy;
pub use tcp::listener::{TcpListenOptions, TcpListener, DEFAULT_BACKLOG};
pub use tcp::split::{OwnedReadHalf, OwnedWriteHalf};
pub use tcp::stream::TcpStream;
pub use udp::UdpSocket;

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

/// Resolves `addr`, failing clearly when it names no address.
fn resolve(addr: impl ToSocketAddrs) -> io::Result<Vec<SocketAddr>> {
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
