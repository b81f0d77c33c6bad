//! Unit tests of the writer against a disk that fails on demand
//! (`disk::FaultyDisk`), polled by a minimal executor of their own: the
//! futures need no runtime.

use std::error::Error;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use super::disk::{Disk, Faults, FaultyDisk, RealDisk};
use super::format::{segment_name, FRAME_LEN, HEADER_LEN};
use super::writer::PREPARE_AHEAD;
use super::{lock, Log, Options};

// One definition of each helper for the unit and the integration tests.
#[path = "../../tests/support/block_on.rs"]
pub(super) mod block_on;
#[path = "../../tests/support/temp_dir.rs"]
pub(super) mod temp_dir;
use block_on::block_on;
use temp_dir::TempDir;

/// A log in `dir` whose writer uses a faulty disk, and that disk's faults.
fn faulty_log(dir: &Path, opts: Options) -> (Log, Arc<Mutex<Faults>>) {
    let (disk, faults) = FaultyDisk::new();
    let log = Log::open_with(dir, opts, Box::new(disk)).expect("log opens");
    (log, faults)
}

/// Every record the log holds, as (LSN, data).
fn contents(log: &Log) -> Vec<(u64, Vec<u8>)> {
    log.iter()
        .expect("iter")
        .map(|r| r.map(|r| (r.lsn.get(), r.data)).expect("record reads"))
        .collect()
}

fn os_cause(error: &io::Error) -> Option<i32> {
    error
        .source()
        .and_then(|s| s.downcast_ref::<io::Error>())
        .and_then(|e| e.raw_os_error())
}

