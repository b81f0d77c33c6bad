//! `keel::fs`: whole-file helpers and `File`, round trips through the
//! blocking pool, the errors of the system calls, and file IO under a pool
//! small enough that every call waits for room.

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

#[test]
fn a_file_written_synced_and_read_back_through_one_handle() {
    let dir = TempDir::new("handle");
    let path = dir.join("data");
    let data = pattern(3 * MAX_CHUNK + 17);
    let expected = data.clone();
    runtime().block_on(async move {
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .await
            .unwrap();
        file.write_all(&data).await.unwrap();
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
    });
}

#[test]
fn append_adds_to_the_end_whatever_the_position() {
    let dir = TempDir::new("append");
    let path = dir.join("log");
    runtime().block_on(async {
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
    });
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
    let dir = TempDir::new("errors");
    let missing = dir.join("missing");
    let nested = dir.join("no-such-dir").join("file");
    runtime().block_on(async {
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
    });
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
