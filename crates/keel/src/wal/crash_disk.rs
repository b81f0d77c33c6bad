//! A disk that models the page cache and power loss, and the tests that cut
//! the power at every step of the log's work.
//!
//! `SIGKILL` (what `keel bench s5 --crash` does) leaves the kernel's page
//! cache alone, so it cannot tell a record that was synced from one that
//! was only written. [`CrashDisk`] can. It lets the real files stand for
//! the page cache (every operation is done on them, so recovery and
//! `Log::iter` read what a process would), and keeps beside them what the
//! disk itself holds, as Linux does:
//!
//! - a successful `fdatasync` or `fsync` of a file makes its current
//!   length durable, and the ranges written since its last sync; a failed
//!   one makes nothing durable and forgets those ranges, as the kernel
//!   marks the pages clean and never writes them;
//! - a name (of a file or a directory) becomes durable, or its removal
//!   does, when its directory is synced.
//!
//! A power loss turns that into a directory, in one of the ways of
//! [`Loss`]. The tests run a workload of appends with the power cut
//! before each of the disk operations in turn (and at random points of
//! longer workloads), build each image, open it as a restart would and
//! check every record that was acknowledged before the cut. The same
//! sweep with the disk lying in one of the ways of [`Lie`] (which is what
//! a log that skipped a sync would look like) must fail.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::disk::{Disk, RealDisk};
use super::tests::block_on::block_on;
use super::tests::temp_dir::TempDir;
use super::{lock, Log, Options};
use crate::util::rng::xorshift64;

/// What survives a power loss of the data that was not synced, and of the
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Loss {
    /// The unsynced data is lost; files keep their durable length.
    Dropped,
    /// The files have their current length, and the unsynced ranges read
    /// as zeros (the blocks were allocated, never written).
    Zeroed,
    /// A prefix of the unsynced bytes reached the disk, the rest did not.
    Torn,
    /// Each 512-byte sector of the unsynced ranges reached the disk or
    /// not, independently.
    SectorTorn,
    /// Only durable names survive (a file or directory created since its
    /// directory's last sync is gone; one removed since comes back), and
    /// only durable data.
    NamesLost,
}

impl Loss {
    /// Every kind.
    pub(super) const ALL: [Loss; 5] = [
        Loss::Dropped,
        Loss::Zeroed,
        Loss::Torn,
        Loss::SectorTorn,
        Loss::NamesLost,
    ];
}

/// A way the disk lies, standing for a log that skips a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lie {
    /// The truth.
    None,
    /// `fdatasync` returns at once and makes nothing durable: a log that
    /// skips its data sync.
    NoDataSync,
    /// A directory sync returns at once and makes nothing durable: a log
    /// that skips its directory syncs.
    NoDirSync,
    /// `fdatasync` makes durable what the one before it covered: the
    /// batch it returns for is durable only at the next sync, as with a
    /// log that acknowledges a batch before it syncs it.
    LateSync,
}

/// What one file looks like after a power loss, or `None` for a
/// directory; by path relative to the model's root.
pub(super) type Image = BTreeMap<PathBuf, Option<Vec<u8>>>;

/// The disk's side of one file.
#[derive(Debug, Default)]
struct FileState {
    /// The file's content on the disk.
    durable: Vec<u8>,
    /// Ranges (offset, length) written since the last sync.
    written: Vec<(u64, u64)>,
    /// [`Lie::LateSync`]: the ranges and length the last sync should have
    /// made durable, and will at the next.
    held: Option<(Vec<(u64, u64)>, u64)>,
}

/// The model: the disk's contents beside the real files, and the cut.
pub(super) struct Machine {
    root: PathBuf,
    files: BTreeMap<PathBuf, FileState>,
    /// Durable names under `root`, and whether each is a directory.
    names: BTreeMap<PathBuf, bool>,
    lie: Lie,
    /// Operations done so far.
    ops: u64,
    /// The power is cut before the operation of this number.
    cut_at: Option<u64>,
    /// The images taken at the cut.
    images: Option<Vec<(Loss, Image)>>,
    /// The next file sync (`fdatasync` or `fsync`) fails with this error
    /// number.
    fail_next_sync: Option<i32>,
    /// And this many operations after it fail with `EIO`.
    fail_after_sync: u32,
    /// Seeds the torn variants.
    rng: u64,
}

