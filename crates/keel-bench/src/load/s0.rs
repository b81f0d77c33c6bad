//! The S0 load: closed-loop HTTP/1.1 clients, on keep-alive or short
//! connections.
//!
//! The clients share the machine's two cores with the server they
//! measure, so they are built to cost as little as possible: a client
//! that writes one fixed request and parses exactly the answer in place
//! ([`super::http`]), and all connections of a thread driven
//! by one current-thread tokio runtime (one thread by default, as the
//! seed's `ab` was), not a blocking thread per connection, which would
//! add two context switches per request on the cores the server needs.
//!
//! - keep-alive: every connection sends a request, reads the answer and
//!   sends the next, back to back, for the warm-up and then the measured
//!   window. Requests answered inside the window count; their latency
//!   (request written to answer read) goes into an HDR histogram.
//! - short: every client connects, sends one request with
//!   `Connection: close`, reads the answer, waits for the server to close
//!   (so the server, not the client, holds the `TIME_WAIT` and the
//!   client's ports are not used up), and starts over. After the warm-up,
//!   clients take requests from a shared count until it is used up or the
//!   time limit passes.
//!
//! Each answer is checked (status 200, the 13-byte body); a failed
//! exchange counts as an error, its connection is dropped and the client
//! carries on with a new one after a short pause. Socket operations have
//! no timer each (a timer per request would cost the client CPU the
//! server needs); instead the run as a whole is bounded, and a connection
//! still waiting `io_timeout` after the end is abandoned and counted as an
//! error.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::http::{self, Limits};
use super::summary::{new_histogram, ProbeSummary};
use crate::error::Error;
use crate::serve::s0::BODY;

/// The longest answer head the clients accept, bytes (hyper's answer to
/// S0 has about 80).
const MAX_HEAD: usize = 4096;

/// What the clients accept of an answer: a head of at most [`MAX_HEAD`]
/// bytes and a body of at most 1 MiB.
const LIMITS: Limits = Limits {
    max_head: MAX_HEAD,
    max_body: 1 << 20,
};

/// How long a client pauses after a failed exchange before it tries
/// again, so a server that is gone is not hammered in a tight loop.
const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// How connections are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum S0Mode {
    /// Each connection carries request after request for the whole run.
    Keepalive,
    /// A new connection per request, closed by the server after it.
    Short,
}

impl S0Mode {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Keepalive => "keepalive",
            Self::Short => "short",
        }
    }
}

impl std::fmt::Display for S0Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the clients do.
#[derive(Debug, Clone)]
pub struct HttpLoadOpts {
    /// The HTTP service (a loopback address).
    pub addr: SocketAddr,
    /// Keep-alive or short connections.
    pub mode: S0Mode,
    /// Concurrent connections (keep-alive) or clients (short).
    pub connections: usize,
    /// Threads the connections are spread over, each with its own
    /// current-thread runtime.
    pub threads: usize,
    /// Time of requests that are not counted.
    pub warmup: Duration,
    /// Keep-alive: the measured window after the warm-up.
    pub duration: Duration,
    /// Short: requests to complete after the warm-up.
    pub requests: u64,
    /// Short: the most time the requests may take after the warm-up.
    pub time_limit: Duration,
    /// How long a connection may still be waiting after the end before
    /// it is abandoned.
    pub io_timeout: Duration,
}

/// The JSON line `keel-bench load s0` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HttpLoadSummary {
    /// Keep-alive or short.
    pub mode: S0Mode,
    /// Concurrent connections or clients.
    pub connections: usize,
    /// Requests answered correctly inside the measured window.
    pub requests: u64,
    /// `requests` per second of the window.
    pub rps: f64,
    /// Median latency (request written to answer read; short: connect to
    /// answer read), µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// 99.9th percentile latency, µs.
    pub p999_us: f64,
    /// Longest latency, µs.
    pub max_us: f64,
    /// The measured window, s (short: from the warm-up's end to the last
    /// answer).
    pub duration_s: f64,
    /// Failed exchanges, warm-up included (connect, send, a wrong or
    /// missing answer, a connection abandoned at the end).
    pub errors: u64,
    /// What the first failure was.
    pub first_error: Option<String>,
    /// Short: whether every requested request was made before the time
    /// limit (always true for keep-alive).
    pub complete: bool,
}

/// When the phases of a run start and end.
#[derive(Debug, Clone, Copy)]
struct Clock {
    /// The end of the warm-up: the start of the measured window.
    measure_from: Instant,
    /// The end of the run: keep-alive's window end, short's time limit.
    end: Instant,
}

