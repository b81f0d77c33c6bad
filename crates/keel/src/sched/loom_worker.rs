//! Loom models of the real worker: `run_worker`, its pick, park and
//! reactor paths, on two worker threads, with tasks spawned from outside,
//! from tasks, and woken by readiness events.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p keel --lib --release loom`.
//!
//! What is real: the worker loop, `Shared`'s queues, notification and
//! shutdown, `Idle`, the parkers, the LIFO slot, the dispatch of a
//! reactor poll, the reactor's blocker role and poller lock, the
//! accounting's atomics and locks. What is modelled: the kernel's side of
//! the reactor ([`crate::io::reactor::model`]: events and the eventfd,
//! since loom cannot enter `epoll_wait`), the clock (one microsecond per
//! read, see `util::clock`), and time-outs (loom has no time: a timed park
//! lasts until it is woken). The accounting is off: its counters are not
//! part of any wake-up. `crossbeam-deque` and `async-task` are not
//! loom-aware: each of their operations is one step here, which is what
//! they guarantee.
//!
//! With a ring per worker (`Builder::io_ring_per_worker`), each worker
//! is the blocker of its own poll group and sleeps in its own ring, and
//! a notification must interrupt the ring of the worker it chose. Two
//! models run two such workers, each group with a modelled kernel of its
//! own: a task spawned from outside, and a readiness event posted to the
//! ring of the worker that polled its task (its source's home). The
//! first deadlocks when an unpark interrupts the ring of another worker
//! than the one it woke (`Shared::unpark` writing group 0's eventfd for
//! every worker). The sleepers' look at the other rings every few
//! milliseconds (`Reactor::steal`) runs here only after a stale wake,
//! since a modelled timed wait never expires.
//!
//! The urgent lane (`sched::urgent`) has two models of its own: a task
//! queued on it from outside, and a readiness event on its reactor, each
//! with the lane thread and one worker. Both deadlock when the pusher
//! does not write the eventfd for a lane that set `asleep`, and when the
//! lane blocks without looking at its queue after setting it.
//!
//! Every model ends with every task done and the workers joined; a
//! wake-up lost anywhere leaves a thread asleep for good, which loom
//! reports as a deadlock.
//!
//! Two full worker loops make a large state space, so each model bounds
//! the preemptions loom explores (`LOOM_MAX_PREEMPTIONS` overrides it):
//! two for the spawn models (about a minute each in release), one for
//! the readiness and dispatch models, which at two ran past ten minutes.
//! The bound matters: a notification removed from `Shared::inject` is a
//! deadlock two preemptions deep, invisible at one. The hand-written
//! models in `loom_tests` explore the notification and timer protocols
//! to three preemptions, which only their smaller model affords.
//!
//! Each model was checked against a deliberate mutation it must catch
//! (a deadlock): `inject` notifying nobody (the outside spawn, at two
//! preemptions), the pick never looking in the LIFO slot (the LIFO
//! model), `stop_blocking` keeping the blocker role (the readiness
//! model), and the last searcher leaving the search without notifying
//! (the dispatch model). The dispatch's own surplus notification is not
//! needed for liveness: removed alone, the searcher's notification still
//! wakes the sibling (the model passes); removed with it, the model
//! deadlocks.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use loom::thread;

use super::{run_lane, run_worker, Class, Shared};
use crate::io::reactor::Reactor;
use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use crate::loom::sync::{Condvar, Mutex};
use crate::{LanePriority, Runtime, SpinPolicy, UrgentLane};

/// Runs `body` under loom, exploring up to `preemptions` preemptions per
/// execution unless `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(preemptions: usize, body: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    builder.check(body);
}

