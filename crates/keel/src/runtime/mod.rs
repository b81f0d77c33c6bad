//! The runtime: building it, entering it, and shutting it down.
//!
//! # Shutdown
//!
//! Dropping a [`Runtime`] shuts it down gracefully, in this order:
//!
//! 1. The task registry is closed: spawning from now on yields a
//!    `JoinHandle` that resolves to a cancelled [`JoinError`].
//! 2. The blocking pool is closed: jobs submitted from now on, and jobs
//!    queued and not yet started, are cancelled (their `JoinHandle`s
//!    resolve to a cancelled [`JoinError`]); callers of
//!    [`unblock`](crate::blocking::unblock) waiting for room get an error;
//!    idle pool threads exit. Closures already running go on.
//! 3. Workers are told to stop and unparked; each finishes the poll it is
//!    in (a task that never yields delays shutdown until it does) and
//!    exits. Their threads are joined.
//! 4. Every task still alive is woken, which moves it onto a queue, and
//!    every queue is drained, dropping each task's future on the thread
//!    that drops the runtime. This repeats until no task is left, so
//!    nothing leaks and every `JoinHandle` resolves.
//! 5. Every pool thread is joined: running closures finish first (a
//!    closure that never returns delays shutdown forever, as it cannot be
//!    interrupted). This comes after the drain so that a closure waiting
//!    for a task's result sees that task dropped instead of waiting for it.
//! 6. The tokio side, if the runtime has one (see
//!    [`Builder::tokio_threads`]), is shut down as dropping a tokio runtime
//!    does: its tasks are dropped and its threads joined. It comes last
//!    because keel's tasks, dropped in step 4, may hold its sockets,
//!    timers and join handles.
//!
//! [`Runtime::shutdown_timeout`] runs the same steps but gives up waiting
//! for threads after a deadline: workers still inside a poll and pool
//! threads still running a closure are left to finish on their own
//! (detached), and the tasks still queued are then not dropped but leaked,
//! since a worker may still touch them. Use it where a stuck task must not
//! keep the process from exiting.
//!
//! # Entering
//!
//! [`Runtime::enter`] (or [`Handle::enter`]) makes a runtime the current
//! one of the calling thread until the guard drops, as `block_on` does for
//! its duration: [`spawn`](crate::spawn), [`Handle::current`] and the
//! creation of sockets and timers then work on that thread, outside any
//! task. Guards nest; dropping one restores what was current before it.
//!
//! [`JoinError`]: crate::JoinError

mod builder;
pub(crate) mod config;
pub(crate) mod context;
pub(crate) mod cpus;
mod handle;
#[cfg(feature = "tokio-context")]
pub(crate) mod tokio_side;

pub use builder::{
    Builder, SpinPolicy, DEFAULT_BLOCKING_KEEP_ALIVE, DEFAULT_BLOCKING_QUEUE, DEFAULT_BULK_SHARES,
    DEFAULT_IO_EVERY, DEFAULT_IO_INTERVAL, DEFAULT_MAX_BLOCKING_THREADS, DEFAULT_NORMAL_SHARES,
    DEFAULT_RING_PER_WORKER, DEFAULT_STALL_THRESHOLD, DEFAULT_TASK_IO_BUDGET, DEFAULT_TASK_QUOTA,
    DEFAULT_TOKIO_THREADS, DEFAULT_URGENT_SHARES, SPIN_LONG, SPIN_MEDIUM, SPIN_SHORT,
};
pub use handle::{EnterGuard, Handle};

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use crate::sched::{park::Parker, Class, Shared};
use crate::stats::Stats;
use crate::JoinHandle;
use config::Config;

/// A keel runtime: worker threads that run tasks by class and shares.
///
/// ```
/// let rt = keel::Runtime::new().unwrap();
/// let sum = rt.block_on(async {
///     let tasks: Vec<_> = (0..10u64).map(|i| keel::spawn(async move { i * i })).collect();
///     let mut sum = 0;
///     for task in tasks {
///         sum += task.await.unwrap();
///     }
///     sum
/// });
/// assert_eq!(sum, 285);
/// ```
pub struct Runtime {
    handle: Handle,
    threads: Vec<thread::JoinHandle<()>>,
    /// Set by `shutdown_timeout`, which did the shutdown already.
    shut_down: bool,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A builder with every default; see [`Builder`].
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// A runtime with every default.
    ///
    /// # Errors
    ///
    /// If a worker thread cannot be spawned.
    pub fn new() -> io::Result<Runtime> {
        Builder::new().build()
    }

