//! Facts read from the kernel: process CPU time, clock ticks, the machine.
//!
//! Process CPU seconds come from `/proc/PID/stat` (user + system time of
//! every thread of the server), not from the runtime, because comparing
//! two runtimes needs a measure neither of them reports about itself. The
//! stat line's second field is the command name in parentheses, which may
//! itself contain spaces and parentheses, so parsing splits at the *last*
//! closing parenthesis.

use crate::error::{Context, Error};

/// The fields of `/proc/PID/stat` the harness uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// Process id (field 1).
    pub pid: u32,
    /// Command name, without the parentheses (field 2).
    pub comm: String,
    /// User-mode time in clock ticks (field 14).
    pub utime: u64,
    /// Kernel-mode time in clock ticks (field 15).
    pub stime: u64,
}

/// Parses the contents of a `/proc/PID/stat` file.
pub fn parse_stat(text: &str) -> Result<ProcStat, Error> {
    let bad = |why: &str| Error::new(format!("malformed /proc stat line ({why}): {text:?}"));
    let open = text.find('(').ok_or_else(|| bad("no '('"))?;
    let close = text.rfind(')').ok_or_else(|| bad("no ')'"))?;
    if close < open {
        return Err(bad("')' before '('"));
    }
    let pid = text[..open]
        .trim()
        .parse()
        .map_err(|_| bad("pid is not a number"))?;
    let comm = text[open + 1..close].to_string();
    // Fields from 3 (state) on; utime is field 14, stime field 15.
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Result<u64, Error> {
        rest.get(n - 3)
            .ok_or_else(|| bad("too few fields"))?
            .parse()
            .map_err(|_| bad("time field is not a number"))
    };
    Ok(ProcStat {
        pid,
        comm,
        utime: field(14)?,
        stime: field(15)?,
    })
}

/// Clock ticks per second, the unit of `utime` and `stime`.
pub fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value; it has no
    // preconditions and touches no memory of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// CPU seconds (all threads) a live process has used: in all, and of
/// those, in the kernel.
pub fn cpu_seconds(pid: u32) -> Result<CpuSeconds, Error> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).context(|| format!("reading {path}"))?;
    let stat = parse_stat(&text)?;
    let ticks = clock_ticks_per_second();
    Ok(CpuSeconds {
        total: (stat.utime + stat.stime) as f64 / ticks,
        system: stat.stime as f64 / ticks,
    })
}

/// What [`cpu_seconds`] reads.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuSeconds {
    /// User and system time.
    pub total: f64,
    /// System time: in the kernel, on the process's behalf (its system
    /// calls, the network work they do, the ring's task work).
    pub system: f64,
}

/// The kernel release, as `uname -r` prints it.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat line with the 52 fields of a modern kernel.
    fn line(comm: &str, utime: u64, stime: u64) -> String {
        let mut fields = vec!["S".to_string(), "1".into(), "42".into()];
        fields.extend((6..=13).map(|i| i.to_string()));
        fields.push(utime.to_string());
        fields.push(stime.to_string());
        fields.extend((16..=52).map(|i| i.to_string()));
        format!("42 ({comm}) {}\n", fields.join(" "))
    }

    /// An ordinary command name.
    #[test]
    fn parses_plain_comm() {
        let stat = parse_stat(&line("keel", 150, 25)).unwrap();
        assert_eq!(stat.pid, 42);
        assert_eq!(stat.comm, "keel");
        assert_eq!((stat.utime, stat.stime), (150, 25));
    }

    /// A command name with spaces and parentheses does not shift fields.
    #[test]
    fn parses_comm_with_spaces_and_parentheses() {
        let stat = parse_stat(&line("we(ir) d) (x", 7, 3)).unwrap();
        assert_eq!(stat.comm, "we(ir) d) (x");
        assert_eq!((stat.utime, stat.stime), (7, 3));
    }

    /// Truncated or garbled lines are errors, not panics.
    #[test]
    fn rejects_malformed_lines() {
        assert!(parse_stat("").is_err());
        assert!(parse_stat("42 (keel) S 1 2").is_err());
        assert!(parse_stat("x (keel) S").is_err());
        assert!(parse_stat("42 keel) S").is_err());
        assert!(parse_stat(")42 (keel S").is_err());
    }

    /// Our own process can be read, and it has used some CPU.
    #[test]
    fn reads_own_cpu_time() {
        let text = std::fs::read_to_string("/proc/self/stat").unwrap();
        let stat = parse_stat(&text).unwrap();
        assert_eq!(stat.pid, std::process::id());
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let cpu = cpu_seconds(std::process::id()).unwrap();
        assert!(cpu.total > 0.0);
        assert!((0.0..=cpu.total).contains(&cpu.system), "{cpu:?}");
        assert!(clock_ticks_per_second() > 0.0);
        assert!(!kernel_release().is_empty());
    }
}
