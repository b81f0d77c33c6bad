//! Whether this process may use io_uring, and if not, why: the first step
//! of the ring driver, which will fall back to epoll with this reason.
//!
//! A kernel with io_uring can still refuse it in several ways, and each
//! looks different from inside the process:
//! - the sysctl `kernel.io_uring_disabled` (Linux 6.6): `2` refuses every
//!   ring, `1` every ring of a process outside `kernel.io_uring_group`
//!   without `CAP_SYS_ADMIN`, both with `EPERM`;
//! - a seccomp filter (Docker's default profile, systemd's
//!   `SystemCallFilter`, gVisor) answers `io_uring_setup` with `EPERM` or
//!   `ENOSYS`;
//! - a kernel built without it answers `ENOSYS`;
//! - the locked-memory limit (`RLIMIT_MEMLOCK`, before Linux 5.12 counted
//!   the rings against it) answers `ENOMEM`;
//! - an old kernel sets a ring up but lacks an operation the driver needs.
//!
//! [`probe_io_uring`] tries each in the order a ring would meet it: the
//! sysctl, a ring set up for real, the kernel's list of operations
//! (`IORING_REGISTER_PROBE`), and a no-op submitted and reaped, so that
//! "available" means a ring worked here, not that the kernel is recent.
//!
//! The probe makes system calls that a strict seccomp filter may answer
//! by killing the process (`SECCOMP_RET_KILL`), so nothing in keel calls
//! it unless asked: today `keel --defaults` does.

use std::fmt;
use std::io;

use io_uring::{opcode, IoUring, Probe};

/// The operations the ring driver needs, with the kernel release that
/// brought each: the oldest kernel it can run on is the newest of these.
const NEEDED: &[(u8, &str, &str)] = &[
    (opcode::Nop::CODE, "NOP", "5.1"),
    (opcode::PollAdd::CODE, "POLL_ADD", "5.1"),
    (opcode::Fsync::CODE, "FSYNC", "5.1"),
    (opcode::Accept::CODE, "ACCEPT", "5.5"),
    (opcode::Connect::CODE, "CONNECT", "5.5"),
    (opcode::AsyncCancel::CODE, "ASYNC_CANCEL", "5.5"),
    (opcode::Read::CODE, "READ", "5.6"),
    (opcode::Write::CODE, "WRITE", "5.6"),
    (opcode::Recv::CODE, "RECV", "5.6"),
    (opcode::Send::CODE, "SEND", "5.6"),
    (opcode::Close::CODE, "CLOSE", "5.6"),
    (opcode::OpenAt::CODE, "OPENAT", "5.6"),
    (opcode::Shutdown::CODE, "SHUTDOWN", "5.11"),
];

/// Operations the driver uses where the kernel has them, falling back
/// without them.
const OPTIONAL: &[(u8, &str)] = &[
    (opcode::MsgRingData::CODE, "MSG_RING"),
    (opcode::SendZc::CODE, "SEND_ZC"),
];

/// The `user_data` of the probe's no-op, to recognise its completion.
const NOP_TAG: u64 = 0x6b65_656c;

/// What [`probe_io_uring`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RingSupport {
    /// A ring was set up, has every operation the driver needs, and
    /// completed a no-op.
    Available {
        /// The optional operations the kernel has (`MSG_RING`, `SEND_ZC`).
        optional: Vec<&'static str>,
    },
    /// The ring cannot be used here; the text says why and, where there
    /// is one, what would allow it.
    Refused(String),
}

impl RingSupport {
    /// Whether a ring can be used.
    pub fn is_available(&self) -> bool {
        matches!(self, RingSupport::Available { .. })
    }
}

impl fmt::Display for RingSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingSupport::Available { optional } if optional.is_empty() => f.write_str("available"),
            RingSupport::Available { optional } => {
                write!(f, "available (with {})", optional.join(", "))
            }
            RingSupport::Refused(why) => write!(f, "refused: {why}"),
        }
    }
}

/// Finds out whether this process can use io_uring (see the module docs
/// for what is tried). Sets up one small ring and closes it again.
///
/// ```
/// let support = keel::io::probe_io_uring();
/// println!("io_uring: {support}");
/// ```
pub fn probe_io_uring() -> RingSupport {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
    if let Some(why) = sysctl.as_deref().and_then(disabled_by_sysctl) {
        return RingSupport::Refused(why);
    }
    let mut ring = match IoUring::new(8) {
        Ok(ring) => ring,
        Err(error) => return RingSupport::Refused(setup_refusal(&error, sysctl.as_deref())),
    };
    let mut probe = Probe::new();
    if let Err(error) = ring.submitter().register_probe(&mut probe) {
        return RingSupport::Refused(format!(
            "the kernel does not list its io_uring operations (IORING_REGISTER_PROBE, \
             Linux 5.6): {error}"
        ));
    }
    let missing: Vec<String> = NEEDED
        .iter()
        .filter(|(code, _, _)| !probe.is_supported(*code))
        .map(|(_, name, since)| format!("{name} (Linux {since})"))
        .collect();
    if !missing.is_empty() {
        return RingSupport::Refused(format!(
            "the kernel's io_uring lacks {}",
            missing.join(", ")
        ));
    }
    if let Err(why) = nop_round_trip(&mut ring) {
        return RingSupport::Refused(why);
    }
    let optional = OPTIONAL
        .iter()
        .filter(|(code, _)| probe.is_supported(*code))
        .map(|(_, name)| *name)
        .collect();
    RingSupport::Available { optional }
}

