//! What every tokio peer server is built from: the runtime and its guard,
//! the listener, the accept loop, the echo service and what tokio's
//! metrics say for a `mark`.
//!
//! The twin of [`super::node_keel`], written the way a tokio user writes
//! it: a tokio runtime is a [`Node`] ([`TokioNode`]) for the servers
//! written once (`s0`, `s1`, `s2`, S5's log service); each part written
//! per runtime (the `s*_tokio` modules, and the S3 backend) starts a runtime with
//! [`runtime`], binds with [`bind`], accepts with [`accept_each`] and
//! answers `mark` with [`tokio_stats_json`]. The echo service
//! ([`accept_echo`]) is S1's, and S5 runs it beside its log for the ping
//! probe.

use std::any::Any;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;

use super::node::{self, Node};
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

/// A tokio runtime as a [`Node`]: what the servers written once (see
/// [`super::node`]) run on, for the tokio peer.
pub struct TokioNode {
    /// The runtime the server runs on, shut down when dropped.
    rt: Guard,
}

impl TokioNode {
    /// A node on `rt`.
    pub fn new(rt: Runtime) -> TokioNode {
        TokioNode {
            rt: Guard(Some(rt)),
        }
    }

    /// The runtime, which the guard holds until it drops.
    fn runtime(&self) -> &Runtime {
        self.rt
            .0
            .as_ref()
            .expect("the runtime lives until the guard drops")
    }
}

impl Node for TokioNode {
    type Stream = TcpStream;
    type Listener = TcpListener;
    // hyper-util's standard adapter between tokio's IO traits and hyper's.
    type HyperIo = TokioIo<TcpStream>;

    const NAME: &'static str = "tokio";
    const BATCHES: bool = false;

    fn bind(&self, addr: SocketAddr) -> Result<(TcpListener, SocketAddr), Error> {
        bind(self.runtime(), addr)
    }

    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        drop(self.runtime().spawn(task));
    }

    fn stats(&self) -> Box<dyn Fn() -> serde_json::Value + Send> {
        let handle = self.runtime().handle().clone();
        Box::new(move || tokio_stats_json(&handle))
    }

    fn into_guard(self) -> Box<dyn Any + Send> {
        Box::new(self.rt)
    }

    fn spawn_here(task: impl Future<Output = ()> + Send + 'static) {
        drop(tokio::spawn(task));
    }

    fn accept(
        listener: &TcpListener,
    ) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
        listener.accept()
    }

    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send {
        tokio::time::sleep(duration)
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        tokio::task::yield_now()
    }

    fn set_nodelay(stream: &TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)
    }

    fn set_batch(_: &TcpStream, _: keel::net::BatchPolicy) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "tokio has no batch policy: its reads complete per readiness",
        ))
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

    fn hyper_io(stream: TcpStream) -> TokioIo<TcpStream> {
        TokioIo::new(stream)
    }
}

/// Accepts echo connections forever on tokio (see [`node::accept_echo`]).
pub async fn accept_echo(listener: TcpListener) {
    node::accept_echo::<TokioNode>(listener).await
}

/// Accepts connections forever on tokio (see [`node::accept_each`]).
pub async fn accept_each<F, Fut>(listener: TcpListener, serve: F)
where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    node::accept_each::<TokioNode, F, Fut>(listener, serve).await
}
