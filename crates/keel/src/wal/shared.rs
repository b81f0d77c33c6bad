//! [`Shared`]: the state that appending tasks, the writer thread and
//! readers of the log touch, and the hand-off between them.
//!
//! # Who touches what
//!
//! - `queue` (one lock): appenders push records and read `closed`; the
//!   writer swaps the whole pending list out, sets `closed` on a fatal
//!   error, and records whether it is waiting; `Log::close` sets `closed`.
//! - `segments` (its own lock): only the writer changes it, after a batch
//!   is durable and when it starts a segment; `Log::iter` copies it.
//! - `counters`: the writer adds to them; appenders count refused appends;
//!   `Log::stats` reads them.
//!
//! # The hand-off
//!
//! 1. An appender pushes its record under the lock. If the writer is
//!    waiting for work (or waiting out a commit delay and the batch is now
//!    full), the appender marks it busy and, after unlocking, notifies it:
//!    at most one notification per batch, not one per record.
//! 2. The writer, woken, swaps the pending list with its own empty one and
//!    writes it without holding the lock, so appends go on while it syncs;
//!    those form the next batch.
//! 3. Once `closed` is set, appenders are refused; the writer drains what
//!    was queued before, then stops (unless a fatal error set it: then the
//!    writer fails what is queued at once).
//!
//! A writer thread waits on the condition variable; a writer that runs as
//! a task (see `wal::ring_writer`) leaves its waker in the queue, under
//! the same lock, and a notification wakes whichever is there.

use std::future::{poll_fn, Future};
use std::path::PathBuf;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use super::append::{Append, Pending};
use super::error::{self, Failure};
use super::{lock, LogStats, Lsn};
use crate::sched::wake_batch;

/// Everything the log's handles and its writer thread share.
pub(crate) struct Shared {
    pub(crate) queue: Mutex<Queue>,
    /// The writer waits on this for records, and for the end of a delay.
    pub(crate) wake: Condvar,
    /// The durable extent of every segment, in LSN order.
    pub(crate) segments: Mutex<Vec<SegmentSpan>>,
    pub(crate) counters: Counters,
    /// The most bytes the writer takes into one batch.
    pub(crate) batch_limit: usize,
}

/// The records waiting for the writer, and whether the log is closed.
pub(crate) struct Queue {
    pub(crate) pending: Vec<Pending>,
    /// Bytes (frames and data) in `pending`.
    pub(crate) pending_bytes: usize,
    /// Set once; appends are refused from then on.
    pub(crate) closed: Option<Closed>,
    /// What the writer is doing, so appenders notify it only when needed.
    writer: WriterState,
    /// While the writer delays: the pending count that ends the delay.
    target: usize,
    /// The waker of a writer that runs as a task, while it waits.
    task: Option<Waker>,
}

/// How long the writer lets a batch grow before writing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gather {
    /// Write what is pending at once.
    Now,
    /// Wait this long after the first record (a fixed commit delay).
    Delay(Duration),
    /// Wait until `target` records are pending, or until `until`,
    /// whichever is first.
    Regroup {
        /// Records queued before the last batch was answered, plus that
        /// batch's size: the appenders it answered are expected back.
        target: usize,
        /// When the wait ends in any case.
        until: Instant,
    },
}

/// Why the log no longer takes appends.
#[derive(Debug, Clone)]
pub(crate) enum Closed {
    /// `Log::close` or the last handle dropped.
    ByUser,
    /// An IO error after which the log could not go on.
    ByError(Failure),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriterState {
    /// Writing or about to take a batch: no need to notify it.
    Busy,
    /// Waiting for a record.
    Idle,
    /// Waiting out the commit delay; notify it once a batch is full.
    Delaying,
}

/// What is durable in one segment file.
#[derive(Debug, Clone)]
pub(crate) struct SegmentSpan {
    pub(crate) path: PathBuf,
    /// The LSN of its first record.
    pub(crate) first_lsn: u64,
    /// Bytes of header and whole, synced records.
    pub(crate) len: u64,
    /// Records in those bytes.
    pub(crate) records: u64,
}

/// The figures behind [`LogStats`].
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) appends: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) failed_appends: AtomicU64,
    /// Nanoseconds in the durable batches' writes and syncs.
    pub(crate) write_ns: AtomicU64,
    pub(crate) sync_ns: AtomicU64,
    /// The last durable LSN, 0 for none.
    pub(crate) last_lsn: AtomicU64,
    /// Regroup waits begun, and those that their deadline ended.
    pub(crate) regroups: AtomicU64,
    pub(crate) regroups_expired: AtomicU64,
}

