//! The S5 log clients: closed-loop writers that count what was promised.
//!
//! Each client has one connection. It sends a record, waits for the LSN
//! that acknowledges it, and sends the next, back to back; or, paced
//! (`rate`), no sooner than its share of the rate allows, so that two
//! nodes can be compared under the same load (see [`ClientOpts::rate`]).
//! All clients
//! are tasks of one current-thread tokio runtime, as S0's are: a thread
//! per client would put eight more threads on the shared cores at every
//! group commit (each woken by its own acknowledgement), and the node's
//! figures would measure the clients' context switches as much as the
//! node. Records are self-describing ([`record`]): a client id, a sequence
//! number from 1, and filler derived from both, so whoever reads the log
//! afterwards can tell every record's origin and whether its bytes are
//! intact, without the clients having to keep copies.
//!
//! What a client reports is exactly what it was promised: the last
//! sequence number acknowledged, the LSN of that acknowledgement, and
//! whether another record was in flight (sent, not yet answered) when the
//! connection ended. `keel-bench bench s5 --crash` holds the log to those
//! promises after each `kill -9`.
//!
//! The clients' thread also reports the CPU time it ran inside the
//! measured window. It serves every client in turn, so after a group
//! commit the eight acknowledgements come back to it together and leave it
//! as eight records one after another, each a turn of that thread apart:
//! S5's closed-loop ceiling counts those turns (see
//! [`crate::bench::s5::ceiling`]).
//!
//! Loops are bounded by time, by a record count and by an error, and
//! every socket operation has a timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use serde::{Deserialize, Serialize};

use super::summary::{new_histogram, ProbeSummary};
use super::within;
use crate::error::Error;
use crate::serve::cpu::thread_cpu;
use crate::serve::s5::frame;

/// Records one client sends at most, whatever the duration.
const MAX_RECORDS_PER_CLIENT: u64 = 50_000_000;

/// Bytes at the head of every record: client id (`u32`) and sequence
/// number (`u64`), little-endian.
pub const HEADER: usize = 12;

/// What the clients do.
#[derive(Debug, Clone)]
pub struct ClientOpts {
    /// The log service (a loopback address).
    pub addr: SocketAddr,
    /// Concurrent clients.
    pub clients: u32,
    /// Id of the first client; the others follow.
    pub first_id: u32,
    /// Bytes per record (at least [`HEADER`]).
    pub record: usize,
    /// Time of records that are not counted in the rates.
    pub warmup: Duration,
    /// Measured time after the warm-up.
    pub duration: Duration,
    /// Timeout of a connect, a write or a read.
    pub io_timeout: Duration,
    /// Records per second all clients together send at most (`None`:
    /// each sends as soon as its last record is acknowledged).
    ///
    /// A paced client keeps a grid of its own, one send every
    /// `clients / rate` seconds, and still waits for each acknowledgement
    /// before it sends again: a node slower than the rate gets a closed
    /// loop. A client up to [`MAX_LAG`] behind its grid sends at once
    /// until it is back on it (the timer that wakes it fires up to a
    /// millisecond late, so a shorter period would otherwise lose
    /// slots); one further behind starts a new grid rather than catch
    /// up. A node's figures under a closed loop depend on
    /// how fast it acknowledges; under a rate both runtimes reach, they
    /// see the same load.
    pub rate: Option<f64>,
}

/// What one client was promised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientResult {
    /// The client's id.
    pub id: u32,
    /// The last sequence number acknowledged (0 if none).
    pub acked_seq: u64,
    /// The LSN that acknowledged it (0 if none).
    pub acked_lsn: u64,
    /// Whether a record was sent and not answered when the client stopped.
    pub in_flight: bool,
    /// Why the client stopped early, if it did.
    pub error: Option<String>,
}

