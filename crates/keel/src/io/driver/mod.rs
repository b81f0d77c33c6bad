//! The IO drivers: what the reactor asks of the kernel, behind one
//! contract, with two implementations.
//!
//! - `epoll` (the default): one epoll instance through `mio`, its sources
//!   registered edge triggered, an eventfd to interrupt a blocked poll.
//! - `uring`: io_uring instances (one per worker by default, or rings
//!   the workers share: see `rings`), each source watched by a multishot
//!   `POLL_ADD` (edge triggered, as epoll's registrations are), each
//!   ring's eventfd watched by another. Looking for events without blocking
//!   reads the completion queue, memory the kernel shares with the
//!   process: no system call when nothing happened, and whether there is
//!   anything to look at is known from any thread without a lock (`glance`:
//!   with a ring per worker, a worker looks at every poll boundary where
//!   its ring has news). TCP streams' reads
//!   (`io::ring_recv`) and files' opens, reads and syncs, and the log's
//!   linked writes (`io::ring_file`) complete on it, and a worker closes
//!   its own ring's sources on it; socket writes, accepts and the rest
//!   still go by readiness.
//!
//! [`IoBackend`] chooses between them; `Auto` sets a ring up and falls
//! back to epoll with the reason, which [`Stats`](crate::stats::Stats)
//! reports.
//!
//! # The contract
//!
//! Every driver keeps these, and the reactor relies on nothing else:
//!
//! 1. **Registration.** [`Driver::register`] watches a descriptor for
//!    readability and writability under a token (a `usize` the reactor
//!    chooses) from then until [`Driver::close`]. It reports edges:
//!    an event means the readiness may have changed since the last event
//!    for that token, and at least one event follows every change (a
//!    source that is ready when registered gets one). A driver with a
//!    ring per worker watches it from its [`Driver::arm`] on, which the
//!    reactor calls before a task first waits for the source; a source
//!    ready when armed gets an event.
//! 2. **Closing.** [`Driver::close`] takes the descriptor, stops watching
//!    it and closes it. Once the descriptor's number is free again, no
//!    event for it is produced and no operation reaches it: epoll forgets
//!    a descriptor when its file closes (no `EPOLL_CTL_DEL` is needed); a
//!    ring cancels the descriptor's polls and operations before it closes
//!    it, at once (a system call) or, on the ring of the worker that
//!    closes it, at that ring's next submission, the cancellation linked
//!    to the close, so the number stays taken until then. A listener
//!    stops listening before the call returns. Events already produced
//!    may still be reported; the reactor recognises them by the token's
//!    generation.
//! 3. **Polling** is a [`Driver::wait`] for events, at most a timeout,
//!    then a [`Driver::reap`] of the events produced since the last reap.
//!    Both are called by one thread at a time, the holder of the
//!    [`Poller`] (one per driver, or with a ring per worker one per ring,
//!    each reaping its own ring's events); registration, arming, waking
//!    and closing may run on any thread at the same time,
//!    including during a wait (so the reactor holds none of its locks
//!    across one).
//! 4. **Waking** ([`Driver::wake`]) makes a poll that is blocked, or the
//!    next one, return; it reports no source event.
//! 5. **Liveness.** A driver that stops watching a registered source by
//!    itself (the ring ends a multishot poll when the thread that armed
//!    it exits, or when it cannot post a completion) watches it again
//!    before its next poll returns, and reports it ready in both
//!    directions, so that no edge is lost in between: before the reap that
//!    met its end returns. For that the reap's callback answers with the
//!    source's descriptor while it is registered ([`Owner`]). With a ring
//!    per worker, a reap by another worker than the ring's leaves the
//!    watch to the ring's poller, whose next wait arms it before it
//!    blocks.
//! 6. **Operations** (the ring only, [`Driver::completes_operations`]): a
//!    receive queued by [`Driver::queue_recv`], or a file's writes and
//!    sync by [`Driver::queue_file_op`], is submitted by the next
//!    wait, or by a [`Driver::flush`], which the workers call before they
//!    sleep without waiting on the driver and at their looks while another
//!    worker waits on it; a receive queued off the workers wakes the
//!    poller. With a ring per worker, an operation waits on its ring for
//!    that ring's worker's next wait or look, or for a sleeping worker
//!    that serves the ring ([`Driver::serve_for`]); a worker's flush
//!    submits its own ring's, and a receive queued on another worker's
//!    ring wakes that ring's poller. Its completion is reaped like an
//!    event, and wakes the tasks waiting on it. Closing a descriptor
//!    cancels its operations first, including one still in the
//!    submission queue (see `io::ring_recv` for why that matters); a file
//!    operation holds its file open, and its bytes, until its completion
//!    instead (see `io::ring_file`).

