//! The S2 load: a storm of paced small writes, and the API probe.
//!
//! The storm is many connections that each write one 1460-byte chunk (a
//! full Ethernet payload, as the seed's cameras did) at a fixed pace, so
//! that together they send a set rate. The connections are spread over a
//! few threads; each thread wakes every millisecond and writes the chunks
//! that are due, with `TCP_NODELAY`, so every chunk leaves as its own
//! packet. A thread that falls behind skips ahead instead of bursting,
//! and counts how often it did.
//!
//! The API probe calls `GET /job` on one keep-alive connection on a fixed
//! grid and times each answer, and reads from the `X-Job-Us` header how
//! long the job itself took inside the server, so the harness can divide
//! out the job's own speed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::http::{self, Limits};
use super::summary::{new_histogram, ProbeSummary, Quantiles};
use crate::error::Error;

/// Threads the storm's connections are spread over.
const STORM_THREADS: usize = 4;

/// How often a storm thread wakes to write what is due.
const STORM_TICK: Duration = Duration::from_millis(1);

/// What the storm does.
#[derive(Debug, Clone)]
pub struct StormOpts {
    /// The stream service (a loopback address).
    pub addr: SocketAddr,
    /// Connections.
    pub streams: usize,
    /// Bytes per write.
    pub chunk: usize,
    /// Total bytes per second over all connections.
    pub rate: f64,
    /// How long to write.
    pub duration: Duration,
    /// Timeout of a connect or a write.
    pub io_timeout: Duration,
}

/// The JSON line `keel-bench load s2` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StormSummary {
    /// Connections that were open for the whole run.
    pub streams: usize,
    /// Writes made.
    pub writes: u64,
    /// Bytes written.
    pub bytes: u64,
    /// `bytes` per second of the run.
    pub bytes_per_s: f64,
    /// Ticks on which a thread was so late that it skipped writes.
    pub late_ticks: u64,
    /// Connections that failed.
    pub errors: u64,
}

/// The JSON line `keel-bench load s2` prints once every connection is open,
/// before it starts writing.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StormReady {
    /// Connections open.
    pub connected: usize,
}

/// Opens the storm's connections, calls `ready` once they are all open,
/// then writes for the storm's duration and summarises it.
pub fn storm(opts: &StormOpts, ready: impl FnOnce(usize)) -> Result<StormSummary, Error> {
    if !opts.addr.ip().is_loopback() {
        return Err(Error::usage(format!(
            "{} is not a loopback address: the storm only targets this machine",
            opts.addr
        )));
    }
    if opts.streams == 0 || opts.chunk == 0 || !(opts.rate > 0.0 && opts.rate.is_finite()) {
        return Err(Error::usage("streams, chunk and rate must be positive"));
    }
    let mut sockets = Vec::with_capacity(opts.streams);
    for _ in 0..opts.streams {
        let stream = TcpStream::connect_timeout(&opts.addr, opts.io_timeout)
            .and_then(|s| {
                s.set_nodelay(true)?;
                s.set_write_timeout(Some(opts.io_timeout))?;
                Ok(s)
            })
            .map_err(|e| Error::new(format!("connecting to {}: {e}", opts.addr)))?;
        sockets.push(stream);
    }
    ready(sockets.len());
    // Writes per second over all streams, and per thread.
    let writes_per_s = opts.rate / opts.chunk as f64;
    let threads = STORM_THREADS.min(opts.streams);
    let per_thread = writes_per_s / threads as f64;
    let mut groups: Vec<Vec<TcpStream>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, socket) in sockets.into_iter().enumerate() {
        groups[i % threads].push(socket);
    }
    let start = Instant::now();
    let end = start + opts.duration;
    let handles: Vec<_> = groups
        .into_iter()
        .map(|group| {
            let chunk = opts.chunk;
            std::thread::spawn(move || storm_thread(group, chunk, per_thread, start, end))
        })
        .collect();
    let mut summary = StormSummary {
        streams: opts.streams,
        writes: 0,
        bytes: 0,
        bytes_per_s: 0.0,
        late_ticks: 0,
        errors: 0,
    };
    for handle in handles {
        let (writes, late, errors) = handle
            .join()
            .map_err(|_| Error::new("a storm thread panicked"))?;
        summary.writes += writes;
        summary.late_ticks += late;
        summary.errors += errors;
    }
    summary.streams -= summary.errors as usize;
    summary.bytes = summary.writes * opts.chunk as u64;
    summary.bytes_per_s = summary.bytes as f64 / start.elapsed().as_secs_f64();
    Ok(summary)
}

