//! `Interval`: ticks at a fixed period.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::sleep::{far_future, saturating_after};
use super::{sleep_until, Sleep};

/// Ticks every `period`, the first tick at once.
///
/// If a tick is late by a period or more (the task was busy), the missed
/// ticks are skipped, not delivered in a burst: the overdue tick comes at
/// once, and the next one at the next multiple of `period` after now, so
/// the schedule keeps its phase.
///
/// # Panics
///
/// If `period` is zero. Polling it outside a keel runtime panics.
///
/// ```
/// use std::time::Duration;
///
/// let rt = keel::Runtime::new().unwrap();
/// rt.block_on(async {
///     let mut every = keel::time::interval(Duration::from_millis(5));
///     for _ in 0..3 {
///         every.tick().await;
///     }
/// });
/// ```
pub fn interval(period: Duration) -> Interval {
    assert!(!period.is_zero(), "an interval's period must be non-zero");
    Interval {
        sleep: sleep_until(Instant::now()),
        period,
    }
}

/// The ticker returned by [`interval`].
#[derive(Debug)]
pub struct Interval {
    /// Sleeps until the next tick.
    sleep: Sleep,
    period: Duration,
}

impl Interval {
    /// Waits for the next tick and returns when it was due.
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick; for use in hand-written futures.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        if Pin::new(&mut self.sleep).poll(cx).is_pending() {
            return Poll::Pending;
        }
        let due = self.sleep.deadline();
        let now = Instant::now();
        let period = self.period.as_nanos();
        // Periods from `due` to the next tick: one, or more when late by a
        // period or more (skip to the next tick in phase).
        let periods = if now >= due {
            (now - due).as_nanos() / period + 1
        } else {
            1
        };
        let next = match u64::try_from(periods.saturating_mul(period)) {
            Ok(gap) => saturating_after(due, Duration::from_nanos(gap)),
            Err(_) => far_future(),
        };
        self.sleep.reset(next);
        Poll::Ready(due)
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }
}
