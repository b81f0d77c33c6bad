//! S0, the HTTP throughput baseline: hyper on keel against hyper on tokio.
//!
//! The same minimal HTTP/1.1 server (`keel-bench serve s0`, a 13-byte answer to
//! every request) is loaded two ways by `keel-bench load s0`: 60 keep-alive
//! connections in a closed loop for the phase's duration (requests per
//! second, latency p50/p99), and 60 clients that open a new connection
//! per request until 50,000 requests are answered (requests per second;
//! bounded in time as well). The verdicts are keel's requests per second
//! over tokio's, for each: S0 does not reproduce a failure, it prices the
//! common path, so that what keel gains elsewhere can be weighed against
//! what it costs here.
//!
//! Every phase runs on a fresh server process. Rounds interleave the
//! runtimes and alternate their order (keep-alive phases, then short
//! ones), and figures are medians across rounds, so a disturbance on the
//! shared machine moves one round, not the answer. `cpu_s` is the
//! server's CPU time over the keep-alive phase's measured window (a fixed
//! length, so the runtimes compare); `short_cpu_s` is the same for the
//! short phase, whose length is however long the requests took.

use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use super::noise::Noise;
use super::outcome::{self, find_metric, why_missing, Goal, Outcome, Pairs, RunFigures, Verdict};
use super::phase::{mark, SERVER_SILENCE};
use super::placement::Role;
use super::progress::PhaseBar;
use super::scenario::{self, Scenario};
use super::stats::ratio;
use super::RunSpec;
use crate::error::Error;
use crate::load::s0::{HttpLoadSummary, S0Mode};
use crate::serve::control::AddrLine;
use crate::serve::RuntimeKind;

/// What the scenario measures, for the table.
const TITLE: &str = "HTTP throughput (hyper, 13-byte answers)";

/// How long a server runs before its load starts.
const SETTLE: Duration = Duration::from_millis(200);

/// How long a server may take to exit after `stop` before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// The sizes and setup of one S0 run.
#[derive(Debug, Clone)]
pub struct S0Config {
    /// What every scenario run shares.
    pub run: RunSpec,
    /// Keep-alive connections, and concurrent short-connection clients.
    pub connections: u64,
    /// Requests of a short-connection phase.
    pub requests: u64,
    /// The most seconds a short-connection phase may take.
    pub short_limit_s: f64,
    /// A quick run: a short phase is expected to stop at its time limit.
    pub quick: bool,
}

/// One phase's figures with where it sat in the run.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseRecord {
    /// Round number, from 1.
    round: u32,
    /// The server's runtime.
    runtime: RuntimeKind,
    /// Keep-alive or short connections.
    mode: S0Mode,
    /// What the clients measured.
    load: HttpLoadSummary,
    /// Server process CPU seconds between the marks.
    cpu_s: f64,
    /// Of those, in the kernel.
    system_cpu_s: f64,
    /// Seconds between the marks.
    window_s: f64,
    /// The host's noise between the marks.
    noise: Noise,
}

/// Runs S0 and judges it.
pub fn run(config: &S0Config) -> Result<Outcome, Error> {
    scenario::run(config)
}

impl Scenario for S0Config {
    type Phase = (RuntimeKind, S0Mode);
    type Record = PhaseRecord;
    const ID: &'static str = "s0";
    const TITLE: &'static str = TITLE;

    fn spec(&self) -> &RunSpec {
        &self.run
    }

    /// Keep-alive phases, then short ones, each per runtime.
    fn stages(&self) -> Vec<Vec<Self::Phase>> {
        [S0Mode::Keepalive, S0Mode::Short]
            .map(|mode| self.run.runtimes.iter().map(|&r| (r, mode)).collect())
            .into()
    }

    fn phase_name(&self, (runtime, mode): Self::Phase) -> String {
        format!("{runtime} {mode}")
    }

    fn expected(&self, _: Self::Phase) -> Duration {
        SETTLE + self.run.window()
    }

    fn measure(
        &self,
        round: u32,
        (runtime, mode): Self::Phase,
        bar: &PhaseBar,
    ) -> Result<PhaseRecord, Error> {
        measure(self, round, runtime, mode, bar)
    }

    fn summary(&self, record: &PhaseRecord) -> String {
        format!(
            "rps {:>8.0}  p50 {:>8.1} us  p99 {:>8.1} us  n {:>7}  errors {}  cpu {:.2} s",
            record.load.rps,
            record.load.p50_us,
            record.load.p99_us,
            record.load.requests,
            record.load.errors,
            record.cpu_s,
        )
    }

    fn round_of(record: &PhaseRecord) -> u32 {
        record.round
    }

