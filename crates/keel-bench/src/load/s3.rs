//! The S3 load: bulk downloads and a connection storm through the proxy,
//! and the admin probe that times the control plane meanwhile.
//!
//! The load is asynchronous and the probe is not. The bulk and
//! connection-rate clients are tasks of one tokio runtime, as S0's clients
//! are: a thread per connection would put two dozen threads on the shared
//! cores, and the proxy's latency would measure how the kernel shares the
//! cores among them as much as how the proxy schedules its own work. The
//! runtime has `--threads` threads: one by default (a current-thread
//! runtime on a thread of its own), more where there are load CPUs for
//! them, since one thread cannot load a proxy of many workers. The admin probe is a
//! plain blocking thread, so its own wake-ups are a thread's:
//!
//! - **bulk**: each client keeps one keep-alive connection and downloads
//!   `GET /big` (1 MiB) in a loop. The body's length is checked, and its
//!   content is checked at a few offsets of every read (all of it on each
//!   connection's first download) against the backend's pattern, so
//!   corruption along the proxy is caught without the checks costing the
//!   CPU the proxy needs.
//! - **connection rate**: each client opens a new connection per request
//!   for `GET /empty` with `Connection: close`, reads the answer and then
//!   the end of the stream, which also checks that the proxy passes the
//!   backend's close on. The backend closes first, so TIME_WAIT does not
//!   pile up on this side's ephemeral ports.
//! - **admin probe**: on a fixed grid (100 ms by default for `keel-bench load
//!   s3`; `keel-bench bench` asks for 20 ms), it opens a new
//!   connection to the admin endpoint, sends `GET /status` and reads the
//!   whole answer, timed from before the connect to the last byte. The
//!   answer carries the proxy's clock as it was produced (see
//!   [`crate::serve::stamp`]), so the probe also records the proxy's share:
//!   from the moment the connection was established (the proxy's accept is
//!   ready) to the answer. With `realtime` the probe's thread asks for
//!   real-time priority (see [`super::realtime`]); the load's thread does
//!   not.
//!
//! Counts and latencies are taken inside the measured window (after the
//! warm-up); errors count whenever they happen, and a failing client
//! pauses briefly before it retries, so a dead proxy is not hammered.
//! Loops stop at the end of the window, are bounded in count, and every
//! socket operation has a timeout. Only loopback addresses are accepted.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::ops::Range;
use std::time::{Duration, Instant};

use clap::Args;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::http::{self, Head, Limits};
use super::realtime::{self, ProbeScheduling};
use super::summary::{new_histogram, ProbeSummary, Quantiles};
use super::{parse_seconds, within};
use crate::error::Error;
use crate::serve::s3_backend::{body_byte, BIG_LEN};
use crate::serve::stamp;

/// Requests one load client makes at most, whatever the duration.
const MAX_REQUESTS_PER_CLIENT: u64 = 100_000_000;

/// How long a client pauses after an error before it tries again.
const ERROR_PAUSE: Duration = Duration::from_millis(10);

/// Bytes of a bulk client's read buffer.
const BULK_BUFFER: usize = 256 * 1024;

/// The longest answer head accepted, bytes.
const MAX_HEAD: usize = 8 * 1024;

/// Flags of `keel-bench load s3`.
#[derive(Debug, Args)]
pub struct LoadS3Args {
    /// The proxy (a loopback address); not needed with `--no-load`.
    #[arg(long, required_unless_present = "no_load")]
    pub proxy: Option<SocketAddr>,
    /// The proxy's admin endpoint (a loopback address).
    #[arg(long)]
    pub admin: SocketAddr,
    /// Seconds of measurement, after the warm-up.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Milliseconds of load and probes before measuring (not counted).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub warmup_ms: u64,
    /// Connections downloading the 1 MiB object in a loop.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(0..=4096))]
    pub bulk: u64,
    /// Concurrent clients opening a new connection per request.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=16384))]
    pub clients: u64,
    /// Threads the bulk and connection-rate clients run on (the admin
    /// probe has a thread of its own).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Milliseconds between admin requests (an absolute grid).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub admin_interval_ms: u64,
    /// Milliseconds a connect, send or receive may take before it counts
    /// as an error.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub timeout_ms: u64,
    /// Run the admin probe alone, for the unloaded latency.
    #[arg(long)]
    pub no_load: bool,
    /// Run the admin probe at real-time priority (`SCHED_FIFO`), or the
    /// best nice level allowed; the result says which it got.
    #[arg(long)]
    pub realtime: bool,
}

