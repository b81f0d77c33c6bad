//! S2, the scheduling storm, written once over [`Node`].
//!
//! The node has two services. The stream service accepts the storm's
//! connections and hands every delivery (every read that returned data)
//! to a handler that processes it (sums its bytes); how many bytes one
//! delivery carries is what the modes change. The API service answers
//! `GET /job` with the result of a CPU job ([`super::job`]) of a
//! calibrated size, and says in an `X-Job-Us` header how long the job
//! itself took in this process, so the probe can tell the runtime's delay
//! from the job's own speed (which varies between processes).
//!
//! On keel (`off`, `fixed`, `adaptive`) every stream connection gets a
//! `keel::net::BatchPolicy`, so a read completes only when a batch is
//! there (or its delay has run out) and a handler wakes once per batch
//! instead of once per packet; `off` reads per readiness, as tokio does.
//! tokio (`read-1460`, `read-64k`) reads into a buffer of that size, as a
//! tokio user writes it: a bigger buffer does not batch by itself, since a
//! server that keeps up finds one packet per readiness. Every task runs
//! in the runtime's default class: what S2 measures is the cost of the
//! wakeups, not the classes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::node::{accept_each, Node};
use super::Running;
use crate::error::Error;

/// The largest API request accepted, bytes (up to and including its blank
/// line): a bigger one is answered 413 and the connection closed, however
/// the reads split it ([`next_request`]).
pub const MAX_REQUEST: usize = 8 * 1024;

/// How the stream handlers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum S2Mode {
    /// keel, a read per readiness (batching off).
    Off,
    /// keel, batching with a fixed `min_bytes` and `max_delay`.
    Fixed,
    /// keel, adaptive batching bounded by `max_delay`.
    Adaptive,
    /// tokio, reads into a 1460-byte buffer.
    #[value(name = "read-1460")]
    #[serde(rename = "read-1460")]
    Read1460,
    /// tokio, reads into a 64 KiB buffer.
    #[value(name = "read-64k")]
    #[serde(rename = "read-64k")]
    Read64k,
}

impl S2Mode {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Fixed => "fixed",
            Self::Adaptive => "adaptive",
            Self::Read1460 => "read-1460",
            Self::Read64k => "read-64k",
        }
    }

    /// Whether this mode is a batch policy (keel's modes) rather than a
    /// buffer size (tokio's); see [`Node::BATCHES`].
    pub fn batches(self) -> bool {
        matches!(self, Self::Off | Self::Fixed | Self::Adaptive)
    }

    /// The read buffer of a stream handler in this mode.
    pub fn buffer(self) -> usize {
        match self {
            Self::Read1460 => 1460,
            _ => 64 * 1024,
        }
    }
}

impl std::fmt::Display for S2Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What an S2 node is asked to run.
#[derive(Debug, Clone)]
pub struct S2Opts {
    /// Worker threads of the runtime.
    pub workers: usize,
    /// Where the stream service binds.
    pub addr: SocketAddr,
    /// Where the API service binds.
    pub api_addr: SocketAddr,
    /// How stream handlers read.
    pub mode: S2Mode,
    /// Size of the API job (see [`super::job`]).
    pub job_lines: u64,
    /// Size of the work a stream handler does per delivery, in the API
    /// job's lines; 0 for none.
    pub handler_lines: u64,
    /// Batching: the bytes a delivery waits for (fixed mode).
    pub min_bytes: usize,
    /// Batching: the longest a byte waits (fixed and adaptive modes).
    pub max_delay: Duration,
    /// keel's spin policy; `None` keeps the runtime's default. tokio has
    /// no such setting and refuses one.
    pub spin: Option<keel::SpinPolicy>,
    /// keel's IO driver (tokio ignores it).
    pub io: keel::io::IoBackend,
}

