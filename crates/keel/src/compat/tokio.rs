//! tokio's IO traits on keel's streams, without a tokio runtime.
//!
//! Much of the Rust ecosystem is written against `tokio::io::AsyncRead`
//! and `AsyncWrite`: TLS (`tokio-rustls`), codecs (`tokio-util`'s
//! `Framed`), database drivers that accept a ready stream
//! (`tokio-postgres`'s `connect_raw`). Those traits are plain traits; only
//! tokio's own sockets need tokio's reactor. With the `tokio-io` feature,
//! keel implements them for
//!
//! - [`TcpStream`] and `&TcpStream`,
//! - its halves [`OwnedReadHalf`] (read) and [`OwnedWriteHalf`] (write),
//! - [`UnixStream`] and `&UnixStream`,
//!
//! so such crates run on keel's reactor, keel's batching and keel's
//! classes. This feature depends on tokio with no feature enabled: no
//! tokio runtime is built, started or needed. (A crate that calls
//! `tokio::spawn` or `tokio::time` itself still needs one; these traits do
//! not.)
//!
//! ```
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! # let rt = keel::Runtime::new().unwrap();
//! # rt.block_on(async {
//! let (mut a, mut b) = keel::net::UnixStream::pair()?;
//! // tokio's extension traits (tokio's `io-util` feature), on keel streams.
//! a.write_all(b"ping").await?;
//! let mut buf = [0; 4];
//! b.read_exact(&mut buf).await?;
//! assert_eq!(&buf, b"ping");
//! # std::io::Result::Ok(())
//! # }).unwrap();
//! ```
//!
//! # Reads into uninitialised memory
//!
//! tokio's `ReadBuf` may hand over spare capacity that was never
//! initialised. keel receives into it with `recv(2)`, which takes a
//! pointer, and marks as initialised only the bytes the kernel wrote:
//! no zeroing, no reference to uninitialised bytes.
//!
//! `poll_shutdown` shuts down the writing direction (the peer reads
//! end-of-file), as `AsyncWrite::poll_close` does for `futures-io`.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_io::AsyncWrite as FuturesWrite;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[cfg(unix)]
use crate::net::UnixStream;
use crate::net::{OwnedReadHalf, OwnedWriteHalf, TcpStream};

/// Reads into `buf`'s unfilled part with `read`, which receives into
/// memory that may be uninitialised and returns how many bytes it wrote.
fn read_into(
    buf: &mut ReadBuf<'_>,
    read: impl FnOnce(&mut [std::mem::MaybeUninit<u8>]) -> Poll<io::Result<usize>>,
) -> Poll<io::Result<()>> {
    // SAFETY: the unfilled part is only written to, by `recv`, never read
    // here, and never de-initialised (`recv` writes bytes, it does not
    // write `MaybeUninit::uninit()`).
    let spare = unsafe { buf.unfilled_mut() };
    let len = spare.len();
    let n = ready!(read(spare))?.min(len);
    // SAFETY: `recv` initialised the first `n` bytes of the unfilled part.
    unsafe { buf.assume_init(n) };
    buf.advance(n);
    Poll::Ready(Ok(()))
}

/// Implements tokio's `AsyncRead` for a type with `poll_read_uninit`
/// reachable through `$stream`.
macro_rules! impl_read {
    ($ty:ty, |$this:ident| $stream:expr) => {
        impl AsyncRead for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                let $this = &*self;
                let stream = $stream;
                read_into(buf, |spare| stream.poll_read_uninit(cx, spare))
            }
        }
    };
}

/// Implements tokio's `AsyncWrite` for a type that implements the
/// `futures-io` one (and is `Unpin`).
macro_rules! impl_write {
    ($ty:ty) => {
        impl AsyncWrite for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                FuturesWrite::poll_write(self, cx, buf)
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                FuturesWrite::poll_write_vectored(self, cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                FuturesWrite::poll_flush(self, cx)
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                FuturesWrite::poll_close(self, cx)
            }
        }
    };
}

impl_read!(TcpStream, |this| this);
impl_read!(&TcpStream, |this| *this);
impl_read!(OwnedReadHalf, |this| this.stream());
impl_write!(TcpStream);
impl_write!(&TcpStream);
impl_write!(OwnedWriteHalf);

#[cfg(unix)]
impl_read!(UnixStream, |this| this);
#[cfg(unix)]
impl_read!(&UnixStream, |this| *this);
#[cfg(unix)]
impl_write!(UnixStream);
#[cfg(unix)]
impl_write!(&UnixStream);
