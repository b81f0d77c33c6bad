//! `OpenOptions`: how to open a [`File`].
//!
//! The flags are kept twice: in a [`std::fs::OpenOptions`] for an open on
//! the blocking pool, and as [`Flags`] for an open on the ring, which
//! needs them as `open(2)` takes them. [`Flags::open_flags`] turns them
//! into `O_*` flags with the checks `std` makes, so that both ways accept
//! and refuse the same combinations (a test tries every one).

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{run, File};
use crate::io::ring_file::open_on_ring;

/// The permission bits of a created file when [`OpenOptions::mode`] is
/// not called: read and write for all, before the umask, as `std`'s.
const DEFAULT_MODE: u32 = 0o666;

/// How to open a [`File`]: the flags of [`std::fs::OpenOptions`], with an
/// `open` that runs on the blocking pool, or on the ring for a task on
/// the workers of an io_uring runtime. Every flag starts unset.
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
    flags: Flags,
}

/// The options as plain flags, for an open on the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flags {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
}

impl Flags {
    /// `open(2)`'s flags for these options (without `O_CLOEXEC`, which
    /// every open adds), or an `InvalidInput` error for a combination that
    /// `std` refuses too: no access at all; `create`, `create_new` or
    /// `truncate` without a way to write; `truncate` with `append` unless
    /// the file is new anyway.
    fn open_flags(&self) -> io::Result<i32> {
        let refused = |why: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        let writes = self.write || self.append;
        let creates = self.create || self.create_new || self.truncate;
        let access = match (self.read, writes) {
            (true, false) => libc::O_RDONLY,
            (false, true) => libc::O_WRONLY,
            (true, true) => libc::O_RDWR,
            (false, false) if creates => {
                return refused("a file is created or truncated only when opened to write")
            }
            (false, false) => return refused("a file is opened to read, write or append"),
        };
        if !writes && creates {
            return refused("a file is created or truncated only when opened to write");
        }
        if self.append && self.truncate && !self.create_new {
            return refused("a file opened to append is truncated only when it is new");
        }
        let creation = if self.create_new {
            libc::O_CREAT | libc::O_EXCL
        } else {
            let create = if self.create { libc::O_CREAT } else { 0 };
            let truncate = if self.truncate { libc::O_TRUNC } else { 0 };
            create | truncate
        };
        let append = if self.append { libc::O_APPEND } else { 0 };
        Ok(access | creation | append)
    }
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
            flags: Flags {
                read: false,
                write: false,
                append: false,
                truncate: false,
                create: false,
                create_new: false,
                mode: DEFAULT_MODE,
            },
        }
    }

    /// Open for reading.
    pub fn read(&mut self, read: bool) -> &mut OpenOptions {
        self.std.read(read);
        self.flags.read = read;
        self
    }

    /// Open for writing.
    pub fn write(&mut self, write: bool) -> &mut OpenOptions {
        self.std.write(write);
        self.flags.write = write;
        self
    }

    /// Open for appending: every write goes to the end of the file.
    /// Implies `write`.
    pub fn append(&mut self, append: bool) -> &mut OpenOptions {
        self.std.append(append);
        self.flags.append = append;
        self
    }

    /// Truncate the file to 0 bytes when opening it (needs `write`).
    pub fn truncate(&mut self, truncate: bool) -> &mut OpenOptions {
        self.std.truncate(truncate);
        self.flags.truncate = truncate;
        self
    }

    /// Create the file if it does not exist (needs `write` or `append`).
    pub fn create(&mut self, create: bool) -> &mut OpenOptions {
        self.std.create(create);
        self.flags.create = create;
        self
    }

    /// Create the file, failing with `AlreadyExists` if it exists (needs
    /// `write` or `append`; overrides `create` and `truncate`).
    pub fn create_new(&mut self, create_new: bool) -> &mut OpenOptions {
        self.std.create_new(create_new);
        self.flags.create_new = create_new;
        self
    }

    /// The permission bits of a file created by this open (before the
    /// process's umask); see `std::os::unix::fs::OpenOptionsExt::mode`.
    #[cfg(unix)]
    pub fn mode(&mut self, mode: u32) -> &mut OpenOptions {
        std::os::unix::fs::OpenOptionsExt::mode(&mut self.std, mode);
        self.flags.mode = mode;
        self
    }

    /// Opens the file at `path` with these options: on the blocking pool,
    /// or, from a task on the workers of an io_uring runtime, on the ring
    /// (`IORING_OP_OPENAT`).
    ///
    /// # Errors
    ///
    /// Those of [`std::fs::OpenOptions::open`]: `NotFound`,
    /// `AlreadyExists`, `PermissionDenied`, `InvalidInput` for flags that
    /// do not go together or a path with a NUL byte, and so on.
    pub async fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
        if let Some((c_path, flags)) = self.open_flags_for_the_ring(path)? {
            if let Some(opening) = open_on_ring(c_path, flags, self.flags.mode) {
                return Ok(File::from_std(opening.await?));
            }
        }
        let options = self.std.clone();
        let path = path.to_owned();
        let file = run(move || options.open(path)).await?;
        Ok(File::from_std(file))
    }

    /// The path and `open(2)` flags of an open on the ring, checked as
    /// `std` checks them; `None` where the open goes to the pool.
    fn open_flags_for_the_ring(&self, path: &Path) -> io::Result<Option<(CString, i32)>> {
        if crate::io::ring_file::ring_worker().is_none() {
            return Ok(None);
        }
        let flags = self.flags.open_flags()?;
        let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "file name contained an unexpected NUL byte",
            )
        })?;
        Ok(Some((path, flags)))
    }
}
