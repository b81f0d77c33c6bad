//! [`Log`]: the handle tasks append through, and [`LogStats`].

use std::fmt;
use std::fs;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::Duration;

use super::append::Append;
use super::dirlock::DirLock;
use super::disk::{Disk, RealDisk};
use super::error::{self, context, Failure};
use super::format;
use super::iter::Iter;
use super::recovery::{recover, Recovery};
use super::repair;
use super::ring_writer;
use super::shared::{closed_error, Closed, Shared};
use super::writer::{Current, Writer};
use super::{lock, Lsn, Options};

/// The name of every log's writer thread.
pub const WRITER_THREAD_NAME: &str = "keel-wal";

/// A group-commit, append-only log of records in a directory.
///
/// Any number of tasks (on keel or any other executor, or plain threads)
/// append records; one writer thread writes all the records that are
/// pending at once and makes them durable with a single `fdatasync`, and
/// each append's future resolves with the record's [`Lsn`] only then. See
/// the [module docs](super) for the format and the guarantees.
///
/// `Log` is a cheap handle: clones share one log and one writer (a
/// thread, or a task with [`Options::writer_on_ring`]).
/// The log closes when [`close`](Log::close) is called on any handle, or
/// when the last handle is dropped; either way the records already
/// appended are written and synced first, and the caller blocks until
/// they are (up to one `fdatasync`). Close or drop the last handle where
/// blocking is fine, not in the middle of a latency-critical task.
///
/// ```
/// use keel::wal::{Log, Options};
///
/// let dir = std::env::temp_dir().join(format!("keel-wal-doc-{}", std::process::id()));
/// let rt = keel::Runtime::builder().workers(2).build().unwrap();
/// let log = Log::open(&dir, Options::default()).unwrap();
/// rt.block_on(async {
///     let first = log.append(b"hello").await.unwrap();
///     let second = log.append(b"world").await.unwrap();
///     assert_eq!((first.get(), second.get()), (1, 2));
/// });
/// let records: Vec<_> = log.iter().unwrap().map(|r| r.unwrap().data).collect();
/// assert_eq!(records, [b"hello".to_vec(), b"world".to_vec()]);
/// log.close().unwrap();
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
#[derive(Clone)]
pub struct Log {
    inner: Arc<Inner>,
}

/// What all handles of one log share; dropping it closes the log.
struct Inner {
    shared: Arc<Shared>,
    writer: WriterHandle,
    recovery: Recovery,
    max_record: usize,
    dir: PathBuf,
}

/// Where the writer runs, and how a closing thread waits for its end.
enum WriterHandle {
    Thread {
        /// The writer thread, until it is joined. Held locked while
        /// joining, so a second `close` waits for the first.
        join: Mutex<Option<JoinHandle<()>>>,
        /// The writer thread's id, known without the lock.
        id: ThreadId,
    },
    /// A task on an io_uring runtime (see `wal::ring_writer`).
    Task {
        finished: Arc<ring_writer::Finished>,
        /// The runtime that runs it.
        runtime: std::sync::Weak<crate::sched::Shared>,
    },
}

/// Counters of a [`Log`] since it was opened, from [`Log::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogStats {
    /// Records made durable (appends that resolved with an LSN).
    pub appends: u64,
    /// Bytes of record data made durable (without frames and headers).
    pub bytes: u64,
    /// Batches made durable: one `write` and one `fdatasync` each. With
    /// many concurrent appends this is far below `appends`.
    pub batches: u64,
    /// Appends that resolved with an error: refused (too large, log
    /// closed) or in a batch that failed.
    pub failed_appends: u64,
    /// Time the writer spent writing the durable batches (their `pwrite`,
    /// and the zeros written ahead with some of them).
    pub write_time: Duration,
    /// Time the writer spent in the durable batches' `fdatasync`s: with
    /// `batches`, what a sync of this log takes on its disk, beside what
    /// a batch's whole cycle takes (the appenders' round trips, the
    /// wakes).
    pub sync_time: Duration,
    /// The last durable LSN, counting records found when the log was
    /// opened; `None` for an empty log.
    pub last_lsn: Option<Lsn>,
    /// Segment files in the log.
    pub segments: usize,
    /// Times the writer waited for the appenders it had just answered
    /// to come back before it wrote the next batch (see
    /// [`Options::regroup`](super::Options::regroup)).
    pub regroups: u64,
    /// Those of the `regroups` whose window ended before all of them were
    /// back: the batch was written with fewer records than expected, after
    /// the whole wait. Most of the regroups expiring means the appenders
    /// take longer to come back than the window allows.
    pub regroups_expired: u64,
    /// Whether the writer runs as a task on the ring (see
    /// [`Options::writer_on_ring`](super::Options::writer_on_ring)) rather
    /// than as a thread. On the ring a batch's write and sync are one
    /// chain, timed together in `sync_time` (`write_time` stays zero).
    pub writer_on_ring: bool,
}

