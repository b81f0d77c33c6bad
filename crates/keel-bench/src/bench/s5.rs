//! S5, fsync must not hurt the network: a log node under group commit.
//!
//! Eight closed-loop clients append 512-byte records to a log node and
//! wait for each acknowledgement, which the node sends only once the
//! record is durable; meanwhile the S1 probe pings the node's echo
//! service. Each round measures, per runtime, the ping with no log load
//! (idle), then per durability mode the ping and the record rate under
//! load, with the eight clients and again with 64. keel runs `wal::Log`;
//! tokio runs its three usual designs (`spawn_blocking` per record, a
//! hand-built group committer, and the sync inside the task). Last, each
//! runtime's group commit runs once more with the eight clients paced to
//! the same record rate, [`PACE_SHARE`] of the slower group commit's
//! closed-loop rate in that round: a closed loop loads the quicker node
//! more (keel acknowledged twice tokio's records on 2026-11-27), so the
//! ping's p99 of the two nodes is compared at that equal load.
//!
//! The record rate is judged against what a closed loop can reach. A
//! client sends its next record only once the last one is acknowledged,
//! so each of `n` clients gets at most one record per sync plus one
//! network round; and the clients share one load thread, which sends the
//! next batch's records one turn apart. The ceiling is
//! `n / (sync + round trip + (n - 1) × turn)`, with the sync the disk's
//! own latency for a write + `fdatasync` of the batch the log committed
//! per sync in that phase (measured in the same directory right after
//! it, each sync followed by the round trip and the turns, as the loop
//! spaces them: see [`closed_loop_gap`] and `disk`), the round trip the
//! quicker of the node's idle and loaded ping p50
//! in the same round, and the turn the load thread's CPU time per record.
//! With many clients, a sync carries only some of them and the others'
//! turns overlap it, so that phase's ceiling leaves the turns out.
//! With 8 clients on this kind of disk the round trip is as long as the
//! sync; with 64, each commit carries tens of records, and the batch's
//! write is part of the sync's cost. The rate is not judged against
//! tokio's: its per-record design gets several records per sync anyway,
//! since concurrent `fdatasync`s of one file coalesce in the kernel, and
//! a closed loop cannot pass its ceiling, so a multiple of tokio's rate
//! may be out of reach however good the log is.
//!
//! The echo service stamps its answers (see [`crate::serve::stamp`]), so
//! the ping's verdicts are judged on the node's share of each round trip;
//! the end-to-end figures are reported beside them. Rounds interleave
//! runtimes and modes and alternate their order; figures are medians
//! across rounds, and each verdict is judged on its per-round ratios (see
//! [`super::judge`]). `--crash N` runs the durability check instead (see
//! [`super::crash`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use super::charts::{self, Chart};
use super::disk::{self, SyncLatency};
use super::idle_exit;
use super::noise::Noise;
use super::outcome::{
    find_metric, ring_over_epoll, why_missing, Goal, Outcome, Pairs, RunFigures, Verdict,
};
use super::phase::{mark, SERVER_SILENCE};
use super::placement::Role;
use super::progress::PhaseBar;
use super::scenario::{self, Scenario};
use super::stats::ratio;
use super::RunSpec;
use crate::error::{Context, Error};
use crate::load::realtime::ProbeScheduling;
use crate::load::s5::LogLoadSummary;
use crate::load::summary::ProbeSummary;
use crate::load::summary::Quantiles;
use crate::serve::control::{AddrLine, Mark};
use crate::serve::s5::LogMode;
use crate::serve::RuntimeKind;

/// What the scenario measures, for the table.
const TITLE: &str = "fsync must not hurt the network";

/// How long a node runs before measuring starts.
const SETTLE: Duration = Duration::from_millis(200);

/// The sizes and setup of one S5 run.
#[derive(Debug, Clone)]
pub struct S5Config {
    /// What every scenario run shares.
    pub run: RunSpec,
    /// Closed-loop log clients of the first loaded phase.
    pub clients: u32,
    /// Closed-loop log clients of the second loaded phase, where batching
    /// is the limit.
    pub many_clients: u32,
    /// Bytes per record.
    pub record: u64,
    /// Ping interval, µs.
    pub interval_us: u64,
    /// Where logs are written (on a real disk); emptied per phase.
    pub data_dir: PathBuf,
    /// `fdatasync` calls the disk probe times.
    pub sync_samples: usize,
    /// Keep the CPUs out of halt while S5 runs (see [`super::idle_exit`]).
    pub hold_idle_exit: bool,
}

/// The durability modes a runtime runs in S5.
pub fn modes(runtime: RuntimeKind) -> &'static [LogMode] {
    match runtime {
        RuntimeKind::Keel | RuntimeKind::KeelUring => &[LogMode::Group],
        RuntimeKind::Tokio => &[LogMode::PerRecord, LogMode::Group, LogMode::Inline],
        // No S5 server (see `serve::monoio`).
        RuntimeKind::Monoio => &[],
    }
}

/// One phase's figures with where it sat in the run.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRecord {
    /// Round number, from 1.
    round: u32,
    /// The node's runtime.
    runtime: RuntimeKind,
    /// `None` for the idle phase (no log load).
    mode: Option<LogMode>,
    /// Log clients (0 for the idle phase).
    clients: u32,
    /// The record rate the clients were paced to; `None` for a closed
    /// loop.
    paced_rate: Option<f64>,
    /// The ping probe's results.
    ping: ProbeSummary,
    /// The log clients' results (loaded phases).
    log: Option<LogLoadSummary>,
    /// Records acknowledged per `fdatasync`, from the node's counters.
    records_per_sync: f64,
    /// keel's log: the microseconds its writer spent writing and syncing
    /// a batch, on average over the phase (its own `LogStats`).
    log_batch_us: Option<LogBatchTimes>,
    /// Loaded phases: what a write + `fdatasync` of that many records
    /// (rounded, at least one) cost the disk, measured right after the
    /// phase in its directory.
    batch_sync: Option<BatchSync>,
    /// Node process CPU seconds between the marks.
    cpu_s: f64,
    /// CPUs the node may run on.
    cpus: usize,
    /// Seconds between the marks.
    window_s: f64,
    /// The host's noise between the marks.
    noise: Noise,
}

/// keel-uring's records/s over keel's on epoll, the first phase's clients:
/// at least (no worse). Linux runs a file sync submitted to a ring on a
/// kernel worker thread (`fsync` always needs a blocking context), so the
/// ring keeps a thread hand-off per batch as the epoll writer thread
/// does; docs/scenarios.md has the trace.
const RING_RECORDS_OVER_EPOLL: f64 = 1.0;

/// keel-uring's server ping, loaded p99 over idle p99: at most.
const RING_PING_STRETCH: f64 = 1.5;

/// Records/s over the closed-loop ceiling, keel with the first phase's
/// clients: at least.
pub const CEILING_SHARE: f64 = 0.9;

/// The paced phase's record rate, over the slower closed-loop group
/// commit of the round (8 clients): low enough that both nodes reach it
/// whatever the round's spread, high enough to keep the log busy.
pub const PACE_SHARE: f64 = 0.8;

/// The share of the paced rate a node must reach for its phase to count
/// as equally loaded: below it, the ping verdict at equal load has no
/// value for that round.
pub const PACE_REACHED: f64 = 0.95;

/// Records/s keel over tokio's group committer, with many clients: at
/// least.
///
/// With 64 clients the closed loop's ceiling is not the limit on a small
/// machine: on 2026-11-25 keel's node acknowledged 106,215 records/s (39
/// a sync) against a ceiling of 172,824, its one CPU 78% busy at 7.3 µs
/// a record, while the 64 clients on the other CPU made their round trips
/// longer than the idle probe's. What neither the disk nor the node
/// bounds there is the load generator, which both runtimes share: the
/// verdict compares keel with tokio running the same group commit
/// beside the same clients, and the ceiling ratio is reported.
pub const GROUP_SHARE_MANY: f64 = 1.0;

