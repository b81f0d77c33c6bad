//! S4, utilization truth: does the runtime's own account agree with the
//! CPU its process burns?
//!
//! 200 connections each send 12.5 KB every 100 ms (25 MB/s in all) to a
//! node that reads and sums every delivery (S2's stream service on its
//! own). The load is light and steady, so workers keep running out of
//! work and either spin or park: exactly where schedulers' CPU figures
//! and their utilization figures part ways. For each spin setting of keel
//! (none, short, medium, long), and for tokio as it comes, a phase
//! measures the process CPU over a window (from `/proc`) and what the
//! runtime reports for the same window.
//!
//! keel's report, read from the node's marks as the library's own
//! `/stats` worker figures ([`keel::admin::WorkerFigures`], so the bench
//! judges the very figures keel's admin endpoint serves): *busy* is every
//! state a worker is on the CPU for except
//! spinning (tasks, IO, timers, and searching for work, which is the
//! scheduler's own cost), plus the CPU its thread used while parked
//! (going to sleep and waking up, the rest of that cost, which keel reads
//! from the thread's CPU clock around one park in eight and scales to
//! all), and *spin* is the spin state; busy + spin should be the process
//! CPU, and the gap, in percentage points of one core, is the verdict.
//! keel's *utilization* (tasks, IO and timers, without searching) is
//! reported beside it. tokio's report is its per-worker
//! busy time (stable `RuntimeMetrics::worker_total_busy_duration`); it
//! has no spin figure. keel also samples the CPU clock of each worker
//! thread, reported as `workers_thread_cpu_pct`: the part of the process
//! CPU its workers used, which tells a gap caused by preemption (states
//! above the thread clock) from one caused by other threads (process CPU
//! above the thread clock). keel's reported busy and spin are its states'
//! shares of that CPU (see [`Reported`]): on a machine with more runnable
//! threads than cores, a state's wall time includes waits for a core, and
//! the thread clock is what tells the two apart.
//!
//! Rounds interleave the settings and alternate their order; figures are
//! medians across rounds.

use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::charts::{self, Chart};
use super::noise::Noise;
use super::outcome::{find_metric, why_missing, Goal, Outcome, Pairs, RunFigures, Verdict};
use super::phase::{mark, SERVER_SILENCE};
use super::placement::Role;
use super::progress::PhaseBar;
use super::scenario::{self, Scenario};
use super::stats::ratio;
use super::RunSpec;
use crate::error::Error;
use crate::load::s2::{StormReady, StormSummary};
use crate::serve::control::{AddrLine, Mark};
use crate::serve::node_keel::worker_pairs;
use crate::serve::{RuntimeKind, Spin};
use keel::admin::WorkerFigures;

/// What the scenario measures, for the table.
const TITLE: &str = "utilization truth";

/// How long a node runs before the load starts.
const SETTLE: Duration = Duration::from_millis(300);

/// The largest gap between reported and measured CPU that passes, in
/// percentage points of one core.
pub const GAP_PP: f64 = 3.0;

/// The largest gap that passes, relative to the measured CPU.
pub const GAP_REL: f64 = 0.10;

/// "Well below": CPU with spin `none` at most this fraction of `long`'s.
pub const NONE_VS_LONG: f64 = 0.75;

/// The sizes and setup of one S4 run.
#[derive(Debug, Clone)]
pub struct S4Config {
    /// What every scenario run shares.
    pub run: RunSpec,
    /// Sending connections.
    pub senders: u64,
    /// Bytes per send.
    pub chunk: u64,
    /// Rate over all connections, MB/s.
    pub rate_mb: f64,
}

/// One setting a phase measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "runtime", content = "spin", rename_all = "kebab-case")]
pub enum Setting {
    /// keel with this spin policy.
    Keel(Spin),
    /// keel on io_uring with this spin policy.
    KeelUring(Spin),
    /// tokio with its defaults.
    Tokio,
}

impl Setting {
    /// The settings a run measures for `runtimes`, in canonical order.
    fn all(runtimes: &[RuntimeKind]) -> Vec<Setting> {
        let mut out = Vec::new();
        if runtimes.contains(&RuntimeKind::Keel) {
            out.extend(Spin::ALL.map(Setting::Keel));
        }
        if runtimes.contains(&RuntimeKind::KeelUring) {
            out.extend(Spin::ALL.map(Setting::KeelUring));
        }
        if runtimes.contains(&RuntimeKind::Tokio) {
            out.push(Setting::Tokio);
        }
        out
    }

