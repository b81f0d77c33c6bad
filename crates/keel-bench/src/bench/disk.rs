//! The disk under the S5 log: how fast it syncs, and whether it is a disk.
//!
//! S5's figures are only meaningful against the disk's own speed: a group
//! commit can never acknowledge more than `clients` records per
//! `fdatasync`, so `clients / median sync latency` is an open-loop limit
//! (reported as `limit_records_per_s`). The log is judged against the
//! closed-loop ceiling, which adds the clients' round trip to the sync
//! (see `s5.rs`). The latency is measured here as the log writes: over
//! blocks of zeros written and synced ahead (see the log's
//! `PREPARE_AHEAD`), so that each `fdatasync` flushes data only and
//! commits no new size or blocks to the filesystem's journal; appending
//! instead costs the disk measured here about 70% more (281 µs against
//! the log's 165 µs for 8 records). It is measured in the directory the
//! log will use, and after each loaded phase again with the bytes of the
//! batch the log committed per sync, which is what a sync under that load
//! really costs. A directory on tmpfs syncs in nanoseconds and would make
//! every figure a fiction, so it is detected and reported.
//!
//! The probe runs on the CPUs of the node under test, not the harness's.
//! The disk's completion interrupt is delivered to one CPU, and a sync
//! whose thread runs elsewhere waits for a wake across CPUs as well: on
//! this 2-vCPU VM, with the virtio disk's interrupt on CPU 1, a loop of
//! 4,160-byte write + `fdatasync` took a median of 155–191 µs on CPU 0
//! and 94–136 µs on CPU 1 (2026-11-29, interleaved runs). Timed on the
//! harness's CPU, the ceiling would move with the interrupt's placement,
//! not with the node's own cost.
//!
//! After the first loaded phase the probe also spaces its syncs as that
//! phase's closed loop does: each sync is followed by the clients' round
//! trip and turns (spun on the node's CPU, as its worker spends them
//! serving the clients) before the next write, because on the disk
//! measured here a sync costs more on average when the disk was left
//! alone before it. On this 2-vCPU VM's virtio disk, 4,160-byte write +
//! `fdatasync` over synced zeros, pinned to CPU 1, six rounds of 2 s per
//! gap on a quiet host (2026-11-29 11:06), the mean sync was 47.8–59.2
//! µs back to back, 58.8–81.0 µs with 50 µs spun between syncs and
//! 58.6–82.6 µs with 100 µs; in every round both spaced means were above
//! the back-to-back one (by 1.9 to 35 µs), while the medians moved by a
//! few µs: the slow syncs come more often. A log in a closed loop of 8
//! clients leaves the disk alone for at least the round trip and the
//! turns between syncs (its own hand-offs come on top), so a ceiling
//! built on back-to-back syncs asks it for a sync that no log in that
//! loop gets from this disk, and one built on syncs spaced by the
//! model's own gap does not ask less of it than the model says.
//!
//! Both the median and the mean are kept: a closed loop's rate is its
//! clients over the *mean* cycle, so the ceiling is built from the mean;
//! the median is the disk's figure a reader compares across runs.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench::placement::CpuSet;
use crate::error::{Context, Error};

/// The filesystem magic number of tmpfs (`TMPFS_MAGIC` in linux/magic.h).
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// What the sync probe measured.
#[derive(Debug, Clone, Serialize)]
pub struct SyncLatency {
    /// Syncs timed.
    pub samples: usize,
    /// Median write (over synced zeros) + `fdatasync` time, µs.
    pub p50_us: f64,
    /// Mean of the same, µs.
    pub mean_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
}

/// Most bytes of zeros the probe writes ahead; past them, its writes wrap
/// around to the start of the file (still overwrites).
const PREPARED_MAX: usize = 64 << 20;

/// Times `samples` writes of `bytes` bytes (one write each, at successive
/// offsets over zeros written and synced beforehand), each followed by
/// `fdatasync` and then by `gap` of spinning before the next write, in a
/// scratch file in `dir` (removed afterwards), on a thread pinned to
/// `cpus` (see the module docs); stops early after `budget`.
pub fn sync_latency(
    dir: &Path,
    bytes: usize,
    samples: usize,
    gap: Duration,
    budget: Duration,
    cpus: &CpuSet,
) -> Result<SyncLatency, Error> {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                cpus.pin_current_thread()?;
                time_syncs(dir, bytes, samples, gap, budget)
            })
            .join()
            .unwrap_or_else(|_| Err(Error::new("the disk probe's thread panicked")))
    })
}

