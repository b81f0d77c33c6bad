//! A group-commit write-ahead log: many tasks append records, one thread
//! makes them durable in batches, and no acknowledged record is ever lost.
//!
//! ```
//! use keel::wal::{Log, Options};
//!
//! let dir = std::env::temp_dir().join(format!("keel-wal-mod-doc-{}", std::process::id()));
//! let rt = keel::Runtime::builder().workers(2).build().unwrap();
//! let log = Log::open(&dir, Options::default()).unwrap();
//! let mut lsns = rt.block_on(async {
//!     let tasks: Vec<_> = (0..8u8)
//!         .map(|i| {
//!             let log = log.clone();
//!             keel::spawn(async move { log.append(&[i; 64]).await.unwrap() })
//!         })
//!         .collect();
//!     let mut lsns = Vec::new();
//!     for task in tasks {
//!         lsns.push(task.await.unwrap().get());
//!     }
//!     lsns
//! });
//! lsns.sort();
//! assert_eq!(lsns, (1..=8).collect::<Vec<u64>>());
//! let stats = log.stats();
//! assert_eq!((stats.appends, stats.last_lsn.map(|l| l.get())), (8, Some(8)));
//! log.close().unwrap();
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```
//!
//! # Why group commit
//!
//! A record is durable only once `fdatasync` has returned for it, and that
//! takes milliseconds on real disks. A log that syncs once per record can
//! acknowledge no more records per second than the disk does syncs, and a
//! sync called on an async worker stalls every socket that worker serves
//! (the failure S5 measures). So a [`Log`] has one dedicated writer thread
//! (named [`WRITER_THREAD_NAME`], neither a worker nor a blocking-pool
//! thread): it takes *every* record that is pending, writes them with one
//! `pwrite`, syncs them with one `fdatasync`, and completes all their
//! futures. The records that arrive while it syncs form the next batch, so
//! batches grow with the load by themselves and the cost of a sync is
//! shared by everything that was waiting for it. [`Options::commit_delay`]
//! can make every batch wait for more records; its default is not to wait.
//! [`Options::regroup`] (on by default) waits only after a batch of more
//! than one record, for the appenders it just answered to come back, for
//! at most twice the last write-and-sync time and never more than
//! [`MAX_REGROUP_WAIT`].
//!
//! On an io_uring runtime, [`Options::writer_on_ring`] makes the writer a
//! task of that runtime instead of a thread: the same batches, each
//! written, zeroed ahead and synced as one linked chain on a worker's
//! ring, with no thread between the appenders and the disk.
//!
//! # Why a failed sync closes the log
//!
//! When `fsync` or `fdatasync` fails, Linux may already have marked the
//! dirty pages clean (or dropped them) and reports the error once: a retry
//! can succeed without the data ever reaching the disk (PostgreSQL learned
//! this in 2018). The log cannot know which of its bytes are durable any
//! more, so it stops: the batch, every pending and every later append fail
//! with "log closed after an IO error", and [`Log::close`] returns the
//! error. The bytes of the failed batch stay in the page cache, marked
//! clean: a log reopened in the same boot would read them back as records
//! that no sync will ever write, and append after them. So before it
//! stops, the writer cuts the segment back to its length at the last
//! successful sync and `fsync`s it (or removes a new segment whose sync
//! failed); if even that fails, the next open in this process makes the
//! repair first, and the error says so. An `ENOSPC` from `fdatasync`
//! takes the same path. A failed *write*, on the other hand (a full
//! disk), leaves the durable bytes alone: the writer cuts the file back to
//! its durable length, fails that batch only, and goes on.
//!
//! # Guarantees
//!
//! 1. An append resolves to `Ok(lsn)` only after its record was written
//!    and the `fdatasync` of its batch returned.
//! 2. LSNs start at [`Lsn::FIRST`] (1) and are consecutive: a record gets
//!    its LSN only when it is durable, so a failed record takes none.
//! 3. Records are numbered in the order `append` was called (the record is
//!    queued by the call, not by the first poll), so the records one task
//!    appends are in order.
//! 4. [`Log::iter`] and [`Log::open`] never return a record that was not
//!    fully written: every record carries a checksum of its length and
//!    data.
//! 5. `open` cuts the last segment at its first record that is not whole,
//!    and reports the cut in [`Recovery`] (where, how many bytes, why). A
//!    crash can only leave such a record at the tail, in the batch that
//!    was being written; but damage to the medium in the middle of the
//!    last segment looks the same from the record alone, and the records
//!    after it are cut with it. Damage in any earlier segment makes `open`
//!    fail with [`InvalidData`](std::io::ErrorKind::InvalidData) naming
//!    the file and offset, rather than drop records that were
//!    acknowledged.
//! 6. Recovery syncs every segment and the directory before the log takes
//!    appends, so a record a crashed process wrote but never synced is
//!    made durable before it is counted (and before anything after it is
//!    acknowledged).
//! 7. A log directory that [`Log::open`] creates survives a power loss
//!    with its parents: each directory it creates is synced into the one
//!    above, from the top down.
//! 8. One log per directory: an open log holds a lock on the file `LOCK`
//!    in it (released when the log closes or the process dies), and a
//!    second `open`, from this process or another, fails while it does.
//!    The lock is a POSIX record lock: code in the same process that opens
//!    and closes `LOCK` itself (to copy it, say) releases it.
//!
//! Not guaranteed: that a record whose append failed, or was still pending
//! at a crash, is absent after reopening. A sync that failed may have
//! reached the disk anyway; such a record was never acknowledged, and it
//! is found with the next LSN. Nor is the queue bounded: appends wait for
//! the disk, so tasks that await each append bound it themselves.
//!
//! # On disk
//!
//! A log is a directory of segment files, each named by the LSN of its
//! first record as 20 decimal digits and `.wal`
//! (`00000000000000000001.wal`), so names sort in LSN order, plus the
//! `LOCK` file. Files with other names are not part of the log. All
//! integers are little-endian; checksums are CRC32C (Castagnoli).
//!
//! A segment starts with a 32-byte header:
//!
//! | bytes  | field                                  |
//! |--------|----------------------------------------|
//! | 0..8   | magic `keel-wal`                       |
//! | 8..12  | format version, `1`                    |
//! | 12..16 | flags, `0`                             |
//! | 16..24 | LSN of the first record                |
//! | 24..28 | CRC32C of bytes 0..24                  |
//! | 28..32 | reserved, `0`                          |
//!
//! Records follow back to back, each an 8-byte frame and its data:
//!
//! | bytes      | field                                          |
//! |------------|------------------------------------------------|
//! | 0..4       | length of the data, `n` (`u32`)                |
//! | 4..8       | CRC32C of bytes 0..4 followed by the data      |
//! | 8..8+n     | the data                                       |
//!
//! A record's LSN is not stored: it is the segment's first LSN plus the
//! record's index in it, and each segment starts where the one before
//! ended. A new segment is started when the next batch would take the
//! current one past [`Options::segment_size`]: the file is created, its
//! header written and `fsync`ed, and the directory `fsync`ed, before any
//! record goes into it, so a segment that holds acknowledged records
//! always survives a crash.
//!
//! # Layout
//!
//! - `log`: [`Log`], its handle API and [`LogStats`].
//! - `append`: the [`Append`] future and its completion slot.
//! - `shared`: the queue between appenders and the writer, and who touches
//!   what.
//! - `writer`: the writer thread, one batch step by step, and what each
//!   failure does.
//! - `recovery`: checking segments at open, and [`Recovery`].
//! - `iter`: [`Iter`].
//! - `segment`: reading one segment, record by record.
//! - `format`: encoding headers and record frames.
//! - `dirlock`: one open log per directory, across threads and processes.
//! - `disk`: the log's file operations behind a trait, and the faulty
//!   disk of the unit tests.
//! - `repair`: what a failed sync left for the next open to put right.
//! - `crash_disk` (tests only): a disk that models the page cache and
//!   power loss, and the tests that cut the power at every step.
//! - `options`: [`Options`].

mod append;
mod dirlock;
mod disk;
mod error;
mod format;
mod iter;
mod log;
mod options;
mod record;
mod recovery;
mod repair;
mod ring_writer;
mod segment;
mod shared;
mod writer;

#[cfg(test)]
mod crash_disk;
#[cfg(test)]
mod tests;

pub use append::Append;
pub use iter::Iter;
pub use log::{Log, LogStats, WRITER_THREAD_NAME};
pub use options::{
    Options, DEFAULT_COMMIT_DELAY, DEFAULT_MAX_RECORD, DEFAULT_REGROUP, DEFAULT_SEGMENT_SIZE,
    DEFAULT_WRITER_ON_RING, MAX_REGROUP_WAIT,
};
pub use record::{Lsn, Record};
pub use recovery::{Recovery, TailReason, TornTail};

use std::sync::{Mutex, MutexGuard};

/// Locks one of the log's mutexes, ignoring poison.
///
/// The log's locks guard a queue, a list of segment extents and one-shot
/// slots; each is changed in a single step that cannot panic halfway, and
/// no user code runs under them (wakers are woken after unlocking), so a
/// poisoned lock carries no broken invariant.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
