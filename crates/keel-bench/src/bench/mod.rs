//! `keel-bench bench`: run the seed-suite scenarios and report.
//!
//! The harness itself measures nothing in-process except the CPU slice
//! calibration: every server and every probe is a child process (this same
//! executable, `keel-bench serve ...` and `keel-bench load ...`, found
//! with `std::env::current_exe()`), so that the server's CPU time can be
//! read from `/proc`, the probe never shares a scheduler with what it
//! measures, and a misbehaving server can be killed. A run prints one
//! table per scenario, writes `report.json` and `report.md`, and prints
//! the path of `report.json` last.
//!
//! What makes a verdict worth reading on a small machine:
//! - [`placement`]: the server under test alone on its CPUs, everything
//!   else on the rest, latency probes at real-time priority;
//! - the server's share of each probed latency (S1, S3, S5), from stamps
//!   the servers write into their answers ([`crate::serve::stamp`]), on
//!   which scheduling verdicts are judged;
//! - [`noise`]: steal time and the server's run-queue wait, per round;
//! - [`judge`]: each verdict is a ratio per round, its median and a
//!   confidence interval over 5 interleaved rounds, and `unclear` when the
//!   interval straddles the goal.
//!
//! S0 to S5 are each a [`scenario::Scenario`]: a scenario says what its
//! phases are, how one is measured and what its figures and verdicts
//! are, and [`scenario::run`] does the rounds, their interleaving, the
//! medians and the judging for all of them alike. The `--crash` check
//! ([`crash`]) is not one: it has no rounds or runtimes to compare.
//!
//! Exit status: 0 when every figure was produced (failed goals are part of
//! the report, not an error), 1 when a figure is missing or a child failed,
//! 2 for a usage error such as an unknown scenario.

pub mod calibrate;
pub mod charts;
pub mod child;
pub mod crash;
pub mod disk;
pub mod idle_exit;
pub mod judge;
pub mod noise;
pub mod outcome;
pub mod phase;
pub mod placement;
pub mod proc;
pub mod progress;
pub mod report;
pub mod s0;
pub mod s1;
pub mod s2;
pub mod s3;
pub mod s4;
pub mod s5;
pub mod scenario;
pub mod soak;
pub mod stats;
pub mod table;

use std::path::PathBuf;
use std::time::SystemTime;

use clap::Args;

use crate::error::{Context, Error};
use crate::load::parse_seconds;
use crate::serve::RuntimeKind;
use child::Child;
use placement::{CpuSet, Placement, PlacementKind, Role};
use report::{Machine, Report};

/// What every scenario run shares: where the servers come from, which
/// runtimes, how many rounds, and the size of a phase.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The `keel` executable to run servers and load from.
    pub exe: PathBuf,
    /// Runtimes to measure, in canonical order.
    pub runtimes: Vec<RuntimeKind>,
    /// Rounds (each runs every phase once).
    pub runs: u32,
    /// Worker threads of each server.
    pub workers: u64,
    /// Measured seconds per phase.
    pub duration_s: f64,
    /// Warm-up milliseconds per phase (not measured).
    pub warmup_ms: u64,
    /// Where the processes run.
    pub placement: Placement,
    /// Whether verdicts are judged (false for a shared placement or a
    /// quick run).
    pub judged: bool,
}

impl RunSpec {
    /// The sizes every scenario reports after its own: the phase length,
    /// the warm-up, the workers and the rounds.
    pub fn sizes(&self) -> [(&'static str, serde_json::Value); 5] {
        [
            ("duration_s", serde_json::json!(self.duration_s)),
            ("warmup_ms", serde_json::json!(self.warmup_ms)),
            ("workers", serde_json::json!(self.workers)),
            ("runs", serde_json::json!(self.runs)),
            ("placement", serde_json::json!(self.placement.kind)),
        ]
    }

    /// A phase's warm-up and measured time together.
    pub fn window(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.warmup_ms)
            + std::time::Duration::from_secs_f64(self.duration_s)
    }

    /// This spec for scenario `id`: the runtimes that have a server for it.
    pub fn for_scenario(&self, id: &str) -> RunSpec {
        let mut spec = self.clone();
        spec.runtimes.retain(|runtime| runtime.serves(id));
        spec
    }

