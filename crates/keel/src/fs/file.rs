//! `File`: an open file whose calls run on the blocking pool, and whose
//! reads and syncs complete on the ring where the runtime has one.

use std::fmt;
use std::fs::Metadata;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::Arc;

use super::{run, OpenOptions};
use crate::io::ring_file::{
    read_on_ring, sync_on_ring, would_block_on_ring, Always, SyncKind, AT_POSITION,
};

/// Most bytes one [`File::read`] or [`File::write`] moves: 1 MiB.
///
/// Each call copies through a buffer of its own, on the pool thread or
/// held by the ring's operation. The cap bounds that buffer and the time
/// one call holds a pool thread, while keeping the cost of the hand-off
/// (some microseconds) small next to the copy and the system call.
/// [`File::write_all`] loops over chunks of this size; a read returns at
/// most this much, as a read may.
pub const MAX_CHUNK: usize = 1 << 20;

/// An open file. Every call runs on the runtime's blocking pool (see
/// [`crate::fs`]), except the reads and syncs of a task on the workers of
/// an io_uring runtime, which complete on the ring (reads only where the
/// kernel makes them without blocking: see [`crate::fs`]).
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
    /// Whether the next read tries the ring (see [`RingPath`]).
    reads: RingPath,
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
            reads: RingPath::for_reads_of(&file),
            std: Arc::new(file),
        }
    }

    /// Reads up to `buf.len()` bytes (at most [`MAX_CHUNK`]) at the file
    /// position into `buf`, and returns how many; 0 at the end of the file
    /// (or for an empty `buf`).
    ///
    /// On the ring the read is made at submission, from the page cache;
    /// one that would wait for the device goes to the pool, and after two
    /// in a row so do this handle's later reads, but for a try on the ring
    /// every 256 reads (see `RingPath`).
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
        if self.reads.tries_the_ring() {
            if let Some(read) = read_on_ring(&self.std, &mut buf[..len], AT_POSITION) {
                if let Some(done) = self.reads.answered(read.await) {
                    return done;
                }
            }
        }
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
    /// returns how many were written. Writes run on the pool on the ring's
    /// runtime too (see [`crate::fs`] for why).
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

    /// Does nothing and succeeds: a `File` keeps no bytes of its own, every
    /// write is handed to the kernel before it returns (as
    /// [`std::fs::File`]'s `flush`, and unlike `tokio::fs::File`, whose
    /// writes return before they are made). Durability is
    /// [`sync_data`](Self::sync_data)'s.
    ///
    /// # Errors
    ///
    /// None.
    pub async fn flush(&mut self) -> io::Result<()> {
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

/// Tries on the ring in a row that would have blocked before a handle's
/// reads go to the pool.
const MISSES_BEFORE_THE_POOL: u32 = 2;
/// Reads on the pool between two tries of the ring.
const POOL_CALLS_BETWEEN_TRIES: u32 = 256;

/// Where a handle's reads go on the ring's runtime.
///
/// A read on the ring is made at submission or not at all (see
/// `io::ring_file::read_on_ring`): where the kernel cannot make it
/// without blocking (the page cache misses; any read on tmpfs), the try
/// costs a round trip to the ring (about 2 µs) before the pool's. So
/// after [`MISSES_BEFORE_THE_POOL`] tries in a row that would have
/// blocked, the handle's reads go to the pool, with a try of the ring
/// once every [`POOL_CALLS_BETWEEN_TRIES`] reads (the cache may have
/// warmed); a filesystem that says it never can (`EOPNOTSUPP`) is not
/// tried again, nor is a handle opened with `O_DIRECT`, whose reads the
/// kernel completes later without moving the file position.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct RingPath {
    /// Never try the ring: the filesystem never reads without blocking,
    /// or the handle is `O_DIRECT`.
    never: bool,
    /// Tries in a row that would have blocked.
    misses: u32,
    /// Calls on the pool since the last try.
    on_the_pool: u32,
}

