//! Opening a log: every segment is read and checked, a torn tail of the
//! last one is cut off, and [`Recovery`] reports what was found.
//!
//! # What counts as a torn tail
//!
//! The writer syncs each batch before it writes the next, and starts a new
//! segment only after the old one is synced. So a crash can leave damage
//! only after the last synced byte of the *last* segment: a record cut
//! short, a frame with a garbage length, a checksum that does not match,
//! or a new segment whose header never fully reached the disk. Those bytes
//! were never acknowledged; recovery truncates them (and syncs), so the
//! writer continues from the last whole record.
//!
//! Damage anywhere else (a segment that is not the last, a header that
//! does not match its file name, a gap between segments) cannot come from
//! a crash, only from the storage or from someone else's hands, and the
//! records after it may have been acknowledged. Recovery then refuses to
//! open the log with an [`InvalidData`](io::ErrorKind::InvalidData) error
//! naming the file and the offset, rather than silently dropping them.
//!
//! Damage in the middle of the last segment looks exactly like a torn tail
//! and is cut off like one; [`Recovery::torn_tail`] then says where and how
//! much.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::disk::Disk;
use super::error::{context, corrupt};
use super::format::{self, HEADER_LEN};
use super::segment::{Opened, SegmentReader, Step};
use super::shared::SegmentSpan;
use super::Lsn;

/// What [`Log::open`](super::Log::open) found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recovery {
    /// Whole, valid records found (after any torn tail was dropped).
    pub records: u64,
    /// Segment files holding them, including an empty last one. Zero for
    /// a new log.
    pub segments: usize,
    /// The LSN of the first record found, if any.
    pub first_lsn: Option<Lsn>,
    /// The LSN of the last record found, if any; the next append gets the
    /// one after it.
    pub last_lsn: Option<Lsn>,
    /// Bytes cut from the end of the log: a torn tail, counted up to its
    /// last byte that is not zero (the zeros after it are room the writer
    /// had prepared, never records). Zero after a clean close.
    pub dropped_bytes: u64,
    /// Where the torn tail began and why it was not a record, if one was
    /// dropped.
    pub torn_tail: Option<TornTail>,
}

impl Recovery {
    /// Whether the log was found whole: nothing was dropped.
    pub fn is_clean(&self) -> bool {
        self.torn_tail.is_none()
    }
}

/// The torn tail recovery dropped from the last segment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TornTail {
    /// The segment file it was in.
    pub segment: PathBuf,
    /// Its offset in that file: the file now ends here (or, for a torn
    /// segment header, the file was removed).
    pub offset: u64,
    /// Bytes dropped, the same as [`Recovery::dropped_bytes`].
    pub bytes: u64,
    /// What made the bytes there not a record.
    pub reason: TailReason,
}

/// Why the bytes at the end of a log were not a whole record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TailReason {
    /// Fewer bytes than a record's 8-byte frame (length and checksum).
    TornFrame,
    /// A frame whose length runs past the end of the file: the record's
    /// data was cut short.
    TornData,
    /// A frame whose length is over `max_record` and runs past the end of
    /// the file: the length was never written, or is garbage.
    BadLength,
    /// A whole record whose checksum does not match its length and data.
    BadChecksum,
    /// A new segment whose header was never fully written; the file was
    /// removed.
    TornSegmentHeader,
}

impl fmt::Display for TailReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TailReason::TornFrame => "a record frame cut short",
            TailReason::TornData => "a record's data cut short",
            TailReason::BadLength => "a record length that is garbage",
            TailReason::BadChecksum => "a record whose checksum does not match",
            TailReason::TornSegmentHeader => "a segment header cut short",
        })
    }
}

/// What recovery hands to the writer.
pub(crate) struct Recovered {
    pub(crate) recovery: Recovery,
    /// The valid segments, in order; the writer continues the last.
    pub(crate) spans: Vec<SegmentSpan>,
    /// The LSN the next record gets.
    pub(crate) next_lsn: u64,
}

