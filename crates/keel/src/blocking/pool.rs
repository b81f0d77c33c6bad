//! `Pool`: the threads, the queue of accepted jobs and the callers waiting
//! for room. The protocol is described in the [module docs](super).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{
    AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::thread;
use std::time::{Duration, Instant};

use crate::runtime::context;
use crate::stats::BlockingStats;
use crate::task::Runnable;
use crate::util::clock::Clock;
use crate::Handle;

/// The blocking pool's limits (see [`crate::blocking`]).
#[derive(Debug, Clone)]
pub(crate) struct BlockingConfig {
    /// Most pool threads alive at once; at least 1.
    pub(crate) max_threads: usize,
    /// Most jobs waiting for a busy thread; may be 0.
    pub(crate) queue: usize,
    /// How long an idle pool thread waits for a job before it exits.
    pub(crate) keep_alive: Duration,
    /// Name of the pool threads.
    pub(crate) thread_name: String,
}

/// The blocking pool of one runtime. Lives in the runtime's shared state;
/// its threads hold a [`Handle`] and reach it through that.
pub(crate) struct Pool {
    synced: Mutex<Synced>,
    /// Idle threads wait here for a job, for shutdown, or for their
    /// keep-alive to run out.
    condvar: Condvar,
    max_threads: usize,
    queue_capacity: usize,
    keep_alive: Duration,
    thread_name: String,
    clock: Clock,
    counters: Counters,
    /// Makes the next this-many thread starts fail as if the OS refused
    /// them (`EAGAIN`), to test what happens to the jobs then.
    #[cfg(test)]
    pub(crate) fail_starts: AtomicUsize,
}

/// The pool's state, only ever touched with [`Pool::synced`] locked.
/// Functions that take `&mut Synced` are called with the lock held.
struct Synced {
    /// Accepted jobs no thread has taken yet, oldest first.
    queue: VecDeque<Runnable>,
    /// Threads alive: starting, running a job, between jobs or waiting.
    /// A thread leaves the count in the same critical section in which it
    /// decides to exit.
    threads: usize,
    /// Threads waiting on the condition variable that nobody has claimed.
    idle: usize,
    /// Waiting threads claimed by a submitter: each was notified and will
    /// take a job from the queue when it wakes. Whichever waiting thread
    /// wakes first takes the claim.
    notified: usize,
    /// Threads started for a job that have not yet taken the lock: each
    /// takes a job from the queue first thing.
    starting: usize,
    /// Set once by [`Pool::shutdown`]: no job is accepted and no thread
    /// starts from then on.
    shutdown: bool,
    /// Join handles of the threads alive, by thread number.
    threads_by_id: HashMap<u64, thread::JoinHandle<()>>,
    /// The thread that retired last: the next one to retire joins it, and
    /// so does shutdown, so that every thread is joined by someone.
    retired: Option<thread::JoinHandle<()>>,
    next_thread: u64,
    /// Callers of `unblock` waiting for room, in arrival order.
    waiters: VecDeque<Waiter>,
    next_ticket: u64,
}

/// A caller of `unblock` waiting for room in the pool.
struct Waiter {
    ticket: u64,
    waker: Waker,
}

/// Gauges and counters for [`BlockingStats`]: written with the lock held
/// (gauges) or by the thread that ran a job (counters), read by anyone.
#[derive(Default)]
struct Counters {
    threads: AtomicUsize,
    idle: AtomicUsize,
    queued: AtomicUsize,
    waiting: AtomicUsize,
    completed: AtomicU64,
    rejected: AtomicU64,
    busy_ns: AtomicU64,
}

/// Why the pool did not accept a job.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The runtime is shutting down.
    Shutdown,
    /// Every thread is busy, no more may start and the queue is full.
    Full { threads: usize, queued: usize },
    /// No thread is alive and none could be started.
    NoThread(io::Error),
}

impl Refusal {
    /// The reason of a rejected job, if it was rejected rather than
    /// cancelled by shutdown.
    pub(crate) fn into_reason(self) -> Option<io::Error> {
        match self {
            Refusal::Shutdown => None,
            Refusal::Full { threads, queued } => Some(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("blocking pool is full: {threads} threads busy and {queued} jobs queued"),
            )),
            Refusal::NoThread(error) => Some(io::Error::new(
                error.kind(),
                format!("blocking pool could not start a thread: {error}"),
            )),
        }
    }
}

