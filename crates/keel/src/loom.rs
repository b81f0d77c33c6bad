//! The door through which keel's modelled code reaches synchronisation
//! primitives.
//!
//! Every atomic, lock and condition variable of the scheduler, the timers
//! and the accounting comes from here: `std` in normal builds, [`loom`]
//! when the crate is built with `--cfg loom`. Loom then explores every
//! interleaving of the park/unpark and notification protocols in
//! `sched::{park, idle}`, which are written against these names only. The
//! reactor (`io`) is not modelled and uses `std` directly.
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
