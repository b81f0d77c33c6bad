//! The CPUs a process may use, read to choose the default worker count
//! and to say why: its affinity mask, and its cgroup's CPU quota.
//!
//! A container's CPU limit is a quota (cgroup v2's `cpu.max`, v1's
//! `cpu.cfs_quota_us` over `cpu.cfs_period_us`), not a mask: a process
//! limited to one CPU's time still sees every CPU of the host. Workers
//! beyond the quota do not run more: the cgroup's threads together run for
//! the quota each period and then all wait for the next, a stall of up to
//! a period (100 ms by default) for every task that was running. So the
//! default is one worker per whole CPU of quota, at least one, within the
//! affinity mask. The quota that binds is the tightest one on the path
//! from the process's cgroup up to the root of the hierarchy.
//!
//! The standard library's `available_parallelism` arrives at the same
//! number; it is read here so that the runtime can say where the number
//! came from ([`Stats::sizing`](crate::stats::Stats::sizing)).

use std::fs;
use std::path::{Path, PathBuf};

/// What limits the CPUs the process may use.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CpuBudget {
    /// CPUs in the process's affinity mask.
    pub(crate) allowed: usize,
    /// The tightest CPU quota on the process's cgroup path: in CPUs, and
    /// the file it was read from.
    pub(crate) quota: Option<(f64, PathBuf)>,
}

impl CpuBudget {
    /// Reads the process's affinity mask and cgroup quota. A file that
    /// cannot be read or parsed counts as no limit.
    pub(crate) fn read() -> CpuBudget {
        // Miri isolates the process from the file system and the
        // scheduler: no quota to read, and its own count of CPUs.
        if cfg!(miri) {
            return CpuBudget {
                allowed: std::thread::available_parallelism().map_or(1, usize::from),
                quota: None,
            };
        }
        let allowed = affinity_cpus()
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        let quota = match (
            fs::read_to_string("/proc/self/cgroup"),
            fs::read_to_string("/proc/self/mountinfo"),
        ) {
            (Ok(cgroups), Ok(mounts)) => {
                tightest_quota(&cgroups, &mounts, |path| fs::read_to_string(path).ok())
            }
            _ => None,
        };
        CpuBudget { allowed, quota }
    }

    /// The default worker count: one per whole CPU of quota, within the
    /// affinity mask, at least one.
    pub(crate) fn workers(&self) -> usize {
        let by_quota = self.quota.as_ref().map_or(usize::MAX, |(cpus, _)| {
            // A quota of 0.5 CPU still runs one worker.
            (cpus.floor() as usize).max(1)
        });
        self.allowed.min(by_quota).max(1)
    }

    /// Why [`workers`](Self::workers) is what it is, in a phrase.
    pub(crate) fn reason(&self) -> String {
        let allowed = plural(self.allowed, "CPU");
        match &self.quota {
            Some((cpus, file)) if self.workers() < self.allowed => format!(
                "the CPU quota, {cpus:.2} CPUs ({}), of the {allowed} the process may run on",
                file.display()
            ),
            Some((cpus, file)) => format!(
                "the {allowed} the process may run on (its CPU quota, {cpus:.2} CPUs in {}, allows as many)",
                file.display()
            ),
            None => format!("the {allowed} the process may run on (no CPU quota)"),
        }
    }
}

/// `n thing` or `n things`.
fn plural(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// CPUs in the calling thread's affinity mask, `None` if it cannot be read
/// (more CPUs than a `cpu_set_t` holds).
fn affinity_cpus() -> Option<usize> {
    // SAFETY: `cpu_set_t` is plain data for which all zeroes is the empty
    // set; `sched_getaffinity` writes at most `size_of::<cpu_set_t>()`
    // bytes into it, the size passed, and `CPU_COUNT` only reads it.
    let count = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        libc::CPU_COUNT(&set)
    };
    usize::try_from(count).ok().filter(|&n| n > 0)
}

