//! Per-worker microstate accounting: where every nanosecond of a worker's
//! wall time went.
//!
//! A worker is always in exactly one [`State`]. On every change it adds the
//! time since the previous change to that state's counter, so the counters
//! of a worker add up to its wall time by construction. The counters live
//! in the worker's own [`Account`] (no locks on the hot path) and are
//! *published* into the shared [`Published`] cell every [`PUBLISH_NS`] and
//! before the worker parks.
//!
//! Between publications, every state change also stores the new state and
//! the instant it began in one relaxed atomic ([`WorkerMetrics::current`]).
//! A reader adds the running slice itself: from the publication to the
//! current state's start it charges the published state, from there to now
//! the current one. A worker parked for a minute, spinning, or stuck in a
//! ten-second poll is thus reported in the right state without its
//! cooperation, and the only error is the attribution of at most one
//! publication interval.
//!
//! The state word is the one part kept even when the accounting is off
//! (`Builder::accounting(false)`, for the overhead benchmark): the
//! scheduler reads it to find a sibling stuck in one state (see the
//! rescue in `sched::policy`), so the accounting can be switched off
//! without switching the rescue off with it, and the benchmark compares
//! two equal schedulers.
//!
//! Beside the states, a worker samples the CPU time the kernel charged to
//! its thread (`CLOCK_THREAD_CPUTIME_ID`) on the parks it times (below),
//! when it publishes once it has been awake (in any state but parked) for
//! [`CPU_SAMPLE_NS`] since the previous sample, and when it exits. A
//! sample is a system call (about 0.3 µs on a virtual machine), so a busy
//! worker takes one per 10 ms of its work, not one per publication.
//! The states say where the worker's *wall* time went; the sample says how
//! much of it the worker actually ran on a core. On a machine with more
//! runnable threads than cores the two part: a worker that was preempted
//! while polling counts that time as task time, though the kernel ran
//! someone else.
//!
//! The parked state is the exception the other way: its wall time is
//! sleep, yet going to sleep and waking up run on a core (the futex or
//! `epoll_wait` system call, the kernel's switches, the publication before
//! parking). A worker that parks and wakes thousands of times a second
//! spends a real share of a core there, and no state would show it. So
//! the worker reads its thread clock on either side of one park in
//! [`PARK_SAMPLE_ONE_IN`], chosen at random, and its *park CPU* is what
//! the sampled parks cost, scaled by all parks over the sampled ones. Two
//! samples on every park would cost as much as a few percent of a server
//! whose workers park after each short request (two system calls of some
//! 0.3 µs, three times a request, measured on S0's short connections);
//! one park in eight costs an eighth of that, and over the thousands of
//! parks of a second the estimate is within a few percent. A random
//! choice, not every eighth park, so that a pattern in the parks (a
//! worker that alternates a short park with a long one) cannot bias it.
//! The estimate is published capped at the thread's CPU clock, which it
//! can overshoot when a few sampled parks cost far more than the rest (a
//! virtual machine whose host takes the core away inside a system call
//! charges that time to it): the parks cannot have used more CPU than the
//! thread did.
//!
//! Queue delays (wake → first poll) are kept in a local list per class and
//! recorded into the runtime's histograms ([`ClassDelays`], one per class,
//! shared by every worker) every [`HISTOGRAM_PUBLISH_NS`] and before
//! parking. One histogram per class, not per worker and class: a snapshot
//! then copies one histogram per class, where per-worker histograms would
//! have it allocate a histogram per class and add every worker's into it,
//! some 30 KB copied or walked each time (a tenth of a millisecond on a
//! cold cache, on every `/status` of the admin endpoint). A list, not a
//! local histogram: merging two histograms walks every bucket (thousands),
//! which a worker that parks after each request would pay a thousand times
//! a second, while recording the few values gathered since the last
//! publication costs only those values.
//! A list that reaches [`MAX_PENDING_DELAYS`] is published early.

use std::sync::Arc;

use hdrhistogram::Histogram;

