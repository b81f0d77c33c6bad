//! `Builder`: every knob of a runtime, with its default and its reason.

use std::io;
use std::time::Duration;

use super::config::{ClassConfig, Config};
use super::Runtime;
use crate::blocking::pool::BlockingConfig;
use crate::sched::{idle::MAX_WORKERS, MAX_CLASSES};

/// Shares of the `urgent` class by default. With `normal` 33 and `bulk` 50,
/// these are the CPU ratios under which HAProxy measured its control plane
/// answering in 35 ms instead of 400 ms under mixed traffic.
pub const DEFAULT_URGENT_SHARES: u32 = 16;
/// Shares of the `normal` class by default.
pub const DEFAULT_NORMAL_SHARES: u32 = 33;
/// Shares of the `bulk` class by default.
pub const DEFAULT_BULK_SHARES: u32 = 50;

/// Spin time of [`SpinPolicy::Short`].
pub const SPIN_SHORT: Duration = Duration::from_micros(20);
/// Spin time of [`SpinPolicy::Medium`].
pub const SPIN_MEDIUM: Duration = Duration::from_micros(100);
/// Spin time of [`SpinPolicy::Long`].
pub const SPIN_LONG: Duration = Duration::from_millis(1);

/// Default [`Builder::io_interval`]: 100 µs.
pub const DEFAULT_IO_INTERVAL: Duration = Duration::from_micros(100);
/// Default [`Builder::io_every`]: 61 polls (a prime, so it does not fall in
/// step with periodic workloads).
pub const DEFAULT_IO_EVERY: u32 = 61;
/// Default [`Builder::task_quota`]: 500 µs.
pub const DEFAULT_TASK_QUOTA: Duration = Duration::from_micros(500);
/// Default [`Builder::task_io_budget`]: 128 IO operations.
pub const DEFAULT_TASK_IO_BUDGET: u32 = 128;

/// Default [`Builder::stall_threshold`]: 10 ms.
pub const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_millis(10);

/// Default [`Builder::max_blocking_threads`]: 64 threads.
///
/// Blocking work in a network server is mostly file IO, `fsync` and the odd
/// library call without an async API. Storage gains little from more than
/// a few dozen requests in flight (an NVMe queue is saturated well before
/// that from one process, a disk far sooner), while every thread costs a
/// stack, a kernel task and a share of the scheduler's attention on cores
/// the workers need. 64 leaves room for slow calls (name lookups, network
/// file systems) to overlap on a large machine and still caps what a flood
/// of jobs can do to one: beyond it, jobs queue.
pub const DEFAULT_MAX_BLOCKING_THREADS: usize = 64;

/// Default [`Builder::io_ring_per_worker`]: on.
pub const DEFAULT_RING_PER_WORKER: bool = true;

/// What the environment variable `KEEL_IO_RINGS` asks for.
enum RingsFromEnv {
    /// Nothing: the variable is unset.
    Unset,
    /// `per-worker`: a ring per worker.
    PerWorker,
    /// A positive number: that many rings the workers share.
    Shared(usize),
}

/// Reads `KEEL_IO_RINGS` (see [`Builder::io_rings`]).
fn rings_from_env() -> io::Result<RingsFromEnv> {
    let Some(value) = std::env::var_os("KEEL_IO_RINGS") else {
        return Ok(RingsFromEnv::Unset);
    };
    let text = value.to_str().map(str::trim);
    if text == Some("per-worker") {
        return Ok(RingsFromEnv::PerWorker);
    }
    text.and_then(|text| text.parse().ok())
        .filter(|&rings: &usize| rings > 0)
        .map(RingsFromEnv::Shared)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "KEEL_IO_RINGS={}: expected a positive number of rings, or per-worker",
                    value.to_string_lossy()
                ),
            )
        })
}

/// Default [`Builder::tokio_threads`] with the `tokio-context` feature: 1
/// thread (0 without the feature: there is no tokio side).
///
/// The tokio side runs only what libraries hand to tokio themselves
/// (connection tasks of a client's pool, a driver's background task) and
/// wakes keel tasks when tokio sockets and timers are ready; the requests'
/// own work stays on keel's workers. One thread does that without taking
/// a core from the workers on a small machine.
pub const DEFAULT_TOKIO_THREADS: usize = if cfg!(feature = "tokio-context") {
    1
} else {
    0
};
/// Default [`Builder::blocking_queue`]: 1024 jobs.
///
/// Behind 64 busy threads, a full queue is 16 jobs' worth of waiting per
/// thread: deep enough to absorb a burst, shallow enough that a job still
/// starts within a bounded time and that a stuck device shows up as
/// refusals instead of as memory growth.
pub const DEFAULT_BLOCKING_QUEUE: usize = 1024;
/// Default [`Builder::blocking_keep_alive`]: 10 s.
pub const DEFAULT_BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(10);

