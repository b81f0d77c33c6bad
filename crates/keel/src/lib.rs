//! keel: an async runtime for network servers that stays responsive under
//! any mix of load.
//!
//! Tasks run in *classes* that share the workers by *shares* of their
//! polling time (each poll is charged its wall time on its worker), so
//! bulk work cannot starve the control plane; every worker
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
//! - [`task`]: tasks on `async-task`, [`JoinHandle`], [`yield_now`],
//!   [`task::JoinSet`].
//! - [`net`]: TCP, UDP and Unix sockets, name lookups on the blocking
//!   pool; TCP input delivered in batches rather than per packet when
//!   asked ([`net::batch`]).
//! - [`stats`]: per-worker state accounting and snapshots.
//! - `util`: the nanosecond clock and the random generator the rest
//!   shares.
//! - [`time`]: `sleep`, `timeout`, `interval` on a timer wheel.
//! - [`wal`]: a group-commit log, [`wal::Log`], that acknowledges only
//!   durable records.
//! - [`blocking`]: the pool for blocking closures, [`spawn_blocking`] and
//!   [`blocking::unblock`].
//! - [`fs`]: files, on the blocking pool.
//! - [`compat`]: other crates' traits on keel: hyper 1.x's runtime
//!   traits (feature `hyper`), tokio's IO traits (feature `tokio-io`).
//! - `admin` (feature `admin`): the built-in admin endpoint, `/metrics`,
//!   `/stats`, `/status` and `/health` over HTTP, in the urgent class.
//! - [`signal`]: `SIGTERM`, Ctrl-C and other signals as futures, for a
//!   graceful shutdown.
//! - [`macro@main`], [`macro@test`], [`select!`], [`join!`] (feature
//!   `macros`, on by default).
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `macros` | on | `#[keel::main]`, `#[keel::test]`, `select!`, `join!` (builds `syn`) |
//! | `hyper` | off | `compat::hyper`: hyper 1.x's runtime traits, so hyper, hyper-util, axum and tonic services serve on keel |
//! | `tokio-io` | off | `compat::tokio`: tokio's `AsyncRead`/`AsyncWrite` for keel's streams, with no tokio runtime (tokio-rustls, tokio-util codecs) |
//! | `admin` | off | the admin endpoint |

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
pub mod signal;
pub mod stats;
pub mod task;
pub mod time;
pub(crate) mod util;
#[cfg(unix)]
pub mod wal;

pub use runtime::{Builder, Handle, Runtime, SpinPolicy};

/// Waits on several futures at once: `select!` takes the first to finish
/// (each branch must be fused: `FutureExt::fuse`), `select_biased!` tries
/// the branches in order, `join!` waits for all. These are
/// `futures-util`'s macros, re-exported (feature `macros`).
///
/// ```
/// use futures_util::FutureExt;
/// use std::time::Duration;
///
/// # let rt = keel::Runtime::new().unwrap();
/// # rt.block_on(async {
/// let (a, b) = keel::join!(async { 1 }, async { 2 });
/// assert_eq!(a + b, 3);
/// let winner = keel::select! {
///     _ = keel::time::sleep(Duration::from_secs(60)).fuse() => "timer",
///     _ = async {}.fuse() => "ready",
/// };
/// assert_eq!(winner, "ready");
/// # });
/// ```
#[cfg(feature = "macros")]
pub use futures_util::{join, select, select_biased};
/// Runs `async fn main` on a keel runtime: `#[keel::main(workers = 2,
/// spin = "short", class = "urgent")]`, every option optional (feature
/// `macros`, on by default).
///
/// - `workers = N`: worker threads (default: the available CPUs);
/// - `spin = "none" | "short" | "medium" | "long"` (default `"none"`);
/// - `class = "name"`: run the body as a task in that class rather than
///   on the main thread; the body must then be `Send + 'static`.
///
/// ```
/// #[keel::main(workers = 2)]
/// async fn main() -> std::io::Result<()> {
///     let listener = keel::net::TcpListener::bind("127.0.0.1:0")?;
///     let port = keel::spawn(async move { listener.local_addr().map(|a| a.port()) });
///     assert_ne!(port.await.unwrap()?, 0);
///     Ok(())
/// }
/// # // The doctest harness calls `main` itself when it is defined.
/// ```
///
/// The expansion builds the runtime with [`Runtime::builder`] and the
/// options and calls [`Runtime::block_on`]; it panics if the runtime
/// cannot be built.
#[cfg(feature = "macros")]
pub use keel_macros::main;
/// Runs an `async fn` test on a keel runtime of its own: `#[keel::test]`
/// or `#[keel::test(workers = 1, spin = "short", class = "bulk")]`, with
/// the options of [`macro@main`] (feature `macros`).
///
/// ```
/// #[keel::test(workers = 1)]
/// async fn answers() {
///     assert_eq!(keel::spawn(async { 42 }).await.unwrap(), 42);
/// }
/// ```
#[cfg(feature = "macros")]
pub use keel_macros::test;
pub use sched::{Class, LanePriority, UrgentLane, DEFAULT_WORKER_NICE, MAX_CLASSES};
pub use task::{yield_now, JoinError, JoinHandle, TaskBuilder, TaskId, YieldNow};

use std::future::Future;

/// Spawns a task on the current runtime, in the class of the calling task
/// (or [`Class::NORMAL`] from `block_on`).
///
/// # Panics
///
/// Outside a keel runtime; use [`Handle::spawn`] there.
#[track_caller]
#[inline]
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
