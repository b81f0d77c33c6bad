//! One measured phase: a server process, a probe process, two marks.
//!
//! A phase starts a fresh server (so no phase inherits another's heap,
//! connections or runtime state), lets its CPU tasks spin up, takes a mark
//! (slice counter, monotonic clock, runtime accounting) and the process's
//! CPU time, runs the probe to completion, and takes a second mark and CPU
//! reading. Everything derived (slices per second, CPU seconds) is a
//! difference between the two marks, so start-up and shutdown never count.

use std::time::Duration;

use serde::Serialize;

use super::child::Child;
use super::noise::{HostSample, Noise};
use super::placement::{CpuSet, Role};
use super::proc;
use super::progress::PhaseBar;
use super::RunSpec;
use crate::error::Error;
use crate::load::summary::ProbeSummary;
use crate::serve::control::{AddrLine, Mark};
use crate::serve::RuntimeKind;

/// How long a server may stay silent before the harness gives up on it.
pub const SERVER_SILENCE: Duration = Duration::from_secs(10);

/// How long CPU tasks get to spin up before the first mark.
pub const SPIN_UP: Duration = Duration::from_millis(300);

/// How long a server may take to exit after `stop` before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What one phase runs.
#[derive(Debug, Clone)]
pub struct PhaseSpec {
    /// A label for messages (`s1 r1/5 tokio loaded`).
    pub label: String,
    /// The server's runtime.
    pub runtime: RuntimeKind,
    /// Worker threads of the server's runtime.
    pub workers: u64,
    /// CPU tasks in the server (0 for an idle phase).
    pub cpu_tasks: u64,
    /// Iterations of one CPU slice.
    pub slice_iters: u64,
    /// Probe: µs between sends.
    pub interval_us: u64,
    /// Probe: measured seconds.
    pub duration_s: f64,
    /// Probe: warm-up milliseconds.
    pub warmup_ms: u64,
    /// Probe: bytes per send.
    pub payload: u64,
    /// keel: whether the server's runtime keeps its accounting.
    pub accounting: bool,
}

/// What one phase measured.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseFigures {
    /// The server's runtime.
    pub runtime: RuntimeKind,
    /// CPU tasks in the server.
    pub cpu_tasks: u64,
    /// The probe's results.
    pub probe: ProbeSummary,
    /// Seconds between the two marks (by the server's monotonic clock).
    pub window_s: f64,
    /// CPU-task slices completed between the marks.
    pub slices: u64,
    /// `slices / window_s`.
    pub slices_per_s: f64,
    /// Server process CPU seconds between the marks.
    pub cpu_s: f64,
    /// The runtime's own accounting at the first mark.
    pub runtime_start: serde_json::Value,
    /// The runtime's own accounting at the second mark.
    pub runtime_end: serde_json::Value,
    /// The host's noise between the marks.
    pub noise: Noise,
}

