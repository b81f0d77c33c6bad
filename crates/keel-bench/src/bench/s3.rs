//! S3, mixed traffic and the control plane: does the admin endpoint stay
//! fast while the proxy beside it is saturated?
//!
//! A proxy forwards to a backend in its own process. In each phase a fresh
//! backend and proxy start; the admin endpoint is first probed alone (the
//! unloaded latency), then under load: 4 connections download a 1 MiB
//! object in a loop (bulk), 20 clients open a new connection per request
//! for an empty object (connection rate), and an admin request every
//! 20 ms is timed end to end. Four proxies are measured: keel with
//! classes (admin urgent, accept and setup normal, forwarding bulk), the
//! same with the urgent class on keel's urgent lane (a thread the OS
//! schedules ahead of the workers; see `keel::Builder::urgent_lane`), keel
//! with everything in one class, and tokio.
//!
//! Rounds interleave the four and alternate their order; figures are
//! medians across rounds, and each verdict is judged on its per-round
//! ratios (see [`super::judge`]).
//!
//! Every admin answer carries the proxy's clock as it was produced (see
//! [`crate::serve::stamp`]), so beside the end-to-end latency the probe
//! records the proxy's share: from the probe's connection being
//! established (the accept is ready) to the answer. The control-plane
//! verdicts are judged on that share (`admin_server_*_us`), which is what
//! the runtime schedules; the end-to-end figures and their ratios are
//! reported beside them.

use std::time::Duration;

use serde::Serialize;
use serde_json::json;

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
use crate::load::realtime::ProbeScheduling;
use crate::load::s3::S3LoadSummary;
use crate::load::summary::Quantiles;
use crate::serve::control::AddrLine;
use crate::serve::RuntimeKind;

/// What the scenario measures, for the table.
const TITLE: &str = "mixed traffic and the control plane";

/// How long the proxy runs before the first probe.
const SETTLE: Duration = Duration::from_millis(300);

/// Admin p99 under load over alone, keel with classes: at most this.
pub const LOADED_OVER_IDLE: f64 = 3.0;

/// "Well below": keel with classes' loaded admin p99 over the others'.
pub const WELL_BELOW: f64 = 0.5;

/// Connections set up per second of connection work (the accept loop,
/// the backend connects and the forwarding of short exchanges), keel
/// with classes over tokio: at least. What connection work gets per unit
/// of the time the shares give it; connections/s beside tokio's is
/// reported, since how much time tokio's unclassed queue leaves the
/// connections depends on what a connection costs on the host (see
/// docs/scenarios.md).
pub const CONNECTION_WORK_VS_TOKIO: f64 = 0.9;

/// Points the bulk class's charged share of the two backlogged classes
/// (normal and bulk) may lie from what their shares give it: at most.
pub const SPLIT_POINTS: f64 = 3.0;

/// The most of the loaded window the proxy's workers may spend idle
/// (parked or spinning), on average, for the round's split to be judged.
/// Shares divide a busy worker's time; a worker with time to spare gives
/// every class what it asks, so the split then measures the load's mix,
/// not the scheduler. On two CPUs the proxy idles 1-9% of the window; on
/// sixteen, where the load cannot saturate eight workers, 20-77%.
pub const CONTENDED_IDLE_PCT: f64 = 10.0;

/// MB forwarded per second of download-forwarding polls, keel with
/// classes over tokio: at least. What the downloads get per unit of the
/// time the shares give them; their MB/s beside tokio's is reported, as
/// tokio gives them whatever the unclassed queue leaves (see
/// docs/scenarios.md).
pub const DOWNLOAD_WORK_VS_TOKIO: f64 = 0.9;

/// keel with the urgent lane's loaded admin p99 over tokio's: at most.
pub const LANE_VS_TOKIO: f64 = 1.0 / 3.0;

/// The sizes and setup of one S3 run.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// What every scenario run shares.
    pub run: RunSpec,
    /// Connections downloading the 1 MiB object, per proxy worker.
    pub bulk: u64,
    /// Clients opening a connection per request, per proxy worker.
    pub clients: u64,
    /// Milliseconds between admin requests.
    pub admin_interval_ms: u64,
}

