//! A latency probe's claim on its CPU: real-time priority, or the best
//! nice level the process may take.
//!
//! A probe measures the time between its send and the answer's arrival,
//! and that includes its own wait for a core after the answer arrives. On
//! a CPU it shares with a load generator, that wait is set by how the
//! kernel shares the CPU between the two, not by the server. A probe
//! thread that runs under `SCHED_FIFO` preempts the load as soon as its
//! answer arrives. It cannot run away with the CPU: the probe sleeps
//! between sends and blocks on every read, and the kernel caps real-time
//! threads at 95% of a CPU by default (`sched_rt_runtime_us`).
//!
//! Without the right to real-time scheduling (`CAP_SYS_NICE` or an
//! `RLIMIT_RTPRIO`), the thread takes the lowest nice value it is allowed,
//! and the probe reports which it got, so a report says how its latencies
//! were taken. Only the calling thread changes: the rest of a load process
//! (its load generators) keeps its normal priority.

use serde::{Deserialize, Serialize};

/// The `SCHED_FIFO` priority a probe asks for: above every normal thread,
/// far below the kernel's own real-time threads (99).
pub const PROBE_PRIORITY: i32 = 10;

/// The nice values tried, best first, when real-time scheduling is refused.
const NICE_LADDER: [i32; 5] = [-20, -15, -10, -5, -1];

/// How a probe thread is scheduled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeScheduling {
    /// `fifo`, `nice`, or `normal` (nothing was asked, or nothing granted).
    pub policy: String,
    /// The `SCHED_FIFO` priority, or the nice value.
    pub level: i32,
    /// Why the probe runs below real-time priority, when it was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl ProbeScheduling {
    /// A thread left as it is.
    pub fn normal() -> Self {
        Self {
            policy: "normal".into(),
            level: 0,
            refused: None,
        }
    }

    /// The scheduling as a short label (`fifo:10`, `nice:-5`, `normal`).
    pub fn label(&self) -> String {
        match self.policy.as_str() {
            "normal" => "normal".into(),
            policy => format!("{policy}:{}", self.level),
        }
    }
}

/// Raises the calling thread's priority if `wanted`: `SCHED_FIFO` at
/// [`PROBE_PRIORITY`], else the best nice value allowed. Says what it got.
pub fn raise(wanted: bool) -> ProbeScheduling {
    if !wanted {
        return ProbeScheduling::normal();
    }
    let param = libc::sched_param {
        sched_priority: PROBE_PRIORITY,
    };
    // SAFETY: `param` is a valid sched_param for the call; pid 0 is the
    // calling thread, which is the only one affected.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } == 0 {
        return ProbeScheduling {
            policy: "fifo".into(),
            level: PROBE_PRIORITY,
            refused: None,
        };
    }
    let refused = format!("SCHED_FIFO: {}", std::io::Error::last_os_error());
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    for nice in NICE_LADDER {
        // SAFETY: setpriority on this thread's id changes only its nice
        // value; the id is a valid thread id of this process.
        let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
        if rc == 0 {
            return ProbeScheduling {
                policy: "nice".into(),
                level: nice,
                refused: Some(refused),
            };
        }
    }
    ProbeScheduling {
        refused: Some(format!(
            "{refused}; no lower nice value either: {}",
            std::io::Error::last_os_error()
        )),
        ..ProbeScheduling::normal()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not asked, nothing changes.
    #[test]
    fn not_wanted_is_normal() {
        let got = raise(false);
        assert_eq!(got, ProbeScheduling::normal());
        assert_eq!(got.label(), "normal");
    }

    /// Asked, a thread gets real-time priority or says why not, and the
    /// kernel agrees with what it says.
    #[test]
    fn raise_reports_what_the_kernel_granted() {
        let got = std::thread::spawn(|| {
            let got = raise(true);
            // SAFETY: sched_getscheduler on the calling thread has no
            // preconditions.
            let policy = unsafe { libc::sched_getscheduler(0) };
            // SAFETY: as above; getpriority reads this thread's nice value.
            let nice =
                unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
            (got, policy, nice)
        })
        .join()
        .unwrap();
        let (got, policy, nice) = got;
        match got.policy.as_str() {
            "fifo" => {
                assert_eq!(policy, libc::SCHED_FIFO);
                assert_eq!(got.label(), format!("fifo:{PROBE_PRIORITY}"));
                assert!(got.refused.is_none());
            }
            "nice" => {
                assert_eq!(policy, libc::SCHED_OTHER);
                assert_eq!(nice, got.level);
                assert!(got.refused.as_deref().unwrap().starts_with("SCHED_FIFO"));
            }
            other => {
                assert_eq!(other, "normal");
                assert!(got.refused.is_some(), "{got:?}");
            }
        }
    }
}
