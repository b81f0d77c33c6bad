//! The log's writer as a task on an io_uring runtime (see
//! [`Options::writer_on_ring`](super::Options::writer_on_ring)).
//!
//! # Why
//!
//! A writer thread costs every batch two crossings between threads: the
//! last record of a batch wakes the thread, and the thread's
//! acknowledgements wake the appenders' worker. On a CPU that the worker
//! and the thread share, each is a switch, and the closed loop of a log's
//! clients waits for both. As a task, the writer waits for records on the
//! worker that runs the appenders, and each batch's write, the zeros
//! written ahead with it and its `fdatasync` go to the worker's ring as
//! one linked chain (`io::ring_file`): the kernel runs the chain in its
//! own workers, and the completion is reaped by a worker at its next look
//! at the ring, as a socket's event is.
//!
//! # The same batches, the same guarantees
//!
//! The task runs the thread's steps (see `wal::writer`) with two changes:
//! the waits for records are futures ([`Shared::next_batch_async`]), and
//! a batch's write, zeros and sync are one chain. Their outcomes are
//! handled by the thread's own code: a failed or short write fails the
//! batch after cutting the segment back; failed zeros are best effort (the
//! chain's sync was then cancelled, so the batch is synced on its own); a
//! failed sync puts the segment back as it was and closes the log. A new
//! segment, which takes two `fsync`s, is made on the blocking pool, so
//! that no worker waits for the device. The rarer steps that follow a
//! failure (cutting a segment back and syncing it) run on the worker:
//! the log is failing then, and they are what the thread would do.
//!
//! # Lifetime
//!
//! The task holds the writer. If the runtime drops it before it ends (the
//! runtime shut down with the log open), the log closes with an error
//! and every queued append fails: nothing is acknowledged that was not
//! synced. [`Finished`] tells a closing thread when the task is done.

use std::io;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::append::Pending;
use super::error::Failure;
use super::lock;
use super::shared::{Gather, Shared};
use super::writer::{batch_bytes, frame_batch, BatchTimes, Current, StepError, Writer};
use crate::io::ring_file::{
    ring_worker, sync_on_ring, write_then_sync_on_ring, SyncKind, MAX_WRITE,
};
use crate::runtime::Handle;

/// How often a thread waiting for the task looks whether its runtime is
/// stopping.
const STOPPING_CHECK: Duration = Duration::from_millis(10);

/// Set once the writer task has ended, however it ended.
#[derive(Debug, Default)]
pub(crate) struct Finished {
    done: Mutex<bool>,
    ended: Condvar,
}

impl Finished {
    fn set(&self) {
        *lock(&self.done) = true;
        self.ended.notify_all();
    }

