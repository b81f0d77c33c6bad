//! The `/stats` document as Rust types: what the endpoint serializes and
//! what a client (such as `keel top`) deserializes, so the schema is
//! written down once. [`StatsDocument`] says how documents of other
//! versions read.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::stats::{
    BlockingStats, Deliveries, DeliveryStats, DozeStats, IoDriverStats, LaneStats, QueueDelay,
    Stats, TokioStats, WorkerStats,
};

/// The whole `/stats` document: what the endpoint writes, and what a
/// client reads the answer into.
///
/// Every field carries its unit as a suffix of its name, as in the JSON:
/// `_s` seconds, `_us` microseconds, `_pct` percent (0–100); names
/// without a suffix are counts. Cumulative figures run from the runtime's
/// start. The [module docs](super#stats-json) list the same fields as a
/// table, for readers of the JSON.
///
/// ```
/// use keel::admin::StatsDocument;
///
/// let rt = keel::Runtime::builder().workers(2).build().unwrap();
/// let admin = keel::admin::serve("127.0.0.1:0", rt.handle()).unwrap();
/// # let body = {
/// #     use std::io::{Read, Write};
/// #     let mut stream = std::net::TcpStream::connect(admin.local_addr()).unwrap();
/// #     stream.write_all(b"GET /stats HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").unwrap();
/// #     let mut answer = Vec::new();
/// #     stream.read_to_end(&mut answer).unwrap();
/// #     let at = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
/// #     answer.split_off(at)
/// # };
/// // `body`: the answer to `GET /stats`, by any HTTP client.
/// let doc = StatsDocument::from_json(&body).unwrap();
/// assert_eq!(doc.workers, 2);
/// for class in &doc.classes {
///     println!("{}: {:.1}% of the poll time", class.name, class.wall_share_pct);
/// }
/// ```
///
/// # Reading documents of other versions
///
/// A client may read a server older or newer than itself:
///
/// - Fields a newer server adds are ignored (no type here denies unknown
///   fields).
/// - Fields added after the first `/stats` release are [`Option`]s that
///   read as `None` when the server leaves them out: a worker's thread CPU
///   time, park CPU, preempted time, IO poll gap and rescues, a window's
///   park CPU, workers' CPU and preempted time, and the evicted
///   connections. The document's own `null`s (`process_cpu_s` and its kin
///   where `getrusage` is unavailable) also read as `None`.
/// - A class's poll time is [`ClassFigures::wall_s`] (and its share
///   [`ClassFigures::wall_share_pct`]). Servers before the rename sent it
///   only as `cpu_s` (`cpu_share_pct`), which is read into the new field
///   when the new one is missing, and the other way round, so both fields
///   hold the figure whichever names the server sent.
/// - Any other missing field is an error that names it: every version of
///   the document has it.
///
/// The types are `#[non_exhaustive]`, since the document grows: outside
/// this crate, build one by deserializing, or from [`Default`] and field
/// assignments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StatsDocument {
    /// Time since the runtime was built.
    pub uptime_s: f64,
    /// Worker threads.
    pub workers: u64,
    /// Tasks spawned and not finished.
    pub live_tasks: u64,
    /// Timers filed and not yet fired or cancelled.
    pub pending_timers: u64,
    /// (task + io + timers) / wall, all workers together, since the
    /// runtime started.
    pub utilization_pct: f64,
    /// spin / wall, all workers together, since the runtime started.
    pub spin_pct: f64,
    /// One entry per worker, by index.
    pub worker_states: Vec<WorkerFigures>,
    /// One entry per class, by index.
    pub classes: Vec<ClassFigures>,
    /// The blocking pool.
    pub blocking: BlockingFigures,
    /// TCP read deliveries per batch mode.
    pub deliveries: DeliveryFigures,
    /// The admin endpoint that answered.
    pub admin: AdminFigures,
    /// Accounting against process CPU since the endpoint started.
    pub since_start: WindowFigures,
    /// The same since the previous `/stats` answer of the endpoint (the
    /// first: since it started). Shared by every client of one endpoint:
    /// two clients shorten each other's windows.
    pub since_last: WindowFigures,
    /// The urgent lane, when the runtime has one (see
    /// [`Builder::urgent_lane`](crate::Builder::urgent_lane)); `null`
    /// without one, and from a server that predates it.
    #[serde(default)]
    pub lane: Option<LaneFigures>,
    /// The tokio side, when the runtime has one (see
    /// [`Builder::tokio_threads`](crate::Builder::tokio_threads)); `null`
    /// without one, and from a server that predates it.
    #[serde(default)]
    pub tokio: Option<TokioFigures>,
    /// The IO driver the workers' reactor runs on; `null` from a server
    /// that predates the choice (which ran on epoll).
    #[serde(default)]
    pub io: Option<IoFigures>,
    /// Parked workers' dozes; `null` from a server that predates them.
    #[serde(default)]
    pub doze: Option<DozeFigures>,
}