/// The tightest CPU quota on the process's cgroup paths, from the text of
/// `/proc/self/cgroup` and `/proc/self/mountinfo`, reading each
/// directory's files with `read`: the v2 hierarchy's `cpu.max` and the v1
/// `cpu` hierarchy's `cpu.cfs_quota_us`, in the process's cgroup and each
/// of its parents up to the hierarchy's mount.
pub(crate) fn tightest_quota(
    cgroups: &str,
    mounts: &str,
    read: impl Fn(&Path) -> Option<String>,
) -> Option<(f64, PathBuf)> {
    let mut best: Option<(f64, PathBuf)> = None;
    for (version, cgroup) in cgroup_paths(cgroups) {
        let Some(mount) = mount_of(mounts, version) else {
            continue;
        };
        let Some(mut dir) = directory(&mount, cgroup) else {
            continue;
        };
        loop {
            let quota = match version {
                Version::V2 => {
                    let file = dir.join("cpu.max");
                    read(&file)
                        .and_then(|text| parse_cpu_max(&text))
                        .map(|q| (q, file))
                }
                Version::V1 => {
                    let file = dir.join("cpu.cfs_quota_us");
                    read(&file)
                        .zip(read(&dir.join("cpu.cfs_period_us")))
                        .and_then(|(quota, period)| parse_cfs(&quota, &period))
                        .map(|q| (q, file))
                }
            };
            if let Some((cpus, file)) = quota {
                if best.as_ref().is_none_or(|(least, _)| cpus < *least) {
                    best = Some((cpus, file));
                }
            }
            if dir == mount.point || !dir.pop() || !dir.starts_with(&mount.point) {
                break;
            }
        }
    }
    best
}

/// A cgroup hierarchy's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// The v1 hierarchy with the `cpu` controller.
    V1,
    /// The unified hierarchy (`cgroup2`).
    V2,
}

/// The process's cgroup in each hierarchy that can hold a CPU quota, from
/// `/proc/self/cgroup` (`id:controllers:path` per line; v2's line is
/// `0::path`).
fn cgroup_paths(cgroups: &str) -> Vec<(Version, &str)> {
    cgroups
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            if id == "0" && controllers.is_empty() {
                Some((Version::V2, path))
            } else if controllers.split(',').any(|c| c == "cpu") {
                Some((Version::V1, path))
            } else {
                None
            }
        })
        .collect()
}

/// Where a hierarchy is mounted: the cgroup path at the mount's root, and
/// the mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    root: PathBuf,
    point: PathBuf,
}

/// The mount of the hierarchy of `version`, from `/proc/self/mountinfo`
/// (`id parent dev root point options [optional...] - fstype source
/// superoptions` per line).
fn mount_of(mounts: &str, version: Version) -> Option<Mount> {
    mounts.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let mut fields = mount.split(' ');
        let (root, point) = (fields.nth(3)?, fields.next()?);
        let mut fs_fields = fs.split(' ');
        let (fstype, options) = (fs_fields.next()?, fs_fields.nth(1).unwrap_or(""));
        let matches = match version {
            Version::V2 => fstype == "cgroup2",
            Version::V1 => fstype == "cgroup" && options.split(',').any(|o| o == "cpu"),
        };
        matches.then(|| Mount {
            root: PathBuf::from(unescape(root)),
            point: PathBuf::from(unescape(point)),
        })
    })
}

/// mountinfo's octal escapes (`\040` for a space) decoded.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                let value = d.iter().fold(0u32, |v, b| v * 8 + u32::from(b - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The directory of `cgroup` under `mount`, if the cgroup lies under the
/// mount's root (in a container, the root is usually the container's own
/// cgroup, and the process's path is that same path).
fn directory(mount: &Mount, cgroup: &str) -> Option<PathBuf> {
    let relative = Path::new(cgroup).strip_prefix(&mount.root).ok()?;
    Some(mount.point.join(relative))
}

