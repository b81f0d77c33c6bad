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
//! The alternative, driving tokio's IO and timer from keel's own park so
//! that no thread is added, is not open: tokio's drivers are not public
//! API, and a runtime is driven only by its own workers or its
//! `block_on`.
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

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::stats::thread_cpu::ThreadCpuClocks;
use crate::stats::TokioStats;

/// A keel runtime's tokio runtime (see the module docs).
pub(crate) struct TokioSide {
    handle: tokio::runtime::Handle,
    /// Taken at shutdown.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
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
        let cpu = Arc::new(ThreadCpuClocks::default());
        let (on_start, on_stop) = (cpu.clone(), cpu.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name(format!("{thread_name}-tokio"))
            .on_thread_start(move || on_start.register_current())
            .on_thread_stop(move || on_stop.unregister_current())
            .enable_all()
            .build()?;
        Ok(TokioSide {
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
            cpu,
        })
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
            workers: metrics.num_workers(),
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
        match timeout {
            Some(timeout) => runtime.shutdown_timeout(timeout),
            None => drop(runtime),
        }
    }
}
