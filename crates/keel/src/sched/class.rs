//! Classes and their virtual clocks: how the workers' time is shared by
//! shares.
//!
//! Every task belongs to a [`Class`]. Each class has *shares* and a
//! *virtual time*; running a task of class `c` for `elapsed` nanoseconds
//! advances `c`'s virtual time by `elapsed × SCALE / shares(c)`. A worker
//! that picks work takes the class with the least virtual time among those
//! with runnable tasks (stride scheduling). Since the clock counts
//! nanoseconds, not polls, the split does not depend on how many tasks a
//! class has or how long their polls are: one bulk task with 1 ms polls and
//! a thousand normal tasks with 10 µs polls still share the workers in the
//! ratio of their shares.
//!
//! # A waking class cannot bank credit
//!
//! A class with no runnable task does not advance, so without care it
//! would return from a long idle period far behind and monopolise the
//! workers until it caught up. The picker therefore pulls every class it
//! found empty up to the virtual time of the class it picked, whenever the
//! empty one lags by more than [`IDLE_LAG`]. An idle class thus restarts at
//! (about) the current minimum: it is served first, which is what an idle
//! urgent class wants, but only for its fair turn.
//!
//! # What is charged: worker time the class held, on a core
//!
//! A poll is charged its wall time less the time the kernel preempted the
//! worker in the middle of it. Wall time is the resource the classes
//! compete for: a poll that blocks (on a lock, a file, a sleep) holds its
//! worker exactly as long as one that computes, so a class cannot escape
//! its share by blocking, and a blocking class cannot starve the others.
//! Charging thread CPU time instead would let such a class run nearly for
//! free.
//!
//! Time the kernel takes the core away from a polling worker is another
//! matter. On a machine with more runnable threads than cores the kernel
//! hands out time slices of milliseconds: an urgent poll of 100 µs that
//! is preempted for one is charged 40 times its work, and its class then
//! waits behind the others until they have caught up. So each worker
//! measures, from the kernel's own log of its context switches, how long
//! it was preempted inside each poll ([`crate::util::preempt`]), and that
//! time is not charged. The measure is exact per poll, so the correction
//! does not favour long polls or short ones. Where the kernel does not
//! offer the log, or with
//! [`Builder::charge_on_cpu(false)`](crate::Builder::charge_on_cpu), a
//! poll is charged its wall time.
//!
//! # Cost
//!
//! The clocks are shared atomics, one cache line each. A worker adds its
//! charges to them once per [`CHARGE_WINDOW_NS`], which keeps the hot path
//! free of cross-core traffic; its own picks see its unflushed charges too.

use crate::loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
use crossbeam_utils::CachePadded;

/// Most classes a runtime may define (queues are per class per worker).
pub const MAX_CLASSES: usize = 8;

/// Virtual nanoseconds per real nanosecond at one share. Large enough that
/// integer division by shares loses nothing that matters, small enough that
/// a clock lasts centuries of CPU time before it wraps.
const SCALE: u64 = 1 << 10;

/// How often a worker adds its charges to the shared clocks: 100 µs keeps
/// the error of the split far below a percent at one shared atomic add per
/// class per window.
pub(crate) const CHARGE_WINDOW_NS: u64 = 100_000;

/// How far (in virtual time) an idle class may lag before the picker pulls
/// it up: about 200 µs of polling at 100 shares. Lagging less than this is
/// harmless; clamping on every pick would write the shared clock each time.
pub(crate) const IDLE_LAG: u64 = 200_000 * SCALE / 100;

/// A scheduling class: a set of tasks that shares the workers' polling
/// time (each poll charged its wall time) with other classes in
/// proportion to its shares.
///
/// The three default classes exist in every runtime: [`Class::URGENT`]
/// (16 shares, for the control plane), [`Class::NORMAL`] (33, the default)
/// and [`Class::BULK`] (50, for throughput work). Classes added with
/// [`Builder::class`](crate::runtime::Builder::class) are found by name with
/// [`Handle::class`](crate::Handle::class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class(pub(crate) u8);

impl Class {
    /// Latency-critical work: admin endpoints, health checks, control.
    pub const URGENT: Class = Class(0);
    /// Ordinary work; tasks spawned outside any task land here.
    pub const NORMAL: Class = Class(1);
    /// Throughput work: bulk transfers, background jobs.
    pub const BULK: Class = Class(2);

    /// The class of the task being polled on the calling thread; `None`
    /// outside a keel task (in `block_on`'s own future, or on a thread
    /// that is not a worker).
    ///
    /// ```
    /// use keel::Class;
    ///
    /// let rt = keel::Runtime::new().unwrap();
    /// let class = rt.block_on(rt.handle().spawn_in(Class::BULK, async { Class::current() }));
    /// assert_eq!(class.unwrap(), Some(Class::BULK));
    /// assert_eq!(Class::current(), None);
    /// ```
    pub fn current() -> Option<Class> {
        crate::runtime::context::any_current_class()
    }

