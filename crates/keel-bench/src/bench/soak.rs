//! `keel-bench soak --minutes N`: S1's CPU tasks, S3's proxy and S5's log
//! at once on one keel runtime, under their loads for N minutes, with the
//! server's resources sampled every second. None may grow once warmed up.
//!
//! A leak shows in a long run, not in the seed scenarios' ten-second
//! phases: a descriptor kept per connection, a task that never ends, a
//! timer never cancelled, memory that every request adds to. The soak
//! serves a realistic mix (`keel-bench serve soak`: every scenario's own
//! server code on one runtime) and runs the scenarios' own load
//! generators against it, in windows of [`SoakArgs::window_s`] seconds,
//! one after another, until the time is up. Every second it samples the
//! server process: its resident memory, open descriptors and threads
//! (from `/proc`), and the runtime's live tasks, pending timers and
//! blocking queue (from its `mark` answer).
//!
//! # The verdict
//!
//! The first [`warm_up`] of the run is left out: buffers, histograms and
//! the allocator's arenas grow to their working size there. The rest is cut
//! in thirds. A resource *grows* when its highest sample in the last third
//! is above its highest in the first third by more than its allowance
//! ([`ALLOWANCES`]): a load that comes and goes moves every count up and
//! down within a window, while a leak adds to it window after window, and
//! over minutes that outgrows any fixed allowance. The soak fails (exit
//! status 1) if any resource grows, or if a load generator failed.
//!
//! The samples are written to `<out>/soak-<unix time>/samples.jsonl`, one
//! JSON object a line, each load run's results to `loads.jsonl`, and the
//! verdicts to `summary.json` beside them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};

use super::calibrate::calibrate;
use super::child::Child;
use crate::error::{Context, Error};
use crate::serve::control::AddrLine;

/// Flags of `keel-bench soak`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// How long to run, in minutes (fractions allowed).
    #[arg(long, default_value_t = 1.0, value_parser = parse_minutes)]
    pub minutes: f64,
    /// Worker threads of the server's runtime.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// Seconds each run of a load generator lasts; they run one after
    /// another until the time is up.
    #[arg(long, default_value_t = 20.0)]
    pub window_s: f64,
    /// Directory under which each soak writes `<timestamp>/`.
    #[arg(long, default_value = "target/keel-soak")]
    pub out: PathBuf,
}

/// Parses a positive number of minutes, at most a day.
fn parse_minutes(text: &str) -> Result<f64, String> {
    let minutes: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of minutes"))?;
    if minutes.is_finite() && minutes > 0.0 && minutes <= 24.0 * 60.0 {
        Ok(minutes)
    } else {
        Err(format!("{text}: minutes must be above 0 and at most 1440"))
    }
}

/// One second's sample of the server.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct Sample {
    /// Seconds since the server started.
    pub t_s: f64,
    /// Resident memory, KiB.
    pub rss_kib: f64,
    /// Open file descriptors.
    pub fds: f64,
    /// Threads.
    pub threads: f64,
    /// The runtime's live tasks.
    pub live_tasks: f64,
    /// The runtime's pending timers.
    pub pending_timers: f64,
    /// Jobs queued in the blocking pool.
    pub blocking_queued: f64,
}

/// A resource judged: its name, how to read it from a sample, and its
/// allowance, absolute and relative to its first third's highest.
pub type Allowance = (&'static str, fn(&Sample) -> f64, f64, f64);

/// The resources judged and their allowances.
pub const ALLOWANCES: [Allowance; 6] = [
    ("rss_kib", |s| s.rss_kib, 8.0 * 1024.0, 0.10),
    ("fds", |s| s.fds, 16.0, 0.25),
    ("threads", |s| s.threads, 2.0, 0.0),
    ("live_tasks", |s| s.live_tasks, 32.0, 0.25),
    ("pending_timers", |s| s.pending_timers, 32.0, 0.25),
    ("blocking_queued", |s| s.blocking_queued, 8.0, 0.0),
];

/// What one resource did over the soak.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Growth {
    /// The resource.
    pub resource: &'static str,
    /// Its first sample after the warm-up.
    pub first: f64,
    /// Its last sample.
    pub last: f64,
    /// Its highest in the first third after the warm-up.
    pub first_third_max: f64,
    /// Its highest in the last third.
    pub last_third_max: f64,
    /// How far above the first third's highest the last third's may go.
    pub allowance: f64,
    /// Whether it grew past that.
    pub grew: bool,
}