/// What [`Pool::submit_or_wait`] did with a job.
pub(crate) enum Offer {
    /// Queued for a thread.
    Accepted,
    /// No room: the caller was (or stays) registered as a waiter, and gets
    /// the job back to offer again when woken.
    Waiting(Runnable),
    /// Refused for good.
    Refused(Runnable, Refusal),
}

impl Pool {
    pub(crate) fn new(config: &BlockingConfig, clock: Clock) -> Pool {
        Pool {
            synced: Mutex::new(Synced {
                queue: VecDeque::new(),
                threads: 0,
                idle: 0,
                notified: 0,
                starting: 0,
                shutdown: false,
                threads_by_id: HashMap::new(),
                retired: None,
                next_thread: 0,
                waiters: VecDeque::new(),
                next_ticket: 0,
            }),
            condvar: Condvar::new(),
            max_threads: config.max_threads,
            queue_capacity: config.queue,
            keep_alive: config.keep_alive,
            thread_name: config.thread_name.clone(),
            clock,
            counters: Counters::default(),
            #[cfg(test)]
            fail_starts: AtomicUsize::new(0),
        }
    }

    /// Locks the pool's state, ignoring poison: no user code runs while it
    /// is held (jobs run, wakers wake and refused jobs drop after it is
    /// released), and every change to it leaves it consistent before
    /// anything that could panic.
    fn lock(&self) -> MutexGuard<'_, Synced> {
        self.synced
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Accepts `job` if there is room (see the module docs), without ever
    /// waiting; `handle` is the runtime a new thread enters. Gives the job
    /// back with the reason if it is refused.
    pub(crate) fn submit(&self, handle: &Handle, job: Runnable) -> Result<(), (Runnable, Refusal)> {
        let mut synced = self.lock();
        let mut swept = Vec::new();
        let result = match self.make_room(&mut synced, handle, &mut swept) {
            Ok(()) => {
                self.push(&mut synced, job);
                Ok(())
            }
            Err(refusal) => Err((job, refusal)),
        };
        drop(synced);
        drop_jobs(swept);
        if let Err((_, Refusal::Full { .. } | Refusal::NoThread(_))) = &result {
            self.counters.rejected.fetch_add(1, Relaxed);
        }
        result
    }

    /// Like [`submit`](Pool::submit), but a job that finds the pool full
    /// waits its turn: callers are served in the order they first found it
    /// full. `ticket` is the caller's place in line (`None` before it has
    /// one, and again once the job is accepted or refused); `waker` is
    /// woken when room frees up while the caller is first in line.
    pub(crate) fn submit_or_wait(
        &self,
        handle: &Handle,
        job: Runnable,
        ticket: &mut Option<u64>,
        waker: &Waker,
    ) -> Offer {
        let mut synced = self.lock();
        let first = synced.waiters.front().map(|w| w.ticket);
        // Nobody waits, or the caller is first in line: it may try.
        let may_try = first.is_none() || first == *ticket;
        let mut swept = Vec::new();
        let mut next = None;
        let offer = match may_try.then(|| self.make_room(&mut synced, handle, &mut swept)) {
            Some(Ok(())) => {
                self.push(&mut synced, job);
                if ticket.take().is_some() {
                    synced.waiters.pop_front();
                    // The room may go further than this one job.
                    if self.has_room(&synced) {
                        next = synced.waiters.front().map(|w| w.waker.clone());
                    }
                }
                Offer::Accepted
            }
            Some(Err(Refusal::Full { .. })) | None => {
                match *ticket {
                    Some(own) => {
                        if let Some(waiter) = synced.waiters.iter_mut().find(|w| w.ticket == own) {
                            if !waiter.waker.will_wake(waker) {
                                waiter.waker = waker.clone();
                            }
                        }
                    }
                    None => {
                        let own = synced.next_ticket;
                        synced.next_ticket += 1;
                        synced.waiters.push_back(Waiter {
                            ticket: own,
                            waker: waker.clone(),
                        });
                        *ticket = Some(own);
                    }
                }
                Offer::Waiting(job)
            }
            Some(Err(refusal)) => {
                if let Some(own) = ticket.take() {
                    next = self.leave_line(&mut synced, own);
                }
                Offer::Refused(job, refusal)
            }
        };
        self.counters.waiting.store(synced.waiters.len(), Relaxed);
        drop(synced);
        drop_jobs(swept);
        if let Some(waker) = next {
            waker.wake();
        }
        if let Offer::Refused(_, Refusal::NoThread(_)) = &offer {
            self.counters.rejected.fetch_add(1, Relaxed);
        }
        offer
    }

