//! `IoSource`: a mio source registered with a runtime's reactor, and the
//! loop every IO operation runs.

use std::io;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use mio::event::Source;
use mio::{Interest, Token};

use super::readiness::{Direction, Event, Ready, ScheduledIo};
use super::ring_recv::RecvSlot;
use crate::runtime::context;
use crate::sched::Shared;
use crate::task::coop;

/// A source registered with a runtime's reactor for reading and writing.
/// Stops watching and closes the source when dropped (see
/// [`Reactor::close`](super::reactor::Reactor::close)).
pub(crate) struct IoSource<E: Source + AsRawFd + IntoRawFd> {
    /// `Some` until dropped.
    io: Option<E>,
    scheduled: Arc<ScheduledIo>,
    token: Token,
    /// Keeps the reactor alive as long as the source is registered.
    shared: Arc<Shared>,
    /// Registered with the urgent lane's reactor, not the workers'.
    on_lane: bool,
    /// A listening socket: a ring's close shuts it for reading first,
    /// so that it stops listening at once (see the io_uring driver's
    /// `stop_listening`).
    listening: bool,
}

impl<E: Source + AsRawFd + IntoRawFd + std::fmt::Debug> std::fmt::Debug for IoSource<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoSource")
            .field("io", &self.io)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// The runtime of the calling thread, for registering a new source.
///
/// # Errors
///
/// `Other` outside a keel runtime.
pub(crate) fn current_runtime() -> io::Result<Arc<Shared>> {
    context::current()
        .map(|handle| handle.shared)
        .ok_or_else(|| {
            io::Error::other(
                "keel IO types must be created inside a keel runtime \
             (in a task, or in Runtime::block_on)",
            )
        })
}

impl<E: Source + AsRawFd + IntoRawFd> IoSource<E> {
    /// Registers `io` with `shared`'s reactor (its urgent lane's, when it
    /// has one and the calling task is urgent); see [`ScheduledIo::new`] for
    /// `assume_ready`.
    ///
    /// # Errors
    ///
    /// If epoll refuses the source.
    pub(crate) fn new(shared: Arc<Shared>, io: E, assume_ready: bool) -> io::Result<Self> {
        Self::with_role(shared, io, assume_ready, false)
    }

