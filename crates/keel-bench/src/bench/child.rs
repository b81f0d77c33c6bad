//! Child processes the harness runs (servers and probes), kept on a leash.
//!
//! Every wait is bounded: lines are read on a helper thread and received
//! with a timeout, exits are polled with a deadline and end in a kill. The
//! child's stderr is kept (its tail) so that when a child dies the error
//! says why in its own words. [`Child`] kills and reaps its process when
//! dropped, so an early return or a panic in the harness never leaves a
//! server spinning on the machine.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use crate::error::Error;

/// How much of a child's stderr is kept for error messages.
const STDERR_TAIL: usize = 4096;

/// How often a waiting harness wakes up to tick its progress display.
const TICK: Duration = Duration::from_millis(100);

/// A running child process with line-oriented stdout.
pub struct Child {
    /// What the child is, for messages ("keel serve s1 (tokio)").
    name: String,
    /// The process.
    process: std::process::Child,
    /// Its stdin, until closed.
    stdin: Option<ChildStdin>,
    /// Its stdout, line by line, from a reader thread.
    lines: Receiver<String>,
    /// The tail of its stderr, from a reader thread.
    stderr: Arc<Mutex<String>>,
    /// Its exit status, once reaped.
    status: Option<ExitStatus>,
}

impl Child {
    /// Starts `exe args...` with piped stdin, stdout and stderr.
    pub fn spawn(name: impl Into<String>, exe: &Path, args: &[String]) -> Result<Self, Error> {
        let mut command = Command::new(exe);
        command.args(args);
        Self::start(name, command)
    }

