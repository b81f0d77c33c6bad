//! Files: [`read()`], [`write()`] and friends, and [`File`], on the blocking
//! pool, or on the ring where the runtime has one.
//!
//! Regular files are always "ready" to epoll, so a reactor cannot make
//! their reads and writes asynchronous; a read that misses the page cache,
//! or an `fsync`, blocks the thread that makes it for as long as the device
//! takes. Every call here therefore runs the `std::fs` call on the
//! runtime's [blocking pool](crate::blocking), through
//! [`unblock`]: when the pool is full, the
//! calling task waits for room (back-pressure) instead of being refused,
//! and the workers never block.
//!
//! On the io_uring driver ([`Builder::io_backend`]), a task on the
//! workers opens files ([`OpenOptions::open`], [`File::open`],
//! [`File::create`]), reads them ([`File::read`]) and syncs them
//! ([`File::sync_data`], [`File::sync_all`]) on the ring instead, and the
//! task is woken by the completion, without a pool thread:
//!
//! - opens, and reads the page cache serves, are done by the kernel at
//!   submission: about 2 µs a call where the pool's round trip costs 20
//!   to 30 (`cargo bench -p keel --bench fs`; BENCHMARKS.md, "Files");
//! - syncs run in the kernel's own workers;
//! - a read is made at submission or not at all (`RWF_NOWAIT`). One the
//!   kernel would have handed to its workers (the page cache misses; any
//!   read on tmpfs) goes to the pool instead, where it costs less than on
//!   those workers; after two in a row, so do the handle's later reads,
//!   with a try on the ring every 256. An `O_DIRECT` handle
//!   ([`File::from_std`]) reads on the pool.
//!
//! Writes ([`File::write`], [`File::write_all`]) stay on the pool. On
//! the ring a write at the file position made without blocking and cut
//! short leaves the position where it was (seen on Linux 6.18 with XFS),
//! and one allowed to block is handed to the kernel's workers on ext4
//! and tmpfs, at more than the pool's cost.
//!
//! Off the workers (in `block_on`'s own future) these calls still run on
//! the pool, which is quicker there. The whole-file helpers ([`read()`],
//! [`write()`] and so on) stay on the pool everywhere: one pool job
//! opens, reads or writes, and closes, where the ring would take a round
//! trip for each.
//!
//! [`Builder::io_backend`]: crate::Builder::io_backend
//!
//! ```
//! let rt = keel::Runtime::new().unwrap();
//! rt.block_on(async {
//!     let path = std::env::temp_dir().join(format!("keel-fs-doc-{}", std::process::id()));
//!     keel::fs::write(&path, b"hello").await.unwrap();
//!     assert_eq!(keel::fs::read(&path).await.unwrap(), b"hello");
//!     keel::fs::remove_file(&path).await.unwrap();
//! });
//! ```
//!
//! # What to expect
//!
//! - Errors are the `std::io::Error`s of the system calls, with their OS
//!   codes and kinds (`NotFound`, `PermissionDenied`, ...). A call that
//!   could not run at all (the runtime shut down, or no pool thread could
//!   be started) also fails with an `io::Error`.
//! - Buffers cross to the pool thread, or to the ring's operation, by
//!   copy: a [`File::write`] copies its bytes (at most [`MAX_CHUNK`] per
//!   call) into a buffer the job owns, a [`File::read`] reads into one
//!   the job or the operation owns and copies out. The caller's buffer is
//!   never borrowed by another thread or by the kernel.
//! - Dropping a call's future before its job starts cancels the job. A job
//!   that has started cannot be interrupted: it finishes on the pool
//!   thread and its result is lost. On the ring, a dropped call's
//!   operation always finishes, with its own buffer, and an open's new
//!   descriptor is then closed. For a [`File`] read, write or seek, the
//!   file position is then unknown (the call may or may not have
//!   happened, in part or in full) until the dropped call has finished;
//!   seek to a known position after that before relying on it.
//! - Every function must be called inside a keel runtime (a task or
//!   [`Runtime::block_on`](crate::Runtime::block_on)) and panics
//!   otherwise, like [`spawn`](crate::spawn).

mod file;
mod open_options;

pub use file::{File, MAX_CHUNK};
pub use open_options::OpenOptions;

use std::io;
use std::path::Path;

use crate::blocking::unblock;

/// Runs `f` on the blocking pool, waiting for room; flattens the pool's
/// error into the call's.
pub(crate) async fn run<T, F>(f: F) -> io::Result<T>
where
    F: FnOnce() -> io::Result<T> + Send + 'static,
    T: Send + 'static,
{
    unblock(f).await?
}

/// Reads the whole file at `path`; see [`std::fs::read`].
///
/// # Errors
///
/// Those of [`std::fs::read`], such as `NotFound`; see the [module
/// docs](self) for the rest.
pub async fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let path = path.as_ref().to_owned();
    run(move || std::fs::read(path)).await
}

/// Reads the whole file at `path` as UTF-8; see [`std::fs::read_to_string`].
///
/// # Errors
///
/// Those of [`std::fs::read_to_string`], such as `NotFound`, or
/// `InvalidData` for bytes that are not UTF-8.
pub async fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    let path = path.as_ref().to_owned();
    run(move || std::fs::read_to_string(path)).await
}

/// Writes `contents` to the file at `path`, creating it or replacing what
/// it held; see [`std::fs::write`]. The bytes are copied for the pool
/// thread. Nothing is synced to the device: open a [`File`] and call
/// [`File::sync_data`] for that.
///
/// # Errors
///
/// Those of [`std::fs::write`], such as `NotFound` for a missing directory.
pub async fn write(path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> io::Result<()> {
    let path = path.as_ref().to_owned();
    let contents = contents.as_ref().to_vec();
    run(move || std::fs::write(path, contents)).await
}

/// The metadata of the file at `path`, following symbolic links; see
/// [`std::fs::metadata`].
///
/// # Errors
///
/// Those of [`std::fs::metadata`], such as `NotFound`.
pub async fn metadata(path: impl AsRef<Path>) -> io::Result<std::fs::Metadata> {
    let path = path.as_ref().to_owned();
    run(move || std::fs::metadata(path)).await
}

/// Removes the file at `path`; see [`std::fs::remove_file`].
///
/// # Errors
///
/// Those of [`std::fs::remove_file`], such as `NotFound`.
pub async fn remove_file(path: impl AsRef<Path>) -> io::Result<()> {
    let path = path.as_ref().to_owned();
    run(move || std::fs::remove_file(path)).await
}
