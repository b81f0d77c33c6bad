//! Real servers started by a test, on a free local port, stopped and
//! removed when dropped: a throwaway PostgreSQL cluster (Debian's
//! `postgresql` package) and a `redis-server` (Debian's `redis-server`).
//!
//! A server that cannot be found or started fails the test with what to
//! install: these tests are not skipped, in CI or anywhere.

// Not every includer uses every item.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;

/// How long a server may take to accept connections.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A port no one listens on now (the kernel's pick; free until someone
/// takes it, which on a test machine is the server started next).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a local port")
        .port()
}

/// Waits until something accepts on `port`, or fails with `what`.
fn wait_for_port(port: u16, what: &str, child: &mut Option<&mut Child>) {
    let deadline = Instant::now() + START_LIMIT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(child) = child.as_deref_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("{what} exited ({status}) before accepting on port {port}");
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not accept on port {port} within {START_LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `program`'s path: on `PATH`, or in one of `dirs`.
fn find(program: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(dirs.iter().cloned())
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// Whether this process runs as root (PostgreSQL refuses to).
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `program` with `args` to its end, as the `postgres` user when this
/// process is root; fails the test with its output if it fails.
fn run_as_postgres(program: &Path, args: &[&str]) {
    let mut command = if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    };
    let output = command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed ({}):\n{}{}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A PostgreSQL cluster of its own: `initdb` in a temporary directory,
/// started with `pg_ctl` on a free port with trust authentication for the
/// user `keel`, listening on 127.0.0.1 only.
pub struct Postgres {
    dir: TempDir,
    pg_ctl: PathBuf,
    port: u16,
}

impl Postgres {
    /// Creates and starts the cluster.
    pub fn start(name: &str) -> Postgres {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .map(|versions| versions.flatten().map(|v| v.path().join("bin")).collect())
            .unwrap_or_default();
        // The newest version first.
        dirs.sort();
        dirs.reverse();
        let missing = "PostgreSQL's initdb and pg_ctl were not found: install Debian's \
                       postgresql package (apt-get install postgresql)";
        let initdb = find("initdb", &dirs).expect(missing);
        let pg_ctl = find("pg_ctl", &dirs).expect(missing);
        let dir = TempDir::new(&format!("postgres-{name}"));
        let data = dir.path().join("data");
        if is_root() {
            // The cluster belongs to the user that runs it.
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown runs");
            assert!(status.success(), "chown of {} failed", dir.path().display());
        }
        let data_arg = data.to_str().expect("a UTF-8 temporary path");
        run_as_postgres(
            &initdb,
            &[
                "-D",
                data_arg,
                "-U",
                "keel",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        let port = free_port();
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            dir.path().display()
        );
        let log = dir.path().join("postgres.log");
        let log_arg = log.to_str().expect("a UTF-8 temporary path").to_owned();
        run_as_postgres(
            &pg_ctl,
            &[
                "-D", data_arg, "-o", &options, "-l", &log_arg, "-w", "-t", "60", "start",
            ],
        );
        wait_for_port(port, "PostgreSQL", &mut None);
        Postgres { dir, pg_ctl, port }
    }

    /// The connection URL of the database `postgres` as `keel`.
    pub fn url(&self) -> String {
        format!("postgres://keel@127.0.0.1:{}/postgres", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let mut command = if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&self.pg_ctl);
            command
        } else {
            Command::new(&self.pg_ctl)
        };
        let _ = command
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A `redis-server` of its own on a free port, persisting nothing.
pub struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    /// Starts the server.
    pub fn start() -> Redis {
        let program = find("redis-server", &[]).expect(
            "redis-server was not found: install Debian's redis-server package \
             (apt-get install redis-server)",
        );
        let port = free_port();
        let mut child = Command::new(program)
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        wait_for_port(port, "redis-server", &mut Some(&mut child));
        Redis { child, port }
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
