//! The S1 latency probe: one connection, one small echo per grid tick.
//!
//! Sends go out on an absolute grid (`start + k * interval`), not "interval
//! after the last reply", so a slow reply does not stretch the schedule;
//! a tick that is already past when its turn comes is skipped rather than
//! sent in a burst, so a stall shows up as one long RTT (what a user would
//! see), not as a queue of back-to-back sends that hides it. The loop is
//! bounded three ways: by time, by a tick count, and by an error count,
//! and every socket operation has a timeout, so it cannot hang.
//!
//! Each payload leaves room for the server's stamp (see
//! [`crate::serve::stamp`]); when the answer carries one, the probe also
//! records the server's share of the round trip: from its send to the
//! server's write of the answer. With `realtime`, the probe's thread asks
//! for real-time priority first (see [`super::realtime`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::realtime;
use super::summary::{new_histogram, ProbeSummary, Timeline};
use crate::error::Error;
use crate::serve::stamp::{self, ECHO_STAMP};

/// After this many failed exchanges the probe gives up early.
const MAX_ERRORS: u64 = 10;

/// What the probe does.
#[derive(Debug, Clone)]
pub struct ProbeOpts {
    /// The echo server (must be a loopback address).
    pub addr: SocketAddr,
    /// Time between grid ticks.
    pub interval: Duration,
    /// Measured time, after the warm-up.
    pub duration: Duration,
    /// Time of sends that are not recorded.
    pub warmup: Duration,
    /// Bytes per send.
    pub payload: usize,
    /// Timeout of a connect, a write or a read.
    pub io_timeout: Duration,
    /// Ask for real-time priority for the probe's thread.
    pub realtime: bool,
}

/// Runs the probe and summarises the RTTs it measured.
pub fn probe(opts: &ProbeOpts) -> Result<ProbeSummary, Error> {
    if !opts.addr.ip().is_loopback() {
        return Err(Error::usage(format!(
            "{} is not a loopback address: the probe only targets this machine",
            opts.addr
        )));
    }
    if opts.interval.is_zero() || opts.payload == 0 {
        return Err(Error::usage(
            "the interval and the payload must be positive",
        ));
    }
    let scheduling = realtime::raise(opts.realtime);
    let mut stream = connect(opts)?;
    let mut hist = new_histogram();
    let mut server = new_histogram();
    let mut send = vec![0u8; opts.payload];
    let mut recv = vec![0u8; opts.payload];
    let interval_ns = opts.interval.as_nanos().max(1);
    let max_samples = u64::try_from(opts.duration.as_nanos() / interval_ns)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let max_ticks = u64::try_from((opts.warmup + opts.duration).as_nanos() / interval_ns)
        .unwrap_or(u64::MAX)
        .saturating_add(2);
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let end = measure_from + opts.duration;
    let mut timeline = Timeline::new(measure_from);
    let mut errors = 0u64;
    let mut tick = 0u64;
    for _ in 0..max_ticks {
        let mut due = grid(start, opts.interval, tick);
        let now = Instant::now();
        if now > due {
            // Late: skip to the next grid point instead of bursting.
            let elapsed = now.duration_since(start).as_nanos() / interval_ns;
            tick = u64::try_from(elapsed).unwrap_or(u64::MAX - 1) + 1;
            due = grid(start, opts.interval, tick);
        }
        if due >= end || hist.len() >= max_samples {
            break;
        }
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        fill(&mut send, tick);
        let sent_at = Instant::now();
        let sent_ns = stamp::monotonic_ns();
        match exchange(&mut stream, &send, &mut recv, sent_ns) {
            Ok(server_ns) => {
                let rtt = sent_at.elapsed();
                if sent_at >= measure_from {
                    let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
                    hist.saturating_record(ns);
                    timeline.record(sent_at, ns);
                    if let Some(server_ns) = server_ns {
                        server.saturating_record(server_ns.max(1));
                    }
                }
            }
            Err(error) => {
                errors += 1;
                eprintln!("keel load: exchange {tick} failed: {error}");
                if errors >= MAX_ERRORS || Instant::now() >= end {
                    break;
                }
                // The stream may be out of step now: start a fresh one.
                match connect(opts) {
                    Ok(fresh) => stream = fresh,
                    Err(error) => {
                        eprintln!("keel load: giving up: {error}");
                        break;
                    }
                }
            }
        }
        tick += 1;
    }
    Ok(ProbeSummary::from_histogram(&hist, errors)
        .with_timeline(timeline)
        .with_server(&server)
        .with_scheduling(scheduling))
}

/// The instant of grid tick `tick`.
fn grid(start: Instant, interval: Duration, tick: u64) -> Instant {
    let offset = interval.as_nanos().saturating_mul(u128::from(tick));
    start + Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX))
}

/// Connects with a timeout, with `TCP_NODELAY` and I/O timeouts set.
fn connect(opts: &ProbeOpts) -> Result<TcpStream, Error> {
    let stream = TcpStream::connect_timeout(&opts.addr, opts.io_timeout)
        .map_err(|e| Error::new(format!("cannot connect to {}: {e}", opts.addr)))?;
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(Some(opts.io_timeout)))
        .and_then(|()| stream.set_write_timeout(Some(opts.io_timeout)))
        .map_err(|e| Error::new(format!("cannot configure the socket: {e}")))?;
    Ok(stream)
}

