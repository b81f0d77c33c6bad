//! [`Options`]: the knobs of a [`Log`](super::Log), with their defaults.

use std::io;
use std::time::Duration;

use super::format::{FORMAT_MAX_RECORD, HEADER_LEN};

/// Default [`Options::segment_size`]: 64 MiB.
pub const DEFAULT_SEGMENT_SIZE: u64 = 64 * 1024 * 1024;

/// Default [`Options::commit_delay`]: zero, so the writer never waits for
/// more records before it writes.
pub const DEFAULT_COMMIT_DELAY: Duration = Duration::ZERO;

/// Default [`Options::regroup`]: on.
pub const DEFAULT_REGROUP: bool = true;

/// Default [`Options::writer_on_ring`]: off.
pub const DEFAULT_WRITER_ON_RING: bool = false;

/// The longest a regrouping writer waits for returning appenders, however
/// slow the last sync was: 2 ms.
pub const MAX_REGROUP_WAIT: Duration = Duration::from_millis(2);

/// Default [`Options::max_record`]: 16 MiB.
pub const DEFAULT_MAX_RECORD: usize = 16 * 1024 * 1024;

/// How a [`Log`](super::Log) is opened and how it batches.
///
/// Every setter consumes and returns the options, so they chain:
///
/// ```
/// use std::time::Duration;
/// use keel::wal::Options;
///
/// let opts = Options::default()
///     .segment_size(8 << 20)
///     .commit_delay(Duration::from_micros(200))
///     .max_record(64 * 1024);
/// # drop(opts);
/// ```
#[derive(Debug, Clone)]
pub struct Options {
    pub(crate) segment_size: u64,
    pub(crate) commit_delay: Duration,
    pub(crate) regroup: bool,
    pub(crate) max_record: usize,
    pub(crate) max_batch_bytes: Option<usize>,
    pub(crate) writer_on_ring: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            segment_size: DEFAULT_SEGMENT_SIZE,
            commit_delay: DEFAULT_COMMIT_DELAY,
            regroup: DEFAULT_REGROUP,
            max_record: DEFAULT_MAX_RECORD,
            max_batch_bytes: None,
            writer_on_ring: DEFAULT_WRITER_ON_RING,
        }
    }
}

impl Options {
    /// The size, in bytes, past which the log starts a new segment file.
    /// Default: [`DEFAULT_SEGMENT_SIZE`] (64 MiB).
    ///
    /// A batch that would take the current segment past this size goes to
    /// a new segment instead, so segments stay at most this large, unless
    /// one record alone is larger (it then fills a segment by itself).
    /// Smaller segments cost a file creation and a directory sync more
    /// often; larger ones make each file bigger to copy or archive.
    pub fn segment_size(mut self, bytes: u64) -> Options {
        self.segment_size = bytes;
        self
    }

    /// How long the writer waits for more records after the first one of a
    /// batch arrives, before it writes the batch. Default:
    /// [`DEFAULT_COMMIT_DELAY`] (zero: no waiting).
    ///
    /// Group commit needs no fixed delay to work: the records that arrive
    /// while a batch is being synced form the next batch, and
    /// [`regroup`](Options::regroup) gathers the appenders a batch has just
    /// answered. A fixed delay helps only when appends trickle in one at a
    /// time from unrelated sources and an `fdatasync` per record costs more
    /// than the wait; it adds up to this much latency to every append. The
    /// wait ends early once the pending records fill a batch (see
    /// [`max_batch_bytes`](Options::max_batch_bytes)) or the log closes. A
    /// non-zero delay replaces regrouping.
    pub fn commit_delay(mut self, delay: Duration) -> Options {
        self.commit_delay = delay;
        self
    }

    /// Whether the writer waits for the appenders it has just answered
    /// before it writes the next batch. Default: [`DEFAULT_REGROUP`] (on).
    ///
    /// The failure it prevents: appenders that each wait for their
    /// acknowledgement before sending again (a client, a transaction, a
    /// replication stream) split into two groups that take turns. The
    /// group that arrives while a sync runs is written as soon as it ends,
    /// just before the group that sync answered comes back, so every
    /// `fdatasync` carries half the appenders and the log reaches half the
    /// rate the disk allows. Regrouping merges them: after a batch of `n`
    /// records is durable, the writer expects those `n` appenders back and
    /// waits until that many more records are pending (on top of those
    /// already queued), but never longer than twice what the last write
    /// and sync took (at most [`MAX_REGROUP_WAIT`]) counted from the end of
    /// that sync. A record arriving after that window is written at once.
    /// [`LogStats::regroups_expired`](super::LogStats::regroups_expired)
    /// counts the windows that ran out.
    ///
    /// The cost: an append may wait up to two sync times longer when the
    /// appenders answered last do not come back (they went idle). Turn it
    /// off when appends come from many unrelated sources that never wait
    /// for their acknowledgement.
    pub fn regroup(mut self, on: bool) -> Options {
        self.regroup = on;
        self
    }

