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
//! # A class that ran dry keeps a bounded credit
//!
//! A class with no runnable task does not advance, so without care it
//! would return from a long idle period far behind and monopolise the
//! workers until it caught up. The picker therefore pulls every class it
//! found empty up toward the virtual time of the class it picked, but
//! not all the way: the empty class is left [`WAKE_CREDIT`] behind it.
//! When its tasks come back it is served first, for at most that credit
//! (a few milliseconds of its own polling, see the constant), and then
//! takes turns by its shares again. A class idle for a second banks no
//! more than one idle for five milliseconds.
//!
//! The credit is what keeps the shares of a class whose tasks wait on
//! IO. Such a class runs dry whenever all its tasks wait at once (a
//! proxy's downloads, each waiting for its backend's next bytes), often
//! for a millisecond or more, while a class fed by a steady stream of new
//! work never does. Pulled up all the way each time, as an earlier
//! version did, it lost what it was owed at every gap: in the seed
//! suite's S3 the downloads' class was charged 56–58% of the proxy's
//! time against its shares' 60.2%; with this credit, 59.0–59.8% in five
//! rounds of six, 57.5% in one. The bound is the price: a class that
//! wakes may hold the workers for its credit before the others' next
//! turn, much as the kernel's fair scheduler places a waking thread a
//! bounded distance behind the others' minimum.
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

/// How far (in virtual time) a class that ran dry may stay behind the
/// class picked: 5 ms of polling at 100 shares, which is 2.5 ms of a
/// class's own polling at bulk's 50 shares, 1.65 ms at normal's 33 and
/// 0.8 ms at urgent's 16. That is what the class may run ahead of the
/// others when its tasks come back (see the module docs). Measured on
/// the seed suite's S3 against shares of 60.2%, the downloads' class kept
/// 59.0–59.8% of the proxy's time with it in five rounds of six (57.5%
/// in one); with a credit of 0.5–1 ms at 100 shares, 57.9–58.8%.
pub(crate) const WAKE_CREDIT: u64 = 5_000_000 * SCALE / 100;

