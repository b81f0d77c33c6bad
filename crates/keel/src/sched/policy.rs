//! The pick policy: in which order a worker looks where for its next task.
//!
//! A pick (step 2 of the worker loop, see [`worker`](super::worker)) is a
//! walk over queues, but the decisions that shape it depend only on a few
//! counters and on time: which class comes first (virtual time), whether
//! the injector is tried before the worker's own deque, whether the
//! yields lane gets its turn, whether siblings are looked at before local
//! work, whether the LIFO slot is flushed, whether a stuck sibling is
//! rescued. This module holds those decisions and nothing else: it sees
//! no queue and reads no clock, so each heuristic is tested here with a
//! made-up time and made-up virtual times (see the tests below), and the
//! worker only carries the plan out.
//!
//! The heuristics, each with the failure it prevents:
//!
//! - **Classes by virtual time** ([`Plan::order`]): the class with the
//!   least virtual time (the shared clock plus this worker's unflushed
//!   charge) first; that is how the shares are kept.
//! - **Injector first** every [`INJECTOR_INTERVAL`] picks and after a task
//!   yielded: a busy local deque cannot starve tasks woken from outside.
//! - **Yields first** after [`EVENT_STREAK`] picks from elsewhere while the
//!   yields lane held work: a flood of events cannot starve yielders.
//! - **Siblings first** every [`STEAL_CHECK_NS`]: work of a class that is
//!   owed time but queued on a busy sibling is taken here too, so the
//!   split is global, not per worker.
//! - **LIFO flush** after [`LIFO_STREAK`] slot tasks in a row: two tasks
//!   messaging each other cannot starve the rest.
//! - **Rescue** every [`RESCUE_CHECK_NS`], of a sibling that has not
//!   changed state for [`STUCK_NS`]: the kernel preempted it, or it is in a
//!   poll that blocks, and its queue would wait for it.
//! - **Classes ahead of the slot** looked at every [`AHEAD_CHECK_NS`] while
//!   the worker takes its LIFO slot's task without a plan: a class with
//!   less virtual time than the slot task's, and queued work, gets the next
//!   pick. Not on every pick: the look reads two deques and an injector per
//!   class ahead, and an idle class is always ahead (see
//!   [`class`](super::class)), so looking at every hand-off of a message
//!   cost more than the rest of the pick.

use super::class::MAX_CLASSES;
use super::lanes::EVENT_STREAK;

/// Every this many picks, a worker looks at the class injector before its
/// own deque. A prime, so it does not fall in step with periodic workloads.
pub(crate) const INJECTOR_INTERVAL: u32 = 61;

/// How often (100 µs) a worker looks at its siblings' deques for the
/// classes that are owed time before it runs local work of a class that
/// is not.
///
/// Bounded in time, not in picks. Counting picks fails when polls are
/// long: behind eight bulk polls of a coop quota each, an urgent task
/// queued on a sibling that the kernel has preempted waits 4 ms, although
/// its class is owed the CPU. In S3 (a proxy beside its clients on two
/// cores), a worker that looked every eight picks kept picking its own
/// bulk and normal tasks while admin tasks of the urgent class, first in
/// its order, sat on its sibling; their queue delay reached 2–8 ms. And
/// when polls are short, a count costs: the look reads two deques per
/// sibling and class ahead, each behind a fence, and an idle class is
/// always ahead (see [`class`](super::class)); in a ping-pong of two
/// tasks on two workers, looking every eighth pick cost some 50 ns a look,
/// 5–6% of the ping-pong's time. Every 100 µs, the wait is one poll past
/// that and the look's cost is nothing.
pub(crate) const STEAL_CHECK_NS: u64 = 100_000;

/// How long a sibling may stay in one state other than parked before a
/// worker takes work from its queues ahead of its own (1 ms; see
/// `Worker::rescue`). Longer than the coop quota (500 µs by default), so a
/// sibling in an ordinary poll is left alone: one that has not moved for
/// this long is off its core (the kernel preempted it) or in a poll that
/// blocks.
pub(crate) const STUCK_NS: u64 = 1_000_000;

/// How often a worker looks whether a sibling is stuck (250 µs of its own
/// time). Each look reads every sibling's state word, a cache line the
/// sibling writes twice a poll: not on every pick.
pub(crate) const RESCUE_CHECK_NS: u64 = 250_000;

