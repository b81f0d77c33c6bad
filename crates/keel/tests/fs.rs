//! `keel::fs`: whole-file helpers and `File`, round trips through the
//! blocking pool, the errors of the system calls, and file IO under a pool
//! small enough that every call waits for room.

use std::future::Future;
use std::io::{self, SeekFrom};
use std::path::{Path, PathBuf};

use keel::fs::{self, File, OpenOptions, MAX_CHUNK};
use keel::Runtime;
use support::{runtime, TempDir};

mod support;

/// Reads `file` to its end through `File::read`, in reads of `chunk` bytes.
async fn read_to_end(file: &mut File, chunk: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0; chunk];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            return Ok(out);
        }
        assert!(n <= MAX_CHUNK, "one read returned {n} bytes");
        out.extend_from_slice(&buf[..n]);
    }
}

/// Bytes that differ from one offset to the next, so a misplaced chunk
/// shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[test]
fn write_then_read_round_trips_whole_files() {
    let dir = TempDir::new("whole");
    let path = dir.join("a.txt");
    runtime().block_on(async {
        fs::write(&path, "first version").await.unwrap();
        assert_eq!(fs::read(&path).await.unwrap(), b"first version");
        // `write` replaces what the file held.
        fs::write(&path, b"second").await.unwrap();
        assert_eq!(fs::read_to_string(&path).await.unwrap(), "second");
        let meta = fs::metadata(&path).await.unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.len(), 6);
        fs::remove_file(&path).await.unwrap();
        assert!(!path.exists());
    });
}

/// Runs `body` with a directory of its own twice: in `block_on` of a
/// runtime on epoll, where every call goes to the blocking pool, and in a
/// task on the workers of an io_uring runtime, where opens, reads, writes
/// and syncs complete on the ring.
fn on_the_pool_and_on_the_ring<F, Fut>(name: &str, body: F)
where
    F: Fn(PathBuf) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dir = TempDir::new(name);
    let pool = dir.join("pool");
    std::fs::create_dir(&pool).unwrap();
    runtime().block_on(body(pool));
    let ring = dir.join("ring");
    std::fs::create_dir(&ring).unwrap();
    let rt = support::on_the_ring(2);
    rt.block_on(rt.spawn(body(ring))).unwrap();
    assert_eq!(rt.stats().io.operations_in_flight, 0);
}

#[test]
fn a_file_written_synced_and_read_back_through_one_handle() {
    on_the_pool_and_on_the_ring("handle", written_synced_and_read_back);
}

async fn written_synced_and_read_back(dir: PathBuf) {
    let path = dir.join("data");
    let data = pattern(3 * MAX_CHUNK + 17);
    let expected = data.clone();
    {
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await
            .unwrap();
        file.write_all(&data).await.unwrap();
        // Nothing is buffered in the handle: a flush has nothing to do.
        file.flush().await.unwrap();
        file.sync_data().await.unwrap();
        file.sync_all().await.unwrap();
        assert_eq!(file.metadata().await.unwrap().len(), data.len() as u64);

        assert_eq!(file.seek(SeekFrom::Start(0)).await.unwrap(), 0);
        let back = read_to_end(&mut file, 2 * MAX_CHUNK).await.unwrap();
        assert!(
            back == expected,
            "the bytes read back differ from those written"
        );
        // At the end: reads return 0, and so does an empty buffer.
        assert_eq!(file.read(&mut [0; 8]).await.unwrap(), 0);
        file.seek(SeekFrom::Start(1)).await.unwrap();
        assert_eq!(file.read(&mut []).await.unwrap(), 0);
        let mut two = [0; 2];
        assert_eq!(file.read(&mut two).await.unwrap(), 2);
        assert_eq!(two, [1, 2]);

        // A write returns how much of the buffer it took: at most one chunk.
        file.seek(SeekFrom::Start(0)).await.unwrap();
        let n = file.write(&expected).await.unwrap();
        assert!(n > 0 && n <= MAX_CHUNK, "{n}");
        // Reads and writes move the position that seeks set.
        file.seek(SeekFrom::Start(2)).await.unwrap();
        file.write_all(b"ab").await.unwrap();
        assert_eq!(file.read(&mut two).await.unwrap(), 2);
        assert_eq!(two, [4, 5]);
        assert_eq!(file.seek(SeekFrom::Current(0)).await.unwrap(), 6);
        file.seek(SeekFrom::Start(0)).await.unwrap();
        let mut head = [0; 6];
        assert_eq!(file.read(&mut head).await.unwrap(), 6);
        assert_eq!(head, [0, 1, b'a', b'b', 4, 5]);
    }
}

