//! How noisy the host was while a phase was measured.
//!
//! Two figures say whether a latency measured the runtime or the machine
//! around it, and the report prints them beside each verdict:
//!
//! - **steal**: the share of CPU time the hypervisor gave to other guests
//!   while this one wanted to run (`/proc/stat`, per CPU, in clock ticks).
//!   Taken over every CPU and over the server's CPUs alone.
//! - **server run-queue wait**: the time the server's threads spent
//!   runnable but not running (`/proc/<pid>/task/*/schedstat`, in
//!   nanoseconds), summed over its threads, as a share of the window. On
//!   an isolated core this is near zero unless something else took the
//!   core; under the shared placement it is the price of sharing.
//!
//! A [`HostSample`] is taken at each of the two marks around a measured
//! window; [`Noise::between`] differences them. Threads that start or end
//! inside the window count for what they did inside it: a thread absent
//! from the first sample counts from zero, one absent from the second is
//! left out (its last figures are gone with it).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::placement::CpuSet;

/// Per-CPU tick counters from `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// All ticks: user, nice, system, idle, iowait, irq, softirq, steal.
    pub total: u64,
    /// Ticks stolen by the hypervisor.
    pub steal: u64,
}

/// The host's counters at one instant.
#[derive(Debug, Clone, Default)]
pub struct HostSample {
    /// Per CPU number, its ticks.
    pub cpus: HashMap<usize, CpuTicks>,
    /// Per thread id of the server, its run-queue wait so far, ns.
    pub waits: HashMap<u32, u64>,
}

impl HostSample {
    /// Reads `/proc/stat` and the schedstat of every thread of `pid`.
    /// Counters that cannot be read are left out (the figures built on
    /// them then read as not measured, never as zero noise).
    pub fn take(pid: u32) -> Self {
        let cpus = std::fs::read_to_string("/proc/stat")
            .map(|text| parse_proc_stat(&text))
            .unwrap_or_default();
        let mut waits = HashMap::new();
        if let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for entry in entries.flatten() {
                let Some(tid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                    continue;
                };
                let path = entry.path().join("schedstat");
                if let Some(wait) = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|t| parse_schedstat(&t))
                {
                    waits.insert(tid, wait);
                }
            }
        }
        Self { cpus, waits }
    }
}

/// The per-CPU lines (`cpuN ...`) of `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> HashMap<usize, CpuTicks> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(cpu) = name.strip_prefix("cpu").and_then(|n| n.parse().ok()) else {
            continue;
        };
        let values: Vec<u64> = fields.take(8).filter_map(|f| f.parse().ok()).collect();
        if values.len() == 8 {
            out.insert(
                cpu,
                CpuTicks {
                    total: values.iter().sum(),
                    steal: values[7],
                },
            );
        }
    }
    out
}

/// The run-queue wait (the second field, ns) of a schedstat line.
pub fn parse_schedstat(text: &str) -> Option<u64> {
    text.split_whitespace().nth(1)?.parse().ok()
}

/// The host's noise over one measured window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    /// Steal over every CPU, % of their time; NaN when not measured.
    pub steal_pct: f64,
    /// Steal over the server's CPUs, % of their time; NaN when not
    /// measured.
    pub server_steal_pct: f64,
    /// The server's threads' run-queue wait, summed, % of the window; NaN
    /// when not measured.
    pub server_wait_pct: f64,
}

impl Noise {
    /// The noise between two samples `window_s` apart; `server` are the
    /// server's CPUs.
    pub fn between(a: &HostSample, b: &HostSample, server: &CpuSet, window_s: f64) -> Self {
        let steal = |cpus: &mut dyn Iterator<Item = usize>| {
            let (mut total, mut steal) = (0u64, 0u64);
            for cpu in cpus {
                if let (Some(x), Some(y)) = (a.cpus.get(&cpu), b.cpus.get(&cpu)) {
                    total += y.total.saturating_sub(x.total);
                    steal += y.steal.saturating_sub(x.steal);
                }
            }
            if total == 0 {
                f64::NAN
            } else {
                100.0 * steal as f64 / total as f64
            }
        };
        let mut all = b.cpus.keys().copied();
        let steal_pct = steal(&mut all);
        let server_steal_pct = steal(&mut server.cpus().iter().copied());
        let server_wait_pct = if b.waits.is_empty() || window_s <= 0.0 {
            f64::NAN
        } else {
            let waited: u64 = b
                .waits
                .iter()
                .map(|(tid, &w)| w.saturating_sub(a.waits.get(tid).copied().unwrap_or(0)))
                .sum();
            100.0 * waited as f64 / 1e9 / window_s
        };
        Self {
            steal_pct,
            server_steal_pct,
            server_wait_pct,
        }
    }