/// The JSON line `keel-bench load s5` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LogLoadSummary {
    /// Acknowledgements received inside the measured window.
    pub acked: u64,
    /// `acked` per second of the measured window.
    pub records_per_s: f64,
    /// Time from send to acknowledgement, inside the window.
    pub ack: ProbeSummary,
    /// Clients that stopped on an error.
    pub errors: u64,
    /// CPU seconds the clients' thread ran inside the measured window
    /// (`None` where the thread's clock cannot be read).
    #[serde(default)]
    pub cpu_s: Option<f64>,
    /// Per client, what it was promised.
    pub clients: Vec<ClientResult>,
}

/// The record a client sends as sequence number `seq`: header, then
/// filler that depends on both, so a swapped or damaged record is caught.
pub fn record(client: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len.max(HEADER));
    out.extend_from_slice(&client.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    let mut state = u64::from(client).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq;
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push(state as u8);
    }
    out
}

/// Reads back a record written by [`record`]: its client and sequence
/// number, or `None` if its bytes are not exactly what that client sent.
pub fn parse_record(data: &[u8]) -> Option<(u32, u64)> {
    if data.len() < HEADER {
        return None;
    }
    let client = u32::from_le_bytes(data[..4].try_into().ok()?);
    let seq = u64::from_le_bytes(data[4..HEADER].try_into().ok()?);
    (record(client, seq, data.len()) == data).then_some((client, seq))
}

/// Runs the clients to the end of the window (or until each fails) and
/// summarises them.
pub fn run(opts: &ClientOpts) -> Result<LogLoadSummary, Error> {
    if !opts.addr.ip().is_loopback() {
        return Err(Error::usage(format!(
            "{} is not a loopback address: the clients only target this machine",
            opts.addr
        )));
    }
    if opts.record < HEADER || opts.record > crate::serve::s5::MAX_RECORD {
        return Err(Error::usage(format!(
            "a record must be {HEADER} to {} bytes",
            crate::serve::s5::MAX_RECORD
        )));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new(format!("cannot start a tokio runtime: {e}")))?;
    let start = Instant::now();
    let measure_from = start + opts.warmup;
    let end = measure_from + opts.duration;
    let (outcomes, cpu_s) = rt.block_on(async {
        // Every task of a current-thread runtime runs on this thread, so
        // its clock is the clients' whole CPU time. The meter stops at the
        // window's end or when the last client stops, whichever is first:
        // clients that fail early (the node killed by `--crash`) must not
        // leave the summary waiting for the rest of the window.
        let clients_done = Arc::new(Notify::new());
        let meter = tokio::spawn(meter_cpu(measure_from, end, clients_done.clone()));
        let tasks: Vec<_> = (0..opts.clients)
            .map(|i| {
                let opts = opts.clone();
                let pace = pace(&opts, i, start);
                tokio::spawn(async move {
                    client(&opts, opts.first_id + i, pace, measure_from, end).await
                })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await);
        }
        // Stored as a permit if the meter is not waiting yet.
        clients_done.notify_one();
        (outcomes, meter.await.ok().flatten())
    });
    let mut hist = new_histogram();
    let mut clients = Vec::new();
    let mut acked = 0;
    for outcome in outcomes {
        let (result, client_hist, client_acked) =
            outcome.map_err(|_| Error::new("a log client task panicked"))?;
        hist.add(&client_hist)
            .map_err(|e| Error::new(format!("merging histograms: {e}")))?;
        acked += client_acked;
        clients.push(result);
    }
    let errors = clients.iter().filter(|c| c.error.is_some()).count() as u64;
    Ok(LogLoadSummary {
        acked,
        records_per_s: acked as f64 / opts.duration.as_secs_f64(),
        ack: ProbeSummary::from_histogram(&hist, errors),
        errors,
        cpu_s,
        clients,
    })
}

/// The calling thread's CPU seconds from `from` until `to` or until
/// `done` is notified, whichever comes first; `None` if `done` comes
/// before `from` (no part of the window was measured) or the thread's
/// clock cannot be read.
async fn meter_cpu(from: Instant, to: Instant, done: Arc<Notify>) -> Option<f64> {
    tokio::select! {
        () = tokio::time::sleep_until(from.into()) => {}
        () = done.notified() => return None,
    }
    let start = thread_cpu()?;
    tokio::select! {
        () = tokio::time::sleep_until(to.into()) => {}
        () = done.notified() => {}
    }
    let stop = thread_cpu()?;
    Some(stop.saturating_sub(start).as_secs_f64())
}