impl Machine {
    /// A machine whose disk holds what is under `root` now, all of it
    /// durable.
    pub(super) fn new(
        root: &Path,
        lie: Lie,
        cut_at: Option<u64>,
        seed: u64,
    ) -> Arc<Mutex<Machine>> {
        let mut machine = Machine {
            root: root.to_owned(),
            files: BTreeMap::new(),
            names: BTreeMap::new(),
            lie,
            ops: 0,
            cut_at,
            images: None,
            fail_next_sync: None,
            fail_after_sync: 0,
            rng: seed | 1,
        };
        for path in walk(root) {
            if path.is_dir() {
                machine.names.insert(path, true);
            } else {
                let durable = std::fs::read(&path).unwrap_or_default();
                machine.names.insert(path.clone(), false);
                machine.files.insert(
                    path,
                    FileState {
                        durable,
                        ..FileState::default()
                    },
                );
            }
        }
        Arc::new(Mutex::new(machine))
    }

    /// The disk operations done so far.
    pub(super) fn ops(&self) -> u64 {
        self.ops
    }

    /// Makes the next file sync fail with `errno`, and the `then`
    /// operations after it with `EIO`.
    pub(super) fn fail_next_sync(&mut self, errno: i32, then: u32) {
        self.fail_next_sync = Some(errno);
        self.fail_after_sync = then;
    }

    /// The images of a power loss: taken at the cut if there was one, or
    /// now.
    pub(super) fn images(&mut self) -> Vec<(Loss, Image)> {
        match self.images.take() {
            Some(images) => images,
            None => Loss::ALL
                .iter()
                .map(|&loss| (loss, self.image(loss)))
                .collect(),
        }
    }

    /// Counts an operation; fails it if the power is, or now goes, out.
    fn step(&mut self) -> io::Result<()> {
        if self.cut_at == Some(self.ops) && self.images.is_none() {
            self.images = Some(
                Loss::ALL
                    .iter()
                    .map(|&loss| (loss, self.image(loss)))
                    .collect(),
            );
        }
        self.ops += 1;
        if self.images.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if self.fail_next_sync.is_none() && self.fail_after_sync > 0 {
            self.fail_after_sync -= 1;
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    fn state(&mut self, path: &Path) -> &mut FileState {
        self.files.entry(path.to_owned()).or_default()
    }

    /// Makes `path`'s current length and `ranges` durable.
    fn make_durable(&mut self, path: &Path, ranges: &[(u64, u64)], len: u64) {
        let cache = std::fs::read(path).unwrap_or_default();
        let state = self.state(path);
        state.durable.resize(len as usize, 0);
        for &(offset, length) in ranges {
            let (start, end) = clip(offset, length, len.min(cache.len() as u64));
            state.durable[start..end].copy_from_slice(&cache[start..end]);
        }
    }

    /// A file sync of `path`: `data_only` for `fdatasync`.
    fn sync_file(&mut self, path: &Path, data_only: bool) -> io::Result<()> {
        if let Some(errno) = self.fail_next_sync.take() {
            // The kernel marks the pages clean: they are never written.
            self.state(path).written.clear();
            return Err(io::Error::from_raw_os_error(errno));
        }
        if data_only {
            match self.lie {
                Lie::NoDataSync => return Ok(()),
                Lie::LateSync => {
                    let len = std::fs::metadata(path).map_or(0, |m| m.len());
                    let state = self.state(path);
                    let now = (std::mem::take(&mut state.written), len);
                    if let Some((ranges, len)) = state.held.replace(now) {
                        self.make_durable(path, &ranges, len);
                    }
                    return Ok(());
                }
                Lie::None | Lie::NoDirSync => {}
            }
        }
        let len = std::fs::metadata(path).map_or(0, |m| m.len());
        let state = self.state(path);
        let mut ranges = std::mem::take(&mut state.written);
        if let Some((held, _)) = state.held.take() {
            ranges.extend(held);
        }
        self.make_durable(path, &ranges, len);
        Ok(())
    }

    /// A sync of the directory `dir`: its current entries become its
    /// durable ones.
    fn sync_dir(&mut self, dir: &Path) {
        if self.lie == Lie::NoDirSync {
            return;
        }
        self.names.retain(|name, _| name.parent() != Some(dir));
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.starts_with(&self.root) {
                    self.names.insert(path.clone(), path.is_dir());
                }
            }
        }
    }

