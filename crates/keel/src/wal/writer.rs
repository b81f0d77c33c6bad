//! The writer thread: takes every pending record at once, writes them with
//! one `pwrite`, syncs them with one `fdatasync`, and only then gives them
//! LSNs and completes their futures.
//!
//! # One batch, step by step
//!
//! 1. Take the batch (see [`Shared::next_batch`]).
//! 2. If the batch would take a non-empty segment past `segment_size`,
//!    start a new segment: create the file, write its header, `fsync` it,
//!    `fsync` the directory. The old segment needs no sync of its own:
//!    every batch in it ended with an `fdatasync`, which also made its
//!    length durable (and what an earlier process left in it unsynced,
//!    recovery synced at open).
//! 3. Write the whole batch at the segment's durable length.
//! 4. `fdatasync` the segment.
//! 5. Publish: the segment's new durable length (for `Log::iter`), the
//!    counters, then the LSNs to the futures, in queue order.
//!
//! # When a step fails
//!
//! - Step 2, creating or writing the new file: the batch fails, the
//!   half-made file is removed, and the log goes on in the old segment.
//! - Step 3: the batch fails. Whatever part of it reached the file is cut
//!   off again (`ftruncate` to the durable length, then `fsync`), so no
//!   later record lands behind bytes that were never acknowledged, and the
//!   log goes on.
//! - Any `fsync` or `fdatasync`, the `ftruncate` of step 3, or removing the
//!   half-made file of step 2: the log closes. After a failed sync Linux
//!   may have dropped the dirty pages and cleared the error, so a retry
//!   could "succeed" without the data ever reaching the disk; and a file
//!   that could not be cut back holds bytes that recovery would read as
//!   records. Going on could acknowledge records that are not durable, so
//!   every pending and later append fails instead.
//! - Closing is not enough after a failed sync: Linux keeps the failed
//!   bytes in its page cache, marked clean, so a log reopened in the same
//!   boot would read them back as records, and its own syncs would never
//!   write them (the pages are clean). It would then append and
//!   acknowledge records after bytes that a power loss turns into a hole.
//!   So before closing, the writer puts the file back as it was at its
//!   last successful sync: the segment is cut back to its durable length
//!   and `fsync`ed (step 4), or the new segment is removed (step 2). If
//!   that fails too, the repair is remembered (see [`super::repair`]) and
//!   made by the next open in this process, which fails if it cannot
//!   make it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::append::Pending;
use super::dirlock::DirLock;
use super::disk::Disk;
use super::error::Failure;
use super::format::{segment_name, SegmentHeader, HEADER_LEN};
use super::options::MAX_REGROUP_WAIT;
use super::repair::{self, Repair};
use super::shared::{Gather, SegmentSpan, Shared};
use super::{lock, Lsn};
use crate::sched::wake_batch;

/// The capacity of the write buffer kept between batches: enough for the
/// batches of a busy log of small records, small enough not to matter.
const KEEP_BUFFER: usize = 1 << 20;

/// The writer thread's state. Only the writer thread touches it.
pub(crate) struct Writer {
    pub(crate) shared: Arc<Shared>,
    pub(crate) disk: Box<dyn Disk>,
    pub(crate) dir: PathBuf,
    /// The segment records are appended to.
    pub(crate) segment: Current,
    /// The LSN the next durable record gets.
    pub(crate) next_lsn: u64,
    pub(crate) segment_size: u64,
    pub(crate) commit_delay: Duration,
    /// Whether to wait for the appenders the last batch answered.
    pub(crate) regroup: bool,
    /// Records that were queued just before the last batch was answered:
    /// they come from appenders other than the ones answered.
    pub(crate) queued_at_answer: usize,
    /// Held while the writer runs: the lock on the log's directory.
    pub(crate) _dir_lock: DirLock,
}

/// The segment being written.
pub(crate) struct Current {
    /// Shared with an operation on the ring while one is in flight.
    pub(super) file: Arc<File>,
    path: PathBuf,
    first_lsn: u64,
    /// Durable length: header and synced records.
    pub(super) len: u64,
    /// Records in the durable length.
    records: u64,
    /// The file's length: `len` plus zeros written ahead (see
    /// [`PREPARE_AHEAD`]).
    pub(super) prepared: u64,
}

