//! `Idle`: which workers sleep, which search, and whom a notifier wakes.
//!
//! A worker that runs out of tasks *searches* (looks at every queue, then
//! spins if the spin policy says so) and finally *parks*. Whoever makes work
//! visible (a spawn, a wake) then asks [`Idle::worker_to_notify`] whom to
//! unpark. The answer is at most one worker, and none while some worker is
//! searching: the searcher will find the work. That is what keeps a burst
//! of wakes from waking a herd.
//!
//! # Invariants
//!
//! `state` packs two counts, changed only with `SeqCst` read-modify-writes:
//! the number of searching workers (low 16 bits) and the number of workers
//! not in `sleepers` (the rest). `sleepers` and the unparked count change
//! together under the `sleepers` lock, so `sleepers.len() == workers -
//! unparked` whenever the lock is free.
//!
//! # Why no wakeup is lost
//!
//! A notifier publishes its work, then reads `state` (both `SeqCst`). A
//! worker leaves the searching set (one RMW on `state`), then looks at
//! every queue again. In the single total order of `SeqCst` operations
//! either the notifier's read comes after the last searcher left, so it saw
//! `searching == 0` and unparks a sleeper; or it came before, so the last
//! searcher's re-check comes after the work was published and finds it.
//! Hence the two duties of callers:
//!
//! 1. After [`Idle::transition_to_parked`] returns `true` (this worker was
//!    the last searcher), re-check every queue before sleeping; if work is
//!    there, call [`Idle::unpark_self`] and go back to searching.
//! 2. After [`Idle::transition_from_searching`] returns `true`, re-check
//!    every queue and, if work is there, notify a worker, so work that
//!    arrived while this worker was searching gets a worker of its own.
//!
//! A woken worker is counted as searching *by its notifier* (under the
//! lock), so a second notification in the same instant finds a searcher and
//! does not wake another worker: wake-ups chain one at a time instead.

use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use crate::loom::sync::Mutex;

const SEARCHING_BITS: u32 = 16;
const ONE_SEARCHING: usize = 1;
const ONE_UNPARKED: usize = 1 << SEARCHING_BITS;
const SEARCHING_MASK: usize = ONE_UNPARKED - 1;

/// Most workers a runtime may have: the searching count must fit its field.
pub(crate) const MAX_WORKERS: usize = SEARCHING_MASK;

/// The idle-worker bookkeeping shared by all workers (see the module docs).
#[derive(Debug)]
pub(crate) struct Idle {
    /// Searching count and unparked count, packed.
    state: AtomicUsize,
    /// Indices of parked workers. Only changed with `state`, under the lock.
    sleepers: Mutex<Vec<usize>>,
    workers: usize,
}

fn searching(state: usize) -> usize {
    state & SEARCHING_MASK
}

fn unparked(state: usize) -> usize {
    state >> SEARCHING_BITS
}

impl Idle {
    /// All `workers` start unparked and not searching.
    pub(crate) fn new(workers: usize) -> Idle {
        assert!(workers <= MAX_WORKERS, "too many workers");
        Idle {
            state: AtomicUsize::new(workers * ONE_UNPARKED),
            sleepers: Mutex::new(Vec::with_capacity(workers)),
            workers,
        }
    }

    fn should_wake(&self) -> bool {
        let state = self.state.load(SeqCst);
        searching(state) == 0 && unparked(state) < self.workers
    }

    /// Called after publishing work. Returns the worker to unpark, if any;
    /// that worker is already counted as unparked and searching.
    pub(crate) fn worker_to_notify(&self) -> Option<usize> {
        if !self.should_wake() {
            return None;
        }
        let mut sleepers = lock(&self.sleepers);
        if !self.should_wake() {
            return None;
        }
        let worker = sleepers.pop()?;
        self.state.fetch_add(ONE_SEARCHING + ONE_UNPARKED, SeqCst);
        Some(worker)
    }

    /// The calling worker found no task and starts searching.
    pub(crate) fn transition_to_searching(&self) {
        self.state.fetch_add(ONE_SEARCHING, SeqCst);
    }

    /// The calling worker, which was searching, found a task. Returns `true`
    /// if it was the last searcher (see duty 2 in the module docs).
    #[must_use]
    pub(crate) fn transition_from_searching(&self) -> bool {
        searching(self.state.fetch_sub(ONE_SEARCHING, SeqCst)) == 1
    }

    /// Registers `worker` as parked. Returns `true` if it was the last
    /// searcher (see duty 1 in the module docs).
    #[must_use]
    pub(crate) fn transition_to_parked(&self, worker: usize, is_searching: bool) -> bool {
        let mut sleepers = lock(&self.sleepers);
        let delta = ONE_UNPARKED + if is_searching { ONE_SEARCHING } else { 0 };
        let previous = self.state.fetch_sub(delta, SeqCst);
        sleepers.push(worker);
        is_searching && searching(previous) == 1
    }

    /// A registered worker leaves the sleepers: it decided not to sleep
    /// after all, or it woke (notified, timed out, or on a stale token).
    /// Returns `true` if it took itself out of `sleepers`; `false` if a
    /// notifier already did (the worker is then already counted as
    /// searching, and the notifier's token may still be on its way: the
    /// next park then returns at once, which costs one extra search).
    /// Either way the worker continues as a searcher.
    pub(crate) fn unpark_self(&self, worker: usize) -> bool {
        let mut sleepers = lock(&self.sleepers);
        match sleepers.iter().position(|&w| w == worker) {
            Some(at) => {
                sleepers.swap_remove(at);
                self.state.fetch_add(ONE_SEARCHING + ONE_UNPARKED, SeqCst);
                true
            }
            None => false,
        }
    }

    /// How many workers are parked now.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn sleeping(&self) -> usize {
        lock(&self.sleepers).len()
    }
}