    fn start(config: Config) -> io::Result<Runtime> {
        let (shared, locals) = Shared::new(config)?;
        let handle = Handle { shared };
        let mut runtime = Runtime {
            handle,
            threads: Vec::with_capacity(locals.len()),
            shut_down: false,
        };
        if runtime.handle.shared.lane.is_some() {
            let shared = runtime.handle.shared.clone();
            let (ready, settled) = std::sync::mpsc::channel();
            let name = format!("{}-urgent", shared.config.thread_name);
            let thread = thread::Builder::new()
                .name(name)
                .spawn(move || crate::sched::run_lane(shared, ready))?;
            runtime.threads.push(thread);
            // The workers need to know whether to lower their priority.
            let _ = settled.recv();
        }
        let (started, all_started) = std::sync::mpsc::channel();
        for (index, local) in locals.into_iter().enumerate() {
            let shared = runtime.handle.shared.clone();
            let config = &shared.config;
            let mut builder =
                thread::Builder::new().name(format!("{}-{index}", config.thread_name));
            if let Some(size) = config.stack_size {
                builder = builder.stack_size(size);
            }
            let started = started.clone();
            // On failure, `runtime` drops here and stops the workers already started.
            let thread = builder
                .spawn(move || crate::sched::run_worker(shared, index, local, Some(started)))?;
            runtime.threads.push(thread);
        }
        // Every worker has opened what it opens for itself (a runtime's
        // descriptors are all open once it is built). A worker that died
        // before saying so drops its sender, which ends the wait.
        drop(started);
        while all_started.recv().is_ok() {}
        // The thread that wakes dozing workers (see `sched::doze`), where
        // workers may doze.
        #[cfg(not(any(loom, miri)))]
        if runtime.handle.shared.doze.has_alarm() {
            let shared = runtime.handle.shared.clone();
            let name = format!("{}-alarm", shared.config.thread_name);
            let thread = thread::Builder::new()
                .name(name)
                .spawn(move || shared.run_alarm())?;
            runtime.threads.push(thread);
        }
        Ok(runtime)
    }

    /// The runtime's handle.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Spawns a task in the calling task's class, or in [`Class::NORMAL`]
    /// outside this runtime's tasks; see [`Handle::spawn`].
    #[track_caller]
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// Spawns a task in `class`; see [`Handle::spawn_in`].
    #[track_caller]
    pub fn spawn_in<F>(&self, class: Class, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn_in(class, future)
    }

