//! The worker loop.
//!
//! Each worker thread runs [`Worker::run`]. One iteration, in order:
//!
//! 1. **Stop?** If the runtime is stopping, publish the accounts and exit.
//! 2. **Pick.** Order the classes by virtual time (the shared clock plus
//!    this worker's unflushed charge) and take the first class that has a
//!    task: in this worker's LIFO slot, its events lane, the class injector
//!    (tried first every [`INJECTOR_INTERVAL`] picks and after a task
//!    yielded, so tasks woken from outside are not starved by a busy local
//!    deque) or its yields lane (tried first after
//!    [`EVENT_STREAK`](super::lanes::EVENT_STREAK) picks from elsewhere, see
//!    [`lanes`](super::lanes)); failing that, and every
//!    [`STEAL_CHECK_NS`], in a sibling's lanes (steal half).
//!    Before all that, every [`RESCUE_CHECK_NS`], from a sibling that has
//!    not changed state for [`STUCK_NS`]: it is preempted or blocked, and
//!    its queue would wait for it (see `Worker::rescue`). Which of these
//!    a pick does is decided by the [`policy`](super::policy), which sees
//!    no queue; the worker carries its plan out.
//!    Classes found empty on the way are pulled up to the picked class's
//!    virtual time if they lag (see [`class`](super::class)). When the
//!    plan would have no duty and no class ahead of the LIFO slot's task
//!    has queued work, the pick takes that task without making one (see
//!    `Worker::pick_lifo`): the hand-off of a message is what the slot is
//!    for, and a plan costs a fifth of it. Whether a class ahead has
//!    queued work is looked at every [`AHEAD_CHECK_NS`], not at every
//!    hand-off (see the [`policy`](super::policy)).
//! 3. **Run.** Poll the task once (or drop it if it was aborted), with
//!    panics contained and a fresh coop budget (see
//!    [`coop`](crate::task::coop); the poll itself is `sched::poll`'s,
//!    shared with the urgent lane). Charge the elapsed time, less what the
//!    kernel preempted the worker inside the poll, to its class:
//!    locally, and to the shared clock when the charge window of
//!    [`CHARGE_WINDOW_NS`] ends. Account the poll and the task's queue
//!    delay. A poll that follows the last one with only a pick between
//!    them starts at that one's end (one clock read a poll instead of
//!    two); anything more in between (IO, timers, a wake of a sibling, a
//!    stall report, a search) makes the next poll read the clock at its
//!    start.
//! 4. **IO and timers.** If the runtime's `io_interval` has passed since
//!    this worker last polled the reactor, or it ran `io_every` polls since
//!    then, or (with a ring per worker) a glance at its ring shows events
//!    waiting, poll the reactor without blocking (unless a parked worker is
//!    blocked in it) and queue the tasks it wakes in their events lanes.
//!    The glance reads memory the kernel shares with the process, so on
//!    the ring an event is seen at the first poll boundary after it; on
//!    epoll only a system call can tell, so the interval and count rule.
//!    The interval is per worker, not per runtime, so that every poll
//!    boundary of a long poll (a CPU slice) is a chance to see IO: with a
//!    shared interval, a second worker's boundary that falls soon after the
//!    first's would be skipped, and a socket would wait for a whole slice
//!    more. Fire due timers if the earliest one may be due. Go to 1.
//! 5. **Search, spin.** Nothing was found: poll the reactor without
//!    blocking if this worker has not for `io_interval`, then become a
//!    searcher (notifiers then leave the next wake to us). Spin for the
//!    policy's duration, watching every queue; if work appears, go to 1.
//! 6. **Park.** Flush charges and publish the accounts, register as parked,
//!    re-check the queues if we were the last searcher (see
//!    [`idle`](super::idle)). Then sleep until notified: blocked in
//!    `epoll_wait` if no other worker is (see [`crate::io`]), on the
//!    parker otherwise, looking every [`REACTOR_CHECK_NS`] whether the
//!    reactor was left without a blocker (with a ring per worker, each
//!    worker in its own ring, looking as often at the rings of the
//!    workers that run), or untimed once those looks have found nothing
//!    changed for a while (see [`doze`](super::doze)); and until the
//!    earliest timer if no other parked worker watches it (see
//!    [`time`](crate::time)).
//!    Whatever wakes the worker, it leaves the sleepers, wakes the tasks of
//!    IO events, fires due timers and goes to 1.
//!
//! Every transition switches the accounting state at a timestamp the step
//! takes anyway. The accounting reads the clock itself only to stamp a
//! task woken by another task or from outside the workers: a task that
//! yields is stamped with the end of its poll, and the tasks of a reactor
//! poll or of fired timers with the time the worker read before it.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use super::class::CHARGE_WINDOW_NS;
use super::doze::Quiet;
use super::lanes::Lane;
use super::policy::{PickPolicy, Plan, Source};
#[cfg(doc)]
use super::policy::{AHEAD_CHECK_NS, INJECTOR_INTERVAL, RESCUE_CHECK_NS, STEAL_CHECK_NS, STUCK_NS};
use super::{Deques, Local, Shared, Watch, MAX_CLASSES};
use crate::loom::lock;
use crate::loom::sync::atomic::{fence, Ordering};
use crate::runtime::context;
use crate::stats::account::{Account, State};
use crate::task::{Runnable, TaskId};
use crate::time::driver::{tick_start, TimerWake, NEVER};
use crate::util::preempt::PreemptMeter;
use crate::util::rng::xorshift64;
use crate::Class;
use crate::Handle;