impl Log {
    /// Opens the log in `dir`, creating the directory and an empty log if
    /// there is none.
    ///
    /// Every segment is read and checked first: the last one is cut at its
    /// first record that is not whole (a torn tail, left by a crash during
    /// a write, or damage to it; see the module's guarantees), and
    /// [`recovery`](Log::recovery) says where and how much. Damage in an
    /// earlier segment fails with [`io::ErrorKind::InvalidData`], naming
    /// the file and offset, because the records after it were
    /// acknowledged. Then every segment and the directory are synced, so
    /// what recovery counts is durable.
    ///
    /// A directory holds one open log at a time: while a `Log` has it open
    /// (in this process or another), opening it again fails with
    /// [`io::ErrorKind::WouldBlock`]. Invalid options fail with
    /// [`io::ErrorKind::InvalidInput`].
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> io::Result<Log> {
        Log::open_with(dir.as_ref(), opts, Box::new(RealDisk))
    }

    /// [`Log::open`] with the writer's file operations going through `disk`.
    pub(crate) fn open_with(dir: &Path, opts: Options, mut disk: Box<dyn Disk>) -> io::Result<Log> {
        opts.validate()?;
        // The writer creates files in `dir` for as long as the log is open:
        // a later change of the working directory must not move them.
        let dir = &std::path::absolute(dir).map_err(|e| context("resolving", dir, e))?;
        create_dir(dir, &mut *disk)?;
        let dir_lock = DirLock::acquire(dir)?;
        repair::make(dir, &mut *disk)?;
        let recovered = recover(dir, opts.max_record, &mut *disk)?;
        let mut spans = recovered.spans;
        // Recovery read whole records from the page cache, and a process
        // killed between a write and its sync leaves some there that no
        // sync covered. They are about to be counted as durable (and a
        // roll-over would never sync their segment again), so make them
        // so: sync every segment and the directory before anything else.
        // Segments already on disk cost a flush of nothing.
        for span in &spans {
            disk.open(&span.path)
                .and_then(|file| disk.sync_data(&file))
                .map_err(|e| context("syncing what recovery found in", &span.path, e))?;
        }
        disk.sync_dir(dir)
            .map_err(|e| context("syncing the directory", dir, e))?;
        let segment = match spans.last() {
            Some(span) => Current::open(&mut *disk, span)?,
            None => {
                let segment = Current::create(&mut *disk, dir, recovered.next_lsn)
                    .map_err(|e| e.into_failure().to_error())?;
                spans.push(segment.span());
                segment
            }
        };
        let shared = Arc::new(Shared::new(
            spans,
            recovered.next_lsn - 1,
            opts.batch_limit(),
        ));
        let writer = Writer {
            shared: shared.clone(),
            disk,
            dir: dir.to_owned(),
            segment,
            next_lsn: recovered.next_lsn,
            segment_size: opts.segment_size,
            commit_delay: opts.commit_delay,
            regroup: opts.regroup,
            queued_at_answer: 0,
            _dir_lock: dir_lock,
        };
        let ring = opts
            .writer_on_ring
            .then(crate::runtime::context::current)
            .flatten()
            .filter(|handle| handle.shared.reactor.completes_operations() && writer.disk.is_os());
        let writer = match ring {
            Some(handle) => WriterHandle::Task {
                finished: ring_writer::spawn(writer, &handle),
                runtime: Arc::downgrade(&handle.shared),
            },
            None => {
                let thread = thread::Builder::new()
                    .name(WRITER_THREAD_NAME.to_owned())
                    .spawn(move || run_writer(writer))
                    .map_err(|e| context("starting the writer thread of", dir, e))?;
                WriterHandle::Thread {
                    id: thread.thread().id(),
                    join: Mutex::new(Some(thread)),
                }
            }
        };
        Ok(Log {
            inner: Arc::new(Inner {
                shared,
                writer,
                recovery: recovered.recovery,
                max_record: opts.max_record,
                dir: dir.to_owned(),
            }),
        })
    }

    /// What [`open`](Log::open) found: records, segments, and the torn
    /// tail it dropped, if any.
    pub fn recovery(&self) -> &Recovery {
        &self.inner.recovery
    }

