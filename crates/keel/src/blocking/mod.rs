//! Blocking work: a bounded pool of threads that are not workers, for
//! closures that block (file IO, `fsync`, synchronous libraries).
//!
//! A closure that blocks on a worker stalls every task queued behind it,
//! IO included. The pool runs such closures on threads of their own, so
//! the workers stay free; [`crate::fs`] is built on it.
//!
//! ```
//! let rt = keel::Runtime::new().unwrap();
//! rt.block_on(async {
//!     // Refused at once when the pool is full:
//!     let sum = keel::spawn_blocking(|| (1..=10u64).sum::<u64>()).await.unwrap();
//!     // Waits for room when the pool is full:
//!     let len = keel::blocking::unblock(|| "hello".len()).await.unwrap();
//!     assert_eq!((sum, len), (55, 5));
//! });
//! ```
//!
//! # Limits and back-pressure
//!
//! The pool starts a thread only when a job finds none idle, up to
//! [`Builder::max_blocking_threads`]; a thread idle for
//! [`Builder::blocking_keep_alive`] exits. Once every thread is busy and no
//! more may start, jobs wait in a queue of at most
//! [`Builder::blocking_queue`] entries. Past that, the pool is *full*, and
//! the two ways in differ only there:
//!
//! - [`spawn_blocking`](crate::spawn_blocking) never waits: its
//!   [`JoinHandle`] resolves at once to a [`JoinError`]
//!   for which [`is_rejected`](crate::JoinError::is_rejected) holds, and the
//!   closure is dropped unrun. The caller decides: shed the request, retry
//!   later, or switch to `unblock`.
//! - [`unblock`] suspends its caller until there is room. Callers are
//!   served in the order in which they found the pool full, so none
//!   starves; the first in line is woken whenever room may have freed up (a
//!   thread took a job from the queue, went idle or exited). A producer
//!   that awaits each `unblock` thus runs no faster than the pool drains.
//!   `spawn_blocking` does not queue behind waiting callers: it takes any
//!   room it finds.
//!
//! Neither ever blocks the calling thread.
//!
//! # Jobs are tasks
//!
//! A job is an `async_task` task whose future calls the closure on its
//! first and only poll, wrapped like any keel task (see `crate::task`): the
//! same [`JoinHandle`], panics caught into
//! [`JoinError::is_panic`], destructors that cannot unwind into
//! `async_task`. The pool's queue holds the tasks' `Runnable`s. Jobs are
//! not in the registry of live tasks: [`Handle::live_tasks`] counts async
//! tasks only, and the shutdown drain of tasks never waits for a closure.
//!
//! Aborting a job that no thread has started cancels it: a thread that
//! takes it from the queue drops it unrun, and a full queue is swept of
//! aborted jobs before it refuses one. A closure that has started cannot
//! be interrupted; it runs to its end and its output is dropped.
//!
//! Closures run inside the runtime's context: [`Handle::current`] works in
//! them, and what they spawn goes to the workers through the injectors.
//! They are not workers: their time is accounted as the pool's busy time
//! ([`BlockingStats::busy`]), never as a class's task time.
//!
//! # The pool's state
//!
//! One mutex guards the queue, the thread counts and the line of waiting
//! callers; idle threads wait on a condition variable. No user code runs
//! under the lock: jobs run, wakers are woken and refused jobs are dropped
//! after it is released. A submitted job finds its place in this order:
//!
//! 1. An idle thread: the submitter *claims* it (moves it from `idle` to
//!    `notified`) and notifies the condition variable. Whichever waiting
//!    thread wakes first takes the claim and a job from the queue.
//! 2. Below the thread limit, a new thread, started with the lock held so
//!    that its handle is filed before it can look at the pool. It takes a
//!    job from the queue first thing.
//! 3. The queue, if it has room. A thread alive that is not idle is running
//!    a job, or about to take one, and looks at the queue again before it
//!    waits or exits, so a queued job always has a thread coming for it.
//!
//! The queue holds the jobs of claimed and starting threads too, for an
//! instant; only the jobs beyond those count against its capacity.
//!
//! # When a thread cannot start
//!
//! If the OS refuses a new thread (`EAGAIN` at the process's thread limit,
//! `ENOMEM`), the job still goes to the queue if some thread is alive: by
//! the rule above, one will come for it. If none is, nothing ever would:
//! the job is rejected, with the OS error in its message, rather than left
//! to hang.
//!
//! # Shutdown
//!
//! Dropping the [`Runtime`](crate::Runtime) shuts the pool down (see
//! [`crate::runtime`] for the whole order): from then on every job is
//! cancelled on arrival; jobs still queued are cancelled; callers waiting
//! in line are woken and get an error; idle threads exit; threads running a
//! closure finish it and exit. Every pool thread is joined before the drop
//! returns: a thread that retired earlier was joined by the next one to
//! retire, or is joined then.
//!
//! # Accounting
//!
//! [`Stats::blocking`](crate::stats::Stats::blocking) reports threads
//! alive and idle, jobs queued, callers waiting, jobs completed and
//! rejected, and the summed wall time of closures, from relaxed atomics
//! that the pool updates as it goes.
//!
//! [`Builder::max_blocking_threads`]: crate::Builder::max_blocking_threads
//! [`Builder::blocking_keep_alive`]: crate::Builder::blocking_keep_alive
//! [`Builder::blocking_queue`]: crate::Builder::blocking_queue
//! [`Handle::live_tasks`]: crate::Handle::live_tasks
//! [`Handle::current`]: crate::Handle::current
//! [`JoinError`]: crate::JoinError
//! [`JoinError::is_panic`]: crate::JoinError::is_panic
//! [`BlockingStats::busy`]: crate::stats::BlockingStats::busy

mod job;
pub(crate) mod pool;
#[cfg(test)]
mod tests;
mod unblock;

pub use unblock::Unblock;

use crate::{Handle, JoinHandle};

/// Runs `f` on the current runtime's blocking pool and waits for its
/// output, waiting first for room if the pool is full: the back-pressure
/// path (see the [module docs](self)).
///
/// The returned future does nothing until polled. It resolves to `f`'s
/// output, or to an `io::Error` if `f` could not run: the runtime shut down
/// (`ErrorKind::Other`), or no pool thread was alive and none could be
/// started (the OS error's kind, with the error in the message). If `f`
/// panics, the panic resumes in the caller, as if it had called `f`
/// itself.
///
/// Dropping the future before `f` has started cancels it; a closure that
/// has started runs to its end.
///
/// ```
/// let rt = keel::Runtime::new().unwrap();
/// let bytes = rt.block_on(async {
///     keel::blocking::unblock(|| std::fs::read("/proc/self/stat")).await
/// });
/// assert!(!bytes.unwrap().unwrap().is_empty());
/// ```
///
/// # Panics
///
/// Outside a keel runtime; use [`Handle::unblock`] there.
#[track_caller]
pub fn unblock<F, R>(f: F) -> Unblock<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    Handle::current().unblock(f)
}

/// Submits `f` to `handle`'s pool without waiting (see
/// [`crate::spawn_blocking`]).
pub(crate) fn spawn<F, R>(handle: &Handle, f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let (job, task) = job::new(handle, f);
    let id = task.id();
    match handle.shared.blocking.submit(handle, job) {
        Ok(()) => task,
        Err((job, refusal)) => {
            // The job's own task is cancelled, and its handle with it.
            pool::drop_jobs([job]);
            match refusal.into_reason() {
                Some(reason) => job::rejected(id, reason),
                None => task,
            }
        }
    }
}