    /// Takes the caller holding `ticket` out of the line (its `unblock`
    /// future was dropped while it waited).
    pub(crate) fn cancel_wait(&self, ticket: u64) {
        let mut synced = self.lock();
        let next = self.leave_line(&mut synced, ticket);
        self.counters.waiting.store(synced.waiters.len(), Relaxed);
        drop(synced);
        if let Some(waker) = next {
            waker.wake();
        }
    }

    /// Removes `ticket` from the line. If it was first, it may have been
    /// woken for room it will not use: returns the new first waiter's
    /// waker to pass the wake on to, if there is room.
    fn leave_line(&self, synced: &mut Synced, ticket: u64) -> Option<Waker> {
        let position = synced.waiters.iter().position(|w| w.ticket == ticket)?;
        synced.waiters.remove(position);
        if position == 0 && self.has_room(synced) {
            synced.waiters.front().map(|w| w.waker.clone())
        } else {
            None
        }
    }

    /// Finds a place for one more job: claims an idle thread, starts a new
    /// one, or checks that the queue has room. The caller then pushes the
    /// job. Aborted jobs swept out of a full queue go to `swept`, for the
    /// caller to drop once the lock is released.
    fn make_room(
        &self,
        synced: &mut Synced,
        handle: &Handle,
        swept: &mut Vec<Runnable>,
    ) -> Result<(), Refusal> {
        if synced.shutdown {
            return Err(Refusal::Shutdown);
        }
        if synced.idle > 0 {
            synced.idle -= 1;
            self.counters.idle.store(synced.idle, Relaxed);
            synced.notified += 1;
            self.condvar.notify_one();
            return Ok(());
        }
        let mut start_error = None;
        if synced.threads < self.max_threads {
            match self.start_thread(synced, handle) {
                Ok(()) => return Ok(()),
                Err(error) => start_error = Some(error),
            }
        }
        if synced.threads == 0 {
            // Nothing alive would ever take the job. (`threads` is 0 only
            // below the limit, so a start was tried and failed.)
            let error = start_error.unwrap_or_else(|| io::Error::other("no thread"));
            return Err(Refusal::NoThread(error));
        }
        // Every thread alive is busy (or about to take a job) and will look
        // at the queue again before it waits or exits.
        if backlog(synced) >= self.queue_capacity {
            // Aborted jobs would be discarded unrun anyway: make room of
            // them before refusing.
            let queue = std::mem::take(&mut synced.queue);
            let (aborted, kept) = queue
                .into_iter()
                .partition(|job: &Runnable| job.metadata().is_aborted());
            synced.queue = kept;
            swept.extend::<VecDeque<_>>(aborted);
            self.counters.queued.store(synced.queue.len(), Relaxed);
        }
        if backlog(synced) >= self.queue_capacity {
            return Err(Refusal::Full {
                threads: synced.threads,
                queued: backlog(synced),
            });
        }
        Ok(())
    }

    /// Whether [`make_room`](Pool::make_room) would find room now (if
    /// starting a thread works).
    fn has_room(&self, synced: &Synced) -> bool {
        !synced.shutdown
            && (synced.idle > 0
                || synced.threads < self.max_threads
                || backlog(synced) < self.queue_capacity)
    }

    fn push(&self, synced: &mut Synced, job: Runnable) {
        synced.queue.push_back(job);
        self.counters.queued.store(synced.queue.len(), Relaxed);
    }

