//! `ScheduledIo`: the readiness of one registered source, and the tasks
//! waiting for it.
//!
//! The reactor asks epoll for edge-triggered events: the kernel reports a
//! source once when it *becomes* readable, not while it stays readable. So
//! keel remembers readiness itself, in one atomic word per source:
//!
//! - the reactor sets bits when an event arrives and wakes the waiting
//!   reader and/or writer;
//! - a task that sees a bit set tries its operation; if the operation
//!   says `WouldBlock`, the task clears the bit and waits for the next
//!   event.
//!
//! # Why a tick
//!
//! Between a task's `WouldBlock` and its clearing of the bit, a new event
//! may arrive and set the bit again; clearing it then would lose that
//! event for good (edge-triggered: the kernel will not repeat it). So the
//! word also counts events (the *tick*), the task remembers the tick it
//! saw before its operation, and it clears only if no event came since.
//!
//! # Errors are not final
//!
//! An error event (`EPOLLERR`) means the socket has a pending error, which
//! the next operation returns and thereby consumes; a connected UDP socket
//! that got an ICMP error is readable-with-error once, then empty again.
//! So a `WouldBlock` clears the error bit along with the direction's
//! readiness. Only the closed bits are final (a closed direction never
//! opens again, and its operations return end-of-file or an error rather
//! than `WouldBlock`). That is what guarantees an operation loop ends: a
//! `WouldBlock` always clears every bit that made the source look ready,
//! unless a newer event set them again.
//!
//! # Waiters
//!
//! Each direction keeps a list of wakers: several tasks may wait on one
//! source (acceptor tasks sharing a listener, receivers sharing a UDP
//! socket). An event wakes all the waiters of its direction, and those
//! that lose the race for the data wait again. A task that polls again
//! replaces its own entry rather than adding one; a waiter that is dropped
//! before an event leaves its waker until the next event, which then wakes
//! it once for nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::lock;
use std::task::{Context, Poll, Waker};

/// Readiness bits.
const READABLE: usize = 1;
const WRITABLE: usize = 1 << 1;
const READ_CLOSED: usize = 1 << 2;
const WRITE_CLOSED: usize = 1 << 3;
const ERROR: usize = 1 << 4;
const READINESS_MASK: usize = (1 << 5) - 1;
/// The tick occupies the bits above the readiness bits.
const TICK_SHIFT: u32 = 8;

/// Which way a task waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Read,
    Write,
}

impl Direction {
    /// The bits that satisfy a waiter in this direction. Closed and error
    /// states satisfy it too: the operation then reports EOF or the error.
    fn mask(self) -> usize {
        match self {
            Direction::Read => READABLE | READ_CLOSED | ERROR,
            Direction::Write => WRITABLE | WRITE_CLOSED | ERROR,
        }
    }

    /// The bits a `WouldBlock` in this direction clears: its readiness
    /// and the error (see the module docs). Closed states are final.
    fn clearable(self) -> usize {
        match self {
            Direction::Read => READABLE | ERROR,
            Direction::Write => WRITABLE | ERROR,
        }
    }
}

/// A snapshot of the readiness word, taken before an operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ready(usize);

impl Ready {
    /// Whether the source reported an error (the operation will say which).
    pub(crate) fn is_error(self) -> bool {
        self.0 & ERROR != 0
    }

    /// Whether the writing direction is closed.
    pub(crate) fn is_write_closed(self) -> bool {
        self.0 & WRITE_CLOSED != 0
    }

    /// Whether the source was last reported readable (the report may be
    /// stale: the data may have been read since).
    pub(crate) fn is_readable(self) -> bool {
        self.0 & READABLE != 0
    }

    /// Whether the reading direction is closed: reads return what is
    /// left, then end-of-file.
    pub(crate) fn is_read_closed(self) -> bool {
        self.0 & READ_CLOSED != 0
    }
}

/// What an event from the reactor says about a source.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Event {
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    pub(crate) read_closed: bool,
    pub(crate) write_closed: bool,
    pub(crate) error: bool,
}

impl Event {
    fn bits(self) -> usize {
        let mut bits = 0;
        for (set, bit) in [
            (self.readable, READABLE),
            (self.writable, WRITABLE),
            (self.read_closed, READ_CLOSED),
            (self.write_closed, WRITE_CLOSED),
            (self.error, ERROR),
        ] {
            if set {
                bits |= bit;
            }
        }
        bits
    }
}

