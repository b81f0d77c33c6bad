//! `Timeout`: a future with a deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{sleep, Sleep};

/// Runs `future` for at most `duration`.
///
/// Resolves to `Ok(output)` if the future completes first, and to
/// `Err(Elapsed)` once the time is up; the future is then dropped with the
/// `Timeout`, which cancels whatever it was doing.
///
/// Like [`sleep()`], it may be created anywhere and needs a keel runtime
/// only to be polled.
///
/// ```
/// use std::time::Duration;
///
/// let rt = keel::Runtime::new().unwrap();
/// let slow = rt.block_on(keel::time::timeout(Duration::from_millis(10), std::future::pending::<()>()));
/// assert!(slow.is_err());
/// let quick = rt.block_on(keel::time::timeout(Duration::from_secs(10), async { 7 }));
/// assert_eq!(quick.unwrap(), 7);
/// ```
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future,
        sleep: sleep(duration),
    }
}

/// The future returned by [`timeout`].
#[must_use = "futures do nothing unless awaited"]
pub struct Timeout<F> {
    future: F,
    sleep: Sleep,
}

impl<F> Timeout<F> {
    /// The wrapped future.
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: `Timeout` never moves it
        // out while pinned (`into_inner` takes `self` by value, which needs
        // `Timeout: Unpin` once pinned), has no `Drop` impl, and is `Unpin`
        // only if `F` is. `sleep` is `Unpin` and not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: see above; `this.future` is never moved.
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        if let Poll::Ready(output) = future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match Pin::new(&mut this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("sleep", &self.sleep)
            .finish()
    }
}

/// The error of a [`timeout`] whose time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed(());

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for std::io::Error {
    fn from(_: Elapsed) -> std::io::Error {
        std::io::ErrorKind::TimedOut.into()
    }
}
