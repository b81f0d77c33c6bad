//! The reactor: one IO driver per runtime (epoll, or an io_uring: see
//! [`driver`](super::driver), whose contract is all the reactor relies
//! on), polled by the workers themselves.
//!
//! There is no IO thread. A worker polls the reactor
//!
//! - *without blocking*, between two task polls, once `io_interval` has
//!   passed since its own last poll, or after `io_every` task polls,
//!   whichever comes first (see
//!   [`worker`](crate::sched)); with a ring per worker also at any poll
//!   boundary where a glance at its ring (memory the kernel shares, no
//!   system call) shows that a look would find events
//!   ([`Reactor::has_news`]); when it runs out of tasks, only if
//!   `io_interval` has passed too (a system call each time a queue runs
//!   dry would cost a message hop more than it buys);
//! - *blocking*, when it parks: at most one parked worker blocks in
//!   the driver's poll (`epoll_wait`, or a wait for the ring's
//!   completions) at a time (the *blocker*); the others sleep on their
//!   parker. A notification for a blocker wakes the driver (an eventfd
//!   write) instead of signalling a condition variable. The blocker
//!   leaves its poll to run the tasks its events
//!   woke; the other sleepers wake every few milliseconds to take the role
//!   over if it stays vacant (see `REACTOR_CHECK_NS` in the worker), so a
//!   long poll on the former blocker cannot keep sockets unpolled while
//!   workers sleep. Once the role has stayed held for a while they doze
//!   (sleep untimed) until an alarm set when a blocker leaves its poll
//!   wakes them (see `sched::doze`), so an idle runtime wakes nobody.
//!
//! The first is what keeps sockets served when every worker is busy with
//! CPU work (the seed's "eager check io"): readiness is looked at every
//! `io_interval` of busy time, at the first poll boundary after it, instead
//! of only when a worker runs out of work. The second is what lets an idle
//! runtime sleep without polling.
//!
//! # Poll groups
//!
//! What is said above holds for each *poll group*: a poller and its
//! blocker role. A reactor has one group, unless each worker has a ring of
//! its own (`Builder::io_ring_per_worker`): then group `i` is worker `i`'s
//! ring, which only worker `i` polls and blocks in; sources are watched
//! lazily ([`Reactor::arm`]) on the ring of the worker whose task first
//! waits for them, and a sleeping worker wakes every few milliseconds to
//! look after the rings of the workers that run ([`Reactor::steal`]; see
//! the driver's `rings`).
//!
//! # Tokens
//!
//! Each registration holds an [`Arc<ScheduledIo>`] in a slab; the driver's
//! token is the slab index plus a generation, so an event still in flight for a
//! source that was closed (and whose slot was reused) is recognised
//! as stale and dropped instead of waking the wrong task.
//!
//! # A wait that fails
//!
//! A wait the kernel refuses (`ENOMEM` arming the ring's polls, a
//! descriptor of the runtime's closed behind its back) returns at once.
//! The park that called it would go round without sleeping, a core at
//! 100% doing nothing. So a failed wait other than `EINTR` is counted
//! ([`IoDriverStats::wait_errors`], with the last error's text), logged
//! (the first, then at every power of two), and followed by a sleep of
//! [`WAIT_ERROR_BACKOFF`] (never longer than the wait's own timeout, and
//! not at all for a look, which does not block, or when events are there
//! to reap: they are reaped at once). The runtime keeps
//! running tasks meanwhile; a notification for a worker asleep there is
//! seen within the backoff instead of at once.
//!
//! [`IoDriverStats::wait_errors`]: crate::stats::IoDriverStats::wait_errors
//!
//! # Wakes
//!
//! Polling collects the wakers of the tasks to wake; the caller wakes them
//! after releasing the poller, so a woken task's schedule path (which may
//! write to the eventfd) never runs under the reactor's locks.

use std::io;
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::task::Waker;
use std::time::Duration;

