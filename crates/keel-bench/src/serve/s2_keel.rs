//! The S2 node on keel: the same node as `s2_tokio`, with the stream
//! handlers' reads under a batch policy.
//!
//! `off` reads per readiness, as tokio does; `fixed` and `adaptive` set a
//! `keel::net::BatchPolicy` on each stream connection, so a read completes
//! only when a batch is there (or its delay has run out) and a handler
//! wakes once per batch instead of once per packet. Every task runs in the
//! default class, as in the tokio peer: what S2 measures is the cost of
//! the wakeups, not the classes.

use std::sync::Arc;

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, TcpStream};

use super::node_keel::{accept_each, bind, stats_json};
use super::s2::{api_step, ApiStep, S2Counters, S2Mode, S2Opts, TOO_LARGE};
use super::Running;
use crate::error::Error;

/// Starts the keel S2 node.
pub fn start(opts: &S2Opts) -> Result<Running, Error> {
    if !matches!(opts.mode, S2Mode::Off | S2Mode::Fixed | S2Mode::Adaptive) {
        return Err(Error::usage(format!(
            "keel serves S2 with --mode off, fixed or adaptive, not {}",
            opts.mode
        )));
    }
    let rt = super::node_keel::runtime(opts.workers, opts.spin, opts.io)?;
    let (streams, addr) = bind(&rt, opts.addr)?;
    let (api, api_addr) = bind(&rt, opts.api_addr)?;
    let counters = Arc::new(S2Counters::new(opts.handler_lines));
    let policy = policy(opts);
    rt.spawn(stream_accept_loop(streams, policy, Arc::clone(&counters)));
    rt.spawn(api_accept_loop(api, opts.job_lines, Arc::clone(&counters)));

    let handle = rt.handle().clone();
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: Some(api_addr),
        admin_addr: None,
        startup: serde_json::json!({"mode": opts.mode}),
        runtime_stats: Box::new(move || {
            let mut value = stats_json(&handle.stats());
            value["s2"] = counters.to_json();
            value
        }),
        guard: Box::new(rt),
    })
}

/// The batch policy of a mode.
fn policy(opts: &S2Opts) -> keel::net::BatchPolicy {
    match opts.mode {
        S2Mode::Fixed => keel::net::BatchPolicy::fixed(opts.min_bytes, opts.max_delay),
        S2Mode::Adaptive => keel::net::BatchPolicy::adaptive(opts.max_delay),
        _ => keel::net::BatchPolicy::off(),
    }
}

/// Accepts stream connections forever, one handler task each.
async fn stream_accept_loop(
    listener: TcpListener,
    policy: keel::net::BatchPolicy,
    counters: Arc<S2Counters>,
) {
    accept_each(listener, move |stream, peer| {
        if let Err(error) = stream.set_batch(policy) {
            eprintln!("keel serve: {peer}: cannot set the batch policy: {error}");
        }
        handle_stream(stream, Arc::clone(&counters))
    })
    .await
}

/// Reads a stream until it ends, handing every read to the handler.
async fn handle_stream(mut stream: TcpStream, counters: Arc<S2Counters>) {
    let mut buf = vec![0u8; S2Mode::Off.buffer()];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => counters.deliver(&buf[..n]),
        }
    }
}

/// Accepts API connections forever, one task each.
async fn api_accept_loop(listener: TcpListener, job_lines: u64, counters: Arc<S2Counters>) {
    accept_each(listener, move |stream, _| {
        serve_api(stream, job_lines, Arc::clone(&counters))
    })
    .await
}

/// Answers requests on one API connection until it closes.
async fn serve_api(mut stream: TcpStream, job_lines: u64, counters: Arc<S2Counters>) {
    let _ = stream.set_nodelay(true);
    let mut pending = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        match api_step(&mut pending, job_lines, &counters) {
            ApiStep::Answer(response) => {
                if stream.write_all(&response).await.is_err() {
                    return;
                }
            }
            ApiStep::Refuse => {
                let _ = stream.write_all(TOO_LARGE).await;
                return;
            }
            ApiStep::Read => match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            },
        }
    }
}
