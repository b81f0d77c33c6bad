//! The files a run leaves behind: `report.json`, `report.md`, and the
//! scenarios' SVG charts (see [`super::charts`]).
//!
//! `report.json` carries every figure a verdict is computed from, so
//! anyone can recompute or re-judge a run later (its shape, and every
//! metric's name, are in `docs/report-schema.md`); `report.md` is the
//! printed table for a person. Both go to `<out>/<started>/`, named by the
//! UTC start time, formatted here by hand (RFC 3339) so no date crate is
//! needed for one line.
//!
//! Metric names are stable: a metric that is renamed keeps its old name
//! in `report.json` as an alias with the same value ([`ALIASES`]), so a
//! script written against an older report keeps working for a release.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::charts::{self, ChartFile};
use super::outcome::Outcome;
use super::placement::Placement;
use super::proc;
use super::table;
use crate::error::{Context, Error};

/// The whole report of one `keel-bench bench` run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// When the run started, UTC, RFC 3339.
    pub started: String,
    /// The machine it ran on.
    pub machine: Machine,
    /// Whether this was a `--quick` run (sizes too small for verdicts).
    pub quick: bool,
    /// Where the processes ran.
    pub placement: Placement,
    /// One entry per scenario, in the order run.
    pub scenarios: Vec<Outcome>,
}

/// The machine a run was measured on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPUs the run could use (the harness's, before it pinned itself to
    /// the load's CPUs).
    pub cores: usize,
    /// Kernel release.
    pub kernel: String,
    /// Whether keel could use io_uring here (`available`, or `refused:`
    /// and why), as `keel::io::probe_io_uring` found it.
    pub io_uring: String,
}

impl Machine {
    /// This machine, with the `cores` the run may use (the harness's CPU
    /// set before it is pinned) and what the ring's probe found.
    pub fn with_cores(cores: usize, io_uring: &keel::io::RingSupport) -> Self {
        Self {
            cores,
            kernel: proc::kernel_release(),
            io_uring: io_uring.to_string(),
        }
    }
}

/// Formats a time as RFC 3339 in UTC to the second (`2026-11-22T10:00:00Z`).
/// Times before 1970 are clamped to the epoch.
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for non-negative day counts).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097; // day of era, 0..=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..=399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..=365
    let mp = (5 * doy + 2) / 153; // March-based month, 0..=11
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Renamed metrics: `(scenario, name, old name)`. `report.json` carries
/// the old name too, with the same value.
pub const ALIASES: &[(&str, &str, &str)] = &[
    ("s2", "api_p50_ms", "api_storm_p50_ms"),
    ("s2", "api_p99_ms", "api_storm_p99_ms"),
    ("s5", "ping_idle_p50_us", "idle_p50_us"),
    ("s5", "ping_idle_p99_us", "idle_p99_us"),
    ("s5", "ping_loaded_p50_us", "loaded_p50_us"),
    ("s5", "ping_loaded_p99_us", "loaded_p99_us"),
    ("s5", "ping_loaded_max_us", "loaded_max_us"),
    ("s5", "fsyncs_per_s", "syncs_per_s"),
    ("s5", "raw_fdatasync_us", "sync_p50_us"),
    ("s5", "raw_fdatasync_p99_us", "sync_p99_us"),
];

/// Adds each renamed metric's old name beside the new one, in every run
/// of the scenario it belongs to.
fn add_aliases(value: &mut serde_json::Value) {
    let Some(scenarios) = value["scenarios"].as_array_mut() else {
        return;
    };
    for scenario in scenarios {
        let id = scenario["id"].as_str().unwrap_or_default().to_string();
        let Some(runs) = scenario["runs"].as_array_mut() else {
            continue;
        };
        for run in runs {
            let Some(metrics) = run["metrics"].as_object_mut() else {
                continue;
            };
            for (_, name, old) in ALIASES.iter().filter(|(s, _, _)| *s == id) {
                if let Some(v) = metrics.get(*name).cloned() {
                    metrics.entry(old.to_string()).or_insert(v);
                }
            }
        }
    }
}

