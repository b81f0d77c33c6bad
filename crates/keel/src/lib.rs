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
//! - [`stats`]: per-worker state accounting and snapshots.
//! - [`time`]: `sleep`, `timeout`, `interval` on a timer wheel.
//! - [`wal`]: a group-commit log, [`wal::Log`], that acknowledges only
//!   durable records.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

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
pub use task::{yield_now, JoinError, JoinHandle, TaskId, YieldNow};

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

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