use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
use crate::loom::sync::Mutex;
use crate::util::rng::xorshift64;

/// How often a busy worker publishes its state counters (1 ms: a snapshot
/// is at most that stale, at the cost of one uncontended lock per ms).
pub(crate) const PUBLISH_NS: u64 = 1_000_000;

/// How much awake time passes between two samples of a worker's thread
/// CPU clock (10 ms). A sample is a system call, and sampling every
/// millisecond measurably slowed the task polls around it on a virtual
/// machine; at 10 ms the sample trails the states by at most 10 ms of the
/// worker's time, a tenth of a percent of a 10-second window.
const CPU_SAMPLE_NS: u64 = 10_000_000;

/// One park in this many, at random, is timed with the thread's CPU clock
/// (see the module docs).
const PARK_SAMPLE_ONE_IN: u64 = 8;

/// How often a busy worker merges its queue-delay histograms (10 ms).
pub(crate) const HISTOGRAM_PUBLISH_NS: u64 = 10_000_000;

/// Queue delays a worker gathers before it publishes them regardless of
/// the interval: bounds its memory and the time it holds the lock.
const MAX_PENDING_DELAYS: usize = 4096;

/// Longest queue delay recorded exactly (60 s); longer ones are clamped.
const DELAY_MAX_NS: u64 = 60_000_000_000;

/// Significant figures of the queue-delay histograms: 1% resolution.
const DELAY_SIGFIG: u8 = 2;

/// What a worker is doing. Each has a slot in the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Polling a task of this class (the index).
    Task(usize),
    /// Looking through queues for a task, and the scheduler's own overhead.
    Search,
    /// Busy-waiting for work under the spin policy.
    Spin,
    /// Asleep until notified (or until the earliest timer, for the worker
    /// that watches it).
    Parked,
    /// Firing due timers.
    Timers,
    /// Polling the reactor without blocking, and waking the tasks of its
    /// events.
    Io,
}

const SEARCH_SLOT: usize = 0;
const SPIN_SLOT: usize = 1;
const PARKED_SLOT: usize = 2;
const TIMERS_SLOT: usize = 3;
const IO_SLOT: usize = 4;
/// The first class's slot: the counters are search, spin, parked, timers,
/// io, then one per class (as many as the runtime has).
const TASK_SLOT: usize = 5;

/// Bits of [`WorkerMetrics::current`] that hold the start instant; the
/// state's slot sits above them. 2^56 ns is over two years of uptime.
const SINCE_BITS: u32 = 56;
const SINCE_MASK: u64 = (1 << SINCE_BITS) - 1;

impl State {
    fn slot(self) -> usize {
        match self {
            State::Task(class) => TASK_SLOT + class,
            State::Search => SEARCH_SLOT,
            State::Spin => SPIN_SLOT,
            State::Parked => PARKED_SLOT,
            State::Timers => TIMERS_SLOT,
            State::Io => IO_SLOT,
        }
    }
}

pub(crate) fn new_delay_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, DELAY_MAX_NS, DELAY_SIGFIG)
        .expect("constant histogram bounds are valid")
}

