//! The runtime interface the scenario servers are written over, and what
//! they build from it: the accept loop and the echo service.
//!
//! A scenario server is the same program on every runtime: what differs
//! is how it spawns, accepts, sleeps, yields and moves bytes, and how it
//! reports its runtime's own figures. [`Node`] is that difference, and a
//! server written once against it (`s0`, `s1`, `s2`, and the log service
//! of `s5`; S3's proxy, whose classes are keel's own, and S5's logs, which
//! are built differently by design, still have a keel and a tokio module)
//! runs on any runtime that implements it:
//! [`super::node_keel::KeelNode`] (either IO driver) and
//! [`super::node_tokio::TokioNode`]. A new peer runtime is one more
//! implementation, not a copy of every server.
//!
//! Each runtime keeps its native paths: keel's streams are read and
//! written by keel's own calls and handed to hyper as they are (they
//! implement hyper's IO traits), tokio's through hyper-util's `TokioIo`,
//! as a tokio user writes it.

use std::any::Any;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use super::stamp::stamp_echo;
use super::Running;
use crate::error::Error;

/// What a scenario server needs of its runtime (see the module docs).
///
/// The methods that take `&self` are called from outside the runtime, by
/// the thread that starts the server; the others from inside its tasks.
pub trait Node: Sized + 'static {
    /// A connected TCP stream.
    type Stream: Send + 'static;
    /// A bound TCP listener.
    type Listener: Send + 'static;
    /// A stream as hyper's connection driver takes it.
    type HyperIo: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static;

    /// The runtime's name in error messages.
    const NAME: &'static str;

    /// Whether the runtime can hold a stream's reads until a batch of
    /// bytes is there (keel's `BatchPolicy`): S2's `fixed` and `adaptive`
    /// modes, and its `off`. A runtime without it reads per readiness
    /// into a buffer of the mode's size (`read-1460`, `read-64k`).
    const BATCHES: bool;

    /// Binds a listener to `addr`; returns it and its bound address.
    fn bind(&self, addr: SocketAddr) -> Result<(Self::Listener, SocketAddr), Error>;

    /// Spawns `task` on the runtime.
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static);

    /// The runtime's own figures for a `mark` answer (`null` if it has
    /// none).
    fn stats(&self) -> Box<dyn Fn() -> Value + Send>;

    /// What keeps the runtime alive; dropping it stops the server.
    fn into_guard(self) -> Box<dyn Any + Send>;

    /// Spawns `task` from inside one of the runtime's tasks.
    fn spawn_here(task: impl Future<Output = ()> + Send + 'static);

    /// The next connection.
    fn accept(
        listener: &Self::Listener,
    ) -> impl Future<Output = io::Result<(Self::Stream, SocketAddr)>> + Send;

    /// Waits `duration`.
    fn sleep(duration: Duration) -> impl Future<Output = ()> + Send;

    /// Lets the runtime run its other tasks.
    fn yield_now() -> impl Future<Output = ()> + Send;

    /// Sets `TCP_NODELAY`.
    fn set_nodelay(stream: &Self::Stream) -> io::Result<()>;

    /// Sets how the stream's reads gather bytes. A runtime that does not
    /// [batch](Node::BATCHES) refuses with `Unsupported`.
    fn set_batch(stream: &Self::Stream, policy: keel::net::BatchPolicy) -> io::Result<()>;

    /// Reads what the stream has, up to `buf`'s length (0 at its end).
    fn read<'a>(
        stream: &'a mut Self::Stream,
        buf: &'a mut [u8],
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a;

    /// Writes all of `buf`.
    fn write_all<'a>(
        stream: &'a mut Self::Stream,
        buf: &'a [u8],
    ) -> impl Future<Output = io::Result<()>> + Send + 'a;

    /// The stream, for hyper.
    fn hyper_io(stream: Self::Stream) -> Self::HyperIo;
}

/// A server on `node` serving one address, `addr`, with the runtime's
/// figures for its marks.
pub fn running<N: Node>(node: N, addr: SocketAddr) -> Running {
    Running {
        addr,
        log_addr: None,
        api_addr: None,
        admin_addr: None,
        startup: Value::Null,
        runtime_stats: node.stats(),
        guard: node.into_guard(),
    }
}

/// Accepts connections forever and spawns `serve(stream, peer)` for each.
/// An accept that fails (out of descriptors and the like) is reported and
/// followed by a short pause, so the loop neither dies nor spins.
pub async fn accept_each<N, F, Fut>(listener: N::Listener, mut serve: F)
where
    N: Node,
    F: FnMut(N::Stream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        match N::accept(&listener).await {
            Ok((stream, peer)) => N::spawn_here(serve(stream, peer)),
            Err(error) => {
                eprintln!("keel serve: accept failed: {error}");
                N::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Accepts echo connections forever, one task each: S1's service, and
/// S5's ping target.
pub async fn accept_echo<N: Node>(listener: N::Listener) {
    accept_each::<N, _, _>(listener, echo::<N>).await
}

/// Sets `TCP_NODELAY` on an accepted stream, as a request/response server
/// does (an answer is one small write that should leave at once); a
/// failure is reported and the connection served anyway.
pub fn no_delay<N: Node>(stream: &N::Stream, peer: SocketAddr) {
    if let Err(error) = N::set_nodelay(stream) {
        eprintln!("keel serve: {peer}: cannot set TCP_NODELAY: {error}");
    }
}

/// Echoes everything a connection sends until it closes, stamping a
/// probe's requests with the server's clock (see [`super::stamp`]).
async fn echo<N: Node>(mut stream: N::Stream, peer: SocketAddr) {
    no_delay::<N>(&stream, peer);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match N::read(&mut stream, &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        stamp_echo(&mut buf[..n]);
        if N::write_all(&mut stream, &buf[..n]).await.is_err() {
            return;
        }
    }
}