impl S3Config {
    /// Threads of the load, and worker threads of the backend: half the
    /// load CPUs each, at least one. On two CPUs that is one each, as
    /// before; on more, one thread of each could not keep a proxy of many
    /// workers busy, and its shares would divide idle time (see
    /// [`CONTENDED_IDLE_PCT`]).
    fn helper_threads(&self) -> u64 {
        (self.run.placement.rest.len() as u64 / 2).max(1)
    }
}

/// One proxy a phase measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// keel, admin urgent, setup normal, forwarding bulk.
    Classes,
    /// keel with classes, the urgent class on the urgent lane.
    Lane,
    /// keel, everything in the normal class.
    SingleClass,
    /// keel on io_uring, with classes as in `Classes`.
    UringClasses,
    /// tokio.
    Tokio,
}

impl Variant {
    /// The variants a run measures for `runtimes`, in canonical order.
    fn all(runtimes: &[RuntimeKind]) -> Vec<Variant> {
        let mut out = Vec::new();
        if runtimes.contains(&RuntimeKind::Keel) {
            out.extend([Variant::Classes, Variant::Lane, Variant::SingleClass]);
        }
        if runtimes.contains(&RuntimeKind::KeelUring) {
            out.push(Variant::UringClasses);
        }
        if runtimes.contains(&RuntimeKind::Tokio) {
            out.push(Variant::Tokio);
        }
        out
    }

    /// The runtime.
    fn runtime(self) -> RuntimeKind {
        match self {
            Variant::Classes | Variant::Lane | Variant::SingleClass => RuntimeKind::Keel,
            Variant::UringClasses => RuntimeKind::KeelUring,
            Variant::Tokio => RuntimeKind::Tokio,
        }
    }

    /// The mode name in the report.
    fn mode(self) -> &'static str {
        match self {
            Variant::Classes | Variant::UringClasses => "classes",
            Variant::Lane => "classes-lane",
            Variant::SingleClass => "single-class",
            Variant::Tokio => "default",
        }
    }
}

/// One phase's figures with where it sat in the run.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRecord {
    /// Round number, from 1.
    round: u32,
    /// The proxy measured.
    variant: Variant,
    /// The admin probe alone.
    idle: S3LoadSummary,
    /// The admin probe, bulk and connection rate together.
    loaded: S3LoadSummary,
    /// Proxy process CPU seconds over the loaded window.
    cpu_s: f64,
    /// Seconds between the proxy's marks around the loaded window.
    window_s: f64,
    /// keel: per worker, the share of the loaded window each state took.
    worker_states: Option<Vec<[f64; 6]>>,
    /// Seconds of the proxy's polls in the loaded window by role: setup,
    /// short forwarding, long forwarding (see `serve::s3`).
    roles: Option<[f64; 3]>,
    /// keel: seconds each class (urgent, normal, bulk) was charged in the
    /// loaded window.
    charged: Option<[f64; 3]>,
    /// keel: each class's configured shares (urgent, normal, bulk).
    shares: Option<[f64; 3]>,
    /// The host's noise, the worse of the alone and the loaded windows.
    noise: Noise,
}

/// Runs S3 and judges it.
pub fn run(config: &S3Config) -> Result<Outcome, Error> {
    scenario::run(config)
}

impl Scenario for S3Config {
    type Phase = Variant;
    type Record = PhaseRecord;
    const ID: &'static str = "s3";
    const TITLE: &'static str = TITLE;

    fn spec(&self) -> &RunSpec {
        &self.run
    }

    /// Every proxy, in one stage.
    fn stages(&self) -> Vec<Vec<Variant>> {
        vec![Variant::all(&self.run.runtimes)]
    }

    fn phase_name(&self, variant: Variant) -> String {
        format!("{} {}", variant.runtime(), variant.mode())
    }

    /// The admin probed alone, then under load.
    fn expected(&self, _: Variant) -> Duration {
        SETTLE + self.run.window() * 2
    }

    fn measure(&self, round: u32, variant: Variant, bar: &PhaseBar) -> Result<PhaseRecord, Error> {
        measure(self, round, variant, bar)
    }

    fn summary(&self, record: &PhaseRecord) -> String {
        format!(
            "admin p99 alone {:>8.1} us  loaded {:>8.1} us  bulk {:>7.1} MB/s  conns/s {:>7.0}  cpu {:.2} s",
            record.idle.admin_p99_us,
            record.loaded.admin_p99_us,
            record.loaded.bulk_mb_per_s,
            record.loaded.conns_per_s,
            record.cpu_s,
        )
    }