use mio::event::Source;
use mio::{Interest, Token};
use slab::Slab;

use super::driver::{Driver, IoBackend, Owner};
use super::lock;
use super::readiness::ScheduledIo;
use crate::loom::sync::atomic::AtomicBool;
use crate::loom::sync::{Mutex as ModelledMutex, MutexGuard};

pub(crate) use super::driver::Poller;

/// The token of the driver's own waker.
const WAKER_TOKEN: usize = usize::MAX;

/// The slab index lives in the low half of a token, the generation in the
/// high half.
const INDEX_BITS: u32 = usize::BITS / 2;
const INDEX_MASK: usize = (1 << INDEX_BITS) - 1;

/// A registered source's entry in the slab.
#[derive(Debug)]
struct Entry {
    generation: usize,
    io: Arc<ScheduledIo>,
    /// The source's descriptor, for a driver that must watch it again
    /// (see the driver contract, 5).
    fd: RawFd,
}

/// A poller and its blocker role (see the module docs).
#[derive(Debug)]
struct PollGroup {
    /// Modelled under loom with the blocker flag: the hand-off between a
    /// worker that polls without blocking and one that comes to block is
    /// part of the protocol loom checks.
    poller: ModelledMutex<Poller>,
    /// A parked worker is blocked in the driver's poll: busy workers of
    /// the group need not poll, the blocker sees every event as it
    /// arrives.
    blocked: AtomicBool,
}

/// How long a wait that the kernel refused is slept off before the
/// caller goes on (see "A wait that fails"): short enough that a
/// notification waits little, long enough that a failing park costs a
/// thousand system calls a second, not millions.
pub(crate) const WAIT_ERROR_BACKOFF: Duration = Duration::from_millis(1);

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Reactor {
    driver: Driver,
    /// The backend asked for.
    requested: IoBackend,
    /// Why `IoBackend::Auto` did not get a ring, when it did not.
    fallback: Option<String>,
    /// The pollers and their blockers: one group, or with a ring per
    /// worker one per worker (see [`Reactor::group_of`]).
    groups: Box<[PollGroup]>,
    entries: Mutex<Slab<Entry>>,
    next_generation: AtomicU64,
    /// Waits the kernel refused (see "A wait that fails").
    wait_errors: AtomicU64,
    /// The text of the last of them.
    last_wait_error: Mutex<Option<String>>,
    /// Under loom, the kernel's side of each poll group: see [`model`].
    #[cfg(loom)]
    pub(crate) model: Box<[model::Kernel]>,
}

impl Reactor {
    /// A reactor on the driver `backend` asks for, with `rings` rings if
    /// that is io_uring, each a worker's own if `per_worker` (`rings` is
    /// then the number of workers).
    ///
    /// # Errors
    ///
    /// If the driver cannot be set up (see [`Driver::new`]).
    pub(crate) fn new(backend: IoBackend, rings: usize, per_worker: bool) -> io::Result<Reactor> {
        let (driver, pollers, fallback) = Driver::new(backend, rings, per_worker, WAKER_TOKEN)?;
        let groups: Box<[PollGroup]> = pollers
            .into_iter()
            .map(|poller| PollGroup {
                poller: ModelledMutex::new(poller),
                blocked: AtomicBool::new(false),
            })
            .collect();
        #[cfg(loom)]
        let model = groups.iter().map(|_| model::Kernel::default()).collect();
        Ok(Reactor {
            driver,
            requested: backend,
            fallback,
            groups,
            entries: Mutex::new(Slab::new()),
            next_generation: AtomicU64::new(0),
            wait_errors: AtomicU64::new(0),
            last_wait_error: Mutex::new(None),
            #[cfg(loom)]
            model,
        })
    }

