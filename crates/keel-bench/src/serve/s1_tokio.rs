//! The S1 server on tokio: the peer keel is measured against.
//!
//! It is written the way a competent tokio user writes it, because a
//! weakened peer makes every verdict worthless: a multi-thread runtime
//! with default settings except the worker count (equal to keel's), an
//! accept loop that spawns one task per connection, `read` into a 64 KiB
//! buffer and `write_all` back, `TCP_NODELAY` on accepted sockets (as any
//! latency-sensitive server sets; see [`super::node_tokio::accept_echo`]),
//! and the CPU tasks as ordinary spawned tasks that call
//! `tokio::task::yield_now()` between slices.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::node_tokio::{accept_echo, bind, runtime, tokio_stats_json, Guard};
use super::{cpu, Running, S1Opts};
use crate::error::Error;

/// Starts the tokio S1 server (see [`super::S1Start`]).
pub fn start(opts: &S1Opts, slices: Arc<AtomicU64>) -> Result<Running, Error> {
    let rt = runtime(opts.workers)?;
    let (listener, addr) = bind(&rt, opts.addr)?;
    rt.spawn(accept_echo(listener));
    for _ in 0..opts.cpu_tasks {
        rt.spawn(cpu_task(opts.slice_iters, Arc::clone(&slices)));
    }
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

/// One CPU task: slices forever, counting each and yielding between them.
async fn cpu_task(iters: u64, slices: Arc<AtomicU64>) {
    loop {
        cpu::slice(iters);
        slices.fetch_add(1, Ordering::Relaxed);
        tokio::task::yield_now().await;
    }
}
