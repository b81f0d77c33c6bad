//! What `keel top` shows, computed from `/stats` documents without any
//! terminal in sight.
//!
//! A `/stats` document is mostly cumulative: seconds per worker state,
//! seconds of poll wall time per class, deliveries since the runtime
//! started. A figure
//! that says how the server is doing *now* is the difference between two
//! documents divided by the time between them, so the [`View`] is built
//! from the newest [`StatsDocument`] and the one before it. The first view has
//! no previous document and shows the averages since the start instead,
//! and says so.
//!
//! The server's own `since_last` window is not used for the rates: it is
//! shared by every client of the endpoint, so a second `keel top` (or a
//! scraper) would shorten this one's windows. The `since_start` window is
//! cumulative like the rest, so its differences are this client's own.
//!
//! Queue delays are cumulative histograms whose percentiles cannot be
//! subtracted; they are shown as they are, since the start.

use keel::admin::{CountBytes, DeliveryFigures, StatsDocument, WindowFigures, WorkerFigures};

use crate::error::Error;

/// Parses a `/stats` body into the document type the keel library
/// serializes: fields a newer server adds are ignored, and the figures an
/// older one lacks read as `None` (see [`StatsDocument`]), so `top` works
/// with either.
///
/// # Errors
///
/// If `body` is not JSON, or lacks a field every `/stats` document has;
/// the message says which.
pub fn parse(body: &[u8]) -> Result<StatsDocument, Error> {
    StatsDocument::from_json(body).map_err(|error| {
        Error::new(format!(
            "not a keel /stats document ({error}): {}",
            super::fetch::preview(body)
        ))
    })
}

/// The worker states, in the order the view stacks them.
pub const STATES: [&str; 6] = ["task", "io", "timers", "search", "spin", "parked"];

/// Everything the view shows, computed from one or two snapshots.
#[derive(Debug, Clone)]
pub struct View {
    /// The span the rates cover, in seconds.
    pub span_s: f64,
    /// Whether the rates are averages since the start (there was no
    /// earlier snapshot, or the server restarted since it).
    pub since_start: bool,
    /// Time since the runtime was built.
    pub uptime_s: f64,
    /// Live tasks now.
    pub live_tasks: u64,
    /// Pending timers now.
    pub pending_timers: u64,
    /// Task + IO + timers over worker wall time, in percent.
    pub utilization_pct: f64,
    /// Spin over worker wall time, in percent.
    pub spin_pct: f64,
    /// Accounted CPU over worker wall time, in percent.
    pub accounted_cpu_pct: f64,
    /// Process CPU over worker wall time, in percent, if reported.
    pub process_cpu_pct: Option<f64>,
    /// The host's CPU time stolen by the hypervisor, in percent of all its
    /// CPU time (sar's `%steal`), if reported.
    pub host_steal_pct: Option<f64>,
    /// One row per worker.
    pub workers: Vec<WorkerRow>,
    /// One row per class.
    pub classes: Vec<ClassRow>,
    /// Deliveries per second, all modes.
    pub deliveries_per_s: f64,
    /// Deliveries per second per mode: off, fixed, adaptive.
    pub deliveries_per_s_by_mode: [f64; 3],
    /// Bytes per delivery over the span; `None` if nothing was delivered.
    pub bytes_per_delivery: Option<f64>,
    /// The blocking pool.
    pub blocking: BlockingRow,
    /// The tokio side, if the runtime has one.
    pub tokio: Option<TokioRow>,
    /// The urgent lane, if the runtime has one.
    pub lane: Option<LaneRow>,
    /// The largest IO poll gap of any worker, if the server reports gaps.
    pub io_poll_gap_max_us: Option<f64>,
}

/// One worker's line.
#[derive(Debug, Clone)]
pub struct WorkerRow {
    /// The worker's index.
    pub index: usize,
    /// Percent of the span in each of [`STATES`].
    pub state_pct: [f64; 6],
    /// Task polls per second.
    pub polls_per_s: f64,
    /// Its longest IO poll gap, if reported.
    pub io_poll_gap_max_us: Option<f64>,
}