/// How long an idle worker busy-waits for new work before it parks.
///
/// Spinning lets a worker pick up work that arrives a moment later without
/// the cost of a sleep and a wake-up (a few microseconds each), and burns
/// CPU while it waits. keel accounts spin time separately from task time,
/// so its utilization figures stay true whatever the setting; process CPU
/// figures include it.
///
/// The default is [`SpinPolicy::None`]. A spinning worker holds a core
/// that, on a machine with no cores to spare (workers as many as cores,
/// and other busy threads or processes beside them), would have run the
/// very thread that sends the work: in keel's HTTP benchmark on two cores,
/// with the load generator beside the server, spinning 20 µs cost
/// throughput and doubled the tail latency against not spinning. Spin
/// (`Short`, `Medium`) when the workers have cores of their own and the
/// wake-up after a pause is what hurts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpinPolicy {
    /// Park as soon as no work is found: the least CPU, the slowest
    /// reaction to a burst after a pause.
    #[default]
    None,
    /// Spin for [`SPIN_SHORT`] (20 µs).
    Short,
    /// Spin for [`SPIN_MEDIUM`] (100 µs).
    Medium,
    /// Spin for [`SPIN_LONG`] (1 ms).
    Long,
    /// Spin for this long.
    Custom(Duration),
}

impl SpinPolicy {
    /// How long a worker spins under this policy.
    pub fn duration(self) -> Duration {
        match self {
            SpinPolicy::None => Duration::ZERO,
            SpinPolicy::Short => SPIN_SHORT,
            SpinPolicy::Medium => SPIN_MEDIUM,
            SpinPolicy::Long => SPIN_LONG,
            SpinPolicy::Custom(duration) => duration,
        }
    }
}

/// Configures and builds a [`Runtime`].
///
/// ```
/// use keel::{Runtime, SpinPolicy};
///
/// let rt = Runtime::builder()
///     .workers(2)
///     .class("bulk", 60)       // retune a default class
///     .class("replication", 20) // add one
///     .spin(SpinPolicy::None)
///     .build()
///     .unwrap();
/// let replication = rt.handle().class("replication").unwrap();
/// let out = rt.block_on(async move { keel::spawn_in(replication, async { 1 }).await });
/// assert_eq!(out.unwrap(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct Builder {
    workers: Option<usize>,
    classes: Vec<ClassConfig>,
    /// `None` until set: the default, [`SpinPolicy::None`].
    spin: Option<SpinPolicy>,
    thread_name: String,
    stack_size: Option<usize>,
    io_interval: Duration,
    io_every: u32,
    task_quota: Duration,
    task_io_budget: u32,
    stall_threshold: Duration,
    accounting: bool,
    charge_on_cpu: bool,
    urgent_lane: Option<crate::UrgentLane>,
    max_blocking_threads: usize,
    blocking_queue: usize,
    blocking_keep_alive: Duration,
    tokio_threads: usize,
    tokio_on_workers: bool,
    /// `None`: from `KEEL_IO_BACKEND`, or epoll.
    io_backend: Option<crate::io::IoBackend>,
    /// `None`: from `KEEL_IO_RINGS`, or none (a ring per worker).
    io_rings: Option<usize>,
    /// `None`: from `KEEL_IO_RINGS`, or [`DEFAULT_RING_PER_WORKER`].
    io_ring_per_worker: Option<bool>,
    ring_receives: bool,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder::new()
    }
}

impl Builder {
    /// A builder with every default.
    pub fn new() -> Builder {
        let class = |name: &str, shares| ClassConfig {
            name: name.to_owned(),
            shares,
        };
        Builder {
            workers: None,
            classes: vec![
                class("urgent", DEFAULT_URGENT_SHARES),
                class("normal", DEFAULT_NORMAL_SHARES),
                class("bulk", DEFAULT_BULK_SHARES),
            ],
            spin: None,
            thread_name: "keel-worker".to_owned(),
            stack_size: None,
            io_interval: DEFAULT_IO_INTERVAL,
            io_every: DEFAULT_IO_EVERY,
            task_quota: DEFAULT_TASK_QUOTA,
            task_io_budget: DEFAULT_TASK_IO_BUDGET,
            stall_threshold: DEFAULT_STALL_THRESHOLD,
            accounting: true,
            charge_on_cpu: true,
            urgent_lane: None,
            max_blocking_threads: DEFAULT_MAX_BLOCKING_THREADS,
            blocking_queue: DEFAULT_BLOCKING_QUEUE,
            blocking_keep_alive: DEFAULT_BLOCKING_KEEP_ALIVE,
            tokio_threads: DEFAULT_TOKIO_THREADS,
            tokio_on_workers: false,
            io_backend: None,
            io_rings: None,
            io_ring_per_worker: None,
            ring_receives: false,
        }
    }