/// The disk's cost of syncing one phase's batch.
#[derive(Debug, Clone, Serialize)]
pub struct BatchSync {
    /// Records per batch.
    records: u32,
    /// The time the probe left between a sync and the next write, µs
    /// (see [`closed_loop_gap`]).
    gap_us: f64,
    /// The write + `fdatasync` latency of that many records' bytes, each
    /// sync followed by the gap.
    latency: SyncLatency,
    /// Where the gap is not nil, the same syncs back to back, timed just
    /// before: what the ceiling would be built on without the gap.
    back_to_back: Option<SyncLatency>,
}

/// Syncs the batch probe times after each loaded phase: enough for the
/// mean of a spaced probe's long tail, in well under its budget.
const BATCH_SYNC_SAMPLES: usize = 1000;

/// The most time the batch probe takes after a phase.
const BATCH_SYNC_BUDGET: Duration = Duration::from_secs(2);

/// The longest gap the batch probe leaves between syncs, µs: a loop's
/// round trip and turns come to about 100 µs, and a figure far beyond
/// that (a stalled phase) would leave the probe few syncs in its budget.
const MAX_PROBE_GAP_US: f64 = 10_000.0;

/// The name of a loaded run: the mode, with the client count when it is
/// not the first phase's (`group`, `group-64`), and `-paced` for the paced
/// phase (`group-paced`).
fn run_mode(mode: LogMode, clients: u32, paced: bool, config: &S5Config) -> String {
    let mut name = mode.to_string();
    if clients != config.clients {
        name.push_str(&format!("-{clients}"));
    }
    if paced {
        name.push_str("-paced");
    }
    name
}

/// One phase of S5: the node's runtime, its durability mode (`None`:
/// idle, no log load), its log clients (0 when idle), and whether they are
/// paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phase {
    /// The node's runtime.
    runtime: RuntimeKind,
    /// Its durability mode; `None` for the idle phase.
    mode: Option<LogMode>,
    /// Log clients (0 when idle).
    clients: u32,
    /// Whether the clients are paced to the round's rate.
    paced: bool,
}

/// The client counts of the loaded phases, first phase first.
fn client_counts(config: &S5Config) -> Vec<u32> {
    let mut counts = vec![config.clients];
    if config.many_clients != config.clients {
        counts.push(config.many_clients);
    }
    counts
}

/// S5 ready to run: its sizes, the disk's own sync latency, and what was
/// found out about the disk on the way.
#[derive(Debug, Clone)]
pub struct S5 {
    /// The sizes and setup.
    config: S5Config,
    /// The disk's `fdatasync` latency in the data directory.
    sync: SyncLatency,
    /// Notes about the disk (a tmpfs data directory), first in the
    /// outcome's notes.
    notes: Vec<String>,
    /// Per round, the closed-loop group commits' record rates (first
    /// phase's clients), from which the paced phase takes its rate.
    group_rates: Arc<Mutex<BTreeMap<u32, Vec<f64>>>>,
    /// Whether the CPUs were kept out of halt (for the sizes).
    idle_exit_held: bool,
}

/// Runs S5's performance phases and judges them.
pub fn run(config: &S5Config) -> Result<Outcome, Error> {
    std::fs::create_dir_all(&config.data_dir)
        .context(|| format!("creating {}", config.data_dir.display()))?;
    let mut notes = Vec::new();
    // Held until S5 returns.
    let idle_exit = config.hold_idle_exit.then(idle_exit::hold);
    let halt_note =
        "the ping includes the CPU's exit from halt, which falls on whichever node idles more";
    notes.push(match &idle_exit {
        Some(Ok(_)) => {
            "the CPUs were kept out of halt while S5 ran (0 us on /dev/cpu_dma_latency)".to_string()
        }
        Some(Err(why)) => format!("the CPUs could halt while S5 ran ({why}): {halt_note}"),
        None => format!("the CPUs could halt while S5 ran (--s5-allow-halt): {halt_note}"),
    });
    let idle_exit_held = matches!(idle_exit, Some(Ok(_)));
    if disk::is_tmpfs(&config.data_dir)? {
        notes.push(format!(
            "{} is on tmpfs: syncs cost nothing there and the figures say nothing about a disk",
            config.data_dir.display()
        ));
    }
    let sync = disk::sync_latency(
        &config.data_dir,
        usize::try_from(config.record).unwrap_or(usize::MAX),
        config.sync_samples,
        Duration::ZERO,
        Duration::from_secs(10),
        &config.run.placement.server,
    )?;
    eprintln!(
        "s5: the disk syncs {} bytes in {:.0} us (median of {}, p99 {:.0} us)",
        config.record, sync.p50_us, sync.samples, sync.p99_us
    );
    let outcome = scenario::run(&S5 {
        config: config.clone(),
        sync,
        notes,
        group_rates: Arc::default(),
        idle_exit_held,
    })?;
    let _ = std::fs::remove_dir_all(&config.data_dir);
    Ok(outcome)
}

impl Scenario for S5 {
    type Phase = Phase;
    type Record = PhaseRecord;
    const ID: &'static str = "s5";
    const TITLE: &'static str = TITLE;

    fn spec(&self) -> &RunSpec {
        &self.config.run
    }

    /// Every runtime idle, then per client count every runtime's modes,
    /// then every runtime's group commit paced.
    fn stages(&self) -> Vec<Vec<Self::Phase>> {
        let runtimes = &self.config.run.runtimes;
        let phase = |runtime, mode, clients, paced| Phase {
            runtime,
            mode,
            clients,
            paced,
        };
        let mut stages = vec![runtimes.iter().map(|&r| phase(r, None, 0, false)).collect()];
        for clients in client_counts(&self.config) {
            stages.push(
                runtimes
                    .iter()
                    .flat_map(|&r| {
                        modes(r)
                            .iter()
                            .map(move |&m| phase(r, Some(m), clients, false))
                    })
                    .collect(),
            );
        }
        stages.push(
            runtimes
                .iter()
                .map(|&r| phase(r, Some(LogMode::Group), self.config.clients, true))
                .collect(),
        );
        stages
    }

    fn phase_name(&self, phase: Self::Phase) -> String {
        format!("{} {}", phase.runtime, what(phase, &self.config))
    }

    fn expected(&self, _: Self::Phase) -> Duration {
        SETTLE + self.config.run.window()
    }