    fn noise_of(record: &PhaseRecord) -> Noise {
        record.noise
    }

    /// Per runtime with both phases in the round, its metrics.
    fn round_runs(&self, records: &[&PhaseRecord]) -> Vec<RunFigures> {
        let find = |runtime: RuntimeKind, mode: S0Mode| {
            records
                .iter()
                .find(|r| r.runtime == runtime && r.mode == mode)
        };
        self.run
            .runtimes
            .iter()
            .filter_map(|&runtime| {
                Some(RunFigures {
                    runtime: runtime.to_string(),
                    mode: "default".into(),
                    metrics: Pairs(round_metrics(
                        find(runtime, S0Mode::Keepalive)?,
                        find(runtime, S0Mode::Short)?,
                    )),
                })
            })
            .collect()
    }

    fn verdicts(&self, runs: &[RunFigures]) -> Vec<Verdict> {
        verdicts(runs, &self.run.runtimes)
    }

    /// Answers that went wrong are problems; short phases that stopped at
    /// their time limit are notes (a quick run expects them to).
    fn check(&self, records: &[PhaseRecord]) -> (Vec<String>, Vec<String>) {
        let mut notes = Vec::new();
        if !self.quick {
            for record in records
                .iter()
                .filter(|r| r.mode == S0Mode::Short && !r.load.complete)
            {
                notes.push(format!(
                    "round {} {} short: stopped at the {} s limit after {} of {} requests",
                    record.round,
                    record.runtime,
                    self.short_limit_s,
                    record.load.requests,
                    self.requests
                ));
            }
        }
        (check(records), notes)
    }

    fn sizes(&self) -> Vec<(&'static str, serde_json::Value)> {
        vec![
            ("connections", json!(self.connections)),
            ("short_requests", json!(self.requests)),
            ("short_limit_s", json!(self.short_limit_s)),
            ("body_bytes", json!(crate::serve::s0::BODY.len())),
        ]
    }
}

/// Measures one phase of `round`: a fresh server and the clients in
/// `mode`. The children are killed on any early return.
fn measure(
    config: &S0Config,
    round: u32,
    runtime: RuntimeKind,
    mode: S0Mode,
    bar: &PhaseBar,
) -> Result<PhaseRecord, Error> {
    bar.step("starting the server");
    let mut server = config.run.spawn(
        Role::Server,
        format!("keel serve s0 ({runtime})"),
        &[
            "serve".into(),
            "s0".into(),
            "--runtime".into(),
            runtime.to_string(),
            "--workers".into(),
            config.run.workers.to_string(),
        ],
    )?;
    let tick = || bar.tick();
    let addr: AddrLine = server.recv_json(SERVER_SILENCE, "its address", tick)?;
    std::thread::sleep(SETTLE);

    bar.step("loading");
    let limit_s = if config.quick {
        config.run.duration_s
    } else {
        config.short_limit_s
    };
    let mut load = config.run.spawn(
        Role::Load,
        format!("keel load s0 ({mode})"),
        &[
            "load".into(),
            "s0".into(),
            "--addr".into(),
            addr.addr.to_string(),
            "--mode".into(),
            mode.to_string(),
            "--connections".into(),
            config.connections.to_string(),
            // One client thread per load CPU: a single thread cannot load a
            // server of many workers, and would measure itself.
            "--threads".into(),
            config.run.placement.rest.len().clamp(1, 64).to_string(),
            "--duration-s".into(),
            config.run.duration_s.to_string(),
            "--requests".into(),
            config.requests.to_string(),
            "--time-limit-s".into(),
            limit_s.to_string(),
            "--warmup-ms".into(),
            config.run.warmup_ms.to_string(),
        ],
    )?;
    std::thread::sleep(Duration::from_millis(config.run.warmup_ms));
    let start = mark(&mut server, bar)?;
    let budget =
        Duration::from_secs_f64(config.run.duration_s.max(limit_s)) + Duration::from_secs(20);
    let summary: HttpLoadSummary = load.recv_json(budget, "its results", tick)?;
    let end = mark(&mut server, bar)?;
    let measured = start.to(&end, &config.run.placement.server);

    bar.step("stopping");
    server.send_line("stop")?;
    let (status, killed) = server.finish(STOP_GRACE)?;
    if killed || !status.success() {
        eprintln!(
            "warning: {} did not stop cleanly ({}): {}",
            server.name(),
            if killed {
                "killed".to_string()
            } else {
                status.to_string()
            },
            server.stderr_tail()
        );
    }
    load.finish_clean(Duration::from_secs(5))?;
    Ok(PhaseRecord {
        round,
        runtime,
        mode,
        load: summary,
        cpu_s: measured.cpu_s,
        system_cpu_s: measured.system_cpu_s,
        window_s: measured.window_s,
        noise: measured.noise,
    })
}