    /// Runs `f` on the blocking pool without waiting for room; see
    /// [`crate::spawn_blocking`].
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.handle.spawn_blocking(f)
    }

    /// A snapshot of the runtime's accounting; see [`Handle::stats`].
    pub fn stats(&self) -> Stats {
        self.handle.stats()
    }

    /// Makes this runtime the current one of the calling thread until the
    /// guard drops (see [Entering](self#entering)).
    ///
    /// ```
    /// let rt = keel::Runtime::new().unwrap();
    /// let _guard = rt.enter();
    /// // Outside `block_on`, and yet inside the runtime.
    /// let listener = keel::net::TcpListener::bind("127.0.0.1:0").unwrap();
    /// let task = keel::spawn(async move { listener.local_addr().unwrap().port() });
    /// assert_ne!(rt.block_on(task).unwrap(), 0);
    /// ```
    pub fn enter(&self) -> EnterGuard<'_> {
        self.handle.enter()
    }

    /// Shuts the runtime down as dropping it does (see
    /// [Shutdown](self#shutdown)), but waits at most `timeout` for its
    /// threads. Returns `true` if every worker and pool thread finished in
    /// time; `false` if some were left running, detached, in which case
    /// the tasks still queued are leaked rather than dropped.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rt = keel::Runtime::builder().workers(1).build().unwrap();
    /// // A closure that will not finish soon keeps a pool thread busy.
    /// let (started, running) = std::sync::mpsc::channel::<()>();
    /// let (release, wait) = std::sync::mpsc::channel::<()>();
    /// drop(rt.spawn_blocking(move || {
    ///     started.send(()).unwrap();
    ///     wait.recv()
    /// }));
    /// running.recv().unwrap();
    /// let clean = rt.shutdown_timeout(Duration::from_millis(50));
    /// assert!(!clean); // the pool thread was left running
    /// drop(release);
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) -> bool {
        self.shut_down = true;
        // A timeout too large for the clock means: wait as long as it takes
        // (136 years stand in for that).
        let deadline = Instant::now()
            .checked_add(timeout)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(u32::MAX.into()));
        let shared = self.handle.shared.clone();
        shared.registry.close();
        shared.blocking.shutdown();
        shared.stop_workers();
        let current = thread::current().id();
        let threads = std::mem::take(&mut self.threads);
        let threads: Vec<_> = threads
            .into_iter()
            .filter(|thread| thread.thread().id() != current)
            .collect();
        if !wait_until(deadline, || threads.iter().all(|t| t.is_finished())) {
            // Detached: a worker still inside a poll may touch the queues,
            // so the tasks are left where they are. The tokio side stops
            // without waiting.
            #[cfg(feature = "tokio-context")]
            if let Some(tokio) = &shared.tokio {
                tokio.shutdown(Some(Duration::ZERO));
            }
            return false;
        }
        for thread in threads {
            let _ = thread.join();
        }
        let _enter = context::enter(self.handle.clone());
        shared.drop_all_tasks();
        let pool_done = shared.blocking.join_threads_until(deadline);
        #[cfg(feature = "tokio-context")]
        if let Some(tokio) = &shared.tokio {
            tokio.shutdown(Some(deadline.saturating_duration_since(Instant::now())));
        }
        pool_done
    }

    /// Runs `future` to completion on the calling thread, which is not a
    /// worker: the future is polled here, and tasks it spawns run on the
    /// workers. Inside, [`spawn`](crate::spawn) and [`Handle::current`]
    /// refer to this runtime.
    ///
    /// # Panics
    ///
    /// When called on a worker thread: blocking a worker would stall every
    /// task queued behind it. Await the future instead.
    #[track_caller]
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        assert!(
            !context::is_worker(),
            "Runtime::block_on called on a keel worker thread; await the future instead"
        );
        let _enter = context::enter(self.handle.clone());
        let _tokio = self.handle.shared.enter_tokio();
        let parker = Arc::new(ThreadParker(Parker::new()));
        let waker = Waker::from(parker.clone());
        let mut cx = Context::from_waker(&waker);
        let mut future = pin!(future);
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            parker.0.park();
        }
    }
}

/// Waits until `done` holds or `deadline` passes; whether it held. Polls
/// every millisecond: shutdown is rare, and a thread's end has no waitable
/// event with a timeout in std.
pub(crate) fn wait_until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if self.shut_down {
            return;
        }
        let shared = &self.handle.shared;
        shared.registry.close();
        shared.blocking.shutdown();
        shared.stop_workers();
        let current = thread::current().id();
        for thread in self.threads.drain(..) {
            // A task that drops its own runtime cannot join its own worker.
            if thread.thread().id() != current {
                let _ = thread.join();
            }
        }
        let _enter = context::enter(self.handle.clone());
        shared.drop_all_tasks();
        shared.blocking.join_threads();
        // Last: keel's tasks, dropped above, may have held its sockets,
        // timers and join handles.
        #[cfg(feature = "tokio-context")]
        if let Some(tokio) = &shared.tokio {
            tokio.shutdown(None);
        }
    }
}

/// Wakes a `block_on` thread.
struct ThreadParker(Parker);

// A `block_on` thread parks only with `park`, never in the reactor, so
// `unpark` never asks for an interrupt here.
impl Wake for ThreadParker {
    fn wake(self: Arc<Self>) {
        let _ = self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let _ = self.0.unpark();
    }
}
