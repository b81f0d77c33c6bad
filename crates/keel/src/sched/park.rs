//! `Parker`: how one thread sleeps until another says there is work.
//!
//! A parker holds at most one *token*. [`Parker::unpark`] deposits it;
//! [`Parker::park`] consumes it, blocking until it is there. Because the
//! token survives until consumed, an unpark that races ahead of the park it
//! is meant for is never lost: the park returns at once. A second unpark
//! before the park is absorbed into the same token, so a parker wakes at
//! most once per park however many notifiers raced.
//!
//! # Protocol
//!
//! `state` is one of `EMPTY`, `PARKED` or `NOTIFIED`:
//!
//! 1. `park`: swap `NOTIFIED → EMPTY` and return if a token was waiting.
//!    Otherwise take the lock, move `EMPTY → PARKED` and wait on the
//!    condition variable until `state` reads `NOTIFIED`, then reset it to
//!    `EMPTY`. Spurious condvar wake-ups loop back to the wait.
//! 2. `unpark`: swap the state to `NOTIFIED`. If it was `PARKED`, take the
//!    lock (so the sleeper is certainly inside `wait`, not between its check
//!    and its wait) and signal the condition variable.
//!
//! The lock is only taken when a thread really sleeps, so an unpark of a
//! running worker costs one atomic swap.
//!
//! [`Parker::park_timeout`] follows the same protocol and, when its time is
//! up, swaps the state back to `EMPTY` itself, consuming a token that
//! raced with the timeout: the owner is awake either way.
//!
//! # Sleeping in the reactor
//!
//! [`Parker::park_in`] sleeps in a caller-given blocking call instead (the
//! reactor's `epoll_wait`): the owner moves `EMPTY → PARKED_IN_DRIVER`,
//! makes the call, and swaps back to `EMPTY`. `unpark` then cannot signal a
//! condition variable; it returns `true` and its caller interrupts the call
//! (writes the reactor's eventfd). An interrupt that lands after the call
//! returned leaves one stale event, which only makes a later call return
//! early.

use std::time::{Duration, Instant};

use crate::loom::lock;
use crate::loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use crate::loom::sync::{Condvar, Mutex, MutexGuard};

const EMPTY: usize = 0;
const PARKED: usize = 1;
const NOTIFIED: usize = 2;
const PARKED_IN_DRIVER: usize = 3;

/// A one-token park/unpark primitive (see the module docs).
#[derive(Debug)]
pub(crate) struct Parker {
    /// `EMPTY`, `PARKED`, `NOTIFIED` or `PARKED_IN_DRIVER`. Any thread may
    /// write.
    state: AtomicUsize,
    /// Held by a sleeper between its state change and its wait.
    lock: Mutex<()>,
    condvar: Condvar,
}

impl Parker {
    pub(crate) fn new() -> Parker {
        Parker {
            state: AtomicUsize::new(EMPTY),
            lock: Mutex::new(()),
            condvar: Condvar::new(),
        }
    }

    /// Blocks the calling thread until a token is available, then consumes it.
    pub(crate) fn park(&self) {
        let Some(mut guard) = self.begin_park() else {
            return;
        };
        loop {
            guard = self
                .condvar
                .wait(guard)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if self.take_token() {
                return;
            }
            // Spurious wake-up: the state is still PARKED.
        }
    }

    /// Like [`Parker::park`], but returns after `timeout` at the latest
    /// (consuming the token if one arrived meanwhile). Returns `true` if a
    /// token ended the wait, `false` if the time ran out first.
    pub(crate) fn park_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let Some(mut guard) = self.begin_park() else {
            return true;
        };
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            guard = self
                .condvar
                .wait_timeout(guard, remaining)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
            if self.take_token() {
                return true;
            }
            if Instant::now() >= deadline {
                // Timed out: PARKED → EMPTY, or consume a token that just
                // arrived; either way the owner is awake now.
                return self.state.swap(EMPTY, SeqCst) == NOTIFIED;
            }
        }
    }

    /// Sleeps in `block`, which must return soon after the caller of an
    /// [`unpark`](Parker::unpark) that returned `true` interrupts it (see
    /// the module docs). Returns without calling `block` if a token is
    /// waiting; consumes a token that arrives during the call. Returns
    /// whether a token was consumed.
    pub(crate) fn park_in(&self, block: impl FnOnce()) -> bool {
        if self.take_token() {
            return true;
        }
        match self
            .state
            .compare_exchange(EMPTY, PARKED_IN_DRIVER, SeqCst, SeqCst)
        {
            Ok(_) => {}
            Err(NOTIFIED) => {
                self.state.swap(EMPTY, SeqCst);
                return true;
            }
            Err(other) => unreachable!("parker in state {other} while its owner parks"),
        }
        block();
        // Woken, timed out, or an event: awake either way; a token that
        // came meanwhile is consumed with the state.
        self.state.swap(EMPTY, SeqCst) == NOTIFIED
    }

    /// Step 1 of `park`: consumes a waiting token and returns `None`, or
    /// moves to `PARKED` and returns the lock to wait with.
    fn begin_park(&self) -> Option<MutexGuard<'_, ()>> {
        if self.take_token() {
            return None;
        }
        let guard = lock(&self.lock);
        match self.state.compare_exchange(EMPTY, PARKED, SeqCst, SeqCst) {
            Ok(_) => Some(guard),
            Err(NOTIFIED) => {
                // The token arrived between the fast path and the lock.
                // (A swap, not a store: every access to `state` is a
                // read-modify-write, so all of them form one chain.)
                self.state.swap(EMPTY, SeqCst);
                None
            }
            Err(other) => unreachable!("parker in state {other} while its owner parks"),
        }
    }

    /// Consumes the token if it is there.
    fn take_token(&self) -> bool {
        self.state
            .compare_exchange(NOTIFIED, EMPTY, SeqCst, SeqCst)
            .is_ok()
    }

    /// Deposits the token, waking the owner if it is parked. Returns `true`
    /// if the owner sleeps in [`Parker::park_in`]: the caller must then
    /// interrupt its blocking call.
    #[must_use = "an owner asleep in park_in must be interrupted by the caller"]
    pub(crate) fn unpark(&self) -> bool {
        match self.state.swap(NOTIFIED, SeqCst) {
            EMPTY | NOTIFIED => false,
            PARKED => {
                // Taking the lock orders this signal after the sleeper's
                // `wait` began, so the signal cannot fall between its state
                // change and its wait.
                drop(lock(&self.lock));
                self.condvar.notify_one();
                false
            }
            PARKED_IN_DRIVER => true,
            other => unreachable!("parker in unknown state {other}"),
        }
    }
}