    /// The class's position in its runtime's class table.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Fraction bits of [`ClassClocks`]'s per-class rates: a charge is a
/// multiplication and a shift, not a division by the shares (a division
/// per poll was a measurable part of a message hand-off's cost).
const RATE_SHIFT: u32 = 32;

/// The virtual clocks of all classes of one runtime.
#[derive(Debug)]
pub(crate) struct ClassClocks {
    /// Virtual time per class; any worker adds to it.
    vtime: Box<[CachePadded<AtomicU64>]>,
    /// Virtual nanoseconds per real nanosecond of each class, scaled by
    /// 2^[`RATE_SHIFT`]: `SCALE / shares`, rounded up so that no charge
    /// of a nanosecond or more costs nothing.
    rates: Box<[u64]>,
}

impl ClassClocks {
    pub(crate) fn new(shares: impl IntoIterator<Item = u32>) -> ClassClocks {
        let shares: Box<[u64]> = shares.into_iter().map(u64::from).collect();
        assert!(shares.len() <= MAX_CLASSES && shares.iter().all(|&s| s > 0));
        ClassClocks {
            vtime: shares
                .iter()
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            rates: shares
                .iter()
                .map(|&s| (SCALE << RATE_SHIFT).div_ceil(s))
                .collect(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.rates.len()
    }

    /// Virtual time `ns` of polling costs `class`: `ns × SCALE / shares`,
    /// to within one virtual nanosecond per 2^32 real ones.
    pub(crate) fn cost(&self, class: usize, ns: u64) -> u64 {
        let cost = (u128::from(ns) * u128::from(self.rates[class])) >> RATE_SHIFT;
        u64::try_from(cost).unwrap_or(u64::MAX)
    }

    pub(crate) fn vtime(&self, class: usize) -> u64 {
        self.vtime[class].load(Relaxed)
    }

    /// Adds `ns` of polling to `class`'s clock.
    pub(crate) fn charge(&self, class: usize, ns: u64) {
        self.advance(class, self.cost(class, ns));
    }

    /// Adds `vtime` of virtual time (a sum of [`cost`](Self::cost)s) to
    /// `class`'s clock.
    pub(crate) fn advance(&self, class: usize, vtime: u64) {
        self.vtime[class].fetch_add(vtime, Relaxed);
    }

    /// Pulls an idle `class` up to `floor` if it lags by more than
    /// [`IDLE_LAG`] (see the module docs).
    pub(crate) fn pull_up(&self, class: usize, floor: u64) {
        if self.vtime(class).saturating_add(IDLE_LAG) < floor {
            self.vtime[class].fetch_max(floor, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_inverse_to_shares() {
        let clocks = ClassClocks::new([16, 33, 50]);
        assert!(clocks.cost(0, 1_000) > clocks.cost(1, 1_000));
        assert!(clocks.cost(1, 1_000) > clocks.cost(2, 1_000));
        assert_eq!(clocks.cost(0, 1_000) * 16 / 1_000, SCALE);
    }

    #[test]
    fn cost_is_the_quotient_it_replaces() {
        let shares = [1, 3, 16, 33, 50, 97, 1_000, u32::MAX];
        let clocks = ClassClocks::new(shares);
        for (class, &s) in shares.iter().enumerate() {
            for ns in [0, 1, 7, 999, 100_000, 12_345_678_901, 1 << 50] {
                let exact = u128::from(ns) * u128::from(SCALE) / u128::from(s);
                let cost = u128::from(clocks.cost(class, ns));
                // Rounded up in the rate: never below the quotient, and
                // above it by at most one per 2^32 real nanoseconds (and
                // one for the rounding).
                let slack = u128::from(ns >> RATE_SHIFT) + 1;
                assert!(
                    cost >= exact && cost <= exact + slack,
                    "{ns} ns at {s} shares: {cost} against {exact}"
                );
            }
        }
        assert_eq!(clocks.cost(0, u64::MAX), u64::MAX, "saturates");
    }

    #[test]
    fn idle_class_is_pulled_up_only_when_lagging() {
        let clocks = ClassClocks::new([16, 33, 50]);
        clocks.pull_up(0, IDLE_LAG);
        assert_eq!(clocks.vtime(0), 0, "a small lag is left alone");
        clocks.pull_up(0, IDLE_LAG * 3);
        assert_eq!(clocks.vtime(0), IDLE_LAG * 3);
        clocks.pull_up(0, 0);
        assert_eq!(clocks.vtime(0), IDLE_LAG * 3, "never pulled down");
    }
}
