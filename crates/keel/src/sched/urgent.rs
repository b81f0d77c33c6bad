//! The urgent lane: a thread the OS schedules ahead of the workers, which
//! serves the urgent class's tasks and IO (opt in with
//! [`Builder::urgent_lane`](crate::Builder::urgent_lane)).
//!
//! # Why
//!
//! The class shares decide which task a *worker* runs next. They can do
//! nothing while no worker is on a core: on a machine where the runtime
//! shares its cores with other processes (its clients, a backend, other
//! services), the kernel gives each runnable thread time slices of
//! milliseconds, and an admin request that arrives while every worker
//! waits for a core waits with them, whatever its class. The lane moves
//! the urgent class out of that queue: its tasks run on a thread of its
//! own that the kernel runs first, either because it has a real-time
//! priority (`SCHED_FIFO`, when the process may set one) or because the
//! workers lowered their own (a higher nice value, which any thread may
//! take).
//!
//! # What runs where
//!
//! - A task of [`Class::URGENT`] is queued on the lane, never on a
//!   worker, and the lane thread polls it.
//! - A socket created while an urgent task is polled (or inside
//!   [`context::with_class`](crate::runtime::context) for the urgent
//!   class, as the admin endpoint binds its listener) registers with the
//!   lane's own reactor, which the lane thread blocks in when it has
//!   nothing to run: a readiness event wakes the lane thread directly,
//!   with no worker in the path.
//! - Everything else (other classes, timers, blocking work) stays with the
//!   workers; an urgent task's timer is fired by a worker and the wake
//!   queues the task on the lane.
//!
//! # Bounded by its share
//!
//! A thread the kernel always runs first could take a core from the
//! workers for good. The lane therefore has a budget: in every window of
//! [`BUDGET_WINDOW_NS`] it may run tasks for the urgent class's share of
//! the workers' time (its shares over all shares, times the number of
//! workers, times the window). Past that it stops polling until the window
//! ends, and the time is counted as throttled. The budget is kept by
//! [`LaneBudget`], driven by the lane's clock and tested on its own.
//!
//! # Protocol
//!
//! A pusher queues the task, issues a `SeqCst` fence and reads `asleep`;
//! the lane thread sets `asleep`, issues a `SeqCst` fence and reads the
//! queue before it blocks. Either the lane sees the task, or the pusher
//! sees `asleep` and writes the lane reactor's eventfd, which makes the
//! blocking poll return.

use std::io;
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use crate::io::reactor::Reactor;
use crate::loom::deque::{Injector, Steal};
use crate::loom::lock;
use crate::loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use crate::loom::sync::Mutex;
use crate::runtime::context;
use crate::task::Runnable;
use crate::{Class, Handle};

use super::Shared;

/// The budget's window (10 ms): short enough that a lane that runs away
/// holds a core for at most a few milliseconds before it is throttled,
/// long enough that the bursts of a control plane (a request of some
/// hundred microseconds) fit it many times over.
pub(crate) const BUDGET_WINDOW_NS: u64 = 10_000_000;

/// Urgent tasks polled between two non-blocking looks at the lane's
/// reactor while the lane has work.
const POLLS_PER_IO: u32 = 16;

/// Queue delays the lane gathers before it records them into the urgent
/// class's histogram (it also records them before it sleeps).
const PENDING_DELAYS: usize = 256;

/// How the urgent lane gets ahead of the workers; see
/// [`UrgentLane::priority`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LanePriority {
    /// The lane thread runs under `SCHED_FIFO` at this priority (1 to 99):
    /// the kernel runs it as soon as it is runnable, ahead of every
    /// ordinary thread. Needs `CAP_SYS_NICE` or an `RLIMIT_RTPRIO` of at
    /// least the priority; when refused, the lane falls back to
    /// [`LanePriority::NiceWorkers`] with [`DEFAULT_WORKER_NICE`] and says
    /// so in [`LaneStats::priority`](crate::stats::LaneStats::priority).
    RealTime(u8),
    /// The workers raise their own nice value by this much (1 to 19),
    /// which any thread may do: the kernel then gives the lane, at the
    /// process's nice value, a larger weight than each worker, so it runs
    /// first when it wakes and keeps more of the core while it runs.
    NiceWorkers(u8),
}

