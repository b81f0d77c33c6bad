//! The value types that [`Handle::stats`](crate::Handle::stats) returns.
//!
//! Every one is `#[non_exhaustive]`: a new figure is a new field, which
//! must not break code that reads the old ones. Read fields by name; the
//! types are built only by keel.

use std::time::Duration;

use hdrhistogram::Histogram;

/// A snapshot of a runtime's accounting since it started.
///
/// Counters are cumulative; subtract two snapshots to see an interval (see
/// [`WorkerStats::since`] and [`ClassStats::busy`]). Each busy worker
/// publishes its counters every millisecond and its queue-delay histograms
/// every 10 ms, and a parking worker publishes everything before it
/// sleeps, so a snapshot is at most that stale.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Stats {
    /// Time since the runtime was built.
    pub elapsed: Duration,
    /// One entry per worker, by index.
    pub workers: Vec<WorkerStats>,
    /// One entry per class, by [`Class::index`](crate::Class::index).
    pub classes: Vec<ClassStats>,
    /// Timers filed and not yet fired or cancelled.
    pub pending_timers: usize,
    /// The blocking pool.
    pub blocking: BlockingStats,
    /// Reads of TCP streams that returned data, per batch mode (see
    /// [`crate::net::BatchPolicy`]).
    pub deliveries: DeliveryStats,
    /// The urgent lane's figures, when the runtime has one (see
    /// [`Builder::urgent_lane`](crate::Builder::urgent_lane)).
    pub lane: Option<LaneStats>,
    /// The tokio side's figures, when the runtime has one (see
    /// [`Builder::tokio_threads`](crate::Builder::tokio_threads)).
    pub tokio: Option<TokioStats>,
    /// The IO driver the workers' reactor runs on.
    pub io: IoDriverStats,
    /// How the worker count and the spin were chosen.
    pub sizing: SizingStats,
    /// How often parked workers dozed (slept without their periodic
    /// looks) and were woken by the alarm.
    pub doze: DozeStats,
}

/// Parked workers' dozes: an idle runtime's workers stop their 5 ms looks
/// after 100 ms of quiet and sleep untimed, and the runtime's alarm wakes
/// them 5 ms after a blocker leaves its poll (see `sched/doze.rs` and
/// docs/DESIGN.md, "spin and park").
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DozeStats {
    /// Whether workers may doze now: the runtime has two workers or more
    /// and an alarm (a `timerfd`) that has not failed. Where they may not,
    /// parked workers keep looking every 5 ms, which costs an idle server
    /// some 200 wake-ups a second per worker.
    pub enabled: bool,
    /// Times a worker began to doze.
    pub dozes: u64,
    /// Times the alarm fired and woke at least one dozer.
    pub alarms: u64,
    /// Why workers may not doze, where the runtime would have them doze:
    /// the kernel refused the alarm's timer when the runtime was built, or
    /// refused to set it or wait on it later (dozing then stops for good
    /// and the dozers are woken at once). `None` otherwise.
    pub alarm_error: Option<String>,
}

/// How a runtime chose its worker count and its spin (see
/// [`Builder::workers`](crate::Builder::workers) and
/// [`Builder::spin`](crate::Builder::spin)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SizingStats {
    /// Why the runtime has the workers it has: set on the builder, or one
    /// per CPU the process may use within its cgroup's CPU quota (a
    /// container's CPU limit), with the quota and the file it was read
    /// from.
    pub workers_reason: String,
    /// The tightest CPU quota on the process's cgroup path, in CPUs;
    /// `None` where there is none.
    pub cpu_quota: Option<f64>,
    /// How long an idle worker spins before it parks.
    pub spin: Duration,
    /// Why it spins that long, and, where spinning is set and the CPU
    /// quota is below the workers, what that costs.
    pub spin_reason: String,
}