    /// Number of worker threads. Default: one per CPU the process may run
    /// on (its affinity mask), within its cgroup's CPU quota (a
    /// container's CPU limit: one worker per whole CPU of quota, at least
    /// one). More workers than CPUs only adds context switches, and more
    /// than the quota lets run get throttled together, every task stalled
    /// until the next period (100 ms by default). [`Stats::sizing`] says
    /// which applied.
    ///
    /// [`Stats::sizing`]: crate::stats::Stats::sizing
    pub fn workers(&mut self, workers: usize) -> &mut Builder {
        self.workers = Some(workers);
        self
    }

    /// Sets the shares of the class called `name`, adding the class if it
    /// does not exist (at most [`MAX_CLASSES`] classes). Defaults: `urgent`
    /// [16](DEFAULT_URGENT_SHARES), `normal` [33](DEFAULT_NORMAL_SHARES),
    /// `bulk` [50](DEFAULT_BULK_SHARES).
    ///
    /// When every class has work, each receives polling time on the
    /// workers (each poll charged its wall time) in proportion to its
    /// shares, so bulk traffic cannot starve the control plane; a class
    /// with no work leaves its part to the others.
    pub fn class(&mut self, name: &str, shares: u32) -> &mut Builder {
        match self.classes.iter_mut().find(|c| c.name == name) {
            Some(class) => class.shares = shares,
            None => self.classes.push(ClassConfig {
                name: name.to_owned(),
                shares,
            }),
        }
        self
    }

    /// The kernel interface the reactor uses to learn that sockets are
    /// ready (see [`IoBackend`](crate::io::IoBackend)). Default:
    /// [`IoBackend::Epoll`](crate::io::IoBackend::Epoll), or what the
    /// environment variable `KEEL_IO_BACKEND` (`auto`, `epoll`, `uring`)
    /// says; a backend set here wins over the variable.
    ///
    /// On `Uring`, a busy worker's look for events reads the ring's
    /// completion queue, with no system call when nothing happened; `Auto`
    /// takes the ring where this process may set one up and falls back to
    /// epoll otherwise, with the reason in
    /// [`Stats::io`](crate::stats::Stats::io) (a seccomp filter, the
    /// sysctl `kernel.io_uring_disabled`, a kernel older than 6.0).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails if `Uring` is asked for and the ring
    /// cannot be used (the error says why), or if `KEEL_IO_BACKEND` holds
    /// something else than the three names (`InvalidInput`).
    ///
    /// ```
    /// use keel::io::IoBackend;
    ///
    /// let rt = keel::Runtime::builder()
    ///     .io_backend(IoBackend::Auto)
    ///     .build()
    ///     .unwrap();
    /// let io = rt.stats().io;
    /// println!("on {}", io.driver);
    /// if let Some(why) = &io.fallback {
    ///     println!("(no ring: {why})");
    /// }
    /// ```
    pub fn io_backend(&mut self, backend: crate::io::IoBackend) -> &mut Builder {
        self.io_backend = Some(backend);
        self
    }

    /// Makes the workers share `rings` io_uring instances, on the io_uring
    /// driver (see [`io_backend`](Self::io_backend)), instead of having a
    /// ring each (see [`io_ring_per_worker`](Self::io_ring_per_worker), the
    /// default); on epoll it changes nothing, but is still checked.
    /// Default: none set, unless the environment variable `KEEL_IO_RINGS`
    /// gives a number; a number set here wins over the variable.
    ///
    /// What it is for: comparing the layouts. A ring has one kernel lock,
    /// which every submission, cancellation and completion of its sources
    /// takes; one ring shared by eight workers serving short connections
    /// spent 7% of their CPU waiting for it. With `n` shared rings a
    /// descriptor's ring is its number modulo `n`, and the worker that
    /// polls the reactor looks at every ring, so each lock sees about
    /// `1/n` of the traffic; eight rings on eight workers still set up
    /// fewer than two thirds of the connections a second that a ring per
    /// worker did (see BENCHMARKS.md).
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with `InvalidInput` for 0, for a
    /// `KEEL_IO_RINGS` that is neither a positive number nor `per-worker`,
    /// and with [`io_ring_per_worker(true)`](Self::io_ring_per_worker)
    /// set too, on every backend: a bad setting is found before the
    /// backend is switched to the ring.
    pub fn io_rings(&mut self, rings: usize) -> &mut Builder {
        self.io_rings = Some(rings);
        self
    }