/// What one thread's connections measured together.
struct Tally {
    /// Latencies of the counted requests, ns.
    hist: Histogram<u64>,
    /// Counted requests.
    requests: u64,
    /// Failed exchanges.
    errors: u64,
    /// The first failure.
    first_error: Option<String>,
    /// When the last counted answer arrived.
    last_done: Option<Instant>,
}

impl Tally {
    /// An empty tally.
    fn new() -> Self {
        Self {
            hist: new_histogram(),
            requests: 0,
            errors: 0,
            first_error: None,
            last_done: None,
        }
    }

    /// Counts an answered request that took from `start` to `done`.
    fn answered(&mut self, start: Instant, done: Instant) {
        self.requests += 1;
        let ns = done.duration_since(start).as_nanos();
        self.hist
            .saturating_record(u64::try_from(ns).unwrap_or(u64::MAX));
        self.last_done = Some(self.last_done.map_or(done, |last| last.max(done)));
    }

    /// Counts a failure.
    fn failed(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    /// Adds another thread's tally to this one.
    fn merge(&mut self, other: Tally) -> Result<(), Error> {
        self.hist
            .add(&other.hist)
            .map_err(|e| Error::new(format!("merging histograms: {e}")))?;
        self.requests += other.requests;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.last_done = match (self.last_done, other.last_done) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        Ok(())
    }
}

/// Runs the clients and summarises them.
pub fn run(opts: &HttpLoadOpts) -> Result<HttpLoadSummary, Error> {
    if !opts.addr.ip().is_loopback() {
        return Err(Error::usage(format!(
            "{} is not a loopback address: the clients only target this machine",
            opts.addr
        )));
    }
    if opts.connections == 0 || opts.threads == 0 {
        return Err(Error::usage("connections and threads must be at least 1"));
    }
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let clock = Clock {
        measure_from,
        end: measure_from
            + match opts.mode {
                S0Mode::Keepalive => opts.duration,
                S0Mode::Short => opts.time_limit,
            },
    };
    let tickets = Arc::new(AtomicU64::new(opts.requests));
    let threads = opts.threads.min(opts.connections);
    let handles: Vec<_> = (0..threads)
        .map(|index| {
            // Connections are dealt out round-robin: thread `index` gets
            // every `threads`-th one.
            let mine = (opts.connections - index).div_ceil(threads);
            let opts = opts.clone();
            let tickets = Arc::clone(&tickets);
            std::thread::Builder::new()
                .name(format!("load-s0-{index}"))
                .spawn(move || thread_main(&opts, mine, clock, &tickets))
                .map_err(|e| Error::new(format!("cannot start a client thread: {e}")))
        })
        .collect::<Result<_, _>>()?;
    let mut total = Tally::new();
    for handle in handles {
        let tally = handle
            .join()
            .map_err(|_| Error::new("a client thread panicked"))??;
        total.merge(tally)?;
    }
    let window = match opts.mode {
        S0Mode::Keepalive => opts.duration,
        S0Mode::Short => total.last_done.map_or(Duration::ZERO, |last| {
            last.saturating_duration_since(measure_from)
        }),
    };
    let latency = ProbeSummary::from_histogram(&total.hist, total.errors);
    let rps = if window.is_zero() {
        0.0
    } else {
        total.requests as f64 / window.as_secs_f64()
    };
    Ok(HttpLoadSummary {
        mode: opts.mode,
        connections: opts.connections,
        requests: total.requests,
        rps,
        p50_us: latency.p50_us,
        p99_us: latency.p99_us,
        p999_us: latency.p999_us,
        max_us: latency.max_us,
        duration_s: window.as_secs_f64(),
        errors: total.errors,
        first_error: total.first_error,
        complete: match opts.mode {
            S0Mode::Keepalive => true,
            S0Mode::Short => tickets.load(Ordering::Relaxed) == 0,
        },
    })
}

/// One client thread: `connections` connections on a current-thread
/// runtime, until the run ends.
fn thread_main(
    opts: &HttpLoadOpts,
    connections: usize,
    clock: Clock,
    tickets: &Arc<AtomicU64>,
) -> Result<Tally, Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new(format!("cannot start a tokio runtime: {e}")))?;
    let tally = Rc::new(RefCell::new(Tally::new()));
    let local = tokio::task::LocalSet::new();
    let request: Rc<[u8]> = http::request(opts.addr, opts.mode == S0Mode::Short).into();
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (tally, request) = (Rc::clone(&tally), Rc::clone(&request));
            let addr = opts.addr;
            match opts.mode {
                S0Mode::Keepalive => {
                    local.spawn_local(async move { keepalive(addr, &request, clock, &tally).await })
                }
                S0Mode::Short => {
                    let tickets = Arc::clone(tickets);
                    local.spawn_local(async move {
                        short(addr, &request, clock, &tickets, &tally).await
                    })
                }
            }
        })
        .collect();
    let give_up = tokio::time::Instant::from_std(clock.end + opts.io_timeout);
    let abandoned = rt.block_on(local.run_until(async move {
        let mut abandoned = 0u64;
        for task in tasks {
            if tokio::time::timeout_at(give_up, task).await.is_err() {
                abandoned += 1;
            }
        }
        abandoned
    }));
    // Dropping the set cancels the abandoned connections.
    drop(local);
    let mut tally = Rc::try_unwrap(tally)
        .map_err(|_| Error::new("a client task outlived its thread"))?
        .into_inner();
    for _ in 0..abandoned {
        tally.failed(format!(
            "a connection was still waiting {:?} after the end",
            opts.io_timeout
        ));
    }
    Ok(tally)
}