    /// Blocks until the task has ended, or until its runtime is stopping:
    /// a runtime that stops drops its tasks, and a thread that waits for
    /// one of them while the runtime drops them (the last handle of the
    /// log dropped with another task) would wait for itself.
    pub(crate) fn wait(&self, runtime: &Weak<crate::sched::Shared>) {
        let mut done = lock(&self.done);
        while !*done {
            let running = runtime
                .upgrade()
                .is_some_and(|shared| !shared.is_stopping());
            if !running {
                return;
            }
            done = match self.ended.wait_timeout(done, STOPPING_CHECK) {
                Ok((done, _)) => done,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

/// Closes the log with an error if the task is dropped before its end,
/// and sets [`Finished`] in any case.
struct EndGuard {
    shared: Arc<Shared>,
    finished: Arc<Finished>,
    ended: bool,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        if !self.ended {
            self.shared.close_by_error(Failure::new(
                "the runtime that ran the log's writer stopped first",
                io::Error::other("writer task dropped"),
            ));
        }
        self.finished.set();
    }
}

/// Spawns `writer` as a task on `handle`'s runtime.
pub(crate) fn spawn(writer: Writer, handle: &Handle) -> Arc<Finished> {
    let finished = Arc::new(Finished::default());
    let mut guard = EndGuard {
        shared: writer.shared.clone(),
        finished: finished.clone(),
        ended: false,
    };
    // A refused spawn drops the future, and the guard closes the log.
    drop(handle.spawn(async move {
        writer.run_on_ring().await;
        guard.ended = true;
        drop(guard);
    }));
    finished
}

impl Writer {
    /// The task's body: [`Writer::run`], with the waits and the batches'
    /// IO on the ring.
    async fn run_on_ring(mut self) {
        let mut batch = Vec::new();
        let mut gather = Gather::Now;
        while self.shared.next_batch_async(gather, &mut batch).await {
            let records = batch.len();
            let started = Instant::now();
            if let Err(fatal) = self.commit_on_ring(&mut batch).await {
                self.shared.close_by_error(fatal);
                return;
            }
            gather = self.gather(records, started);
        }
        self.trim();
    }

    /// [`Writer::commit`] with the write, the zeros and the sync linked on
    /// the ring, and a new segment made on the blocking pool.
    async fn commit_on_ring(&mut self, batch: &mut Vec<Pending>) -> Result<(), Failure> {
        let bytes = batch_bytes(batch);
        if self.needs_new_segment(bytes) {
            if let Err(error) = self.roll_on_pool().await {
                return self.fail(batch, error);
            }
        }
        let mut buf = Vec::new();
        if bytes > MAX_WRITE as u64 || ring_worker().is_none() {
            // More than one ring write takes, or not on a worker of a ring
            // (which a task of the runtime that spawned it always is): the
            // thread's way, on this worker.
            return self.commit(batch, &mut buf);
        }
        frame_batch(batch, &mut buf);
        let offset = self.segment.len;
        let end = offset + bytes;
        let zeros = self.zeros_ahead(end);
        let target = zeros.as_ref().map(|(z, at)| at + z.len() as u64);
        let mut writes = vec![(buf, offset)];
        writes.extend(zeros);
        let started = Instant::now();
        let chain = write_then_sync_on_ring(&self.segment.file, writes, SyncKind::Data)
            .expect("checked by ring_worker");
        let written = chain.await;
        let mut results = written.writes.into_iter();
        match results.next() {
            Some(Ok(n)) if n as u64 == bytes => {}
            Some(Ok(n)) => {
                let cause = io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("the write took {n} of {bytes} bytes"),
                );
                return self.write_failed(batch, offset, cause);
            }
            Some(Err(cause)) => return self.write_failed(batch, offset, cause),
            None => unreachable!("a chain reports each of its writes"),
        }
        let mut sync = written.sync;
        if let Some(target) = target {
            let zeroed =
                matches!(results.next(), Some(Ok(n)) if offset + bytes + n as u64 == target);
            if zeroed {
                self.segment.prepared = target;
            } else {
                // Best effort, as on the thread; the chain's sync was
                // cancelled with the zeros, so the batch is synced alone.
                self.segment.prepared = end;
                sync = self.sync_alone().await;
            }
        }
        if let Err(cause) = sync {
            return self.sync_failed(batch, offset, cause);
        }
        let times = BatchTimes {
            write: Duration::ZERO,
            sync: started.elapsed(),
        };
        self.publish(batch, bytes, times);
        Ok(())
    }

    /// An `fdatasync` of the segment on its own, on the ring.
    async fn sync_alone(&mut self) -> io::Result<()> {
        match sync_on_ring(&self.segment.file, SyncKind::Data) {
            Some(sync) => sync.await,
            None => self.disk.sync_data(&self.segment.file),
        }
    }

    /// [`Writer::roll`] on the blocking pool: the new segment's file is
    /// created, written and synced, and the directory synced, there.
    async fn roll_on_pool(&mut self) -> Result<(), StepError> {
        self.trim();
        let disk = std::mem::replace(&mut self.disk, Box::new(super::disk::RealDisk));
        let dir = self.dir.clone();
        let first_lsn = self.next_lsn;
        let made = crate::blocking::unblock(move || {
            let mut disk = disk;
            let created = Current::create(&mut *disk, &dir, first_lsn);
            (disk, created)
        })
        .await;
        let next = match made {
            Ok((disk, created)) => {
                self.disk = disk;
                created?
            }
            // The pool refused the job (it is shutting down): the disk is
            // the operating system's, which the stand-in is too.
            Err(cause) => {
                return Err(StepError::Recoverable(Failure::new(
                    "starting a new segment on the blocking pool failed".to_owned(),
                    cause,
                )))
            }
        };
        lock(&self.shared.segments).push(next.span());
        self.segment = next;
        Ok(())
    }
}
