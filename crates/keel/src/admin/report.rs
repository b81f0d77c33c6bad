//! `/stats` (a [`StatsDocument`]) and `/status` (text) from a [`Stats`]
//! snapshot, and the windows that compare the workers' accounting with
//! process CPU.

use std::fmt::Write as _;
use std::time::Duration;

use super::document::{count, micros, ratio_pct, secs};
use super::{
    AdminFigures, BlockingFigures, ClassFigures, DeliveryFigures, DozeFigures, IoFigures,
    LaneFigures, Shared, StatsDocument, TokioFigures, WindowFigures, WorkerFigures,
};
use crate::stats::{Stats, WorkerStats};
use crate::{Class, Handle};

/// The accounting at one instant: what a window subtracts.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    /// The runtime's clock.
    elapsed: Duration,
    workers: Vec<WorkerStats>,
    blocking_busy: Duration,
    /// CPU of the tokio side's threads, if the runtime has one.
    tokio_cpu: Option<Duration>,
    /// CPU of the urgent lane's thread, if the runtime has one.
    lane_cpu: Option<Duration>,
    /// User and system CPU of the process, if `getrusage` answered.
    process: Option<(Duration, Duration)>,
    /// The host's CPU time, all states, and its steal, if `/proc/stat`
    /// answered.
    host: Option<HostCpu>,
}

/// The host's CPU time (all CPUs, all states) and the part of it stolen by
/// the hypervisor, since boot.
#[derive(Debug, Clone, Copy)]
struct HostCpu {
    total: Duration,
    steal: Duration,
}

/// The host's CPU times from the first line of `/proc/stat` (`cpu  user
/// nice system idle iowait irq softirq steal ...`, in clock ticks), as
/// sar reads them; `None` where the file or the tick rate is missing.
#[cfg(target_os = "linux")]
fn host_cpu() -> Option<HostCpu> {
    // SAFETY: `sysconf` reads a configuration value and touches no memory
    // of ours.
    let ticks_per_s = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_host_cpu(&stat, ticks_per_s)
}

/// Host CPU times are read on Linux only.
#[cfg(not(target_os = "linux"))]
fn host_cpu() -> Option<HostCpu> {
    None
}

/// The `cpu` line of a `/proc/stat` text, with `ticks_per_s` clock ticks
/// a second. `guest` and `guest_nice` are left out: the kernel counts
/// them in `user` and `nice` already.
fn parse_host_cpu(stat: &str, ticks_per_s: u64) -> Option<HostCpu> {
    if ticks_per_s == 0 {
        return None;
    }
    let line = stat.lines().next()?;
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let ticks: Vec<u64> = fields
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let steal = *ticks.get(7)?;
    let total: u64 = ticks.iter().sum();
    let duration = |ticks: u64| Duration::from_secs_f64(ticks as f64 / ticks_per_s as f64);
    Some(HostCpu {
        total: duration(total),
        steal: duration(steal),
    })
}

impl Sample {
    pub(super) fn take(stats: &Stats) -> Sample {
        Sample {
            elapsed: stats.elapsed,
            workers: stats.workers.clone(),
            blocking_busy: stats.blocking.busy,
            tokio_cpu: stats.tokio.map(|tokio| tokio.cpu),
            lane_cpu: stats.lane.as_ref().map(|lane| lane.cpu),
            process: process_cpu(),
            host: host_cpu(),
        }
    }
}

/// User and system CPU time of the whole process, from
/// `getrusage(RUSAGE_SELF)`.
#[cfg(unix)]
pub(super) fn process_cpu() -> Option<(Duration, Duration)> {
    fn duration(tv: libc::timeval) -> Duration {
        let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
        let micros = u64::try_from(tv.tv_usec).unwrap_or(0);
        Duration::from_secs(secs) + Duration::from_micros(micros)
    }
    // SAFETY: `rusage` is a struct of integers, for which all-zero bytes
    // are a valid value, and `getrusage` writes only into the struct it is
    // given, which lives for the whole call.
    let (rc, usage) = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        let rc = libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        (rc, usage)
    };
    (rc == 0).then(|| (duration(usage.ru_utime), duration(usage.ru_stime)))
}

/// Process CPU is not read on this platform.
#[cfg(not(unix))]
pub(super) fn process_cpu() -> Option<(Duration, Duration)> {
    None
}