/// How far ahead of the records the writer fills a segment with zeros.
///
/// Appending to a file makes every `fdatasync` also commit the file's new
/// size and blocks to the filesystem journal; overwriting blocks that were
/// written and synced before is a pure data flush, which on the disks
/// measured here takes about a third less time. So the writer grows a
/// segment in steps of this size, written after the batch that needs the
/// room and synced with it, and the next batches overwrite zeros. A
/// segment that is rolled over or closed cleanly is cut back to its last
/// record.
/// Recovery treats zeros after the last record as the end of the log, not
/// as damage (no valid frame is all zeros: the checksum of an empty record
/// is not zero).
///
/// The step is 256 KiB. The batch that carries the zeros pays for writing
/// and flushing them on the writer's CPU, and a network task that shares
/// that CPU waits meanwhile: with 1 MiB steps, a log node of 8 closed-loop
/// clients (S5, one CPU, some 36,000 records/s) answered its pings with a
/// p99 of 287–549 µs; with 256 KiB steps, 84–145 µs at 37,000–38,000
/// records/s; with 64 KiB, 78–109 µs at 35,000–37,000; with none
/// (appending), 97–110 µs but only 23,000–28,000 records/s (three
/// interleaved runs each, 2026-11-27, with the CPUs held out of halt so
/// that the figures leave out the CPU's own wake-up).
pub(crate) const PREPARE_AHEAD: u64 = 256 << 10;

/// How long a durable batch's write and its sync took.
pub(super) struct BatchTimes {
    /// The batch's write, and any zeros written ahead with it.
    pub(super) write: Duration,
    /// Its `fdatasync`.
    pub(super) sync: Duration,
}

/// `duration` in nanoseconds, saturated (584 years).
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// How a step of a batch failed.
pub(crate) enum StepError {
    /// The batch failed; the log goes on.
    Recoverable(Failure),
    /// The log must close.
    Fatal(Failure),
}

impl StepError {
    /// The failure, whichever kind.
    pub(crate) fn into_failure(self) -> Failure {
        match self {
            StepError::Recoverable(failure) | StepError::Fatal(failure) => failure,
        }
    }
}

impl Current {
    /// Continues the durable segment `span` (found by recovery).
    pub(crate) fn open(disk: &mut dyn Disk, span: &SegmentSpan) -> std::io::Result<Current> {
        let file = disk
            .open(&span.path)
            .map_err(|e| super::error::context("opening", &span.path, e))?;
        let prepared = file
            .metadata()
            .map_err(|e| super::error::context("reading", &span.path, e))?
            .len()
            .max(span.len);
        Ok(Current {
            file: Arc::new(file),
            path: span.path.clone(),
            first_lsn: span.first_lsn,
            len: span.len,
            records: span.records,
            prepared,
        })
    }

    /// Creates a segment in `dir` whose first record will be `first_lsn`,
    /// and makes it durable: header written and synced, directory synced.
    pub(crate) fn create(
        disk: &mut dyn Disk,
        dir: &Path,
        first_lsn: u64,
    ) -> Result<Current, StepError> {
        let path = dir.join(segment_name(first_lsn));
        let file = disk.create(&path).map_err(|e| {
            StepError::Recoverable(Failure::new(
                format!("creating segment {} failed", path.display()),
                e,
            ))
        })?;
        let header = SegmentHeader { first_lsn }.encode();
        if let Err(e) = disk.write_all_at(&file, &header, 0) {
            let failure = Failure::new(
                format!("writing the header of segment {} failed", path.display()),
                e,
            );
            return Err(match disk.remove(&path) {
                Ok(()) => StepError::Recoverable(failure),
                Err(e) => StepError::Fatal(Failure::new(
                    format!("{failure}; then removing the segment failed"),
                    e,
                )),
            });
        }
        // A sync that fails leaves the header (or the file's name) in the
        // page cache only: a reopen would count the segment, and records
        // it then acknowledged there would sit in a file that a power loss
        // takes away. The file goes, so nothing can be added to it.
        let synced = disk
            .sync_all(&file)
            .map_err(|e| (format!("fsync of new segment {} failed", path.display()), e))
            .and_then(|()| {
                disk.sync_dir(dir).map_err(|e| {
                    (
                        format!(
                            "fsync of directory {} after creating segment {} failed",
                            dir.display(),
                            path.display()
                        ),
                        e,
                    )
                })
            });
        if let Err((what, cause)) = synced {
            drop(file);
            let what = match disk.remove(&path) {
                Ok(()) => what,
                Err(e) => {
                    repair::remember(&path, Repair::Remove);
                    format!(
                        "{what}; then removing the segment failed ({e}): the next open in this \
                         process removes it"
                    )
                }
            };
            return Err(StepError::Fatal(Failure::new(what, cause)));
        }
        Ok(Current {
            file: Arc::new(file),
            path,
            first_lsn,
            len: HEADER_LEN,
            records: 0,
            prepared: HEADER_LEN,
        })
    }

