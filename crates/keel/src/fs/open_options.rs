//! `OpenOptions`: how to open a [`File`].

use std::io;
use std::path::Path;

use super::{run, File};

/// How to open a [`File`]: the flags of [`std::fs::OpenOptions`], with an
/// `open` that runs on the blocking pool. Every flag starts unset.
///
/// ```
/// use keel::fs::OpenOptions;
///
/// let rt = keel::Runtime::new().unwrap();
/// rt.block_on(async {
///     let path = std::env::temp_dir().join(format!("keel-open-doc-{}", std::process::id()));
///     let mut log = OpenOptions::new().append(true).create(true).open(&path).await.unwrap();
///     log.write_all(b"one line\n").await.unwrap();
///     keel::fs::remove_file(&path).await.unwrap();
/// });
/// ```
#[derive(Debug, Clone)]
pub struct OpenOptions {
    std: std::fs::OpenOptions,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// Options with every flag unset.
    pub fn new() -> OpenOptions {
        OpenOptions {
            std: std::fs::OpenOptions::new(),
        }
    }

    /// Open for reading.
    pub fn read(&mut self, read: bool) -> &mut OpenOptions {
        self.std.read(read);
        self
    }

    /// Open for writing.
    pub fn write(&mut self, write: bool) -> &mut OpenOptions {
        self.std.write(write);
        self
    }

    /// Open for appending: every write goes to the end of the file.
    /// Implies `write`.
    pub fn append(&mut self, append: bool) -> &mut OpenOptions {
        self.std.append(append);
        self
    }

    /// Truncate the file to 0 bytes when opening it (needs `write`).
    pub fn truncate(&mut self, truncate: bool) -> &mut OpenOptions {
        self.std.truncate(truncate);
        self
    }

    /// Create the file if it does not exist (needs `write` or `append`).
    pub fn create(&mut self, create: bool) -> &mut OpenOptions {
        self.std.create(create);
        self
    }

    /// Create the file, failing with `AlreadyExists` if it exists (needs
    /// `write` or `append`; overrides `create` and `truncate`).
    pub fn create_new(&mut self, create_new: bool) -> &mut OpenOptions {
        self.std.create_new(create_new);
        self
    }

    /// The permission bits of a file created by this open (before the
    /// process's umask); see `std::os::unix::fs::OpenOptionsExt::mode`.
    #[cfg(unix)]
    pub fn mode(&mut self, mode: u32) -> &mut OpenOptions {
        std::os::unix::fs::OpenOptionsExt::mode(&mut self.std, mode);
        self
    }

    /// Opens the file at `path` with these options, on the blocking pool.
    ///
    /// # Errors
    ///
    /// Those of [`std::fs::OpenOptions::open`]: `NotFound`,
    /// `AlreadyExists`, `PermissionDenied`, `InvalidInput` for flags that
    /// do not go together, and so on.
    pub async fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let options = self.std.clone();
        let path = path.as_ref().to_owned();
        let file = run(move || options.open(path)).await?;
        Ok(File::from_std(file))
    }
}