/// Counters every variant keeps, reported in each `mark` under `s2`,
/// cumulative since start.
#[derive(Debug, Default)]
pub struct S2Counters {
    /// Reads that returned data.
    pub deliveries: AtomicU64,
    /// Bytes those reads returned.
    pub bytes: AtomicU64,
    /// A fold of every byte received, so the processing cannot be skipped.
    pub checksum: AtomicU64,
    /// API requests answered.
    pub api_requests: AtomicU64,
    /// CPU time the API jobs took, ns (their threads' CPU clocks), so that
    /// the stream service's own CPU can be told from the jobs'.
    pub job_cpu_ns: AtomicU64,
    /// The work each delivery costs beyond the sum, in the API job's
    /// lines (see [`S2Opts::handler_lines`]).
    pub handler_lines: u64,
}

/// Starts the S2 node on `node`; returns once both services are bound.
/// A mode the runtime does not serve is refused (see [`S2Mode::batches`]).
pub fn start<N: Node>(node: N, opts: &S2Opts) -> Result<Running, Error> {
    if opts.mode.batches() != N::BATCHES {
        let modes = if N::BATCHES {
            "off, fixed or adaptive"
        } else {
            "read-1460 or read-64k"
        };
        return Err(Error::usage(format!(
            "{} serves S2 with --mode {modes}, not {}",
            N::NAME,
            opts.mode
        )));
    }
    let (streams, addr) = node.bind(opts.addr)?;
    let (api, api_addr) = node.bind(opts.api_addr)?;
    let counters = Arc::new(S2Counters::new(opts.handler_lines));
    let stream_counters = Arc::clone(&counters);
    let (policy, buffer) = (policy(opts), opts.mode.buffer());
    node.spawn(accept_each::<N, _, _>(streams, move |stream, peer| {
        if N::BATCHES {
            if let Err(error) = N::set_batch(&stream, policy) {
                eprintln!("keel serve: {peer}: cannot set the batch policy: {error}");
            }
        }
        handle_stream::<N>(stream, buffer, Arc::clone(&stream_counters))
    }));
    let (job_lines, api_counters) = (opts.job_lines, Arc::clone(&counters));
    node.spawn(accept_each::<N, _, _>(api, move |stream, _| {
        serve_api::<N>(stream, job_lines, Arc::clone(&api_counters))
    }));

    let stats = node.stats();
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: Some(api_addr),
        admin_addr: None,
        startup: json!({"mode": opts.mode}),
        runtime_stats: Box::new(move || {
            let mut value = stats();
            value["s2"] = counters.to_json();
            value
        }),
        guard: node.into_guard(),
    })
}

/// The batch policy of a mode (reads per readiness for `off` and for the
/// modes that do not batch).
fn policy(opts: &S2Opts) -> keel::net::BatchPolicy {
    match opts.mode {
        S2Mode::Fixed => keel::net::BatchPolicy::fixed(opts.min_bytes, opts.max_delay),
        S2Mode::Adaptive => keel::net::BatchPolicy::adaptive(opts.max_delay),
        _ => keel::net::BatchPolicy::off(),
    }
}

/// Reads a stream until it ends, handing every read to the handler.
async fn handle_stream<N: Node>(mut stream: N::Stream, buffer: usize, counters: Arc<S2Counters>) {
    let mut buf = vec![0u8; buffer];
    loop {
        match N::read(&mut stream, &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => counters.deliver(&buf[..n]),
        }
    }
}

/// Answers requests on one API connection until it closes, the job run
/// inline in the connection's task.
async fn serve_api<N: Node>(mut stream: N::Stream, job_lines: u64, counters: Arc<S2Counters>) {
    let _ = N::set_nodelay(&stream);
    let mut pending = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        match api_step(&mut pending, job_lines, &counters) {
            ApiStep::Answer(response) => {
                if N::write_all(&mut stream, &response).await.is_err() {
                    return;
                }
            }
            ApiStep::Refuse => {
                let _ = N::write_all(&mut stream, TOO_LARGE).await;
                return;
            }
            ApiStep::Read => match N::read(&mut stream, &mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            },
        }
    }
}

impl S2Counters {
    /// Counters for handlers that do `handler_lines` of work a delivery.
    pub fn new(handler_lines: u64) -> S2Counters {
        S2Counters {
            handler_lines,
            ..S2Counters::default()
        }
    }

