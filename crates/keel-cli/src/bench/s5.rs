//! S5, fsync must not hurt the network: a log node under group commit.
//!
//! Eight closed-loop clients append 512-byte records to a log node and
//! wait for each acknowledgement, which the node sends only once the
//! record is durable; meanwhile the S1 probe pings the node's echo
//! service. Each round measures, per runtime, the ping with no log load
//! (idle), then per durability mode the ping and the record rate under
//! load. keel runs `wal::Log`; tokio runs its three usual designs
//! (`spawn_blocking` per record, a hand-built group committer, and the
//! sync inside the task). The disk's own `fdatasync` latency is measured
//! in the same directory, because the physical limit
//! (`clients / sync latency`) is the yardstick for the record rate.
//!
//! Rounds interleave runtimes and modes and alternate their order, and
//! figures are medians across rounds. `--crash N` runs the durability
//! check instead (see [`super::crash`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use super::charts;
use super::child::Child;
use super::disk::{self, SyncLatency};
use super::outcome::{
    check_runs, find_metric, why_missing, Goal, Outcome, Pairs, RunFigures, Verdict,
};
use super::phase::{mark, SERVER_SILENCE};
use super::progress::PhaseBar;
use super::stats::ratio;
use super::RunSpec;
use crate::error::{Context, Error};
use crate::load::s5::LogLoadSummary;
use crate::load::summary::ProbeSummary;
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
    /// Closed-loop log clients.
    pub clients: u32,
    /// Bytes per record.
    pub record: u64,
    /// Ping interval, µs.
    pub interval_us: u64,
    /// Where logs are written (on a real disk); emptied per phase.
    pub data_dir: PathBuf,
    /// `fdatasync` calls the disk probe times.
    pub sync_samples: usize,
}

/// The durability modes a runtime runs in S5.
pub fn modes(runtime: RuntimeKind) -> &'static [LogMode] {
    match runtime {
        RuntimeKind::Keel => &[LogMode::Group],
        RuntimeKind::Tokio => &[LogMode::PerRecord, LogMode::Group, LogMode::Inline],
    }
}

/// One phase's figures with where it sat in the run.
#[derive(Debug, Clone, Serialize)]
struct PhaseRecord {
    /// Round number, from 1.
    round: u32,
    /// The node's runtime.
    runtime: RuntimeKind,
    /// `None` for the idle phase (no log load).
    mode: Option<LogMode>,
    /// The ping probe's results.
    ping: ProbeSummary,
    /// The log clients' results (loaded phases).
    log: Option<LogLoadSummary>,
    /// Records acknowledged per `fdatasync`, from the node's counters.
    records_per_sync: f64,
    /// Node process CPU seconds between the marks.
    cpu_s: f64,
    /// Seconds between the marks.
    window_s: f64,
}