/// The nice steps the workers take when a real-time lane is refused (5:
/// the lane then weighs about three times a worker in the kernel's fair
/// scheduler).
pub const DEFAULT_WORKER_NICE: u8 = 5;

/// The urgent lane's configuration; see
/// [`Builder::urgent_lane`](crate::Builder::urgent_lane).
#[derive(Debug, Clone)]
pub struct UrgentLane {
    priority: LanePriority,
}

impl Default for UrgentLane {
    fn default() -> Self {
        UrgentLane::new()
    }
}

impl UrgentLane {
    /// A lane at real-time priority 1 ([`LanePriority::RealTime`]), the
    /// lowest real-time priority: ahead of every ordinary thread, behind
    /// any other real-time one.
    pub fn new() -> UrgentLane {
        UrgentLane {
            priority: LanePriority::RealTime(1),
        }
    }

    /// How the lane gets ahead of the workers. Default
    /// [`LanePriority::RealTime(1)`](LanePriority::RealTime).
    pub fn priority(mut self, priority: LanePriority) -> UrgentLane {
        self.priority = priority;
        self
    }

    pub(crate) fn validate(&self) -> io::Result<()> {
        let ok = match self.priority {
            LanePriority::RealTime(p) => (1..=99).contains(&p),
            LanePriority::NiceWorkers(n) => (1..=19).contains(&n),
        };
        if ok {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "urgent lane priority {:?} is out of range (real-time 1 to 99, worker nice 1 to 19)",
                    self.priority
                ),
            ))
        }
    }
}

/// The lane's budget: how much it may run per window (see the module
/// docs). Pure: every method takes the time.
#[derive(Debug, Clone)]
pub(crate) struct LaneBudget {
    /// Nanoseconds of polling allowed per window.
    allowed: u64,
    window_start: u64,
    used: u64,
}

impl LaneBudget {
    /// A budget of `allowed` ns per window, starting at `now`.
    pub(crate) fn new(allowed: u64, now: u64) -> LaneBudget {
        LaneBudget {
            allowed,
            window_start: now,
            used: 0,
        }
    }

    /// The budget of the urgent class: its `shares` of `total_shares`, on
    /// `workers` workers, per window.
    pub(crate) fn for_share(shares: u64, total_shares: u64, workers: usize, now: u64) -> Self {
        let allowed = u128::from(BUDGET_WINDOW_NS) * u128::from(shares) * workers as u128
            / u128::from(total_shares.max(1));
        LaneBudget::new(
            u64::try_from(allowed)
                .unwrap_or(u64::MAX)
                .min(BUDGET_WINDOW_NS),
            now,
        )
    }

    fn roll(&mut self, now: u64) {
        if now.saturating_sub(self.window_start) >= BUDGET_WINDOW_NS {
            // Windows are aligned to the first, so a lane that polls
            // rarely does not get a fresh window at every poll.
            let elapsed = now - self.window_start;
            self.window_start += elapsed - elapsed % BUDGET_WINDOW_NS;
            self.used = 0;
        }
    }

    /// Counts `ns` of polling that ended at `now`.
    pub(crate) fn spend(&mut self, ns: u64, now: u64) {
        self.roll(now);
        self.used = self.used.saturating_add(ns);
    }

    /// Until when the lane must stop polling, if it has spent its budget.
    pub(crate) fn throttled_until(&mut self, now: u64) -> Option<u64> {
        self.roll(now);
        (self.used >= self.allowed).then_some(self.window_start + BUDGET_WINDOW_NS)
    }
}

/// What the lane shares with everyone who queues its tasks.
pub(crate) struct Lane {
    queue: Injector<Runnable>,
    /// The urgent class's sockets; only the lane thread polls it.
    pub(crate) reactor: Reactor,
    /// Set while the lane thread is about to block or blocked in its
    /// reactor (see the module docs).
    asleep: AtomicBool,
    /// The nice steps the workers take: `Some` when they lower their own
    /// priority (configured, or a real-time lane was refused).
    worker_nice: Mutex<Option<u8>>,
    /// What the lane achieved, for the stats.
    report: Mutex<String>,
    polls: AtomicU64,
    busy_ns: AtomicU64,
    charged_ns: AtomicU64,
    throttled: AtomicU64,
    /// The lane thread's CPU clock, readable from any thread (the
    /// accounting's windows add it to the workers').
    cpu: crate::stats::thread_cpu::ThreadCpuClocks,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("asleep", &self.asleep)
            .finish_non_exhaustive()
    }
}

