//! `/stats` (JSON) and `/status` (text) from a [`Stats`] snapshot, and the
//! windows that compare the workers' accounting with process CPU.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::Shared;
use crate::stats::{QueueDelay, Stats, WorkerStats};
use crate::{Class, Handle};

/// The accounting at one instant: what a window subtracts.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    /// The runtime's clock.
    elapsed: Duration,
    workers: Vec<WorkerStats>,
    blocking_busy: Duration,
    /// User and system CPU of the process, if `getrusage` answered.
    process: Option<(Duration, Duration)>,
}

impl Sample {
    pub(super) fn take(stats: &Stats) -> Sample {
        Sample {
            elapsed: stats.elapsed,
            workers: stats.workers.clone(),
            blocking_busy: stats.blocking.busy,
            process: process_cpu(),
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

/// The `/stats` document; the module docs list every field.
#[derive(Serialize)]
struct StatsJson<'a> {
    uptime_s: f64,
    workers: usize,
    live_tasks: usize,
    pending_timers: usize,
    utilization_pct: f64,
    spin_pct: f64,
    worker_states: Vec<WorkerJson>,
    classes: Vec<ClassJson<'a>>,
    blocking: BlockingJson,
    deliveries: DeliveriesJson,
    admin: AdminJson<'a>,
    since_start: Window,
    since_last: Window,
}

#[derive(Serialize)]
struct WorkerJson {
    worker: usize,
    wall_s: f64,
    task_s: f64,
    io_s: f64,
    timers_s: f64,
    search_s: f64,
    spin_s: f64,
    parked_s: f64,
    utilization_pct: f64,
    polls: u64,
    cpu_s: f64,
    park_cpu_s: f64,
    preempted_s: f64,
    io_poll_gap_max_us: f64,
    rescues: u64,
}

#[derive(Serialize)]
struct ClassJson<'a> {
    name: &'a str,
    index: usize,
    shares: u32,
    configured_share_pct: f64,
    cpu_s: f64,
    cpu_share_pct: f64,
    polls: u64,
    stalls: u64,
    queue_delay: QueueDelayJson,
}

#[derive(Serialize)]
struct QueueDelayJson {
    count: u64,
    mean_us: f64,
    p50_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
}

#[derive(Serialize)]
struct BlockingJson {
    threads: usize,
    idle: usize,
    queued: usize,
    waiting: usize,
    completed: u64,
    rejected: u64,
    busy_s: f64,
    max_threads: usize,
    queue_capacity: usize,
}

#[derive(Serialize)]
struct DeliveriesJson {
    off: CountBytes,
    fixed: CountBytes,
    adaptive: CountBytes,
}

#[derive(Serialize)]
struct CountBytes {
    count: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct AdminJson<'a> {
    class: &'a str,
    connections_open: usize,
    connections_rejected: u64,
    connections_evicted: u64,
    max_connections: usize,
}

/// Worker accounting against process CPU over one span.
#[derive(Serialize)]
struct Window {
    wall_s: f64,
    worker_wall_s: f64,
    busy_s: f64,
    search_s: f64,
    spin_s: f64,
    parked_s: f64,
    park_cpu_s: f64,
    blocking_busy_s: f64,
    accounted_cpu_s: f64,
    workers_cpu_s: f64,
    preempted_s: f64,
    process_user_s: Option<f64>,
    process_system_s: Option<f64>,
    process_cpu_s: Option<f64>,
    utilization_pct: f64,
    spin_pct: f64,
    accounted_cpu_pct: f64,
    workers_cpu_pct: f64,
    process_cpu_pct: Option<f64>,
}

impl Window {
    fn between(before: &Sample, after: &Sample) -> Window {
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
        let accounted = busy + search + spin + park_cpu + blocking;
        let process = match (before.process, after.process) {
            (Some((u0, s0)), Some((u1, s1))) => {
                Some((u1.saturating_sub(u0), s1.saturating_sub(s0)))
            }
            _ => None,
        };
        let process_cpu = process.map(|(user, system)| user + system);
        Window {
            wall_s: secs(after.elapsed.saturating_sub(before.elapsed)),
            worker_wall_s: secs(worker_wall),
            busy_s: secs(busy),
            search_s: secs(search),
            spin_s: secs(spin),
            parked_s: secs(parked),
            park_cpu_s: secs(park_cpu),
            blocking_busy_s: secs(blocking),
            accounted_cpu_s: secs(accounted),
            workers_cpu_s: secs(workers_cpu),
            preempted_s: secs(preempted),
            process_user_s: process.map(|(user, _)| secs(user)),
            process_system_s: process.map(|(_, system)| secs(system)),
            process_cpu_s: process_cpu.map(secs),
            utilization_pct: pct(busy, worker_wall),
            spin_pct: pct(spin, worker_wall),
            accounted_cpu_pct: pct(accounted, worker_wall),
            workers_cpu_pct: pct(workers_cpu, worker_wall),
            process_cpu_pct: process_cpu.map(|cpu| pct(cpu, worker_wall)),
        }
    }
}

/// The `/stats` document for `stats`; moves the `since_last` baseline.
pub(super) fn stats_json(shared: &Shared, stats: &Stats) -> String {
    let now = Sample::take(stats);
    let since_start = Window::between(&shared.start, &now);
    let since_last = {
        let mut last = shared.last.lock().unwrap_or_else(|e| e.into_inner());
        let window = Window::between(&last, &now);
        *last = now;
        window
    };
    let (utilization, spin) = overall(stats);
    let total_shares: u64 = stats.classes.iter().map(|c| u64::from(c.shares)).sum();
    let total_cpu: Duration = stats.classes.iter().map(|c| c.busy).sum();
    let doc = StatsJson {
        uptime_s: secs(stats.elapsed),
        workers: stats.workers.len(),
        live_tasks: shared.handle.live_tasks(),
        pending_timers: stats.pending_timers,
        utilization_pct: utilization,
        spin_pct: spin,
        worker_states: stats
            .workers
            .iter()
            .map(|w| WorkerJson {
                worker: w.index,
                wall_s: secs(w.wall()),
                task_s: secs(w.busy()),
                io_s: secs(w.io),
                timers_s: secs(w.timers),
                search_s: secs(w.search),
                spin_s: secs(w.spin),
                parked_s: secs(w.parked),
                utilization_pct: w.utilization() * 100.0,
                polls: w.polls.iter().sum(),
                cpu_s: secs(w.cpu),
                park_cpu_s: secs(w.park_cpu),
                preempted_s: secs(w.preempted()),
                io_poll_gap_max_us: w.io_poll_gap_max.as_secs_f64() * 1e6,
                rescues: w.rescues,
            })
            .collect(),
        classes: stats
            .classes
            .iter()
            .enumerate()
            .map(|(index, c)| ClassJson {
                name: &c.name,
                index,
                shares: c.shares,
                configured_share_pct: ratio_pct(u64::from(c.shares) as f64, total_shares as f64),
                cpu_s: secs(c.busy),
                cpu_share_pct: pct(c.busy, total_cpu),
                polls: c.polls,
                stalls: c.stalls,
                queue_delay: queue_delay(&c.queue_delay),
            })
            .collect(),
        blocking: BlockingJson {
            threads: stats.blocking.threads,
            idle: stats.blocking.idle,
            queued: stats.blocking.queued,
            waiting: stats.blocking.waiting,
            completed: stats.blocking.completed,
            rejected: stats.blocking.rejected,
            busy_s: secs(stats.blocking.busy),
            max_threads: stats.blocking.max_threads,
            queue_capacity: stats.blocking.queue_capacity,
        },
        deliveries: DeliveriesJson {
            off: CountBytes {
                count: stats.deliveries.off.count,
                bytes: stats.deliveries.off.bytes,
            },
            fixed: CountBytes {
                count: stats.deliveries.fixed.count,
                bytes: stats.deliveries.fixed.bytes,
            },
            adaptive: CountBytes {
                count: stats.deliveries.adaptive.count,
                bytes: stats.deliveries.adaptive.bytes,
            },
        },
        admin: AdminJson {
            class: current_class_name(&shared.handle),
            connections_open: shared.slots.open(),
            connections_rejected: shared.slots.refused(),
            connections_evicted: shared.slots.evicted(),
            max_connections: shared.options.max_connections,
        },
        since_start,
        since_last,
    };
    let mut json = serde_json::to_string_pretty(&doc).expect("the stats document serializes");
    json.push('\n');
    json
}

/// The `/status` summary: a few hundred bytes of plain text.
pub(super) fn status(shared: &Shared, stats: &Stats) -> String {
    let (utilization, spin) = overall(stats);
    let total_shares: u64 = stats.classes.iter().map(|c| u64::from(c.shares)).sum();
    let total_cpu: Duration = stats.classes.iter().map(|c| c.busy).sum();
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
    let _ = writeln!(
        text,
        "{:<10} {:>7} {:>10} {:>10} {:>10}",
        "class", "share", "cpu share", "cpu s", "queue p99"
    );
    for class in &stats.classes {
        let _ = writeln!(
            text,
            "{:<10} {:>6.1}% {:>9.1}% {:>10.3} {:>10}",
            class.name,
            ratio_pct(u64::from(class.shares) as f64, total_shares as f64),
            pct(class.busy, total_cpu),
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

fn queue_delay(delay: &QueueDelay) -> QueueDelayJson {
    QueueDelayJson {
        count: delay.count(),
        mean_us: micros(delay.mean()),
        p50_us: micros(delay.p50()),
        p90_us: micros(delay.quantile(0.90)),
        p99_us: micros(delay.p99()),
        p999_us: micros(delay.quantile(0.999)),
        max_us: micros(delay.max()),
    }
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

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn pct(part: Duration, whole: Duration) -> f64 {
    ratio_pct(part.as_secs_f64(), whole.as_secs_f64())
}

fn ratio_pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}
