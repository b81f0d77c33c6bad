//! The S3 proxy on keel: the same proxy as `s3_tokio`, with its work
//! sorted into classes.
//!
//! - The admin endpoint is keel's own (`keel::admin`), in `Class::URGENT`:
//!   it is the control plane, and an urgent task waits at most one task
//!   poll plus one IO interval, however much forwarding is queued. Its
//!   `/status` is the runtime's summary followed by the proxy's counters.
//! - The accept loop and each connection's setup (the backend connect)
//!   run in `Class::NORMAL`, so new connections keep being taken while
//!   bulk transfers saturate the workers.
//! - A connection's forwarding starts in the setup's class too, and moves
//!   to `Class::BULK` once the connection has moved
//!   [`LONG_CONNECTION_BYTES`]: a
//!   short exchange is connection work, served whole where it was
//!   accepted, and only transfers that prove long are throughput work,
//!   which gets the largest share of the CPU but cannot starve the other
//!   two. (Forwarding every connection in bulk from its first byte puts
//!   each short exchange in the downloads' queue: under S3's load the
//!   short connections then took more of the bulk class's time than the
//!   downloads did.)
//!
//! `--single-class` runs all three in `Class::NORMAL`, to measure what
//! the classes buy. `--urgent-lane` keeps the classes and serves the
//! urgent one (the admin endpoint) on keel's urgent lane, a thread the OS
//! schedules ahead of the workers, to measure what that buys on a
//! crowded machine. The forwarding loops need nothing special to share
//! the workers: keel's sockets spend the task's coop budget, so a
//! connection whose sockets are always ready still yields.
//!
//! One task at a time forwards both directions of a connection, so an error on
//! either side ends the task and closes both sockets at once, with no
//! cancellation between tasks.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use keel::io::{AsyncRead, AsyncWrite};
use keel::net::{TcpListener, TcpStream};
use keel::Class;

use super::node_keel::{accept_each, bind, stats_json};
use super::s3::{
    status_text, timed, OpenConnection, ProxyCounters, ProxyOpts, BUFFER, CONNECT_TIMEOUT,
    LONG_CONNECTION_BYTES,
};
use super::Running;
use crate::error::Error;

/// The class of each part of the proxy.
#[derive(Debug, Clone, Copy)]
pub struct Classes {
    /// The admin endpoint.
    pub admin: Class,
    /// The accept loop and the backend connects.
    pub setup: Class,
    /// The forwarding.
    pub forward: Class,
}

impl Classes {
    /// The classes for `--single-class` or not.
    pub fn new(single_class: bool) -> Self {
        if single_class {
            Self {
                admin: Class::NORMAL,
                setup: Class::NORMAL,
                forward: Class::NORMAL,
            }
        } else {
            Self {
                admin: Class::URGENT,
                setup: Class::NORMAL,
                forward: Class::BULK,
            }
        }
    }
}

/// Starts the keel proxy.
pub fn start(opts: &ProxyOpts) -> Result<Running, Error> {
    let rt = if opts.urgent_lane {
        super::node_keel::runtime_with_lane(opts.workers, opts.io)?
    } else {
        super::node_keel::runtime(opts.workers, None, opts.io)?
    };
    let classes = Classes::new(opts.single_class);
    let counters = Arc::new(ProxyCounters::default());
    let (listener, addr) = bind(&rt, opts.listen)?;
    let admin = match opts.admin {
        Some(addr) => Some(serve_admin(
            &rt,
            addr,
            classes.admin,
            opts.workers,
            Arc::clone(&counters),
        )?),
        None => None,
    };
    let admin_addr = admin.as_ref().map(keel::admin::AdminServer::local_addr);
    rt.spawn_in(
        classes.setup,
        accept_loop(listener, opts.backend, classes, Arc::clone(&counters)),
    );

    let handle = rt.handle().clone();
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: None,
        admin_addr,
        startup: serde_json::json!({
            "backend": opts.backend,
            "single_class": opts.single_class,
            "urgent_lane": opts.urgent_lane,
        }),
        runtime_stats: Box::new(move || {
            let mut value = stats_json(&handle.stats());
            value["proxy"] = counters.to_json();
            value
        }),
        // The admin endpoint stops before its runtime.
        guard: Box::new((admin, rt)),
    })
}

/// Serves keel's admin endpoint on `addr` in `class`, its `/status`
/// followed by the proxy's counters (each request counted).
pub fn serve_admin(
    rt: &keel::Runtime,
    addr: SocketAddr,
    class: Class,
    workers: usize,
    counters: Arc<ProxyCounters>,
) -> Result<keel::admin::AdminServer, Error> {
    keel::admin::Admin::builder()
        .class(class)
        .status_section(move || {
            counters.admin_requests.fetch_add(1, Ordering::Relaxed);
            status_text("keel", workers, &counters)
        })
        .serve(addr, rt.handle())
        .map_err(|e| Error::new(format!("cannot serve the admin endpoint on {addr}: {e}")))
}

/// Accepts clients forever; each one's setup runs in the accept loop's
/// class.
pub async fn accept_loop(
    listener: TcpListener,
    backend: SocketAddr,
    classes: Classes,
    counters: Arc<ProxyCounters>,
) {
    let setup = Arc::clone(&counters);
    let accepts = accept_each(listener, move |client, _| {
        connect_and_forward(client, backend, classes.forward, Arc::clone(&counters))
    });
    timed(accepts, |took| setup.add_setup(took)).await
}

