//! Several io_uring instances as one driver (`Builder::io_rings`; with one
//! ring it is that ring alone).
//!
//! # Why more than one ring
//!
//! A ring is one kernel object with one lock (`uring_lock`): every
//! submission, every synchronous cancel and every poll completion the
//! kernel posts from the thread that armed it takes it. On one ring shared
//! by eight workers, a server of short connections (an accept, an arm, a
//! few events and a cancel each) spent 7% of its CPU spinning on that lock
//! and set up 0.65× the connections a second that epoll did; with one
//! worker the two drivers were level (see BENCHMARKS.md). With `n` rings a
//! lock sees about `1/n` of the traffic.
//!
//! # Which ring
//!
//! A descriptor's ring is its number modulo the rings (`ring_of`): its
//! poll, its receives and the cancellation that deregisters it meet on one
//! ring without a table to look up, which contract 6 needs (a
//! deregistration cancels the descriptor's receives on the ring that
//! holds them). A file's operations go to its descriptor's ring too, an
//! open (which has no descriptor yet) to the rings in turn. The choice
//! spreads sources over the rings; it does not follow the worker that
//! runs a source's task (the acceptor registers every stream of a server,
//! and a task moves when another worker steals it), so a ring's lock is
//! still taken from every worker, each about `1/n` as often.
//!
//! # One poller for all of them
//!
//! The reactor's contract keeps one poller (contract 3), and so does this
//! driver: the holder of [`Poller`] looks at every ring. A look without
//! blocking reads each completion queue, memory shared with the kernel;
//! a blocking wait, after that look found nothing, sleeps in `epoll_wait`
//! on an epoll instance (the *hub*) that watches every ring's descriptor,
//! level triggered: a ring's descriptor is readable while its completion
//! queue holds entries, so a completion posted after the look ends the
//! wait, and one still unreaped makes the next wait return at once. The
//! driver's waker is the first ring's eventfd, whose completion makes
//! that ring readable; a registration or a receive queued off the workers
//! wakes its own ring's eventfd instead, to the same effect. A poll
//! completion posted by a thread asleep in the hub interrupts its
//! `epoll_wait` (`EINTR`), as it would interrupt any system call (see
//! `uring`): the wait then returns, and the reap finds the completion.
//!
//! With one ring (the default, and always the urgent lane's) there is no
//! hub: the poller waits in the ring itself.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Waker;
use std::time::Duration;

use mio::Interest;

use super::uring::{self, Operation, Uring};
use super::Owner;
use crate::io::readiness::Event;

/// The driver: the rings, and the hub that waits on all of them.
#[derive(Debug)]
pub(crate) struct Rings {
    rings: Vec<Uring>,
    /// The epoll instance that watches every ring's descriptor; `None`
    /// with one ring.
    hub: Option<OwnedFd>,
    /// The ring the next open goes to.
    next_open: AtomicUsize,
}

/// The right to read every ring's completion queue; one per driver.
#[derive(Debug)]
pub(crate) struct Poller {
    rings: Vec<uring::Poller>,
}

impl Rings {
    /// Sets `count` rings up (at least one), and the hub if there are
    /// several.
    ///
    /// # Errors
    ///
    /// What refused a ring (see [`Uring::new`]), or a failure to make the
    /// hub.
    pub(super) fn new(count: usize, wake_token: usize) -> io::Result<(Rings, Poller)> {
        let count = count.max(1);
        let mut rings = Vec::new();
        let mut pollers = Vec::new();
        for index in 0..count {
            let (ring, poller) = Uring::new(wake_token).map_err(|error| {
                if count == 1 {
                    return error;
                }
                // The first ring's refusal is the kernel's or the sandbox's;
                // a later one's is most often a limit (memory, descriptors).
                io::Error::new(
                    error.kind(),
                    format!("ring {} of {count}: {error}", index + 1),
                )
            })?;
            rings.push(ring);
            pollers.push(poller);
        }
        let hub = if rings.len() > 1 {
            Some(hub_of(&rings)?)
        } else {
            None
        };
        Ok((
            Rings {
                rings,
                hub,
                next_open: AtomicUsize::new(0),
            },
            Poller { rings: pollers },
        ))
    }

    /// How many rings there are.
    pub(super) fn count(&self) -> usize {
        self.rings.len()
    }

    /// The index of the ring that holds `fd`'s poll and operations.
    fn index_of(&self, fd: RawFd) -> usize {
        fd.unsigned_abs() as usize % self.rings.len()
    }

    /// The ring that holds `fd`'s poll and operations.
    fn ring_of(&self, fd: RawFd) -> &Uring {
        &self.rings[self.index_of(fd)]
    }

