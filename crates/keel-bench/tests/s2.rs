//! `keel-bench serve s2` driven by hand: the stream service counts what it
//! receives, the API answers with the job's own time, bad requests get
//! their documented answers (the size limit exactly), and modes are
//! checked per runtime.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{connect, keel_bench, padded_request, read_answer, Node};

/// Starts `keel-bench serve s2` with 2 workers, a small job, a 20 ms
/// delay and `extra` arguments.
fn s2_node(runtime: &str, mode: &str, extra: &[&str]) -> Node {
    let mut args = vec![
        "s2",
        "--runtime",
        runtime,
        "--mode",
        mode,
        "--workers",
        "2",
        "--job-lines",
        "2000",
        "--max-delay-ms",
        "20",
    ];
    args.extend_from_slice(extra);
    Node::start(&args)
}

/// The node's limit on an API request, bytes (up to and including its
/// blank line).
const MAX_REQUEST: usize = 8 * 1024;

/// A node of `runtime` in `mode` (started with `extra` arguments) counts
/// every byte the streams send, and answers `GET /job` (twice on one
/// connection) with the job's time.
fn serves(runtime: &str, mode: &str, extra: &[&str]) {
    let mut node = s2_node(runtime, mode, extra);
    let mut streams: Vec<TcpStream> = (0..3).map(|_| connect(node.addr("addr"))).collect();
    for stream in &mut streams {
        for _ in 0..10 {
            stream.write_all(&[7u8; 1460]).unwrap();
        }
    }
    drop(streams);
    let deadline = Instant::now() + Duration::from_secs(20);
    let counters = loop {
        let counters = node.mark("s2");
        if counters["bytes"] == 3 * 10 * 1460 || Instant::now() >= deadline {
            break counters;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(counters["bytes"], 3 * 10 * 1460, "{counters}");
    let deliveries = counters["deliveries"].as_u64().unwrap();
    assert!((3..=30).contains(&deliveries), "{counters}");

    let mut api = connect(node.addr("api_addr"));
    for _ in 0..2 {
        api.write_all(b"GET /job HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let (head, _) = read_answer(&mut api);
        assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
        assert!(head.contains("X-Job-Us: "), "{head}");
    }
    api.write_all(b"GET /other HTTP/1.1\r\n\r\n").unwrap();
    assert!(read_answer(&mut api).0.starts_with("HTTP/1.1 404"));
    assert_eq!(node.mark("s2")["api_requests"], 3);

    // A request that never ends is cut off at the size limit with 413,
    // and the node goes on serving.
    let mut big = connect(node.addr("api_addr"));
    let _ = big.write_all(&vec![b'a'; 64 * 1024]);
    let mut answer = String::new();
    let _ = big.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    api.write_all(b"GET /job HTTP/1.1\r\n\r\n").unwrap();
    assert!(read_answer(&mut api).0.starts_with("HTTP/1.1 200"));

    // The limit is exact: a request of the limit is answered, and one a
    // byte longer is 413 even when it arrives whole in one write.
    api.write_all(&padded_request("/job", MAX_REQUEST)).unwrap();
    let (head, _) = read_answer(&mut api);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut over = connect(node.addr("api_addr"));
    over.write_all(&padded_request("/job", MAX_REQUEST + 1))
        .unwrap();
    let mut answer = String::new();
    let _ = over.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(node.mark("s2")["api_requests"], 5);
    node.stop();
}

#[test]
fn keel_off_serves() {
    serves("keel", "off", &[]);
}

#[test]
fn keel_fixed_serves() {
    serves("keel", "fixed", &[]);
}

#[test]
fn keel_adaptive_serves() {
    serves("keel", "adaptive", &[]);
}

#[test]
fn tokio_read_1460_serves() {
    serves("tokio", "read-1460", &[]);
}

#[test]
fn tokio_read_64k_serves() {
    serves("tokio", "read-64k", &[]);
}

/// Handlers that work on every delivery (`--handler-lines`) still count
/// every byte and leave the API answering, on both runtimes.
#[test]
fn handlers_with_work_serve() {
    serves("keel", "fixed", &["--handler-lines", "200"]);
    serves("tokio", "read-1460", &["--handler-lines", "200"]);
}

/// Each runtime refuses the other's modes, as a usage error.
#[test]
fn modes_belong_to_their_runtime() {
    for (runtime, mode) in [("keel", "read-1460"), ("tokio", "fixed")] {
        let run = keel_bench(
            &[
                "serve",
                "s2",
                "--runtime",
                runtime,
                "--mode",
                mode,
                "--job-lines",
                "10",
            ],
            Duration::from_secs(30),
        );
        assert_eq!(
            run.status.code(),
            Some(2),
            "{runtime} {mode}: {}",
            run.stderr
        );
    }
}