    /// Gives each worker an io_uring instance of its own, on the io_uring
    /// driver (see [`io_backend`](Self::io_backend)), instead of the
    /// [`io_rings`](Self::io_rings) the workers share. Default
    /// ([`DEFAULT_RING_PER_WORKER`], on): off if
    /// [`io_rings`](Self::io_rings) is set or the environment variable
    /// `KEEL_IO_RINGS` gives a number, on if it says `per-worker`; a
    /// setting here wins over the variable. On epoll it changes nothing.
    ///
    /// What it prevents: the kernel posts a socket's events from the
    /// thread that armed its watch. On rings the workers share, that
    /// thread is often asleep while another worker waits in the ring, and
    /// each event then wakes two threads. With a ring each, a worker arms
    /// a source's watch on its own ring the first time one of its tasks
    /// waits for the source, and sleeps in that ring: an event wakes the
    /// one worker that both posts and reaps it, and its task is queued
    /// there. On eight workers of a 16-CPU machine it set up 2.7 times the
    /// short connections a second of one shared ring, and 1.4 times
    /// epoll's (medians of three interleaved runs: see BENCHMARKS.md). A
    /// sleeping worker still serves the rings of the workers that run,
    /// every 5 ms, so that one running a long poll holds its ring's events
    /// (posted by the kernel at its next system call or timer tick) at
    /// most that much longer, not until its next look.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with `InvalidInput` for `true` with
    /// [`io_rings`](Self::io_rings) set too.
    pub fn io_ring_per_worker(&mut self, per_worker: bool) -> &mut Builder {
        self.io_ring_per_worker = Some(per_worker);
        self
    }

    /// Whether TCP reads complete on the ring: a stream's first read arms
    /// a multishot `IORING_OP_RECV`, submitted with the rest of the
    /// worker's loop turn, which completes once per arrival into one of
    /// the ring's provided buffers (256 of 16 KiB a ring, mapped at its
    /// first receive; a stream holding 16 unread has its receive
    /// cancelled until its reader drains it), and the bytes are copied
    /// out; when those run out, a stream receives into a buffer of its
    /// own. It applies only on the
    /// io_uring driver (see
    /// [`io_backend`](Self::io_backend)); on epoll it changes nothing.
    /// Default: off.
    ///
    /// What it prevents: a `recv` system call per read (a keep-alive
    /// request costs about one system call instead of two). Why it is
    /// off: a read on the ring never completes at once, even when bytes
    /// wait in the socket, so code that polls a read once and moves on
    /// (a last look at a connection before closing it, a drain that must
    /// not wait) finds nothing where a readiness read would find the
    /// bytes; and it has not yet shown less CPU a request than readiness
    /// (see BENCHMARKS.md).
    pub fn ring_receives(&mut self, on: bool) -> &mut Builder {
        self.ring_receives = on;
        self
    }

    /// How long an idle worker spins before parking. Default:
    /// [`SpinPolicy::None`] (see [`SpinPolicy`] for when to spin).
    pub fn spin(&mut self, spin: SpinPolicy) -> &mut Builder {
        self.spin = Some(spin);
        self
    }

    /// How often busy workers look at socket readiness: a worker polls the
    /// reactor (without blocking) at the first poll boundary once this much
    /// time has passed since it last did. Default
    /// [100 µs](DEFAULT_IO_INTERVAL).
    ///
    /// Prevents IO starvation: with every worker busy on CPU work, a
    /// runtime that polls for IO only when a worker runs out of tasks
    /// leaves sockets unread for as long as the queues stay full. Shorter
    /// intervals answer sooner at the cost of one `epoll_wait` system call
    /// (about a microsecond) per interval and worker. A poll that runs
    /// longer than the interval cannot be interrupted: IO then waits for
    /// the next poll boundary of any worker. With a ring per worker
    /// ([`io_ring_per_worker`](Builder::io_ring_per_worker)) a worker also
    /// looks at any poll boundary where its ring shows completions
    /// waiting, which it sees without a system call; the interval then
    /// bounds how long operations queued by its tasks wait to be
    /// submitted.
    pub fn io_interval(&mut self, interval: Duration) -> &mut Builder {
        self.io_interval = interval;
        self
    }

    /// A worker also polls the reactor after this many task polls of its
    /// own, however short they were. Default [61](DEFAULT_IO_EVERY).
    ///
    /// Bounds how many queued tasks run ahead of IO readiness when polls
    /// are short (a timer-based interval alone would let a long queue of
    /// tiny tasks run first).
    pub fn io_every(&mut self, polls: u32) -> &mut Builder {
        self.io_every = polls;
        self
    }