    /// The runtime.
    fn runtime(self) -> RuntimeKind {
        match self {
            Setting::Keel(_) => RuntimeKind::Keel,
            Setting::KeelUring(_) => RuntimeKind::KeelUring,
            Setting::Tokio => RuntimeKind::Tokio,
        }
    }

    /// The mode name in the report: the spin setting, or `default`.
    fn mode(self) -> &'static str {
        match self {
            Setting::Keel(spin) | Setting::KeelUring(spin) => spin.name(),
            Setting::Tokio => "default",
        }
    }
}

/// What a runtime reported for a window, in seconds of worker time summed
/// over workers.
///
/// keel's states are wall time: a worker preempted while it polls or
/// spins still counts that time in the state. keel also samples each
/// worker thread's CPU clock, so over a window the CPU a worker really got
/// is known; `busy_s` and `spin_s` are the states' shares of that CPU
/// (each worker's states scaled by its CPU outside parks over its on-CPU
/// states, when the kernel ran it less than they add up to); `busy_s`
/// also holds the CPU of parking, `park_cpu_s`. `states_busy_s` and
/// `states_spin_s` are the unscaled wall times, kept to show what
/// preemption did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Reported {
    /// On a core and not spinning (keel: tasks, IO, timers, search, as
    /// CPU, and the CPU of parking; tokio: its busy time).
    busy_s: f64,
    /// Spinning, as CPU (keel only; zero for tokio, which reports none).
    spin_s: f64,
    /// keel's utilization numerator: tasks, IO and timers, as CPU (tokio:
    /// busy).
    utilized_s: f64,
    /// keel: CPU time the kernel charged to the worker threads (zero for
    /// tokio, which does not sample it).
    thread_cpu_s: f64,
    /// keel: CPU the worker threads used while parked, going to sleep and
    /// waking (zero for tokio, which does not measure it).
    park_cpu_s: f64,
    /// keel: wall time in the busy states, unscaled.
    states_busy_s: f64,
    /// keel: wall time spinning, unscaled.
    states_spin_s: f64,
}

/// One phase's figures with where it sat in the run.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRecord {
    /// Round number, from 1.
    round: u32,
    /// What was measured.
    setting: Setting,
    /// Seconds between the marks.
    window_s: f64,
    /// Node process CPU seconds between the marks.
    cpu_s: f64,
    /// What the runtime reported between the marks.
    reported: Reported,
    /// Bytes the node received between the marks.
    bytes: u64,
    /// The load's own account.
    storm: StormSummary,
    /// keel: per worker, the share of the window each state took (in the
    /// order of [`charts::KEEL_STATES`]).
    worker_states: Option<Vec<[f64; 6]>>,
    /// The host's noise between the marks.
    noise: Noise,
}

/// Runs S4 and judges it.
pub fn run(config: &S4Config) -> Result<Outcome, Error> {
    scenario::run(config)
}

impl Scenario for S4Config {
    type Phase = Setting;
    type Record = PhaseRecord;
    const ID: &'static str = "s4";
    const TITLE: &'static str = TITLE;

    fn spec(&self) -> &RunSpec {
        &self.run
    }

    /// Every setting, in one stage.
    fn stages(&self) -> Vec<Vec<Setting>> {
        vec![Setting::all(&self.run.runtimes)]
    }

    fn phase_name(&self, setting: Setting) -> String {
        format!("{} {}", setting.runtime(), setting.mode())
    }

    fn expected(&self, _: Setting) -> Duration {
        SETTLE + self.run.window()
    }

    fn measure(&self, round: u32, setting: Setting, bar: &PhaseBar) -> Result<PhaseRecord, Error> {
        measure(self, round, setting, bar)
    }

    fn summary(&self, record: &PhaseRecord) -> String {
        let pct = |s: f64| 100.0 * s / record.window_s.max(1e-9);
        format!(
            "cpu {:>6.1}%  reported busy {:>6.1}%  spin {:>6.1}%  received {:>6.1} MB/s",
            pct(record.cpu_s),
            pct(record.reported.busy_s),
            pct(record.reported.spin_s),
            record.bytes as f64 / 1e6 / record.window_s.max(1e-9),
        )
    }