    /// What the disk holds after a power loss of kind `loss` now.
    fn image(&mut self, loss: Loss) -> Image {
        let names: BTreeMap<PathBuf, bool> = if loss == Loss::NamesLost {
            self.names.clone()
        } else {
            walk(&self.root)
                .into_iter()
                .map(|p| {
                    let dir = p.is_dir();
                    (p, dir)
                })
                .collect()
        };
        let mut image = Image::new();
        for (path, &is_dir) in &names {
            let reachable = path
                .ancestors()
                .skip(1)
                .take_while(|a| *a != self.root)
                .all(|a| names.get(a) == Some(&true));
            let Ok(relative) = path.strip_prefix(&self.root) else {
                continue;
            };
            if !reachable {
                continue;
            }
            if is_dir {
                image.insert(relative.to_owned(), None);
                continue;
            }
            // Files the log did not write (its LOCK) are left out.
            let Some(state) = self.files.get(path) else {
                continue;
            };
            let cache = std::fs::read(path).ok();
            let content = match (loss, cache) {
                (Loss::Dropped | Loss::NamesLost, _) | (_, None) => state.durable.clone(),
                (_, Some(cache)) => {
                    let len = cache.len() as u64;
                    let mut content = state.durable.clone();
                    content.resize(cache.len(), 0);
                    let ranges: Vec<(usize, usize)> = state
                        .written
                        .iter()
                        .map(|&(offset, length)| clip(offset, length, len))
                        .filter(|(start, end)| start < end)
                        .collect();
                    let total: usize = ranges.iter().map(|(s, e)| e - s).sum();
                    let mut kept = match loss {
                        Loss::Torn => xorshift64(&mut self.rng) as usize % (total + 1),
                        _ => 0,
                    };
                    for (start, end) in ranges {
                        match loss {
                            Loss::Zeroed => content[start..end].fill(0),
                            Loss::Torn => {
                                let take = kept.min(end - start);
                                content[start..start + take]
                                    .copy_from_slice(&cache[start..start + take]);
                                kept -= take;
                            }
                            _ => {
                                let mut at = start;
                                while at < end {
                                    let sector_end = ((at / 512 + 1) * 512).min(end);
                                    if xorshift64(&mut self.rng) & 1 == 1 {
                                        content[at..sector_end]
                                            .copy_from_slice(&cache[at..sector_end]);
                                    }
                                    at = sector_end;
                                }
                            }
                        }
                    }
                    content
                }
            };
            image.insert(relative.to_owned(), Some(content));
        }
        image
    }
}

/// The part of (`offset`, `length`) below `len`, as indexes.
fn clip(offset: u64, length: u64, len: u64) -> (usize, usize) {
    let start = offset.min(len) as usize;
    let end = offset.saturating_add(length).min(len) as usize;
    (start, end)
}

/// Every path under `root`, parents before children.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The path `file` was opened at.
fn path_of(file: &File) -> PathBuf {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .expect("the descriptor has a path");
    let text = link.to_string_lossy();
    PathBuf::from(text.strip_suffix(" (deleted)").unwrap_or(&text).to_owned())
}

/// A [`Disk`] whose operations go to the real files and to a [`Machine`].
pub(super) struct CrashDisk(pub(super) Arc<Mutex<Machine>>);

impl Disk for CrashDisk {
    fn create(&mut self, path: &Path) -> io::Result<File> {
        let mut machine = lock(&self.0);
        machine.step()?;
        let file = RealDisk.create(path)?;
        machine.files.insert(path.to_owned(), FileState::default());
        Ok(file)
    }