/// The report as pretty JSON, with the old names of renamed metrics.
pub fn to_json(report: &Report) -> Result<String, Error> {
    let mut value = serde_json::to_value(report)?;
    add_aliases(&mut value);
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    Ok(text)
}

/// The report as Markdown: a heading, the machine, and each table.
pub fn to_markdown(report: &Report) -> String {
    let mut md = format!(
        "# keel bench, {}\n\nMachine: {} cores, kernel {}.{}\n\nPlacement: {}.\n",
        report.started,
        report.machine.cores,
        report.machine.kernel,
        if report.quick {
            " Quick run: sizes too small for the timing verdicts to mean anything; they are not judged (counts of lost or damaged records are)."
        } else {
            ""
        },
        report.placement.describe(),
    );
    for outcome in &report.scenarios {
        md.push_str(&format!(
            "\n## {}: {}\n\n```text\n{}```\n",
            outcome.id,
            outcome.title,
            table::render(outcome)
        ));
        for chart in &outcome.chart_files {
            md.push_str(&format!("\n![{}]({})\n", chart.title, chart.file));
        }
    }
    md
}

/// Writes the charts, `report.json` and `report.md` into a new
/// `<out>/<started>/` and returns the absolute path of `report.json`.
///
/// A chart that cannot be drawn is reported on stderr and left out: its
/// figures are in `report.json` all the same.
pub fn write(report: &mut Report, out: &Path) -> Result<PathBuf, Error> {
    let dir = new_dir(out, &report.started.replace(':', "-"))?;
    for outcome in &mut report.scenarios {
        outcome.chart_files.clear();
        for chart in outcome.charts.iter().filter(|c| !c.is_empty()) {
            let file = format!("{}-{}.svg", outcome.id, chart.slug());
            match charts::render(chart, &dir.join(&file)) {
                Ok(()) => outcome.chart_files.push(ChartFile {
                    file,
                    title: chart.title().to_string(),
                }),
                Err(error) => eprintln!("warning: {error}"),
            }
        }
    }
    let json_path = dir.join("report.json");
    std::fs::write(&json_path, to_json(report)?)
        .context(|| format!("writing {}", json_path.display()))?;
    let md_path = dir.join("report.md");
    std::fs::write(&md_path, to_markdown(report))
        .context(|| format!("writing {}", md_path.display()))?;
    Ok(std::path::absolute(&json_path).unwrap_or(json_path))
}