    /// [`new`](Self::new) for a listening socket, assumed ready: its
    /// close also stops it listening at once.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub(crate) fn listener(shared: Arc<Shared>, io: E) -> io::Result<Self> {
        Self::with_role(shared, io, true, true)
    }

    fn with_role(
        shared: Arc<Shared>,
        mut io: E,
        assume_ready: bool,
        listening: bool,
    ) -> io::Result<Self> {
        let (reactor, on_lane) = shared.reactor_for_new_source();
        let (scheduled, token) = reactor.register(
            &mut io,
            Interest::READABLE | Interest::WRITABLE,
            assume_ready,
            shared.worker_index(),
        )?;
        Ok(IoSource {
            io: Some(io),
            scheduled,
            token,
            shared,
            on_lane,
            listening,
        })
    }

    /// The runtime the source is registered with.
    pub(crate) fn runtime(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The source itself.
    pub(crate) fn get_ref(&self) -> &E {
        self.io.as_ref().expect("present until dropped")
    }

    /// Runs `op` once the source may be ready in `direction`, until it
    /// returns something other than `WouldBlock`. Consults the coop budget
    /// first and counts a completed operation against it.
    ///
    /// Fails once the runtime the source belongs to has shut down: nobody
    /// polls its reactor any more, so waiting would never end.
    pub(crate) fn poll_io<R>(
        &self,
        cx: &mut Context<'_>,
        direction: Direction,
        op: impl FnMut(&E) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        self.poll_io_then(cx, direction, op, |_, _| {})
    }

    /// [`poll_io`](Self::poll_io) for a read of up to `len` bytes from a
    /// byte stream: a read that returns fewer bytes than that (and some)
    /// emptied the receive queue, so the source stops looking readable
    /// until the next event (see [`ScheduledIo::clear_drained`]). Not for
    /// datagrams, where every read is one datagram, however short.
    pub(crate) fn poll_stream_read(
        &self,
        cx: &mut Context<'_>,
        len: usize,
        op: impl FnMut(&E) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        self.poll_io_then(cx, Direction::Read, op, |result, seen| {
            if matches!(result, Ok(n) if *n > 0 && *n < len) {
                self.scheduled.clear_drained(seen);
            }
        })
    }

    /// The loop of [`poll_io`](Self::poll_io); `done` sees the outcome and
    /// the readiness the operation was tried under.
    fn poll_io_then<R>(
        &self,
        cx: &mut Context<'_>,
        direction: Direction,
        mut op: impl FnMut(&E) -> io::Result<R>,
        done: impl FnOnce(&io::Result<R>, Ready),
    ) -> Poll<io::Result<R>> {
        if let Some(gone) = ready!(self.poll_stopped(cx)) {
            return Poll::Ready(Err(gone));
        }
        ready!(coop::poll_proceed(cx));
        loop {
            let seen = ready!(self.wait_ready(cx, direction));
            match op(self.get_ref()) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    self.scheduled.clear(seen, direction);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                result => {
                    done(&result, seen);
                    coop::spend();
                    return Poll::Ready(result);
                }
            }
        }
    }

    /// A read whose caller decides, at each attempt, whether to read now:
    /// batched reads ([`crate::net::BatchPolicy`]) hold a read back until
    /// enough bytes are queued, which the readiness bits alone cannot say.
    ///
    /// `attempt` gets the source, the readiness seen just before (without
    /// any waiter registered) and the task's waker (for a timer of its
    /// own). `WouldBlock` from it means "not now": the readiness it saw is
    /// forgotten, as after a read's `WouldBlock`, and the task waits for
    /// the next read event (or for whatever `attempt` arranged with the
    /// waker). Readiness that closed or failed stays set (see
    /// [`ScheduledIo::clear`]), so `attempt` must go ahead when it sees it,
    /// or the loop would not end. Budget and shutdown as in
    /// [`IoSource::poll_io`].
    pub(crate) fn poll_read_with<R>(
        &self,
        cx: &mut Context<'_>,
        mut attempt: impl FnMut(&E, Ready, &Waker) -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        if let Some(gone) = ready!(self.poll_stopped(cx)) {
            return Poll::Ready(Err(gone));
        }
        ready!(coop::poll_proceed(cx));
        loop {
            let seen = self.scheduled.readiness();
            match attempt(self.get_ref(), seen, cx.waker()) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                result => {
                    coop::spend();
                    return Poll::Ready(result);
                }
            }
            self.scheduled.clear(seen, Direction::Read);
            // Registers the waker; ready only if an event came since `seen`
            // (then look again) or the direction closed or failed.
            if self.wait_ready(cx, Direction::Read).is_pending() {
                return Poll::Pending;
            }
        }
    }

    /// A receive slot for this source if its reads complete on the ring
    /// (see `io::ring_recv`): the runtime asks for it
    /// (`Builder::ring_receives`), its reactor is an io_uring, and not the
    /// urgent lane's (whose thread polls readiness only).
    pub(crate) fn ring_slot(&self) -> Option<Arc<RecvSlot>> {
        let reactor = self.shared.reactor_of(self.on_lane);
        (self.shared.config.ring_receives && !self.on_lane && reactor.completes_operations())
            .then(|| RecvSlot::new(self.get_ref().as_raw_fd()))
    }

    /// A read of up to `wanted` bytes through `slot` (this source's, from
    /// [`ring_slot`](Self::ring_slot)); `copy` takes the bytes. Budget and
    /// shutdown as in [`IoSource::poll_io`].
    pub(crate) fn poll_ring_read(
        &self,
        cx: &mut Context<'_>,
        slot: &Arc<RecvSlot>,
        wanted: usize,
        copy: &mut dyn FnMut(&[u8]) -> usize,
    ) -> Poll<io::Result<usize>> {
        if let Some(gone) = ready!(self.poll_stopped(cx)) {
            return Poll::Ready(Err(gone));
        }
        ready!(coop::poll_proceed(cx));
        let result = ready!(slot.poll_read(cx, wanted, copy, |slot| {
            self.shared
                .reactor_of(self.on_lane)
                .queue_recv(slot, self.shared.worker_index());
        }));
        coop::spend();
        Poll::Ready(result)
    }

    /// Makes the source look readable and wakes the tasks waiting to read,
    /// so that they try again under rules that just changed (a batch
    /// policy): an artificial event. A read that finds nothing clears it,
    /// as after any event.
    pub(crate) fn recheck_readable(&self) {
        let mut wake = Vec::new();
        let event = Event {
            readable: true,
            ..Event::default()
        };
        self.scheduled.set(event, &mut wake);
        wake.into_iter().for_each(Waker::wake);
    }

    /// Waits until the source may be ready in `direction`, without an
    /// operation (a non-blocking connect waits for writability this way).
    ///
    /// # Errors
    ///
    /// Once the runtime has shut down (see [`IoSource::poll_io`]).
    pub(crate) fn poll_ready(
        &self,
        cx: &mut Context<'_>,
        direction: Direction,
    ) -> Poll<io::Result<Ready>> {
        if let Some(gone) = ready!(self.poll_stopped(cx)) {
            return Poll::Ready(Err(gone));
        }
        self.wait_ready(cx, direction).map(Ok)
    }

    /// `Some(error)` once the runtime is stopping: every operation then
    /// fails at once. Each failure is spent against the poll's IO budget
    /// like an operation, so that a task that retries on errors (an accept
    /// loop that logs and goes on) still yields within its budget: a
    /// stopping worker ends between two polls, and would otherwise poll
    /// that task for ever, and the runtime's drop wait for it for ever.
    /// Inlined: it runs before every operation, and only its first line
    /// runs while the runtime is up.
    #[inline]
    fn poll_stopped(&self, cx: &mut Context<'_>) -> Poll<Option<io::Error>> {
        if !self.shared.is_stopping() {
            return Poll::Ready(None);
        }
        Self::poll_failing(cx)
    }

    /// [`poll_stopped`](Self::poll_stopped) once the runtime is stopping.
    #[cold]
    fn poll_failing(cx: &mut Context<'_>) -> Poll<Option<io::Error>> {
        ready!(coop::poll_proceed(cx));
        coop::spend();
        Poll::Ready(Some(runtime_gone()))
    }

    /// [`ScheduledIo::poll_ready`], which arms the driver's watch of the
    /// source the first time the task would wait (with a ring per worker:
    /// see `Reactor::arm`). The watch reports the source at once if it is
    /// ready when armed, after the waker is registered here, so no event
    /// is lost in between.
    #[inline]
    fn wait_ready(&self, cx: &mut Context<'_>, direction: Direction) -> Poll<Ready> {
        let ready = self.scheduled.poll_ready(cx, direction);
        if ready.is_pending() && self.scheduled.is_unarmed() {
            self.arm();
        }
        ready
    }

    /// Arms the source's watch on the calling worker's ring (see
    /// [`wait_ready`](Self::wait_ready)). A failed arm (the kernel out of
    /// memory) wakes every task waiting on the source (this one was
    /// registered just before), and the first to wait again tries again.
    #[cold]
    fn arm(&self) {
        let reactor = self.shared.reactor_of(self.on_lane);
        let fd = self.get_ref().as_raw_fd();
        let worker = self.shared.worker_index();
        if reactor
            .arm(&self.scheduled, fd, self.token, worker)
            .is_err()
        {
            self.scheduled.wake_all();
        }
    }

    /// Forgets the readiness `seen` showed in `direction` (the caller found
    /// the source not ready after all).
    pub(crate) fn clear(&self, seen: Ready, direction: Direction) {
        self.scheduled.clear(seen, direction);
    }
}

/// The error of an operation on a source whose runtime has shut down.
fn runtime_gone() -> io::Error {
    io::Error::other("the keel runtime this socket belongs to has shut down")
}

impl<E: Source + AsRawFd + IntoRawFd> Drop for IoSource<E> {
    fn drop(&mut self) {
        if let Some(io) = self.io.take() {
            // Closing fails only if the ring cannot cancel the source's
            // poll (a kernel out of memory): the descriptor is closed
            // anyway, and the poll keeps the socket open until the ring is
            // dropped.
            let _ = self.shared.reactor_of(self.on_lane).close(
                io,
                self.token,
                self.listening,
                self.shared.worker_index(),
            );
        }
    }
}