mod epoll;
mod glance;
mod rings;
mod uring;

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use mio::event::Source;
use mio::Interest;

use super::readiness::Event;
use super::ring_file::FileOp;
use super::ring_recv::RecvSlot;
use uring::Operation;

/// Which kernel interface a runtime's reactor uses (see
/// [`Builder::io_backend`](crate::Builder::io_backend)).
///
/// The default is `Epoll`, unless the environment variable
/// `KEEL_IO_BACKEND` says `auto`, `epoll` or `uring` (so that a whole
/// test suite or service runs on another driver without a rebuild); a
/// backend set on the builder wins over the variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IoBackend {
    /// io_uring if this process may set a ring up and the kernel has what
    /// the driver needs; epoll otherwise, with the reason in
    /// [`IoDriverStats::fallback`](crate::stats::IoDriverStats::fallback).
    Auto,
    /// epoll.
    #[default]
    Epoll,
    /// io_uring; building the runtime fails, with the reason, if the ring
    /// cannot be used.
    Uring,
}

impl IoBackend {
    /// The environment variable that sets the default backend.
    pub const ENV: &'static str = "KEEL_IO_BACKEND";

    /// The backend `KEEL_IO_BACKEND` asks for, `Epoll` if it is unset.
    ///
    /// # Errors
    ///
    /// `InvalidInput` naming the variable if its value is none of `auto`,
    /// `epoll` or `uring`.
    pub fn from_env() -> io::Result<IoBackend> {
        match std::env::var_os(Self::ENV) {
            None => Ok(IoBackend::default()),
            Some(value) => value
                .to_str()
                .and_then(|value| value.parse().ok())
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{}={}: expected auto, epoll or uring",
                            Self::ENV,
                            value.to_string_lossy()
                        ),
                    )
                }),
        }
    }
}

impl std::str::FromStr for IoBackend {
    type Err = String;

    fn from_str(name: &str) -> Result<IoBackend, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(IoBackend::Auto),
            "epoll" => Ok(IoBackend::Epoll),
            "uring" | "io_uring" | "io-uring" => Ok(IoBackend::Uring),
            _ => Err(format!(
                "unknown IO backend {name:?}: expected auto, epoll or uring"
            )),
        }
    }
}

impl fmt::Display for IoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoBackend::Auto => "auto",
            IoBackend::Epoll => "epoll",
            IoBackend::Uring => "uring",
        })
    }
}

/// What a poll's callback says of the token an event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Registered, on this descriptor.
    Live(RawFd),
    /// Deregistered (or never registered): the event is stale.
    Stale,
}

/// A reactor's driver (see the module docs). One per reactor, built
/// once: the ring's size against epoll's does not matter.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Driver {
    Epoll(epoll::Epoll),
    Uring(rings::Rings),
}

/// The right to poll a driver: one per driver, or with a ring per worker
/// one per ring (a *group*: see `rings`).
#[derive(Debug)]
pub(crate) enum Poller {
    Epoll(epoll::Poller),
    Uring(rings::Poller),
}