    /// The largest record, in bytes, that [`Log::append`] accepts; larger
    /// ones fail at once with [`io::ErrorKind::InvalidInput`]. Default:
    /// [`DEFAULT_MAX_RECORD`] (16 MiB). At most `u32::MAX`, the largest
    /// length the format can store.
    ///
    /// Open a log with a `max_record` at least as large as any record it
    /// already holds: a valid record over the limit makes
    /// [`Log::open`] fail rather than guess whether it is garbage.
    ///
    /// [`Log::append`]: super::Log::append
    /// [`Log::open`]: super::Log::open
    pub fn max_record(mut self, bytes: usize) -> Options {
        self.max_record = bytes;
        self
    }

    /// The most bytes (records and their 8-byte frames) the writer puts in
    /// one batch, that is in one write and one `fdatasync`. Default: no
    /// limit of its own, only the segment size (a batch never holds more
    /// than fits in an empty segment).
    ///
    /// A batch always takes at least one record, however large. A smaller
    /// limit shortens the time the first record of a big batch waits for
    /// the last one to be written, at the cost of more `fdatasync` calls.
    pub fn max_batch_bytes(mut self, bytes: usize) -> Options {
        self.max_batch_bytes = Some(bytes);
        self
    }

    /// Whether the writer runs as a task on the runtime that opens the
    /// log, writing and syncing each batch on its worker's ring, where that
    /// runtime's reactor is io_uring ([`IoBackend::Uring`], or `Auto` where
    /// the ring was set up). Default: [`DEFAULT_WRITER_ON_RING`] (off).
    ///
    /// With a writer thread, every batch crosses threads twice: the last
    /// record wakes the thread, and the thread wakes the appenders' worker
    /// with their acknowledgements, two switches on a CPU the two share.
    /// On the ring the batch's write, the zeros written ahead and the
    /// `fdatasync` are one linked chain that the worker submits with its
    /// other operations, and its completion is reaped by a worker like a
    /// socket's event: no thread in between. A new segment is still made
    /// on the blocking pool, so that its syncs never hold a worker. The
    /// task runs in the class of the task that opens the log (`normal`
    /// from `block_on`): open it from a task of the appenders' class to
    /// charge the log's work to that class.
    ///
    /// Where the log is opened outside such a runtime (on a thread of no
    /// runtime, or on an epoll runtime) the writer is a thread, as with
    /// this off; [`LogStats::writer_on_ring`] says which. With the writer
    /// on the ring, [`Log::close`] and the drop of the last handle on one
    /// of the runtime's workers do not wait for the last batch (the worker
    /// may be the one to run it; its appends' futures say when it is
    /// durable), and the log closes with an error if the runtime shuts
    /// down first.
    ///
    /// [`IoBackend::Uring`]: crate::io::IoBackend::Uring
    /// [`LogStats::writer_on_ring`]: super::LogStats::writer_on_ring
    /// [`Log::close`]: super::Log::close
    pub fn writer_on_ring(mut self, on: bool) -> Options {
        self.writer_on_ring = on;
        self
    }

    /// Checks the options before a log is opened with them.
    pub(crate) fn validate(&self) -> io::Result<()> {
        if self.max_record > FORMAT_MAX_RECORD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "wal: max_record of {} bytes is over the format's limit of {FORMAT_MAX_RECORD}",
                    self.max_record
                ),
            ));
        }
        Ok(())
    }

    /// The most bytes the writer takes into one batch (at least one record
    /// is always taken): [`max_batch_bytes`](Options::max_batch_bytes), and
    /// never more than the records an empty segment has room for.
    pub(crate) fn batch_limit(&self) -> usize {
        let room = self.segment_size.saturating_sub(HEADER_LEN);
        let room = usize::try_from(room).unwrap_or(usize::MAX);
        self.max_batch_bytes.unwrap_or(usize::MAX).min(room)
    }
}
