//! The on-disk format: segment headers, record frames and segment file
//! names. Pure encoding and decoding; no IO happens here.
//!
//! See the [module docs](super) for the layout in prose.

use std::path::Path;

/// The first eight bytes of every segment file.
pub(crate) const MAGIC: [u8; 8] = *b"keel-wal";

/// The format version this code writes and the only one it reads.
pub(crate) const VERSION: u32 = 1;

/// Bytes in a segment header: magic (8), version (4), flags (4), first LSN
/// (8), CRC32C of the preceding 24 bytes (4), reserved (4). A multiple of
/// eight, so the first record starts aligned.
pub(crate) const HEADER_LEN: u64 = 32;

/// Bytes in front of every record's data: length (4) and CRC32C (4).
pub(crate) const FRAME_LEN: usize = 8;

/// The largest record the format can hold: its length field is a `u32`.
pub(crate) const FORMAT_MAX_RECORD: usize = u32::MAX as usize;

/// The largest first LSN a segment header may name: a billion records a
/// second would take 146 years to get there, so a larger one is damage,
/// and LSN arithmetic below it cannot overflow.
pub(crate) const MAX_LSN: u64 = 1 << 62;

/// The extension of segment file names.
pub(crate) const SEGMENT_EXT: &str = "wal";

/// Digits in a segment file name: enough for any `u64`, zero-padded so that
/// names sort in LSN order.
const NAME_DIGITS: usize = 20;

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    /// The LSN of the first record stored in the segment.
    pub(crate) first_lsn: u64,
}

/// Why bytes that should be a segment header are not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderError {
    /// Fewer than [`HEADER_LEN`] bytes.
    Short,
    /// The magic is wrong: not a keel log segment.
    BadMagic,
    /// A version this code does not read.
    Version(u32),
    /// The header's checksum does not match.
    BadChecksum,
    /// The header names LSN 0, which no record has, or one over
    /// [`MAX_LSN`].
    BadLsn(u64),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Short => write!(f, "segment header shorter than {HEADER_LEN} bytes"),
            HeaderError::BadMagic => f.write_str("not a keel log segment (bad magic)"),
            HeaderError::Version(v) => {
                write!(f, "segment format version {v} (this build reads {VERSION})")
            }
            HeaderError::BadChecksum => f.write_str("segment header checksum mismatch"),
            HeaderError::BadLsn(lsn) => write!(f, "segment header names LSN {lsn}"),
        }
    }
}

impl SegmentHeader {
    /// The header's bytes.
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN as usize] {
        let mut out = [0u8; HEADER_LEN as usize];
        out[0..8].copy_from_slice(&MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        // 12..16: flags, none defined yet.
        out[16..24].copy_from_slice(&self.first_lsn.to_le_bytes());
        let crc = crc32c::crc32c(&out[0..24]);
        out[24..28].copy_from_slice(&crc.to_le_bytes());
        // 28..32: reserved, zero.
        out
    }

    /// Decodes and checks a header from the start of `bytes`.
    pub(crate) fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderError> {
        let bytes = bytes.get(..HEADER_LEN as usize).ok_or(HeaderError::Short)?;
        if bytes[0..8] != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        let stored_crc = u32::from_le_bytes(word(&bytes[24..28]));
        if crc32c::crc32c(&bytes[0..24]) != stored_crc {
            return Err(HeaderError::BadChecksum);
        }
        let version = u32::from_le_bytes(word(&bytes[8..12]));
        if version != VERSION {
            return Err(HeaderError::Version(version));
        }
        let first_lsn = u64::from_le_bytes(dword(&bytes[16..24]));
        if first_lsn == 0 || first_lsn > MAX_LSN {
            return Err(HeaderError::BadLsn(first_lsn));
        }
        Ok(SegmentHeader { first_lsn })
    }
}

/// The checksum stored in a record's frame: CRC32C over the little-endian
/// length followed by the data, so a length that was torn or flipped fails
/// the check as surely as the data does.
pub(crate) fn record_crc(len: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), data)
}