    /// A run of `runtimes`, one round, judged, on two CPUs: for tests that
    /// build a scenario's figures without running it.
    #[cfg(test)]
    pub fn for_tests(runtimes: &[RuntimeKind]) -> RunSpec {
        RunSpec {
            exe: "/bin/false".into(),
            runtimes: runtimes.to_vec(),
            runs: 1,
            workers: 1,
            duration_s: 1.0,
            warmup_ms: 0,
            placement: Placement::plan(PlacementKind::Isolated, &CpuSet::new(vec![0, 1])),
            judged: true,
        }
    }

    /// Starts `keel <args>` as a child in `role`, placed on its CPUs.
    pub fn spawn(
        &self,
        role: Role,
        name: impl Into<String>,
        args: &[String],
    ) -> Result<Child, Error> {
        let mut command = std::process::Command::new(&self.exe);
        command.args(args);
        self.placement.apply(&mut command, role);
        Child::start(name, command)
    }

    /// `args` with the flag that raises a probe's priority, when the
    /// placement asks for it.
    pub fn probe_args(&self, mut args: Vec<String>) -> Vec<String> {
        args.extend(self.placement.probe_flags());
        args
    }
}

/// Scenarios that can run in this build.
pub const AVAILABLE: &[&str] = &["s0", "s1", "s2", "s3", "s4", "s5"];

