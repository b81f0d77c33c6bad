//! One admin connection: hyper's HTTP/1 server over the stream, with the
//! endpoint's limits, eviction from its slot, and the close after it.
//!
//! # Closing
//!
//! Whenever the endpoint ends a connection it first shuts down its sending
//! side and then reads and discards what the client still sends: closing a
//! socket with unread input makes the kernel reset the connection, and a
//! reset can destroy the last answer before the client has read it. With
//! a *linger permit* (at most `max_connections` at once, apart from the
//! slots) it waits for the client to close, for at most [`LINGER`] (and
//! `read_timeout`); without one it discards only what has arrived already
//! and closes at once, so that lingering never holds more than a bounded
//! number of sockets, however many clients misbehave.

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_io::{AsyncRead, AsyncWrite};
use futures_util::FutureExt;
use http_body_util::Full;
use hyper::body::{Body, Bytes, Frame, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;

use super::slots::Slot;
use super::{routes, Permit, Shared, LINGER};
use crate::compat::hyper::{HyperIo, HyperTimer};
use crate::net::{TcpStream, UnixStream};
use crate::time::{sleep, timeout, Sleep};

/// The answer to a connection past `max_connections` when every slot is
/// answering a request.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: text/plain; charset=utf-8\r\n\
content-length: 38\r\n\
connection: close\r\n\
\r\n\
too many admin connections, try later\n";

/// The most a close without a linger permit reads and discards: what a
/// client can have queued in a socket's receive buffer at once, roughly.
const DRAIN_NOW: usize = 64 * 1024;

/// Serves HTTP/1.1 on `stream` (from `peer`) in `slot` until the client
/// or an error ends it, or the slot is given to a newer connection; then
/// closes it.
pub(super) async fn serve<S: Transport>(stream: S, peer: Peer, shared: Arc<Shared>, slot: Slot) {
    let stream = Arc::new(stream);
    match serve_on(stream.clone(), &shared, &slot).await {
        Ended::Closed => {}
        Ended::Failed(error) => {
            tracing::debug!(%peer, %error, "admin endpoint: connection ended by an error");
        }
        Ended::Evicted => {
            tracing::debug!(
                %peer,
                "admin endpoint: connection closed for a newer one while it waited for a request head"
            );
            // Closed at once: it is owed no answer that a reset could
            // destroy, and lingering would let a flood of newcomers keep
            // the sockets it pushes out.
            return;
        }
    }
    // The slot is free before the lingering close, which has its own
    // bound.
    drop(slot);
    close(&*stream, &shared).await;
}

/// Answers 503 on a connection that found every slot answering, then
/// closes it.
pub(super) async fn refuse<S: Transport>(stream: S, shared: Arc<Shared>) {
    let options = &shared.options;
    match Permit::try_take(&shared.lingering, options.max_connections) {
        Some(_permit) => {
            if timeout(options.read_timeout, write_all(&stream, REFUSAL))
                .await
                .is_ok_and(|written| written.is_ok())
            {
                linger(&stream, options.read_timeout).await;
            }
        }
        None => {
            // A new socket's send buffer is empty: the answer fits at once.
            let _ = poll_fn(|cx| stream.poll_write(cx, REFUSAL)).now_or_never();
            close_now(&stream);
        }
    }
}

/// Who a connection came from, for the logs: a TCP peer, or a Unix
/// socket's (usually unnamed) peer.
#[derive(Debug)]
pub(super) enum Peer {
    /// A TCP peer's address.
    Tcp(SocketAddr),
    /// A peer on the endpoint's Unix socket.
    Unix,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => addr.fmt(f),
            Peer::Unix => f.write_str("unix socket"),
        }
    }
}

/// Writes all of `buf` to `stream`.
async fn write_all<S: Transport>(stream: &S, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| stream.poll_write(cx, buf)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}

/// How [`serve_on`] ended.
#[derive(Debug)]
pub(super) enum Ended {
    /// The client closed, or an answer closed the connection.
    Closed,
    /// An error of the client's (a bad request, a timeout, a reset).
    Failed(hyper::Error),
    /// The slot was given to a newer connection.
    Evicted,
}