/// One storm thread: writes `rate` chunks per second round-robin over its
/// connections until `end`; returns (writes, late ticks, failed
/// connections).
fn storm_thread(
    mut group: Vec<TcpStream>,
    chunk: usize,
    rate: f64,
    start: Instant,
    end: Instant,
) -> (u64, u64, u64) {
    let data = vec![0xA5u8; chunk];
    let (mut done, mut skipped, mut late, mut errors) = (0u64, 0u64, 0u64, 0u64);
    // At most two ticks' worth at once: a late thread skips the rest
    // rather than burst.
    let burst = (2.0 * rate * STORM_TICK.as_secs_f64()).ceil() as u64 + 1;
    let mut next = 0usize;
    let max_ticks = end.duration_since(start).as_millis() as u64 + 2;
    for tick in 1..=max_ticks {
        let due_at = start + STORM_TICK * u32::try_from(tick).unwrap_or(u32::MAX);
        if let Some(wait) = due_at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let now = Instant::now();
        if now >= end || group.is_empty() {
            break;
        }
        let due = (now.duration_since(start).as_secs_f64() * rate) as u64;
        let owed = due.saturating_sub(done + skipped);
        if owed > burst {
            late += 1;
            skipped += owed - burst;
        }
        for _ in 0..owed.min(burst) {
            if group.is_empty() {
                break;
            }
            next %= group.len();
            if group[next].write_all(&data).is_err() {
                errors += 1;
                group.swap_remove(next);
                continue;
            }
            done += 1;
            next += 1;
        }
    }
    (done, late, errors)
}

/// What the API probe does.
#[derive(Debug, Clone)]
pub struct ApiOpts {
    /// The API service (a loopback address).
    pub addr: SocketAddr,
    /// Time between calls (an absolute grid).
    pub interval: Duration,
    /// Measured time, after the warm-up.
    pub duration: Duration,
    /// Time of calls that are not recorded.
    pub warmup: Duration,
    /// Timeout of a connect, a write or a read.
    pub io_timeout: Duration,
    /// Ask for real-time priority for the probe's thread.
    pub realtime: bool,
}

/// The JSON line `keel-bench load api` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApiSummary {
    /// Latency of the calls, send to last byte of the answer.
    pub latency: ProbeSummary,
    /// Median time of the job itself, inside the server, µs.
    pub job_p50_us: f64,
    /// What each call took beyond its own job (its latency less the job
    /// time the server reported for it): the wait for the node to read
    /// the request, start the job and write the answer, without the job's
    /// own variation. Absent when no call was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beyond_job: Option<Quantiles>,
}