    fn round_of(record: &PhaseRecord) -> u32 {
        record.round
    }

    fn noise_of(record: &PhaseRecord) -> Noise {
        record.noise
    }

    /// Per variant measured in the round, its metrics.
    fn round_runs(&self, records: &[&PhaseRecord]) -> Vec<RunFigures> {
        Variant::all(&self.run.runtimes)
            .into_iter()
            .filter_map(|variant| {
                let record = records.iter().find(|r| r.variant == variant)?;
                Some(RunFigures {
                    runtime: variant.runtime().to_string(),
                    mode: variant.mode().to_string(),
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
            (
                "bulk_connections",
                json!(self.bulk.saturating_mul(self.run.workers)),
            ),
            ("object_bytes", json!(1u64 << 20)),
            (
                "rate_clients",
                json!(self.clients.saturating_mul(self.run.workers)),
            ),
            ("admin_interval_ms", json!(self.admin_interval_ms)),
        ]
    }

    fn schedulings(record: &PhaseRecord) -> Vec<Option<&ProbeScheduling>> {
        vec![
            record.idle.scheduling.as_ref(),
            record.loaded.scheduling.as_ref(),
        ]
    }

    fn charts(&self, records: &[PhaseRecord]) -> Vec<Chart> {
        charts(records)
    }
}

/// Where keel's workers spent the first round's loaded windows.
fn charts(records: &[PhaseRecord]) -> Vec<Chart> {
    let phases: Vec<(String, Vec<[f64; 6]>)> = records
        .iter()
        .filter(|r| r.round == 1)
        .filter_map(|r| {
            let label = match r.variant {
                Variant::UringClasses => format!("{} {}", r.variant.runtime(), r.variant.mode()),
                _ => r.variant.mode().to_string(),
            };
            Some((label, r.worker_states.clone()?))
        })
        .collect();
    vec![charts::worker_state_bars(
        "workers",
        "S3: keel workers by state under load (round 1)".into(),
        &phases,
    )]
}

/// Measures one phase of `round`: a fresh backend and proxy, the admin
/// probed alone and then under load. Children are killed on any early
/// return.
fn measure(
    config: &S3Config,
    round: u32,
    variant: Variant,
    bar: &PhaseBar,
) -> Result<PhaseRecord, Error> {
    let tick = || bar.tick();
    bar.step("starting the backend");
    let mut backend = config.run.spawn(
        Role::Load,
        "keel serve s3-backend",
        &[
            "serve".into(),
            "s3-backend".into(),
            "--workers".into(),
            config.helper_threads().to_string(),
        ],
    )?;
    let backend_addr: AddrLine = backend.recv_json(SERVER_SILENCE, "its address", tick)?;

    bar.step("starting the proxy");
    let mut args: Vec<String> = vec![
        "serve".into(),
        "proxy".into(),
        "--runtime".into(),
        variant.runtime().to_string(),
        "--workers".into(),
        config.run.workers.to_string(),
        "--backend".into(),
        backend_addr.addr.to_string(),
        "--admin-addr".into(),
        "127.0.0.1:0".into(),
    ];
    match variant {
        Variant::SingleClass => args.push("--single-class".into()),
        Variant::Lane => args.push("--urgent-lane".into()),
        Variant::Classes | Variant::UringClasses | Variant::Tokio => {}
    }
    let mut proxy = config.run.spawn(
        Role::Server,
        format!(
            "keel serve proxy ({} {})",
            variant.runtime(),
            variant.mode()
        ),
        &args,
    )?;
    let addrs: AddrLine = proxy.recv_json(SERVER_SILENCE, "its address", tick)?;
    let admin = addrs
        .admin_addr
        .ok_or_else(|| Error::new(format!("{} did not say where its admin is", proxy.name())))?;
    std::thread::sleep(SETTLE);

    bar.step("probing the admin alone");
    let alone_start = mark(&mut proxy, bar)?;
    let idle = load(
        config,
        &addrs.addr.to_string(),
        &admin.to_string(),
        true,
        bar,
    )?;
    bar.step("probing under load");
    let start = mark(&mut proxy, bar)?;
    let loaded = load(
        config,
        &addrs.addr.to_string(),
        &admin.to_string(),
        false,
        bar,
    )?;
    let end = mark(&mut proxy, bar)?;
    let measured = start.to(&end, &config.run.placement.server);

    bar.step("stopping");
    for child in [&mut proxy, &mut backend] {
        child.send_line("stop")?;
        let _ = child.finish(Duration::from_secs(5))?;
    }
    Ok(PhaseRecord {
        round,
        variant,
        idle,
        loaded,
        cpu_s: measured.cpu_s,
        window_s: measured.window_s,
        worker_states: charts::keel_worker_states(&start.mark.runtime, &end.mark.runtime),
        roles: between(&start.mark.runtime, &end.mark.runtime, |mark| {
            let proxy = &mark["proxy"];
            Some([
                proxy["setup_s"].as_f64()?,
                proxy["forward_short_s"].as_f64()?,
                proxy["forward_long_s"].as_f64()?,
            ])
        }),
        charged: between(&start.mark.runtime, &end.mark.runtime, |mark| {
            let class = |index: usize| mark["classes"][index]["charged_s"].as_f64();
            Some([class(0)?, class(1)?, class(2)?])
        }),
        shares: {
            let class = |index: usize| end.mark.runtime["classes"][index]["shares"].as_f64();
            class(0)
                .zip(class(1))
                .zip(class(2))
                .map(|((u, n), b)| [u, n, b])
        },
        noise: alone_start
            .to(&start, &config.run.placement.server)
            .noise
            .worst(measured.noise),
    })
}

/// What `read` finds at the `end` mark less what it finds at `start`,
/// figure by figure; `None` when either mark lacks it (a tokio proxy has
/// no classes).
fn between(
    start: &serde_json::Value,
    end: &serde_json::Value,
    read: impl Fn(&serde_json::Value) -> Option<[f64; 3]>,
) -> Option<[f64; 3]> {
    let (start, end) = (read(start)?, read(end)?);
    Some(std::array::from_fn(|i| (end[i] - start[i]).max(0.0)))
}

/// Runs `keel-bench load s3` (the probe alone with `alone`) and reads its line.
fn load(
    config: &S3Config,
    proxy: &str,
    admin: &str,
    alone: bool,
    bar: &PhaseBar,
) -> Result<S3LoadSummary, Error> {
    let mut args: Vec<String> = vec![
        "load".into(),
        "s3".into(),
        "--admin".into(),
        admin.into(),
        "--duration-s".into(),
        config.run.duration_s.to_string(),
        "--warmup-ms".into(),
        config.run.warmup_ms.to_string(),
        "--admin-interval-ms".into(),
        config.admin_interval_ms.to_string(),
    ];
    if alone {
        args.push("--no-load".into());
    } else {
        args.extend([
            "--proxy".into(),
            proxy.into(),
            "--bulk".into(),
            config.bulk.saturating_mul(config.run.workers).to_string(),
            "--clients".into(),
            config
                .clients
                .saturating_mul(config.run.workers)
                .to_string(),
            "--threads".into(),
            config.helper_threads().to_string(),
        ]);
    }
    let mut child = config
        .run
        .spawn(Role::Load, "keel load s3", &config.run.probe_args(args))?;
    let budget = Duration::from_millis(config.run.warmup_ms)
        + Duration::from_secs_f64(config.run.duration_s)
        + Duration::from_secs(30);
    let summary: S3LoadSummary = child.recv_json(budget, "its results", || bar.tick())?;
    child.finish_clean(Duration::from_secs(10))?;
    Ok(summary)
}

/// The metrics of one phase.
fn round_metrics(record: &PhaseRecord) -> Vec<(&'static str, f64)> {
    let server = |summary: &S3LoadSummary, q: fn(&Quantiles) -> f64| {
        summary.admin_server.as_ref().map_or(f64::NAN, q)
    };
    let mut metrics = vec![
        (
            "admin_server_idle_p50_us",
            server(&record.idle, |q| q.p50_us),
        ),
        (
            "admin_server_idle_p99_us",
            server(&record.idle, |q| q.p99_us),
        ),
        ("admin_server_p50_us", server(&record.loaded, |q| q.p50_us)),
        ("admin_server_p99_us", server(&record.loaded, |q| q.p99_us)),
        ("admin_server_max_us", server(&record.loaded, |q| q.max_us)),
        ("admin_idle_p50_us", record.idle.admin_p50_us),
        ("admin_idle_p99_us", record.idle.admin_p99_us),
        ("admin_p50_us", record.loaded.admin_p50_us),
        ("admin_p99_us", record.loaded.admin_p99_us),
        ("admin_max_us", record.loaded.admin_max_us),
        (
            "admin_p99_ratio",
            ratio(
                Some(record.loaded.admin_p99_us),
                Some(record.idle.admin_p99_us),
            )
            .unwrap_or(f64::NAN),
        ),
        ("bulk_mb_per_s", record.loaded.bulk_mb_per_s),
        ("conns_per_s", record.loaded.conns_per_s),
        ("admin_samples", record.loaded.admin_samples as f64),
        ("cpu_s", record.cpu_s),
    ];
    let percent = |part: f64, whole: f64| {
        if whole > 0.0 {
            100.0 * part / whole
        } else {
            0.0
        }
    };
    if let Some([setup, short, long]) = record.roles {
        metrics.extend([
            ("setup_pct", percent(setup, record.window_s)),
            ("forward_short_pct", percent(short, record.window_s)),
            ("forward_long_pct", percent(long, record.window_s)),
            (
                "conns_per_connection_work_s",
                ratio(
                    Some(record.loaded.conns_per_s * record.window_s),
                    Some(setup + short),
                )
                .unwrap_or(f64::NAN),
            ),
            (
                "mb_per_download_s",
                ratio(
                    Some(record.loaded.bulk_mb_per_s * record.window_s),
                    Some(long),
                )
                .unwrap_or(f64::NAN),
            ),
        ]);
    }
    if let Some(workers) = record.worker_states.as_ref().filter(|w| !w.is_empty()) {
        // The states are task, io, timers, search, spin, parked (see
        // `charts::KEEL_STATES`): the last two are time without work.
        let idle: f64 = workers.iter().map(|w| w[4] + w[5]).sum::<f64>() / workers.len() as f64;
        metrics.push(("worker_idle_pct", idle));
    }
    if let Some(charged) = record.charged {
        let total: f64 = charged.iter().sum();
        metrics.extend([
            ("charged_urgent_pct", percent(charged[0], total)),
            ("charged_normal_pct", percent(charged[1], total)),
            ("charged_bulk_pct", percent(charged[2], total)),
            (
                "bulk_of_backlogged_charged_pct",
                percent(charged[2], charged[1] + charged[2]),
            ),
        ]);
    }
    if let Some(shares) = record.shares {
        metrics.push((
            "bulk_of_backlogged_shares_pct",
            percent(shares[2], shares[1] + shares[2]),
        ));
    }
    metrics
}

/// The S3 verdicts, from one round's figures.
///
/// The control-plane verdicts are judged on the proxy's share of each
/// admin request; the end-to-end ratios are reported beside them.
fn verdicts(runs: &[RunFigures], runtimes: &[RuntimeKind]) -> Vec<Verdict> {
    let metric = |runtime: &str, mode: &str, name: &str| find_metric(runs, runtime, mode, name);
    let missing = |needed: &[RuntimeKind]| why_missing(needed, runtimes);
    let (keel, tokio) = (RuntimeKind::Keel, RuntimeKind::Tokio);
    let classes = |name| metric("keel", "classes", name);
    let stretch = |runtime: &str, mode: &str, loaded: &str, alone: &str| {
        ratio(metric(runtime, mode, loaded), metric(runtime, mode, alone))
    };
    // A keel proxy's loaded admin p99 over its unloaded one.
    let loaded_over_alone = |mode: &str, name: &'static str| {
        Verdict::new(
            name,
            "keel",
            stretch(
                "keel",
                mode,
                "admin_server_p99_us",
                "admin_server_idle_p99_us",
            ),
            Some(Goal::AtMost(LOADED_OVER_IDLE)),
        )
        .missing_because(missing(&[keel]))
    };
    // A keel proxy's loaded admin p99 over tokio's.
    let admin_vs_tokio = |mode: &str, name: &'static str, goal: f64| {
        Verdict::new(
            name,
            "keel",
            ratio(
                metric("keel", mode, "admin_server_p99_us"),
                metric("tokio", "default", "admin_server_p99_us"),
            ),
            Some(Goal::AtMost(goal)),
        )
        .missing_because(missing(&[keel, tokio]))
    };
    // A keel proxy's data plane beside tokio's: whether the backlogged
    // classes got their shares, and what each class's time buys
    // (connections per second of connection work, MB per second of
    // download forwarding) judged; connections/s and MB/s reported.
    let data_plane = |mode: &str, names: [&'static str; 5]| -> Vec<Verdict> {
        let vs_tokio = |name, figure, goal| {
            Verdict::new(
                name,
                "keel",
                ratio(
                    metric("keel", mode, figure),
                    metric("tokio", "default", figure),
                ),
                goal,
            )
            .missing_because(missing(&[keel, tokio]))
        };
        // A round whose workers had time to spare has no contention for
        // the shares to divide: its split is not judged.
        let idle =
            metric("keel", mode, "worker_idle_pct").filter(|&idle| idle > CONTENDED_IDLE_PCT);
        let split = metric("keel", mode, "bulk_of_backlogged_charged_pct")
            .zip(metric("keel", mode, "bulk_of_backlogged_shares_pct"))
            .map(|(charged, shares)| (charged - shares).abs())
            .filter(|_| idle.is_none());
        let why_no_split = match idle {
            Some(idle) => format!(
                "the proxy's workers were {idle:.0}% idle (at most {CONTENDED_IDLE_PCT}% judged): \
                 shares divide a busy worker, and an idle one gives every class its demand"
            ),
            None => missing(&[keel]),
        };
        vec![
            vs_tokio(
                names[0],
                "conns_per_connection_work_s",
                Some(Goal::AtLeast(CONNECTION_WORK_VS_TOKIO)),
            ),
            vs_tokio(names[1], "conns_per_s", None),
            Verdict::new(names[2], "keel", split, Some(Goal::AtMost(SPLIT_POINTS)))
                .missing_because(why_no_split),
            vs_tokio(
                names[3],
                "mb_per_download_s",
                Some(Goal::AtLeast(DOWNLOAD_WORK_VS_TOKIO)),
            ),
            vs_tokio(names[4], "bulk_mb_per_s", None),
        ]
    };
    let mut out = vec![
        loaded_over_alone("classes", "admin server p99 loaded/alone, keel classes"),
        Verdict::new(
            "admin server p99 keel classes/keel single-class",
            "keel",
            ratio(
                classes("admin_server_p99_us"),
                metric("keel", "single-class", "admin_server_p99_us"),
            ),
            Some(Goal::AtMost(WELL_BELOW)),
        )
        .missing_because(missing(&[keel])),
        admin_vs_tokio("classes", "admin server p99 keel classes/tokio", WELL_BELOW),
    ];
    out.extend(data_plane(
        "classes",
        [
            "connections per second of connection work keel classes/tokio",
            "conns_per_s keel classes/tokio",
            "bulk charged share of bulk+normal, points from its shares, keel classes",
            "MB per download-second keel classes/tokio",
            "bulk_mb_per_s keel classes/tokio",
        ],
    ));
    // The urgent lane: the admin within 3x of alone and a third of
    // tokio's, at no cost to the data plane.
    out.push(loaded_over_alone(
        "classes-lane",
        "admin server p99 loaded/alone, keel lane",
    ));
    out.push(admin_vs_tokio(
        "classes-lane",
        "admin server p99 keel lane/tokio",
        LANE_VS_TOKIO,
    ));
    out.extend(data_plane(
        "classes-lane",
        [
            "connections per second of connection work keel lane/tokio",
            "conns_per_s keel lane/tokio",
            "bulk charged share of bulk+normal, points from its shares, keel lane",
            "MB per download-second keel lane/tokio",
            "bulk_mb_per_s keel lane/tokio",
        ],
    ));
    for (runtime, mode, name) in [
        (
            "keel",
            "single-class",
            "admin server p99 loaded/alone, keel single-class",
        ),
        ("tokio", "default", "admin server p99 loaded/alone, tokio"),
    ] {
        let kind = if runtime == "keel" { keel } else { tokio };
        out.push(
            Verdict::new(
                name,
                kind.name(),
                stretch(
                    runtime,
                    mode,
                    "admin_server_p99_us",
                    "admin_server_idle_p99_us",
                ),
                None,
            )
            .missing_because(missing(&[kind])),
        );
    }
    // End to end, as the probe saw it: reported beside the judged figures.
    for (runtime, mode, name) in [
        (
            "keel",
            "classes",
            "end-to-end admin p99 loaded/alone, keel classes",
        ),
        (
            "keel",
            "classes-lane",
            "end-to-end admin p99 loaded/alone, keel lane",
        ),
        (
            "keel",
            "single-class",
            "end-to-end admin p99 loaded/alone, keel single-class",
        ),
        (
            "tokio",
            "default",
            "end-to-end admin p99 loaded/alone, tokio",
        ),
    ] {
        let kind = if runtime == "keel" { keel } else { tokio };
        out.push(
            Verdict::new(
                name,
                kind.name(),
                stretch(runtime, mode, "admin_p99_us", "admin_idle_p99_us"),
                None,
            )
            .missing_because(missing(&[kind])),
        );
    }
    for (mode, name) in [
        ("classes", "end-to-end admin p99 keel classes/tokio"),
        ("classes-lane", "end-to-end admin p99 keel lane/tokio"),
    ] {
        out.push(
            Verdict::new(
                name,
                "keel",
                ratio(
                    metric("keel", mode, "admin_p99_us"),
                    metric("tokio", "default", "admin_p99_us"),
                ),
                None,
            )
            .missing_because(missing(&[keel, tokio])),
        );
    }
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
            record.variant.runtime(),
            record.variant.mode()
        );
        for (what, summary) in [("alone", &record.idle), ("loaded", &record.loaded)] {
            if summary.admin_samples == 0 {
                problems.push(format!("{at} {what}: no admin request was timed"));
            }
            if summary.admin_errors > 0 {
                problems.push(format!(
                    "{at} {what}: {} admin requests failed ({})",
                    summary.admin_errors,
                    summary.first_error.as_deref().unwrap_or("no message")
                ));
            }
        }
        let loaded = &record.loaded;
        if loaded.bulk_bytes == 0 || loaded.conns == 0 {
            problems.push(format!(
                "{at}: the load moved nothing (bulk {} bytes, {} connections)",
                loaded.bulk_bytes, loaded.conns
            ));
        }
        if loaded.bulk_errors + loaded.conn_errors > 0 {
            notes.push(format!(
                "{at}: {} bulk and {} connection-rate requests failed ({})",
                loaded.bulk_errors,
                loaded.conn_errors,
                loaded.first_error.as_deref().unwrap_or("no message")
            ));
        }
    }
    (problems, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::judge::Judgement;

    fn run(runtime: &str, mode: &str, metrics: Vec<(&'static str, f64)>) -> RunFigures {
        RunFigures {
            runtime: runtime.into(),
            mode: mode.into(),
            metrics: Pairs(metrics),
        }
    }

    fn find<'a>(verdicts: &'a [Verdict], name: &str) -> &'a Verdict {
        verdicts
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("no verdict {name}"))
    }

    /// The data plane is judged on the split of the charge and on what
    /// each class's time buys (connections per second of connection work,
    /// MB per second of download forwarding); connections/s and MB/s
    /// beside tokio's are reported.
    #[test]
    fn data_plane_verdicts() {
        let keel = run(
            "keel",
            "classes",
            vec![
                ("conns_per_s", 6_000.0),
                ("conns_per_connection_work_s", 26_000.0),
                ("bulk_mb_per_s", 880.0),
                ("mb_per_download_s", 1_500.0),
                ("bulk_of_backlogged_charged_pct", 58.0),
                ("bulk_of_backlogged_shares_pct", 60.24),
            ],
        );
        let tokio = run(
            "tokio",
            "default",
            vec![
                ("conns_per_s", 4_400.0),
                ("conns_per_connection_work_s", 25_000.0),
                ("bulk_mb_per_s", 1_280.0),
                ("mb_per_download_s", 1_650.0),
            ],
        );
        let verdicts = verdicts(&[keel, tokio], &[RuntimeKind::Keel, RuntimeKind::Tokio]);
        let work = find(
            &verdicts,
            "connections per second of connection work keel classes/tokio",
        );
        assert_eq!(work.judgement, Judgement::Pass);
        assert!((work.value.unwrap() - 26_000.0 / 25_000.0).abs() < 1e-9);
        let conns = find(&verdicts, "conns_per_s keel classes/tokio");
        assert_eq!(conns.judgement, Judgement::Reported);
        assert!((conns.value.unwrap() - 6_000.0 / 4_400.0).abs() < 1e-9);
        let split = find(
            &verdicts,
            "bulk charged share of bulk+normal, points from its shares, keel classes",
        );
        assert_eq!(split.judgement, Judgement::Pass);
        assert!((split.value.unwrap() - 2.24).abs() < 1e-9);
        let work = find(&verdicts, "MB per download-second keel classes/tokio");
        assert_eq!(work.judgement, Judgement::Pass);
        let bulk = find(&verdicts, "bulk_mb_per_s keel classes/tokio");
        assert_eq!(bulk.judgement, Judgement::Reported);
        // No lane run: its verdicts are missing, not judged.
        let lane = find(&verdicts, "conns_per_s keel lane/tokio");
        assert_eq!(lane.judgement, Judgement::Missing);
    }

    /// A split off by more than the allowed points fails, in either
    /// direction, and so does too little work per download-second.
    #[test]
    fn a_skewed_split_and_dear_downloads_fail() {
        for charged in [56.0, 64.5] {
            let keel = run(
                "keel",
                "classes",
                vec![
                    ("mb_per_download_s", 1_400.0),
                    ("bulk_of_backlogged_charged_pct", charged),
                    ("bulk_of_backlogged_shares_pct", 60.24),
                ],
            );
            let tokio = run("tokio", "default", vec![("mb_per_download_s", 1_650.0)]);
            let verdicts = verdicts(&[keel, tokio], &[RuntimeKind::Keel, RuntimeKind::Tokio]);
            let split = find(
                &verdicts,
                "bulk charged share of bulk+normal, points from its shares, keel classes",
            );
            assert_eq!(split.judgement, Judgement::Fail, "charged {charged}");
            let work = find(&verdicts, "MB per download-second keel classes/tokio");
            assert_eq!(work.judgement, Judgement::Fail);
        }
    }

    /// A split measured while the proxy's workers had time to spare is not
    /// judged, and says why; one measured on busy workers is.
    #[test]
    fn a_split_on_idle_workers_is_not_judged() {
        for (idle, judged) in [
            (40.0, false),
            (CONTENDED_IDLE_PCT + 0.5, false),
            (3.0, true),
        ] {
            let keel = run(
                "keel",
                "classes",
                vec![
                    ("bulk_of_backlogged_charged_pct", 41.0),
                    ("bulk_of_backlogged_shares_pct", 60.24),
                    ("worker_idle_pct", idle),
                ],
            );
            let verdicts = verdicts(&[keel], &[RuntimeKind::Keel]);
            let split = find(
                &verdicts,
                "bulk charged share of bulk+normal, points from its shares, keel classes",
            );
            if judged {
                assert_eq!(split.judgement, Judgement::Fail, "idle {idle}");
            } else {
                assert_eq!(split.judgement, Judgement::Missing, "idle {idle}");
                let why = split.missing.as_deref().unwrap_or_default();
                assert!(why.contains("idle"), "{why}");
            }
        }
    }

    /// Connections that cost keel more of its connection work than
    /// tokio's cost it fail, however many connections/s that makes
    /// beside tokio's.
    #[test]
    fn dear_connections_fail_whatever_the_rate() {
        let keel = run(
            "keel",
            "classes",
            vec![
                ("conns_per_s", 6_000.0),
                ("conns_per_connection_work_s", 20_000.0),
            ],
        );
        let tokio = run(
            "tokio",
            "default",
            vec![
                ("conns_per_s", 4_000.0),
                ("conns_per_connection_work_s", 25_000.0),
            ],
        );
        let verdicts = verdicts(&[keel, tokio], &[RuntimeKind::Keel, RuntimeKind::Tokio]);
        let work = find(
            &verdicts,
            "connections per second of connection work keel classes/tokio",
        );
        assert_eq!(work.judgement, Judgement::Fail);
        assert_eq!(
            find(&verdicts, "conns_per_s keel classes/tokio").judgement,
            Judgement::Reported
        );
    }
}
