//! S0 end to end: `keel-bench serve s0` answers HTTP/1.1 on both
//! runtimes, `keel-bench load s0` measures it in both modes without
//! errors, `keel-bench bench s0 --quick` reports the documented metrics,
//! and bad flags are usage errors.

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use support::{connect, keel_bench, read_answer, report, scratch_dir, Node};

/// Starts `keel-bench serve s0` on `runtime` with 2 workers.
fn s0_node(runtime: &str) -> Node {
    Node::start(&["s0", "--runtime", runtime, "--workers", "2"])
}

/// A server of `runtime` answers `GET /` (and any other path) with 200 and
/// the 13-byte body, keeps the connection open between requests, closes
/// it when asked, reports its runtime in marks and exits 0 on `stop`.
fn answers_hello(runtime: &str) {
    let mut node = s0_node(runtime);
    let addr = node.addr("addr");
    assert!(addr.ip().is_loopback());
    let mut stream = connect(addr);
    for path in ["/", "/", "/elsewhere"] {
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let (head, body) = read_answer(&mut stream);
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{runtime}: {head}");
        assert_eq!(body, b"Hello, world!", "{runtime}");
        assert_eq!(body.len(), 13);
    }
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let (head, body) = read_answer(&mut stream);
    assert!(
        head.to_ascii_lowercase().contains("connection: close"),
        "{head}"
    );
    assert_eq!(body, b"Hello, world!");
    let mut rest = [0u8; 16];
    assert_eq!(
        stream.read(&mut rest).unwrap(),
        0,
        "{runtime}: closed after"
    );

    let mark = node.mark_line();
    assert!(mark["t_ns"].as_u64().unwrap() > 0, "{mark}");
    assert!(mark["runtime"].is_object(), "{mark}");
    node.stop();
}

#[test]
fn keel_server_answers_hello() {
    answers_hello("keel");
}

#[test]
fn tokio_server_answers_hello() {
    answers_hello("tokio");
}