    /// Appends `record` and returns a future that resolves to its [`Lsn`]
    /// once it is written and synced to disk (its batch's `fdatasync` has
    /// returned).
    ///
    /// The record is queued by this call, not when the future is first
    /// polled: records appended one after another by one task are stored,
    /// and numbered, in that order. Dropping the future does not take the
    /// record back; it is made durable all the same.
    ///
    /// The future resolves to an error, and the record gets no LSN, when:
    /// - the record is longer than [`Options::max_record`]
    ///   ([`io::ErrorKind::InvalidInput`], at once);
    /// - the log is closed ([`io::ErrorKind::BrokenPipe`], at once; after
    ///   an IO error, with that error's kind and a message saying so);
    /// - writing its batch failed (the OS error's kind, with the error as
    ///   the [`source`](std::error::Error::source)); the log stays usable;
    /// - syncing its batch failed: the log closes, and this and every later
    ///   append fail with "log closed after an IO error".
    pub fn append(&self, record: &[u8]) -> Append {
        let max_record = self.inner.max_record;
        if record.len() > max_record {
            self.inner.shared.count_failed(1);
            return Append::failed(error::plain(
                io::ErrorKind::InvalidInput,
                format!(
                    "wal: a record of {} bytes is over max_record ({max_record} bytes)",
                    record.len()
                ),
            ));
        }
        self.inner.shared.push(format::frame(record))
    }

    /// Reads the records that are durable now, in LSN order. Records that
    /// become durable while the iterator runs are not included.
    ///
    /// Each record is checked against its checksum as it is read; damage
    /// (which only the storage or another process can cause, since these
    /// bytes were synced) yields an [`io::ErrorKind::InvalidData`] error,
    /// after which the iterator ends.
    pub fn iter(&self) -> io::Result<Iter> {
        let spans = lock(&self.inner.shared.segments).clone();
        Iter::new(spans)
    }

    /// The log's counters.
    pub fn stats(&self) -> LogStats {
        LogStats {
            writer_on_ring: matches!(self.inner.writer, WriterHandle::Task { .. }),
            ..self.inner.shared.stats()
        }
    }

    /// The directory the log lives in, as an absolute path.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Closes the log, for every handle: later appends fail. The records
    /// appended before are written and synced, and the writer thread is
    /// joined, before this returns; it blocks, so call it from a thread
    /// where blocking is fine (or from `spawn_blocking`).
    ///
    /// Dropping the last handle does the same, ignoring errors.
    ///
    /// With the writer on the ring ([`Options::writer_on_ring`]), called
    /// on one of a runtime's workers, it does not wait for the writer
    /// task (the worker may be the one to run it): the records appended
    /// before are still made durable, and their futures say when. Nor
    /// does it wait once the writer's runtime is stopping, which drops the
    /// task and closes the log with an error.
    ///
    /// Returns an error if an IO error closed the log (then not every
    /// record appended before was made durable: their futures say which).
    pub fn close(self) -> io::Result<()> {
        self.inner.shutdown()
    }
}

impl Inner {
    fn shutdown(&self) -> io::Result<()> {
        self.shared.close_by_user();
        match &self.writer {
            // The writer thread itself cannot wait for its own end (nor for
            // the lock a closing thread holds while it waits): it gets here
            // only if a waker it woke closed the log or dropped the last
            // handle, and it drains the queue by itself once it returns.
            WriterHandle::Thread { join, id } if thread::current().id() != *id => {
                let mut writer = lock(join);
                if let Some(thread) = writer.take() {
                    if thread.join().is_err() {
                        return Err(io::Error::other("wal: the writer thread panicked"));
                    }
                }
            }
            WriterHandle::Thread { .. } => {}
            // A worker must not wait for a task its runtime may need it to
            // run; the task drains the queue by itself.
            WriterHandle::Task { finished, runtime } => {
                if !crate::runtime::context::is_worker() {
                    finished.wait(runtime);
                }
            }
        }
        match self.shared.closed() {
            Some(closed @ Closed::ByError(_)) => Err(closed_error(&closed)),
            Some(Closed::ByUser) | None => Ok(()),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.inner.dir)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// The writer thread. A panic in the writer (a bug) closes the log instead
/// of leaving appends waiting forever.
fn run_writer(writer: Writer) {
    let shared = writer.shared.clone();
    if catch_unwind(AssertUnwindSafe(move || writer.run())).is_err() {
        shared.close_by_error(Failure::new(
            "the writer thread panicked",
            io::Error::other("panic in the writer thread"),
        ));
    }
}

/// Creates `dir` (an absolute path) and any missing parents, and syncs the
/// directory that holds each one it created, from the top down, so that
/// the whole path survives a power loss: a synced log directory under a
/// parent whose own entry never reached the disk is lost with it.
fn create_dir(dir: &Path, disk: &mut dyn Disk) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing: Vec<&Path> = dir.ancestors().take_while(|a| !a.is_dir()).collect();
    missing.reverse();
    fs::create_dir_all(dir).map_err(|e| context("creating", dir, e))?;
    for created in missing {
        let parent = match created.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        disk.sync_dir(parent)
            .map_err(|e| context("syncing directory", parent, e))?;
    }
    Ok(())
}
