//! Keeping the CPUs out of halt while S5 measures its ping.
//!
//! An idle CPU halts, and the interrupt that wakes it pays for leaving
//! that state. On this kind of virtual machine (the `haltpoll` cpuidle
//! driver) the exit took an idle node's share of a ping from some 15 µs
//! to 60 µs at the median, and more at the tail (2026-11-27). Under the
//! same paced log load, the node that needs less CPU for the same
//! records idles more often and pays that exit more often: at 12,000
//! records/s keel's node ran its CPU about a quarter of the time against
//! tokio's half, and its server ping p99 was 173–285 µs against tokio's
//! 143–145 µs; with the CPUs kept out of halt, 70–77 µs against 85–95 µs
//! (three interleaved pairs each). That is the machine's idle policy, not
//! the runtime's work, and a latency-tuned host sets it the same way.
//!
//! Linux's PM QoS interface does it: while a process holds
//! `/dev/cpu_dma_latency` open with a latency written to it, the cpuidle
//! governor picks no idle state that takes longer to leave; at 0 µs an
//! idle CPU polls. The request ends when the file is closed, so it lasts
//! exactly as long as the hold this module returns. Polling in idle is not
//! process CPU time, so the CPU figures do not change; it does keep the
//! CPUs busy for the host.
//!
//! Only a cpuidle governor reads that request. A kernel without a cpuidle
//! driver (`current_driver` reads `none`, as on the 2-vCPU VM of
//! 2026-11-29) halts an idle CPU directly, whatever the request says: a
//! trace of S5's paced phase there showed the node's CPU idle and a ping
//! answered 251–358 µs after it was sent, with nothing run on that CPU
//! between. So the hold is refused where no driver is, and the report
//! says the CPUs could halt, rather than that they were kept out of it.

use std::fs::{File, OpenOptions};
use std::io::Write;

/// The PM QoS device for the CPUs' wake-up latency.
const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// Where the kernel names the cpuidle driver in use.
const CPUIDLE_DRIVER: &str = "/sys/devices/system/cpu/cpuidle/current_driver";

/// A held request for a 0 µs exit latency; dropped, the CPUs may halt
/// again.
#[derive(Debug)]
pub struct IdleExitHold {
    /// The open device: the request lasts while it is open.
    _device: File,
}

/// Asks that no CPU enter an idle state it takes longer than 0 µs to
/// leave, for as long as the returned hold lives; the error says why not
/// (no cpuidle driver to honour it, or the device needs root).
pub fn hold() -> Result<IdleExitHold, String> {
    governed(std::fs::read_to_string(CPUIDLE_DRIVER).ok().as_deref())?;
    let mut device = OpenOptions::new()
        .write(true)
        .open(CPU_DMA_LATENCY)
        .map_err(|e| format!("cannot open {CPU_DMA_LATENCY}: {e}"))?;
    device
        .write_all(&0i32.to_ne_bytes())
        .map_err(|e| format!("cannot write to {CPU_DMA_LATENCY}: {e}"))?;
    Ok(IdleExitHold { _device: device })
}

/// Whether a cpuidle governor will honour a PM QoS request, given what
/// [`CPUIDLE_DRIVER`] reads (`None`: it could not be read).
fn governed(driver: Option<&str>) -> Result<(), String> {
    match driver.map(str::trim) {
        Some(name) if !name.is_empty() && name != "none" => Ok(()),
        Some(name) => Err(format!(
            "no cpuidle driver ({CPUIDLE_DRIVER} reads {name:?}): the kernel halts an idle CPU \
             without asking PM QoS"
        )),
        None => Err(format!(
            "cannot read {CPUIDLE_DRIVER}: no cpuidle driver to honour PM QoS"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request is only worth holding where a cpuidle driver reads it.
    #[test]
    fn a_hold_needs_a_cpuidle_driver() {
        assert!(governed(Some("haltpoll\n")).is_ok());
        assert!(governed(Some("intel_idle")).is_ok());
        let none = governed(Some("none\n")).unwrap_err();
        assert!(none.contains("no cpuidle driver"), "{none}");
        assert!(governed(Some("")).is_err());
        assert!(governed(None).is_err());
    }
}
