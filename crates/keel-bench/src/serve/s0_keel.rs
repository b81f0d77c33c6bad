//! The S0 server on keel: hyper's HTTP/1.1 driver on keel's sockets.
//!
//! A runtime with `opts.workers` workers and every other setting at its
//! default (S0 is the baseline: what a keel user gets without tuning), an
//! accept loop with one task per connection in the default class, and
//! `http1::Builder::serve_connection` straight on the accepted
//! `keel::net::TcpStream`, which implements hyper's `Read` and `Write`
//! itself (`keel::compat::hyper`), so no adapter sits in between.

use std::net::SocketAddr;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use keel::net::TcpStream;
use serde_json::Value;

use super::node_keel::{accept_each, bind, stats_json};
use super::s0::{hello, report_connection_error, S0Opts};
use super::Running;
use crate::error::Error;

/// Starts the keel S0 server; returns once it is bound.
pub fn start(opts: &S0Opts) -> Result<Running, Error> {
    let rt = super::node_keel::runtime(opts.workers, opts.spin, opts.io)?;
    let (listener, addr) = bind(&rt, opts.addr)?;
    rt.spawn(accept_each(listener, serve));
    let handle = rt.handle().clone();
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: None,
        admin_addr: None,
        startup: Value::Null,
        runtime_stats: Box::new(move || stats_json(&handle.stats())),
        guard: Box::new(rt),
    })
}

/// Serves one connection until the client closes it or asks to.
async fn serve(stream: TcpStream, peer: SocketAddr) {
    if let Err(error) = stream.set_nodelay(true) {
        eprintln!("keel serve: {peer}: cannot set TCP_NODELAY: {error}");
    }
    if let Err(error) = http1::Builder::new()
        .serve_connection(stream, service_fn(hello))
        .await
    {
        report_connection_error(peer, &error);
    }
}
