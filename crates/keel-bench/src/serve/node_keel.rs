//! What every keel scenario server is built from: the runtime, the
//! listener, the accept loop, the echo service and the accounting a
//! `mark` reports.
//!
//! Each keel server (the `s*_keel` modules) starts a runtime with
//! [`runtime`], binds with [`bind`], accepts with [`accept_each`] and
//! answers `mark` with [`stats_json`], so the servers differ only in what
//! they serve. The echo service ([`accept_echo`]) is S1's, and S5 runs it
//! beside its log for the ping probe. [`super::node_tokio`] is the same
//! set for the tokio peers, written the same way.

use std::net::SocketAddr;
use std::time::Duration;

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, TcpStream};
use serde_json::{json, Value};

use super::stamp::stamp_echo;
use crate::error::Error;

/// A keel runtime with `workers` workers, the spin policy `spin` (the
/// runtime's default when `None`) and every other setting at its default.
pub fn runtime(workers: usize, spin: Option<keel::SpinPolicy>) -> Result<keel::Runtime, Error> {
    runtime_with(workers, spin, true)
}

/// [`runtime`], with the accounting on or off (off only to measure what
/// it costs).
pub fn runtime_with(
    workers: usize,
    spin: Option<keel::SpinPolicy>,
    accounting: bool,
) -> Result<keel::Runtime, Error> {
    let mut builder = keel::Runtime::builder();
    builder.workers(workers).accounting(accounting);
    if let Some(spin) = spin {
        builder.spin(spin);
    }
    builder
        .build()
        .map_err(|e| Error::new(format!("cannot start a keel runtime: {e}")))
}

/// Binds a listener on `rt` to `addr`; returns it and its bound address.
pub fn bind(rt: &keel::Runtime, addr: SocketAddr) -> Result<(TcpListener, SocketAddr), Error> {
    let listener = rt
        .block_on(async { TcpListener::bind(addr) })
        .map_err(|e| Error::new(format!("cannot bind {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::new(format!("cannot read the bound address: {e}")))?;
    Ok((listener, local))
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
                keel::spawn(serve(stream, peer));
            }
            Err(error) => {
                eprintln!("keel serve: accept failed: {error}");
                keel::time::sleep(Duration::from_millis(10)).await;
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

/// keel's own accounting as the `runtime` field of a `mark` answer.
///
/// Counters are cumulative since the runtime was built, so the harness can
/// difference the two marks around a measured window. Durations are in
/// seconds (`_s`) or microseconds (`_us`), as the report's metric names.
pub fn stats_json(stats: &keel::stats::Stats) -> Value {
    let secs = |d: Duration| d.as_secs_f64();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let workers: Vec<Value> = stats
        .workers
        .iter()
        .map(|w| {
            json!({
                "index": w.index,
                "busy_s": secs(w.busy()),
                "search_s": secs(w.search),
                "spin_s": secs(w.spin),
                "parked_s": secs(w.parked),
                "timers_s": secs(w.timers),
                "io_s": secs(w.io),
                "wall_s": secs(w.wall()),
                "cpu_s": secs(w.cpu),
                "park_cpu_s": secs(w.park_cpu),
                "io_poll_gap_max_us": micros(w.io_poll_gap_max),
                "polls": w.polls.iter().sum::<u64>(),
            })
        })
        .collect();
    let classes: Vec<Value> = stats
        .classes
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "shares": c.shares,
                "busy_s": secs(c.busy),
                "polls": c.polls,
                "stalls": c.stalls,
                "queue_delay_count": c.queue_delay.count(),
                "queue_delay_p50_us": micros(c.queue_delay.p50()),
                "queue_delay_p99_us": micros(c.queue_delay.p99()),
                "queue_delay_max_us": micros(c.queue_delay.max()),
            })
        })
        .collect();
    json!({
        "elapsed_s": secs(stats.elapsed),
        "pending_timers": stats.pending_timers,
        "workers": workers,
        "classes": classes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accounting JSON of a real keel runtime has one entry per worker
    /// and per class, with the documented field names.
    #[test]
    fn stats_json_shape() {
        let rt = keel::Runtime::builder().workers(1).build().unwrap();
        rt.block_on(async { keel::yield_now().await });
        let value = stats_json(&rt.stats());
        assert!(value["elapsed_s"].as_f64().unwrap() >= 0.0);
        assert_eq!(value["workers"].as_array().unwrap().len(), 1);
        assert!(value["workers"][0]["busy_s"].is_f64());
        let classes = value["classes"].as_array().unwrap();
        assert!(!classes.is_empty());
        assert!(classes[0]["name"].is_string());
        assert!(classes[0]["queue_delay_p99_us"].is_f64());
    }
}