/// The warm-up left out of the verdict for a run of `total`: a fifth,
/// at least 10 s, at most 2 minutes.
pub fn warm_up(total: Duration) -> Duration {
    (total / 5).clamp(Duration::from_secs(10), Duration::from_secs(120))
}

/// Judges `samples` (in time order) after the warm-up: one [`Growth`] per
/// resource of [`ALLOWANCES`]. `None` with fewer than six samples after
/// the warm-up, too few to cut in thirds.
pub fn judge(samples: &[Sample], warm_up: Duration) -> Option<Vec<Growth>> {
    let after: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s >= warm_up.as_secs_f64())
        .collect();
    if after.len() < 6 {
        return None;
    }
    let third = after.len() / 3;
    let (head, tail) = (&after[..third], &after[after.len() - third..]);
    let max = |part: &[&Sample], read: fn(&Sample) -> f64| {
        part.iter().map(|s| read(s)).fold(f64::MIN, f64::max)
    };
    Some(
        ALLOWANCES
            .iter()
            .map(|&(resource, read, absolute, relative)| {
                let first_third_max = max(head, read);
                let last_third_max = max(tail, read);
                let allowance = absolute.max(relative * first_third_max);
                Growth {
                    resource,
                    first: read(after[0]),
                    last: read(after[after.len() - 1]),
                    first_third_max,
                    last_third_max,
                    allowance,
                    grew: last_third_max > first_third_max + allowance,
                }
            })
            .collect(),
    )
}