    /// What is durable in this segment.
    pub(crate) fn span(&self) -> SegmentSpan {
        SegmentSpan {
            path: self.path.clone(),
            first_lsn: self.first_lsn,
            len: self.len,
            records: self.records,
        }
    }
}

/// How long a regrouping writer waits for the appenders it answered, after
/// a write and sync that took `took`: [`REGROUP_WINDOW_SYNCS`] times that,
/// and never more than [`MAX_REGROUP_WAIT`].
///
/// An appender comes back after a wake of its task, its acknowledgement's
/// trip to its client and the client's next record's trip back, which on a
/// local network takes about as long as an SSD's sync. A window of one
/// sync ended before the last of eight closed-loop clients was back in
/// about a fifth of S5's cycles (`LogStats::regroups_expired`), and every
/// such cycle both waited out its window and left one record for the next
/// sync; with two syncs, about one in seventy did.
pub(crate) fn regroup_window(took: Duration) -> Duration {
    took.saturating_mul(REGROUP_WINDOW_SYNCS)
        .min(MAX_REGROUP_WAIT)
}

/// The regroup window in syncs (see [`regroup_window`]).
pub(crate) const REGROUP_WINDOW_SYNCS: u32 = 2;

impl Writer {
    /// The thread's body: batches until the log is closed and drained, or
    /// a fatal error closes it.
    pub(crate) fn run(mut self) {
        let mut batch = Vec::new();
        let mut buf = Vec::new();
        let mut gather = Gather::Now;
        while self.shared.next_batch(gather, &mut batch) {
            let records = batch.len();
            let started = Instant::now();
            if let Err(fatal) = self.commit(&mut batch, &mut buf) {
                self.shared.close_by_error(fatal);
                return;
            }
            gather = self.gather(records, started);
            // One huge batch should not pin its buffer for the log's life.
            buf.clear();
            buf.shrink_to(KEEP_BUFFER);
        }
        // Closed and drained: the last segment ends at its last record.
        self.trim();
        // `_dir_lock` is released when `self` drops, after the last write.
    }

    /// How the next batch gathers, after a commit of `records` records that
    /// started at `started` and just ended (see [`Options::regroup`]).
    ///
    /// [`Options::regroup`]: super::Options::regroup
    pub(super) fn gather(&self, records: usize, started: Instant) -> Gather {
        if !self.commit_delay.is_zero() {
            return Gather::Delay(self.commit_delay);
        }
        if !self.regroup || records <= 1 {
            // One appender has nobody to wait for.
            return Gather::Now;
        }
        let now = Instant::now();
        Gather::Regroup {
            target: self.queued_at_answer.saturating_add(records),
            until: now + regroup_window(now.duration_since(started)),
        }
    }

    /// Writes and syncs `batch`, then completes it (with LSNs or errors),
    /// leaving it empty. `buf` is scratch space for the bytes written.
    /// Returns the failure that must close the log, if any.
    pub(super) fn commit(
        &mut self,
        batch: &mut Vec<Pending>,
        buf: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        let bytes = batch_bytes(batch);
        if self.needs_new_segment(bytes) {
            if let Err(error) = self.roll() {
                return self.fail(batch, error);
            }
        }
        frame_batch(batch, buf);
        let offset = self.segment.len;
        let write_started = Instant::now();
        if let Err(cause) = self.disk.write_all_at(&self.segment.file, buf, offset) {
            return self.write_failed(batch, offset, cause);
        }
        self.prepare_ahead(offset + bytes);
        let written = Instant::now();
        if let Err(cause) = self.disk.sync_data(&self.segment.file) {
            return self.sync_failed(batch, offset, cause);
        }
        let times = BatchTimes {
            write: written.duration_since(write_started),
            sync: written.elapsed(),
        };
        self.publish(batch, bytes, times);
        Ok(())
    }

