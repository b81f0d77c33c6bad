//! S1, IO starvation under CPU load: does a busy runtime still answer?
//!
//! The server runs an echo service next to CPU tasks that compute in
//! slices and yield between them; a probe measures echo RTTs once per
//! interval, first with no CPU tasks (idle) and then with them (loaded).
//! Rounds interleave the runtimes and alternate which goes first, so slow
//! drift on a shared machine (another build, thermal state) lands on both
//! alike. Per runtime the figures are medians across rounds; each verdict
//! is a ratio computed within each round and judged on its median and
//! interval (see [`super::judge`]), never on absolute times.
//!
//! The echo servers stamp their answers (see [`crate::serve::stamp`]), so
//! beside each round trip the probe records the server's share of it: from
//! the ping's readiness to the echo's write. That is what the runtime
//! controls, and the IO-starvation verdicts are judged on it
//! (`server_*_us`); the end-to-end round trips stay in the table, with
//! their ratios reported.
//!
//! keel also runs a third variant, `unaccounted`: the same server with the
//! runtime's accounting switched off (a hidden switch that exists for this
//! measurement), next to keel's default in every round (after it in odd
//! rounds, before it in even ones, as the order alternates). Its slices per
//! second and latencies beside keel's are what the accounting costs on a
//! server's work, reported without a goal.

use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use super::calibrate::{calibrate, Calibration};
use super::charts::{self, Chart};
use super::noise::Noise;
use super::outcome::{ring_over_epoll, why_missing, Goal, Outcome, Pairs, RunFigures, Verdict};
use super::phase::{self, PhaseFigures, PhaseSpec};
use super::progress::PhaseBar;
use super::scenario::{self, Scenario};
use super::stats::ratio;
use super::RunSpec;
use crate::error::Error;
use crate::load::realtime::ProbeScheduling;
use crate::load::summary::Quantiles;
use crate::serve::node_keel::worker_pairs;
use crate::serve::RuntimeKind;

/// What the scenario measures, for the table.
const TITLE: &str = "IO starvation under CPU load";

/// The sizes and setup of one S1 run.
#[derive(Debug, Clone)]
pub struct S1Config {
    /// What every scenario run shares.
    pub run: RunSpec,
    /// CPU tasks in the loaded phases.
    pub cpu_tasks: u64,
    /// Target duration of one CPU slice, µs.
    pub slice_us: u64,
    /// Probe interval, µs.
    pub interval_us: u64,
    /// Probe payload, bytes.
    pub payload: u64,
}

/// keel's variant with its accounting off.
const UNACCOUNTED: &str = "unaccounted";

/// Every runtime's own variant.
const DEFAULT: &str = "default";

/// One phase's figures with where it sat in the run.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRecord {
    /// Round number, from 1.
    round: u32,
    /// `idle` or `loaded`.
    phase: &'static str,
    /// [`DEFAULT`], or for keel also [`UNACCOUNTED`].
    mode: &'static str,
    /// What it measured.
    #[serde(flatten)]
    figures: PhaseFigures,
}

/// One phase of a round: a variant, idle or loaded.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    /// The server's runtime.
    runtime: RuntimeKind,
    /// [`DEFAULT`], or for keel also [`UNACCOUNTED`].
    mode: &'static str,
    /// `idle` (no CPU tasks) or `loaded`.
    phase: &'static str,
}

/// S1 ready to run: its sizes and the calibrated CPU slice.
#[derive(Debug, Clone)]
pub struct S1 {
    /// The sizes and setup.
    config: S1Config,
    /// One CPU slice, calibrated on this machine.
    calibration: Calibration,
}

/// Runs S1 and judges it.
pub fn run(config: &S1Config) -> Result<Outcome, Error> {
    let calibration = calibrate(Duration::from_micros(config.slice_us));
    eprintln!(
        "s1: one CPU slice = {} iterations ({:.1} us measured, target {} us)",
        calibration.iters,
        calibration.measured.as_secs_f64() * 1e6,
        config.slice_us
    );
    scenario::run(&S1 {
        config: config.clone(),
        calibration,
    })
}

impl Scenario for S1 {
    type Phase = Phase;
    type Record = PhaseRecord;
    const ID: &'static str = "s1";
    const TITLE: &'static str = TITLE;

