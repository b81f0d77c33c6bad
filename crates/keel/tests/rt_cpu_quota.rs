//! The default worker count follows the cgroup's CPU quota, a
//! container's CPU limit: a runtime built in a cgroup limited to one CPU's
//! time runs one worker on a machine of more, and `Stats::sizing` says
//! why; spinning set on the builder beyond the quota is reported as the
//! cost it is.
//!
//! The test makes a real cgroup (v2's `cpu.max`, or v1's `cpu` hierarchy)
//! and runs a copy of this test binary in it, which builds the runtimes
//! and prints what they chose. It needs root and a writable cgroup
//! filesystem; without them it says so and checks nothing.

#![cfg(target_os = "linux")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use keel::{Builder, SpinPolicy};

/// Set in the copy that runs inside the cgroup.
const CHILD: &str = "KEEL_CPU_QUOTA_CHILD";

/// A cgroup limited to one CPU's time, removed when dropped.
struct LimitedCgroup {
    dir: PathBuf,
}

impl LimitedCgroup {
    /// Makes one, or says why it cannot.
    fn new() -> Result<LimitedCgroup, String> {
        let name = format!("keel-cpu-quota-{}", std::process::id());
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
        let base = if v2 {
            PathBuf::from("/sys/fs/cgroup")
        } else {
            ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.join("cpu.cfs_quota_us").exists())
                .ok_or("no cgroup v1 cpu hierarchy is mounted")?
        };
        if v2 {
            // The cpu controller must be enabled for the root's children.
            let _ = fs::write(base.join("cgroup.subtree_control"), "+cpu");
        }
        let dir = base.join(name);
        fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let cgroup = LimitedCgroup { dir };
        let (file, limit) = if v2 {
            ("cpu.max", "100000 100000")
        } else {
            ("cpu.cfs_quota_us", "100000")
        };
        let path = cgroup.dir.join(file);
        fs::write(&path, limit).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(cgroup)
    }
}

impl Drop for LimitedCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

#[test]
fn the_default_workers_follow_the_cpu_quota() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let cgroup = match LimitedCgroup::new() {
        Ok(cgroup) => cgroup,
        Err(why) => {
            eprintln!("not checked: cannot make a cgroup with a CPU quota here ({why})");
            return;
        }
    };
    let exe = std::env::current_exe().unwrap();
    // The shell joins the cgroup, then becomes the test binary, so the
    // runtime is built inside it from its first instruction.
    let output = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$1/cgroup.procs" && shift && exec "$@""#)
        .arg("sh")
        .arg(&cgroup.dir)
        .arg(&exe)
        .args([
            "--exact",
            "runtimes_in_the_cgroup",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let line = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in:\n{stdout}\n{stderr}"))
            .to_owned()
    };
    assert_eq!(line("default workers: "), "1");
    assert_eq!(line("quota: "), "Some(1.0)");
    let reason = line("default reason: ");
    if cpus > 1 {
        assert!(reason.contains("the CPU quota, 1.00 CPUs"), "{reason}");
    }
    assert!(reason.contains("cpu"), "the file is named: {reason}");
    assert!(
        line("default spin: ").starts_with("0 us, the default: no spin"),
        "{stdout}"
    );
    let spin = line("spinning spin: ");
    assert!(spin.contains("burns quota"), "{spin}");
    assert!(line("spinning reason: ").contains("above the CPU quota"));
}

/// Run by [`the_default_workers_follow_the_cpu_quota`] inside the cgroup.
#[test]
#[ignore = "run inside a cgroup by the_default_workers_follow_the_cpu_quota"]
fn runtimes_in_the_cgroup() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let rt = Builder::new().build().unwrap();
    let sizing = rt.handle().stats().sizing;
    // A line of its own: the harness printed the test's name without one.
    println!();
    println!("default workers: {}", rt.handle().stats().workers.len());
    println!("quota: {:?}", sizing.cpu_quota);
    println!("default reason: {}", sizing.workers_reason);
    println!(
        "default spin: {} us, {}",
        sizing.spin.as_micros(),
        sizing.spin_reason
    );
    drop(rt);
    let rt = Builder::new()
        .workers(2)
        .spin(SpinPolicy::Short)
        .build()
        .unwrap();
    let sizing = rt.handle().stats().sizing;
    println!("spinning spin: {}", sizing.spin_reason);
    println!("spinning reason: {}", sizing.workers_reason);
}
