//! Where the harness puts each process: the server under test on CPUs of
//! its own, everything else on the rest.
//!
//! On a small machine a latency figure measures whoever got the core: the
//! server, its load, its backend, the probe and the harness all compete
//! for the same two CPUs, and a verdict flips with the kernel's choices
//! rather than the runtime's. [`PlacementKind::Isolated`] (the default)
//! takes the CPUs this process may use, gives the upper half (at least
//! one) to the server under test and the lower half to the load
//! generators, backends, probes and the harness itself, and sizes the
//! server's runtime to its CPUs (one worker per CPU, keel and tokio alike).
//! Latency probes then ask the kernel to run them ahead of the load on
//! their CPUs (see [`crate::load::realtime`]), so the end-to-end figure
//! does not wait behind the load generator's own thread.
//!
//! [`PlacementKind::Shared`] leaves every process where the kernel puts it,
//! with as many workers as CPUs: what a crowded box does. Its figures are
//! reported and its verdicts are not judged, because they measure the
//! host as much as the runtime.
//!
//! Placement is by `sched_setaffinity`, applied to each child between
//! `fork` and `exec` so the child never runs a single instruction on the
//! wrong CPU. A machine with one CPU cannot isolate anything: the harness
//! says so and falls back to the shared placement.

use std::fmt;
use std::os::unix::process::CommandExt;
use std::process::Command;

use clap::ValueEnum;
use serde::{Serialize, Serializer};

use crate::error::Error;

/// How the harness places its processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementKind {
    /// The server under test on CPUs of its own, the rest elsewhere, the
    /// probes at real-time priority; verdicts are judged.
    Isolated,
    /// Every process where the kernel puts it; verdicts are reported, not
    /// judged.
    Shared,
}

impl PlacementKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Isolated => "isolated",
            Self::Shared => "shared",
        }
    }
}

impl fmt::Display for PlacementKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a child process is, for its placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The server under test.
    Server,
    /// A load generator, a backend or a probe: anything that is not the
    /// server under test.
    Load,
}

/// A set of CPU numbers, kept sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSet(Vec<usize>);

impl CpuSet {
    /// The CPUs in `cpus` (duplicates dropped, sorted).
    pub fn new(mut cpus: Vec<usize>) -> Self {
        cpus.sort_unstable();
        cpus.dedup();
        Self(cpus)
    }

    /// The CPUs the calling thread may run on.
    pub fn allowed() -> Result<Self, Error> {
        // SAFETY: cpu_set_t is plain data; all zeros is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, writable cpu_set_t of the size passed;
        // pid 0 is the calling thread.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        if rc != 0 {
            return Err(Error::new(format!(
                "cannot read this process's CPUs (sched_getaffinity): {}",
                std::io::Error::last_os_error()
            )));
        }
        let cpus = (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect();
        Ok(Self::new(cpus))
    }

    /// The CPU numbers.
    pub fn cpus(&self) -> &[usize] {
        &self.0
    }

    /// How many CPUs.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The set as the kernel's bit mask; CPUs past its capacity are left
    /// out.
    fn to_libc(&self) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is plain data; all zeros is a valid empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in self.0.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        set
    }

    /// Restricts the calling thread (and the threads and processes it
    /// starts afterwards) to this set.
    pub fn pin_current_thread(&self) -> Result<(), Error> {
        let set = self.to_libc();
        // SAFETY: `set` is a valid cpu_set_t of the size passed; pid 0 is
        // the calling thread.
        let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::new(format!(
                "cannot move the harness to CPUs {self}: {}",
                std::io::Error::last_os_error()
            )))
        }
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.0.iter().map(usize::to_string).collect();
        f.write_str(&names.join(","))
    }
}