#[test]
fn append_adds_to_the_end_whatever_the_position() {
    on_the_pool_and_on_the_ring("append", appended_at_the_end);
}

async fn appended_at_the_end(dir: PathBuf) {
    let path = dir.join("log");
    {
        let mut file = File::create(&path).await.unwrap();
        file.write_all(b"one\n").await.unwrap();
        drop(file);
        let mut log = OpenOptions::new().append(true).open(&path).await.unwrap();
        log.write_all(b"two\n").await.unwrap();
        log.seek(SeekFrom::Start(0)).await.unwrap();
        log.write_all(b"three\n").await.unwrap();
        log.sync_data().await.unwrap();
        assert_eq!(
            fs::read_to_string(&path).await.unwrap(),
            "one\ntwo\nthree\n"
        );

        let mut reader = File::open(&path).await.unwrap();
        assert_eq!(
            read_to_end(&mut reader, 5).await.unwrap(),
            b"one\ntwo\nthree\n"
        );
    }
}

#[test]
fn set_len_truncates_and_extends_with_zeros() {
    let dir = TempDir::new("set-len");
    let path = dir.join("sized");
    runtime().block_on(async {
        let mut file = File::create(&path).await.unwrap();
        file.write_all(b"0123456789").await.unwrap();
        file.set_len(4).await.unwrap();
        assert_eq!(file.metadata().await.unwrap().len(), 4);
        file.set_len(6).await.unwrap();
        assert_eq!(fs::metadata(&path).await.unwrap().len(), 6);
        assert_eq!(fs::read(&path).await.unwrap(), b"0123\0\0");

        // Not opened for writing: the OS says no.
        let reader = File::open(&path).await.unwrap();
        let error = reader.set_len(1).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{error}");
    });
}

#[test]
fn errors_come_back_with_their_os_kinds() {
    on_the_pool_and_on_the_ring("errors", errors_with_their_os_kinds);
}

async fn errors_with_their_os_kinds(dir: PathBuf) {
    let missing = dir.join("missing");
    let nested = dir.join("no-such-dir").join("file");
    {
        let not_found = |result: io::Result<()>, what: &str| {
            let error = result.expect_err(what);
            assert_eq!(error.kind(), io::ErrorKind::NotFound, "{what}: {error}");
            assert_eq!(error.raw_os_error(), Some(libc::ENOENT), "{what}: {error}");
        };
        not_found(fs::read(&missing).await.map(drop), "read");
        not_found(
            fs::read_to_string(&missing).await.map(drop),
            "read_to_string",
        );
        not_found(fs::metadata(&missing).await.map(drop), "metadata");
        not_found(fs::remove_file(&missing).await, "remove_file");
        not_found(File::open(&missing).await.map(drop), "File::open");
        not_found(
            fs::write(&nested, b"x").await,
            "write into a missing directory",
        );
        not_found(File::create(&nested).await.map(drop), "File::create");

        fs::write(&missing, b"now it exists").await.unwrap();
        let error = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&missing)
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
        let error = fs::read_to_string(Path::new("/dev/null/x"))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotADirectory, "{error}");

        // Reads and writes the open mode does not allow.
        let mut read_only = File::open(&missing).await.unwrap();
        let error = read_only.write(b"x").await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EBADF), "{error}");
        let mut write_only = OpenOptions::new().write(true).open(&missing).await.unwrap();
        let error = write_only.read(&mut [0; 4]).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EBADF), "{error}");
        let mut directory = File::open(&dir).await.unwrap();
        let error = directory.read(&mut [0; 4]).await.unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EISDIR), "{error}");
        let error = File::open(dir.join("nul\0byte")).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{error}");
    }
}

#[test]
fn file_io_waits_for_room_in_a_tiny_pool_instead_of_failing() {
    const FILES: usize = 40;
    let dir = TempDir::new("tiny-pool");
    let rt = Runtime::builder()
        .workers(2)
        .max_blocking_threads(1)
        .blocking_queue(1)
        .build()
        .unwrap();
    let paths: Vec<PathBuf> = (0..FILES).map(|i| dir.join(&format!("f{i}"))).collect();
    let all = paths.clone();
    rt.block_on(async move {
        let writers: Vec<_> = all
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, path)| {
                keel::spawn(async move {
                    let mut file = File::create(&path).await?;
                    file.write_all(format!("file {i}").as_bytes()).await?;
                    file.sync_data().await?;
                    fs::read_to_string(&path).await
                })
            })
            .collect();
        for (i, writer) in writers.into_iter().enumerate() {
            assert_eq!(writer.await.unwrap().unwrap(), format!("file {i}"));
        }
    });
    let stats = rt.stats().blocking;
    assert_eq!(stats.rejected, 0, "{stats:?}");
    assert!(stats.threads <= 1, "{stats:?}");
    assert!(paths.iter().all(|p| p.exists()));
}

