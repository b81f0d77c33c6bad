//! S0, the HTTP throughput baseline, written once over [`Node`].
//!
//! S0 asks how fast the plainest HTTP server runs on each runtime, so that
//! every other scenario's gain can be weighed against what keel costs on
//! the common path. The server is hyper 1.x's HTTP/1.1 connection driver
//! (`http1::Builder` with its defaults, `serve_connection` on each
//! accepted stream) and one service, [`hello`], that answers every request
//! with `200 OK` and the 13-byte body [`BODY`], whatever its method or
//! path. The runtime underneath is the only difference: how connections
//! are accepted, how their tasks are scheduled, and how socket readiness
//! reaches them. keel runs with every setting at its default but the
//! worker count (S0 is the baseline: what a keel user gets without
//! tuning); tokio is a multi-thread runtime with defaults but the worker
//! count (equal to keel's), as hyper's own guide writes a tokio server.
//!
//! Accepted sockets get `TCP_NODELAY`, as a request/response server sets,
//! and the accept loop keeps accepting when an accept fails.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};

use super::node::{accept_each, no_delay, running, Node};
use super::Running;
use crate::error::Error;

/// The body of every answer: 13 bytes.
pub const BODY: &[u8] = b"Hello, world!";

/// What an S0 server is asked to run.
#[derive(Debug, Clone)]
pub struct S0Opts {
    /// Worker threads of the runtime.
    pub workers: usize,
    /// Address to bind the HTTP service to.
    pub addr: SocketAddr,
    /// keel's spin policy; `None` keeps the runtime's default. tokio has
    /// no such setting and refuses one.
    pub spin: Option<keel::SpinPolicy>,
    /// keel's IO driver (tokio ignores it).
    pub io: keel::io::IoBackend,
}

/// Starts the S0 server on `node`; returns once it is bound.
pub fn start<N: Node>(node: N, opts: &S0Opts) -> Result<Running, Error> {
    let (listener, addr) = node.bind(opts.addr)?;
    node.spawn(accept_each::<N, _, _>(listener, serve::<N>));
    Ok(running(node, addr))
}

/// Serves one connection until the client closes it or asks to.
async fn serve<N: Node>(stream: N::Stream, peer: SocketAddr) {
    no_delay::<N>(&stream, peer);
    if let Err(error) = http1::Builder::new()
        .serve_connection(N::hyper_io(stream), service_fn(hello))
        .await
    {
        report_connection_error(peer, &error);
    }
}

/// The service: `200 OK` with [`BODY`] for any request.
///
/// The request's body (if any) is left unread; hyper drains or discards
/// it before the connection's next request.
pub async fn hello(_request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(BODY))))
}

/// Reports a connection that ended with an error other than the peer
/// going away mid-request, which is routine for a server and not worth a
/// line per connection.
pub fn report_connection_error(peer: SocketAddr, error: &hyper::Error) {
    if !error.is_incomplete_message() {
        eprintln!("keel serve: {peer}: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body is the 13 bytes the scenario specifies.
    #[test]
    fn body_is_13_bytes() {
        assert_eq!(BODY.len(), 13);
    }
}