/// [`sync_latency`]'s measurement, on the calling thread.
fn time_syncs(
    dir: &Path,
    bytes: usize,
    samples: usize,
    gap: Duration,
    budget: Duration,
) -> Result<SyncLatency, Error> {
    std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("fdatasync-probe");
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .context(|| format!("creating {}", path.display()))?;
    let bytes = bytes.clamp(1, PREPARED_MAX);
    let slots = samples.clamp(1, PREPARED_MAX / bytes);
    file.write_all_at(&vec![0u8; slots * bytes], 0)
        .and_then(|()| file.sync_all())
        .context(|| format!("preparing {}", path.display()))?;
    let block = vec![0x5au8; bytes];
    let deadline = Instant::now() + budget;
    let mut times = Vec::with_capacity(samples);
    for sample in 0..samples.max(1) {
        let offset = ((sample % slots) * bytes) as u64;
        let start = Instant::now();
        file.write_all_at(&block, offset)
            .and_then(|()| file.sync_data())
            .context(|| format!("writing and syncing {}", path.display()))?;
        let synced = Instant::now();
        times.push(synced.duration_since(start).as_secs_f64() * 1e6);
        if synced >= deadline {
            break;
        }
        // Spun, not slept: the node's CPU is busy with its clients then,
        // and a sleep would time the CPU's wake-up too.
        while synced.elapsed() < gap {
            std::hint::spin_loop();
        }
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    Ok(SyncLatency {
        samples: times.len(),
        p50_us: at(0.5),
        mean_us: times.iter().sum::<f64>() / times.len() as f64,
        p99_us: at(0.99),
    })
}

/// Whether `dir` is on tmpfs (memory, not a disk).
pub fn is_tmpfs(dir: &Path) -> Result<bool, Error> {
    use std::os::unix::ffi::OsStrExt;
    let mut bytes = dir.as_os_str().as_bytes().to_vec();
    bytes.push(0);
    let mut stat = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `bytes` is NUL-terminated and outlives the call; `stat` is a
    // writable statfs the kernel fills on success.
    let rc = unsafe { libc::statfs(bytes.as_ptr().cast(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(Error::new(format!(
            "cannot stat the filesystem of {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: statfs returned 0, so it initialised `stat`.
    let stat = unsafe { stat.assume_init() };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs by target
    Ok(stat.f_type as i64 == TMPFS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe times real syncs and cleans up after itself.
    #[test]
    fn measures_syncs() {
        let dir = std::env::temp_dir().join(format!("keel-disk-test-{}", std::process::id()));
        let allowed = CpuSet::allowed().unwrap();
        // The last CPU allowed: a set of one, as the node's may be.
        let cpus = CpuSet::new(allowed.cpus()[allowed.len() - 1..].to_vec());
        for bytes in [512, 20 * 512] {
            let latency = sync_latency(
                &dir,
                bytes,
                5,
                Duration::ZERO,
                Duration::from_secs(10),
                &cpus,
            )
            .unwrap();
            assert_eq!(latency.samples, 5);
            assert!(latency.p50_us > 0.0 && latency.p99_us >= latency.p50_us);
            // With five samples the p99 is the slowest: the mean lies below it.
            assert!(latency.mean_us > 0.0 && latency.mean_us <= latency.p99_us);
            assert!(!dir.join("fdatasync-probe").exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Each sync but the last is followed by the gap before the next
    /// write: five samples 20 ms apart take at least four gaps.
    #[test]
    fn spaces_its_syncs_by_the_gap() {
        let dir = std::env::temp_dir().join(format!("keel-disk-gap-{}", std::process::id()));
        let allowed = CpuSet::allowed().unwrap();
        let cpus = CpuSet::new(allowed.cpus()[allowed.len() - 1..].to_vec());
        let gap = Duration::from_millis(20);
        let started = Instant::now();
        let latency = sync_latency(&dir, 512, 5, gap, Duration::from_secs(10), &cpus).unwrap();
        assert_eq!(latency.samples, 5);
        assert!(started.elapsed() >= gap * 4, "{:?}", started.elapsed());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// /dev/shm is tmpfs where it exists; a missing path is an error.
    #[test]
    fn detects_tmpfs() {
        if Path::new("/dev/shm").is_dir() {
            assert!(is_tmpfs(Path::new("/dev/shm")).unwrap());
        }
        assert!(is_tmpfs(Path::new("/no/such/dir")).is_err());
    }
}
