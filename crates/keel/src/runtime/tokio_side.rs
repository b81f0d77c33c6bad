//! The tokio side: a small tokio runtime that a keel runtime owns, so that
//! libraries written against tokio's runtime work inside keel tasks.
//!
//! # Why
//!
//! reqwest, sqlx, tonic's transport and redis call `tokio::spawn`,
//! `tokio::time`, `tokio::task::spawn_blocking` or
//! `tokio::runtime::Handle::current()` themselves, and open `tokio::net`
//! sockets. Each of these panics on a thread where no tokio runtime is
//! entered ("there is no reactor running, must be called from the context
//! of a Tokio 1.x runtime"), so without a tokio runtime a service that uses
//! them cannot move to keel by changing its `main`.
//!
//! # What it is
//!
//! A multi-thread tokio runtime of [`Builder::tokio_threads`] workers (1
//! by default), with its IO and timer drivers, started with the keel
//! runtime and shut down after it: after keel's own tasks are dropped,
//! since they may hold tokio sockets, timers and join handles. Its handle
//! is entered wherever keel code runs: on every worker and on the urgent
//! lane for their whole life, on every blocking-pool thread, and in
//! `block_on` and [`Runtime::enter`](crate::Runtime::enter) for their
//! duration. So, inside a keel task:
//!
//! - `tokio::spawn` runs its future on the tokio side's threads;
//! - a `tokio::net` socket or a `tokio::time` timer that a keel task polls
//!   registers with the tokio side's drivers, which wake the keel task
//!   through its keel waker, from the tokio thread (a wake from outside
//!   keel's workers: the task goes to its class's injector);
//! - `tokio::task::spawn_blocking` runs on tokio's blocking pool.
//!
//! # On keel's workers
//!
//! With [`Builder::tokio_on_workers`], the side is instead a current-thread
//! tokio runtime with no thread of its own, driven through its `block_on`
//! (tokio's drivers are not public API; `block_on` is the one way to drive
//! a runtime from a thread it does not own):
//!
//! - at each IO tick, a worker enters `block_on(yield_now())`: tokio runs
//!   the tasks that are ready (at most its event interval, 61), then polls
//!   its epoll without blocking, which wakes the keel tasks whose tokio
//!   sockets and timers are ready, straight into this worker's events
//!   lane, as a reactor poll does. If another worker holds tokio's core
//!   (the one parked in it), the tick returns at once;
//! - the worker that parks as the reactor's blocker sleeps in
//!   `block_on` on keel's reactor descriptor (its epoll, or its ring),
//!   registered in tokio's epoll, with the park's timeout: keel's events (and the eventfd that
//!   interrupts a park) wake it as tokio's do. While it sleeps there, a
//!   keel task that tokio wakes goes through the injector with a
//!   notification (`Local::in_tokio_park`), which interrupts the sleep.
//!
//! The reactor's descriptor is registered once, at the first park, as a
//! duplicate that the side owns (so it stays valid for as long as it is
//! registered, whenever keel's reactor closes), and stays registered
//! until the side shuts down: registering a descriptor that is itself an
//! epoll makes the kernel check the nesting, which cost about 2 µs of a
//! request's 75 when every park registered it afresh. Registered for
//! good, tokio may still hold a readiness that keel has since drained
//! (reported to it at a tick, say); a park that finds one asks the
//! descriptor itself (`poll` with no wait) and clears it if nothing is
//! there. tokio clears a readiness only if no newer event came after the
//! one observed, so an event that lands between the look and the clear
//! is not lost.
//!
//! It saves the tokio thread's sleep and wake per event; the tokio tasks
//! then take keel's workers' time between polls, still outside every
//! class.
//!
//! # What keel's guarantees cover there
//!
//! Code that keel polls (a keel task that awaits a reqwest future, a sqlx
//! query, a tokio socket) keeps its class, its shares and its accounting:
//! only the readiness of tokio's sockets and timers comes from the tokio
//! thread, at the cost of a cross-thread wake. Work that a library spawns
//! with `tokio::spawn` (a hyper connection task of reqwest's pool, tonic's
//! server tasks, sqlx's pool maintenance) runs on the tokio side, outside
//! every class: it is not shared out, its polls are not accounted, and it
//! competes with keel's workers for cores as any other thread does. Its
//! threads' CPU time is counted in [`Stats`](crate::stats::Stats) as
//! `tokio`, so the utilization figures still add up to the process's CPU.
//!
//! [`Builder::tokio_threads`]: crate::Builder::tokio_threads
//! [`Builder::tokio_on_workers`]: crate::Builder::tokio_on_workers

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::unix::AsyncFd;