/// How far behind its grid a paced client may fall and still catch up:
/// a few of the timer's one-millisecond ticks.
const MAX_LAG: Duration = Duration::from_millis(5);

/// When a paced client sends: its next slot and the time between slots.
#[derive(Debug, Clone, Copy)]
struct Pace {
    /// When the client sends next, at the soonest.
    next: Instant,
    /// The time between its sends: clients over the rate.
    period: Duration,
}

impl Pace {
    /// Waits for the next slot, then moves the slot on by a period, or to
    /// [`MAX_LAG`] before now where the client is further behind.
    async fn wait(&mut self) {
        tokio::time::sleep_until(self.next.into()).await;
        self.advance(Instant::now());
    }

    /// Moves the slot on from a send at `now`.
    fn advance(&mut self, now: Instant) {
        let floor = now.checked_sub(MAX_LAG).unwrap_or(now);
        self.next = (self.next + self.period).max(floor);
    }
}

/// Client `index`'s pace under `opts.rate`, its first slot offset from
/// `start` by its share of a period so that the clients spread over it;
/// `None` unpaced.
fn pace(opts: &ClientOpts, index: u32, start: Instant) -> Option<Pace> {
    let rate = opts.rate.filter(|r| r.is_finite() && *r > 0.0)?;
    let period = Duration::from_secs_f64(f64::from(opts.clients.max(1)) / rate);
    let offset = period.mul_f64(f64::from(index) / f64::from(opts.clients.max(1)));
    Some(Pace {
        next: start + offset,
        period,
    })
}

/// One client's loop: returns what it was promised, its ack latencies
/// inside the window, and how many acks fell inside the window.
async fn client(
    opts: &ClientOpts,
    id: u32,
    mut pace: Option<Pace>,
    measure_from: Instant,
    end: Instant,
) -> (ClientResult, hdrhistogram::Histogram<u64>, u64) {
    let mut hist = new_histogram();
    let mut result = ClientResult {
        id,
        acked_seq: 0,
        acked_lsn: 0,
        in_flight: false,
        error: None,
    };
    let mut counted = 0;
    let mut stream = match connect(opts).await {
        Ok(stream) => stream,
        Err(error) => {
            result.error = Some(format!("connect: {error}"));
            return (result, hist, counted);
        }
    };
    for seq in 1..=MAX_RECORDS_PER_CLIENT {
        if let Some(pace) = pace.as_mut() {
            pace.wait().await;
        }
        if Instant::now() >= end {
            break;
        }
        let framed = frame(&record(id, seq, opts.record));
        let sent_at = Instant::now();
        result.in_flight = true;
        if let Err(error) = within(opts.io_timeout, stream.write_all(&framed)).await {
            result.error = Some(format!("sending record {seq}: {error}"));
            break;
        }
        let mut lsn = [0u8; 8];
        if let Err(error) = within(opts.io_timeout, stream.read_exact(&mut lsn)).await {
            result.error = Some(format!("waiting for the ack of record {seq}: {error}"));
            break;
        }
        let now = Instant::now();
        result.in_flight = false;
        result.acked_seq = seq;
        result.acked_lsn = u64::from_le_bytes(lsn);
        if sent_at >= measure_from && now < end {
            counted += 1;
            let ns = now.duration_since(sent_at).as_nanos();
            hist.saturating_record(u64::try_from(ns).unwrap_or(u64::MAX));
        }
    }
    (result, hist, counted)
}