impl Serialize for CpuSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Where the processes of a run go.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    /// The placement in effect (shared when isolation was asked for and
    /// is impossible).
    pub kind: PlacementKind,
    /// The placement asked for.
    pub requested: PlacementKind,
    /// The server under test's CPUs (isolated), or every CPU (shared).
    pub server: CpuSet,
    /// Everyone else's CPUs (isolated), or every CPU (shared).
    pub rest: CpuSet,
    /// Whether latency probes ask for real-time priority.
    pub realtime_probes: bool,
    /// Why the placement differs from the one asked for, if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl Placement {
    /// The placement `kind` on the CPUs in `allowed`.
    pub fn plan(kind: PlacementKind, allowed: &CpuSet) -> Self {
        if kind == PlacementKind::Isolated && allowed.len() >= 2 {
            // The server gets the upper half: CPU 0 tends to take more of
            // the machine's interrupts and housekeeping.
            let split = allowed.len() - allowed.len() / 2;
            let (rest, server) = allowed.cpus().split_at(split);
            return Self {
                kind,
                requested: kind,
                server: CpuSet::new(server.to_vec()),
                rest: CpuSet::new(rest.to_vec()),
                realtime_probes: true,
                fallback: None,
            };
        }
        Self {
            kind: PlacementKind::Shared,
            requested: kind,
            server: allowed.clone(),
            rest: allowed.clone(),
            realtime_probes: false,
            fallback: (kind == PlacementKind::Isolated).then(|| {
                format!(
                    "only {} CPU ({allowed}) is available: nothing can be isolated, so the run is shared",
                    allowed.len()
                )
            }),
        }
    }

    /// Whether verdicts are judged under this placement.
    pub fn judges(&self) -> bool {
        self.kind == PlacementKind::Isolated
    }

    /// Worker threads for each server: one per server CPU.
    pub fn default_workers(&self) -> u64 {
        self.server.len().max(1) as u64
    }

    /// Moves the harness itself onto the load CPUs, so that it never takes
    /// the server's core (isolated placement only).
    pub fn place_harness(&self) -> Result<(), Error> {
        if self.kind == PlacementKind::Isolated {
            self.rest.pin_current_thread()?;
        }
        Ok(())
    }

    /// Sets `command` to start on the CPUs of `role` (isolated placement
    /// only; a shared placement leaves it to the kernel).
    pub fn apply(&self, command: &mut Command, role: Role) {
        if self.kind != PlacementKind::Isolated {
            return;
        }
        let set = match role {
            Role::Server => self.server.to_libc(),
            Role::Load => self.rest.to_libc(),
        };
        // SAFETY: the closure runs in the child between fork and exec, where
        // only async-signal-safe calls are allowed: it makes one system call
        // on a cpu_set_t copied into the closure, allocates nothing and
        // takes no lock.
        unsafe {
            command.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }

    /// The flag a load command takes to raise its probe's priority, if
    /// this placement asks for it.
    pub fn probe_flags(&self) -> Vec<String> {
        if self.realtime_probes {
            vec!["--realtime".into()]
        } else {
            Vec::new()
        }
    }

    /// One line for people: where everything runs.
    pub fn describe(&self) -> String {
        match self.kind {
            PlacementKind::Isolated => format!(
                "isolated: server on CPU {}, load, backends, probes and harness on CPU {}, probes at real-time priority",
                self.server, self.rest
            ),
            PlacementKind::Shared => {
                let mut line = format!(
                    "shared: every process on CPUs {} as the kernel chooses; verdicts not judged",
                    self.server
                );
                if let Some(why) = &self.fallback {
                    line.push_str(&format!(" ({why})"));
                }
                line
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    /// On two CPUs the server gets the second, everything else the first;
    /// on more, the server gets the upper half.
    #[test]
    fn isolation_splits_the_cpus() {
        let two = Placement::plan(PlacementKind::Isolated, &CpuSet::new(vec![1, 0]));
        assert_eq!(two.kind, PlacementKind::Isolated);
        assert_eq!(two.server.cpus(), [1]);
        assert_eq!(two.rest.cpus(), [0]);
        assert_eq!(two.default_workers(), 1);
        assert!(two.realtime_probes && two.judges());

        let five = Placement::plan(PlacementKind::Isolated, &CpuSet::new(vec![0, 2, 3, 5, 7]));
        assert_eq!(five.server.cpus(), [5, 7]);
        assert_eq!(five.rest.cpus(), [0, 2, 3]);
        assert_eq!(five.default_workers(), 2);
        assert!(
            five.describe().contains("server on CPU 5,7"),
            "{}",
            five.describe()
        );
    }

    /// One CPU cannot be split: the run falls back to shared, and says why.
    #[test]
    fn one_cpu_falls_back_to_shared() {
        let one = Placement::plan(PlacementKind::Isolated, &CpuSet::new(vec![3]));
        assert_eq!(one.kind, PlacementKind::Shared);
        assert_eq!(one.requested, PlacementKind::Isolated);
        assert!(!one.judges() && !one.realtime_probes);
        assert!(one.fallback.as_deref().unwrap().contains("only 1 CPU"));
        assert!(one.describe().contains("only 1 CPU"), "{}", one.describe());
        assert!(one.probe_flags().is_empty());
    }

    /// Shared placement keeps every CPU for everyone and judges nothing.
    #[test]
    fn shared_keeps_every_cpu() {
        let all = CpuSet::new(vec![0, 1]);
        let shared = Placement::plan(PlacementKind::Shared, &all);
        assert_eq!(shared.server, all);
        assert_eq!(shared.rest, all);
        assert_eq!(shared.default_workers(), 2);
        assert!(shared.fallback.is_none() && !shared.judges());
    }

    /// The CPUs of a kernel CPU list such as `0,2-3`.
    fn expand(list: &str) -> CpuSet {
        let mut cpus = Vec::new();
        for part in list.split(',').filter(|p| !p.is_empty()) {
            match part.split_once('-') {
                Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
                None => cpus.push(part.parse().unwrap()),
            }
        }
        CpuSet::new(cpus)
    }

    /// A child started with a role runs on that role's CPUs only.
    #[test]
    fn children_start_on_their_cpus() {
        let allowed = CpuSet::allowed().unwrap();
        assert!(!allowed.cpus().is_empty());
        let placement = Placement::plan(PlacementKind::Isolated, &allowed);
        if placement.kind != PlacementKind::Isolated {
            // A one-CPU machine: the fallback is tested above.
            return;
        }
        for (role, expected) in [
            (Role::Server, &placement.server),
            (Role::Load, &placement.rest),
        ] {
            let mut command = Command::new("/bin/sh");
            command
                .args(["-c", "grep Cpus_allowed_list /proc/self/status"])
                .stdout(Stdio::piped());
            placement.apply(&mut command, role);
            let output = command.output().unwrap();
            let text = String::from_utf8_lossy(&output.stdout);
            let list = text.split(':').nth(1).unwrap_or("").trim();
            assert_eq!(&expand(list), expected, "{role:?}: {text}");
        }
    }
}