/// The metrics of one round of one runtime.
fn round_metrics(keepalive: &PhaseRecord, short: &PhaseRecord) -> Vec<(&'static str, f64)> {
    let per_request_us = |record: &PhaseRecord| {
        ratio(Some(record.cpu_s * 1e6), Some(record.load.requests as f64)).unwrap_or(f64::NAN)
    };
    vec![
        ("keepalive_rps", keepalive.load.rps),
        ("keepalive_p50_us", keepalive.load.p50_us),
        ("keepalive_p99_us", keepalive.load.p99_us),
        ("short_rps", short.load.rps),
        ("short_p50_us", short.load.p50_us),
        ("short_p99_us", short.load.p99_us),
        ("cpu_s", keepalive.cpu_s),
        ("keepalive_cpu_per_request_us", per_request_us(keepalive)),
        ("short_cpu_s", short.cpu_s),
        ("short_cpu_per_request_us", per_request_us(short)),
        (
            "keepalive_system_share",
            ratio(Some(keepalive.system_cpu_s), Some(keepalive.cpu_s)).unwrap_or(f64::NAN),
        ),
        (
            "short_system_share",
            ratio(Some(short.system_cpu_s), Some(short.cpu_s)).unwrap_or(f64::NAN),
        ),
        ("keepalive_requests", keepalive.load.requests as f64),
        ("short_requests", short.load.requests as f64),
    ]
}

/// The S0 verdicts, from one round's figures.
fn verdicts(runs: &[RunFigures], runtimes: &[RuntimeKind]) -> Vec<Verdict> {
    use RuntimeKind::{Keel, KeelUring, Monoio, Tokio};
    // `metric` of one runtime over another's, as verdict `name`.
    let over = |name: &str, pair, metric: &str, goal| {
        outcome::over(
            runs,
            runtimes,
            name.to_owned(),
            pair,
            "default",
            metric,
            goal,
        )
    };
    // `metric` of one runtime over another's, named after them.
    let pair = |(runtime, other): (RuntimeKind, RuntimeKind), metric: &str, goal| {
        over(
            &format!("{metric} {runtime}/{other}"),
            (runtime, other),
            metric,
            goal,
        )
    };
    let share = |runtime: RuntimeKind| {
        Verdict::new(
            format!("keepalive system share, {runtime}"),
            runtime.name(),
            find_metric(runs, runtime.name(), "default", "keepalive_system_share"),
            None,
        )
        .missing_because(why_missing(&[runtime], runtimes))
    };
    vec![
        pair((Keel, Tokio), "keepalive_rps", Some(Goal::AtLeast(1.0))),
        pair((Keel, Tokio), "short_rps", Some(Goal::AtLeast(1.0))),
        over(
            "keepalive_p99 keel/tokio",
            (Keel, Tokio),
            "keepalive_p99_us",
            None,
        ),
        over(
            "keepalive_cpu_per_request keel/tokio",
            (Keel, Tokio),
            "keepalive_cpu_per_request_us",
            None,
        ),
        // The share of the server's CPU spent in the kernel bounds what any
        // runtime can gain over another on this path: keel-uring's goals
        // over tokio are keel's (the ring twins), since with the kernel at
        // a share s of tokio's CPU, a runtime that cost nothing at all
        // would serve 1/s times tokio's requests (see docs/scenarios.md).
        share(Keel),
        share(Tokio),
        share(Monoio),
        // monoio, a thread-per-core io_uring runtime, beside tokio: the
        // ring should put keel at least as far ahead of tokio as monoio's
        // ring puts monoio.
        pair((Monoio, Tokio), "keepalive_rps", None),
        pair((Monoio, Tokio), "short_rps", None),
        pair((Keel, Monoio), "keepalive_rps", None),
        pair(
            (KeelUring, Monoio),
            "keepalive_rps",
            Some(Goal::AtLeast(1.0)),
        ),
        pair((KeelUring, Keel), "keepalive_rps", None),
        pair((KeelUring, Keel), "short_rps", None),
        over(
            "keepalive_cpu_per_request keel-uring/keel",
            (KeelUring, Keel),
            "keepalive_cpu_per_request_us",
            None,
        ),
        over(
            "short_cpu_per_request keel-uring/keel",
            (KeelUring, Keel),
            "short_cpu_per_request_us",
            None,
        ),
    ]
}

