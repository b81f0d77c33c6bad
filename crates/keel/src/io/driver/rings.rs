//! Several io_uring instances as one driver: rings the workers share
//! (`Builder::io_rings`; with one ring it is that ring alone), or a ring
//! per worker (`Builder::io_ring_per_worker`).
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
//! poll, its receives and the cancellation that closes it meet on one
//! ring without a table to look up, which contract 6 needs (a close
//! cancels the descriptor's receives on the ring that holds them). A
//! file's operations go to its descriptor's ring too, an open (which has
//! no descriptor yet) to the rings in turn. The choice
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
//!
//! # A ring per worker
//!
//! The kernel posts a poll's completion from the thread that armed it.
//! On shared rings that thread is whichever worker registered the source,
//! most often asleep on its parker while another worker waits in the
//! rings: each event then wakes two threads, the one that posts it and the
//! one that reaps it. On eight workers serving short connections, the
//! futex calls a second doubled against epoll's, and several shared rings
//! recovered only 4% of the gap (see BENCHMARKS.md).
//!
//! With a ring per worker, ring `i` is worker `i`'s, and each has a poller
//! of its own (a *poll group* of the reactor): worker `i` looks at ring
//! `i` between polls and sleeps in it. A source is not watched when it is
//! registered, but when a task first waits for it ([`Rings::arm`]), on
//! the ring of the worker that runs that task, which becomes the source's
//! *home* ([`Homes`]): its poll, its receives and the cancellation that
//! closes it meet there (contract 6; closed by the home ring's own
//! worker, the cancellation and the close go in with that worker's next
//! enter: see [`Rings::close`]). The task it wakes is queued on
//! the worker that reaps the event, so a connection stays with the worker
//! that served it first, unless another steals the task. The rules that
//! keep one thread posting what one thread reaps:
//!
//! - a worker arms polls only on its own ring; a poll homed on another
//!   ring, or first waited on outside the workers, is left to the home
//!   ring's worker, which the driver wakes;
//! - a ring's queued operations are submitted by its own worker (at its
//!   looks and waits), or by a sleeping worker that looks after it (below);
//! - a file's operations go to the ring of the worker that queues them.
//!
//! A worker that runs a long poll would hold its ring's events until its
//! next look. So a sleeping worker wakes every few milliseconds
//! (`REACTOR_CHECK_NS`, as the sleepers of shared rings do to take a
//! vacant blocker role, and dozing as they do when every worker has
//! slept in its ring for a while: see `sched::doze`) and, on the rings
//! whose worker is not asleep in
//! them, submits what is queued, arms the sources' watches left there,
//! and reaps what completed (`Reactor::steal`). What it submits or arms
//! posts its completions from the sleeping worker, to the busy worker's
//! ring. It cannot post the completions of the busy worker's own polls:
//! the kernel posts those when that worker next enters it (a system call,
//! or the timer tick), and the sleeper reaps them at its next check. The
//! ring's waker, and the watches whose poll ended, stay for the ring's
//! own worker to arm. A source that was never watched and has no receive
//! has no home: its close cancels nothing. Homes do not move: a
//! task stolen by another worker still has its events reaped, and its
//! receives submitted, by its source's home worker, which wakes it where
//! it runs.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;
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
    /// with one ring, or with a ring per worker.
    hub: Option<OwnedFd>,
    /// The ring the next open, or the next source homed off the workers,
    /// goes to.
    next_open: AtomicUsize,
    /// With a ring per worker, which ring each source lives on (see
    /// "A ring per worker"); `None` when rings are chosen by descriptor.
    homes: Option<Homes>,
}

/// The right to read some rings' completion queues: every ring's (one
/// poller per driver), or, with a ring per worker, one ring's (one poller
/// per ring).
#[derive(Debug)]
pub(crate) struct Poller {
    rings: Vec<uring::Poller>,
    /// The index of the first ring this poller reads.
    first: usize,
}

impl Rings {
    /// Sets `count` rings up (at least one), and the hub if there are
    /// several.
    ///
    /// # Errors
    ///
    /// What refused a ring (see [`Uring::new`]), or a failure to make the
    /// hub.
    pub(super) fn new(
        count: usize,
        per_worker: bool,
        wake_token: usize,
    ) -> io::Result<(Rings, Vec<Poller>)> {
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
        let (hub, homes, pollers) = if per_worker {
            let pollers = pollers
                .into_iter()
                .enumerate()
                .map(|(first, poller)| Poller {
                    rings: vec![poller],
                    first,
                })
                .collect();
            (None, Some(Homes::default()), pollers)
        } else {
            let hub = if rings.len() > 1 {
                Some(hub_of(&rings)?)
            } else {
                None
            };
            let poller = Poller {
                rings: pollers,
                first: 0,
            };
            (hub, None, vec![poller])
        };
        let rings = Rings {
            rings,
            hub,
            next_open: AtomicUsize::new(0),
            homes,
        };
        Ok((rings, pollers))
    }