    /// The driver, what was asked for, and why `Auto` fell back to epoll,
    /// if it did.
    pub(crate) fn stats(&self) -> crate::stats::IoDriverStats {
        crate::stats::IoDriverStats {
            driver: self.driver.name(),
            requested: self.requested,
            fallback: self.fallback.clone(),
            operations_in_flight: self.driver.in_flight(),
            rings: self.driver.rings(),
            ring_per_worker: self.driver.per_worker(),
            glances: self.driver.glances(),
            wait_errors: self.wait_errors.load(Ordering::Relaxed),
            last_wait_error: lock(&self.last_wait_error).clone(),
        }
    }

    /// Registers `source` for `interest`; events set the returned
    /// readiness. Undone by [`Reactor::close`], which closes it.
    /// `assume_ready`: see [`ScheduledIo::new`]; `worker`: the calling
    /// thread's index among the runtime's workers, if it is one (see
    /// [`Driver::register`]). With a ring per worker the source is watched
    /// from its first [`arm`](Reactor::arm) on.
    pub(crate) fn register(
        &self,
        source: &mut (impl Source + AsRawFd),
        interest: Interest,
        assume_ready: bool,
        worker: Option<usize>,
    ) -> io::Result<(Arc<ScheduledIo>, Token)> {
        let io = Arc::new(ScheduledIo::new(assume_ready, self.driver.per_worker()));
        // The generation leaves the token's top bit clear: the ring marks
        // its operations with it (see `driver`).
        let generation = (self.next_generation.fetch_add(1, Ordering::Relaxed) as usize)
            & (usize::MAX >> (INDEX_BITS + 1));
        let token = {
            let mut entries = lock(&self.entries);
            let index = entries.insert(Entry {
                generation,
                io: io.clone(),
                fd: source.as_raw_fd(),
            });
            // The last index is not used: with the largest generation its
            // token would equal WAKER_TOKEN.
            if index >= INDEX_MASK {
                entries.remove(index);
                return Err(io::Error::other("too many registered IO sources"));
            }
            Token(index | (generation << INDEX_BITS))
        };
        if let Err(error) = self.driver.register(source, token.0, interest, worker) {
            self.forget(token);
            return Err(error);
        }
        Ok((io, token))
    }

    /// Watches `io`'s source (registered under `token` on `fd`) from now
    /// on, if it is not watched yet (with a ring per worker, see
    /// [`Driver::arm`]); called before a task waits for its events.
    /// `worker`: as for [`register`](Reactor::register).
    ///
    /// # Errors
    ///
    /// If the ring could not watch it; it is tried again at the next call.
    pub(crate) fn arm(
        &self,
        io: &ScheduledIo,
        fd: RawFd,
        token: Token,
        worker: Option<usize>,
    ) -> io::Result<()> {
        if !io.take_unarmed() {
            return Ok(());
        }
        let armed = self
            .driver
            .arm(fd, token.0, Interest::READABLE | Interest::WRITABLE, worker);
        if armed.is_err() {
            io.set_unarmed();
        }
        armed
    }

    /// Removes `source` from the driver, forgets its token and closes it
    /// (see the driver contract, 2); a waiting task is woken (it will
    /// find the source gone). `worker`: the calling thread's index among
    /// the runtime's workers, if it is one.
    ///
    /// The token is forgotten first: a poll that meets the source's last
    /// events afterwards finds them stale, and does not watch the source
    /// again (see the driver contract, 5).
    pub(crate) fn close(
        &self,
        source: impl Source + IntoRawFd,
        token: Token,
        listening: bool,
        worker: Option<usize>,
    ) -> io::Result<()> {
        let forgotten = self.forget(token);
        let result = self.driver.close(source, token.0, listening, worker);
        if let Some(io) = forgotten {
            io.wake_all();
        }
        result
    }

    fn forget(&self, token: Token) -> Option<Arc<ScheduledIo>> {
        let mut entries = lock(&self.entries);
        let index = token.0 & INDEX_MASK;
        let generation = token.0 >> INDEX_BITS;
        match entries.get(index) {
            Some(entry) if entry.generation == generation => Some(entries.remove(index).io),
            _ => None,
        }
    }

