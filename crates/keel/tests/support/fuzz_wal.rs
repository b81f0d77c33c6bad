//! The log's recovery against arbitrary directories: shared by the
//! proptest in `wal_fuzz.rs` and the cargo-fuzz target `wal_recovery`,
//! which include this file.
//!
//! An input is raw bytes, read by [`Scenario::from_bytes`] as up to three
//! segment files: each with a valid header, a header for another LSN, a
//! damaged or raw one; a body of raw bytes, or of well-framed records;
//! then damage (a cut, a flipped bit, garbage or zeros appended). Every
//! byte string is some scenario, so a fuzzer's mutations all land.
//!
//! [`check`] writes the scenario to a directory, opens the log there and
//! compares what it finds with a reference reading of the format as the
//! `wal` module's docs define it (written here, apart from the code under
//! test):
//!
//! - where the reference says the log cannot be opened (damage before the
//!   last segment, a valid record over `max_record`, a header that
//!   belongs to no such file), `open` fails with `InvalidData` and leaves
//!   every file as it was;
//! - otherwise `open` succeeds; `Recovery` counts the reference's records
//!   and LSNs and reports a torn tail exactly where the reference finds
//!   one; the iterator returns exactly the reference's records (each one
//!   whose checksum matches, in order, none after the first damage);
//! - an append then gets the next LSN, and after a close and a reopen the
//!   log is clean and holds the same records and the appended one:
//!   nothing acknowledged is lost.
//!
//! Nothing may panic, and recovery's memory is bounded by its chunked
//! reads, whatever lengths the frames claim (the fuzz target runs with a
//! malloc limit).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use keel::wal::{Log, Options};

// Included by path here too, so the fuzz target (which includes this file
// alone) shares the tests' executor; a test that also has `support` loads
// it twice, which is harmless.
#[allow(clippy::duplicate_mod)]
#[path = "block_on.rs"]
mod block_on;
use block_on::block_on;

/// The `max_record` the log is opened with: small, so that valid records
/// over it are easy to make.
pub const MAX_RECORD: usize = 1024;

const HEADER_LEN: usize = 32;
const FRAME_LEN: usize = 8;
const MAX_LSN: u64 = 1 << 62;

/// Reads an input's bytes, giving zeros once they run out.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        taken.to_vec()
    }
}

/// The segment files of a log directory, by the first LSN in their names.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub files: BTreeMap<u64, Vec<u8>>,
}

/// A valid segment header naming `first_lsn`.
pub fn header(first_lsn: u64) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN];
    out[0..8].copy_from_slice(b"keel-wal");
    out[8..12].copy_from_slice(&1u32.to_le_bytes());
    out[16..24].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&out[0..24]);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    out
}

/// A record's frame and data.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let len = data.len() as u32;
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(&record_crc(len, data).to_le_bytes());
    out.extend_from_slice(data);
    out
}

fn record_crc(len: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), data)
}

