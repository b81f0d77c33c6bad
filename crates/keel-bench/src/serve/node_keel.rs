//! What every keel scenario server is built from: the runtime, the
//! listener, the accept loop, the echo service and the accounting a
//! `mark` reports.
//!
//! A keel runtime is a [`Node`] ([`KeelNode`]), which the servers written
//! once run on (`s0`, `s1`, `s2`, S5's log service). The parts written per
//! runtime (the `s*_keel` modules) start a runtime with [`runtime`], bind with
//! [`bind`], accept with [`accept_each`] and answer `mark` with
//! [`stats_json`], so they differ only in what they serve. The echo
//! service ([`accept_echo`]) is S1's, and S5 runs it beside its log for
//! the ping probe. [`super::node_tokio`] is the same set for the tokio
//! peers.

use std::any::Any;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use keel::admin::{ClassFigures, WorkerFigures};
use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::{TcpListener, TcpStream};
use serde::Deserialize;
use serde_json::{json, Value};

use super::node::{self, Node};
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

/// A keel runtime as a [`Node`]: what the servers written once (see
/// [`super::node`]) run on, on either IO driver.
pub struct KeelNode {
    /// The runtime the server runs on; its guard.
    rt: keel::Runtime,
}

impl KeelNode {
    /// A node on `rt`.
    pub fn new(rt: keel::Runtime) -> KeelNode {
        KeelNode { rt }
    }
}

impl Node for KeelNode {
    type Stream = TcpStream;
    type Listener = TcpListener;
    // keel's stream implements hyper's IO traits itself.
    type HyperIo = TcpStream;

    const NAME: &'static str = "keel";
    const BATCHES: bool = true;

    fn bind(&self, addr: SocketAddr) -> Result<(TcpListener, SocketAddr), Error> {
        bind(&self.rt, addr)
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        drop(self.rt.spawn(task));
    }

    fn stats(&self) -> Box<dyn Fn() -> Value + Send> {
        let handle = self.rt.handle().clone();
        Box::new(move || stats_json(&handle.stats()))
    }

    fn into_guard(self) -> Box<dyn Any + Send> {
        Box::new(self.rt)
    }

    fn spawn_here(task: impl Future<Output = ()> + Send + 'static) {
        drop(keel::spawn(task));
    }

    fn accept(
        listener: &TcpListener,
    ) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
        listener.accept()
    }

    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send {
        keel::time::sleep(duration)
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        keel::yield_now()
    }

    fn set_nodelay(stream: &TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)
    }

    fn set_batch(stream: &TcpStream, policy: keel::net::BatchPolicy) -> io::Result<()> {
        stream.set_batch(policy)
    }

    fn read<'a>(
        stream: &'a mut TcpStream,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        stream.read(buf)
    }

    fn write_all<'a>(
        stream: &'a mut TcpStream,
        buf: &'a [u8],
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        stream.write_all(buf)
    }

    fn hyper_io(stream: TcpStream) -> TcpStream {
        stream
    }
}

/// Accepts echo connections forever on keel (see [`node::accept_echo`]).
pub async fn accept_echo(listener: TcpListener) {
    node::accept_echo::<KeelNode>(listener).await
}

/// Accepts connections forever on keel (see [`node::accept_each`]).
pub async fn accept_each<F, Fut>(listener: TcpListener, serve: F)
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    node::accept_each::<KeelNode, F, Fut>(listener, serve).await
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