/// The refusal the sysctl's value means for every process, if any.
pub(crate) fn disabled_by_sysctl(value: &str) -> Option<String> {
    (value.trim() == "2").then(|| {
        "the sysctl kernel.io_uring_disabled is 2: io_uring is off for every process \
         (`sysctl kernel.io_uring_disabled=0` turns it on)"
            .to_owned()
    })
}

/// Why `io_uring_setup` failed, from its error and the sysctl's value.
pub(crate) fn setup_refusal(error: &io::Error, sysctl: Option<&str>) -> String {
    let restricted = sysctl.is_some_and(|v| v.trim() == "1");
    match error.raw_os_error() {
        Some(libc::EPERM) if restricted => format!(
            "io_uring_setup: {error}: the sysctl kernel.io_uring_disabled is 1, which allows \
             rings only to the group kernel.io_uring_group and to CAP_SYS_ADMIN"
        ),
        Some(libc::EPERM) => format!(
            "io_uring_setup: {error}: a seccomp filter forbids it (a container's default \
             profile, a service manager's system-call filter)"
        ),
        Some(libc::ENOSYS) => format!(
            "io_uring_setup: {error}: the kernel was built without io_uring, or a seccomp \
             filter or sandbox hides it"
        ),
        Some(libc::ENOMEM) => format!(
            "io_uring_setup: {error}: the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) is \
             too small for a ring"
        ),
        _ => format!("io_uring_setup: {error}"),
    }
}

/// Submits a no-op and reaps its completion.
fn nop_round_trip(ring: &mut IoUring) -> Result<(), String> {
    let nop = opcode::Nop::new().build().user_data(NOP_TAG);
    // SAFETY: a no-op points at no memory; the entry is complete as built.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| "the new ring's submission queue is full".to_owned())?;
    ring.submit_and_wait(1)
        .map_err(|error| format!("submitting a no-op to the ring: {error}"))?;
    let completion = ring
        .completion()
        .next()
        .ok_or_else(|| "the ring reported no completion for its no-op".to_owned())?;
    if completion.user_data() != NOP_TAG || completion.result() < 0 {
        return Err(format!(
            "the ring completed its no-op with {} (tag {:#x})",
            completion.result(),
            completion.user_data()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_value_2_refuses_every_process() {
        assert!(disabled_by_sysctl("2\n")
            .unwrap()
            .contains("io_uring_disabled is 2"));
        assert_eq!(disabled_by_sysctl("0\n"), None);
        assert_eq!(disabled_by_sysctl("1\n"), None);
    }

    #[test]
    fn each_setup_error_names_its_likely_cause() {
        let error = |errno| io::Error::from_raw_os_error(errno);
        let eperm = setup_refusal(&error(libc::EPERM), Some("0\n"));
        assert!(eperm.contains("seccomp"), "{eperm}");
        let group = setup_refusal(&error(libc::EPERM), Some("1\n"));
        assert!(group.contains("io_uring_group"), "{group}");
        let enosys = setup_refusal(&error(libc::ENOSYS), None);
        assert!(enosys.contains("built without io_uring"), "{enosys}");
        let enomem = setup_refusal(&error(libc::ENOMEM), None);
        assert!(enomem.contains("RLIMIT_MEMLOCK"), "{enomem}");
        let other = setup_refusal(&error(libc::EINVAL), None);
        assert!(other.starts_with("io_uring_setup: "), "{other}");
    }

    #[test]
    fn the_report_reads_as_a_sentence() {
        let refused = RingSupport::Refused("why".into());
        assert_eq!(refused.to_string(), "refused: why");
        assert!(!refused.is_available());
        let bare = RingSupport::Available { optional: vec![] };
        assert_eq!(bare.to_string(), "available");
        let rich = RingSupport::Available {
            optional: vec!["MSG_RING", "SEND_ZC"],
        };
        assert_eq!(rich.to_string(), "available (with MSG_RING, SEND_ZC)");
        assert!(rich.is_available());
    }
}
