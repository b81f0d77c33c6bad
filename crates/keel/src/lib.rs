//! keel: an async runtime for network servers that stays responsive under
//! any mix of load.
//!
//! Tasks run in *classes* that share the CPU by *shares* measured in CPU
//! time, so bulk work cannot starve the control plane; every worker
//! accounts where its wall time goes, so utilization figures are true.
//!
//! ```
//! use keel::{Class, Runtime};
//!
//! let rt = Runtime::builder().workers(2).build().unwrap();
//! rt.block_on(async {
//!     let control = keel::spawn_in(Class::URGENT, async { "pong" });
//!     let bulk = keel::spawn_in(Class::BULK, async { (0..1_000u64).sum::<u64>() });
//!     assert_eq!(control.await.unwrap(), "pong");
//!     assert_eq!(bulk.await.unwrap(), 499_500);
//! });
//! let stats = rt.stats();
//! assert_eq!(stats.classes[Class::URGENT.index()].name, "urgent");
//! ```
//!
//! # Layout
//!
//! - [`runtime`]: [`Builder`], [`Runtime`], [`Handle`] and shutdown.
//! - `sched`: the worker loop, class selection, queues, parking.
//! - `task`: tasks on `async-task`, [`JoinHandle`], [`yield_now`].
//! - [`net`]: TCP and UDP sockets; TCP input delivered in batches rather
//!   than per packet when asked ([`net::batch`]).
//! - [`stats`]: per-worker state accounting and snapshots.
//! - [`time`]: `sleep`, `timeout`, `interval` on a timer wheel.
//! - [`wal`]: a group-commit log, [`wal::Log`], that acknowledges only
//!   durable records.
//! - [`blocking`]: the pool for blocking closures, [`spawn_blocking`] and
//!   [`blocking::unblock`].
//! - [`fs`]: files, on the blocking pool.
//! - [`compat`]: other crates' runtime traits on keel (hyper 1.x, with
//!   the `hyper` feature).
//! - `admin` (feature `admin`): the built-in admin endpoint, `/metrics`,
//!   `/stats`, `/status` and `/health` over HTTP, in the urgent class.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

#[cfg(feature = "admin")]
pub mod admin;
pub mod blocking;
pub mod compat;
pub mod fs;
pub mod io;
pub(crate) mod loom;
pub mod net;
pub mod runtime;
pub(crate) mod sched;
pub mod stats;
pub(crate) mod task;
pub mod time;
#[cfg(unix)]
pub mod wal;

pub use runtime::{Builder, Handle, Runtime, SpinPolicy};
pub use sched::{Class, MAX_CLASSES};
pub use task::{yield_now, JoinError, JoinHandle, TaskBuilder, TaskId, YieldNow};

use std::future::Future;

/// Spawns a task on the current runtime, in the class of the calling task
/// (or [`Class::NORMAL`] from `block_on`).
///
/// # Panics
///
/// Outside a keel runtime; use [`Handle::spawn`] there.
#[track_caller]
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Handle::current().spawn(future)
}

/// Spawns a task on the current runtime in `class`.
///
/// # Panics
///
/// Outside a keel runtime, or if `class` does not exist in it.
#[track_caller]
pub fn spawn_in<F>(class: Class, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Handle::current().spawn_in(class, future)
}

/// Runs the blocking closure `f` on the current runtime's blocking pool,
/// off the workers, without ever waiting: the back-pressure contract is
/// that a full pool refuses the job instead of queueing it without bound.
///
/// The handle resolves to `f`'s output, or to a [`JoinError`]:
///
/// - [`is_rejected`](JoinError::is_rejected): the pool was full (every one
///   of [`max_blocking_threads`](Builder::max_blocking_threads) threads
///   busy and [`blocking_queue`](Builder::blocking_queue) jobs queued), or
///   no pool thread was alive and none could be started. The handle
///   resolves at once, `f` is dropped unrun, and the error's message names
///   the limit or the OS error. Shed the work, retry later, or use
///   [`blocking::unblock`], which waits for room instead.
/// - [`is_panic`](JoinError::is_panic): `f` panicked.
/// - [`is_cancelled`](JoinError::is_cancelled): the job was aborted before
///   a thread started it, or the runtime shut down first.
///
/// [`JoinHandle::abort`] cancels the job if no thread has started it; a
/// running closure cannot be interrupted. Dropping the handle detaches the
/// job. Inside `f`, [`Handle::current`] is this runtime, so `f` may spawn
/// tasks; they run in [`Class::NORMAL`] unless spawned with
/// [`spawn_in`].
///
/// ```
/// let rt = keel::Runtime::new().unwrap();
/// rt.block_on(async {
///     let digest = keel::spawn_blocking(|| {
///         // Something slow and synchronous.
///         (0..1_000_000u64).fold(0u64, |h, i| h.rotate_left(5) ^ i)
///     });
///     match digest.await {
///         Ok(digest) => println!("{digest:x}"),
///         Err(e) if e.is_rejected() => eprintln!("busy, try later: {e}"),
///         Err(e) => panic!("{e}"),
///     }
/// });
/// ```
///
/// # Panics
///
/// Outside a keel runtime; use [`Handle::spawn_blocking`] there.
#[track_caller]
pub fn spawn_blocking<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    Handle::current().spawn_blocking(f)
}

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
