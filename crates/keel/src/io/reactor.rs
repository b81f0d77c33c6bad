//! The reactor: one IO driver per runtime (epoll, or an io_uring: see
//! [`driver`](super::driver), whose contract is all the reactor relies
//! on), polled by the workers themselves.
//!
//! There is no IO thread. A worker polls the reactor
//!
//! - *without blocking*, between two task polls, once `io_interval` has
//!   passed since its own last poll, or after `io_every` task polls,
//!   whichever comes first (see
//!   [`worker`](crate::sched)); when it runs out of tasks, only if
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
//!   workers sleep.
//!
//! The first is what keeps sockets served when every worker is busy with
//! CPU work (the seed's "eager check io"): readiness is looked at every
//! `io_interval` of busy time, at the first poll boundary after it, instead
//! of only when a worker runs out of work. The second is what lets an idle
//! runtime sleep without polling.
//!
//! # Tokens
//!
//! Each registration holds an [`Arc<ScheduledIo>`] in a slab; the driver's
//! token is the slab index plus a generation, so an event still in flight for a
//! source that was deregistered (and whose slot was reused) is recognised
//! as stale and dropped instead of waking the wrong task.
//!
//! # Wakes
//!
//! Polling collects the wakers of the tasks to wake; the caller wakes them
//! after releasing the poller, so a woken task's schedule path (which may
//! write to the eventfd) never runs under the reactor's locks.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
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

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Reactor {
    driver: Driver,
    /// The backend asked for.
    requested: IoBackend,
    /// Why `IoBackend::Auto` did not get a ring, when it did not.
    fallback: Option<String>,
    /// Modelled under loom with the blocker flag: the hand-off between a
    /// worker that polls without blocking and one that comes to block is
    /// part of the protocol loom checks.
    poller: ModelledMutex<Poller>,
    /// A parked worker is blocked in the driver's poll: busy workers need
    /// not poll, the blocker sees every event as it arrives.
    blocked: AtomicBool,
    entries: Mutex<Slab<Entry>>,
    next_generation: AtomicU64,
    /// Under loom, the kernel's side: see [`model`].
    #[cfg(loom)]
    pub(crate) model: model::Kernel,
}

impl Reactor {
    /// A reactor on the driver `backend` asks for, with `rings` rings if
    /// that is io_uring.
    ///
    /// # Errors
    ///
    /// If the driver cannot be set up (see [`Driver::new`]).
    pub(crate) fn new(backend: IoBackend, rings: usize) -> io::Result<Reactor> {
        let (driver, poller, fallback) = Driver::new(backend, rings, WAKER_TOKEN)?;
        Ok(Reactor {
            driver,
            requested: backend,
            fallback,
            poller: ModelledMutex::new(poller),
            blocked: AtomicBool::new(false),
            entries: Mutex::new(Slab::new()),
            next_generation: AtomicU64::new(0),
            #[cfg(loom)]
            model: model::Kernel::default(),
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
        }
    }

    /// Registers `source` for `interest`; events set the returned
    /// readiness. Undo with [`Reactor::deregister`] before closing it.
    /// `assume_ready`: see [`ScheduledIo::new`]; `on_worker`: the calling
    /// thread is one of the runtime's workers (see [`Driver::register`]).
    pub(crate) fn register(
        &self,
        source: &mut (impl Source + AsRawFd),
        interest: Interest,
        assume_ready: bool,
        on_worker: bool,
    ) -> io::Result<(Arc<ScheduledIo>, Token)> {
        let io = Arc::new(ScheduledIo::new(assume_ready));
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
        if let Err(error) = self.driver.register(source, token.0, interest, on_worker) {
            self.forget(token);
            return Err(error);
        }
        Ok((io, token))
    }

    /// Removes `source` from the driver and forgets its token; a waiting
    /// task is woken (it will find the source gone).
    ///
    /// The token is forgotten first: a poll that meets the source's last
    /// events afterwards finds them stale, and does not watch the source
    /// again (see the driver contract, 5).
    pub(crate) fn deregister(
        &self,
        source: &mut (impl Source + AsRawFd),
        token: Token,
    ) -> io::Result<()> {
        let forgotten = self.forget(token);
        let result = self.driver.deregister(source, token.0);
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

    /// The poller, unless another thread holds it.
    pub(crate) fn try_poller(&self) -> Option<MutexGuard<'_, Poller>> {
        match self.poller.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Takes the role of the blocker if nobody has it (see the module
    /// docs), and then the poller, waiting for a non-blocking poll that
    /// holds it to end. `None` if another worker is the blocker.
    pub(crate) fn become_blocker(&self) -> Option<MutexGuard<'_, Poller>> {
        if self.blocked.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(crate::loom::lock(&self.poller))
    }

    /// Gives up the blocker role (the poller guard is dropped by the
    /// caller right after).
    pub(crate) fn stop_blocking(&self) {
        self.blocked.store(false, Ordering::Release);
    }

    /// Whether a parked worker is blocked in the driver's poll.
    pub(crate) fn has_blocker(&self) -> bool {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Whether operations (reads, file syncs) may complete on this
    /// reactor's driver (see `io::ring_recv`, `io::ring_file`).
    pub(crate) fn completes_operations(&self) -> bool {
        self.driver.completes_operations()
    }

    /// Queues `slot`'s receive (see [`Driver::queue_recv`]).
    pub(crate) fn queue_recv(&self, slot: Arc<crate::io::ring_recv::RecvSlot>, on_worker: bool) {
        self.driver.queue_recv(slot, on_worker);
    }

    /// Queues a file's writes and sync (see [`Driver::queue_file_op`]).
    pub(crate) fn queue_file_op(&self, op: Arc<crate::io::ring_file::FileOp>) {
        self.driver.queue_file_op(op);
    }

    /// Submits the queued operations now (see [`Driver::flush`]).
    pub(crate) fn flush(&self) {
        self.driver.flush();
    }

    /// Interrupts the blocker's poll.
    pub(crate) fn wake(&self) {
        #[cfg(loom)]
        self.model.wake();
        self.driver.wake();
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
    pub(crate) fn poll(
        &self,
        poller: &mut Poller,
        timeout: Option<Duration>,
        wake: &mut Vec<Waker>,
    ) -> usize {
        #[cfg(loom)]
        {
            let _ = poller;
            return self.model.poll(timeout, wake);
        }
        #[cfg_attr(loom, allow(unreachable_code))]
        // EINTR: a signal arrived; the caller polls again soon. The other
        // errors (a bad descriptor or buffer) cannot happen while the
        // runtime owns both; treated the same way. Either way, what is
        // there is reaped.
        let _ = self.driver.wait(poller, timeout);
        let mut count = 0;
        // Locked for the whole reap, not the wait: a driver that watches a
        // source again does it before the reap returns, and no
        // deregistration may run in between (see the driver contract, 5).
        let entries = lock(&self.entries);
        let reaped = self.driver.reap(poller, wake, |token, event, wake| {
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
