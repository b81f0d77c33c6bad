//! `UnixStream`: a connection over a Unix domain socket.

use std::future::poll_fn;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use futures_io::{AsyncRead, AsyncWrite};

use super::listener::with_path;
use crate::io::readiness::Direction;
use crate::io::source::{current_runtime, IoSource};
use crate::sched::Shared;

/// A connection over a Unix domain socket, readable and writable through
/// [`AsyncRead`]/[`AsyncWrite`] (for `&UnixStream` too, so one task may
/// read while another writes).
///
/// Reads deliver as soon as any byte is queued: batching does not apply
/// to Unix sockets (see [`crate::net`]'s Unix section).
#[derive(Debug)]
pub struct UnixStream {
    io: IoSource<mio::net::UnixStream>,
}

impl UnixStream {
    /// Connects to the socket at `path`.
    ///
    /// # Errors
    ///
    /// `NotFound` when no file is there, `ConnectionRefused` when nothing
    /// listens on it, `InvalidInput` for a path too long, `WouldBlock` when
    /// the listener's backlog is full (a Unix socket does not wait for room),
    /// `Other` outside a keel runtime. Each message names the path.
    pub async fn connect(path: impl AsRef<Path>) -> io::Result<UnixStream> {
        let path = path.as_ref();
        let shared = current_runtime()?;
        let stream = mio::net::UnixStream::connect(path).map_err(|e| with_path(e, path))?;
        let stream = UnixStream::registered(shared, stream, false)?;
        poll_fn(|cx| stream.poll_connected(cx))
            .await
            .map_err(|e| with_path(e, path))?;
        Ok(stream)
    }

    /// A pair of connected streams (`socketpair(2)`), both registered with
    /// the current runtime: a channel between two tasks that speaks the
    /// stream traits, or a test double for a network peer.
    ///
    /// # Errors
    ///
    /// The OS error of `socketpair` (out of descriptors), or `Other`
    /// outside a keel runtime.
    pub fn pair() -> io::Result<(UnixStream, UnixStream)> {
        let shared = current_runtime()?;
        let (a, b) = mio::net::UnixStream::pair()?;
        Ok((
            UnixStream::registered(shared.clone(), a, true)?,
            UnixStream::registered(shared, b, true)?,
        ))
    }

    /// Takes over a connected std stream (made non-blocking here).
    ///
    /// # Errors
    ///
    /// If it cannot be made non-blocking or registered, or outside a keel
    /// runtime.
    pub fn from_std(stream: std::os::unix::net::UnixStream) -> io::Result<UnixStream> {
        let shared = current_runtime()?;
        stream.set_nonblocking(true)?;
        UnixStream::registered(shared, mio::net::UnixStream::from_std(stream), true)
    }

    /// Wraps a connected or connecting mio stream.
    pub(crate) fn registered(
        shared: Arc<Shared>,
        stream: mio::net::UnixStream,
        assume_ready: bool,
    ) -> io::Result<UnixStream> {
        Ok(UnixStream {
            io: IoSource::new(shared, stream, assume_ready)?,
        })
    }

    /// Ready once the connection is established, with its outcome.
    fn poll_connected(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.io.poll_ready(cx, Direction::Write))?;
        let socket = self.io.get_ref();
        if let Some(error) = socket.take_error()? {
            return Poll::Ready(Err(error));
        }
        socket.peer_addr()?;
        Poll::Ready(Ok(()))
    }

    /// The local address (usually unnamed for a client).
    ///
    /// # Errors
    ///
    /// The OS error of `getsockname`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// The peer's address (the listener's path, seen from a client).
    ///
    /// # Errors
    ///
    /// `NotConnected` once the peer is gone, or another OS error.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().peer_addr()
    }

    /// Shuts down the reading half, the writing half, or both; shutting
    /// down writing lets the peer read end-of-file.
    ///
    /// # Errors
    ///
    /// The OS error of `shutdown`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.io.get_ref().shutdown(how)
    }

    fn close_write(&self) -> io::Result<()> {
        match self.shutdown(Shutdown::Write) {
            Err(error) if error.kind() == io::ErrorKind::NotConnected => Ok(()),
            result => result,
        }
    }

    fn poll_read_priv(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let len = buf.len();
        self.io
            .poll_stream_read(cx, len, |mut socket| socket.read(buf))
    }

    /// A read into memory that may be uninitialised: the bytes are
    /// received straight into `buf` by `recv(2)`. On `Ready(Ok(n))` the
    /// first `n` bytes of `buf` are initialised.
    #[cfg(any(feature = "hyper", feature = "tokio-io"))]
    pub(crate) fn poll_read_uninit(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [std::mem::MaybeUninit<u8>],
    ) -> Poll<io::Result<usize>> {
        let len = buf.len();
        self.io
            .poll_stream_read(cx, len, |socket| crate::net::recv_uninit(socket, buf))
    }

    fn poll_read_vectored_priv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|buf| buf.len()).sum();
        self.io
            .poll_stream_read(cx, len, |mut socket| socket.read_vectored(bufs))
    }

    fn poll_write_priv(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.io
            .poll_io(cx, Direction::Write, |mut socket| socket.write(buf))
    }

    fn poll_write_vectored_priv(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.io.poll_io(cx, Direction::Write, |mut socket| {
            socket.write_vectored(bufs)
        })
    }
}

/// Implements the IO traits for `UnixStream` and `&UnixStream`.
macro_rules! impl_stream_io {
    ($($ty:ty),*) => {$(
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut [u8],
            ) -> Poll<io::Result<usize>> {
                self.poll_read_priv(cx, buf)
            }

            fn poll_read_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &mut [IoSliceMut<'_>],
            ) -> Poll<io::Result<usize>> {
                self.poll_read_vectored_priv(cx, bufs)
            }
        }

        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.poll_write_priv(cx, buf)
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                self.poll_write_vectored_priv(cx, bufs)
            }

            /// A Unix stream has no user-space buffer to flush.
            fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            /// Shuts down the writing direction (the peer reads end-of-file).
            fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(self.close_write())
            }
        }
    )*};
}

impl_stream_io!(UnixStream, &UnixStream);