/// Serves HTTP/1.1 on `stream` with the endpoint's limits, reporting the
/// connection's progress to `slot`, until the connection ends or the slot
/// is taken from it.
pub(super) async fn serve_on<S: Transport>(
    stream: Arc<S>,
    shared: &Arc<Shared>,
    slot: &Slot,
) -> Ended {
    let options = &shared.options;
    let io = HyperIo::new(Stalls::new(stream, options.read_timeout, slot.clone()));
    let service = {
        let shared = shared.clone();
        let slot = slot.clone();
        service_fn(move |request| {
            slot.answering();
            let answer = routes::answer(&shared, &request).map(|body| Answer {
                body,
                slot: slot.clone(),
            });
            async move { Ok::<_, Infallible>(answer) }
        })
    };
    let mut connection = pin!(http1::Builder::new()
        // A client may shut down its sending side once its request is
        // sent (`nc -N`, scripts' health checks) and still reads the
        // answer; without this, hyper drops an answer not yet written
        // when it reads the end of the stream.
        .half_close(true)
        .timer(HyperTimer::new())
        .header_read_timeout(options.read_timeout)
        .max_buf_size(options.max_request_bytes)
        .serve_connection(io, service));
    let mut evicted = pin!(slot.evicted());
    // Set once the eviction is noticed: the answers given before it, and
    // the permit of the last look (see below).
    let mut last_look: Option<(u64, Option<Permit<'_>>)> = None;
    poll_fn(|cx| {
        if last_look.is_none() && evicted.as_mut().poll(cx).is_ready() {
            // The slot went to a newer connection while this one waited,
            // as far as the table knew. But its client may have sent a
            // whole head that this task has not read yet (its readiness
            // not yet delivered): the poll below is one last look, within
            // a bounded number of such looks at once, and a whole head it
            // reads is answered before the connection closes.
            let permit = Permit::try_take(&shared.lingering, options.max_connections);
            if permit.is_none() && !slot.is_answering() {
                return Poll::Ready(Ended::Evicted);
            }
            last_look = Some((slot.answers(), permit));
        }
        match connection.as_mut().poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Ended::Closed),
            Poll::Ready(Err(error)) => Poll::Ready(Ended::Failed(error)),
            Poll::Pending => match &last_look {
                None => Poll::Pending,
                Some((before, _)) if !slot.is_answering() => {
                    Poll::Ready(if slot.answers() > *before {
                        // Answered after all: closed as an answered one.
                        Ended::Closed
                    } else {
                        Ended::Evicted
                    })
                }
                Some(_) => {
                    // The answer being written is the last one.
                    connection.as_mut().graceful_shutdown();
                    Poll::Pending
                }
            },
        }
    })
    .await
}

/// Shuts down the sending side of `stream`, then reads and discards its
/// input: until the client closes, for at most [`LINGER`], with a linger
/// permit; what has arrived already, without one.
async fn close<S: Transport>(stream: &S, shared: &Shared) {
    match Permit::try_take(&shared.lingering, shared.options.max_connections) {
        Some(_permit) => linger(stream, shared.options.read_timeout).await,
        None => close_now(stream),
    }
}