/// Runs `keel-bench load s3` and prints its JSON line.
pub fn command(args: &LoadS3Args) -> Result<(), Error> {
    let opts = S3LoadOpts {
        proxy: args.proxy,
        admin: args.admin,
        bulk: usize::try_from(args.bulk).unwrap_or(4),
        clients: usize::try_from(args.clients).unwrap_or(20),
        threads: usize::try_from(args.threads).unwrap_or(1),
        admin_interval: Duration::from_millis(args.admin_interval_ms),
        warmup: Duration::from_millis(args.warmup_ms),
        duration: Duration::from_secs_f64(args.duration_s),
        io_timeout: Duration::from_millis(args.timeout_ms),
        no_load: args.no_load,
        realtime: args.realtime,
    };
    let summary = run(&opts).map_err(|e| e.context("load s3"))?;
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}

/// What the load does.
#[derive(Debug, Clone)]
pub struct S3LoadOpts {
    /// The proxy (a loopback address); needed unless `no_load`.
    pub proxy: Option<SocketAddr>,
    /// The admin endpoint (a loopback address).
    pub admin: SocketAddr,
    /// Bulk download connections.
    pub bulk: usize,
    /// Connection-rate clients.
    pub clients: usize,
    /// Threads of the load's runtime: 1 is a current-thread runtime.
    pub threads: usize,
    /// Time between admin requests (an absolute grid).
    pub admin_interval: Duration,
    /// Time of load and probes that is not counted.
    pub warmup: Duration,
    /// Measured time after the warm-up.
    pub duration: Duration,
    /// Timeout of a connect, a write or a read.
    pub io_timeout: Duration,
    /// Run the admin probe alone (the unloaded latency).
    pub no_load: bool,
    /// Ask for real-time priority for the probe's thread.
    pub realtime: bool,
}

/// The JSON line `keel-bench load s3` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct S3LoadSummary {
    /// Seconds of the measured window.
    pub duration_s: f64,
    /// Whether the bulk and connection-rate load ran (false with
    /// `--no-load`).
    pub loaded: bool,
    /// Admin requests timed inside the window.
    pub admin_samples: u64,
    /// Median admin latency (connect to last byte), µs.
    pub admin_p50_us: f64,
    /// 99th percentile admin latency, µs.
    pub admin_p99_us: f64,
    /// Longest admin latency, µs.
    pub admin_max_us: f64,
    /// Admin requests that failed.
    pub admin_errors: u64,
    /// The proxy's share of each timed admin request: from the connection's
    /// establishment to the answer's production; absent if the answers
    /// carried no clock.
    #[serde(default)]
    pub admin_server: Option<Quantiles>,
    /// How the admin probe's thread was scheduled.
    #[serde(default)]
    pub scheduling: Option<ProbeScheduling>,
    /// Body bytes downloaded by the bulk connections inside the window.
    pub bulk_bytes: u64,
    /// `bulk_bytes` in MB (10^6 bytes) per second of the window.
    pub bulk_mb_per_s: f64,
    /// Whole downloads that ended inside the window.
    pub bulk_downloads: u64,
    /// Bulk downloads or connections that failed.
    pub bulk_errors: u64,
    /// Connection-rate requests completed inside the window.
    pub conns: u64,
    /// `conns` per second of the window.
    pub conns_per_s: f64,
    /// Connection-rate requests that failed.
    pub conn_errors: u64,
    /// All failures: `admin_errors + bulk_errors + conn_errors`.
    pub errors: u64,
    /// The first failure's message, if any (admin first, then bulk, then
    /// connection rate).
    pub first_error: Option<String>,
}

/// The window every client measures in.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// When the warm-up ends.
    from: Instant,
    /// When everything stops.
    end: Instant,
}

impl Window {
    /// Whether `at` is inside the window.
    fn contains(self, at: Instant) -> bool {
        at >= self.from && at < self.end
    }
}

