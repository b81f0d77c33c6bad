//! `TimerDriver`: the wheel shared by a runtime's workers.
//!
//! Timers are filed by `Sleep` futures from any thread and fired by
//! workers: on every poll a worker compares the earliest deadline (one
//! relaxed load of [`TimerDriver::next`]) with the time it already read,
//! and turns the wheel when something is due; a parked worker watching the
//! earliest deadline turns it when it wakes (see `sched::worker`).
//!
//! Resolution is one tick of [`TICK_NS`]. A timer due at `d` ns is filed at
//! tick `ceil(d / tick)` and the wheel advances to `floor(now / tick)`, so
//! a timer never fires before its deadline; it fires at most one tick and
//! one poll after it.
//!
//! Timers keep time on the OS monotonic clock (`std::time::Instant`), not
//! on the runtime's TSC clock: the TSC's conversion to nanoseconds is
//! calibrated and may drift from the OS clock by parts per million, and
//! "never early" must hold as measured by anyone's `Instant`. The workers'
//! TSC readings only serve as a cheap hint that something may be due: the
//! earliest deadline is also kept on the runtime clock ([`TimerDriver::
//! next_hint`]), recomputed from both clocks whenever it changes, so the
//! two clocks' drift only accumulates over one timer's span, not uptime.

use std::task::Waker;
use std::time::Instant;

use super::wheel::{TimerKey, Wheel};
use crate::loom::lock;
use crate::loom::sync::atomic::{
    AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use crate::loom::sync::Mutex;
use crate::util::clock::Clock;

/// One tick: 1 ms, the resolution of every timer.
pub(crate) const TICK_NS: u64 = 1_000_000;

/// No timer is pending.
pub(crate) const NEVER: u64 = u64::MAX;

/// The tick at which a deadline of `ns` may fire.
pub(crate) fn tick_at_or_after(ns: u64) -> u64 {
    ns.div_ceil(TICK_NS)
}

/// The last tick that has fully begun at `ns`.
pub(crate) fn tick_before(ns: u64) -> u64 {
    ns / TICK_NS
}

/// The nanosecond at which `tick` begins.
pub(crate) fn tick_start(tick: u64) -> u64 {
    tick.saturating_mul(TICK_NS)
}

/// How the task a timer wakes is queued, when a worker fires it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerWake {
    /// As a task that waited for an event (a sleep, a timeout): ahead of
    /// tasks that woke themselves.
    Event,
    /// Behind the tasks that waited for events, in the yields lane: work
    /// that chose to wait until then, and is not made later by a few
    /// polls more. A batch released by its deadline: the batch policy's
    /// deadlines of many streams fall on one tick, by design, and a burst
    /// of their deliveries queued ahead of an event would hold up the task
    /// that waited for it (an API request behind a few hundred handlers).
    Deferred,
}

/// A filed timer: whom it wakes, and how the task is queued.
#[derive(Debug)]
struct Filed {
    waker: Waker,
    wake: TimerWake,
}

/// The timer wheel of one runtime and its earliest deadline.
#[derive(Debug)]
pub(crate) struct TimerDriver {
    /// Time zero of every deadline, on the OS monotonic clock.
    origin: Instant,
    wheel: Mutex<Wheel<Filed>>,
    /// The earliest pending tick, or [`NEVER`]. Written under the wheel's
    /// lock; read without it by workers deciding how long to park.
    next: AtomicU64,
    /// When that tick begins on the runtime clock (the workers' TSC), or
    /// [`NEVER`]: what workers compare with the time they read after each
    /// poll. Written with `next`.
    next_hint: AtomicU64,
    /// The runtime clock, to compute `next_hint`.
    clock: Clock,
}

impl TimerDriver {
    pub(crate) fn new(clock: Clock) -> TimerDriver {
        TimerDriver {
            origin: Instant::now(),
            wheel: Mutex::new(Wheel::new(0)),
            next: AtomicU64::new(NEVER),
            next_hint: AtomicU64::new(NEVER),
            clock,
        }
    }