    /// How long one poll of a task may run before its IO operations return
    /// `Pending` and it is rescheduled. Default [500 µs](DEFAULT_TASK_QUOTA).
    ///
    /// Prevents one task whose sockets are always ready (a bulk download
    /// on a fast link) from holding a worker: past the quota, one of its
    /// next four reads or writes yields instead (the clock is looked at
    /// before every fourth operation of a poll, which spares most polls a
    /// read of it). A poll that computes without IO is not interrupted;
    /// only cooperative points can be.
    pub fn task_quota(&mut self, quota: Duration) -> &mut Builder {
        self.task_quota = quota;
        self
    }

    /// How many IO operations one poll of a task may perform before they
    /// return `Pending` and it is rescheduled. Default
    /// [128](DEFAULT_TASK_IO_BUDGET). The same failure as
    /// [`task_quota`](Builder::task_quota), counted in operations.
    pub fn task_io_budget(&mut self, operations: u32) -> &mut Builder {
        self.task_io_budget = operations;
        self
    }

    /// How long one poll of a task may run before it counts as a stall.
    /// Default [10 ms](DEFAULT_STALL_THRESHOLD).
    ///
    /// A poll that runs this long without yielding holds its worker: every
    /// task queued behind it, and every socket that worker would have
    /// polled, waits. keel cannot interrupt it, but it says so: each stall
    /// is counted in its class (`ClassStats::stalls`) and reported through
    /// `tracing` at `warn` level with the task's id, class, name (see
    /// [`TaskBuilder::name`](crate::TaskBuilder::name)) and how long the
    /// poll took, so the blocking call or the missing `yield_now` can be
    /// found. `Duration::MAX` turns reporting off.
    pub fn stall_threshold(&mut self, threshold: Duration) -> &mut Builder {
        self.stall_threshold = threshold;
        self
    }

    /// Turns the per-worker accounting off: no state counters, no queue
    /// delays, no schedule timestamps. It exists only so that the overhead
    /// benchmark (`cargo bench -p keel --bench rt`, group `accounting`) can
    /// measure what the accounting costs, side by side in one run; keel's
    /// stats, the class shares' reports and the admin endpoint all assume it
    /// is on. The scheduler is the same either way (the rescue of a stuck
    /// worker reads a state word that is kept regardless), so the benchmark
    /// compares the accounting alone. Default: on.
    #[doc(hidden)]
    pub fn accounting(&mut self, on: bool) -> &mut Builder {
        self.accounting = on;
        self
    }

    /// Whether the class shares charge a poll only for the time its worker
    /// was on a core. Default: on.
    ///
    /// On a machine with more runnable threads than cores (the runtime
    /// beside its clients, a backend, or other services), the kernel
    /// preempts workers in the middle of polls for time slices of
    /// milliseconds. Charged at wall time, such a poll costs its class
    /// the whole slice: an urgent poll of 100 µs preempted for 4 ms makes
    /// the urgent class wait behind 4 ms of every other class's work
    /// before it is served again. With this on, every worker measures how
    /// long the kernel preempted it inside each poll, from the kernel's log
    /// of its context switches (a Linux perf event on the worker's own
    /// thread, read without a system call), and leaves that out of the
    /// charge. Time a poll spends blocked (on a lock, a file) is still
    /// charged: it holds the worker.
    ///
    /// Where the kernel refuses the perf event (a container's seccomp
    /// filter, `perf_event_paranoid` above 2, another OS), polls are
    /// charged their wall time; `WorkerStats::preempted_in_polls` is then
    /// `None`.
    pub fn charge_on_cpu(&mut self, on: bool) -> &mut Builder {
        self.charge_on_cpu = on;
        self
    }