/// How long (20 µs) a worker may keep taking its LIFO slot's task without
/// looking whether a class ahead of that task's has queued work: a task
/// of a class owed the CPU waits at most one poll more than that behind a
/// chain of message hand-offs, and the look, some 40 ns, is paid once per
/// 20 µs instead of once per hand-off (a few hundred nanoseconds each in a
/// ping-pong of two tasks). Every plan looks too, as it orders all classes.
pub(crate) const AHEAD_CHECK_NS: u64 = 20_000;

/// Most LIFO-slot tasks a worker runs in a row before it moves the slot's
/// task to the back of its deque (see the LIFO slot in `sched`). Small: the
/// slot exists for the hand-off of one message, not to run a chain.
pub(crate) const LIFO_STREAK: u32 = 3;

/// Where a pick found its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The worker's LIFO slot.
    Lifo,
    /// The worker's yields lane.
    Yields,
    /// The events lane, the injector, a sibling, or a rescue.
    Other,
}

/// What one pick does, decided before it looks at any queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    order: [usize; MAX_CLASSES],
    classes: usize,
    /// Move the LIFO slot's task to the back of its deque first.
    pub(crate) flush_lifo: bool,
    /// Look for a stuck sibling before anything else.
    pub(crate) rescue: bool,
    /// Try the class injector before the worker's own queues.
    pub(crate) injector_first: bool,
    /// Try the yields lane before everything else of the class.
    pub(crate) yields_first: bool,
    /// Look at siblings in the same pass as local work, instead of only
    /// once local work ran out.
    pub(crate) steal_first: bool,
}

impl Plan {
    /// The classes in the order to try them: least virtual time first.
    pub(crate) fn order(&self) -> &[usize] {
        &self.order[..self.classes]
    }
}

/// One worker's pick policy: the counters its heuristics keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PickPolicy {
    /// Picks so far (wrapping).
    ticks: u32,
    /// LIFO-slot tasks run in a row.
    lifo_streak: u32,
    /// Picks in a row that passed over a non-empty yields lane.
    event_streak: u32,
    /// When the worker last looked at its siblings first.
    last_steal_look: u64,
    /// When the worker next looks for a stuck sibling; never when it has
    /// no sibling.
    next_rescue: u64,
    /// When the worker last looked at every class's queues in the order
    /// of virtual time (a plan, or a slot pick that looked ahead).
    last_ahead_look: u64,
}

impl PickPolicy {
    /// The policy of a worker starting at `now`; `rescues` is false when
    /// the worker has no sibling to rescue.
    pub(crate) fn new(now: u64, rescues: bool) -> PickPolicy {
        PickPolicy {
            ticks: 0,
            lifo_streak: 0,
            event_streak: 0,
            last_steal_look: now,
            next_rescue: if rescues { now } else { u64::MAX },
            last_ahead_look: now,
        }
    }

    /// The plan of the next pick. `vtimes` holds each class's virtual time
    /// as this worker sees it; `yielded` says a task yielded onto this
    /// worker since the last pick; `now` is the latest time the worker
    /// read.
    pub(crate) fn plan(&mut self, vtimes: &[u64], yielded: bool, now: u64) -> Plan {
        let classes = vtimes.len().min(MAX_CLASSES);
        let mut order = [0usize; MAX_CLASSES];
        for (i, slot) in order.iter_mut().enumerate().take(classes) {
            *slot = i;
        }
        // Stable: classes with equal virtual time keep their index order
        // (the urgent class first).
        order[..classes].sort_by_key(|&c| vtimes[c]);

        self.ticks = self.ticks.wrapping_add(1);
        let flush_lifo = self.lifo_streak >= LIFO_STREAK;
        if flush_lifo {
            self.lifo_streak = 0;
        }
        let steal_first = now.saturating_sub(self.last_steal_look) >= STEAL_CHECK_NS;
        if steal_first {
            self.last_steal_look = now;
        }
        let rescue = now >= self.next_rescue;
        self.last_ahead_look = now;
        Plan {
            order,
            classes,
            flush_lifo,
            rescue,
            injector_first: yielded || self.ticks.is_multiple_of(INJECTOR_INTERVAL),
            yields_first: self.event_streak >= EVENT_STREAK,
            steal_first,
        }
    }