/// What a worker has published; read by snapshots. Only the owning worker
/// writes, under the lock.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    /// Nanoseconds since the runtime epoch when the worker started.
    pub(crate) started: u64,
    /// Nanoseconds per state slot, accounted up to `since`.
    pub(crate) times: Box<[u64]>,
    /// Polls per class.
    pub(crate) polls: Box<[u64]>,
    /// Stalls (polls longer than the stall threshold) per class.
    pub(crate) stalls: Box<[u64]>,
    /// Nanoseconds charged per class: each finished poll's wall time less
    /// the time the kernel preempted the worker inside it. Published with
    /// `times`, so a class's charge never exceeds its polls' time in one
    /// publication.
    pub(crate) charged: Box<[u64]>,
    /// The state the worker was in at `since`.
    pub(crate) state: State,
    /// When `state` began: the end of what `times` covers.
    pub(crate) since: u64,
    /// The worker has exited: `times` is final.
    pub(crate) stopped: bool,
    /// CPU time of the worker's thread at its last sample, ns (zero where
    /// the platform has no thread clock).
    pub(crate) cpu: u64,
    /// The longest time, ns, the worker went between two looks at the
    /// reactor while it had work.
    pub(crate) io_gap_max: u64,
    /// Times the worker took tasks from a sibling stuck in one state.
    pub(crate) rescues: u64,
    /// Times the worker looked at the reactor without blocking.
    pub(crate) io_looks: u64,
    /// CPU time, ns, the worker's thread used while parked (going to
    /// sleep and waking up), estimated from the sampled parks.
    pub(crate) park_cpu: u64,
    /// Time, ns, the kernel held the worker off its core in the middle of
    /// task polls, as the preemption meter measured it; `None` without a
    /// meter (see `crate::util::preempt`).
    pub(crate) preempted_in_polls: Option<u64>,
}

impl Published {
    /// Nanoseconds per slot up to `now`, given the worker's `current`
    /// state word (see the module docs).
    pub(crate) fn times_at(&self, current: u64, now: u64) -> Box<[u64]> {
        let mut times = self.times.clone();
        if self.stopped {
            return times;
        }
        let slot = (current >> SINCE_BITS) as usize;
        let since = current & SINCE_MASK;
        if since >= self.since && slot < times.len() {
            times[self.state.slot()] += since - self.since;
            times[slot] += now.saturating_sub(since);
        } else {
            // Published after the word was read: the publication is newer.
            times[self.state.slot()] += now.saturating_sub(self.since);
        }
        times
    }

    pub(crate) fn search_ns(times: &[u64]) -> u64 {
        times[SEARCH_SLOT]
    }

    pub(crate) fn spin_ns(times: &[u64]) -> u64 {
        times[SPIN_SLOT]
    }

    pub(crate) fn parked_ns(times: &[u64]) -> u64 {
        times[PARKED_SLOT]
    }

    pub(crate) fn timers_ns(times: &[u64]) -> u64 {
        times[TIMERS_SLOT]
    }

    pub(crate) fn io_ns(times: &[u64]) -> u64 {
        times[IO_SLOT]
    }

    /// Nanoseconds polling each class, by class index.
    pub(crate) fn task_ns(times: &[u64]) -> &[u64] {
        &times[TASK_SLOT..]
    }
}

/// The queue-delay histograms of a runtime: one per class, recorded into
/// by every worker.
#[derive(Debug)]
pub(crate) struct ClassDelays {
    classes: Box<[Mutex<Histogram<u64>>]>,
}

impl ClassDelays {
    pub(crate) fn new(classes: usize) -> ClassDelays {
        ClassDelays {
            classes: (0..classes)
                .map(|_| Mutex::new(new_delay_histogram()))
                .collect(),
        }
    }

    /// A copy of `class`'s histogram.
    pub(crate) fn read(&self, class: usize) -> Histogram<u64> {
        lock(&self.classes[class]).clone()
    }

    /// Records each class's pending delays into its histogram and empties
    /// the lists; a class with none is not locked.
    pub(crate) fn record(&self, pending: &mut [Vec<u64>]) {
        for (histogram, delays) in self.classes.iter().zip(pending) {
            if delays.is_empty() {
                continue;
            }
            let mut histogram = lock(histogram);
            for delay in delays.drain(..) {
                histogram.saturating_record(delay.clamp(1, DELAY_MAX_NS));
            }
        }
    }
}

/// The shared side of one worker's accounting.
#[derive(Debug)]
pub(crate) struct WorkerMetrics {
    published: Mutex<Published>,
    /// The runtime's queue-delay histograms.
    delays: Arc<ClassDelays>,
    /// The worker's state slot (top bits) and when it began (low
    /// [`SINCE_BITS`]). Only the worker writes.
    current: AtomicU64,
}

