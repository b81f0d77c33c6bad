//! The door through which keel's modelled code reaches synchronisation
//! primitives.
//!
//! Every atomic, lock and condition variable of the scheduler, the timers
//! and the accounting comes from here: `std` in normal builds, [`loom`]
//! when the crate is built with `--cfg loom`. Loom then explores every
//! interleaving of the park/unpark and notification protocols in
//! `sched::{park, idle}`, which are written against these names only, and
//! of the real worker loop (`sched::loom_worker`). The reactor (`io`) uses
//! `std` for its registrations and models only the blocker role and its
//! poller under loom (see `io::reactor::model`).
//!
//! The work-stealing queues come from here too ([`deque`]): `crossbeam-
//! deque`'s in normal builds, and under loom a queue behind a modelled lock
//! with the same interface, so that loom sees a task handed from one
//! thread to another through a queue (crossbeam's own atomics are not
//! loom's, and loom would report the hand-off as a data race).
//!
//! [`loom`]: https://docs.rs/loom

#[cfg(not(loom))]
pub(crate) mod sync {
    pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};

    pub(crate) mod atomic {
        pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
    }
}

#[cfg(loom)]
pub(crate) mod sync {
    pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};

    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
    }
}

/// Locks `mutex`, ignoring poisoning.
///
/// keel's own locks guard plain bookkeeping that every writer leaves
/// consistent before it can panic, and user code never runs while they are
/// held, so a poisoned lock carries no broken invariant.
pub(crate) fn lock<T>(mutex: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(not(loom))]
pub(crate) mod deque {
    pub(crate) use crossbeam_deque::{Injector, Steal, Stealer, Worker};
}

/// The subset of `crossbeam-deque` keel uses, as FIFO queues behind a
/// loom lock (see the module docs). Stealing moves half of the queue, as
/// crossbeam's batch steal does; `Retry` never happens.
#[cfg(loom)]
pub(crate) mod deque {
    use std::collections::VecDeque;

    use super::lock;
    use super::sync::Mutex;
    use loom::sync::Arc;

    /// The outcome of a steal.
    pub(crate) enum Steal<T> {
        Empty,
        Success(T),
        #[allow(dead_code)]
        Retry,
    }

    /// The owner's end of a queue.
    pub(crate) struct Worker<T>(Arc<Mutex<VecDeque<T>>>);

    /// A thief's end of a queue.
    pub(crate) struct Stealer<T>(Arc<Mutex<VecDeque<T>>>);

    /// A queue every thread pushes to.
    pub(crate) struct Injector<T>(Mutex<VecDeque<T>>);

    /// Moves half of `from` (rounded up) to the back of `into`, and pops
    /// the first of them.
    fn steal_half<T>(from: &Mutex<VecDeque<T>>, into: &Worker<T>) -> Steal<T> {
        let mut from = lock(from);
        let Some(first) = from.pop_front() else {
            return Steal::Empty;
        };
        let more = from.len().div_ceil(2);
        let mut into = lock(&into.0);
        into.extend(from.drain(..more));
        Steal::Success(first)
    }

    impl<T> Worker<T> {
        pub(crate) fn new_fifo() -> Worker<T> {
            Worker(Arc::new(Mutex::new(VecDeque::new())))
        }

        pub(crate) fn stealer(&self) -> Stealer<T> {
            Stealer(self.0.clone())
        }

        pub(crate) fn push(&self, value: T) {
            lock(&self.0).push_back(value);
        }

        pub(crate) fn pop(&self) -> Option<T> {
            lock(&self.0).pop_front()
        }

        pub(crate) fn is_empty(&self) -> bool {
            lock(&self.0).is_empty()
        }
    }

    impl<T> Stealer<T> {
        pub(crate) fn steal(&self) -> Steal<T> {
            lock(&self.0)
                .pop_front()
                .map_or(Steal::Empty, Steal::Success)
        }

        pub(crate) fn steal_batch_and_pop(&self, into: &Worker<T>) -> Steal<T> {
            steal_half(&self.0, into)
        }

        pub(crate) fn is_empty(&self) -> bool {
            lock(&self.0).is_empty()
        }
    }

    impl<T> Injector<T> {
        pub(crate) fn new() -> Injector<T> {
            Injector(Mutex::new(VecDeque::new()))
        }

        pub(crate) fn push(&self, value: T) {
            lock(&self.0).push_back(value);
        }

        pub(crate) fn steal(&self) -> Steal<T> {
            lock(&self.0)
                .pop_front()
                .map_or(Steal::Empty, Steal::Success)
        }

        pub(crate) fn steal_batch_and_pop(&self, into: &Worker<T>) -> Steal<T> {
            steal_half(&self.0, into)
        }

        pub(crate) fn is_empty(&self) -> bool {
            lock(&self.0).is_empty()
        }
    }
}