/// Creates `<out>/<name>/`, or `<name>-2` and so on if it exists.
fn new_dir(out: &Path, name: &str) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(out).context(|| format!("creating {}", out.display()))?;
    for n in 1..=100 {
        let dir = if n == 1 {
            out.join(name)
        } else {
            out.join(format!("{name}-{n}"))
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::from(e).context(format!("creating {}", dir.display()))),
        }
    }
    Err(Error::new(format!(
        "{} already holds 100 reports named {name}",
        out.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::outcome::{Goal, Pairs, RunFigures, Verdict};
    use std::time::Duration;

    /// Known instants, including a leap day and the end of a century.
    #[test]
    fn formats_rfc3339() {
        let at = |secs: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(at(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(at(4_102_444_799), "2099-12-31T23:59:59Z");
        assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00Z"
        );
    }

    /// A small report in the shape SCENARIOS.md describes.
    fn sample() -> Report {
        Report {
            started: "2026-11-22T10:00:00Z".into(),
            machine: Machine {
                cores: 2,
                kernel: "6.1.0".into(),
                io_uring: "available".into(),
            },
            quick: false,
            placement: Placement::plan(
                crate::bench::placement::PlacementKind::Isolated,
                &crate::bench::placement::CpuSet::new(vec![0, 1]),
            ),
            scenarios: vec![Outcome {
                id: "s1",
                title: "IO starvation under CPU load",
                sizes: Pairs(vec![("cpu_tasks", 8.into()), ("slice_us", 200.into())]),
                runs: vec![RunFigures {
                    runtime: "tokio".into(),
                    mode: "default".into(),
                    metrics: Pairs(vec![("idle_p99_us", 41.0), ("loaded_p99_us", 95.0)]),
                }],
                verdicts: vec![Verdict::new(
                    "loaded_p99/idle_p99",
                    "keel",
                    Some(2.3),
                    Some(Goal::AtMost(3.0)),
                )],
                rounds: serde_json::json!([]),
                noise: Vec::new(),
                problems: vec![],
                notes: vec![],
                charts: Vec::new(),
                chart_files: Vec::new(),
            }],
        }
    }

    /// The JSON has the documented keys and value types.
    #[test]
    fn report_json_shape() {
        let value: serde_json::Value = serde_json::from_str(&to_json(&sample()).unwrap()).unwrap();
        assert_eq!(value["started"], "2026-11-22T10:00:00Z");
        assert_eq!(value["machine"]["cores"], 2);
        assert_eq!(value["machine"]["kernel"], "6.1.0");
        let s1 = &value["scenarios"][0];
        assert_eq!(s1["id"], "s1");
        assert_eq!(s1["sizes"]["cpu_tasks"], 8);
        assert_eq!(s1["runs"][0]["runtime"], "tokio");
        assert_eq!(s1["runs"][0]["mode"], "default");
        assert_eq!(s1["runs"][0]["metrics"]["loaded_p99_us"], 95.0);
        let verdict = &s1["verdicts"][0];
        assert_eq!(verdict["name"], "loaded_p99/idle_p99");
        assert_eq!(verdict["runtime"], "keel");
        assert_eq!(verdict["value"], 2.3);
        assert_eq!(verdict["goal"], "<= 3");
        assert_eq!(verdict["pass"], true);
        assert_eq!(verdict["outcome"], "pass");
        assert!(verdict.get("missing").is_none());
        assert_eq!(value["placement"]["kind"], "isolated");
        assert_eq!(value["placement"]["server"], serde_json::json!([1]));
    }

    /// A renamed metric appears under its old name too, with the same
    /// value, only in its own scenario.
    #[test]
    fn renamed_metrics_keep_their_old_names() {
        let mut report = sample();
        report.scenarios[0].runs[0]
            .metrics
            .0
            .push(("ping_idle_p99_us", 7.0));
        let mut s5 = report.scenarios[0].clone();
        s5.id = "s5";
        s5.runs[0].metrics = Pairs(vec![("ping_idle_p99_us", 7.0)]);
        report.scenarios.push(s5);
        let value: serde_json::Value = serde_json::from_str(&to_json(&report).unwrap()).unwrap();
        assert_eq!(
            value["scenarios"][1]["runs"][0]["metrics"]["idle_p99_us"],
            7.0
        );
        assert_eq!(
            value["scenarios"][1]["runs"][0]["metrics"]["ping_idle_p99_us"],
            7.0
        );
        assert!(value["scenarios"][0]["runs"][0]["metrics"]["idle_p99_us"] == 41.0);
    }

    /// Writing twice in the same second gives two directories, and the
    /// returned path is an absolute, existing report.json.
    #[test]
    fn writes_into_fresh_dirs() {
        let out = std::env::temp_dir().join(format!(
            "keel-report-test-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut report = sample();
        report.scenarios[0]
            .charts
            .push(charts::Chart::Lines(charts::LineChart {
                slug: "latency",
                title: "RTT over time".into(),
                y_label: "RTT (µs)",
                series: vec![("keel".into(), vec![(0.0, 50.0), (0.25, 60.0)])],
            }));
        let first = write(&mut report, &out).unwrap();
        let second = write(&mut report, &out).unwrap();
        assert_ne!(first, second);
        assert!(first.is_absolute() && first.is_file());
        assert!(first.ends_with("2026-11-22T10-00-00Z/report.json"));
        assert!(second.ends_with("2026-11-22T10-00-00Z-2/report.json"));
        let md = std::fs::read_to_string(first.with_file_name("report.md")).unwrap();
        assert!(md.contains("loaded_p99_us"));
        assert!(md.contains("![RTT over time](s1-latency.svg)"), "{md}");
        assert!(first.with_file_name("s1-latency.svg").is_file());
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&first).unwrap()).unwrap();
        assert_eq!(json["scenarios"][0]["charts"][0]["file"], "s1-latency.svg");
        std::fs::remove_dir_all(&out).unwrap();
    }
}