    /// Serves [`Class::URGENT`](crate::Class::URGENT) on a lane of its own:
    /// a thread the OS schedules ahead of the workers. Default: off.
    ///
    /// The class shares decide which task a worker runs next; they can do
    /// nothing while no worker is on a core. On a machine the runtime
    /// shares with other processes (its clients, a backend, other
    /// services), the kernel hands out time slices of milliseconds, and a
    /// control-plane request that arrives while every worker waits for a
    /// core waits with them. With the lane, urgent tasks run on one more
    /// thread, which the kernel runs first: at real-time priority
    /// (`SCHED_FIFO`) when the process may set one, otherwise because the
    /// workers lower their own priority (see [`LanePriority`](crate::LanePriority)).
    /// A socket created in an urgent task (or an admin endpoint in the
    /// urgent class) registers with the lane's own reactor, so its
    /// readiness wakes the lane thread directly.
    ///
    /// The lane cannot run away with a core: in every 10 ms it runs tasks
    /// for at most the urgent class's share of the workers' time (its
    /// shares over all shares, times the workers), then waits for the
    /// next 10 ms. `Stats::lane` reports how the lane got ahead (and why
    /// not, if the real-time priority was refused), its polls and how
    /// often it was throttled.
    ///
    /// ```
    /// use keel::{Class, UrgentLane};
    ///
    /// let rt = keel::Runtime::builder()
    ///     .workers(2)
    ///     .urgent_lane(UrgentLane::new())
    ///     .build()
    ///     .unwrap();
    /// let on_lane = rt.block_on(rt.spawn_in(Class::URGENT, async {
    ///     std::thread::current().name().map(str::to_owned)
    /// }));
    /// assert_eq!(on_lane.unwrap().as_deref(), Some("keel-worker-urgent"));
    /// assert!(rt.stats().lane.is_some());
    /// ```
    pub fn urgent_lane(&mut self, lane: crate::UrgentLane) -> &mut Builder {
        self.urgent_lane = Some(lane);
        self
    }

    /// Most threads the blocking pool runs at once. Default
    /// [64](DEFAULT_MAX_BLOCKING_THREADS); at least 1.
    ///
    /// The pool starts threads only when a job finds none idle, so an
    /// application that never blocks has none. The limit prevents a flood
    /// of blocking jobs (a slow disk, a burst of `fsync`s) from creating
    /// hundreds of threads that exhaust memory or the process's thread
    /// limit and take CPU from the workers; jobs beyond it wait in the
    /// [queue](Builder::blocking_queue).
    ///
    /// ```
    /// let rt = keel::Runtime::builder().max_blocking_threads(4).build().unwrap();
    /// let n = rt.block_on(async { keel::spawn_blocking(|| 6 * 7).await.unwrap() });
    /// assert_eq!(n, 42);
    /// assert!(rt.stats().blocking.threads <= 4);
    /// ```
    pub fn max_blocking_threads(&mut self, threads: usize) -> &mut Builder {
        self.max_blocking_threads = threads;
        self
    }

    /// How many jobs may wait for a pool thread once every thread is busy
    /// and no more may start. Default [1024](DEFAULT_BLOCKING_QUEUE); 0
    /// means a job runs only if a thread is free or may start.
    ///
    /// Prevents unbounded memory and unbounded waiting: past the queue,
    /// [`spawn_blocking`](crate::spawn_blocking) refuses the job (its
    /// [`JoinError::is_rejected`](crate::JoinError::is_rejected)) and
    /// [`unblock`](crate::blocking::unblock) suspends its caller until
    /// there is room, which passes the back-pressure to whoever produces
    /// the work.
    ///
    /// ```
    /// let rt = keel::Runtime::builder()
    ///     .max_blocking_threads(1)
    ///     .blocking_queue(0)
    ///     .build()
    ///     .unwrap();
    /// rt.block_on(async {
    ///     // `unblock` waits for room instead of being refused.
    ///     let a = keel::blocking::unblock(|| 1);
    ///     let b = keel::blocking::unblock(|| 2);
    ///     assert_eq!(a.await.unwrap() + b.await.unwrap(), 3);
    /// });
    /// ```
    pub fn blocking_queue(&mut self, jobs: usize) -> &mut Builder {
        self.blocking_queue = jobs;
        self
    }

    /// How long an idle pool thread waits for a new job before it exits.
    /// Default [10 s](DEFAULT_BLOCKING_KEEP_ALIVE).
    ///
    /// Prevents thread churn: a burst of blocking work that comes and goes
    /// would otherwise pay a thread creation (tens of microseconds, and a
    /// fresh stack) per job; once the burst is over, the threads and their
    /// memory are given back after this long. `Duration::MAX` keeps idle
    /// threads for good.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rt = keel::Runtime::builder()
    ///     .blocking_keep_alive(Duration::from_secs(60))
    ///     .build()
    ///     .unwrap();
    /// # drop(rt);
    /// ```
    pub fn blocking_keep_alive(&mut self, keep_alive: Duration) -> &mut Builder {
        self.blocking_keep_alive = keep_alive;
        self
    }

