//! `TcpStream`: a TCP connection.

use std::future::poll_fn;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures_io::{AsyncRead, AsyncWrite};
use socket2::SockRef;

use super::split::{OwnedReadHalf, OwnedWriteHalf};
use crate::io::readiness::Direction;
use crate::io::ring_recv::RecvSlot;
use crate::io::source::{current_runtime, IoSource};
use crate::net::addr::{resolve, target};
use crate::net::batch::reader::BatchCell;
use crate::net::{BatchMode, BatchPolicy, ToSocketAddrs};
use crate::sched::Shared;

/// A TCP connection, readable and writable through
/// [`AsyncRead`]/[`AsyncWrite`] (see [`crate::io`] for the helpers).
///
/// One task may read while another writes (both traits are implemented for
/// `&TcpStream`, and [`TcpStream::into_split`] gives owned halves); two
/// tasks reading at once would race for the bytes: readiness wakes every
/// waiting reader, one of them gets the bytes, and the others wait again.
///
/// Reads deliver input as soon as any byte is there, unless a
/// [`BatchPolicy`] says to wait for more ([`TcpStream::set_batch`]).
///
/// On an io_uring reactor ([`IoBackend::Uring`](crate::io::IoBackend)),
/// reads complete on the ring into a buffer the stream owns (up to
/// 64 KiB, allocated at its first read) and are copied out; see
/// `io::ring_recv` in the source for why and what it costs.
#[derive(Debug)]
pub struct TcpStream {
    io: IoSource<mio::net::TcpStream>,
    /// The batch policy and the state of batched reads.
    batch: BatchCell,
    /// Where reads complete on the ring, when they do.
    ring: Option<Arc<RecvSlot>>,
}

impl Drop for TcpStream {
    /// Closes the receive slot before `io`'s drop closes the descriptor
    /// (see `io::ring_recv`).
    fn drop(&mut self) {
        if let Some(slot) = &self.ring {
            slot.close();
        }
    }
}