impl Lane {
    pub(crate) fn new(backend: crate::io::IoBackend) -> io::Result<Lane> {
        Ok(Lane {
            queue: Injector::new(),
            // The lane's one thread: one ring.
            reactor: Reactor::new(backend, 1, false)?,
            asleep: AtomicBool::new(false),
            worker_nice: Mutex::new(None),
            report: Mutex::new(String::from("starting")),
            polls: AtomicU64::new(0),
            busy_ns: AtomicU64::new(0),
            charged_ns: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            cpu: crate::stats::thread_cpu::ThreadCpuClocks::default(),
        })
    }

    /// Whether `class`'s tasks run on the lane.
    pub(crate) fn serves(class: usize) -> bool {
        class == Class::URGENT.index()
    }

    /// Queues `runnable` and wakes the lane thread if it sleeps.
    pub(crate) fn push(&self, runnable: Runnable) {
        self.queue.push(runnable);
        // Orders the push before the read of `asleep` (the pusher's half
        // of the protocol in the module docs).
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) {
            self.reactor.wake(0);
        }
    }

    /// Takes a queued task (for the lane thread and the shutdown drain).
    pub(crate) fn pop(&self) -> Option<Runnable> {
        loop {
            match self.queue.steal() {
                Steal::Success(runnable) => return Some(runnable),
                Steal::Empty => return None,
                Steal::Retry => {}
            }
        }
    }

    /// Wakes the lane thread (to see that the runtime stops).
    pub(crate) fn wake(&self) {
        self.reactor.wake(0);
    }

    /// The nice steps each worker takes at start, if any.
    pub(crate) fn worker_nice(&self) -> Option<u8> {
        *lock(&self.worker_nice)
    }

    /// Records how the lane got ahead (or did not); called once, before
    /// the workers start.
    pub(crate) fn settle_priority(&self, priority: LanePriority, applied: Result<(), io::Error>) {
        let (nice, report) = match (priority, applied) {
            (LanePriority::RealTime(p), Ok(())) => (None, format!("fifo:{p}")),
            (LanePriority::RealTime(p), Err(error)) => {
                tracing::warn!(
                    %error,
                    "the urgent lane may not run at real-time priority {p}; the workers lower their own priority instead (nice +{DEFAULT_WORKER_NICE})"
                );
                (
                    Some(DEFAULT_WORKER_NICE),
                    format!("workers nice +{DEFAULT_WORKER_NICE} (fifo:{p} refused: {error})"),
                )
            }
            (LanePriority::NiceWorkers(n), _) => (Some(n), format!("workers nice +{n}")),
        };
        *lock(&self.worker_nice) = nice;
        *lock(&self.report) = report;
    }

    /// The lane's figures for [`Stats`](crate::stats::Stats).
    pub(crate) fn stats(&self) -> crate::stats::LaneStats {
        // The charge is read first: `busy` then covers at least the polls
        // it counts (see the Release in the lane's loop).
        let charged = Duration::from_nanos(self.charged_ns.load(Ordering::Acquire));
        crate::stats::LaneStats {
            priority: lock(&self.report).clone(),
            polls: self.polls.load(Ordering::Relaxed),
            busy: Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed)),
            charged,
            throttled: self.throttled.load(Ordering::Relaxed),
            cpu: self.cpu.total(),
        }
    }
}

/// Puts the calling thread under `SCHED_FIFO` at `priority`.
#[cfg(not(miri))]
fn set_real_time(priority: u8) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::from(priority),
    };
    // SAFETY: `param` is a valid sched_param for the call to read; pid 0
    // is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Under Miri, which emulates no scheduling policy: refused, so the lane