/// Worker accounting against process CPU between two samples.
fn window(before: &Sample, after: &Sample) -> WindowFigures {
    let mut busy = Duration::ZERO;
    let mut search = Duration::ZERO;
    let mut spin = Duration::ZERO;
    let mut parked = Duration::ZERO;
    let mut park_cpu = Duration::ZERO;
    let mut worker_wall = Duration::ZERO;
    let mut workers_cpu = Duration::ZERO;
    let mut preempted = Duration::ZERO;
    for now in &after.workers {
        let span = match before.workers.get(now.index) {
            Some(then) => now.since(then),
            None => now.clone(),
        };
        busy += span.busy() + span.io + span.timers;
        search += span.search;
        spin += span.spin;
        parked += span.parked;
        park_cpu += span.park_cpu;
        worker_wall += span.wall();
        workers_cpu += span.cpu;
        preempted += span.preempted();
    }
    let blocking = after.blocking_busy.saturating_sub(before.blocking_busy);
    let tokio = after
        .tokio_cpu
        .map(|cpu| cpu.saturating_sub(before.tokio_cpu.unwrap_or(Duration::ZERO)));
    let lane = after
        .lane_cpu
        .map(|cpu| cpu.saturating_sub(before.lane_cpu.unwrap_or(Duration::ZERO)));
    let accounted = busy
        + search
        + spin
        + park_cpu
        + blocking
        + tokio.unwrap_or(Duration::ZERO)
        + lane.unwrap_or(Duration::ZERO);
    let process = match (before.process, after.process) {
        (Some((u0, s0)), Some((u1, s1))) => Some((u1.saturating_sub(u0), s1.saturating_sub(s0))),
        _ => None,
    };
    let process_cpu = process.map(|(user, system)| user + system);
    let host = match (before.host, after.host) {
        (Some(then), Some(now)) => Some((
            now.total.saturating_sub(then.total),
            now.steal.saturating_sub(then.steal),
        )),
        _ => None,
    };
    WindowFigures {
        wall_s: secs(after.elapsed.saturating_sub(before.elapsed)),
        worker_wall_s: secs(worker_wall),
        busy_s: secs(busy),
        search_s: secs(search),
        spin_s: secs(spin),
        parked_s: secs(parked),
        park_cpu_s: Some(secs(park_cpu)),
        blocking_busy_s: secs(blocking),
        tokio_cpu_s: tokio.map(secs),
        lane_cpu_s: lane.map(secs),
        accounted_cpu_s: secs(accounted),
        workers_cpu_s: Some(secs(workers_cpu)),
        preempted_s: Some(secs(preempted)),
        process_user_s: process.map(|(user, _)| secs(user)),
        process_system_s: process.map(|(_, system)| secs(system)),
        process_cpu_s: process_cpu.map(secs),
        utilization_pct: pct(busy, worker_wall),
        spin_pct: pct(spin, worker_wall),
        accounted_cpu_pct: pct(accounted, worker_wall),
        workers_cpu_pct: Some(pct(workers_cpu, worker_wall)),
        process_cpu_pct: process_cpu.map(|cpu| pct(cpu, worker_wall)),
        host_cpu_s: host.map(|(total, _)| secs(total)),
        host_steal_s: host.map(|(_, steal)| secs(steal)),
        host_steal_pct: host.map(|(total, steal)| pct(steal, total)),
    }
}

/// The `/stats` document for `stats`; moves the `since_last` baseline.
pub(super) fn stats_document(shared: &Shared, stats: &Stats) -> StatsDocument {
    let now = Sample::take(stats);
    let since_start = window(&shared.start, &now);
    let since_last = {
        let mut last = shared.last.lock().unwrap_or_else(|e| e.into_inner());
        let since_last = window(&last, &now);
        *last = now;
        since_last
    };
    let (utilization, spin) = overall(stats);
    StatsDocument {
        uptime_s: secs(stats.elapsed),
        workers: count(stats.workers.len()),
        live_tasks: count(shared.handle.live_tasks()),
        pending_timers: count(stats.pending_timers),
        utilization_pct: utilization,
        spin_pct: spin,
        worker_states: stats.workers.iter().map(WorkerFigures::from).collect(),
        classes: ClassFigures::all(stats),
        blocking: BlockingFigures::from(&stats.blocking),
        deliveries: DeliveryFigures::from(&stats.deliveries),
        admin: AdminFigures {
            class: current_class_name(&shared.handle).to_owned(),
            connections_open: count(shared.slots.open()),
            connections_rejected: shared.slots.refused(),
            connections_evicted: Some(shared.slots.evicted()),
            max_connections: count(shared.options.max_connections),
        },
        since_start,
        since_last,
        lane: stats.lane.as_ref().map(LaneFigures::from),
        tokio: stats.tokio.as_ref().map(TokioFigures::from),
        io: Some(IoFigures::from(&stats.io)),
        doze: Some(DozeFigures::from(&stats.doze)),
    }
}