impl Shared {
    /// Shared state for a log whose durable segments are `segments`.
    pub(crate) fn new(segments: Vec<SegmentSpan>, last_lsn: u64, batch_limit: usize) -> Shared {
        let counters = Counters::default();
        counters.last_lsn.store(last_lsn, Ordering::Relaxed);
        Shared {
            queue: Mutex::new(Queue {
                pending: Vec::new(),
                pending_bytes: 0,
                closed: None,
                writer: WriterState::Busy,
                target: usize::MAX,
                task: None,
            }),
            wake: Condvar::new(),
            segments: Mutex::new(segments),
            counters,
            batch_limit: batch_limit.max(1),
        }
    }

    /// Queues a framed record for the writer and returns its future, or a
    /// failed future if the log is closed.
    pub(crate) fn push(&self, framed: Vec<u8>) -> Append {
        let (pending, append) = Pending::new(framed);
        let (notify, task) = {
            let mut queue = lock(&self.queue);
            if let Some(closed) = &queue.closed {
                let error = closed_error(closed);
                drop(queue);
                self.count_failed(1);
                // The queued form of the record is never used.
                drop((pending, append));
                return Append::failed(error);
            }
            queue.pending_bytes += pending.framed.len();
            queue.pending.push(pending);
            let notify = match queue.writer {
                WriterState::Idle => true,
                WriterState::Delaying => {
                    queue.pending_bytes >= self.batch_limit || queue.pending.len() >= queue.target
                }
                WriterState::Busy => false,
            };
            if notify {
                queue.writer = WriterState::Busy;
            }
            (notify, if notify { queue.task.take() } else { None })
        };
        if notify {
            self.wake.notify_one();
        }
        if let Some(task) = task {
            task.wake();
        }
        append
    }

    /// Records queued for the writer now.
    pub(crate) fn pending_len(&self) -> usize {
        lock(&self.queue).pending.len()
    }

    /// Closes the log to appends; the writer drains what is queued and
    /// stops. Does nothing if it is already closed.
    pub(crate) fn close_by_user(&self) {
        let task = {
            let mut queue = lock(&self.queue);
            if queue.closed.is_none() {
                queue.closed = Some(Closed::ByUser);
            }
            queue.task.take()
        };
        self.wake.notify_one();
        if let Some(task) = task {
            task.wake();
        }
    }

    /// Closes the log after `failure` and fails every queued record. Only
    /// the writer calls this, and it stops afterwards.
    pub(crate) fn close_by_error(&self, failure: Failure) {
        let pending = {
            let mut queue = lock(&self.queue);
            queue.closed = Some(Closed::ByError(failure.clone()));
            queue.pending_bytes = 0;
            std::mem::take(&mut queue.pending)
        };
        self.count_failed(pending.len());
        wake_batch::together(|| {
            for record in &pending {
                record.complete(Err(failure.closed_error()));
            }
        });
    }

    /// Why the log is closed, if it is.
    pub(crate) fn closed(&self) -> Option<Closed> {
        lock(&self.queue).closed.clone()
    }