    fn spec(&self) -> &RunSpec {
        &self.config.run
    }

    /// Every variant idle, then every variant loaded.
    fn stages(&self) -> Vec<Vec<Phase>> {
        let variants = variants(&self.config.run.runtimes);
        ["idle", "loaded"]
            .map(|phase| {
                variants
                    .iter()
                    .map(|&(runtime, mode)| Phase {
                        runtime,
                        mode,
                        phase,
                    })
                    .collect()
            })
            .into()
    }

    fn phase_name(&self, p: Phase) -> String {
        if p.mode == DEFAULT {
            format!("{} {}", p.runtime, p.phase)
        } else {
            format!("{} {} {}", p.runtime, p.mode, p.phase)
        }
    }

    fn expected(&self, _: Phase) -> Duration {
        phase::SPIN_UP + self.config.run.window()
    }

    fn measure(&self, round: u32, p: Phase, bar: &PhaseBar) -> Result<PhaseRecord, Error> {
        let run = &self.config.run;
        let spec = PhaseSpec {
            label: self.label(round, p),
            runtime: p.runtime,
            workers: run.workers,
            cpu_tasks: if p.phase == "loaded" {
                self.config.cpu_tasks
            } else {
                0
            },
            slice_iters: self.calibration.iters,
            interval_us: self.config.interval_us,
            duration_s: run.duration_s,
            warmup_ms: run.warmup_ms,
            payload: self.config.payload,
            accounting: p.mode == DEFAULT,
        };
        Ok(PhaseRecord {
            round,
            phase: p.phase,
            mode: p.mode,
            figures: phase::measure(run, &spec, bar)?,
        })
    }

    fn summary(&self, record: &PhaseRecord) -> String {
        let f = &record.figures;
        format!(
            "p50 {:>8.1} us  p99 {:>8.1} us  max {:>8.1} us  n {:>6}  slices/s {:>8.0}  cpu {:.2} s",
            f.probe.p50_us, f.probe.p99_us, f.probe.max_us, f.probe.count, f.slices_per_s, f.cpu_s,
        )
    }

    fn round_of(record: &PhaseRecord) -> u32 {
        record.round
    }

    fn noise_of(record: &PhaseRecord) -> Noise {
        record.figures.noise
    }

    /// Per variant (in [`variants`] order) with both phases in the round,
    /// its metrics.
    fn round_runs(&self, records: &[&PhaseRecord]) -> Vec<RunFigures> {
        let find = |phase: &str, runtime: RuntimeKind, mode: &str| {
            records
                .iter()
                .find(|r| r.phase == phase && r.figures.runtime == runtime && r.mode == mode)
        };
        let slice_us = self.calibration.measured.as_secs_f64() * 1e6;
        variants(&self.config.run.runtimes)
            .into_iter()
            .filter_map(|(runtime, mode)| {
                let idle = find("idle", runtime, mode)?;
                let loaded = find("loaded", runtime, mode)?;
                Some(RunFigures {
                    runtime: runtime.to_string(),
                    mode: mode.into(),
                    metrics: Pairs(round_metrics(
                        &idle.figures,
                        &loaded.figures,
                        slice_us,
                        mode == DEFAULT,
                    )),
                })
            })
            .collect()
    }

    fn verdicts(&self, runs: &[RunFigures]) -> Vec<Verdict> {
        verdicts(runs, &self.config.run.runtimes)
    }

    fn check(&self, records: &[PhaseRecord]) -> (Vec<String>, Vec<String>) {
        check(records, self.config.cpu_tasks)
    }

    fn sizes(&self) -> Vec<(&'static str, serde_json::Value)> {
        let (config, calibration) = (&self.config, &self.calibration);
        vec![
            ("cpu_tasks", json!(config.cpu_tasks)),
            ("slice_us", json!(config.slice_us)),
            ("interval_us", json!(config.interval_us)),
            ("payload_bytes", json!(config.payload)),
            ("slice_iters", json!(calibration.iters)),
            (
                "slice_measured_us",
                json!((calibration.measured.as_secs_f64() * 1e7).round() / 10.0),
            ),
        ]
    }