/// Flags of `keel-bench bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Scenarios to run (s0 to s5); all available ones when none is given.
    #[arg(value_name = "SCENARIO")]
    pub scenarios: Vec<String>,
    /// About a second per phase and one round: checks that the figures
    /// are produced, not their values.
    #[arg(long)]
    pub quick: bool,
    /// Rounds per scenario; figures are medians across rounds, and each
    /// verdict is judged on its per-round values (5 rounds give a 94%
    /// confidence interval of the median).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Where the processes run: `isolated` puts the server under test on
    /// CPUs of its own and the probes at real-time priority, and judges
    /// the verdicts; `shared` lets the kernel place everything and only
    /// reports them.
    #[arg(long, value_enum, default_value_t = PlacementKind::Isolated)]
    pub placement: PlacementKind,
    /// Worker threads of every server, keel and tokio alike (default: one
    /// per CPU of the server: 1 on two CPUs when isolated, every CPU when
    /// shared).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: Option<u64>,
    /// Directory under which each run writes `<timestamp>/report.json`.
    #[arg(long, default_value = "target/keel-bench")]
    pub out: PathBuf,
    /// Measured seconds per phase.
    #[arg(long, default_value_t = 10.0, value_parser = parse_seconds)]
    pub duration_s: f64,
    /// S0: keep-alive connections, and concurrent short-connection
    /// clients.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub connections: u64,
    /// S0: requests of a short-connection phase (each on a new
    /// connection).
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub requests: u64,
    /// S1: CPU tasks in the loaded phases, per server worker: every worker
    /// is kept busy with CPU work however many there are (one task a
    /// worker would leave tokio's workers often free to poll IO).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub cpu_tasks: u64,
    /// S1: target duration of one CPU slice, µs.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub slice_us: u64,
    /// S1 and S5: ping probe interval, µs.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
    pub interval_us: u64,
    /// S2: storm connections.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    pub streams: u64,
    /// S2: storm rate over all connections, MB/s.
    #[arg(long, default_value_t = 40.0, value_parser = crate::load::parse_rate)]
    pub rate_mb: f64,
    /// S2: target duration of the API job, ms.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub job_ms: u64,
    /// S2: milliseconds between API calls (each runs one job). 50 ms
    /// gives 200 calls in a 10 s phase, so the p99 is the second-worst
    /// call, not the worst of 50.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub api_interval_ms: u64,
    /// S2: CPU work a stream handler does per delivery, µs (calibrated
    /// like the API job), on top of summing the bytes; 0 for none. Stands
    /// for per-message processing (a media server's depacketising and
    /// fan-out), the cost that turns a packet rate into a storm. At 20,
    /// a node that wakes a handler per packet is some 80% busy, as the
    /// seed's was; with none, the storm costs such a node a tenth of a
    /// core and harms nothing.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub handler_us: u64,
    /// S2: keel fixed batching, bytes a delivery waits for.
    #[arg(long, default_value_t = 64 * 1024, value_parser = clap::value_parser!(u64).range(1..=64 * 1024 * 1024))]
    pub min_bytes: u64,
    /// S2: keel batching, the longest a byte waits, ms.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub max_delay_ms: u64,
    /// S3: connections downloading the 1 MiB object in a loop, per server
    /// worker.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub bulk: u64,
    /// S3: clients opening a new connection per request, per server
    /// worker.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub rate_clients: u64,
    /// S3: milliseconds between admin requests. 20 ms gives 500 requests
    /// in a 10 s phase, so the p99 is the fifth-worst request, not the
    /// second-worst of 100 that one rare host stall sets; 50 status
    /// answers a second cost the proxy about 1% of a core.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub admin_interval_ms: u64,
    /// S4: sending connections.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    pub senders: u64,
    /// S4: bytes per send (each sender sends one every 100 ms at the
    /// default rate).
    #[arg(long, default_value_t = 12_500, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub send_bytes: u64,
    /// S4: rate over all senders, MB/s.
    #[arg(long, default_value_t = 25.0, value_parser = crate::load::parse_rate)]
    pub s4_rate_mb: f64,
    /// S5: closed-loop log clients.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub clients: u32,
    /// S5: closed-loop log clients of the second loaded phase, where
    /// batching rather than the network round limits the rate.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub many_clients: u32,
    /// S5: bytes per record.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(12..=1_048_576))]
    pub record: u64,
    /// S5: let the CPUs halt when idle while S5 runs. By default S5 holds
    /// a 0 µs wake-up latency request on `/dev/cpu_dma_latency` (root
    /// only, and only where a cpuidle driver reads it; a note says when
    /// it cannot), as a latency-tuned host does, so
    /// that the ping measures the runtime and not the CPU's exit from
    /// halt, which falls on whichever node idles more.
    #[arg(long)]
    pub s5_allow_halt: bool,
    /// S5: where the logs are written; must be on a real disk (default:
    /// `s5-data` under `--out`). Emptied as the run goes.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// S5: instead of measuring, kill the keel node with SIGKILL this many
    /// times under load, restarting it each time, and check that every
    /// acknowledged record is in the log, intact and in order.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub crash: Option<u32>,
    /// Runtimes to measure, comma-separated (for development: measuring
    /// one runtime gives no keel-vs-tokio verdicts). By default keel,
    /// keel-uring, tokio and monoio (S0 and S1 only), keel-uring left out
    /// with a note where this process cannot use io_uring; named here, a
    /// refused ring is an error.
    #[arg(long, hide = true, value_enum, value_delimiter = ',')]
    pub runtimes: Option<Vec<RuntimeKind>>,
}

/// The runtimes a run measures: `asked`, or by default every one, the
/// ring's left out with a note where `ring` says it is refused.
/// Sorted and deduplicated.
///
/// # Errors
///
/// keel-uring named while the ring is refused.
pub fn runtimes_to_measure(
    asked: Option<&[RuntimeKind]>,
    ring: &keel::io::RingSupport,
) -> Result<(Vec<RuntimeKind>, Option<String>), Error> {
    let mut note = None;
    let mut runtimes = match asked {
        Some(asked) => {
            if asked.contains(&RuntimeKind::KeelUring) && !ring.is_available() {
                return Err(Error::usage(format!(
                    "--runtimes names keel-uring, but io_uring is {ring}"
                )));
            }
            asked.to_vec()
        }
        None => {
            let mut all = vec![
                RuntimeKind::Keel,
                RuntimeKind::KeelUring,
                RuntimeKind::Tokio,
                RuntimeKind::Monoio,
            ];
            if !ring.is_available() {
                all.retain(|&r| r != RuntimeKind::KeelUring);
                note = Some(format!("keel-uring not measured: io_uring is {ring}"));
            }
            all
        }
    };
    runtimes.sort();
    runtimes.dedup();
    Ok((runtimes, note))
}

