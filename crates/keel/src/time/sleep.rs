//! `Sleep`: a future that completes at a deadline.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::driver::TimerWake;
use super::wheel::TimerKey;
use crate::Handle;

/// Waits until `duration` has elapsed, counted from this call.
///
/// Completes no earlier than asked, and usually within a millisecond (the
/// timer resolution) after. The sleep may be created anywhere; it needs a
/// keel runtime only to be polled.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let rt = keel::Runtime::new().unwrap();
/// let start = Instant::now();
/// rt.block_on(keel::time::sleep(Duration::from_millis(20)));
/// assert!(start.elapsed() >= Duration::from_millis(20));
/// ```
pub fn sleep(duration: Duration) -> Sleep {
    sleep_until(after(duration))
}

/// `duration` from now, saturating at [`far_future`] (so `Duration::MAX`
/// means "never" rather than an overflow).
pub(crate) fn after(duration: Duration) -> Instant {
    saturating_after(Instant::now(), duration)
}

/// `gap` after `from`, saturating at [`far_future`] of `from`.
pub(crate) fn saturating_after(from: Instant, gap: Duration) -> Instant {
    let far = from + FAR;
    from.checked_add(gap).filter(|&at| at < far).unwrap_or(far)
}

/// How far [`far_future`] lies: about thirty years, later than any real
/// deadline, early enough for every platform's `Instant` arithmetic.
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);

/// About thirty years from now.
pub(crate) fn far_future() -> Instant {
    Instant::now() + FAR
}

/// Waits until `deadline`.
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        deadline,
        handle: None,
        key: None,
    }
}

/// The future returned by [`sleep`] and [`sleep_until`].
///
/// Dropping it cancels its timer.
///
/// A sleep files its timer in the runtime it is polled in; polled in
/// another runtime later, it moves there.
///
/// # Panics
///
/// If first polled outside a keel runtime (see [`Handle::current`]), or
/// polled outside one after the runtime it was filed in shut down.
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep {
    deadline: Instant,
    /// The runtime whose wheel holds the timer, from the first poll on.
    handle: Option<Handle>,
    /// The filed timer, once polled and not yet fired or cancelled.
    key: Option<TimerKey>,
}

impl Sleep {
    /// When the sleep completes.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the deadline has passed.
    pub fn is_elapsed(&self) -> bool {
        Instant::now() >= self.deadline
    }

    /// Moves the deadline to `deadline`; the sleep can be awaited again.
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        self.cancel();
    }

    fn cancel(&mut self) {
        if let (Some(key), Some(handle)) = (self.key.take(), &self.handle) {
            handle.shared.timers().cancel(key);
        }
    }
}

impl Future for Sleep {
    type Output = ();

    #[track_caller]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_elapsed() {
            self.cancel();
            return Poll::Ready(());
        }
        let shared = self.runtime().shared.clone();
        let timers = shared.timers();
        let deadline = timers.ns_at(self.deadline);
        self.key = Some(timers.file(self.key, deadline, cx.waker(), TimerWake::Event));
        Poll::Pending
    }
}

impl Sleep {
    /// The runtime to file in: the one polling us, else the one we are
    /// filed in, if it still runs.
    #[track_caller]
    fn runtime(&mut self) -> &Handle {
        match (Handle::try_current(), &self.handle) {
            (Some(current), Some(filed)) if !current.is(&filed.shared) => {
                self.cancel();
                self.handle = Some(current);
            }
            (Some(current), None) => self.handle = Some(current),
            (None, None) => {
                self.handle = Some(Handle::current()); // panics with the message
            }
            (None, Some(filed)) if filed.shared.is_stopping() => panic!(
                "a Sleep was polled outside any keel runtime after the runtime it was \
                 filed in shut down; poll it inside a running runtime"
            ),
            _ => {}
        }
        self.handle.as_ref().expect("set above")
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("filed", &self.key.is_some())
            .finish()
    }
}
