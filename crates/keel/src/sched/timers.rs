//! [`TimerHandle`]: the timers as the rest of the runtime files them.
//!
//! Filing a timer has two halves. The wheel takes it (`TimerDriver::file`),
//! and if it became the earliest, some worker must learn of it: a parked
//! watcher sleeping until a later tick is woken to re-read, or a sleeping
//! worker is notified to become the watcher (`Shared::timer_filed`, the
//! filer's half of the protocol described in `crate::time`). A caller that
//! did the first half and forgot the second would leave the timer to fire
//! only when some other event woke a worker: a lost wake-up.
//!
//! So the driver is private to the scheduler, and everything outside it
//! (sleeps, the batch reader's deadlines) goes through this handle, whose
//! [`file`](TimerHandle::file) does both halves.

use std::task::Waker;
use std::time::Instant;

use super::Shared;
use crate::time::driver::TimerWake;
use crate::time::wheel::TimerKey;

/// A runtime's timers, borrowed from its shared state (see the module
/// docs).
#[derive(Clone, Copy)]
pub(crate) struct TimerHandle<'a> {
    shared: &'a Shared,
}

impl<'a> TimerHandle<'a> {
    pub(super) fn new(shared: &'a Shared) -> TimerHandle<'a> {
        TimerHandle { shared }
    }

    /// Files (or re-files, under `key`) a timer due at `deadline_ns` on
    /// the timers' clock that wakes `waker` (its task queued as `wake`
    /// says), and makes sure a worker will fire it. Returns its key.
    pub(crate) fn file(
        self,
        key: Option<TimerKey>,
        deadline_ns: u64,
        waker: &Waker,
        wake: TimerWake,
    ) -> TimerKey {
        let (key, earliest) = self.shared.timer_driver.file(key, deadline_ns, waker, wake);
        if earliest {
            self.shared.timer_filed();
        }
        key
    }

    /// Cancels a timer that has not fired.
    pub(crate) fn cancel(self, key: TimerKey) {
        self.shared.timer_driver.cancel(key);
    }

    /// The timers' clock now, in nanoseconds.
    pub(crate) fn now(self) -> u64 {
        self.shared.timer_driver.now()
    }

    /// `instant` on the timers' clock.
    pub(crate) fn ns_at(self, instant: Instant) -> u64 {
        self.shared.timer_driver.ns_at(instant)
    }
}