/// CPUs from a v2 `cpu.max` (`max 100000`, or `quota period` in µs);
/// `None` for no limit or text that is not one.
fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota = fields.next()?;
    let period: f64 = fields.next().map_or(Some(100_000.0), |p| p.parse().ok())?;
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// CPUs from a v1 `cpu.cfs_quota_us` (`-1` for no limit) and
/// `cpu.cfs_period_us`.
fn parse_cfs(quota: &str, period: &str) -> Option<f64> {
    let quota: f64 = quota.trim().parse().ok()?;
    let period: f64 = period.trim().parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn files(entries: &[(&str, &str)]) -> impl Fn(&Path) -> Option<String> {
        let map: HashMap<PathBuf, String> = entries
            .iter()
            .map(|(path, text)| (PathBuf::from(path), (*text).to_owned()))
            .collect();
        move |path| map.get(path).cloned()
    }

    const V2_MOUNTS: &str =
        "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    const V1_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
";

    /// v2: the tightest `cpu.max` on the path wins, `max` is no limit.
    #[test]
    fn v2_quota_is_the_tightest_on_the_path() {
        let read = files(&[
            ("/sys/fs/cgroup/app/web/cpu.max", "max 100000\n"),
            ("/sys/fs/cgroup/app/cpu.max", "150000 100000\n"),
        ]);
        let (cpus, file) = tightest_quota("0::/app/web\n", V2_MOUNTS, read).unwrap();
        assert!((cpus - 1.5).abs() < 1e-9);
        assert_eq!(file, Path::new("/sys/fs/cgroup/app/cpu.max"));
        let unlimited = files(&[("/sys/fs/cgroup/app/cpu.max", "max 100000\n")]);
        assert_eq!(tightest_quota("0::/app\n", V2_MOUNTS, unlimited), None);
    }

    /// v1: the `cpu` hierarchy's quota over its period; `-1` is no limit.
    #[test]
    fn v1_quota_reads_the_cpu_hierarchy() {
        let cgroups = "4:memory:/box\n3:cpu,cpuacct:/box\n0::/\n";
        let read = files(&[
            ("/sys/fs/cgroup/cpu,cpuacct/box/cpu.cfs_quota_us", "50000\n"),
            (
                "/sys/fs/cgroup/cpu,cpuacct/box/cpu.cfs_period_us",
                "100000\n",
            ),
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"),
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"),
        ]);
        let (cpus, _) = tightest_quota(cgroups, V1_MOUNTS, read).unwrap();
        assert!((cpus - 0.5).abs() < 1e-9);
    }

    /// In a container the mount's root is the container's cgroup: its
    /// files are at the mount point itself.
    #[test]
    fn a_container_root_maps_to_the_mount_point() {
        let mounts = "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n";
        let read = files(&[("/sys/fs/cgroup/cpu.max", "200000 100000")]);
        let (cpus, file) = tightest_quota("0::/kubepods/pod1\n", mounts, read).unwrap();
        assert!((cpus - 2.0).abs() < 1e-9);
        assert_eq!(file, Path::new("/sys/fs/cgroup/cpu.max"));
        // A cgroup outside the mount's root is not guessed at.
        let read = files(&[("/sys/fs/cgroup/cpu.max", "200000 100000")]);
        assert_eq!(tightest_quota("0::/elsewhere\n", mounts, read), None);
    }

    /// Garbage and missing files are no limit, never a panic.
    #[test]
    fn unreadable_or_malformed_files_are_no_limit() {
        for text in ["", "max", "abc 100000", "100000 0", "-5 100000", "100000 x"] {
            assert_eq!(parse_cpu_max(text), None, "{text:?}");
        }
        assert_eq!(parse_cpu_max("50000"), Some(0.5));
        assert_eq!(parse_cfs("-1", "100000"), None);
        assert_eq!(parse_cfs("x", "100000"), None);
        assert_eq!(tightest_quota("garbage", "garbage", |_| None), None);
        assert_eq!(tightest_quota("0::/a\n", V2_MOUNTS, |_| None), None);
    }

    /// mountinfo escapes spaces in paths.
    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/a\04"), r"/a\04");
    }

    /// One worker per whole CPU of quota, within the mask, at least one.
    #[test]
    fn workers_follow_the_quota_within_the_mask() {
        let budget = |allowed, quota: Option<f64>| CpuBudget {
            allowed,
            quota: quota.map(|q| (q, PathBuf::from("/q"))),
        };
        assert_eq!(budget(8, None).workers(), 8);
        assert_eq!(budget(8, Some(2.5)).workers(), 2);
        assert_eq!(budget(8, Some(0.2)).workers(), 1);
        assert_eq!(budget(2, Some(16.0)).workers(), 2);
        assert!(budget(8, Some(2.5))
            .reason()
            .contains("CPU quota, 2.50 CPUs"));
        assert!(budget(2, Some(16.0)).reason().contains("allows as many"));
        assert!(budget(1, None).reason().contains("the 1 CPU the process"));
    }
}
