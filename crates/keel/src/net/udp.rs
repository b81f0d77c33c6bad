//! `UdpSocket`: datagrams.

use std::future::poll_fn;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};

use crate::io::readiness::Direction;
use crate::io::source::{current_runtime, IoSource};
use crate::net::{each_addr, resolve};

/// A UDP socket.
///
/// ```
/// # let rt = keel::Runtime::new().unwrap();
/// # rt.block_on(async {
/// use keel::net::UdpSocket;
/// let a = UdpSocket::bind("127.0.0.1:0")?;
/// let b = UdpSocket::bind("127.0.0.1:0")?;
/// a.send_to(b"ping", b.local_addr()?).await?;
/// let mut buf = [0; 16];
/// let (n, from) = b.recv_from(&mut buf).await?;
/// assert_eq!((&buf[..n], from), (&b"ping"[..], a.local_addr()?));
/// # std::io::Result::Ok(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct UdpSocket {
    io: IoSource<mio::net::UdpSocket>,
}

impl UdpSocket {
    /// Binds a socket to `addr`, trying each address it resolves to.
    ///
    /// # Errors
    ///
    /// The OS error of the last address tried, or `Other` outside a keel
    /// runtime.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<UdpSocket> {
        let shared = current_runtime()?;
        let socket = each_addr(resolve(addr)?, mio::net::UdpSocket::bind)?;
        Ok(UdpSocket {
            io: IoSource::new(shared, socket, true)?,
        })
    }

    /// Takes over a bound std socket (made non-blocking here).
    ///
    /// # Errors
    ///
    /// If it cannot be made non-blocking or registered, or outside a keel
    /// runtime.
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        let shared = current_runtime()?;
        socket.set_nonblocking(true)?;
        Ok(UdpSocket {
            io: IoSource::new(shared, mio::net::UdpSocket::from_std(socket), true)?,
        })
    }

    /// Sets the default destination of [`send`](UdpSocket::send) and the
    /// only source [`recv`](UdpSocket::recv) accepts.
    ///
    /// # Errors
    ///
    /// The OS error of `connect` for the last address tried.
    pub fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<()> {
        each_addr(resolve(addr)?, |addr| self.io.get_ref().connect(addr))
    }

    /// Sends one datagram to `target`; returns the bytes sent.
    ///
    /// # Errors
    ///
    /// The OS error of `sendto` (e.g. `ConnectionRefused` reported from an
    /// earlier datagram's ICMP error).
    pub async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        poll_fn(|cx| {
            self.io
                .poll_io(cx, Direction::Write, |socket| socket.send_to(buf, target))
        })
        .await
    }

    /// Receives one datagram; returns its length and sender. A datagram
    /// longer than `buf` is truncated.
    ///
    /// # Errors
    ///
    /// The OS error of `recvfrom`.
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        poll_fn(|cx| {
            self.io
                .poll_io(cx, Direction::Read, |socket| socket.recv_from(buf))
        })
        .await
    }

    /// Sends one datagram to the connected address.
    ///
    /// # Errors
    ///
    /// Without [`connect`](UdpSocket::connect), the OS error for a missing
    /// destination (`EDESTADDRREQ` on Linux); otherwise the OS error of
    /// `send`.
    pub async fn send(&self, buf: &[u8]) -> io::Result<usize> {
        poll_fn(|cx| {
            self.io
                .poll_io(cx, Direction::Write, |socket| socket.send(buf))
        })
        .await
    }

    /// Receives one datagram from the connected address.
    ///
    /// # Errors
    ///
    /// The OS error of `recv` (e.g. `ConnectionRefused` after a datagram
    /// to a closed port).
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| {
            self.io
                .poll_io(cx, Direction::Read, |socket| socket.recv(buf))
        })
        .await
    }

    /// The address the socket is bound to.
    ///
    /// # Errors
    ///
    /// The OS error of `getsockname`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// The connected address.
    ///
    /// # Errors
    ///
    /// `NotConnected` without [`connect`](UdpSocket::connect).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().peer_addr()
    }
}