/// The failures of one client: how many and the first one's message.
#[derive(Debug, Default)]
struct Failures {
    /// Failures counted.
    count: u64,
    /// The first failure's message.
    first: Option<String>,
}

impl Failures {
    /// Counts a failure, keeping the first message.
    fn record(&mut self, what: impl FnOnce() -> String) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(what());
        }
    }

    /// Adds another client's failures.
    fn merge(&mut self, other: Failures) {
        self.count += other.count;
        if self.first.is_none() {
            self.first = other.first;
        }
    }
}

/// Runs the load and the probe to the end of the window and summarises
/// them.
pub fn run(opts: &S3LoadOpts) -> Result<S3LoadSummary, Error> {
    let proxy = check_opts(opts)?;
    let start = Instant::now();
    let from = start + opts.warmup;
    let window = Window {
        from,
        end: from + opts.duration,
    };
    let load = match proxy {
        Some(proxy) => {
            let opts = opts.clone();
            let thread = std::thread::Builder::new()
                .name("s3-load".into())
                .spawn(move || load(&opts, proxy, window))
                .map_err(|e| Error::new(format!("cannot start the load thread: {e}")))?;
            Some(thread)
        }
        None => None,
    };
    // The probe runs on this thread, on its grid from the start; the load
    // thread started above keeps its normal priority.
    let scheduling = realtime::raise(opts.realtime);
    let (hist, server_hist, admin_failures) = probe(opts, start, window);
    let (bulk_tally, conn_tally) = match load {
        Some(thread) => thread
            .join()
            .map_err(|_| Error::new("the load thread panicked"))??,
        None => (Tally::default(), Tally::default()),
    };

    let seconds = opts.duration.as_secs_f64();
    let admin = ProbeSummary::from_histogram(&hist, admin_failures.count);
    let (admin_errors, bulk_errors, conn_errors) = (
        admin_failures.count,
        bulk_tally.failures.count,
        conn_tally.failures.count,
    );
    let mut failures = admin_failures;
    failures.merge(bulk_tally.failures);
    failures.merge(conn_tally.failures);
    Ok(S3LoadSummary {
        duration_s: seconds,
        loaded: proxy.is_some(),
        admin_samples: admin.count,
        admin_p50_us: admin.p50_us,
        admin_p99_us: admin.p99_us,
        admin_max_us: admin.max_us,
        admin_errors,
        admin_server: Quantiles::of(&server_hist),
        scheduling: Some(scheduling),
        bulk_bytes: bulk_tally.bytes,
        bulk_mb_per_s: bulk_tally.bytes as f64 / 1e6 / seconds,
        bulk_downloads: bulk_tally.requests,
        bulk_errors,
        conns: conn_tally.requests,
        conns_per_s: conn_tally.requests as f64 / seconds,
        conn_errors,
        errors: failures.count,
        first_error: failures.first,
    })
}

/// Checks the options; returns the proxy to load, or `None` with
/// `no_load`.
fn check_opts(opts: &S3LoadOpts) -> Result<Option<SocketAddr>, Error> {
    let loopback = |addr: SocketAddr, what: &str| {
        if addr.ip().is_loopback() {
            Ok(())
        } else {
            Err(Error::usage(format!(
                "{addr} ({what}) is not a loopback address: the load only targets this machine"
            )))
        }
    };
    loopback(opts.admin, "the admin endpoint")?;
    if opts.admin_interval.is_zero() || opts.duration.is_zero() {
        return Err(Error::usage(
            "the admin interval and the duration must be positive",
        ));
    }
    if opts.no_load {
        return Ok(None);
    }
    let proxy = opts
        .proxy
        .ok_or_else(|| Error::usage("the proxy address is needed unless there is no load"))?;
    loopback(proxy, "the proxy")?;
    Ok(Some(proxy))
}

/// What a group of load clients did inside the window.
#[derive(Debug, Default)]
struct Tally {
    /// Requests completed (whole downloads, or short connections).
    requests: u64,
    /// Body bytes received.
    bytes: u64,
    /// What failed, inside the window or not.
    failures: Failures,
}