    /// Whether a batch of `bytes` bytes starts a new segment: it would take
    /// a segment that holds records past the segment size.
    pub(super) fn needs_new_segment(&self, bytes: u64) -> bool {
        self.segment.len > HEADER_LEN && self.segment.len.saturating_add(bytes) > self.segment_size
    }

    /// Writing the batch at `offset` failed with `cause`: cuts off what
    /// reached the file and fails the batch, closing the log only if the
    /// file could not be cut back.
    pub(super) fn write_failed(
        &mut self,
        batch: &mut Vec<Pending>,
        offset: u64,
        cause: std::io::Error,
    ) -> Result<(), Failure> {
        let path = self.segment.path.display();
        let failure = Failure::new(
            format!(
                "writing {} records ({} bytes) to {path} at offset {offset} failed",
                batch.len(),
                batch_bytes(batch)
            ),
            cause,
        );
        let undone = self
            .disk
            .set_len(&self.segment.file, offset)
            .and_then(|()| self.disk.sync_all(&self.segment.file));
        if undone.is_ok() {
            self.segment.prepared = offset;
        }
        let error = match undone {
            Ok(()) => StepError::Recoverable(failure),
            Err(cause) => StepError::Fatal(Failure::new(
                format!("{failure}; then truncating {path} back to {offset} bytes failed"),
                cause,
            )),
        };
        self.fail(batch, error)
    }

    /// The `fdatasync` after writing the batch at `offset` failed with
    /// `cause`: puts the segment back as it was, fails the batch and
    /// returns the failure that closes the log.
    pub(super) fn sync_failed(
        &mut self,
        batch: &mut Vec<Pending>,
        offset: u64,
        cause: std::io::Error,
    ) -> Result<(), Failure> {
        let path = self.segment.path.display();
        let what = format!(
            "fdatasync of {path} failed after writing {} records at offset {offset}",
            batch.len()
        );
        let what = match self.cut_back(offset) {
            Ok(()) => what,
            Err(e) => format!(
                "{what}; then cutting it back to {offset} bytes failed ({e}): the next open in \
                 this process cuts it"
            ),
        };
        self.fail(batch, StepError::Fatal(Failure::new(what, cause)))
    }

    /// The zeros to write ahead once the records end at `end` (see
    /// [`prepare_ahead`](Self::prepare_ahead)): the bytes and where they
    /// go, or `None` where the room is already there (or the segment
    /// ends first, and `prepared` moves to `end`).
    pub(super) fn zeros_ahead(&mut self, end: u64) -> Option<(Vec<u8>, u64)> {
        if end <= self.segment.prepared {
            return None;
        }
        let target = self
            .segment
            .prepared
            .saturating_add(PREPARE_AHEAD)
            .min(self.segment_size);
        if target <= end {
            self.segment.prepared = end;
            return None;
        }
        Some((vec![0; (target - end) as usize], end))
    }

    /// If the records now end at `end`, past the zeroed room, writes the
    /// next [`PREPARE_AHEAD`] bytes of zeros after them (never past the
    /// segment size), to be synced with the batch. Best effort: a full disk
    /// or a file size limit fails only the zeros, never the batch, and the
    /// next batch that needs room tries again.
    fn prepare_ahead(&mut self, end: u64) {
        let Some((zeros, at)) = self.zeros_ahead(end) else {
            return;
        };
        let target = at + zeros.len() as u64;
        self.segment.prepared = match self.disk.write_all_at(&self.segment.file, &zeros, at) {
            Ok(()) => target,
            Err(_) => end,
        };
    }

