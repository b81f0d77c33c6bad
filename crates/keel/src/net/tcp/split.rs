//! The owned halves of a [`TcpStream`], for a reader task and a writer
//! task.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_io::{AsyncRead, AsyncWrite};

use super::stream::TcpStream;
use crate::net::BatchPolicy;

/// The reading half of a [`TcpStream`], from [`TcpStream::into_split`].
/// It keeps the stream's [`BatchPolicy`], which it may change.
#[derive(Debug)]
pub struct OwnedReadHalf {
    stream: Arc<TcpStream>,
}

/// The writing half of a [`TcpStream`], from [`TcpStream::into_split`].
/// Dropping it shuts down the writing direction (the peer reads
/// end-of-file), as closing it does.
#[derive(Debug)]
pub struct OwnedWriteHalf {
    stream: Arc<TcpStream>,
}

impl OwnedReadHalf {
    pub(crate) fn new(stream: Arc<TcpStream>) -> OwnedReadHalf {
        OwnedReadHalf { stream }
    }

    /// The stream this half reads.
    #[cfg(feature = "tokio-io")]
    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Sets how reads deliver input; see [`TcpStream::set_batch`].
    ///
    /// # Errors
    ///
    /// See [`TcpStream::set_batch`].
    pub fn set_batch(&self, policy: BatchPolicy) -> io::Result<()> {
        self.stream.set_batch(policy)
    }

    /// The batch policy in force; see [`TcpStream::batch`].
    pub fn batch(&self) -> BatchPolicy {
        self.stream.batch()
    }

    /// The remote address of the connection.
    ///
    /// # Errors
    ///
    /// See [`TcpStream::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// The local address of the connection.
    ///
    /// # Errors
    ///
    /// See [`TcpStream::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }
}

impl OwnedWriteHalf {
    pub(crate) fn new(stream: Arc<TcpStream>) -> OwnedWriteHalf {
        OwnedWriteHalf { stream }
    }

    /// The remote address of the connection.
    ///
    /// # Errors
    ///
    /// See [`TcpStream::peer_addr`].
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// The local address of the connection.
    ///
    /// # Errors
    ///
    /// See [`TcpStream::local_addr`].
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        // Nothing to report to: a peer that is already gone is fine.
        let _ = self.stream.close_write();
    }
}

impl AsyncRead for OwnedReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        self.stream.poll_read_priv(cx, buf)
    }

    fn poll_read_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
    ) -> Poll<io::Result<usize>> {
        self.stream.poll_read_vectored_priv(cx, bufs)
    }
}

impl AsyncWrite for OwnedWriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.stream.poll_write_priv(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.stream.poll_write_vectored_priv(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.stream.close_write())
    }
}