/// Shuts down the sending side of `stream`, then reads and discards input
/// until the client closes, for at most [`LINGER`] (and `read_timeout`).
async fn linger<S: Transport>(stream: &S, read_timeout: Duration) {
    if stream.shutdown_write().is_err() {
        return;
    }
    let drain = async {
        let mut sink = [0u8; 4096];
        while let Ok(n) = poll_fn(|cx| stream.poll_read(cx, &mut sink)).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = timeout(LINGER.min(read_timeout), drain).await;
}

/// Shuts down the sending side of `stream` and discards what it has
/// received (up to [`DRAIN_NOW`]) without waiting, so that the close that
/// follows sends a FIN, not a reset, unless more input arrives later.
fn close_now<S: Transport>(stream: &S) {
    if stream.shutdown_write().is_err() {
        return;
    }
    let mut sink = [0u8; 4096];
    let mut drained = 0;
    while drained < DRAIN_NOW {
        match poll_fn(|cx| stream.poll_read(cx, &mut sink)).now_or_never() {
            Some(Ok(n)) if n > 0 => drained += n,
            _ => break,
        }
    }
}

/// A byte stream the endpoint serves HTTP on, shared by reference between
/// hyper and the close after it: a [`TcpStream`], a [`UnixStream`], or an
/// in-memory pipe.
pub(super) trait Transport: Send + Sync + 'static {
    /// As [`AsyncRead::poll_read`].
    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>>;
    /// As [`AsyncWrite::poll_write`].
    fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>>;
    /// As [`AsyncWrite::poll_write_vectored`]. By default, writes the
    /// first non-empty buffer, as a stream without vectored writes does.
    fn poll_write_vectored(
        &self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match bufs.iter().find(|b| !b.is_empty()) {
            Some(buf) => self.poll_write(cx, buf),
            None => Poll::Ready(Ok(0)),
        }
    }
    /// As [`AsyncWrite::poll_flush`].
    fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Shuts down the sending side.
    fn shutdown_write(&self) -> io::Result<()>;
}

/// Implements [`Transport`] for a keel stream type whose references
/// read and write.
macro_rules! transport {
    ($ty:ty) => {
        impl Transport for $ty {
            fn poll_read(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
                Pin::new(&mut &*self).poll_read(cx, buf)
            }

            fn poll_write(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
                Pin::new(&mut &*self).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                &self,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut &*self).poll_write_vectored(cx, bufs)
            }

            fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut &*self).poll_flush(cx)
            }

            fn shutdown_write(&self) -> io::Result<()> {
                match self.shutdown(Shutdown::Write) {
                    // A peer that is already gone leaves nothing to shut down.
                    Err(error) if error.kind() == io::ErrorKind::NotConnected => Ok(()),
                    other => other,
                }
            }
        }
    };
}

transport!(TcpStream);
transport!(UnixStream);

/// An answer's body, which tells the connection's slot when hyper has
/// taken all of it (hyper drops a body once its last frame is encoded, or
/// once it knows none is to be sent, as for `HEAD`).
struct Answer {
    body: Full<Bytes>,
    slot: Slot,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.slot.answer_handed_over();
    }
}

/// A shared stream whose writes fail with `TimedOut` once one has made no
/// progress for `limit`, so a client that stops reading answers cannot
/// hold its connection (and hyper's task) forever; and which tells the
/// connection's slot when bytes arrive (a head begun) and when a flush
/// completes (an answer handed over is all with the kernel).
struct Stalls<S> {
    stream: Arc<S>,
    limit: Duration,
    /// Armed while a write or flush is pending.
    stalled: Option<Sleep>,
    slot: Slot,
}

impl<S: Transport> Stalls<S> {
    fn new(stream: Arc<S>, limit: Duration, slot: Slot) -> Stalls<S> {
        Stalls {
            stream,
            limit,
            stalled: None,
            slot,
        }
    }

    /// Passes a ready outcome through and disarms the stall timer; on
    /// `Pending`, arms it, and fails once it has run out.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        outcome: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if outcome.is_ready() {
            self.stalled = None;
            return outcome;
        }
        let limit = self.limit;
        let stalled = self.stalled.get_or_insert_with(|| sleep(limit));
        match Pin::new(stalled).poll(cx) {
            Poll::Ready(()) => {
                self.stalled = None;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client read nothing for the admin read timeout",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: Transport> AsyncRead for Stalls<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let outcome = self.stream.poll_read(cx, buf);
        if let Poll::Ready(Ok(1..)) = outcome {
            self.slot.heard();
        }
        outcome
    }
}

