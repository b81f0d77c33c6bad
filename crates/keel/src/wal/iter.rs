//! [`Iter`]: reads the durable records of a log, in LSN order.
//!
//! The iterator works from a copy of the segments' durable lengths taken
//! when it was made, and reads each file only up to its length there.
//! Those bytes were synced and are never written again (a failed write is
//! cut back to the durable length, never below), so the writer can go on
//! appending while an iterator reads.

use std::io;
use std::vec;

use super::error::{context, corrupt};
use super::format::FORMAT_MAX_RECORD;
use super::segment::{Opened, SegmentReader, Step};
use super::shared::SegmentSpan;
use super::{Lsn, Record};

/// The records that were durable when [`Log::iter`](super::Log::iter) was
/// called, oldest first. Yields an error at most once, then ends.
pub struct Iter {
    /// Segments not opened yet.
    spans: vec::IntoIter<SegmentSpan>,
    /// The segment being read and the LSN of its next record.
    current: Option<(SegmentReader, u64)>,
    /// Set after an error: the iterator yields nothing more.
    done: bool,
}

impl Iter {
    /// Reads `spans`, opening the first one now so that an unreadable log
    /// shows at once.
    pub(crate) fn new(spans: Vec<SegmentSpan>) -> io::Result<Iter> {
        let mut iter = Iter {
            spans: spans.into_iter(),
            current: None,
            done: false,
        };
        iter.open_next()?;
        Ok(iter)
    }

    /// Opens the next segment, if there is one, as `current`.
    fn open_next(&mut self) -> io::Result<()> {
        self.current = None;
        let Some(span) = self.spans.next() else {
            return Ok(());
        };
        let opened = SegmentReader::open(&span.path, Some(span.len))
            .map_err(|e| context("reading", &span.path, e))?;
        match opened {
            Opened::Valid(reader, header) if header.first_lsn == span.first_lsn => {
                self.current = Some((reader, span.first_lsn));
                Ok(())
            }
            Opened::Valid(_, header) => Err(corrupt(
                &span.path,
                0,
                format_args!(
                    "the header now says the first LSN is {}, not {}",
                    header.first_lsn, span.first_lsn
                ),
            )),
            Opened::BadHeader { error, .. } => Err(corrupt(&span.path, 0, error)),
        }
    }

    fn step(&mut self) -> io::Result<Option<Record>> {
        loop {
            let Some((reader, next_lsn)) = &mut self.current else {
                return Ok(None);
            };
            let step = reader
                .next(true, FORMAT_MAX_RECORD)
                .map_err(|e| context("reading", reader.path(), e))?;
            match step {
                Step::Record { data } => {
                    let lsn = Lsn::from_raw(*next_lsn);
                    *next_lsn += 1;
                    return Ok(Some(Record { lsn, data }));
                }
                Step::End => self.open_next()?,
                Step::Damaged { offset, reason } => {
                    return Err(corrupt(reader.path(), offset, reason));
                }
                Step::Oversized { offset, len } => {
                    return Err(corrupt(
                        reader.path(),
                        offset,
                        format_args!("a record of {len} bytes"),
                    ));
                }
            }
        }
    }
}

impl Iterator for Iter {
    type Item = io::Result<Record>;

    fn next(&mut self) -> Option<io::Result<Record>> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(record)) => Some(Ok(record)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                self.current = None;
                Some(Err(error))
            }
        }
    }
}

impl std::fmt::Debug for Iter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("segments_left", &self.spans.len())
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}