    /// Measures the phase in a log directory of its own, removed before
    /// and after.
    fn measure(
        &self,
        round: u32,
        phase: Self::Phase,
        bar: &PhaseBar,
    ) -> Result<PhaseRecord, Error> {
        let rate = if phase.paced {
            Some(self.paced_rate(round)?)
        } else {
            None
        };
        let dir = self.config.data_dir.join(format!(
            "r{round}-{}-{}",
            phase.runtime,
            what(phase, &self.config)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let result = measure(&self.config, phase, rate, &dir, bar).map(|m| PhaseRecord {
            round,
            runtime: phase.runtime,
            mode: phase.mode,
            clients: phase.clients,
            paced_rate: rate,
            ..m
        });
        let _ = std::fs::remove_dir_all(&dir);
        let record = result?;
        if phase.mode == Some(LogMode::Group)
            && phase.clients == self.config.clients
            && !phase.paced
        {
            if let Some(log) = &record.log {
                self.group_rates
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(round)
                    .or_default()
                    .push(log.records_per_s);
            }
        }
        Ok(record)
    }

    fn summary(&self, record: &PhaseRecord) -> String {
        let rate = record.log.as_ref().map_or(0.0, |l| l.records_per_s);
        let server_p99 = record.ping.server.as_ref().map_or(f64::NAN, |q| q.p99_us);
        format!(
            "ping p50 {:>8.1} us  p99 {:>8.1} us  server p99 {server_p99:>8.1} us  records/s {rate:>8.0}  per sync {:>5.1}  cpu {:.2} s",
            record.ping.p50_us,
            record.ping.p99_us,
            record.records_per_sync,
            record.cpu_s,
        )
    }

    fn round_of(record: &PhaseRecord) -> u32 {
        record.round
    }

    fn noise_of(record: &PhaseRecord) -> Noise {
        record.noise
    }

    /// Per runtime, mode and client count with its idle and loaded phases
    /// in the round, its metrics; then the disk's own column.
    fn round_runs(&self, records: &[&PhaseRecord]) -> Vec<RunFigures> {
        let config = &self.config;
        let find = |runtime: RuntimeKind, mode: Option<LogMode>, clients: u32, paced: bool| {
            records.iter().find(|r| {
                r.runtime == runtime
                    && r.mode == mode
                    && r.clients == clients
                    && r.paced_rate.is_some() == paced
            })
        };
        let mut runs = Vec::new();
        for clients in client_counts(config) {
            for &runtime in &config.run.runtimes {
                for &mode in modes(runtime) {
                    if let (Some(idle), Some(loaded)) = (
                        find(runtime, None, 0, false),
                        find(runtime, Some(mode), clients, false),
                    ) {
                        runs.push(RunFigures {
                            runtime: runtime.to_string(),
                            mode: run_mode(mode, clients, false, config),
                            metrics: Pairs(round_metrics(
                                idle,
                                loaded,
                                &self.sync,
                                clients == config.clients,
                            )),
                        });
                    }
                }
            }
        }
        for &runtime in &config.run.runtimes {
            let group = Some(LogMode::Group);
            if let (Some(idle), Some(paced)) = (
                find(runtime, None, 0, false),
                find(runtime, group, config.clients, true),
            ) {
                runs.push(RunFigures {
                    runtime: runtime.to_string(),
                    mode: run_mode(LogMode::Group, config.clients, true, config),
                    metrics: Pairs(paced_metrics(idle, paced, &self.sync)),
                });
            }
        }
        runs.push(disk_run(&self.sync, config.clients));
        runs
    }

    fn verdicts(&self, runs: &[RunFigures]) -> Vec<Verdict> {
        verdicts(runs, &self.config.run.runtimes, self.config.many_clients)
    }

    /// The disk's notes, then failed pings.
    fn check(&self, records: &[PhaseRecord]) -> (Vec<String>, Vec<String>) {
        let mut notes = self.notes.clone();
        for record in records {
            if record.ping.errors > 0 {
                notes.push(format!(
                    "round {} {} {}: {} pings failed",
                    record.round,
                    record.runtime,
                    record.mode.map_or("idle", LogMode::name),
                    record.ping.errors
                ));
            }
        }
        (check(records), notes)
    }

    fn sizes(&self) -> Vec<(&'static str, serde_json::Value)> {
        let config = &self.config;
        vec![
            ("clients", json!(config.clients)),
            ("many_clients", json!(config.many_clients)),
            ("record_bytes", json!(config.record)),
            ("interval_us", json!(config.interval_us)),
            ("data_dir", json!(config.data_dir)),
            ("cpus_kept_out_of_halt", json!(self.idle_exit_held)),
        ]
    }

    fn schedulings(record: &PhaseRecord) -> Vec<Option<&ProbeScheduling>> {
        vec![record.ping.scheduling.as_ref()]
    }

    /// The disk's sync latency beside every phase.
    fn rounds_json(&self, records: &[PhaseRecord]) -> Result<serde_json::Value, Error> {
        Ok(json!({"sync": self.sync, "phases": records}))
    }

    fn charts(&self, records: &[PhaseRecord]) -> Vec<Chart> {
        vec![charts::latency_lines(
            "latency",
            "S5: ping RTT over time, idle and under log load (round 1)".into(),
            records
                .iter()
                .filter(|r| {
                    r.round == 1
                        && r.paced_rate.is_none()
                        && (r.mode.is_none() || r.clients == self.config.clients)
                })
                .map(|r| {
                    let what = r.mode.map_or("idle", LogMode::name);
                    (format!("{} {what}", r.runtime), r.ping.series.as_slice())
                })
                .collect(),
        )]
    }
}

impl S5 {
    /// The paced phase's record rate in `round`: [`PACE_SHARE`] of the
    /// slowest closed-loop group commit the round measured.
    fn paced_rate(&self, round: u32) -> Result<f64, Error> {
        let rates = self
            .group_rates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rates
            .get(&round)
            .and_then(|r| r.iter().copied().filter(|r| *r > 0.0).reduce(f64::min))
            .map(|slowest| slowest * PACE_SHARE)
            .ok_or_else(|| {
                Error::new(format!(
                    "round {round} has no closed-loop group commit to pace the clients by"
                ))
            })
    }
}

/// What a phase is called after its runtime: `idle`, or its run's mode.
fn what(phase: Phase, config: &S5Config) -> String {
    match phase.mode {
        None => "idle".to_string(),
        Some(mode) => run_mode(mode, phase.clients, phase.paced, config),
    }
}

/// The disk's figures as a column of the table.
fn disk_run(sync: &SyncLatency, clients: u32) -> RunFigures {
    RunFigures {
        runtime: "disk".into(),
        mode: "raw".into(),
        metrics: Pairs(vec![
            ("raw_fdatasync_us", sync.p50_us),
            ("raw_fdatasync_p99_us", sync.p99_us),
            ("limit_records_per_s", sync_limit(sync, clients)),
        ]),
    }
}

/// The most records per second `clients` clients could get acknowledged
/// if each got one record into every sync with no time between syncs: an
/// open-loop bound, above the closed-loop [`ceiling`].
fn sync_limit(sync: &SyncLatency, clients: u32) -> f64 {
    ratio(Some(f64::from(clients)), Some(sync.p50_us / 1e6)).unwrap_or(f64::NAN)
}

/// The most records per second `clients` closed-loop clients can get
/// acknowledged when every record of a cycle rides one sync.
///
/// A cycle is the batch's write and sync (`sync_us`), one network round
/// (`round_trip_us`) for the first acknowledgement to come back and its
/// client's next record to reach the node, and then `turn_us` for each
/// other client: the clients share one thread, which answers the
/// acknowledgements one after another, so the last record of the next
/// batch leaves it `(clients - 1)` turns after the first. With `turn_us`
/// zero this is the bound of clients answered all at once.
pub fn ceiling(clients: u32, sync_us: f64, round_trip_us: f64, turn_us: f64) -> f64 {
    let turns = f64::from(clients.saturating_sub(1)) * turn_us;
    ratio(
        Some(f64::from(clients)),
        Some((sync_us + round_trip_us + turns) / 1e6),
    )
    .unwrap_or(f64::NAN)
}

/// Measures one phase: a fresh node logging in `dir`, the ping probe,
/// and (with a mode) the log clients at the same time. Children are
/// killed on any early return.
fn measure(
    config: &S5Config,
    phase: Phase,
    rate: Option<f64>,
    dir: &Path,
    bar: &PhaseBar,
) -> Result<PhaseRecord, Error> {
    let Phase {
        runtime,
        mode,
        clients,
        ..
    } = phase;
    bar.step("starting the node");
    let node_mode = mode.unwrap_or(LogMode::Group);
    let mut node = config.run.spawn(
        Role::Server,
        format!("keel serve s5 ({runtime} {node_mode})"),
        &node_args(runtime, node_mode, config.run.workers, dir),
    )?;
    let tick = || bar.tick();
    let addrs: AddrLine = node.recv_json(SERVER_SILENCE, "its address", tick)?;
    let log_addr = addrs.log_addr.ok_or_else(|| {
        Error::new(format!(
            "{} did not say where its log service is",
            node.name()
        ))
    })?;
    std::thread::sleep(SETTLE);

    let mut load = match mode {
        Some(_) => {
            let mut args: Vec<String> = vec![
                "load".into(),
                "s5".into(),
                "--addr".into(),
                log_addr.to_string(),
                "--clients".into(),
                clients.to_string(),
                "--record".into(),
                config.record.to_string(),
                "--duration-s".into(),
                config.run.duration_s.to_string(),
                "--warmup-ms".into(),
                config.run.warmup_ms.to_string(),
            ];
            if let Some(rate) = rate {
                args.extend(["--rate".into(), format!("{rate:.1}")]);
            }
            Some(config.run.spawn(Role::Load, "keel load s5", &args)?)
        }
        None => None,
    };
    bar.step("pinging");
    let mut ping = config.run.spawn(
        Role::Load,
        "keel load s1",
        &config.run.probe_args(vec![
            "load".into(),
            "s1".into(),
            "--addr".into(),
            addrs.addr.to_string(),
            "--interval-us".into(),
            config.interval_us.to_string(),
            "--duration-s".into(),
            config.run.duration_s.to_string(),
            "--warmup-ms".into(),
            config.run.warmup_ms.to_string(),
        ]),
    )?;
    std::thread::sleep(Duration::from_millis(config.run.warmup_ms));
    let start = mark(&mut node, bar)?;

    let budget = Duration::from_secs_f64(config.run.duration_s) + Duration::from_secs(20);
    let ping_summary: ProbeSummary = ping.recv_json(budget, "its results", tick)?;
    let log = match load.as_mut() {
        Some(load) => Some(load.recv_json::<LogLoadSummary>(budget, "its results", tick)?),
        None => None,
    };
    let end = mark(&mut node, bar)?;
    bar.step("stopping");
    node.send_line("stop")?;
    let _ = node.finish(Duration::from_secs(5))?;
    for child in [Some(&mut ping), load.as_mut()].into_iter().flatten() {
        child.finish_clean(Duration::from_secs(5))?;
    }

    let measured = start.to(&end, &config.run.placement.server);
    let counter = |mark: &Mark, name: &str| mark.runtime["log"][name].as_f64().unwrap_or(f64::NAN);
    // How much a log counter grew between the marks.
    let grown = |name: &str| counter(&end.mark, name) - counter(&start.mark, name);
    let syncs = grown("syncs");
    let records_per_sync = ratio(Some(grown("acked")), Some(syncs)).unwrap_or(f64::NAN);
    let per_sync_us =
        |name: &str| ratio(Some(grown(name) * 1e6), Some(syncs)).filter(|us| us.is_finite());
    let regroups_expired_pct = ratio(
        Some(grown("regroups_expired") * 100.0),
        Some(grown("regroups")),
    )
    .unwrap_or(f64::NAN);
    let log_batch_us = per_sync_us("write_s")
        .zip(per_sync_us("sync_s"))
        .map(|(write, sync)| LogBatchTimes {
            write,
            sync,
            regroups_expired_pct,
        });
    let batch_sync = match mode {
        Some(_) if records_per_sync.is_finite() => {
            bar.step("timing the batch's sync");
            // A float to integer cast saturates; a batch is at least one.
            let records = (records_per_sync.round() as u32).max(1);
            let bytes = u64::from(records) * config.record;
            let gap = closed_loop_gap(
                clients == config.clients && rate.is_none(),
                ping_summary.p50_us,
                log.as_ref(),
                clients,
            );
            let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            let probe = |gap| {
                disk::sync_latency(
                    dir,
                    bytes,
                    BATCH_SYNC_SAMPLES,
                    gap,
                    BATCH_SYNC_BUDGET,
                    &config.run.placement.server,
                )
            };
            let back_to_back = if gap.is_zero() {
                None
            } else {
                Some(probe(Duration::ZERO)?)
            };
            Some(BatchSync {
                records,
                gap_us: gap.as_secs_f64() * 1e6,
                latency: probe(gap)?,
                back_to_back,
            })
        }
        _ => None,
    };
    Ok(PhaseRecord {
        round: 0,
        runtime,
        mode,
        clients,
        paced_rate: rate,
        ping: ping_summary,
        log,
        records_per_sync,
        log_batch_us,
        batch_sync,
        cpu_s: measured.cpu_s,
        cpus: config.run.placement.server.len(),
        window_s: measured.window_s,
        noise: measured.noise,
    })
}

/// How long the batch probe leaves the disk alone between a sync and the
/// next write: what the phase's closed loop leaves it, the round trip
/// (the loaded ping's p50, `round_trip_us`) and the other clients'
/// turns on the load thread, where every client rides each sync
/// (`one_batch`, an unpaced phase of the first client count); none
/// otherwise (with many clients the next batch's records arrive during
/// the sync, and a paced loop leaves its own gaps). Unknown figures leave
/// no gap.
fn closed_loop_gap(
    one_batch: bool,
    round_trip_us: f64,
    log: Option<&LogLoadSummary>,
    clients: u32,
) -> Duration {
    if !one_batch {
        return Duration::ZERO;
    }
    let gap_us = round_trip_us + f64::from(clients.saturating_sub(1)) * client_turn_us(log);
    if gap_us.is_finite() && gap_us > 0.0 {
        Duration::from_secs_f64(gap_us.min(MAX_PROBE_GAP_US) / 1e6)
    } else {
        Duration::ZERO
    }
}

/// The load thread's CPU time per acknowledged record, µs: one client's
/// turn (read an acknowledgement, send the next record). NaN where the
/// load did not report its CPU.
fn client_turn_us(log: Option<&LogLoadSummary>) -> f64 {
    let client_cpu_s = log.and_then(|l| l.cpu_s).unwrap_or(f64::NAN);
    let acked = log.map_or(f64::NAN, |l| l.acked as f64);
    ratio(Some(client_cpu_s * 1e6), Some(acked)).unwrap_or(f64::NAN)
}

/// The arguments of `keel-bench serve s5` for `runtime` in `mode` on `dir`.
pub fn node_args(runtime: RuntimeKind, mode: LogMode, workers: u64, dir: &Path) -> Vec<String> {
    vec![
        "serve".into(),
        "s5".into(),
        "--runtime".into(),
        runtime.to_string(),
        "--mode".into(),
        mode.to_string(),
        "--workers".into(),
        workers.to_string(),
        "--dir".into(),
        dir.display().to_string(),
    ]
}

/// The metrics of one round of one runtime in one mode: its idle phase,
/// its loaded phase, and the disk's sync latency. `one_batch` says the
/// phase's clients all fit one regroup of the log (the first phase), so
/// that their turns on the load thread lengthen each cycle.
fn round_metrics(
    idle: &PhaseRecord,
    loaded: &PhaseRecord,
    sync: &SyncLatency,
    one_batch: bool,
) -> Vec<(&'static str, f64)> {
    let log = loaded.log.as_ref();
    let rate = log.map_or(f64::NAN, |l| l.records_per_s);
    let server =
        |r: &PhaseRecord, q: fn(&Quantiles) -> f64| r.ping.server.as_ref().map_or(f64::NAN, q);
    // The quicker of the idle and the loaded ping's p50: under load a
    // server's workers are awake, and its round trip shorter than idle
    // (keel's 71 µs against 110 µs on 2026-11-25), which is the round a
    // log client makes between an acknowledgement and its next record.
    let round_trip = idle.ping.p50_us.min(loaded.ping.p50_us);
    // The batch's own sync where it was timed, else one record's: the
    // median reported, the mean in the ceiling (a closed loop's rate is
    // its clients over its mean cycle; see `disk`).
    let batch_latency = loaded.batch_sync.as_ref().map_or(sync, |b| &b.latency);
    let batch_sync_us = batch_latency.p50_us;
    let batch_sync_mean_us = batch_latency.mean_us;
    let client_cpu_s = log.and_then(|l| l.cpu_s).unwrap_or(f64::NAN);
    let client_turn_us = client_turn_us(log);
    // With many clients a batch holds only some of them, and the turns of
    // the others overlap the sync: the plain bound is reported there.
    let turn_in_cycle = if one_batch { client_turn_us } else { 0.0 };
    let ceiling = ceiling(
        loaded.clients,
        batch_sync_mean_us,
        round_trip,
        turn_in_cycle,
    );
    let fsyncs_per_s = rate / loaded.records_per_sync;
    let cpu_us_per_record =
        ratio(Some(loaded.cpu_s / loaded.window_s * 1e6), Some(rate)).unwrap_or(f64::NAN);
    let mut metrics = vec![
        ("server_ping_idle_p50_us", server(idle, |q| q.p50_us)),
        ("server_ping_idle_p99_us", server(idle, |q| q.p99_us)),
        ("server_ping_loaded_p50_us", server(loaded, |q| q.p50_us)),
        ("server_ping_loaded_p99_us", server(loaded, |q| q.p99_us)),
        ("ping_idle_p50_us", idle.ping.p50_us),
        ("ping_idle_p99_us", idle.ping.p99_us),
        ("ping_loaded_p50_us", loaded.ping.p50_us),
        ("ping_loaded_p99_us", loaded.ping.p99_us),
        ("ping_loaded_max_us", loaded.ping.max_us),
        ("records_per_s", rate),
        ("ceiling_records_per_s", ceiling),
        (
            "records_over_ceiling",
            ratio(Some(rate), Some(ceiling)).unwrap_or(f64::NAN),
        ),
        ("round_trip_us", round_trip),
        ("client_turn_us", client_turn_us),
        (
            "client_cpu_busy",
            ratio(Some(client_cpu_s), Some(loaded.window_s)).unwrap_or(f64::NAN),
        ),
        ("raw_fdatasync_us", sync.p50_us),
        ("batch_fdatasync_us", batch_sync_us),
        ("batch_fdatasync_mean_us", batch_sync_mean_us),
        (
            "batch_fdatasync_gap_us",
            loaded.batch_sync.as_ref().map_or(0.0, |b| b.gap_us),
        ),
        (
            "batch_records",
            loaded
                .batch_sync
                .as_ref()
                .map_or(f64::NAN, |b| f64::from(b.records)),
        ),
        ("records_per_sync", loaded.records_per_sync),
        ("fsyncs_per_s", fsyncs_per_s),
        ("ack_p50_us", log.map_or(f64::NAN, |l| l.ack.p50_us)),
        ("ack_p99_us", log.map_or(f64::NAN, |l| l.ack.p99_us)),
        ("cpu_s", loaded.cpu_s),
        (
            "node_cpu_busy",
            loaded.cpu_s / (loaded.window_s * loaded.cpus as f64),
        ),
        ("cpu_us_per_record", cpu_us_per_record),
        // One group commit's worth of the node's CPU: the work a ping that
        // arrives with a commit's acknowledgements may wait behind.
        ("commit_cpu_us", cpu_us_per_record * loaded.records_per_sync),
        ("client_errors", log.map_or(f64::NAN, |l| l.errors as f64)),
    ];
    // Where the probe left a gap, the same syncs back to back beside it.
    if let Some(back_to_back) = loaded
        .batch_sync
        .as_ref()
        .and_then(|b| b.back_to_back.as_ref())
    {
        metrics.push(("batch_fdatasync_back_to_back_mean_us", back_to_back.mean_us));
    }
    // keel's log times its own batches: its sync beside the probe's, and
    // what is left of a batch's cycle (one over the syncs a second) once
    // the write and the sync are taken out.
    if let Some(times) = &loaded.log_batch_us {
        let cycle_us = 1e6 / fsyncs_per_s;
        metrics.extend([
            ("log_write_us", times.write),
            ("log_fdatasync_us", times.sync),
            ("log_cycle_us", cycle_us),
            ("log_cycle_rest_us", cycle_us - times.write - times.sync),
            ("log_regroups_expired_pct", times.regroups_expired_pct),
        ]);
    }
    metrics
}

/// The metrics of a paced phase: those of [`round_metrics`] but the
/// closed-loop ceiling's (a paced loop is not meant to reach it), and the
/// rate it was paced to with the share of it the node acknowledged.
fn paced_metrics(
    idle: &PhaseRecord,
    paced: &PhaseRecord,
    sync: &SyncLatency,
) -> Vec<(&'static str, f64)> {
    let mut metrics = round_metrics(idle, paced, sync, true);
    metrics.retain(|(name, _)| !matches!(*name, "ceiling_records_per_s" | "records_over_ceiling"));
    let target = paced.paced_rate.unwrap_or(f64::NAN);
    let rate = paced.log.as_ref().map_or(f64::NAN, |l| l.records_per_s);
    metrics.extend([
        ("paced_records_per_s", target),
        (
            "pace_reached",
            ratio(Some(rate), Some(target)).unwrap_or(f64::NAN),
        ),
    ]);
    metrics
}

/// What keel's log spent writing and syncing a batch, on average, and how
/// often its writer's wait for returning appenders ran out.
#[derive(Debug, Clone, Copy, Serialize)]
struct LogBatchTimes {
    /// Its write (and any zeros written ahead with it), µs.
    write: f64,
    /// Its `fdatasync`, µs.
    sync: f64,
    /// Of the writer's waits for the appenders it had answered, the share
    /// that its window ended before they were all back, %.
    regroups_expired_pct: f64,
}

/// The S5 verdicts, from one round's figures;
/// `many` is the client count of the second loaded phase.
fn verdicts(runs: &[RunFigures], runtimes: &[RuntimeKind], many: u32) -> Vec<Verdict> {
    let metric = |runtime: &str, mode: &str, name: &str| find_metric(runs, runtime, mode, name);
    let missing = |needed: &[RuntimeKind]| why_missing(needed, runtimes);
    let (keel, tokio) = (RuntimeKind::Keel, RuntimeKind::Tokio);
    let both = [keel, tokio];
    let many_group = format!("group-{many}");
    let many_per_record = format!("per-record-{many}");
    let stretch = |runtime: &str, mode: &str, loaded: &str, idle: &str| {
        ratio(metric(runtime, mode, loaded), metric(runtime, mode, idle))
    };
    let server_stretch = |runtime: &str, mode: &str| {
        stretch(
            runtime,
            mode,
            "server_ping_loaded_p99_us",
            "server_ping_idle_p99_us",
        )
    };
    let e2e_stretch = |runtime: &str, mode: &str| {
        stretch(runtime, mode, "ping_loaded_p99_us", "ping_idle_p99_us")
    };
    // The paced runs' ping, only where both nodes took the paced load.
    let reached = |runtime: &str| {
        metric(runtime, "group-paced", "pace_reached").is_some_and(|r| r >= PACE_REACHED)
    };
    let paced_ping = if reached("keel") && reached("tokio") {
        ratio(
            metric("keel", "group-paced", "server_ping_loaded_p99_us"),
            metric("tokio", "group-paced", "server_ping_loaded_p99_us"),
        )
    } else {
        None
    };
    let short_of_pace: Vec<String> = ["keel", "tokio"]
        .into_iter()
        .filter_map(|runtime| {
            let share = metric(runtime, "group-paced", "pace_reached")?;
            (share < PACE_REACHED).then(|| format!("{runtime} took {share:.2}"))
        })
        .collect();
    let why_no_paced_ping = if short_of_pace.is_empty() {
        missing(&both)
    } else {
        format!(
            "{} of the paced rate (at least {PACE_REACHED} judged): \
             pings compare at equal load only",
            short_of_pace.join(" and ")
        )
    };
    // The loaded ping against what one worker allows: the idle ping, plus
    // one commit's node CPU to wait behind.
    let commit_bound = |runtime: &str| {
        let idle = metric(runtime, "group", "server_ping_idle_p99_us")?;
        let commit = metric(runtime, "group", "commit_cpu_us")?;
        ratio(
            metric(runtime, "group", "server_ping_loaded_p99_us"),
            Some(idle + commit),
        )
    };
    let mut out = vec![
        Verdict::new(
            "server ping loaded_p99/(idle_p99 + commit cpu)",
            "keel",
            commit_bound("keel"),
            Some(Goal::AtMost(1.0)),
        )
        .missing_because(missing(&[keel])),
        Verdict::new(
            "server ping loaded_p99/idle_p99",
            "keel",
            server_stretch("keel", "group"),
            None,
        )
        .missing_because(missing(&[keel])),
        Verdict::new(
            "server ping loaded_p99 keel/tokio group, paced",
            "keel",
            paced_ping,
            Some(Goal::AtMost(1.0)),
        )
        .missing_because(why_no_paced_ping),
        Verdict::new(
            "server ping loaded_p99 keel/tokio group",
            "keel",
            ratio(
                metric("keel", "group", "server_ping_loaded_p99_us"),
                metric("tokio", "group", "server_ping_loaded_p99_us"),
            ),
            None,
        )
        .missing_because(missing(&both)),
        Verdict::new(
            "records_per_s keel/tokio per-record",
            "keel",
            ratio(
                metric("keel", "group", "records_per_s"),
                metric("tokio", "per-record", "records_per_s"),
            ),
            None,
        )
        .missing_because(missing(&both)),
        Verdict::new(
            "records_per_s keel/closed-loop ceiling",
            "keel",
            metric("keel", "group", "records_over_ceiling"),
            Some(Goal::AtLeast(CEILING_SHARE)),
        )
        .missing_because(missing(&[keel])),
        Verdict::new(
            "records_per_s keel/tokio group, many clients",
            "keel",
            ratio(
                metric("keel", &many_group, "records_per_s"),
                metric("tokio", &many_group, "records_per_s"),
            ),
            Some(Goal::AtLeast(GROUP_SHARE_MANY)),
        )
        .missing_because(missing(&both)),
        Verdict::new(
            "records_per_s keel/closed-loop ceiling, many clients",
            "keel",
            metric("keel", &many_group, "records_over_ceiling"),
            None,
        )
        .missing_because(missing(&[keel])),
        Verdict::new(
            "records_per_s keel/tokio per-record, many clients",
            "keel",
            ratio(
                metric("keel", &many_group, "records_per_s"),
                metric("tokio", &many_per_record, "records_per_s"),
            ),
            None,
        )
        .missing_because(missing(&both)),
        Verdict::new(
            "end-to-end ping loaded_p99/idle_p99",
            "keel",
            e2e_stretch("keel", "group"),
            None,
        )
        .missing_because(missing(&[keel])),
    ];
    for mode in ["per-record", "group", "inline"] {
        out.push(
            Verdict::new(
                match mode {
                    "per-record" => "server ping loaded_p99/idle_p99 tokio per-record",
                    "group" => "server ping loaded_p99/idle_p99 tokio group",
                    _ => "server ping loaded_p99/idle_p99 tokio inline",
                },
                "tokio",
                server_stretch("tokio", mode),
                None,
            )
            .missing_because(missing(&[tokio])),
        );
    }
    // The ring's own goals: a batch's write and sync linked on the ring
    // and acknowledged on the worker, with no thread between.
    out.push(ring_over_epoll(
        runs,
        runtimes,
        "records_per_s keel-uring/keel",
        "group",
        "records_per_s",
        Some(Goal::AtLeast(RING_RECORDS_OVER_EPOLL)),
    ));
    out.push(
        Verdict::new(
            "server ping loaded_p99/idle_p99, keel-uring",
            "keel-uring",
            server_stretch("keel-uring", "group"),
            Some(Goal::AtMost(RING_PING_STRETCH)),
        )
        .missing_because(missing(&[RuntimeKind::KeelUring])),
    );
    out
}

/// Figures that should exist and do not.
fn check(records: &[PhaseRecord]) -> Vec<String> {
    let mut problems = Vec::new();
    for record in records {
        let at = format!(
            "round {} {} {}",
            record.round,
            record.runtime,
            record.mode.map_or("idle", LogMode::name)
        );
        if record.ping.count == 0 {
            problems.push(format!("{at}: the ping probe recorded no round trips"));
        }
        if let Some(log) = &record.log {
            if log.acked == 0 {
                problems.push(format!("{at}: no record was acknowledged"));
            }
            if log.errors > 0 {
                problems.push(format!(
                    "{at}: {} log clients stopped on an error: {}",
                    log.errors,
                    log.clients
                        .iter()
                        .filter_map(|c| c.error.as_deref())
                        .next()
                        .unwrap_or("?")
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A ping summary with end-to-end p50/p99 and the server's p99.
    fn ping(p50_us: f64, p99_us: f64, server_p99_us: f64) -> ProbeSummary {
        ProbeSummary {
            count: 1000,
            p50_us,
            p99_us,
            p999_us: p99_us,
            max_us: p99_us,
            errors: 0,
            series: Vec::new(),
            server: Some(Quantiles {
                count: 1000,
                p50_us: server_p99_us / 2.0,
                p99_us: server_p99_us,
                p999_us: server_p99_us,
                max_us: server_p99_us,
            }),
            scheduling: None,
        }
    }

    /// A phase of `runtime` in round `round`: idle without a mode, else
    /// `clients` clients acknowledged at `rate` per second.
    fn record(
        round: u32,
        runtime: RuntimeKind,
        mode: Option<LogMode>,
        clients: u32,
        rate: f64,
        server_p99_us: f64,
    ) -> PhaseRecord {
        PhaseRecord {
            round,
            runtime,
            mode,
            clients,
            paced_rate: None,
            ping: ping(50.0, 100.0, server_p99_us),
            log: mode.map(|_| LogLoadSummary {
                acked: rate as u64,
                records_per_s: rate,
                ack: ping(400.0, 900.0, 0.0),
                errors: 0,
                // 10 us of the clients' thread a record.
                cpu_s: Some(rate * 10e-6),
                clients: Vec::new(),
            }),
            records_per_sync: 4.0,
            log_batch_us: None,
            batch_sync: mode.map(|_| BatchSync {
                records: 4,
                gap_us: 0.0,
                back_to_back: None,
                latency: SyncLatency {
                    samples: 10,
                    p50_us: 170.0,
                    mean_us: 180.0,
                    p99_us: 900.0,
                },
            }),
            cpu_s: 0.5,
            cpus: 2,
            window_s: 1.0,
            noise: Noise::unmeasured(),
        }
    }

    /// A config of 8 and 64 clients, keel and tokio.
    fn config() -> S5Config {
        S5Config {
            run: RunSpec::for_tests(&[RuntimeKind::Keel, RuntimeKind::Tokio]),
            clients: 8,
            many_clients: 64,
            record: 512,
            interval_us: 1000,
            data_dir: "/nonexistent".into(),
            sync_samples: 1,
            hold_idle_exit: false,
        }
    }

    /// Whether two figures agree to a part in a billion.
    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs()
    }

    /// The batch probe's gap is the round trip and the other clients'
    /// turns where every client rides each sync, and nothing where the
    /// loop does not wait on the sync alone or a figure is missing.
    #[test]
    fn the_probe_leaves_the_loops_gap_between_syncs() {
        let load = record(1, RuntimeKind::Keel, Some(LogMode::Group), 8, 1000.0, 0.0)
            .log
            .unwrap();
        // 10 µs of the clients' thread a record: 25 µs + 7 × 10 µs.
        let gap = closed_loop_gap(true, 25.0, Some(&load), 8);
        assert!(close(gap.as_secs_f64() * 1e6, 95.0), "{gap:?}");
        assert_eq!(closed_loop_gap(false, 25.0, Some(&load), 8), Duration::ZERO);
        assert_eq!(closed_loop_gap(true, 25.0, None, 8), Duration::ZERO);
        assert_eq!(
            closed_loop_gap(true, f64::NAN, Some(&load), 8),
            Duration::ZERO
        );
        // One client has no turns to wait behind: the round trip alone.
        let alone = closed_loop_gap(true, 25.0, Some(&load), 1);
        assert!(close(alone.as_secs_f64() * 1e6, 25.0), "{alone:?}");
    }

    /// The closed-loop ceiling counts a sync and a round trip per record
    /// and client, and the turns of all clients but the first.
    #[test]
    fn ceiling_of_a_closed_loop() {
        assert!(close(ceiling(8, 200.0, 200.0, 0.0), 20_000.0));
        assert!(close(ceiling(64, 200.0, 50.0, 0.0), 256_000.0));
        // Seven turns of 10 us after the first client's.
        assert!(close(ceiling(8, 200.0, 130.0, 10.0), 20_000.0));
        assert!(close(ceiling(1, 200.0, 50.0, 10.0), 4_000.0));
        assert!(ceiling(8, 0.0, 0.0, 0.0).is_nan());
        let sync = SyncLatency {
            samples: 10,
            p50_us: 200.0,
            mean_us: 210.0,
            p99_us: 900.0,
        };
        assert!((sync_limit(&sync, 8) - 40_000.0).abs() < 1e-6);
    }

    /// The ceiling's round trip is the quicker of the idle and loaded
    /// pings' p50: a server under load answers sooner than an idle one
    /// whose workers sleep.
    #[test]
    fn the_round_trip_is_the_quicker_ping() {
        let mut idle = record(1, RuntimeKind::Keel, None, 0, 0.0, 40.0);
        idle.ping.p50_us = 110.0;
        let mut loaded = record(
            1,
            RuntimeKind::Keel,
            Some(LogMode::Group),
            8,
            30_000.0,
            60.0,
        );
        loaded.ping.p50_us = 70.0;
        let sync = SyncLatency {
            samples: 10,
            p50_us: 150.0,
            mean_us: 160.0,
            p99_us: 900.0,
        };
        let metrics: BTreeMap<_, _> = round_metrics(&idle, &loaded, &sync, false)
            .into_iter()
            .collect();
        assert_eq!(metrics["round_trip_us"], 70.0);
        // The batch's own sync, its mean (180 us, where its median is 170),
        // plus 70 us.
        assert!(close(metrics["ceiling_records_per_s"], 8.0 / 250e-6));
        assert_eq!(metrics["batch_fdatasync_us"], 170.0);
        assert_eq!(metrics["batch_fdatasync_mean_us"], 180.0);
        loaded.ping.p50_us = 130.0;
        let metrics: BTreeMap<_, _> = round_metrics(&idle, &loaded, &sync, false)
            .into_iter()
            .collect();
        assert_eq!(metrics["round_trip_us"], 110.0);
    }

    /// When every client rides one sync, the ceiling counts the turns of
    /// the load thread after the first acknowledgement, measured as its
    /// CPU time per record; a phase of many clients reports the turn but
    /// keeps the plain bound, and a missing thread clock leaves the
    /// ceiling unknown rather than lower.
    #[test]
    fn one_batch_counts_the_clients_turns() {
        let idle = record(1, RuntimeKind::Keel, None, 0, 0.0, 40.0);
        let mut loaded = record(
            1,
            RuntimeKind::Keel,
            Some(LogMode::Group),
            8,
            20_000.0,
            60.0,
        );
        let sync = SyncLatency {
            samples: 10,
            p50_us: 150.0,
            mean_us: 160.0,
            p99_us: 900.0,
        };
        let metrics: BTreeMap<_, _> = round_metrics(&idle, &loaded, &sync, true)
            .into_iter()
            .collect();
        assert!(close(metrics["client_turn_us"], 10.0));
        // 0.2 s of the thread in a 1 s window.
        assert!(close(metrics["client_cpu_busy"], 0.2));
        // Sync 180 us (the mean), round trip 50 us, seven turns of 10 us.
        assert!(close(metrics["ceiling_records_per_s"], 8.0 / 300e-6));
        let plain: BTreeMap<_, _> = round_metrics(&idle, &loaded, &sync, false)
            .into_iter()
            .collect();
        assert!(close(plain["client_turn_us"], 10.0));
        assert!(close(plain["ceiling_records_per_s"], 8.0 / 230e-6));
        loaded.log.as_mut().unwrap().cpu_s = None;
        let unknown: BTreeMap<_, _> = round_metrics(&idle, &loaded, &sync, true)
            .into_iter()
            .collect();
        assert!(unknown["client_turn_us"].is_nan());
        assert!(unknown["ceiling_records_per_s"].is_nan());
        assert!(unknown["records_over_ceiling"].is_nan());
    }

    /// Loaded runs are named by mode, with the client count when it is
    /// the second phase's.
    #[test]
    fn run_modes_carry_the_client_count() {
        let config = config();
        assert_eq!(run_mode(LogMode::Group, 8, false, &config), "group");
        assert_eq!(
            run_mode(LogMode::PerRecord, 64, false, &config),
            "per-record-64"
        );
        assert_eq!(run_mode(LogMode::Group, 8, true, &config), "group-paced");
        assert_eq!(client_counts(&config), [8, 64]);
        let same = S5Config {
            many_clients: 8,
            ..config
        };
        assert_eq!(client_counts(&same), [8]);
    }

    /// Each round's records become runs per runtime, mode and client
    /// count, judged against the closed-loop ceiling and on the server's
    /// share of the ping.
    #[test]
    fn verdicts_from_a_round() {
        let config = config();
        let (keel, tokio) = (RuntimeKind::Keel, RuntimeKind::Tokio);
        let mut records = vec![
            record(1, keel, None, 0, 0.0, 40.0),
            record(1, tokio, None, 0, 0.0, 40.0),
        ];
        for (clients, keel_rate) in [(8, 12_000.0), (64, 60_000.0)] {
            records.push(record(
                1,
                keel,
                Some(LogMode::Group),
                clients,
                keel_rate,
                60.0,
            ));
            for mode in modes(tokio) {
                records.push(record(1, tokio, Some(*mode), clients, 3_000.0, 120.0));
            }
        }
        // Paced to 0.8 of tokio's 3,000 records/s, which both reach.
        for (runtime, server_p99_us) in [(keel, 90.0), (tokio, 100.0)] {
            let mut paced = record(1, runtime, Some(LogMode::Group), 8, 2_400.0, server_p99_us);
            paced.paced_rate = Some(2_400.0);
            records.push(paced);
        }
        let sync = SyncLatency {
            samples: 10,
            p50_us: 150.0,
            mean_us: 160.0,
            p99_us: 900.0,
        };
        let s5 = S5 {
            config,
            sync,
            notes: Vec::new(),
            group_rates: Arc::default(),
            idle_exit_held: false,
        };
        let rounds = scenario::round_figures(&s5, &records);
        let modes: Vec<String> = rounds[0].runs.iter().map(RunFigures::label).collect();
        assert_eq!(
            modes,
            [
                "keel group",
                "tokio per-record",
                "tokio group",
                "tokio inline",
                "keel group-64",
                "tokio per-record-64",
                "tokio group-64",
                "tokio inline-64",
                "keel group-paced",
                "tokio group-paced",
                "disk raw"
            ]
        );
        let keel_group = &rounds[0].runs[0].metrics;
        // The batch's mean sync (180 us), the idle ping's p50 (50 us) and
        // seven turns of 10 us: 8 / 300 us.
        let ceiling = 8.0 / 300e-6;
        let got = |name: &str| keel_group.get(name).unwrap_or(f64::NAN);
        assert!(close(got("ceiling_records_per_s"), ceiling));
        assert!(close(got("records_over_ceiling"), 12_000.0 / ceiling));
        assert_eq!(keel_group.get("raw_fdatasync_us"), Some(150.0));
        assert_eq!(keel_group.get("batch_fdatasync_us"), Some(170.0));
        assert_eq!(keel_group.get("batch_records"), Some(4.0));
        // 0.5 CPU-seconds in a 1 s window on 2 CPUs.
        assert_eq!(keel_group.get("node_cpu_busy"), Some(0.25));
        assert_eq!(
            keel_group.get("cpu_us_per_record"),
            Some(0.5 * 1e6 / 12_000.0)
        );
        let v = scenario::judged_verdicts(&s5, &rounds);
        let value = |name: &str| v.iter().find(|v| v.name == name).and_then(|v| v.value);
        assert_eq!(value("server ping loaded_p99/idle_p99"), Some(1.5));
        // 0.5 CPU-seconds a second over 12,000 records/s, 4 records a
        // sync: 166.7 us a commit, beside the idle 40 us and loaded 60 us.
        assert!(close(
            keel_group.get("commit_cpu_us").unwrap(),
            0.5e6 / 12_000.0 * 4.0
        ));
        assert!(close(
            value("server ping loaded_p99/(idle_p99 + commit cpu)").unwrap(),
            60.0 / (40.0 + 0.5e6 / 12_000.0 * 4.0)
        ));
        assert_eq!(value("server ping loaded_p99 keel/tokio group"), Some(0.5));
        assert_eq!(
            value("server ping loaded_p99 keel/tokio group, paced"),
            Some(0.9)
        );
        assert_eq!(value("records_per_s keel/tokio per-record"), Some(4.0));
        assert!(close(
            value("records_per_s keel/closed-loop ceiling").unwrap_or(f64::NAN),
            12_000.0 / ceiling
        ));
        // 64 / 230 us: the many clients' turns are not in the cycle.
        assert!(close(
            value("records_per_s keel/closed-loop ceiling, many clients").unwrap_or(f64::NAN),
            60_000.0 / (64.0 / 230e-6)
        ));
        assert_eq!(
            value("records_per_s keel/tokio group, many clients"),
            Some(20.0)
        );
        // Reported beside the ceiling, not judged.
        let judged = |name: &str| v.iter().find(|v| v.name == name).and_then(|v| v.goal);
        assert_eq!(judged("records_per_s keel/tokio per-record"), None);
        assert_eq!(judged("server ping loaded_p99/idle_p99"), None);
        assert!(judged("server ping loaded_p99/(idle_p99 + commit cpu)").is_some());
        // The ping is judged at equal load only.
        assert_eq!(judged("server ping loaded_p99 keel/tokio group"), None);
        assert!(judged("server ping loaded_p99 keel/tokio group, paced").is_some());
        assert!(judged("records_per_s keel/closed-loop ceiling").is_some());
        assert!(judged("records_per_s keel/tokio group, many clients").is_some());
        assert_eq!(
            judged("records_per_s keel/closed-loop ceiling, many clients"),
            None
        );
        assert_eq!(
            value("records_per_s keel/tokio per-record, many clients"),
            Some(20.0)
        );
    }

    /// The paced phase takes [`PACE_SHARE`] of the round's slowest
    /// closed-loop group commit, and refuses to guess without one.
    #[test]
    fn the_pace_follows_the_slower_group_commit() {
        let s5 = S5 {
            config: config(),
            sync: SyncLatency {
                samples: 10,
                p50_us: 150.0,
                mean_us: 160.0,
                p99_us: 900.0,
            },
            notes: Vec::new(),
            group_rates: Arc::default(),
            idle_exit_held: false,
        };
        assert!(s5.paced_rate(1).is_err());
        s5.group_rates
            .lock()
            .unwrap()
            .insert(1, vec![25_000.0, 12_000.0]);
        assert!(close(s5.paced_rate(1).unwrap(), 12_000.0 * PACE_SHARE));
        assert!(s5.paced_rate(2).is_err());
        let stages = s5.stages();
        let last = stages.last().unwrap();
        assert!(last
            .iter()
            .all(|p| p.paced && p.mode == Some(LogMode::Group) && p.clients == 8));
        assert_eq!(last.len(), 2);
    }

    /// A node that fell short of the paced rate leaves the round's ping
    /// verdict at equal load without a value, and its metrics say by how
    /// much; the closed-loop ceiling is not reported for a paced run.
    #[test]
    fn a_missed_pace_has_no_equal_load_verdict() {
        let (keel, tokio) = (RuntimeKind::Keel, RuntimeKind::Tokio);
        let idle = record(1, keel, None, 0, 0.0, 40.0);
        let mut paced = record(1, keel, Some(LogMode::Group), 8, 2_000.0, 60.0);
        paced.paced_rate = Some(2_400.0);
        let sync = SyncLatency {
            samples: 10,
            p50_us: 150.0,
            mean_us: 160.0,
            p99_us: 900.0,
        };
        let metrics: BTreeMap<_, _> = paced_metrics(&idle, &paced, &sync).into_iter().collect();
        assert!(close(metrics["pace_reached"], 2_000.0 / 2_400.0));
        assert_eq!(metrics["paced_records_per_s"], 2_400.0);
        assert!(!metrics.contains_key("ceiling_records_per_s"));
        let run = |runtime: RuntimeKind, reached: f64| RunFigures {
            runtime: runtime.to_string(),
            mode: "group-paced".into(),
            metrics: Pairs(vec![
                ("server_ping_loaded_p99_us", 100.0),
                ("pace_reached", reached),
            ]),
        };
        let paced_verdict = |runs: &[RunFigures]| {
            verdicts(runs, &[keel, tokio], 64)
                .into_iter()
                .find(|v| v.name == "server ping loaded_p99 keel/tokio group, paced")
                .unwrap()
        };
        let value = |runs: &[RunFigures]| paced_verdict(runs).value;
        assert_eq!(value(&[run(keel, 1.0), run(tokio, 0.99)]), Some(1.0));
        assert_eq!(value(&[run(keel, 1.0), run(tokio, 0.9)]), None);
        assert_eq!(value(&[run(keel, 0.5), run(tokio, 1.0)]), None);
        // The verdict names who fell short, and by how much.
        let short = paced_verdict(&[run(keel, 0.5), run(tokio, 0.9)]);
        let why = short.missing.unwrap();
        assert!(
            why.starts_with("keel took 0.50 and tokio took 0.90 of the paced rate"),
            "{why}"
        );
    }
}