/// takes the path of a kernel that refuses it.
#[cfg(miri)]
fn set_real_time(_priority: u8) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "Miri emulates no scheduling policy",
    ))
}

/// Raises the calling thread's nice value by `steps` (always permitted).
/// Not under loom, whose threads share one OS thread, nor Miri, which
/// emulates no priorities.
#[cfg(any(loom, miri))]
pub(crate) fn lower_own_priority(_steps: u8) {}

/// Raises the calling thread's nice value by `steps` (always permitted).
#[cfg(not(any(loom, miri)))]
pub(crate) fn lower_own_priority(steps: u8) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    // SAFETY: getpriority/setpriority on the calling thread's id; errno is
    // cleared first because -1 is a valid nice value.
    unsafe {
        *libc::__errno_location() = 0;
        let current = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        let current = if current == -1 && *libc::__errno_location() != 0 {
            0
        } else {
            current
        };
        let _ = libc::setpriority(
            libc::PRIO_PROCESS,
            tid as libc::id_t,
            (current + i32::from(steps)).min(19),
        );
    }
}

/// The body of the lane thread. `ready` is told once the priority is
/// settled and the lane's preemption meter is open, before any task runs.
pub(crate) fn run_lane(shared: Arc<Shared>, ready: std::sync::mpsc::Sender<()>) {
    let lane = shared.lane.as_ref().expect("a lane thread has a lane");
    let priority = shared
        .config
        .urgent_lane
        .as_ref()
        .expect("a lane thread has a lane's configuration")
        .priority;
    let applied = match priority {
        LanePriority::RealTime(p) => set_real_time(p),
        LanePriority::NiceWorkers(_) => Ok(()),
    };
    lane.settle_priority(priority, applied);
    lane.cpu.register_current();
    // Unregistered however the thread ends, its CPU kept.
    struct Unregister<'a>(&'a Lane);
    impl Drop for Unregister<'_> {
        fn drop(&mut self) {
            self.0.cpu.unregister_current();
        }
    }
    let _unregister = Unregister(lane);
    let mut meter = super::poll::open_meter(&shared);
    let _ = ready.send(());
    let _enter = context::enter(Handle {
        shared: shared.clone(),
    });
    let _tokio = shared.enter_tokio();
    context::set_lane();
    let config = &shared.config;
    let total_shares: u64 = config.classes.iter().map(|c| u64::from(c.shares)).sum();
    let urgent_shares = u64::from(config.classes[Class::URGENT.index()].shares);
    let mut budget = LaneBudget::for_share(
        urgent_shares,
        total_shares,
        config.workers,
        shared.clock.now(),
    );
    let mut woken: Vec<Waker> = Vec::new();
    let mut polls_since_io = 0u32;
    // Queue delays per class (only the urgent one fills), as the workers
    // keep them, recorded in batches.
    let mut delays: Vec<Vec<u64>> = vec![Vec::new(); config.classes.len()];
    let mut throttled_until = 0;
    while !shared.is_stopping() {
        let now = shared.clock.now();
        if let Some(until) = budget.throttled_until(now) {
            if until != throttled_until {
                throttled_until = until;
                lane.throttled.fetch_add(1, Ordering::Relaxed);
            }
            // Waits out the window; IO that arrives meanwhile only queues
            // tasks, which run once the window is over.
            poll_reactor(lane, Some(Duration::from_nanos(until - now)), &mut woken);
            continue;
        }
        if polls_since_io >= POLLS_PER_IO {
            polls_since_io = 0;
            poll_reactor(lane, Some(Duration::ZERO), &mut woken);
        }
        let Some(runnable) = lane.pop() else {
            polls_since_io = 0;
            shared.delays.record(&mut delays);
            lane.asleep.store(true, Ordering::Relaxed);
            // Orders `asleep` before the look at the queue (the lane's half
            // of the protocol in the module docs).
            fence(Ordering::SeqCst);
            let timeout = if lane.queue.is_empty() && !shared.is_stopping() {
                None
            } else {
                Some(Duration::ZERO)
            };
            poll_reactor(lane, timeout, &mut woken);
            lane.asleep.store(false, Ordering::Relaxed);
            continue;
        };
        polls_since_io += 1;
        let start = shared.clock.now();
        if config.accounting {
            let urgent = &mut delays[Class::URGENT.index()];
            let at = runnable.metadata().scheduled_at.load(Ordering::Relaxed);
            urgent.push(start.saturating_sub(at));
            if urgent.len() >= PENDING_DELAYS {
                shared.delays.record(&mut delays);
            }
        }
        super::poll::run_poll(&shared, &mut meter, runnable, Class::URGENT, start);
        let end = shared.clock.now();
        let took = end.saturating_sub(start);
        let preempted = super::poll::preempted_in(&mut meter, took);
        let charged = took - preempted;
        budget.spend(charged, end);
        shared.clocks.charge(Class::URGENT.index(), charged);
        lane.polls.fetch_add(1, Ordering::Relaxed);
        lane.busy_ns.fetch_add(took, Ordering::Relaxed);
        // Release, paired with the Acquire in `stats`: a reader that sees
        // this charge sees the poll's busy time too.
        lane.charged_ns.fetch_add(charged, Ordering::Release);
    }
}