impl Driver {
    /// Sets up the driver `backend` asks for, with `rings` rings (at least
    /// one; see `rings`) if that is io_uring, each a worker's own if
    /// `per_worker`. `wake_token` is the token the driver keeps for its
    /// waker, never passed to the callback of [`poll`](Driver::poll).
    /// Returns the driver, its pollers (one, or one per ring with a ring
    /// per worker), and for `Auto` on epoll the reason the ring was not
    /// used.
    ///
    /// # Errors
    ///
    /// If epoll cannot be set up, or the ring when `backend` is `Uring`.
    pub(crate) fn new(
        backend: IoBackend,
        rings: usize,
        per_worker: bool,
        wake_token: usize,
    ) -> io::Result<(Driver, Vec<Poller>, Option<String>)> {
        let epoll = |fallback| {
            let (driver, poller) = epoll::Epoll::new(wake_token)?;
            Ok((Driver::Epoll(driver), vec![Poller::Epoll(poller)], fallback))
        };
        let uring = |(driver, pollers): (rings::Rings, Vec<rings::Poller>)| {
            let pollers = pollers.into_iter().map(Poller::Uring).collect();
            (Driver::Uring(driver), pollers, None)
        };
        match backend {
            IoBackend::Epoll => epoll(None),
            IoBackend::Uring => rings::Rings::new(rings, per_worker, wake_token)
                .map(uring)
                .map_err(|why| io::Error::new(why.kind(), format!("the io_uring driver: {why}"))),
            IoBackend::Auto => match rings::Rings::new(rings, per_worker, wake_token) {
                Ok(built) => Ok(uring(built)),
                Err(why) => epoll(Some(why.to_string())),
            },
        }
    }

    /// Whether each worker has a ring of its own, watched lazily (see
    /// `rings`): sources are then watched by [`arm`](Driver::arm).
    pub(crate) fn per_worker(&self) -> bool {
        matches!(self, Driver::Uring(rings) if rings.per_worker())
    }

