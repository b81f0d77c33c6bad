//! [`Disk`]: every operation by which the log changes its files (the
//! writer thread's, and those of opening: creating the directory,
//! recovery's cuts, the syncs), behind one trait, so that tests can make
//! any of them fail on demand and see which of them made what durable.
//! Reading goes to the files directly.
//!
//! [`RealDisk`] calls the operating system. In unit tests, `FaultyDisk`
//! wraps it and fails the operations a test asks for, with the errors a
//! full or failing disk gives (`ENOSPC`, `EIO`), and `crash_disk` models
//! the page cache and power loss.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// The file operations by which the log changes its files.
pub(crate) trait Disk: Send + 'static {
    /// Creates (or empties) the file at `path` for reading and writing.
    fn create(&mut self, path: &Path) -> io::Result<File>;
    /// Opens the existing file at `path` for reading and writing.
    fn open(&mut self, path: &Path) -> io::Result<File>;
    /// Writes all of `buf` at `offset` (one `pwrite`, more only if the
    /// kernel takes less).
    fn write_all_at(&mut self, file: &File, buf: &[u8], offset: u64) -> io::Result<()>;
    /// `fdatasync`: the data and the length of `file` reach the disk.
    fn sync_data(&mut self, file: &File) -> io::Result<()>;
    /// `fsync`: the data and all metadata of `file` reach the disk.
    fn sync_all(&mut self, file: &File) -> io::Result<()>;
    /// `ftruncate`: sets the length of `file`.
    fn set_len(&mut self, file: &File, len: u64) -> io::Result<()>;
    /// Syncs the directory `dir`, so that files created or removed in it
    /// survive a crash.
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()>;
    /// Removes the file at `path`.
    fn remove(&mut self, path: &Path) -> io::Result<()>;
    /// Whether these are the operating system's own operations, so that
    /// a batch's write and sync may go to the ring instead (see
    /// `wal::ring_writer`); a disk that fails or records operations for a
    /// test is not.
    fn is_os(&self) -> bool {
        false
    }
}

/// The operating system's file operations.
pub(crate) struct RealDisk;

impl Disk for RealDisk {
    fn create(&mut self, path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    fn open(&mut self, path: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(path)
    }

    fn write_all_at(&mut self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        file.write_all_at(buf, offset)
    }

    fn sync_data(&mut self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    fn sync_all(&mut self, file: &File) -> io::Result<()> {
        file.sync_all()
    }

    fn set_len(&mut self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        sync_dir(dir)
    }

    fn remove(&mut self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn is_os(&self) -> bool {
        true
    }
}

/// Syncs the directory `dir` (opening it read-only and `fsync`ing it, as
/// Linux requires for directory entries to be durable).
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
pub(crate) use faulty::{Faults, FaultyDisk};

#[cfg(test)]
mod faulty {
    use std::fs::File;
    use std::io;
    use std::path::Path;
    use std::sync::{Arc, Mutex};

    use super::{Disk, RealDisk};
    use crate::wal::lock;

    /// Which operations fail next, and counts of what was done.
    #[derive(Debug, Default)]
    pub(crate) struct Faults {
        /// This many writes fail next, with `ENOSPC`.
        pub(crate) fail_writes: u32,
        /// A failing write first writes half its bytes, as a write that
        /// runs out of space midway does.
        pub(crate) torn_writes: bool,
        /// This many `fdatasync` calls fail next, with `EIO`.
        pub(crate) fail_syncs: u32,
        /// This many `ftruncate` calls fail next, with `EIO`.
        pub(crate) fail_truncates: u32,
        /// This many file creations fail next, with `ENOSPC`.
        pub(crate) fail_creates: u32,
        /// Writes that reached the file (in part or whole).
        pub(crate) writes: u64,
        /// `ftruncate` calls made.
        pub(crate) truncates: u64,
    }

    /// A [`Disk`] that fails what its [`Faults`] say, and otherwise does
    /// what [`RealDisk`] does.
    pub(crate) struct FaultyDisk {
        faults: Arc<Mutex<Faults>>,
    }

    impl FaultyDisk {
        /// A disk and the handle through which a test sets its faults.
        pub(crate) fn new() -> (FaultyDisk, Arc<Mutex<Faults>>) {
            let faults = Arc::new(Mutex::new(Faults::default()));
            (
                FaultyDisk {
                    faults: faults.clone(),
                },
                faults,
            )
        }
    }

    /// Takes one from `counter` if it is not zero, returning whether it was.
    fn take(counter: &mut u32) -> bool {
        let due = *counter > 0;
        *counter = counter.saturating_sub(1);
        due
    }

    impl Disk for FaultyDisk {
        fn create(&mut self, path: &Path) -> io::Result<File> {
            if take(&mut lock(&self.faults).fail_creates) {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            RealDisk.create(path)
        }

        fn open(&mut self, path: &Path) -> io::Result<File> {
            RealDisk.open(path)
        }

        fn write_all_at(&mut self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
            let (fail, torn) = {
                let mut faults = lock(&self.faults);
                faults.writes += 1;
                (take(&mut faults.fail_writes), faults.torn_writes)
            };
            if !fail {
                return RealDisk.write_all_at(file, buf, offset);
            }
            if torn {
                RealDisk.write_all_at(file, &buf[..buf.len() / 2], offset)?;
            }
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        }

        fn sync_data(&mut self, file: &File) -> io::Result<()> {
            if take(&mut lock(&self.faults).fail_syncs) {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            RealDisk.sync_data(file)
        }

        fn sync_all(&mut self, file: &File) -> io::Result<()> {
            RealDisk.sync_all(file)
        }

        fn set_len(&mut self, file: &File, len: u64) -> io::Result<()> {
            let fail = {
                let mut faults = lock(&self.faults);
                faults.truncates += 1;
                take(&mut faults.fail_truncates)
            };
            if fail {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            RealDisk.set_len(file, len)
        }

        fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
            RealDisk.sync_dir(dir)
        }

        fn remove(&mut self, path: &Path) -> io::Result<()> {
            RealDisk.remove(path)
        }
    }
}
