//! S3, mixed traffic and the control plane: what the proxy's variants
//! share.
//!
//! The server under test is a TCP proxy. Each accepted client connection
//! gets its own connection to the backend (`s3_backend`), and bytes are
//! forwarded both ways until each side has said it is done: the end of
//! one direction (EOF) becomes a half-close (`shutdown(Write)`) of the
//! other side, so a client that half-closes after its request still gets
//! the whole answer, and the connection closes once both directions have
//! ended. An error on either side closes both at once, so neither peer
//! waits on a connection that can no longer carry anything.
//!
//! Beside the forwarding, the proxy serves an admin endpoint answering
//! `GET /status` with [`status_text`]. S3 times that answer while bulk
//! downloads and a stream of short connections go through the proxy: the
//! control plane must stay responsive under data-plane load, which is
//! what keel's classes are for (admin in `urgent`, accepts and backend
//! connects in `normal`, forwarding in `bulk`).
//!
//! Both proxies time their own polls by *role* ([`ProxyCounters`]): the
//! setup of connections (the accept loop and the backend connects), the
//! forwarding of short connections, and the forwarding of long ones (a
//! connection counts as long once it has forwarded
//! [`LONG_CONNECTION_BYTES`]: the downloads). That says how each runtime
//! divided the proxy's time between the work S3 loads it with, whatever
//! classes the work ran in.

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use super::{control, default_workers, s3_keel, s3_tokio, stamp, RuntimeKind};
use crate::error::Error;

/// Bytes of each direction's forwarding buffer: large, so a bulk transfer
/// moves in few system calls.
pub const BUFFER: usize = 64 * 1024;

/// How long a backend connect may take before the client is dropped.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes forwarded (both ways) past which a connection's forwarding
/// counts as long: S3's downloads of 1 MiB pass it in their first
/// object, its short connections (one request for an empty object, a few
/// hundred bytes) never do.
pub const LONG_CONNECTION_BYTES: u64 = 256 * 1024;

/// Runs `future`, handing `record` the wall time of each of its polls.
pub async fn timed<F: Future>(future: F, mut record: impl FnMut(Duration)) -> F::Output {
    let mut future = pin!(future);
    poll_fn(|cx| {
        let start = Instant::now();
        let outcome = future.as_mut().poll(cx);
        record(start.elapsed());
        outcome
    })
    .await
}

/// Flags of `keel-bench serve proxy`.
#[derive(Debug, Args)]
pub struct ServeProxyArgs {
    /// The runtime to serve on.
    #[arg(long, value_enum)]
    pub runtime: RuntimeKind,
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = default_workers(), value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// Address to accept clients on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Address of the backend each client is forwarded to.
    #[arg(long)]
    pub backend: SocketAddr,
    /// Address to bind the admin endpoint (`GET /status`) to; none if
    /// absent.
    #[arg(long)]
    pub admin_addr: Option<SocketAddr>,
    /// keel: run admin, accepts and forwarding all in the normal class,
    /// instead of urgent, normal and bulk.
    #[arg(long)]
    pub single_class: bool,
    /// keel: serve the urgent class (the admin endpoint) on an urgent
    /// lane, a thread the OS schedules ahead of the workers.
    #[arg(long, conflicts_with = "single_class")]
    pub urgent_lane: bool,
}

/// Runs `keel-bench serve proxy` until `stop` or the end of stdin.
pub fn run(args: &ServeProxyArgs) -> Result<(), Error> {
    let opts = ProxyOpts {
        workers: usize::try_from(args.workers).unwrap_or(usize::MAX),
        listen: args.listen,
        backend: args.backend,
        admin: args.admin_addr,
        single_class: args.single_class,
        urgent_lane: args.urgent_lane,
        io: args.runtime.io_backend(),
    };
    let context = format!("serve proxy --runtime {}", args.runtime);
    let running = match args.runtime {
        RuntimeKind::Keel | RuntimeKind::KeelUring => s3_keel::start(&opts),
        RuntimeKind::Tokio => s3_tokio::start(&opts),
        RuntimeKind::Monoio => Err(super::not_served(args.runtime)),
    }
    .map_err(|e| e.context(&context))?;
    control::serve_until_stop(running, &AtomicU64::new(0))
}