impl WorkerMetrics {
    /// The shared side of a worker of a runtime with `classes` classes.
    pub(crate) fn new(delays: Arc<ClassDelays>, classes: usize) -> WorkerMetrics {
        WorkerMetrics {
            delays,
            published: Mutex::new(Published {
                started: 0,
                times: zeros(TASK_SLOT + classes),
                polls: zeros(classes),
                stalls: zeros(classes),
                charged: zeros(classes),
                state: State::Search,
                since: 0,
                stopped: false,
                cpu: 0,
                io_gap_max: 0,
                rescues: 0,
                io_looks: 0,
                park_cpu: 0,
                preempted_in_polls: None,
            }),
            current: AtomicU64::new(encode(State::Search, 0)),
        }
    }

    /// When the worker entered its current state, if that state is one in
    /// which it holds its queues (anything but parked).
    pub(crate) fn busy_since(&self) -> Option<u64> {
        let current = self.current.load(Relaxed);
        ((current >> SINCE_BITS) as usize != PARKED_SLOT).then_some(current & SINCE_MASK)
    }

    /// What the worker last published, and its current state word.
    pub(crate) fn read(&self) -> (Published, u64) {
        let published = lock(&self.published).clone();
        (published, self.current.load(Relaxed))
    }
}

/// `n` zeroed counters.
fn zeros(n: usize) -> Box<[u64]> {
    vec![0; n].into_boxed_slice()
}

fn encode(state: State, since: u64) -> u64 {
    ((state.slot() as u64) << SINCE_BITS) | (since & SINCE_MASK)
}

/// The worker-local side: plain counters, published now and then.
#[derive(Debug)]
pub(crate) struct Account {
    shared: Arc<WorkerMetrics>,
    times: Box<[u64]>,
    polls: Box<[u64]>,
    stalls: Box<[u64]>,
    /// See [`Published::charged`].
    charged: Box<[u64]>,
    /// Queue delays (ns) per class, not yet published.
    delays: Vec<Vec<u64>>,
    state: State,
    since: u64,
    last_publish: u64,
    last_histogram_publish: u64,
    /// The worker's awake time (ns in every state but parked) when the
    /// thread's CPU clock was last sampled; `None` before the first.
    last_cpu_sample: Option<u64>,
    /// The thread's CPU clock as last read (at a sample, or at the end of
    /// a sampled park), ns; published as `cpu`.
    last_cpu: u64,
    /// Off only for the overhead benchmark: every method returns at once.
    enabled: bool,
    /// See [`Published::io_gap_max`].
    io_gap_max: u64,
    /// See [`Published::rescues`].
    rescues: u64,
    /// See [`Published::io_looks`].
    io_looks: u64,
    /// See [`Published::preempted_in_polls`].
    preempted_in_polls: Option<u64>,
    /// The thread's CPU clock when the worker began to park, while it is
    /// parked in a sampled park.
    park_cpu_from: Option<u64>,
    /// Parks since the start.
    parks: u64,
    /// Parks timed with the thread's CPU clock, and what they cost (ns).
    sampled_parks: u64,
    sampled_park_cpu: u64,
    /// State of the generator that picks the sampled parks
    /// ([`xorshift64`]; never zero).
    park_rng: u64,
    /// One park in this many is sampled: [`PARK_SAMPLE_ONE_IN`], or one
    /// in one in the unit tests, which need to know which parks are timed.
    park_sample_one_in: u64,
    /// What one read of the thread's CPU clock costs, ns: a sampled park's
    /// window holds about one read that the parks not sampled do not pay,
    /// so it is taken off each sample.
    clock_read_ns: u64,
}

