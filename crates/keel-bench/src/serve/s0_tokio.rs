//! The S0 server on tokio: the peer keel is measured against.
//!
//! Written as hyper's own guide writes a tokio server, the way a
//! competent tokio user would: a multi-thread runtime with default
//! settings except the worker count (equal to keel's), an accept loop
//! that spawns one task per connection, and
//! `http1::Builder::serve_connection` on the accepted
//! `tokio::net::TcpStream` wrapped in hyper-util's `TokioIo`, the
//! standard adapter between tokio's IO traits and hyper's.

use std::net::SocketAddr;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::node_tokio::{accept_each, bind, tokio_stats_json, Guard};
use super::s0::{hello, report_connection_error, S0Opts};
use super::Running;
use crate::error::Error;

/// Starts the tokio S0 server; returns once it is bound.
pub fn start(opts: &S0Opts) -> Result<Running, Error> {
    if let Some(spin) = opts.spin {
        return Err(Error::usage(format!(
            "tokio has no spin setting (asked for {spin:?}); leave --spin out"
        )));
    }
    let rt = super::node_tokio::runtime(opts.workers)?;
    let (listener, addr) = bind(&rt, opts.addr)?;
    rt.spawn(accept_each(listener, serve));
    let handle = rt.handle().clone();
    let runtime_stats = Box::new(move || tokio_stats_json(&handle));
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: None,
        admin_addr: None,
        startup: serde_json::Value::Null,
        runtime_stats,
        guard: Box::new(Guard(Some(rt))),
    })
}

/// Serves one connection until the client closes it or asks to.
async fn serve(stream: TcpStream, peer: SocketAddr) {
    if let Err(error) = stream.set_nodelay(true) {
        eprintln!("keel serve: {peer}: cannot set TCP_NODELAY: {error}");
    }
    if let Err(error) = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service_fn(hello))
        .await
    {
        report_connection_error(peer, &error);
    }
}
