//! The S2 node on tokio: one task per stream connection reading into a
//! buffer of 1460 bytes (`read-1460`) or 64 KiB (`read-64k`) and handing
//! every read to the handler, and one task per API connection that runs
//! the job inline, as a tokio user writes it. A bigger buffer does not
//! batch by itself: a server that keeps up finds one packet per readiness.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::node_tokio::{accept_each, bind, tokio_stats_json, Guard};
use super::s2::{api_step, ApiStep, S2Counters, S2Mode, S2Opts, TOO_LARGE};
use super::Running;
use crate::error::Error;

/// Starts the tokio S2 node.
pub fn start(opts: &S2Opts) -> Result<Running, Error> {
    if !matches!(opts.mode, S2Mode::Read1460 | S2Mode::Read64k) {
        return Err(Error::usage(format!(
            "tokio serves S2 with --mode read-1460 or read-64k, not {}",
            opts.mode
        )));
    }
    if let Some(spin) = opts.spin {
        return Err(Error::usage(format!(
            "tokio has no spin setting (asked for {spin:?}); leave --spin out"
        )));
    }
    let rt = super::node_tokio::runtime(opts.workers)?;
    let (streams, addr) = bind(&rt, opts.addr)?;
    let (api, api_addr) = bind(&rt, opts.api_addr)?;
    let counters = Arc::new(S2Counters::new(opts.handler_lines));
    rt.spawn(stream_accept_loop(
        streams,
        opts.mode.buffer(),
        Arc::clone(&counters),
    ));
    rt.spawn(api_accept_loop(api, opts.job_lines, Arc::clone(&counters)));

    let handle = rt.handle().clone();
    let runtime_stats = Box::new(move || {
        let mut value = tokio_stats_json(&handle);
        value["s2"] = counters.to_json();
        value
    });
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: Some(api_addr),
        admin_addr: None,
        startup: serde_json::json!({"mode": opts.mode}),
        runtime_stats,
        guard: Box::new(Guard(Some(rt))),
    })
}

/// Accepts stream connections forever, one handler task each.
async fn stream_accept_loop(listener: TcpListener, buffer: usize, counters: Arc<S2Counters>) {
    accept_each(listener, move |stream, _| {
        handle_stream(stream, buffer, Arc::clone(&counters))
    })
    .await
}

/// Reads a stream until it ends, handing every read to the handler.
async fn handle_stream(mut stream: TcpStream, buffer: usize, counters: Arc<S2Counters>) {
    let mut buf = vec![0u8; buffer];
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
