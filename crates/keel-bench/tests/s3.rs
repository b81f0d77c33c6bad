//! `keel-bench serve proxy`, `keel-bench serve s3-backend` and
//! `keel-bench load s3` driven by hand: the proxy forwards a large transfer both ways without losing
//! or changing a byte, passes each side's EOF on and closes, survives a
//! backend that refuses, answers `/status` on both runtimes, the backend
//! holds requests to its size limit exactly, the load produces its
//! figures against a real proxy and backend, and running out of file
//! descriptors does not stop the proxy's accept loop.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, LazyLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use support::{connect, echo_server, keel_bench, padded_request, Node};

/// Bytes sent through the proxy and echoed back by the transfer test:
/// 1 GiB each way (a few seconds even in debug builds, as the checks are
/// slice compares).
const TRANSFER: u64 = 1 << 30;

/// The longest read or write of the transfer test, bytes.
const CHUNK: usize = 256 * 1024;

/// The period of the transfer's byte pattern: a prime, so it lines up
/// with no buffer or page size, and a chunk dropped, repeated or moved
/// anywhere shows up as a mismatch.
const PERIOD: usize = 1_000_003;

/// The transfer's bytes: `PATTERN[i % PERIOD]` is byte `i`, and the
/// vector runs `CHUNK` bytes past one period, so that any chunk at any
/// offset is one contiguous slice of it and is checked with one compare.
static PATTERN: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let period: Vec<u8> = (0..PERIOD)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    period.iter().chain(&period[..CHUNK]).copied().collect()
});

/// The pattern's `len` bytes from `offset` of the stream.
fn expected(offset: u64, len: usize) -> &'static [u8] {
    let start = (offset % PERIOD as u64) as usize;
    &PATTERN[start..start + len]
}

/// Starts `keel-bench serve proxy --runtime runtime` with 2 workers and an
/// admin endpoint, forwarding to `backend`.
fn proxy(runtime: &str, backend: SocketAddr, extra: &[&str]) -> Node {
    let backend = backend.to_string();
    let mut args = vec![
        "proxy",
        "--runtime",
        runtime,
        "--workers",
        "2",
        "--backend",
        &backend,
        "--admin-addr",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Node::start(&args)
}

/// A backend of one connection on a plain thread: `serve` runs on the
/// accepted stream and its result comes back through the handle.
fn one_shot_backend<T: Send + 'static>(
    serve: impl FnOnce(TcpStream) -> T + Send + 'static,
) -> (SocketAddr, JoinHandle<T>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        serve(stream)
    });
    (addr, handle)
}

/// Echoes a patterned stream back until EOF, checking every byte on the
/// way in, then half-closes; returns the bytes it received.
fn checked_echo(mut stream: TcpStream) -> u64 {
    let mut buf = vec![0u8; CHUNK];
    let mut received = 0u64;
    loop {
        let n = stream.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        assert!(
            buf[..n] == *expected(received, n),
            "the backend received wrong bytes near offset {received}"
        );
        received += n as u64;
        stream.write_all(&buf[..n]).unwrap();
    }
    stream.shutdown(Shutdown::Write).unwrap();
    received
}

/// `TRANSFER` bytes go through a proxy of `runtime` to an echo backend
/// and back: every byte is checked at the backend and again at the
/// client, and both sides see the other's EOF.
fn forwards_without_corruption(runtime: &str) {
    let (backend, echo) = one_shot_backend(checked_echo);
    let mut node = proxy(runtime, backend, &[]);
    let client = connect(node.addr("addr"));
    let mut writer = client.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut sent = 0u64;
        while sent < TRANSFER {
            let len = CHUNK.min((TRANSFER - sent) as usize);
            writer.write_all(expected(sent, len)).unwrap();
            sent += len as u64;
        }
        writer.shutdown(Shutdown::Write).unwrap();
    });
    let mut reader = client;
    let mut buf = vec![0u8; CHUNK];
    let mut received = 0u64;
    loop {
        let n = reader.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        assert!(
            buf[..n] == *expected(received, n),
            "{runtime}: the client received wrong bytes near offset {received}"
        );
        received += n as u64;
    }
    sender.join().unwrap();
    assert_eq!(echo.join().unwrap(), TRANSFER, "{runtime}: at the backend");
    assert_eq!(received, TRANSFER, "{runtime}: back at the client");
    let counters = wait_closed(&mut node);
    assert_eq!(counters["bytes_up"], TRANSFER, "{counters}");
    assert_eq!(counters["bytes_down"], TRANSFER, "{counters}");
    assert_eq!(counters["io_errors"], 0, "{counters}");
    node.stop();
}