    /// Whether each worker has a ring of its own (see "A ring per
    /// worker"): sources are then watched lazily, by [`Rings::arm`].
    pub(super) fn per_worker(&self) -> bool {
        self.homes.is_some()
    }

    /// The ring `worker` owns, if it owns one.
    fn ring_of_worker(&self, worker: Option<usize>) -> Option<usize> {
        worker.filter(|&worker| worker < self.rings.len())
    }

    /// The next ring in turn, for what no worker's ring claims.
    fn next_ring(&self) -> usize {
        self.next_open.fetch_add(1, Ordering::Relaxed) % self.rings.len()
    }

    /// `fd`'s home ring, which becomes `mine` (the calling worker's ring),
    /// or the next ring in turn off the workers, if it has none yet.
    fn home_of(&self, homes: &Homes, fd: RawFd, mine: Option<usize>) -> usize {
        let wanted = mine.unwrap_or_else(|| self.next_ring());
        homes.claim(fd, wanted, self.rings.len())
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

    /// Watches `fd` on its descriptor's ring; with a ring per worker,
    /// only records it: [`Rings::arm`] watches it when a task first waits
    /// on it. `worker`: the calling worker's index, if it is one.
    pub(super) fn register(
        &self,
        fd: RawFd,
        token: usize,
        interest: Interest,
        worker: Option<usize>,
    ) -> io::Result<()> {
        if self.per_worker() {
            return Ok(());
        }
        // Off the workers, the ring wakes its own eventfd's poll, which
        // makes it readable in the hub.
        self.ring_of(fd)
            .register(fd, token, interest, worker.is_some())
    }

    /// With a ring per worker, watches `fd` on its home ring, making the
    /// calling worker's ring its home if it has none yet (from its own
    /// worker, at that worker's next enter: see
    /// [`Uring::watch_at_next_enter`]); a worker armed
    /// polls of other rings would take their completions' task work, so
    /// another ring's poll is left to that ring's worker, which this
    /// wakes. Called once per registration.
    pub(super) fn arm(
        &self,
        fd: RawFd,
        token: usize,
        interest: Interest,
        worker: Option<usize>,
    ) -> io::Result<()> {
        let Some(homes) = &self.homes else {
            return Ok(());
        };
        let mine = self.ring_of_worker(worker);
        let home = self.home_of(homes, fd, mine);
        if mine == Some(home) {
            return self.rings[home].watch_at_next_enter(fd, token, interest);
        }
        self.rings[home].register(fd, token, interest, false)
    }

    /// Stops watching `fd` and closes it (the driver contract, 2). With a
    /// ring per worker, a stream closed by its home ring's own worker has
    /// its cancellation and close linked in that ring's submission queue,
    /// submitted with the worker's next look or wait: no system call now
    /// (a synchronous cancel and a `close` a connection fewer), and the
    /// descriptor's number stays taken until the kernel has cancelled
    /// what ran on it. Elsewhere (a listener, which must stop listening
    /// before this returns; another ring's stream; a thread off the
    /// workers) the cancellation is synchronous and the close the caller's.
    pub(super) fn close(
        &self,
        fd: OwnedFd,
        token: usize,
        listening: bool,
        worker: Option<usize>,
    ) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        let home = match &self.homes {
            None => Some(self.index_of(raw)),
            Some(homes) => homes.leave(raw, self.rings.len()),
        };
        // Never watched and no operation queued: nothing to cancel, and no
        // poll holds the socket, so closing the descriptor ends it (a
        // listener stops listening at once).
        let Some(home) = home else {
            return Ok(());
        };
        let ring = &self.rings[home];
        let fd = if self.per_worker() && !listening && self.ring_of_worker(worker) == Some(home) {
            match ring.close_at_next_enter(fd, token) {
                Ok(()) => return Ok(()),
                Err(fd) => fd,
            }
        } else {
            fd
        };
        let cancelled = ring.deregister(raw, token, listening);
        drop(fd);
        cancelled
    }