/// Runs `keel-bench load s0` in `mode` against `addr`; returns its JSON line.
fn load(addr: SocketAddr, mode: &str) -> serde_json::Value {
    let addr = addr.to_string();
    let run = keel_bench(
        &[
            "load",
            "s0",
            "--addr",
            &addr,
            "--mode",
            mode,
            "--connections",
            "8",
            "--duration-s",
            "0.5",
            "--requests",
            "300",
            "--warmup-ms",
            "100",
        ],
        Duration::from_secs(60),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {}", run.stdout);
    serde_json::from_str(lines[0]).unwrap()
}

/// `keel-bench load s0` against a server of `runtime`, in both modes: requests
/// answered, a rate, no errors, every documented field.
fn load_measures(runtime: &str) {
    let node = s0_node(runtime);
    let addr = node.addr("addr");
    for mode in ["keepalive", "short"] {
        let summary = load(addr, mode);
        let at = format!("{runtime} {mode}: {summary}");
        assert_eq!(summary["mode"], mode, "{at}");
        assert_eq!(summary["connections"], 8, "{at}");
        assert_eq!(summary["errors"], 0, "{at}");
        assert!(summary["first_error"].is_null(), "{at}");
        assert!(summary["requests"].as_u64().unwrap() > 0, "{at}");
        for name in ["rps", "p50_us", "p99_us", "duration_s"] {
            assert!(summary[name].as_f64().unwrap() > 0.0, "{name} in {at}");
        }
        for name in ["p999_us", "max_us"] {
            assert!(summary[name].is_f64(), "{name} in {at}");
        }
        if mode == "short" {
            assert_eq!(summary["requests"], 300, "{at}");
            assert_eq!(summary["complete"], true, "{at}");
        }
    }
    node.stop();
}

#[test]
fn load_measures_keel() {
    load_measures("keel");
}

#[test]
fn load_measures_tokio() {
    load_measures("tokio");
}

/// `keel-bench bench s0 --quick` writes every runtime's S0 figures under
/// the documented names (keel-uring's where io_uring can be used), the two
/// keel/tokio verdicts, and the ring's own goals.
#[test]
fn quick_bench_reports_s0() {
    let out = scratch_dir("s0-bench");
    let run = keel_bench(
        &["bench", "s0", "--quick", "--out", out.to_str().unwrap()],
        Duration::from_secs(120),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("s0 r1/1 keel keepalive"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("s0 r1/1 tokio short"), "{}", run.stderr);
    assert!(run.stdout.contains("keepalive_rps"), "{}", run.stdout);
    let report = report(&run);
    let scenarios = report["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 1);
    let s0 = &scenarios[0];
    assert_eq!(s0["id"], "s0");
    assert_eq!(s0["sizes"]["connections"], 60);
    let runs = s0["runs"].as_array().unwrap();
    let runtimes: Vec<&str> = runs
        .iter()
        .map(|r| r["runtime"].as_str().unwrap())
        .collect();
    let ring = report["machine"]["io_uring"]
        .as_str()
        .unwrap()
        .starts_with("available");
    if ring {
        assert_eq!(runtimes, ["keel", "keel-uring", "tokio", "monoio"]);
    } else {
        assert_eq!(runtimes, ["keel", "tokio", "monoio"]);
    }
    for run in runs {
        let metrics = &run["metrics"];
        for name in [
            "keepalive_rps",
            "keepalive_p50_us",
            "keepalive_p99_us",
            "short_rps",
            "cpu_s",
        ] {
            let value = metrics[name].as_f64().unwrap_or(0.0);
            assert!(value > 0.0, "{name} = {value} in {run}");
        }
    }
    let verdicts: Vec<&str> = s0["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(
        verdicts.contains(&"keepalive_rps keel/tokio"),
        "{verdicts:?}"
    );
    assert!(verdicts.contains(&"short_rps keel/tokio"), "{verdicts:?}");
    for verdict in s0["verdicts"].as_array().unwrap() {
        if !ring && verdict["runtime"] == "keel-uring" {
            assert_eq!(verdict["missing"], "keel-uring not run", "{verdict}");
            continue;
        }
        assert!(verdict["value"].as_f64().unwrap().is_finite(), "{verdict}");
        let goal = match verdict["name"].as_str().unwrap() {
            // monoio's own ratio to tokio is reported; keel's, on either
            // driver, is judged, and the ring's over monoio.
            name if name.starts_with("keepalive_rps monoio") => None,
            name if name.starts_with("short_rps monoio") => None,
            name if name.ends_with("/tokio") && name.contains("_rps ") => Some(">= 1"),
            "keepalive_rps keel-uring/monoio" => Some(">= 1"),
            _ => None,
        };
        match goal {
            Some(goal) => assert_eq!(verdict["goal"], goal, "{verdict}"),
            None => assert!(verdict["goal"].is_null(), "{verdict}"),
        }
    }
    assert_eq!(
        s0["rounds"].as_array().unwrap().len(),
        2 * runtimes.len(),
        "2 modes per runtime"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

/// Flags that make no sense are usage errors (exit 2) that say what is
/// wrong.
#[test]
fn bad_flags_exit_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["serve", "s0"], "--runtime"),
        (&["serve", "s0", "--runtime", "node"], "node"),
        (
            &["serve", "s0", "--runtime", "keel", "--workers", "0"],
            "workers",
        ),
        (
            &["serve", "s0", "--runtime", "keel", "--addr", "here"],
            "addr",
        ),
        (&["load", "s0", "--addr", "127.0.0.1:9"], "--mode"),
        (
            &["load", "s0", "--addr", "127.0.0.1:9", "--mode", "sideways"],
            "sideways",
        ),
        (
            &["load", "s0", "--addr", "10.1.2.3:80", "--mode", "short"],
            "loopback",
        ),
        (
            &[
                "load",
                "s0",
                "--addr",
                "127.0.0.1:9",
                "--mode",
                "short",
                "--connections",
                "0",
            ],
            "connections",
        ),
        (
            &[
                "load",
                "s0",
                "--addr",
                "127.0.0.1:9",
                "--mode",
                "keepalive",
                "--duration-s",
                "0",
            ],
            "seconds",
        ),
        (&["bench", "s0", "--requests", "0"], "requests"),
    ];
    for (args, says) in cases {
        let run = keel_bench(args, Duration::from_secs(30));
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
}