/// Reads and checks every segment in `dir`, truncating a torn tail; the
/// changes it makes (a cut, a removal, their syncs) go through `disk`.
pub(crate) fn recover(dir: &Path, max_record: usize, disk: &mut dyn Disk) -> io::Result<Recovered> {
    let files = segment_files(dir)?;
    let mut spans: Vec<SegmentSpan> = Vec::with_capacity(files.len());
    let mut next_lsn: Option<u64> = None;
    let mut torn_tail = None;
    for (index, (name_lsn, path)) in files.iter().enumerate() {
        let last = index + 1 == files.len();
        let (mut reader, header) =
            match SegmentReader::open(path, None).map_err(|e| context("reading", path, e))? {
                Opened::Valid(reader, header) => (reader, header),
                Opened::BadHeader { len, .. } if last && len <= HEADER_LEN => {
                    // A segment being created when the process died.
                    disk.remove(path)
                        .map_err(|e| context("removing torn segment", path, e))?;
                    disk.sync_dir(dir)
                        .map_err(|e| context("syncing directory", dir, e))?;
                    next_lsn.get_or_insert(*name_lsn);
                    torn_tail = Some(TornTail {
                        segment: path.clone(),
                        offset: 0,
                        bytes: len,
                        reason: TailReason::TornSegmentHeader,
                    });
                    break;
                }
                Opened::BadHeader { error, .. } => return Err(corrupt(path, 0, error)),
            };
        if header.first_lsn != *name_lsn {
            return Err(corrupt(
                path,
                0,
                format_args!("the header says the first LSN is {}", header.first_lsn),
            ));
        }
        if let Some(expected) = next_lsn {
            if header.first_lsn != expected {
                return Err(corrupt(
                    path,
                    0,
                    format_args!(
                        "the segment starts at LSN {} but the one before ends at LSN {}",
                        header.first_lsn,
                        expected - 1
                    ),
                ));
            }
        }
        let mut records = 0u64;
        loop {
            match reader
                .next(false, max_record)
                .map_err(|e| context("reading", path, e))?
            {
                Step::Record { .. } => records += 1,
                Step::End => break,
                Step::Oversized { offset, len } => {
                    return Err(corrupt(
                        path,
                        offset,
                        format_args!(
                            "a valid record of {len} bytes is over max_record ({max_record}); \
                             open the log with a larger max_record"
                        ),
                    ))
                }
                Step::Damaged { offset, reason } if last => {
                    let bytes = truncate(path, offset, disk)?;
                    torn_tail = Some(TornTail {
                        segment: path.clone(),
                        offset,
                        bytes,
                        reason,
                    });
                    break;
                }
                Step::Damaged { offset, reason } => {
                    return Err(corrupt(
                        path,
                        offset,
                        format_args!(
                            "{reason} in a segment that is not the last; \
                             the records after it may have been acknowledged, so the log \
                             is not opened"
                        ),
                    ))
                }
            }
        }
        let end = header
            .first_lsn
            .checked_add(records)
            .ok_or_else(|| corrupt(path, 0, "the segment's LSNs run past the largest LSN"))?;
        spans.push(SegmentSpan {
            path: path.clone(),
            first_lsn: header.first_lsn,
            len: reader.offset(),
            records,
        });
        next_lsn = Some(end);
    }
    let next_lsn = next_lsn.unwrap_or(1);
    let records = spans.iter().map(|s| s.records).sum();
    let first_lsn = spans
        .iter()
        .find(|s| s.records > 0)
        .and_then(|s| Lsn::new(s.first_lsn));
    let recovery = Recovery {
        records,
        segments: spans.len(),
        first_lsn,
        last_lsn: Lsn::new(next_lsn - 1),
        dropped_bytes: torn_tail.as_ref().map_or(0, |t: &TornTail| t.bytes),
        torn_tail,
    };
    Ok(Recovered {
        recovery,
        spans,
        next_lsn,
    })
}

/// The segment files in `dir`, sorted by first LSN. Other files are not
/// part of the log and are left alone.
fn segment_files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| context("listing", dir, e))? {
        let path = entry.map_err(|e| context("listing", dir, e))?.path();
        if let Some(lsn) = format::parse_segment_name(&path) {
            files.push((lsn, path));
        }
    }
    files.sort();
    Ok(files)
}

/// Cuts the file at `path` to `len` bytes and syncs it; returns the bytes
/// of damage cut, that is up to the last byte that is not zero (zeros the
/// writer prepared ahead were never records).
fn truncate(path: &Path, len: u64, disk: &mut dyn Disk) -> io::Result<u64> {
    let file = disk.open(path).map_err(|e| context("opening", path, e))?;
    let damaged = last_nonzero_end(&file, len)
        .map_err(|e| context("reading", path, e))?
        .saturating_sub(len);
    disk.set_len(&file, len)
        .and_then(|()| disk.sync_all(&file))
        .map_err(|e| context("truncating the torn tail of", path, e))?;
    Ok(damaged)
}

/// The offset just after the last byte of `file` at or after `from` that
/// is not zero (`from` if there is none).
fn last_nonzero_end(file: &fs::File, from: u64) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 64 * 1024];
    let (mut at, mut end) = (from, from);
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            return Ok(end);
        }
        if let Some(i) = buf[..n].iter().rposition(|&b| b != 0) {
            end = at + i as u64 + 1;
        }
        at += n as u64;
    }
}