fn first_segment_len(dir: &Path) -> u64 {
    std::fs::metadata(dir.join(segment_name(1)))
        .expect("segment exists")
        .len()
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn a_write_error_fails_its_batch_and_the_log_goes_on() {
    let dir = TempDir::new("write-error");
    let (log, faults) = faulty_log(dir.path(), Options::default());
    assert_eq!(block_on(log.append(b"a")).unwrap().get(), 1);

    lock(&faults).fail_writes = 1;
    let error = block_on(log.append(b"b")).expect_err("the write fails");
    assert_eq!(error.kind(), io::ErrorKind::StorageFull);
    assert_eq!(os_cause(&error), Some(libc::ENOSPC), "{error}");
    let text = error.to_string();
    assert!(text.contains("writing 1 records"), "{text}");
    assert!(!text.contains("closed"), "{text}");

    assert_eq!(block_on(log.append(b"c")).unwrap().get(), 2);
    assert_eq!(contents(&log), [(1, b"a".to_vec()), (2, b"c".to_vec())]);
    let stats = log.stats();
    assert_eq!((stats.appends, stats.failed_appends), (2, 1));
    // Two durable batches, the failed one not among them; their syncs
    // took time.
    assert_eq!(stats.batches, 2);
    assert!(stats.sync_time > std::time::Duration::ZERO, "{stats:?}");
    log.close().expect("closes cleanly");

    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert!(log.recovery().is_clean(), "{:?}", log.recovery());
    assert_eq!(contents(&log), [(1, b"a".to_vec()), (2, b"c".to_vec())]);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn a_torn_write_is_cut_back_to_the_durable_length() {
    let dir = TempDir::new("torn-write");
    let (log, faults) = faulty_log(dir.path(), Options::default());
    block_on(log.append(b"a")).unwrap();
    let durable = HEADER_LEN + (FRAME_LEN + 1) as u64;
    // The file holds the record, then zeros prepared ahead.
    assert_eq!(first_segment_len(dir.path()), HEADER_LEN + PREPARE_AHEAD);

    {
        let mut faults = lock(&faults);
        faults.fail_writes = 1;
        faults.torn_writes = true;
    }
    block_on(log.append(&[7u8; 4000])).expect_err("the write fails");
    assert_eq!(lock(&faults).truncates, 1);
    // Half of the record reached the file and was cut off again.
    assert_eq!(first_segment_len(dir.path()), durable);

    assert_eq!(block_on(log.append(b"c")).unwrap().get(), 2);
    log.close().unwrap();
    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert!(log.recovery().is_clean(), "{:?}", log.recovery());
    assert_eq!(contents(&log), [(1, b"a".to_vec()), (2, b"c".to_vec())]);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn a_sync_error_closes_the_log() {
    let dir = TempDir::new("sync-error");
    let (log, faults) = faulty_log(dir.path(), Options::default());
    assert_eq!(block_on(log.append(b"a")).unwrap().get(), 1);

    lock(&faults).fail_syncs = 1;
    // Queued together: the first batch fails its sync, and whatever was
    // still pending fails with it. None may succeed.
    let appends: Vec<_> = (0..50u8).map(|i| log.append(&[i])).collect();
    for append in appends {
        let error = block_on(append).expect_err("no append survives a failed sync");
        let text = error.to_string();
        assert!(text.contains("log closed after an IO error"), "{text}");
        assert!(text.contains("fdatasync"), "{text}");
        assert_eq!(os_cause(&error), Some(libc::EIO), "{text}");
    }
    let later = block_on(log.append(b"later")).expect_err("the log is closed");
    assert!(
        later.to_string().contains("log closed after an IO error"),
        "{later}"
    );
    assert_eq!(log.stats().failed_appends, 51);
    assert_eq!(log.stats().last_lsn.map(|l| l.get()), Some(1));

    let closed = log.close().expect_err("close reports the error");
    assert!(closed.to_string().contains("fdatasync"), "{closed}");
    // The directory is free again, and the acknowledged record is there.
    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert_eq!(contents(&log)[0], (1, b"a".to_vec()));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn a_failed_truncate_after_a_failed_write_closes_the_log() {
    let dir = TempDir::new("truncate-error");
    let (log, faults) = faulty_log(dir.path(), Options::default());
    block_on(log.append(b"a")).unwrap();
    {
        let mut faults = lock(&faults);
        faults.fail_writes = 1;
        faults.torn_writes = true;
        faults.fail_truncates = 1;
    }
    let error = block_on(log.append(&[1u8; 100])).expect_err("the write fails");
    let text = error.to_string();
    assert!(text.contains("log closed after an IO error"), "{text}");
    assert!(text.contains("truncating"), "{text}");
    block_on(log.append(b"c")).expect_err("the log is closed");
    assert!(log.close().is_err());
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn a_failed_segment_creation_fails_its_batch_and_the_log_goes_on() {
    let dir = TempDir::new("create-error");
    let opts = || Options::default().segment_size(HEADER_LEN + 2 * (FRAME_LEN as u64 + 10));
    let (log, faults) = faulty_log(dir.path(), opts());
    for _ in 0..2 {
        block_on(log.append(&[1; 10])).unwrap();
    }
    assert_eq!(log.stats().segments, 1);

    lock(&faults).fail_creates = 1;
    let error = block_on(log.append(&[2; 10])).expect_err("no room and no new segment");
    assert!(error.to_string().contains("creating segment"), "{error}");
    assert_eq!(log.stats().segments, 1);

    assert_eq!(block_on(log.append(&[3; 10])).unwrap().get(), 3);
    assert_eq!(log.stats().segments, 2);
    log.close().unwrap();

    let log = Log::open(dir.path(), opts()).unwrap();
    assert!(log.recovery().is_clean());
    let data: Vec<_> = contents(&log).into_iter().map(|(_, d)| d[0]).collect();
    assert_eq!(data, [1, 1, 3]);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn max_batch_bytes_bounds_every_batch() {
    let dir = TempDir::new("batch-limit");
    let (log, faults) = faulty_log(dir.path(), Options::default().max_batch_bytes(1));
    let appends: Vec<_> = (0..20u8).map(|i| log.append(&[i; 16])).collect();
    for (i, append) in appends.into_iter().enumerate() {
        assert_eq!(block_on(append).unwrap().get(), i as u64 + 1);
    }
    // A batch takes at least one record, and here no more.
    assert_eq!(log.stats().batches, 20);
    // The first segment's header, one write per batch, and one write of
    // zeros prepared ahead (the first batch's; the rest fit in them).
    assert_eq!(lock(&faults).writes, 1 + 20 + 1);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn an_append_polled_after_completion_errs_instead_of_panicking() {
    let dir = TempDir::new("poll-after");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut append = pin!(log.append(b"x"));
    let lsn = block_on(append.as_mut()).unwrap();
    assert_eq!(lsn.get(), 1);
    match append.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) => assert!(e.to_string().contains("polled after"), "{e}"),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A waker that drops the last handle of the log when the writer thread
/// wakes it: the writer must not wait for itself.
#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn the_last_handle_dropped_by_a_waker_on_the_writer_thread_does_not_hang() {
    struct DropOnWake {
        log: Mutex<Option<Log>>,
        waiter: Thread,
    }
    impl Wake for DropOnWake {
        fn wake(self: Arc<Self>) {
            drop(lock(&self.log).take());
            self.waiter.unpark();
        }
    }

    let dir = TempDir::new("drop-on-wake");
    let path = dir.path().to_owned();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let log = Log::open(&path, Options::default()).unwrap();
        let mut append = log.append(b"x");
        let wake = Arc::new(DropOnWake {
            log: Mutex::new(Some(log)),
            waiter: thread::current(),
        });
        let waker = Waker::from(wake.clone());
        let mut cx = Context::from_waker(&waker);
        let lsn = loop {
            if let Poll::Ready(out) = std::pin::Pin::new(&mut append).poll(&mut cx) {
                break out;
            }
            thread::park();
        };
        let _ = done_tx.send(lsn.map(|l| l.get()).map_err(|e| e.to_string()));
    });
    let lsn = done_rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the append completes without a hang");
    assert_eq!(lsn, Ok(1));
    // The writer finishes by itself and frees the directory.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let log = loop {
        match Log::open(dir.path(), Options::default()) {
            Ok(log) => break log,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                assert!(std::time::Instant::now() < deadline, "never freed");
                thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => panic!("reopen failed: {e}"),
        }
    };
    assert_eq!(contents(&log), [(1, b"x".to_vec())]);
}

/// A regrouping writer waits until the appenders it answered are back
/// (the target is reached) and not for its deadline; with nobody coming,
/// it stops waiting at the deadline; and a fixed-free gather takes what
/// is there at once.
#[test]
fn regroup_waits_for_its_target_or_its_deadline() {
    use super::shared::{Gather, Shared};
    use std::time::{Duration, Instant};

    let shared = Arc::new(Shared::new(Vec::new(), 0, usize::MAX));
    let _first = shared.push(vec![1]);
    let _second = shared.push(vec![2]);
    let pusher = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            (shared.push(vec![3]), shared.push(vec![4]))
        })
    };
    let mut batch = Vec::new();
    let started = Instant::now();
    let far = started + Duration::from_secs(60);
    assert!(shared.next_batch(
        Gather::Regroup {
            target: 4,
            until: far
        },
        &mut batch
    ));
    assert_eq!(batch.len(), 4, "the two returning records joined the batch");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "it did not wait out the deadline"
    );
    let stats = shared.stats();
    assert_eq!((stats.regroups, stats.regroups_expired), (1, 0));
    let _late = pusher.join().unwrap();
    batch.clear();

    let _lone = shared.push(vec![5]);
    let soon = Instant::now() + Duration::from_millis(20);
    assert!(shared.next_batch(
        Gather::Regroup {
            target: 8,
            until: soon
        },
        &mut batch
    ));
    assert_eq!(
        batch.len(),
        1,
        "nobody came back; the deadline ended the wait"
    );
    assert!(Instant::now() >= soon);
    let stats = shared.stats();
    assert_eq!(
        (stats.regroups, stats.regroups_expired),
        (2, 1),
        "the wait that ran out is counted as expired"
    );
    batch.clear();

    let _now = shared.push(vec![6]);
    assert!(shared.next_batch(Gather::Now, &mut batch));
    assert_eq!(batch.len(), 1);
    assert_eq!(
        shared.stats().regroups,
        2,
        "a gather without a wait is no regroup"
    );
}

