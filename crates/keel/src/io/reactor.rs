//! The reactor: one epoll instance (through `mio`) per runtime, polled by
//! the workers themselves.
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
//!   `epoll_wait` at a time (the *blocker*); the others sleep on their
//!   parker. A notification for a blocker writes to the reactor's
//!   [`mio::Waker`] (an eventfd) instead of signalling a condition
//!   variable. The blocker leaves `epoll_wait` to run the tasks its events
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
//! Each registration holds an [`Arc<ScheduledIo>`] in a slab; the mio token
//! is the slab index plus a generation, so an event still in flight for a
//! source that was deregistered (and whose slot was reused) is recognised
//! as stale and dropped instead of waking the wrong task.
//!
//! # Wakes
//!
//! Polling collects the wakers of the tasks to wake; the caller wakes them
//! after releasing the poller, so a woken task's schedule path (which may
//! write to the eventfd) never runs under the reactor's locks.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::task::Waker;
use std::time::Duration;

use mio::event::Source;
use mio::{Events, Interest, Poll, Registry, Token};
use slab::Slab;

use super::lock;
use super::readiness::{Event, ScheduledIo};
use crate::loom::sync::atomic::AtomicBool;
use crate::loom::sync::{Mutex as ModelledMutex, MutexGuard};

/// The token of the reactor's own waker.
const WAKER_TOKEN: Token = Token(usize::MAX);

/// Events taken from epoll per call.
const EVENTS_CAPACITY: usize = 1024;

/// The slab index lives in the low half of a token, the generation in the
/// high half.
const INDEX_BITS: u32 = usize::BITS / 2;
const INDEX_MASK: usize = (1 << INDEX_BITS) - 1;

/// The epoll instance and its event buffer; one poller at a time.
#[derive(Debug)]
pub(crate) struct Poller {
    poll: Poll,
    events: Events,
}

#[cfg(feature = "tokio-context")]
impl Poller {
    /// The epoll descriptor, for a tokio side on the workers to wait on
    /// (see `runtime::tokio_side`).
    pub(crate) fn epoll_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.poll.as_raw_fd()
    }
}

/// A registered source's entry in the slab.
#[derive(Debug)]
struct Entry {
    generation: usize,
    io: Arc<ScheduledIo>,
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Reactor {
    registry: Registry,
    waker: mio::Waker,
    /// Modelled under loom with the blocker flag: the hand-off between a
    /// worker that polls without blocking and one that comes to block is
    /// part of the protocol loom checks.
    poller: ModelledMutex<Poller>,
    /// A parked worker is blocked in `epoll_wait`: busy workers need not
    /// poll, the blocker sees every event as it arrives.
    blocked: AtomicBool,
    entries: Mutex<Slab<Entry>>,
    next_generation: AtomicU64,
    /// Under loom, the kernel's side: see [`model`].
    #[cfg(loom)]
    pub(crate) model: model::Kernel,
}

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = mio::Waker::new(&registry, WAKER_TOKEN)?;
        Ok(Reactor {
            registry,
            waker,
            poller: ModelledMutex::new(Poller {
                poll,
                events: Events::with_capacity(EVENTS_CAPACITY),
            }),
            blocked: AtomicBool::new(false),
            entries: Mutex::new(Slab::new()),
            next_generation: AtomicU64::new(0),
            #[cfg(loom)]
            model: model::Kernel::default(),
        })
    }

    /// Registers `source` for `interest`; events set the returned
    /// readiness. Undo with [`Reactor::deregister`] before closing it.
    /// `assume_ready`: see [`ScheduledIo::new`].
    pub(crate) fn register(
        &self,
        source: &mut impl Source,
        interest: Interest,
        assume_ready: bool,
    ) -> io::Result<(Arc<ScheduledIo>, Token)> {
        let io = Arc::new(ScheduledIo::new(assume_ready));
        let generation = (self.next_generation.fetch_add(1, Ordering::Relaxed) as usize)
            & (usize::MAX >> INDEX_BITS);
        let token = {
            let mut entries = lock(&self.entries);
            let index = entries.insert(Entry {
                generation,
                io: io.clone(),
            });
            // The last index is not used: with the largest generation its
            // token would equal WAKER_TOKEN.
            if index >= INDEX_MASK {
                entries.remove(index);
                return Err(io::Error::other("too many registered IO sources"));
            }
            Token(index | (generation << INDEX_BITS))
        };
        if let Err(error) = self.registry.register(source, token, interest) {
            self.forget(token);
            return Err(error);
        }
        Ok((io, token))
    }

    /// Removes `source` from epoll and forgets its token; a waiting task
    /// is woken (it will find the source gone).
    pub(crate) fn deregister(&self, source: &mut impl Source, token: Token) -> io::Result<()> {
        let result = self.registry.deregister(source);
        if let Some(io) = self.forget(token) {
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

    /// Whether a parked worker is blocked in `epoll_wait`.
    pub(crate) fn has_blocker(&self) -> bool {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Interrupts the blocker's `epoll_wait`.
    pub(crate) fn wake(&self) {
        #[cfg(loom)]
        self.model.wake();
        // Fails only if the eventfd cannot be written, which the kernel
        // never does for a counter far from overflow; the blocker would
        // then wake at its timeout or next event.
        let _ = self.waker.wake();
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
        let Poller { poll, events } = poller;
        if poll.poll(events, timeout).is_err() {
            // EINTR: a signal arrived; the caller polls again soon. The
            // other errors of epoll_wait (a bad epoll fd or buffer) cannot
            // happen while the runtime owns both; treated the same way.
            return 0;
        }
        let mut count = 0;
        let entries = lock(&self.entries);
        for event in events.iter() {
            let token = event.token();
            if token == WAKER_TOKEN {
                continue;
            }
            let index = token.0 & INDEX_MASK;
            let Some(entry) = entries.get(index) else {
                continue;
            };
            if entry.generation != token.0 >> INDEX_BITS {
                continue;
            }
            count += 1;
            entry.io.set(
                Event {
                    readable: event.is_readable(),
                    writable: event.is_writable(),
                    read_closed: event.is_read_closed(),
                    write_closed: event.is_write_closed(),
                    error: event.is_error(),
                },
                wake,
            );
        }
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
        pub(crate) fn ready(&self, waker: Waker) {
            lock(&self.pending).ready.push(waker);
            self.signal.notify_one();
        }

        /// Several sources became ready at once: one poll returns them all.
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
