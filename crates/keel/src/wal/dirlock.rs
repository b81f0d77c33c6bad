//! [`DirLock`]: one open log per directory, across threads and processes.
//!
//! Two logs writing one directory would interleave their records and
//! corrupt it, so `Log::open` takes a lock that lasts while the log is
//! open. It has two parts:
//!
//! - Across processes, a POSIX record lock (`fcntl(F_SETLK)`) on the file
//!   `LOCK` in the directory. The kernel releases it when the process
//!   dies, even by `SIGKILL`, so a crashed node can be restarted at once.
//!   A record lock belongs to the process and is not inherited by a child
//!   it forks; an `flock` lock would be shared with the child until the
//!   child's `exec`, so a log closed while the process starts a program
//!   could not be reopened for that moment.
//! - Within a process, a record lock does not exclude anything (the
//!   process already holds it), and closing *any* descriptor of the file
//!   would release it. So the process keeps a registry of the directories
//!   it has open, keyed by device and inode, and checks it before it even
//!   opens `LOCK`.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

use super::error::{context, plain};
use super::lock;

/// The file in a log's directory that an open log holds locked.
pub(crate) const LOCK_FILE: &str = "LOCK";

/// The directories this process has open as logs, by (device, inode).
static OPEN_DIRS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// The lock on a log's directory; released on drop.
pub(crate) struct DirLock {
    /// The locked `LOCK` file; `None` only while dropping.
    file: Option<File>,
    /// The directory's key in [`OPEN_DIRS`].
    key: (u64, u64),
}

impl DirLock {
    /// Locks `dir`, or fails with [`io::ErrorKind::WouldBlock`] if a log in
    /// this or another process has it open.
    pub(crate) fn acquire(dir: &Path) -> io::Result<DirLock> {
        let meta = fs::metadata(dir).map_err(|e| context("reading", dir, e))?;
        let key = (meta.dev(), meta.ino());
        {
            let mut open = lock(&OPEN_DIRS);
            if open.contains(&key) {
                return Err(in_use(dir, "in this process"));
            }
            open.push(key);
        }
        // From here on, dropping `guard` takes the key out again.
        let mut guard = DirLock { file: None, key };
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| context("opening", &path, e))?;
        // SAFETY: `flock` is a plain C struct of integers, for which all
        // zeroes is a valid value (and the fields we do not set must be
        // zero).
        let mut request: libc::flock = unsafe { std::mem::zeroed() };
        request.l_type = libc::F_WRLCK as libc::c_short;
        request.l_whence = libc::SEEK_SET as libc::c_short;
        // `l_start` and `l_len` zero: the whole file, however long.
        // SAFETY: the descriptor belongs to `file`, open for the whole call,
        // and `request` is a valid `flock` that `F_SETLK` only reads.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &request) };
        if rc == -1 {
            let cause = io::Error::last_os_error();
            return Err(match cause.raw_os_error() {
                Some(libc::EACCES | libc::EAGAIN) => in_use(dir, "in another process"),
                _ => context("locking", &path, cause),
            });
        }
        guard.file = Some(file);
        Ok(guard)
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Close (and so unlock) first, then let this process open it again:
        // the other way round, a new opener's lock could be released by
        // this close.
        drop(self.file.take());
        lock(&OPEN_DIRS).retain(|key| *key != self.key);
    }
}

fn in_use(dir: &Path, where_: &str) -> io::Error {
    plain(
        io::ErrorKind::WouldBlock,
        format!(
            "wal: {} is already open as a log {where_} (it holds {LOCK_FILE})",
            dir.display()
        ),
    )
}