    fn schedulings(record: &PhaseRecord) -> Vec<Option<&ProbeScheduling>> {
        vec![record.figures.probe.scheduling.as_ref()]
    }

    fn charts(&self, records: &[PhaseRecord]) -> Vec<Chart> {
        charts(records)
    }
}

/// The variants a run measures: each runtime as it comes, and keel also
/// unaccounted, right after keel.
fn variants(runtimes: &[RuntimeKind]) -> Vec<(RuntimeKind, &'static str)> {
    let mut out = Vec::new();
    for &runtime in runtimes {
        out.push((runtime, DEFAULT));
        if runtime == RuntimeKind::Keel {
            out.push((runtime, UNACCOUNTED));
        }
    }
    out
}

/// The first round's latency over time, per runtime and phase, and where
/// keel's workers spent that round's time.
fn charts(records: &[PhaseRecord]) -> Vec<Chart> {
    let first: Vec<&PhaseRecord> = records.iter().filter(|r| r.round == 1).collect();
    let latency = charts::latency_lines(
        "latency",
        "S1: echo RTT over time (round 1)".into(),
        first
            .iter()
            .filter(|r| r.mode == DEFAULT)
            .map(|r| {
                (
                    format!("{} {}", r.figures.runtime, r.phase),
                    r.figures.probe.series.as_slice(),
                )
            })
            .collect(),
    );
    let phases: Vec<(String, Vec<[f64; 6]>)> = first
        .iter()
        .filter(|r| r.figures.runtime.is_keel() && r.mode == DEFAULT)
        .filter_map(|r| {
            let states =
                charts::keel_worker_states(&r.figures.runtime_start, &r.figures.runtime_end)?;
            let label = match r.figures.runtime {
                RuntimeKind::Keel => r.phase.to_string(),
                ring => format!("{ring} {}", r.phase),
            };
            Some((label, states))
        })
        .collect();
    let workers = charts::worker_state_bars(
        "workers",
        "S1: keel workers by state (round 1)".into(),
        &phases,
    );
    vec![latency, workers]
}

/// The metrics of one round of one runtime, from its idle and loaded
/// phases.
///
/// `server_slice_bound_us` is what a cooperative scheduler can promise a
/// ping that arrives while a CPU task runs: the rest of that task's slice
/// (a slice of `slice_us` cannot be interrupted), then the wake-up an idle
/// server pays too. A server that polls its sockets between every two
/// slices stays within it.
fn round_metrics(
    idle: &PhaseFigures,
    loaded: &PhaseFigures,
    slice_us: f64,
    accounted: bool,
) -> Vec<(&'static str, f64)> {
    let server =
        |f: &PhaseFigures, q: fn(&Quantiles) -> f64| f.probe.server.as_ref().map_or(f64::NAN, q);
    let mut metrics = vec![
        (
            "server_slice_bound_us",
            slice_us + server(idle, |q| q.p99_us),
        ),
        ("server_idle_p50_us", server(idle, |q| q.p50_us)),
        ("server_idle_p99_us", server(idle, |q| q.p99_us)),
        ("server_loaded_p50_us", server(loaded, |q| q.p50_us)),
        ("server_loaded_p99_us", server(loaded, |q| q.p99_us)),
        ("server_loaded_p999_us", server(loaded, |q| q.p999_us)),
        ("server_loaded_max_us", server(loaded, |q| q.max_us)),
        ("idle_p50_us", idle.probe.p50_us),
        ("idle_p99_us", idle.probe.p99_us),
        ("loaded_p50_us", loaded.probe.p50_us),
        ("loaded_p99_us", loaded.probe.p99_us),
        ("loaded_p999_us", loaded.probe.p999_us),
        ("loaded_max_us", loaded.probe.max_us),
        ("slices_per_s", loaded.slices_per_s),
        ("cpu_s", loaded.cpu_s),
        ("idle_cpu_s", idle.cpu_s),
        ("idle_samples", idle.probe.count as f64),
        ("loaded_samples", loaded.probe.count as f64),
        (
            "probe_errors",
            (idle.probe.errors + loaded.probe.errors) as f64,
        ),
    ];
    // A runtime without its accounting counts nothing.
    if let Some(looks) = io_looks_per_s(loaded).filter(|_| accounted) {
        metrics.push(("io_looks_per_s", looks));
    }
    metrics
}

