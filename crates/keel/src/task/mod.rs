//! Tasks: what the scheduler runs, and the handles users hold.
//!
//! A keel task is an [`async_task`] task whose metadata is a `TaskMeta`:
//! its id, its class, the time it was last scheduled (for the queue-delay
//! histogram) and its abort flag. `async_task` owns the allocation, the
//! reference counts and the waker protocol; keel adds only what is its own:
//!
//! - the future is wrapped in `Guarded`, which catches panics (they reach
//!   the [`JoinHandle`] as a panicked [`JoinError`], never the worker) and
//!   removes the task from the runtime's `registry::Registry` when the
//!   future is dropped;
//! - no user destructor runs inside `async_task`, where a panic would abort
//!   the process: `Guarded` drops the future, and `DropGuard` the output
//!   of a detached task, under `catch_unwind`;
//! - aborting sets the flag and wakes the task; a worker that picks up an
//!   aborted task drops its `Runnable` instead of polling it, which drops
//!   the future and resolves the `JoinHandle` to a cancelled [`JoinError`].
//!   `Guarded` checks the flag too, at the start of every poll: an abort
//!   that lands after the worker's check but before the poll begins finds
//!   the task already scheduled, so its wake changes nothing, and only
//!   the poll itself can still see it. (`async_task` publishes the waker's
//!   memory to the poll that follows, so the flag is visible there.)
//!
//! Dropping a [`JoinHandle`] detaches the task: it runs to completion and
//! its output is dropped. This is what users of other Rust runtimes expect.
//! A [`JoinSet`] owns a group of tasks instead: dropping it aborts them.

mod builder;
pub(crate) mod coop;
mod join;
mod join_set;
pub(crate) mod registry;
pub(crate) mod trace;
mod yield_now;

pub use builder::TaskBuilder;
pub use join::{JoinError, JoinHandle};
pub use join_set::JoinSet;
pub use yield_now::{yield_now, YieldNow};

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sched::Class;

/// The scheduler's unit of work: the right to poll one task once.
pub(crate) type Runnable = async_task::Runnable<TaskMeta>;

/// A task's identity, unique within its runtime and never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(pub(crate) u64);

impl TaskId {
    /// The id as a number (ids count up from 1 in spawn order).
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What keel stores beside every task. Read by any thread holding the
/// `Runnable` or the `JoinHandle`.
#[derive(Debug)]
pub(crate) struct TaskMeta {
    pub(crate) id: TaskId,
    pub(crate) class: Class,
    /// The name given at spawn, for stall reports.
    pub(crate) name: Option<Arc<str>>,
    /// Nanoseconds since the runtime's epoch at the last schedule. Written
    /// by whoever schedules the task, read by the worker that polls it.
    pub(crate) scheduled_at: AtomicU64,
    /// Set once by `JoinHandle::abort`; read by workers before polling,
    /// and by [`Guarded`] at the start of each poll.
    pub(crate) aborted: AtomicBool,
    /// Whether the task has a `runtime.spawn` span (see [`trace::attach`]),
    /// entered around each of its polls. The span itself lives beside the
    /// runtime, not here ([`trace`] says why); `false` (one branch to
    /// skip) when no subscriber wants it. Set before the task is first
    /// scheduled and cleared at most once, at that point, so `std`'s
    /// atomic (not modelled under loom) with relaxed loads suffices.
    pub(crate) has_span: std::sync::atomic::AtomicBool,
}

impl TaskMeta {
    /// The metadata of a task without a span (a blocking job's).
    pub(crate) fn new(id: TaskId, class: Class, now: u64) -> TaskMeta {
        TaskMeta::named(id, class, now, None, false)
    }

    pub(crate) fn named(
        id: TaskId,
        class: Class,
        now: u64,
        name: Option<Arc<str>>,
        has_span: bool,
    ) -> TaskMeta {
        TaskMeta {
            id,
            class,
            name,
            scheduled_at: AtomicU64::new(now),
            aborted: AtomicBool::new(false),
            has_span: std::sync::atomic::AtomicBool::new(has_span),
        }
    }