    /// The poll group worker `worker` polls: its own with a ring per
    /// worker, the one group otherwise.
    pub(crate) fn group_of(&self, worker: usize) -> usize {
        worker % self.groups.len()
    }

    /// The poller of `group`, unless another thread holds it.
    pub(crate) fn try_poller(&self, group: usize) -> Option<MutexGuard<'_, Poller>> {
        match self.groups[group].poller.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Takes the role of the blocker if nobody has it (see the module
    /// docs), and then the poller, waiting for a non-blocking poll that
    /// holds it to end. `None` if another worker is the blocker.
    pub(crate) fn become_blocker(&self, group: usize) -> Option<MutexGuard<'_, Poller>> {
        let group = &self.groups[group];
        if group.blocked.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(crate::loom::lock(&group.poller))
    }

    /// Gives up the blocker role of `group` (the poller guard is dropped
    /// by the caller right after).
    pub(crate) fn stop_blocking(&self, group: usize) {
        self.groups[group].blocked.store(false, Ordering::Release);
    }

    /// Whether there are several poll groups (a ring per worker).
    pub(crate) fn has_groups(&self) -> bool {
        self.groups.len() > 1
    }

    /// For a sleeping worker that looks after the workers that run (see
    /// `sched::worker`): in each group other than `group` that has no
    /// blocker (its worker runs) and whose poller is free, submits the
    /// queued operations and arms the sources' watches left to the
    /// group's worker (the calling thread then posts their completions,
    /// to that group's ring), and reaps what completed. The group's waker
    /// and the watches that end stay for its own worker to arm. Appends
    /// the wakers of the tasks woken to `wake`.
    pub(crate) fn steal(&self, group: usize, wake: &mut Vec<Waker>) {
        for other in (0..self.groups.len()).filter(|&other| other != group) {
            if self.has_blocker(other) {
                continue;
            }
            if let Some(mut poller) = self.try_poller(other) {
                #[cfg(loom)]
                {
                    let _ = &mut poller;
                    self.model[other].poll(Some(Duration::ZERO), wake);
                    continue;
                }
                // A watch that could not be armed is tried again later;
                // its task waits for it.
                #[cfg_attr(loom, allow(unreachable_code))]
                let _ = self.driver.serve_for(&poller);
                if self.driver.has_events(&mut poller) {
                    self.reap(&mut poller, wake, false);
                }
            }
        }
    }

    /// Whether a parked worker is blocked in `group`'s poll.
    pub(crate) fn has_blocker(&self, group: usize) -> bool {
        self.groups[group].blocked.load(Ordering::Relaxed)
    }

    /// Whether every poll group but `group` has a parked worker blocked in
    /// it: with a ring per worker, whether every other worker sleeps in
    /// its ring.
    pub(crate) fn others_blocked(&self, group: usize) -> bool {
        (0..self.groups.len())
            .filter(|&other| other != group)
            .all(|other| self.has_blocker(other))
    }

    /// Whether a look by `worker` at its poll group would find events,
    /// known without a system call (a ring per worker: see
    /// [`Driver::has_news`]); `false` where only a look can tell, and
    /// while a blocker waits in it. Called after every poll: on the other
    /// drivers it returns before finding the worker's group.
    pub(crate) fn has_news(&self, worker: usize) -> bool {
        if !self.driver.per_worker() {
            return false;
        }
        let group = self.group_of(worker);
        self.driver.has_news(group) && !self.has_blocker(group)
    }

    /// Whether operations (reads, file syncs) may complete on this
    /// reactor's driver (see `io::ring_recv`, `io::ring_file`).
    pub(crate) fn completes_operations(&self) -> bool {
        self.driver.completes_operations()
    }

