//! The coop budget: how much IO one poll of a task may do.
//!
//! A task whose sockets are always ready never returns `Pending` on its
//! own: a loop of reads on a fast sender, or of writes to a fast reader,
//! would hold its worker for as long as the data flows, and every task
//! queued behind it would wait. So each poll of a task on a worker (or on
//! the urgent lane) gets a
//! budget of IO operations ([`Builder::task_io_budget`], 128 by default)
//! and of time ([`Builder::task_quota`], 500 µs). keel's IO types call
//! [`poll_proceed`] before each operation: once either is spent, the
//! operation returns `Pending` and wakes its own task at once, which puts
//! it at the back of its class's yields lane. The task resumes at its next
//! poll with a fresh budget, having lost nothing.
//!
//! Only completed operations count (a `WouldBlock` leaves the task waiting
//! anyway). The time quota applies only once the poll has completed one
//! operation: every poll may make at least one IO step, however much CPU
//! it spent before reaching it (otherwise a task that computes for longer
//! than the quota and then reads would never read). Code polled outside a
//! worker or the lane (`block_on`) has no budget. The budget lives in the
//! thread's context, which every IO type can reach.
//!
//! The clock is read before every [`CLOCK_STRIDE`]th operation of a poll,
//! not before each. In S0's server a poll reads a request, writes its
//! answer and finds the next read blocked: two of its three operations
//! read the clock (the thread's context, the time-stamp counter and its
//! scaling), about 65 instructions of the 8,300 a keep-alive request
//! cost the server in user space. Most polls do fewer than
//! [`CLOCK_STRIDE`] operations and never read it; a poll that streams may
//! overrun its quota by at most `CLOCK_STRIDE - 1` operations and the
//! work between them.
//!
//! [`Builder::task_io_budget`]: crate::Builder::task_io_budget
//! [`Builder::task_quota`]: crate::Builder::task_quota

use std::task::{Context, Poll};

use crate::runtime::context::{self, Budget};
use crate::sched::Shared;

/// The full budget of a poll that begins at `start` on a worker or an
/// urgent lane of `shared` (installed with the poll's class, see
/// `context::enter_poll`).
pub(crate) fn full_budget(shared: &Shared, start: u64) -> Budget {
    let config = &shared.config;
    Budget {
        ops: config.task_io_budget,
        full: config.task_io_budget,
        deadline: start.saturating_add(config.task_quota),
    }
}

/// Operations of a poll between two looks at the clock (see the module
/// docs).
pub(crate) const CLOCK_STRIDE: u32 = 4;

/// Whether a poll that has completed `done` operations looks at the clock
/// before its next one: after every [`CLOCK_STRIDE`]th, never before its
/// first.
fn clock_due(done: u32) -> bool {
    done != 0 && done.is_multiple_of(CLOCK_STRIDE)
}

/// `Ready` if the current poll may perform one more IO operation;
/// otherwise wakes the task (so it runs again soon) and returns `Pending`.
pub(crate) fn poll_proceed(cx: &mut Context<'_>) -> Poll<()> {
    let spent = context::budget().is_some_and(|budget| {
        budget.ops == 0
            || (clock_due(budget.full - budget.ops)
                && context::now().is_some_and(|now| now >= budget.deadline))
    });
    if spent {
        cx.waker().wake_by_ref();
        Poll::Pending
    } else {
        Poll::Ready(())
    }
}

/// Counts one completed IO operation against the current poll's budget.
pub(crate) fn spend() {
    if let Some(mut budget) = context::budget() {
        budget.ops = budget.ops.saturating_sub(1);
        context::set_budget(Some(budget));
    }
}

#[cfg(test)]
mod tests {
    use super::{clock_due, CLOCK_STRIDE};

    #[test]
    fn the_clock_is_due_every_stride_and_never_before_the_first_operation() {
        assert!(!clock_due(0), "every poll may make one IO step");
        let due: Vec<u32> = (0..=3 * CLOCK_STRIDE).filter(|&d| clock_due(d)).collect();
        assert_eq!(due, [CLOCK_STRIDE, 2 * CLOCK_STRIDE, 3 * CLOCK_STRIDE]);
    }
}
