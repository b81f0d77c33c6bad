//! The control protocol between `keel-bench bench` and a server process.
//!
//! It is line-based JSON over the child's stdin and stdout, because that
//! needs no port, no extra dependency and no runtime on either side, and a
//! person can drive a server by hand to debug it. The server prints
//! [`AddrLine`] once it is bound; each `mark` on stdin is answered with a
//! [`Mark`] (slice counter, monotonic clock, runtime accounting) so that
//! the harness can difference two marks over exactly the measured window;
//! `stop` or the end of stdin makes it exit 0, so a harness that dies never
//! leaves a server behind.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::stamp::monotonic_ns;
use super::Running;
use crate::error::{Context, Error};

/// The first line a server prints: where it listens.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddrLine {
    /// The bound address of the service (S5: of the echo service).
    pub addr: SocketAddr,
    /// S5: the bound address of the log service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_addr: Option<SocketAddr>,
    /// S2: the bound address of the API service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_addr: Option<SocketAddr>,
    /// The proxy: the bound address of the admin endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<SocketAddr>,
    /// What the server found or was set to when it started, or `null`:
    /// S2's mode, the proxy's backend, the S3 backend's object size, S5's
    /// mode with, on keel, what recovery dropped and, on tokio, the log
    /// file.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub startup: serde_json::Value,
}

/// The answer to `mark`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Mark {
    /// CPU-task slices completed since start (0 for servers without CPU
    /// tasks).
    pub slices: u64,
    /// `CLOCK_MONOTONIC` in nanoseconds when the counter was read.
    pub t_ns: u64,
    /// The runtime's own accounting, or `null`.
    pub runtime: serde_json::Value,
}

/// Prints the address, then answers `mark` lines until `stop` or the end of
/// stdin.
pub fn serve_until_stop(running: Running, slices: &AtomicU64) -> Result<(), Error> {
    let stdout = std::io::stdout();
    let line = AddrLine {
        addr: running.addr,
        log_addr: running.log_addr,
        api_addr: running.api_addr,
        admin_addr: running.admin_addr,
        startup: running.startup.clone(),
    };
    send(&mut stdout.lock(), &line)?;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.context(|| "reading the control stdin")?;
        match line.trim() {
            "mark" => {
                let t_ns = monotonic_ns();
                let mark = Mark {
                    slices: slices.load(Ordering::Relaxed),
                    t_ns,
                    runtime: (running.runtime_stats)(),
                };
                send(&mut stdout.lock(), &mark)?;
            }
            "stop" => break,
            "" => {}
            other => {
                eprintln!("keel serve: ignoring unknown command {other:?} (known: mark, stop)")
            }
        }
    }
    // Stop the runtime before returning, so the process exits promptly.
    drop(running.guard);
    Ok(())
}

/// Writes one JSON line and flushes it, so the harness sees it at once.
fn send(out: &mut impl Write, value: &impl Serialize) -> Result<(), Error> {
    let mut line = serde_json::to_vec(value)?;
    line.push(b'\n');
    out.write_all(&line)
        .and_then(|()| out.flush())
        .context(|| "writing to the control stdout")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mark line round-trips through JSON with its field names.
    #[test]
    fn mark_wire_shape() {
        let mark = Mark {
            slices: 7,
            t_ns: 9,
            runtime: serde_json::Value::Null,
        };
        let text = serde_json::to_string(&mark).unwrap();
        assert_eq!(text, r#"{"slices":7,"t_ns":9,"runtime":null}"#);
        let back: Mark = serde_json::from_str(&text).unwrap();
        assert_eq!(back.slices, 7);
    }
}