    /// Worker threads of the runtime's tokio side (feature
    /// `tokio-context`): a tokio runtime that this
    /// runtime starts, enters on every thread where keel code runs, and
    /// shuts down after its own tasks. Libraries that call `tokio::spawn`,
    /// `tokio::time` or `Handle::current()` themselves, or open tokio
    /// sockets (reqwest, sqlx, tonic's transport, redis), then work inside
    /// keel tasks instead of panicking with "there is no reactor running".
    /// Default [`DEFAULT_TOKIO_THREADS`]: 1 with the `tokio-context`
    /// feature; 0 turns the tokio side off.
    ///
    /// ```
    /// # #[cfg(feature = "tokio-context")] {
    /// let rt = keel::Runtime::builder().tokio_threads(2).build().unwrap();
    /// let slept = rt.block_on(rt.spawn(async {
    ///     // tokio's own timer, from inside a keel task.
    ///     tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    ///     tokio::spawn(async { 6 * 7 }).await.unwrap()
    /// }));
    /// assert_eq!(slept.unwrap(), 42);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with `InvalidInput` for a nonzero
    /// count without the `tokio-context` feature.
    pub fn tokio_threads(&mut self, threads: usize) -> &mut Builder {
        self.tokio_threads = threads;
        self
    }

    /// Runs the tokio side on keel's workers instead of threads of its own
    /// (feature `tokio-context`; default false).
    ///
    /// With its own threads, every readiness event of a socket that a
    /// tokio-only library owns (a sqlx connection, reqwest's pool) wakes
    /// the tokio thread, which then wakes the keel task from outside: on a
    /// machine whose cores are all busy that hop costs a request about a
    /// fifth more CPU (`examples/service.rs`, BENCHMARKS.md). With this
    /// on, the tokio side is a current-thread tokio runtime with no thread:
    /// each worker drives it at every IO tick (it runs the tokio tasks that
    /// are ready and polls tokio's epoll without blocking), and the worker
    /// that parks in keel's reactor sleeps in tokio's `block_on` instead,
    /// with keel's epoll descriptor registered in tokio's, so that either
    /// side's events wake it. The work that libraries spawn with
    /// `tokio::spawn` then runs on keel's worker threads, still outside
    /// every class; the time it takes is counted as the worker's IO time
    /// at a tick, and as parked time while the worker sleeps in tokio's
    /// driver. `tokio_threads` must still be nonzero (0 turns the tokio
    /// side off); its count is not used.
    ///
    /// A keel task must then not block its worker on tokio
    /// (`tokio::runtime::Handle::block_on`): the worker it blocks may be
    /// the one that would drive tokio to finish the wait. From a blocking
    /// closure (`spawn_blocking`) it is fine.
    ///
    /// # Errors
    ///
    /// [`build`](Self::build) fails with `InvalidInput` with no tokio side
    /// (`tokio_threads(0)`, or no `tokio-context` feature).
    pub fn tokio_on_workers(&mut self, on: bool) -> &mut Builder {
        self.tokio_on_workers = on;
        self
    }

    /// Name of the worker threads (suffixed with `-N`), and of the blocking
    /// pool's threads (suffixed with `-blocking`). Default `keel-worker`.
    pub fn thread_name(&mut self, name: &str) -> &mut Builder {
        self.thread_name = name.to_owned();
        self
    }

    /// Stack size of the worker threads in bytes. Default: the platform's
    /// default for spawned threads (2 MiB on Linux). The blocking pool's
    /// threads keep the platform's default: they run arbitrary synchronous
    /// code, whose stack needs a worker's setting says nothing about.
    pub fn thread_stack_size(&mut self, bytes: usize) -> &mut Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Validates the settings and starts the workers.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for zero workers or more than the supported number,
    /// a class with zero shares or an empty name, too many classes, a zero
    /// `io_every`, a zero task quota or IO budget, or zero
    /// `max_blocking_threads`; the OS error if the
    /// reactor cannot be created or a worker thread cannot be spawned.
    pub fn build(&mut self) -> io::Result<Runtime> {
        Runtime::start(self.config()?)
    }

