//! [`Lsn`] and [`Record`]: what an append returns and what the iterator
//! yields.

use std::fmt;

/// A log sequence number: the position of a record in the log.
///
/// The first record ever appended to a log is `Lsn 1`, and LSNs are
/// consecutive: a record that did not become durable never took one, so
/// every number up to [`LogStats::last_lsn`](super::LogStats::last_lsn)
/// names a record that [`Log::iter`](super::Log::iter) returns.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Lsn(u64);

impl Lsn {
    /// The LSN of the first record of a log.
    pub const FIRST: Lsn = Lsn(1);

    /// Wraps a raw LSN read back from elsewhere (an index, a peer). Zero is
    /// no record's LSN, so it gives `None`.
    pub fn new(lsn: u64) -> Option<Lsn> {
        (lsn != 0).then_some(Lsn(lsn))
    }

    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// An LSN the caller knows to be non-zero.
    pub(crate) fn from_raw(lsn: u64) -> Lsn {
        debug_assert_ne!(lsn, 0, "LSN 0 names no record");
        Lsn(lsn)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<Lsn> for u64 {
    fn from(lsn: Lsn) -> u64 {
        lsn.0
    }
}

/// One durable record, as [`Log::iter`](super::Log::iter) returns it.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Record {
    /// Its position in the log.
    pub lsn: Lsn,
    /// The bytes that were appended.
    pub data: Vec<u8>,
}
