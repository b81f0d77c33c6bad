//! Serving any tower `Service` (an axum `Router`, a tonic service) on
//! keel: HTTP/1 and HTTP/2 on one port through hyper-util's `auto`
//! builder, keel's executor and timer, and a graceful shutdown.
//!
//! Shared by the `axum` and `grpc` examples and their integration tests.

use std::convert::Infallible;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::time::Duration;

use futures_util::FutureExt;
use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use keel::compat::hyper::{HyperExecutor, HyperTimer};
use keel::net::TcpListener;

/// How long a client may take to send a request head before its
/// connection is closed: a client that opens connections and sends
/// nothing must not hold them for ever.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long shutdown waits for connections to finish their requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `service` on every connection `listener` accepts until
/// `shutdown` completes; then stops accepting, lets each connection finish
/// the requests it is serving (HTTP/1: closes after the current response;
/// HTTP/2: sends GOAWAY) and returns once all are closed, or after
/// [`DRAIN_TIMEOUT`]. Returns how many connections were still open then.
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()>,
) -> io::Result<usize>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let mut builder = auto::Builder::new(HyperExecutor::current());
    builder
        .http1()
        .timer(HyperTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder.http2().timer(HyperTimer::new());
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    loop {
        let accepted = keel::select! {
            accepted = listener.accept().fuse() => accepted,
            () = shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(error) => {
                // Out of descriptors, or a connection reset before it was
                // accepted: the listener stays usable; pause, go on.
                eprintln!("accept failed: {error}");
                keel::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        // Requests and responses are small: send them at once.
        let _ = stream.set_nodelay(true);
        let connection = builder
            .serve_connection(stream, TowerToHyperService::new(service.clone()))
            .into_owned();
        let connection = graceful.watch(connection);
        keel::spawn(async move {
            // An error is a client that went away or spoke badly (hyper
            // has answered 400 if it could): routine, nothing to do.
            let _ = connection.await;
        });
    }
    drop(listener);
    let open = graceful.count();
    keel::select! {
        () = graceful.shutdown().fuse() => Ok(0),
        () = keel::time::sleep(DRAIN_TIMEOUT).fuse() => Ok(open),
    }
}