/// Marks a payload with its tick so that a stale echo is recognised, and
/// leaves the server's stamp slot zero.
fn fill(buf: &mut [u8], tick: u64) {
    for (i, byte) in buf.iter_mut().enumerate() {
        *byte = (i as u64).wrapping_add(tick) as u8;
    }
    let mark = tick.to_le_bytes();
    let n = mark.len().min(buf.len());
    buf[..n].copy_from_slice(&mark[..n]);
    if let Some(slot) = buf.get_mut(ECHO_STAMP) {
        slot.fill(0);
    }
}

/// Sends `send` (at `sent_ns` on the shared clock) and reads back exactly
/// as many bytes, which must match but for the server's stamp; returns the
/// server's share of the exchange if it stamped the answer.
fn exchange(
    stream: &mut TcpStream,
    send: &[u8],
    recv: &mut [u8],
    sent_ns: u64,
) -> Result<Option<u64>, Error> {
    stream
        .write_all(send)
        .map_err(|e| Error::new(format!("send: {e}")))?;
    stream
        .read_exact(recv)
        .map_err(|e| Error::new(format!("receive: {e}")))?;
    let received_ns = stamp::monotonic_ns();
    match stamp::read_echo_stamp(send, recv) {
        Err(_) => Err(Error::new("the echo does not match what was sent")),
        Ok(None) => Ok(None),
        Ok(Some(at)) if (sent_ns..=received_ns).contains(&at) => Ok(Some(at - sent_ns)),
        Ok(Some(at)) => Err(Error::new(format!(
            "the server stamped its answer at {at} ns, outside the exchange ({sent_ns}..{received_ns} ns)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A one-connection std echo server on loopback, for at most `limit`.
    fn echo_server(limit: Duration) -> SocketAddr {
        echo_server_with(limit, |_| {})
    }

    /// [`echo_server`], with `answer` applied to each chunk before it is
    /// echoed.
    fn echo_server_with(limit: Duration, answer: fn(&mut [u8])) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.set_read_timeout(Some(limit)).unwrap();
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                answer(&mut buf[..n]);
                if n == 0 || stream.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        addr
    }

    /// Options for a short probe of `addr`.
    fn opts(addr: SocketAddr) -> ProbeOpts {
        ProbeOpts {
            addr,
            interval: Duration::from_millis(1),
            duration: Duration::from_millis(200),
            warmup: Duration::from_millis(50),
            payload: 64,
            io_timeout: Duration::from_secs(2),
            realtime: false,
        }
    }

    /// Against a real echo, the probe records about one sample per tick of
    /// the measured window, and never more than the bound.
    #[test]
    fn probes_an_echo_server() {
        let addr = echo_server(Duration::from_secs(5));
        let summary = probe(&opts(addr)).unwrap();
        assert_eq!(summary.errors, 0);
        assert!(summary.count > 20 && summary.count <= 201, "{summary:?}");
        assert!(summary.p50_us > 0.0 && summary.p50_us <= summary.max_us);
        assert_eq!(summary.server, None, "a plain echo does not stamp");
        assert_eq!(summary.scheduling.as_ref().unwrap().policy, "normal");
    }

    /// Against an echo that stamps its answers, every recorded round trip
    /// has a server share, and that share is never longer than the round
    /// trip.
    #[test]
    fn records_the_server_share_of_stamped_echoes() {
        let addr = echo_server_with(Duration::from_secs(5), stamp::stamp_echo);
        let summary = probe(&opts(addr)).unwrap();
        assert_eq!(summary.errors, 0);
        let server = summary.server.expect("the server stamped its answers");
        assert_eq!(server.count, summary.count);
        assert!(server.max_us <= summary.max_us, "{summary:?}");
        assert!(server.p50_us <= summary.p50_us, "{summary:?}");
    }

    /// A stamp from outside the exchange (a server on another clock) is an
    /// error, not a figure.
    #[test]
    fn a_stamp_outside_the_exchange_is_an_error() {
        let addr = echo_server_with(Duration::from_secs(5), |chunk| {
            if let Some(slot) = chunk.get_mut(ECHO_STAMP) {
                slot.copy_from_slice(&1u64.to_le_bytes());
            }
        });
        let summary = probe(&opts(addr)).unwrap();
        assert!(summary.errors > 0, "{summary:?}");
        assert_eq!(summary.server, None);
    }

    /// A probe that cannot connect says so.
    #[test]
    fn unreachable_server_is_a_clear_error() {
        let addr = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let error = probe(&opts(addr)).unwrap_err();
        assert!(error.to_string().contains("cannot connect"), "{error}");
    }

    /// Only loopback addresses are probed.
    #[test]
    fn refuses_non_loopback() {
        let error = probe(&opts("192.0.2.1:7".parse().unwrap())).unwrap_err();
        assert!(error.to_string().contains("loopback"), "{error}");
        assert_eq!(error.code(), 2);
    }

    /// Each tick's payload differs from the next one's.
    #[test]
    fn payloads_are_stamped() {
        let mut a = vec![0u8; 64];
        let mut b = vec![0u8; 64];
        fill(&mut a, 1);
        fill(&mut b, 2);
        assert_ne!(a, b);
        assert!(a[ECHO_STAMP].iter().all(|&b| b == 0), "{a:?}");
        let mut tiny = vec![0u8; 3];
        fill(&mut tiny, 5);
        assert_eq!(tiny, vec![5, 0, 0]);
    }

    /// Grid ticks are exact multiples of the interval.
    #[test]
    fn grid_points() {
        let start = Instant::now();
        let at = grid(start, Duration::from_micros(250), 4);
        assert_eq!(at.duration_since(start), Duration::from_millis(1));
    }
}