impl Scenario {
    /// The scenario `input` describes (see the module docs).
    pub fn from_bytes(input: &[u8]) -> Scenario {
        let mut r = Reader(input);
        let segments = 1 + r.u8() % 3;
        let mut files = BTreeMap::new();
        let mut name = 1 + u64::from(r.u8() % 4);
        for _ in 0..segments {
            let flags = r.u8();
            let mut bytes = match flags & 3 {
                0 => header(name),
                // A header naming another first LSN than the file name.
                1 => header(name + u64::from(r.u8())),
                // Raw header bytes: short, or garbage.
                2 => {
                    let len = usize::from(r.u8() % 40);
                    r.bytes(len)
                }
                // A valid header with one bit flipped.
                _ => {
                    let mut h = header(name);
                    let bit = r.u8();
                    h[usize::from(bit / 8) % HEADER_LEN] ^= 1 << (bit % 8);
                    h
                }
            };
            let mut records = 0u64;
            if flags & 4 == 0 {
                let len = usize::from(r.u16() % 4096);
                bytes.extend(r.bytes(len));
            } else {
                for _ in 0..r.u8() % 16 {
                    let len = if r.u8() % 8 == 0 {
                        usize::from(r.u16() % 2048)
                    } else {
                        usize::from(r.u8() % 64)
                    };
                    let mut data = r.bytes(len);
                    data.resize(len, 0);
                    bytes.extend(frame(&data));
                    records += 1;
                }
            }
            match (flags >> 3) & 7 {
                1 if !bytes.is_empty() => {
                    let at = usize::from(r.u16()) % bytes.len();
                    bytes.truncate(at);
                }
                2 if !bytes.is_empty() => {
                    let at = usize::from(r.u16()) % bytes.len();
                    bytes[at] ^= 1 << (r.u8() % 8);
                }
                3 => {
                    let n = usize::from(r.u8());
                    bytes.extend(r.bytes(n));
                }
                4 => {
                    let n = usize::from(r.u8());
                    bytes.extend(std::iter::repeat_n(0, n));
                }
                _ => {}
            }
            files.insert(name, bytes);
            // The next segment starts where this one's records end, or
            // somewhere else.
            name += records;
            if flags & 0x40 != 0 {
                name += u64::from(r.u8() % 4);
            }
            if flags & 0x80 != 0 {
                name = name.saturating_sub(1).max(1);
            }
        }
        Scenario { files }
    }
}

/// What the reference reading says `open` must do.
#[derive(Debug, PartialEq, Eq)]
enum Expected {
    /// Refuse to open the log, changing nothing.
    Refused(String),
    /// Open it, finding these records, and a torn tail if any.
    Opened {
        records: Vec<(u64, Vec<u8>)>,
        first_lsn: Option<u64>,
        next_lsn: u64,
        /// The torn tail's file (its first LSN) and offset.
        torn: Option<(u64, u64)>,
    },
}

fn le32(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().unwrap())
}

fn le64(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().unwrap())
}

/// A header's first LSN, if `bytes` start with a valid one.
fn read_header(bytes: &[u8]) -> Option<u64> {
    let h = bytes.get(..HEADER_LEN)?;
    let valid = &h[0..8] == b"keel-wal"
        && crc32c::crc32c(&h[0..24]) == le32(&h[24..28])
        && le32(&h[8..12]) == 1;
    let lsn = le64(&h[16..24]);
    (valid && lsn != 0 && lsn <= MAX_LSN).then_some(lsn)
}

/// The reference reading of a log directory, after the `wal` module docs.
fn expected(files: &BTreeMap<u64, Vec<u8>>) -> Expected {
    let mut records = Vec::new();
    let mut first_lsn = None;
    let mut next: Option<u64> = None;
    let mut torn = None;
    'files: for (i, (&name, bytes)) in files.iter().enumerate() {
        let last = i + 1 == files.len();
        let Some(lsn) = read_header(bytes) else {
            if last && bytes.len() <= HEADER_LEN {
                // A segment whose header never reached the disk: removed.
                next.get_or_insert(name);
                torn = Some((name, 0));
                break;
            }
            return Expected::Refused(format!("segment {name}: a bad header"));
        };
        if lsn != name {
            return Expected::Refused(format!("segment {name}: its header says {lsn}"));
        }
        if next.is_some_and(|n| n != lsn) {
            return Expected::Refused(format!("segment {name}: a gap or overlap"));
        }
        let mut at = HEADER_LEN;
        let mut count = 0u64;
        loop {
            let rest = &bytes[at..];
            let whole = if rest.is_empty() {
                break;
            } else if rest.len() < FRAME_LEN || rest[..FRAME_LEN] == [0; FRAME_LEN] {
                if rest.iter().all(|&b| b == 0) {
                    // Zeros the writer prepared: the end of the records.
                    break;
                }
                None
            } else {
                let len = le32(&rest[0..4]);
                rest.get(FRAME_LEN..FRAME_LEN + len as usize)
                    .filter(|data| record_crc(len, data) == le32(&rest[4..8]))
            };
            let Some(data) = whole else {
                if !last {
                    return Expected::Refused(format!("segment {name}: damage at {at}"));
                }
                torn = Some((name, at as u64));
                next = Some(lsn + count);
                break 'files;
            };
            if data.len() > MAX_RECORD {
                return Expected::Refused(format!("segment {name}: a valid record over max"));
            }
            records.push((lsn + count, data.to_vec()));
            first_lsn.get_or_insert(lsn + count);
            count += 1;
            at += FRAME_LEN + data.len();
        }
        next = Some(lsn + count);
    }
    Expected::Opened {
        records,
        first_lsn,
        next_lsn: next.unwrap_or(1),
        torn,
    }
}

