//! A driver whose wait the kernel refuses: the runtime must not spin.
//!
//! The runtime's epoll descriptor (or its ring's) is replaced behind its
//! back by `/dev/null` (`dup2`), so that every wait fails at once
//! (`EINVAL` from `epoll_wait`, `EOPNOTSUPP` from `io_uring_enter`), as a
//! kernel out of memory for the ring's polls would make it fail. A parked
//! worker must sleep the failure off instead of going round its park loop
//! without sleeping; the failures must show in `Stats`; tasks must still
//! run; and the runtime must still shut down.
//!
//! This file holds one test, so that no other runtime of the process opens
//! a descriptor of the same kind while it looks for the runtime's own.

use std::collections::BTreeSet;
use std::os::fd::AsRawFd;
use std::time::Duration;

use keel::io::IoBackend;
use keel::Runtime;

/// The descriptors of this process whose `/proc/self/fd` link reads
/// `anon_inode:[kind]`.
fn descriptors_of_kind(kind: &str) -> BTreeSet<i32> {
    let wanted = format!("anon_inode:[{kind}]");
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(Result::ok)
        .filter(|entry| {
            std::fs::read_link(entry.path()).is_ok_and(|link| link.to_string_lossy() == wanted)
        })
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
        .collect()
}

/// How long the broken runtime is left idle. A park that spins on the
/// failed wait makes a failure every microsecond or so (hundreds of
/// thousands here); one that sleeps each off makes one a millisecond.
const IDLE: Duration = Duration::from_millis(300);

/// At most this many failures over [`IDLE`]: ten times what one worker
/// sleeping a millisecond after each makes, a hundredth of a spin's.
const MOST_FAILURES: u64 = 3_000;

/// `value`, returned by a task on `rt`'s worker.
fn on_worker(rt: &Runtime, value: u32) -> u32 {
    rt.block_on(async move { keel::spawn(async move { value }).await.unwrap() })
}

fn a_refused_wait_is_slept_off(backend: IoBackend, kind: &str) {
    let before = descriptors_of_kind(kind);
    // No tokio side (under `tokio-context`, its own epoll descriptor would
    // be found and broken too), and the ring layout set here, whatever
    // `KEEL_IO_RINGS` says.
    let rt = Runtime::builder()
        .workers(1)
        .io_backend(backend)
        .io_ring_per_worker(true)
        .tokio_threads(0)
        .build()
        .unwrap();
    // The worker runs and parks at least once before the break.
    assert_eq!(on_worker(&rt, 1), 1);
    let new: Vec<i32> = descriptors_of_kind(kind)
        .difference(&before)
        .copied()
        .collect();
    assert!(
        !new.is_empty(),
        "{backend:?}: the runtime opened no {kind} descriptor"
    );
    let null = std::fs::File::open("/dev/null").unwrap();
    for &fd in &new {
        // SAFETY: `fd` is open (the runtime's), and `dup2` closes it and
        // makes it a second descriptor of `/dev/null`, which the runtime
        // then owns and closes at its drop.
        assert!(unsafe { libc::dup2(null.as_raw_fd(), fd) } >= 0);
    }
    // Wake the worker parked in the wait, so its next wait fails.
    assert_eq!(on_worker(&rt, 2), 2);
    std::thread::sleep(IDLE);
    let io = rt.stats().io;
    assert!(
        io.wait_errors >= 1,
        "{backend:?}: no failed wait counted after the {kind} descriptor broke"
    );
    assert!(
        io.wait_errors <= MOST_FAILURES,
        "{backend:?}: {} failed waits in {IDLE:?}: the park spins on the error",
        io.wait_errors
    );
    assert!(
        io.last_wait_error.is_some(),
        "{backend:?}: the failed waits' error is not reported"
    );
    // Tasks still run: a notification reaches the worker within its sleep.
    for round in 0..10 {
        assert_eq!(on_worker(&rt, round), round);
    }
    drop(rt);
}

#[test]
fn a_wait_the_kernel_refuses_is_counted_and_slept_off_on_either_driver() {
    a_refused_wait_is_slept_off(IoBackend::Epoll, "eventpoll");
    a_refused_wait_is_slept_off(IoBackend::Uring, "io_uring");
}