/// keel's looks at the reactor a second over the loaded window, all
/// workers together (`None` for a runtime that does not count them).
fn io_looks_per_s(loaded: &PhaseFigures) -> Option<f64> {
    let pairs = worker_pairs(&loaded.runtime_start, &loaded.runtime_end)?;
    let looks: Option<u64> = pairs
        .iter()
        // A worker the first mark did not have starts from zero.
        .map(|(start, end)| Some(end.io_looks?.saturating_sub(start.io_looks.unwrap_or(0))))
        .sum();
    ratio(Some(looks? as f64), Some(loaded.window_s))
}

/// The S1 verdicts, from one round's figures.
///
/// The IO-starvation verdicts are judged on the server's share of the
/// round trips; the end-to-end ratios are reported beside them.
fn verdicts(runs: &[RunFigures], runtimes: &[RuntimeKind]) -> Vec<Verdict> {
    let metric_of = |runtime: RuntimeKind, mode: &str, name: &str| {
        runs.iter()
            .find(|r| r.runtime == runtime.name() && r.mode == mode)
            .and_then(|r| r.metric(name))
    };
    let metric = |runtime: RuntimeKind, name: &str| metric_of(runtime, DEFAULT, name);
    let why = |needed: &[RuntimeKind]| why_missing(needed, runtimes);
    let (keel, tokio, monoio) = (RuntimeKind::Keel, RuntimeKind::Tokio, RuntimeKind::Monoio);
    let stretch = |runtime, loaded, idle| ratio(metric(runtime, loaded), metric(runtime, idle));
    let mut out = vec![
        Verdict::new(
            "server loaded_p99/idle_p99",
            "keel",
            stretch(keel, "server_loaded_p99_us", "server_idle_p99_us"),
            None,
        )
        .missing_because(why(&[keel])),
        Verdict::new(
            "server loaded_p99/idle_p99",
            "tokio",
            stretch(tokio, "server_loaded_p99_us", "server_idle_p99_us"),
            None,
        )
        .missing_because(why(&[tokio])),
        Verdict::new(
            "server loaded_p99 keel/tokio",
            "keel",
            ratio(
                metric(keel, "server_loaded_p99_us"),
                metric(tokio, "server_loaded_p99_us"),
            ),
            Some(Goal::AtMost(0.333)),
        )
        .missing_because(why(&[keel, tokio])),
        Verdict::new(
            "slices_per_s keel/tokio",
            "keel",
            ratio(metric(keel, "slices_per_s"), metric(tokio, "slices_per_s")),
            Some(Goal::AtLeast(0.97)),
        )
        .missing_because(why(&[keel, tokio])),
        Verdict::new(
            "end-to-end loaded_p99/idle_p99",
            "keel",
            stretch(keel, "loaded_p99_us", "idle_p99_us"),
            None,
        )
        .missing_because(why(&[keel])),
        Verdict::new(
            "end-to-end loaded_p99/idle_p99",
            "tokio",
            stretch(tokio, "loaded_p99_us", "idle_p99_us"),
            None,
        )
        .missing_because(why(&[tokio])),
        Verdict::new(
            "end-to-end loaded_p99 keel/tokio",
            "keel",
            ratio(
                metric(keel, "loaded_p99_us"),
                metric(tokio, "loaded_p99_us"),
            ),
            None,
        )
        .missing_because(why(&[keel, tokio])),
    ];
    // Judged for keel: a ping that arrives while a CPU task runs waits
    // out the rest of that task's slice, at most one slice, and no more.
    for (runtime, goal) in [(keel, Some(Goal::AtMost(1.0))), (tokio, None)] {
        out.push(
            Verdict::new(
                "server loaded_p99/(slice + idle_p99)",
                runtime.name(),
                ratio(
                    metric(runtime, "server_loaded_p99_us"),
                    metric(runtime, "server_slice_bound_us"),
                ),
                goal,
            )
            .missing_because(why(&[runtime])),
        );
    }
    // What the accounting costs: keel against itself with it off.
    for (name, metric_name) in [
        ("slices_per_s keel/keel unaccounted", "slices_per_s"),
        (
            "server loaded_p99 keel/keel unaccounted",
            "server_loaded_p99_us",
        ),
    ] {
        out.push(
            Verdict::new(
                name,
                "keel",
                ratio(
                    metric(keel, metric_name),
                    metric_of(keel, UNACCOUNTED, metric_name),
                ),
                None,
            )
            .missing_because(why(&[keel])),
        );
    }
    // The ring against epoll: a busy worker's look at the ring's
    // completions costs no system call, so its loaded p99 should be no
    // worse.
    out.push(ring_over_epoll(
        runs,
        runtimes,
        "server loaded_p99 keel-uring/keel",
        DEFAULT,
        "server_loaded_p99_us",
        Some(Goal::AtMost(1.0)),
    ));
    out.push(ring_over_epoll(
        runs,
        runtimes,
        "slices_per_s keel-uring/keel",
        DEFAULT,
        "slices_per_s",
        None,
    ));
    out.push(ring_over_epoll(
        runs,
        runtimes,
        "io_looks_per_s keel-uring/keel",
        DEFAULT,
        "io_looks_per_s",
        None,
    ));
    // monoio, a thread-per-core runtime, beside keel: how its one queue a
    // thread treats a ready socket behind CPU tasks.
    out.extend([
        Verdict::new(
            "server loaded_p99/idle_p99",
            "monoio",
            stretch(monoio, "server_loaded_p99_us", "server_idle_p99_us"),
            None,
        )
        .missing_because(why(&[monoio])),
        Verdict::new(
            "server loaded_p99/(slice + idle_p99)",
            "monoio",
            ratio(
                metric(monoio, "server_loaded_p99_us"),
                metric(monoio, "server_slice_bound_us"),
            ),
            None,
        )
        .missing_because(why(&[monoio])),
        Verdict::new(
            "server loaded_p99 keel/monoio",
            "keel",
            ratio(
                metric(keel, "server_loaded_p99_us"),
                metric(monoio, "server_loaded_p99_us"),
            ),
            None,
        )
        .missing_because(why(&[keel, monoio])),
        Verdict::new(
            "slices_per_s keel/monoio",
            "keel",
            ratio(metric(keel, "slices_per_s"), metric(monoio, "slices_per_s")),
            None,
        )
        .missing_because(why(&[keel, monoio])),
    ]);
    out
}

