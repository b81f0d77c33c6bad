//! `Unblock`: a blocking job whose caller waits for room in the pool.

use std::fmt;
use std::future::Future;
use std::io;
use std::panic::resume_unwind;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::job;
use super::pool::{drop_jobs, Offer};
use crate::task::{Runnable, TaskId};
use crate::{Handle, JoinError, JoinHandle};

/// The future of [`unblock`](super::unblock): offers its job to the pool,
/// waits in line while the pool is full, then waits for the job's output.
///
/// Dropping it before the job has been accepted leaves the line and drops
/// the closure unrun; dropping it after aborts the job, which cancels it if
/// no thread has started it yet; a running closure cannot be interrupted
/// and runs to its end, its output dropped.
///
/// The line is strictly first come, first served: a future that waits in
/// it and is then kept without being polled (say, the losing branch of a
/// `select` that is not dropped) keeps its place, and the callers behind
/// it wait until it is polled or dropped. Drop such futures.
#[must_use = "futures do nothing unless polled; the job is offered to the pool on the first poll"]
pub struct Unblock<R> {
    handle: Handle,
    /// The job, until the pool accepts it.
    job: Option<Runnable>,
    /// The job's output; `None` once it was taken or the job was refused.
    task: Option<JoinHandle<R>>,
    /// This caller's place in line while the pool is full.
    ticket: Option<u64>,
    id: TaskId,
}

impl<R: Send + 'static> Unblock<R> {
    pub(crate) fn new<F>(handle: Handle, f: F) -> Unblock<R>
    where
        F: FnOnce() -> R + Send + 'static,
    {
        let (job, task) = job::new(&handle, f);
        Unblock {
            handle,
            id: task.id(),
            job: Some(job),
            task: Some(task),
            ticket: None,
        }
    }
}

impl<R> Future for Unblock<R> {
    type Output = io::Result<R>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let this = &mut *self;
        if let Some(job) = this.job.take() {
            let pool = &this.handle.shared.blocking;
            match pool.submit_or_wait(&this.handle, job, &mut this.ticket, cx.waker()) {
                Offer::Accepted => {}
                Offer::Waiting(job) => {
                    this.job = Some(job);
                    return Poll::Pending;
                }
                Offer::Refused(job, refusal) => {
                    drop_jobs([job]);
                    this.task = None;
                    let error = match refusal.into_reason() {
                        Some(reason) => JoinError::rejected(this.id, reason),
                        None => JoinError::cancelled(this.id),
                    };
                    return Poll::Ready(Err(error.into()));
                }
            }
        }
        let task = this.task.as_mut().expect("Unblock polled after completion");
        let output = match Pin::new(task).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(output) => output,
        };
        this.task = None;
        match output {
            Ok(value) => Poll::Ready(Ok(value)),
            Err(error) => match error.try_into_panic() {
                // The closure's panic is the caller's, as if it had called
                // the closure itself.
                Ok(panic) => resume_unwind(panic),
                Err(error) => Poll::Ready(Err(error.into())),
            },
        }
    }
}

impl<R> Drop for Unblock<R> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.handle.shared.blocking.cancel_wait(ticket);
        }
        if let Some(job) = self.job.take() {
            drop_jobs([job]);
        } else if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl<R> fmt::Debug for Unblock<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Unblock")
            .field("id", &self.id)
            .field("accepted", &self.job.is_none())
            .field("waiting", &self.ticket.is_some())
            .finish_non_exhaustive()
    }
}