/// How much further than [`WAKE_CREDIT`] an idle class may fall behind
/// before the picker pulls it up: about 200 µs of polling at 100 shares.
/// Clamping on every pick would write the shared clock each time; this
/// way an idle class's clock is written once per that much progress of
/// the others.
const PULL_SLACK: u64 = 200_000 * SCALE / 100;

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

    /// Pulls an idle `class` up to [`WAKE_CREDIT`] behind `floor`, the
    /// virtual time of the class picked, once it lags by more than that
    /// and [`PULL_SLACK`] (see the module docs). Never pulls a clock down.
    pub(crate) fn pull_up(&self, class: usize, floor: u64) {
        let keep = WAKE_CREDIT + PULL_SLACK;
        if self.vtime(class).saturating_add(keep) < floor {
            self.vtime[class].fetch_max(floor - WAKE_CREDIT, Relaxed);
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
    fn idle_class_is_pulled_up_to_its_credit_only_when_lagging_past_it() {
        let clocks = ClassClocks::new([16, 33, 50]);
        clocks.pull_up(0, WAKE_CREDIT + PULL_SLACK);
        assert_eq!(clocks.vtime(0), 0, "a lag within the credit is left alone");
        let floor = 3 * WAKE_CREDIT;
        clocks.pull_up(0, floor);
        assert_eq!(clocks.vtime(0), floor - WAKE_CREDIT, "keeps its credit");
        clocks.pull_up(0, floor + PULL_SLACK);
        assert_eq!(clocks.vtime(0), floor - WAKE_CREDIT, "not written per pick");
        clocks.pull_up(0, 0);
        assert_eq!(clocks.vtime(0), floor - WAKE_CREDIT, "never pulled down");
    }

    /// What [`simulate`] measured.
    struct Simulated {
        /// Bulk's part of the polling time.
        bulk_part: f64,
        /// The shortest and the longest run of bulk polls that began as a
        /// stall ended (bulk's credit spent while normal waits), in ns.
        bursts: (u64, u64),
    }

    const NORMAL_POLL: u64 = 10_000;
    const BULK_POLL: u64 = 20_000;

    /// One worker's picks over two classes, on an injected clock. Normal
    /// (index 0, 33 shares) always has work, in polls of 10 µs. Bulk
    /// (index 1, 50 shares) has work, in polls of 20 µs, except during a
    /// stall of `stall_ns` at the start of every `period_ns`: a proxy's
    /// downloads, runnable while their backend keeps up and all waiting
    /// when it stalls. A pick takes the class with the least virtual time
    /// that has work (ties by index, as the workers' plans order them),
    /// pulls up the class it found empty ahead of it, and charges the
    /// poll; charges reach the clocks at once.
    fn simulate(period_ns: u64, stall_ns: u64, until_ns: u64) -> Simulated {
        let clocks = ClassClocks::new([33, 50]);
        let (mut now, mut ran) = (0u64, [0u64; 2]);
        let mut bursts = (u64::MAX, 0u64);
        // The bulk polls since the last stall ended, while normal waited.
        let mut burst: Option<u64> = None;
        while now < until_ns {
            let bulk_ready = now % period_ns >= stall_ns;
            let bulk_first = (clocks.vtime(1), 1) < (clocks.vtime(0), 0);
            let picked = if bulk_ready && bulk_first {
                if let Some(burst) = burst.as_mut() {
                    *burst += BULK_POLL;
                }
                1
            } else {
                if !bulk_ready && bulk_first {
                    clocks.pull_up(1, clocks.vtime(0));
                }
                if bulk_ready {
                    // Bulk has work and waits its turn: its burst is over.
                    if let Some(burst) = burst.take() {
                        bursts = (bursts.0.min(burst), bursts.1.max(burst));
                    }
                } else {
                    burst = Some(0);
                }
                0
            };
            let poll = [NORMAL_POLL, BULK_POLL][picked];
            clocks.charge(picked, poll);
            ran[picked] += poll;
            now += poll;
        }
        Simulated {
            bulk_part: ran[1] as f64 / (ran[0] + ran[1]) as f64,
            bursts,
        }
    }

    #[test]
    fn a_backlogged_class_gets_its_share() {
        let run = simulate(u64::MAX, 0, 100_000_000);
        let share = 50.0 / 83.0;
        assert!(
            (run.bulk_part - share).abs() < 0.002,
            "{:.4}",
            run.bulk_part
        );
    }

    #[test]
    fn a_class_that_stalls_within_its_credit_keeps_its_share() {
        // A 1 ms stall every 10 ms: normal runs alone for 1 ms, which puts
        // bulk 1 ms × SCALE / 33 behind, within its credit; it catches up
        // once its work is back. Pulled up all the way, it would have
        // lost a tenth of its time (54% of the worker instead of 60%).
        let run = simulate(10_000_000, 1_000_000, 200_000_000);
        let share = 50.0 / 83.0;
        assert!(
            (run.bulk_part - share).abs() < 0.005,
            "{:.4}",
            run.bulk_part
        );
    }

    #[test]
    fn a_class_back_from_a_long_stall_runs_ahead_for_its_credit_alone() {
        // 20 ms stalls every 40 ms: bulk falls far behind each time. Back,
        // it runs alone for its credit, WAKE_CREDIT to WAKE_CREDIT +
        // PULL_SLACK of virtual time, then takes turns.
        let run = simulate(40_000_000, 20_000_000, 400_000_000);
        let real = |vtime: u64| vtime * 50 / SCALE;
        let (shortest, longest) = run.bursts;
        assert!(
            shortest + BULK_POLL >= real(WAKE_CREDIT),
            "spent less than its credit: {shortest} ns"
        );
        assert!(
            longest <= real(WAKE_CREDIT + PULL_SLACK) + BULK_POLL,
            "ran past its credit: {longest} ns"
        );
        // Outside the stalls, the shares: bulk's 60.2% of the 20 ms it
        // can run, plus its credit, against the worker's 40 ms.
        let expected = (20e6 * 50.0 / 83.0 + real(WAKE_CREDIT) as f64 * 33.0 / 83.0) / 40e6;
        assert!(
            (run.bulk_part - expected).abs() < 0.01,
            "{:.4} against {expected:.4}",
            run.bulk_part
        );
    }
}