    fn open(&mut self, path: &Path) -> io::Result<File> {
        lock(&self.0).step()?;
        RealDisk.open(path)
    }

    fn write_all_at(&mut self, file: &File, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut machine = lock(&self.0);
        machine.step()?;
        file.write_all_at(buf, offset)?;
        machine
            .state(&path_of(file))
            .written
            .push((offset, buf.len() as u64));
        Ok(())
    }

    fn sync_data(&mut self, file: &File) -> io::Result<()> {
        let mut machine = lock(&self.0);
        machine.step()?;
        machine.sync_file(&path_of(file), true)
    }

    fn sync_all(&mut self, file: &File) -> io::Result<()> {
        let mut machine = lock(&self.0);
        machine.step()?;
        machine.sync_file(&path_of(file), false)
    }

    fn set_len(&mut self, file: &File, len: u64) -> io::Result<()> {
        lock(&self.0).step()?;
        file.set_len(len)
    }

    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        let mut machine = lock(&self.0);
        machine.step()?;
        machine.sync_dir(dir);
        Ok(())
    }

    fn remove(&mut self, path: &Path) -> io::Result<()> {
        lock(&self.0).step()?;
        std::fs::remove_file(path)
    }
}

// ---------------------------------------------------------------------
// The tests.
// ---------------------------------------------------------------------

/// Options that make the sweep cross segment boundaries: a segment holds
/// a handful of records.
fn options() -> Options {
    Options::default().segment_size(1024).max_record(512)
}

/// The `index`th record of workload `seed`: says whose it is, then filler
/// derived from both, 16 to 300 bytes in all.
fn payload(seed: u64, index: usize) -> Vec<u8> {
    let mut state = (seed ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1;
    let len = 16 + (xorshift64(&mut state) % 285) as usize;
    let mut data = format!("{seed}:{index}:").into_bytes();
    while data.len() < len {
        data.push(xorshift64(&mut state) as u8);
    }
    data
}

/// Which workload record `data` is, if it is one.
fn index_of(seed: u64, data: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(data.split(|&b| b == b':').nth(1)?).ok()?;
    let index = text.parse().ok()?;
    (payload(seed, index) == data).then_some(index)
}

/// A workload: groups of appends, each group queued at once and then
/// awaited.
fn groups(seed: u64, appends: usize) -> Vec<usize> {
    let mut state = seed | 1;
    let mut out = Vec::new();
    let mut left = appends;
    while left > 0 {
        let group = (1 + xorshift64(&mut state) % 4) as usize;
        out.push(group.min(left));
        left -= group.min(left);
    }
    out
}

/// Runs workload `seed` of `appends` records on a log in `dir` through
/// `disk`; returns each acknowledged record as (LSN, index). Stops at the
/// first failed append (the power is out).
fn run(dir: &Path, seed: u64, appends: usize, disk: CrashDisk) -> Vec<(u64, usize)> {
    let Ok(log) = Log::open_with(dir, options(), Box::new(disk)) else {
        return Vec::new();
    };
    let mut acked = Vec::new();
    let mut next = 0;
    'groups: for group in groups(seed, appends) {
        let pending: Vec<_> = (next..next + group)
            .map(|i| (i, log.append(&payload(seed, i))))
            .collect();
        next += group;
        let mut failed = false;
        for (index, append) in pending {
            match block_on(append) {
                Ok(lsn) => acked.push((lsn.get(), index)),
                Err(_) => failed = true,
            }
        }
        if failed {
            break 'groups;
        }
    }
    drop(log);
    acked
}

/// Writes `image` under `root`.
fn materialize(image: &Image, root: &Path) {
    for (path, content) in image {
        let path = root.join(path);
        match content {
            None => std::fs::create_dir_all(&path).unwrap(),
            Some(bytes) => {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, bytes).unwrap();
            }
        }
    }
}

