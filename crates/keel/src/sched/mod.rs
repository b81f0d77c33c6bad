//! The scheduler: queues, the worker loop, class selection, parking.
//!
//! # Queues
//!
//! Every worker owns two FIFO deques per class, its [`lanes`]: one for
//! tasks that waited for an event and one for tasks that woke themselves;
//! every class has one injector shared by all. A task woken on a worker of
//! its runtime goes to that worker's lanes of the task's class (it is
//! likely hot in that core's cache); a task woken anywhere else goes to its
//! class's injector. Idle workers steal half of a sibling's lane. Queues
//! are `crossbeam-deque`'s; keel adds the per-class split and the lanes.
//!
//! # Notification
//!
//! Whoever makes a task runnable then calls [`Shared::notify_one`], which
//! unparks at most one sleeping worker, and none while another worker is
//! searching (see [`idle`]). A thread outside the workers that wakes many
//! tasks at once queues them all before it notifies (see [`wake_batch`]).
//!
//! # The LIFO slot
//!
//! A task woken by a task running on a worker goes into that worker's
//! *LIFO slot*, not its deque: it is the likely receiver of a message that
//! is hot in this core's cache, and it runs as soon as the current poll
//! ends (if its class is the one picked). The slot is not stealable and
//! filling it notifies nobody: waking a sibling just to steal one task
//! would cost a futex wake and a cross-core hand-off per message. A task
//! already in the slot is displaced to the back of its class's deque, and
//! then a sibling is notified, since there is surplus work to share. At
//! most [`policy::LIFO_STREAK`] slot tasks run in a row before the slot is
//! flushed to the deque, so two tasks messaging each other cannot starve
//! the rest. A task that yields goes to the back of its yields lane
//! instead. A newly spawned task goes to the back of its events lane, so
//! tasks spawned in a row start in that order, and so do the tasks that
//! the reactor and the timers wake (many at once, so the slot would only
//! displace them one by one). A sibling is notified when a push finds the
//! lanes already holding work; for the tasks of a reactor poll or of fired
//! timers, once all of them are queued.
//!
//! # The worker loop
//!
//! [`worker`] documents the stages of one iteration; the class picked is the
//! one with the least virtual time among classes with work ([`class`]).

pub(crate) mod class;
pub(crate) mod doze;
mod gather;
pub(crate) mod idle;
pub(crate) mod lanes;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, loom))]
mod loom_worker;
pub(crate) mod park;
mod policy;
mod poll;
pub(crate) mod timers;
pub(crate) mod urgent;
pub(crate) mod wake_batch;
mod worker;

pub use class::{Class, MAX_CLASSES};
pub(crate) use urgent::run_lane;
pub use urgent::{LanePriority, UrgentLane, DEFAULT_WORKER_NICE};
pub(crate) use worker::run_worker;

use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::loom::deque::{Injector, Steal};
use async_task::{ScheduleInfo, WithInfo};

use crate::blocking::pool::Pool;
use crate::io::reactor::Reactor;
use crate::loom::lock;
use crate::loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use crate::loom::sync::Mutex;
use crate::net::batch::deliveries::DeliveryCounters;
use crate::runtime::config::Config;
use crate::runtime::context;
use crate::stats::account::{ClassDelays, WorkerMetrics};
use crate::task::registry::Registry;
use crate::task::{Guarded, JoinHandle, Runnable, TaskId, TaskMeta};
use crate::time::driver::{TimerDriver, NEVER};
use crate::util::clock::Clock;
use class::ClassClocks;
use idle::Idle;
use lanes::{settle, Lane, LaneStealers, Lanes};
use park::Parker;
use timers::TimerHandle;