/// Parked workers' dozes (`doze`; see [`DozeStats`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DozeFigures {
    /// Whether parked workers may doze now.
    pub enabled: bool,
    /// Times a worker began to doze.
    pub dozes: u64,
    /// Times the alarm fired and woke at least one dozer.
    pub alarms: u64,
    /// Why workers may not doze where the runtime would have them doze
    /// (the kernel refused the alarm's timer); `null` otherwise.
    pub alarm_error: Option<String>,
}

impl From<&DozeStats> for DozeFigures {
    fn from(doze: &DozeStats) -> DozeFigures {
        DozeFigures {
            enabled: doze.enabled,
            dozes: doze.dozes,
            alarms: doze.alarms,
            alarm_error: doze.alarm_error.clone(),
        }
    }
}

/// The IO driver (`io`; see [`IoDriverStats`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IoFigures {
    /// `epoll` or `io_uring`.
    pub driver: String,
    /// The backend asked for: `auto`, `epoll` or `uring`.
    pub requested: String,
    /// Why `auto` runs on epoll; `null` when it does not.
    pub fallback: Option<String>,
    /// Reads and file syncs the ring holds, submitted and not completed
    /// (0 on epoll).
    #[serde(default)]
    pub operations_in_flight: u64,
    /// io_uring instances (0 on epoll).
    #[serde(default)]
    pub rings: usize,
    /// Whether each worker has a ring of its own (`false` on epoll).
    #[serde(default)]
    pub ring_per_worker: bool,
    /// With a ring per worker, the rings a worker glances at after every
    /// poll (0 on epoll and on shared rings).
    #[serde(default)]
    pub glances: usize,
    /// Waits of the driver the kernel refused (a blocking one with nothing
    /// to reap is then slept off for 1 ms).
    #[serde(default)]
    pub wait_errors: u64,
    /// The last of those errors; `null` if there was none.
    #[serde(default)]
    pub last_wait_error: Option<String>,
}

impl From<&IoDriverStats> for IoFigures {
    fn from(io: &IoDriverStats) -> IoFigures {
        IoFigures {
            driver: io.driver.to_owned(),
            requested: io.requested.to_string(),
            fallback: io.fallback.clone(),
            operations_in_flight: io.operations_in_flight,
            rings: io.rings,
            ring_per_worker: io.ring_per_worker,
            glances: io.glances,
            wait_errors: io.wait_errors,
            last_wait_error: io.last_wait_error.clone(),
        }
    }
}

/// What the tokio side did (`tokio`; see [`TokioStats`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TokioFigures {
    /// Its worker threads.
    pub workers: u64,
    /// Its threads alive, workers and blocking threads.
    pub threads: u64,
    /// Tasks alive on it.
    pub alive_tasks: u64,
    /// Its workers' busy time, summed, as tokio counts it.
    pub busy_s: f64,
    /// CPU of its threads since the runtime was built.
    pub cpu_s: f64,
}

impl From<&TokioStats> for TokioFigures {
    fn from(tokio: &TokioStats) -> TokioFigures {
        TokioFigures {
            workers: tokio.workers as u64,
            threads: tokio.threads as u64,
            alive_tasks: tokio.alive_tasks as u64,
            busy_s: secs(tokio.busy),
            cpu_s: secs(tokio.cpu),
        }
    }
}

/// What the urgent lane did (`lane`; see [`LaneStats`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LaneFigures {
    /// How the lane got ahead of the workers (`fifo:N`, or `workers nice
    /// +N` and why the real-time priority was refused).
    pub priority: String,
    /// Polls of urgent tasks on the lane.
    pub polls: u64,
    /// Wall time of those polls.
    pub busy_s: f64,
    /// What they were charged (`busy_s` less the time the lane was
    /// preempted inside them).
    pub charged_s: f64,
    /// Times the lane spent its budget and waited for the next window.
    pub throttled: u64,
    /// CPU time of the lane's thread; `None` from a server that predates
    /// it.
    #[serde(default)]
    pub cpu_s: Option<f64>,
}

impl From<&LaneStats> for LaneFigures {
    fn from(lane: &LaneStats) -> LaneFigures {
        LaneFigures {
            priority: lane.priority.clone(),
            polls: lane.polls,
            busy_s: secs(lane.busy),
            charged_s: secs(lane.charged),
            throttled: lane.throttled,
            cpu_s: Some(secs(lane.cpu)),
        }
    }
}