use crate::stats::thread_cpu::ThreadCpuClocks;
use crate::stats::TokioStats;

/// A keel runtime's tokio runtime (see the module docs).
pub(crate) struct TokioSide {
    handle: tokio::runtime::Handle,
    /// Taken at shutdown.
    runtime: Mutex<Option<Arc<Driven>>>,
    /// A current-thread runtime that keel's workers drive (see the module
    /// docs).
    on_workers: bool,
    /// CPU clocks of the tokio side's live threads, and the CPU of those
    /// that exited.
    cpu: Arc<ThreadCpuClocks>,
}

impl std::fmt::Debug for TokioSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokioSide")
            .field("workers", &self.handle.metrics().num_workers())
            .finish_non_exhaustive()
    }
}

impl TokioSide {
    /// Starts a tokio runtime of `workers` worker threads named after
    /// `thread_name`.
    pub(crate) fn start(workers: usize, thread_name: &str) -> io::Result<TokioSide> {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(workers);
        TokioSide::build(builder, thread_name, false)
    }

    /// Starts a current-thread tokio runtime that keel's workers drive
    /// (see the module docs); its blocking threads are named after
    /// `thread_name`.
    pub(crate) fn start_on_workers(thread_name: &str) -> io::Result<TokioSide> {
        TokioSide::build(
            tokio::runtime::Builder::new_current_thread(),
            thread_name,
            true,
        )
    }

    /// Builds the runtime with both drivers, its threads named after
    /// `thread_name` and their CPU clocks registered.
    fn build(
        mut builder: tokio::runtime::Builder,
        thread_name: &str,
        on_workers: bool,
    ) -> io::Result<TokioSide> {
        let cpu = Arc::new(ThreadCpuClocks::default());
        let (on_start, on_stop) = (cpu.clone(), cpu.clone());
        let runtime = builder
            .thread_name(format!("{thread_name}-tokio"))
            .on_thread_start(move || on_start.register_current())
            .on_thread_stop(move || on_stop.unregister_current())
            .enable_all()
            .build()?;
        Ok(TokioSide {
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(Arc::new(Driven {
                park_fd: OnceLock::new(),
                runtime,
            }))),
            on_workers,
            cpu,
        })
    }

    /// What a worker drives the side with for its whole life, if the side
    /// runs on the workers and is not shut down: taken once when the
    /// worker starts, so that an IO tick costs no lock.
    pub(crate) fn on_worker(&self) -> Option<OnWorker> {
        if !self.on_workers {
            return None;
        }
        self.runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .map(|driven| OnWorker { driven })
    }

    /// The tokio runtime's handle, to enter it on a thread.
    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }

    /// What the tokio side is doing and has used.
    pub(crate) fn stats(&self) -> TokioStats {
        let metrics = self.handle.metrics();
        let busy = (0..metrics.num_workers())
            .map(|worker| metrics.worker_total_busy_duration(worker))
            .sum();
        TokioStats {
            // On the workers, the side has no worker thread of its own.
            workers: if self.on_workers {
                0
            } else {
                metrics.num_workers()
            },
            threads: self.cpu.live(),
            alive_tasks: metrics.num_alive_tasks(),
            busy,
            cpu: self.cpu.total(),
        }
    }

    /// Shuts the tokio runtime down: its tasks are dropped and its worker
    /// threads stop; waits for them, and for blocking closures still
    /// running, at most `timeout` (`None`: as long as they take, as
    /// dropping a tokio runtime does).
    pub(crate) fn shutdown(&self, timeout: Option<Duration>) {
        let taken = self
            .runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(runtime) = taken else {
            return;
        };
        // With the side on the workers, each worker holds it until it
        // exits (see `OnWorker`). One that has not (a runtime dropped by
        // its own task, or a shutdown that gave up waiting for a worker
        // stuck in a poll) still does: the runtime then drops with the
        // last such hold, when that worker exits.
        let Ok(Driven { park_fd, runtime }) = Arc::try_unwrap(runtime) else {
            return;
        };
        // Deregistered while tokio's driver still runs.
        drop(park_fd);
        match timeout {
            Some(timeout) => runtime.shutdown_timeout(timeout),
            None => drop(runtime),
        }
    }
}