/// A worker's own queues, one per class. Lives in the worker thread's
/// context so the schedule function can reach it; only that thread pushes
/// and pops, others steal through [`Shared::stealers`].
pub(crate) struct Local {
    pub(crate) shared: Arc<Shared>,
    /// This worker's index among the runtime's workers.
    pub(crate) index: usize,
    pub(crate) queues: Deques,
    /// The task most recently woken by this worker's own tasks, run next if
    /// its class is picked (see the module docs). Not stealable.
    pub(crate) lifo: Cell<Option<Runnable>>,
    /// Set when a task yields onto this worker's deque: the next pick
    /// looks at the injector first, so a task that yields in a loop cannot
    /// keep tasks woken from outside waiting (a yield promises that waiting
    /// tasks of the class run first). Only the owner thread touches it.
    pub(crate) yielded: Cell<bool>,
    /// Set while this worker wakes the tasks of a reactor poll or of fired
    /// timers: they go to the events lane, not the LIFO slot, and are
    /// stamped as scheduled at the instant held here (when the reactor
    /// poll began, or the timers fired), which the worker read anyway.
    pub(crate) dispatching: Cell<Option<u64>>,
    /// The lane a task woken while dispatching joins: the events lane,
    /// except while a worker wakes the task of a deferred timer (see
    /// `TimerWake::Deferred`), which joins the yields lane.
    pub(crate) dispatch_lane: Cell<Lane>,
    /// Set when a task queued while dispatching found work already queued:
    /// a sibling is notified once the whole dispatch is queued, not in the
    /// middle of it (see `dispatching` in the worker module).
    pub(crate) dispatch_surplus: Cell<bool>,
    /// The task being polled, if it woke itself: the worker queues it once
    /// the poll is over, stamped with the poll's end, which the worker
    /// reads anyway (see `Worker::requeue_yielded`).
    pub(crate) yielded_task: Cell<Option<Runnable>>,
    /// Set when a task was woken into the LIFO slot during a poll and not
    /// stamped yet: no other thread can take it from the slot, so it can
    /// run no sooner than the poll's end, and it is stamped with that
    /// instant, which the worker reads anyway (see `Worker::run_task`).
    /// Saves a clock read per wake on the hand-off path.
    pub(crate) lifo_unstamped: Cell<bool>,
    /// Set while this worker sleeps in the tokio side's `block_on` (see
    /// `Builder::tokio_on_workers`): a task that tokio's driver or tasks
    /// wake there goes through the injector and notifies a worker, which
    /// interrupts the sleep; queued here, it would wait for the sleep to
    /// end for another reason.
    pub(crate) in_tokio_park: Cell<bool>,
}

/// Why a task is being made runnable; decides where it goes on a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Woken by a task: the LIFO slot.
    Wake,
    /// Newly spawned, or woken by the reactor or a timer: the back of the
    /// events lane.
    Event,
    /// Woke itself while running: the back of the yields lane.
    Yield,
}

/// The parked worker that sleeps only until a timer tick, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Watch {
    pub(crate) worker: Option<usize>,
    /// The tick it wakes at; [`NEVER`] without a watcher.
    pub(crate) tick: u64,
}

/// One worker's lanes, one pair per class, before its thread takes them.
pub(crate) type Deques = Box<[Lanes]>;