/// One worker's cumulative accounting (`worker_states[]`): its time by
/// state, which adds up to its wall time, and its thread's CPU time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WorkerFigures {
    /// The worker's index.
    pub worker: usize,
    /// The worker's accounted wall time: the sum of its states.
    pub wall_s: f64,
    /// Polling tasks, all classes.
    pub task_s: f64,
    /// Polling the reactor without blocking, and waking IO tasks.
    pub io_s: f64,
    /// Firing due timers.
    pub timers_s: f64,
    /// Looking for work, and the scheduler's overhead between polls.
    pub search_s: f64,
    /// Busy-waiting for work under the spin policy.
    pub spin_s: f64,
    /// Asleep (including time blocked in the reactor while idle).
    pub parked_s: f64,
    /// (task + io + timers) / wall for this worker.
    pub utilization_pct: f64,
    /// Task polls on this worker, all classes.
    pub polls: u64,
    /// CPU time the kernel charged to the worker's thread (see
    /// [`WorkerStats::cpu`]); `None` from a server that predates it.
    #[serde(default)]
    pub cpu_s: Option<f64>,
    /// CPU time the worker's thread used while parked, going to sleep and
    /// waking (see [`WorkerStats::park_cpu`]); `None` from a server that
    /// predates it.
    #[serde(default)]
    pub park_cpu_s: Option<f64>,
    /// Time in on-CPU states the kernel did not run the worker (see
    /// [`WorkerStats::preempted`]); `None` from a server that predates it.
    #[serde(default)]
    pub preempted_s: Option<f64>,
    /// The longest the worker went between two looks at the reactor
    /// while it had work, since it started (see
    /// [`WorkerStats::io_poll_gap_max`]); `None` from a server that
    /// predates it.
    #[serde(default)]
    pub io_poll_gap_max_us: Option<f64>,
    /// Times the worker took tasks queued on a sibling stuck in one state
    /// for 1 ms (see [`WorkerStats::rescues`]); `None` from a server that
    /// predates it.
    #[serde(default)]
    pub rescues: Option<u64>,
    /// Times the worker looked at the reactor without blocking (see
    /// [`WorkerStats::io_looks`]); `None` from a server that predates it.
    #[serde(default)]
    pub io_looks: Option<u64>,
    /// Time the kernel preempted the worker in the middle of task polls,
    /// measured from its log of the worker's switches and left out of the
    /// classes' charges (see [`WorkerStats::preempted_in_polls`]); `None`
    /// where the kernel refuses that log, or from a server that predates
    /// it.
    #[serde(default)]
    pub preempted_in_polls_s: Option<f64>,
}

impl From<&WorkerStats> for WorkerFigures {
    fn from(w: &WorkerStats) -> WorkerFigures {
        WorkerFigures {
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
            cpu_s: Some(secs(w.cpu)),
            park_cpu_s: Some(secs(w.park_cpu)),
            preempted_s: Some(secs(w.preempted())),
            io_poll_gap_max_us: Some(micros(w.io_poll_gap_max)),
            rescues: Some(w.rescues),
            io_looks: Some(w.io_looks),
            preempted_in_polls_s: w.preempted_in_polls.map(secs),
        }
    }
}

/// One class's configuration and cumulative accounting (`classes[]`).
///
/// [`wall_s`](Self::wall_s) is the *wall* time of its tasks' polls: from a
/// poll's start to its end on its worker, whether the poll computed,
/// blocked or was preempted by the kernel. What the shares divide is
/// [`charged_s`](Self::charged_s): the same less the time the kernel
/// preempted the workers inside the polls, where the workers can measure
/// it (see [`Builder::charge_on_cpu`](crate::Builder::charge_on_cpu)).
/// Neither is the CPU time the polls used (blocked time counts); the
/// workers' thread CPU is [`WorkerFigures::cpu_s`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "ClassWire")]
#[non_exhaustive]
pub struct ClassFigures {
    /// The class's name.
    pub name: String,
    /// The class's index.
    pub index: usize,
    /// Its configured shares.
    pub shares: u64,
    /// Its shares over all classes' shares: the share of worker time it
    /// is owed when every class has work.
    pub configured_share_pct: f64,
    /// Wall time its polls took, all workers together (see the type's
    /// docs). Read from `cpu_s` when a server before the rename sent only
    /// that.
    pub wall_s: f64,
    /// Its `wall_s` over all classes' `wall_s`: the share it received.
    /// Read from `cpu_share_pct` when a server before the rename sent only
    /// that.
    pub wall_share_pct: f64,
    /// The same figure as [`wall_s`](Self::wall_s), under its old name.
    #[deprecated(
        note = "a class is charged its polls' wall time, not CPU: use `wall_s`, the same figure; `cpu_s` goes away in the next release"
    )]
    pub cpu_s: f64,
    /// The same figure as [`wall_share_pct`](Self::wall_share_pct), under
    /// its old name.
    #[deprecated(
        note = "a class is charged its polls' wall time, not CPU: use `wall_share_pct`, the same figure; `cpu_share_pct` goes away in the next release"
    )]
    pub cpu_share_pct: f64,
    /// Polls of its tasks.
    pub polls: u64,
    /// Polls longer than the stall threshold.
    pub stalls: u64,
    /// Wake → first poll, since the runtime started.
    pub queue_delay: QueueDelayFigures,
    /// What the shares charged it (see the type's docs and
    /// [`ClassStats::charged`](crate::stats::ClassStats::charged)); `None` from a server that predates it.
    pub charged_s: Option<f64>,
}

