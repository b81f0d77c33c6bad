//! Loom models of parking and notification: no wake-up is ever lost.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p keel --lib --release loom`.
//!
//! The queues are modelled by two counters (items pushed by the notifier,
//! items taken by workers), published and read with the same orderings and
//! fences as the real code: the notifier pushes, fences, and asks `Idle`
//! whom to wake; a worker changes its `Idle` state, fences, and looks at
//! the queues. A lost wake-up shows up as a deadlock (every worker parked,
//! an item still queued), which loom reports as a failure.
//!
//! Timers are modelled by one pending flag and the watch: a filer sets the
//! flag (the new earliest tick) and calls the `timer_filed` protocol; a
//! parking worker reads the flag after registering, and becomes the
//! watcher or sleeps untimed. Loom cannot let time pass, so a watcher's
//! timed park is modelled as its timeout expiring at once. A timer left
//! pending while every worker sleeps untimed is again a deadlock.

use crate::loom::lock;
use crate::loom::sync::atomic::{fence, AtomicUsize, Ordering::*};
use crate::loom::sync::Mutex;
use loom::sync::Arc;
use loom::thread;

use super::idle::Idle;
use super::park::Parker;

#[test]
fn loom_unpark_before_park_is_not_lost() {
    loom::model(|| {
        let parker = Arc::new(Parker::new());
        let remote = parker.clone();
        let thread = thread::spawn(move || {
            let _ = remote.unpark();
        });
        parker.park();
        thread.join().unwrap();
    });
}

#[test]
fn loom_two_unparks_wake_one_park() {
    loom::model(|| {
        let parker = Arc::new(Parker::new());
        let a = parker.clone();
        let b = parker.clone();
        let ta = thread::spawn(move || {
            let _ = a.unpark();
        });
        let tb = thread::spawn(move || {
            let _ = b.unpark();
        });
        parker.park();
        ta.join().unwrap();
        tb.join().unwrap();
    });
}

#[test]
fn loom_unpark_interrupts_a_park_in_the_reactor() {
    // The reactor's blocking call is modelled by a second parker: the
    // owner sleeps in it, and an unpark that reports a reactor sleeper
    // "writes the eventfd" by unparking it. A lost interrupt is a deadlock.
    loom::model(|| {
        let parker = Arc::new(Parker::new());
        let reactor = Arc::new(Parker::new());
        let (p, r) = (parker.clone(), reactor.clone());
        let thread = thread::spawn(move || {
            if p.unpark() {
                let _ = r.unpark();
            }
        });
        parker.park_in(|| reactor.park());
        thread.join().unwrap();
    });
}

/// The protocol's participants, as in `Shared`.
struct Model {
    idle: Idle,
    parkers: Vec<Parker>,
    pushed: AtomicUsize,
    taken: AtomicUsize,
    /// Set by the harness once every item is taken, to release the workers.
    /// Only ever accessed by read-modify-writes, which always see the
    /// latest value: a plain load after a coalesced unpark token is ordered
    /// by a release sequence through another thread's swap, and a plain
    /// store amid other threads' RMWs is misordered by loom 0.7; either
    /// way loom reports a deadlock that the memory model rules out.
    done: AtomicUsize,
    items: usize,
    /// 1 while a timer is pending (the earliest tick), 0 otherwise.
    timer: AtomicUsize,
    /// Timers the test files (0 or 1) and timers fired.
    timers: usize,
    /// Whether worker 0 files the timer (from a task: no notification)
    /// instead of the main thread.
    worker_files: bool,
    fired: AtomicUsize,
    /// The worker watching the timer, as `Shared::watch`.
    watch: Mutex<Option<usize>>,
}

impl Model {
    fn new(workers: usize, items: usize, timers: usize, worker_files: bool) -> Arc<Model> {
        Arc::new(Model {
            idle: Idle::new(workers),
            parkers: (0..workers).map(|_| Parker::new()).collect(),
            pushed: AtomicUsize::new(0),
            taken: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            items,
            timer: AtomicUsize::new(0),
            timers,
            worker_files,
            fired: AtomicUsize::new(0),
            watch: Mutex::new(None),
        })
    }

    fn is_done(&self) -> bool {
        self.done.fetch_add(0, SeqCst) != 0
    }

    /// `Shared::notify_one`.
    fn notify_one(&self) {
        fence(SeqCst);
        if let Some(worker) = self.idle.worker_to_notify() {
            let _ = self.parkers[worker].unpark();
        }
    }