/// Waits until the proxy has no connection open; returns its counters.
fn wait_closed(node: &mut Node) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let counters = node.mark("proxy");
        if counters["open"] == 0 && counters["accepted"].as_u64() > Some(0) {
            return counters;
        }
        assert!(Instant::now() < deadline, "still open: {counters}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn keel_forwards_without_corruption() {
    forwards_without_corruption("keel");
}

#[test]
fn tokio_forwards_without_corruption() {
    forwards_without_corruption("tokio");
}

/// The client's EOF reaches the backend as EOF while the backend can
/// still answer (a half-close), and the backend's close reaches the
/// client as EOF; then the proxy closes the connection.
fn passes_eof_on(runtime: &str, extra: &[&str]) {
    // Client half-closes first.
    let (backend, served) = one_shot_backend(|mut stream| {
        let mut request = Vec::new();
        stream.read_to_end(&mut request).unwrap();
        stream.write_all(b"answer after EOF").unwrap();
        request
    });
    let mut node = proxy(runtime, backend, extra);
    let mut client = connect(node.addr("addr"));
    client.write_all(b"request").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).unwrap();
    assert_eq!(served.join().unwrap(), b"request", "{runtime}");
    assert_eq!(answer, b"answer after EOF", "{runtime}");
    drop(client);
    wait_closed(&mut node);
    node.stop();

    // Backend closes first, while the client has said nothing.
    let (backend, served) = one_shot_backend(|mut stream| {
        stream.write_all(b"bye").unwrap();
    });
    let mut node = proxy(runtime, backend, extra);
    let mut client = connect(node.addr("addr"));
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).unwrap();
    served.join().unwrap();
    assert_eq!(answer, b"bye", "{runtime}");
    drop(client);
    let counters = wait_closed(&mut node);
    assert_eq!(counters["io_errors"], 0, "{counters}");
    node.stop();
}

#[test]
fn keel_passes_eof_on() {
    passes_eof_on("keel", &[]);
}

#[test]
fn keel_single_class_passes_eof_on() {
    passes_eof_on("keel", &["--single-class"]);
}

#[test]
fn keel_with_the_urgent_lane_passes_eof_on() {
    passes_eof_on("keel", &["--urgent-lane"]);
}

#[test]
fn tokio_passes_eof_on() {
    passes_eof_on("tokio", &[]);
}

/// A backend that refuses closes the client, the proxy lives on, and the
/// next client gets through once the backend is up.
#[test]
fn refused_backend_closes_only_its_client() {
    for runtime in ["keel", "tokio"] {
        // A port nothing listens on (bound, then released).
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut node = proxy(runtime, port, &[]);
        let mut refused = connect(node.addr("addr"));
        let mut buf = [0u8; 16];
        assert_eq!(refused.read(&mut buf).unwrap_or(0), 0, "{runtime}: closed");
        let counters = node.mark("proxy");
        assert_eq!(counters["backend_errors"], 1, "{counters}");

        let listener = TcpListener::bind(port).unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            stream.write_all(b"up").unwrap();
            let _ = tx.send(());
        });
        let mut client = connect(node.addr("addr"));
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, b"up", "{runtime}");
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        node.stop();
    }
}

/// The backend's limit on a request, bytes (up to and including its
/// blank line).
const BACKEND_MAX_REQUEST: usize = 8 * 1024;