impl WorkerRow {
    /// Task + IO + timers, in percent of the span.
    pub fn utilization_pct(&self) -> f64 {
        self.state_pct[0] + self.state_pct[1] + self.state_pct[2]
    }
}

/// One class's line.
#[derive(Debug, Clone)]
pub struct ClassRow {
    /// Its name.
    pub name: String,
    /// Its configured shares.
    pub shares: u64,
    /// The share of worker time it is owed when every class has work, in
    /// percent.
    pub configured_pct: f64,
    /// Its share of all classes' poll wall time over the span, in percent;
    /// `None` if no class ran.
    pub wall_share_pct: Option<f64>,
    /// Its polls' wall time over the span as a number of workers they
    /// held.
    pub workers_held: f64,
    /// Polls per second.
    pub polls_per_s: f64,
    /// Stalls over the span.
    pub stalls: u64,
    /// Queue delay p99 since the start, in µs; `None` before any wake.
    pub queue_p99_us: Option<f64>,
    /// Largest queue delay since the start, in µs; `None` before any wake.
    pub queue_max_us: Option<f64>,
}

/// The tokio side's line: what runs outside keel's classes.
#[derive(Debug, Clone, PartialEq)]
pub struct TokioRow {
    /// Its worker threads.
    pub workers: u64,
    /// Its threads alive, workers and blocking threads.
    pub threads: u64,
    /// Tasks alive on it.
    pub alive_tasks: u64,
    /// CPU its threads used over the span, in CPUs (seconds per second).
    pub cpus: f64,
    /// Its workers' busy time over the span, in workers.
    pub busy_workers: f64,
}

/// The urgent lane's line: the thread that runs the urgent class.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneRow {
    /// How it got ahead of the workers (`fifo:N`, or `workers nice +N`
    /// and why real-time priority was refused).
    pub priority: String,
    /// Urgent polls per second on it.
    pub polls_per_s: f64,
    /// CPU its thread used over the span, in CPUs; `None` from a server
    /// that does not report it.
    pub cpus: Option<f64>,
    /// Its polls' wall time over the span, in CPUs held.
    pub busy: f64,
    /// Times over the span it spent its budget and waited.
    pub throttled: u64,
}

/// The blocking pool's line.
#[derive(Debug, Clone)]
pub struct BlockingRow {
    /// Threads alive.
    pub threads: u64,
    /// The thread limit.
    pub max_threads: u64,
    /// Idle threads.
    pub idle: u64,
    /// Jobs waiting for a thread.
    pub queued: u64,
    /// The queue limit.
    pub queue_capacity: u64,
    /// Callers waiting for room.
    pub waiting: u64,
    /// Jobs finished per second.
    pub completed_per_s: f64,
    /// Jobs refused over the span.
    pub rejected: u64,
    /// Run time of jobs that finished in the span, over the span, as a
    /// number of threads kept busy.
    pub busy_threads: f64,
}

