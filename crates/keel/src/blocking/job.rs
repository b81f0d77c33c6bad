//! A blocking job as a task: the closure wrapped in a future that calls it
//! on its first poll, inside the same [`Guarded`] and [`JoinHandle`]
//! machinery as async tasks.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::sched::Class;
use crate::task::registry::Entry;
use crate::task::{DropGuard, Guarded, Runnable, TaskId, TaskMeta};
use crate::{Handle, JoinError, JoinHandle};

use super::pool::drop_jobs;

/// The closure as a future: calling it is its one and only poll.
struct Call<F>(Option<F>);

// The closure is moved out, never pinned: pinning `Call` pins nothing.
impl<F> Unpin for Call<F> {}

impl<F: FnOnce() -> R, R> Future for Call<F> {
    type Output = R;

    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<R> {
        let f = self.0.take().expect("a blocking job is polled once");
        Poll::Ready(f())
    }
}

/// A new job of `handle`'s runtime running `f`: the right to run it, for
/// the pool, and the handle to its output, for the caller.
///
/// The task is wrapped like an async task (so a panic in `f` reaches the
/// handle as [`JoinError::is_panic`], an abort before it starts cancels it,
/// and a panicking destructor of `f` or of its output is contained), but it
/// is not in the registry of live tasks: the pool's shutdown stops it.
pub(crate) fn new<F, R>(handle: &Handle, f: F) -> (Runnable, JoinHandle<R>)
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let shared = &handle.shared;
    let id = TaskId(shared.next_task_id());
    // Blocking jobs have no class; the field is read only by workers.
    let meta = TaskMeta::new(id, Class::NORMAL, shared.clock.now());
    // A job is scheduled once, by whoever creates it, and never woken
    // again: `Call` completes on its first poll, and a wake while it is
    // queued or running changes nothing. Should one come anyway, the job is
    // offered to the pool again. The runtime is held weakly, so a job
    // sitting in the queue does not keep its runtime alive.
    let runtime = Arc::downgrade(shared);
    let schedule = move |job: Runnable| {
        let Some(shared) = runtime.upgrade() else {
            return drop_jobs([job]);
        };
        let handle = Handle { shared };
        if let Err((job, _)) = handle.shared.blocking.submit(&handle, job) {
            drop_jobs([job]);
        }
    };
    let (job, task) = async_task::Builder::new().metadata(meta).spawn(
        move |meta| Guarded::new(Call(Some(f)), Entry::unregistered(), meta),
        schedule,
    );
    let waker = job.waker();
    (job, JoinHandle::new(task, waker))
}

/// A handle that resolves at once to a rejected [`JoinError`]: for a job
/// the pool refused (whose own task has been cancelled), under its id.
pub(crate) fn rejected<R: Send + 'static>(id: TaskId, reason: io::Error) -> JoinHandle<R> {
    let error = JoinError::rejected(id, reason);
    let (job, task) = async_task::Builder::new()
        .metadata(TaskMeta::new(id, Class::NORMAL, 0))
        .spawn(
            move |_| std::future::ready(DropGuard::new(Err(error))),
            // Run below, at once; it completes on that poll and is never
            // scheduled again.
            |_job: Runnable| {},
        );
    let waker = job.waker();
    job.run();
    JoinHandle::new(task, waker)
}
