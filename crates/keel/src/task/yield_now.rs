//! `yield_now`: give the worker back for one turn.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Yields to the scheduler once.
///
/// The task is rescheduled at the back of its class's queue on the same
/// worker, so tasks of its class that were waiting run first, and the
/// scheduler may pick another class whose turn it is. CPU-bound loops
/// should call it between slices of work so that other tasks keep running.
///
/// ```
/// let rt = keel::Runtime::builder().workers(1).build().unwrap();
/// rt.block_on(async {
///     for _ in 0..3 {
///         keel::yield_now().await;
///     }
/// });
/// ```
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// The future returned by [`yield_now`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