    /// Puts the current segment back to `len` bytes, its length at the
    /// last successful sync, after a sync failed: cuts it there and
    /// `fsync`s, so neither the page cache nor the disk holds the bytes
    /// that failed. If that fails, remembers the repair for the next open
    /// in this process (see [`super::repair`]).
    fn cut_back(&mut self, len: u64) -> std::io::Result<()> {
        let file = &self.segment.file;
        let cut = self
            .disk
            .set_len(file, len)
            .and_then(|()| self.disk.sync_all(file));
        match &cut {
            Ok(()) => self.segment.prepared = len,
            Err(_) => repair::remember(&self.segment.path, Repair::CutTo(len)),
        }
        cut
    }

    /// Cuts the zeros prepared ahead off the current segment, so a segment
    /// that is done with (rolled over, or closed cleanly) ends at its last
    /// record. Best effort: zeros left behind are read as the end of the
    /// records anyway.
    pub(super) fn trim(&mut self) {
        if self.segment.prepared > self.segment.len
            && self
                .disk
                .set_len(&self.segment.file, self.segment.len)
                .is_ok()
        {
            self.segment.prepared = self.segment.len;
        }
    }

    /// Starts a new segment at the next LSN.
    pub(super) fn roll(&mut self) -> Result<(), StepError> {
        self.trim();
        let next = Current::create(&mut *self.disk, &self.dir, self.next_lsn)?;
        lock(&self.shared.segments).push(next.span());
        self.segment = next;
        Ok(())
    }

    /// The batch of `bytes` bytes is durable, written and synced in
    /// `times`: publishes it and gives each record its LSN.
    pub(super) fn publish(&mut self, batch: &mut Vec<Pending>, bytes: u64, times: BatchTimes) {
        let count = batch.len() as u64;
        let data: u64 = batch.iter().map(|r| r.data_len() as u64).sum();
        self.segment.len += bytes;
        self.segment.records += count;
        let first = self.next_lsn;
        self.next_lsn += count;
        if let Some(span) = lock(&self.shared.segments).last_mut() {
            span.len = self.segment.len;
            span.records = self.segment.records;
        }
        let counters = &self.shared.counters;
        counters.batches.fetch_add(1, Ordering::Relaxed);
        counters.appends.fetch_add(count, Ordering::Relaxed);
        counters.bytes.fetch_add(data, Ordering::Relaxed);
        counters
            .write_ns
            .fetch_add(nanos(times.write), Ordering::Relaxed);
        counters
            .sync_ns
            .fetch_add(nanos(times.sync), Ordering::Relaxed);
        counters
            .last_lsn
            .store(self.next_lsn - 1, Ordering::Release);
        self.queued_at_answer = self.shared.pending_len();
        // Every appender is queued before a worker is woken: on a worker
        // sharing this thread's CPU, waking them one by one would switch
        // between the two threads once per record.
        wake_batch::together(|| {
            for (lsn, record) in (first..).zip(batch.drain(..)) {
                record.complete(Ok(Lsn::from_raw(lsn)));
            }
        });
    }

    /// Fails every record of `batch` for `error`; returns the failure if it
    /// must close the log.
    pub(super) fn fail(
        &mut self,
        batch: &mut Vec<Pending>,
        error: StepError,
    ) -> Result<(), Failure> {
        self.shared.count_failed(batch.len());
        self.queued_at_answer = self.shared.pending_len();
        let (failure, fatal) = match error {
            StepError::Recoverable(failure) => (failure, false),
            StepError::Fatal(failure) => (failure, true),
        };
        wake_batch::together(|| {
            for record in batch.drain(..) {
                let error = if fatal {
                    failure.closed_error()
                } else {
                    failure.to_error()
                };
                record.complete(Err(error));
            }
        });
        if fatal {
            Err(failure)
        } else {
            Ok(())
        }
    }
}

/// Bytes (frames and data) in `batch`.
pub(super) fn batch_bytes(batch: &[Pending]) -> u64 {
    batch.iter().map(|r| r.framed.len() as u64).sum()
}

/// Puts `batch`'s framed records, in order, into `buf`.
pub(super) fn frame_batch(batch: &[Pending], buf: &mut Vec<u8>) {
    buf.clear();
    for record in batch {
        buf.extend_from_slice(&record.framed);
    }
}