/// The readiness and waiters of one registered source (see module docs).
#[derive(Debug)]
pub(crate) struct ScheduledIo {
    /// Readiness bits, and the tick above them.
    state: AtomicUsize,
    readers: Mutex<Vec<Waker>>,
    writers: Mutex<Vec<Waker>>,
    /// The driver does not watch the source yet: with a ring per worker,
    /// the first task to wait for it arms its watch (see
    /// `Reactor::arm`).
    unarmed: std::sync::atomic::AtomicBool,
}

impl ScheduledIo {
    /// With `assume_ready`, a fresh registration is assumed readable and
    /// writable: the first operation is simply tried, and a `WouldBlock`
    /// clears the guess. That saves a trip through the reactor for the
    /// first read or write of an accepted connection, which matters when
    /// every worker is busy. A connecting socket must not assume it: its
    /// first writability *is* the news that the connection is up.
    ///
    /// `unarmed`: the driver watches the source only once
    /// [`take_unarmed`](Self::take_unarmed) says so and the caller arms
    /// it.
    pub(crate) fn new(assume_ready: bool, unarmed: bool) -> ScheduledIo {
        let state = if assume_ready { READABLE | WRITABLE } else { 0 };
        ScheduledIo {
            state: AtomicUsize::new(state),
            readers: Mutex::new(Vec::new()),
            writers: Mutex::new(Vec::new()),
            unarmed: std::sync::atomic::AtomicBool::new(unarmed),
        }
    }

    /// Whether the driver does not watch the source yet.
    #[inline]
    pub(crate) fn is_unarmed(&self) -> bool {
        self.unarmed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the source still waits for its watch to be armed, which
    /// the caller then does: `true` once, to one caller.
    pub(crate) fn take_unarmed(&self) -> bool {
        self.unarmed
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// The arm failed: the next wait tries again.
    pub(crate) fn set_unarmed(&self) {
        self.unarmed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Records `event` and returns the wakers to wake (outside any lock).
    pub(crate) fn set(&self, event: Event, wake: &mut Vec<Waker>) {
        let bits = event.bits();
        if bits == 0 {
            return;
        }
        let mut current = self.state.load(Ordering::Acquire);
        loop {
            let tick = (current >> TICK_SHIFT).wrapping_add(1);
            let next = (current & READINESS_MASK) | bits | (tick << TICK_SHIFT);
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        if bits & Direction::Read.mask() != 0 {
            wake.append(&mut self.waiters(Direction::Read));
        }
        if bits & Direction::Write.mask() != 0 {
            wake.append(&mut self.waiters(Direction::Write));
        }
    }

    /// Ready if the source may be ready in `direction`; otherwise registers
    /// the task to be woken by the next event and returns `Pending`.
    pub(crate) fn poll_ready(&self, cx: &mut Context<'_>, direction: Direction) -> Poll<Ready> {
        let mask = direction.mask();
        let current = self.state.load(Ordering::Acquire);
        if current & mask != 0 {
            return Poll::Ready(Ready(current));
        }
        {
            let mut waiters = self.waiters(direction);
            match waiters.iter_mut().find(|w| w.will_wake(cx.waker())) {
                Some(waiter) => waiter.clone_from(cx.waker()),
                None => waiters.push(cx.waker().clone()),
            }
        }
        // An event may have come between the load and the registration,
        // and found no waker to wake: look again. (The event sets the
        // state before it takes the wakers under the same lock, so either
        // it finds ours or we see its bits.)
        let current = self.state.load(Ordering::Acquire);
        if current & mask != 0 {
            return Poll::Ready(Ready(current));
        }
        Poll::Pending
    }

    /// The readiness as it is now, without registering a waiter.
    pub(crate) fn readiness(&self) -> Ready {
        Ready(self.state.load(Ordering::Acquire))
    }

    /// The operation tried after `seen` said `WouldBlock`: forget the
    /// readiness, unless an event arrived since `seen` was taken.
    pub(crate) fn clear(&self, seen: Ready, direction: Direction) {
        let seen_tick = seen.0 >> TICK_SHIFT;
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                (current >> TICK_SHIFT == seen_tick).then_some(current & !direction.clearable())
            });
    }

    /// After a read of a byte stream that returned fewer bytes than asked
    /// for, and some: the read emptied the receive queue, so the readable
    /// bit is cleared as after a `WouldBlock` (unless an event came since
    /// `seen`), sparing the next read a system call that would only say
    /// so. Only the readable bit: an error the socket holds is still
    /// there for the next read to return.
    pub(crate) fn clear_drained(&self, seen: Ready) {
        let seen_tick = seen.0 >> TICK_SHIFT;
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                (current >> TICK_SHIFT == seen_tick).then_some(current & !READABLE)
            });
    }

