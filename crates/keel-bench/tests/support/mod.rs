//! Helpers shared by the integration tests: run the built `keel-bench`
//! binary with a deadline or drive a `keel-bench serve` node over its
//! control protocol, connect to what it serves and read its HTTP/1.1
//! answers, stand in for a backend with a std echo server, and make
//! scratch directories under the system temp dir.

#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a finished `keel-bench` run left behind.
pub struct Run {
    /// Its exit status.
    pub status: ExitStatus,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

/// Runs `keel-bench args...`, killing it if it is still running after
/// `limit`.
pub fn keel_bench(args: &[&str], limit: Duration) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel-bench"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the keel-bench binary starts");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("keel-bench {args:?} ran for more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// The `report.json` of a finished bench run, read from the path it
/// printed last.
pub fn report(run: &Run) -> serde_json::Value {
    let path = run.stdout.lines().last().expect("some output").trim();
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("reading {path:?}: {error}\n{}", run.stdout));
    serde_json::from_str(&text).unwrap()
}

/// A fresh, empty directory under the system temp dir.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("keel-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A client connection to `addr` with timeouts: 5 s to connect, 20 s for
/// each read or write, so a test that waits for a server that does not
/// answer fails instead of hanging.
pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// A `GET path` request of exactly `len` bytes (up to and including its
/// blank line), padded with a header, to probe a server's size limit.
pub fn padded_request(path: &str, len: usize) -> Vec<u8> {
    let mut request = format!("GET {path} HTTP/1.1\r\nX-Pad: ").into_bytes();
    request.resize(len - 4, b'a');
    request.extend_from_slice(b"\r\n\r\n");
    request
}

/// Reads one whole HTTP/1.1 answer from `stream`: its head (without the
/// blank line that ends it) and its `Content-Length` body. Fails the test
/// if the stream closes first, the answer is malformed, or more bytes
/// than the answer arrive with it.
pub fn read_answer(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut data = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut answer = httparse::Response::new(&mut headers);
        let parsed = answer.parse(&data).unwrap_or_else(|error| {
            panic!(
                "a malformed answer ({error}): {}",
                String::from_utf8_lossy(&data)
            )
        });
        if let httparse::Status::Complete(head_len) = parsed {
            let length: usize = answer
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| {
                    std::str::from_utf8(h.value)
                        .unwrap()
                        .trim()
                        .parse()
                        .unwrap()
                })
                .expect("a Content-Length");
            if data.len() >= head_len + length {
                assert_eq!(data.len(), head_len + length, "nothing after the answer");
                let head = String::from_utf8(data[..head_len - 4].to_vec()).unwrap();
                return (head, data[head_len..].to_vec());
            }
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the server closed before answering: {}",
            String::from_utf8_lossy(&data)
        );
        data.extend_from_slice(&buf[..n]);
    }
}

/// A std echo server on loopback, a thread per connection, for as long as
/// the test runs.
pub fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || stream.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A `keel-bench serve ...` process driven over its control protocol.
pub struct Node {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    /// The first line it printed (its addresses).
    pub first: serde_json::Value,
}

impl Node {
    /// Starts `keel-bench serve args...` and reads its address line.
    pub fn start(args: &[&str]) -> Node {
        let mut child = Command::new(env!("CARGO_BIN_EXE_keel-bench"))
            .arg("serve")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let stdin = child.stdin.take().unwrap();
        let mut node = Node {
            child,
            stdin,
            lines,
            first: serde_json::Value::Null,
        };
        node.first = node.line();
        node
    }

    /// The next stdout line, as JSON.
    pub fn line(&self) -> serde_json::Value {
        let text = self
            .lines
            .recv_timeout(Duration::from_secs(20))
            .expect("the node answers within 20 s");
        serde_json::from_str(&text).unwrap()
    }

    /// An address from the first line.
    pub fn addr(&self, key: &str) -> SocketAddr {
        self.first[key].as_str().unwrap().parse().unwrap()
    }

    /// A fresh mark, whole.
    pub fn mark_line(&mut self) -> serde_json::Value {
        self.stdin.write_all(b"mark\n").unwrap();
        self.line()
    }

    /// The runtime object `key` of a fresh mark.
    pub fn mark(&mut self, key: &str) -> serde_json::Value {
        self.mark_line()["runtime"][key].clone()
    }

    /// Sends `stop` and checks the node exits 0 within 10 s.
    pub fn stop(mut self) {
        self.stdin.write_all(b"stop\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{status}");
                return;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!("the node did not exit after stop");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