/// Everything the workers of one runtime share.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) clocks: ClassClocks,
    /// One per class; anyone pushes, workers steal.
    injectors: Box<[Injector<Runnable>]>,
    /// `stealers[worker][class]`: the stealing ends of each worker's lanes.
    stealers: Box<[Box<[LaneStealers]>]>,
    pub(crate) idle: Idle,
    /// Which parked workers stopped their periodic checks; see [`doze`].
    pub(crate) doze: doze::Doze,
    /// One per worker; see [`park`].
    parkers: Box<[Parker]>,
    pub(crate) registry: Arc<Registry>,
    /// One per worker; see [`crate::stats::account`].
    pub(crate) metrics: Box<[Arc<WorkerMetrics>]>,
    /// Queue-delay histograms, one per class, shared by the workers.
    pub(crate) delays: Arc<ClassDelays>,
    /// The timer wheel; see [`crate::time`]. Private to the scheduler:
    /// everyone else files through [`Shared::timers`], which keeps the
    /// filer's half of the protocol.
    timer_driver: TimerDriver,
    /// The reactor (epoll, or an io_uring); see [`crate::io`].
    pub(crate) reactor: Reactor,
    /// The urgent lane, when the runtime has one (see [`urgent`]).
    pub(crate) lane: Option<urgent::Lane>,
    /// Reads of TCP streams that returned data, per batch mode; any task
    /// adds, `Handle::stats` reads (see [`crate::net::batch::deliveries`]).
    pub(crate) deliveries: DeliveryCounters,
    /// The threads for blocking work; see [`crate::blocking`].
    pub(crate) blocking: Pool,
    /// Which parked worker watches which timer tick (see `Worker::park`).
    pub(crate) watch: Mutex<Watch>,
    /// The tokio runtime entered wherever keel code runs, if the runtime
    /// has one (see `runtime::tokio_side`).
    #[cfg(feature = "tokio-context")]
    pub(crate) tokio: Option<crate::runtime::tokio_side::TokioSide>,
    /// Set once, when the runtime is dropped.
    stopping: AtomicBool,
    /// Set once the shutdown drain has begun: from then on a task that is
    /// scheduled is dropped at once instead of queued (see
    /// [`Shared::drop_all_tasks`]).
    draining: AtomicBool,
    next_id: AtomicU64,
}

/// The tokio side entered on a thread (see [`Shared::enter_tokio`]); a
/// no-op without the `tokio-context` feature.
pub(crate) struct TokioGuard<'a> {
    #[cfg(feature = "tokio-context")]
    _entered: Option<tokio::runtime::EnterGuard<'a>>,
    _runtime: std::marker::PhantomData<&'a Shared>,
}

impl Shared {
    /// The shared state and, per worker, its class lanes.
    ///
    /// # Errors
    ///
    /// If the reactor's epoll instance cannot be created.
    pub(crate) fn new(config: Config) -> std::io::Result<(Arc<Shared>, Vec<Deques>)> {
        let classes = config.classes.len();
        let locals: Vec<Deques> = (0..config.workers)
            .map(|_| (0..classes).map(|_| Lanes::new()).collect())
            .collect();
        let clock = Clock::new();
        let delays = Arc::new(ClassDelays::new(classes));
        let shared = Shared {
            clocks: ClassClocks::new(config.classes.iter().map(|c| c.shares)),
            injectors: (0..classes).map(|_| Injector::new()).collect(),
            stealers: locals
                .iter()
                .map(|queues| queues.iter().map(Lanes::stealers).collect())
                .collect(),
            idle: Idle::new(config.workers),
            doze: doze::Doze::new(config.workers),
            parkers: (0..config.workers).map(|_| Parker::new()).collect(),
            registry: Arc::new(Registry::new()),
            metrics: (0..config.workers)
                .map(|_| Arc::new(WorkerMetrics::new(delays.clone(), classes)))
                .collect(),
            delays,
            timer_driver: TimerDriver::new(clock.clone()),
            reactor: if config.ring_per_worker {
                Reactor::new(config.io_backend, config.workers, true)?
            } else {
                Reactor::new(config.io_backend, config.io_rings, false)?
            },
            lane: config
                .urgent_lane
                .is_some()
                .then(|| urgent::Lane::new(config.io_backend))
                .transpose()?,
            deliveries: DeliveryCounters::default(),
            blocking: Pool::new(&config.blocking, clock.clone()),
            watch: Mutex::new(Watch {
                worker: None,
                tick: NEVER,
            }),
            #[cfg(feature = "tokio-context")]
            tokio: (config.tokio_threads > 0)
                .then(|| {
                    if config.tokio_on_workers {
                        crate::runtime::tokio_side::TokioSide::start_on_workers(&config.thread_name)
                    } else {
                        crate::runtime::tokio_side::TokioSide::start(
                            config.tokio_threads,
                            &config.thread_name,
                        )
                    }
                })
                .transpose()?,
            stopping: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            next_id: AtomicU64::new(1),
            clock,
            config,
        };
        Ok((Arc::new(shared), locals))
    }