    /// Processes one delivery: sums its bytes, does the handler's work (if
    /// any) and counts it.
    pub fn deliver(&self, data: &[u8]) {
        let sum = data
            .iter()
            .fold(0u64, |acc, &b| acc.wrapping_add(u64::from(b)));
        self.checksum.fetch_add(sum, Ordering::Relaxed);
        self.deliveries.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
        if self.handler_lines > 0 {
            let work = super::job::run(self.handler_lines);
            self.checksum.fetch_add(work, Ordering::Relaxed);
        }
    }

    /// The counters as the `s2` object of a mark.
    pub fn to_json(&self) -> Value {
        json!({
            "deliveries": self.deliveries.load(Ordering::Relaxed),
            "bytes": self.bytes.load(Ordering::Relaxed),
            "api_requests": self.api_requests.load(Ordering::Relaxed),
            "job_cpu_s": self.job_cpu_ns.load(Ordering::Relaxed) as f64 / 1e9,
        })
    }
}

/// Where a request ends in `buf` (after its blank line), if it has.
pub fn request_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// What the front of a connection's unanswered bytes holds, as
/// [`next_request`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A whole request within the limit, this many bytes long (up to and
    /// including its blank line).
    Request(usize),
    /// The start of a request that may still fit the limit: read more.
    Partial,
    /// A request longer than the limit.
    TooLarge,
}

/// The request at the front of `pending`, held to at most `max` bytes
/// (up to and including its blank line). The end is looked for only in
/// the first `max` bytes, so a longer request is [`Next::TooLarge`]
/// whether or not its end arrived in the same read as its start: where
/// the reads happen to split the bytes does not move the limit.
pub fn next_request(pending: &[u8], max: usize) -> Next {
    match request_end(&pending[..pending.len().min(max)]) {
        Some(end) => Next::Request(end),
        None if pending.len() > max => Next::TooLarge,
        None => Next::Partial,
    }
}

