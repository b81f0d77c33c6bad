//! `Clock`: the runtime's monotonic nanosecond clock.
//!
//! Every timestamp keel keeps (schedule times, state changes) is a `u64` of
//! nanoseconds since the runtime's epoch, so that it fits an atomic and
//! differences are plain subtraction.
//!
//! A poll takes two timestamps and a wake one, so the clock is on the
//! hottest path there is. It reads the CPU's time-stamp counter through
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

/// CPU time consumed by the calling thread, in nanoseconds.
///
/// A system call (no vDSO shortcut exists for thread clocks, about 0.2 to
/// 0.4 µs), so workers sample it once per charge window, not per poll.
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` that outlives the call,
    // and `CLOCK_THREAD_CPUTIME_ID` is a clock every Linux kernel keel
    // supports; the call writes only `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}