    /// Queues `slot`'s receive (see [`Driver::queue_recv`]).
    pub(crate) fn queue_recv(
        &self,
        slot: Arc<crate::io::ring_recv::RecvSlot>,
        worker: Option<usize>,
    ) {
        self.driver.queue_recv(slot, worker);
    }

    /// Queues a file's writes and sync (see [`Driver::queue_file_op`]).
    pub(crate) fn queue_file_op(&self, op: Arc<crate::io::ring_file::FileOp>, worker: usize) {
        self.driver.queue_file_op(op, worker);
    }

    /// Submits the queued operations now (see [`Driver::flush`]).
    pub(crate) fn flush(&self, worker: Option<usize>) {
        self.driver.flush(worker);
    }

    /// Interrupts the poll of `group`'s blocker.
    pub(crate) fn wake(&self, group: usize) {
        #[cfg(loom)]
        self.model[group].wake();
        self.driver.wake(group);
    }

    /// A descriptor that is readable while events wait, for a tokio side
    /// on the workers to wait on (see `runtime::tokio_side`), made ready
    /// to be waited on (see [`Driver::prepare_to_wait_elsewhere`]).
    #[cfg(feature = "tokio-context")]
    pub(crate) fn poll_fd(&self, poller: &mut Poller) -> RawFd {
        // A watch that could not be armed is tried again at the next
        // wait; its source was never reported, so its task waits for it.
        let _ = self.driver.prepare_to_wait_elsewhere(poller);
        self.driver.fd(poller)
    }

    /// Waits up to `timeout` (`None`: indefinitely, `Some(ZERO)`: not at
    /// all) for events, records them, and appends the wakers of the tasks
    /// they wake to `wake`. Returns the number of source events.
    /// `group`: the poll group `poller` is (see [`group_of`](Self::group_of));
    /// under loom, whose modelled kernel answers.
    pub(crate) fn poll(
        &self,
        poller: &mut Poller,
        group: usize,
        timeout: Option<Duration>,
        wake: &mut Vec<Waker>,
    ) -> usize {
        #[cfg(loom)]
        {
            let _ = poller;
            return self.model[group].poll(timeout, wake);
        }
        #[cfg(not(loom))]
        let _ = group;
        #[cfg_attr(loom, allow(unreachable_code))]
        // EINTR: a signal arrived; the caller polls again soon. Any other
        // error is counted and slept off (see "A wait that fails"). Either
        // way, what is there is reaped.
        let failure = match self.driver.wait(poller, timeout) {
            Ok(()) => None,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => None,
            Err(error) => Some(error),
        };
        let has_events = self.driver.has_events(poller);
        if let Some(error) = failure {
            // Events that are there are reaped at once, not slept on.
            self.wait_failed(
                &error,
                if has_events {
                    Some(Duration::ZERO)
                } else {
                    timeout
                },
            );
        }
        if !has_events {
            return 0;
        }
        self.reap(poller, wake, true)
    }

    /// Counts and logs a wait the kernel refused, and sleeps it off for a
    /// caller that meant to block (see "A wait that fails").
    #[cold]
    fn wait_failed(&self, error: &io::Error, timeout: Option<Duration>) {
        let count = self.wait_errors.fetch_add(1, Ordering::Relaxed) + 1;
        let text = error.to_string();
        if count.is_power_of_two() {
            tracing::error!(
                driver = self.driver.name(),
                failed_waits = count,
                "the IO driver's wait failed: {text}; sleeping {} ms before each retry",
                WAIT_ERROR_BACKOFF.as_millis(),
            );
        }
        *lock(&self.last_wait_error) = Some(text);
        let backoff = timeout.map_or(WAIT_ERROR_BACKOFF, |t| t.min(WAIT_ERROR_BACKOFF));
        if !backoff.is_zero() {
            std::thread::sleep(backoff);
        }
    }

