//! File calls from a task on a worker: `keel::fs` on the ring
//! (`keel-uring`), `keel::fs` on the blocking pool (`keel-epoll`) and
//! `tokio::fs` (tokio's blocking pool), side by side.
//!
//! - `read_4k`: one 4 KiB read at the file position of a 1 MiB file;
//! - `write_4k`: one 4 KiB write at the file position, which wraps to the
//!   start every 1 MiB;
//! - `open`: an open of an existing file for reading, and its close.
//!
//! The file stays in the page cache, so the figures are what each way
//! costs around the system call (the hand-off to the pool and back, or
//! the ring's submission and completion), not the device's time.
//! tokio's `File::write` returns once the bytes are copied into its own
//! buffer and writes them in the background; the next write waits for
//! that one, so a loop of writes measures the same work.
//!
//! Run: `cargo bench -p keel --bench fs`.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// Workers of each runtime.
const WORKERS: usize = 2;
/// Bytes of one read or write.
const CHUNK: usize = 4096;
/// The file's length: reads and writes wrap to its start.
const FILE_LEN: usize = 1 << 20;

/// A keel runtime on `backend`.
fn keel_on(backend: keel::io::IoBackend) -> keel::Runtime {
    keel::Runtime::builder()
        .workers(WORKERS)
        .io_backend(backend)
        .build()
        .expect("build keel runtime")
}

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .expect("build tokio runtime")
}

/// What one iteration does.
#[derive(Clone, Copy, Debug)]
enum Call {
    Read,
    Write,
    Open,
}

/// The body of [`keel_calls`] and [`tokio_calls`]: `iters` calls of
/// `call` on `path` through the `fs` module `$fs`, timed. The two
/// runtimes' files differ in type and traits but not in these calls'
/// names, so one body serves both.
macro_rules! timed_calls {
    ($fs:path, $call:expr, $path:expr, $iters:expr) => {{
        use $fs as fs;
        let (call, path, iters): (Call, PathBuf, u64) = ($call, $path, $iters);
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .await
            .unwrap();
        let mut buf = vec![7u8; CHUNK];
        let start = Instant::now();
        for i in 0..iters {
            if i % (FILE_LEN / CHUNK) as u64 == 0 && !matches!(call, Call::Open) {
                file.seek(SeekFrom::Start(0)).await.unwrap();
            }
            match call {
                Call::Read => assert_eq!(file.read(&mut buf).await.unwrap(), CHUNK),
                Call::Write => file.write_all(&buf).await.unwrap(),
                Call::Open => drop(fs::File::open(&path).await.unwrap()),
            }
        }
        file.flush().await.unwrap();
        start.elapsed()
    }};
}

/// `iters` calls of `call` on `path` through `keel::fs`, timed.
async fn keel_calls(call: Call, path: PathBuf, iters: u64) -> Duration {
    timed_calls!(keel::fs, call, path, iters)
}

/// The same through `tokio::fs`.
async fn tokio_calls(call: Call, path: PathBuf, iters: u64) -> Duration {
    timed_calls!(tokio::fs, call, path, iters)
}

fn bench_file_calls(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("keel-bench-fs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    std::fs::write(&path, vec![1u8; FILE_LEN]).unwrap();
    let uring = keel_on(keel::io::IoBackend::Uring);
    let epoll = keel_on(keel::io::IoBackend::Epoll);
    let tokio = tokio_rt();
    let mut group = c.benchmark_group("fs");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for (name, call) in [
        ("read_4k", Call::Read),
        ("write_4k", Call::Write),
        ("open", Call::Open),
    ] {
        for (runtime, rt) in [("keel-uring", &uring), ("keel-epoll", &epoll)] {
            group.bench_function(BenchmarkId::new(runtime, name), |b| {
                b.iter_custom(|iters| on_keel(rt, call, &path, iters))
            });
        }
        group.bench_function(BenchmarkId::new("tokio", name), |b| {
            b.iter_custom(|iters| {
                let path = path.clone();
                tokio
                    .block_on(tokio.spawn(tokio_calls(call, path, iters)))
                    .unwrap()
            })
        });
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

/// [`keel_calls`] in a task on a worker of `rt` (only a worker's calls go
/// to the ring).
fn on_keel(rt: &keel::Runtime, call: Call, path: &Path, iters: u64) -> Duration {
    rt.block_on(rt.spawn(keel_calls(call, path.to_owned(), iters)))
        .unwrap()
}

/// `criterion_group!`'s entry point is `pub` and undocumented: kept in a
/// private module, out of `missing_docs`.
mod entry {
    use super::{bench_file_calls, criterion_group};

    criterion_group!(benches, bench_file_calls);
}

criterion_main!(entry::benches);