/// A runtime of 2 workers on `backend` whose blocking pool has one thread.
fn one_pool_thread(backend: keel::io::IoBackend) -> Runtime {
    Runtime::builder()
        .workers(2)
        .io_backend(backend)
        .max_blocking_threads(1)
        .build()
        .unwrap_or_else(|error| {
            panic!(
                "this test needs {backend:?}: {error} (probe: {})",
                keel::io::probe_io_uring()
            )
        })
}

/// Holds `rt`'s one blocking pool thread in a job until the sender
/// returned is dropped or sent to.
fn hold_the_pool(rt: &Runtime) -> std::sync::mpsc::Sender<()> {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (started, running) = std::sync::mpsc::channel();
    rt.spawn(async move {
        keel::blocking::unblock(move || {
            started.send(()).unwrap();
            let _ = released.recv();
        })
        .await
    });
    running.recv().unwrap();
    release
}

/// Starts `count` syncs of a new file at `path` (`sync_data` and
/// `sync_all` in turn), each in a task, while `rt`'s one pool thread is
/// held; returns the release of the pool and the syncs' tasks.
fn sync_while_the_pool_is_held(
    rt: &Runtime,
    path: &Path,
    count: usize,
) -> (
    std::sync::mpsc::Sender<()>,
    Vec<keel::JoinHandle<io::Result<()>>>,
) {
    let file = rt.block_on(async {
        let mut file = File::create(path).await.unwrap();
        file.write_all(b"synced").await.unwrap();
        std::sync::Arc::new(file)
    });
    let release = hold_the_pool(rt);
    let syncs = (0..count)
        .map(|i| {
            let file = file.clone();
            rt.spawn(async move {
                if i % 2 == 0 {
                    file.sync_data().await
                } else {
                    file.sync_all().await
                }
            })
        })
        .collect();
    (release, syncs)
}

#[cfg(target_os = "linux")]
#[test]
fn syncs_complete_on_the_ring_while_the_pool_is_busy_and_wait_for_it_on_epoll() {
    let dir = TempDir::new("ring-sync");
    let ring = one_pool_thread(keel::io::IoBackend::Uring);
    let (release, syncs) = sync_while_the_pool_is_held(&ring, &dir.join("ring"), 20);
    // The pool's one thread is held until after the syncs end: on the
    // ring they do not need it.
    ring.block_on(async {
        let all = async {
            for sync in syncs {
                sync.await.unwrap().unwrap();
            }
        };
        keel::time::timeout(std::time::Duration::from_secs(30), all)
            .await
            .expect("the syncs on the ring waited for the held pool thread");
    });
    drop(release);
    assert_eq!(ring.stats().io.operations_in_flight, 0);

    let epoll = one_pool_thread(keel::io::IoBackend::Epoll);
    let (release, syncs) = sync_while_the_pool_is_held(&epoll, &dir.join("epoll"), 20);
    std::thread::sleep(std::time::Duration::from_millis(50));
    // On epoll a sync is a pool job: none can have run yet.
    assert!(syncs.iter().all(|sync| !sync.is_finished()));
    drop(release);
    epoll.block_on(async {
        for sync in syncs {
            sync.await.unwrap().unwrap();
        }
    });
    assert_eq!(std::fs::read(dir.join("ring")).unwrap(), b"synced");
}

#[cfg(target_os = "linux")]
#[test]
fn a_sync_on_the_ring_reports_the_os_error() {
    let rt = support::on_the_ring(1);
    let (reader, _writer) = std::io::pipe().unwrap();
    let pipe = File::from_std(std::fs::File::from(std::os::fd::OwnedFd::from(reader)));
    let error = rt
        .block_on(rt.spawn(async move { pipe.sync_data().await }))
        .unwrap()
        .unwrap_err();
    // fsync(2) on a pipe: EINVAL, as the pool's `sync_data` reports it.
    assert_eq!(error.raw_os_error(), Some(libc::EINVAL), "{error}");
}