/// The backend answers a request of its size limit, and one a byte
/// longer is 413 and closed even when it arrives whole in one write, as
/// is one that never ends.
#[test]
fn backend_holds_requests_to_its_limit() {
    let mut backend = Node::start(&["s3-backend"]);
    let mut kept = connect(backend.addr("addr"));
    kept.write_all(&padded_request("/empty", BACKEND_MAX_REQUEST))
        .unwrap();
    let empty = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
    let mut answer = vec![0u8; empty.len()];
    kept.read_exact(&mut answer).unwrap();
    assert_eq!(answer, empty, "{}", String::from_utf8_lossy(&answer));
    for request in [
        padded_request("/empty", BACKEND_MAX_REQUEST + 1),
        vec![b'a'; 64 * 1024],
    ] {
        let mut over = connect(backend.addr("addr"));
        let _ = over.write_all(&request);
        let mut answer = String::new();
        let _ = over.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }
    let counters = backend.mark("backend");
    assert_eq!(counters["empty"], 1, "{counters}");
    assert_eq!(counters["refused"], 2, "{counters}");
    backend.stop();
}

/// Sends one request to the admin endpoint and reads the whole answer.
fn admin_get(admin: SocketAddr, path: &str) -> String {
    let mut stream = connect(admin);
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: keel\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// `GET /status` answers with the status text on both runtimes (in
/// keel's single class too); other paths are 404.
#[test]
fn admin_answers_status() {
    let nowhere = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for (runtime, extra) in [
        ("keel", &[][..]),
        ("keel", &["--single-class"]),
        ("keel", &["--urgent-lane"]),
        ("tokio", &[]),
    ] {
        let mut node = proxy(runtime, nowhere, extra);
        let admin = node.addr("admin_addr");
        let status = admin_get(admin, "/status");
        assert!(status.starts_with("HTTP/1.1 200 OK\r\n"), "{status}");
        assert!(
            status.contains(&format!("runtime: {runtime}\n")),
            "{status}"
        );
        assert!(status.contains("workers: 2\n"), "{status}");
        assert!(status.contains("uptime: "), "{status}");
        let body = status.split_once("\r\n\r\n").unwrap().1;
        assert!((100..2000).contains(&body.len()), "{}", body.len());
        let missing = admin_get(admin, "/nope");
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        assert_eq!(node.mark("proxy")["admin_requests"], 1);
        node.stop();
    }
}

/// `keel-bench load s3` through a real backend and proxy produces every figure,
/// without errors, and `--no-load` times the admin endpoint alone.
#[test]
fn load_produces_figures() {
    let backend = Node::start(&["s3-backend"]);
    for (runtime, extra) in [
        ("keel", &[][..]),
        ("keel", &["--single-class"]),
        ("keel", &["--urgent-lane"]),
        ("tokio", &[]),
    ] {
        let node = proxy(runtime, backend.addr("addr"), extra);
        let proxy_addr = node.addr("addr").to_string();
        let admin_addr = node.addr("admin_addr").to_string();
        let run = keel_bench(
            &[
                "load",
                "s3",
                "--proxy",
                &proxy_addr,
                "--admin",
                &admin_addr,
                "--duration-s",
                "1",
                "--warmup-ms",
                "100",
                "--bulk",
                "2",
                "--clients",
                "4",
                "--admin-interval-ms",
                "20",
            ],
            Duration::from_secs(60),
        );
        assert!(run.status.success(), "{runtime} {extra:?}: {}", run.stderr);
        let summary: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
        assert_eq!(summary["errors"], 0, "{summary}");
        assert_eq!(summary["loaded"], true, "{summary}");
        for key in [
            "admin_samples",
            "admin_p50_us",
            "admin_p99_us",
            "admin_max_us",
            "bulk_bytes",
            "bulk_mb_per_s",
            "bulk_downloads",
            "conns",
            "conns_per_s",
        ] {
            assert!(
                summary[key].as_f64().unwrap() > 0.0,
                "{runtime} {extra:?}: {key} in {summary}"
            );
        }

        let idle = keel_bench(
            &[
                "load",
                "s3",
                "--admin",
                &admin_addr,
                "--no-load",
                "--duration-s",
                "0.3",
                "--warmup-ms",
                "0",
            ],
            Duration::from_secs(30),
        );
        assert!(idle.status.success(), "{}", idle.stderr);
        let summary: serde_json::Value = serde_json::from_str(idle.stdout.trim()).unwrap();
        assert_eq!(summary["loaded"], false, "{summary}");
        assert!(summary["admin_samples"].as_u64().unwrap() > 0, "{summary}");
        assert_eq!(summary["conns"], 0, "{summary}");
        node.stop();
    }
    backend.stop();
}

/// Bad flags are usage errors (exit code 2) with a message that says
/// what is wrong.
#[test]
fn bad_flags_are_usage_errors() {
    let cases: [(&[&str], &str); 7] = [
        (&["serve", "proxy", "--runtime", "keel"], "--backend"),
        (
            &[
                "serve",
                "proxy",
                "--runtime",
                "tokio",
                "--backend",
                "127.0.0.1:9",
                "--single-class",
            ],
            "single-class",
        ),
        (
            &[
                "serve",
                "proxy",
                "--runtime",
                "keel",
                "--backend",
                "127.0.0.1:9",
                "--workers",
                "0",
            ],
            "workers",
        ),
        (
            &[
                "serve",
                "proxy",
                "--runtime",
                "tokio",
                "--backend",
                "127.0.0.1:9",
                "--urgent-lane",
            ],
            "urgent-lane",
        ),
        (
            &[
                "serve",
                "proxy",
                "--runtime",
                "keel",
                "--backend",
                "127.0.0.1:9",
                "--urgent-lane",
                "--single-class",
            ],
            "cannot be used with",
        ),
        (&["load", "s3", "--admin", "127.0.0.1:9"], "--proxy"),
        (
            &[
                "load",
                "s3",
                "--admin",
                "192.0.2.1:9",
                "--no-load",
                "--duration-s",
                "0.1",
            ],
            "loopback",
        ),
    ];
    for (args, needle) in cases {
        let run = keel_bench(args, Duration::from_secs(30));
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(needle), "{args:?}: {}", run.stderr);
    }
}