/// Connects within the timeout and sets `TCP_NODELAY`.
async fn connect(opts: &ClientOpts) -> std::io::Result<TcpStream> {
    let stream = within(opts.io_timeout, TcpStream::connect(opts.addr)).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU meter stops when the clients stop, not at the end of a long
    /// window (a `--crash` run's clients stop when the node is killed), and
    /// reports nothing if they stopped before the window began.
    #[test]
    fn the_meter_stops_with_the_clients() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let hour = Duration::from_secs(3600);
        rt.block_on(async {
            let done = Arc::new(Notify::new());
            let now = Instant::now();
            let meter = tokio::spawn(meter_cpu(now, now + hour, done.clone()));
            tokio::time::sleep(Duration::from_millis(20)).await;
            done.notify_one();
            let cpu = tokio::time::timeout(Duration::from_secs(60), meter)
                .await
                .expect("the meter waited for the end of the window")
                .unwrap();
            assert!(cpu.is_some_and(|s| (0.0..60.0).contains(&s)), "{cpu:?}");

            let done = Arc::new(Notify::new());
            done.notify_one();
            let later = Instant::now() + hour;
            let meter = tokio::spawn(meter_cpu(later, later + hour, done));
            let cpu = tokio::time::timeout(Duration::from_secs(60), meter)
                .await
                .expect("the meter waited for a window the clients never saw")
                .unwrap();
            assert_eq!(cpu, None);
        });
    }

    /// Paced clients spread their first slots over one period, keep their
    /// grid while the node keeps up or they lag it by a timer tick, and
    /// start a new one rather than catch up once they fall far behind.
    #[test]
    fn paced_clients_keep_a_grid_without_bursts() {
        let mut opts = ClientOpts {
            addr: "127.0.0.1:9".parse().unwrap(),
            clients: 4,
            first_id: 1,
            record: 512,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            rate: Some(4000.0),
        };
        let start = Instant::now();
        let ms = Duration::from_millis(1);
        let first = pace(&opts, 0, start).unwrap();
        let last = pace(&opts, 3, start).unwrap();
        assert_eq!(first.period, ms);
        assert_eq!(first.next, start);
        assert_eq!(last.next, start + ms.mul_f64(0.75));

        let mut pace = first;
        // Acknowledged in time: the next slot is one period on.
        pace.advance(start + ms / 10);
        assert_eq!(pace.next, start + ms);
        // Woken a tick late: the grid holds, so the rate does.
        pace.advance(start + ms * 2);
        assert_eq!(pace.next, start + ms * 2);
        // Acknowledged 20 periods late: the grid restarts MAX_LAG behind,
        // so no more than MAX_LAG's worth of sends go at once.
        let late = start + ms * 22;
        pace.advance(late);
        assert_eq!(pace.next, late - MAX_LAG);
        pace.advance(late);
        assert_eq!(pace.next, late - MAX_LAG + ms);

        opts.rate = None;
        assert!(super::pace(&opts, 0, start).is_none());
    }

    /// A record parses back to its client and sequence number.
    #[test]
    fn records_round_trip() {
        let data = record(7, 42, 512);
        assert_eq!(data.len(), 512);
        assert_eq!(parse_record(&data), Some((7, 42)));
        assert_eq!(parse_record(&record(1, 1, HEADER)), Some((1, 1)));
    }

    /// A damaged, truncated or relabelled record does not parse.
    #[test]
    fn damaged_records_are_caught() {
        let data = record(7, 42, 512);
        let mut flipped = data.clone();
        flipped[300] ^= 1;
        assert_eq!(parse_record(&flipped), None);
        let mut relabelled = data.clone();
        relabelled[4] ^= 1;
        assert_eq!(parse_record(&relabelled), None);
        assert_eq!(parse_record(&data[..8]), None);
        assert_ne!(record(7, 42, 64)[HEADER..], record(7, 43, 64)[HEADER..]);
    }

    /// Clients refuse addresses off this machine and absurd record sizes.
    #[test]
    fn checks_options() {
        let mut opts = ClientOpts {
            addr: "10.1.2.3:9".parse().unwrap(),
            clients: 1,
            first_id: 1,
            record: 512,
            warmup: Duration::ZERO,
            duration: Duration::from_millis(10),
            io_timeout: Duration::from_millis(100),
            rate: None,
        };
        assert_eq!(run(&opts).unwrap_err().code(), 2);
        opts.addr = "127.0.0.1:9".parse().unwrap();
        opts.record = 4;
        assert_eq!(run(&opts).unwrap_err().code(), 2);
    }
}