/// The IO driver a runtime's reactor runs on (see
/// [`Builder::io_backend`](crate::Builder::io_backend)), and why, when
/// the ring was asked for with `Auto` and not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IoDriverStats {
    /// `"epoll"` or `"io_uring"`.
    pub driver: &'static str,
    /// The backend asked for.
    pub requested: crate::io::IoBackend,
    /// What refused the ring when [`IoBackend::Auto`] fell back to epoll
    /// (a seccomp filter, the sysctl `kernel.io_uring_disabled`, an old
    /// kernel); `None` otherwise.
    ///
    /// [`IoBackend::Auto`]: crate::io::IoBackend::Auto
    pub fallback: Option<String>,
    /// Operations the ring holds: reads and file syncs submitted and not
    /// yet completed (a read holds its stream's receive buffer, a sync its
    /// file). 0 on epoll. It falls back to the number of streams waiting
    /// to read once the runtime is quiet; one that grows with streams that
    /// were dropped is a leak.
    pub operations_in_flight: u64,
    /// The io_uring instances the reactor runs: one per worker (see
    /// `ring_per_worker`), or the rings the workers share (see
    /// [`Builder::io_rings`](crate::Builder::io_rings)); 0 on epoll.
    pub rings: usize,
    /// Each worker has a ring of its own (see
    /// [`Builder::io_ring_per_worker`](crate::Builder::io_ring_per_worker));
    /// `rings` is then the number of workers. `false` on epoll.
    pub ring_per_worker: bool,
    /// With a ring per worker, the rings whose worker glances at them
    /// after every poll (their completion queue read from memory the
    /// kernel shares, no system call), so that a busy worker sees its IO
    /// at the next poll boundary. Equal to `rings` where the kernel maps
    /// the submission and completion rings together (Linux 5.4 and
    /// later); a ring without a glance is looked at every `io_interval`
    /// or `io_every` polls only (see
    /// [`Builder::io_interval`](crate::Builder::io_interval)). 0 on epoll
    /// and on shared rings.
    pub glances: usize,
    /// Waits of the driver that the kernel refused (`EINTR` aside). A
    /// blocking wait that fails with nothing to reap is followed by a
    /// sleep of a millisecond, so that a park that keeps failing does not
    /// spin; a non-blocking look is counted and not slept. 0 on a healthy runtime; one that grows says
    /// the driver cannot wait (the kernel out of memory for the ring's
    /// polls, a descriptor of the runtime closed behind its back) and IO
    /// is looked at only between those sleeps.
    pub wait_errors: u64,
    /// The last of those errors, as the OS reported it; `None` if there
    /// was none.
    pub last_wait_error: Option<String>,
}

/// The runtime's tokio side: the tokio runtime that runs what libraries
/// hand to tokio themselves, outside keel's classes. Its CPU is counted
/// here so that the workers', the blocking pool's and the tokio side's
/// figures add up to the process's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokioStats {
    /// Its worker threads; 0 when it runs on keel's workers (see
    /// [`Builder::tokio_on_workers`](crate::Builder::tokio_on_workers)),
    /// whose CPU then includes the time its tasks take.
    pub workers: usize,
    /// Its threads alive now, workers and blocking threads.
    pub threads: usize,
    /// Tasks alive on it (spawned with `tokio::spawn` and not finished).
    pub alive_tasks: usize,
    /// Time its workers spent polling tasks or driving IO and timers,
    /// summed over the workers, as tokio counts it.
    pub busy: Duration,
    /// CPU time of all its threads since the runtime was built, those that
    /// exited included.
    pub cpu: Duration,
}

/// Reads of TCP streams that returned data (*deliveries*), per
/// [`BatchPolicy`](crate::net::BatchPolicy) mode of the stream at the time
/// of the read, since the runtime was built.
///
/// Each delivery costs the reading task a poll, and usually a wake-up: the
/// point of batching is to make these fewer and larger. Between two
/// snapshots taken `dt` apart, `later.since(&earlier)` gives deliveries per
/// second (`count / dt`) and bytes per delivery
/// ([`Deliveries::bytes_per_delivery`]) for each mode. A read that returns
/// end-of-file (zero bytes) or an error is not a delivery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryStats {
    /// Streams with batching off (the default).
    pub off: Deliveries,
    /// Streams with [`BatchPolicy::fixed`](crate::net::BatchPolicy::fixed).
    pub fixed: Deliveries,
    /// Streams with [`BatchPolicy::adaptive`](crate::net::BatchPolicy::adaptive).
    pub adaptive: Deliveries,
}

