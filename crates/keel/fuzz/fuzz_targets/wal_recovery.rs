//! The log's recovery on any bytes: each input is a directory of up to
//! three segment files (see `tests/support/fuzz_wal.rs`), opened and
//! compared with a reference reading of the format. A panic anywhere, or
//! an allocation past the run's malloc limit, is a crash.

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/support/fuzz_wal.rs"]
mod fuzz_wal;

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// This process's log directory, in memory where there is a tmpfs.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        base.join(format!("keel-fuzz-wal-{}", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    fuzz_wal::check(data, dir());
});