impl Account {
    /// Starts accounting at `now`, in the search state.
    pub(crate) fn start(
        shared: Arc<WorkerMetrics>,
        classes: usize,
        now: u64,
        enabled: bool,
    ) -> Account {
        {
            let mut published = lock(&shared.published);
            published.started = now;
            published.since = now;
            published.state = State::Search;
        }
        shared.current.store(encode(State::Search, now), Relaxed);
        Account {
            shared,
            times: zeros(TASK_SLOT + classes),
            polls: zeros(classes),
            stalls: zeros(classes),
            charged: zeros(classes),
            delays: vec![Vec::new(); classes],
            state: State::Search,
            since: now,
            last_publish: now,
            last_histogram_publish: now,
            last_cpu_sample: None,
            last_cpu: 0,
            enabled,
            io_gap_max: 0,
            rescues: 0,
            io_looks: 0,
            preempted_in_polls: None,
            park_cpu_from: None,
            parks: 0,
            sampled_parks: 0,
            sampled_park_cpu: 0,
            park_rng: (now ^ 0x9e37_79b9_7f4a_7c15) | 1,
            park_sample_one_in: PARK_SAMPLE_ONE_IN,
            clock_read_ns: if enabled { clock_read_ns() } else { 0 },
        }
    }

    /// Enters `state` at `now`, charging the time since the last change to
    /// the state being left.
    ///
    /// The state word is stored even with the accounting off: the
    /// scheduler's rescue reads it (see [`WorkerMetrics::busy_since`]), and
    /// switching the accounting off must not change the scheduler.
    #[inline]
    pub(crate) fn switch(&mut self, state: State, now: u64) {
        self.shared.current.store(encode(state, now), Relaxed);
        if !self.enabled {
            return;
        }
        self.times[self.state.slot()] += now.saturating_sub(self.since);
        self.state = state;
        self.since = now;
    }

    /// Enters the task state of `class` at `start` for a poll of a task
    /// that waited `delay_ns` in its queue, and counts the poll.
    #[inline]
    pub(crate) fn poll_started(&mut self, class: usize, start: u64, delay_ns: u64) {
        self.switch(State::Task(class), start);
        if !self.enabled {
            return;
        }
        self.polls[class] += 1;
        let pending = &mut self.delays[class];
        pending.push(delay_ns);
        if pending.len() >= MAX_PENDING_DELAYS {
            self.publish_delays();
        }
    }

    /// Ends the poll of `class` that [`poll_started`](Self::poll_started)
    /// began: adds `preempted` ns that the kernel held the worker off its
    /// core during it and `charged` ns charged to the class (both before
    /// the worker leaves the task state, so the publication that carries
    /// the charge carries the poll's time too), returns to the search
    /// state at `end`, and publishes if the last publication is old.
    #[inline]
    pub(crate) fn poll_ended(&mut self, class: usize, end: u64, charged: u64, preempted: u64) {
        if let Some(total) = &mut self.preempted_in_polls {
            *total += preempted;
        }
        if self.enabled {
            self.charged[class] += charged;
        }
        self.switch(State::Search, end);
        self.maybe_publish(end);
    }

    /// Records a gap of `ns` between two of the worker's looks at the
    /// reactor.
    pub(crate) fn io_gap(&mut self, ns: u64) {
        self.io_gap_max = self.io_gap_max.max(ns);
    }

    /// Says the worker measures preempted time (see
    /// [`preempted`](Self::preempted)).
    pub(crate) fn meter_preemption(&mut self) {
        self.preempted_in_polls.get_or_insert(0);
    }

    /// Counts one look at the reactor without blocking.
    pub(crate) fn io_look(&mut self) {
        self.io_looks += 1;
    }

    /// Counts one takeover of a stuck sibling's tasks.
    pub(crate) fn rescue(&mut self) {
        self.rescues += 1;
    }

    /// Counts one poll of `class` that ran past the stall threshold.
    pub(crate) fn stall(&mut self, class: usize) {
        self.stalls[class] += 1;
    }

    /// Enters the parked state at `now` and publishes. For a sampled park
    /// (see the module docs), reads the thread's CPU clock first, so that
    /// [`unparked`](Self::unparked) can charge what the thread used while
    /// parked: the publication, the system calls that put it to sleep and
    /// woke it, the kernel's switches.
    pub(crate) fn park(&mut self, now: u64) {
        self.switch(State::Parked, now);
        if !self.enabled {
            return;
        }
        self.parks += 1;
        if self.sample_this_park() {
            let cpu = thread_cpu_ns();
            self.park_cpu_from = Some(cpu);
            self.publish_sampled(now, true, Some(cpu));
        } else {
            self.publish_sampled(now, true, None);
        }
    }