    fn round_of(record: &PhaseRecord) -> u32 {
        record.round
    }

    fn noise_of(record: &PhaseRecord) -> Noise {
        record.noise
    }

    /// Per setting measured in the round, its metrics.
    fn round_runs(&self, records: &[&PhaseRecord]) -> Vec<RunFigures> {
        Setting::all(&self.run.runtimes)
            .into_iter()
            .filter_map(|setting| {
                let record = records.iter().find(|r| r.setting == setting)?;
                Some(RunFigures {
                    runtime: setting.runtime().to_string(),
                    mode: setting.mode().to_string(),
                    metrics: Pairs(round_metrics(record)),
                })
            })
            .collect()
    }

    fn verdicts(&self, runs: &[RunFigures]) -> Vec<Verdict> {
        verdicts(runs, &self.run.runtimes)
    }

    fn check(&self, records: &[PhaseRecord]) -> (Vec<String>, Vec<String>) {
        check(records)
    }

    fn sizes(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("senders", json!(self.senders)),
            ("chunk_bytes", json!(self.chunk)),
            ("rate_mb_per_s", json!(self.rate_mb)),
        ]
    }

    fn charts(&self, records: &[PhaseRecord]) -> Vec<Chart> {
        vec![worker_chart(records)]
    }
}

/// Where keel's workers spent the first round's windows, per spin setting.
fn worker_chart(records: &[PhaseRecord]) -> Chart {
    let phases: Vec<(String, Vec<[f64; 6]>)> = records
        .iter()
        .filter(|r| r.round == 1)
        .filter_map(|r| match (r.setting, &r.worker_states) {
            (Setting::Keel(spin), Some(states)) => Some((spin.to_string(), states.clone())),
            (Setting::KeelUring(spin), Some(states)) => {
                Some((format!("{} {spin}", RuntimeKind::KeelUring), states.clone()))
            }
            _ => None,
        })
        .collect();
    charts::worker_state_bars(
        "workers",
        "S4: keel workers by state, per spin setting (round 1)".into(),
        &phases,
    )
}

/// Measures one phase of `round`: a fresh node under the senders' load.
/// Children are killed on any early return.
fn measure(
    config: &S4Config,
    round: u32,
    setting: Setting,
    bar: &PhaseBar,
) -> Result<PhaseRecord, Error> {
    bar.step("starting the node");
    let mut args: Vec<String> = vec![
        "serve".into(),
        "s4".into(),
        "--runtime".into(),
        setting.runtime().to_string(),
        "--workers".into(),
        config.run.workers.to_string(),
    ];
    if let Setting::Keel(spin) | Setting::KeelUring(spin) = setting {
        args.extend(["--spin".into(), spin.to_string()]);
    }
    let mut node = config.run.spawn(
        Role::Server,
        format!("keel serve s4 ({} {})", setting.runtime(), setting.mode()),
        &args,
    )?;
    let tick = || bar.tick();
    let addrs: AddrLine = node.recv_json(SERVER_SILENCE, "its address", tick)?;
    std::thread::sleep(SETTLE);

    let load_s = config.run.duration_s + config.run.warmup_ms as f64 / 1e3 + 1.0;
    let mut load = config.run.spawn(
        Role::Load,
        "keel load s2",
        &[
            "load".into(),
            "s2".into(),
            "--addr".into(),
            addrs.addr.to_string(),
            "--streams".into(),
            config.senders.to_string(),
            "--chunk".into(),
            config.chunk.to_string(),
            "--rate-mb".into(),
            config.rate_mb.to_string(),
            "--duration-s".into(),
            load_s.to_string(),
        ],
    )?;
    bar.step("connecting the senders");
    let _: StormReady = load.recv_json(SERVER_SILENCE * 3, "its connections", tick)?;
    bar.step("warming up");
    std::thread::sleep(Duration::from_millis(config.run.warmup_ms));
    let start = mark(&mut node, bar)?;
    bar.step("measuring");
    sleep_ticking(Duration::from_secs_f64(config.run.duration_s), bar);
    let end = mark(&mut node, bar)?;
    let measured = start.to(&end, &config.run.placement.server);
    let (mark0, mark1) = (&start.mark, &end.mark);
    let budget = Duration::from_secs_f64(load_s) + Duration::from_secs(30);
    let storm: StormSummary = load.recv_json(budget, "its results", tick)?;
    bar.step("stopping");
    node.send_line("stop")?;
    let _ = node.finish(Duration::from_secs(5))?;
    load.finish_clean(Duration::from_secs(5))?;
    let bytes = |mark: &Mark| mark.runtime["s2"]["bytes"].as_u64().unwrap_or(0);
    Ok(PhaseRecord {
        round,
        setting,
        window_s: measured.window_s,
        cpu_s: measured.cpu_s,
        reported: reported(setting.runtime(), &mark0.runtime, &mark1.runtime),
        bytes: bytes(mark1).saturating_sub(bytes(mark0)),
        storm,
        worker_states: charts::keel_worker_states(&mark0.runtime, &mark1.runtime),
        noise: measured.noise,
    })
}