/// Spin-loop hints between two looks at the queues while spinning: about a
/// microsecond, short next to any spin policy, long enough that the looks
/// do not flood the queues' cache lines.
const SPINS_PER_CHECK: u32 = 128;

/// How long a parked worker that is not blocked in the reactor sleeps
/// before it looks whether the reactor needs a new blocker (5 ms).
///
/// The worker blocked in the reactor leaves it to run the tasks of the
/// events it saw; if one of them polls for long while every other worker
/// sleeps, nobody would poll for IO although workers are idle. Waking the
/// sleepers to take over at once costs a thread wake per event, and on a
/// small machine the woken worker takes the core a client needs (measured:
/// S1's idle latency tripled). A sleeper that wakes every 5 ms costs some
/// 200 wake-ups a second and bounds that wait to 5 ms; on a runtime that
/// has been idle for 100 ms it dozes instead, and an alarm set by the
/// first blocker to leave its poll wakes it 5 ms later (see
/// [`doze`](super::doze)).
const REACTOR_CHECK_NS: u64 = 5_000_000;

/// The body of worker thread `index`. `started` is told once the worker
/// holds everything it opens for itself (its preemption meter), so that
/// a runtime is whole when `Builder::build` returns.
pub(crate) fn run_worker(
    shared: Arc<Shared>,
    index: usize,
    queues: Deques,
    started: Option<std::sync::mpsc::Sender<()>>,
) {
    let local = Rc::new(Local {
        shared: shared.clone(),
        index,
        queues,
        lifo: Cell::new(None),
        yielded: Cell::new(false),
        dispatching: Cell::new(None),
        dispatch_lane: Cell::new(Lane::Events),
        dispatch_surplus: Cell::new(false),
        yielded_task: Cell::new(None),
        lifo_unstamped: Cell::new(false),
        in_tokio_park: Cell::new(false),
    });
    let _enter = context::enter(Handle {
        shared: shared.clone(),
    });
    let tokio = shared.clone();
    let _tokio = tokio.enter_tokio();
    context::set_local(Some(local.clone()));
    if let Some(steps) = shared.lane.as_ref().and_then(|lane| lane.worker_nice()) {
        super::urgent::lower_own_priority(steps);
    }
    let now = shared.clock.now();
    let classes = shared.config.classes.len();
    let mut account = Account::start(
        shared.metrics[index].clone(),
        classes,
        now,
        shared.config.accounting,
    );
    let meter = super::poll::open_meter(&shared);
    if meter.is_some() {
        account.meter_preemption();
    }
    if let Some(started) = started {
        let _ = started.send(());
    }
    // Rescues need a sibling (see `Worker::rescue`).
    let rescues = shared.config.workers > 1;
    #[cfg(feature = "tokio-context")]
    let tokio = shared
        .tokio
        .as_ref()
        .and_then(crate::runtime::tokio_side::TokioSide::on_worker);
    let mut worker = Worker {
        #[cfg(feature = "tokio-context")]
        tokio,
        shared,
        local,
        index,
        account,
        meter,
        pending: [0; MAX_CLASSES],
        window_start: now,
        searching: false,
        policy: PickPolicy::new(now, rescues),
        polls_since_io: 0,
        last_io: now,
        woken: Vec::new(),
        last_now: now,
        chained: false,
        rng: 0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1),
    };
    worker.run();
    // Leave the slot's task where shutdown will find it, or drop it if the
    // drain has begun (a task of this worker dropped the runtime).
    if let Some(runnable) = worker.local.lifo.take() {
        worker.local.queues[runnable.metadata().class.index()].push(runnable, Lane::Events);
    }
    worker.shared.drop_if_draining(&worker.local.queues);
    context::set_local(None);
}

struct Worker {
    /// The tokio side, when it runs on the workers (see
    /// `runtime::tokio_side`).
    #[cfg(feature = "tokio-context")]
    tokio: Option<crate::runtime::tokio_side::OnWorker>,
    shared: Arc<Shared>,
    local: Rc<Local>,
    index: usize,
    account: Account,
    /// Measures the time the kernel preempts this worker inside a poll,
    /// which its class is not charged (see [`class`](super::class));
    /// `None` where the kernel refuses it or `charge_on_cpu` is off.
    meter: Option<PreemptMeter>,
    /// The virtual time each class's polls cost in the current charge
    /// window (converted per poll, so a pick adds without dividing).
    pending: [u64; MAX_CLASSES],
    /// When the current charge window began.
    window_start: u64,
    /// Whether this worker is counted as searching in `Idle`.
    searching: bool,
    /// Decides where each pick looks (see [`policy`](super::policy)).
    policy: PickPolicy,
    /// Task polls since this worker last polled the reactor.
    polls_since_io: u32,
    /// When this worker last polled the reactor (or woke from blocking in
    /// it).
    last_io: u64,
    /// Wakers collected from a reactor poll, woken once it is released.
    woken: Vec<Waker>,
    /// The latest time this worker read (the end of its last poll).
    last_now: u64,
    /// Whether the worker has done nothing since the poll that ended at
    /// `last_now` but its bookkeeping and a pick: the next poll then
    /// starts at `last_now` instead of a clock read of its own (see
    /// `run_task`).
    chained: bool,
    rng: u64,
}