/// The answer to one API request: runs the job, adds its CPU time to
/// `counters`, and formats the response. Anything but `GET /job` is
/// answered 404.
pub fn answer(request: &[u8], job_lines: u64, counters: &S2Counters) -> Vec<u8> {
    if !request.starts_with(b"GET /job ") {
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec();
    }
    let start = std::time::Instant::now();
    let cpu_start = super::cpu::thread_cpu();
    let result = super::job::run(job_lines);
    if let (Some(before), Some(after)) = (cpu_start, super::cpu::thread_cpu()) {
        let ns = u64::try_from(after.saturating_sub(before).as_nanos()).unwrap_or(u64::MAX);
        counters.job_cpu_ns.fetch_add(ns, Ordering::Relaxed);
    }
    let job_us = start.elapsed().as_micros();
    let body = format!("{result}\n");
    format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Job-Us: {job_us}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The answer to a request over [`MAX_REQUEST`].
pub const TOO_LARGE: &[u8] =
    b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// What an API connection does next, as [`api_step`] decides it.
#[derive(Debug, PartialEq, Eq)]
pub enum ApiStep {
    /// Send this answer to the request just taken off the front.
    Answer(Vec<u8>),
    /// Send [`TOO_LARGE`] and close.
    Refuse,
    /// Read more bytes.
    Read,
}

/// One step of an API connection, the same on both nodes: takes the
/// request at the front of `pending` if a whole one is there (within
/// [`MAX_REQUEST`]), answers and counts it. The caller does the IO.
pub fn api_step(pending: &mut Vec<u8>, job_lines: u64, counters: &S2Counters) -> ApiStep {
    match next_request(pending, MAX_REQUEST) {
        Next::Request(end) => {
            let response = answer(&pending[..end], job_lines, counters);
            pending.drain(..end);
            counters.api_requests.fetch_add(1, Ordering::Relaxed);
            ApiStep::Answer(response)
        }
        Next::TooLarge => ApiStep::Refuse,
        Next::Partial => ApiStep::Read,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request ends at its blank line.
    #[test]
    fn finds_request_end() {
        assert_eq!(request_end(b"GET /job HTTP/1.1\r\n\r\n"), Some(21));
        assert_eq!(request_end(b"GET /job HTTP/1.1\r\n"), None);
    }

    /// A request of exactly `max` bytes is taken, one byte longer is too
    /// large whether its end is there or not, and a shorter start waits
    /// for more; the first of pipelined requests is the one looked at.
    #[test]
    fn holds_requests_to_the_limit() {
        let request = |len: usize| {
            let mut bytes = b"GET /job HTTP/1.1\r\nX-Pad: ".to_vec();
            bytes.resize(len - 4, b'a');
            bytes.extend_from_slice(b"\r\n\r\n");
            bytes
        };
        let max = 100;
        assert_eq!(next_request(&request(max), max), Next::Request(max));
        assert_eq!(next_request(&request(max + 1), max), Next::TooLarge);
        assert_eq!(next_request(&request(max + 1)[..max], max), Next::Partial);
        assert_eq!(next_request(&vec![b'a'; max + 1], max), Next::TooLarge);
        assert_eq!(next_request(b"", max), Next::Partial);
        let mut two = request(30);
        two.extend_from_slice(&request(max + 1));
        assert_eq!(next_request(&two, max), Next::Request(30));
        assert_eq!(next_request(&two[30..], max), Next::TooLarge);
    }

    /// A step answers the first whole request, takes it off and counts
    /// it; a start waits for more; a request over the limit is refused.
    #[test]
    fn api_steps() {
        let counters = S2Counters::default();
        let mut pending = b"GET /nope HTTP/1.1\r\n\r\nGET".to_vec();
        match api_step(&mut pending, 1, &counters) {
            ApiStep::Answer(response) => assert!(response.starts_with(b"HTTP/1.1 404")),
            other => panic!("{other:?}"),
        }
        assert_eq!(pending, b"GET");
        assert_eq!(counters.api_requests.load(Ordering::Relaxed), 1);
        assert_eq!(api_step(&mut pending, 1, &counters), ApiStep::Read);
        let mut huge = vec![b'a'; MAX_REQUEST + 1];
        assert_eq!(api_step(&mut huge, 1, &counters), ApiStep::Refuse);
        assert_eq!(counters.api_requests.load(Ordering::Relaxed), 1);
    }

    /// A handler with work to do runs it on every delivery (its result is
    /// folded into the checksum, so it cannot be skipped); without, a
    /// delivery only sums its bytes. Both count the delivery alike.
    #[test]
    fn handlers_do_their_work_per_delivery() {
        let plain = S2Counters::new(0);
        let working = S2Counters::new(50);
        for counters in [&plain, &working] {
            counters.deliver(&[1, 2, 3]);
            counters.deliver(&[4]);
        }
        assert_eq!(plain.checksum.load(Ordering::Relaxed), 10);
        assert_eq!(
            working.checksum.load(Ordering::Relaxed),
            10u64.wrapping_add(2u64.wrapping_mul(super::super::job::run(50)))
        );
        for counters in [&plain, &working] {
            assert_eq!(counters.to_json()["deliveries"], 2);
            assert_eq!(counters.to_json()["bytes"], 4);
        }
    }

    /// `GET /job` runs the job, reports its time and counts its CPU;
    /// anything else is 404.
    #[test]
    fn answers() {
        let counters = S2Counters::default();
        let ok = String::from_utf8(answer(b"GET /job HTTP/1.1\r\n\r\n", 100, &counters)).unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("X-Job-Us: "), "{ok}");
        let body = ok.split("\r\n\r\n").nth(1).unwrap();
        assert_eq!(body.trim(), super::super::job::run(100).to_string());
        assert!(counters.to_json()["job_cpu_s"].as_f64().unwrap() > 0.0);
        let missing = answer(b"GET /nope HTTP/1.1\r\n\r\n", 100, &counters);
        assert!(missing.starts_with(b"HTTP/1.1 404"));
    }

    /// A delivery is counted and summed.
    #[test]
    fn counts_deliveries() {
        let counters = S2Counters::default();
        counters.deliver(&[1, 2, 3]);
        counters.deliver(&[4]);
        assert_eq!(counters.to_json()["deliveries"], 2);
        assert_eq!(counters.to_json()["bytes"], 4);
        assert_eq!(counters.checksum.load(Ordering::Relaxed), 10);
    }
}
