//! The group-commit log: round trips, concurrent appends on a keel
//! runtime, recovery of torn tails, refusal of damage that is not a tail,
//! segment roll-over, batching, limits and closing.
//!
//! Injected write and sync failures are unit tests in `src/wal/tests.rs`;
//! here one real OS write error (`EFBIG`, from a file size limit) runs in a
//! child process. Batching is asserted as a count (batches < appends),
//! never as a timing.

mod support;

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

use keel::wal::{Log, Lsn, Options, TailReason};
use support::{
    block_on, in_child_process, run_in_child_process, runtime, within, TempDir, TEST_LIMIT,
};

/// Bytes of a segment header.
const HEADER: u64 = 32;
/// Bytes of a record's frame (length and checksum).
const FRAME: u64 = 8;

/// Record `i` of a test: its index, then up to 300 bytes that depend on
/// it, so a record in the wrong place or with wrong bytes shows.
fn record(i: u64) -> Vec<u8> {
    let len = (i * 7_919) % 300;
    let mut data = i.to_le_bytes().to_vec();
    data.extend((0..len).map(|j| (i ^ j) as u8));
    data
}

/// Appends `records` from `block_on` on a keel runtime, all queued before
/// any is awaited, and returns their LSNs in call order.
fn append_all(log: &Log, records: impl Iterator<Item = Vec<u8>>) -> Vec<u64> {
    let appends: Vec<_> = records.map(|r| log.append(&r)).collect();
    runtime().block_on(async move {
        let mut lsns = Vec::with_capacity(appends.len());
        for append in appends {
            lsns.push(append.await.expect("append succeeds").get());
        }
        lsns
    })
}

/// Every record of the log as (LSN, data), failing on a read error.
fn contents(log: &Log) -> Vec<(u64, Vec<u8>)> {
    log.iter()
        .expect("iter starts")
        .map(|r| r.map(|r| (r.lsn.get(), r.data)).expect("record reads"))
        .collect()
}

/// The segment files of a log, in LSN order.
fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .expect("dir lists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    files.sort();
    files
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).expect("file exists").len()
}

/// XORs the byte at `offset` of `path` with `0xff`.
fn flip_byte(path: &Path, offset: u64) {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, offset).unwrap();
    byte[0] ^= 0xff;
    file.write_all_at(&byte, offset).unwrap();
}

fn truncate_file(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

#[test]
fn public_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Log>();
    send_sync::<keel::wal::Append>();
    send_sync::<keel::wal::Recovery>();
    send_sync::<keel::wal::LogStats>();
    send::<keel::wal::Iter>();
    fn clone<T: Clone>() {}
    clone::<Log>();
}

#[test]
fn round_trip_of_100k_records() {
    const N: u64 = 100_000;
    let dir = TempDir::new("round-trip");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert_eq!(log.recovery().records, 0);

    let lsns = append_all(&log, (0..N).map(record));
    assert_eq!(lsns, (1..=N).collect::<Vec<_>>(), "LSNs follow call order");
    let stats = log.stats();
    assert_eq!(stats.appends, N);
    assert_eq!(stats.last_lsn, Lsn::new(N));
    assert!(stats.batches >= 1 && stats.batches <= N, "{stats:?}");
    // Every batch was written and synced on a real disk: both took time.
    assert!(
        stats.write_time > Duration::ZERO && stats.sync_time > Duration::ZERO,
        "{stats:?}"
    );

    let check = |log: &Log| {
        let mut count = 0;
        for (i, item) in log.iter().unwrap().enumerate() {
            let item = item.expect("record reads");
            assert_eq!(item.lsn.get(), i as u64 + 1);
            assert_eq!(item.data, record(i as u64), "record {i}");
            count += 1;
        }
        assert_eq!(count, N);
    };
    check(&log);
    log.close().unwrap();

    let log = Log::open(dir.path(), Options::default()).unwrap();
    let recovery = log.recovery();
    assert!(recovery.is_clean(), "{recovery:?}");
    assert_eq!(recovery.records, N);
    assert_eq!(recovery.first_lsn, Some(Lsn::FIRST));
    assert_eq!(recovery.last_lsn, Lsn::new(N));
    check(&log);
}