impl ClassFigures {
    /// Every class of `stats`, by index, with its configured share and
    /// the share of all classes' poll time it received.
    pub fn all(stats: &Stats) -> Vec<ClassFigures> {
        let total_shares: u64 = stats.classes.iter().map(|c| u64::from(c.shares)).sum();
        let total_wall: Duration = stats.classes.iter().map(|c| c.busy).sum();
        stats
            .classes
            .iter()
            .enumerate()
            .map(|(index, c)| {
                let wall_s = secs(c.busy);
                let wall_share_pct = ratio_pct(wall_s, secs(total_wall));
                #[allow(deprecated)]
                ClassFigures {
                    name: c.name.clone(),
                    index,
                    shares: u64::from(c.shares),
                    configured_share_pct: ratio_pct(
                        u64::from(c.shares) as f64,
                        total_shares as f64,
                    ),
                    wall_s,
                    wall_share_pct,
                    cpu_s: wall_s,
                    cpu_share_pct: wall_share_pct,
                    polls: c.polls,
                    stalls: c.stalls,
                    queue_delay: QueueDelayFigures::from(&c.queue_delay),
                    charged_s: Some(secs(c.charged)),
                }
            })
            .collect()
    }
}

/// How a class arrives over the wire: the poll time under its new names,
/// its old ones, or both. [`ClassFigures`] fills each pair from whichever
/// half came.
#[derive(Deserialize)]
struct ClassWire {
    /// [`ClassFigures::name`].
    name: String,
    /// [`ClassFigures::index`].
    index: usize,
    /// [`ClassFigures::shares`].
    shares: u64,
    /// [`ClassFigures::configured_share_pct`].
    configured_share_pct: f64,
    /// The poll time under its new name; servers before the rename leave
    /// it out.
    #[serde(default)]
    wall_s: Option<f64>,
    /// Its share under its new name.
    #[serde(default)]
    wall_share_pct: Option<f64>,
    /// The poll time under its old name; servers after the old name is
    /// dropped leave it out.
    #[serde(default)]
    cpu_s: Option<f64>,
    /// Its share under its old name.
    #[serde(default)]
    cpu_share_pct: Option<f64>,
    /// [`ClassFigures::polls`].
    polls: u64,
    /// [`ClassFigures::stalls`].
    stalls: u64,
    /// [`ClassFigures::queue_delay`].
    queue_delay: QueueDelayFigures,
    /// [`ClassFigures::charged_s`].
    #[serde(default)]
    charged_s: Option<f64>,
}

impl From<ClassWire> for ClassFigures {
    fn from(wire: ClassWire) -> ClassFigures {
        let wall_s = wire.wall_s.or(wire.cpu_s).unwrap_or(0.0);
        let wall_share_pct = wire.wall_share_pct.or(wire.cpu_share_pct).unwrap_or(0.0);
        #[allow(deprecated)]
        ClassFigures {
            name: wire.name,
            index: wire.index,
            shares: wire.shares,
            configured_share_pct: wire.configured_share_pct,
            wall_s,
            wall_share_pct,
            cpu_s: wire.cpu_s.unwrap_or(wall_s),
            cpu_share_pct: wire.cpu_share_pct.unwrap_or(wall_share_pct),
            polls: wire.polls,
            stalls: wire.stalls,
            queue_delay: wire.queue_delay,
            charged_s: wire.charged_s,
        }
    }
}

/// A class's queue delays (wake → first poll), since the runtime started
/// (`classes[].queue_delay`). The quantiles have the 1% resolution of
/// [`QueueDelay`]; all are 0 before the first delay is recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct QueueDelayFigures {
    /// Delays recorded.
    pub count: u64,
    /// Their mean.
    pub mean_us: f64,
    /// The median.
    pub p50_us: f64,
    /// The 90th percentile.
    pub p90_us: f64,
    /// The 99th percentile.
    pub p99_us: f64,
    /// The 99.9th percentile.
    pub p999_us: f64,
    /// The largest.
    pub max_us: f64,
}

impl From<&QueueDelay> for QueueDelayFigures {
    fn from(delay: &QueueDelay) -> QueueDelayFigures {
        QueueDelayFigures {
            count: delay.count(),
            mean_us: micros(delay.mean()),
            p50_us: micros(delay.p50()),
            p90_us: micros(delay.quantile(0.90)),
            p99_us: micros(delay.p99()),
            p999_us: micros(delay.quantile(0.999)),
            max_us: micros(delay.max()),
        }
    }
}