/// A runtime of `workers` real workers on loom threads.
struct Harness {
    shared: Arc<Shared>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Harness {
    fn start(workers: usize) -> Harness {
        Harness::start_with(workers, false)
    }

    /// A runtime whose workers each have a ring of their own (one poll
    /// group each); the rings are real, their kernels' side modelled.
    fn start_ring_per_worker(workers: usize) -> Harness {
        let mut builder = Runtime::builder();
        builder
            .io_backend(crate::io::IoBackend::Uring)
            .io_ring_per_worker(true);
        Harness::start_from(builder, workers, false)
    }

    /// With `lane`, the runtime has an urgent lane, whose thread starts
    /// first (as in `Runtime::start`).
    fn start_with(workers: usize, lane: bool) -> Harness {
        let mut builder = Runtime::builder();
        if lane {
            // Nice workers: the model changes no thread's priority.
            builder.urgent_lane(UrgentLane::new().priority(LanePriority::NiceWorkers(1)));
        }
        Harness::start_from(builder, workers, lane)
    }

    /// The runtime `builder` makes, with `workers` workers (and the lane
    /// thread first, with `lane`).
    fn start_from(mut builder: crate::Builder, workers: usize, lane: bool) -> Harness {
        let config = builder
            .workers(workers)
            .spin(SpinPolicy::None)
            // The accounting's counters and publications add modelled
            // locks and atomics that no wake-up depends on (the state word
            // the rescue reads is kept regardless); without them loom
            // explores the scheduler's interleavings, not the
            // accounting's.
            .accounting(false)
            .config()
            .expect("a valid configuration");
        let (shared, locals) = Shared::new(config).expect("the reactor opens");
        let mut threads = Vec::new();
        if lane {
            let shared = shared.clone();
            let (ready, _settled) = std::sync::mpsc::channel();
            threads.push(thread::spawn(move || run_lane(shared, ready)));
        }
        threads.extend(locals.into_iter().enumerate().map(|(index, queues)| {
            let shared = shared.clone();
            thread::spawn(move || run_worker(shared, index, queues, None))
        }));
        Harness { shared, threads }
    }

    /// Stops the workers, joins them and drops what is left.
    fn stop(self) {
        self.shared.stop_workers();
        for thread in self.threads {
            thread.join().expect("a worker exits cleanly");
        }
        self.shared.drop_all_tasks();
    }
}

/// Polls `future` on this loom thread, parking it between wake-ups.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}

/// A task spawned from outside the workers goes to the injector and a
/// sleeping worker is woken for it (`Shared::inject`, `Idle`, the parker
/// and, for the worker blocked in the reactor, the eventfd).
#[test]
fn loom_real_workers_run_a_task_spawned_from_outside() {
    model(2, || run_a_task_spawned_from_outside(Harness::start(2)));
}

/// Spawns a task on `rt` from outside, waits for it and stops `rt`.
fn run_a_task_spawned_from_outside(rt: Harness) {
    let task = rt.shared.spawn(Class::NORMAL, async { 7 });
    assert_eq!(block_on(task).expect("the task completes"), 7);
    rt.stop();
}

/// A task spawned by a task joins its worker's events lane; its end wakes
/// the spawner, which goes to that worker's LIFO slot (not stealable):
/// the slot's task must run before its worker sleeps.
#[test]
fn loom_real_workers_run_the_lifo_slot_and_spawned_tasks() {
    model(2, || {
        let rt = Harness::start(2);
        let parent = rt.shared.spawn(Class::NORMAL, async {
            let child = crate::spawn(async { 20 });
            child.await.expect("the child completes") + 1
        });
        assert_eq!(block_on(parent).expect("the parent completes"), 21);
        rt.stop();
    });
}

/// A future that is ready once `ReadyFlag::set` was called, and hands its
/// waker to whoever stands for the kernel.
struct WaitForEvent {
    state: Arc<EventState>,
}

#[derive(Default)]
struct EventState {
    ready: AtomicBool,
    waker: Mutex<Option<Waker>>,
    registered: Condvar,
    /// The worker whose poll registered the waker: with a ring per
    /// worker, the source's home, whose ring the event is posted to.
    polled_on: Mutex<Option<usize>>,
}

impl Future for WaitForEvent {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.state.ready.load(SeqCst) {
            return Poll::Ready(());
        }
        *lock(&self.state.polled_on) =
            crate::runtime::context::with_local(|local| local.map(|local| local.index));
        *lock(&self.state.waker) = Some(cx.waker().clone());
        self.state.registered.notify_one();
        Poll::Pending
    }
}

impl EventState {
    /// Waits until a task registered its waker, then makes its source
    /// ready as the kernel would: the reactor's next poll wakes it.
    fn deliver(&self, shared: &Shared) {
        self.deliver_to(&shared.reactor);
    }

