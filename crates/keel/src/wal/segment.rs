//! Reading one segment file front to back: its header, then record after
//! record, telling a whole record from a torn or corrupt one.
//!
//! Both recovery (which checks every record and keeps none) and
//! [`Iter`](super::Iter) (which keeps them) read segments through
//! [`SegmentReader`]. What a damaged record *means* is not decided here:
//! recovery calls it a torn tail in the last segment and an error elsewhere;
//! the iterator, which reads only bytes that were synced, always calls it an
//! error.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use super::format::{self, HeaderError, SegmentHeader, FRAME_LEN, HEADER_LEN};
use super::recovery::TailReason;

/// How much a reader buffers, and the chunk in which recovery streams the
/// data of records it does not keep through the checksum.
const READ_CHUNK: usize = 64 * 1024;

/// A segment file opened for reading, positioned after its header.
pub(crate) struct SegmentReader {
    path: PathBuf,
    reader: BufReader<File>,
    /// Offset of the next record frame.
    offset: u64,
    /// Records are read up to here: the file's length, or the durable
    /// length for the iterator.
    end: u64,
    /// Recovery's scratch space for data it checks but does not keep.
    scratch: Vec<u8>,
}

/// What opening a segment found.
pub(crate) enum Opened {
    /// A valid header; records follow.
    Valid(SegmentReader, SegmentHeader),
    /// The header is missing, short or wrong.
    BadHeader {
        /// The file's length.
        len: u64,
        /// What is wrong with it.
        error: HeaderError,
    },
}

/// One step through a segment.
pub(crate) enum Step {
    /// A whole record whose checksum matches.
    Record {
        /// Its data, if asked for; empty otherwise.
        data: Vec<u8>,
    },
    /// Every byte up to the end was whole records.
    End,
    /// The bytes from `offset` on are not a whole record.
    Damaged {
        /// Where the damaged record starts.
        offset: u64,
        /// What is wrong with it.
        reason: TailReason,
    },
    /// A whole, valid record longer than the reader's `max_record`.
    Oversized {
        /// Offset of its frame in the file.
        offset: u64,
        /// Its length.
        len: u32,
    },
}

impl SegmentReader {
    /// Opens the segment at `path` and reads its header. Records are read up
    /// to `end`, or to the file's length if `end` is `None` or beyond it.
    pub(crate) fn open(path: &Path, end: Option<u64>) -> io::Result<Opened> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut reader = BufReader::with_capacity(READ_CHUNK, file);
        let mut header = [0u8; HEADER_LEN as usize];
        let got = read_up_to(&mut reader, &mut header)?;
        let header = match SegmentHeader::decode(&header[..got]) {
            Ok(header) => header,
            Err(error) => return Ok(Opened::BadHeader { len, error }),
        };
        let end = end.map_or(len, |end| end.min(len));
        let reader = SegmentReader {
            path: path.to_owned(),
            reader,
            offset: HEADER_LEN,
            end,
            scratch: Vec::new(),
        };
        Ok(Opened::Valid(reader, header))
    }

    /// The file this reads.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Offset of the next record: after the last whole record read.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Reads the next record, keeping its data if `keep` is set. A record
    /// longer than `max_record` is reported as [`Step::Oversized`] if its
    /// checksum matches, and as damage if it does not.
    ///
    /// After anything but [`Step::Record`], [`offset`](Self::offset) stays
    /// at the record that was not read, and the reader is of no further
    /// use.
    pub(crate) fn next(&mut self, keep: bool, max_record: usize) -> io::Result<Step> {
        let offset = self.offset;
        let remaining = self.end.saturating_sub(offset);
        if remaining == 0 {
            return Ok(Step::End);
        }
        if remaining < FRAME_LEN as u64 {
            return Ok(if self.rest_is_zero(remaining)? {
                Step::End
            } else {
                damaged(offset, TailReason::TornFrame)
            });
        }
        let mut frame = [0u8; FRAME_LEN];
        self.reader.read_exact(&mut frame)?;
        if frame == [0u8; FRAME_LEN] {
            // No valid frame is all zeros (an empty record's checksum is
            // not zero): this is room the writer zeroed ahead, and the end
            // of the records if nothing but zeros follows.
            let rest = remaining - FRAME_LEN as u64;
            return Ok(if self.rest_is_zero(rest)? {
                Step::End
            } else {
                damaged(offset, TailReason::BadChecksum)
            });
        }
        let (len, stored_crc) = format::decode_frame(&frame);
        let oversized = len as usize > max_record;
        if u64::from(len) > remaining - FRAME_LEN as u64 {
            // The length runs past the end: a record cut short, or a length
            // that was never written (garbage).
            let reason = if oversized {
                TailReason::BadLength
            } else {
                TailReason::TornData
            };
            return Ok(damaged(offset, reason));
        }
        let (crc, data) = if keep {
            let mut data = vec![0u8; len as usize];
            self.reader.read_exact(&mut data)?;
            (format::record_crc(len, &data), data)
        } else {
            (self.checksum_unkept(len)?, Vec::new())
        };
        if crc != stored_crc {
            return Ok(damaged(offset, TailReason::BadChecksum));
        }
        if oversized {
            return Ok(Step::Oversized { offset, len });
        }
        self.offset = offset + FRAME_LEN as u64 + u64::from(len);
        Ok(Step::Record { data })
    }

    /// Whether the next `len` bytes are all zeros (reading them).
    fn rest_is_zero(&mut self, len: u64) -> io::Result<bool> {
        self.scratch.resize(READ_CHUNK, 0);
        let mut left = len;
        while left > 0 {
            let chunk = usize::try_from(left).map_or(READ_CHUNK, |l| l.min(READ_CHUNK));
            self.reader.read_exact(&mut self.scratch[..chunk])?;
            if self.scratch[..chunk].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            left -= chunk as u64;
        }
        Ok(true)
    }

    /// Streams `len` bytes of data through the checksum without keeping
    /// them, so a huge record costs no huge allocation.
    fn checksum_unkept(&mut self, len: u32) -> io::Result<u32> {
        self.scratch.resize(READ_CHUNK, 0);
        let mut crc = crc32c::crc32c(&len.to_le_bytes());
        let mut left = len as usize;
        while left > 0 {
            let chunk = left.min(READ_CHUNK);
            self.reader.read_exact(&mut self.scratch[..chunk])?;
            crc = crc32c::crc32c_append(crc, &self.scratch[..chunk]);
            left -= chunk;
        }
        Ok(crc)
    }
}

fn damaged(offset: u64, reason: TailReason) -> Step {
    Step::Damaged { offset, reason }
}

/// Reads into `buf` until it is full or the input ends; returns the number
/// of bytes read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