    /// Waits for records and moves the next batch into `batch` (which the
    /// writer passes empty): everything pending, up to the batch limit
    /// (and at least one record), once `gather` says the batch has grown
    /// enough or the pending records fill a batch.
    ///
    /// Returns `false` once the log is closed and nothing is left to write.
    pub(crate) fn next_batch(&self, gather: Gather, batch: &mut Vec<Pending>) -> bool {
        debug_assert!(batch.is_empty());
        let mut queue = lock(&self.queue);
        // A regroup waits for its target from the start, not from the
        // first returning record: the appenders come back one by one, and
        // a writer woken by the first would only go back to sleep for the
        // rest, a wake-up and two switches per batch on the CPU the
        // appenders' worker may share.
        if let Gather::Regroup { target, until } = gather {
            if target > queue.pending.len() {
                self.counters.regroups.fetch_add(1, Ordering::Relaxed);
                let expired;
                (queue, expired) = self.gather(queue, target, Some(until));
                if expired {
                    self.counters
                        .regroups_expired
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        while queue.pending.is_empty() {
            if queue.closed.is_some() {
                return false;
            }
            queue.writer = WriterState::Idle;
            queue = wait(&self.wake, queue);
        }
        if let Gather::Delay(delay) = gather {
            // A delay too long to add to an instant waits for a full batch.
            let deadline = Instant::now().checked_add(delay);
            queue = self.gather(queue, usize::MAX, deadline).0;
        }
        self.take_batch(&mut queue, batch);
        true
    }

    /// [`next_batch`](Self::next_batch) for a writer that runs as a task:
    /// the same batches, waited for without blocking the thread.
    pub(crate) async fn next_batch_async(&self, gather: Gather, batch: &mut Vec<Pending>) -> bool {
        debug_assert!(batch.is_empty());
        if let Gather::Regroup { target, until } = gather {
            if target > self.pending_len() {
                self.counters.regroups.fetch_add(1, Ordering::Relaxed);
                if self.gather_async(target, Some(until)).await {
                    self.counters
                        .regroups_expired
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let open = poll_fn(|cx| {
            let mut queue = lock(&self.queue);
            if !queue.pending.is_empty() {
                return Poll::Ready(true);
            }
            if queue.closed.is_some() {
                return Poll::Ready(false);
            }
            queue.writer = WriterState::Idle;
            queue.task = Some(cx.waker().clone());
            Poll::Pending
        })
        .await;
        if !open {
            return false;
        }
        if let Gather::Delay(delay) = gather {
            let deadline = Instant::now().checked_add(delay);
            self.gather_async(usize::MAX, deadline).await;
        }
        self.take_batch(&mut lock(&self.queue), batch);
        true
    }

    /// [`gather`](Self::gather) for a writer that runs as a task; returns
    /// whether the deadline ended the wait.
    async fn gather_async(&self, target: usize, deadline: Option<Instant>) -> bool {
        let mut timer = pin!(deadline.map(crate::time::sleep_until));
        poll_fn(|cx| {
            let mut queue = lock(&self.queue);
            if self.gathered(&queue, target) {
                queue.target = usize::MAX;
                return Poll::Ready(false);
            }
            if let Some(timer) = timer.as_mut().as_pin_mut() {
                if timer.poll(cx).is_ready() {
                    queue.target = usize::MAX;
                    return Poll::Ready(true);
                }
            }
            queue.target = target;
            queue.writer = WriterState::Delaying;
            queue.task = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Whether a gathering writer is done waiting: `target` records are
    /// pending, the pending records fill a batch, or the log is closed.
    fn gathered(&self, queue: &Queue, target: usize) -> bool {
        queue.pending.len() >= target
            || queue.pending_bytes >= self.batch_limit
            || queue.closed.is_some()
    }

    /// Moves the next batch out of `queue` into `batch`: everything
    /// pending, up to the batch limit (and at least one record).
    fn take_batch(&self, queue: &mut Queue, batch: &mut Vec<Pending>) {
        queue.writer = WriterState::Busy;
        queue.task = None;
        if queue.pending_bytes <= self.batch_limit {
            std::mem::swap(&mut queue.pending, batch);
            queue.pending_bytes = 0;
        } else {
            let mut bytes = 0;
            let mut count = 0;
            for record in &queue.pending {
                let len = record.framed.len();
                if count > 0 && bytes + len > self.batch_limit {
                    break;
                }
                bytes += len;
                count += 1;
            }
            batch.extend(queue.pending.drain(..count));
            queue.pending_bytes -= bytes;
        }
    }

    /// Waits, as `Delaying`, until `target` records are pending, the
    /// pending records fill a batch, the log closes, or `deadline` passes
    /// (`None`: never). The `bool` says whether the deadline ended it.
    fn gather<'a>(
        &self,
        mut queue: MutexGuard<'a, Queue>,
        target: usize,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, Queue>, bool) {
        queue.target = target;
        let mut expired = false;
        while !self.gathered(&queue, target) {
            queue.writer = WriterState::Delaying;
            queue = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        expired = true;
                        break;
                    }
                    wait_timeout(&self.wake, queue, left)
                }
                None => wait(&self.wake, queue),
            };
        }
        queue.target = usize::MAX;
        (queue, expired)
    }

    /// Whether the writer waits for more records without wanting to hear
    /// of each one (it is gathering a batch).
    #[cfg(test)]
    pub(crate) fn writer_gathering(&self) -> bool {
        lock(&self.queue).writer == WriterState::Delaying
    }

    /// Counts appends that resolved with an error.
    pub(crate) fn count_failed(&self, n: usize) {
        self.counters
            .failed_appends
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A snapshot of the counters.
    pub(crate) fn stats(&self) -> LogStats {
        let c = &self.counters;
        LogStats {
            appends: c.appends.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            failed_appends: c.failed_appends.load(Ordering::Relaxed),
            write_time: Duration::from_nanos(c.write_ns.load(Ordering::Relaxed)),
            sync_time: Duration::from_nanos(c.sync_ns.load(Ordering::Relaxed)),
            last_lsn: Lsn::new(c.last_lsn.load(Ordering::Acquire)),
            segments: lock(&self.segments).len(),
            regroups: c.regroups.load(Ordering::Relaxed),
            regroups_expired: c.regroups_expired.load(Ordering::Relaxed),
            // Where the writer runs is the log's to say (`Log::stats`).
            writer_on_ring: false,
        }
    }
}

/// The error for an append to a log closed for `closed`.
pub(crate) fn closed_error(closed: &Closed) -> std::io::Error {
    match closed {
        Closed::ByUser => error::closed(),
        Closed::ByError(failure) => failure.closed_error(),
    }
}

fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar
        .wait(guard)
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> MutexGuard<'a, T> {
    match condvar.wait_timeout(guard, timeout) {
        Ok((guard, _)) => guard,
        Err(poisoned) => poisoned.into_inner().0,
    }
}