impl DeliveryStats {
    /// All modes together.
    pub fn total(&self) -> Deliveries {
        Deliveries {
            count: self.off.count + self.fixed.count + self.adaptive.count,
            bytes: self.off.bytes + self.fixed.bytes + self.adaptive.bytes,
        }
    }

    /// What happened between `earlier` and `self` (two snapshots of the
    /// same runtime).
    pub fn since(&self, earlier: &DeliveryStats) -> DeliveryStats {
        DeliveryStats {
            off: self.off.since(&earlier.off),
            fixed: self.fixed.since(&earlier.fixed),
            adaptive: self.adaptive.since(&earlier.adaptive),
        }
    }
}

/// A count of deliveries and the bytes they carried; cumulative in a
/// snapshot, an interval after [`Deliveries::since`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Deliveries {
    /// Reads that returned at least one byte.
    pub count: u64,
    /// Bytes those reads returned.
    pub bytes: u64,
}

impl Deliveries {
    /// Average bytes per delivery; zero when there was none.
    pub fn bytes_per_delivery(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.bytes as f64 / self.count as f64
        }
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Deliveries) -> Deliveries {
        Deliveries {
            count: self.count.saturating_sub(earlier.count),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// The blocking pool's threads, queue and work (see [`crate::blocking`]).
///
/// Gauges (`threads`, `idle`, `queued`, `waiting`) are read one by one
/// while the pool runs, so they need not add up within one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BlockingStats {
    /// Pool threads alive.
    pub threads: usize,
    /// Pool threads waiting for a job: the next job goes to one of them
    /// instead of starting a thread. (A thread between two jobs counts as
    /// neither idle nor waiting.)
    pub idle: usize,
    /// Jobs accepted and not yet started.
    pub queued: usize,
    /// Callers of [`unblock`](crate::blocking::unblock) waiting for room.
    pub waiting: usize,
    /// Closures that ran to their end (returned or panicked).
    pub completed: u64,
    /// Jobs refused: the pool was full, or no thread could be started.
    pub rejected: u64,
    /// Wall time pool threads spent running closures, summed over threads;
    /// a closure's time is added when it ends. Not part of any worker's or
    /// class's time.
    pub busy: Duration,
    /// The configured [`max_blocking_threads`](crate::Builder::max_blocking_threads).
    pub max_threads: usize,
    /// The configured [`blocking_queue`](crate::Builder::blocking_queue).
    pub queue_capacity: usize,
}

/// Where one worker's wall time went. The states add up to
/// [`WorkerStats::wall`], the time since the worker started.
/// Utilization is `(task + io + timers) / wall`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// The worker's index.
    pub index: usize,
    /// When the worker thread began its loop, since the runtime was built.
    pub started: Duration,
    /// Time spent polling tasks, per class (indexed like [`Stats::classes`]).
    pub task: Vec<Duration>,
    /// Time spent looking for work in queues, and the scheduler's overhead
    /// between polls.
    pub search: Duration,
    /// Time spent busy-waiting for work under the spin policy.
    pub spin: Duration,
    /// Time spent asleep.
    pub parked: Duration,
    /// Time spent firing due timers.
    pub timers: Duration,
    /// Time spent polling the reactor without blocking and waking the
    /// tasks of IO events (time blocked in it while idle is `parked`).
    pub io: Duration,
    /// Polls, per class.
    pub polls: Vec<u64>,
    /// CPU time the kernel charged to the worker's thread, sampled on
    /// either side of the parks the worker times for
    /// [`park_cpu`](Self::park_cpu) (one in eight), and while it stays
    /// awake after every 10 ms of its time (so it may trail the states by
    /// up to 10 ms of the worker's time, parked time not counted); zero on
    /// platforms without a per-thread CPU clock. Compare it with
    /// [`on_cpu`](Self::on_cpu): see [`preempted`](Self::preempted).
    pub cpu: Duration,
    /// The longest the worker went, since it started, between two looks
    /// at the reactor while it had work (time parked does not count: a
    /// parked worker waits in the reactor or for a notification). keel's
    /// promise is `io_interval` plus the one poll that ran past it; a
    /// figure far above that points at a poll that did not yield. A
    /// maximum cannot be differenced, so [`since`](Self::since) keeps the
    /// later snapshot's.
    pub io_poll_gap_max: Duration,
    /// Times this worker took tasks queued on a sibling that had not
    /// changed state for a millisecond: a sibling the kernel preempted, or
    /// one in a poll that blocks. Steady growth means the machine runs
    /// more threads than it has cores, or some task blocks its worker.
    pub rescues: u64,
    /// Times the worker looked at the reactor without blocking, between
    /// task polls or before it parks: on epoll an `epoll_wait` with no
    /// timeout, on io_uring a read of the completion queue (a system
    /// call only when something waits to be posted or submitted). Over a
    /// window under CPU load, looks per second say how often sockets are
    /// seen (at most one per `io_interval` of busy time, or per
    /// `io_every` polls); the blocking waits of a parked worker are not
    /// counted, nor a look given up because a sibling held a shared
    /// poller (epoll, or a ring the workers share), which a ring per
    /// worker never meets.
    pub io_looks: u64,
    /// CPU time the worker's thread used while [`parked`](Self::parked):
    /// going to sleep and waking up (the system calls, the kernel's
    /// switches, a blocking poll of the reactor), read from the thread's
    /// CPU clock on either side of one park in eight, chosen at random,
    /// and scaled to all parks, but never more than [`cpu`](Self::cpu)
    /// (a few costly sampled parks can push the scaled figure past it);
    /// zero on platforms without a per-thread CPU clock. It is the scheduler's own cost, like
    /// [`search`](Self::search), but none of the states' wall time shows
    /// it: a worker that parks and wakes thousands of times a second can
    /// spend a noticeable share of a core on it.
    pub park_cpu: Duration,
    /// Time the kernel held the worker off its core in the middle of task
    /// polls (it preempted the worker to run another thread), measured
    /// exactly from the kernel's log of the worker's context switches;
    /// `None` where that log is not available (see
    /// [`Builder::charge_on_cpu`](crate::Builder::charge_on_cpu)). It is
    /// left out of what the polling classes are charged (see
    /// [`ClassStats::charged`]), and it is part of their
    /// [`busy`](ClassStats::busy) time.
    pub preempted_in_polls: Option<Duration>,
}