/// What a proxy is asked to run.
#[derive(Debug, Clone)]
pub struct ProxyOpts {
    /// Worker threads of the runtime.
    pub workers: usize,
    /// Where the proxy listens for clients.
    pub listen: SocketAddr,
    /// Where the backend listens.
    pub backend: SocketAddr,
    /// Where the admin endpoint binds, if the proxy has one.
    pub admin: Option<SocketAddr>,
    /// keel: every task in `Class::NORMAL` instead of admin urgent,
    /// forwarding bulk.
    pub single_class: bool,
    /// keel: the urgent class on an urgent lane.
    pub urgent_lane: bool,
    /// keel's IO driver.
    pub io: keel::io::IoBackend,
}

/// Counters every variant keeps, reported in each `mark` under `proxy`
/// and summarised by [`status_text`]; cumulative since start, except
/// `open`.
#[derive(Debug)]
pub struct ProxyCounters {
    /// When the proxy started.
    pub started: Instant,
    /// Client connections accepted.
    pub accepted: AtomicU64,
    /// Client connections accepted and not yet closed.
    pub open: AtomicU64,
    /// Backend connects that failed or timed out (their client was
    /// closed).
    pub backend_errors: AtomicU64,
    /// Forwarded connections that ended on an IO error rather than on
    /// both EOFs.
    pub io_errors: AtomicU64,
    /// Bytes forwarded from clients to the backend, counted as they move
    /// (per read or write), so long transfers show up while they last.
    pub bytes_up: AtomicU64,
    /// Bytes forwarded from the backend to clients, counted the same way.
    pub bytes_down: AtomicU64,
    /// Admin requests answered.
    pub admin_requests: AtomicU64,
    /// Nanoseconds of polls setting connections up: the accept loop and
    /// the backend connects.
    pub setup_ns: AtomicU64,
    /// Nanoseconds of forwarding polls of connections that had not yet
    /// forwarded [`LONG_CONNECTION_BYTES`].
    pub forward_short_ns: AtomicU64,
    /// Nanoseconds of forwarding polls of connections past it.
    pub forward_long_ns: AtomicU64,
}

impl Default for ProxyCounters {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            accepted: AtomicU64::new(0),
            open: AtomicU64::new(0),
            backend_errors: AtomicU64::new(0),
            io_errors: AtomicU64::new(0),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            admin_requests: AtomicU64::new(0),
            setup_ns: AtomicU64::new(0),
            forward_short_ns: AtomicU64::new(0),
            forward_long_ns: AtomicU64::new(0),
        }
    }
}

impl ProxyCounters {
    /// Counts a failed backend connect, and says whether to log it: the
    /// 1st, 2nd, 4th, 8th... failure is logged, so a dead backend under a
    /// connection storm cannot flood stderr.
    pub fn backend_failed(&self) -> bool {
        let n = self.backend_errors.fetch_add(1, Ordering::Relaxed) + 1;
        n.is_power_of_two()
    }

    /// The counters as the `proxy` object of a mark.
    pub fn to_json(&self) -> Value {
        json!({
            "accepted": self.accepted.load(Ordering::Relaxed),
            "open": self.open.load(Ordering::Relaxed),
            "backend_errors": self.backend_errors.load(Ordering::Relaxed),
            "io_errors": self.io_errors.load(Ordering::Relaxed),
            "bytes_up": self.bytes_up.load(Ordering::Relaxed),
            "bytes_down": self.bytes_down.load(Ordering::Relaxed),
            "admin_requests": self.admin_requests.load(Ordering::Relaxed),
            "setup_s": seconds(&self.setup_ns),
            "forward_short_s": seconds(&self.forward_short_ns),
            "forward_long_s": seconds(&self.forward_long_ns),
        })
    }

    /// Counts a backend connect that failed with `error`, or timed out
    /// (`None`), logging the first and then sparsely.
    pub fn connect_failed(&self, backend: SocketAddr, error: Option<std::io::Error>) {
        if self.backend_failed() {
            match error {
                Some(error) => {
                    eprintln!("keel serve: cannot connect to the backend {backend}: {error}");
                }
                None => {
                    eprintln!("keel serve: the backend {backend} did not answer a connect in time");
                }
            }
        }
    }

    /// Counts `took` of polling as connection set-up.
    pub fn add_setup(&self, took: Duration) {
        self.setup_ns.fetch_add(nanos(took), Ordering::Relaxed);
    }

