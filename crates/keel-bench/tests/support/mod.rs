//! Helpers shared by the integration tests: run the built `keel` binary
//! with a deadline, and make scratch directories under the system temp dir.

#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What a finished `keel` run left behind.
pub struct Run {
    /// Its exit status.
    pub status: ExitStatus,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

/// Runs `keel args...`, killing it if it is still running after `limit`.
pub fn keel(args: &[&str], limit: Duration) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_keel-bench"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the keel binary starts");
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
            panic!("keel {args:?} ran for more than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
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