    pub(crate) fn config(&self) -> io::Result<Config> {
        let invalid = |message: String| io::Error::new(io::ErrorKind::InvalidInput, message);
        let budget = super::cpus::CpuBudget::read();
        let workers = self.workers.unwrap_or_else(|| budget.workers());
        let spin = self.spin.unwrap_or_default();
        let sizing = sizing(&budget, self.workers, workers, self.spin);
        if workers == 0 || workers > MAX_WORKERS {
            return Err(invalid(format!(
                "workers must be between 1 and {MAX_WORKERS}, not {workers}"
            )));
        }
        if self.classes.len() > MAX_CLASSES {
            return Err(invalid(format!(
                "at most {MAX_CLASSES} classes are supported, {} were defined",
                self.classes.len()
            )));
        }
        for class in &self.classes {
            if class.name.is_empty() {
                return Err(invalid("a class name must not be empty".to_owned()));
            }
            if class.shares == 0 {
                return Err(invalid(format!(
                    "class {:?} has 0 shares; shares must be at least 1",
                    class.name
                )));
            }
        }
        if self.io_every == 0 {
            return Err(invalid("io_every must be at least 1 poll".to_owned()));
        }
        if self.task_quota.is_zero() || self.task_io_budget == 0 {
            return Err(invalid(
                "task_quota and task_io_budget must be greater than zero".to_owned(),
            ));
        }
        if self.max_blocking_threads == 0 {
            return Err(invalid(
                "max_blocking_threads must be at least 1 thread".to_owned(),
            ));
        }
        if let Some(lane) = &self.urgent_lane {
            lane.validate()?;
        }
        if self.tokio_threads > 0 && !cfg!(feature = "tokio-context") {
            return Err(invalid(format!(
                "tokio_threads({}) needs keel's `tokio-context` feature",
                self.tokio_threads
            )));
        }
        if self.tokio_on_workers && (self.tokio_threads == 0 || !cfg!(feature = "tokio-context")) {
            return Err(invalid(
                "tokio_on_workers(true) needs a tokio side: the `tokio-context` feature and \
                 a nonzero tokio_threads"
                    .to_owned(),
            ));
        }
        let (io_rings, ring_per_worker) = match (self.io_rings, self.io_ring_per_worker) {
            (Some(0), _) => {
                return Err(invalid(
                    "io_rings(0): a ring driver needs a ring".to_owned(),
                ))
            }
            (Some(rings), Some(true)) => {
                return Err(invalid(format!(
                    "io_rings({rings}) and io_ring_per_worker(true): the workers either share \
                     rings or have one each"
                )))
            }
            (Some(rings), _) => (rings, false),
            (None, per_worker) => match rings_from_env()? {
                RingsFromEnv::Unset => (1, per_worker.unwrap_or(DEFAULT_RING_PER_WORKER)),
                RingsFromEnv::PerWorker => (1, per_worker.unwrap_or(true)),
                RingsFromEnv::Shared(rings) => (rings, per_worker.unwrap_or(false)),
            },
        };
        let io_backend = match self.io_backend {
            Some(backend) => backend,
            None => crate::io::IoBackend::from_env()?,
        };
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Ok(Config {
            io_backend,
            io_rings,
            ring_per_worker,
            ring_receives: self.ring_receives,
            urgent_lane: self.urgent_lane.clone(),
            workers,
            io_interval: nanos(self.io_interval),
            io_every: self.io_every,
            task_quota: nanos(self.task_quota),
            task_io_budget: self.task_io_budget,
            stall_threshold: nanos(self.stall_threshold),
            accounting: self.accounting,
            charge_on_cpu: self.charge_on_cpu,
            classes: self.classes.clone(),
            spin: spin.duration(),
            sizing,
            thread_name: self.thread_name.clone(),
            stack_size: self.stack_size,
            blocking: BlockingConfig {
                max_threads: self.max_blocking_threads,
                queue: self.blocking_queue,
                keep_alive: self.blocking_keep_alive,
                thread_name: format!("{}-blocking", self.thread_name),
            },
            tokio_threads: self.tokio_threads,
            tokio_on_workers: self.tokio_on_workers,
        })
    }
}

/// Why the runtime has `workers` workers (`set` on the builder, or not)
/// and the spin it has (`spin` set, or not), for [`Stats::sizing`].
///
/// [`Stats::sizing`]: crate::stats::Stats::sizing
fn sizing(
    budget: &super::cpus::CpuBudget,
    set: Option<usize>,
    workers: usize,
    spin: Option<SpinPolicy>,
) -> crate::stats::SizingStats {
    let quota = budget.quota.as_ref().map(|(cpus, _)| *cpus);
    let workers_reason = match set {
        Some(_) => match quota {
            Some(cpus) if cpus < workers as f64 => format!(
                "set on the builder, above the CPU quota of {cpus:.2} CPUs: the workers are throttled together"
            ),
            _ => "set on the builder".to_owned(),
        },
        None => budget.reason(),
    };
    let spin_reason = match spin {
        None => "the default: no spin (a spinning worker holds a core that the threads bringing work may need)".to_owned(),
        Some(policy) => match quota {
            Some(cpus) if policy.duration() > Duration::ZERO && cpus < workers as f64 => format!(
                "set on the builder; the CPU quota of {cpus:.2} CPUs is below the {workers} workers, \
                 so spinning burns quota that the threads bringing work need"
            ),
            _ => "set on the builder".to_owned(),
        },
    };
    crate::stats::SizingStats {
        workers_reason,
        cpu_quota: quota,
        spin: spin.unwrap_or_default().duration(),
        spin_reason,
    }
}