/// A regrouping writer with nothing pending waits for its whole target
/// from the start: the first returning record does not wake it.
#[test]
fn regroup_with_nothing_pending_is_not_woken_by_the_first_record() {
    use super::shared::{Gather, Shared};
    use std::time::{Duration, Instant};

    let shared = Arc::new(Shared::new(Vec::new(), 0, usize::MAX));
    let writer = {
        let shared = Arc::clone(&shared);
        thread::spawn(move || {
            let mut batch = Vec::new();
            let until = Instant::now() + Duration::from_secs(60);
            assert!(shared.next_batch(Gather::Regroup { target: 3, until }, &mut batch));
            batch.len()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !shared.writer_gathering() {
        assert!(Instant::now() < deadline, "the writer never gathered");
        thread::sleep(Duration::from_millis(1));
    }
    let _first = shared.push(vec![1]);
    let _second = shared.push(vec![2]);
    assert!(
        shared.writer_gathering(),
        "records below the target leave the writer gathering"
    );
    let _third = shared.push(vec![3]);
    assert_eq!(writer.join().unwrap(), 3);
    assert_eq!(shared.stats().regroups, 1);
}

/// The regroup window is twice the last write and sync, capped.
#[test]
fn regroup_window_is_two_syncs_and_capped() {
    use super::writer::regroup_window;
    use super::MAX_REGROUP_WAIT;
    use std::time::Duration;

    assert_eq!(
        regroup_window(Duration::from_micros(250)),
        Duration::from_micros(500)
    );
    assert_eq!(regroup_window(Duration::ZERO), Duration::ZERO);
    assert_eq!(regroup_window(Duration::from_millis(5)), MAX_REGROUP_WAIT);
    assert_eq!(regroup_window(Duration::MAX), MAX_REGROUP_WAIT);
}

/// A disk that records the inode of every file it syncs.
struct RecordingDisk {
    synced: Arc<Mutex<Vec<u64>>>,
}

impl Disk for RecordingDisk {
    fn create(&mut self, path: &Path) -> io::Result<std::fs::File> {
        RealDisk.create(path)
    }
    fn open(&mut self, path: &Path) -> io::Result<std::fs::File> {
        RealDisk.open(path)
    }
    fn write_all_at(&mut self, file: &std::fs::File, buf: &[u8], offset: u64) -> io::Result<()> {
        RealDisk.write_all_at(file, buf, offset)
    }
    fn sync_data(&mut self, file: &std::fs::File) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        lock(&self.synced).push(file.metadata()?.ino());
        RealDisk.sync_data(file)
    }
    fn sync_all(&mut self, file: &std::fs::File) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        lock(&self.synced).push(file.metadata()?.ino());
        RealDisk.sync_all(file)
    }
    fn set_len(&mut self, file: &std::fs::File, len: u64) -> io::Result<()> {
        RealDisk.set_len(file, len)
    }
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        RealDisk.sync_dir(dir)
    }
    fn remove(&mut self, path: &Path) -> io::Result<()> {
        RealDisk.remove(path)
    }
}