    /// Counts `took` of forwarding polls for a connection that has
    /// forwarded `moved` bytes so far (both ways).
    pub fn add_forward(&self, moved: u64, took: Duration) {
        let role = if moved >= LONG_CONNECTION_BYTES {
            &self.forward_long_ns
        } else {
            &self.forward_short_ns
        };
        role.fetch_add(nanos(took), Ordering::Relaxed);
    }
}

/// Whole nanoseconds of `took`, saturating.
fn nanos(took: Duration) -> u64 {
    u64::try_from(took.as_nanos()).unwrap_or(u64::MAX)
}

/// A counter of nanoseconds, in seconds.
fn seconds(ns: &AtomicU64) -> f64 {
    ns.load(Ordering::Relaxed) as f64 / 1e9
}

/// Counts a client connection as open for as long as it lives; it moves
/// with the connection from its setup to its forwarding.
#[derive(Debug)]
pub struct OpenConnection(Arc<ProxyCounters>);

impl OpenConnection {
    /// Counts an accepted connection, open until the guard drops.
    pub fn new(counters: Arc<ProxyCounters>) -> Self {
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        counters.open.fetch_add(1, Ordering::Relaxed);
        Self(counters)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The status text the admin endpoint answers `GET /status` with, the
/// same for every variant: a few hundred bytes, like a real control plane
/// answer, and cheap to produce (a handful of atomic loads). Its last line
/// is the server's clock as the answer is produced (see [`stamp`]), from
/// which the probe takes the server's share of its latency.
pub fn status_text(runtime: &str, workers: usize, counters: &ProxyCounters) -> String {
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    format!(
        "keel proxy status\n\
         runtime: {runtime}\n\
         workers: {workers}\n\
         connections open: {}\n\
         connections accepted: {}\n\
         backend connect errors: {}\n\
         connections ended by an error: {}\n\
         bytes forwarded client to backend: {}\n\
         bytes forwarded backend to client: {}\n\
         admin requests: {}\n\
         uptime: {:.3} s\n\
         {}",
        load(&counters.open),
        load(&counters.accepted),
        load(&counters.backend_errors),
        load(&counters.io_errors),
        load(&counters.bytes_up),
        load(&counters.bytes_down),
        load(&counters.admin_requests),
        counters.started.elapsed().as_secs_f64(),
        stamp::status_clock_line(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status text names the runtime and the counters, and is a few
    /// hundred bytes.
    #[test]
    fn status_text_reports_counters() {
        let counters = Arc::new(ProxyCounters::default());
        counters.bytes_down.fetch_add(12345, Ordering::Relaxed);
        let open = OpenConnection::new(Arc::clone(&counters));
        let text = status_text("keel", 2, &counters);
        assert!(text.contains("runtime: keel\n"), "{text}");
        assert!(text.contains("workers: 2\n"), "{text}");
        assert!(text.contains("connections open: 1\n"), "{text}");
        assert!(text.contains("backend to client: 12345\n"), "{text}");
        assert!(
            stamp::read_status_clock(text.as_bytes()).is_some(),
            "{text}"
        );
        assert!((200..1000).contains(&text.len()), "{}", text.len());
        drop(open);
        assert_eq!(counters.to_json()["open"], 0);
        assert_eq!(counters.to_json()["accepted"], 1);
    }

    #[test]
    fn forwarding_time_goes_to_the_role_of_the_bytes_moved_so_far() {
        let counters = ProxyCounters::default();
        counters.add_setup(Duration::from_millis(1));
        counters.add_forward(LONG_CONNECTION_BYTES - 1, Duration::from_millis(2));
        counters.add_forward(LONG_CONNECTION_BYTES, Duration::from_millis(3));
        let json = counters.to_json();
        assert_eq!(json["setup_s"], 0.001);
        assert_eq!(json["forward_short_s"], 0.002);
        assert_eq!(json["forward_long_s"], 0.003);
    }

    #[test]
    fn timed_hands_over_each_poll() {
        let rt = keel::Runtime::builder().workers(1).build().unwrap();
        let mut polls = 0;
        let out = rt.block_on(timed(
            async {
                keel::yield_now().await;
                7
            },
            |_| polls += 1,
        ));
        assert_eq!((out, polls), (7, 2));
    }

    /// Backend failures are logged at powers of two only.
    #[test]
    fn backend_failures_log_sparsely() {
        let counters = ProxyCounters::default();
        let logged: Vec<bool> = (0..8).map(|_| counters.backend_failed()).collect();
        assert_eq!(logged, [true, true, false, true, false, false, false, true]);
    }
}