impl Tally {
    /// Adds another client's tally.
    fn merge(&mut self, other: Tally) {
        self.requests += other.requests;
        self.bytes += other.bytes;
        self.failures.merge(other.failures);
    }
}

/// Runs the bulk and connection-rate clients on one runtime of
/// `opts.threads` threads until the end of the window; returns their
/// tallies.
fn load(opts: &S3LoadOpts, proxy: SocketAddr, window: Window) -> Result<(Tally, Tally), Error> {
    let mut builder = if opts.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(opts.threads);
        builder
    };
    let rt = builder
        .enable_all()
        .build()
        .map_err(|e| Error::new(format!("cannot start a tokio runtime: {e}")))?;
    rt.block_on(async {
        let bulk_tasks: Vec<_> = (0..opts.bulk)
            .map(|_| tokio::spawn(bulk(opts.io_timeout, proxy, window)))
            .collect();
        let conn_tasks: Vec<_> = (0..opts.clients)
            .map(|_| tokio::spawn(conns(opts.io_timeout, proxy, window)))
            .collect();
        let mut tallies = (Tally::default(), Tally::default());
        for (tasks, total) in [(bulk_tasks, &mut tallies.0), (conn_tasks, &mut tallies.1)] {
            for task in tasks {
                total.merge(
                    task.await
                        .map_err(|_| Error::new("a load client panicked"))?,
                );
            }
        }
        Ok(tallies)
    })
}

/// One bulk client: downloads `/big` over keep-alive connections until
/// the end of the window.
async fn bulk(timeout: Duration, proxy: SocketAddr, window: Window) -> Tally {
    let mut tally = Tally::default();
    let mut buf = vec![0u8; BULK_BUFFER];
    let mut requests = 0u64;
    while Instant::now() < window.end && requests < MAX_REQUESTS_PER_CLIENT {
        let mut stream = match connect_async(proxy, timeout).await {
            Ok(stream) => stream,
            Err(error) => {
                tally
                    .failures
                    .record(|| format!("bulk: connecting to {proxy}: {error}"));
                tokio::time::sleep(ERROR_PAUSE).await;
                continue;
            }
        };
        // The first download of a connection checks every byte.
        let mut full_check = true;
        while requests < MAX_REQUESTS_PER_CLIENT && Instant::now() < window.end {
            requests += 1;
            let download = download(
                &mut stream,
                &mut buf,
                full_check,
                window,
                timeout,
                &mut tally.bytes,
            );
            match download.await {
                Ok(true) => {
                    if window.contains(Instant::now()) {
                        tally.requests += 1;
                    }
                }
                Ok(false) => return tally,
                Err(error) => {
                    tally
                        .failures
                        .record(|| format!("bulk: downloading /big: {error}"));
                    tokio::time::sleep(ERROR_PAUSE).await;
                    break;
                }
            }
            full_check = false;
        }
    }
    tally
}

/// Downloads `/big` once over `stream`, checking its length and content
/// and adding the body bytes read inside the window to `bytes`; each
/// write and read must make progress within `timeout`. Returns
/// `Ok(false)` if the window ended first (the download is abandoned).
async fn download(
    stream: &mut tokio::net::TcpStream,
    buf: &mut [u8],
    full_check: bool,
    window: Window,
    timeout: Duration,
    bytes: &mut u64,
) -> io::Result<bool> {
    within(
        timeout,
        stream.write_all(b"GET /big HTTP/1.1\r\nHost: keel\r\n\r\n"),
    )
    .await?;
    let (head, first) = read_head_async(stream, buf, timeout).await?;
    expect(head.status == 200, || {
        format!("the answer is {} instead of 200", head.status)
    })?;
    expect(head.content_length == BIG_LEN as u64, || {
        format!(
            "the body is {} bytes instead of {BIG_LEN}",
            head.content_length
        )
    })?;
    let mut offset = 0u64;
    let mut chunk = first;
    loop {
        let data = &buf[chunk];
        expect(offset + data.len() as u64 <= head.content_length, || {
            String::from("more bytes than the Content-Length arrived")
        })?;
        check_body(data, offset, full_check)?;
        offset += data.len() as u64;
        let now = Instant::now();
        if window.contains(now) {
            *bytes += data.len() as u64;
        }
        if offset == head.content_length {
            return Ok(true);
        }
        if now >= window.end {
            return Ok(false);
        }
        let want = usize::try_from(head.content_length - offset)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = within(timeout, stream.read(&mut buf[..want])).await?;
        expect(n > 0, || format!("the body ended after {offset} bytes"))?;
        chunk = 0..n;
    }
}