    /// Back from parking (still in the parked state): adds the CPU the
    /// thread used since [`park`](Self::park), if that park is sampled.
    pub(crate) fn unparked(&mut self) {
        if let Some(from) = self.park_cpu_from.take() {
            let cpu = thread_cpu_ns();
            self.sampled_parks += 1;
            self.sampled_park_cpu += cpu.saturating_sub(from).saturating_sub(self.clock_read_ns);
            self.last_cpu = cpu;
        }
    }

    /// Whether to time the park about to begin: one in
    /// [`PARK_SAMPLE_ONE_IN`], at random.
    fn sample_this_park(&mut self) -> bool {
        xorshift64(&mut self.park_rng).is_multiple_of(self.park_sample_one_in)
    }

    /// The CPU of all parks so far, estimated from the sampled ones.
    fn park_cpu_estimate(&self) -> u64 {
        if self.sampled_parks == 0 {
            return 0;
        }
        let scaled = u128::from(self.sampled_park_cpu) * u128::from(self.parks)
            / u128::from(self.sampled_parks);
        u64::try_from(scaled).unwrap_or(u64::MAX)
    }

    /// Publishes if the last publication is older than [`PUBLISH_NS`].
    #[inline]
    pub(crate) fn maybe_publish(&mut self, now: u64) {
        if !self.enabled {
            return;
        }
        if now.saturating_sub(self.last_publish) >= PUBLISH_NS {
            let histograms =
                now.saturating_sub(self.last_histogram_publish) >= HISTOGRAM_PUBLISH_NS;
            self.publish(now, histograms);
        }
    }

    /// Closes the account at `now` (the worker exits): publishes the final
    /// counters, which stop growing.
    pub(crate) fn stop(&mut self, now: u64) {
        self.switch(State::Search, now);
        self.last_cpu_sample = None;
        self.publish(now, true);
        lock(&self.shared.published).stopped = true;
    }

    /// Publishes everything now (at exit, and every [`PUBLISH_NS`]).
    pub(crate) fn publish(&mut self, now: u64, histograms: bool) {
        self.publish_sampled(now, histograms, None);
    }

    /// [`publish`](Self::publish), with the thread's CPU clock as just read,
    /// if the caller has it.
    fn publish_sampled(&mut self, now: u64, histograms: bool, sampled: Option<u64>) {
        if !self.enabled {
            return;
        }
        // The sample is a system call: taken before the lock, so readers
        // never wait on it.
        // A sample the caller took is always published: it costs nothing
        // more, and keeps `cpu` as fresh as the park CPU, which a worker
        // that mostly parks adds to without being awake long.
        let awake = self.awake_ns();
        let cpu = match sampled {
            Some(cpu) => Some(cpu),
            None => self
                .last_cpu_sample
                .is_none_or(|at| awake.saturating_sub(at) >= CPU_SAMPLE_NS)
                .then(thread_cpu_ns),
        };
        if let Some(cpu) = cpu {
            self.last_cpu_sample = Some(awake);
            self.last_cpu = cpu;
        }
        let mut published = lock(&self.shared.published);
        published.times.copy_from_slice(&self.times);
        published.polls.copy_from_slice(&self.polls);
        published.stalls.copy_from_slice(&self.stalls);
        published.charged.copy_from_slice(&self.charged);
        published.state = self.state;
        published.since = self.since;
        published.io_gap_max = self.io_gap_max;
        published.rescues = self.rescues;
        published.io_looks = self.io_looks;
        published.preempted_in_polls = self.preempted_in_polls;
        published.cpu = self.last_cpu;
        // Where there is no thread clock, `cpu` stays zero, and so does
        // the estimate, which only that clock feeds.
        published.park_cpu = self.park_cpu_estimate().min(self.last_cpu);
        drop(published);
        if histograms {
            self.shared.delays.record(&mut self.delays);
            self.last_histogram_publish = now;
        }
        self.last_publish = now;
    }
}