/// The blocking pool (`blocking`); see [`BlockingStats`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BlockingFigures {
    /// Threads alive.
    pub threads: u64,
    /// Of those, waiting for a job.
    pub idle: u64,
    /// Jobs accepted and not yet started.
    pub queued: u64,
    /// Callers waiting for room in the queue.
    pub waiting: u64,
    /// Closures that ran to their end.
    pub completed: u64,
    /// Jobs refused because the pool was full.
    pub rejected: u64,
    /// Wall time threads spent running closures, summed over threads.
    pub busy_s: f64,
    /// The thread limit.
    pub max_threads: u64,
    /// The queue limit.
    pub queue_capacity: u64,
}

impl From<&BlockingStats> for BlockingFigures {
    fn from(b: &BlockingStats) -> BlockingFigures {
        BlockingFigures {
            threads: count(b.threads),
            idle: count(b.idle),
            queued: count(b.queued),
            waiting: count(b.waiting),
            completed: b.completed,
            rejected: b.rejected,
            busy_s: secs(b.busy),
            max_threads: count(b.max_threads),
            queue_capacity: count(b.queue_capacity),
        }
    }
}

/// TCP reads that returned data, per batch mode (`deliveries`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeliveryFigures {
    /// Streams read without batching.
    pub off: CountBytes,
    /// Streams in fixed batches.
    pub fixed: CountBytes,
    /// Streams in adaptive batches.
    pub adaptive: CountBytes,
}

impl DeliveryFigures {
    /// All modes together.
    pub fn total(&self) -> CountBytes {
        CountBytes {
            count: self.off.count + self.fixed.count + self.adaptive.count,
            bytes: self.off.bytes + self.fixed.bytes + self.adaptive.bytes,
        }
    }
}

impl From<&DeliveryStats> for DeliveryFigures {
    fn from(d: &DeliveryStats) -> DeliveryFigures {
        DeliveryFigures {
            off: d.off.into(),
            fixed: d.fixed.into(),
            adaptive: d.adaptive.into(),
        }
    }
}

/// A delivery counter: reads that returned data and the bytes they
/// returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CountBytes {
    /// Deliveries.
    pub count: u64,
    /// Bytes delivered.
    pub bytes: u64,
}

impl CountBytes {
    /// `count` deliveries of `bytes` in all.
    pub fn new(count: u64, bytes: u64) -> CountBytes {
        CountBytes { count, bytes }
    }
}

impl From<Deliveries> for CountBytes {
    fn from(d: Deliveries) -> CountBytes {
        CountBytes {
            count: d.count,
            bytes: d.bytes,
        }
    }
}

/// The endpoint that answered (`admin`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AdminFigures {
    /// The class the answering task ran in (`none` if it ran outside the
    /// runtime's classes).
    pub class: String,
    /// Connections holding a slot: being answered or waiting for a
    /// request head.
    pub connections_open: u64,
    /// Connections refused with `503` since the endpoint started.
    pub connections_rejected: u64,
    /// Connections closed to make room for a newer one since the endpoint
    /// started; `None` from a server that predates it.
    #[serde(default)]
    pub connections_evicted: Option<u64>,
    /// The endpoint's connection limit.
    pub max_connections: u64,
}

/// What the workers accounted over one span against the CPU the kernel
/// charged the process (`since_start`, `since_last`), so anyone can check
/// that they agree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WindowFigures {
    /// The span, by the runtime's clock.
    pub wall_s: f64,
    /// Wall time the workers accounted in it, all workers together (about
    /// `wall_s` × workers).
    pub worker_wall_s: f64,
    /// Task + io + timers.
    pub busy_s: f64,
    /// Searching for work.
    pub search_s: f64,
    /// Spinning.
    pub spin_s: f64,
    /// Parked.
    pub parked_s: f64,
    /// CPU the worker threads used while parked: going to sleep and
    /// waking; `None` from a server that predates it.
    #[serde(default)]
    pub park_cpu_s: Option<f64>,
    /// Run time of blocking-pool closures that ended in the span.
    pub blocking_busy_s: f64,
    /// CPU of the tokio side's threads in the span; `None` without a
    /// tokio side, and from a server that predates it.
    #[serde(default)]
    pub tokio_cpu_s: Option<f64>,
    /// CPU of the urgent lane's thread in the span; `None` without a lane,
    /// and from a server that predates it.
    #[serde(default)]
    pub lane_cpu_s: Option<f64>,
    /// busy + search + spin + park CPU + blocking + the tokio side's CPU +
    /// the lane's CPU: what should have cost CPU.
    pub accounted_cpu_s: f64,
    /// CPU the kernel charged to the worker threads (their thread clocks);
    /// `None` from a server that predates it.
    #[serde(default)]
    pub workers_cpu_s: Option<f64>,
    /// Time the workers were in on-CPU states but the kernel ran something
    /// else; `None` from a server that predates it.
    #[serde(default)]
    pub preempted_s: Option<f64>,
    /// User CPU of the process (`getrusage`); `None` where unavailable.
    pub process_user_s: Option<f64>,
    /// System CPU of the process; `None` where unavailable.
    pub process_system_s: Option<f64>,
    /// User + system CPU of the process; `None` where unavailable.
    pub process_cpu_s: Option<f64>,
    /// `busy_s` / `worker_wall_s`.
    pub utilization_pct: f64,
    /// `spin_s` / `worker_wall_s`.
    pub spin_pct: f64,
    /// `accounted_cpu_s` / `worker_wall_s`.
    pub accounted_cpu_pct: f64,
    /// `workers_cpu_s` / `worker_wall_s`; `None` from a server that
    /// predates it.
    #[serde(default)]
    pub workers_cpu_pct: Option<f64>,
    /// `process_cpu_s` / `worker_wall_s`: comparable with
    /// `accounted_cpu_pct`; it also counts threads that are neither
    /// workers nor the blocking pool. `None` where unavailable.
    pub process_cpu_pct: Option<f64>,
    /// The host's CPU time in the span, every CPU and state (idle
    /// included), from `/proc/stat`; `None` where unavailable, and from a
    /// server that predates it.
    #[serde(default)]
    pub host_cpu_s: Option<f64>,
    /// The part of `host_cpu_s` the hypervisor gave to other guests
    /// (`steal`); `None` where unavailable.
    #[serde(default)]
    pub host_steal_s: Option<f64>,
    /// `host_steal_s` / `host_cpu_s`, sar's `%steal`: on a virtual machine,
    /// time the workers' wall-clock accounting counts as theirs although
    /// no CPU ran them, so `utilization_pct` is comparable with sar's
    /// user + system + steal rather than user + system. `None` where
    /// unavailable.
    #[serde(default)]
    pub host_steal_pct: Option<f64>,
}

