//! The group-commit log with its writer on the ring
//! (`Options::writer_on_ring`): where the writer runs, the same LSNs and
//! records as with a thread, segments made on the pool, a runtime that
//! stops before the log, and a real write error on the ring.
#![cfg(target_os = "linux")]

mod support;

use std::io;
use std::path::{Path, PathBuf};

use keel::wal::{Log, Options};
use support::{in_child_process, on_the_ring, run_in_child_process, within, TempDir, TEST_LIMIT};

/// Bytes of a segment header.
const HEADER: u64 = 32;
/// Bytes of a record's frame (length and checksum).
const FRAME: u64 = 8;

fn on_ring() -> Options {
    Options::default().writer_on_ring(true)
}

/// Opens the log in `dir` from a task's context on `rt`.
fn open_on(rt: &keel::Runtime, dir: &Path, opts: Options) -> Log {
    rt.block_on(async { Log::open(dir, opts) })
        .expect("the log opens")
}

/// Every record of the log as (LSN, data).
fn contents(log: &Log) -> Vec<(u64, Vec<u8>)> {
    log.iter()
        .expect("iter starts")
        .map(|r| r.map(|r| (r.lsn.get(), r.data)).expect("record reads"))
        .collect()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    found.sort();
    found
}

#[test]
fn tasks_get_consecutive_lsns_from_a_writer_on_the_ring() {
    within(TEST_LIMIT, || {
        const TASKS: u64 = 40;
        const EACH: u64 = 25;
        let dir = TempDir::new("wal-ring-tasks");
        let rt = on_the_ring(2);
        let log = open_on(&rt, dir.path(), on_ring());
        assert!(log.stats().writer_on_ring);
        let expected = support::append_from_tasks(&rt, &log, TASKS, EACH);
        assert_eq!(contents(&log), expected);
        let stats = log.stats();
        assert_eq!((stats.appends, stats.failed_appends), (TASKS * EACH, 0));
        assert_eq!(stats.write_time, std::time::Duration::ZERO);
        // Closed from a thread that is not a worker: the task's end is
        // waited for, and the directory is free again.
        log.close().unwrap();
        let log = Log::open(dir.path(), Options::default()).unwrap();
        assert!(log.recovery().is_clean());
        assert_eq!(contents(&log), expected);
        log.close().unwrap();
    });
}

#[test]
fn the_writer_task_runs_in_the_class_of_the_task_that_opened_the_log() {
    within(TEST_LIMIT, || {
        let dir = TempDir::new("wal-ring-class");
        let rt = on_the_ring(1);
        let path = dir.path().to_owned();
        let log = rt
            .block_on(rt.spawn_in(keel::Class::BULK, async move { Log::open(path, on_ring()) }))
            .unwrap()
            .unwrap();
        let bulk_polls = |rt: &keel::Runtime| {
            let stats = rt.stats();
            let bulk = stats
                .classes
                .iter()
                .find(|c| c.name == "bulk")
                .expect("a bulk class");
            bulk.polls
        };
        let before = bulk_polls(&rt);
        // Awaited from `block_on`, which is no task of any class: only the
        // writer polls in `bulk`.
        for i in 1..=20u64 {
            assert_eq!(rt.block_on(log.append(b"r")).unwrap().get(), i);
        }
        assert!(
            bulk_polls(&rt) >= before + 20,
            "{} -> {}",
            before,
            bulk_polls(&rt)
        );
        log.close().unwrap();
    });
}

#[test]
fn the_writer_is_a_thread_where_there_is_no_ring() {
    let dir = TempDir::new("wal-ring-none");
    // Outside any runtime.
    let log = Log::open(dir.path().join("outside"), on_ring()).unwrap();
    assert!(!log.stats().writer_on_ring);
    log.close().unwrap();
    // On an epoll runtime.
    let epoll = keel::Runtime::builder()
        .workers(1)
        .io_backend(keel::io::IoBackend::Epoll)
        .build()
        .unwrap();
    let log = open_on(&epoll, &dir.path().join("epoll"), on_ring());
    assert!(!log.stats().writer_on_ring);
    assert_eq!(epoll.block_on(log.append(b"x")).unwrap().get(), 1);
    log.close().unwrap();
    // On the ring, without the option.
    let ring = on_the_ring(1);
    let log = open_on(&ring, &dir.path().join("off"), Options::default());
    assert!(!log.stats().writer_on_ring);
    log.close().unwrap();
}