    /// [`deliver`](Self::deliver) through `reactor` (the workers' or the
    /// urgent lane's), on the poll group of the worker that polled the
    /// task (the one group unless each worker has a ring).
    fn deliver_to(&self, reactor: &Reactor) {
        let mut waker = lock(&self.waker);
        while waker.is_none() {
            waker = self
                .registered
                .wait(waker)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        self.ready.store(true, SeqCst);
        let waker = waker.take().expect("registered");
        let home = lock(&self.polled_on).map_or(0, |worker| reactor.group_of(worker));
        reactor.model[home].ready(waker);
    }
}

/// A readiness event reaches a task whatever the workers are doing: one
/// of them is blocked in the reactor (the blocker role, the poller lock),
/// or is about to block, or polls it between tasks; the blocker hands the
/// role back when it leaves to run the woken task.
#[test]
fn loom_real_workers_see_a_readiness_event() {
    model(1, || see_a_readiness_event(Harness::start(2)));
}

/// Spawns a task on `rt` that waits for a readiness event, delivers the
/// event, waits for the task and stops `rt`.
fn see_a_readiness_event(rt: Harness) {
    let state = Arc::new(EventState::default());
    let task = rt.shared.spawn(
        Class::NORMAL,
        WaitForEvent {
            state: state.clone(),
        },
    );
    state.deliver(&rt.shared);
    block_on(task).expect("the task completes");
    rt.stop();
}

/// Two tasks woken by one reactor poll are dispatched to the polling
/// worker's events lane; the first blocks its worker until the second
/// has run, so the second must be taken by the other worker, which
/// sleeps until someone wakes it: the dispatch's surplus notification,
/// or the searcher leaving the search with work in sight.
#[test]
fn loom_real_workers_share_a_dispatch() {
    model(1, || {
        let rt = Harness::start(2);
        let (first, second) = (
            Arc::new(EventState::default()),
            Arc::new(EventState::default()),
        );
        let second_ran = Arc::new((Mutex::new(false), Condvar::new()));
        let blocker = rt.shared.spawn(Class::NORMAL, {
            let (first, second_ran) = (first.clone(), second_ran.clone());
            async move {
                WaitForEvent { state: first }.await;
                // Holds this worker, as a poll that blocks does.
                let (ran, signal) = &*second_ran;
                let mut ran = lock(ran);
                while !*ran {
                    ran = signal.wait(ran).unwrap_or_else(|p| p.into_inner());
                }
            }
        });
        let releaser = rt.shared.spawn(Class::NORMAL, {
            let (second, second_ran) = (second.clone(), second_ran.clone());
            async move {
                WaitForEvent { state: second }.await;
                let (ran, signal) = &*second_ran;
                *lock(ran) = true;
                signal.notify_one();
            }
        });
        // Both become ready before either is polled again, so one
        // reactor poll returns both.
        let mut wakers = Vec::new();
        for state in [&first, &second] {
            let mut waker = lock(&state.waker);
            while waker.is_none() {
                waker = state
                    .registered
                    .wait(waker)
                    .unwrap_or_else(|p| p.into_inner());
            }
            state.ready.store(true, SeqCst);
            wakers.push(waker.take().expect("registered"));
        }
        rt.shared.reactor.model[0].ready_all(wakers);
        block_on(releaser).expect("the releaser completes");
        block_on(blocker).expect("the blocker completes");
        rt.stop();
    });
}

/// With a ring per worker, a task spawned from outside wakes a worker
/// asleep in its own ring: the unpark interrupts that worker's ring, not
/// another's.
#[test]
fn loom_ring_per_worker_runs_a_task_spawned_from_outside() {
    model(2, || {
        let rt = Harness::start_ring_per_worker(2);
        assert!(rt.shared.reactor.has_groups());
        run_a_task_spawned_from_outside(rt);
    });
}

/// With a ring per worker, a readiness event is posted to the ring of the
/// worker that polled its task (the source's home), and reaches the task
/// whatever that worker does: it polls its ring between tasks, or sleeps
/// in it, or is about to; the other worker sleeps in its own ring.
#[test]
fn loom_ring_per_worker_sees_a_readiness_event_on_the_home_ring() {
    model(1, || {
        see_a_readiness_event(Harness::start_ring_per_worker(2))
    });
}

/// An urgent task spawned from outside goes to the urgent lane's queue,
/// and the lane thread, asleep in its own reactor or about to be, is woken
/// for it (`Lane::push` and the lane's `asleep` flag). One worker runs
/// beside it, as it would in a runtime.
#[test]
fn loom_the_lane_runs_an_urgent_task_spawned_from_outside() {
    model(2, || {
        let rt = Harness::start_with(1, true);
        let task = rt.shared.spawn(Class::URGENT, async { 5 });
        assert_eq!(block_on(task).expect("the task completes"), 5);
        rt.stop();
    });
}

/// A readiness event on the lane's own reactor reaches an urgent task:
/// the lane thread blocks in that reactor when it has nothing to run, and
/// the task it wakes is queued on the lane, not on a worker.
#[test]
fn loom_the_lane_sees_a_readiness_event_on_its_reactor() {
    model(2, || {
        let rt = Harness::start_with(1, true);
        let state = Arc::new(EventState::default());
        let task = rt.shared.spawn(
            Class::URGENT,
            WaitForEvent {
                state: state.clone(),
            },
        );
        let lane = rt.shared.lane.as_ref().expect("the runtime has a lane");
        state.deliver_to(&lane.reactor);
        block_on(task).expect("the task completes");
        rt.stop();
    });
}