#[test]
fn appends_from_100_tasks_get_distinct_consecutive_lsns() {
    within(TEST_LIMIT, || {
        const TASKS: u64 = 100;
        const EACH: u64 = 30;
        let dir = TempDir::new("tasks");
        let log = Log::open(dir.path(), Options::default()).unwrap();
        let rt = runtime();
        let expected = support::append_from_tasks(&rt, &log, TASKS, EACH);
        // Each LSN holds the record that was acknowledged with it.
        assert_eq!(contents(&log), expected);
        assert_eq!(log.stats().appends, TASKS * EACH);
        log.close().unwrap();
    });
}

/// Writes ten 100-byte records to a fresh log and closes it; returns the
/// segment file.
fn ten_records(dir: &Path) -> PathBuf {
    let log = Log::open(dir, Options::default()).unwrap();
    append_all(&log, (0..10).map(|i| vec![i as u8; 100]));
    log.close().unwrap();
    let files = segments(dir);
    assert_eq!(files.len(), 1);
    assert_eq!(file_len(&files[0]), HEADER + 10 * (FRAME + 100));
    files[0].clone()
}

/// Reopens the log in `dir` after its last record was damaged, and checks
/// that exactly that record was dropped, for `reason`.
fn reopen_without_the_last_of_ten(dir: &Path, dropped: u64, reason: TailReason) {
    let last_record_at = HEADER + 9 * (FRAME + 100);
    let log = Log::open(dir, Options::default()).unwrap();
    let recovery = log.recovery().clone();
    assert_eq!(recovery.records, 9, "{recovery:?}");
    assert_eq!(recovery.last_lsn, Lsn::new(9));
    assert_eq!(recovery.dropped_bytes, dropped, "{recovery:?}");
    let tail = recovery.torn_tail.expect("a torn tail is reported");
    assert_eq!(tail.reason, reason);
    assert_eq!(tail.offset, last_record_at);
    assert_eq!(tail.bytes, dropped);
    assert_eq!(
        file_len(&segments(dir)[0]),
        last_record_at,
        "the tail is cut"
    );

    let expected: Vec<_> = (0..9).map(|i| (i + 1, vec![i as u8; 100])).collect();
    assert_eq!(contents(&log), expected);
    let lsn = block_on(log.append(b"after")).unwrap();
    assert_eq!(lsn.get(), 10, "the next record takes the dropped one's LSN");
    log.close().unwrap();
    let log = Log::open(dir, Options::default()).unwrap();
    assert!(log.recovery().is_clean());
    assert_eq!(log.recovery().records, 10);
}

#[test]
fn a_torn_tail_is_dropped_on_reopen() {
    let last_record_at = HEADER + 9 * (FRAME + 100);
    // Cut in the middle of the last record's data.
    let dir = TempDir::new("torn-data");
    let segment = ten_records(dir.path());
    truncate_file(&segment, last_record_at + FRAME + 40);
    reopen_without_the_last_of_ten(dir.path(), FRAME + 40, TailReason::TornData);

    // Cut in the middle of its frame.
    let dir = TempDir::new("torn-frame");
    let segment = ten_records(dir.path());
    truncate_file(&segment, last_record_at + 3);
    // Those 3 bytes are the length 100 in little-endian, [100, 0, 0]:
    // counted up to the last byte that is not zero, 1 byte was dropped.
    reopen_without_the_last_of_ten(dir.path(), 1, TailReason::TornFrame);
}