impl RingPath {
    /// The path of `file`'s reads: never the ring for an `O_DIRECT` file
    /// (or one whose flags cannot be read).
    fn for_reads_of(file: &std::fs::File) -> RingPath {
        // SAFETY: F_GETFL reads the open file's status flags; no memory.
        let flags = unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(file), libc::F_GETFL) };
        RingPath {
            never: flags < 0 || flags & libc::O_DIRECT != 0,
            ..RingPath::default()
        }
    }

    /// Whether this call tries the ring; counts it if it does not.
    fn tries_the_ring(&mut self) -> bool {
        if self.never {
            return false;
        }
        if self.misses < MISSES_BEFORE_THE_POOL {
            return true;
        }
        self.on_the_pool += 1;
        if self.on_the_pool > POOL_CALLS_BETWEEN_TRIES {
            self.on_the_pool = 0;
            return true;
        }
        false
    }

    /// Takes the ring's answer to a try: the call's result, or `None`
    /// where it would have blocked (the caller goes to the pool).
    fn answered(&mut self, result: io::Result<usize>) -> Option<io::Result<usize>> {
        match &result {
            Err(error) => match would_block_on_ring(error) {
                Some(Always(always)) => {
                    self.never |= always;
                    self.misses = self.misses.saturating_add(1);
                    None
                }
                None => Some(result),
            },
            Ok(_) => {
                self.misses = 0;
                self.on_the_pool = 0;
                Some(result)
            }
        }
    }
}

impl fmt::Debug for File {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("File").field("std", &*self.std).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which of `calls` calls try the ring, each try answered by `answer`
    /// (given the try's index).
    fn tries(
        path: &mut RingPath,
        calls: usize,
        answer: impl Fn(usize) -> io::Result<usize>,
    ) -> Vec<usize> {
        let mut tried = Vec::new();
        for call in 0..calls {
            if path.tries_the_ring() {
                tried.push(call);
                path.answered(answer(tried.len() - 1));
            }
        }
        tried
    }

    fn would_block() -> io::Result<usize> {
        Err(io::Error::from_raw_os_error(libc::EAGAIN))
    }

    #[test]
    fn calls_stay_on_the_ring_while_it_makes_them() {
        let mut path = RingPath::default();
        assert_eq!(tries(&mut path, 1000, |_| Ok(1)).len(), 1000);
        // Other errors are the call's own: they are given back and leave
        // the handle on the ring.
        let mut path = RingPath::default();
        let failed = path.answered(Err(io::Error::from_raw_os_error(libc::EBADF)));
        assert_eq!(
            failed.unwrap().unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        assert_eq!(tries(&mut path, 10, |_| Ok(1)).len(), 10);
    }

    #[test]
    fn calls_that_would_block_go_to_the_pool_and_try_the_ring_now_and_then() {
        let mut path = RingPath::default();
        assert!(path.answered(would_block()).is_none());
        let mut path = RingPath::default();
        let every = POOL_CALLS_BETWEEN_TRIES as usize + 1;
        let tried = tries(&mut path, 2 + 3 * every, |_| would_block());
        assert_eq!(tried, vec![0, 1, 1 + every, 1 + 2 * every, 1 + 3 * every]);
    }

    #[test]
    fn a_try_that_works_brings_the_calls_back_to_the_ring() {
        let mut path = RingPath::default();
        let every = POOL_CALLS_BETWEEN_TRIES as usize + 1;
        // Two misses, then the periodic try works: from there on, every
        // call tries the ring again.
        let answer = |try_: usize| if try_ < 2 { would_block() } else { Ok(1) };
        let tried = tries(&mut path, 2 + every + 10, answer);
        assert_eq!(tried.len(), 2 + 1 + 10);
        assert_eq!(tried[2], 1 + every);
    }

    #[test]
    fn a_filesystem_that_never_can_is_not_tried_again() {
        let mut path = RingPath::default();
        let never = |_| Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        assert_eq!(tries(&mut path, 10_000, never), vec![0]);
    }
}