impl WorkerStats {
    /// Time spent polling tasks, all classes together.
    pub fn busy(&self) -> Duration {
        self.task.iter().sum()
    }

    /// The sum of all states: the wall time the worker has accounted.
    pub fn wall(&self) -> Duration {
        self.busy() + self.search + self.spin + self.parked + self.timers + self.io
    }

    /// Time in the states that run on a core (all but `parked`): what the
    /// worker would have used of a core of its own.
    pub fn on_cpu(&self) -> Duration {
        self.wall().saturating_sub(self.parked)
    }

    /// How much of [`on_cpu`](Self::on_cpu) the kernel did not run the
    /// worker: time it waited for a core while other threads or processes
    /// ran (zero when [`cpu`](Self::cpu) is not sampled). The thread's CPU
    /// outside parks ([`cpu`](Self::cpu) less
    /// [`park_cpu`](Self::park_cpu)) is what those states got. A large
    /// figure means the machine, not the runtime, is the bottleneck: the
    /// worker's task time includes waits for the CPU.
    pub fn preempted(&self) -> Duration {
        if self.cpu.is_zero() {
            Duration::ZERO
        } else {
            self.on_cpu()
                .saturating_sub(self.cpu.saturating_sub(self.park_cpu))
        }
    }

    /// Task, IO and timer time over wall time, in `0.0..=1.0`.
    pub fn utilization(&self) -> f64 {
        ratio(self.busy() + self.io + self.timers, self.wall())
    }