#[test]
fn a_flipped_byte_in_the_last_record_is_dropped_on_reopen() {
    let last_record_at = HEADER + 9 * (FRAME + 100);
    // A byte of its data.
    let dir = TempDir::new("flip-data");
    let segment = ten_records(dir.path());
    flip_byte(&segment, last_record_at + FRAME + 57);
    reopen_without_the_last_of_ten(dir.path(), FRAME + 100, TailReason::BadChecksum);

    // The top byte of its length: a garbage length.
    let dir = TempDir::new("flip-length");
    let segment = ten_records(dir.path());
    flip_byte(&segment, last_record_at + 3);
    reopen_without_the_last_of_ten(dir.path(), FRAME + 100, TailReason::BadLength);

    // The low byte of its length: shorter, so the checksum fails.
    let dir = TempDir::new("flip-short-length");
    let segment = ten_records(dir.path());
    flip_byte(&segment, last_record_at);
    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert_eq!(log.recovery().records, 9);
    assert_eq!(log.recovery().dropped_bytes, FRAME + 100);
}

#[test]
fn a_torn_segment_header_is_dropped_on_reopen() {
    let dir = TempDir::new("torn-header");
    ten_records(dir.path());
    // A segment being created when the process died.
    let torn = dir.path().join("00000000000000000011.wal");
    fs::write(&torn, b"keel-wa").unwrap();

    let log = Log::open(dir.path(), Options::default()).unwrap();
    let recovery = log.recovery().clone();
    assert_eq!(recovery.records, 10);
    assert_eq!(recovery.segments, 1);
    assert_eq!(recovery.dropped_bytes, 7);
    let tail = recovery.torn_tail.expect("reported");
    assert_eq!(tail.reason, TailReason::TornSegmentHeader);
    assert_eq!(tail.segment, torn);
    assert!(!torn.exists(), "the torn segment is removed");
    assert_eq!(block_on(log.append(b"next")).unwrap().get(), 11);
}

/// Writes 50 records of 100 bytes into segments of at most 1 KiB and
/// closes the log; returns the segment files. One record per batch, so
/// every segment but the last holds nine.
fn several_segments(dir: &Path) -> Vec<PathBuf> {
    let log = Log::open(dir, Options::default().segment_size(1024)).unwrap();
    for i in 0..50u8 {
        block_on(log.append(&[i; 100])).unwrap();
    }
    log.close().unwrap();
    let files = segments(dir);
    assert!(files.len() >= 5, "{files:?}");
    files
}

#[test]
fn corruption_in_a_segment_that_is_not_the_last_is_an_error() {
    let second_record_data = HEADER + (FRAME + 100) + FRAME + 20;

    let dir = TempDir::new("corrupt-early");
    let files = several_segments(dir.path());
    let len = file_len(&files[0]);
    flip_byte(&files[0], second_record_data);
    let error = Log::open(dir.path(), Options::default()).expect_err("damage is refused");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    let text = error.to_string();
    let name = files[0].file_name().unwrap().to_str().unwrap();
    assert!(text.contains(name), "{text}");
    assert!(
        text.contains(&format!("offset {}", HEADER + FRAME + 100)),
        "{text}"
    );
    assert_eq!(file_len(&files[0]), len, "nothing was cut");

    // A segment cut short that is not the last is not a torn tail either.
    let dir = TempDir::new("short-early");
    let files = several_segments(dir.path());
    truncate_file(&files[1], file_len(&files[1]) - 10);
    let error = Log::open(dir.path(), Options::default()).expect_err("damage is refused");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("not the last"), "{error}");

    // Nor is a missing segment.
    let dir = TempDir::new("gap");
    let files = several_segments(dir.path());
    fs::remove_file(&files[2]).unwrap();
    let error = Log::open(dir.path(), Options::default()).expect_err("a gap is refused");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("LSN"), "{error}");
}