impl TcpStream {
    /// Connects to `addr`, trying each address it resolves to in turn.
    ///
    /// A literal address (`"127.0.0.1:80"`, a [`SocketAddr`]) is used as
    /// it is; a host name is resolved on the blocking pool, never on a
    /// worker (see [`lookup_host`](crate::net::lookup_host)).
    ///
    /// # Errors
    ///
    /// The resolver's error for a name it cannot resolve; the OS error of
    /// the last address tried: `ConnectionRefused` when nothing listens,
    /// `TimedOut`, `NetworkUnreachable`, ...; or `Other` outside a keel
    /// runtime. A connection that was established and then reset before
    /// `connect` noticed it reports the reset here.
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let shared = current_runtime()?;
        let mut last = None;
        for addr in resolve(target(&addr)).await? {
            match TcpStream::connect_one(shared.clone(), addr).await {
                Ok(stream) => return Ok(stream),
                Err(error) => last = Some(error),
            }
        }
        Err(last.expect("resolve returns at least one address"))
    }

    async fn connect_one(shared: Arc<Shared>, addr: SocketAddr) -> io::Result<TcpStream> {
        let stream = mio::net::TcpStream::connect(addr)?;
        // Not assumed writable: the first writability is the news that
        // the handshake finished (or failed).
        let stream = TcpStream::registered(shared, stream, false)?;
        poll_fn(|cx| stream.poll_connected(cx)).await?;
        Ok(stream)
    }

    /// Ready once the non-blocking connect has finished, with its outcome.
    fn poll_connected(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let seen = ready!(self.io.poll_ready(cx, Direction::Write))?;
            let socket = self.io.get_ref();
            if let Some(error) = socket.take_error()? {
                return Poll::Ready(Err(error));
            }
            match socket.peer_addr() {
                Ok(_) => return Poll::Ready(Ok(())),
                // Spurious writability before the handshake ended: wait on.
                Err(error) if error.kind() == io::ErrorKind::NotConnected => {
                    if seen.is_error() || seen.is_write_closed() {
                        // An error or hang-up with no pending error and no
                        // peer: the connection is gone.
                        return Poll::Ready(Err(error));
                    }
                    self.io.clear(seen, Direction::Write);
                }
                Err(error) => return Poll::Ready(Err(error)),
            }
        }
    }

    /// Wraps a connected or connecting mio stream.
    pub(crate) fn registered(
        shared: Arc<Shared>,
        stream: mio::net::TcpStream,
        assume_ready: bool,
    ) -> io::Result<TcpStream> {
        let io = IoSource::new(shared, stream, assume_ready)?;
        Ok(TcpStream {
            ring: io.ring_slot(),
            io,
            batch: BatchCell::new(),
        })
    }

    /// Takes over a connected std stream (made non-blocking here).
    ///
    /// # Errors
    ///
    /// If it cannot be made non-blocking or registered, or outside a keel
    /// runtime.
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        let shared = current_runtime()?;
        stream.set_nonblocking(true)?;
        TcpStream::registered(shared, mio::net::TcpStream::from_std(stream), true)
    }

    /// The local address of the connection.
    ///
    /// # Errors
    ///
    /// The OS error of `getsockname`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().local_addr()
    }

    /// The remote address of the connection.
    ///
    /// # Errors
    ///
    /// `NotConnected` once the peer is gone, or another OS error.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.get_ref().peer_addr()
    }

    /// Sets `TCP_NODELAY`: send small writes at once instead of waiting to
    /// coalesce them (Nagle's algorithm). Request/response protocols want
    /// it on; it is off by default, as in the OS.
    ///
    /// # Errors
    ///
    /// The OS error of `setsockopt`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.io.get_ref().set_nodelay(nodelay)
    }

    /// Whether `TCP_NODELAY` is set.
    ///
    /// # Errors
    ///
    /// The OS error of `getsockopt`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.io.get_ref().nodelay()
    }

    /// Sets `SO_LINGER`. `Some(Duration::ZERO)` makes dropping the stream
    /// reset the connection (the peer sees `ConnectionReset`) instead of
    /// closing it gracefully.
    ///
    /// # Errors
    ///
    /// The OS error of `setsockopt`.
    pub fn set_linger(&self, linger: Option<Duration>) -> io::Result<()> {
        SockRef::from(self.io.get_ref()).set_linger(linger)
    }

    /// Sets how reads deliver input: at once ([`BatchPolicy::off`], the
    /// default) or in batches of at least `min_bytes` within `max_delay`
    /// ([`BatchPolicy::fixed`], [`BatchPolicy::adaptive`]). See
    /// [`crate::net::batch`] for the rules, the latency a batch adds, and
    /// when not to batch.
    ///
    /// May be called at any time, also while a task waits in a read: that
    /// read goes on under the new policy. Setting [`BatchPolicy::off`]
    /// restores the plain read path and the socket's `SO_RCVLOWAT` of 1.
    ///
    /// ```
    /// use std::time::Duration;
    /// use keel::net::{BatchPolicy, TcpListener, TcpStream};
    ///
    /// let rt = keel::Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    ///     let stream = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    ///     let policy = BatchPolicy::adaptive(Duration::from_millis(100));
    ///     stream.set_batch(policy).unwrap();
    ///     assert_eq!(stream.batch(), policy);
    /// });
    /// ```
    ///
    /// # Errors
    ///
    /// The OS error of reading `SO_RCVBUF` or setting `SO_RCVLOWAT`;
    /// `Unsupported` on platforms without them (batching needs unix). The
    /// previous policy then stays in force.
    pub fn set_batch(&self, policy: BatchPolicy) -> io::Result<()> {
        self.batch.set(&self.io, policy)
    }

    /// The batch policy last set with [`TcpStream::set_batch`], as given
    /// (before `min_bytes` is clamped to the receive buffer).
    pub fn batch(&self) -> BatchPolicy {
        self.batch.policy()
    }

    /// Shuts down the reading half, the writing half, or both. Shutting
    /// down writing sends FIN: the peer reads end-of-file, and may still
    /// send (a half-close).
    ///
    /// # Errors
    ///
    /// The OS error of `shutdown`, e.g. `NotConnected`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.io.get_ref().shutdown(how)
    }

    /// Splits the stream into a reading half and a writing half that can
    /// move to different tasks. Dropping the writing half shuts down the
    /// writing direction; the socket closes when both halves are dropped.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        let stream = Arc::new(self);
        (
            OwnedReadHalf::new(stream.clone()),
            OwnedWriteHalf::new(stream),
        )
    }

    pub(crate) fn poll_read_priv(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let len = buf.len();
        if let Some(slot) = self.ring_read_slot(len) {
            return self.poll_ring_read(cx, slot, len, &mut |bytes| {
                let n = bytes.len().min(buf.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                n
            });
        }
        self.poll_read_op(cx, len, |mut socket| socket.read(buf))
    }

    /// The receive slot, if this read goes through it: the stream reads on
    /// the ring, and either it is not batched or the slot holds bytes or a
    /// receive (which come first, whatever the policy).
    fn ring_read_slot(&self, len: usize) -> Option<&Arc<RecvSlot>> {
        let slot = self.ring.as_ref()?;
        (len > 0 && (self.batch.is_off() || slot.is_busy())).then_some(slot)
    }

    /// A read through the ring's receive slot (see `io::ring_recv`).
    fn poll_ring_read(
        &self,
        cx: &mut Context<'_>,
        slot: &Arc<RecvSlot>,
        len: usize,
        copy: &mut dyn FnMut(&[u8]) -> usize,
    ) -> Poll<io::Result<usize>> {
        let result = self.io.poll_ring_read(cx, slot, len, copy);
        self.delivered_unbatched(&result);
        result
    }

    /// Counts a read that delivered at once, outside any batch policy.
    fn delivered_unbatched(&self, result: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = result {
            self.io.runtime().deliveries.record(BatchMode::Off, *n);
        }
    }

    /// A read into memory that may be uninitialised (hyper's read
    /// buffers): the same path as [`poll_read_priv`](Self::poll_read_priv),
    /// batching included, with the bytes received straight into `buf` by
    /// `recv(2)`, so nothing has to be zeroed first. On `Ready(Ok(n))` the
    /// first `n` bytes of `buf` are initialised.
    #[cfg(all(unix, any(feature = "hyper", feature = "tokio-io")))]
    pub(crate) fn poll_read_uninit(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [std::mem::MaybeUninit<u8>],
    ) -> Poll<io::Result<usize>> {
        let len = buf.len();
        if let Some(slot) = self.ring_read_slot(len) {
            return self.poll_ring_read(cx, slot, len, &mut |bytes| {
                let n = bytes.len().min(buf.len());
                for (to, from) in buf[..n].iter_mut().zip(bytes) {
                    to.write(*from);
                }
                n
            });
        }
        self.poll_read_op(cx, len, |socket| crate::net::recv_uninit(socket, buf))
    }

    pub(crate) fn poll_read_vectored_priv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|buf| buf.len()).sum();
        if let Some(slot) = self.ring_read_slot(len) {
            return self.poll_ring_read(cx, slot, len, &mut |mut bytes| {
                let mut n = 0;
                for buf in bufs.iter_mut() {
                    let take = bytes.len().min(buf.len());
                    buf[..take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    n += take;
                }
                n
            });
        }
        self.poll_read_op(cx, len, |mut socket| socket.read_vectored(bufs))
    }

    /// A read of up to `len` bytes by `read`: batched if a policy says so
    /// (and the buffer is not empty), else the plain readiness loop.
    fn poll_read_op(
        &self,
        cx: &mut Context<'_>,
        len: usize,
        mut read: impl FnMut(&mio::net::TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        if !self.batch.is_off() && len > 0 {
            if let Some(result) = self.batch.poll_read(&self.io, cx, &mut read) {
                return result;
            }
        }
        let result = self.io.poll_stream_read(cx, len, read);
        self.delivered_unbatched(&result);
        result
    }

    pub(crate) fn poll_write_priv(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = self
            .io
            .poll_io(cx, Direction::Write, |mut socket| socket.write(buf));
        self.wrote(&result);
        result
    }

    pub(crate) fn poll_write_vectored_priv(
        &self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = self.io.poll_io(cx, Direction::Write, |mut socket| {
            socket.write_vectored(bufs)
        });
        self.wrote(&result);
        result
    }

    /// Tells the batch policy about a write that sent bytes (adaptive
    /// batching delivers at once to a stream that answers).
    fn wrote(&self, result: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = result {
            if *n > 0 {
                self.batch.note_write();
            }
        }
    }

    /// Shuts down writing; `NotConnected` (the peer is gone) counts as done.
    pub(crate) fn close_write(&self) -> io::Result<()> {
        match self.shutdown(Shutdown::Write) {
            Err(error) if error.kind() == io::ErrorKind::NotConnected => Ok(()),
            result => result,
        }
    }
}

/// Implements the IO traits for `TcpStream` and `&TcpStream`.
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

            /// TCP has no user-space buffer to flush.
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

impl_stream_io!(TcpStream, &TcpStream);
