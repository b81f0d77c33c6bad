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

use crate::loom::sync::atomic::{fence, AtomicUsize, Ordering::*};
use loom::sync::Arc;
use loom::thread;

use super::idle::Idle;
use super::park::Parker;

#[test]
fn loom_unpark_before_park_is_not_lost() {
    loom::model(|| {
        let parker = Arc::new(Parker::new());
        let remote = parker.clone();
        let thread = thread::spawn(move || remote.unpark());
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
        let ta = thread::spawn(move || a.unpark());
        let tb = thread::spawn(move || b.unpark());
        parker.park();
        ta.join().unwrap();
        tb.join().unwrap();
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
}

impl Model {
    fn new(workers: usize, items: usize) -> Arc<Model> {
        Arc::new(Model {
            idle: Idle::new(workers),
            parkers: (0..workers).map(|_| Parker::new()).collect(),
            pushed: AtomicUsize::new(0),
            taken: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            items,
        })
    }

    fn is_done(&self) -> bool {
        self.done.fetch_add(0, SeqCst) != 0
    }

    /// `Shared::notify_one`.
    fn notify_one(&self) {
        fence(SeqCst);
        if let Some(worker) = self.idle.worker_to_notify() {
            self.parkers[worker].unpark();
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
                    if taken + 1 == self.items {
                        // Harness, not protocol: release everyone.
                        self.done.fetch_or(1, SeqCst);
                        for parker in &self.parkers {
                            parker.unpark();
                        }
                    }
                    return true;
                }
                Err(actual) => taken = actual,
            }
        }
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
        while !self.is_done() {
            if self.take() {
                if searching {
                    searching = false;
                    if self.idle.transition_from_searching() && self.has_visible_work() {
                        self.notify_one();
                    }
                }
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
                loop {
                    self.parkers[index].park();
                    if self.is_done() || !self.idle.is_parked(index) {
                        break;
                    }
                }
            }
            searching = true;
        }
    }
}

fn run_model(workers: usize, items: usize) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let model = Model::new(workers, items);
        let threads: Vec<_> = (0..workers)
            .map(|index| {
                let model = model.clone();
                thread::spawn(move || model.worker(index))
            })
            .collect();
        model.notifier();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(model.taken.load(SeqCst), items);
    });
}

#[test]
fn loom_one_worker_one_wake() {
    run_model(1, 1);
}

#[test]
fn loom_one_worker_two_wakes() {
    run_model(1, 2);
}

#[test]
fn loom_two_workers_one_wake() {
    run_model(2, 1);
}

#[test]
fn loom_two_workers_two_wakes() {
    run_model(2, 2);
}
