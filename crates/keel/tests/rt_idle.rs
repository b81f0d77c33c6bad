//! An idle runtime sleeps: once nothing has happened for a while, its
//! workers stop waking up to look after each other (see `sched::doze`),
//! on either driver and either ring layout.
//!
//! Each test names its runtime's threads apart and counts their voluntary
//! context switches (`/proc/self/task/*/status`) over a second of
//! idleness, after a second for them to settle: a worker that still
//! looked every 5 ms would switch some 200 times a second.

use std::time::Duration;

use keel::io::IoBackend;
use keel::{Runtime, SpinPolicy};

/// How long the runtime is left alone before the count starts: well past
/// the 100 ms of quiet checks after which a sleeper dozes.
const SETTLE: Duration = Duration::from_secs(1);

/// How long the switches are counted.
const WINDOW: Duration = Duration::from_secs(1);

/// At most this many switches over [`WINDOW`]: none is expected, a few
/// are allowed for whatever else the kernel does to a sleeping thread.
const MOST_SWITCHES: u64 = 4;

/// The voluntary context switches so far of this process's threads whose
/// name starts with `prefix`, and how many such threads there are.
fn switches_of(prefix: &str) -> (u64, usize) {
    let mut total = 0;
    let mut threads = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let voluntary = status
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|count| count.trim().parse::<u64>().ok())
            .expect("a thread's status has its voluntary switches");
        total += voluntary;
        threads += 1;
    }
    (total, threads)
}

fn an_idle_runtime_does_not_wake(name: &str, builder: &mut keel::Builder) {
    let rt = builder
        .workers(2)
        .thread_name(name)
        .spin(SpinPolicy::None)
        .tokio_threads(0)
        .build()
        .unwrap();
    // Both workers run something, then park.
    for round in 0..4u32 {
        let task = rt.spawn(async move { round });
        assert_eq!(rt.block_on(task).unwrap(), round);
    }
    std::thread::sleep(SETTLE);
    let (before, threads) = switches_of(name);
    assert_eq!(
        threads, 3,
        "{name}: the runtime's two workers and the thread that wakes dozing workers"
    );
    std::thread::sleep(WINDOW);
    let (after, _) = switches_of(name);
    let switches = after - before;
    assert!(
        switches <= MOST_SWITCHES,
        "{name}: the idle runtime's workers switched {switches} times in {WINDOW:?}: they still wake to check on each other"
    );
    let doze = rt.stats().doze;
    assert!(
        doze.enabled && doze.dozes >= 1 && doze.alarm_error.is_none(),
        "{name}: the stats say a worker dozed: {doze:?}"
    );
    // And it still runs what comes.
    let task = rt.spawn(async { 42 });
    assert_eq!(rt.block_on(task).unwrap(), 42);
}

#[test]
fn an_idle_runtime_on_epoll_does_not_wake() {
    an_idle_runtime_does_not_wake(
        "idle-epoll",
        Runtime::builder().io_backend(IoBackend::Epoll),
    );
}

#[test]
fn an_idle_runtime_on_one_shared_ring_does_not_wake() {
    an_idle_runtime_does_not_wake(
        "idle-ring",
        Runtime::builder().io_backend(IoBackend::Uring).io_rings(1),
    );
}

#[test]
fn an_idle_runtime_on_a_ring_per_worker_does_not_wake() {
    an_idle_runtime_does_not_wake(
        "idle-rings",
        Runtime::builder()
            .io_backend(IoBackend::Uring)
            .io_ring_per_worker(true),
    );
}