    /// Reaps what the driver holds for `poller`, as [`poll`](Self::poll)
    /// does after its wait; `for_its_poller`: see [`Driver::reap`].
    /// Returns the number of source events.
    fn reap(&self, poller: &mut Poller, wake: &mut Vec<Waker>, for_its_poller: bool) -> usize {
        let mut count = 0;
        // Locked for the whole reap, not the wait: a driver that watches a
        // source again does it before the reap returns, and no close may
        // run in between (see the driver contract, 5).
        let entries = lock(&self.entries);
        let reaped = self
            .driver
            .reap(poller, wake, for_its_poller, |token, event, wake| {
                let index = token & INDEX_MASK;
                let Some(entry) = entries.get(index) else {
                    return Owner::Stale;
                };
                if entry.generation != token >> INDEX_BITS {
                    return Owner::Stale;
                }
                count += 1;
                entry.io.set(event, wake);
                Owner::Live(entry.fd)
            });
        // A source the ring could not watch again was reported ready both
        // ways: its task tries, and finds out.
        let _ = reaped;
        count
    }
}

/// The kernel's side of the reactor under loom.
///
/// Loom cannot enter `epoll_wait`: a thread blocked in a system call would
/// stop the whole model, whose threads take turns on one OS thread. So
/// under loom the readiness events come from the model itself
/// ([`Kernel::ready`], standing for a socket becoming readable) and a
/// blocking poll waits on a modelled condition variable that
/// [`Kernel::wake`] (the eventfd write) and new events signal. Everything
/// around it (the blocker flag, the poller lock, the workers' parkers and
/// `Idle`) is the real code.
///
/// Each poll group has a kernel of its own: with a ring per worker, a
/// ring's events and its eventfd are that ring's, and a look at another
/// group (`Reactor::steal`) takes what that group's kernel holds, its
/// eventfd's wake included (a sleeping worker reaps the waker's
/// completion from a ring whose worker runs, as the driver does).
#[cfg(loom)]
pub(crate) mod model {
    use std::task::Waker;
    use std::time::Duration;

    use crate::loom::lock;
    use crate::loom::sync::{Condvar, Mutex};

    /// Events not yet polled, and whether the eventfd was written.
    #[derive(Debug, Default)]
    struct Pending {
        ready: Vec<Waker>,
        woken: bool,
    }

    /// See the module docs.
    #[derive(Debug, Default)]
    pub(crate) struct Kernel {
        pending: Mutex<Pending>,
        signal: Condvar,
    }

    impl Kernel {
        /// A source became ready: its task, `waker`, is woken by the next
        /// poll, and a blocked poll returns.
        // Used by the loom models of the worker, built with the tests.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) fn ready(&self, waker: Waker) {
            lock(&self.pending).ready.push(waker);
            self.signal.notify_one();
        }

        /// Several sources became ready at once: one poll returns them all.
        // Used by the loom models of the worker, built with the tests.
        #[cfg_attr(not(test), allow(dead_code))]
        pub(crate) fn ready_all(&self, wakers: Vec<Waker>) {
            lock(&self.pending).ready.extend(wakers);
            self.signal.notify_one();
        }

        /// The eventfd write of `Reactor::wake`.
        pub(crate) fn wake(&self) {
            lock(&self.pending).woken = true;
            self.signal.notify_one();
        }

        /// `epoll_wait`: returns at once with `Some(ZERO)`, otherwise once
        /// an event or a wake is pending (loom has no time, so a timeout
        /// never expires); consumes the wake and hands out the events.
        pub(crate) fn poll(&self, timeout: Option<Duration>, wake: &mut Vec<Waker>) -> usize {
            let mut pending = lock(&self.pending);
            if timeout != Some(Duration::ZERO) {
                while pending.ready.is_empty() && !pending.woken {
                    pending = self
                        .signal
                        .wait(pending)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
            }
            pending.woken = false;
            let count = pending.ready.len();
            wake.append(&mut pending.ready);
            count
        }
    }
}
