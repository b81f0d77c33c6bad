//! hyper 1.x on keel.
//!
//! hyper leaves the runtime to its caller through four traits in
//! `hyper::rt`; this module implements them:
//!
//! - `Read` and `Write` for [`TcpStream`] and
//!   [`UnixStream`] themselves (HTTP over a Unix
//!   socket: a local control endpoint), and for any other
//!   `futures-io` stream wrapped in [`HyperIo`];
//! - `Executor` with [`HyperExecutor`], which spawns hyper's background
//!   tasks (HTTP/2 streams and connection drivers) on a keel runtime,
//!   in a class of your choosing;
//! - `Timer` with [`HyperTimer`], on keel's timer wheel (header-read
//!   timeouts, HTTP/2 keep-alive pings);
//!
//! and, with the feature `hyper-client`, the connector of hyper's clients:
//! `Connector`, which opens keel sockets for hyper-util's pooled
//! `Client` and tonic's `Channel` (see its module,
//! `compat::hyper::connector`).
//!
//! ```
//! use std::convert::Infallible;
//! use http_body_util::Full;
//! use hyper::body::Bytes;
//! use hyper::{server::conn::http1, service::service_fn, Request, Response};
//! use keel::net::TcpListener;
//!
//! async fn hello(_: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
//!     Ok(Response::new(Full::new(Bytes::from_static(b"Hello, world!"))))
//! }
//!
//! # let rt = keel::Runtime::new().unwrap();
//! # rt.block_on(async {
//! let listener = TcpListener::bind("127.0.0.1:0")?;
//! # let addr = listener.local_addr()?;
//! # keel::spawn(async move {
//! #     let mut s = keel::net::TcpStream::connect(addr).await.unwrap();
//! #     use futures_util::{AsyncReadExt, AsyncWriteExt};
//! #     s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
//! #     let mut answer = String::new();
//! #     s.read_to_string(&mut answer).await.unwrap();
//! #     assert!(answer.ends_with("Hello, world!"));
//! # });
//! # for _ in 0..1 {
//! let (stream, _) = listener.accept().await?;
//! keel::spawn(async move {
//!     if let Err(error) = http1::Builder::new()
//!         .serve_connection(stream, service_fn(hello))
//!         .await
//!     {
//!         eprintln!("connection failed: {error}");
//!     }
//! })
//! # .await.unwrap();
//! # }
//! # Ok::<(), std::io::Error>(())
//! # }).unwrap();
//! ```
//!
//! # Reads into memory hyper has not initialised
//!
//! hyper hands a read a cursor over spare capacity that may be
//! uninitialised. [`TcpStream`] receives straight into it (`recv(2)` takes
//! a pointer, not a slice). A `futures-io` stream in [`HyperIo`] needs an
//! initialised `&mut [u8]`, so the adapter zeroes the part of the cursor it
//! reads into first, at most [`READ_CHUNK`] bytes per read: a memset
//! beside a system call, and no reference to uninitialised bytes.

use std::fmt;
use std::future::Future;
use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use futures_io::{AsyncRead, AsyncWrite};
use hyper::rt::ReadBufCursor;

#[cfg(feature = "hyper-client")]
mod connector;
#[cfg(feature = "hyper-client")]
pub use connector::Connector;

use crate::net::TcpStream;
#[cfg(unix)]
use crate::net::UnixStream;
use crate::time::Sleep;
use crate::{Class, Handle};

/// The most bytes one hyper read asks of the socket (and zeroes first).
///
/// 64 KiB: more than hyper's initial 8 KiB buffer, so a read never
/// falls short because of the cap while hyper's buffer is small, and as
/// much as a loopback socket usually has queued.
pub const READ_CHUNK: usize = 64 * 1024;

/// A `futures-io` stream seen through hyper's `rt::Read` and `rt::Write`.
///
/// [`TcpStream`] implements hyper's traits itself; wrap anything else
/// (a split half, a TLS stream, a test double) in `HyperIo`.
#[derive(Debug)]
pub struct HyperIo<T> {
    inner: T,
}

impl<T> HyperIo<T> {
    /// Wraps `inner`.
    pub fn new(inner: T) -> HyperIo<T> {
        HyperIo { inner }
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    /// The wrapped stream, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Unwraps the stream.
    pub fn into_inner(self) -> T {
        self.inner
    }
}

/// Reads from `reader` into hyper's cursor: zeroes up to [`READ_CHUNK`]
/// bytes of it, reads into them, and advances the cursor by what was read.
fn read_into_cursor<R: AsyncRead + Unpin + ?Sized>(
    reader: &mut R,
    cx: &mut Context<'_>,
    mut cursor: ReadBufCursor<'_>,
) -> Poll<io::Result<()>> {
    // SAFETY: `as_mut` gives the cursor's unfilled part, which may be
    // uninitialised; the only thing written to it below is zeros, and no
    // byte of it is read before that.
    let spare = unsafe { cursor.as_mut() };
    let len = spare.len().min(READ_CHUNK);
    let spare = &mut spare[..len];
    for byte in spare.iter_mut() {
        byte.write(0);
    }
    // SAFETY: every byte of `spare` was initialised just above, and
    // `MaybeUninit<u8>` has the layout of `u8`.
    let buf = unsafe { &mut *(spare as *mut [MaybeUninit<u8>] as *mut [u8]) };
    let n = match Pin::new(reader).poll_read(cx, buf) {
        Poll::Ready(Ok(n)) => n.min(len),
        Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
        Poll::Pending => return Poll::Pending,
    };
    // SAFETY: the first `n` bytes of the unfilled part are initialised
    // (all `len` of them were zeroed, and `n <= len`).
    unsafe { cursor.advance(n) };
    Poll::Ready(Ok(()))
}

impl<T: AsyncRead + Unpin> hyper::rt::Read for HyperIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        read_into_cursor(&mut self.get_mut().inner, cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> hyper::rt::Write for HyperIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }

    /// Vectored writes go to the stream's own `poll_write_vectored`; a
    /// `futures-io` stream without one falls back to the first buffer,
    /// which hyper handles, so this is always worth claiming.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }
}

/// Implements hyper's `Read` and `Write` for a keel stream that has
/// `poll_read_uninit` and the `futures-io` write trait.
macro_rules! impl_hyper_io {
    ($ty:ty) => {
        impl hyper::rt::Read for $ty {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                mut buf: ReadBufCursor<'_>,
            ) -> Poll<io::Result<()>> {
                // SAFETY: the unfilled part is only written to, by `recv`,
                // and never read here.
                let spare = unsafe { buf.as_mut() };
                let len = spare.len();
                let n = ready!(self.poll_read_uninit(cx, spare))?;
                // SAFETY: `recv` initialised the first `n` bytes of the
                // unfilled part, and `n <= len`.
                unsafe { buf.advance(n.min(len)) };
                Poll::Ready(Ok(()))
            }
        }

        impl hyper::rt::Write for $ty {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                AsyncWrite::poll_write(self, cx, buf)
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                AsyncWrite::poll_flush(self, cx)
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                AsyncWrite::poll_close(self, cx)
            }

            fn is_write_vectored(&self) -> bool {
                true
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                AsyncWrite::poll_write_vectored(self, cx, bufs)
            }
        }
    };
}

impl_hyper_io!(TcpStream);
#[cfg(unix)]
impl_hyper_io!(UnixStream);

/// Spawns hyper's background tasks on a keel runtime.
///
/// HTTP/2 connections need one (`http2::Builder::new(HyperExecutor::current())`);
/// HTTP/1 does not. Tasks go to the class set with [`class`](Self::class),
/// or, by default, to the class of the task that hyper spawns them from:
/// the connection's own, so an HTTP/2 server run in
/// [`Class::URGENT`] keeps its streams there.
#[derive(Clone)]
pub struct HyperExecutor {
    handle: Handle,
    class: Option<Class>,
}

impl HyperExecutor {
    /// An executor for `handle`'s runtime.
    pub fn new(handle: Handle) -> HyperExecutor {
        HyperExecutor {
            handle,
            class: None,
        }
    }

    /// An executor for the runtime of the calling thread.
    ///
    /// # Panics
    ///
    /// Outside a keel runtime; use [`HyperExecutor::new`] there.
    #[track_caller]
    pub fn current() -> HyperExecutor {
        HyperExecutor::new(Handle::current())
    }

    /// Spawns every task in `class` instead of the spawning task's class.
    ///
    /// # Panics
    ///
    /// If `class` does not exist in the runtime.
    #[track_caller]
    pub fn class(mut self, class: Class) -> HyperExecutor {
        assert!(
            self.handle.class_name(class).is_some(),
            "class {} does not exist in this runtime",
            class.index()
        );
        self.class = Some(class);
        self
    }
}

impl fmt::Debug for HyperExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HyperExecutor")
            .field("class", &self.class)
            .finish_non_exhaustive()
    }
}

impl<F> hyper::rt::Executor<F> for HyperExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        // Dropping the handle detaches the task: hyper tracks its own.
        match self.class {
            Some(class) => drop(self.handle.spawn_in(class, future)),
            None => drop(self.handle.spawn(future)),
        }
    }
}

/// hyper's timer on keel's timer wheel.
///
/// Give it to builders that take one (`http1::Builder::timer`, needed for
/// `header_read_timeout`; `http2::Builder::timer`, for keep-alive pings).
/// Its sleeps are [`Sleep`]s and must be polled inside a keel runtime,
/// which is where hyper polls them.
#[derive(Clone, Copy, Debug, Default)]
pub struct HyperTimer;

impl HyperTimer {
    /// A timer.
    pub fn new() -> HyperTimer {
        HyperTimer
    }
}

impl hyper::rt::Sleep for Sleep {}

impl hyper::rt::Timer for HyperTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(crate::time::sleep(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(crate::time::sleep_until(deadline))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Sleep>() {
            Some(ours) => ours.get_mut().reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}