/// Figures that should exist and do not (problems), and other remarks
/// (notes).
fn check(records: &[PhaseRecord], cpu_tasks: u64) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    for record in records {
        let f = &record.figures;
        let at = format!(
            "round {} {} {} {}",
            record.round, f.runtime, record.mode, record.phase
        );
        if f.probe.count == 0 {
            problems.push(format!("{at}: the probe recorded no round trips"));
        }
        let latencies = [
            f.probe.p50_us,
            f.probe.p99_us,
            f.probe.p999_us,
            f.probe.max_us,
        ];
        if f.probe.count > 0 && latencies.iter().any(|v| !v.is_finite() || *v <= 0.0) {
            problems.push(format!("{at}: the probe reported an impossible latency"));
        }
        if !(f.window_s > 0.0 && f.window_s.is_finite()) {
            problems.push(format!("{at}: the two marks span no time"));
        }
        if !f.cpu_s.is_finite() {
            problems.push(format!("{at}: no CPU time could be read"));
        }
        if record.phase == "loaded" && cpu_tasks > 0 && f.slices == 0 {
            problems.push(format!("{at}: the CPU tasks completed no slice"));
        }
        if f.probe.errors > 0 {
            notes.push(format!(
                "{at}: {} probe exchanges failed (see the log)",
                f.probe.errors
            ));
        }
    }
    (problems, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::outcome::medians_of;
    use crate::load::summary::ProbeSummary;

    /// S1 of `runtimes` with a 200 µs slice.
    fn s1(runtimes: &[RuntimeKind]) -> S1 {
        S1 {
            config: S1Config {
                run: RunSpec::for_tests(runtimes),
                cpu_tasks: 8,
                slice_us: 200,
                interval_us: 1000,
                payload: 64,
            },
            calibration: Calibration {
                iters: 1000,
                measured: Duration::from_micros(200),
            },
        }
    }

    /// Figures of a phase with end-to-end p99 `p99` (the server's share
    /// half of it) and `slices_per_s` slices per second.
    fn figures(runtime: RuntimeKind, p99: f64, slices_per_s: f64) -> PhaseFigures {
        PhaseFigures {
            runtime,
            cpu_tasks: 8,
            probe: ProbeSummary {
                count: 100,
                p50_us: p99 / 2.0,
                p99_us: p99,
                p999_us: p99 * 1.5,
                max_us: p99 * 2.0,
                errors: 0,
                series: Vec::new(),
                server: Some(Quantiles {
                    count: 100,
                    p50_us: p99 / 4.0,
                    p99_us: p99 / 2.0,
                    p999_us: p99,
                    max_us: p99,
                }),
                scheduling: None,
            },
            window_s: 1.0,
            slices: slices_per_s as u64,
            slices_per_s,
            cpu_s: 1.9,
            runtime_start: serde_json::Value::Null,
            runtime_end: serde_json::Value::Null,
            noise: Noise::unmeasured(),
        }
    }

    /// Records for `rounds` rounds of one runtime, loaded p99 varying.
    fn records(runtime: RuntimeKind, loaded_p99: &[f64]) -> Vec<PhaseRecord> {
        records_of(runtime, DEFAULT, loaded_p99, 9000.0)
    }

    /// Records for `rounds` rounds of one runtime in `mode`.
    fn records_of(
        runtime: RuntimeKind,
        mode: &'static str,
        loaded_p99: &[f64],
        slices_per_s: f64,
    ) -> Vec<PhaseRecord> {
        let mut out = Vec::new();
        for (i, &p99) in loaded_p99.iter().enumerate() {
            let round = i as u32 + 1;
            out.push(PhaseRecord {
                round,
                phase: "idle",
                mode,
                figures: figures(runtime, 40.0, 0.0),
            });
            out.push(PhaseRecord {
                round,
                phase: "loaded",
                mode,
                figures: figures(runtime, p99, slices_per_s),
            });
        }
        out
    }

    /// The run of `runtime` in `mode` among `runs`.
    fn run_of<'a>(
        runs: &'a [RunFigures],
        runtime: RuntimeKind,
        mode: &str,
    ) -> Option<&'a RunFigures> {
        runs.iter()
            .find(|r| r.runtime == runtime.name() && r.mode == mode)
    }

    /// Metrics are medians across rounds, per runtime, the server's share
    /// beside the end-to-end figure.
    #[test]
    fn medians_across_rounds() {
        let mut all = records(RuntimeKind::Tokio, &[300.0, 100.0, 200.0]);
        all.extend(records(RuntimeKind::Keel, &[50.0, 70.0, 60.0]));
        let rounds = scenario::round_figures(&s1(&[RuntimeKind::Keel, RuntimeKind::Tokio]), &all);
        assert_eq!(rounds.len(), 3);
        let runs = medians_of(&rounds);
        let tokio = &run_of(&runs, RuntimeKind::Tokio, DEFAULT).unwrap().metrics;
        assert_eq!(tokio.get("loaded_p99_us"), Some(200.0));
        assert_eq!(tokio.get("server_loaded_p99_us"), Some(100.0));
        assert_eq!(tokio.get("idle_p99_us"), Some(40.0));
        assert_eq!(tokio.get("server_idle_p99_us"), Some(20.0));
        assert_eq!(tokio.get("loaded_samples"), Some(100.0));
        let keel = &run_of(&runs, RuntimeKind::Keel, DEFAULT).unwrap().metrics;
        assert_eq!(keel.get("loaded_p99_us"), Some(60.0));
        assert_eq!(keel.get("slices_per_s"), Some(9000.0));
        assert!(run_of(&runs, RuntimeKind::Keel, UNACCOUNTED).is_none());
    }

    /// keel unaccounted runs right after keel, and its figures are told
    /// apart from keel's: the accounting's cost is their ratio.
    #[test]
    fn the_unaccounted_variant_is_measured_beside_keel() {
        let both = [RuntimeKind::Keel, RuntimeKind::Tokio];
        assert_eq!(
            variants(&both),
            [
                (RuntimeKind::Keel, DEFAULT),
                (RuntimeKind::Keel, UNACCOUNTED),
                (RuntimeKind::Tokio, DEFAULT)
            ]
        );
        assert_eq!(
            variants(&[RuntimeKind::Tokio]),
            [(RuntimeKind::Tokio, DEFAULT)]
        );
        let mut all = records(RuntimeKind::Keel, &[100.0]);
        all.extend(records_of(
            RuntimeKind::Keel,
            UNACCOUNTED,
            &[80.0],
            10_000.0,
        ));
        all.extend(records(RuntimeKind::Tokio, &[400.0]));
        let runs = medians_of(&scenario::round_figures(&s1(&both), &all));
        let v = verdicts(&runs, &both);
        assert_eq!(v[2].value, Some(0.25), "keel/tokio uses keel's default");
        // keel: server loaded p99 50 us over a 200 us slice + 20 us.
        assert_eq!(v[7].name, "server loaded_p99/(slice + idle_p99)");
        assert_eq!(v[7].value, Some(50.0 / 220.0));
        assert_eq!(v[9].name, "slices_per_s keel/keel unaccounted");
        assert_eq!(v[9].value, Some(0.9));
        assert_eq!(v[9].pass, None);
        assert_eq!(v[10].value, Some(1.25));
    }

    /// The scheduling verdicts are judged on the server's share, per
    /// round; the end-to-end ratios are reported; without keel, keel's
    /// are n/a.
    #[test]
    fn verdicts_per_round() {
        let mut all = records(RuntimeKind::Tokio, &[400.0, 800.0, 400.0]);
        all.extend(records(RuntimeKind::Keel, &[100.0, 100.0, 200.0]));
        let both = [RuntimeKind::Keel, RuntimeKind::Tokio];
        let both_s1 = s1(&both);
        let v = scenario::judged_verdicts(&both_s1, &scenario::round_figures(&both_s1, &all));
        assert_eq!(v[0].name, "server loaded_p99/idle_p99");
        assert_eq!(v[0].rounds, [Some(2.5), Some(2.5), Some(5.0)]);
        assert_eq!(v[0].value, Some(2.5));
        // Reported: the slice bound below is what is judged.
        assert_eq!(v[0].judgement, crate::bench::judge::Judgement::Reported);
        assert_eq!(v[7].name, "server loaded_p99/(slice + idle_p99)");
        assert_eq!(
            v[7].rounds,
            [Some(50.0 / 220.0), Some(50.0 / 220.0), Some(100.0 / 220.0)]
        );
        assert_eq!(v[7].judgement, crate::bench::judge::Judgement::Pass);
        assert_eq!(v[8].runtime, "tokio");
        assert_eq!(v[8].goal, None);
        assert_eq!(v[1].value, Some(10.0));
        assert_eq!(v[1].pass, None);
        // Per round: 0.25, 0.125, 0.5: the median of the ratios, not the
        // ratio of the medians (100 / 400).
        assert_eq!(v[2].rounds, [Some(0.25), Some(0.125), Some(0.5)]);
        assert_eq!(v[2].value, Some(0.25));
        assert_eq!(v[3].value, Some(1.0));
        assert_eq!(v[4].name, "end-to-end loaded_p99/idle_p99");
        assert_eq!(v[4].goal, None);
        assert_eq!(v[4].value, Some(2.5));

        let tokio = [RuntimeKind::Tokio];
        let tokio_only = verdicts(
            &medians_of(&scenario::round_figures(&s1(&tokio), &all)),
            &tokio,
        );
        assert_eq!(tokio_only[0].value, None);
        assert_eq!(tokio_only[0].missing.as_deref(), Some("keel not run"));
        assert_eq!(tokio_only[1].value, Some(10.0));
    }

    /// Missing figures are problems; probe errors are notes.
    #[test]
    fn checks_figures() {
        let mut all = records(RuntimeKind::Tokio, &[400.0]);
        all[1].figures.slices = 0;
        all[0].figures.probe.count = 0;
        all[0].figures.probe.errors = 3;
        let (problems, notes) = check(&all, 8);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("no round trips"));
        assert!(problems[1].contains("no slice"));
        assert_eq!(notes.len(), 1);
    }
}
