//! S0, the HTTP throughput baseline: what its two servers share.
//!
//! S0 asks how fast the plainest HTTP server runs on each runtime, so that
//! every other scenario's gain can be weighed against what keel costs on
//! the common path. The server is hyper 1.x's HTTP/1.1 connection driver
//! (`http1::Builder` with its defaults) and one service, [`hello`], that
//! answers every request with `200 OK` and the 13-byte body [`BODY`],
//! whatever its method or path. Both variants use this module's service,
//! so the only difference between them is the runtime underneath: how
//! connections are accepted, how their tasks are scheduled, and how
//! socket readiness reaches them.
//!
//! Both variants set `TCP_NODELAY` on accepted sockets, as a
//! request/response server does (an answer is one small write that should
//! leave at once), and keep accepting when an accept fails.

use std::convert::Infallible;
use std::net::SocketAddr;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};

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