impl Account {
    /// Nanoseconds the worker spent in every state but parked, up to its
    /// last state change.
    fn awake_ns(&self) -> u64 {
        let total: u64 = self.times.iter().sum();
        total - self.times[PARKED_SLOT]
    }

    /// Records the pending queue delays into the shared histograms now.
    fn publish_delays(&mut self) {
        self.shared.delays.record(&mut self.delays);
    }
}

/// What a read of the thread's CPU clock costs the calling thread, ns: the
/// least of a few back-to-back pairs.
fn clock_read_ns() -> u64 {
    (0..4)
        .map(|_| {
            let first = thread_cpu_ns();
            thread_cpu_ns().saturating_sub(first)
        })
        .min()
        .unwrap_or(0)
}

/// CPU time the kernel has charged to the calling thread, ns; zero where
/// the platform has no per-thread CPU clock (and under loom, whose threads
/// are not the OS's, and Miri, which does not emulate that clock).
pub(crate) fn thread_cpu_ns() -> u64 {
    #[cfg(all(target_os = "linux", not(loom), not(miri)))]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the whole call,
        // and CLOCK_THREAD_CPUTIME_ID is a clock Linux keeps for every
        // thread.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc == 0 {
            let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
            let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
            return secs.saturating_mul(1_000_000_000).saturating_add(nanos);
        }
        0
    }
    #[cfg(not(all(target_os = "linux", not(loom), not(miri))))]
    {
        0
    }
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// An account for one class that times every park.
    fn account_timing_every_park() -> (Arc<WorkerMetrics>, Account) {
        let shared = Arc::new(WorkerMetrics::new(Arc::new(ClassDelays::new(1)), 1));
        let mut account = Account::start(Arc::clone(&shared), 1, 0, true);
        account.park_sample_one_in = 1;
        (shared, account)
    }

    #[test]
    fn the_state_word_is_kept_with_the_accounting_off() {
        for enabled in [true, false] {
            let shared = Arc::new(WorkerMetrics::new(Arc::new(ClassDelays::new(1)), 1));
            let mut account = Account::start(Arc::clone(&shared), 1, 10, enabled);
            assert_eq!(shared.busy_since(), Some(10), "enabled {enabled}");
            account.switch(State::Task(0), 20);
            assert_eq!(shared.busy_since(), Some(20), "enabled {enabled}");
            account.park(30);
            assert_eq!(shared.busy_since(), None, "enabled {enabled}");
            account.unparked();
            account.switch(State::Search, 40);
            assert_eq!(shared.busy_since(), Some(40), "enabled {enabled}");
        }
    }

    /// A poll's charge is published with its time, never before it: a
    /// snapshot never shows a class charged more than its polls took.
    #[test]
    fn a_charge_is_published_with_the_polls_time() {
        let shared = Arc::new(WorkerMetrics::new(Arc::new(ClassDelays::new(2)), 2));
        let mut account = Account::start(Arc::clone(&shared), 2, 0, true);
        account.poll_started(1, 10, 0);
        // A 20 ns poll, 5 ns of which the kernel held the worker off.
        account.poll_ended(1, 30, 15, 5);
        let (published, _) = shared.read();
        assert_eq!(&*published.charged, &[0, 0], "nothing published yet");
        assert_eq!(Published::task_ns(&published.times), &[0, 0]);
        account.maybe_publish(30 + PUBLISH_NS);
        let (published, _) = shared.read();
        assert_eq!(&*published.charged, &[0, 15]);
        assert_eq!(Published::task_ns(&published.times), &[0, 20]);
    }

    /// Keeps this thread on a core for `cpu` of its own CPU time.
    fn compute_for(cpu: Duration) {
        let until = thread_cpu_ns() + u64::try_from(cpu.as_nanos()).unwrap();
        while thread_cpu_ns() < until {
            std::hint::spin_loop();
        }
    }

    /// Ends the sampled park under way, leaves the parked state and
    /// publishes; returns the park CPU published.
    fn wake_and_publish(shared: &WorkerMetrics, account: &mut Account) -> Duration {
        account.unparked();
        account.switch(State::Search, 2);
        account.publish(3, false);
        Duration::from_nanos(shared.read().0.park_cpu)
    }

    /// What the thread computes between a park and its wake-up is park
    /// CPU: the window is measured with the thread's clock.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "a thread CPU clock: Miri emulates no CLOCK_THREAD_CPUTIME_ID"
    )]
    fn cpu_used_inside_a_park_is_park_cpu() {
        let (shared, mut account) = account_timing_every_park();
        account.park(1);
        compute_for(Duration::from_millis(20));
        let park_cpu = wake_and_publish(&shared, &mut account);
        assert!(park_cpu >= Duration::from_millis(19), "{park_cpu:?}");
    }

    /// What the thread computes between two parks (its tasks) is not.
    ///
    /// The bounds in these tests are loose on purpose: a virtual machine
    /// whose host takes the core away inside a system call charges that
    /// time to the thread, and a window of a few microseconds has been
    /// seen to cost 10 ms that way on a busy host.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "a thread CPU clock: Miri emulates no CLOCK_THREAD_CPUTIME_ID"
    )]
    fn cpu_used_between_parks_is_not_park_cpu() {
        let (shared, mut account) = account_timing_every_park();
        for now in [1, 3] {
            account.park(now);
            account.unparked();
            account.switch(State::Search, now + 1);
            compute_for(Duration::from_millis(100));
        }
        account.publish(5, false);
        let (published, _) = shared.read();
        let park_cpu = Duration::from_nanos(published.park_cpu);
        assert!(park_cpu < Duration::from_millis(50), "{park_cpu:?}");
        assert!(
            published.cpu >= 100_000_000,
            "the thread clock saw the computing: {published:?}"
        );
    }

    /// A park's sleep is not CPU: a park CPU read from the wall clock
    /// would hold the 300 ms asleep.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "a thread CPU clock: Miri emulates no CLOCK_THREAD_CPUTIME_ID"
    )]
    fn time_asleep_in_a_park_is_not_park_cpu() {
        let (shared, mut account) = account_timing_every_park();
        account.park(1);
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(300));
        assert!(start.elapsed() >= Duration::from_millis(300));
        let park_cpu = wake_and_publish(&shared, &mut account);
        assert!(park_cpu < Duration::from_millis(100), "{park_cpu:?}");
    }

    /// The sampled parks' cost is scaled by all parks over the sampled
    /// ones.
    #[test]
    fn the_estimate_scales_the_sampled_parks_to_all() {
        let (_, mut account) = account_timing_every_park();
        account.parks = 8;
        account.sampled_parks = 2;
        account.sampled_park_cpu = 300;
        assert_eq!(account.park_cpu_estimate(), 1_200);
        account.sampled_parks = 0;
        assert_eq!(account.park_cpu_estimate(), 0);
    }

    /// An estimate beyond the thread's CPU clock is published as the
    /// clock: the parks cannot have used more than the whole thread.
    #[test]
    #[cfg_attr(
        miri,
        ignore = "a thread CPU clock: Miri emulates no CLOCK_THREAD_CPUTIME_ID"
    )]
    fn the_published_estimate_never_exceeds_the_thread_clock() {
        let (shared, mut account) = account_timing_every_park();
        account.parks = 1_000;
        account.sampled_parks = 1;
        account.sampled_park_cpu = 3_600_000_000_000;
        account.publish(1, false);
        let (published, _) = shared.read();
        assert!(published.cpu > 0, "{published:?}");
        assert_eq!(published.park_cpu, published.cpu);
    }
}
