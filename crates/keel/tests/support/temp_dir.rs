//! [`TempDir`]: a directory of a test's own, removed when dropped.
//!
//! Shared by the integration tests (through `support`) and the log's unit
//! tests (which include this file by path).

// Not every includer uses every item.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A fresh, empty directory under the system's temporary directory, named
/// after the test, the process and a counter; removed with its contents on
/// drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates the directory for the test `name`.
    pub fn new(name: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Relaxed);
        let pid = std::process::id();
        TempDir::at(std::env::temp_dir().join(format!("keel-test-{name}-{pid}-{n}")))
    }

    /// Takes `path`, a name another process can find (say, from a
    /// process id), as the test's directory: emptied, created, and removed
    /// on drop like one from [`TempDir::new`].
    pub fn at(path: PathBuf) -> TempDir {
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("the temporary directory is writable");
        TempDir(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