    /// The driver's name, as [`IoDriverStats::driver`] gives it.
    ///
    /// [`IoDriverStats::driver`]: crate::stats::IoDriverStats::driver
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Driver::Epoll(_) => "epoll",
            Driver::Uring(_) => "io_uring",
        }
    }

    /// How many io_uring instances it runs; 0 on epoll.
    pub(crate) fn rings(&self) -> usize {
        match self {
            Driver::Epoll(_) => 0,
            Driver::Uring(rings) => rings.count(),
        }
    }

    /// How many rings a worker glances at after every poll (see
    /// `glance`); 0 on epoll and on shared rings.
    pub(crate) fn glances(&self) -> usize {
        match self {
            Driver::Epoll(_) => 0,
            Driver::Uring(rings) => rings.glances(),
        }
    }

    /// Watches `source` under `token` (contract, 1); with a ring per
    /// worker, from its [`arm`](Driver::arm) on. `worker`: the calling
    /// thread's index among the runtime's workers, if it is one; only they
    /// arm the ring's watches (see `uring`).
    pub(crate) fn register(
        &self,
        source: &mut (impl Source + AsRawFd),
        token: usize,
        interest: Interest,
        worker: Option<usize>,
    ) -> io::Result<()> {
        match self {
            Driver::Epoll(epoll) => epoll.register(source, token, interest),
            Driver::Uring(ring) => ring.register(source.as_raw_fd(), token, interest, worker),
        }
    }

    /// With a ring per worker, watches a registered source from now on,
    /// on the calling worker's ring unless it already has a home (see
    /// `rings`); called once per registration, before a task first waits
    /// for an event. Nothing on the other drivers.
    pub(crate) fn arm(
        &self,
        fd: RawFd,
        token: usize,
        interest: Interest,
        worker: Option<usize>,
    ) -> io::Result<()> {
        match self {
            Driver::Epoll(_) => Ok(()),
            Driver::Uring(rings) => rings.arm(fd, token, interest, worker),
        }
    }

    /// Stops watching `source`, registered under `token`, and closes it
    /// (contract, 2); `listening` if it is a listening socket, which then
    /// stops listening before this returns. `worker`: the calling thread's
    /// index among the runtime's workers, if it is one.
    pub(crate) fn close(
        &self,
        source: impl Source + IntoRawFd,
        token: usize,
        listening: bool,
        worker: Option<usize>,
    ) -> io::Result<()> {
        match self {
            // An epoll registration holds no reference to the socket: the
            // close is the last, and takes the descriptor out of the
            // interest list with the file (no `EPOLL_CTL_DEL`, a system
            // call fewer a connection), ending a listener at once. A
            // descriptor the process duplicated keeps the file, and its
            // registration, open: its events then name a forgotten token.
            Driver::Epoll(_) => {
                drop(source);
                Ok(())
            }
            Driver::Uring(rings) => {
                // SAFETY: `into_raw_fd` hands over the descriptor, which
                // nothing else owns from now on.
                let fd = unsafe { OwnedFd::from_raw_fd(source.into_raw_fd()) };
                rings.close(fd, token, listening, worker)
            }
        }
    }

    /// Makes a blocked poll of poller `group` return (contract, 4).
    pub(crate) fn wake(&self, group: usize) {
        match self {
            Driver::Epoll(epoll) => epoll.wake(),
            Driver::Uring(ring) => ring.wake(group),
        }
    }

    /// Waits at most `timeout` (`None`: indefinitely, `Some(ZERO)`: not
    /// at all) until events are there to [`reap`](Driver::reap).
    ///
    /// # Errors
    ///
    /// If interrupted by a signal, or the wait failed: the caller reaps
    /// what is there and polls again soon.
    pub(crate) fn wait(&self, poller: &mut Poller, timeout: Option<Duration>) -> io::Result<()> {
        match (self, poller) {
            (Driver::Epoll(_), Poller::Epoll(poller)) => poller.wait(timeout),
            (Driver::Uring(rings), Poller::Uring(poller)) => rings.wait(poller, timeout),
            _ => unreachable!("a poller polls the driver it came with"),
        }
    }

    /// Does what [`wait`](Driver::wait) does before it waits, for a
    /// caller about to wait on [`fd`](Driver::fd) elsewhere instead (the
    /// tokio side on the workers): the ring arms the watches registered
    /// off the workers, its own waker's included.
    ///
    /// # Errors
    ///
    /// If a watch could not be armed; it is tried again at the next wait.
    #[cfg(feature = "tokio-context")]
    pub(crate) fn prepare_to_wait_elsewhere(&self, poller: &mut Poller) -> io::Result<()> {
        match (self, poller) {
            (Driver::Epoll(_), Poller::Epoll(_)) => Ok(()),
            (Driver::Uring(ring), Poller::Uring(poller)) => {
                ring.submit_queued(poller);
                ring.arm_registered_elsewhere(poller)
            }
            _ => unreachable!("a poller polls the driver it came with"),
        }
    }

    /// Reports the events produced since the last reap to `on_event`
    /// (contract, 3), without waiting, and watches again the sources it
    /// must before returning (contract, 5).
    ///
    /// # Errors
    ///
    /// If a source could not be watched again (the kernel is out of
    /// memory); the others were reported.
    /// `for_its_poller`: false for a thread that reaps a ring per
    /// worker's ring for its busy worker (see `rings`), which leaves the
    /// watches to arm again to that worker.
    pub(crate) fn reap(
        &self,
        poller: &mut Poller,
        wake: &mut Vec<Waker>,
        for_its_poller: bool,
        on_event: impl FnMut(usize, Event, &mut Vec<Waker>) -> Owner,
    ) -> io::Result<()> {
        match (self, poller) {
            (Driver::Epoll(_), Poller::Epoll(poller)) => {
                poller.reap(wake, on_event);
                Ok(())
            }
            (Driver::Uring(ring), Poller::Uring(poller)) => {
                ring.reap(poller, wake, for_its_poller, on_event)
            }
            _ => unreachable!("a poller polls the driver it came with"),
        }
    }

    /// For a thread that is not `poller`'s holder but serves its rings
    /// while their worker runs (a ring per worker: see `rings`): submits
    /// the operations queued on them (contract, 6) and arms the sources'
    /// watches left to their poller, not its waker's; nothing on epoll.
    ///
    /// # Errors
    ///
    /// If a watch could not be armed; it is tried again later.
    pub(crate) fn serve_for(&self, poller: &Poller) -> io::Result<()> {
        match (self, poller) {
            (Driver::Uring(ring), Poller::Uring(poller)) => ring.serve_for(poller),
            _ => Ok(()),
        }
    }

    /// Whether the last [`wait`](Driver::wait) left something to reap;
    /// a reap that would find nothing can be skipped.
    pub(crate) fn has_events(&self, poller: &mut Poller) -> bool {
        match (self, poller) {
            (Driver::Epoll(_), Poller::Epoll(poller)) => poller.has_events(),
            (Driver::Uring(ring), Poller::Uring(poller)) => ring.has_completions(poller),
            _ => unreachable!("a poller polls the driver it came with"),
        }
    }

    /// Whether poller `group` would find something at a look, known
    /// without a system call or a lock (see `glance`): with a ring per
    /// worker only. `false` where it cannot tell (epoll, shared rings).
    pub(crate) fn has_news(&self, group: usize) -> bool {
        match self {
            Driver::Epoll(_) => false,
            Driver::Uring(rings) => rings.has_news(group),
        }
    }

    /// Whether operations may complete on this driver: reads (see
    /// `io::ring_recv`) and files' operations (see `io::ring_file`).
    pub(crate) fn completes_operations(&self) -> bool {
        matches!(self, Driver::Uring(_))
    }

    /// Queues `slot`'s receive for the next submission (contract, 6);
    /// `worker`: the calling thread's index among the runtime's workers,
    /// which submit at their next look, if it is one (otherwise the
    /// poller is woken).
    pub(crate) fn queue_recv(&self, slot: Arc<RecvSlot>, worker: Option<usize>) {
        match self {
            Driver::Epoll(_) => unreachable!("receives complete only on a ring"),
            Driver::Uring(ring) => ring.queue(Operation::Recv(slot), worker),
        }
    }

    /// Queues a file's writes and sync for the next submission (contract,
    /// 6), as [`queue_recv`](Self::queue_recv) does a worker's receive:
    /// only the workers queue them (see `io::ring_file`), and they submit
    /// them.
    pub(crate) fn queue_file_op(&self, op: Arc<FileOp>, worker: usize) {
        match self {
            Driver::Epoll(_) => unreachable!("file operations complete only on a ring"),
            Driver::Uring(ring) => ring.queue(Operation::File(op), Some(worker)),
        }
    }

    /// Submits the queued operations now (contract, 6): those `worker`
    /// submits (see `rings`); nothing on epoll.
    pub(crate) fn flush(&self, worker: Option<usize>) {
        if let Driver::Uring(ring) = self {
            ring.flush(worker);
        }
    }

    /// Operations submitted and not yet completed; 0 on epoll.
    pub(crate) fn in_flight(&self) -> u64 {
        match self {
            Driver::Epoll(_) => 0,
            Driver::Uring(ring) => ring.in_flight(),
        }
    }

    /// A descriptor that is readable while events wait to be polled, for
    /// a tokio side on the workers to wait on (see
    /// `runtime::tokio_side`).
    #[cfg(feature = "tokio-context")]
    pub(crate) fn fd(&self, poller: &Poller) -> RawFd {
        match (self, poller) {
            (Driver::Epoll(_), Poller::Epoll(poller)) => poller.fd(),
            (Driver::Uring(rings), Poller::Uring(poller)) => rings.fd(poller),
            _ => unreachable!("a poller polls the driver it came with"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_parse_from_their_names() {
        assert_eq!("auto".parse(), Ok(IoBackend::Auto));
        assert_eq!("EPOLL".parse(), Ok(IoBackend::Epoll));
        assert_eq!("uring".parse(), Ok(IoBackend::Uring));
        assert_eq!("io_uring".parse(), Ok(IoBackend::Uring));
        let error = "kqueue".parse::<IoBackend>().unwrap_err();
        assert!(
            error.contains("kqueue") && error.contains("epoll"),
            "{error}"
        );
        for backend in [IoBackend::Auto, IoBackend::Epoll, IoBackend::Uring] {
            assert_eq!(backend.to_string().parse(), Ok(backend));
        }
    }
}