/// Checks body bytes read at `offset` of `/big` against its pattern:
/// every byte if `full`, else the first, middle and last (enough to catch
/// a dropped, repeated or moved chunk at almost no cost).
fn check_body(data: &[u8], offset: u64, full: bool) -> io::Result<()> {
    let check = |i: usize| -> io::Result<()> {
        let at = offset + i as u64;
        let want = body_byte(at);
        expect(data[i] == want, || {
            format!(
                "byte {at} of /big is {:#04x} instead of {want:#04x}",
                data[i]
            )
        })
    };
    if data.is_empty() {
        return Ok(());
    }
    if full {
        (0..data.len()).try_for_each(check)
    } else {
        [0, data.len() / 2, data.len() - 1]
            .into_iter()
            .try_for_each(check)
    }
}

/// One connection-rate client: a new connection per `/empty` request
/// until the end of the window.
async fn conns(timeout: Duration, proxy: SocketAddr, window: Window) -> Tally {
    let mut tally = Tally::default();
    let mut buf = [0u8; 1024];
    for _ in 0..MAX_REQUESTS_PER_CLIENT {
        if Instant::now() >= window.end {
            break;
        }
        match short_request(proxy, timeout, &mut buf).await {
            Ok(()) => {
                if window.contains(Instant::now()) {
                    tally.requests += 1;
                }
            }
            Err(error) => {
                tally
                    .failures
                    .record(|| format!("connection rate: GET /empty: {error}"));
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    tally
}

/// Connects, asks for `/empty` with `Connection: close`, reads the answer
/// and then the end of the stream.
async fn short_request(proxy: SocketAddr, timeout: Duration, buf: &mut [u8]) -> io::Result<()> {
    let mut stream = connect_async(proxy, timeout).await?;
    within(
        timeout,
        stream.write_all(b"GET /empty HTTP/1.1\r\nHost: keel\r\nConnection: close\r\n\r\n"),
    )
    .await?;
    let (head, body) = read_head_async(&mut stream, buf, timeout).await?;
    expect(
        head.status == 200 && head.content_length == 0 && body.is_empty(),
        || {
            format!(
                "the answer is {} with {} body bytes instead of 200 with none",
                head.status, head.content_length
            )
        },
    )?;
    // The backend closes after answering; the proxy must pass that on.
    let n = within(timeout, stream.read(buf)).await?;
    expect(n == 0, || String::from("bytes arrived after the answer"))
}

/// The admin probe: one timed `GET /status` per interval on an absolute
/// grid from `start` to the end of the window. Returns the latencies
/// inside the window (ns), the proxy's shares of them (ns), and the
/// failures.
fn probe(
    opts: &S3LoadOpts,
    start: Instant,
    window: Window,
) -> (
    hdrhistogram::Histogram<u64>,
    hdrhistogram::Histogram<u64>,
    Failures,
) {
    let mut hist = new_histogram();
    let mut server = new_histogram();
    let mut failures = Failures::default();
    let mut buf = [0u8; 4096];
    let total = window.end.duration_since(start);
    let max_calls = total.as_nanos() / opts.admin_interval.as_nanos().max(1) + 2;
    for call in 0..max_calls {
        let due = start
            + opts
                .admin_interval
                .saturating_mul(u32::try_from(call).unwrap_or(u32::MAX));
        if due >= window.end {
            break;
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let sent = Instant::now();
        match status_request(opts.admin, opts.io_timeout, &mut buf) {
            Ok(answer) => {
                let done = Instant::now();
                if sent >= window.from && done < window.end {
                    let ns = done.duration_since(sent).as_nanos();
                    hist.saturating_record(u64::try_from(ns).unwrap_or(u64::MAX));
                    match answer.server_ns() {
                        Ok(Some(ns)) => server.saturating_record(ns.max(1)),
                        Ok(None) => {}
                        Err(error) => failures.record(|| format!("admin: {error}")),
                    }
                }
            }
            Err(error) => failures.record(|| format!("admin: GET /status: {error}")),
        }
    }
    (hist, server, failures)
}

/// When an admin exchange's connection was established and read, on the
/// clock the proxy shares, and the proxy's clock in the answer.
#[derive(Debug, Clone, Copy)]
struct StatusAnswer {
    /// `CLOCK_MONOTONIC` when the connect returned, ns.
    connected_ns: u64,
    /// `CLOCK_MONOTONIC` when the whole answer had been read, ns.
    read_ns: u64,
    /// The proxy's clock from the answer's `clock_ns` line, if any.
    clock_ns: Option<u64>,
}

impl StatusAnswer {
    /// The proxy's share, from the connection to the answer; `None` for an
    /// answer without a clock; an error for a clock outside the exchange.
    fn server_ns(self) -> io::Result<Option<u64>> {
        match self.clock_ns {
            None => Ok(None),
            Some(at) if (self.connected_ns..=self.read_ns).contains(&at) => {
                Ok(Some(at - self.connected_ns))
            }
            Some(at) => Err(io::Error::other(format!(
                "the proxy's clock in the answer ({at} ns) lies outside the exchange ({}..{} ns)",
                self.connected_ns, self.read_ns
            ))),
        }
    }
}

/// The most body bytes of a status answer the probe keeps to read the
/// clock from (the answer is a few hundred bytes).
const MAX_STATUS_BODY: u64 = 64 * 1024;

/// Connects to the admin endpoint, asks for `/status` and reads the whole
/// answer.
fn status_request(
    admin: SocketAddr,
    timeout: Duration,
    buf: &mut [u8],
) -> io::Result<StatusAnswer> {
    let mut stream = connect(admin, timeout)?;
    let connected_ns = stamp::monotonic_ns();
    stream.write_all(b"GET /status HTTP/1.1\r\nHost: keel\r\nConnection: close\r\n\r\n")?;
    let (head, body) = read_head(&mut stream, buf)?;
    expect(head.status == 200 && head.content_length > 0, || {
        format!(
            "the answer is {} with {} body bytes instead of 200 with a status",
            head.status, head.content_length
        )
    })?;
    expect(head.content_length <= MAX_STATUS_BODY, || {
        format!("a status of {} bytes is too long", head.content_length)
    })?;
    let mut text = buf[body].to_vec();
    while (text.len() as u64) < head.content_length {
        let n = stream.read(buf)?;
        expect(n > 0, || {
            format!("the answer ended after {} body bytes", text.len())
        })?;
        text.extend_from_slice(&buf[..n]);
    }
    let read_ns = stamp::monotonic_ns();
    expect(text.len() as u64 == head.content_length, || {
        String::from("more bytes than the Content-Length arrived")
    })?;
    Ok(StatusAnswer {
        connected_ns,
        read_ns,
        clock_ns: stamp::read_status_clock(&text),
    })
}

/// Reads an answer's head into `buf`; returns it and where in `buf` the
/// body bytes already read are.
fn read_head(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<(Head, Range<usize>)> {
    let mut filled = 0;
    loop {
        if let Some(found) = head_in(buf, filled)? {
            return Ok(found);
        }
        let n = stream.read(&mut buf[filled..])?;
        expect(n > 0, || {
            String::from("the connection closed before an answer")
        })?;
        filled += n;
    }
}

/// [`read_head`] on a tokio stream, each read within `timeout`.
async fn read_head_async(
    stream: &mut tokio::net::TcpStream,
    buf: &mut [u8],
    timeout: Duration,
) -> io::Result<(Head, Range<usize>)> {
    let mut filled = 0;
    loop {
        if let Some(found) = head_in(buf, filled)? {
            return Ok(found);
        }
        let n = within(timeout, stream.read(&mut buf[filled..])).await?;
        expect(n > 0, || {
            String::from("the connection closed before an answer")
        })?;
        filled += n;
    }
}

/// The head in the first `filled` bytes of `buf` and where the body bytes
/// after it are, if the head is complete; an error if it cannot be (not
/// within [`MAX_HEAD`] bytes nor within `buf`, or malformed). The body's
/// length is checked by the caller.
fn head_in(buf: &[u8], filled: usize) -> io::Result<Option<(Head, Range<usize>)>> {
    let limits = Limits {
        max_head: MAX_HEAD.min(buf.len()),
        max_body: u64::MAX,
    };
    let head = http::parse_head(&buf[..filled], limits)?;
    Ok(head.map(|head| (head, head.len..filled)))
}

/// An error with `why()` as its message unless `ok`.
fn expect(ok: bool, why: impl FnOnce() -> String) -> io::Result<()> {
    if ok {
        Ok(())
    } else {
        Err(io::Error::other(why()))
    }
}

/// Connects within `timeout` and sets `TCP_NODELAY`, for the load.
async fn connect_async(addr: SocketAddr, timeout: Duration) -> io::Result<tokio::net::TcpStream> {
    let stream = within(timeout, tokio::net::TcpStream::connect(addr)).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Connects with timeouts and `TCP_NODELAY`, for the probe.
fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head in the filled part of a buffer comes with where the body
    /// bytes read with it are; an incomplete one needs more; one that
    /// fills the buffer without ending, or a malformed one, is an error.
    #[test]
    fn finds_heads_in_the_buffer() {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 262\r\nX: y\r\n\r\nbody";
        let mut buf = [0u8; 64];
        buf[..answer.len()].copy_from_slice(answer);
        let (head, body) = head_in(&buf, answer.len()).unwrap().unwrap();
        assert_eq!((head.status, head.content_length), (200, 262));
        assert_eq!(&buf[body], b"body");
        assert!(head_in(&buf, 20).unwrap().is_none());
        let error = head_in(&buf[..20], 20).unwrap_err();
        assert!(
            error.to_string().contains("head is over 20 bytes"),
            "{error}"
        );
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"[..],
            b"SSH-2.0-OpenSSH_9.6\r\n",
        ] {
            assert!(head_in(bad, bad.len()).is_err());
        }
    }

    /// The body check passes the pattern and catches a flipped, shifted
    /// or repeated chunk.
    #[test]
    fn body_checks_catch_corruption() {
        let body: Vec<u8> = (0..4096u64).map(body_byte).collect();
        check_body(&body, 0, true).unwrap();
        check_body(&body[1000..3000], 1000, false).unwrap();
        let mut flipped = body.clone();
        flipped[1234] ^= 1;
        assert!(check_body(&flipped, 0, true).is_err());
        // A chunk delivered at the wrong offset (shifted or repeated).
        assert!(check_body(&body[..1000], 1000, false).is_err());
        assert!(check_body(&body[1..1001], 0, false).is_err());
        check_body(&[], 7, false).unwrap();
    }

    /// Addresses off this machine and a missing proxy are usage errors.
    #[test]
    fn checks_options() {
        let mut opts = S3LoadOpts {
            proxy: Some("127.0.0.1:9".parse().unwrap()),
            admin: "10.0.0.1:9".parse().unwrap(),
            bulk: 1,
            clients: 1,
            threads: 1,
            admin_interval: Duration::from_millis(100),
            warmup: Duration::ZERO,
            duration: Duration::from_millis(10),
            io_timeout: Duration::from_millis(100),
            no_load: false,
            realtime: false,
        };
        assert_eq!(run(&opts).unwrap_err().code(), 2);
        opts.admin = "127.0.0.1:9".parse().unwrap();
        opts.proxy = Some("10.0.0.1:9".parse().unwrap());
        assert_eq!(run(&opts).unwrap_err().code(), 2);
        opts.proxy = None;
        assert_eq!(run(&opts).unwrap_err().code(), 2);
        opts.no_load = true;
        assert_eq!(check_opts(&opts).unwrap(), None);
    }

    /// Failing clients report their count and the first message.
    #[test]
    fn failures_keep_the_first_message() {
        let mut a = Failures::default();
        a.record(|| "first".into());
        a.record(|| "second".into());
        let mut b = Failures::default();
        b.record(|| "other".into());
        a.merge(b);
        assert_eq!(a.count, 3);
        assert_eq!(a.first.as_deref(), Some("first"));
    }
}