/// The tokio runtime, and keel's reactor descriptor as the workers that
/// park in it registered it.
struct Driven {
    /// Registered at the first park in the side (see the module docs);
    /// `None` if that registration failed. Declared before `runtime`, so
    /// it drops first wherever the last hold drops.
    park_fd: OnceLock<Option<ParkFd>>,
    runtime: tokio::runtime::Runtime,
}

/// keel's reactor descriptor, registered with tokio's epoll for the side's
/// life (see the module docs).
struct ParkFd {
    /// The number of the descriptor this one duplicates: the reactor's,
    /// which parks compare with what they are given.
    original: RawFd,
    /// The duplicate, registered for readability.
    registered: AsyncFd<OwnedFd>,
}

impl ParkFd {
    /// Registers a duplicate of `reactor_fd` with the tokio runtime whose
    /// context the caller is in; `None` if it cannot be duplicated or
    /// registered.
    fn register(reactor_fd: RawFd) -> Option<ParkFd> {
        // SAFETY: the caller of `OnWorker::park` keeps `reactor_fd` open
        // for the whole call, and this borrow ends within it: what is kept
        // is a duplicate, which the side owns.
        let borrowed = unsafe { BorrowedFd::borrow_raw(reactor_fd) };
        let duplicate = borrowed.try_clone_to_owned().ok()?;
        // SAFETY: the `AsyncFd` owns `duplicate`, an open descriptor that
        // nothing else can close or replace, so it stays open and names
        // the same file description until the `AsyncFd` drops.
        let registered =
            unsafe { AsyncFd::register_with_interest(duplicate, tokio::io::Interest::READABLE) }
                .ok()?;
        Some(ParkFd {
            original: reactor_fd,
            registered,
        })
    }

    /// Waits until the reactor has something to report (see the module
    /// docs for the readiness tokio may hold from before).
    async fn readable(&self) {
        loop {
            let Ok(mut guard) = self.registered.readable().await else {
                // tokio's driver is gone: nothing to wait in.
                return;
            };
            if readable_now(self.registered.get_ref().as_fd()) {
                return;
            }
            guard.clear_ready();
        }
    }
}

/// Whether `fd` is readable right now, without waiting; an error counts
/// as readable, so that the caller goes and looks.
fn readable_now(fd: BorrowedFd<'_>) -> bool {
    use std::os::fd::AsRawFd;
    let mut poll_fd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `poll_fd` is one valid, writable pollfd for the whole call,
    // and its descriptor is open for the borrow's lifetime.
    let ready = unsafe { libc::poll(&mut poll_fd, 1, 0) };
    ready != 0
}

/// A worker's hold on a tokio side that runs on the workers (see the
/// module docs). The worker drops it when it exits: before the side is
/// shut down, unless the shutdown did not wait for that worker (see
/// [`TokioSide::shutdown`]).
pub(crate) struct OnWorker {
    driven: Arc<Driven>,
}

impl OnWorker {
    /// An IO tick's share of driving the side: runs tokio's ready tasks
    /// and polls its epoll without blocking. Returns at once if another
    /// thread holds tokio's core.
    pub(crate) fn tick(&self) {
        self.driven.runtime.block_on(tokio::task::yield_now());
    }

    /// Parks in the side until `reactor_fd` (keel's reactor's descriptor,
    /// an epoll or a ring, which the caller keeps open throughout and
    /// which is the same at every call) is readable or `timeout` passes,
    /// driving tokio meanwhile. Returns false if the descriptor cannot be
    /// registered with tokio: the caller then blocks in keel's reactor
    /// itself.
    pub(crate) fn park(&self, reactor_fd: RawFd, timeout: Option<Duration>) -> bool {
        let driven = &*self.driven;
        driven.runtime.block_on(async move {
            let park_fd = driven
                .park_fd
                .get_or_init(|| ParkFd::register(reactor_fd))
                .as_ref()
                .filter(|park_fd| park_fd.original == reactor_fd);
            let Some(park_fd) = park_fd else {
                return false;
            };
            match timeout {
                Some(timeout) => {
                    let _ = tokio::time::timeout(timeout, park_fd.readable()).await;
                }
                None => park_fd.readable().await,
            }
            true
        })
    }
}
