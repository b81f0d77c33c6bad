//! The S1 server on tokio: the peer keel is measured against.
//!
//! It is written the way a competent tokio user writes it, because a
//! weakened peer makes every verdict worthless: a multi-thread runtime
//! with default settings except the worker count (equal to keel's), an
//! accept loop that spawns one task per connection, `read` into a 64 KiB
//! buffer and `write_all` back, `TCP_NODELAY` on accepted sockets (as any
//! latency-sensitive server sets), and the CPU tasks as ordinary spawned
//! tasks that call `tokio::task::yield_now()` between slices.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

use super::stamp::stamp_echo;
use super::{cpu, Running, S1Opts};
use crate::error::Error;

/// Starts the tokio S1 server (see [`super::S1Start`]).
pub fn start(opts: &S1Opts, slices: Arc<AtomicU64>) -> Result<Running, Error> {
    let rt = runtime(opts.workers)?;
    let (listener, addr) = bind(&rt, opts.addr)?;
    rt.spawn(accept_loop(listener));
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

/// A tokio multi-thread runtime with `workers` workers and every other
/// setting at its default, as a tokio user would build it.
pub fn runtime(workers: usize) -> Result<Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(|e| Error::new(format!("cannot start a tokio runtime: {e}")))
}

/// What tokio's stable metrics say about a runtime: its workers, live
/// tasks, global queue depth, and per worker the time tokio counts as
/// busy (from waking up to parking again, so its scheduling and IO
/// polling are in it but its parking and unparking are not).
pub fn tokio_stats_json(handle: &tokio::runtime::Handle) -> serde_json::Value {
    let metrics = handle.metrics();
    let workers: Vec<serde_json::Value> = (0..metrics.num_workers())
        .map(|index| {
            serde_json::json!({
                "index": index,
                "busy_s": metrics.worker_total_busy_duration(index).as_secs_f64(),
            })
        })
        .collect();
    serde_json::json!({
        "workers": workers,
        "alive_tasks": metrics.num_alive_tasks(),
        "global_queue_depth": metrics.global_queue_depth(),
    })
}

/// Binds a listener on `rt` to `addr`; returns it and its bound address.
pub fn bind(rt: &Runtime, addr: SocketAddr) -> Result<(TcpListener, SocketAddr), Error> {
    let listener = rt
        .block_on(TcpListener::bind(addr))
        .map_err(|e| Error::new(format!("cannot bind {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::new(format!("cannot read the bound address: {e}")))?;
    Ok((listener, local))
}

/// Shuts the runtime down without waiting on the endless CPU tasks for
/// longer than a moment.
pub struct Guard(pub Option<Runtime>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Accepts echo connections forever, one task each.
pub async fn accept_loop(listener: TcpListener) {
    accept_each(listener, echo).await
}

/// Accepts connections forever and spawns `serve(stream, peer)` for each.
/// An accept that fails (out of descriptors and the like) is reported and
/// followed by a short pause, so the loop neither dies nor spins.
pub async fn accept_each<F, Fut>(listener: TcpListener, mut serve: F)
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(serve(stream, peer));
            }
            Err(error) => {
                eprintln!("keel serve: accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Echoes everything a connection sends until it closes, stamping a
/// probe's requests with the server's clock (see [`super::stamp`]).
async fn echo(mut stream: TcpStream, peer: SocketAddr) {
    if let Err(error) = stream.set_nodelay(true) {
        eprintln!("keel serve: {peer}: cannot set TCP_NODELAY: {error}");
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        stamp_echo(&mut buf[..n]);
        if stream.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// One CPU task: slices forever, counting each and yielding between them.
async fn cpu_task(iters: u64, slices: Arc<AtomicU64>) {
    loop {
        cpu::slice(iters);
        slices.fetch_add(1, Ordering::Relaxed);
        tokio::task::yield_now().await;
    }
}
