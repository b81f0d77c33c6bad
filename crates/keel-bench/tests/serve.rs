//! `keel-bench serve s1` driven by hand over its control protocol.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use support::{connect, keel_bench, Node};

/// The tokio server prints its address, echoes, counts slices between two
/// marks, and exits 0 on `stop`.
#[test]
fn tokio_server_speaks_the_protocol() {
    server_speaks_the_protocol("tokio");
}

/// The keel server does the same.
#[test]
fn keel_server_speaks_the_protocol() {
    server_speaks_the_protocol("keel");
}

/// A server of `runtime` prints its address, echoes, counts slices between
/// two marks, and exits 0 on `stop`.
fn server_speaks_the_protocol(runtime: &str) {
    let mut node = Node::start(&[
        "s1",
        "--runtime",
        runtime,
        "--workers",
        "2",
        "--cpu-tasks",
        "2",
        "--slice-iters",
        "1000",
    ]);
    let addr = node.addr("addr");
    assert!(addr.ip().is_loopback());

    let mut stream = connect(addr);
    stream.write_all(b"hello keel").unwrap();
    let mut echo = [0u8; 10];
    stream.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"hello keel");

    let first = node.mark_line();
    std::thread::sleep(Duration::from_millis(200));
    let second = node.mark_line();
    assert!(second["slices"].as_u64() > first["slices"].as_u64());
    assert!(second["t_ns"].as_u64() > first["t_ns"].as_u64());
    // Both runtimes report one entry per worker, with its busy time: keel
    // as its `/stats` document's `worker_states`, tokio as `workers`.
    let (key, busy) = match runtime {
        "keel" => ("worker_states", "task_s"),
        _ => ("workers", "busy_s"),
    };
    let workers = second["runtime"][key].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    assert!(workers.iter().all(|w| w[busy].is_f64()), "{workers:?}");
    node.stop();
}

/// A port that is taken is a clear error, not a panic.
#[test]
fn bind_failure_is_clear() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let run = keel_bench(
        &[
            "serve",
            "s1",
            "--runtime",
            "tokio",
            "--slice-iters",
            "10",
            "--addr",
            &addr,
        ],
        Duration::from_secs(30),
    );
    assert_eq!(run.status.code(), Some(1));
    assert!(run.stderr.contains("cannot bind"), "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
}