    pub(crate) fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// See `has_span`.
    #[inline]
    pub(crate) fn has_span(&self) -> bool {
        self.has_span.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for TaskMeta {
    /// The span goes with the task allocation: the metadata drops when the
    /// task has ended (completed, aborted or cancelled) and its last handle
    /// (`JoinHandle`, waker) is gone.
    fn drop(&mut self) {
        if self.has_span() {
            trace::detach(self);
        }
    }
}

/// A panic payload carried from a task to its `JoinHandle`.
pub(crate) type Panic = Box<dyn Any + Send + 'static>;

/// What a task stores for its `JoinHandle`: the output, or why there is
/// none.
pub(crate) type Output<T> = DropGuard<Result<T, JoinError>>;

/// Holds a value whose destructor must not unwind into `async_task`.
///
/// `async_task` drops a task's future and a detached task's output in its
/// own code, where a panic would abort the process. The guard drops the
/// value in place under `catch_unwind` instead, discarding the panic. It
/// holds the future inside [`Guarded`] and the output of every task.
pub(crate) struct DropGuard<T>(Option<T>);

impl<T> DropGuard<T> {
    pub(crate) fn new(value: T) -> DropGuard<T> {
        DropGuard(Some(value))
    }

    /// The value, now the caller's to drop.
    pub(crate) fn into_inner(mut self) -> T {
        self.0.take().expect("a guard holds its value until taken")
    }
}

impl<T> Drop for DropGuard<T> {
    fn drop(&mut self) {
        if self.0.is_some() {
            let _ = catch_unwind(AssertUnwindSafe(|| self.0 = None));
        }
    }
}

/// The future a keel task really runs: the user's future, with its panics
/// caught and its registry entry released when it is dropped.
///
/// `async_task` drops a task's future inside its own code (after the last
/// poll, when a task is aborted or cancelled), where a panic unwinding
/// would abort the process. So `Guarded` drops the user's future itself,
/// under `catch_unwind`, and a panicking destructor costs only its own
/// task: the panic is discarded and the task counts as finished.
pub(crate) struct Guarded<F> {
    /// Structurally pinned: the future is never moved out; the guard drops
    /// it in place, as pinning allows.
    future: DropGuard<F>,
    _entry: registry::Entry,
    meta: OwnMeta,
}

/// The metadata of the task whose future holds this pointer.
///
/// Invariant: it points at the metadata in the header of the task
/// allocation that stores the `Guarded` holding it. `async_task` keeps the
/// header in place until the allocation is freed, which happens only after
/// the future has been dropped; so the pointer is valid whenever the
/// future can run or be dropped.
struct OwnMeta(NonNull<TaskMeta>);

// SAFETY: `TaskMeta` is `Sync` (atomics and plain values), so a pointer to
// it may cross threads as `&TaskMeta` may; validity is the invariant above,
// which does not depend on the thread.
unsafe impl Send for OwnMeta {}

impl<F> Guarded<F> {
    /// `meta` must be the metadata of the task that will store this future
    /// (the reference `async_task` passes to the future's constructor).
    pub(crate) fn new(future: F, entry: registry::Entry, meta: &TaskMeta) -> Guarded<F> {
        Guarded {
            future: DropGuard::new(future),
            _entry: entry,
            meta: OwnMeta(NonNull::from(meta)),
        }
    }
}

impl<F: Future> Future for Guarded<F> {
    type Output = Output<F::Output>;

    // Always: its one caller is `async_task`'s `run`, and a call between
    // them costs every poll.
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Never reborrow `self` as `&Guarded`: a shared reference to the
        // wrapper covers the future's bytes, and creating one is a read of
        // them that invalidates every `&mut` the future holds into its own
        // state across an await (undefined behaviour on its next write; see
        // `tests/task_self_borrow.rs`). So the wrapper is taken as
        // `&mut` once, and each field is reached by a place projection
        // that touches that field alone.
        //
        // SAFETY: nothing is moved out of `this`: the metadata pointer is
        // copied, the future is either dropped in place or re-pinned, as
        // structural pinning requires.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: by the invariant of `OwnMeta`, the header outlives this
        // future, and the reference does not outlive this call. It is a
        // reference to the task's header, not into `this`.
        let meta = unsafe { this.meta.0.as_ref() };
        if meta.is_aborted() {
            // As in `DropGuard::drop`: a panicking destructor costs only
            // its own task. Assigning `None` drops the future where it
            // lies, never moving it.
            let guard = &mut this.future;
            let _ = catch_unwind(AssertUnwindSafe(|| guard.0 = None));
            if meta.has_span() {
                trace::release_waker(meta);
            }
            return Poll::Ready(DropGuard::new(Err(JoinError::cancelled(meta.id))));
        }
        let Some(future) = this.future.0.as_mut() else {
            // Only reachable if polled after its own `Drop`, which cannot be.
            return Poll::Pending;
        };
        // SAFETY: `future` is structurally pinned: the value inside the
        // guard is never moved out of the `Guarded` (`into_inner` is never
        // called on it; the guard's `Drop` and the abort above drop it in
        // place), neither `Guarded` nor `DropGuard` is `Unpin` unless `F`
        // is, and `Guarded` has no `Drop` impl of its own.
        let mut future = unsafe { Pin::new_unchecked(future) };
        let mut poll_once =
            |cx: &mut Context<'_>| catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx)));
        // A task with a span is polled inside it, through the same closure
        // (out of line: the common path stays as small as a task without
        // tracing).
        let polled = if meta.has_span() {
            trace::poll_in_span(meta, cx, &mut poll_once, |polled| {
                !matches!(polled, Ok(Poll::Pending))
            })
        } else {
            poll_once(cx)
        };
        let output = match polled {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(output)) => Ok(output),
            Err(panic) => Err(JoinError::panicked(panic)),
        };
        Poll::Ready(DropGuard::new(output))
    }
}
