//! `File`: an open file whose calls run on the blocking pool, and whose
//! syncs complete on the ring where the runtime has one.

use std::fmt;
use std::fs::Metadata;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use super::{run, OpenOptions};
use crate::io::ring_file::{sync_on_ring, SyncKind};

/// Most bytes one [`File::read`] or [`File::write`] moves: 1 MiB.
///
/// Each call copies through a buffer of its own on the pool thread. The cap
/// bounds that buffer and the time one call holds a pool thread, while
/// keeping the cost of the hand-off (some microseconds) small next to the
/// copy and the system call. [`File::write_all`] loops over chunks of this
/// size; a read returns at most this much, as a read may.
pub const MAX_CHUNK: usize = 1 << 20;

/// An open file. Every call runs on the runtime's blocking pool (see
/// [`crate::fs`]), except the syncs of a task on the io_uring driver,
/// which complete on the ring.
///
/// Calls that move the file position (`read`, `write`, `seek`) take
/// `&mut self`, so one handle has one of them in flight at a time; the
/// others take `&self`. Dropping the `File` closes it once no call of it
/// is still running on the pool.
///
/// ```
/// use std::io::SeekFrom;
/// use keel::fs::File;
///
/// let rt = keel::Runtime::new().unwrap();
/// rt.block_on(async {
///     let path = std::env::temp_dir().join(format!("keel-file-doc-{}", std::process::id()));
///     let mut file = File::options().read(true).write(true).create(true).truncate(true)
///         .open(&path).await.unwrap();
///     file.write_all(b"durable").await.unwrap();
///     file.sync_data().await.unwrap();
///     file.seek(SeekFrom::Start(0)).await.unwrap();
///     let mut buf = [0; 7];
///     assert_eq!(file.read(&mut buf).await.unwrap(), 7);
///     assert_eq!(&buf, b"durable");
///     keel::fs::remove_file(&path).await.unwrap();
/// });
/// ```
pub struct File {
    /// Shared with the job of a call in flight, which may outlive a
    /// cancelled call.
    std: Arc<std::fs::File>,
}

impl File {
    /// Opens the file at `path` for reading; see [`std::fs::File::open`].
    ///
    /// # Errors
    ///
    /// Those of [`std::fs::File::open`], such as `NotFound`.
    pub async fn open(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).open(path).await
    }

    /// Opens the file at `path` for writing, creating it or truncating it;
    /// see [`std::fs::File::create`].
    ///
    /// # Errors
    ///
    /// Those of [`std::fs::File::create`], such as `NotFound` for a missing
    /// directory.
    pub async fn create(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .await
    }

    /// Options to open a file with: the same as [`OpenOptions::new`].
    pub fn options() -> OpenOptions {
        OpenOptions::new()
    }

    /// Wraps a `std` file; its calls then run on the pool.
    pub fn from_std(file: std::fs::File) -> File {
        File {
            std: Arc::new(file),
        }
    }

    /// Reads up to `buf.len()` bytes (at most [`MAX_CHUNK`]) at the file
    /// position into `buf`, and returns how many; 0 at the end of the file
    /// (or for an empty `buf`).
    ///
    /// # Errors
    ///
    /// Those of [`std::io::Read::read`]. See [`crate::fs`] for what
    /// cancelling a read does to the file position.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len().min(MAX_CHUNK);
        let file = self.std.clone();
        let chunk = run(move || {
            let mut chunk = vec![0; len];
            let n = (&*file).read(&mut chunk)?;
            chunk.truncate(n);
            Ok(chunk)
        })
        .await?;
        buf[..chunk.len()].copy_from_slice(&chunk);
        Ok(chunk.len())
    }

    /// Writes up to [`MAX_CHUNK`] bytes of `buf` at the file position, and
    /// returns how many were written.
    ///
    /// # Errors
    ///
    /// Those of [`std::io::Write::write`]. See [`crate::fs`] for what
    /// cancelling a write does to the file position.
    pub async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let chunk = buf[..buf.len().min(MAX_CHUNK)].to_vec();
        let file = self.std.clone();
        run(move || (&*file).write(&chunk)).await
    }

    /// Writes all of `buf`, one job per [`MAX_CHUNK`] bytes.
    ///
    /// # Errors
    ///
    /// Those of [`std::io::Write::write_all`]; `WriteZero` if the file
    /// accepts no more bytes. After an error, an unknown part of `buf` has
    /// been written.
    pub async fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let chunk = buf[..buf.len().min(MAX_CHUNK)].to_vec();
            let file = self.std.clone();
            run(move || (&*file).write_all(&chunk)).await?;
            buf = &buf[buf.len().min(MAX_CHUNK)..];
        }
        Ok(())
    }

    /// Moves the file position; returns the new position from the start.
    ///
    /// # Errors
    ///
    /// Those of [`std::io::Seek::seek`], such as `InvalidInput` for a
    /// position before the start.
    pub async fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        let file = self.std.clone();
        run(move || (&*file).seek(pos)).await
    }

    /// Flushes the file's data (not all of its metadata) to the device;
    /// see [`std::fs::File::sync_data`] (`fdatasync` on Linux). On the
    /// io_uring driver (see [`Builder::io_backend`]), from a task on the
    /// workers, the sync completes on the ring, without a pool thread.
    ///
    /// [`Builder::io_backend`]: crate::Builder::io_backend
    ///
    /// # Errors
    ///
    /// Those of [`std::fs::File::sync_data`].
    pub async fn sync_data(&self) -> io::Result<()> {
        self.sync(SyncKind::Data).await
    }

    /// Flushes the file's data and metadata to the device; see
    /// [`std::fs::File::sync_all`] (`fsync` on Linux). On the io_uring
    /// driver the sync completes on the ring, as
    /// [`sync_data`](Self::sync_data)'s does.
    ///
    /// # Errors
    ///
    /// Those of [`std::fs::File::sync_all`].
    pub async fn sync_all(&self) -> io::Result<()> {
        self.sync(SyncKind::All).await
    }

    /// A sync of `kind`: on the ring where [`sync_on_ring`] can, else on
    /// the pool.
    async fn sync(&self, kind: SyncKind) -> io::Result<()> {
        if let Some(sync) = sync_on_ring(&self.std, kind) {
            return sync.await;
        }
        let file = self.std.clone();
        run(move || match kind {
            SyncKind::Data => file.sync_data(),
            SyncKind::All => file.sync_all(),
        })
        .await
    }

    /// Truncates or extends the file to `size` bytes; see
    /// [`std::fs::File::set_len`]. The file position does not move.
    ///
    /// # Errors
    ///
    /// Those of [`std::fs::File::set_len`], such as `InvalidInput` for a
    /// file not opened for writing.
    pub async fn set_len(&self, size: u64) -> io::Result<()> {
        let file = self.std.clone();
        run(move || file.set_len(size)).await
    }

    /// The file's metadata; see [`std::fs::File::metadata`].
    ///
    /// # Errors
    ///
    /// Those of [`std::fs::File::metadata`].
    pub async fn metadata(&self) -> io::Result<Metadata> {
        let file = self.std.clone();
        run(move || file.metadata()).await
    }
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("File").field("std", &*self.std).finish()
    }
}