impl Worker {
    fn run(&mut self) {
        while !self.shared.is_stopping() {
            if let Some(runnable) = self.pick() {
                self.leave_searching();
                self.run_task(runnable);
                continue;
            }
            self.chained = false;
            // Out of tasks: IO may have work, if it was not looked at
            // lately. (Not every time: a worker that runs dry between the
            // hops of a message exchange would pay a system call per hop;
            // a spinning worker finds the rest when it parks.)
            let now = self.shared.clock.now();
            if self.io_interval_passed(now) && self.poll_io(Some(now)) {
                continue;
            }
            self.enter_searching();
            if self.spin() {
                continue;
            }
            self.park();
        }
        let now = self.shared.clock.now();
        self.flush_charges(now);
        self.account.stop(now);
    }

    /// Step 2: the next task, from the class with the least virtual time
    /// that has one.
    ///
    /// Two passes keep the common case cheap. The first looks only where
    /// looking costs no fence: the LIFO slot, this worker's deques and the
    /// injectors. The second steals from siblings, and only there; it runs
    /// when the first found nothing (so what the first just looked at is
    /// not looked at twice). Every [`STEAL_CHECK_NS`] one pass looks at
    /// both, class by class, so that work of a class that is owed time but
    /// queued on a busy sibling is taken here too, which keeps the split
    /// global rather than per worker.
    fn pick(&mut self) -> Option<Runnable> {
        if self.local.lifo_unstamped.get() {
            // Woken into the slot outside a task's poll (a destructor
            // run by the worker, say): stamped now.
            self.stamp_lifo(self.shared.clock.now());
        }
        let mut looked = None;
        if let Some(runnable) = self.pick_lifo(&mut looked) {
            return Some(runnable);
        }
        let classes = self.shared.clocks.len();
        let vtime = looked.unwrap_or_else(|| self.vtimes());
        let yielded = self.local.yielded.take();
        let plan = self.policy.plan(&vtime[..classes], yielded, self.last_now);
        if plan.flush_lifo {
            if let Some(runnable) = self.local.lifo.take() {
                self.local.queues[runnable.metadata().class.index()].push(runnable, Lane::Events);
            }
        }
        if plan.rescue {
            if let Some(runnable) = self.rescue(plan.order()) {
                // A rescued task waited for an event: it ends both streaks.
                self.policy.picked(Source::Other, false);
                return Some(runnable);
            }
        }
        // With siblings first, one pass looks everywhere; otherwise the
        // first looks here, and the second, once nothing was found here,
        // at the siblings alone (a worker without one has no second).
        let passes: &[Look] = if self.shared.config.workers == 1 {
            &[Look::Here]
        } else if plan.steal_first {
            &[Look::Everywhere]
        } else {
            &[Look::Here, Look::Siblings]
        };
        for &look in passes {
            // The first sibling to steal from; drawn only when stealing.
            let start = if look == Look::Here {
                0
            } else {
                self.next_random() as usize
            };
            for (rank, &class) in plan.order().iter().enumerate() {
                let Some((runnable, source)) = self.find(class, &plan, look, start) else {
                    continue;
                };
                let yields_waiting = !self.local.queues[class].yields.is_empty();
                self.policy.picked(source, yields_waiting);
                // Classes ranked before the one picked had nothing here.
                for &idle in &plan.order()[..rank] {
                    self.shared.clocks.pull_up(idle, vtime[class]);
                }
                return Some(runnable);
            }
        }
        None
    }

    /// Each class's virtual time as this worker sees it: the shared clock
    /// plus this worker's unflushed charge (`u64::MAX` past the last
    /// class).
    #[inline(always)]
    fn vtimes(&self) -> [u64; MAX_CLASSES] {
        let clocks = &self.shared.clocks;
        let mut vtime = [u64::MAX; MAX_CLASSES];
        for (class, slot) in vtime.iter_mut().enumerate().take(clocks.len()) {
            *slot = clocks.vtime(class) + self.pending[class];
        }
        vtime
    }

    /// The short way of a pick: the LIFO slot's task, when the policy has
    /// no duty due (see `PickPolicy::lifo_without_plan`; the slot's streak
    /// counts only while other tasks of its class are queued, the
    /// injector's turn only while an injector holds a task) and, when a
    /// look ahead is due (every [`AHEAD_CHECK_NS`]), no class ahead of the
    /// task's in the order of virtual time (ties by index, as a plan
    /// orders them) has work in this worker's lanes or its injector. With
    /// a look, a plan would pick the same task: it tries the classes in
    /// that order, and with no duty due it looks at the slot first and at
    /// siblings only once local work ran out. Between looks, the slot's
    /// task may go ahead of a class that queued work since the last one.
    /// A look leaves the virtual times it read in `looked`, for the plan
    /// of a pick that does not take the slot.
    fn pick_lifo(&mut self, looked: &mut Option<[u64; MAX_CLASSES]>) -> Option<Runnable> {
        let runnable = self.local.lifo.take()?;
        let class = runnable.metadata().class.index();
        let look = self.policy.ahead_look_due(self.last_now).then(|| {
            let vtime = *looked.insert(self.vtimes());
            let ahead = classes_ahead(&vtime[..self.shared.clocks.len()], class);
            (vtime[class], ahead)
        });
        let clear =
            look.is_none_or(|(_, ahead)| ahead_iter(ahead).all(|k| !queued_work(&self.local, k)));
        if !clear
            || !self.policy.lifo_without_plan(
                self.local.yielded.get(),
                self.last_now,
                || queued_work(&self.local, class),
                || self.shared.injectors.iter().any(|i| !i.is_empty()),
            )
        {
            self.local.lifo.set(Some(runnable));
            return None;
        }
        if let Some((floor, ahead)) = look {
            for k in ahead_iter(ahead) {
                self.shared.clocks.pull_up(k, floor);
            }
            self.policy.ahead_looked(self.last_now);
        }
        let yields_waiting = !self.local.queues[class].yields.is_empty();
        self.policy.picked(Source::Lifo, yields_waiting);
        Some(runnable)
    }