    /// Whether the next pick may take the LIFO slot's task without a plan:
    /// true when [`plan`](Self::plan) would set none of its flags (no
    /// rescue or yields turn, or look at siblings is due), or only turns
    /// that would find nothing:
    ///
    /// - the flush while `others_queued` is false: a flush lets the slot's
    ///   class's other queued tasks (in the worker's lanes or the
    ///   injector) have a turn, and with none, it would only move the
    ///   slot's task through the deque and back. The streak goes on, so
    ///   the flush comes at the first pick that finds another task queued.
    /// - the injector's turn (every [`INJECTOR_INTERVAL`] picks) while
    ///   `injected` is false: with every class's injector empty, the turn
    ///   would look at them and take the slot's task. The turn is spent,
    ///   as a plan would spend it.
    ///
    /// The pick is then counted as `plan` counts one, so every other duty
    /// keeps its cadence. When false, nothing changes and the caller
    /// makes a plan. A turn that follows a yield is always a plan's.
    ///
    /// `others_queued` and `injected` are asked only when their answer
    /// matters.
    pub(crate) fn lifo_without_plan(
        &mut self,
        yielded: bool,
        now: u64,
        others_queued: impl FnOnce() -> bool,
        injected: impl FnOnce() -> bool,
    ) -> bool {
        let tick = self.ticks.wrapping_add(1);
        let due = yielded
            || self.event_streak >= EVENT_STREAK
            || now.saturating_sub(self.last_steal_look) >= STEAL_CHECK_NS
            || now >= self.next_rescue
            || (self.lifo_streak >= LIFO_STREAK && others_queued())
            || (tick.is_multiple_of(INJECTOR_INTERVAL) && injected());
        if !due {
            self.ticks = tick;
        }
        !due
    }

    /// Whether a pick at `now` that takes the slot's task without a plan
    /// must first look at the classes ahead of that task's
    /// ([`AHEAD_CHECK_NS`] since the last look).
    pub(crate) fn ahead_look_due(&self, now: u64) -> bool {
        now.saturating_sub(self.last_ahead_look) >= AHEAD_CHECK_NS
    }

    /// A slot pick at `now` looked at the classes ahead of its task's.
    pub(crate) fn ahead_looked(&mut self, now: u64) {
        self.last_ahead_look = now;
    }

    /// The rescue look of a plan began at `now`; the next one is due
    /// [`RESCUE_CHECK_NS`] later.
    pub(crate) fn rescue_looked(&mut self, now: u64) {
        self.next_rescue = now.saturating_add(RESCUE_CHECK_NS);
    }

    /// Whether a sibling whose state word says it has held its queues
    /// since `busy_since` (`None`: it is parked) counts as stuck at `now`.
    pub(crate) fn is_stuck(busy_since: Option<u64>, now: u64) -> bool {
        busy_since.is_some_and(|since| now.saturating_sub(since) >= STUCK_NS)
    }