    /// Queues `operation` on its ring (see the module docs); `worker`:
    /// the calling worker's index, if it is one. The ring's poller is
    /// woken unless the caller will submit it itself.
    pub(super) fn queue(&self, operation: Operation, worker: Option<usize>) {
        let Some(homes) = &self.homes else {
            let index = match operation.fd() {
                Some(fd) => self.index_of(fd),
                None => self.next_ring(),
            };
            self.rings[index].queue(operation, worker.is_none());
            return;
        };
        // With a ring per worker, an operation's completion is posted by
        // the thread that submits it, so a ring's operations are submitted
        // by its own worker: a receive goes to its stream's home ring (where
        // a close cancels it), a file's operation to the calling
        // worker's.
        let mine = self.ring_of_worker(worker);
        let index = match &operation {
            Operation::Recv(slot) => self.home_of(homes, slot.fd(), mine),
            Operation::File(_) => mine.unwrap_or_else(|| self.next_ring()),
        };
        self.rings[index].queue(operation, mine != Some(index));
    }

    /// Submits the queued operations: every ring's, or with a ring per
    /// worker the calling worker's own ring's.
    pub(super) fn flush(&self, worker: Option<usize>) {
        if self.per_worker() {
            if let Some(mine) = self.ring_of_worker(worker) {
                self.rings[mine].flush();
            }
            return;
        }
        self.rings.iter().for_each(Uring::flush);
    }

    /// How many rings a worker glances at after every poll (see
    /// `glance`): with a ring per worker, those whose glance was made; 0
    /// on shared rings, which are not glanced at.
    pub(super) fn glances(&self) -> usize {
        if !self.per_worker() {
            return 0;
        }
        self.rings.iter().filter(|ring| ring.has_glance()).count()
    }

    pub(super) fn in_flight(&self) -> u64 {
        self.rings.iter().map(Uring::in_flight).sum()
    }

    /// Wakes the poller that reads ring `group` (the only one, unless
    /// there is a ring per worker).
    pub(super) fn wake(&self, group: usize) {
        let index = if self.per_worker() { group } else { 0 };
        self.rings[index % self.rings.len()].wake();
    }

    /// The rings `poller` reads.
    fn rings_of(&self, poller: &Poller) -> &[Uring] {
        &self.rings[poller.first..poller.first + poller.rings.len()]
    }

    #[cfg(feature = "tokio-context")]
    pub(super) fn arm_registered_elsewhere(&self, poller: &Poller) -> io::Result<()> {
        self.rings_of(poller)
            .iter()
            .try_for_each(Uring::arm_registered_elsewhere)
    }

    /// Submits the operations queued on `poller`'s rings.
    #[cfg(feature = "tokio-context")]
    pub(super) fn submit_queued(&self, poller: &Poller) {
        self.rings_of(poller).iter().for_each(Uring::flush);
    }

    /// For a thread that is not `poller`'s holder (see "A ring per
    /// worker"): submits the operations queued on its rings and arms the
    /// sources' polls left to it, not its waker's.
    pub(super) fn serve_for(&self, poller: &Poller) -> io::Result<()> {
        self.rings_of(poller).iter().try_for_each(|ring| {
            ring.flush();
            ring.arm_sources_left_to_the_poller()
        })
    }

    /// With a ring per worker, whether worker ring `group` has news for
    /// its worker (see `glance`); `false` on shared rings, whose polls'
    /// completions may wait for another thread's task work, which this
    /// worker's look cannot post.
    pub(super) fn has_news(&self, group: usize) -> bool {
        self.per_worker() && self.rings[group % self.rings.len()].has_news()
    }

    /// Whether a completion waits on one of `poller`'s rings.
    pub(super) fn has_completions(&self, poller: &mut Poller) -> bool {
        self.rings_of(poller)
            .iter()
            .zip(&mut poller.rings)
            .any(|(ring, ring_poller)| ring.has_completions(ring_poller))
    }

    /// Reaps `poller`'s rings; `for_its_poller`: see [`Uring::reap`].
    pub(super) fn reap(
        &self,
        poller: &mut Poller,
        wake: &mut Vec<Waker>,
        for_its_poller: bool,
        mut on_event: impl FnMut(usize, Event, &mut Vec<Waker>) -> Owner,
    ) -> io::Result<()> {
        let mut outcome = Ok(());
        for (ring, ring_poller) in self.rings_of(poller).iter().zip(&mut poller.rings) {
            // One ring's failure to arm a poll again does not keep the
            // others' events from their tasks.
            if let Err(error) = ring.reap(ring_poller, wake, for_its_poller, &mut on_event) {
                outcome = Err(error);
            }
        }
        outcome
    }

