//! Repairs the writer could not make after a failed sync, made by the next
//! open of the log in this process.
//!
//! After a failed `fsync` or `fdatasync`, the writer puts its files back as
//! they were at the last successful sync (see `writer`): it cuts the
//! segment back to its durable length, or removes a segment whose creation
//! was never made durable. Linux keeps the failed bytes in the page cache,
//! marked clean, so without that repair a reopen in the same boot would
//! count them as records and append after them, and a power loss would
//! leave a hole in front of acknowledged records.
//!
//! When the repair itself fails (the disk is failing), the writer records
//! it here, and [`make`] makes it before recovery reads the directory; the
//! open fails if it still cannot. The record lives in this process only:
//! another process that opens the log in the same boot cannot see it. The
//! error that closed the log says that the repair failed.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::disk::Disk;
use super::error::context;
use super::lock;

/// What to do to a segment before the log is opened again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repair {
    /// Cut it to this many bytes and `fsync` it.
    CutTo(u64),
    /// Remove it and `fsync` its directory.
    Remove,
}

/// The repairs owed, by segment path.
static OWED: Mutex<Vec<(PathBuf, Repair)>> = Mutex::new(Vec::new());

/// Records that `segment` needs `repair` before its log is opened again.
pub(crate) fn remember(segment: &Path, repair: Repair) {
    let mut owed = lock(&OWED);
    owed.retain(|(path, _)| path != segment);
    owed.push((segment.to_owned(), repair));
}

/// Makes the repairs owed to segments in `dir` through `disk`, forgetting
/// each one made; fails on the first that cannot be made.
pub(crate) fn make(dir: &Path, disk: &mut dyn Disk) -> io::Result<()> {
    let due: Vec<(PathBuf, Repair)> = lock(&OWED)
        .iter()
        .filter(|(path, _)| path.parent() == Some(dir))
        .cloned()
        .collect();
    for (path, repair) in due {
        match repair {
            Repair::CutTo(len) => disk
                .open(&path)
                .and_then(|file| disk.set_len(&file, len).and_then(|()| disk.sync_all(&file)))
                .map_err(|e| context("cutting back the segment whose sync failed,", &path, e))?,
            Repair::Remove => {
                match disk.remove(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(context(
                            "removing the segment whose creation failed,",
                            &path,
                            e,
                        ))
                    }
                }
                disk.sync_dir(dir)
                    .map_err(|e| context("syncing the directory", dir, e))?;
            }
        }
        lock(&OWED).retain(|(owed, _)| *owed != path);
    }
    Ok(())
}