/// Connects to the backend for `client` and forwards in the setup's class
/// until the connection has moved [`LONG_CONNECTION_BYTES`]; a connection
/// still open then is a bulk transfer, and a task in `class` forwards the
/// rest. A backend that refuses or does not answer in time closes the
/// client.
///
/// So a short connection (a request and its small answer) is served
/// whole in the class that accepted it, as connection work, and only
/// transfers that prove long take the bulk class's time: the downloads
/// then have the bulk class to themselves, rather than queueing behind
/// every short exchange that happens to be forwarding.
async fn connect_and_forward(
    client: TcpStream,
    backend: SocketAddr,
    class: Class,
    counters: Arc<ProxyCounters>,
) {
    let open = OpenConnection::new(Arc::clone(&counters));
    let connect = keel::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(backend));
    let upstream = match timed(connect, |took| counters.add_setup(took)).await {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(error)) => return counters.connect_failed(backend, Some(error)),
        Err(_) => return counters.connect_failed(backend, None),
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let mut pipes = [Pipe::new(), Pipe::new()];
    let first = forward(
        &client,
        &upstream,
        &counters,
        &mut pipes,
        Some(LONG_CONNECTION_BYTES),
    )
    .await;
    match first {
        Ok(Forwarded::Long) => {
            keel::spawn_in(class, async move {
                let rest = forward(&client, &upstream, &counters, &mut pipes, None).await;
                close(client, upstream, rest, &counters, open);
            });
        }
        done => close(client, upstream, done, &counters, open),
    }
}

/// Closes both sockets of a connection whose forwarding ended with
/// `result`, then stops counting it as open.
fn close(
    client: TcpStream,
    upstream: TcpStream,
    result: io::Result<Forwarded>,
    counters: &ProxyCounters,
    open: OpenConnection,
) {
    drop((client, upstream));
    if result.is_err() {
        counters.io_errors.fetch_add(1, Ordering::Relaxed);
    }
    drop(open);
}

/// How a call of [`forward`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forwarded {
    /// Both directions ended.
    Done,
    /// The connection moved the bytes it was allowed; it is still open.
    Long,
}

/// Forwards bytes both ways (`pipes[0]` client to backend, `pipes[1]`
/// back) until both directions have ended (each EOF half-closes the other
/// side), until either side fails, or, with a `limit`, until the
/// connection has moved that many bytes in all. The caller drops both
/// sockets once it is done, which closes them. Each poll's time is
/// counted as short or long forwarding by the bytes moved so far.
async fn forward(
    client: &TcpStream,
    backend: &TcpStream,
    counters: &ProxyCounters,
    pipes: &mut [Pipe; 2],
    limit: Option<u64>,
) -> io::Result<Forwarded> {
    poll_fn(|cx| {
        let start = Instant::now();
        let outcome = (|| {
            let [up, down] = &mut *pipes;
            let up_done = up.poll(cx, client, backend, &counters.bytes_up)?.is_ready();
            let down_done = down
                .poll(cx, backend, client, &counters.bytes_down)?
                .is_ready();
            let moved = up.moved + down.moved;
            if up_done && down_done {
                Poll::Ready(Ok(Forwarded::Done))
            } else if limit.is_some_and(|limit| moved >= limit) {
                Poll::Ready(Ok(Forwarded::Long))
            } else {
                Poll::Pending
            }
        })();
        counters.add_forward(pipes[0].moved + pipes[1].moved, start.elapsed());
        outcome
    })
    .await
}

/// One direction of a forwarded connection: read into the buffer, write
/// it all out, repeat; on EOF, shut down the writing side.
struct Pipe {
    /// Bytes read and not yet written are `buf[start..end]`.
    buf: Box<[u8]>,
    /// Start of the bytes still to write.
    start: usize,
    /// End of the bytes still to write.
    end: usize,
    /// The reading side reached EOF.
    eof: bool,
    /// The writing side has been shut down: the direction is over.
    done: bool,
    /// Bytes this direction has read.
    moved: u64,
}

impl Pipe {
    /// A direction with an empty buffer of [`BUFFER`] bytes.
    fn new() -> Self {
        Self {
            buf: vec![0u8; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            done: false,
            moved: 0,
        }
    }

    /// Moves bytes from `from` to `to` until either would block, the
    /// direction ends (ready with `Ok`), or it fails; counts what it reads
    /// in `bytes`.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        from: &TcpStream,
        to: &TcpStream,
        bytes: &AtomicU64,
    ) -> Poll<io::Result<()>> {
        while !self.done {
            if self.start < self.end {
                let n =
                    ready!(Pin::new(&mut &*to).poll_write(cx, &self.buf[self.start..self.end]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.start += n;
            } else if self.eof {
                ready!(Pin::new(&mut &*to).poll_close(cx))?;
                self.done = true;
            } else {
                let n = ready!(Pin::new(&mut &*from).poll_read(cx, &mut self.buf))?;
                if n == 0 {
                    self.eof = true;
                } else {
                    bytes.fetch_add(n as u64, Ordering::Relaxed);
                    self.moved += n as u64;
                    self.start = 0;
                    self.end = n;
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}