    /// What happened between `earlier` and `self` (two snapshots of the
    /// same worker).
    pub fn since(&self, earlier: &WorkerStats) -> WorkerStats {
        WorkerStats {
            index: self.index,
            started: self.started,
            task: self
                .task
                .iter()
                .zip(&earlier.task)
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
            search: self.search.saturating_sub(earlier.search),
            spin: self.spin.saturating_sub(earlier.spin),
            parked: self.parked.saturating_sub(earlier.parked),
            timers: self.timers.saturating_sub(earlier.timers),
            io: self.io.saturating_sub(earlier.io),
            polls: self
                .polls
                .iter()
                .zip(&earlier.polls)
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
            cpu: self.cpu.saturating_sub(earlier.cpu),
            io_poll_gap_max: self.io_poll_gap_max,
            rescues: self.rescues.saturating_sub(earlier.rescues),
            io_looks: self.io_looks.saturating_sub(earlier.io_looks),
            park_cpu: self.park_cpu.saturating_sub(earlier.park_cpu),
            preempted_in_polls: self
                .preempted_in_polls
                .map(|now| now.saturating_sub(earlier.preempted_in_polls.unwrap_or_default())),
        }
    }
}

/// What the urgent lane did (see
/// [`Builder::urgent_lane`](crate::Builder::urgent_lane)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaneStats {
    /// How the lane got ahead of the workers: `fifo:N` (real-time
    /// priority N), or `workers nice +N`, followed by why the real-time
    /// priority was refused when it was.
    pub priority: String,
    /// Polls of urgent tasks on the lane.
    pub polls: u64,
    /// Wall time of those polls.
    pub busy: Duration,
    /// What they were charged: `busy` less the time the kernel preempted
    /// the lane inside them (part of the urgent class's
    /// [`ClassStats::charged`]).
    pub charged: Duration,
    /// Times the lane spent its budget (the urgent class's share of the
    /// workers' time in a 10 ms window) and waited for the next window.
    pub throttled: u64,
    /// CPU time of the lane's thread: its polls, its reactor and its
    /// sleeps' cost (zero where threads have no CPU clock). The lane is not
    /// a worker, so no worker's accounting holds it; the admin endpoint's
    /// windows add it to what they account.
    pub cpu: Duration,
}

/// One class's configuration and what it received.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClassStats {
    /// The class's name.
    pub name: String,
    /// The class's configured shares.
    pub shares: u32,
    /// Worker time its tasks' polls took, all workers together: what the
    /// shares divide (the wall time of the polls, whether they computed or
    /// blocked).
    pub busy: Duration,
    /// What the shares charged it: [`busy`](Self::busy) less the time the
    /// kernel preempted the workers in the middle of its polls, where the
    /// workers measure that (see
    /// [`WorkerStats::preempted_in_polls`]). The shares divide this.
    pub charged: Duration,
    /// Polls of its tasks, all workers together.
    pub polls: u64,
    /// Polls that ran past the stall threshold (see
    /// [`Builder::stall_threshold`](crate::Builder::stall_threshold)).
    pub stalls: u64,
    /// How long its tasks waited between being woken and being polled.
    pub queue_delay: QueueDelay,
}

/// A distribution of queue delays (wake → first poll), with 1% resolution.
///
/// A task woken by another task's poll on the same worker, which then
/// runs it next (the LIFO slot, which no other worker can take from), is
/// counted from the end of that poll, the first instant it could run; so
/// is a task that yields.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct QueueDelay {
    pub(crate) histogram: Histogram<u64>,
}

impl QueueDelay {
    /// Number of recorded delays.
    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    /// The delay at quantile `q` (in `0.0..=1.0`); zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.histogram.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.histogram.value_at_quantile(q.clamp(0.0, 1.0)))
    }

    /// The median delay.
    pub fn p50(&self) -> Duration {
        self.quantile(0.50)
    }

    /// The 99th percentile delay.
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }

    /// The longest delay.
    pub fn max(&self) -> Duration {
        if self.histogram.is_empty() {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.histogram.max())
    }

    /// The mean delay.
    pub fn mean(&self) -> Duration {
        Duration::from_nanos(self.histogram.mean() as u64)
    }
}

fn ratio(part: Duration, whole: Duration) -> f64 {
    if whole.is_zero() {
        0.0
    } else {
        part.as_secs_f64() / whole.as_secs_f64()
    }
}