/// A proxy of `runtime` started under `ulimit -n limit`, forwarding to
/// `backend`; returns the child and its listening address. Its stdin is
/// piped, so dropping the child's stdin ends it.
fn limited_proxy(runtime: &str, backend: SocketAddr, limit: u32) -> (Child, SocketAddr) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_keel-bench"))
        .args(["serve", "proxy", "--runtime", runtime, "--workers", "2"])
        .args(["--backend", &backend.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let line: serde_json::Value = serde_json::from_str(&first).unwrap();
    let addr = line["addr"].as_str().unwrap().parse().unwrap();
    (child, addr)
}

/// Sends `message` on a new connection and reads back as many bytes.
fn echo_once(addr: SocketAddr, message: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut client = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    client.set_read_timeout(Some(Duration::from_secs(5)))?;
    client.write_all(message)?;
    let mut echo = vec![0u8; message.len()];
    client.read_exact(&mut echo)?;
    Ok(echo)
}

/// A proxy out of file descriptors (more clients than `ulimit -n`
/// allows) keeps its accept loop: once the clients go, a new one is
/// served.
#[test]
fn out_of_descriptors_does_not_stop_the_proxy() {
    let backend = echo_server();
    for runtime in ["keel", "tokio"] {
        let (mut child, addr) = limited_proxy(runtime, backend, 64);
        let crowd: Vec<TcpStream> = (0..100)
            .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok())
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        drop(crowd);
        // The crowd's connections still queued in the backlog are
        // accepted and closed one by one after the crowd has gone, and
        // while that lasts a new client may meet a proxy that can accept
        // it but not open its backend socket, and be closed. The proxy
        // must recover: a client is served within the deadline.
        let deadline = Instant::now() + Duration::from_secs(20);
        let echoed = loop {
            match echo_once(addr, b"still here") {
                Ok(echo) => break echo,
                Err(error) if Instant::now() < deadline => {
                    eprintln!("{runtime}: retrying after {error}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(error) => panic!("{runtime}: never served again: {error}"),
            }
        };
        assert_eq!(echoed, b"still here", "{runtime}");
        assert!(child.try_wait().unwrap().is_none(), "{runtime}: exited");
        drop(child.stdin.take());
        let status = child.wait().unwrap();
        assert!(status.success(), "{runtime}: {status}");
    }
}
