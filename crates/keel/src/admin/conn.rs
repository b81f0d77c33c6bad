//! One admin connection: hyper's HTTP/1 server over the stream, with the
//! endpoint's limits, and the lingering close after it.

use std::future::Future;
use std::io;
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_io::{AsyncRead, AsyncWrite};
use futures_util::{AsyncReadExt, AsyncWriteExt};
use hyper::server::conn::http1;
use hyper::service::service_fn;

use super::{routes, AdminOptions, Shared, LINGER};
use crate::compat::hyper::{HyperIo, HyperTimer};
use crate::net::TcpStream;
use crate::time::{sleep, timeout, Sleep};

/// The answer to a connection past `max_connections`.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: text/plain; charset=utf-8\r\n\
content-length: 38\r\n\
connection: close\r\n\
\r\n\
too many admin connections, try later\n";

/// Serves HTTP/1.1 on `stream` until the client or an error ends it, then
/// closes it gracefully.
pub(super) async fn serve(stream: TcpStream, peer: SocketAddr, shared: &Arc<Shared>) {
    let options = &shared.options;
    let _ = stream.set_nodelay(true);
    let stream = Arc::new(stream);
    let io = HyperIo::new(Stalls::new(stream.clone(), options.read_timeout));
    let service = {
        let shared = shared.clone();
        service_fn(move |request| {
            let answer = routes::answer(&shared, &request);
            async move { Ok::<_, std::convert::Infallible>(answer) }
        })
    };
    let result = http1::Builder::new()
        .timer(HyperTimer::new())
        .header_read_timeout(options.read_timeout)
        .max_buf_size(options.max_request_bytes)
        .serve_connection(io, service)
        .await;
    if let Err(error) = result {
        tracing::debug!(%peer, %error, "admin endpoint: connection ended by an error");
    }
    linger(&stream, options).await;
}

/// Answers 503 on a connection past the limit, then closes it gracefully.
pub(super) async fn refuse(stream: TcpStream, options: &AdminOptions) {
    let mut writer = &stream;
    if timeout(options.read_timeout, writer.write_all(REFUSAL))
        .await
        .is_ok_and(|written| written.is_ok())
    {
        linger(&stream, options).await;
    }
}

/// Shuts down the sending side of `stream`, then reads and discards input
/// until the client closes, for at most [`LINGER`] (and `read_timeout`):
/// closing a socket with unread input resets the connection, which can
/// destroy the last answer before the client reads it.
async fn linger(stream: &TcpStream, options: &AdminOptions) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let drain = async {
        let mut reader = stream;
        let mut sink = [0u8; 4096];
        while let Ok(n) = reader.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = timeout(LINGER.min(options.read_timeout), drain).await;
}

/// A shared stream whose writes fail with `TimedOut` once one has made no
/// progress for `limit`: a client that stops reading answers cannot hold
/// its connection (and hyper's task) forever.
struct Stalls {
    stream: Arc<TcpStream>,
    limit: Duration,
    /// Armed while a write or flush is pending.
    stalled: Option<Sleep>,
}

impl Stalls {
    fn new(stream: Arc<TcpStream>, limit: Duration) -> Stalls {
        Stalls {
            stream,
            limit,
            stalled: None,
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

impl AsyncRead for Stalls {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut &*self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stalls {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut &*this.stream).poll_write(cx, buf);
        this.watch(cx, outcome)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut &*this.stream).poll_write_vectored(cx, bufs);
        this.watch(cx, outcome)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let outcome = Pin::new(&mut &*this.stream).poll_flush(cx);
        this.watch(cx, outcome)
    }

    fn poll_close(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Closing only shuts down the sending side; the lingering close
        // after hyper is done drains the rest. A peer that is already
        // gone leaves nothing to shut down.
        match self.stream.shutdown(Shutdown::Write) {
            Err(error) if error.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(error)),
            _ => Poll::Ready(Ok(())),
        }
    }
}