impl View {
    /// The view of `now`, with rates over the span since `before`; with
    /// no `before`, or one from a later uptime (the server restarted),
    /// averages since the start.
    pub fn new(before: Option<&StatsDocument>, now: &StatsDocument) -> View {
        let before = before.filter(|b| b.uptime_s < now.uptime_s);
        let since_start = before.is_none();
        let span_s = match before {
            Some(b) => now.uptime_s - b.uptime_s,
            None => now.uptime_s,
        };
        // A cumulative figure's growth over the span, per second (from
        // zero when there is no sample before).
        let per_span = |now: f64, then: Option<f64>| {
            if span_s > 0.0 {
                (now - then.unwrap_or(0.0)).max(0.0) / span_s
            } else {
                0.0
            }
        };
        let per_s = |count: u64| {
            if span_s > 0.0 {
                count as f64 / span_s
            } else {
                0.0
            }
        };

        let workers = now
            .worker_states
            .iter()
            .map(|w| {
                let then =
                    before.and_then(|b| b.worker_states.iter().find(|t| t.worker == w.worker));
                worker_row(then, w, &per_s)
            })
            .collect();

        let class_wall: Vec<f64> = now
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                c.wall_s
                    - before
                        .and_then(|b| b.classes.get(i))
                        .map_or(0.0, |t| t.wall_s)
            })
            .map(|d| d.max(0.0))
            .collect();
        let total_wall: f64 = class_wall.iter().sum();
        let classes = now
            .classes
            .iter()
            .zip(&class_wall)
            .enumerate()
            .map(|(i, (c, &wall))| {
                let then = before
                    .and_then(|b| b.classes.get(i))
                    .filter(|t| t.name == c.name);
                let recorded = c.queue_delay.count > 0;
                ClassRow {
                    name: c.name.clone(),
                    shares: c.shares,
                    configured_pct: c.configured_share_pct,
                    wall_share_pct: (total_wall > 0.0).then(|| wall / total_wall * 100.0),
                    workers_held: if span_s > 0.0 { wall / span_s } else { 0.0 },
                    polls_per_s: per_s(c.polls.saturating_sub(then.map_or(0, |t| t.polls))),
                    stalls: c.stalls.saturating_sub(then.map_or(0, |t| t.stalls)),
                    queue_p99_us: recorded.then_some(c.queue_delay.p99_us),
                    queue_max_us: recorded.then_some(c.queue_delay.max_us),
                }
            })
            .collect();

        let delta = |now: CountBytes, then: Option<CountBytes>| {
            let then = then.unwrap_or_default();
            CountBytes::new(
                now.count.saturating_sub(then.count),
                now.bytes.saturating_sub(then.bytes),
            )
        };
        let d = &now.deliveries;
        let t = before.map(|b| &b.deliveries);
        let total = delta(d.total(), t.map(DeliveryFigures::total));
        let by_mode = [
            delta(d.off, t.map(|t| t.off)),
            delta(d.fixed, t.map(|t| t.fixed)),
            delta(d.adaptive, t.map(|t| t.adaptive)),
        ];

        let window = &now.since_start;
        let then_window = before.map(|b| &b.since_start);
        let wall = window.worker_wall_s - then_window.map_or(0.0, |t| t.worker_wall_s);
        let of_wall = |now: f64, then: Option<f64>| ratio_pct(now - then.unwrap_or(0.0), wall);
        // A figure the server may not report: its growth over the span, or
        // its value since the start without an earlier snapshot; `None`
        // if either end lacks it.
        let grown = |figure: fn(&WindowFigures) -> Option<f64>| match then_window {
            None => figure(window),
            Some(then) => Some(figure(window)? - figure(then)?),
        };
        let process_cpu_pct = grown(|w| w.process_cpu_s).map(|cpu| of_wall(cpu, None));
        let host_steal_pct = grown(|w| w.host_steal_s)
            .zip(grown(|w| w.host_cpu_s))
            .map(|(steal, total)| ratio_pct(steal, total));

        let blocking = &now.blocking;
        let then_blocking = before.map(|b| &b.blocking);
        let blocking_busy = blocking.busy_s - then_blocking.map_or(0.0, |t| t.busy_s);

        View {
            span_s,
            since_start,
            uptime_s: now.uptime_s,
            live_tasks: now.live_tasks,
            pending_timers: now.pending_timers,
            utilization_pct: of_wall(window.busy_s, then_window.map(|t| t.busy_s)),
            spin_pct: of_wall(window.spin_s, then_window.map(|t| t.spin_s)),
            accounted_cpu_pct: of_wall(
                window.accounted_cpu_s,
                then_window.map(|t| t.accounted_cpu_s),
            ),
            process_cpu_pct,
            host_steal_pct,
            workers,
            classes,
            deliveries_per_s: per_s(total.count),
            deliveries_per_s_by_mode: by_mode.map(|m| per_s(m.count)),
            bytes_per_delivery: (total.count > 0).then(|| total.bytes as f64 / total.count as f64),
            blocking: BlockingRow {
                threads: blocking.threads,
                max_threads: blocking.max_threads,
                idle: blocking.idle,
                queued: blocking.queued,
                queue_capacity: blocking.queue_capacity,
                waiting: blocking.waiting,
                completed_per_s: per_s(
                    blocking
                        .completed
                        .saturating_sub(then_blocking.map_or(0, |t| t.completed)),
                ),
                rejected: blocking
                    .rejected
                    .saturating_sub(then_blocking.map_or(0, |t| t.rejected)),
                busy_threads: if span_s > 0.0 {
                    blocking_busy.max(0.0) / span_s
                } else {
                    0.0
                },
            },
            tokio: now.tokio.as_ref().map(|tokio| {
                let then = before.and_then(|b| b.tokio.as_ref());
                TokioRow {
                    workers: tokio.workers,
                    threads: tokio.threads,
                    alive_tasks: tokio.alive_tasks,
                    cpus: per_span(tokio.cpu_s, then.map(|t| t.cpu_s)),
                    busy_workers: per_span(tokio.busy_s, then.map(|t| t.busy_s)),
                }
            }),
            lane: now.lane.as_ref().map(|lane| {
                let then = before.and_then(|b| b.lane.as_ref());
                LaneRow {
                    priority: lane.priority.clone(),
                    polls_per_s: per_span(lane.polls as f64, then.map(|t| t.polls as f64)),
                    cpus: lane
                        .cpu_s
                        .map(|cpu| per_span(cpu, then.and_then(|t| t.cpu_s))),
                    busy: per_span(lane.busy_s, then.map(|t| t.busy_s)),
                    throttled: lane
                        .throttled
                        .saturating_sub(then.map_or(0, |t| t.throttled)),
                }
            }),
            io_poll_gap_max_us: now
                .worker_states
                .iter()
                .filter_map(|w| w.io_poll_gap_max_us)
                .reduce(f64::max),
        }
    }
}

