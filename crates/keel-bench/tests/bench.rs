//! `keel-bench bench` end to end: a quick run (what CI runs) must produce every
//! figure for keel, keel-uring (where io_uring can be used) and tokio and a
//! report, and scenarios that do not exist must be usage errors.

mod support;

use std::path::Path;
use std::time::Duration;

use support::{keel_bench, report, scratch_dir};

/// `keel-bench bench --quick` exits 0, prints the table, and ends with the path
/// of a report.json that holds every scenario's figures for every runtime:
/// keel, keel-uring where this machine can use io_uring, and tokio.
#[test]
fn quick_bench_writes_a_report_for_every_runtime() {
    let out = scratch_dir("bench");
    let run = keel_bench(
        &["bench", "--quick", "--out", out.to_str().unwrap()],
        Duration::from_secs(300),
    );
    assert!(
        run.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
    assert!(run.stdout.contains("loaded_p99_us"), "{}", run.stdout);
    assert!(run.stdout.contains("verdict"), "{}", run.stdout);

    let last = run.stdout.lines().last().expect("some output");
    let path = Path::new(last.trim());
    assert!(path.ends_with("report.json"), "{last}");
    assert!(path.is_file(), "{last} does not exist");
    assert!(
        path.starts_with(&out),
        "{last} is not under {}",
        out.display()
    );
    assert!(path.with_file_name("report.md").is_file());

    let report = report(&run);
    assert!(report["started"].as_str().unwrap().ends_with('Z'));
    // Isolated unless the machine has a single CPU, which says so.
    let placement = &report["placement"];
    match placement["kind"].as_str().unwrap() {
        "isolated" => assert!(!placement["server"].as_array().unwrap().is_empty()),
        kind => {
            assert_eq!(kind, "shared");
            assert!(placement["fallback"].is_string(), "{placement}");
        }
    }
    // keel-uring is measured wherever the ring can be used, and the
    // report says which.
    let io_uring = report["machine"]["io_uring"].as_str().unwrap();
    let ring = io_uring.starts_with("available");
    assert!(ring || io_uring.starts_with("refused: "), "{io_uring}");
    // The ring's own verdicts, where keel-uring could not run, say so.
    let ring_absent = |verdict: &serde_json::Value| {
        let absent = !ring && verdict["runtime"] == "keel-uring";
        if absent {
            assert_eq!(verdict["missing"], "keel-uring not run", "{verdict}");
        }
        absent
    };
    // A quick run judges nothing: every verdict with a goal says so. Three
    // may have no value, and say why: S3's split, where its proxy had idle
    // time in the short phase (a split of idle time is not measured), S5's
    // paced ping, where a node fell short of the paced rate (a slow build
    // on a busy machine can), and S2's API against tokio's, where the storm
    // did not harm tokio's API.
    for scenario in report["scenarios"].as_array().unwrap() {
        for verdict in scenario["verdicts"].as_array().unwrap() {
            if ring_absent(verdict) {
                continue;
            }
            let named = |prefix: &str| verdict["name"].as_str().unwrap().starts_with(prefix);
            let missing_says =
                |why: &str| verdict["missing"].as_str().is_some_and(|m| m.contains(why));
            let explained_gap = verdict["outcome"] == "n/a"
                && ((named("bulk charged share") && missing_says("% idle"))
                    || (named("server ping loaded_p99 keel")
                        && verdict["name"].as_str().unwrap().ends_with("group, paced")
                        && missing_says("of the paced rate"))
                    || (named("api beyond-job p99 keel")
                        && verdict["name"]
                            .as_str()
                            .unwrap()
                            .ends_with("/tokio read-1460")
                        && missing_says("the storm did not harm tokio read-1460's API")));
            let expected = if verdict["goal"].is_null() {
                "reported"
            } else if explained_gap {
                "n/a"
            } else {
                "not judged"
            };
            assert_eq!(verdict["outcome"], expected, "{verdict}");
        }
        assert!(scenario["noise"].is_array(), "{}", scenario["id"]);
    }
    let cores = report["machine"]["cores"].as_u64().unwrap();
    assert!(cores >= 1);
    if report["placement"]["kind"] == "isolated" {
        // The machine's CPUs, not the harness's after it pinned itself.
        let placed = |side: &str| report["placement"][side].as_array().unwrap().len() as u64;
        assert_eq!(
            cores,
            placed("server") + placed("rest"),
            "{}",
            report["placement"]
        );
    }
    assert!(report["machine"]["kernel"].is_string());
    // A runtime's runs, keel-uring's only with the ring.
    let with_ring = |runs: &[(&'static str, &'static str)]| -> Vec<(String, String)> {
        runs.iter()
            .filter(|(runtime, _)| ring || *runtime != "keel-uring")
            .map(|(r, m)| (r.to_string(), m.to_string()))
            .collect()
    };
    let ids: Vec<&str> = report["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s0", "s1", "s2", "s3", "s4", "s5"]);
    let scenario = |id: &str| {
        report["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap_or_else(|| panic!("no {id} in the report"))
            .clone()
    };
    let s0 = &scenario("s0");
    assert_eq!(
        runs_of(s0),
        with_ring(&[
            ("keel", "default"),
            ("keel-uring", "default"),
            ("tokio", "default"),
            ("monoio", "default")
        ])
    );
    for run in s0["runs"].as_array().unwrap() {
        for name in ["keepalive_rps", "short_rps", "cpu_s"] {
            let value = run["metrics"][name].as_f64().unwrap_or(0.0);
            assert!(value > 0.0, "{name} = {value} in {run}");
        }
    }
    let s1 = &scenario("s1");
    assert_eq!(s1["sizes"]["cpu_tasks"], 8);
    assert_eq!(
        runs_of(s1),
        with_ring(&[
            ("keel", "default"),
            ("keel", "unaccounted"),
            ("keel-uring", "default"),
            ("tokio", "default"),
            ("monoio", "default")
        ])
    );
    let runs = s1["runs"].as_array().unwrap();
    for run in runs {
        check_s1_metrics(&run["metrics"]);
        // keel counts its looks at the reactor, with its accounting on;
        // the peers do not.
        let looks = &run["metrics"]["io_looks_per_s"];
        let peer = run["runtime"] == "tokio" || run["runtime"] == "monoio";
        if peer || run["mode"] == "unaccounted" {
            assert!(looks.is_null(), "{run}");
        } else {
            assert!(looks.as_f64().unwrap() > 0.0, "{run}");
        }
    }
    assert!(s1["verdicts"].as_array().unwrap().len() >= 4);
    for verdict in s1["verdicts"].as_array().unwrap() {
        if ring_absent(verdict) {
            continue;
        }
        assert!(verdict["value"].as_f64().unwrap().is_finite(), "{verdict}");
    }
    assert_eq!(
        s1["rounds"].as_array().unwrap().len(),
        2 * runs.len(),
        "idle + loaded, per variant"
    );

    let s2 = &scenario("s2");
    assert_eq!(
        runs_of(s2),
        with_ring(&[
            ("keel", "off"),
            ("keel", "fixed"),
            ("keel", "adaptive"),
            ("keel-uring", "off"),
            ("keel-uring", "fixed"),
            ("keel-uring", "adaptive"),
            ("tokio", "read-1460"),
            ("tokio", "read-64k")
        ])
    );
    for run in s2["runs"].as_array().unwrap() {
        let metrics = &run["metrics"];
        for name in [
            "cpu_s_per_gb",
            "stream_cpu_s_per_gb",
            "job_cpu_s",
            "deliveries_per_s",
            "bytes_per_delivery",
            "api_p99_ms",
            "api_storm_p99_ms",
            "api_alone_p99_ms",
            "api_beyond_job_p50_ms",
            "api_beyond_job_p99_ms",
            "api_beyond_job_alone_p99_ms",
        ] {
            let value = metrics[name].as_f64().unwrap_or(0.0);
            assert!(value > 0.0, "{name} = {value} in {run}");
        }
    }

    check_s4(&scenario("s4"), ring);
    check_s3(&scenario("s3"), ring);
    check_charts(path, &report, &["s1", "s3", "s4", "s5"]);

    let s5 = &scenario("s5");
    assert_eq!(s5["sizes"]["clients"], 8);
    let expected = with_ring(&[
        ("keel", "group"),
        ("keel-uring", "group"),
        ("tokio", "per-record"),
        ("tokio", "group"),
        ("tokio", "inline"),
        ("keel", "group-64"),
        ("keel-uring", "group-64"),
        ("tokio", "per-record-64"),
        ("tokio", "group-64"),
        ("tokio", "inline-64"),
        ("keel", "group-paced"),
        ("keel-uring", "group-paced"),
        ("tokio", "group-paced"),
        ("disk", "raw"),
    ]);
    assert_eq!(runs_of(s5), expected, "{s5}");
    let s5_runs = s5["runs"].as_array().unwrap();
    let paced = |run: &&serde_json::Value| run["mode"] == "group-paced";
    for run in s5_runs
        .iter()
        .filter(|run| !paced(run) && run["runtime"] != "disk")
    {
        let metrics = &run["metrics"];
        for name in [
            "records_per_s",
            "records_per_sync",
            "ceiling_records_per_s",
            "raw_fdatasync_us",
            "batch_records",
            "batch_fdatasync_us",
            "ping_idle_p99_us",
            "ping_loaded_p99_us",
            "server_ping_idle_p99_us",
            "server_ping_loaded_p99_us",
            "idle_p99_us",
            "loaded_p99_us",
        ] {
            let value = metrics[name].as_f64().unwrap_or(0.0);
            assert!(value > 0.0, "{name} = {value} in {run}");
        }
        assert_eq!(
            metrics["idle_p99_us"], metrics["ping_idle_p99_us"],
            "an alias"
        );
    }
    assert!(
        s5_runs.last().unwrap()["metrics"]["raw_fdatasync_us"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    // The paced runs name their rate and how much of it the node took; a
    // short run on a busy machine may leave a node short of it, and then
    // (only then) the ping verdict at equal load has no value. Each such
    // verdict compares two nodes (keel's or, as its ring twin,
    // keel-uring's, with tokio's), so only their two shares decide it.
    let reached: std::collections::BTreeMap<&str, f64> = s5_runs
        .iter()
        .filter(paced)
        .map(|run| {
            assert!(run["metrics"]["paced_records_per_s"].as_f64().unwrap() > 0.0);
            let share = run["metrics"]["pace_reached"].as_f64().unwrap_or(0.0);
            (run["runtime"].as_str().unwrap(), share)
        })
        .collect();
    let short_of_pace = |runtime: &str| reached.get(runtime).is_some_and(|r| *r < 0.95);
    for verdict in s5["verdicts"].as_array().unwrap() {
        if ring_absent(verdict) {
            continue;
        }
        let name = verdict["name"].as_str().unwrap();
        let paced_pair = name
            .strip_prefix("server ping loaded_p99 ")
            .and_then(|rest| rest.strip_suffix("/tokio group, paced"));
        if let Some(runtime) = paced_pair {
            if short_of_pace(runtime) || short_of_pace("tokio") {
                assert!(verdict["value"].is_null(), "{verdict}");
                continue;
            }
        }
        assert!(verdict["value"].as_f64().unwrap().is_finite(), "{verdict}");
    }
    check_schema_lists_every_metric(&report);
    std::fs::remove_dir_all(&out).unwrap();
}

/// Every metric of every run is named in `docs/report-schema.md`, so the
/// documented schema cannot fall behind the report.
fn check_schema_lists_every_metric(report: &serde_json::Value) {
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/report-schema.md");
    let schema = std::fs::read_to_string(&schema_path).unwrap();
    for scenario in report["scenarios"].as_array().unwrap() {
        for run in scenario["runs"].as_array().unwrap() {
            for name in run["metrics"].as_object().unwrap().keys() {
                assert!(
                    schema.contains(&format!("`{name}`")),
                    "{} metric {name} is not in {}",
                    scenario["id"],
                    schema_path.display()
                );
            }
        }
    }
}

/// Every scenario in `with_charts` lists chart files, and each is an SVG
/// that parses, has the scenario's title and draws shapes.
fn check_charts(report_path: &Path, report: &serde_json::Value, with_charts: &[&str]) {
    for scenario in report["scenarios"].as_array().unwrap() {
        let id = scenario["id"].as_str().unwrap();
        let charts = scenario["charts"].as_array().unwrap();
        if with_charts.contains(&id) {
            assert!(!charts.is_empty(), "{id} drew no chart");
        }
        for chart in charts {
            let file = report_path.with_file_name(chart["file"].as_str().unwrap());
            let text = std::fs::read_to_string(&file).unwrap();
            let doc = roxmltree::Document::parse(&text)
                .unwrap_or_else(|e| panic!("{} is not valid XML: {e}", file.display()));
            assert_eq!(doc.root_element().tag_name().name(), "svg");
            assert!(text.contains(chart["title"].as_str().unwrap()));
            let shapes = doc
                .descendants()
                .filter(|n| matches!(n.tag_name().name(), "polyline" | "rect" | "path"))
                .count();
            assert!(shapes > 5, "{} draws {shapes} shapes", file.display());
        }
    }
}

/// Each run's runtime and mode, in the report's order.
fn runs_of(scenario: &serde_json::Value) -> Vec<(String, String)> {
    scenario["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let name = |key: &str| r[key].as_str().unwrap().to_string();
            (name("runtime"), name("mode"))
        })
        .collect()
}

/// S3 measured keel with and without classes, with the urgent lane, keel
/// on the ring with classes (`ring`: where the ring can be used), and
/// tokio, and judged them.
fn check_s3(s3: &serde_json::Value, ring: bool) {
    let mut expected = vec![
        ("keel", "classes"),
        ("keel", "classes-lane"),
        ("keel", "single-class"),
    ];
    if ring {
        expected.push(("keel-uring", "classes"));
    }
    expected.push(("tokio", "default"));
    let expected: Vec<(String, String)> = expected
        .into_iter()
        .map(|(r, m)| (r.to_string(), m.to_string()))
        .collect();
    assert_eq!(runs_of(s3), expected, "{s3}");
    let classes = |run: &&serde_json::Value| run["mode"].as_str().unwrap().starts_with("classes");
    let keel = |run: &&serde_json::Value| run["runtime"] != "tokio";
    for run in s3["runs"].as_array().unwrap() {
        for name in [
            "admin_idle_p99_us",
            "admin_p50_us",
            "admin_p99_us",
            "admin_max_us",
            "admin_server_idle_p99_us",
            "admin_server_p99_us",
            "bulk_mb_per_s",
            "conns_per_s",
            "cpu_s",
            "mb_per_download_s",
            "conns_per_connection_work_s",
        ] {
            let value = run["metrics"][name].as_f64().unwrap_or(0.0);
            assert!(value > 0.0, "{name} = {value} in {run}");
        }
    }
    // keel with classes: the split of the charge beside the shares'.
    for run in s3["runs"].as_array().unwrap().iter().filter(classes) {
        for name in [
            "bulk_of_backlogged_charged_pct",
            "bulk_of_backlogged_shares_pct",
        ] {
            let value = run["metrics"][name].as_f64().unwrap_or(0.0);
            assert!(value > 0.0 && value < 100.0, "{name} = {value} in {run}");
        }
    }
    // keel: how idle the proxy's workers were, which decides whether the
    // split is judged.
    for run in s3["runs"].as_array().unwrap().iter().filter(keel) {
        let idle = run["metrics"]["worker_idle_pct"].as_f64().unwrap_or(-1.0);
        assert!(
            (0.0..=100.0).contains(&idle),
            "worker_idle_pct = {idle} in {run}"
        );
    }
    let verdicts = s3["verdicts"].as_array().unwrap();
    let names: Vec<&str> = verdicts
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    let on_the_ring = |v: &&serde_json::Value| v["runtime"] == "keel-uring";
    assert_eq!(
        verdicts.iter().filter(|v| !on_the_ring(v)).count(),
        23,
        "{names:?}"
    );
    // The ring's twins: of each verdict on keel with classes that has a
    // value, and of none on a variant only keel runs.
    for verdict in verdicts.iter().filter(|v| !on_the_ring(v)) {
        let name = verdict["name"].as_str().unwrap();
        let keel_only = name.contains("lane") || name.contains("single-class");
        if ring && name.contains("keel classes") && !keel_only && verdict["value"].is_f64() {
            let twin = name.replace("keel classes", "keel-uring classes");
            assert!(names.contains(&twin.as_str()), "no {twin} in {names:?}");
        }
    }
    for twin in verdicts.iter().filter(on_the_ring) {
        let name = twin["name"].as_str().unwrap();
        assert!(ring, "{name}");
        assert!(
            name.contains("keel-uring classes")
                && !name.contains("lane")
                && !name.contains("single-class"),
            "{name}"
        );
    }
    for verdict in verdicts {
        // A split measured on idle workers has no value, and says so.
        let idle_split = verdict["value"].is_null()
            && verdict["missing"]
                .as_str()
                .is_some_and(|why| why.contains("% idle"));
        assert!(
            idle_split || verdict["value"].as_f64().unwrap().is_finite(),
            "{verdict}"
        );
    }
}

/// S4 measured every spin setting of keel (and of keel-uring, with
/// `ring`) and tokio, and judged keel.
fn check_s4(s4: &serde_json::Value, ring: bool) {
    let mut expected = Vec::new();
    let keels: &[&str] = if ring {
        &["keel", "keel-uring"]
    } else {
        &["keel"]
    };
    for keel in keels {
        for spin in ["none", "short", "medium", "long"] {
            expected.push((keel.to_string(), spin.to_string()));
        }
    }
    expected.push(("tokio".to_string(), "default".to_string()));
    assert_eq!(runs_of(s4), expected, "{s4}");
    for run in s4["runs"].as_array().unwrap() {
        let metrics = &run["metrics"];
        for name in ["cpu_pct", "reported_busy_pct", "received_mb_per_s", "cpu_s"] {
            let value = metrics[name].as_f64().unwrap_or(0.0);
            assert!(value > 0.0, "{name} = {value} in {run}");
        }
        assert!(metrics["gap_pp"].as_f64().unwrap().is_finite(), "{run}");
        // tokio has no spin figure; keel always has one (possibly zero).
        assert_eq!(
            metrics["reported_spin_pct"].is_f64(),
            run["runtime"] != "tokio",
            "{run}"
        );
    }
    let verdicts = s4["verdicts"].as_array().unwrap();
    // keel's, and the ring's twin of each but tokio's own.
    assert_eq!(verdicts.len(), if ring { 19 } else { 10 }, "{s4}");
    for verdict in verdicts {
        assert!(verdict["value"].as_f64().unwrap().is_finite(), "{verdict}");
    }
}

/// The figures of one runtime's S1 run were produced.
fn check_s1_metrics(metrics: &serde_json::Value) {
    for counted in [
        "idle_samples",
        "loaded_samples",
        "slices_per_s",
        "cpu_s",
        "idle_p99_us",
        "loaded_p99_us",
        "server_idle_p99_us",
        "server_loaded_p99_us",
    ] {
        let value = metrics[counted].as_f64().unwrap_or(0.0);
        assert!(value > 0.0, "{counted} = {value} in {metrics}");
    }
    for name in [
        "idle_p50_us",
        "loaded_p50_us",
        "loaded_p999_us",
        "loaded_max_us",
    ] {
        assert!(metrics[name].as_f64().unwrap().is_finite(), "{name}");
    }
}

/// An unknown scenario is a usage error that names the available ones.
#[test]
fn unknown_scenario_exits_2() {
    let run = keel_bench(&["bench", "s9"], Duration::from_secs(30));
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("unknown scenario"), "{}", run.stderr);
    assert!(
        run.stderr.contains("available: s0, s1, s2, s3, s4, s5"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
}

/// `--crash` belongs to s5: asking for it with another scenario only is a
/// usage error, not a silent no-op.
#[test]
fn crash_without_s5_exits_2() {
    let run = keel_bench(&["bench", "s1", "--crash", "2"], Duration::from_secs(30));
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("--crash belongs to s5"),
        "{}",
        run.stderr
    );
}