/// One keep-alive connection: request after request until the end,
/// reconnecting after a failure or an answer that closes.
async fn keepalive(addr: SocketAddr, request: &[u8], clock: Clock, tally: &RefCell<Tally>) {
    let mut conn: Option<Conn> = None;
    while Instant::now() < clock.end {
        let result = match conn.as_mut() {
            Some(open) => open.exchange(request).await,
            None => match Conn::connect(addr).await {
                Ok(fresh) => {
                    conn = Some(fresh);
                    continue;
                }
                Err(error) => Err(error),
            },
        };
        match result {
            Ok((start, done, close)) => {
                if done >= clock.measure_from && done <= clock.end {
                    tally.borrow_mut().answered(start, done);
                }
                if close {
                    conn = None;
                }
            }
            Err(error) => {
                tally.borrow_mut().failed(error);
                conn = None;
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
}

/// One short-connection client: connect, one request, wait for the close,
/// again, until the warm-up is over and the shared count is used up, or
/// the time limit.
async fn short(
    addr: SocketAddr,
    request: &[u8],
    clock: Clock,
    tickets: &AtomicU64,
    tally: &RefCell<Tally>,
) {
    loop {
        let start = Instant::now();
        if start >= clock.end {
            return;
        }
        let counted = start >= clock.measure_from;
        if counted && !take_ticket(tickets) {
            return;
        }
        match one_shot(addr, request).await {
            Ok(done) => {
                if counted {
                    tally.borrow_mut().answered(start, done);
                }
            }
            Err(error) => {
                tally.borrow_mut().failed(error);
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
}

/// Takes one request from the shared count; false once it is used up.
fn take_ticket(tickets: &AtomicU64) -> bool {
    tickets
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
            left.checked_sub(1)
        })
        .is_ok()
}

/// Connects, sends `request`, checks the answer and waits for the server
/// to close; returns when the answer was read.
async fn one_shot(addr: SocketAddr, request: &[u8]) -> Result<Instant, String> {
    let mut conn = Conn::connect(addr).await?;
    let (_, done, close) = conn.exchange(request).await?;
    if !close {
        return Err("the server did not close a short connection".to_string());
    }
    conn.expect_close().await?;
    Ok(done)
}

/// An open client connection and the bytes read from it.
struct Conn {
    /// The socket.
    stream: TcpStream,
    /// Bytes read and not yet consumed, in `buf[..filled]`.
    buf: Box<[u8]>,
    /// How much of `buf` holds data.
    filled: usize,
}

impl Conn {
    /// Connects with `TCP_NODELAY` (a request is one small write that
    /// should leave at once).
    async fn connect(addr: SocketAddr) -> Result<Self, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("setting TCP_NODELAY: {e}"))?;
        Ok(Self {
            stream,
            buf: vec![0u8; MAX_HEAD + BODY.len()].into_boxed_slice(),
            filled: 0,
        })
    }

    /// Sends `request` and reads its answer; returns when the request was
    /// written, when the answer was read, and whether the server closes
    /// the connection now.
    async fn exchange(&mut self, request: &[u8]) -> Result<(Instant, Instant, bool), String> {
        let start = Instant::now();
        self.stream
            .write_all(request)
            .await
            .map_err(|e| format!("sending the request: {e}"))?;
        loop {
            let parsed = http::parse_response(&self.buf[..self.filled], LIMITS);
            if let Some(answer) = parsed.map_err(|error| error.to_string())? {
                let done = Instant::now();
                if answer.head.status != 200 {
                    return Err(format!("the server answered status {}", answer.head.status));
                }
                let body = &self.buf[answer.body.clone()];
                if body != BODY {
                    return Err(format!(
                        "the body was {} bytes ({:?}), not {:?}",
                        body.len(),
                        String::from_utf8_lossy(&body[..body.len().min(64)]),
                        String::from_utf8_lossy(BODY)
                    ));
                }
                self.buf.copy_within(answer.len..self.filled, 0);
                self.filled -= answer.len;
                return Ok((start, done, answer.head.close));
            }
            if self.filled == self.buf.len() {
                // Longer than a head and the expected body: wrong anyway.
                return Err(format!(
                    "the answer is longer than {} bytes",
                    self.buf.len()
                ));
            }
            let n = self
                .stream
                .read(&mut self.buf[self.filled..])
                .await
                .map_err(|e| format!("reading the answer: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection before answering".to_string());
            }
            self.filled += n;
        }
    }

    /// Waits for the server to close, refusing anything it sends first.
    async fn expect_close(&mut self) -> Result<(), String> {
        if self.filled > 0 {
            return Err("the server sent bytes after its answer".to_string());
        }
        let n = self
            .stream
            .read(&mut self.buf)
            .await
            .map_err(|e| format!("waiting for the close: {e}"))?;
        if n > 0 {
            return Err("the server sent bytes after its answer".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options for a short run against `addr`.
    fn opts(addr: &str) -> HttpLoadOpts {
        HttpLoadOpts {
            addr: addr.parse().unwrap(),
            mode: S0Mode::Keepalive,
            connections: 1,
            threads: 1,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(10),
            requests: 1,
            time_limit: Duration::from_millis(10),
            io_timeout: Duration::from_millis(100),
        }
    }

    /// Clients refuse addresses off this machine and empty runs.
    #[test]
    fn checks_options() {
        assert_eq!(run(&opts("10.1.2.3:80")).unwrap_err().code(), 2);
        let none = HttpLoadOpts {
            connections: 0,
            ..opts("127.0.0.1:9")
        };
        assert_eq!(run(&none).unwrap_err().code(), 2);
    }

    /// A TCP socket bound to a loopback port but not listening: connecting
    /// to the port is refused, and no other test can take it meanwhile
    /// (a port freed by dropping a listener could be).
    fn bound_not_listening() -> (std::os::fd::OwnedFd, u16) {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket(2); the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: `fd` is a fresh descriptor this function owns.
        let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let mut addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 0,
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: `addr` is a valid sockaddr_in of `len` bytes, for both
        // calls; `fd` is open.
        unsafe {
            assert_eq!(libc::bind(fd, std::ptr::addr_of!(addr).cast(), len), 0);
            assert_eq!(
                libc::getsockname(fd, std::ptr::addr_of_mut!(addr).cast(), &mut len),
                0
            );
        }
        (owned, u16::from_be(addr.sin_port))
    }

    /// A server that is not there gives errors with a reason, not a hang
    /// or a panic. The run lasts long enough for a client on a busy
    /// machine to try at least once before its deadline.
    #[test]
    fn counts_connection_failures() {
        let (_reserved, port) = bound_not_listening();
        for mode in [S0Mode::Keepalive, S0Mode::Short] {
            let summary = run(&HttpLoadOpts {
                mode,
                duration: Duration::from_millis(300),
                time_limit: Duration::from_millis(300),
                ..opts(&format!("127.0.0.1:{port}"))
            })
            .unwrap();
            assert_eq!(summary.requests, 0);
            assert!(summary.errors > 0, "{summary:?}");
            assert!(
                summary
                    .first_error
                    .as_deref()
                    .unwrap()
                    .contains("connecting"),
                "{summary:?}"
            );
        }
    }

    /// The shared count hands out exactly what it holds.
    #[test]
    fn tickets_run_out() {
        let tickets = AtomicU64::new(2);
        assert!(take_ticket(&tickets));
        assert!(take_ticket(&tickets));
        assert!(!take_ticket(&tickets));
        assert_eq!(tickets.load(Ordering::Relaxed), 0);
    }
}