/// Calls the API on its grid and summarises the latencies.
pub fn api(opts: &ApiOpts) -> Result<ApiSummary, Error> {
    if !opts.addr.ip().is_loopback() {
        return Err(Error::usage(format!(
            "{} is not a loopback address: the probe only targets this machine",
            opts.addr
        )));
    }
    let connect = || -> std::io::Result<TcpStream> {
        let s = TcpStream::connect_timeout(&opts.addr, opts.io_timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(opts.io_timeout))?;
        s.set_write_timeout(Some(opts.io_timeout))?;
        Ok(s)
    };
    let scheduling = super::realtime::raise(opts.realtime);
    let mut stream =
        connect().map_err(|e| Error::new(format!("connecting to {}: {e}", opts.addr)))?;
    let mut hist = new_histogram();
    let mut beyond_job = new_histogram();
    let mut jobs = Vec::new();
    let mut errors = 0u64;
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let end = measure_from + opts.duration;
    let max_calls = (opts.warmup + opts.duration).as_nanos() / opts.interval.as_nanos().max(1) + 2;
    for call in 0..max_calls {
        let due = start
            + opts
                .interval
                .saturating_mul(u32::try_from(call).unwrap_or(u32::MAX));
        if due >= end {
            break;
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let sent = Instant::now();
        match call_job(&mut stream) {
            Ok(job_us) => {
                if sent >= measure_from {
                    let ns = u64::try_from(sent.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    hist.saturating_record(ns);
                    beyond_job.saturating_record(beyond_job_ns(ns, job_us));
                    jobs.push(job_us);
                }
            }
            Err(error) => {
                errors += 1;
                eprintln!("keel load: API call {call} failed: {error}");
                if errors >= 10 {
                    break;
                }
                match connect() {
                    Ok(fresh) => stream = fresh,
                    Err(_) => break,
                }
            }
        }
    }
    jobs.sort_by(f64::total_cmp);
    let job_p50_us = jobs.get(jobs.len() / 2).copied().unwrap_or(0.0);
    Ok(ApiSummary {
        latency: ProbeSummary::from_histogram(&hist, errors).with_scheduling(scheduling),
        job_p50_us,
        beyond_job: Quantiles::of(&beyond_job),
    })
}

/// What a call of `latency_ns` took beyond its job of `job_us` (as the
/// server reported it), ns. The job ran inside the call, so it cannot be
/// longer; one reported longer is the two clocks' rounding, and the call
/// waited nothing.
fn beyond_job_ns(latency_ns: u64, job_us: f64) -> u64 {
    let job_ns = (job_us * 1e3).max(0.0) as u64;
    latency_ns.saturating_sub(job_ns)
}

/// The longest answer to `GET /job` the probe reads, head and body, bytes
/// (the server's is under a hundred).
const MAX_ANSWER: usize = 64 * 1024;

/// What the probe accepts of an answer to `GET /job`.
const LIMITS: Limits = Limits {
    max_head: MAX_ANSWER,
    max_body: MAX_ANSWER as u64,
};

/// One `GET /job` exchange; returns the job time the server reported, µs.
fn call_job(stream: &mut TcpStream) -> std::io::Result<f64> {
    stream.write_all(b"GET /job HTTP/1.1\r\nHost: keel\r\n\r\n")?;
    let mut response = Vec::with_capacity(256);
    let mut buf = [0u8; 512];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        response.extend_from_slice(&buf[..n]);
        if let Some(job_us) = parse_answer(&response)? {
            return Ok(job_us);
        }
        if response.len() > MAX_ANSWER {
            return Err(std::io::Error::other("the answer is too long"));
        }
    }
}

/// Parses a complete answer: its `X-Job-Us`, or `None` if it is not all
/// there yet; an error for a status other than 200.
fn parse_answer(response: &[u8]) -> std::io::Result<Option<f64>> {
    let Some(answer) = http::parse_response(response, LIMITS)? else {
        return Ok(None);
    };
    if answer.head.status != 200 {
        return Err(std::io::Error::other(format!(
            "the server answered status {}",
            answer.head.status
        )));
    }
    http::header(response, "x-job-us")
        .and_then(|v| v.parse().ok())
        .map(Some)
        .ok_or_else(|| std::io::Error::other("the answer has no X-Job-Us"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A whole answer yields its job time; a partial one waits; an error
    /// status is an error.
    #[test]
    fn parses_answers() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Job-Us: 20123\r\n\r\n42\n";
        assert_eq!(parse_answer(ok).unwrap(), Some(20123.0));
        assert_eq!(parse_answer(&ok[..ok.len() - 2]).unwrap(), None);
        assert_eq!(parse_answer(b"HTTP/1.1 200 OK\r\n").unwrap(), None);
        let missing = parse_answer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
        assert!(missing.unwrap_err().to_string().contains("status 404"));
        let no_job = parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        assert!(no_job.unwrap_err().to_string().contains("X-Job-Us"));
        assert!(parse_answer(b"SSH-2.0-OpenSSH_9.6\r\n").is_err());
    }

    /// A call's wait beyond its job is its latency less the job's time;
    /// a job reported longer than the call waited nothing.
    #[test]
    fn waits_beyond_the_job() {
        assert_eq!(beyond_job_ns(5_300_000, 5_000.0), 300_000);
        assert_eq!(beyond_job_ns(5_000_000, 5_000.4), 0);
        assert_eq!(beyond_job_ns(1_000, -3.0), 1_000);
        assert_eq!(beyond_job_ns(1_000, f64::NAN), 1_000);
    }

    /// Options off this machine or without work are refused.
    #[test]
    fn checks_options() {
        let opts = StormOpts {
            addr: "10.0.0.1:9".parse().unwrap(),
            streams: 1,
            chunk: 1460,
            rate: 1e6,
            duration: Duration::from_millis(10),
            io_timeout: Duration::from_millis(100),
        };
        assert_eq!(storm(&opts, |_| {}).unwrap_err().code(), 2);
        let opts = StormOpts {
            addr: "127.0.0.1:9".parse().unwrap(),
            streams: 0,
            ..opts
        };
        assert_eq!(storm(&opts, |_| {}).unwrap_err().code(), 2);
    }
}
