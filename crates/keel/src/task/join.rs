//! `JoinHandle`: the right to a task's output, and to abort it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

use super::{Output, Panic, TaskId, TaskMeta};
use crate::loom::sync::atomic::Ordering;
use crate::loom::sync::Mutex;

/// An owned permission to await a spawned task's output.
///
/// Awaiting it yields `Ok(output)`, or a [`JoinError`] if the task panicked,
/// was cancelled (aborted, or dropped by runtime shutdown), or, for a job of
/// [`spawn_blocking`](crate::spawn_blocking), was rejected by a full pool.
///
/// Dropping a `JoinHandle` *detaches* the task: it keeps running and its
/// output is dropped when it finishes. Use [`JoinHandle::abort`] to stop it.
///
/// ```
/// let rt = keel::Runtime::builder().workers(1).build().unwrap();
/// let answer = rt.block_on(async { keel::spawn(async { 6 * 7 }).await });
/// assert_eq!(answer.unwrap(), 42);
/// ```
pub struct JoinHandle<T> {
    task: Option<async_task::FallibleTask<Output<T>, TaskMeta>>,
    /// A counted reference to the task: wakes it so that a worker notices
    /// an abort, and keeps `meta` valid.
    waker: Waker,
    meta: MetaRef,
    id: TaskId,
}

/// The task's metadata, which `FallibleTask` does not expose.
///
/// Invariant: it points into the allocation of the task that `waker`
/// refers to. `async_task` keeps that allocation, and the metadata inside
/// it, in place until the last reference (waker, task handle or runnable)
/// is gone, and the handle holds `waker` for as long as it holds this.
struct MetaRef(NonNull<TaskMeta>);

// SAFETY: `TaskMeta` is `Sync` (atomics and plain values), so sharing or
// sending a pointer to it across threads is as safe as sharing `&TaskMeta`;
// validity is the invariant above, which does not depend on the thread.
unsafe impl Send for MetaRef {}
// SAFETY: as for `Send`.
unsafe impl Sync for MetaRef {}

impl<T> JoinHandle<T> {
    pub(crate) fn new(task: async_task::Task<Output<T>, TaskMeta>, waker: Waker) -> JoinHandle<T> {
        let meta = task.metadata();
        let id = meta.id;
        let meta = MetaRef(NonNull::from(meta));
        JoinHandle {
            task: Some(task.fallible()),
            waker,
            meta,
            id,
        }
    }

    fn meta(&self) -> &TaskMeta {
        // SAFETY: by the invariant of `MetaRef`, the metadata stays in place
        // while `self.waker` lives, and `self` borrows `self.waker` for at
        // least as long as the returned reference.
        unsafe { self.meta.0.as_ref() }
    }

    /// The id of the task.
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// Asks the task to stop. If it is not running, it is dropped the next
    /// time a worker picks it up, without being polled again; if it is in
    /// the middle of a poll, that poll finishes first. Awaiting the handle
    /// then yields a [`JoinError`] for which [`JoinError::is_cancelled`]
    /// holds, unless the task had already completed. Aborting twice, or after completion, does nothing.
    pub fn abort(&self) {
        self.meta().aborted.store(true, Ordering::Release);
        self.waker.wake_by_ref();
    }

    /// Whether the task has finished: completed, panicked or been cancelled.
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|task| task.is_finished())
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.id;
        let task = self
            .task
            .as_mut()
            .expect("JoinHandle polled after completion");
        let output = match Pin::new(task).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Some(output)) => output.into_inner(),
            Poll::Ready(None) => Err(JoinError::cancelled(id)),
        };
        self.task = None;
        Poll::Ready(output.map_err(|error| error.with_id(id)))
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.detach();
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish()
    }
}

/// Why a task produced no output.
pub struct JoinError {
    id: Option<TaskId>,
    repr: Repr,
}

enum Repr {
    Cancelled,
    /// Behind a lock only so that `JoinError` is `Sync`.
    Panicked(Mutex<Panic>),
    /// Refused by the blocking pool; the reason says which limit, or which
    /// OS error stopped a thread from starting.
    Rejected(std::io::Error),
}

impl JoinError {
    pub(crate) fn cancelled(id: TaskId) -> JoinError {
        JoinError {
            id: Some(id),
            repr: Repr::Cancelled,
        }
    }

    pub(crate) fn panicked(panic: Panic) -> JoinError {
        JoinError {
            id: None,
            repr: Repr::Panicked(Mutex::new(panic)),
        }
    }

    pub(crate) fn rejected(id: TaskId, reason: std::io::Error) -> JoinError {
        JoinError {
            id: Some(id),
            repr: Repr::Rejected(reason),
        }
    }

    fn with_id(mut self, id: TaskId) -> JoinError {
        self.id = Some(id);
        self
    }

    /// The task was aborted, or dropped because its runtime shut down.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.repr, Repr::Cancelled)
    }

    /// The task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self.repr, Repr::Panicked(_))
    }

    /// The blocking pool refused the job, which never ran: its queue was
    /// full, or no pool thread could be started (see
    /// [`spawn_blocking`](crate::spawn_blocking)). The error's message
    /// names the limit or carries the OS error.
    pub fn is_rejected(&self) -> bool {
        matches!(self.repr, Repr::Rejected(_))
    }

    /// The id of the task that failed.
    pub fn id(&self) -> Option<TaskId> {
        self.id
    }

    /// The panic payload, to re-raise with [`std::panic::resume_unwind`].
    /// Returns `Err(self)` if the task did not panic.
    pub fn try_into_panic(self) -> Result<Panic, JoinError> {
        match self.repr {
            Repr::Panicked(payload) => Ok(payload
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner())),
            Repr::Cancelled | Repr::Rejected(_) => Err(self),
        }
    }

    fn panic_message(&self) -> Option<String> {
        let Repr::Panicked(payload) = &self.repr else {
            return None;
        };
        let payload = payload.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(text) = payload.downcast_ref::<&'static str>() {
            Some((*text).to_owned())
        } else {
            payload.downcast_ref::<String>().cloned()
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let task = match self.id {
            Some(id) => format!("task {id}"),
            None => "task".to_owned(),
        };
        match (&self.repr, self.panic_message()) {
            (Repr::Cancelled, _) => write!(f, "{task} was cancelled"),
            (Repr::Rejected(reason), _) => write!(f, "{task} was rejected: {reason}"),
            (Repr::Panicked(_), Some(message)) => write!(f, "{task} panicked: {message}"),
            (Repr::Panicked(_), None) => write!(f, "{task} panicked"),
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for JoinError {}

/// A rejected job's error keeps the kind of its reason (`ResourceBusy` for
/// a full pool, the OS error's kind when no thread could start); every
/// other `JoinError` becomes `ErrorKind::Other`.
impl From<JoinError> for std::io::Error {
    fn from(error: JoinError) -> std::io::Error {
        match &error.repr {
            Repr::Rejected(reason) => std::io::Error::new(reason.kind(), error),
            _ => std::io::Error::other(error),
        }
    }
}
