//! `keel-bench serve s4` driven by hand: the stream service under each spin
//! setting counts what it receives and reports the spin state, tokio
//! refuses a spin setting, and a bad setting is a usage error.

mod support;

use std::io::Write;
use std::time::Duration;

use support::{connect, keel_bench, Node};

/// Sums a field over a mark's `workers` (keel's `worker_states`, tokio's
/// `workers`).
fn sum(runtime: &serde_json::Value, workers: &str, field: &str) -> f64 {
    runtime[workers]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w[field].as_f64().unwrap())
        .sum()
}

/// Under every spin setting the node receives and accounts; `long` spins
/// between deliveries and says so, `none` never spins.
#[test]
fn keel_node_accounts_spin_per_setting() {
    for spin in ["none", "short", "medium", "long"] {
        let mut node = Node::start(&["s4", "--runtime", "keel", "--spin", spin, "--workers", "2"]);
        let before = node.mark_line()["runtime"].clone();
        let mut stream = connect(node.addr("addr"));
        // Paced sends, so workers run out of work between them.
        for _ in 0..20 {
            stream.write_all(&[7u8; 12_500]).unwrap();
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(stream);
        std::thread::sleep(Duration::from_millis(100));
        let after = node.mark_line()["runtime"].clone();
        assert_eq!(after["s2"]["bytes"], 20 * 12_500, "{spin}: {after}");
        let spun = sum(&after, "worker_states", "spin_s") - sum(&before, "worker_states", "spin_s");
        match spin {
            "none" => assert_eq!(spun, 0.0, "spin none never spins"),
            "long" => assert!(spun > 0.0, "spin long spun {spun} s"),
            _ => assert!(spun >= 0.0),
        }
        node.stop();
    }
}

/// tokio reports per-worker busy time, and has no spin setting to take.
#[test]
fn tokio_node_reports_busy_and_refuses_a_spin() {
    let mut node = Node::start(&["s4", "--runtime", "tokio", "--workers", "2"]);
    let mut stream = connect(node.addr("addr"));
    stream.write_all(&[1u8; 100_000]).unwrap();
    drop(stream);
    std::thread::sleep(Duration::from_millis(100));
    let mark = node.mark_line()["runtime"].clone();
    assert_eq!(mark["s2"]["bytes"], 100_000, "{mark}");
    assert!(sum(&mark, "workers", "busy_s") > 0.0, "{mark}");
    node.stop();

    let run = keel_bench(
        &["serve", "s4", "--runtime", "tokio", "--spin", "long"],
        Duration::from_secs(30),
    );
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("tokio has no spin setting"),
        "{}",
        run.stderr
    );
}

/// An unknown spin setting is refused by the flag parser.
#[test]
fn unknown_spin_is_a_usage_error() {
    let run = keel_bench(
        &["serve", "s4", "--runtime", "keel", "--spin", "forever"],
        Duration::from_secs(30),
    );
    assert_eq!(run.status.code(), Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("forever"), "{}", run.stderr);
}