    /// Publishes the wheel's earliest tick (called with the wheel locked).
    /// Returns it and the previous one.
    fn publish_next(&self, wheel: &Wheel<Filed>) -> (u64, u64) {
        let next = wheel.next_deadline().unwrap_or(NEVER);
        let hint = if next == NEVER {
            NEVER
        } else {
            let wait = tick_start(next).saturating_sub(self.now());
            self.clock.now().saturating_add(wait)
        };
        self.next_hint.store(hint, SeqCst);
        (next, self.next.swap(next, SeqCst))
    }

    /// Nanoseconds since the driver's origin, on the OS monotonic clock.
    pub(crate) fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// `instant` in nanoseconds since the origin (zero if before it).
    pub(crate) fn ns_at(&self, instant: Instant) -> u64 {
        u64::try_from(instant.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The earliest pending tick, or [`NEVER`].
    pub(crate) fn next_tick(&self) -> u64 {
        self.next.load(SeqCst)
    }

    /// Files (or re-files) a timer due at `deadline_ns` that wakes `waker`,
    /// its task queued as `wake` says.
    /// Returns its key, and whether the earliest pending tick moved earlier
    /// (then a worker must be made to watch it: `TimerHandle::file`, the
    /// only caller outside the scheduler's own, does that). That includes a timer already overdue, which
    /// the wheel keeps at its current tick.
    pub(crate) fn file(
        &self,
        key: Option<TimerKey>,
        deadline_ns: u64,
        waker: &Waker,
        wake: TimerWake,
    ) -> (TimerKey, bool) {
        let tick = tick_at_or_after(deadline_ns);
        let mut wheel = lock(&self.wheel);
        if let Some(key) = key {
            // Polled again with the same deadline (a timeout around a future
            // that wakes often): keep the timer, refresh only its waker.
            if let Some((filed_tick, filed)) = wheel.get_mut(key) {
                if filed_tick == tick {
                    if !filed.waker.will_wake(waker) {
                        filed.waker.clone_from(waker);
                    }
                    filed.wake = wake;
                    return (key, false);
                }
            }
            wheel.cancel(key);
        }
        let key = wheel.insert(
            tick,
            Filed {
                waker: waker.clone(),
                wake,
            },
        );
        let (earliest, previous) = self.publish_next(&wheel);
        (key, earliest < previous)
    }

    /// Cancels a timer that has not fired.
    pub(crate) fn cancel(&self, key: TimerKey) {
        let mut wheel = lock(&self.wheel);
        if wheel.cancel(key).is_some() {
            self.publish_next(&wheel);
        }
    }

    /// Whether a timer may be due at `now`, a reading of the runtime clock
    /// (a worker's TSC reading). A hint only: [`TimerDriver::fire_due`]
    /// decides on the driver's own clock.
    pub(crate) fn may_be_due(&self, now: u64) -> bool {
        self.next_hint.load(Relaxed) <= now
    }

    /// Fires every timer due now: hands each one's waker to `wake`, with
    /// how its task is to be queued. Returns how many fired.
    pub(crate) fn fire_due(&self, mut wake: impl FnMut(Waker, TimerWake)) -> usize {
        let now_ns = self.now();
        let mut due = Vec::new();
        {
            let mut wheel = lock(&self.wheel);
            wheel.advance(tick_before(now_ns), |filed| due.push(filed));
            self.publish_next(&wheel);
        }
        // Wake outside the lock: a woken task may file a timer at once.
        let fired = due.len();
        for filed in due {
            wake(filed.waker, filed.wake);
        }
        fired
    }

    /// Drops every pending timer (at shutdown: their wakers hold tasks).
    pub(crate) fn clear(&self) -> Vec<Waker> {
        let mut wheel = lock(&self.wheel);
        let mut all = Vec::new();
        wheel.advance(u64::MAX >> 1, |filed| all.push(filed.waker));
        self.publish_next(&wheel);
        all
    }

    /// Number of pending timers.
    pub(crate) fn len(&self) -> usize {
        lock(&self.wheel).len()
    }
}