/// Which scenarios to run: the named ones (deduplicated, in order), or all
/// available ones.
pub fn select(names: &[String]) -> Result<Vec<&'static str>, Error> {
    if names.is_empty() {
        return Ok(AVAILABLE.to_vec());
    }
    let mut chosen = Vec::new();
    for name in names {
        let wanted = name.trim().to_ascii_lowercase();
        let available = AVAILABLE.join(", ");
        if let Some(&id) = AVAILABLE.iter().find(|&&id| id == wanted) {
            if !chosen.contains(&id) {
                chosen.push(id);
            }
        } else {
            return Err(Error::usage(format!(
                "unknown scenario {name:?}; available: {available}"
            )));
        }
    }
    Ok(chosen)
}

/// Runs `keel-bench bench`.
pub fn run(args: &BenchArgs) -> Result<(), Error> {
    let mut scenarios = select(&args.scenarios)?;
    if args.crash.is_some() {
        if args.scenarios.is_empty() {
            scenarios = vec!["s5"];
        } else if !scenarios.contains(&"s5") {
            return Err(Error::usage("--crash belongs to s5; name s5 to run it"));
        }
    }
    let ring = keel::io::probe_io_uring();
    let (runtimes, left_out) = runtimes_to_measure(args.runtimes.as_deref(), &ring)?;
    if let Some(note) = &left_out {
        eprintln!("note: {note}");
    }
    let exe = std::env::current_exe().context(|| "finding the keel-bench executable")?;
    let started = report::rfc3339(SystemTime::now());
    let (runs, duration_s, warmup_ms) = if args.quick {
        (1, 1.0, 200)
    } else {
        (args.runs, args.duration_s, 500)
    };
    // The machine's CPUs are the ones the run may use, read before the
    // harness pins itself to the load's share of them.
    let allowed = CpuSet::allowed()?;
    let machine = Machine::with_cores(allowed.len(), &ring);
    let placement = Placement::plan(args.placement, &allowed);
    placement.place_harness()?;
    eprintln!("placement: {}", placement.describe());
    let workers = args.workers.unwrap_or_else(|| placement.default_workers());

    let spec = RunSpec {
        exe: exe.clone(),
        runtimes: runtimes.clone(),
        runs,
        workers,
        duration_s,
        warmup_ms,
        judged: placement.judges() && !args.quick,
        placement: placement.clone(),
    };
    let mut outcomes = Vec::new();
    for id in scenarios {
        let outcome = match id {
            "s0" => s0::run(&s0::S0Config {
                run: spec.for_scenario(id),
                connections: args.connections,
                requests: args.requests,
                short_limit_s: 60.0,
                quick: args.quick,
            })?,
            "s1" => s1::run(&s1::S1Config {
                run: spec.for_scenario(id),
                cpu_tasks: args.cpu_tasks.saturating_mul(workers),
                slice_us: args.slice_us,
                interval_us: args.interval_us,
                payload: 64,
            })?,
            "s2" => s2::run(&s2::S2Config {
                run: spec.for_scenario(id),
                streams: args.streams,
                chunk: 1460,
                rate_mb: args.rate_mb,
                api_interval_ms: args.api_interval_ms,
                job_ms: args.job_ms,
                handler_us: args.handler_us,
                min_bytes: args.min_bytes,
                max_delay_ms: args.max_delay_ms,
            })?,
            "s3" => s3::run(&s3::S3Config {
                run: spec.for_scenario(id),
                bulk: args.bulk,
                clients: args.rate_clients,
                admin_interval_ms: args.admin_interval_ms,
            })?,
            "s4" => s4::run(&s4::S4Config {
                run: spec.for_scenario(id),
                senders: args.senders,
                chunk: args.send_bytes,
                rate_mb: args.s4_rate_mb,
            })?,
            "s5" => {
                let data_dir = args
                    .data_dir
                    .clone()
                    .unwrap_or_else(|| args.out.join("s5-data"));
                match args.crash {
                    Some(kills) => crash::run(&crash::CrashConfig {
                        exe: exe.clone(),
                        kills,
                        workers,
                        clients: args.clients,
                        record: args.record,
                        data_dir,
                        quick: args.quick,
                    })?,
                    None => s5::run(&s5::S5Config {
                        run: spec.for_scenario(id),
                        clients: args.clients,
                        many_clients: args.many_clients,
                        record: args.record,
                        interval_us: args.interval_us,
                        data_dir,
                        sync_samples: if args.quick { 50 } else { 500 },
                        hold_idle_exit: !args.s5_allow_halt,
                    })?,
                }
            }
            other => return Err(Error::usage(format!("scenario {other} has no runner"))),
        };
        outcomes.push(outcome);
    }

    let mut report = Report {
        started,
        machine,
        quick: args.quick,
        placement,
        scenarios: outcomes,
    };
    for outcome in &report.scenarios {
        print!("{}", table::render(outcome));
        println!();
    }
    let path = report::write(&mut report, &args.out)?;
    let problems: Vec<String> = report
        .scenarios
        .iter()
        .flat_map(|o| o.problems.iter().map(move |p| format!("{}: {p}", o.id)))
        .collect();
    println!("{}", path.display());
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Error::new(format!(
            "figures are missing ({} problem{}): {}",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            problems.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By default every runtime, the ring's only where it can be used
    /// (with a note saying why not); named, the ring refused is an error.
    #[test]
    fn runtimes_measured() {
        use keel::io::RingSupport;
        let (keel, ring, tokio, monoio) = (
            RuntimeKind::Keel,
            RuntimeKind::KeelUring,
            RuntimeKind::Tokio,
            RuntimeKind::Monoio,
        );
        let available = RingSupport::Available {
            optional: Vec::new(),
        };
        let refused = RingSupport::Refused("io_uring_disabled is 2".into());
        assert_eq!(
            runtimes_to_measure(None, &available).unwrap(),
            (vec![keel, ring, tokio, monoio], None)
        );
        // monoio falls back to epoll by itself (`startup.driver` says so).
        let (runtimes, note) = runtimes_to_measure(None, &refused).unwrap();
        assert_eq!(runtimes, [keel, tokio, monoio]);
        assert_eq!(
            note.as_deref(),
            Some("keel-uring not measured: io_uring is refused: io_uring_disabled is 2")
        );
        assert_eq!(
            runtimes_to_measure(Some(&[tokio, keel, tokio]), &refused).unwrap(),
            (vec![keel, tokio], None)
        );
        let error = runtimes_to_measure(Some(&[ring]), &refused).unwrap_err();
        assert!(error.to_string().contains("io_uring is refused"), "{error}");
    }

    /// monoio is measured in S0 and S1 only.
    #[test]
    fn each_scenario_runs_the_runtimes_that_serve_it() {
        let all = [
            RuntimeKind::Keel,
            RuntimeKind::KeelUring,
            RuntimeKind::Tokio,
            RuntimeKind::Monoio,
        ];
        let spec = RunSpec::for_tests(&all);
        for id in AVAILABLE {
            let runtimes = spec.for_scenario(id).runtimes;
            let with_monoio = matches!(*id, "s0" | "s1");
            assert_eq!(runtimes.contains(&RuntimeKind::Monoio), with_monoio, "{id}");
            assert_eq!(runtimes.len(), if with_monoio { 4 } else { 3 }, "{id}");
        }
    }

    /// Named, default, deduplicated and unknown scenarios.
    #[test]
    fn selects_scenarios() {
        assert_eq!(
            select(&[]).unwrap(),
            vec!["s0", "s1", "s2", "s3", "s4", "s5"]
        );
        assert_eq!(select(&["S1".into(), "s1".into()]).unwrap(), vec!["s1"]);
        assert_eq!(
            select(&["s5".into(), "S3".into()]).unwrap(),
            vec!["s5", "s3"]
        );
        let unknown = select(&["s9".into()]).unwrap_err();
        assert_eq!(unknown.code(), 2);
        assert!(
            unknown.to_string().contains("unknown scenario"),
            "{unknown}"
        );
        assert!(
            unknown
                .to_string()
                .contains("available: s0, s1, s2, s3, s4, s5"),
            "{unknown}"
        );
    }
}