/// Opens the log in `dir` as a restart would and checks it against what
/// was acknowledged: every acknowledged record present, intact and at its
/// LSN; every record found one of the workload's, in order; a new append
/// numbered after everything acknowledged. Never panics: a panic of the
/// log is reported as a failure.
fn check(dir: &Path, seed: u64, acked: &[(u64, usize)]) -> Result<(), String> {
    let checked = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        let log = Log::open(dir, options()).map_err(|e| format!("the log does not open: {e}"))?;
        let mut found = BTreeMap::new();
        let mut last_index = None;
        for record in log.iter().map_err(|e| format!("iter: {e}"))? {
            let record = record.map_err(|e| format!("a record does not read: {e}"))?;
            let index = index_of(seed, &record.data)
                .ok_or_else(|| format!("LSN {} holds bytes no append wrote", record.lsn))?;
            if last_index.is_some_and(|last| index <= last) {
                return Err(format!(
                    "LSN {} holds record {index} out of order",
                    record.lsn
                ));
            }
            last_index = Some(index);
            found.insert(record.lsn.get(), index);
        }
        for &(lsn, index) in acked {
            match found.get(&lsn) {
                Some(&at) if at == index => {}
                Some(&at) => {
                    return Err(format!(
                        "acknowledged LSN {lsn} holds record {at}, not record {index}"
                    ))
                }
                None => {
                    return Err(format!(
                        "acknowledged record {index} at LSN {lsn} is lost ({} records found)",
                        found.len()
                    ))
                }
            }
        }
        let next = block_on(log.append(b"after")).map_err(|e| format!("append: {e}"))?;
        let highest = acked.iter().map(|&(lsn, _)| lsn).max().unwrap_or(0);
        if next.get() <= highest {
            return Err(format!(
                "a new append got LSN {next}, not above the acknowledged {highest}"
            ));
        }
        log.close().map_err(|e| format!("close: {e}"))
    }));
    checked.unwrap_or_else(|_| Err("the log panicked".into()))
}

/// What a sweep found.
#[derive(Debug, Default)]
struct Sweep {
    /// Images checked, per kind of loss.
    cases: BTreeMap<Loss, u64>,
    /// The first failures, with where they happened.
    failures: Vec<String>,
    /// Failures in all.
    failed: u64,
}

impl Sweep {
    /// Runs workload `seed` with the power cut before operation `cut` (or
    /// never) on a disk that tells `lie`, and checks every image.
    fn case(&mut self, seed: u64, appends: usize, cut: Option<u64>, lie: Lie) -> u64 {
        let dir = TempDir::new("crash-run");
        let machine = Machine::new(dir.path(), lie, cut, seed);
        let log_dir = dir.join("log");
        let acked = run(&log_dir, seed, appends, CrashDisk(machine.clone()));
        let mut machine = lock(&machine);
        let ops = machine.ops();
        for (loss, image) in machine.images() {
            let restored = TempDir::new("crash-image");
            materialize(&image, restored.path());
            *self.cases.entry(loss).or_default() += 1;
            if let Err(why) = check(&restored.join("log"), seed, &acked) {
                self.failed += 1;
                if self.failures.len() < 5 {
                    self.failures
                        .push(format!("seed {seed}, cut {cut:?}, {loss:?}: {why}"));
                }
            }
        }
        ops
    }

    /// Cuts the power before every operation of workload `seed` in turn.
    fn every_step(&mut self, seed: u64, appends: usize, lie: Lie) {
        // The run without a cut counts the operations (a run may batch
        // differently, so a cut past the end is a power loss at the end).
        let ops = self.case(seed, appends, None, lie);
        for cut in 0..=ops {
            self.case(seed, appends, Some(cut), lie);
        }
    }
}