#[cfg(target_os = "linux")]
#[test]
fn syncs_dropped_in_flight_finish_with_their_files_closed_after() {
    let dir = TempDir::new("ring-sync-dropped");
    let rt = support::on_the_ring(2);
    for round in 0..20 {
        let path = dir.join(&format!("f{round}"));
        let next_path = dir.join(&format!("g{round}"));
        // In a task: only the workers' syncs go to the ring.
        rt.block_on(rt.spawn(async move {
            let mut file = File::create(&path).await.unwrap();
            file.write_all(b"dropped").await.unwrap();
            for _ in 0..8 {
                // Polled once (queued), then dropped with the file.
                let mut sync = std::pin::pin!(file.sync_data());
                let polled =
                    std::future::poll_fn(|cx| std::task::Poll::Ready(sync.as_mut().poll(cx))).await;
                assert!(polled.is_pending() || matches!(polled, std::task::Poll::Ready(Ok(()))));
            }
            drop(file);
            // New files take the numbers just freed while the dropped
            // syncs may still run; their own syncs complete.
            let mut next = File::create(next_path).await.unwrap();
            next.write_all(b"next").await.unwrap();
            next.sync_all().await.unwrap();
        }))
        .unwrap();
    }
    // Every dropped sync completes and is reaped: nothing stays in flight.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while rt.stats().io.operations_in_flight > 0 && std::time::Instant::now() < deadline {
        rt.block_on(keel::time::sleep(std::time::Duration::from_millis(1)));
    }
    assert_eq!(rt.stats().io.operations_in_flight, 0);
    for round in 0..20 {
        assert_eq!(
            std::fs::read(dir.join(&format!("f{round}"))).unwrap(),
            b"dropped"
        );
        assert_eq!(
            std::fs::read(dir.join(&format!("g{round}"))).unwrap(),
            b"next"
        );
    }
    // And a runtime dropped with syncs in flight shuts down.
    let last = rt.block_on(File::create(dir.join("last"))).unwrap();
    let last = std::sync::Arc::new(last);
    for _ in 0..8 {
        let last = last.clone();
        rt.spawn(async move { last.sync_data().await });
    }
    drop(rt);
}

#[cfg(target_os = "linux")]
#[test]
fn opens_reads_and_syncs_complete_on_the_ring_while_the_pool_is_held() {
    let dir = TempDir::new("ring-rw");
    let path = dir.join("data");
    let data = pattern(2 * MAX_CHUNK + 5);
    std::fs::write(&path, &data).unwrap();
    let rt = one_pool_thread(keel::io::IoBackend::Uring);
    let release = hold_the_pool(&rt);
    // The pool's one thread is held until after the calls end: on the
    // ring they do not need it.
    let calls = rt.spawn(async move {
        let mut reader = File::options().read(true).open(&path).await?;
        let back = read_to_end(&mut reader, MAX_CHUNK + 1).await?;
        reader.sync_all().await?;
        Ok::<_, io::Error>(back)
    });
    let back = rt.block_on(async {
        keel::time::timeout(std::time::Duration::from_secs(30), calls)
            .await
            .expect("the calls on the ring waited for the held pool thread")
            .unwrap()
            .unwrap()
    });
    drop(release);
    assert!(back == data, "the bytes read back differ");
    assert_eq!(rt.stats().io.operations_in_flight, 0);
}

/// Every combination of `OpenOptions`' six flags, in the order
/// read, write, append, truncate, create, create_new.
fn every_option() -> impl Iterator<Item = ([bool; 6], OpenOptions)> {
    (0..64u32).map(|bits| {
        let flag = |i: u32| bits & (1 << i) != 0;
        let flags = [flag(0), flag(1), flag(2), flag(3), flag(4), flag(5)];
        let mut options = OpenOptions::new();
        options
            .read(flags[0])
            .write(flags[1])
            .append(flags[2])
            .truncate(flags[3])
            .create(flags[4])
            .create_new(flags[5]);
        (flags, options)
    })
}

/// What opening `path` with `options` did: the error's kind and OS code,
/// or the file's length after and whether it can be read and written.
async fn open_outcome(
    options: &OpenOptions,
    path: &Path,
) -> Result<(u64, bool, bool), (io::ErrorKind, Option<i32>)> {
    match options.open(path).await {
        Ok(mut file) => {
            let len = file.metadata().await.unwrap().len();
            let reads = file.read(&mut [0; 1]).await.is_ok();
            let writes = file.write(b"w").await.is_ok();
            Ok((len, reads, writes))
        }
        Err(error) => Err((error.kind(), error.raw_os_error())),
    }
}