    /// `Shared::has_visible_work`.
    fn has_visible_work(&self) -> bool {
        fence(SeqCst);
        self.pushed.load(Acquire) > self.taken.load(Acquire)
    }

    /// A pop: takes one item if one is queued.
    fn take(&self) -> bool {
        let mut taken = self.taken.load(Acquire);
        loop {
            if taken >= self.pushed.load(Acquire) {
                return false;
            }
            match self
                .taken
                .compare_exchange(taken, taken + 1, AcqRel, Acquire)
            {
                Ok(_) => {
                    self.maybe_release();
                    return true;
                }
                Err(actual) => taken = actual,
            }
        }
    }

    /// Harness, not protocol: once every item is taken and every timer
    /// fired, release everyone.
    fn maybe_release(&self) {
        if self.taken.fetch_add(0, SeqCst) == self.items
            && self.fired.fetch_add(0, SeqCst) == self.timers
            && self.done.fetch_or(1, SeqCst) == 0
        {
            for parker in &self.parkers {
                let _ = parker.unpark();
            }
        }
    }

    /// `TimerDriver::file` of a new earliest timer, then
    /// `Shared::timer_filed`.
    fn file_timer(&self) {
        self.timer.swap(1, SeqCst);
        fence(SeqCst);
        let watcher = *lock(&self.watch);
        match watcher {
            Some(worker) => {
                let _ = self.parkers[worker].unpark();
            }
            None => self.notify_one(),
        }
    }

    /// `TimerDriver::fire_due`, with every pending timer due.
    fn fire_timers(&self) {
        if self.timer.swap(0, SeqCst) == 1 {
            self.fired.fetch_add(1, SeqCst);
            self.maybe_release();
        }
    }

    /// `Worker::watch_timers`: whether to park with a timeout.
    fn watch_timers(&self, index: usize) -> bool {
        if self.timer.fetch_add(0, SeqCst) == 0 {
            return false;
        }
        let mut watch = lock(&self.watch);
        if watch.is_some() {
            return false;
        }
        *watch = Some(index);
        true
    }

    /// The notifier: pushes `items` one at a time, notifying after each.
    fn notifier(&self) {
        for _ in 0..self.items {
            let pushed = self.pushed.load(Relaxed);
            self.pushed.store(pushed + 1, Release);
            self.notify_one();
        }
    }

    /// `Worker::run` with the pick, spin and park steps reduced to the
    /// protocol (no spin: the policy only delays parking).
    fn worker(&self, index: usize) {
        let mut searching = false;
        if index == 0 && self.worker_files {
            // A task on this worker files the timer: `timer_filed` skips
            // the notification, since this worker reads the tick before it
            // parks.
            self.timer.swap(1, SeqCst);
            fence(SeqCst);
        }
        while !self.is_done() {
            if self.take() {
                if searching {
                    searching = false;
                    if self.idle.transition_from_searching() && self.has_visible_work() {
                        self.notify_one();
                    }
                }
                // After every poll: fire due timers.
                self.fire_timers();
                continue;
            }
            if !searching {
                searching = true;
                self.idle.transition_to_searching();
            }
            let last = self.idle.transition_to_parked(index, searching);
            if last && self.has_visible_work() {
                self.idle.unpark_self(index);
            } else {
                fence(SeqCst);
                if self.watch_timers(index) {
                    // A timed park whose timeout expires at once.
                } else {
                    self.parkers[index].park();
                }
                self.idle.unpark_self(index);
                let mut watch = lock(&self.watch);
                if *watch == Some(index) {
                    *watch = None;
                }
            }
            searching = true;
            self.fire_timers();
        }
    }
}

fn run_model(workers: usize, items: usize, timers: usize) {
    run_model_with(workers, items, timers, false);
}

fn run_model_with(workers: usize, items: usize, timers: usize, worker_files: bool) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let model = Model::new(workers, items, timers, worker_files);
        let threads: Vec<_> = (0..workers)
            .map(|index| {
                let model = model.clone();
                thread::spawn(move || model.worker(index))
            })
            .collect();
        model.notifier();
        if !worker_files {
            for _ in 0..timers {
                model.file_timer();
            }
        }
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(model.taken.load(SeqCst), items);
        assert_eq!(model.fired.load(SeqCst), timers);
    });
}

#[test]
fn loom_one_worker_one_wake() {
    run_model(1, 1, 0);
}

#[test]
fn loom_one_worker_two_wakes() {
    run_model(1, 2, 0);
}

