//! `Lanes`: a worker's two run queues for one class.
//!
//! Within a class, keel tells apart tasks that *waited for an event* (IO
//! readiness, a timer, a message, or a fresh spawn) from tasks that *woke
//! themselves* while running (a `yield_now`, a spent coop budget). The first
//! go to the `events` lane, the second to the `yields` lane, and a worker
//! takes from the events lane first. A batched read released by its
//! deadline (a deferred timer, `TimerWake::Deferred`) also joins the yields
//! lane: it chose to wait, and deadlines that share a timer tick release
//! many streams at once, a burst that would otherwise queue ahead of a task
//! that waited for an event.
//!
//! # Why
//!
//! Seed 000's failure, inside one class: a connection's task becomes ready
//! while eight CPU tasks take turns yielding. With one FIFO queue, the echo
//! task lands behind all eight and waits several slices (tokio's loaded
//! RTT in S1 is ten times its idle one for that reason). A task in the
//! events lane has, by construction, just waited for something and used no
//! CPU since; running it first costs the CPU tasks one short poll, and the
//! reply leaves at the next poll boundary instead of eight slices later.
//!
//! # Why nobody starves
//!
//! - A task can only enter the events lane by waiting for an event. After
//!   one poll it either waits again (and leaves the queues) or wakes itself,
//!   which puts it in the yields lane. A CPU hog therefore cannot camp in
//!   the events lane: the priority is per wake, not per task.
//! - A flood of events could still keep the yields lane waiting, so a
//!   worker that has taken [`EVENT_STREAK`] tasks in a row from elsewhere
//!   while its yields lane held work takes the next one from the yields
//!   lane. Yielding tasks get at least one poll in `EVENT_STREAK + 1`.
//! - Between classes nothing changes: the lanes only order tasks within a
//!   class, and the shares divide polling time between classes as before.
//!
//! # Alternatives
//!
//! HAProxy demotes tasks that keep waking themselves to its bulk class.
//! That changes which class pays for a task's CPU, which breaks the promise
//! keel's shares make to the user who chose the class. Per-task virtual
//! time (each task ordered by the CPU it has used, as in a fair queue)
//! needs a priority queue per class, which work-stealing deques are not,
//! and keeps history a task cannot shed. Two lanes give the same answer for
//! the case that matters (a waiting task ahead of a yielding one) with two
//! plain deques.

use crate::loom::deque::{Steal, Stealer, Worker as Deque};

use crate::task::Runnable;

/// Tasks taken from the events lane, the LIFO slot, the injector or a
/// sibling in a row while the yields lane held work, before the yields lane
/// gets the next turn (see the module docs).
pub(crate) const EVENT_STREAK: u32 = 16;

/// Which lane a task joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// It waited for an event, or is new.
    Events,
    /// It woke itself while running, or a deferred timer woke it.
    Yields,
}

/// One class's lanes on one worker. Only the owner pushes and pops.
pub(crate) struct Lanes {
    pub(crate) events: Deque<Runnable>,
    pub(crate) yields: Deque<Runnable>,
}

/// The stealing ends of one worker's [`Lanes`].
pub(crate) struct LaneStealers {
    events: Stealer<Runnable>,
    yields: Stealer<Runnable>,
}

impl Lanes {
    pub(crate) fn new() -> Lanes {
        Lanes {
            events: Deque::new_fifo(),
            yields: Deque::new_fifo(),
        }
    }

    pub(crate) fn stealers(&self) -> LaneStealers {
        LaneStealers {
            events: self.events.stealer(),
            yields: self.yields.stealer(),
        }
    }

    pub(crate) fn lane(&self, lane: Lane) -> &Deque<Runnable> {
        match lane {
            Lane::Events => &self.events,
            Lane::Yields => &self.yields,
        }
    }

    /// Pushes `runnable` to the back of `lane`; returns whether the lanes
    /// already held work (then a sibling may be worth waking).
    pub(crate) fn push(&self, runnable: Runnable, lane: Lane) -> bool {
        let had_work = self.has_work();
        self.lane(lane).push(runnable);
        had_work
    }

    /// Whether either lane holds a task.
    pub(crate) fn has_work(&self) -> bool {
        !self.events.is_empty() || !self.yields.is_empty()
    }

    /// Pops any task, events first (for shutdown).
    pub(crate) fn pop_any(&self) -> Option<Runnable> {
        self.events.pop().or_else(|| self.yields.pop())
    }
}

impl LaneStealers {
    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty() && self.yields.is_empty()
    }

    /// Steals half of the victim's events lane into `into`'s events lane,
    /// or failing that half of its yields lane into `into`'s yields lane.
    pub(crate) fn steal_into(&self, into: &Lanes) -> Option<Runnable> {
        self.steal_events_into(into).or_else(|| {
            settle(
                || self.yields.is_empty(),
                || self.yields.steal_batch_and_pop(&into.yields),
            )
        })
    }

    /// Steals half of the victim's events lane into `into`'s events lane.
    pub(crate) fn steal_events_into(&self, into: &Lanes) -> Option<Runnable> {
        settle(
            || self.events.is_empty(),
            || self.events.steal_batch_and_pop(&into.events),
        )
    }

    /// Steals one task, any lane (for shutdown).
    pub(crate) fn steal_any(&self) -> Option<Runnable> {
        [&self.events, &self.yields]
            .into_iter()
            .find_map(|s| match s.steal() {
                Steal::Success(runnable) => Some(runnable),
                _ => None,
            })
    }
}

/// Runs `steal` until it succeeds or the queue is empty: `Retry` only means
/// another thief raced us, not that the queue has nothing.
pub(crate) fn settle(
    is_empty: impl Fn() -> bool,
    steal: impl Fn() -> Steal<Runnable>,
) -> Option<Runnable> {
    loop {
        if is_empty() {
            return None;
        }
        match steal() {
            Steal::Success(runnable) => return Some(runnable),
            Steal::Empty => return None,
            Steal::Retry => continue,
        }
    }
}
