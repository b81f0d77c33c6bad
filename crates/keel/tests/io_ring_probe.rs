//! `keel::io::probe_io_uring` as a process meets it: it agrees with a ring
//! set up by hand here, and a seccomp filter that forbids the ring (as a
//! container's default profile does) is reported as such, by the probe
//! and by a runtime that asks for the ring: `Auto` runs on epoll and says
//! why, `Uring` refuses to build and says why.

#![cfg(target_os = "linux")]

use std::process::Command;

use keel::io::{probe_io_uring, IoBackend, RingSupport};

/// Sets up a ring with a bare `io_uring_setup` and closes it: the
/// kernel's own answer, without the probe's interpretation.
fn ring_setup_succeeds() -> bool {
    // struct io_uring_params is 120 bytes; zeroed asks for the defaults.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup reads and writes `params`, which is large
    // enough for the kernel's struct and lives across the call.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` is the ring this call set up, owned by nobody else.
    unsafe { libc::close(fd as libc::c_int) };
    true
}

#[test]
fn the_probe_agrees_with_a_ring_set_up_by_hand() {
    let support = probe_io_uring();
    if ring_setup_succeeds() {
        match &support {
            RingSupport::Available { .. } => {}
            // A ring that sets up but lacks an operation is the only
            // refusal left.
            RingSupport::Refused(why) => assert!(why.contains("lacks"), "{why}"),
            other => panic!("unexpected report {other:?}"),
        }
    } else {
        assert!(
            matches!(&support, RingSupport::Refused(why) if why.contains("io_uring")),
            "the kernel refused a ring, the probe says {support}"
        );
    }
    assert_eq!(probe_io_uring(), support, "a second probe says the same");
}

const CHILD: &str = "KEEL_RING_PROBE_CHILD";

/// Runs the probe in a child process whose thread has a seccomp filter
/// answering `io_uring_setup` with `EPERM`, as Docker's default profile
/// does; the probe must say so, and the child must finish normally.
#[test]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn a_seccomp_filter_that_forbids_rings_is_named() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "probe_under_a_seccomp_filter",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the child failed: {stdout}");
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("probe: "))
        .unwrap_or_else(|| panic!("the child printed no report: {stdout}"));
    assert!(line.starts_with("refused: io_uring_setup"), "{line}");
    assert!(line.contains("seccomp"), "{line}");
    let report = |prefix: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("the child printed no {prefix:?}: {stdout}"))
            .to_owned()
    };
    let auto = report("auto: ");
    assert!(auto.starts_with("epoll, because io_uring_setup"), "{auto}");
    assert!(auto.contains("seccomp"), "{auto}");
    let uring = report("uring: ");
    assert!(
        uring.starts_with("refused: the io_uring driver: io_uring_setup"),
        "{uring}"
    );
    assert!(uring.contains("seccomp"), "{uring}");
}

/// The child's half of the test above: installs the filter on its thread,
/// probes, prints the report.
#[test]
#[ignore = "run by a_seccomp_filter_that_forbids_rings_is_named in a child process"]
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn probe_under_a_seccomp_filter() {
    assert!(
        std::env::var_os(CHILD).is_some(),
        "installs a seccomp filter: run only as the child of a_seccomp_filter_that_forbids_rings_is_named"
    );
    // Load the system call number; if it is io_uring_setup, fail it with
    // EPERM, otherwise allow it.
    let filter = [
        bpf(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
        bpf(
            libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
            0,
            1,
            libc::SYS_io_uring_setup as u32,
        ),
        bpf(
            libc::BPF_RET | libc::BPF_K,
            0,
            0,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        bpf(libc::BPF_RET | libc::BPF_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with these options reads `program` and the filter it
    // points to, both alive across the calls; the filter only affects
    // this thread (no SECCOMP_FILTER_FLAG_TSYNC).
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
            ),
            0,
            "{}",
            std::io::Error::last_os_error()
        );
    }
    println!("probe: {}", probe_io_uring());
    // The filter is this thread's, where the builder sets its rings up.
    let auto = keel::Runtime::builder()
        .workers(1)
        .io_backend(IoBackend::Auto)
        .build()
        .expect("Auto falls back to epoll");
    let io = auto.stats().io;
    assert_eq!(io.requested, IoBackend::Auto);
    println!(
        "auto: {}, because {}",
        io.driver,
        io.fallback.as_deref().unwrap_or("(no reason given)")
    );
    match keel::Runtime::builder()
        .workers(1)
        .io_backend(IoBackend::Uring)
        .build()
    {
        Ok(_) => println!("uring: built a runtime on a refused ring"),
        Err(error) => println!("uring: refused: {error}"),
    }
}

fn bpf(code: u32, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}