/// Figures that should exist and do not, and answers that went wrong.
fn check(records: &[PhaseRecord]) -> Vec<String> {
    let mut problems = Vec::new();
    for record in records {
        let at = format!("round {} {} {}", record.round, record.runtime, record.mode);
        if record.load.requests == 0 {
            problems.push(format!("{at}: no request was answered"));
        }
        if record.load.errors > 0 {
            problems.push(format!(
                "{at}: {} exchanges failed, the first: {}",
                record.load.errors,
                record.load.first_error.as_deref().unwrap_or("?")
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A phase record with `rps` and `requests`.
    fn record(round: u32, runtime: RuntimeKind, mode: S0Mode, rps: f64) -> PhaseRecord {
        PhaseRecord {
            round,
            runtime,
            mode,
            load: HttpLoadSummary {
                mode,
                connections: 60,
                requests: 1000,
                rps,
                p50_us: 100.0,
                p99_us: 200.0,
                p999_us: 300.0,
                max_us: 400.0,
                duration_s: 1.0,
                errors: 0,
                first_error: None,
                complete: true,
            },
            cpu_s: 0.5,
            system_cpu_s: 0.4,
            window_s: 1.0,
            noise: Noise::unmeasured(),
        }
    }

    /// A run of `runtimes` with the default sizes.
    fn config(runtimes: &[RuntimeKind]) -> S0Config {
        S0Config {
            run: RunSpec::for_tests(runtimes),
            connections: 60,
            requests: 50_000,
            short_limit_s: 60.0,
            quick: false,
        }
    }

    /// Medians across rounds are the figures, per-round ratios the
    /// verdicts; the documented metric names are there.
    #[test]
    fn verdicts_from_rounds() {
        let (keel, tokio) = (RuntimeKind::Keel, RuntimeKind::Tokio);
        let mut records = Vec::new();
        for (round, k, t) in [(1, 900.0, 1000.0), (2, 1100.0, 1000.0), (3, 1000.0, 1000.0)] {
            for mode in [S0Mode::Keepalive, S0Mode::Short] {
                records.push(record(round, keel, mode, k));
                records.push(record(round, tokio, mode, t));
            }
        }
        let config = config(&[keel, tokio]);
        assert_eq!(scenario::round_figures(&config, &records).len(), 3);
        let outcome = scenario::outcome(&config, &records).unwrap();
        let (runs, verdicts) = (&outcome.runs, &outcome.verdicts);
        for name in [
            "keepalive_rps",
            "keepalive_p50_us",
            "keepalive_p99_us",
            "short_rps",
            "cpu_s",
        ] {
            assert!(runs[0].metric(name).is_some(), "{name}");
        }
        assert_eq!(runs[0].metric("keepalive_cpu_per_request_us"), Some(500.0));
        assert_eq!(runs[0].metric("keepalive_system_share"), Some(0.8));
        let share = verdicts
            .iter()
            .find(|v| v.name == "keepalive system share, tokio")
            .expect("tokio's kernel share is reported");
        assert_eq!((share.value, share.runtime.as_ref()), (Some(0.8), "tokio"));
        assert_eq!(verdicts[0].name, "keepalive_rps keel/tokio");
        assert_eq!(verdicts[0].value, Some(1.0));
        assert_eq!(verdicts[0].rounds, [Some(0.9), Some(1.1), Some(1.0)]);
        assert_eq!(verdicts[0].interval, Some([0.9, 1.1]));
        assert_eq!(
            verdicts[0].judgement,
            crate::bench::judge::Judgement::Unclear
        );
        assert_eq!(verdicts[1].name, "short_rps keel/tokio");
        assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
        assert_eq!(outcome.sizes.0[0].0, "connections");
        assert_eq!(outcome.sizes.0[4].0, "duration_s");
    }

    /// Without tokio the ratios say why they are missing; failed
    /// exchanges and empty phases are problems.
    #[test]
    fn missing_and_failed_figures() {
        let keel = RuntimeKind::Keel;
        let mut records = vec![
            record(1, keel, S0Mode::Keepalive, 10.0),
            record(1, keel, S0Mode::Short, 10.0),
        ];
        records[1].load.errors = 2;
        records[1].load.first_error = Some("reset".into());
        records[0].load.requests = 0;
        let outcome = scenario::outcome(&config(&[keel]), &records).unwrap();
        let verdicts = &outcome.verdicts;
        assert_eq!(verdicts[0].value, None);
        assert_eq!(verdicts[0].missing.as_deref(), Some("tokio not run"));
        let problems = &outcome.problems;
        assert!(
            problems.iter().any(|p| p.contains("no request")),
            "{problems:?}"
        );
        assert!(problems.iter().any(|p| p.contains("reset")), "{problems:?}");
    }
}
