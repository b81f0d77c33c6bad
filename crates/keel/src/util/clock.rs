//! `Clock`: the runtime's monotonic nanosecond clock.
//!
//! Every timestamp keel keeps (schedule times, state changes) is a `u64` of
//! nanoseconds since the runtime's epoch, so that it fits an atomic and
//! differences are plain subtraction.
//!
//! A poll takes two timestamps, and a wake by a task or from outside the
//! workers one (a task that yields, and the tasks of a reactor poll or of
//! fired timers, are stamped with a time the worker read anyway), so the
//! clock is on the hottest path there is. It reads the CPU's time-stamp counter through
//! `quanta` (a few nanoseconds, against some 25 ns for the vDSO's
//! `clock_gettime` with `Instant`'s arithmetic), calibrated once per
//! process; where the counter is not invariant across cores and power
//! states, `quanta` falls back to the OS monotonic clock by itself.

/// Monotonic nanoseconds since the runtime was built.
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    source: quanta::Clock,
    /// The raw counter at the epoch.
    epoch: u64,
}

impl Clock {
    pub(crate) fn new() -> Clock {
        let source = quanta::Clock::new();
        let epoch = source.raw();
        Clock { source, epoch }
    }

    pub(crate) fn now(&self) -> u64 {
        self.source.delta_as_nanos(self.epoch, self.source.raw())
    }
}
