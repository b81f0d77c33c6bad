//! `JoinSet`: a group of tasks awaited in the order they finish.

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::stream::{FuturesUnordered, Stream};

use super::{JoinError, JoinHandle, TaskId};
use crate::{Class, Handle};

/// A set of tasks spawned on a keel runtime, whose outputs are taken in
/// the order the tasks finish, not the order they were spawned.
///
/// Unlike a dropped [`JoinHandle`], which detaches its task, **dropping a
/// `JoinSet` aborts every task still in it**: the set owns its tasks, so
/// a request handler that fans work out and returns early (an error, a
/// timeout) does not leave the work running for nobody.
///
/// ```
/// use keel::task::JoinSet;
///
/// let rt = keel::Runtime::new().unwrap();
/// rt.block_on(async {
///     let mut set = JoinSet::new();
///     for i in 0..10u64 {
///         set.spawn(async move { i * i });
///     }
///     let mut sum = 0;
///     while let Some(result) = set.join_next().await {
///         sum += result.unwrap();
///     }
///     assert_eq!(sum, 285);
///     assert!(set.is_empty());
/// });
/// ```
pub struct JoinSet<T> {
    tasks: FuturesUnordered<JoinHandle<T>>,
}

impl<T> JoinSet<T> {
    /// An empty set.
    pub fn new() -> JoinSet<T> {
        JoinSet {
            tasks: FuturesUnordered::new(),
        }
    }

    /// Number of tasks in the set: spawned and not yet taken out by
    /// [`join_next`](Self::join_next) (a finished task stays in until then).
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the set holds no task.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Adds a task already spawned elsewhere; the set now owns it (it is
    /// aborted if the set is dropped before it is joined).
    pub fn insert(&mut self, task: JoinHandle<T>) -> TaskId {
        let id = task.id();
        self.tasks.push(task);
        id
    }

    /// Asks every task in the set to stop (see [`JoinHandle::abort`]).
    /// They stay in the set, and [`join_next`](Self::join_next) yields
    /// each one's outcome: cancelled, or its output if it had finished.
    pub fn abort_all(&self) {
        for task in self.tasks.iter() {
            task.abort();
        }
    }

    /// Aborts every task and waits until all have stopped, dropping their
    /// outcomes; the set is then empty.
    pub async fn shutdown(&mut self) {
        self.abort_all();
        while self.join_next().await.is_some() {}
    }

    /// Waits for the next task to finish and takes it out of the set:
    /// `Some(Ok(output))`, `Some(Err(_))` if it panicked or was cancelled,
    /// or `None` if the set is empty. Cancel-safe: dropping the future
    /// loses no outcome; the task stays in the set.
    pub async fn join_next(&mut self) -> Option<Result<T, JoinError>> {
        poll_fn(|cx| self.poll_join_next(cx)).await
    }

    /// The poll form of [`join_next`](Self::join_next).
    pub fn poll_join_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, JoinError>>> {
        Pin::new(&mut self.tasks).poll_next(cx)
    }
}

impl<T: Send + 'static> JoinSet<T> {
    /// Spawns `future` on the current runtime, in the calling task's class
    /// (see [`crate::spawn`]), into the set.
    ///
    /// # Panics
    ///
    /// Outside a keel runtime; use [`spawn_on`](Self::spawn_on) there.
    #[track_caller]
    pub fn spawn<F>(&mut self, future: F) -> TaskId
    where
        F: Future<Output = T> + Send + 'static,
    {
        self.insert(crate::spawn(future))
    }

    /// Spawns `future` on the current runtime in `class`, into the set.
    ///
    /// # Panics
    ///
    /// Outside a keel runtime, or if `class` does not exist in it.
    #[track_caller]
    pub fn spawn_in<F>(&mut self, class: Class, future: F) -> TaskId
    where
        F: Future<Output = T> + Send + 'static,
    {
        self.insert(crate::spawn_in(class, future))
    }

    /// Spawns `future` on `handle`'s runtime, into the set.
    #[track_caller]
    pub fn spawn_on<F>(&mut self, handle: &Handle, future: F) -> TaskId
    where
        F: Future<Output = T> + Send + 'static,
    {
        self.insert(handle.spawn(future))
    }
}

impl<T> Default for JoinSet<T> {
    fn default() -> Self {
        JoinSet::new()
    }
}

impl<T> Drop for JoinSet<T> {
    fn drop(&mut self) {
        self.abort_all();
    }
}

impl<T> fmt::Debug for JoinSet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinSet").field("len", &self.len()).finish()
    }
}