    fn waiters(&self, direction: Direction) -> MutexGuard<'_, Vec<Waker>> {
        let waiters = match direction {
            Direction::Read => &self.readers,
            Direction::Write => &self.writers,
        };
        lock(waiters)
    }

    /// Wakes every waiter (the source is going away).
    pub(crate) fn wake_all(&self) {
        let mut wake = std::mem::take(&mut *self.waiters(Direction::Read));
        wake.append(&mut self.waiters(Direction::Write));
        wake.into_iter().for_each(Waker::wake);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdCounter;
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    struct Count(StdCounter);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(StdCounter::new(0)));
        (count.clone(), Waker::from(count))
    }

    /// An event that says the source is readable, and nothing else.
    fn readable() -> Event {
        Event {
            readable: true,
            ..Event::default()
        }
    }

    #[test]
    fn clear_keeps_an_event_that_came_after_the_snapshot() {
        let io = ScheduledIo::new(true, false);
        let (_, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let Poll::Ready(seen) = io.poll_ready(&mut cx, Direction::Read) else {
            panic!("a fresh source is assumed ready");
        };
        // An event lands between the operation's WouldBlock and the clear.
        io.set(readable(), &mut Vec::new());
        io.clear(seen, Direction::Read);
        assert!(io.poll_ready(&mut cx, Direction::Read).is_ready());
    }

    #[test]
    fn a_drained_read_clears_readable_unless_an_event_came_since() {
        let io = ScheduledIo::new(false, false);
        let (_, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let data_and_error = Event {
            readable: true,
            error: true,
            ..Event::default()
        };
        io.set(data_and_error, &mut Vec::new());
        let Poll::Ready(seen) = io.poll_ready(&mut cx, Direction::Read) else {
            panic!("an event made it readable");
        };
        // More data lands after the short read: the bit stays.
        io.set(readable(), &mut Vec::new());
        io.clear_drained(seen);
        let Poll::Ready(seen) = io.poll_ready(&mut cx, Direction::Read) else {
            panic!("the newer event is kept");
        };
        assert!(seen.is_readable());
        // Nothing since: readable goes, the pending error stays for the
        // next read to return.
        io.clear_drained(seen);
        let Poll::Ready(left) = io.poll_ready(&mut cx, Direction::Read) else {
            panic!("an error still makes the source ready");
        };
        assert!(!left.is_readable());
        assert!(left.is_error());
        // Once the error is consumed, a read waits for the next event.
        io.clear(left, Direction::Read);
        assert!(io.poll_ready(&mut cx, Direction::Read).is_pending());
    }

    #[test]
    fn clear_then_event_wakes_the_waiting_reader_only() {
        let io = ScheduledIo::new(true, false);
        let (reads, read_waker) = counting();
        let (writes, write_waker) = counting();
        let Poll::Ready(seen) =
            io.poll_ready(&mut Context::from_waker(&read_waker), Direction::Read)
        else {
            panic!("a fresh source is assumed ready");
        };
        io.clear(seen, Direction::Read);
        assert!(io
            .poll_ready(&mut Context::from_waker(&read_waker), Direction::Read)
            .is_pending());
        // Writing is still assumed possible.
        assert!(io
            .poll_ready(&mut Context::from_waker(&write_waker), Direction::Write)
            .is_ready());
        let mut wake = Vec::new();
        io.set(readable(), &mut wake);
        wake.into_iter().for_each(Waker::wake);
        assert_eq!(reads.0.load(Ordering::SeqCst), 1);
        assert_eq!(writes.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn closed_is_final_but_an_error_clears_with_a_would_block() {
        let io = ScheduledIo::new(true, false);
        let (_, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        io.set(
            Event {
                read_closed: true,
                error: true,
                ..Event::default()
            },
            &mut Vec::new(),
        );
        let Poll::Ready(seen) = io.poll_ready(&mut cx, Direction::Read) else {
            panic!("closed is ready");
        };
        assert!(seen.is_error());
        io.clear(seen, Direction::Read);
        io.clear(seen, Direction::Write);
        // Reading stays ready (closed: the read returns end-of-file)...
        let Poll::Ready(after) = io.poll_ready(&mut cx, Direction::Read) else {
            panic!("a closed direction stays ready");
        };
        // ...but the error, consumed by the operation, is gone; writing,
        // which was only ready for the error, waits again.
        assert!(!after.is_error());
        assert!(io.poll_ready(&mut cx, Direction::Write).is_pending());
    }
}