/// Runs the soak.
pub fn run(args: &SoakArgs) -> Result<(), Error> {
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let exe = std::env::current_exe().context(|| "finding this executable")?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let out = args.out.join(format!("soak-{stamp}"));
    std::fs::create_dir_all(&out).context(|| format!("creating {}", out.display()))?;
    let log_dir = out.join("log");
    let slice = calibrate(Duration::from_micros(200));

    let mut backend = Child::spawn(
        "keel-bench serve s3-backend",
        &exe,
        &["serve".into(), "s3-backend".into()],
    )?;
    let backend_addr: AddrLine =
        backend.recv_json(Duration::from_secs(30), "its address", || {})?;
    let mut server = Child::spawn(
        "keel-bench serve soak",
        &exe,
        &[
            "serve".into(),
            "soak".into(),
            "--workers".into(),
            args.workers.to_string(),
            "--backend".into(),
            backend_addr.addr.to_string(),
            "--dir".into(),
            log_dir.display().to_string(),
            "--slice-iters".into(),
            slice.iters.to_string(),
        ],
    )?;
    let addrs: AddrLine = server.recv_json(Duration::from_secs(30), "its address", || {})?;
    let started = Instant::now();
    let deadline = started + total;
    eprintln!(
        "soak: {:.1} minutes, server pid {}, proxy {}, admin {:?}, log {:?}, echo {}",
        args.minutes,
        server.pid(),
        addrs.addr,
        addrs.admin_addr,
        addrs.log_addr,
        addrs.startup["echo_addr"]
    );

    let loads = loads(&addrs)?;
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let results = Arc::new(Mutex::new(String::new()));
    let threads: Vec<_> = loads
        .into_iter()
        .map(|(name, load_args)| {
            let ctx = LoadContext {
                exe: exe.clone(),
                window_s: args.window_s,
                deadline,
                stop: stop.clone(),
                errors: errors.clone(),
                failures: failures.clone(),
                results: results.clone(),
            };
            std::thread::spawn(move || load_loop(&ctx, name, &load_args))
        })
        .collect();

    let mut samples = Vec::new();
    let mut lines = String::new();
    let mut sampled = Ok(());
    while Instant::now() < deadline {
        std::thread::sleep(
            Duration::from_secs(1).min(deadline.saturating_duration_since(Instant::now())),
        );
        match sample(&mut server, started) {
            Ok(s) => {
                lines.push_str(&serde_json::to_string(&s)?);
                lines.push('\n');
                if samples.len() % 10 == 0 {
                    eprintln!(
                        "soak {:>6.0} s: rss {:.0} KiB, fds {}, threads {}, live tasks {}, timers {}, blocking queued {}",
                        s.t_s, s.rss_kib, s.fds, s.threads, s.live_tasks, s.pending_timers, s.blocking_queued
                    );
                }
                samples.push(s);
            }
            Err(error) => {
                sampled = Err(error);
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let _ = server.send_line("stop");
    let _ = server.finish(Duration::from_secs(10));
    let _ = backend.send_line("stop");
    let _ = backend.finish(Duration::from_secs(5));
    std::fs::write(out.join("samples.jsonl"), &lines)
        .context(|| format!("writing {}", out.display()))?;
    let results = results.lock().unwrap_or_else(|p| p.into_inner()).clone();
    std::fs::write(out.join("loads.jsonl"), results)
        .context(|| format!("writing {}", out.display()))?;
    sampled?;

    let warm = warm_up(total);
    let growth = judge(&samples, warm);
    let failures = failures.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let summary = json!({
        "minutes": args.minutes,
        "workers": args.workers,
        "warm_up_s": warm.as_secs_f64(),
        "samples": samples.len(),
        "first_sample": samples.first(),
        "last_sample": samples.last(),
        "growth": growth,
        "load_errors": errors.load(Ordering::Relaxed),
        "load_failures": failures,
    });
    std::fs::write(
        out.join("summary.json"),
        serde_json::to_vec_pretty(&summary)?,
    )
    .context(|| format!("writing {}", out.display()))?;
    print_table(growth.as_deref(), &samples, warm);
    println!(
        "load requests that failed: {} (the loads' own error counts); samples and summary in {}",
        errors.load(Ordering::Relaxed),
        out.display()
    );
    let _ = std::fs::remove_dir_all(&log_dir);
    if !failures.is_empty() {
        return Err(Error::new(format!(
            "soak: a load generator failed: {}",
            failures.join("; ")
        )));
    }
    match growth {
        None => Err(Error::new(format!(
            "soak: {} samples after a warm-up of {warm:?} are too few to judge; run longer",
            samples.len()
        ))),
        Some(growth) if growth.iter().any(|g| g.grew) => {
            let grew: Vec<_> = growth
                .iter()
                .filter(|g| g.grew)
                .map(|g| g.resource)
                .collect();
            Err(Error::new(format!(
                "soak: {} grew after the warm-up",
                grew.join(", ")
            )))
        }
        Some(_) => Ok(()),
    }
}

/// The load generators and their arguments (without the duration).
fn loads(addrs: &AddrLine) -> Result<Vec<(&'static str, Vec<String>)>, Error> {
    let missing = |what: &str| Error::new(format!("the soak server did not say its {what}"));
    let admin = addrs.admin_addr.ok_or_else(|| missing("admin address"))?;
    let log = addrs.log_addr.ok_or_else(|| missing("log address"))?;
    let echo = addrs.startup["echo_addr"]
        .as_str()
        .ok_or_else(|| missing("echo address"))?
        .to_owned();
    Ok(vec![
        (
            "s1",
            vec!["load".into(), "s1".into(), "--addr".into(), echo],
        ),
        (
            "s3",
            vec![
                "load".into(),
                "s3".into(),
                "--proxy".into(),
                addrs.addr.to_string(),
                "--admin".into(),
                admin.to_string(),
                "--bulk".into(),
                "2".into(),
                "--clients".into(),
                "8".into(),
            ],
        ),
        (
            "s5",
            vec![
                "load".into(),
                "s5".into(),
                "--addr".into(),
                log.to_string(),
                "--clients".into(),
                "8".into(),
            ],
        ),
    ])
}

/// What every load thread shares.
struct LoadContext {
    /// This executable.
    exe: PathBuf,
    /// Seconds per run of a load generator.
    window_s: f64,
    /// When the soak ends.
    deadline: Instant,
    /// Set when the soak stops early.
    stop: Arc<AtomicBool>,
    /// The errors the load generators reported.
    errors: Arc<AtomicU64>,
    /// Load generators that failed themselves.
    failures: Arc<Mutex<Vec<String>>>,
    /// Each run's results, one JSON object a line, with its name.
    results: Arc<Mutex<String>>,
}

/// Runs the load generator `name` (`args`, without the duration) in
/// windows until the deadline or a stop, recording in `ctx` what each run
/// reports, or its failure.
fn load_loop(ctx: &LoadContext, name: &str, args: &[String]) {
    let fail = |why: String| {
        ctx.failures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(why)
    };
    loop {
        let left = ctx
            .deadline
            .saturating_duration_since(Instant::now())
            .as_secs_f64();
        if ctx.stop.load(Ordering::Relaxed) || left < 2.0 {
            return;
        }
        let duration = ctx.window_s.min(left - 1.0);
        let mut argv = args.to_vec();
        argv.extend([
            "--duration-s".into(),
            format!("{duration:.3}"),
            "--warmup-ms".into(),
            "0".into(),
        ]);
        let mut child = match Child::spawn(format!("keel-bench load {name}"), &ctx.exe, &argv) {
            Ok(child) => child,
            Err(error) => return fail(format!("{name}: {error}")),
        };
        let budget = Duration::from_secs_f64(duration) + Duration::from_secs(30);
        match child.recv_json::<Value>(budget, "its results", || {}) {
            Ok(mut summary) => {
                ctx.errors
                    .fetch_add(load_errors(&summary), Ordering::Relaxed);
                // The latency series are long and say nothing here.
                if let Some(fields) = summary.as_object_mut() {
                    fields.retain(|field, _| field != "series");
                    fields.insert("load".into(), json!(name));
                }
                let mut results = ctx.results.lock().unwrap_or_else(|p| p.into_inner());
                results.push_str(&summary.to_string());
                results.push('\n');
                drop(results);
                if let Err(error) = child.finish_clean(Duration::from_secs(10)) {
                    return fail(format!("{name}: {error}"));
                }
            }
            Err(error) => return fail(format!("{name}: {error}")),
        }
    }
}

/// The errors a load generator's summary counts: every field whose name
/// ends in `errors`.
fn load_errors(summary: &Value) -> u64 {
    summary.as_object().map_or(0, |fields| {
        fields
            .iter()
            .filter(|(name, _)| name.ends_with("errors"))
            .filter_map(|(_, value)| value.as_u64())
            .sum()
    })
}

/// Samples the server: `/proc` for its memory, descriptors and threads,
/// its `mark` answer for the runtime's figures.
fn sample(server: &mut Child, started: Instant) -> Result<Sample, Error> {
    let pid = server.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .context(|| format!("reading /proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .context(|| format!("listing /proc/{pid}/fd"))?
        .count() as f64;
    server.send_line("mark")?;
    let mark: Value = server.recv_json(Duration::from_secs(10), "its mark", || {})?;
    let runtime = &mark["runtime"];
    let number = |value: &Value| value.as_f64().unwrap_or(f64::NAN);
    Ok(Sample {
        t_s: started.elapsed().as_secs_f64(),
        rss_kib: field("VmRSS:"),
        fds,
        threads: field("Threads:"),
        live_tasks: number(&runtime["live_tasks"]),
        pending_timers: number(&runtime["pending_timers"]),
        blocking_queued: number(&runtime["blocking"]["queued"]),
    })
}

/// Prints one line per resource: first and last sample after the
/// warm-up, the thirds' highest, the allowance and the verdict.
fn print_table(growth: Option<&[Growth]>, samples: &[Sample], warm: Duration) {
    println!(
        "soak: {} samples, warm-up {:.0} s left out",
        samples.len(),
        warm.as_secs_f64()
    );
    let Some(growth) = growth else {
        return;
    };
    println!(
        "{:<16} {:>12} {:>12} {:>14} {:>14} {:>10}  verdict",
        "resource", "first", "last", "1st third max", "3rd third max", "allowance"
    );
    for g in growth {
        println!(
            "{:<16} {:>12.0} {:>12.0} {:>14.0} {:>14.0} {:>10.0}  {}",
            g.resource,
            g.first,
            g.last,
            g.first_third_max,
            g.last_third_max,
            g.allowance,
            if g.grew { "GREW" } else { "steady" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(rss: impl Fn(f64) -> f64, fds: impl Fn(f64) -> f64) -> Vec<Sample> {
        (0..60)
            .map(|t| {
                let t = f64::from(t);
                Sample {
                    t_s: t,
                    rss_kib: rss(t),
                    fds: fds(t),
                    threads: 9.0,
                    live_tasks: 40.0,
                    pending_timers: 10.0,
                    blocking_queued: 0.0,
                }
            })
            .collect()
    }

    /// Counts that go up and down with the load are steady; a count that
    /// climbs second after second grows.
    #[test]
    fn a_climb_grows_and_a_wobble_does_not() {
        let warm = Duration::from_secs(15);
        let wobble = samples(
            |t| 50_000.0 + 2_000.0 * (t % 7.0),
            |t| 40.0 + (t % 5.0) * 4.0,
        );
        let growth = judge(&wobble, warm).unwrap();
        assert!(growth.iter().all(|g| !g.grew), "{growth:#?}");

        let leak = samples(|_| 50_000.0, |t| 40.0 + 3.0 * t);
        let growth = judge(&leak, warm).unwrap();
        let fds = growth.iter().find(|g| g.resource == "fds").unwrap();
        assert!(fds.grew, "{fds:?}");
        assert_eq!((fds.first, fds.last), (40.0 + 45.0, 40.0 + 177.0));
        let rss = growth.iter().find(|g| g.resource == "rss_kib").unwrap();
        assert!(!rss.grew);

        let bloat = samples(|t| 50_000.0 + 400.0 * t, |_| 40.0);
        let rss = judge(&bloat, warm)
            .unwrap()
            .into_iter()
            .find(|g| g.resource == "rss_kib")
            .unwrap();
        assert!(rss.grew, "{rss:?}");
    }

    /// Too few samples after the warm-up cannot be judged.
    #[test]
    fn too_few_samples_are_not_judged() {
        let few = samples(|_| 1.0, |_| 1.0);
        assert_eq!(judge(&few, Duration::from_secs(56)), None);
        assert!(judge(&few, Duration::from_secs(54)).is_some());
    }

    #[test]
    fn the_warm_up_is_a_fifth_within_bounds() {
        assert_eq!(warm_up(Duration::from_secs(60)), Duration::from_secs(12));
        assert_eq!(warm_up(Duration::from_secs(20)), Duration::from_secs(10));
        assert_eq!(warm_up(Duration::from_secs(1800)), Duration::from_secs(120));
    }

    #[test]
    fn minutes_are_checked() {
        assert_eq!(parse_minutes("0.5"), Ok(0.5));
        assert!(parse_minutes("0").is_err());
        assert!(parse_minutes("-1").is_err());
        assert!(parse_minutes("many").is_err());
        assert!(parse_minutes("2000").is_err());
    }

    #[test]
    fn load_errors_add_every_error_count() {
        let summary = json!({"bulk_errors": 2, "conn_errors": 3, "admin_errors": 0, "conns": 9});
        assert_eq!(load_errors(&summary), 5);
    }
}