    /// A task from a sibling that has held its queues without changing
    /// state for [`STUCK_NS`], taken ahead of this worker's own work of the
    /// same class, with half of that sibling's events lane.
    ///
    /// Ordinary stealing happens only when a worker runs dry. On a machine
    /// with more runnable threads than cores (a server beside its clients,
    /// or beside other processes), the kernel preempts a worker for a
    /// whole time slice, several milliseconds, and the tasks queued on it
    /// wait that long while its sibling, busy with work of its own, never
    /// runs dry. A poll that blocks its worker does the same to the tasks
    /// behind it. Measured on S0 (60 keep-alive connections, 2 workers,
    /// the client on the same 2 cores), three runs each: the queue-delay
    /// p99 fell from 3.4–4.3 ms to 1.7–1.9 ms, and the clients' p99 from
    /// 4.3–4.5 ms to 2.1–3.5 ms.
    ///
    /// Only tasks that waited for an event are rescued: they are the ones
    /// whose latency is at stake, and they get one poll before they wait
    /// again or move to the yields lane. Tasks that yielded stay, to be
    /// stolen as usual by a worker that runs dry; taking them too would
    /// let a class whose polls block chase its work from worker to worker
    /// (the shares charge a blocking poll only when it ends, so for its
    /// length the class looks owed time). And the shares still hold:
    /// classes are tried in `order` (by virtual time), and the rescue stops
    /// at the first class this worker has work of.
    ///
    /// The state word read here is kept whether or not the accounting is
    /// on (see `crate::stats::account`), so switching the accounting off
    /// leaves the scheduler as it is.
    fn rescue(&mut self, order: &[usize]) -> Option<Runnable> {
        let first = self.next_random() as usize;
        let shared = &*self.shared;
        let now = shared.clock.now();
        self.policy.rescue_looked(now);
        let workers = shared.config.workers;
        let stuck = |victim: usize| {
            victim != self.index && PickPolicy::is_stuck(shared.metrics[victim].busy_since(), now)
        };
        for &class in order {
            let lanes = &self.local.queues[class];
            let rescued = (0..workers)
                .map(|i| first.wrapping_add(i) % workers)
                .filter(|&victim| stuck(victim))
                .find_map(|victim| shared.rescue_from(victim, class, lanes));
            if rescued.is_some() {
                self.account.rescue();
                return rescued;
            }
            if self.has_local_work(class) {
                return None;
            }
        }
        None
    }

    /// Whether this worker's LIFO slot, its lanes or the injector hold a
    /// task of `class`.
    fn has_local_work(&self, class: usize) -> bool {
        let in_slot = {
            let slot = self.local.lifo.take();
            let here = slot
                .as_ref()
                .is_some_and(|r| r.metadata().class.index() == class);
            self.local.lifo.set(slot);
            here
        };
        in_slot || queued_work(&self.local, class)
    }

    /// A task of `class`, and where it came from: with `look` at
    /// [`Look::Here`] or [`Look::Everywhere`], from this worker's LIFO
    /// slot, its lanes or the injector; with [`Look::Siblings`] or
    /// [`Look::Everywhere`], stolen from a sibling. `start` picks the
    /// first sibling to steal from.
    fn find(
        &self,
        class: usize,
        plan: &Plan,
        look: Look,
        start: usize,
    ) -> Option<(Runnable, Source)> {
        if look != Look::Siblings {
            if let Some(found) = self.find_here(class, plan) {
                return Some(found);
            }
        }
        if look == Look::Here {
            return None;
        }
        let shared = &*self.shared;
        let lanes = &self.local.queues[class];
        let workers = shared.config.workers;
        (0..workers)
            .map(|i| start.wrapping_add(i) % workers)
            .filter(|&victim| victim != self.index)
            .find_map(|victim| shared.steal_from(victim, class, lanes))
            .map(|runnable| (runnable, Source::Other))
    }

    /// A task of `class` from this worker's LIFO slot, its lanes or the
    /// injector, in the order `plan` sets; and where it came from.
    fn find_here(&self, class: usize, plan: &Plan) -> Option<(Runnable, Source)> {
        let shared = &*self.shared;
        let lanes = &self.local.queues[class];
        if plan.yields_first {
            if let Some(runnable) = lanes.yields.pop() {
                return Some((runnable, Source::Yields));
            }
        }
        if plan.injector_first {
            if let Some(runnable) = shared.steal_injector(class, lanes) {
                return Some((runnable, Source::Other));
            }
        }
        if let Some(runnable) = self.local.lifo.take() {
            if runnable.metadata().class.index() == class {
                return Some((runnable, Source::Lifo));
            }
            self.local.lifo.set(Some(runnable));
        }
        if let Some(runnable) = lanes.events.pop() {
            return Some((runnable, Source::Other));
        }
        if let Some(runnable) = shared.steal_injector(class, lanes) {
            return Some((runnable, Source::Other));
        }
        lanes
            .yields
            .pop()
            .map(|runnable| (runnable, Source::Yields))
    }

