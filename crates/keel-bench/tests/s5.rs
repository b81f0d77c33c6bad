//! `keel-bench serve s5` driven by hand: the log service acknowledges records
//! with increasing LSNs once durable, on every runtime and mode, survives
//! bad clients, and keel's log carries on after a restart.

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::{connect, keel_bench, report, scratch_dir, Node};

/// Starts `keel-bench serve s5` with 2 workers on `dir`.
fn s5_node(runtime: &str, mode: &str, dir: &Path) -> Node {
    let dir = dir.to_str().unwrap();
    Node::start(&[
        "s5",
        "--runtime",
        runtime,
        "--mode",
        mode,
        "--workers",
        "2",
        "--dir",
        dir,
    ])
}

/// Appends `count` records over one connection; returns their LSNs.
fn append(addr: SocketAddr, count: usize) -> Vec<u64> {
    let mut stream = connect(addr);
    (0..count)
        .map(|i| {
            let record = format!("record {i}").into_bytes();
            stream
                .write_all(&(record.len() as u32).to_le_bytes())
                .unwrap();
            stream.write_all(&record).unwrap();
            let mut lsn = [0u8; 8];
            stream.read_exact(&mut lsn).unwrap();
            u64::from_le_bytes(lsn)
        })
        .collect()
}

/// A node of `runtime` in `mode` echoes, acknowledges records with
/// consecutive LSNs and counts them.
fn acknowledges(runtime: &str, mode: &str) {
    let dir = scratch_dir(&format!("s5-{runtime}-{mode}"));
    let mut node = s5_node(runtime, mode, &dir);
    let mut echo = connect(node.addr("addr"));
    echo.write_all(b"ping").unwrap();
    let mut back = [0u8; 4];
    echo.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"ping");

    let lsns = append(node.addr("log_addr"), 50);
    assert_eq!(lsns, (1..=50).collect::<Vec<u64>>());
    let counters = node.mark("log");
    assert_eq!(counters["acked"], 50, "{counters}");
    assert!(counters["syncs"].as_u64().unwrap() >= 1, "{counters}");
    assert_eq!(counters["failed"], 0, "{counters}");
    node.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `keel-bench load s5` against a keel node: every client is promised
