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

use keel::admin::{ClassFigures, WorkerFigures};
use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, TcpStream};
use serde::Deserialize;
use serde_json::{json, Value};

use super::stamp::stamp_echo;
use crate::error::Error;

/// A keel runtime with `workers` workers on the IO driver `io`, the spin
/// policy `spin` (the runtime's default when `None`) and every other
/// setting at its default.
pub fn runtime(
    workers: usize,
    spin: Option<keel::SpinPolicy>,
    io: keel::io::IoBackend,
) -> Result<keel::Runtime, Error> {
    runtime_with(workers, spin, io, true)
}

/// [`runtime`], with the accounting on or off (off only to measure what
/// it costs).
pub fn runtime_with(
    workers: usize,
    spin: Option<keel::SpinPolicy>,
    io: keel::io::IoBackend,
    accounting: bool,
) -> Result<keel::Runtime, Error> {
    let mut builder = keel::Runtime::builder();
    builder
        .workers(workers)
        .io_backend(io)
        .accounting(accounting);
    if let Some(spin) = spin {
        builder.spin(spin);
    }
    build(&mut builder)
}

/// [`runtime`] with the urgent class on a lane of its own (see
/// `keel::Builder::urgent_lane`), at real-time priority 1 where the process
/// may set it.
pub fn runtime_with_lane(workers: usize, io: keel::io::IoBackend) -> Result<keel::Runtime, Error> {
    let mut builder = keel::Runtime::builder();
    builder
        .workers(workers)
        .io_backend(io)
        .urgent_lane(keel::UrgentLane::new());
    build(&mut builder)
}

/// Builds `builder`'s runtime; the error carries keel's own, which says
/// why (for io_uring, why the ring was refused).
fn build(builder: &mut keel::Builder) -> Result<keel::Runtime, Error> {
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
/// difference the two marks around a measured window. Workers and classes
/// are the library's own `/stats` types ([`WorkerFigures`],
/// [`ClassFigures`]) under the document's own names (`worker_states`,
/// `classes`), so the harness reads what keel's admin endpoint and
/// `keel top` read, field for field, rather than a copy with names of its
/// own; [`worker_pairs`] reads them back.
pub fn stats_json(stats: &keel::stats::Stats) -> Value {
    let workers: Vec<WorkerFigures> = stats.workers.iter().map(WorkerFigures::from).collect();
    json!({
        "elapsed_s": stats.elapsed.as_secs_f64(),
        "pending_timers": stats.pending_timers,
        "worker_states": workers,
        "classes": ClassFigures::all(stats),
        "lane": stats.lane.as_ref().map(|lane| json!({
            "priority": lane.priority,
            "polls": lane.polls,
            "busy_s": lane.busy.as_secs_f64(),
            "charged_s": lane.charged.as_secs_f64(),
            "throttled": lane.throttled,
        })),
    })
}

/// Each keel worker's figures at two marks' `runtime` objects (as
/// [`stats_json`] writes them), paired by worker index: `(start, end)`
/// per worker of `end`, a worker missing from `start` paired with zeros.
/// `None` when either mark has no readable `worker_states` (a tokio
/// server's marks).
pub fn worker_pairs(start: &Value, end: &Value) -> Option<Vec<(WorkerFigures, WorkerFigures)>> {
    let read = |mark: &Value| Vec::<WorkerFigures>::deserialize(mark.get("worker_states")?).ok();
    let (start, end) = (read(start)?, read(end)?);
    Some(
        end.into_iter()
            .map(|now| {
                let then = start
                    .iter()
                    .find(|w| w.worker == now.worker)
                    .cloned()
                    .unwrap_or_default();
                (then, now)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The accounting JSON of a real keel runtime has one entry per worker
    /// and per class, in the library's `/stats` types, and reads back.
    #[test]
    fn stats_json_shape() {
        let rt = keel::Runtime::builder().workers(1).build().unwrap();
        rt.block_on(async { keel::yield_now().await });
        let value = stats_json(&rt.stats());
        assert!(value["elapsed_s"].as_f64().unwrap() >= 0.0);
        assert_eq!(value["worker_states"].as_array().unwrap().len(), 1);
        assert!(value["worker_states"][0]["task_s"].is_f64());
        assert!(value.get("workers").is_none(), "{value}");
        let classes = value["classes"].as_array().unwrap();
        assert!(!classes.is_empty());
        assert!(classes[0]["name"].is_string());
        assert!(classes[0]["queue_delay"]["p99_us"].is_f64());
        let pairs = worker_pairs(&value, &value).unwrap();
        assert_eq!(pairs.len(), 1);
        assert_eq!(pairs[0].0, pairs[0].1);
        assert!(pairs[0].1.cpu_s.is_some());
    }

    /// Workers pair by index whatever their order; a worker the first
    /// mark lacks starts from zero; a mark without keel's workers (tokio's)
    /// pairs nothing.
    #[test]
    fn worker_pairs_by_index() {
        let worker = |index: usize, task_s: f64| {
            let mut w = WorkerFigures::default();
            w.worker = index;
            w.task_s = task_s;
            w
        };
        let start = json!({"worker_states": [worker(1, 2.0), worker(0, 1.0)]});
        let end = json!({"worker_states": [worker(0, 1.5), worker(1, 2.5), worker(2, 0.5)]});
        let pairs = worker_pairs(&start, &end).unwrap();
        let tasks: Vec<(f64, f64)> = pairs.iter().map(|(a, b)| (a.task_s, b.task_s)).collect();
        assert_eq!(tasks, [(1.0, 1.5), (2.0, 2.5), (0.0, 0.5)]);
        let tokio = json!({"workers": [{"busy_s": 1.0}]});
        assert!(worker_pairs(&tokio, &end).is_none());
        assert!(worker_pairs(&start, &Value::Null).is_none());
    }
}