    /// Step 3: polls `runnable` once and accounts for it.
    fn run_task(&mut self, runnable: Runnable) {
        let meta = runnable.metadata();
        let class = meta.class;
        let scheduled_at = meta.scheduled_at.load(Ordering::Relaxed);
        // What a stall report needs, kept past the poll (which may free the
        // task): the name is cloned only for tasks that have one, the span
        // only when there is one (a subscriber wants `TRACE`).
        let (id, name) = (meta.id, meta.name.clone());
        let span = crate::task::trace::span_of(meta);

        // A poll that follows the last one with only a pick between them
        // starts where that one ended: the pick's tens of nanoseconds are
        // charged to this poll, and a clock read is saved.
        let start = if self.chained {
            self.last_now
        } else {
            let now = self.shared.clock.now();
            self.account.maybe_publish(now);
            now
        };
        self.account
            .poll_started(class.index(), start, start.saturating_sub(scheduled_at));

        super::poll::run_poll(&self.shared, &mut self.meter, runnable, class, start);

        let end = self.shared.clock.now();
        self.last_now = end;
        // Whatever takes more than bookkeeping from here on (a wake of a
        // sibling, a stall report, IO, timers) breaks the chain.
        self.chained = true;
        self.stamp_lifo(end);
        if let Some(yielded) = self.local.yielded_task.take() {
            self.requeue_yielded(yielded, end);
        }
        let took = end.saturating_sub(start);
        if took >= self.shared.config.stall_threshold {
            let _in_span = span.as_ref().map(tracing::Span::enter);
            self.report_stall(id, class, name.as_deref(), took);
            self.chained = false;
        }
        // A poll the kernel preempted is charged the time it was on a core
        // (and any time it blocked); a read that lost records charges it
        // all.
        let preempted = super::poll::preempted_in(&mut self.meter, took);
        self.account
            .poll_ended(class.index(), end, took - preempted, preempted);
        self.charge(class.index(), took - preempted, end);
        self.polls_since_io += 1;
        if self.polls_since_io >= self.shared.config.io_every
            || self.io_interval_passed(end)
            || self.io_has_news()
        {
            self.poll_io(Some(end));
            self.chained = false;
        }
        if self.shared.timer_driver.may_be_due(end) {
            self.fire_timers(end);
            self.chained = false;
        }
    }

    /// Stamps the task in the LIFO slot as scheduled at `at` if it was
    /// woken there since the last stamp (see `Local::lifo_unstamped`).
    fn stamp_lifo(&self, at: u64) {
        if self.local.lifo_unstamped.replace(false) {
            if let Some(runnable) = self.local.lifo.take() {
                self.shared.stamp(&runnable, at);
                self.local.lifo.set(Some(runnable));
            }
        }
    }

    /// Queues `runnable`, which woke itself during the poll that ended at
    /// `end`, at the back of its yields lane, stamped as scheduled at
    /// `end`.
    ///
    /// `Shared::schedule` leaves this to the worker rather than read the
    /// clock itself: the task is queued a moment later than it would have
    /// been (after the poll's end is read, instead of just before), and
    /// a task that yields in a loop saves a clock read per yield.
    fn requeue_yielded(&mut self, runnable: Runnable, end: u64) {
        let shared = &*self.shared;
        shared.stamp(&runnable, end);
        if shared.is_stopping() {
            shared.inject(runnable);
            return;
        }
        let class = runnable.metadata().class.index();
        // Other runnable work is queued behind it: let an idle worker take
        // that rather than take turns with it here.
        if self.local.queues[class].push(runnable, Lane::Yields) {
            shared.notify_one();
            self.chained = false;
        }
    }

    /// Counts and reports a poll of `took` nanoseconds, past the stall
    /// threshold (inside the task's span, so the report carries it).
    #[cold]
    fn report_stall(&mut self, id: TaskId, class: Class, name: Option<&str>, took: u64) {
        self.account.stall(class.index());
        let class_name = self.shared.config.class_name(class).unwrap_or("?");
        tracing::warn!(
            task.id = id.as_u64(),
            task.class = class_name,
            task.name = name.unwrap_or(""),
            poll_ms = took as f64 / 1e6,
            worker = self.index,
            "a task poll ran {:.1} ms without yielding, holding its worker",
            took as f64 / 1e6,
        );
    }

    /// Whether `io_interval` has passed since this worker last polled the
    /// reactor.
    fn io_interval_passed(&self, now: u64) -> bool {
        now.saturating_sub(self.last_io) >= self.shared.config.io_interval
    }

    /// Whether this worker's ring has news for it (see `io::driver`'s
    /// glance): a look then finds events without waiting for the
    /// interval. Always `false` on epoll and on shared rings.
    fn io_has_news(&self) -> bool {
        self.shared.reactor.has_news(self.index)
    }