/// Sleeps for `duration`, keeping the progress bar alive.
fn sleep_ticking(duration: Duration, bar: &PhaseBar) {
    let end = std::time::Instant::now() + duration;
    while let Some(left) = end.checked_duration_since(std::time::Instant::now()) {
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
        bar.tick();
    }
}

/// What the runtime reported between two marks (`start`, `end`: the
/// `runtime` objects of the marks): keel's `worker_states` (the library's
/// [`WorkerFigures`]), or tokio's own per-worker busy time.
fn reported(runtime: RuntimeKind, start: &Value, end: &Value) -> Reported {
    match runtime {
        RuntimeKind::Keel | RuntimeKind::KeelUring => {
            keel_reported(&worker_pairs(start, end).unwrap_or_default())
        }
        RuntimeKind::Tokio => tokio_reported(start, end),
        // S4 runs no monoio server (see `serve::monoio`).
        RuntimeKind::Monoio => Reported::default(),
    }
}

/// keel's report from each worker's figures at the two marks: its states
/// as CPU (see [`Reported`]), the CPU of parking, and its thread's CPU.
fn keel_reported(workers: &[(WorkerFigures, WorkerFigures)]) -> Reported {
    let mut out = Reported::default();
    for (then, now) in workers {
        let delta = |field: fn(&WorkerFigures) -> f64| (field(now) - field(then)).max(0.0);
        let utilized = delta(|w| w.task_s) + delta(|w| w.io_s) + delta(|w| w.timers_s);
        let busy = utilized + delta(|w| w.search_s);
        let spin = delta(|w| w.spin_s);
        let park = delta(|w| w.park_cpu_s.unwrap_or(0.0));
        let cpu = delta(|w| w.cpu_s.unwrap_or(0.0));
        let on_cpu = busy + spin;
        // The share of its on-CPU states the kernel ran the worker: its
        // CPU outside parks over their wall time, never above one.
        let awake_cpu = (cpu - park).max(0.0);
        let ran = if cpu > 0.0 && on_cpu > awake_cpu {
            awake_cpu / on_cpu
        } else {
            1.0
        };
        out.busy_s += busy * ran + park;
        out.spin_s += spin * ran;
        out.utilized_s += utilized * ran;
        out.park_cpu_s += park;
        out.thread_cpu_s += cpu;
        out.states_busy_s += busy;
        out.states_spin_s += spin;
    }
    out
}

/// tokio's report: the busy time of each worker (the `workers` array of
/// the node's tokio marks), paired by position; busy is all it reports.
fn tokio_reported(start: &Value, end: &Value) -> Reported {
    let empty = Vec::new();
    let starts = start["workers"].as_array().unwrap_or(&empty);
    let ends = end["workers"].as_array().unwrap_or(&empty);
    let mut out = Reported::default();
    for (i, worker) in ends.iter().enumerate() {
        let now = worker["busy_s"].as_f64().unwrap_or(0.0);
        let then = starts
            .get(i)
            .and_then(|w| w["busy_s"].as_f64())
            .unwrap_or(0.0);
        let busy = (now - then).max(0.0);
        out.busy_s += busy;
        out.utilized_s += busy;
    }
    out
}