#[test]
fn segments_roll_over_and_iter_crosses_them() {
    const SEGMENT: u64 = 4096;
    let dir = TempDir::new("roll");
    let opts = || Options::default().segment_size(SEGMENT);
    let log = Log::open(dir.path(), opts()).unwrap();
    let lsns = append_all(&log, (0..1_000).map(record));
    assert_eq!(lsns, (1..=1_000).collect::<Vec<_>>());

    let files = segments(dir.path());
    assert!(files.len() >= 20, "{} segments", files.len());
    assert_eq!(log.stats().segments, files.len());
    for file in &files {
        assert!(
            file_len(file) <= SEGMENT,
            "{file:?} is over the segment size"
        );
    }
    let check = |log: &Log| {
        let expected: Vec<_> = (0..1_000).map(|i| (i + 1, record(i))).collect();
        assert_eq!(contents(log), expected);
    };
    check(&log);
    log.close().unwrap();

    let log = Log::open(dir.path(), opts()).unwrap();
    assert_eq!(log.recovery().segments, files.len());
    assert_eq!(log.recovery().records, 1_000);
    check(&log);
}

#[test]
fn reopening_continues_the_lsns() {
    let dir = TempDir::new("reopen");
    let opts = || Options::default().segment_size(512);
    for round in 0..3u64 {
        let log = Log::open(dir.path(), opts()).unwrap();
        assert_eq!(log.recovery().records, round * 5);
        assert_eq!(log.recovery().last_lsn, Lsn::new(round * 5));
        let lsns = append_all(&log, (0..5).map(|i| vec![i as u8; 60]));
        let first = round * 5 + 1;
        assert_eq!(lsns, (first..first + 5).collect::<Vec<_>>());
        log.close().unwrap();
    }
    let log = Log::open(dir.path(), opts()).unwrap();
    let lsns: Vec<_> = contents(&log).into_iter().map(|(lsn, _)| lsn).collect();
    assert_eq!(lsns, (1..=15).collect::<Vec<_>>());
}