fn options() -> Options {
    Options::default().max_record(MAX_RECORD)
}

/// The segment files in `dir` and their bytes.
fn read_dir(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&p).unwrap())
        })
        .collect()
}

fn contents(log: &Log) -> Vec<(u64, Vec<u8>)> {
    log.iter()
        .expect("the iterator starts")
        .map(|r| {
            let r = r.expect("every record reads");
            (r.lsn.get(), r.data)
        })
        .collect()
}

/// Writes `input`'s scenario into `dir` (emptied first), opens the log
/// and checks it against the reference (see the module docs); panics on
/// any difference.
pub fn check(input: &[u8], dir: &Path) -> Outcome {
    check_files(&Scenario::from_bytes(input).files, dir)
}

/// What a checked directory turned out to be, for a run's tally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The open was refused, as the reference said.
    Refused,
    /// Opened with this many records, and a torn tail cut or not.
    Opened { records: usize, torn: bool },
}

/// [`check`] for segment files given as they are, by first LSN.
pub fn check_files(files: &BTreeMap<u64, Vec<u8>>, dir: &Path) -> Outcome {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    for (lsn, bytes) in files {
        fs::write(dir.join(format!("{lsn:020}.wal")), bytes).unwrap();
    }
    let before = read_dir(dir);
    let expected = expected(files);
    let opened = Log::open(dir, options());
    let (records, next_lsn, torn) = match (expected, opened) {
        (Expected::Refused(why), Err(error)) => {
            assert_eq!(
                error.kind(),
                io::ErrorKind::InvalidData,
                "refused ({why}) with the wrong kind of error: {error}"
            );
            assert!(read_dir(dir) == before, "a refused open changed files");
            return Outcome::Refused;
        }
        (Expected::Refused(why), Ok(log)) => {
            panic!(
                "opened a log the reference refuses ({why}): {:?}",
                log.recovery()
            )
        }
        (Expected::Opened { .. }, Err(error)) => {
            panic!("refused a log the reference opens: {error}")
        }
        (
            Expected::Opened {
                records,
                first_lsn,
                next_lsn,
                torn,
            },
            Ok(log),
        ) => {
            let recovery = log.recovery().clone();
            assert_eq!(recovery.records, records.len() as u64, "{recovery:?}");
            assert_eq!(recovery.first_lsn.map(|l| l.get()), first_lsn);
            assert_eq!(
                recovery.last_lsn.map(|l| l.get()),
                Some(next_lsn - 1).filter(|&l| l > 0)
            );
            let found_torn = recovery.torn_tail.as_ref().map(|t| {
                let name = t.segment.file_stem().unwrap().to_string_lossy();
                (name.parse::<u64>().unwrap(), t.offset)
            });
            assert_eq!(found_torn, torn, "{recovery:?}");
            assert_eq!(contents(&log), records, "the records read back");
            let lsn = block_on(log.append(b"after recovery")).expect("an append after recovery");
            assert_eq!(lsn.get(), next_lsn, "the append's LSN");
            log.close().expect("the log closes");
            (records, next_lsn, torn.is_some())
        }
    };
    // Reopened: clean, the same records, and the acknowledged append.
    let log = Log::open(dir, options()).expect("the log reopens");
    assert!(log.recovery().is_clean(), "{:?}", log.recovery());
    let found = records.len();
    let mut all = records;
    all.push((next_lsn, b"after recovery".to_vec()));
    assert_eq!(contents(&log), all, "the records after a reopen");
    log.close().expect("the log closes");
    Outcome::Opened {
        records: found,
        torn,
    }
}