impl StatsDocument {
    /// Parses a `/stats` body.
    ///
    /// # Errors
    ///
    /// If `body` is not JSON, or lacks a field that every version of the
    /// document has; the error names it.
    pub fn from_json(body: &[u8]) -> Result<StatsDocument, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// The document as the endpoint writes it: pretty-printed JSON and a
    /// final line feed.
    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_string_pretty(self).expect("the stats document serializes");
        json.push('\n');
        json
    }
}

/// `n` as a JSON count.
pub(super) fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `d` in seconds.
pub(super) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// `d` in microseconds.
pub(super) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `part` over `whole` in percent; 0 when `whole` is not positive.
pub(super) fn ratio_pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole * 100.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    #![allow(deprecated)]

    use super::*;

    /// The keys of a pretty-printed document, in the order written.
    fn keys(json: &str) -> Vec<&str> {
        json.lines()
            .filter_map(|line| line.trim_start().strip_prefix('"'))
            .filter_map(|rest| rest.split_once("\":").map(|(key, _)| key))
            .collect()
    }

    /// A document with one worker and one class, every figure distinct.
    fn document() -> StatsDocument {
        let mut class = ClassFigures {
            name: "urgent".into(),
            index: 0,
            shares: 16,
            configured_share_pct: 100.0,
            wall_s: 1.5,
            wall_share_pct: 100.0,
            cpu_s: 1.5,
            cpu_share_pct: 100.0,
            polls: 7,
            stalls: 1,
            queue_delay: QueueDelayFigures::default(),
            charged_s: Some(1.375),
        };
        class.queue_delay.count = 7;
        class.queue_delay.max_us = 40.0;
        StatsDocument {
            uptime_s: 2.0,
            workers: 1,
            live_tasks: 3,
            worker_states: vec![WorkerFigures {
                worker: 0,
                wall_s: 2.0,
                task_s: 1.5,
                parked_s: 0.5,
                utilization_pct: 75.0,
                polls: 7,
                cpu_s: Some(1.25),
                park_cpu_s: Some(0.01),
                preempted_s: Some(0.24),
                io_poll_gap_max_us: Some(250.0),
                rescues: Some(2),
                io_looks: Some(40),
                preempted_in_polls_s: Some(0.125),
                ..WorkerFigures::default()
            }],
            classes: vec![class],
            deliveries: DeliveryFigures {
                off: CountBytes::new(4, 4096),
                ..DeliveryFigures::default()
            },
            admin: AdminFigures {
                class: "urgent".into(),
                connections_open: 1,
                connections_evicted: Some(0),
                max_connections: 16,
                ..AdminFigures::default()
            },
            since_start: WindowFigures {
                wall_s: 2.0,
                park_cpu_s: Some(0.01),
                workers_cpu_s: Some(1.25),
                preempted_s: Some(0.24),
                workers_cpu_pct: Some(62.5),
                process_cpu_s: Some(1.3),
                tokio_cpu_s: Some(0.25),
                ..WindowFigures::default()
            },
            lane: Some(LaneFigures {
                priority: "fifo:1".into(),
                polls: 5,
                busy_s: 0.5,
                charged_s: 0.25,
                throttled: 3,
                cpu_s: Some(0.75),
            }),
            tokio: Some(TokioFigures {
                workers: 1,
                threads: 2,
                alive_tasks: 3,
                busy_s: 0.5,
                cpu_s: 0.75,
            }),
            io: Some(IoFigures {
                driver: "epoll".into(),
                requested: "auto".into(),
                fallback: Some("io_uring_setup: a seccomp filter forbids it".into()),
                operations_in_flight: 0,
                rings: 0,
                ring_per_worker: false,
                glances: 0,
                wait_errors: 0,
                last_wait_error: None,
            }),
            doze: Some(DozeFigures {
                enabled: true,
                dozes: 12,
                alarms: 4,
                alarm_error: None,
            }),
            ..StatsDocument::default()
        }
    }

    /// The fields are written in the documented order, the class's new
    /// names just before the old ones; changing it breaks readers that
    /// compare documents as text.
    #[test]
    fn fields_are_written_in_the_documented_order() {
        let json = document().to_json();
        assert!(json.ends_with("}\n"), "{json}");
        let window = [
            "wall_s",
            "worker_wall_s",
            "busy_s",
            "search_s",
            "spin_s",
            "parked_s",
            "park_cpu_s",
            "blocking_busy_s",
            "tokio_cpu_s",
            "lane_cpu_s",
            "accounted_cpu_s",
            "workers_cpu_s",
            "preempted_s",
            "process_user_s",
            "process_system_s",
            "process_cpu_s",
            "utilization_pct",
            "spin_pct",
            "accounted_cpu_pct",
            "workers_cpu_pct",
            "process_cpu_pct",
            "host_cpu_s",
            "host_steal_s",
            "host_steal_pct",
        ];
        let mut expected = vec![
            "uptime_s",
            "workers",
            "live_tasks",
            "pending_timers",
            "utilization_pct",
            "spin_pct",
            "worker_states",
            "worker",
            "wall_s",
            "task_s",
            "io_s",
            "timers_s",
            "search_s",
            "spin_s",
            "parked_s",
            "utilization_pct",
            "polls",
            "cpu_s",
            "park_cpu_s",
            "preempted_s",
            "io_poll_gap_max_us",
            "rescues",
            "io_looks",
            "preempted_in_polls_s",
            "classes",
            "name",
            "index",
            "shares",
            "configured_share_pct",
            "wall_s",
            "wall_share_pct",
            "cpu_s",
            "cpu_share_pct",
            "polls",
            "stalls",
            "queue_delay",
            "count",
            "mean_us",
            "p50_us",
            "p90_us",
            "p99_us",
            "p999_us",
            "max_us",
            "charged_s",
            "blocking",
            "threads",
            "idle",
            "queued",
            "waiting",
            "completed",
            "rejected",
            "busy_s",
            "max_threads",
            "queue_capacity",
            "deliveries",
            "off",
            "count",
            "bytes",
            "fixed",
            "count",
            "bytes",
            "adaptive",
            "count",
            "bytes",
            "admin",
            "class",
            "connections_open",
            "connections_rejected",
            "connections_evicted",
            "max_connections",
            "since_start",
        ];
        expected.extend(window);
        expected.push("since_last");
        expected.extend(window);
        expected.extend([
            "lane",
            "priority",
            "polls",
            "busy_s",
            "charged_s",
            "throttled",
            "cpu_s",
            "tokio",
            "workers",
            "threads",
            "alive_tasks",
            "busy_s",
            "cpu_s",
            "io",
            "driver",
            "requested",
            "fallback",
            "operations_in_flight",
            "rings",
            "ring_per_worker",
            "glances",
            "wait_errors",
            "last_wait_error",
            "doze",
            "enabled",
            "dozes",
            "alarms",
            "alarm_error",
        ]);
        assert_eq!(keys(&json), expected);
    }

    /// What is written reads back as it was.
    #[test]
    fn a_document_reads_back_as_written() {
        let doc = document();
        let back = StatsDocument::from_json(doc.to_json().as_bytes()).unwrap();
        assert_eq!(back, doc);
        // A window without process CPU writes nulls, and reads them back.
        assert!(doc.to_json().contains("\"process_user_s\": null"));
        assert_eq!(back.since_start.process_user_s, None);
    }

    /// A class from a server before the rename (only `cpu_s` and
    /// `cpu_share_pct`), from this one (both), and from one after the old
    /// names are gone (only `wall_s`, `wall_share_pct`): the new and the
    /// old fields hold the figure in all three.
    #[test]
    fn class_time_reads_under_either_name() {
        let class = |times: &str| {
            format!(
                r#"{{"name": "bulk", "index": 2, "shares": 50, "configured_share_pct": 50.0,
                    {times}, "polls": 9, "stalls": 0,
                    "queue_delay": {{"count": 0, "mean_us": 0.0, "p50_us": 0.0, "p90_us": 0.0,
                    "p99_us": 0.0, "p999_us": 0.0, "max_us": 0.0}}}}"#
            )
        };
        for times in [
            r#""cpu_s": 2.5, "cpu_share_pct": 40.0"#,
            r#""wall_s": 2.5, "wall_share_pct": 40.0, "cpu_s": 2.5, "cpu_share_pct": 40.0"#,
            r#""cpu_s": 2.5, "cpu_share_pct": 40.0, "wall_s": 2.5, "wall_share_pct": 40.0"#,
            r#""wall_s": 2.5, "wall_share_pct": 40.0"#,
        ] {
            let read: ClassFigures = serde_json::from_str(&class(times)).unwrap();
            assert_eq!((read.name.as_str(), read.polls), ("bulk", 9), "{times}");
            assert_eq!((read.wall_s, read.wall_share_pct), (2.5, 40.0), "{times}");
            assert_eq!((read.cpu_s, read.cpu_share_pct), (2.5, 40.0), "{times}");
        }
        // A class written today carries both names with the same values.
        let written = serde_json::to_value(&document().classes[0]).unwrap();
        assert_eq!(written["cpu_s"], written["wall_s"]);
        assert_eq!(written["cpu_share_pct"], written["wall_share_pct"]);
    }

    /// A document as the first release of `/stats` wrote it (none of the
    /// later figures, the class time under its old name), with a field
    /// from some newer server as well: it reads, the later figures are
    /// `None` and the unknown field is ignored.
    #[test]
    fn a_first_release_document_reads() {
        let window = r#"{"wall_s": 1.0, "worker_wall_s": 2.0, "busy_s": 0.5, "search_s": 0.1,
            "spin_s": 0.0, "parked_s": 1.4, "blocking_busy_s": 0.0, "accounted_cpu_s": 0.6,
            "process_user_s": null, "process_system_s": null, "process_cpu_s": null,
            "utilization_pct": 25.0, "spin_pct": 0.0, "accounted_cpu_pct": 30.0,
            "process_cpu_pct": null}"#;
        let json = format!(
            r#"{{"uptime_s": 1.0, "workers": 1, "live_tasks": 2, "pending_timers": 0,
                "utilization_pct": 25.0, "spin_pct": 0.0,
                "worker_states": [{{"worker": 0, "wall_s": 1.0, "task_s": 0.25, "io_s": 0.0,
                    "timers_s": 0.0, "search_s": 0.05, "spin_s": 0.0, "parked_s": 0.7,
                    "utilization_pct": 25.0, "polls": 10}}],
                "classes": [{{"name": "normal", "index": 1, "shares": 33,
                    "configured_share_pct": 100.0, "cpu_s": 0.25, "cpu_share_pct": 100.0,
                    "polls": 10, "stalls": 0, "queue_delay": {{"count": 10, "mean_us": 3.0,
                    "p50_us": 2.0, "p90_us": 5.0, "p99_us": 9.0, "p999_us": 9.0, "max_us": 9.0}}}}],
                "blocking": {{"threads": 0, "idle": 0, "queued": 0, "waiting": 0,
                    "completed": 0, "rejected": 0, "busy_s": 0.0, "max_threads": 512,
                    "queue_capacity": 1024}},
                "deliveries": {{"off": {{"count": 1, "bytes": 10}},
                    "fixed": {{"count": 0, "bytes": 0}}, "adaptive": {{"count": 0, "bytes": 0}}}},
                "admin": {{"class": "urgent", "connections_open": 1,
                    "connections_rejected": 0, "max_connections": 16}},
                "since_start": {window}, "since_last": {window},
                "a_figure_from_the_future": {{"anything": [1, 2]}}}}"#
        );
        let doc = StatsDocument::from_json(json.as_bytes()).unwrap();
        let worker = &doc.worker_states[0];
        assert_eq!(worker.task_s, 0.25);
        assert_eq!(
            (
                worker.cpu_s,
                worker.park_cpu_s,
                worker.preempted_s,
                worker.io_poll_gap_max_us,
                worker.rescues,
                worker.io_looks
            ),
            (None, None, None, None, None, None)
        );
        assert_eq!(doc.classes[0].wall_s, 0.25);
        assert_eq!(doc.classes[0].wall_share_pct, 100.0);
        assert_eq!(doc.admin.connections_evicted, None);
        assert_eq!(doc.deliveries.total(), CountBytes::new(1, 10));
        let w = &doc.since_start;
        assert_eq!(
            (
                w.park_cpu_s,
                w.workers_cpu_s,
                w.preempted_s,
                w.workers_cpu_pct
            ),
            (None, None, None, None)
        );
        assert_eq!(w.process_cpu_s, None);
    }

    /// A field every version has is required: its absence is an error that
    /// names it.
    #[test]
    fn a_missing_required_field_is_named() {
        let error = StatsDocument::from_json(br#"{"uptime_s": 1.0}"#).unwrap_err();
        assert!(error.to_string().contains("missing field"), "{error}");
    }
}