#[test]
fn commit_delay_groups_concurrent_appends_into_fewer_batches() {
    within(TEST_LIMIT, || {
        const APPENDS: u64 = 200;
        let dir = TempDir::new("delay");
        let opts = Options::default().commit_delay(Duration::from_millis(20));
        let log = Log::open(dir.path(), opts).unwrap();
        let rt = runtime();
        rt.block_on(async {
            let tasks: Vec<_> = (0..APPENDS)
                .map(|i| {
                    let log = log.clone();
                    keel::spawn(async move { log.append(&record(i)).await.unwrap() })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        let stats = log.stats();
        assert_eq!(stats.appends, APPENDS);
        assert!(stats.batches < stats.appends, "{stats:?}");
        log.close().unwrap();
    });
}

#[test]
fn max_record_is_enforced() {
    let dir = TempDir::new("max-record");
    let log = Log::open(dir.path(), Options::default().max_record(1024)).unwrap();
    let error = block_on(log.append(&[0; 1025])).expect_err("too large");
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
    assert!(error.to_string().contains("1025"), "{error}");
    assert_eq!(block_on(log.append(&[0; 1024])).unwrap().get(), 1);
    assert_eq!(
        block_on(log.append(&[])).unwrap().get(),
        2,
        "empty records are fine"
    );
    let stats = log.stats();
    assert_eq!((stats.appends, stats.failed_appends), (2, 1));
    log.close().unwrap();

    let error = Log::open(dir.path(), Options::default().max_record(usize::MAX))
        .expect_err("over the format's limit");
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn a_valid_record_over_max_record_fails_the_open_instead_of_being_dropped() {
    let dir = TempDir::new("reopen-smaller");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    append_all(&log, [vec![1; 10], vec![2; 2000]].into_iter());
    log.close().unwrap();

    let error = Log::open(dir.path(), Options::default().max_record(1000))
        .expect_err("the large record is not garbage");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("max_record"), "{error}");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert!(log.recovery().is_clean());
    assert_eq!(contents(&log).len(), 2);
}

#[test]
fn appends_after_close_fail() {
    let dir = TempDir::new("closed");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    let other = log.clone();
    block_on(log.append(b"a")).unwrap();
    log.close().unwrap();
    let error = block_on(other.append(b"b")).expect_err("the log is closed");
    assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
    assert!(error.to_string().contains("closed"), "{error}");
    assert_eq!(other.stats().failed_appends, 1);
    // Closing again is harmless.
    other.close().unwrap();
}

#[test]
fn dropping_the_log_and_the_futures_still_makes_records_durable() {
    let dir = TempDir::new("drop");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    for i in 0..100 {
        drop(log.append(&record(i)));
    }
    drop(log);

    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert!(log.recovery().is_clean());
    let expected: Vec<_> = (0..100).map(|i| (i + 1, record(i))).collect();
    assert_eq!(contents(&log), expected);
}

#[test]
fn a_directory_holds_one_open_log() {
    let dir = TempDir::new("lock");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    let error = Log::open(dir.path(), Options::default()).expect_err("already open");
    assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
    log.close().unwrap();
    Log::open(dir.path(), Options::default()).expect("free once closed");
}

/// Another process cannot open a directory this one has open. The child
/// finds the directory by its parent's process id.
#[test]
fn a_directory_is_locked_against_other_processes() {
    let dir_of = |pid: u32| std::env::temp_dir().join(format!("keel-wal-test-xproc-{pid}"));
    if in_child_process() {
        let dir = dir_of(std::os::unix::process::parent_id());
        let error = Log::open(&dir, Options::default()).expect_err("the parent holds it");
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
        assert!(error.to_string().contains("another process"), "{error}");
        return;
    }
    let dir = TempDir::at(dir_of(std::process::id()));
    let log = Log::open(dir.path(), Options::default()).unwrap();
    run_in_child_process("a_directory_is_locked_against_other_processes");
    log.close().unwrap();
}

#[test]
fn appends_work_from_plain_threads_without_a_runtime() {
    let dir = TempDir::new("threads");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let log = log.clone();
            thread::spawn(move || {
                (0..100)
                    .map(|k| block_on(log.append(&record(t * 1_000 + k))).unwrap().get())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut lsns: Vec<u64> = Vec::new();
    for thread in threads {
        let mine = thread.join().unwrap();
        assert!(mine.windows(2).all(|w| w[0] < w[1]));
        lsns.extend(mine);
    }
    lsns.sort_unstable();
    assert_eq!(lsns, (1..=400).collect::<Vec<_>>());
}

#[test]
fn iter_reads_what_was_durable_when_it_started() {
    let dir = TempDir::new("snapshot");
    let log = Log::open(dir.path(), Options::default().segment_size(256)).unwrap();
    append_all(&log, (0..10).map(record));
    let iter = log.iter().unwrap();
    append_all(&log, (10..20).map(record));
    let seen: Vec<_> = iter.map(|r| r.unwrap().lsn.get()).collect();
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    assert_eq!(contents(&log).len(), 20);
}

/// A real write error from the kernel: a file size limit makes `pwrite`
/// fail with `EFBIG` partway through a batch. Runs in a child process,
/// since the limit applies to the whole process.
#[test]
fn a_real_write_error_fails_the_batch_and_the_log_goes_on() {
    if !in_child_process() {
        run_in_child_process("a_real_write_error_fails_the_batch_and_the_log_goes_on");
        return;
    }
    const LIMIT: u64 = 16 * 1024;
    support::limit_file_size(LIMIT);

    let dir = TempDir::new("efbig");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    // 16 records of 1000 bytes fit under the limit; the 17th does not.
    let fit = (LIMIT - HEADER) / (FRAME + 1000);
    for i in 1..=fit {
        assert_eq!(block_on(log.append(&[1; 1000])).unwrap().get(), i);
    }
    let error = block_on(log.append(&[2; 1000])).expect_err("past the size limit");
    let cause = std::error::Error::source(&error)
        .and_then(|s| s.downcast_ref::<io::Error>())
        .and_then(|e| e.raw_os_error());
    assert_eq!(cause, Some(libc::EFBIG), "{error}");
    assert!(error.to_string().contains("writing 1 records"), "{error}");

    // The part that was written is cut off, and a record that fits goes in.
    let segment = &segments(dir.path())[0];
    assert_eq!(file_len(segment), HEADER + fit * (FRAME + 1000));
    assert_eq!(block_on(log.append(&[3; 100])).unwrap().get(), fit + 1);
    log.close().unwrap();

    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert!(log.recovery().is_clean());
    let data = contents(&log);
    assert_eq!(data.len() as u64, fit + 1);
    assert_eq!(data.last().unwrap().1, vec![3; 100]);
}

/// The writer zeroes room ahead of its records, so a log that was not
/// closed cleanly (the process died) ends in zeros. Reopening reads them
/// as the end of the log, not as damage; a torn record written into them,
/// or a stray byte among them, is cut off alone and counted up to its last
/// byte that is not zero.
#[test]
fn zeros_prepared_ahead_are_the_end_of_the_log() {
    let live = TempDir::new("prepared-live");
    let log = Log::open(live.path(), Options::default()).unwrap();
    append_all(&log, (0..10).map(|i| vec![i as u8 + 1; 100]));
    let segment = segments(live.path())[0].clone();
    let durable = HEADER + 10 * (FRAME + 100);
    assert!(file_len(&segment) > durable, "zeros follow the records");
    // What a crash leaves on disk: the segment as it is while open.
    let crashed = |name: &str| {
        let dir = TempDir::new(name);
        fs::create_dir_all(dir.path()).unwrap();
        let copy = dir.path().join(segment.file_name().unwrap());
        fs::copy(&segment, &copy).unwrap();
        (dir, copy)
    };
    let (clean, _) = crashed("prepared-clean");
    let (torn, torn_copy) = crashed("prepared-torn");
    let (stray, stray_copy) = crashed("prepared-stray");
    log.close().unwrap();
    assert_eq!(file_len(&segment), durable, "a clean close cuts the zeros");
    let expected: Vec<_> = (0..10).map(|i| (i + 1, vec![i as u8 + 1; 100])).collect();

    let log = Log::open(clean.path(), Options::default()).unwrap();
    assert!(log.recovery().is_clean(), "{:?}", log.recovery());
    assert_eq!(contents(&log), expected);
    assert_eq!(block_on(log.append(b"after")).unwrap().get(), 11);
    log.close().unwrap();
    let log = Log::open(clean.path(), Options::default()).unwrap();
    assert!(log.recovery().is_clean());
    assert_eq!(log.recovery().records, 11);
    drop(log);

    // A record cut short in the zeros: its frame and 20 bytes of data.
    let file = OpenOptions::new().write(true).open(&torn_copy).unwrap();
    let mut partial = 100u32.to_le_bytes().to_vec();
    partial.extend([0x5a; 4]);
    partial.extend([0xab; 20]);
    file.write_all_at(&partial, durable).unwrap();
    drop(file);
    let log = Log::open(torn.path(), Options::default()).unwrap();
    let tail = log.recovery().torn_tail.clone().expect("a torn tail");
    assert_eq!((tail.offset, tail.bytes), (durable, FRAME + 20), "{tail:?}");
    assert_eq!(tail.reason, TailReason::BadChecksum);
    assert_eq!(contents(&log), expected);
    assert_eq!(file_len(&torn_copy), durable, "the tail is cut");
    drop(log);

    // A stray byte far into the zeros is damage too, not the end.
    let file = OpenOptions::new().write(true).open(&stray_copy).unwrap();
    file.write_all_at(&[1], durable + 5000).unwrap();
    drop(file);
    let log = Log::open(stray.path(), Options::default()).unwrap();
    let tail = log.recovery().torn_tail.clone().expect("a torn tail");
    assert_eq!((tail.offset, tail.bytes), (durable, 5001), "{tail:?}");
    assert_eq!(contents(&log), expected);
}