/// The frame and data of one record, ready to be written: length (u32 LE),
/// CRC32C (u32 LE), data.
///
/// The caller has checked `data.len() <= FORMAT_MAX_RECORD`.
pub(crate) fn frame(data: &[u8]) -> Vec<u8> {
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(FRAME_LEN + data.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&record_crc(len, data).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// Splits a record frame into its length and stored CRC.
pub(crate) fn decode_frame(frame: &[u8; FRAME_LEN]) -> (u32, u32) {
    (
        u32::from_le_bytes(word(&frame[0..4])),
        u32::from_le_bytes(word(&frame[4..8])),
    )
}

/// The file name of the segment whose first record is `first_lsn`.
pub(crate) fn segment_name(first_lsn: u64) -> String {
    format!("{first_lsn:0NAME_DIGITS$}.{SEGMENT_EXT}")
}

/// The first LSN a segment file name stands for, or `None` if `path` is not
/// named like a segment (such files are not part of the log).
pub(crate) fn parse_segment_name(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    let digits = name.strip_suffix(SEGMENT_EXT)?.strip_suffix('.')?;
    if digits.len() != NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // LSN 0 names no record, so no segment starts there.
    digits
        .parse()
        .ok()
        .filter(|&lsn| lsn != 0 && lsn <= MAX_LSN)
}

fn word(bytes: &[u8]) -> [u8; 4] {
    let mut out = [0; 4];
    out.copy_from_slice(bytes);
    out
}

fn dword(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0; 8];
    out.copy_from_slice(bytes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let header = SegmentHeader { first_lsn: 12_345 };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
    }

    #[test]
    fn damaged_headers_are_refused() {
        let bytes = SegmentHeader { first_lsn: 7 }.encode();
        assert_eq!(SegmentHeader::decode(&bytes[..31]), Err(HeaderError::Short));
        let mut bad = bytes;
        bad[0] ^= 1;
        assert_eq!(SegmentHeader::decode(&bad), Err(HeaderError::BadMagic));
        let mut bad = bytes;
        bad[17] ^= 1;
        assert_eq!(SegmentHeader::decode(&bad), Err(HeaderError::BadChecksum));
        let mut bad = bytes;
        bad[8] = 2;
        let crc = crc32c::crc32c(&bad[0..24]);
        bad[24..28].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(SegmentHeader::decode(&bad), Err(HeaderError::Version(2)));
        let zero = SegmentHeader { first_lsn: 0 }.encode();
        assert_eq!(SegmentHeader::decode(&zero), Err(HeaderError::BadLsn(0)));
        let huge = SegmentHeader {
            first_lsn: u64::MAX,
        }
        .encode();
        assert_eq!(
            SegmentHeader::decode(&huge),
            Err(HeaderError::BadLsn(u64::MAX))
        );
    }

    #[test]
    fn frames_carry_length_and_checksum() {
        let framed = frame(b"hello");
        assert_eq!(framed.len(), FRAME_LEN + 5);
        let (len, crc) = decode_frame(framed[..FRAME_LEN].try_into().unwrap());
        assert_eq!(len, 5);
        assert_eq!(crc, record_crc(5, b"hello"));
        // The length is covered: the same data under another length fails.
        assert_ne!(record_crc(4, b"hello"), crc);
    }

    #[test]
    fn zeroes_are_not_a_valid_empty_record() {
        // A zero-filled tail must not read as a run of empty records.
        assert_ne!(record_crc(0, b""), 0);
    }

    #[test]
    fn segment_names_sort_and_parse() {
        let a = segment_name(9);
        let b = segment_name(10);
        assert!(a < b, "{a} sorts before {b}");
        assert_eq!(parse_segment_name(Path::new(&a)), Some(9));
        let max = segment_name(MAX_LSN);
        assert_eq!(parse_segment_name(Path::new(&max)), Some(MAX_LSN));
        let over = segment_name(u64::MAX);
        assert_eq!(parse_segment_name(Path::new(&over)), None);
        assert_eq!(parse_segment_name(Path::new("LOCK")), None);
        assert_eq!(parse_segment_name(Path::new(&segment_name(0))), None);
        assert_eq!(parse_segment_name(Path::new("1.wal")), None);
        assert_eq!(
            parse_segment_name(Path::new("0000000000000000000a.wal")),
            None
        );
        assert_eq!(
            parse_segment_name(Path::new("00000000000000000001.wal.tmp")),
            None
        );
    }
}