/// The metrics of one phase.
fn round_metrics(record: &PhaseRecord) -> Vec<(&'static str, f64)> {
    let window = record.window_s;
    let pct = |s: f64| ratio(Some(100.0 * s), Some(window)).unwrap_or(f64::NAN);
    let cpu = pct(record.cpu_s);
    let busy = pct(record.reported.busy_s);
    let spin = pct(record.reported.spin_s);
    let mut metrics = vec![
        ("cpu_pct", cpu),
        ("reported_busy_pct", busy),
        ("reported_spin_pct", spin),
        ("reported_utilization_pct", pct(record.reported.utilized_s)),
        ("workers_thread_cpu_pct", pct(record.reported.thread_cpu_s)),
        ("park_cpu_pct", pct(record.reported.park_cpu_s)),
        ("states_busy_pct", pct(record.reported.states_busy_s)),
        ("states_spin_pct", pct(record.reported.states_spin_s)),
        ("gap_pp", busy + spin - cpu),
        (
            "reported_over_cpu",
            ratio(Some(busy + spin), Some(cpu)).unwrap_or(f64::NAN),
        ),
        (
            "received_mb_per_s",
            ratio(Some(record.bytes as f64 / 1e6), Some(window)).unwrap_or(f64::NAN),
        ),
        ("cpu_s", record.cpu_s),
    ];
    if record.setting == Setting::Tokio {
        // tokio reports no spin and samples no thread clock: leave the
        // figures out rather than claim 0.
        metrics.retain(|(name, _)| {
            !matches!(
                *name,
                "reported_spin_pct"
                    | "workers_thread_cpu_pct"
                    | "park_cpu_pct"
                    | "states_busy_pct"
                    | "states_spin_pct"
            )
        });
    }
    metrics
}

/// The S4 verdicts, from one round's figures.
fn verdicts(runs: &[RunFigures], runtimes: &[RuntimeKind]) -> Vec<Verdict> {
    let missing = |needed: &[RuntimeKind]| why_missing(needed, runtimes);
    let keel = [RuntimeKind::Keel];
    let mut out = Vec::new();
    for (spin, gap_name, rel_name) in [
        (
            Spin::None,
            "|busy+spin-cpu| pp, spin none",
            "(busy+spin)/cpu, spin none",
        ),
        (
            Spin::Short,
            "|busy+spin-cpu| pp, spin short",
            "(busy+spin)/cpu, spin short",
        ),
        (
            Spin::Medium,
            "|busy+spin-cpu| pp, spin medium",
            "(busy+spin)/cpu, spin medium",
        ),
        (
            Spin::Long,
            "|busy+spin-cpu| pp, spin long",
            "(busy+spin)/cpu, spin long",
        ),
    ] {
        let metric = |name| find_metric(runs, "keel", spin.name(), name);
        out.push(
            Verdict::new(
                gap_name,
                "keel",
                metric("gap_pp").map(f64::abs),
                Some(Goal::AtMost(GAP_PP)),
            )
            .missing_because(missing(&keel)),
        );
        out.push(
            Verdict::new(
                rel_name,
                "keel",
                metric("reported_over_cpu"),
                Some(Goal::Within(1.0 - GAP_REL, 1.0 + GAP_REL)),
            )
            .missing_because(missing(&keel)),
        );
    }
    let cpu = |spin: Spin| find_metric(runs, "keel", spin.name(), "cpu_pct");
    out.push(
        Verdict::new(
            "cpu spin none/spin long",
            "keel",
            ratio(cpu(Spin::None), cpu(Spin::Long)),
            Some(Goal::AtMost(NONE_VS_LONG)),
        )
        .missing_because(missing(&keel)),
    );
    out.push(
        Verdict::new(
            "busy/cpu",
            "tokio",
            find_metric(runs, "tokio", "default", "reported_over_cpu"),
            None,
        )
        .missing_because(missing(&[RuntimeKind::Tokio])),
    );
    out
}