    /// Step 4: polls the reactor without blocking, unless a parked worker is
    /// blocked in it or another worker is polling it, and queues the tasks
    /// its events wake; with the tokio side on the workers, drives it once
    /// first. `now` is the current time if the caller has it. Returns
    /// whether any task was woken.
    fn poll_io(&mut self, now: Option<u64>) -> bool {
        self.polls_since_io = 0;
        let start = now.unwrap_or_else(|| self.shared.clock.now());
        self.account.io_gap(start.saturating_sub(self.last_io));
        self.last_io = start;
        let ticked = self.tick_tokio(start);
        // The caller found no task before this call, so queued work now
        // is what the tick woke.
        let tick_woke = ticked && self.local.queues.iter().any(|lanes| lanes.has_work());
        let reactor = &self.shared.reactor;
        let group = reactor.group_of(self.index);
        let poller = if reactor.has_blocker(group) {
            None
        } else {
            reactor.try_poller(group)
        };
        let Some(mut poller) = poller else {
            // The poller (a parked worker blocked in the ring, most often)
            // does not see receives queued since it entered: submit the
            // ones this worker's tasks queued, within `io_interval` as a
            // look would.
            reactor.flush(Some(self.index));
            if ticked {
                self.account.switch(State::Search, self.shared.clock.now());
            }
            return tick_woke;
        };
        if !ticked {
            self.account.switch(State::Io, start);
        }
        self.account.io_look();
        reactor.poll(&mut poller, group, Some(Duration::ZERO), &mut self.woken);
        drop(poller);
        let woke = !self.woken.is_empty();
        // The events were pending when the poll began (it does not block).
        wake_collected(&self.local, start, &mut self.woken);
        let end = self.shared.clock.now();
        self.account.switch(State::Search, end);
        woke || tick_woke
    }

    /// With the tokio side on the workers, drives it once (see
    /// `runtime::tokio_side`), in the IO state from `start`: what it wakes
    /// goes to the events lanes, as a reactor poll's tasks do. Returns
    /// whether it did (the worker is then in the IO state).
    fn tick_tokio(&mut self, start: u64) -> bool {
        #[cfg(feature = "tokio-context")]
        if let Some(tokio) = &self.tokio {
            self.account.switch(State::Io, start);
            dispatching(&self.local, start, || tokio.tick());
            return true;
        }
        let _ = start;
        false
    }

    /// Fires due timers, accounted as timer time from `now`. A deferred
    /// timer's task joins the yields lane (see `TimerWake::Deferred`).
    fn fire_timers(&mut self, now: u64) {
        self.account.switch(State::Timers, now);
        let local = &*self.local;
        dispatching(local, now, || {
            self.shared.timer_driver.fire_due(|waker, wake| {
                local.dispatch_lane.set(match wake {
                    TimerWake::Event => Lane::Events,
                    TimerWake::Deferred => Lane::Yields,
                });
                // As at a reactor poll: a foreign waker's panic must not
                // end the worker.
                let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
            });
            local.dispatch_lane.set(Lane::Events);
        });
        self.account.switch(State::Search, self.shared.clock.now());
    }

    /// Charges `ns` of polling to `class`, adding the window's charges to
    /// the shared clocks once it is [`CHARGE_WINDOW_NS`] long.
    fn charge(&mut self, class: usize, ns: u64, now: u64) {
        self.pending[class] += self.shared.clocks.cost(class, ns);
        if now.saturating_sub(self.window_start) >= CHARGE_WINDOW_NS {
            self.flush_charges(now);
        }
    }

    /// Adds this worker's pending charges to the shared clocks.
    fn flush_charges(&mut self, now: u64) {
        for (class, pending) in self.pending.iter_mut().enumerate() {
            if *pending > 0 {
                self.shared.clocks.advance(class, *pending);
                *pending = 0;
            }
        }
        self.window_start = now;
    }

    fn enter_searching(&mut self) {
        if !self.searching {
            self.searching = true;
            self.shared.idle.transition_to_searching();
        }
    }

    fn leave_searching(&mut self) {
        if self.searching {
            self.searching = false;
            if self.shared.idle.transition_from_searching() && self.shared.has_visible_work() {
                self.shared.notify_one();
            }
        }
    }

    /// Step 5: busy-waits for work under the spin policy. Returns `true` if
    /// work (or a stop request) appeared.
    fn spin(&mut self) -> bool {
        let limit = u64::try_from(self.shared.config.spin.as_nanos()).unwrap_or(u64::MAX);
        if limit == 0 {
            return false;
        }
        // Spinning looks at the queues only: receives this worker's tasks
        // queued must reach the kernel first, or nothing they wait for
        // can arrive during the spin.
        self.shared.reactor.flush(Some(self.index));
        let clock = &self.shared.clock;
        let start = clock.now();
        self.account.switch(State::Spin, start);
        let found = loop {
            for _ in 0..SPINS_PER_CHECK {
                std::hint::spin_loop();
            }
            if self.shared.has_visible_work() || self.shared.is_stopping() {
                break true;
            }
            if clock.now().saturating_sub(start) >= limit {
                break false;
            }
        };
        self.account.switch(State::Search, clock.now());
        found
    }