/// A whole record that a killed process wrote but never synced is
/// counted by recovery, so recovery syncs it before the log takes an
/// append: otherwise a roll-over would acknowledge later records while
/// the old segment's tail was still only in the page cache, and a power
/// loss would leave a gap that stops the log from opening.
#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn recovery_syncs_what_it_counts_before_taking_appends() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let dir = TempDir::new("recovery-syncs");
    let opts = || Options::default().segment_size(HEADER_LEN + 4 * (FRAME_LEN as u64 + 10));
    let log = Log::open(dir.path(), opts()).unwrap();
    for i in 0..3u8 {
        block_on(log.append(&[i; 10])).unwrap();
    }
    log.close().unwrap();
    let first = dir.path().join(segment_name(1));
    let len = std::fs::metadata(&first).unwrap().len();
    // What a process killed between its write and its sync leaves.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .unwrap();
    file.write_all_at(&super::format::frame(&[3u8; 10]), len)
        .unwrap();
    drop(file);

    let synced = Arc::new(Mutex::new(Vec::new()));
    let disk = RecordingDisk {
        synced: synced.clone(),
    };
    let log = Log::open_with(dir.path(), opts(), Box::new(disk)).unwrap();
    assert_eq!(log.recovery().records, 4);
    let inode = std::fs::metadata(&first).unwrap().ino();
    assert!(
        lock(&synced).contains(&inode),
        "the segment holding the recovered record was synced at open"
    );
    // The next append rolls over; LSN 5 follows the synced record 4.
    assert_eq!(block_on(log.append(&[5u8; 10])).unwrap().get(), 5);
    log.close().unwrap();
}

/// A waker that panics when the writer wakes it is foreign code on the
/// writer thread: its record and the rest of its batch are still
/// answered as durable, and the log goes on.
#[test]
#[cfg_attr(
    miri,
    ignore = "a log on disk: Miri isolates the file system and emulates no fcntl locks"
)]
fn a_panicking_waker_neither_fails_its_batch_nor_closes_the_log() {
    struct Boom;
    impl Wake for Boom {
        fn wake(self: Arc<Self>) {
            panic!("waker panics");
        }
    }
    let dir = TempDir::new("panicking-waker");
    let log = Log::open(dir.path(), Options::default()).unwrap();
    // Keep the writer busy so that the next appends form one batch.
    let first = log.append(&[0u8; 10]);
    let mut boom = log.append(b"panicking waker");
    let innocent = log.append(b"innocent");
    let waker = Waker::from(Arc::new(Boom));
    assert!(pin!(&mut boom)
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    block_on(first).unwrap();
    assert!(block_on(innocent).is_ok());
    assert!(
        block_on(boom).is_ok(),
        "answered, though its waker panicked"
    );
    assert!(block_on(log.append(b"later")).is_ok(), "the log goes on");
    log.close().unwrap();
}