/// Figures that should exist and do not (problems), and other remarks.
fn check(records: &[PhaseRecord]) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    for record in records {
        let at = format!(
            "round {} {} {}",
            record.round,
            record.setting.runtime(),
            record.setting.mode()
        );
        if record.bytes == 0 {
            problems.push(format!("{at}: the node received nothing"));
        }
        if record.reported.busy_s <= 0.0 {
            problems.push(format!("{at}: the runtime reported no busy time"));
        }
        if record.storm.errors > 0 {
            problems.push(format!(
                "{at}: {} sending connections failed",
                record.storm.errors
            ));
        }
        if record.storm.late_ticks > 0 {
            notes.push(format!(
                "{at}: the senders fell behind their pace on {} ticks",
                record.storm.late_ticks
            ));
        }
    }
    (problems, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// keel's busy is everything on a core but spin, scaled per worker
    /// to the CPU the kernel gave it outside parks, plus the CPU of
    /// parking; tokio's is its own busy time.
    #[test]
    fn reads_the_accounting() {
        // Each worker's task, io, timers, search, spin, CPU and park CPU.
        let workers = |figures: [[f64; 7]; 2]| {
            let entries: Vec<Value> = figures
                .iter()
                .enumerate()
                .map(|(index, f)| {
                    let mut w = WorkerFigures::default();
                    w.worker = index;
                    [w.task_s, w.io_s, w.timers_s, w.search_s, w.spin_s] =
                        [f[0], f[1], f[2], f[3], f[4]];
                    (w.cpu_s, w.park_cpu_s) = (Some(f[5]), Some(f[6]));
                    serde_json::to_value(w).unwrap()
                })
                .collect();
            json!({ "worker_states": entries })
        };
        let start = workers([
            [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0],
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ]);
        // Worker 0: 2 s busy + 2 s spin in the window, but 2 s of CPU, of
        // which 0.5 s parking: it ran 1.5 s of its 4 s of on-CPU states.
        // Worker 1: 1 s busy and 0.25 s of parking, 1.25 s of CPU: not
        // scaled.
        let end = workers([
            [2.0, 0.5, 0.25, 0.25, 3.0, 3.0, 0.5],
            [1.0, 0.0, 0.0, 0.0, 0.0, 1.25, 0.25],
        ]);
        let r = reported(RuntimeKind::Keel, &start, &end);
        assert_eq!(
            r,
            Reported {
                busy_s: (2.0 * 0.375 + 0.5) + (1.0 + 0.25),
                spin_s: 2.0 * 0.375,
                utilized_s: 1.75 * 0.375 + 1.0,
                thread_cpu_s: 3.25,
                park_cpu_s: 0.75,
                states_busy_s: 3.0,
                states_spin_s: 2.0,
            }
        );
        let tokio0 = json!({"workers": [{"busy_s": 1.0}, {"busy_s": 0.5}]});
        let tokio1 = json!({"workers": [{"busy_s": 2.5}, {"busy_s": 1.0}]});
        let t = reported(RuntimeKind::Tokio, &tokio0, &tokio1);
        assert_eq!(t.busy_s, 2.0);
        assert_eq!(t.spin_s, 0.0);
        assert_eq!(t.thread_cpu_s, 0.0);
    }

    /// The gap is in points of one core, and tokio has no spin figure.
    #[test]
    fn metrics_of_a_phase() {
        let record = |setting| PhaseRecord {
            round: 1,
            setting,
            window_s: 10.0,
            cpu_s: 2.0,
            reported: Reported {
                busy_s: 1.5,
                spin_s: 0.4,
                utilized_s: 1.2,
                thread_cpu_s: 1.8,
                park_cpu_s: 0.1,
                states_busy_s: 1.7,
                states_spin_s: 0.6,
            },
            bytes: 250_000_000,
            worker_states: None,
            noise: Noise::unmeasured(),
            storm: StormSummary {
                streams: 200,
                writes: 20_000,
                bytes: 250_000_000,
                bytes_per_s: 25e6,
                late_ticks: 0,
                errors: 0,
            },
        };
        let keel = Pairs(round_metrics(&record(Setting::Keel(Spin::Long))));
        assert_eq!(keel.get("cpu_pct"), Some(20.0));
        assert_eq!(keel.get("reported_busy_pct"), Some(15.0));
        assert_eq!(keel.get("reported_spin_pct"), Some(4.0));
        assert!((keel.get("gap_pp").unwrap() + 1.0).abs() < 1e-9);
        assert!((keel.get("reported_over_cpu").unwrap() - 0.95).abs() < 1e-9);
        assert_eq!(keel.get("received_mb_per_s"), Some(25.0));
        assert_eq!(keel.get("workers_thread_cpu_pct"), Some(18.0));
        assert_eq!(keel.get("park_cpu_pct"), Some(1.0));
        let tokio = Pairs(round_metrics(&record(Setting::Tokio)));
        assert_eq!(tokio.get("reported_spin_pct"), None);
        assert_eq!(tokio.get("workers_thread_cpu_pct"), None);
        assert_eq!(tokio.get("park_cpu_pct"), None);
        assert_eq!(tokio.get("states_spin_pct"), None);
        assert_eq!(keel.get("states_spin_pct"), Some(6.0));
    }
}
