//! One poll of a task, as a worker and the urgent lane both run it: the
//! thread's context is set for the task (its class, a fresh coop budget),
//! the preemption meter is marked, and a panic that escapes the task (one
//! in a destructor; the future's own are caught by `Guarded`) is
//! contained, so it cannot end the polling thread.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::Shared;
use crate::runtime::context;
use crate::task::{coop, Runnable};
use crate::util::preempt::PreemptMeter;
use crate::Class;

/// The calling thread's preemption meter, when the runtime charges
/// on-CPU time and the kernel grants one (see [`crate::util::preempt`]).
pub(crate) fn open_meter(shared: &Shared) -> Option<PreemptMeter> {
    shared
        .config
        .charge_on_cpu
        .then(PreemptMeter::open)
        .and_then(Result::ok)
}

/// Polls `runnable`, a task of `class`, once; the poll begins at `start`
/// (read by the caller, which accounts from it). An aborted task is
/// dropped instead of polled.
pub(crate) fn run_poll(
    shared: &Shared,
    meter: &mut Option<PreemptMeter>,
    runnable: Runnable,
    class: Class,
    start: u64,
) {
    let aborted = runnable.metadata().is_aborted();
    context::enter_poll(class, coop::full_budget(shared, start));
    if let Some(meter) = meter {
        meter.mark();
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if aborted {
            // Its traced waker (if any) would keep it alive past the drop.
            if runnable.metadata().has_span() {
                crate::task::trace::release_waker(runnable.metadata());
            }
            drop(runnable);
        } else {
            runnable.run();
        }
    }));
    context::leave_poll();
}

/// How much of a poll that took `took` ns the kernel held the thread off
/// its core: what the meter saw since [`run_poll`] marked it, never more
/// than `took`; zero without a meter, or when the kernel lost records
/// (the poll is then charged in full).
pub(crate) fn preempted_in(meter: &mut Option<PreemptMeter>, took: u64) -> u64 {
    match meter {
        Some(meter) => meter.preempted().unwrap_or(0).min(took),
        None => 0,
    }
}