/// Runs S5's performance phases and judges them.
pub fn run(config: &S5Config) -> Result<Outcome, Error> {
    std::fs::create_dir_all(&config.data_dir)
        .context(|| format!("creating {}", config.data_dir.display()))?;
    let mut notes = Vec::new();
    if disk::is_tmpfs(&config.data_dir)? {
        notes.push(format!(
            "{} is on tmpfs: syncs cost nothing there and the figures say nothing about a disk",
            config.data_dir.display()
        ));
    }
    let sync = disk::sync_latency(
        &config.data_dir,
        config.sync_samples,
        Duration::from_secs(10),
    )?;
    eprintln!(
        "s5: the disk syncs 512 bytes in {:.0} us (median of {}, p99 {:.0} us)",
        sync.p50_us, sync.samples, sync.p99_us
    );

    let mut records = Vec::new();
    for round in 0..config.run.runs {
        let mut order = config.run.runtimes.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for &runtime in &order {
            records.push(phase(config, round + 1, runtime, None)?);
        }
        for &runtime in &order {
            let mut mine = modes(runtime).to_vec();
            if round % 2 == 1 {
                mine.reverse();
            }
            for mode in mine {
                records.push(phase(config, round + 1, runtime, Some(mode))?);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&config.data_dir);

    let mut runs: Vec<RunFigures> = Vec::new();
    for &runtime in &config.run.runtimes {
        for &mode in modes(runtime) {
            runs.push(RunFigures {
                runtime: runtime.to_string(),
                mode: mode.to_string(),
                metrics: medians(&records, runtime, mode),
            });
        }
    }
    runs.push(disk_run(&sync, config.clients));
    let verdicts = verdicts(&runs, &config.run.runtimes);
    let problems = check(&records, &runs);
    for record in &records {
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
    let mut sizes = Pairs(vec![
        ("clients", json!(config.clients)),
        ("record_bytes", json!(config.record)),
        ("interval_us", json!(config.interval_us)),
        ("data_dir", json!(config.data_dir)),
    ]);
    sizes.0.extend(config.run.sizes());
    Ok(Outcome {
        id: "s5",
        title: TITLE,
        sizes,
        runs,
        verdicts,
        rounds: json!({"sync": sync, "phases": records}),
        problems,
        notes,
        charts: vec![charts::latency_lines(
            "latency",
            "S5: ping RTT over time, idle and under log load (round 1)".into(),
            records
                .iter()
                .filter(|r| r.round == 1)
                .map(|r| {
                    let what = r.mode.map_or("idle", LogMode::name);
                    (format!("{} {what}", r.runtime), r.ping.series.as_slice())
                })
                .collect(),
        )],
        chart_files: Vec::new(),
    })
}

/// The disk's figures as a column of the table.
fn disk_run(sync: &SyncLatency, clients: u32) -> RunFigures {
    RunFigures {
        runtime: "disk".into(),
        mode: "raw".into(),
        metrics: Pairs(vec![
            ("sync_p50_us", sync.p50_us),
            ("sync_p99_us", sync.p99_us),
            ("limit_records_per_s", physical_limit(sync, clients)),
        ]),
    }
}

/// The most records per second `clients` closed-loop clients can get
/// acknowledged: each waits for a sync, so at most all of them per sync.
fn physical_limit(sync: &SyncLatency, clients: u32) -> f64 {
    if sync.p50_us > 0.0 {
        f64::from(clients) / (sync.p50_us / 1e6)
    } else {
        f64::NAN
    }
}

/// Runs one phase: a fresh node, the ping probe, and (with a mode) the log
/// clients at the same time.
fn phase(
    config: &S5Config,
    round: u32,
    runtime: RuntimeKind,
    mode: Option<LogMode>,
) -> Result<PhaseRecord, Error> {
    let what = mode.map_or("idle", LogMode::name);
    let label = format!("s5 r{round}/{} {runtime} {what}", config.run.runs);
    let expected = SETTLE
        + Duration::from_millis(config.run.warmup_ms)
        + Duration::from_secs_f64(config.run.duration_s);
    let bar = PhaseBar::new(&label, expected);
    let dir = config.data_dir.join(format!("r{round}-{runtime}-{what}"));
    let _ = std::fs::remove_dir_all(&dir);
    let result = measure(config, runtime, mode, &dir, &bar).map(|m| PhaseRecord {
        round,
        runtime,
        mode,
        ..m
    });
    let _ = std::fs::remove_dir_all(&dir);
    match result {
        Ok(record) => {
            let rate = record.log.as_ref().map_or(0.0, |l| l.records_per_s);
            bar.finish(&format!(
                "{label:<28} ping p50 {:>8.1} us  p99 {:>8.1} us  max {:>8.1} us  records/s {rate:>8.0}  per sync {:>5.1}  cpu {:.2} s",
                record.ping.p50_us,
                record.ping.p99_us,
                record.ping.max_us,
                record.records_per_sync,
                record.cpu_s,
            ));
            Ok(record)
        }
        Err(error) => {
            bar.abandon();
            Err(error.context(label))
        }
    }
}

/// The body of [`phase`]; children are killed on any early return.
fn measure(
    config: &S5Config,
    runtime: RuntimeKind,
    mode: Option<LogMode>,
    dir: &Path,
    bar: &PhaseBar,
) -> Result<PhaseRecord, Error> {
    bar.step("starting the node");
    let mut node = start_node(
        &config.run.exe,
        runtime,
        mode.unwrap_or(LogMode::Group),
        config.run.workers,
        dir,
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

    let mut clients = match mode {
        Some(_) => Some(Child::spawn(
            "keel load s5",
            &config.run.exe,
            &[
                "load".into(),
                "s5".into(),
                "--addr".into(),
                log_addr.to_string(),
                "--clients".into(),
                config.clients.to_string(),
                "--record".into(),
                config.record.to_string(),
                "--duration-s".into(),
                config.run.duration_s.to_string(),
                "--warmup-ms".into(),
                config.run.warmup_ms.to_string(),
            ],
        )?),
        None => None,
    };
    bar.step("pinging");
    let mut ping = Child::spawn(
        "keel load s1",
        &config.run.exe,
        &[
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
        ],
    )?;
    std::thread::sleep(Duration::from_millis(config.run.warmup_ms));
    let (mark0, cpu0) = mark(&mut node, bar)?;

    let budget = Duration::from_secs_f64(config.run.duration_s) + Duration::from_secs(20);
    let ping_summary: ProbeSummary = ping.recv_json(budget, "its results", tick)?;
    let log = match clients.as_mut() {
        Some(clients) => Some(clients.recv_json::<LogLoadSummary>(budget, "its results", tick)?),
        None => None,
    };
    let (mark1, cpu1) = mark(&mut node, bar)?;
    bar.step("stopping");
    node.send_line("stop")?;
    let _ = node.finish(Duration::from_secs(5))?;
    for child in [Some(&mut ping), clients.as_mut()].into_iter().flatten() {
        child.finish_clean(Duration::from_secs(5))?;
    }

    let counter = |mark: &Mark, name: &str| mark.runtime["log"][name].as_f64().unwrap_or(f64::NAN);
    let acked = counter(&mark1, "acked") - counter(&mark0, "acked");
    let syncs = counter(&mark1, "syncs") - counter(&mark0, "syncs");
    Ok(PhaseRecord {
        round: 0,
        runtime,
        mode,
        ping: ping_summary,
        log,
        records_per_sync: ratio(Some(acked), Some(syncs)).unwrap_or(f64::NAN),
        cpu_s: (cpu1 - cpu0).max(0.0),
        window_s: mark1.t_ns.saturating_sub(mark0.t_ns) as f64 / 1e9,
    })
}

/// Starts `keel serve s5` for `runtime` in `mode` on `dir`.
pub fn start_node(
    exe: &Path,
    runtime: RuntimeKind,
    mode: LogMode,
    workers: u64,
    dir: &Path,
) -> Result<Child, Error> {
    Child::spawn(
        format!("keel serve s5 ({runtime} {mode})"),
        exe,
        &[
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
        ],
    )
}

/// The metrics of one round of one runtime in one mode.
fn round_metrics(idle: &PhaseRecord, loaded: &PhaseRecord) -> Vec<(&'static str, f64)> {
    let log = loaded.log.as_ref();
    let rate = log.map_or(f64::NAN, |l| l.records_per_s);
    vec![
        ("idle_p50_us", idle.ping.p50_us),
        ("idle_p99_us", idle.ping.p99_us),
        ("loaded_p50_us", loaded.ping.p50_us),
        ("loaded_p99_us", loaded.ping.p99_us),
        ("loaded_max_us", loaded.ping.max_us),
        ("records_per_s", rate),
        ("records_per_sync", loaded.records_per_sync),
        ("syncs_per_s", rate / loaded.records_per_sync),
        ("ack_p50_us", log.map_or(f64::NAN, |l| l.ack.p50_us)),
        ("ack_p99_us", log.map_or(f64::NAN, |l| l.ack.p99_us)),
        ("cpu_s", loaded.cpu_s),
        ("client_errors", log.map_or(f64::NAN, |l| l.errors as f64)),
    ]
}

/// Per metric, the median across rounds of one runtime in one mode.
fn medians(records: &[PhaseRecord], runtime: RuntimeKind, mode: LogMode) -> Pairs<f64> {
    let find = |round: u32, mode: Option<LogMode>| {
        records
            .iter()
            .find(|r| r.round == round && r.runtime == runtime && r.mode == mode)
    };
    let last_round = records.iter().map(|r| r.round).max().unwrap_or(0);
    let rounds: Vec<_> = (1..=last_round)
        .filter_map(|round| Some(round_metrics(find(round, None)?, find(round, Some(mode))?)))
        .collect();
    Pairs::medians(&rounds)
}

/// The S5 verdicts, from the medians.
fn verdicts(runs: &[RunFigures], runtimes: &[RuntimeKind]) -> Vec<Verdict> {
    let metric = |runtime: &str, mode: &str, name: &str| find_metric(runs, runtime, mode, name);
    let missing = |needed: &[RuntimeKind]| why_missing(needed, runtimes);
    let (keel, tokio) = (RuntimeKind::Keel, RuntimeKind::Tokio);
    let both = [keel, tokio];
    let stretch = |runtime: &str, mode: &str| {
        ratio(
            metric(runtime, mode, "loaded_p99_us"),
            metric(runtime, mode, "idle_p99_us"),
        )
    };
    vec![
        Verdict::new(
            "ping loaded_p99/idle_p99",
            "keel",
            stretch("keel", "group"),
            Some(Goal::AtMost(2.0)),
        )
        .missing_because(missing(&[keel])),
        Verdict::new(
            "ping loaded_p99 keel/tokio group",
            "keel",
            ratio(
                metric("keel", "group", "loaded_p99_us"),
                metric("tokio", "group", "loaded_p99_us"),
            ),
            Some(Goal::AtMost(1.0)),
        )
        .missing_because(missing(&both)),
        Verdict::new(
            "records_per_s keel/tokio per-record",
            "keel",
            ratio(
                metric("keel", "group", "records_per_s"),
                metric("tokio", "per-record", "records_per_s"),
            ),
            Some(Goal::AtLeast(3.0)),
        )
        .missing_because(missing(&both)),
        Verdict::new(
            "records_per_s keel/physical limit",
            "keel",
            ratio(
                metric("keel", "group", "records_per_s"),
                metric("disk", "raw", "limit_records_per_s"),
            ),
            Some(Goal::AtLeast(0.6)),
        )
        .missing_because(missing(&[keel])),
        Verdict::new(
            "ping loaded_p99/idle_p99 tokio per-record",
            "tokio",
            stretch("tokio", "per-record"),
            None,
        )
        .missing_because(missing(&[tokio])),
        Verdict::new(
            "ping loaded_p99/idle_p99 tokio group",
            "tokio",
            stretch("tokio", "group"),
            None,
        )
        .missing_because(missing(&[tokio])),
        Verdict::new(
            "ping loaded_p99/idle_p99 tokio inline",
            "tokio",
            stretch("tokio", "inline"),
            None,
        )
        .missing_because(missing(&[tokio])),
    ]
}

/// Figures that should exist and do not.
fn check(records: &[PhaseRecord], runs: &[RunFigures]) -> Vec<String> {
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
    problems.extend(check_runs(runs));
    problems
}
