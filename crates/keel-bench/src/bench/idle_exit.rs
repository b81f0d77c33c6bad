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

use std::fs::{File, OpenOptions};
use std::io::Write;

/// The PM QoS device for the CPUs' wake-up latency.
const CPU_DMA_LATENCY: &str = "/dev/cpu_dma_latency";

/// A held request for a 0 µs exit latency; dropped, the CPUs may halt
/// again.
#[derive(Debug)]
pub struct IdleExitHold {
    /// The open device: the request lasts while it is open.
    _device: File,
}

/// Asks that no CPU enter an idle state it takes longer than 0 µs to
/// leave, for as long as the returned hold lives; the error says why not
/// (the device needs root).
pub fn hold() -> Result<IdleExitHold, String> {
    let mut device = OpenOptions::new()
        .write(true)
        .open(CPU_DMA_LATENCY)
        .map_err(|e| format!("cannot open {CPU_DMA_LATENCY}: {e}"))?;
    device
        .write_all(&0i32.to_ne_bytes())
        .map_err(|e| format!("cannot write to {CPU_DMA_LATENCY}: {e}"))?;
    Ok(IdleExitHold { _device: device })
}