    /// Waits for a completion on any ring, at most `timeout`, unless one
    /// is there (see the module docs). Called only by the poller's holder.
    pub(super) fn wait(&self, poller: &mut Poller, timeout: Option<Duration>) -> io::Result<()> {
        let Some(hub) = &self.hub else {
            // One ring, or a ring per worker: the poller's own.
            return self.rings[poller.first].wait(timeout);
        };
        debug_assert_eq!(self.rings.len(), poller.rings.len());
        let mut found = false;
        let mut failure = None;
        for (ring, ring_poller) in self.rings.iter().zip(&mut poller.rings) {
            // A look: arms, submits, and enters where the kernel holds
            // completions back; never blocks. One ring's failure does not
            // keep the others from being looked at: it is returned after.
            if let Err(error) = ring.wait(Some(Duration::ZERO)) {
                failure.get_or_insert(error);
            }
            found |= ring.has_completions(ring_poller);
        }
        if let Some(error) = failure {
            return Err(error);
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
    pub(super) fn fd(&self, poller: &Poller) -> RawFd {
        match &self.hub {
            Some(hub) => hub.as_raw_fd(),
            None => self.rings[poller.first].ring_fd(),
        }
    }
}

/// Descriptors up to this many have their home in [`Homes`]'s table; a
/// higher one's home is its number modulo the rings.
const HOME_CHUNK: usize = 4096;
const HOME_CHUNKS: usize = 256;

/// With a ring per worker, each source's home ring, by descriptor: set by
/// the first poll arm or receive (the worker that asks first), cleared
/// by the close, which cancels there. A chunk of the table is
/// allocated when a descriptor in it first gets a home. `0` means no
/// home, `ring + 1` a home.
#[derive(Debug)]
struct Homes {
    chunks: Box<[OnceLock<Box<[AtomicU32]>>]>,
}

impl Default for Homes {
    fn default() -> Homes {
        Homes {
            chunks: (0..HOME_CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl Homes {
    /// The table's cell for `fd`, allocating its chunk if `allocate`;
    /// `None` beyond the table (or not allocated).
    fn cell(&self, fd: RawFd, allocate: bool) -> Option<&AtomicU32> {
        let fd = usize::try_from(fd).ok()?;
        let chunk = self.chunks.get(fd / HOME_CHUNK)?;
        let cells = if allocate {
            chunk.get_or_init(|| (0..HOME_CHUNK).map(|_| AtomicU32::new(0)).collect())
        } else {
            chunk.get()?
        };
        Some(&cells[fd % HOME_CHUNK])
    }

    /// `fd`'s home, making it `wanted` if it has none; returns the home.
    fn claim(&self, fd: RawFd, wanted: usize, rings: usize) -> usize {
        let Some(cell) = self.cell(fd, true) else {
            return fd.unsigned_abs() as usize % rings;
        };
        let mark = wanted as u32 + 1;
        match cell.compare_exchange(0, mark, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => wanted,
            Err(home) => home as usize - 1,
        }
    }

    /// Forgets `fd`'s home, returning it, if it had one.
    fn leave(&self, fd: RawFd, rings: usize) -> Option<usize> {
        let Some(cell) = self.cell(fd, false) else {
            let beyond = usize::try_from(fd).map_or(true, |fd| fd >= HOME_CHUNK * HOME_CHUNKS);
            return beyond.then(|| fd.unsigned_abs() as usize % rings);
        };
        match cell.swap(0, Ordering::AcqRel) {
            0 => None,
            home => Some(home as usize - 1),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_keeps_the_home_it_was_given_first_until_it_leaves() {
        let homes = Homes::default();
        assert_eq!(homes.leave(5, 4), None, "never homed");
        assert_eq!(homes.claim(5, 2, 4), 2);
        assert_eq!(homes.claim(5, 3, 4), 2, "the first claim wins");
        assert_eq!(homes.claim(6, 3, 4), 3, "another descriptor's own");
        assert_eq!(homes.leave(5, 4), Some(2));
        assert_eq!(homes.leave(5, 4), None, "left once");
        assert_eq!(homes.claim(5, 1, 4), 1, "a reused number starts afresh");
        // A chunk of the table is allocated only for a claim.
        let far = (HOME_CHUNK * 3 + 7) as RawFd;
        assert_eq!(homes.leave(far, 4), None);
        assert_eq!(homes.claim(far, 0, 4), 0);
        assert_eq!(homes.leave(far, 4), Some(0));
    }

    #[test]
    fn a_descriptor_beyond_the_table_lives_on_its_number_modulo_the_rings() {
        let homes = Homes::default();
        let beyond = (HOME_CHUNK * HOME_CHUNKS + 5) as RawFd;
        let home = beyond as usize % 3;
        assert_eq!(homes.claim(beyond, (home + 1) % 3, 3), home);
        assert_eq!(homes.leave(beyond, 3), Some(home), "always cancelled there");
    }
}