    /// Starts a thread that will take a job from the queue first thing.
    /// The lock is held throughout, so the thread's handle is filed before
    /// the thread can look at the pool (and retire).
    fn start_thread(&self, synced: &mut Synced, handle: &Handle) -> io::Result<()> {
        #[cfg(test)]
        if self
            .fail_starts
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        let id = synced.next_thread;
        let handle = handle.clone();
        let thread = thread::Builder::new()
            .name(self.thread_name.clone())
            .spawn(move || run_thread(handle, id))?;
        synced.next_thread += 1;
        synced.threads_by_id.insert(id, thread);
        synced.threads += 1;
        synced.starting += 1;
        self.counters.threads.store(synced.threads, Relaxed);
        Ok(())
    }

    /// Runs one job on the calling pool thread, and accounts for it.
    fn run_job(&self, job: Runnable) {
        if job.metadata().is_aborted() {
            // Aborted while queued: cancelled without running.
            drop_jobs([job]);
            return;
        }
        let start = self.clock.now();
        // The closure's panic is caught inside the task (it reaches the
        // JoinHandle); what could reach here is a panic in the waker of
        // whoever awaits the job, which must not end the thread.
        let _ = catch_unwind(AssertUnwindSafe(|| job.run()));
        let end = self.clock.now();
        self.counters
            .busy_ns
            .fetch_add(end.saturating_sub(start), Relaxed);
        // Release: whoever reads this count with Acquire also sees the busy
        // time added above (see `stats`).
        self.counters.completed.fetch_add(1, Release);
    }

    /// Shutdown, first half: accepts nothing more, cancels the jobs not yet
    /// started, wakes every waiting caller (who then finds the pool shut)
    /// and tells idle threads to exit. Threads running a job finish it.
    pub(crate) fn shutdown(&self) {
        let mut synced = self.lock();
        synced.shutdown = true;
        let queued: Vec<Runnable> = synced.queue.drain(..).collect();
        let waiters: Vec<Waker> = synced.waiters.drain(..).map(|w| w.waker).collect();
        self.counters.queued.store(0, Relaxed);
        self.counters.waiting.store(0, Relaxed);
        drop(synced);
        self.condvar.notify_all();
        drop_jobs(queued);
        for waker in waiters {
            let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
        }
    }

    /// Shutdown, second half: joins every pool thread, except the calling
    /// one if a job is dropping its own runtime.
    pub(crate) fn join_threads(&self) {
        let mut synced = self.lock();
        let mut threads: Vec<_> = synced.threads_by_id.drain().map(|(_, t)| t).collect();
        threads.extend(synced.retired.take());
        drop(synced);
        let current = thread::current().id();
        for thread in threads {
            if thread.thread().id() != current {
                let _ = thread.join();
            }
        }
    }

    /// [`join_threads`](Self::join_threads), giving up at `deadline`:
    /// threads still running a closure then are detached. Whether every
    /// thread was joined.
    pub(crate) fn join_threads_until(&self, deadline: std::time::Instant) -> bool {
        let mut synced = self.lock();
        let mut threads: Vec<_> = synced.threads_by_id.drain().map(|(_, t)| t).collect();
        threads.extend(synced.retired.take());
        drop(synced);
        let current = thread::current().id();
        threads.retain(|thread| thread.thread().id() != current);
        if !crate::runtime::wait_until(deadline, || threads.iter().all(|t| t.is_finished())) {
            return false;
        }
        for thread in threads {
            let _ = thread.join();
        }
        true
    }

    /// The pool's figures for [`Stats`](crate::stats::Stats).
    pub(crate) fn stats(&self) -> BlockingStats {
        let c = &self.counters;
        BlockingStats {
            threads: c.threads.load(Relaxed),
            idle: c.idle.load(Relaxed),
            queued: c.queued.load(Relaxed),
            waiting: c.waiting.load(Relaxed),
            // Acquire, and read before `busy_ns` (fields are evaluated in
            // order): the busy time then covers at least every job counted
            // here, so a caller that waits for n completions reads their
            // time whole, not a stale sum.
            completed: c.completed.load(Acquire),
            rejected: c.rejected.load(Relaxed),
            busy: Duration::from_nanos(c.busy_ns.load(Relaxed)),
            max_threads: self.max_threads,
            queue_capacity: self.queue_capacity,
        }
    }