    /// The pick took a task from `source`; `yields_waiting` says whether
    /// the picked class's yields lane still holds work.
    pub(crate) fn picked(&mut self, source: Source, yields_waiting: bool) {
        self.lifo_streak = if source == Source::Lifo {
            self.lifo_streak + 1
        } else {
            0
        };
        self.event_streak = if source == Source::Yields || !yields_waiting {
            0
        } else {
            self.event_streak + 1
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    /// Runs `picks` plans at a fixed time and says which ones had `flag`.
    fn plans_with(policy: &mut PickPolicy, picks: u32, flag: impl Fn(&Plan) -> bool) -> Vec<u32> {
        (1..=picks)
            .filter(|_| flag(&policy.plan(&[0, 0, 0], false, 0)))
            .collect()
    }

    #[test]
    fn classes_are_ordered_by_virtual_time() {
        let cases: &[(&[u64], &[usize])] = &[
            (&[30, 10, 20], &[1, 2, 0]),
            (&[0, 0, 0], &[0, 1, 2]),
            (&[5, 5, 1], &[2, 0, 1]),
            (&[7], &[0]),
            (&[], &[]),
            (&[u64::MAX, 0], &[1, 0]),
        ];
        for &(vtimes, want) in cases {
            let mut policy = PickPolicy::new(0, false);
            let plan = policy.plan(vtimes, false, 0);
            assert_eq!(plan.order(), want, "vtimes {vtimes:?}");
        }
    }

    #[test]
    fn the_injector_comes_first_every_interval_and_after_a_yield() {
        let mut policy = PickPolicy::new(0, false);
        let picks = plans_with(&mut policy, 3 * INJECTOR_INTERVAL, |p| p.injector_first);
        assert_eq!(
            picks,
            [
                INJECTOR_INTERVAL,
                2 * INJECTOR_INTERVAL,
                3 * INJECTOR_INTERVAL
            ]
        );
        assert!(policy.plan(&[0], true, 0).injector_first, "after a yield");
        assert!(!policy.plan(&[0], false, 0).injector_first, "once only");
    }

    #[test]
    fn siblings_come_first_once_the_check_interval_passed() {
        // (time of the pick, whether it looks at siblings first): however
        // few picks came between, only time decides.
        let cases = [
            (0, false),
            (STEAL_CHECK_NS - 1, false),
            (STEAL_CHECK_NS, true),
            (STEAL_CHECK_NS + 50 * US, false),
            (2 * STEAL_CHECK_NS - 1, false),
            (2 * STEAL_CHECK_NS, true),
        ];
        let mut policy = PickPolicy::new(0, false);
        for (now, want) in cases {
            assert_eq!(policy.plan(&[0], false, now).steal_first, want, "at {now}");
        }
    }

    #[test]
    fn a_clock_going_backwards_changes_nothing() {
        // Times come from several reads; a stale one must not underflow.
        let mut policy = PickPolicy::new(10 * STEAL_CHECK_NS, true);
        let plan = policy.plan(&[0], false, 0);
        assert!(!plan.steal_first);
        assert!(!plan.rescue);
    }

    #[test]
    fn the_lifo_slot_is_flushed_after_a_streak() {
        let mut policy = PickPolicy::new(0, false);
        let mut flushes = Vec::new();
        for pick in 1..=9 {
            if policy.plan(&[0], false, 0).flush_lifo {
                flushes.push(pick);
            }
            policy.picked(Source::Lifo, false);
        }
        // LIFO_STREAK picks from the slot, then a flush, and so on.
        assert_eq!(flushes, [4, 7]);
    }

    #[test]
    fn a_pick_from_elsewhere_ends_the_lifo_streak() {
        let mut policy = PickPolicy::new(0, false);
        for source in [Source::Lifo, Source::Lifo, Source::Other, Source::Lifo] {
            assert!(!policy.plan(&[0], false, 0).flush_lifo);
            policy.picked(source, false);
        }
        assert!(!policy.plan(&[0], false, 0).flush_lifo);
    }

    #[test]
    fn yields_get_a_turn_after_a_streak_of_events() {
        let cases: &[(&[(Source, bool)], bool)] = &[
            // EVENT_STREAK picks from elsewhere while yields waited.
            (&[(Source::Other, true); EVENT_STREAK as usize], true),
            // One fewer.
            (&[(Source::Other, true); EVENT_STREAK as usize - 1], false),
            // The yields lane was empty: no debt.
            (&[(Source::Other, false); EVENT_STREAK as usize], false),
            // LIFO picks count as picks from elsewhere.
            (&[(Source::Lifo, true); EVENT_STREAK as usize], true),
        ];
        for (i, &(picks, want)) in cases.iter().enumerate() {
            let mut policy = PickPolicy::new(0, false);
            for &(source, waiting) in picks {
                policy.plan(&[0], false, 0);
                policy.picked(source, waiting);
            }
            assert_eq!(policy.plan(&[0], false, 0).yields_first, want, "case {i}");
        }
    }

    #[test]
    fn a_pick_from_the_yields_lane_pays_the_debt() {
        let mut policy = PickPolicy::new(0, false);
        for _ in 0..EVENT_STREAK {
            policy.plan(&[0], false, 0);
            policy.picked(Source::Other, true);
        }
        assert!(policy.plan(&[0], false, 0).yields_first);
        policy.picked(Source::Yields, true);
        assert!(!policy.plan(&[0], false, 0).yields_first);
    }

    #[test]
    fn the_slot_skips_the_plan_exactly_when_the_plan_would_do_nothing_else() {
        // A policy fed random picks, taking the short way whenever it is
        // allowed. At every pick, a copy that plans instead says what the
        // plan would have done: the short way must be allowed exactly when
        // the plan has no duty (a flush counting only with other tasks
        // queued, the injector's turn only with a task injected or after a
        // yield), and refusing it must leave the policy as it was.
        let sources = [Source::Lifo, Source::Lifo, Source::Other, Source::Yields];
        let mut policy = PickPolicy::new(0, true);
        let (mut skipped, mut rng) = (0, 0x2545_F491_4F6C_DD1D_u64);
        for pick in 0..20_000u64 {
            let draw = crate::util::rng::xorshift64(&mut rng);
            let yielded = draw.is_multiple_of(53);
            let others = draw & (1 << 30) != 0;
            let injected = draw & (1 << 40) != 0;
            let now = pick * 7 * US;
            let plan = policy.clone().plan(&[0, 0], yielded, now);
            let quiet = !((plan.flush_lifo && others)
                || plan.rescue
                || (plan.injector_first && (injected || yielded))
                || plan.yields_first
                || plan.steal_first);
            let before = policy.clone();
            let source = if policy.lifo_without_plan(yielded, now, || others, || injected) {
                assert!(quiet, "pick {pick} skipped a plan with a duty: {plan:?}");
                skipped += 1;
                Source::Lifo
            } else {
                assert!(!quiet, "pick {pick} planned for nothing");
                assert_eq!(policy, before, "pick {pick}: a refusal changed the policy");
                assert_eq!(policy.plan(&[0, 0], yielded, now), plan, "pick {pick}");
                if plan.rescue {
                    policy.rescue_looked(now);
                }
                sources[(draw >> 8) as usize % sources.len()]
            };
            policy.picked(source, draw & (1 << 20) != 0);
        }
        assert!(skipped > 5_000, "only {skipped} picks skipped their plan");
    }

    #[test]
    fn the_classes_ahead_of_the_slot_are_looked_at_every_check_interval() {
        let mut policy = PickPolicy::new(0, false);
        let mut looks = Vec::new();
        // A slot pick every 3 µs for 60 µs, each looking when it is due.
        for step in 0..=20 {
            let now = step * 3 * US;
            if policy.ahead_look_due(now) {
                policy.ahead_looked(now);
                looks.push(now / US);
            }
        }
        assert_eq!(looks, [21, 42]);
        // A plan orders every class: it is a look, and restarts the wait.
        policy.plan(&[0, 0], false, 50 * US);
        assert!(!policy.ahead_look_due(50 * US + AHEAD_CHECK_NS - 1));
        assert!(policy.ahead_look_due(50 * US + AHEAD_CHECK_NS));
    }

    #[test]
    fn rescues_are_looked_for_every_check_interval() {
        let mut policy = PickPolicy::new(0, true);
        let mut looks = Vec::new();
        // A pick every 50 µs for 1 ms; each rescue look is made at the time
        // of its pick.
        for step in 0..=20 {
            let now = step * 50 * US;
            if policy.plan(&[0], false, now).rescue {
                policy.rescue_looked(now);
                looks.push(now / US);
            }
        }
        assert_eq!(looks, [0, 250, 500, 750, 1000]);
    }

    #[test]
    fn a_worker_without_siblings_never_looks_for_rescues() {
        let mut policy = PickPolicy::new(0, false);
        for now in [0, STUCK_NS, u64::MAX - 1] {
            assert!(!policy.plan(&[0], false, now).rescue);
        }
    }

    #[test]
    fn a_sibling_is_stuck_after_holding_one_state_for_stuck_ns() {
        let cases = [
            (None, 10 * STUCK_NS, false),
            (Some(0), STUCK_NS - 1, false),
            (Some(0), STUCK_NS, true),
            (Some(5 * STUCK_NS), 5 * STUCK_NS + 999 * US, false),
            (Some(5 * STUCK_NS), 7 * STUCK_NS, true),
            // A state entered after the reader's `now` (a later clock
            // read on the sibling's core).
            (Some(2 * STUCK_NS), STUCK_NS, false),
        ];
        for (busy_since, now, want) in cases {
            assert_eq!(
                PickPolicy::is_stuck(busy_since, now),
                want,
                "busy since {busy_since:?}, now {now}"
            );
        }
    }
}