    /// The worse of two noises, figure by figure (NaN only where both are).
    pub fn worst(self, other: Noise) -> Noise {
        let max = |a: f64, b: f64| if a.is_nan() { b } else { a.max(b) };
        Noise {
            steal_pct: max(self.steal_pct, other.steal_pct),
            server_steal_pct: max(self.server_steal_pct, other.server_steal_pct),
            server_wait_pct: max(self.server_wait_pct, other.server_wait_pct),
        }
    }

    /// The worst of several noises; all NaN for none.
    pub fn worst_of(noises: impl IntoIterator<Item = Noise>) -> Noise {
        noises.into_iter().fold(Noise::unmeasured(), Noise::worst)
    }

    /// No figure measured.
    pub fn unmeasured() -> Noise {
        Noise {
            steal_pct: f64::NAN,
            server_steal_pct: f64::NAN,
            server_wait_pct: f64::NAN,
        }
    }

    /// The figures by name, in report order.
    pub fn figures(&self) -> [(&'static str, f64); 3] {
        [
            ("steal_pct", self.steal_pct),
            ("server_steal_pct", self.server_steal_pct),
            ("server_wait_pct", self.server_wait_pct),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc/stat` of two CPUs: the aggregate line is skipped, each
    /// CPU's ticks and steal are read.
    #[test]
    fn reads_proc_stat() {
        let text = "cpu  10 0 10 80 0 0 0 4 0 0\n\
                    cpu0 5 0 5 40 0 0 0 1 0 0\n\
                    cpu1 5 0 5 40 0 0 0 3 2 0\n\
                    intr 12345\n\
                    cpu7 1 2\n";
        let cpus = parse_proc_stat(text);
        assert_eq!(cpus.len(), 2, "{cpus:?}");
        assert_eq!(
            cpus[&0],
            CpuTicks {
                total: 51,
                steal: 1
            }
        );
        assert_eq!(
            cpus[&1],
            CpuTicks {
                total: 53,
                steal: 3
            }
        );
    }

    /// The wait is the second schedstat field.
    #[test]
    fn reads_schedstat() {
        assert_eq!(parse_schedstat("130594 1748720 2\n"), Some(1_748_720));
        assert_eq!(parse_schedstat("garbage"), None);
        assert_eq!(parse_schedstat(""), None);
    }

    /// Steal over all CPUs and over the server's, and the threads' wait
    /// (a thread born in the window counts from zero, one gone is left
    /// out).
    #[test]
    fn noise_between_samples() {
        let ticks = |total, steal| CpuTicks { total, steal };
        let a = HostSample {
            cpus: HashMap::from([(0, ticks(1000, 10)), (1, ticks(1000, 0))]),
            waits: HashMap::from([(7, 1_000_000), (8, 5_000_000)]),
        };
        let b = HostSample {
            cpus: HashMap::from([(0, ticks(1100, 30)), (1, ticks(1100, 10))]),
            waits: HashMap::from([(7, 11_000_000), (9, 10_000_000)]),
        };
        let noise = Noise::between(&a, &b, &CpuSet::new(vec![1]), 1.0);
        assert!((noise.steal_pct - 15.0).abs() < 1e-9, "{noise:?}");
        assert!((noise.server_steal_pct - 10.0).abs() < 1e-9, "{noise:?}");
        // Thread 7 waited 10 ms, thread 9 (new) 10 ms, thread 8 is gone.
        assert!((noise.server_wait_pct - 2.0).abs() < 1e-9, "{noise:?}");
    }

    /// Counters that could not be read give NaN, not zero noise.
    #[test]
    fn unreadable_counters_are_not_zero() {
        let empty = HostSample::default();
        let noise = Noise::between(&empty, &empty, &CpuSet::new(vec![0]), 1.0);
        assert!(noise.steal_pct.is_nan() && noise.server_wait_pct.is_nan());
        let worst = Noise::worst_of([
            noise,
            Noise {
                steal_pct: 2.0,
                ..noise
            },
        ]);
        assert_eq!(worst.steal_pct, 2.0);
        assert!(worst.server_steal_pct.is_nan());
    }

    /// This process can be sampled: every CPU it may use has ticks, and
    /// its own threads have waits.
    #[test]
    fn samples_this_process() {
        let sample = HostSample::take(std::process::id());
        assert!(!sample.cpus.is_empty());
        assert!(!sample.waits.is_empty());
    }
}
