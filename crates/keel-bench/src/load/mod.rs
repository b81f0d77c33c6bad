//! Load generators and latency probes, run as their own process.
//!
//! They never use keel. A latency probe is a plain blocking thread, so its
//! own wake-ups are not what gets measured; S0's throughput clients drive
//! many connections from one thread on a current-thread tokio runtime,
//! because they must cost the shared cores as little as possible (see
//! [`s0`]). Running them in a separate process keeps their CPU time out of
//! the server's figures.
//! Each prints one JSON line of results ([`summary::ProbeSummary`]) for the
//! harness to read. They only ever target loopback addresses.

pub mod http;
pub mod realtime;
pub mod s0;
pub mod s1;
pub mod s2;
pub mod s3;
pub mod s5;
pub mod summary;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::error::Error;

/// `keel-bench load <scenario>`.
#[derive(Debug, Subcommand)]
pub enum LoadCommand {
    /// S0: closed-loop HTTP/1.1 clients on keep-alive or short
    /// connections, counting requests per second.
    S0(LoadS0Args),
    /// S1: one connection sends a payload on a fixed grid and times each
    /// echo.
    S1(LoadS1Args),
    /// S2: a storm of connections writing small chunks at a fixed pace.
    S2(LoadS2Args),
    /// S2: calls `GET /job` on a fixed grid and times each answer.
    Api(LoadApiArgs),
    /// S5: closed-loop clients that send records to a log node and wait
    /// for each acknowledgement.
    S5(LoadS5Args),
    /// S3: bulk downloads and a connection storm through the proxy, and
    /// the admin probe.
    S3(s3::LoadS3Args),
}

/// Flags of `keel-bench load s0`.
#[derive(Debug, Args)]
pub struct LoadS0Args {
    /// The HTTP service (a loopback address).
    #[arg(long)]
    pub addr: SocketAddr,
    /// keepalive: every connection carries requests back to back; short:
    /// a new connection per request.
    #[arg(long, value_enum)]
    pub mode: s0::S0Mode,
    /// Concurrent connections (keepalive) or clients (short).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// keepalive: seconds of measurement, after the warm-up.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    pub duration_s: f64,
    /// short: requests to make after the warm-up.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub requests: u64,
    /// short: the most seconds the requests may take; the run stops there
    /// and reports what was done.
    #[arg(long, default_value_t = 60.0, value_parser = parse_seconds)]
    pub time_limit_s: f64,
    /// Milliseconds of requests before measuring (not counted).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub warmup_ms: u64,
    /// Client threads the connections are spread over (each drives its
    /// share from one current-thread runtime).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub threads: u64,
    /// Milliseconds a connection may still be waiting after the end before
    /// it is abandoned as an error.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub timeout_ms: u64,
}

/// Flags of `keel-bench load s2`.
#[derive(Debug, Args)]
pub struct LoadS2Args {
    /// The stream service (a loopback address).
    #[arg(long)]
    pub addr: SocketAddr,
    /// Connections.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    pub streams: u64,
    /// Bytes per write.
    #[arg(long, default_value_t = 1460, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub chunk: u64,
    /// Total megabytes (10^6 bytes) per second over all connections.
    #[arg(long, default_value_t = 40.0, value_parser = parse_rate)]
    pub rate_mb: f64,
    /// Seconds to write.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    pub duration_s: f64,
}

/// Flags of `keel-bench load api`.
#[derive(Debug, Args)]
pub struct LoadApiArgs {
    /// The API service (a loopback address).
    #[arg(long)]
    pub addr: SocketAddr,
    /// Milliseconds between calls (an absolute grid).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub interval_ms: u64,
    /// Seconds of measurement, after the warm-up.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Milliseconds of calls before measuring (not recorded).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub warmup_ms: u64,
    /// Run the probe at real-time priority (`SCHED_FIFO`), or the best
    /// nice level allowed; the result says which it got.
    #[arg(long)]
    pub realtime: bool,
}

/// Parses a rate in MB/s: finite, positive, at most 10 GB/s.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    parse_bounded(text, "MB/s", 10_000.0)
}

/// Flags of `keel-bench load s5`.
#[derive(Debug, Args)]
pub struct LoadS5Args {
    /// The log service (a loopback address).
    #[arg(long)]
    pub addr: SocketAddr,
    /// Concurrent clients, each with one record in flight.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: u32,
    /// Id of the first client (the others follow), so that runs against
    /// one log can be told apart.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000_000))]
    pub first_id: u32,
    /// Bytes per record.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(12..=1_048_576))]
    pub record: u64,
    /// Seconds of measurement, after the warm-up.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Milliseconds of records before measuring (not counted).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub warmup_ms: u64,
    /// Milliseconds a connect, send or acknowledgement may take before the
    /// client stops with an error.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub timeout_ms: u64,
    /// Records per second all clients together send at most; each client
    /// still waits for its acknowledgement before the next record. Unset:
    /// a closed loop, each record sent as soon as the last is acknowledged.
    #[arg(long, value_parser = parse_records_per_s)]
    pub rate: Option<f64>,
}

/// Parses a record rate: finite, positive, at most ten million a second.
fn parse_records_per_s(text: &str) -> Result<f64, String> {
    parse_bounded(text, "records/s", 10_000_000.0)
}