/// something, none fails, and the clients' thread reports its CPU time in
/// the window, which one thread cannot make longer than the window.
#[test]
fn log_clients_report_their_thread_time() {
    let dir = scratch_dir("s5-load");
    let node = s5_node("keel", "group", &dir);
    let addr = node.addr("log_addr").to_string();
    let run = keel_bench(
        &[
            "load",
            "s5",
            "--addr",
            &addr,
            "--clients",
            "3",
            "--record",
            "128",
            "--duration-s",
            "0.5",
            "--warmup-ms",
            "100",
        ],
        Duration::from_secs(60),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let summary: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(summary["errors"], 0, "{summary}");
    assert!(summary["acked"].as_u64().unwrap() > 0, "{summary}");
    let clients = summary["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 3, "{summary}");
    assert!(clients.iter().all(|c| c["acked_seq"].as_u64().unwrap() > 0));
    let cpu_s = summary["cpu_s"].as_f64().expect("the thread's CPU time");
    // The timer that closes the window may fire late; not by a second.
    assert!(cpu_s > 0.0 && cpu_s < 1.5, "{summary}");
    node.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn keel_group_acknowledges() {
    acknowledges("keel", "group");
}

/// keel's log connections run in the bulk class and the echo service in
/// normal, as the node's documentation promises: the polls that serve
/// pings are counted in normal, those that serve records in bulk.
///
/// How many polls a phase takes is not fixed: a task that has just
/// answered reads again in the same poll, and finds the next request there
/// when the client was quick. So each phase checks where its polls went,
/// not how many there were.
#[test]
fn keel_serves_the_log_in_bulk_and_the_echo_in_normal() {
    let dir = scratch_dir("s5-keel-classes");
    let mut node = s5_node("keel", "group", &dir);
    let polls = |classes: &serde_json::Value, name: &str| {
        classes
            .as_array()
            .unwrap()
            .iter()
            .find(|class| class["name"] == name)
            .unwrap_or_else(|| panic!("no class {name} in {classes}"))["polls"]
            .as_u64()
            .unwrap()
    };
    let grew = |before: &serde_json::Value, after: &serde_json::Value, name: &str| {
        polls(after, name) - polls(before, name)
    };

    let start = node.mark("classes");
    let mut echo = connect(node.addr("addr"));
    for _ in 0..20 {
        echo.write_all(b"ping").unwrap();
        let mut back = [0u8; 4];
        echo.read_exact(&mut back).unwrap();
    }
    let pinged = node.mark("classes");
    let normal = grew(&start, &pinged, "normal");
    assert!(normal >= 1, "pings: {start} -> {pinged}");
    assert!(
        grew(&start, &pinged, "bulk") < normal,
        "pings: {start} -> {pinged}"
    );

    assert_eq!(append(node.addr("log_addr"), 20).len(), 20);
    let logged = node.mark("classes");
    let bulk = grew(&pinged, &logged, "bulk");
    assert!(bulk >= 1, "records: {pinged} -> {logged}");
    assert!(
        grew(&pinged, &logged, "normal") < bulk,
        "records: {pinged} -> {logged}"
    );
    assert_eq!(grew(&start, &logged, "urgent"), 0, "{start} -> {logged}");
    node.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tokio_per_record_acknowledges() {
    acknowledges("tokio", "per-record");
}

#[test]
fn tokio_group_acknowledges() {
    acknowledges("tokio", "group");
}

#[test]
fn tokio_inline_acknowledges() {
    acknowledges("tokio", "inline");
}

/// keel's log carries on after a restart: LSNs continue, and the node
/// says what it found when it opened the log.
#[test]
fn keel_log_survives_a_restart() {
    let dir = scratch_dir("s5-restart");
    let node = s5_node("keel", "group", &dir);
    assert_eq!(
        append(node.addr("log_addr"), 10),
        (1..=10).collect::<Vec<u64>>()
    );
    node.stop();
    let node = s5_node("keel", "group", &dir);
    assert_eq!(
        node.first["startup"]["recovery"]["records"], 10,
        "{}",
        node.first
    );
    assert_eq!(append(node.addr("log_addr"), 3), vec![11, 12, 13]);
    node.stop();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A length prefix over the limit closes that connection only; the node
/// goes on serving others.
#[test]
fn oversized_record_closes_only_its_connection() {
    for runtime in ["keel", "tokio"] {
        let dir = scratch_dir(&format!("s5-bad-{runtime}"));
        let node = s5_node(runtime, "group", &dir);
        let mut bad = connect(node.addr("log_addr"));
        bad.write_all(&u32::MAX.to_le_bytes()).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(bad.read(&mut buf).unwrap_or(0), 0, "{runtime}: closed");
        assert_eq!(append(node.addr("log_addr"), 2), vec![1, 2], "{runtime}");
        node.stop();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// keel has one durability mode; asking for another is a usage error.
#[test]
fn keel_refuses_other_modes() {
    let dir = scratch_dir("s5-mode");
    let run = keel_bench(
        &[
            "serve",
            "s5",
            "--runtime",
            "keel",
            "--mode",
            "per-record",
            "--dir",
            dir.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("group"), "{}", run.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `keel-bench bench s5 --crash 2 --quick` kills the node twice and finds every
/// acknowledged record.
#[test]
fn crash_check_finds_every_acknowledged_record() {
    let out = scratch_dir("s5-crash");
    let run = keel_bench(
        &[
            "bench",
            "s5",
            "--crash",
            "2",
            "--quick",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert!(run.status.success(), "{}\n{}", run.stdout, run.stderr);
    let report = report(&run);
    let s5 = &report["scenarios"][0];
    assert_eq!(s5["id"], "s5");
    let metrics = &s5["runs"][0]["metrics"];
    assert_eq!(metrics["kills"], 2.0, "{metrics}");
    assert!(metrics["acked"].as_f64().unwrap() > 0.0, "{metrics}");
    assert_eq!(metrics["lost"], 0.0, "{metrics}");
    assert!(
        metrics["records_in_log"].as_f64() >= metrics["acked"].as_f64(),
        "{metrics}"
    );
    for verdict in s5["verdicts"].as_array().unwrap() {
        assert_eq!(verdict["pass"], true, "{verdict}");
    }
    std::fs::remove_dir_all(&out).unwrap();
}