#[test]
fn loom_two_workers_one_wake() {
    run_model(2, 1, 0);
}

#[test]
fn loom_two_workers_two_wakes() {
    run_model(2, 2, 0);
}

#[test]
fn loom_one_worker_one_timer() {
    run_model(1, 0, 1);
}

#[test]
fn loom_two_workers_one_timer() {
    run_model(2, 0, 1);
}

#[test]
fn loom_two_workers_one_wake_one_timer() {
    run_model(2, 1, 1);
}

#[test]
fn loom_two_workers_timer_filed_by_a_worker() {
    run_model_with(2, 1, 1, true);
}

/// The shutdown drain against a push from outside the workers
/// (`Shared::inject` against `Shared::drop_all_tasks`), with the injector
/// modelled as a count of queued tasks, pushed with `Release` and taken
/// with `AcqRel` as the lock-free queue does.
///
/// The pusher has already read `draining` as false (`Shared::schedule`);
/// the drain sets it and takes what is queued. Without the pusher's second
/// look after its push, the drain can take nothing and finish just before
/// the push lands: the task is stranded and its handle never resolves.
/// Every interleaving must end with nothing queued.
#[test]
fn loom_a_push_racing_the_drain_is_never_stranded() {
    use loom::sync::atomic::AtomicBool;
    loom::model(|| {
        let draining = Arc::new(AtomicBool::new(false));
        let queued = Arc::new(AtomicUsize::new(0));
        let (d, q) = (draining.clone(), queued.clone());
        let pusher = thread::spawn(move || {
            if d.load(Acquire) {
                return; // `schedule` drops the task itself.
            }
            q.fetch_add(1, Release);
            fence(SeqCst);
            if d.load(Relaxed) {
                q.swap(0, AcqRel);
            }
        });
        draining.store(true, SeqCst);
        fence(SeqCst);
        queued.swap(0, AcqRel);
        pusher.join().unwrap();
        assert_eq!(queued.load(SeqCst), 0, "a task was stranded in the queue");
    });
}

/// A sleeper dozes (sleeps without its periodic check) while a blocker
/// leaves its poll: either the sleeper sees the departure and does not
/// doze, or the departer sees the dozer and sets the alarm, which wakes
/// it (see `doze`). A doze
/// that outlives the departure is a deadlock here: the model's dozer
/// parks untimed and nobody else would wake it.
#[test]
fn loom_a_departure_never_misses_a_dozer() {
    use super::doze::Doze;
    use crate::loom::sync::atomic::AtomicBool;

    loom::model(|| {
        let doze = Arc::new(Doze::new(2));
        let parker = Arc::new(Parker::new());
        // The blocker role of the one poll group.
        let blocked = Arc::new(AtomicBool::new(true));
        let seen = doze.departures();
        let departer = {
            let (doze, parker, blocked) = (doze.clone(), parker.clone(), blocked.clone());
            thread::spawn(move || {
                // The blocker leaves its poll: gives up the role, then
                // counts the departure and sets the alarm, which (no time
                // passing here) fires at once and wakes the dozers.
                blocked.store(false, Release);
                if doze.must_arm() {
                    doze.wake_dozers(|worker| {
                        assert_eq!(worker, 1);
                        let _ = parker.unpark();
                    });
                }
            })
        };
        // Worker 1, after its quiet checks.
        if doze.try_doze(1, seen, || blocked.load(Relaxed)) {
            parker.park();
            doze.wake_up(1);
        }
        departer.join().unwrap();
    });
}

/// The alarm fails (the kernel refused its timer, or its wait failed)
/// while a sleeper is about to doze: either the sleeper registered in time
/// for the scan that wakes the dozers, or it sees dozing turned off after
/// its registration and does not doze (see `Doze::disable`). A doze that
/// slips between the two is a deadlock here, as above.
#[test]
fn loom_a_failed_alarm_never_strands_a_dozer() {
    use super::doze::Doze;

    loom::model(|| {
        let doze = Arc::new(Doze::new(2));
        let parker = Arc::new(Parker::new());
        let seen = doze.departures();
        let disabler = {
            let (doze, parker) = (doze.clone(), parker.clone());
            thread::spawn(move || {
                doze.disable("the model's alarm failed".into(), |worker| {
                    assert_eq!(worker, 1);
                    let _ = parker.unpark();
                });
            })
        };
        if doze.try_doze(1, seen, || true) {
            parker.park();
            doze.wake_up(1);
        }
        disabler.join().unwrap();
    });
}