/// The model itself: a synced write survives every loss, an unsynced one
/// only where the loss keeps it, and a name only once its directory is
/// synced.
#[test]
#[cfg_attr(miri, ignore = "files on disk: Miri isolates the file system")]
fn the_model_keeps_what_was_synced_and_loses_what_was_not() {
    let root = TempDir::new("crash-model");
    let machine = Machine::new(root.path(), Lie::None, None, 7);
    let mut disk = CrashDisk(machine.clone());
    let path = root.join("f");
    let file = disk.create(&path).unwrap();
    disk.write_all_at(&file, b"synced", 0).unwrap();
    disk.sync_data(&file).unwrap();
    disk.write_all_at(&file, b"-later", 6).unwrap();
    let images: BTreeMap<Loss, Image> = lock(&machine).images().into_iter().collect();
    let f = Path::new("f");
    assert_eq!(images[&Loss::Dropped][f], Some(b"synced".to_vec()));
    assert_eq!(
        images[&Loss::Zeroed][f],
        Some(b"synced\0\0\0\0\0\0".to_vec())
    );
    assert_eq!(
        images[&Loss::NamesLost].get(f),
        None,
        "the name was never synced"
    );

    disk.sync_dir(root.path()).unwrap();
    lock(&machine).fail_next_sync(libc::EIO, 0);
    assert!(disk.sync_data(&file).is_err());
    // The failed range is clean now: a later sync does not write it.
    disk.sync_data(&file).unwrap();
    let images: BTreeMap<Loss, Image> = lock(&machine).images().into_iter().collect();
    for loss in Loss::ALL {
        assert_eq!(
            images[&loss][f],
            Some(b"synced\0\0\0\0\0\0".to_vec()),
            "{loss:?}: the length is durable, the failed bytes are not"
        );
    }
}

/// The power cut before each disk operation of a workload that rolls
/// over segments, every loss: nothing acknowledged is lost.
#[test]
#[cfg_attr(miri, ignore = "a log on disk: Miri isolates the file system")]
fn power_loss_at_every_step_loses_nothing_acknowledged() {
    let mut sweep = Sweep::default();
    for seed in 1..=3 {
        sweep.every_step(seed, 14, Lie::None);
    }
    eprintln!("cases per loss: {:?}", sweep.cases);
    assert!(sweep.cases.values().all(|&n| n >= 100), "{:?}", sweep.cases);
    assert_eq!(sweep.failed, 0, "{:#?}", sweep.failures);
}

/// Longer workloads, the power cut at a random operation.
#[test]
#[cfg_attr(miri, ignore = "a log on disk: Miri isolates the file system")]
fn power_loss_at_random_points_of_longer_workloads_loses_nothing_acknowledged() {
    random_cuts(100..300);
}

/// The same, many more: `cargo test -p keel --lib -- --ignored crash`.
#[test]
#[ignore = "long: thousands of workloads"]
fn power_loss_at_random_points_many_workloads() {
    random_cuts(1_000..6_000);
}

fn random_cuts(seeds: std::ops::Range<u64>) {
    let mut sweep = Sweep::default();
    for seed in seeds {
        let mut state = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
        let appends = 30 + (xorshift64(&mut state) % 30) as usize;
        // About four operations per append; a cut past the end is a loss
        // after the last acknowledgement.
        let cut = xorshift64(&mut state) % (appends as u64 * 4);
        sweep.case(seed, appends, Some(cut), Lie::None);
    }
    eprintln!("cases per loss: {:?}", sweep.cases);
    assert_eq!(sweep.failed, 0, "{:#?}", sweep.failures);
}

/// The sweep catches a log that skips a step: each lie loses
/// acknowledged records in some case.
#[test]
#[cfg_attr(miri, ignore = "a log on disk: Miri isolates the file system")]
fn the_sweep_catches_a_log_that_skips_a_sync_or_acknowledges_early() {
    for lie in [Lie::NoDataSync, Lie::NoDirSync, Lie::LateSync] {
        let mut sweep = Sweep::default();
        sweep.every_step(1, 14, lie);
        eprintln!(
            "{lie:?}: {} of {} cases failed, first: {:?}",
            sweep.failed,
            sweep.cases.values().sum::<u64>(),
            sweep.failures.first()
        );
        assert!(sweep.failed > 0, "{lie:?} went unnoticed");
    }
}

