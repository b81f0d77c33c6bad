//! `keel-bench load s1` against a tiny std echo server on loopback.

mod support;

use std::net::TcpListener;
use std::time::Duration;

use support::{echo_server, keel_bench};

/// The probe prints one JSON line with a sensible count and ordered
/// quantiles.
#[test]
fn probes_a_std_echo_server() {
    let addr = echo_server();
    let run = keel_bench(
        &[
            "load",
            "s1",
            "--addr",
            &addr.to_string(),
            "--interval-us",
            "1000",
            "--duration-s",
            "0.5",
            "--warmup-ms",
            "100",
            "--payload",
            "64",
        ],
        Duration::from_secs(30),
    );
    assert!(run.status.success(), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", run.stdout);
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let count = v["count"].as_u64().unwrap();
    assert!((50..=501).contains(&count), "{v}");
    assert_eq!(v["errors"], 0);
    let q = |k: &str| v[k].as_f64().unwrap();
    assert!(q("p50_us") > 0.0);
    assert!(q("p50_us") <= q("p99_us") && q("p99_us") <= q("p999_us"));
    assert!(q("p999_us") <= q("max_us"));
}

/// No server: a clear error and a non-zero exit, quickly.
#[test]
fn unreachable_server_is_a_clear_error() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let run = keel_bench(
        &[
            "load",
            "s1",
            "--addr",
            &addr.to_string(),
            "--duration-s",
            "1",
        ],
        Duration::from_secs(30),
    );
    assert_eq!(run.status.code(), Some(1));
    assert!(run.stderr.contains("cannot connect"), "{}", run.stderr);
}

/// Only loopback is ever probed.
#[test]
fn refuses_other_addresses() {
    let run = keel_bench(
        &["load", "s1", "--addr", "192.0.2.1:7", "--duration-s", "1"],
        Duration::from_secs(30),
    );
    assert_eq!(run.status.code(), Some(2));
    assert!(run.stderr.contains("loopback"), "{}", run.stderr);
}