/// Polls the lane's reactor for up to `timeout` and wakes the tasks of its
/// events.
fn poll_reactor(lane: &Lane, timeout: Option<Duration>, woken: &mut Vec<Waker>) {
    // Only the lane thread polls this reactor: the poller is always free.
    if let Some(mut poller) = lane.reactor.try_poller(0) {
        lane.reactor.poll(&mut poller, 0, timeout, woken);
    }
    for waker in woken.drain(..) {
        waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_budget_is_the_urgent_share_of_the_workers() {
        // 16 of 99 shares on 2 workers: 3.23 ms of each 10 ms window.
        let mut budget = LaneBudget::for_share(16, 99, 2, 0);
        budget.spend(3 * MS, 3 * MS);
        assert_eq!(budget.throttled_until(3 * MS), None);
        budget.spend(MS / 4, 4 * MS);
        assert_eq!(budget.throttled_until(4 * MS), Some(10 * MS));
    }

    #[test]
    fn a_new_window_restores_the_budget() {
        let mut budget = LaneBudget::new(MS, 0);
        budget.spend(2 * MS, 2 * MS);
        assert_eq!(budget.throttled_until(9 * MS), Some(10 * MS));
        assert_eq!(budget.throttled_until(10 * MS), None);
        // Windows stay aligned to the first one.
        budget.spend(2 * MS, 25 * MS);
        assert_eq!(budget.throttled_until(25 * MS), Some(30 * MS));
    }

    #[test]
    fn the_budget_never_exceeds_the_window() {
        // A class with every share on many workers still leaves the lane
        // one thread: at most the whole window.
        let budget = LaneBudget::for_share(100, 100, 8, 0);
        assert_eq!(budget.allowed, BUDGET_WINDOW_NS);
    }

    #[test]
    fn priorities_out_of_range_are_refused() {
        for bad in [LanePriority::RealTime(0), LanePriority::RealTime(100)] {
            assert!(UrgentLane::new().priority(bad).validate().is_err());
        }
        for bad in [LanePriority::NiceWorkers(0), LanePriority::NiceWorkers(20)] {
            assert!(UrgentLane::new().priority(bad).validate().is_err());
        }
        assert!(UrgentLane::new().validate().is_ok());
    }

    #[test]
    fn a_refused_real_time_priority_falls_back_to_nicer_workers_and_says_so() {
        let lane = Lane::new(crate::io::IoBackend::Epoll).unwrap();
        lane.settle_priority(
            LanePriority::RealTime(3),
            Err(io::Error::from_raw_os_error(libc::EPERM)),
        );
        assert_eq!(lane.worker_nice(), Some(DEFAULT_WORKER_NICE));
        let report = lane.stats().priority;
        assert!(report.contains("fifo:3 refused"), "{report}");

        let lane = Lane::new(crate::io::IoBackend::Epoll).unwrap();
        lane.settle_priority(LanePriority::RealTime(3), Ok(()));
        assert_eq!(lane.worker_nice(), None);
        assert_eq!(lane.stats().priority, "fifo:3");
    }
}