/// The `/status` summary: a few hundred bytes of plain text.
pub(super) fn status(shared: &Shared, stats: &Stats) -> String {
    let (utilization, spin) = overall(stats);
    let total_shares: u64 = stats.classes.iter().map(|c| u64::from(c.shares)).sum();
    let total_wall: Duration = stats.classes.iter().map(|c| c.busy).sum();
    let mut text = String::with_capacity(512);
    let _ = writeln!(
        text,
        "keel up {:.1} s, {} workers, {} live tasks",
        stats.elapsed.as_secs_f64(),
        stats.workers.len(),
        shared.handle.live_tasks(),
    );
    let _ = writeln!(
        text,
        "utilization {utilization:.1}%, spin {spin:.1}% (since start)"
    );
    let sizing = &stats.sizing;
    let _ = writeln!(text, "workers: {}", sizing.workers_reason);
    let _ = writeln!(
        text,
        "spin {} us: {}",
        sizing.spin.as_micros(),
        sizing.spin_reason
    );
    let _ = match &stats.io.fallback {
        None => writeln!(text, "io driver {}", stats.io.driver),
        Some(why) => writeln!(
            text,
            "io driver {} (asked {}, no ring: {why})",
            stats.io.driver, stats.io.requested
        ),
    };
    let _ = writeln!(
        text,
        "{:<10} {:>7} {:>10} {:>10} {:>10}",
        "class", "share", "wall share", "wall s", "queue p99"
    );
    for class in &stats.classes {
        let _ = writeln!(
            text,
            "{:<10} {:>6.1}% {:>9.1}% {:>10.3} {:>10}",
            class.name,
            ratio_pct(u64::from(class.shares) as f64, total_shares as f64),
            pct(class.busy, total_wall),
            class.busy.as_secs_f64(),
            short_duration(class.queue_delay.p99()),
        );
    }
    text
}

/// Utilization and spin, in percent of all workers' wall time together.
fn overall(stats: &Stats) -> (f64, f64) {
    let wall: Duration = stats.workers.iter().map(WorkerStats::wall).sum();
    let busy: Duration = stats
        .workers
        .iter()
        .map(|w| w.busy() + w.io + w.timers)
        .sum();
    let spin: Duration = stats.workers.iter().map(|w| w.spin).sum();
    (pct(busy, wall), pct(spin, wall))
}

/// The name of the class of the task being polled (the answering one).
pub(super) fn current_class_name(handle: &Handle) -> &str {
    Class::current()
        .and_then(|class| handle.class_name(class))
        .unwrap_or("none")
}

/// `d` in µs below a millisecond, in ms below a second, else in s.
fn short_duration(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.0} us", micros(d))
    } else if d < Duration::from_secs(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

fn pct(part: Duration, whole: Duration) -> f64 {
    ratio_pct(part.as_secs_f64(), whole.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `cpu` line as sar reads it: every state counted once (`guest`
    /// is inside `user` already), steal the eighth figure, in ticks.
    #[test]
    fn the_hosts_cpu_line_reads_as_sar_reads_it() {
        let stat = "cpu  100 5 50 800 10 1 2 32 7 0\ncpu0 50 2 25 400 5 0 1 16 3 0\n";
        let host = parse_host_cpu(stat, 100).expect("a cpu line");
        assert_eq!(host.total, Duration::from_secs(10));
        assert_eq!(host.steal, Duration::from_millis(320));
        // A kernel that lists fewer states, or a line that is not the
        // aggregate, or not numbers, or no tick rate: no figure, no panic.
        for bad in [
            "cpu  100 5 50 800 10 1 2\n",
            "cpu0 100 5 50 800 10 1 2 32\n",
            "cpu  100 5 50 800 ten 1 2 32\n",
            "",
        ] {
            assert!(parse_host_cpu(bad, 100).is_none(), "{bad:?}");
        }
        assert!(parse_host_cpu(stat, 0).is_none());
    }

    /// On this machine the file answers, and steal is part of the total.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_host_cpu_is_read_here() {
        let host = host_cpu().expect("/proc/stat answers on Linux");
        assert!(host.steal <= host.total && host.total > Duration::ZERO);
    }
}