/// Flags of `keel-bench load s1`.
#[derive(Debug, Args)]
pub struct LoadS1Args {
    /// The echo server to probe (a loopback address).
    #[arg(long)]
    pub addr: SocketAddr,
    /// Microseconds between sends (an absolute grid).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub interval_us: u64,
    /// Seconds of measurement, after the warm-up.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Bytes per send.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=65_536))]
    pub payload: u64,
    /// Milliseconds of sends before measuring (not recorded).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub warmup_ms: u64,
    /// Milliseconds a connect, send or receive may take before it counts
    /// as an error.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub timeout_ms: u64,
    /// Run the probe at real-time priority (`SCHED_FIFO`), or the best
    /// nice level allowed; the result says which it got.
    #[arg(long)]
    pub realtime: bool,
}

/// Parses a duration in seconds: finite, positive, at most an hour.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    parse_bounded(text, "seconds", 3600.0)
}

/// Parses a number of `unit`: finite, more than 0, at most `max`.
fn parse_bounded(text: &str, unit: &str, max: f64) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of {unit}"))?;
    if !value.is_finite() || value <= 0.0 || value > max {
        return Err(format!(
            "{text} must be more than 0 and at most {max} {unit}"
        ));
    }
    Ok(value)
}

/// Runs `keel-bench load ...` and prints its JSON line.
pub fn run(command: &LoadCommand) -> Result<(), Error> {
    match command {
        LoadCommand::S0(args) => {
            let opts = s0::HttpLoadOpts {
                addr: args.addr,
                mode: args.mode,
                connections: usize::try_from(args.connections).unwrap_or(60),
                threads: usize::try_from(args.threads).unwrap_or(1),
                warmup: Duration::from_millis(args.warmup_ms),
                duration: Duration::from_secs_f64(args.duration_s),
                requests: args.requests,
                time_limit: Duration::from_secs_f64(args.time_limit_s),
                io_timeout: Duration::from_millis(args.timeout_ms),
            };
            let summary = s0::run(&opts).map_err(|e| e.context("load s0"))?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(())
        }
        LoadCommand::S1(args) => {
            let opts = s1::ProbeOpts {
                addr: args.addr,
                interval: Duration::from_micros(args.interval_us),
                duration: Duration::from_secs_f64(args.duration_s),
                warmup: Duration::from_millis(args.warmup_ms),
                payload: usize::try_from(args.payload).unwrap_or(64),
                io_timeout: Duration::from_millis(args.timeout_ms),
                realtime: args.realtime,
            };
            let summary = s1::probe(&opts).map_err(|e| e.context("load s1"))?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(())
        }
        LoadCommand::S2(args) => {
            let opts = s2::StormOpts {
                addr: args.addr,
                streams: usize::try_from(args.streams).unwrap_or(300),
                chunk: usize::try_from(args.chunk).unwrap_or(1460),
                rate: args.rate_mb * 1e6,
                duration: Duration::from_secs_f64(args.duration_s),
                io_timeout: Duration::from_secs(5),
            };
            let ready = |connected| {
                let line = serde_json::to_string(&s2::StormReady { connected })
                    .unwrap_or_else(|_| String::from("{}"));
                println!("{line}");
            };
            let summary = s2::storm(&opts, ready).map_err(|e| e.context("load s2"))?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(())
        }
        LoadCommand::Api(args) => {
            let opts = s2::ApiOpts {
                addr: args.addr,
                interval: Duration::from_millis(args.interval_ms),
                duration: Duration::from_secs_f64(args.duration_s),
                warmup: Duration::from_millis(args.warmup_ms),
                io_timeout: Duration::from_secs(10),
                realtime: args.realtime,
            };
            let summary = s2::api(&opts).map_err(|e| e.context("load api"))?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(())
        }
        LoadCommand::S5(args) => {
            let opts = s5::ClientOpts {
                addr: args.addr,
                clients: args.clients,
                first_id: args.first_id,
                record: usize::try_from(args.record).unwrap_or(512),
                warmup: Duration::from_millis(args.warmup_ms),
                duration: Duration::from_secs_f64(args.duration_s),
                io_timeout: Duration::from_millis(args.timeout_ms),
                rate: args.rate,
            };
            let summary = s5::run(&opts).map_err(|e| e.context("load s5"))?;
            println!("{}", serde_json::to_string(&summary)?);
            Ok(())
        }
        LoadCommand::S3(args) => s3::command(args),
    }
}

/// Runs `op`, or fails with `TimedOut` once `limit` has passed.
pub(crate) async fn within<T>(
    limit: Duration,
    op: impl Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    match tokio::time::timeout(limit, op).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no progress in {limit:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds must be positive, finite and bounded.
    #[test]
    fn seconds_are_validated() {
        assert_eq!(parse_seconds("1.5"), Ok(1.5));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("inf").is_err());
        assert!(parse_seconds("NaN").is_err());
        assert!(parse_seconds("ten").is_err());
        assert!(parse_seconds("7200").is_err());
    }

    /// Rates are bounded the same way, each in its unit.
    #[test]
    fn rates_are_validated() {
        assert_eq!(parse_rate("40"), Ok(40.0));
        assert!(parse_rate("20000").unwrap_err().contains("MB/s"));
        assert_eq!(parse_records_per_s("9000"), Ok(9000.0));
        assert!(parse_records_per_s("0").is_err());
        assert!(parse_records_per_s("1e8")
            .unwrap_err()
            .contains("records/s"));
    }
}