    pub(super) fn register(
        &self,
        fd: RawFd,
        token: usize,
        interest: Interest,
        arms: bool,
    ) -> io::Result<()> {
        // Off the workers, the ring wakes its own eventfd's poll, which
        // makes it readable in the hub.
        self.ring_of(fd).register(fd, token, interest, arms)
    }

    pub(super) fn deregister(&self, fd: RawFd, token: usize) -> io::Result<()> {
        self.ring_of(fd).deregister(fd, token)
    }

    /// Queues `operation` on its descriptor's ring (see the module docs).
    pub(super) fn queue(&self, operation: Operation, wake_poller: bool) {
        let index = match operation.fd() {
            Some(fd) => self.index_of(fd),
            None => self.next_open.fetch_add(1, Ordering::Relaxed) % self.rings.len(),
        };
        self.rings[index].queue(operation, wake_poller);
    }

    pub(super) fn flush(&self) {
        self.rings.iter().for_each(Uring::flush);
    }

    pub(super) fn in_flight(&self) -> u64 {
        self.rings.iter().map(Uring::in_flight).sum()
    }

    pub(super) fn wake(&self) {
        self.rings[0].wake();
    }

    #[cfg(feature = "tokio-context")]
    pub(super) fn arm_registered_elsewhere(&self) -> io::Result<()> {
        self.rings
            .iter()
            .try_for_each(Uring::arm_registered_elsewhere)
    }

    pub(super) fn reap(
        &self,
        poller: &mut Poller,
        wake: &mut Vec<Waker>,
        mut on_event: impl FnMut(usize, Event, &mut Vec<Waker>) -> Owner,
    ) -> io::Result<()> {
        debug_assert_eq!(self.rings.len(), poller.rings.len());
        let mut outcome = Ok(());
        for (ring, ring_poller) in self.rings.iter().zip(&mut poller.rings) {
            // One ring's failure to arm a poll again does not keep the
            // others' events from their tasks.
            if let Err(error) = ring.reap(ring_poller, wake, &mut on_event) {
                outcome = Err(error);
            }
        }
        outcome
    }

    /// Waits for a completion on any ring, at most `timeout`, unless one
    /// is there (see the module docs). Called only by the poller's holder.
    pub(super) fn wait(&self, poller: &mut Poller, timeout: Option<Duration>) -> io::Result<()> {
        let Some(hub) = &self.hub else {
            return self.rings[0].wait(timeout);
        };
        debug_assert_eq!(self.rings.len(), poller.rings.len());
        let mut found = false;
        for (ring, ring_poller) in self.rings.iter().zip(&mut poller.rings) {
            // A look: arms, submits, and enters where the kernel holds
            // completions back; never blocks.
            ring.wait(Some(Duration::ZERO))?;
            found |= ring.has_completions(ring_poller);
        }
        if found || timeout == Some(Duration::ZERO) {
            return Ok(());
        }
        let millis = match timeout {
            None => -1,
            // Rounded up: a wait that ends before its timer would have the
            // caller poll again at once.
            Some(timeout) => libc::c_int::try_from(timeout.as_nanos().div_ceil(1_000_000))
                .unwrap_or(libc::c_int::MAX),
        };
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: writes at most one event into `event`, which lives
        // across the call; the hub is this driver's own descriptor.
        let waited = unsafe { libc::epoll_wait(hub.as_raw_fd(), &mut event, 1, millis) };
        if waited < 0 {
            let error = io::Error::last_os_error();
            // A completion's task work ran on this thread (see the module
            // docs): the reap finds what it posted.
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
        Ok(())
    }

    /// A descriptor that is readable while completions wait to be reaped.
    #[cfg(feature = "tokio-context")]
    pub(super) fn fd(&self) -> RawFd {
        match &self.hub {
            Some(hub) => hub.as_raw_fd(),
            None => self.rings[0].ring_fd(),
        }
    }
}

/// An epoll instance watching every ring's descriptor for completions,
/// level triggered.
fn hub_of(rings: &[Uring]) -> io::Result<OwnedFd> {
    // SAFETY: takes no pointer; a non-negative result is a new descriptor
    // that nothing else owns.
    let hub = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if hub < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just created, owned by nothing else.
    let hub = unsafe { OwnedFd::from_raw_fd(hub) };
    for (index, ring) in rings.iter().enumerate() {
        let mut interest = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: index as u64,
        };
        // SAFETY: `interest` lives across the call, which copies it; both
        // descriptors are open (the ring's lives as long as the driver).
        let added = unsafe {
            libc::epoll_ctl(
                hub.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                ring.ring_fd(),
                &mut interest,
            )
        };
        if added < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(hub)
}