    /// Step 6: sleeps until notified, or until the earliest timer if this
    /// worker watches it (see the module docs of `idle` and `time`).
    fn park(&mut self) {
        let now = self.shared.clock.now();
        self.flush_charges(now);
        let shared = &*self.shared;
        self.account.park(now);

        let mut watched = false;
        let last_searcher = shared.idle.transition_to_parked(self.index, self.searching);
        if last_searcher && shared.has_visible_work() {
            shared.idle.unpark_self(self.index);
        } else {
            // Read the earliest timer only now, after registering as parked
            // (the parker's half of the timer protocol in `crate::time`).
            fence(Ordering::SeqCst);
            let timeout = self.watch_timers();
            let parker = &shared.parkers[self.index];
            let group = shared.reactor.group_of(self.index);
            if let Some(mut poller) = shared.reactor.become_blocker(group) {
                let blocking = StopBlocking(shared, group);
                let local = &self.local;
                #[cfg(feature = "tokio-context")]
                let tokio = self.tokio.as_ref();
                let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
                let mut quiet = Quiet::new(shared.doze.departures());
                loop {
                    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    // With a ring per worker, the rings of the workers that
                    // run are looked at now and then (below), as sleepers
                    // look for a vacant blocker role on one shared ring: a
                    // worker may start to run after this one fell asleep.
                    // Not while every worker has stayed in its poll for a
                    // while: then this one dozes (see `doze`).
                    let dozing = shared.reactor.has_groups()
                        && quiet.may_doze()
                        && shared.doze.try_doze(self.index, quiet.seen(), || {
                            shared.reactor.others_blocked(group)
                        });
                    let check = (shared.reactor.has_groups() && !dozing)
                        .then(|| Duration::from_nanos(REACTOR_CHECK_NS));
                    let wait = left.into_iter().chain(check).min();
                    let notified = parker.park_in(|| {
                        #[cfg(feature = "tokio-context")]
                        if let Some(tokio) = tokio {
                            local.in_tokio_park.set(true);
                            let parked = tokio.park(shared.reactor.poll_fd(&mut poller), wait);
                            local.in_tokio_park.set(false);
                            if parked {
                                // Collect what woke keel's side, if anything.
                                shared.reactor.poll(
                                    &mut poller,
                                    group,
                                    Some(Duration::ZERO),
                                    &mut self.woken,
                                );
                                return;
                            }
                        }
                        let _ = local;
                        shared
                            .reactor
                            .poll(&mut poller, group, wait, &mut self.woken);
                    });
                    if dozing {
                        shared.doze.wake_up(self.index);
                    }
                    let timed_out = left.is_some_and(|left| left <= wait.unwrap_or(left));
                    if notified || check.is_none() || timed_out || !self.woken.is_empty() {
                        break;
                    }
                    // With a ring per worker, the rings of the workers
                    // that run: one running a long poll would hold its
                    // ring's events until its next look.
                    shared.reactor.steal(group, &mut self.woken);
                    if !self.woken.is_empty() {
                        break;
                    }
                    quiet.checked(
                        shared.doze.departures(),
                        shared.reactor.others_blocked(group),
                    );
                }
                // Leaving the poll: dozers go back to their checks.
                drop(blocking);
                drop(poller);
            } else {
                // Another worker blocks in the reactor, but it may leave to
                // run a task that then polls for long: wake up now and then,
                // and get up to take over the reactor if nobody holds it.
                // A check that finds the reactor held goes straight back to
                // sleep, without searching or spinning: on a small machine
                // even that would take a core from someone who needs it.
                // Receives this worker's tasks queued would wait for the
                // blocker's next wait: submit them before sleeping.
                // While the blocker stays in its poll for long, this worker
                // dozes instead (see `doze`).
                shared.reactor.flush(Some(self.index));
                let check = Duration::from_nanos(REACTOR_CHECK_NS);
                let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
                let mut quiet = Quiet::new(shared.doze.departures());
                loop {
                    let left = deadline.map_or(Duration::MAX, |d| {
                        d.saturating_duration_since(Instant::now())
                    });
                    let dozing = quiet.may_doze()
                        && shared.doze.try_doze(self.index, quiet.seen(), || {
                            shared.reactor.has_blocker(group)
                        });
                    let wait = if dozing { left } else { left.min(check) };
                    let notified = if wait == Duration::MAX {
                        parker.park();
                        true
                    } else {
                        parker.park_timeout(wait)
                    };
                    if dozing {
                        shared.doze.wake_up(self.index);
                    }
                    if notified || left <= wait || !shared.reactor.has_blocker(group) {
                        break;
                    }
                    quiet.checked(shared.doze.departures(), true);
                }
            }
            watched = timeout.is_some();
            // Whatever woke us (a notification, the timer, a stale token),
            // leave the sleepers; if a notifier already took us out, it
            // counted us as searching.
            shared.idle.unpark_self(self.index);
            // Only a worker that took the watch can still hold it (another
            // may have taken it over meanwhile).
            if watched {
                let mut watch = lock(&shared.watch);
                if watch.worker == Some(self.index) {
                    *watch = Watch {
                        worker: None,
                        tick: NEVER,
                    };
                }
            }
        }
        self.account.unparked();
        self.searching = true;
        let now = shared.clock.now();
        self.window_start = now;
        if !self.woken.is_empty() {
            self.account.switch(State::Io, now);
            wake_collected(&self.local, now, &mut self.woken);
        }
        self.last_io = now;
        let now = shared.clock.now();
        self.account.switch(State::Search, now);
        // A watcher that woke fires on the timers' own clock, not the hint.
        if watched || shared.timer_driver.may_be_due(now) {
            self.fire_timers(now);
        }
    }

