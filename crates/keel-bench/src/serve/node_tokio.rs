//! What every tokio peer server is built from: the runtime and its guard,
//! the listener, the accept loop, the echo service and what tokio's
//! metrics say for a `mark`.
//!
//! The twin of [`super::node_keel`], written the way a tokio user writes
//! it: each tokio server (the `s*_tokio` modules, and the S3 backend)
//! starts a runtime with [`runtime`], binds with [`bind`], accepts with
//! [`accept_each`] and answers `mark` with [`tokio_stats_json`]. The echo
//! service ([`accept_echo`]) is S1's, and S5 runs it beside its log for
//! the ping probe.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

use super::stamp::stamp_echo;
use crate::error::Error;

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

/// Accepts echo connections forever, one task each: S1's service, and
/// S5's ping target.
pub async fn accept_echo(listener: TcpListener) {
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