    /// Starts `command` with piped stdin, stdout and stderr.
    pub fn start(name: impl Into<String>, mut command: Command) -> Result<Self, Error> {
        let name = name.into();
        let mut process = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                let program = command.get_program().to_string_lossy().into_owned();
                Error::new(format!("cannot start {name} ({program}): {e}"))
            })?;
        let stdin = process.stdin.take();
        let stdout = process.stdout.take();
        let stderr_pipe = process.stderr.take();
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = stdout {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut pipe) = stderr_pipe {
            let tail = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                    tail.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if tail.len() > 2 * STDERR_TAIL {
                        let mut cut = tail.len() - STDERR_TAIL;
                        while !tail.is_char_boundary(cut) {
                            cut += 1;
                        }
                        tail.drain(..cut);
                    }
                }
            });
        }
        Ok(Self {
            name,
            process,
            stdin,
            lines,
            stderr,
            status: None,
        })
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.process.id()
    }

    /// What the child is, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes one line to the child's stdin.
    pub fn send_line(&mut self, line: &str) -> Result<(), Error> {
        let result = match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(format!("{line}\n").as_bytes())
                .and_then(|()| stdin.flush()),
            None => Err(std::io::Error::other("its stdin is closed")),
        };
        match result {
            Ok(()) => Ok(()),
            Err(e) => Err(self.died(&format!("sending {line:?}: {e}"))),
        }
    }

    /// Waits up to `timeout` for the next stdout line, calling `tick`
    /// about every 100 ms meanwhile.
    pub fn recv_line(
        &mut self,
        timeout: Duration,
        what: &str,
        mut tick: impl FnMut(),
    ) -> Result<String, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            if now >= deadline {
                let mut error = Error::new(format!(
                    "{} said nothing for {:.0?} while the harness waited for {what}",
                    self.name, timeout
                ));
                let tail = self.stderr_tail();
                if !tail.is_empty() {
                    error = Error::new(format!("{error}; its stderr: {tail}"));
                }
                self.kill();
                return Err(error);
            }
            match self.lines.recv_timeout(TICK.min(deadline - now)) {
                Ok(line) if line.trim().is_empty() => {}
                Ok(line) => return Ok(line),
                Err(RecvTimeoutError::Timeout) => tick(),
                Err(RecvTimeoutError::Disconnected) => {
                    // Its stdout closed: it is exiting. Give it a moment to
                    // finish so the status and stderr are complete.
                    let _ = self.wait_timeout(Duration::from_secs(2));
                    return Err(self.died(&format!("before sending {what}")));
                }
            }
        }
    }

    /// Waits for the next stdout line and parses it as JSON.
    pub fn recv_json<T: DeserializeOwned>(
        &mut self,
        timeout: Duration,
        what: &str,
        tick: impl FnMut(),
    ) -> Result<T, Error> {
        let line = self.recv_line(timeout, what, tick)?;
        serde_json::from_str(&line).map_err(|e| {
            Error::new(format!(
                "{} sent {line:?} where the harness expected {what}: {e}",
                self.name
            ))
        })
    }

    /// Waits up to `timeout` for the child to exit; `None` if it has not.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>, Error> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Closes stdin and waits up to `timeout` for the child to exit, killing
    /// it if it does not. Returns the status and whether it had to be
    /// killed.
    pub fn finish(&mut self, timeout: Duration) -> Result<(ExitStatus, bool), Error> {
        self.stdin = None;
        if let Some(status) = self.wait_timeout(timeout)? {
            return Ok((status, false));
        }
        self.kill();
        match self.status {
            Some(status) => Ok((status, true)),
            None => Err(Error::new(format!("{} could not be reaped", self.name))),
        }
    }

    /// [`finish`](Self::finish) for a child that has printed its results:
    /// any exit but a clean one (an error, or killed for not exiting) is an
    /// error that names it and quotes its stderr.
    pub fn finish_clean(&mut self, timeout: Duration) -> Result<(), Error> {
        let (status, _) = self.finish(timeout)?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::new(format!(
                "{} printed results but then exited ({status}): {}",
                self.name,
                self.stderr_tail()
            )))
        }
    }

    /// The tail of what the child wrote to stderr, trimmed.
    pub fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        tail.trim().to_string()
    }

    /// Polls for an exit status without blocking.
    fn try_wait(&mut self) -> Result<Option<ExitStatus>, Error> {
        if self.status.is_none() {
            self.status = self
                .process
                .try_wait()
                .map_err(|e| Error::new(format!("cannot wait for {}: {e}", self.name)))?;
        }
        Ok(self.status)
    }

    /// An error saying the child is gone, with its status and stderr.
    fn died(&mut self, when: &str) -> Error {
        let status = match self.try_wait() {
            Ok(Some(status)) => format!("exited ({status})"),
            _ => "closed its output".to_string(),
        };
        // Give the stderr reader a moment to catch the last words.
        std::thread::sleep(Duration::from_millis(50));
        let tail = self.stderr_tail();
        let said = if tail.is_empty() {
            String::from("; it printed nothing on stderr")
        } else {
            format!("; its stderr: {tail}")
        };
        Error::new(format!("{} {status} {when}{said}", self.name))
    }

    /// Kills the child with SIGKILL (no chance to clean up, as in a power
    /// cut) and reaps it, if it is still running.
    pub fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        let _ = self.process.kill();
        self.status = self.process.wait().ok();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `sh -c script` as a child.
    fn sh(script: &str) -> Child {
        Child::spawn(
            "test child",
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
        )
        .unwrap()
    }

    /// Lines arrive in order and the child exits cleanly.
    #[test]
    fn reads_lines_and_exit() {
        let mut child = sh("echo one; echo; echo two");
        let t = Duration::from_secs(5);
        assert_eq!(child.recv_line(t, "a line", || {}).unwrap(), "one");
        assert_eq!(child.recv_line(t, "a line", || {}).unwrap(), "two");
        let (status, killed) = child.finish(t).unwrap();
        assert!(status.success() && !killed);
    }

    /// A child that dies is reported with its status and stderr.
    #[test]
    fn reports_death_with_stderr() {
        let mut child = sh("echo 'cannot bind' >&2; exit 3");
        let error = child
            .recv_line(Duration::from_secs(5), "its address", || {})
            .unwrap_err()
            .to_string();
        assert!(error.contains("test child exited"), "{error}");
        assert!(error.contains("cannot bind"), "{error}");
        assert!(error.contains("before sending its address"), "{error}");
    }

    /// A silent child times out, is killed, and ticks were delivered.
    #[test]
    fn silent_child_times_out() {
        let mut child = sh("sleep 30");
        let mut ticks = 0;
        let error = child
            .recv_line(Duration::from_millis(400), "its address", || ticks += 1)
            .unwrap_err()
            .to_string();
        assert!(error.contains("said nothing"), "{error}");
        assert!(ticks >= 2, "{ticks}");
        assert!(child.status.is_some(), "the child was killed and reaped");
    }

    /// A child that ignores the end of stdin is killed after the timeout.
    #[test]
    fn finish_kills_a_stubborn_child() {
        let mut child = sh("trap '' TERM; sleep 30");
        let (status, killed) = child.finish(Duration::from_millis(200)).unwrap();
        assert!(killed && !status.success());
    }

    /// Garbage where JSON was expected is a clear error.
    #[test]
    fn bad_json_is_clear() {
        let mut child = sh("echo not-json");
        let error = child
            .recv_json::<serde_json::Value>(Duration::from_secs(5), "its address", || {})
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("not-json") && error.contains("its address"),
            "{error}"
        );
    }
}