    /// Decides how long to park: until the earliest timer if no parked
    /// worker watches one at or before it (this worker then becomes the
    /// watcher), otherwise until notified.
    fn watch_timers(&self) -> Option<Duration> {
        let shared = &*self.shared;
        let tick = shared.timer_driver.next_tick();
        if tick == NEVER {
            return None;
        }
        let mut watch = lock(&shared.watch);
        if watch.worker.is_some() && watch.tick <= tick {
            return None;
        }
        *watch = Watch {
            worker: Some(self.index),
            tick,
        };
        let wait_ns = tick_start(tick).saturating_sub(shared.timer_driver.now());
        Some(Duration::from_nanos(wait_ns))
    }

    /// The next number of this worker's generator (spreads steal victims).
    fn next_random(&mut self) -> u64 {
        xorshift64(&mut self.rng)
    }
}

/// Gives up the reactor's blocker role when dropped, so a panic on the way
/// cannot leave the role taken and IO unpolled.
struct StopBlocking<'a>(&'a Shared, usize);

impl Drop for StopBlocking<'_> {
    /// Gives up the role, then sets the alarm if workers doze (see
    /// `doze`): woken by it, they go back to looking whether the role or
    /// this worker's ring needs them.
    fn drop(&mut self) {
        let shared = self.0;
        shared.reactor.stop_blocking(self.1);
        shared.doze.departed(|worker| shared.unpark(worker));
    }
}

/// Whether the lanes of `local`'s worker or the injector hold a task of
/// `class` (a free function, so that a closure can ask it while the
/// worker's policy is borrowed).
fn queued_work(local: &Local, class: usize) -> bool {
    local.queues[class].has_work() || !local.shared.injectors[class].is_empty()
}

/// Wakes the tasks a reactor poll collected into `woken`, into the events
/// lanes of `local`'s worker.
fn wake_collected(local: &Local, at: u64, woken: &mut Vec<Waker>) {
    if woken.is_empty() {
        return;
    }
    dispatching(local, at, || {
        for waker in woken.drain(..) {
            // A waker is keel's or a foreign runtime's; a panic in a
            // foreign one must not end the worker.
            let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
        }
    });
}

/// Runs `wake` with `local`'s dispatching flag set, so the tasks it wakes
/// (events of the reactor or the timers) go to the events lanes, stamped
/// as scheduled at `at`; then notifies a sibling if the lanes hold more
/// than this worker can start on at once.
///
/// The notification waits for the end of the dispatch. Waking a sibling
/// in the middle of it lets the kernel hand the sibling this worker's core
/// at once (a woken thread often preempts its waker on a busy machine),
/// while the rest of the tasks to wake sit in this worker's private list,
/// where no sibling can take them. In a trace of S3, the sibling a
/// dispatch woke held the dispatcher's core for 8 ms, and the admin
/// request being dispatched was answered only after. Once every task is
/// queued, a sibling that takes the core can steal them.
fn dispatching(local: &Local, at: u64, wake: impl FnOnce()) {
    local.dispatching.set(Some(at));
    wake();
    local.dispatching.set(None);
    if local.dispatch_surplus.take() {
        local.shared.notify_one();
    }
}

/// Where one pass of a pick looks for a task of a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// This worker's LIFO slot, its lanes and the injector.
    Here,
    /// The siblings' lanes.
    Siblings,
    /// Both, here first.
    Everywhere,
}

/// The classes ahead of `class` in the order of `vtime` (ties by index, as
/// a plan orders them), as a bit set: one pass over the clocks, read by
/// [`ahead_iter`] as often as the caller needs.
fn classes_ahead(vtime: &[u64], class: usize) -> u32 {
    const _: () = assert!(MAX_CLASSES <= 32, "a class set is a u32");
    let own = vtime[class];
    let mut ahead = 0;
    for (k, &v) in vtime.iter().enumerate() {
        if v < own || (v == own && k < class) {
            ahead |= 1 << k;
        }
    }
    ahead
}

/// The class indices in a set made by [`classes_ahead`], lowest first.
fn ahead_iter(mut set: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (set != 0).then(|| {
            let k = set.trailing_zeros() as usize;
            set &= set - 1;
            k
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classes_ahead_are_those_a_plan_orders_first() {
        let cases: &[&[u64]] = &[
            &[30, 10, 20],
            &[0, 0, 0],
            &[5, 5, 1],
            &[7],
            &[u64::MAX, 0, 9, 9],
        ];
        for &vtime in cases {
            for class in 0..vtime.len() {
                let want: Vec<usize> = (0..vtime.len())
                    .filter(|&k| (vtime[k], k) < (vtime[class], class))
                    .collect();
                let got: Vec<usize> = ahead_iter(classes_ahead(vtime, class)).collect();
                assert_eq!(got, want, "vtime {vtime:?}, class {class}");
            }
        }
        let all = [0; MAX_CLASSES];
        let got: Vec<usize> = ahead_iter(classes_ahead(&all, MAX_CLASSES - 1)).collect();
        assert_eq!(got, (0..MAX_CLASSES - 1).collect::<Vec<_>>());
    }
}