    /// Enters the tokio side on the calling thread until the guard drops,
    /// if the runtime has one (see `runtime::tokio_side`).
    pub(crate) fn enter_tokio(&self) -> TokioGuard<'_> {
        TokioGuard {
            #[cfg(feature = "tokio-context")]
            _entered: self.tokio.as_ref().map(|tokio| tokio.handle().enter()),
            _runtime: std::marker::PhantomData,
        }
    }

    /// Spawns `future` as a task of `class`.
    #[track_caller]
    pub(crate) fn spawn<F>(self: &Arc<Self>, class: Class, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_named(class, None, future)
    }

    /// Spawns `future` as a task of `class` with an optional `name`. The
    /// caller's location (through `#[track_caller]` on every public way to
    /// spawn) is the task's spawn location in its span.
    #[track_caller]
    pub(crate) fn spawn_named<F>(
        self: &Arc<Self>,
        class: Class,
        name: Option<Arc<str>>,
        future: F,
    ) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let id = self.next_task_id();
        let wants_span = crate::task::trace::wants_spans();
        // Stamped when scheduled, just below.
        let meta = TaskMeta::named(TaskId(id), class, 0, name, wants_span);
        let shared = self.clone();
        let schedule = WithInfo(move |runnable: Runnable, info: ScheduleInfo| {
            let placement = if info.woken_while_running {
                Placement::Yield
            } else {
                Placement::Wake
            };
            shared.schedule(runnable, placement);
        });
        let make = |entry| {
            let (runnable, task) = async_task::Builder::new()
                .metadata(meta)
                .spawn(move |meta| Guarded::new(future, entry, meta), schedule);
            (runnable.waker(), (runnable, task))
        };
        match self.registry.insert(id, make) {
            Ok((runnable, task)) => {
                // Filed under the metadata's final address, before the
                // task's first poll can look for it.
                if wants_span {
                    crate::task::trace::attach(
                        runnable.metadata(),
                        self.trace_owner(),
                        self.config.class_name(class).unwrap_or("?"),
                        std::panic::Location::caller(),
                    );
                }
                let handle = JoinHandle::new(task, runnable.waker());
                self.schedule(runnable, Placement::Event);
                handle
            }
            Err((runnable, task)) => {
                // The runtime is shutting down: cancel at once.
                let handle = JoinHandle::new(task, runnable.waker());
                drop(runnable);
                handle
            }
        }
    }

    /// This runtime as the owner of its tasks' traces (see
    /// `task::trace::release_runtime`): the address of its shared state.
    fn trace_owner(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// A fresh task id (for async tasks and blocking jobs alike).
    pub(crate) fn next_task_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes `runnable` runnable (see the module docs).
    fn schedule(self: &Arc<Self>, runnable: Runnable, placement: Placement) {
        if self.draining.load(Ordering::Acquire) {
            // Shutdown is dropping every task: this one is dropped here,
            // however late its wake came. `async_task` keeps the task alive
            // for the length of this call, so dropping it inside is sound.
            drop_task(runnable);
            return;
        }
        let class = runnable.metadata().class.index();
        if let Some(lane) = self.lane.as_ref().filter(|_| urgent::Lane::serves(class)) {
            if !self.is_stopping() {
                self.stamp_now(&runnable);
                // `push` fences after the push: a drain that began before
                // it may have looked at the lane's queue already, so look
                // at `draining` again (as `inject` does).
                lane.push(runnable);
                if self.draining.load(Ordering::Relaxed) {
                    self.drop_queued();
                }
                return;
            }
        }
        let mut runnable = Some(runnable);
        let surplus = context::with_local(|local| {
            // Once stopping, everything goes to the injectors, where the
            // shutdown drain looks, even when it runs on a worker.
            let local = local.filter(|l| {
                Arc::ptr_eq(&l.shared, self) && !self.is_stopping() && !l.in_tokio_park.get()
            })?;
            let runnable = runnable.take().expect("not yet placed");
            let lanes = &local.queues[class];
            match (placement, local.dispatching.get()) {
                // Woken by the reactor or a timer, including while it was
                // being polled elsewhere: it waited for an event (or, for
                // a deferred timer, chose to wait until then).
                (_, Some(at)) => {
                    self.stamp(&runnable, at);
                    if lanes.push(runnable, local.dispatch_lane.get()) {
                        local.dispatch_surplus.set(true);
                    }
                    Some(false)
                }
                (Placement::Wake, None) => {
                    // Stamped when the poll ends (see `lifo_unstamped`).
                    let displaced_unstamped = local.lifo_unstamped.replace(true);
                    let displaced = local.lifo.replace(Some(runnable))?;
                    if displaced_unstamped {
                        // Woken earlier in this same poll and not stamped:
                        // it leaves the slot for a lane others steal from.
                        self.stamp_now(&displaced);
                    }
                    local.queues[displaced.metadata().class.index()].push(displaced, Lane::Events);
                    Some(true)
                }
                (Placement::Yield, None) => {
                    // The task this worker is polling: queued and stamped
                    // when the poll ends, a moment from now.
                    local.yielded.set(true);
                    local.yielded_task.set(Some(runnable));
                    Some(false)
                }
                (Placement::Event, None) => {
                    self.stamp_now(&runnable);
                    Some(lanes.push(runnable, Lane::Events))
                }
            }
        });
        match (runnable, surplus) {
            (Some(runnable), _) => {
                self.stamp_now(&runnable);
                if self.queue_injected(runnable) && !wake_batch::defer(self) {
                    self.notify_after_fence();
                }
            }
            (None, Some(true)) => self.notify_one(),
            (None, _) => {}
        }
    }

    /// Records `at` as the instant `runnable` became runnable, the start of
    /// its queue delay (when the accounting is on).
    pub(crate) fn stamp(&self, runnable: &Runnable, at: u64) {
        if self.config.accounting {
            runnable
                .metadata()
                .scheduled_at
                .store(at, Ordering::Relaxed);
        }
    }

    /// [`stamp`](Self::stamp) at the current time; the clock is read only
    /// when the accounting is on.
    fn stamp_now(&self, runnable: &Runnable) {
        if self.config.accounting {
            self.stamp(runnable, self.clock.now());
        }
    }

    /// Queues `runnable` in its class's injector and wakes a worker for it:
    /// the place for tasks scheduled from outside the workers, and for
    /// every task once the runtime is stopping (the shutdown drain looks
    /// there).
    ///
    /// A push can race with the shutdown drain: [`Shared::schedule`] read
    /// `draining` as false, then the drain set it, found the injectors
    /// empty and finished, and only then did the push land, stranding the
    /// task (its handle would never resolve). So after the push, and a
    /// fence that pairs with the drain's, the pusher looks at `draining`
    /// again: either the drain's look at the queues comes after the push
    /// and takes it, or this look sees `draining` and drops what is queued
    /// itself (see `loom_a_push_racing_the_drain_is_never_stranded`).
    pub(crate) fn inject(&self, runnable: Runnable) {
        if self.queue_injected(runnable) {
            self.notify_after_fence();
        }
    }

    /// The first half of [`inject`](Self::inject): queues `runnable` and
    /// issues the fence that orders the push before the reads that follow.
    /// Returns `false` if the runtime is draining (what is queued is then
    /// dropped here); `true` if a worker must still be notified, by
    /// [`notify_after_fence`](Self::notify_after_fence), now or at the end
    /// of a [`wake_batch`].
    fn queue_injected(&self, runnable: Runnable) -> bool {
        let class = runnable.metadata().class.index();
        self.injectors[class].push(runnable);
        // Orders the push before the reads of `draining` and of the idle
        // state (the pusher's half of the drain protocol and of `idle`'s).
        fence(Ordering::SeqCst);
        if self.draining.load(Ordering::Relaxed) {
            self.drop_queued();
            return false;
        }
        true
    }

    /// Unparks one sleeping worker if no worker is searching.
    pub(crate) fn notify_one(&self) {
        // Orders the push that precedes this call before the read of the
        // idle state (the notifier's half of the protocol in `idle`).
        fence(Ordering::SeqCst);
        self.notify_after_fence();
    }

    /// [`notify_one`](Self::notify_one) for a caller that has just issued
    /// the `SeqCst` fence after its push.
    fn notify_after_fence(&self) {
        if let Some(worker) = self.idle.worker_to_notify() {
            self.unpark(worker);
        }
    }

    /// Wakes `worker` from its parker, or from `epoll_wait` if it is the
    /// blocker of its reactor poll group.
    pub(crate) fn unpark(&self, worker: usize) {
        if self.parkers[worker].unpark() {
            self.reactor.wake(self.reactor.group_of(worker));
        }
    }

    /// The body of the alarm thread (see [`doze`]): wakes the dozing
    /// workers when the alarm fires, until the runtime stops.
    #[cfg(not(any(loom, miri)))]
    pub(crate) fn run_alarm(&self) {
        self.doze
            .wait_for_alarm(|| self.is_stopping(), |worker| self.unpark(worker));
    }

    /// The reactor a new source registers with: the lane's for a source
    /// created in the urgent class when the runtime has a lane (see
    /// [`urgent`]), the workers' otherwise. `true` in the second half
    /// means the lane's.
    pub(crate) fn reactor_for_new_source(&self) -> (&Reactor, bool) {
        let urgent =
            context::current_class(self).is_some_and(|class| urgent::Lane::serves(class.index()));
        match self.lane.as_ref().filter(|_| urgent) {
            Some(lane) => (&lane.reactor, true),
            None => (&self.reactor, false),
        }
    }

    /// Whether the calling thread is one of this runtime's workers.
    pub(crate) fn on_worker_thread(self: &Arc<Self>) -> bool {
        self.worker_index().is_some()
    }

    /// The calling thread's index among this runtime's workers, if it is
    /// one of them.
    pub(crate) fn worker_index(self: &Arc<Self>) -> Option<usize> {
        context::with_local(|local| {
            local
                .filter(|l| Arc::ptr_eq(&l.shared, self))
                .map(|l| l.index)
        })
    }

    /// The reactor of a source: the lane's when `on_lane`.
    pub(crate) fn reactor_of(&self, on_lane: bool) -> &Reactor {
        match (&self.lane, on_lane) {
            (Some(lane), true) => &lane.reactor,
            _ => &self.reactor,
        }
    }

    /// The runtime's timers, for filing and cancelling (see [`timers`]).
    pub(crate) fn timers(&self) -> TimerHandle<'_> {
        TimerHandle::new(self)
    }

    /// Called after a timer became the earliest: makes sure a worker will
    /// fire it (the filer's half of the timer protocol in `crate::time`).
    /// Only [`TimerHandle::file`] calls it.
    fn timer_filed(&self) {
        // Orders the new earliest tick before the reads of the watch and of
        // the idle state.
        fence(Ordering::SeqCst);
        let watcher = lock(&self.watch).worker;
        match watcher {
            // It re-reads the earliest tick when it wakes.
            Some(worker) => self.unpark(worker),
            // Filed by a task on one of our workers: that worker reads the
            // new tick before it parks, so nobody need be woken for it.
            None if context::with_local(|l| l.is_some_and(|l| std::ptr::eq(&*l.shared, self))) => {}
            // A worker that parks from now on reads the new tick; one that
            // already parked without a timeout is woken to read it.
            None => self.notify_one(),
        }
    }

    /// Whether any queue holds a task.
    pub(crate) fn has_visible_work(&self) -> bool {
        // Orders the worker's preceding state change before these reads
        // (the worker's half of the protocol in `idle`).
        fence(Ordering::SeqCst);
        self.injectors.iter().any(|q| !q.is_empty())
            || self.stealers.iter().flatten().any(|q| !q.is_empty())
    }

    /// Takes one task from `class`'s injector, with a batch into the
    /// events lane of `into` (tasks injected from outside waited for
    /// something).
    fn steal_injector(&self, class: usize, into: &Lanes) -> Option<Runnable> {
        let injector = &self.injectors[class];
        settle(
            || injector.is_empty(),
            || injector.steal_batch_and_pop(&into.events),
        )
    }

    /// Takes half of a lane of `victim`'s `class` into `into`.
    fn steal_from(&self, victim: usize, class: usize, into: &Lanes) -> Option<Runnable> {
        self.stealers[victim][class].steal_into(into)
    }

    /// Takes half of `victim`'s `class` events lane into `into`.
    fn rescue_from(&self, victim: usize, class: usize, into: &Lanes) -> Option<Runnable> {
        self.stealers[victim][class].steal_events_into(into)
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Tells every worker to exit after its current poll.
    pub(crate) fn stop_workers(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for worker in 0..self.parkers.len() {
            self.unpark(worker);
        }
        self.doze.stop();
        if let Some(lane) = &self.lane {
            lane.wake();
        }
    }

    /// Drops every remaining task (shutdown step 3 in `runtime`). Called
    /// after the workers have exited (all but the caller's own, when a task
    /// drops its runtime).
    ///
    /// From the moment `draining` is set, [`Shared::schedule`] drops what it
    /// is given, so a task woken or spawned late (from another thread, or
    /// by a destructor) is dropped too instead of stranded in a queue.
    /// Waking every registered task then drops every idle one; what the
    /// queues still hold is dropped here.
    pub(crate) fn drop_all_tasks(&self) {
        self.draining.store(true, Ordering::SeqCst);
        // Orders the store before the looks at the queues below (the
        // drain's half of the protocol in `inject`).
        fence(Ordering::SeqCst);
        // A task that is being polled right now (the one dropping its own
        // runtime) cannot be dropped from inside its poll: it is dropped
        // when that poll ends and it is scheduled or completes. So stop
        // after a few rounds that find nothing more to drop.
        let mut idle_rounds = 0;
        while self.registry.len() > 0 && idle_rounds < 3 {
            let before = self.registry.len();
            for waker in self.registry.wakers() {
                waker.wake();
            }
            self.drop_queued();
            idle_rounds = if self.registry.len() < before {
                0
            } else {
                idle_rounds + 1
            };
        }
        // Timers filed by futures outside any task (held by the user) still
        // hold wakers; drop them outside the wheel's lock.
        drop(self.timer_driver.clear());
        // So do the traced wakers of tasks cancelled unpolled.
        crate::task::trace::release_runtime(self.trace_owner());
    }

    /// Drops what `queues` (an exiting worker's own) still hold, if the
    /// drain has begun: nobody else would.
    pub(crate) fn drop_if_draining(&self, queues: &Deques) {
        if !self.draining.load(Ordering::SeqCst) {
            return;
        }
        for lanes in queues.iter() {
            while let Some(runnable) = lanes.pop_any() {
                drop_task(runnable);
            }
        }
    }

    /// Drops every task the queues hold (once draining).
    fn drop_queued(&self) {
        while let Some(runnable) = self.pop_any() {
            drop_task(runnable);
        }
    }

    /// Takes a task from any queue: the injectors first, then the workers'
    /// lanes.
    fn pop_any(&self) -> Option<Runnable> {
        let injected = self.injectors.iter().find_map(|q| match q.steal() {
            Steal::Success(runnable) => Some(runnable),
            _ => None,
        });
        let injected = injected.or_else(|| self.lane.as_ref().and_then(urgent::Lane::pop));
        injected.or_else(|| {
            self.stealers
                .iter()
                .flatten()
                .find_map(LaneStealers::steal_any)
        })
    }
}

/// Drops a task without running it, containing a panic in its destructor.
fn drop_task(runnable: Runnable) {
    let _ = catch_unwind(AssertUnwindSafe(|| drop(runnable)));
}