/// A worker's row: its state shares over the span since `then`.
fn worker_row(
    then: Option<&WorkerFigures>,
    now: &WorkerFigures,
    per_s: &dyn Fn(u64) -> f64,
) -> WorkerRow {
    let since = |now: f64, then: f64| (now - then).max(0.0);
    let states = |w: &WorkerFigures| {
        [
            w.task_s, w.io_s, w.timers_s, w.search_s, w.spin_s, w.parked_s,
        ]
    };
    let now_states = states(now);
    let then_states = then.map_or([0.0; 6], states);
    let spent: [f64; 6] = std::array::from_fn(|i| since(now_states[i], then_states[i]));
    let wall: f64 = spent.iter().sum();
    WorkerRow {
        index: now.worker,
        state_pct: spent.map(|s| ratio_pct(s, wall)),
        polls_per_s: per_s(now.polls.saturating_sub(then.map_or(0, |t| t.polls))),
        io_poll_gap_max_us: now.io_poll_gap_max_us,
    }
}

/// `part` over `whole` in percent; 0 when `whole` is not positive.
fn ratio_pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        (part / whole * 100.0).max(0.0)
    } else {
        0.0
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A `/stats` document shaped like the server's, with two workers and
    /// the three default classes; `t` scales the cumulative figures, as if
    /// `t` seconds had passed at a steady load. The classes' poll time is
    /// under both its names, as servers write it now.
    pub fn document(t: f64, gap: Option<f64>) -> String {
        document_named(t, gap, |wall| {
            format!(
                r#""wall_s": {wall}, "wall_share_pct": 0.0, "cpu_s": {wall}, "cpu_share_pct": 0.0"#
            )
        })
    }

    /// [`document`] as a server before the rename wrote it: the classes'
    /// poll time only as `cpu_s` and `cpu_share_pct`.
    pub fn old_document(t: f64) -> String {
        document_named(t, None, |wall| {
            format!(r#""cpu_s": {wall}, "cpu_share_pct": 0.0"#)
        })
    }

    /// [`document`] with each class's poll time (in seconds) written by
    /// `class_time`.
    fn document_named(t: f64, gap: Option<f64>, class_time: fn(f64) -> String) -> String {
        let gap = gap.map_or(String::new(), |g| format!(r#", "io_poll_gap_max_us": {g}"#));
        let worker = |i: usize| {
            format!(
                r#"{{"worker": {i}, "wall_s": {w}, "task_s": {task}, "io_s": {io}, "timers_s": 0.0,
                    "search_s": {search}, "spin_s": {spin}, "parked_s": {parked},
                    "utilization_pct": 60.0, "polls": {polls}{gap}}}"#,
                w = t,
                task = 0.5 * t,
                io = 0.1 * t,
                search = 0.05 * t,
                spin = 0.05 * t,
                parked = 0.3 * t,
                polls = (1000.0 * t) as u64,
            )
        };
        let class = |i: usize, name: &str, shares: u64, pct: f64, wall: f64| {
            format!(
                r#"{{"name": "{name}", "index": {i}, "shares": {shares}, "configured_share_pct": {pct},
                    {time}, "polls": {polls}, "stalls": 0,
                    "queue_delay": {{"count": {count}, "mean_us": 5.0, "p50_us": 4.0, "p90_us": 9.0,
                    "p99_us": 42.0, "p999_us": 80.0, "max_us": 95.5}}}}"#,
                time = class_time(wall * t),
                polls = (100.0 * t) as u64,
                count = if t > 0.0 { 10 } else { 0 },
            )
        };
        format!(
            r#"{{"uptime_s": {t}, "workers": 2, "live_tasks": 7, "pending_timers": 3,
                "utilization_pct": 60.0, "spin_pct": 5.0,
                "worker_states": [{w0}, {w1}],
                "classes": [{c0}, {c1}, {c2}],
                "blocking": {{"threads": 2, "idle": 1, "queued": 0, "waiting": 0,
                    "completed": {completed}, "rejected": 0, "busy_s": {bbusy},
                    "max_threads": 512, "queue_capacity": 1024}},
                "deliveries": {{"off": {{"count": {dc}, "bytes": {db}}},
                    "fixed": {{"count": 0, "bytes": 0}}, "adaptive": {{"count": 0, "bytes": 0}}}},
                "admin": {{"class": "urgent", "connections_open": 1,
                    "connections_rejected": 0, "max_connections": 16}},
                "since_start": {win}, "since_last": {win}}}"#,
            w0 = worker(0),
            w1 = worker(1),
            c0 = class(0, "urgent", 8, 61.5, 0.1),
            c1 = class(1, "normal", 4, 30.8, 0.3),
            c2 = class(2, "bulk", 1, 7.7, 0.6),
            completed = (10.0 * t) as u64,
            bbusy = 0.5 * t,
            dc = (200.0 * t) as u64,
            db = (200.0 * 512.0 * t) as u64,
            win = format!(
                r#"{{"wall_s": {t}, "worker_wall_s": {ww}, "busy_s": {busy}, "search_s": 0.0,
                    "spin_s": {spin}, "parked_s": 0.0, "blocking_busy_s": 0.0,
                    "accounted_cpu_s": {acc}, "process_user_s": null, "process_system_s": null,
                    "process_cpu_s": {proc}, "utilization_pct": 0.0, "spin_pct": 0.0,
                    "accounted_cpu_pct": 0.0, "process_cpu_pct": null,
                    "host_cpu_s": {host}, "host_steal_s": {steal}}}"#,
                host = 2.0 * t,
                steal = 0.1 * t,
                ww = 2.0 * t,
                busy = 1.2 * t,
                spin = 0.1 * t,
                acc = 1.4 * t,
                proc = 1.5 * t,
            ),
        )
    }

    /// Parses [`document`].
    pub fn snapshot(t: f64, gap: Option<f64>) -> StatsDocument {
        parse(document(t, gap).as_bytes()).expect("the test document parses")
    }

    /// `snapshot(t)` of a runtime with a tokio side of 1 worker and 2
    /// threads that used 0.25 CPU and 0.5 busy workers per second, with 4
    /// tasks alive.
    pub fn with_tokio(t: f64) -> StatsDocument {
        let mut doc = snapshot(t, None);
        let mut tokio = keel::admin::TokioFigures::default();
        tokio.workers = 1;
        tokio.threads = 2;
        tokio.alive_tasks = 4;
        tokio.cpu_s = 0.25 * t;
        tokio.busy_s = 0.5 * t;
        doc.tokio = Some(tokio);
        doc
    }

    /// `snapshot(t)` of a runtime with an urgent lane at `fifo:1` that
    /// polled 100 times, held 0.25 CPU in polls, used 0.5 CPU and spent
    /// its budget twice per second.
    pub fn with_lane(t: f64) -> StatsDocument {
        let mut doc = snapshot(t, None);
        let mut lane = keel::admin::LaneFigures::default();
        lane.priority = "fifo:1".into();
        lane.polls = (100.0 * t) as u64;
        lane.busy_s = 0.25 * t;
        lane.charged_s = 0.2 * t;
        lane.cpu_s = Some(0.5 * t);
        lane.throttled = (2.0 * t) as u64;
        doc.lane = Some(lane);
        doc
    }

    #[test]
    fn the_lane_gets_a_line_of_rates_when_there_is_one() {
        let view = View::new(Some(&with_lane(10.0)), &with_lane(12.0));
        let lane = view.lane.expect("a lane row");
        assert_eq!(lane.priority, "fifo:1");
        assert!((lane.polls_per_s - 100.0).abs() < 1e-9, "{lane:?}");
        assert!((lane.busy - 0.25).abs() < 1e-9, "{lane:?}");
        assert!((lane.cpus.unwrap() - 0.5).abs() < 1e-9, "{lane:?}");
        assert_eq!(lane.throttled, 4);
        // A server that predates the lane's CPU.
        let mut old = with_lane(12.0);
        old.lane.as_mut().unwrap().cpu_s = None;
        assert_eq!(
            View::new(Some(&with_lane(10.0)), &old).lane.unwrap().cpus,
            None
        );
        assert!(View::new(None, &snapshot(4.0, None)).lane.is_none());
    }

    #[test]
    fn the_tokio_side_gets_a_line_of_rates_when_there_is_one() {
        let view = View::new(Some(&with_tokio(10.0)), &with_tokio(12.0));
        let tokio = view.tokio.expect("a tokio row");
        assert_eq!((tokio.workers, tokio.threads, tokio.alive_tasks), (1, 2, 4));
        assert!((tokio.cpus - 0.25).abs() < 1e-9, "{tokio:?}");
        assert!((tokio.busy_workers - 0.5).abs() < 1e-9, "{tokio:?}");
        // The first sample: averages since the start.
        let first = View::new(None, &with_tokio(4.0)).tokio.unwrap();
        assert!((first.cpus - 0.25).abs() < 1e-9, "{first:?}");
        // A server without a tokio side, or one that predates it.
        assert!(View::new(None, &snapshot(4.0, None)).tokio.is_none());
    }

    /// Two snapshots a second apart give per-second rates and shares of
    /// the interval.
    #[test]
    fn rates_come_from_differences() {
        let view = View::new(Some(&snapshot(10.0, None)), &snapshot(11.0, None));
        assert!(!view.since_start);
        assert!((view.span_s - 1.0).abs() < 1e-9);
        let w = &view.workers[1];
        assert_eq!(w.index, 1);
        let expected = [50.0, 10.0, 0.0, 5.0, 5.0, 30.0];
        for (got, want) in w.state_pct.iter().zip(expected) {
            assert!((got - want).abs() < 1e-6, "{:?}", w.state_pct);
        }
        assert!((w.utilization_pct() - 60.0).abs() < 1e-6);
        assert!((w.polls_per_s - 1000.0).abs() < 1e-6);
        let bulk = &view.classes[2];
        assert_eq!((bulk.name.as_str(), bulk.shares), ("bulk", 1));
        assert!((bulk.wall_share_pct.unwrap() - 60.0).abs() < 1e-6);
        assert!((bulk.workers_held - 0.6).abs() < 1e-6);
        assert_eq!(bulk.queue_p99_us, Some(42.0));
        assert!((view.deliveries_per_s - 200.0).abs() < 1e-6);
        assert_eq!(view.bytes_per_delivery, Some(512.0));
        assert!((view.utilization_pct - 60.0).abs() < 1e-6);
        assert!((view.accounted_cpu_pct - 70.0).abs() < 1e-6);
        assert!((view.process_cpu_pct.unwrap() - 75.0).abs() < 1e-6);
        assert!((view.host_steal_pct.unwrap() - 5.0).abs() < 1e-6);
        assert!((view.blocking.completed_per_s - 10.0).abs() < 1e-6);
        assert!((view.blocking.busy_threads - 0.5).abs() < 1e-6);
        assert_eq!(view.io_poll_gap_max_us, None);
    }

    /// Without an earlier snapshot, or after a restart, the view shows
    /// averages since the start.
    #[test]
    fn first_view_is_since_start() {
        let view = View::new(None, &snapshot(4.0, Some(250.0)));
        assert!(view.since_start);
        assert!((view.deliveries_per_s - 200.0).abs() < 1e-6);
        assert_eq!(view.io_poll_gap_max_us, Some(250.0));
        let restarted = View::new(Some(&snapshot(100.0, None)), &snapshot(4.0, None));
        assert!(restarted.since_start);
        assert!((restarted.span_s - 4.0).abs() < 1e-9);
    }

    /// An idle span has no class shares and no bytes per delivery, and
    /// divides by nothing.
    #[test]
    fn idle_span_has_no_shares() {
        let same = snapshot(5.0, None);
        let mut later = same.clone();
        later.uptime_s += 1.0;
        let view = View::new(Some(&same), &later);
        assert!(view.classes.iter().all(|c| c.wall_share_pct.is_none()));
        assert_eq!(view.bytes_per_delivery, None);
        assert_eq!(view.deliveries_per_s, 0.0);
        assert!(view.workers.iter().all(|w| w.state_pct == [0.0; 6]));
    }

    /// A document that is not JSON, or lacks a needed field, is refused
    /// with a message that says so.
    #[test]
    fn bad_documents_are_refused() {
        let error = parse(b"<html>hello</html>").unwrap_err().to_string();
        assert!(error.starts_with("not a keel /stats document"), "{error}");
        assert!(error.contains("<html>"), "{error}");
        let error = parse(br#"{"uptime_s": 1.0}"#).unwrap_err().to_string();
        assert!(error.contains("missing field"), "{error}");
    }

    /// A server from before the classes' poll time was renamed sends it
    /// only as `cpu_s`: the view is the same as from a server of today.
    #[test]
    fn an_older_server_gives_the_same_view() {
        let old = |t: f64| parse(old_document(t).as_bytes()).expect("the old document parses");
        let new = View::new(Some(&snapshot(10.0, None)), &snapshot(11.0, None));
        let view = View::new(Some(&old(10.0)), &old(11.0));
        for (old, new) in view.classes.iter().zip(&new.classes) {
            assert_eq!(old.name, new.name);
            assert_eq!(old.wall_share_pct, new.wall_share_pct, "{}", old.name);
            assert_eq!(old.workers_held, new.workers_held, "{}", old.name);
        }
        assert!((view.classes[2].wall_share_pct.unwrap() - 60.0).abs() < 1e-6);
        // Figures that server did not have yet are absent, not zero.
        let before = old(10.0);
        assert_eq!(before.worker_states[0].cpu_s, None);
        assert_eq!(before.admin.connections_evicted, None);
    }
}