/// Runs one phase, saying what it does on `bar`; the children are killed
/// on any early return.
pub fn measure(run: &RunSpec, spec: &PhaseSpec, bar: &PhaseBar) -> Result<PhaseFigures, Error> {
    bar.step("starting the server");
    let mut server = run.spawn(
        Role::Server,
        format!("keel serve s1 ({})", spec.runtime),
        &[
            "serve".into(),
            "s1".into(),
            "--runtime".into(),
            spec.runtime.to_string(),
            "--workers".into(),
            spec.workers.to_string(),
            "--cpu-tasks".into(),
            spec.cpu_tasks.to_string(),
            "--slice-iters".into(),
            spec.slice_iters.to_string(),
            "--addr".into(),
            "127.0.0.1:0".into(),
        ]
        .into_iter()
        .chain((!spec.accounting).then(|| "--no-accounting".into()))
        .collect::<Vec<String>>(),
    )?;
    let tick = || bar.tick();
    let addr: AddrLine = server.recv_json(SERVER_SILENCE, "its address", tick)?;

    bar.step("spinning up");
    std::thread::sleep(SPIN_UP);
    let start = mark(&mut server, bar)?;

    bar.step("probing");
    let mut probe = run.spawn(
        Role::Load,
        "keel load s1",
        &run.probe_args(vec![
            "load".into(),
            "s1".into(),
            "--addr".into(),
            addr.addr.to_string(),
            "--interval-us".into(),
            spec.interval_us.to_string(),
            "--duration-s".into(),
            spec.duration_s.to_string(),
            "--payload".into(),
            spec.payload.to_string(),
            "--warmup-ms".into(),
            spec.warmup_ms.to_string(),
        ]),
    )?;
    let probe_budget = Duration::from_millis(spec.warmup_ms)
        + Duration::from_secs_f64(spec.duration_s)
        + Duration::from_secs(15);
    let summary: ProbeSummary = probe.recv_json(probe_budget, "its results", tick)?;
    probe.finish_clean(Duration::from_secs(5))?;
    if summary.errors > 0 {
        // Shown with the phase; the report keeps the count.
        bar.step("probe had errors");
    }

    let end = mark(&mut server, bar)?;

    bar.step("stopping");
    server.send_line("stop")?;
    let (status, killed) = server.finish(STOP_GRACE)?;
    if killed {
        eprintln!(
            "warning: {}: {} did not exit within {STOP_GRACE:?} of stop and was killed",
            spec.label,
            server.name()
        );
    } else if !status.success() {
        eprintln!(
            "warning: {}: {} exited ({status}) after stop: {}",
            spec.label,
            server.name(),
            server.stderr_tail()
        );
    }

    let measured = start.to(&end, &run.placement.server);
    let slices = end.mark.slices.saturating_sub(start.mark.slices);
    let slices_per_s = if measured.window_s > 0.0 {
        slices as f64 / measured.window_s
    } else {
        f64::NAN
    };
    Ok(PhaseFigures {
        runtime: spec.runtime,
        cpu_tasks: spec.cpu_tasks,
        probe: summary,
        window_s: measured.window_s,
        slices,
        slices_per_s,
        cpu_s: measured.cpu_s,
        runtime_start: start.mark.runtime,
        runtime_end: end.mark.runtime,
        noise: measured.noise,
    })
}

/// What the harness reads at each end of a measured window.
#[derive(Debug, Clone)]
pub struct Reading {
    /// The server's own mark.
    pub mark: Mark,
    /// The server process's CPU seconds, read right after the mark.
    pub cpu_s: f64,
    /// Of those, in the kernel.
    pub system_cpu_s: f64,
    /// The host's counters, read right after that.
    pub host: HostSample,
}

/// What two readings say about the window between them.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Server process CPU seconds in the window.
    pub cpu_s: f64,
    /// Of those, in the kernel.
    pub system_cpu_s: f64,
    /// Seconds between the marks, by the server's clock.
    pub window_s: f64,
    /// The host's noise in the window.
    pub noise: Noise,
}

impl Reading {
    /// The window from this reading to `later`, the server on `server`.
    pub fn to(&self, later: &Reading, server: &CpuSet) -> Measured {
        let window_s = later.mark.t_ns.saturating_sub(self.mark.t_ns) as f64 / 1e9;
        Measured {
            cpu_s: (later.cpu_s - self.cpu_s).max(0.0),
            system_cpu_s: (later.system_cpu_s - self.system_cpu_s).max(0.0),
            window_s,
            noise: Noise::between(&self.host, &later.host, server, window_s),
        }
    }
}

/// Asks the server for a mark, and reads its CPU time and the host's
/// counters right after.
pub fn mark(server: &mut Child, bar: &PhaseBar) -> Result<Reading, Error> {
    server.send_line("mark")?;
    let mark: Mark = server.recv_json(SERVER_SILENCE, "the answer to mark", || bar.tick())?;
    let cpu = proc::cpu_seconds(server.pid())?;
    let host = HostSample::take(server.pid());
    Ok(Reading {
        mark,
        cpu_s: cpu.total,
        system_cpu_s: cpu.system,
        host,
    })
}