    /// Waits on the condition variable as an idle thread (counted in
    /// `idle` by the caller) until it is claimed, the pool shuts down or
    /// the keep-alive runs out.
    fn wait<'a>(&'a self, mut synced: MutexGuard<'a, Synced>) -> (MutexGuard<'a, Synced>, Wait) {
        // A keep-alive too long to add to an instant (`Duration::MAX`)
        // means the thread never retires.
        let deadline = Instant::now().checked_add(self.keep_alive);
        loop {
            // Checked before sleeping too: a claim made while the caller
            // did not hold the lock notified nobody.
            if synced.notified > 0 {
                synced.notified -= 1;
                return (synced, Wait::Claimed);
            }
            if synced.shutdown {
                synced.idle -= 1;
                synced.threads -= 1;
                self.counters.idle.store(synced.idle, Relaxed);
                return (synced, Wait::Exit);
            }
            let now = Instant::now();
            if deadline.is_some_and(|deadline| now >= deadline) {
                synced.idle -= 1;
                synced.threads -= 1;
                self.counters.idle.store(synced.idle, Relaxed);
                return (synced, Wait::Retire);
            }
            synced = match deadline {
                Some(deadline) => {
                    self.condvar
                        .wait_timeout(synced, deadline - now)
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .0
                }
                None => self
                    .condvar
                    .wait(synced)
                    .unwrap_or_else(|poisoned| poisoned.into_inner()),
            };
        }
    }
}

/// How an idle thread's wait ended.
enum Wait {
    /// A submitter claimed it: take a job.
    Claimed,
    /// The pool is shutting down.
    Exit,
    /// Idle for the whole keep-alive.
    Retire,
}

/// Jobs in the queue beyond those that a claimed or starting thread is
/// about to take: the ones that wait for a busy thread.
fn backlog(synced: &Synced) -> usize {
    synced
        .queue
        .len()
        .saturating_sub(synced.notified + synced.starting)
}

/// The first waiter's waker, to wake once the lock is released: called
/// whenever room may have freed up.
fn first_waiter(synced: &Synced) -> Option<Waker> {
    synced.waiters.front().map(|w| w.waker.clone())
}

fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
    }
}

/// Drops jobs without running them (cancelling them), containing panics
/// in their destructors.
pub(crate) fn drop_jobs(jobs: impl IntoIterator<Item = Runnable>) {
    for job in jobs {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(job)));
    }
}

/// The body of pool thread number `id`.
fn run_thread(handle: Handle, id: u64) {
    // Closures may use `Handle::current()` and spawn back into the
    // runtime; they are not on a worker, so their spawns are injected.
    let _enter = context::enter(handle.clone());
    // And libraries' calls into tokio's runtime work here too.
    let _tokio = handle.shared.enter_tokio();
    let pool = &handle.shared.blocking;
    let mut synced = pool.lock();
    synced.starting -= 1;
    let retiring = loop {
        if let Some(job) = synced.queue.pop_front() {
            pool.counters.queued.store(synced.queue.len(), Relaxed);
            let waiter = first_waiter(&synced);
            drop(synced);
            wake(waiter);
            pool.run_job(job);
            synced = pool.lock();
            continue;
        }
        if synced.shutdown {
            synced.threads -= 1;
            break false;
        }
        // An idle thread is room for a waiting caller.
        synced.idle += 1;
        pool.counters.idle.store(synced.idle, Relaxed);
        if let Some(waker) = first_waiter(&synced) {
            drop(synced);
            wake(Some(waker));
            synced = pool.lock();
        }
        let (guard, wait) = pool.wait(synced);
        synced = guard;
        match wait {
            Wait::Claimed => {}
            Wait::Exit => break false,
            Wait::Retire => break true,
        }
    };
    pool.counters.threads.store(synced.threads, Relaxed);
    // A thread that exits for shutdown leaves its handle for
    // `join_threads`; one that retires files it for the next to join.
    let previous = if retiring {
        let own = synced.threads_by_id.remove(&id);
        std::mem::replace(&mut synced.retired, own)
    } else {
        None
    };
    // Fewer threads: room to start one.
    let waiter = first_waiter(&synced);
    drop(synced);
    wake(waiter);
    if let Some(previous) = previous {
        let _ = previous.join();
    }
}