#[test]
fn segments_roll_over_with_the_writer_on_the_ring() {
    within(TEST_LIMIT, || {
        let dir = TempDir::new("wal-ring-roll");
        let rt = on_the_ring(2);
        let log = open_on(&rt, dir.path(), on_ring().segment_size(1024));
        let records: Vec<Vec<u8>> = (0..60u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
        let appended = records.clone();
        let log2 = log.clone();
        let lsns = rt.block_on(async move {
            keel::spawn(async move {
                let mut lsns = Vec::new();
                for record in &appended {
                    lsns.push(log2.append(record).await.unwrap().get());
                }
                lsns
            })
            .await
            .unwrap()
        });
        assert_eq!(lsns, (1..=60).collect::<Vec<_>>());
        assert!(segments(dir.path()).len() > 5, "{:?}", segments(dir.path()));
        let expected: Vec<(u64, Vec<u8>)> = (1..).zip(records).collect();
        assert_eq!(contents(&log), expected);
        log.close().unwrap();
        let log = Log::open(dir.path(), Options::default().segment_size(1024)).unwrap();
        assert!(log.recovery().is_clean());
        assert_eq!(contents(&log), expected);
        log.close().unwrap();
    });
}

#[test]
fn a_runtime_that_stops_first_closes_the_log_with_an_error() {
    within(TEST_LIMIT, || {
        let dir = TempDir::new("wal-ring-stop");
        let rt = on_the_ring(2);
        let log = open_on(&rt, dir.path(), on_ring());
        for i in 1..=10u64 {
            assert_eq!(rt.block_on(log.append(&[i as u8; 50])).unwrap().get(), i);
        }
        drop(rt);
        // Nobody writes any more: an append fails at once, never hangs.
        let error = support::block_on(log.append(b"late")).expect_err("the log is closed");
        assert!(error.to_string().contains("stopped first"), "{error}");
        assert!(log.close().is_err());
        // What was acknowledged is there.
        let log = Log::open(dir.path(), Options::default()).unwrap();
        assert_eq!(contents(&log).len(), 10);
        log.close().unwrap();
    });
}

#[test]
fn the_last_handle_dropped_with_the_runtimes_tasks_does_not_wait_for_itself() {
    within(TEST_LIMIT, || {
        let dir = TempDir::new("wal-ring-last");
        let rt = on_the_ring(2);
        let log = open_on(&rt, dir.path(), on_ring());
        assert_eq!(rt.block_on(log.append(b"one")).unwrap().get(), 1);
        // A task holds the last handle and never ends: the runtime's drop
        // drops it, and with it the log, while the writer task waits to be
        // dropped too.
        rt.spawn(async move {
            let _log = log;
            std::future::pending::<()>().await;
        });
        drop(rt);
        let log = Log::open(dir.path(), Options::default()).expect("the directory is free");
        assert_eq!(contents(&log), vec![(1, b"one".to_vec())]);
        log.close().unwrap();
    });
}

/// A file size limit (`RLIMIT_FSIZE`) makes the ring's write of a batch
/// stop at the limit (short) or fail with `EFBIG`; the batch fails, what
/// reached the file is cut off, and the log goes on. In a child process,
/// since the limit applies to the whole process.
#[test]
fn a_write_error_on_the_ring_fails_the_batch_and_the_log_goes_on() {
    if !in_child_process() {
        run_in_child_process("a_write_error_on_the_ring_fails_the_batch_and_the_log_goes_on");
        return;
    }
    const LIMIT: u64 = 16 * 1024;
    support::limit_file_size(LIMIT);

    let dir = TempDir::new("wal-ring-efbig");
    let rt = on_the_ring(1);
    let log = open_on(&rt, dir.path(), on_ring());
    assert!(log.stats().writer_on_ring);
    let fit = (LIMIT - HEADER) / (FRAME + 1000);
    for i in 1..=fit {
        assert_eq!(rt.block_on(log.append(&[1; 1000])).unwrap().get(), i);
    }
    let error = rt
        .block_on(log.append(&[2; 1000]))
        .expect_err("past the size limit");
    assert!(error.to_string().contains("writing 1 records"), "{error}");
    let cause = std::error::Error::source(&error).and_then(|s| s.downcast_ref::<io::Error>());
    assert!(
        cause.is_some_and(
            |e| e.raw_os_error() == Some(libc::EFBIG) || e.kind() == io::ErrorKind::WriteZero
        ),
        "{error}: {cause:?}"
    );
    let segment = &segments(dir.path())[0];
    assert_eq!(
        std::fs::metadata(segment).unwrap().len(),
        HEADER + fit * (FRAME + 1000)
    );
    assert_eq!(rt.block_on(log.append(&[3; 100])).unwrap().get(), fit + 1);
    log.close().unwrap();

    let log = Log::open(dir.path(), Options::default()).unwrap();
    assert!(log.recovery().is_clean());
    let data = contents(&log);
    assert_eq!(data.len() as u64, fit + 1);
    assert_eq!(data.last().unwrap().1, vec![3; 100]);
    log.close().unwrap();
}