impl<S: Transport> AsyncWrite for Stalls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let outcome = this.stream.poll_write(cx, buf);
        this.watch(cx, outcome)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let outcome = this.stream.poll_write_vectored(cx, bufs);
        this.watch(cx, outcome)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let outcome = this.stream.poll_flush(cx);
        if let Poll::Ready(Ok(())) = outcome {
            // hyper flushes its own buffer into the stream before it
            // flushes the stream: everything it took is written.
            this.slot.flushed();
        }
        this.watch(cx, outcome)
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Closing only shuts down the sending side; the close after hyper
        // is done drains the rest.
        Poll::Ready(self.stream.shutdown_write())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::task::Waker;

    use super::*;
    use crate::admin::AdminOptions;
    use crate::runtime::context;
    use crate::Runtime;

    /// A client whose bytes arrive without a wake-up, as when the
    /// reactor has not delivered their readiness yet; reads without input
    /// wait (there is no end of stream).
    #[derive(Default)]
    struct Held {
        input: Mutex<Vec<u8>>,
        output: Mutex<Vec<u8>>,
    }

    impl Held {
        fn arrive(&self, bytes: &[u8]) {
            self.input.lock().unwrap().extend_from_slice(bytes);
        }

        fn output(&self) -> Vec<u8> {
            self.output.lock().unwrap().clone()
        }
    }

    impl Transport for Held {
        fn poll_read(&self, _cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
            let mut input = self.input.lock().unwrap();
            if input.is_empty() {
                return Poll::Pending;
            }
            let n = input.len().min(buf.len());
            buf[..n].copy_from_slice(&input[..n]);
            input.drain(..n);
            Poll::Ready(Ok(n))
        }

        fn poll_write(&self, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.output.lock().unwrap().extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(&self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn shutdown_write(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// One slot, one connection served in it and polled by hand; `arrived`
    /// reaches its socket after its first read waited and before a newer
    /// connection takes its slot. Returns how it ended and what it wrote.
    fn evicted_with(arrived: &[u8], linger_permits_taken: usize) -> (Ended, Vec<u8>) {
        let rt = Runtime::builder().workers(1).build().unwrap();
        let mut options = AdminOptions::new();
        options.max_connections(1);
        let shared = Arc::new(Shared::new(rt.handle(), &options));
        shared
            .lingering
            .store(linger_permits_taken, std::sync::atomic::Ordering::Relaxed);
        let _enter = context::enter(rt.handle().clone());
        let held = Arc::new(Held::default());
        let slot = shared.slots.admit().unwrap();
        let mut serving = Box::pin(serve_on(held.clone(), &shared, &slot));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(serving.as_mut().poll(&mut cx).is_pending());
        held.arrive(arrived);
        let _newer = shared.slots.admit().unwrap();
        assert!(slot.is_evicted());
        for _ in 0..100 {
            if let Poll::Ready(ended) = serving.as_mut().poll(&mut cx) {
                return (ended, held.output());
            }
        }
        panic!("the evicted connection did not end");
    }

    #[test]
    fn an_evicted_connection_answers_a_whole_head_it_had_not_read() {
        let (ended, output) = evicted_with(b"GET /health HTTP/1.1\r\nhost: a\r\n\r\n", 0);
        assert!(matches!(ended, Ended::Closed), "{ended:?}");
        let output = String::from_utf8(output).unwrap();
        assert!(output.starts_with("HTTP/1.1 200 OK\r\n"), "{output}");
        assert_eq!(output.matches("HTTP/1.1").count(), 1, "{output}");
    }

    #[test]
    fn an_evicted_connection_with_half_a_head_leaves_without_an_answer() {
        let (ended, output) = evicted_with(b"GET /health HTTP/1.1\r\nhost: sl", 0);
        assert!(matches!(ended, Ended::Evicted), "{ended:?}");
        assert!(output.is_empty());
        let (ended, output) = evicted_with(b"", 0);
        assert!(matches!(ended, Ended::Evicted), "{ended:?}");
        assert!(output.is_empty());
    }

    #[test]
    fn last_looks_are_bounded_by_the_linger_permits() {
        let (ended, output) = evicted_with(b"GET /health HTTP/1.1\r\n\r\n", 1);
        assert!(matches!(ended, Ended::Evicted), "{ended:?}");
        assert!(output.is_empty());
    }
}