/// Opens a file that exists and one that does not with every combination
/// of options, in `dir`; the outcomes in order.
async fn open_every_way(dir: PathBuf) -> Vec<String> {
    let mut outcomes = Vec::new();
    for (i, (flags, options)) in every_option().enumerate() {
        let existing = dir.join(format!("existing-{i}"));
        std::fs::write(&existing, b"three").unwrap();
        let missing = dir.join(format!("missing-{i}"));
        let on_existing = open_outcome(&options, &existing).await;
        let on_missing = open_outcome(&options, &missing).await;
        let created = missing.exists();
        outcomes.push(format!(
            "{flags:?}: existing {on_existing:?}, missing {on_missing:?} (created: {created})"
        ));
    }
    outcomes
}

#[cfg(target_os = "linux")]
#[test]
fn the_ring_opens_and_refuses_exactly_what_the_pool_does() {
    let dir = TempDir::new("open-every-way");
    let (pool, ring) = (dir.join("pool"), dir.join("ring"));
    std::fs::create_dir(&pool).unwrap();
    std::fs::create_dir(&ring).unwrap();
    let on_the_pool = runtime().block_on(open_every_way(pool));
    let rt = support::on_the_ring(1);
    let on_the_ring = rt.block_on(rt.spawn(open_every_way(ring))).unwrap();
    for (pool, ring) in on_the_pool.iter().zip(&on_the_ring) {
        assert_eq!(pool, ring, "the pool's open, then the ring's");
    }
    assert_eq!(on_the_pool.len(), 64);
    // Both refuse some combinations and open others.
    assert!(on_the_pool.iter().any(|o| o.contains("Err((InvalidInput")));
    assert!(on_the_pool.iter().any(|o| o.contains("Err((AlreadyExists")));
    assert!(on_the_pool.iter().any(|o| o.contains("missing Ok")));
}

/// The paths the process's open descriptors name.
#[cfg(target_os = "linux")]
fn open_paths() -> Vec<PathBuf> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .collect()
}

#[cfg(target_os = "linux")]
#[test]
fn opens_reads_and_writes_dropped_in_flight_leak_no_descriptor_and_finish() {
    use std::task::Poll;
    let dir = TempDir::new("ring-dropped");
    let path = dir.join("data");
    std::fs::write(&path, pattern(4096)).unwrap();
    let path = path.canonicalize().unwrap();
    let rt = support::on_the_ring(2);
    /// Polls `future` once (which queues its operation), then drops it.
    async fn poll_once_and_drop<T>(future: impl Future<Output = T>) -> bool {
        let mut future = std::pin::pin!(future);
        std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx).is_ready())).await
    }
    let task_path = path.clone();
    let file = rt
        .block_on(rt.spawn(async move {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&task_path)
                .await
                .unwrap();
            for _ in 0..50 {
                poll_once_and_drop(File::open(&task_path)).await;
                let mut buf = [0; 512];
                poll_once_and_drop(file.read(&mut buf)).await;
                poll_once_and_drop(file.write(b"dropped")).await;
            }
            // An open queued after them: the ring submits its queue in
            // order, all at once, so once this completes every dropped
            // operation has been submitted, and is counted in flight until
            // it is reaped.
            drop(File::open(&task_path).await.unwrap());
            file
        }))
        .unwrap();
    // Every dropped operation completes and is reaped, and each open's
    // descriptor is closed with it. The dropped writes' jobs on the pool
    // run to their end too, and move the file position when they do: wait
    // for the pool to be idle as well.
    let left_open = || open_paths().into_iter().filter(|p| *p == path).count();
    let pool_busy = || {
        let pool = rt.stats().blocking;
        pool.queued > 0 || pool.waiting > 0 || pool.idle < pool.threads
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while (rt.stats().io.operations_in_flight > 0 || left_open() > 1 || pool_busy())
        && std::time::Instant::now() < deadline
    {
        rt.block_on(keel::time::sleep(std::time::Duration::from_millis(1)));
    }
    assert_eq!(rt.stats().io.operations_in_flight, 0);
    assert!(!pool_busy(), "{:?}", rt.stats().blocking);
    // Only the handle's own descriptor is left.
    assert_eq!(
        left_open(),
        1,
        "descriptors of {} left open",
        path.display()
    );
    // The handle still works once they are done (its position was unknown
    // until then, as documented).
    let mut file = file;
    rt.block_on(rt.spawn(async move {
        file.seek(SeekFrom::Start(0)).await.unwrap();
        let mut head = [0; 4];
        assert_eq!(file.read(&mut head).await.unwrap(), 4);
    }))
    .unwrap();
    // A dropped write's job on the pool may hold the handle's file a
    // little longer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while left_open() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        left_open(),
        0,
        "descriptors of {} left open",
        path.display()
    );
}