/// A failed `fdatasync` closes the log; reopened in the same boot (the
/// failed bytes still in the page cache, marked clean), it takes and
/// acknowledges more records; then the power fails. Every acknowledged
/// record is there: with `EIO` or `ENOSPC`, whether the writer could cut
/// the segment back at once or (its next operations failing too) the
/// reopen did, and whether the failed sync was a batch's or a new
/// segment's.
#[test]
#[cfg_attr(miri, ignore = "a log on disk: Miri isolates the file system")]
fn a_failed_sync_then_a_reopen_in_the_same_boot_loses_nothing() {
    for (errno, then, before) in [
        (libc::EIO, 0, 3),
        (libc::ENOSPC, 0, 3),
        (libc::EIO, 1, 3),
        (libc::EIO, 2, 3),
        (libc::EIO, 0, 8),
        (libc::EIO, 1, 8),
        (libc::EIO, 2, 8),
    ] {
        a_failed_sync_then_a_reopen(errno, then, before);
    }
}

/// The case of [`a_failed_sync_then_a_reopen_in_the_same_boot_loses_nothing`]
/// with the sync failing with `errno` after `before` records, and the
/// `then` operations after it failing too.
fn a_failed_sync_then_a_reopen(errno: i32, then: u32, before: usize) {
    {
        let root = TempDir::new("crash-failed-sync");
        let machine = Machine::new(root.path(), Lie::None, None, 11);
        let dir = root.join("log");
        let seed = 5;
        let log = Log::open_with(&dir, options(), Box::new(CrashDisk(machine.clone()))).unwrap();
        let mut acked = Vec::new();
        for index in 0..before {
            acked.push((
                block_on(log.append(&payload(seed, index))).unwrap().get(),
                index,
            ));
        }
        lock(&machine).fail_next_sync(errno, then);
        let failed = block_on(log.append(&payload(seed, before)));
        assert!(failed.is_err(), "the sync failed: the append must fail");
        let closed = log
            .close()
            .expect_err("the log closed on the error")
            .to_string();
        if then > 0 {
            assert!(closed.contains("the next open in this process"), "{closed}");
        }

        if then > 1 {
            // The repair failed, and so does the first reopen's: that
            // open fails rather than count the failed bytes.
            let refused = Log::open_with(&dir, options(), Box::new(CrashDisk(machine.clone())))
                .expect_err("the repair fails, so the open must");
            assert!(refused.to_string().contains("segment whose"), "{refused}");
        }
        let log = Log::open_with(&dir, options(), Box::new(CrashDisk(machine.clone()))).unwrap();
        for index in before + 1..before + 7 {
            acked.push((
                block_on(log.append(&payload(seed, index))).unwrap().get(),
                index,
            ));
        }
        log.close().unwrap();

        for (loss, image) in lock(&machine).images() {
            let restored = TempDir::new("crash-failed-sync-image");
            materialize(&image, restored.path());
            if let Err(why) = check(&restored.join("log"), seed, &acked) {
                panic!("errno {errno}, {then} failing after, {before} before, {loss:?}: {why}");
            }
        }
    }
}

/// A log directory created with missing parents survives a power loss
/// that keeps only durable names.
#[test]
#[cfg_attr(miri, ignore = "a log on disk: Miri isolates the file system")]
fn a_log_directory_created_with_its_parents_survives_power_loss() {
    let root = TempDir::new("crash-parents");
    let machine = Machine::new(root.path(), Lie::None, None, 13);
    let dir = root.join("a/b/log");
    let seed = 9;
    let log = Log::open_with(&dir, options(), Box::new(CrashDisk(machine.clone()))).unwrap();
    let acked: Vec<(u64, usize)> = (0..3)
        .map(|index| {
            (
                block_on(log.append(&payload(seed, index))).unwrap().get(),
                index,
            )
        })
        .collect();
    log.close().unwrap();
    let images: BTreeMap<Loss, Image> = lock(&machine).images().into_iter().collect();
    let restored = TempDir::new("crash-parents-image");
    materialize(&images[&Loss::NamesLost], restored.path());
    check(&restored.join("a/b/log"), seed, &acked).unwrap();
}
