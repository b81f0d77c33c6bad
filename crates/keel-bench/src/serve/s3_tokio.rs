//! The S3 proxy on tokio: the peer keel is measured against.
//!
//! Written the way a competent tokio user writes a TCP proxy: a
//! multi-thread runtime with default settings except the worker count,
//! an accept loop that spawns one task per client, which connects to the
//! backend (with a timeout) and forwards with
//! `tokio::io::copy_bidirectional_with_sizes` and 64 KiB buffers, so each
//! EOF half-closes the other side and an error on either ends both.
//! `TCP_NODELAY` is set on both sockets, as any proxy of request/response
//! traffic does. Byte counts come from a thin wrapper around the client
//! socket that counts the bytes up as each read from the client returns
//! them and the bytes down as each write to the client takes them, so the
//! status stays current during long transfers.
//!
//! The admin endpoint is hyper 1.x on the same runtime (via hyper-util's
//! `TokioIo`), answering `GET /status` with the shared status text. tokio
//! has no classes, so the admin tasks compete with the forwarding on
//! equal terms: that is the point of the comparison.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::node_tokio::{accept_each, bind, tokio_stats_json, Guard};
use super::s3::{
    status_text, timed, OpenConnection, ProxyCounters, ProxyOpts, BUFFER, CONNECT_TIMEOUT,
};
use super::Running;
use crate::error::Error;

/// Produces the status text, once per `GET /status`.
type StatusFn = Arc<dyn Fn() -> String + Send + Sync>;

/// Starts the tokio proxy.
pub fn start(opts: &ProxyOpts) -> Result<Running, Error> {
    if opts.single_class {
        return Err(Error::usage(
            "--single-class is a keel setting: tokio has no classes",
        ));
    }
    if opts.urgent_lane {
        return Err(Error::usage(
            "--urgent-lane is a keel setting: tokio has no urgent class",
        ));
    }
    let rt = super::node_tokio::runtime(opts.workers)?;
    let counters = Arc::new(ProxyCounters::default());
    let (listener, addr) = bind(&rt, opts.listen)?;
    let admin_addr = match opts.admin {
        Some(admin) => {
            let (admin_listener, admin_addr) =
                bind(&rt, admin).map_err(|e| e.context("the admin endpoint"))?;
            let counters = Arc::clone(&counters);
            let workers = opts.workers;
            let status: StatusFn = Arc::new(move || {
                counters.admin_requests.fetch_add(1, Ordering::Relaxed);
                status_text("tokio", workers, &counters)
            });
            rt.spawn(admin_loop(admin_listener, status));
            Some(admin_addr)
        }
        None => None,
    };
    rt.spawn(accept_loop(listener, opts.backend, Arc::clone(&counters)));

    let handle = rt.handle().clone();
    let runtime_stats = Box::new(move || {
        let mut value = tokio_stats_json(&handle);
        value["proxy"] = counters.to_json();
        value
    });
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: None,
        admin_addr,
        startup: serde_json::json!({"backend": opts.backend, "single_class": false}),
        runtime_stats,
        guard: Box::new(Guard(Some(rt))),
    })
}

/// Accepts clients forever, one task each.
async fn accept_loop(listener: TcpListener, backend: SocketAddr, counters: Arc<ProxyCounters>) {
    let setup = Arc::clone(&counters);
    let accepts = accept_each(listener, move |client, _| {
        proxy(client, backend, Arc::clone(&counters))
    });
    timed(accepts, |took| setup.add_setup(took)).await
}

/// Connects to the backend for `client` and forwards both ways until both
/// directions end or either side fails; dropping the sockets closes them.
async fn proxy(client: TcpStream, backend: SocketAddr, counters: Arc<ProxyCounters>) {
    let open = OpenConnection::new(Arc::clone(&counters));
    let connect = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(backend));
    let mut upstream = match timed(connect, |took| counters.add_setup(took)).await {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(error)) => return counters.connect_failed(backend, Some(error)),
        Err(_) => return counters.connect_failed(backend, None),
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let moved = AtomicU64::new(0);
    let mut client = Counted {
        stream: client,
        up: &counters.bytes_up,
        down: &counters.bytes_down,
        moved: &moved,
    };
    let copy = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, BUFFER, BUFFER);
    let result = timed(copy, |took| {
        counters.add_forward(moved.load(Ordering::Relaxed), took);
    })
    .await;
    // Close both sockets before the connection stops counting as open.
    drop((client, upstream));
    if result.is_err() {
        counters.io_errors.fetch_add(1, Ordering::Relaxed);
    }
    drop(open);
}

/// The client socket, counting the bytes read from it (`up`) and written
/// to it (`down`) as they move.
struct Counted<'a> {
    /// The client socket.
    stream: TcpStream,
    /// Bytes read from the client.
    up: &'a AtomicU64,
    /// Bytes written to the client.
    down: &'a AtomicU64,
    /// Bytes this connection has forwarded, both ways.
    moved: &'a AtomicU64,
}

impl AsyncRead for Counted<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.stream).poll_read(cx, buf))?;
        let read = buf.filled().len() - before;
        self.up.fetch_add(read as u64, Ordering::Relaxed);
        self.moved.fetch_add(read as u64, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Counted<'_> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = ready!(Pin::new(&mut self.stream).poll_write(cx, buf))?;
        self.down.fetch_add(written as u64, Ordering::Relaxed);
        self.moved.fetch_add(written as u64, Ordering::Relaxed);
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Accepts admin connections forever, one hyper connection task each.
async fn admin_loop(listener: TcpListener, status: StatusFn) {
    accept_each(listener, move |stream, _| {
        serve_admin(stream, Arc::clone(&status))
    })
    .await
}

/// Serves HTTP/1.1 on one admin connection until it closes.
async fn serve_admin(stream: TcpStream, status: StatusFn) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |request: Request<Incoming>| {
        let response = respond(&request, &*status);
        async move { Ok::<_, Infallible>(response) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// The answer to one admin request: the status text for `GET /status`,
/// 404 otherwise.
fn respond(request: &Request<Incoming>, status: &dyn Fn() -> String) -> Response<Full<Bytes>> {
    let (code, body) = if request.method() == Method::GET && request.uri().path() == "/status" {
        (StatusCode::OK, status())
    } else {
        (StatusCode::NOT_FOUND, String::from("not found\n"))
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
