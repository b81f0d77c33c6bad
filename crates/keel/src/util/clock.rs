//! `Clock`: the runtime's monotonic nanosecond clock.
//!
//! Every timestamp keel keeps (schedule times, state changes) is a `u64` of
//! nanoseconds since the runtime's epoch, so that it fits an atomic and
//! differences are plain subtraction.
//!
//! A poll takes one or two timestamps (its end, and its start unless it
//! follows another poll at once), and a wake by a task or from outside the
//! workers one (a task that yields, and the tasks of a reactor poll or of
//! fired timers, are stamped with a time the worker read anyway), so the
//! clock is on the hottest path there is. It reads the CPU's time-stamp counter through
//! `quanta` (a few nanoseconds, against some 25 ns for the vDSO's
//! `clock_gettime` with `Instant`'s arithmetic), calibrated once per
//! process; where the counter is not invariant across cores and power
//! states, `quanta` falls back to the OS monotonic clock by itself.
//!
//! Under Miri the clock is `std::time::Instant`: `quanta` detects the
//! counter with `cpuid`, inline assembly that Miri cannot run, and Miri's
//! own monotonic clock is what its scheduler of threads and timeouts
//! follows anyway.

/// Monotonic nanoseconds since the runtime was built.
#[cfg(not(any(loom, miri)))]
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    source: quanta::Clock,
    /// The raw counter at the epoch.
    epoch: u64,
}

#[cfg(not(any(loom, miri)))]
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

/// Under Miri, the standard monotonic clock (see the module docs).
#[cfg(all(miri, not(loom)))]
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    epoch: std::time::Instant,
}

#[cfg(all(miri, not(loom)))]
impl Clock {
    pub(crate) fn new() -> Clock {
        Clock {
            epoch: std::time::Instant::now(),
        }
    }

    pub(crate) fn now(&self) -> u64 {
        // Saturates after some 584 years.
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Under loom, a clock that advances one microsecond per read.
///
/// Loom replays each interleaving from the start and needs every thread to
/// take the same path each time it is given the same schedule; the
/// worker's decisions depend on time (when to look at siblings, at the
/// reactor, for stuck siblings), so a real clock would make them differ
/// between replays. This one depends only on the order of the reads. It
/// is not a modelled atomic: reading the clock is not a synchronisation
/// point, and would only multiply the interleavings to explore.
#[cfg(loom)]
#[derive(Debug, Clone)]
pub(crate) struct Clock {
    reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

#[cfg(loom)]
impl Clock {
    pub(crate) fn new() -> Clock {
        Clock {
            reads: std::sync::Arc::default(),
        }
    }

    pub(crate) fn now(&self) -> u64 {
        let reads = self
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (reads + 1) * 1_000
    }
}
