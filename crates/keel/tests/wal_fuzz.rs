//! The log's recovery on arbitrary bytes: proptest strategies over raw
//! bytes, each read as a directory of up to three segment files (valid,
//! damaged, cut, flipped or garbage; see `support/fuzz_wal.rs`), opened
//! and compared with a reference reading of the format. Recovery never
//! panics, never returns a record whose checksum fails or that follows
//! damage, refuses exactly what it must, and loses nothing it
//! acknowledges afterwards.
//!
//! The same check runs coverage-guided in the cargo-fuzz target
//! `wal_recovery` (`crates/keel/fuzz`), which CI runs for a bounded time;
//! inputs that broke it are pinned below as regression tests.

#[path = "support/fuzz_wal.rs"]
mod fuzz_wal;
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use support::alloc::{reset_thread_largest, thread_largest, Largest};
use support::{within, TEST_LIMIT};

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// The largest allocation allowed on the thread that opens and reads a
/// log of hostile segments (recovery and the iterator run there; the
/// writer thread, which prepares 1 MiB of zeros after an append, is not
/// counted): recovery reads in 64 KiB chunks, and the records here are at
/// most `MAX_RECORD` (1 KiB) and the files a few KiB; frames may claim up
/// to 4 GiB, which a reader that trusted them would allocate.
const ALLOCATION_LIMIT: usize = 256 * 1024;

/// A directory for one test's logs, in memory where the system has a
/// tmpfs (recovery syncs every file it checks), removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        Scratch(base.join(format!("keel-wal-fuzz-{name}-{}", std::process::id())))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Inputs: raw bytes, and bytes that start like a scenario of well-framed
/// records (so that damage lands among valid records more often than raw
/// bytes alone would make it).
fn inputs() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        (
            0u8..3,
            proptest::collection::vec(
                (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..80)),
                1..4
            )
        )
            .prop_map(|(segments, parts)| {
                let mut bytes = vec![segments, 0];
                for (flags, body) in parts {
                    // Records mode, a valid header, and any damage.
                    bytes.push((flags & !3) | 4);
                    bytes.push(body.len() as u8 % 8);
                    bytes.extend(body);
                }
                bytes
            }),
    ]
}

/// 1,000 cases (or `PROPTEST_CASES`).
#[test]
fn recovery_of_any_bytes_matches_the_format() {
    within(TEST_LIMIT, || {
        let scratch = Scratch::new("prop");
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(1_000);
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let tally = std::sync::Mutex::new([0usize; 4]);
        let max_seen = std::cell::Cell::new(0);
        runner
            .run(&inputs(), |input| {
                reset_thread_largest();
                let outcome = fuzz_wal::check(&input, &scratch.0);
                let largest = thread_largest();
                max_seen.set(max_seen.get().max(largest));
                prop_assert!(
                    largest <= ALLOCATION_LIMIT,
                    "an allocation of {largest} bytes"
                );
                let kind = match outcome {
                    fuzz_wal::Outcome::Refused => 0,
                    fuzz_wal::Outcome::Opened { torn: true, .. } => 1,
                    fuzz_wal::Outcome::Opened { records: 0, .. } => 2,
                    fuzz_wal::Outcome::Opened { .. } => 3,
                };
                tally.lock().unwrap()[kind] += 1;
                Ok(())
            })
            .unwrap();
        let [refused, torn, empty, whole] = *tally.lock().unwrap();
        println!(
            "{cases} cases: {refused} refused, {torn} with a torn tail cut, \
             {empty} clean and empty, {whole} clean with records; \
             the largest allocation on the reading thread was {} bytes",
            max_seen.get()
        );
    });
}

/// Directories worth keeping as they are, each checked the same way and
/// with the outcome it must have.
#[test]
fn regressions() {
    use fuzz_wal::{frame, header, Outcome};
    let cat = |parts: &[&[u8]]| parts.concat();
    let one = |bytes: Vec<u8>| BTreeMap::from([(1u64, bytes)]);
    let opened = |records, torn| Outcome::Opened { records, torn };
    let cases: Vec<(BTreeMap<u64, Vec<u8>>, Outcome)> = vec![
        // A frame claiming 4 GiB after a record: cut, nothing allocated
        // for it.
        (
            one(cat(&[&header(1), &frame(b"a"), &[0xff; 4], &[0; 4]])),
            opened(1, true),
        ),
        // A valid record over max_record: refused, not dropped.
        (
            one(cat(&[&header(1), &frame(&[7; fuzz_wal::MAX_RECORD + 1])])),
            Outcome::Refused,
        ),
        // Zeros after the records (room the writer prepared): clean.
        (
            one(cat(&[&header(1), &frame(b"a"), &[0; 100]])),
            opened(1, false),
        ),
        // Zeros, then garbage: a torn tail at the zeros.
        (
            one(cat(&[&header(1), &frame(b"a"), &[0; 12], &[1]])),
            opened(1, true),
        ),
        // Fewer bytes than a frame, not all zero.
        (
            one(cat(&[&header(1), &frame(b"a"), &[0, 0, 1]])),
            opened(1, true),
        ),
        // An empty record is a record.
        (
            one(cat(&[&header(1), &frame(b""), &frame(b"")])),
            opened(2, false),
        ),
        // A torn header on the last segment is removed; one on the first
        // of two is refused.
        (
            BTreeMap::from([(1, cat(&[&header(1), &frame(b"a")])), (2, b"keel".to_vec())]),
            opened(1, true),
        ),
        (
            BTreeMap::from([(1, b"keel".to_vec()), (2, header(2))]),
            Outcome::Refused,
        ),
        // Damage in a segment that is not the last: refused.
        (
            BTreeMap::from([
                (1, cat(&[&header(1), &frame(b"a"), &[9; 9]])),
                (2, header(2)),
            ]),
            Outcome::Refused,
        ),
        // A gap between segments, and a header that is not its name's.
        (
            BTreeMap::from([(1, cat(&[&header(1), &frame(b"a")])), (3, header(3))]),
            Outcome::Refused,
        ),
        (BTreeMap::from([(5, header(6))]), Outcome::Refused),
        // Records across two segments, the second cut in its last record.
        (
            BTreeMap::from([
                (1, cat(&[&header(1), &frame(b"a"), &frame(b"b")])),
                (3, cat(&[&header(3), &frame(b"c"), &frame(b"dd")[..9]])),
            ]),
            opened(3, true),
        ),
    ];
    within(TEST_LIMIT, move || {
        let scratch = Scratch::new("regressions");
        for (files, outcome) in &cases {
            reset_thread_largest();
            assert_eq!(
                fuzz_wal::check_files(files, &scratch.0),
                *outcome,
                "{files:?}"
            );
            let largest = thread_largest();
            assert!(
                largest <= ALLOCATION_LIMIT,
                "{files:?}: an allocation of {largest} bytes"
            );
        }
    });
}
