//! Helpers shared by the integration tests.

#![allow(dead_code)]

use keel::{Runtime, SpinPolicy};

pub mod alloc;
mod block_on;
pub mod http;
pub mod servers;
mod temp_dir;

// Not every test uses both.
#[allow(unused_imports)]
pub use block_on::block_on;
#[allow(unused_imports)]
pub use temp_dir::TempDir;

/// Every spin policy a runtime test runs under.
#[cfg(not(miri))]
pub const SPINS: [SpinPolicy; 4] = [
    SpinPolicy::None,
    SpinPolicy::Short,
    SpinPolicy::Medium,
    SpinPolicy::Long,
];

/// Under Miri, the default policy and one that spins: each test runs some
/// thousand times slower there, and what Miri checks (every memory
/// access of the runtime and the tasks) is the same whatever the policy.
#[cfg(miri)]
pub const SPINS: [SpinPolicy; 2] = [SpinPolicy::None, SpinPolicy::Short];

/// `native` natively, `miri` under Miri: the size of a test's workload.
/// Miri interprets every step some thousand times slower, and its clock
/// runs with the interpreted work, so a workload sized for the watchdogs
/// natively outlasts them there; what Miri checks (every memory access)
/// needs only enough of the work to reach each path.
pub const fn miri_or<T: Copy>(native: T, miri: T) -> T {
    if cfg!(miri) {
        miri
    } else {
        native
    }
}

/// How long one runtime test may take before it counts as hung.
pub const TEST_LIMIT: Duration = Duration::from_secs(120);

/// Builds a runtime with `workers` workers and `spin`, and runs `body` on
/// it under a watchdog: a body that hangs (a lost wake-up) fails after
/// [`TEST_LIMIT`] instead of stalling the suite.
pub fn with_runtime(workers: usize, spin: SpinPolicy, body: fn(&Runtime)) {
    within(TEST_LIMIT, move || {
        let rt = Runtime::builder()
            .workers(workers)
            .spin(spin)
            .build()
            .expect("runtime builds");
        body(&rt);
    });
}

/// Runs `run(workers, spin)` for every spin policy, naming each on stderr
/// so a failure says which one broke.
pub fn each_spin(workers: usize, run: fn(usize, SpinPolicy)) {
    for spin in SPINS {
        eprintln!("{workers} workers, spin {spin:?}");
        run(workers, spin);
    }
}

/// One `#[test]` per worker count (1, 2 and 4), each running `$run` under
/// every spin policy (see [`each_spin`]); under Miri, one worker alone.
/// Attributes in brackets before `$run` go on each test.
#[macro_export]
macro_rules! rt_matrix {
    ([$(#[$attr:meta])*] $run:expr) => {
        #[test]
        $(#[$attr])*
        fn one_worker() {
            $crate::support::each_spin(1, $run);
        }

        #[test]
        $(#[$attr])*
        #[cfg_attr(miri, ignore = "one worker under Miri: more only add interleavings, explored slowly")]
        fn two_workers() {
            $crate::support::each_spin(2, $run);
        }

        #[test]
        $(#[$attr])*
        #[cfg_attr(miri, ignore = "one worker under Miri: more only add interleavings, explored slowly")]
        fn four_workers() {
            $crate::support::each_spin(4, $run);
        }
    };
    ($run:expr) => {
        $crate::rt_matrix!([] $run);
    };
}

/// Declares runtime tests that each run with 1, 2 and 4 workers and with
/// every spin policy, on a runtime built for them (under a watchdog).
/// Attributes before a `fn` go on each of its tests (an `ignore`, say).
///
/// ```ignore
/// rt_test! {
///     fn spawns_and_joins(rt) {
///         assert_eq!(rt.block_on(async { keel::spawn(async { 1 }).await.unwrap() }), 1);
///     }
/// }
/// ```
#[macro_export]
macro_rules! rt_test {
    ($($(#[$attr:meta])* fn $name:ident($rt:ident) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                fn body($rt: &keel::Runtime) $body

                $crate::rt_matrix!(
                    [$(#[$attr])*]
                    |workers, spin| $crate::support::with_runtime(workers, spin, body)
                );
            }
        )*
    };
}

/// Like [`rt_test!`], for tests that must own and drop their runtime: the
/// body gets a `&mut Builder` with the worker count and spin policy set,
/// and the worker count.
#[macro_export]
macro_rules! rt_builder_test {
    ($(fn $name:ident($builder:ident, $workers:ident) $body:block)*) => {
        $(
            mod $name {
                #[allow(unused_imports)]
                use super::*;

                fn body($builder: &mut keel::Builder, $workers: usize) $body

                $crate::rt_matrix!(|workers, spin| {
                    body(keel::Runtime::builder().workers(workers).spin(spin), workers)
                });
            }
        )*
    };
}

/// Set in a child test process started by [`run_in_child_process`].
const CHILD_ENV: &str = "KEEL_TEST_CHILD";

/// Whether this is the child process of [`run_in_child_process`].
///
/// Always under Miri, which starts no processes: the body then runs in
/// the test's own process, and an abort fails the whole run rather than
/// the one test.
pub fn in_child_process() -> bool {
    cfg!(miri) || std::env::var_os(CHILD_ENV).is_some()
}

/// Runs the test called `name` in a child process (this test binary, with
/// [`in_child_process`] true there) and fails unless the child exits
/// successfully. For scenarios whose failure mode is a process abort.
pub fn run_in_child_process(name: &str) {
    child_output(name, &[]);
}

/// Runs the test called `name` in a child process, as
/// [`run_in_child_process`] does, with the environment variables `env`
/// set there (for what a process reads once, or a limit that is the
/// process's), and returns what it printed.
pub fn child_output(name: &str, env: &[(&str, &str)]) -> String {
    let output = std::process::Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            name,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .envs(env.iter().copied())
        .output()
        .expect("child test process starts");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child process failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// What follows `key` on the first line of `stdout` that holds it (the
/// harness may have printed the test's name before it on that line).
pub fn reported(stdout: &str, key: &str) -> String {
    stdout
        .lines()
        .find_map(|line| line.split_once(key).map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("the child printed no {key:?}: {stdout}"))
        .to_owned()
}

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

/// A tag of the calling thread (the address of a thread-local), to tell
/// which worker ran a task.
pub fn thread_tag() -> usize {
    thread_local!(static TAG: u8 = const { 0 });
    TAG.with(|tag| std::ptr::from_ref(tag) as usize)
}

/// Busy-loops for `duration` of wall time: a poll that does CPU work.
pub fn busy_for(duration: Duration) {
    let end = Instant::now() + duration;
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Busy-loops until the calling thread has run `duration` on a core
/// (however long the kernel keeps it off its core meanwhile), and returns
/// the CPU time it used.
pub fn cpu_for(duration: Duration) -> Duration {
    let start = thread_cpu();
    let mut x = 0u64;
    loop {
        let used = thread_cpu() - start;
        if used >= duration {
            return used;
        }
        for i in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
}

/// A one-shot, resettable wake-up: `notify` from any thread, `wait` in a
/// task. Built from std only, so the tests depend on nothing but keel.
#[derive(Default)]
pub struct Signal {
    set: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    /// Sets the signal and wakes the waiting task, if any.
    pub fn notify(&self) {
        self.set.store(true, Ordering::SeqCst);
        if let Some(waker) = self.waker.lock().unwrap().take() {
            waker.wake();
        }
    }

    /// Clears the signal, returning whether it was set: for plain threads
    /// that poll instead of awaiting.
    pub fn set_and_clear(&self) -> bool {
        self.set.swap(false, Ordering::SeqCst)
    }

    /// Resolves once the signal is set, and clears it.
    pub fn wait(&self) -> impl Future<Output = ()> + '_ {
        WaitSignal { signal: self }
    }
}

struct WaitSignal<'a> {
    signal: &'a Signal,
}

impl Future for WaitSignal<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let signal = self.signal;
        if signal.set.swap(false, Ordering::SeqCst) {
            return Poll::Ready(());
        }
        *signal.waker.lock().unwrap() = Some(cx.waker().clone());
        // Re-check: a notify between the swap and the store took no waker.
        if signal.set.swap(false, Ordering::SeqCst) {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// Fails the test if `f` does not return within `limit`: a lost wake-up
/// shows as a failure instead of a hung suite.
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("the body panicked (its message is above)")
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("did not finish within {limit:?}: a wake-up was lost or a task hung")
        }
    }
}

/// How long any wait in a test may take before the test fails instead of
/// hanging.
pub const WATCHDOG: Duration = Duration::from_secs(30);

/// Blocks the calling (non-worker) thread until `cond` holds, failing the
/// test after [`WATCHDOG`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + WATCHDOG;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {WATCHDOG:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sets its flag when dropped: observes that a task's future was dropped.
pub struct DropFlag(pub std::sync::Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Drops `rt` on another thread and waits for that to finish, failing the
/// test if the drop panics or takes longer than [`WATCHDOG`].
pub fn drop_within(rt: Runtime) {
    let (done, dropped) = mpsc::channel();
    let dropper = thread::spawn(move || {
        drop(rt);
        let _ = done.send(());
    });
    match dropped.recv_timeout(WATCHDOG) {
        Ok(()) => dropper.join().expect("dropping the runtime does not panic"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let panic = dropper
                .join()
                .expect_err("the dropper exited without finishing");
            std::panic::resume_unwind(panic);
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("dropping the runtime did not finish within {WATCHDOG:?}")
        }
    }
}

/// Threads of this process whose name (`comm`, at most 15 bytes) starts
/// with `prefix`.
pub fn threads_named(prefix: &str) -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task is readable");
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end().starts_with(prefix))
        .count()
}

/// Threads of this process named `prefix` and a number: a runtime's
/// workers, when `prefix` is its thread name and a dash (its blocking
/// pool's and tokio side's threads have words after the dash).
#[allow(dead_code)]
pub fn worker_threads_named(prefix: &str) -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task is readable");
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| {
            comm.trim_end()
                .strip_prefix(prefix)
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        })
        .count()
}

/// A runtime of two workers with every default, for the tests that need
/// one and nothing particular about it.
pub fn runtime() -> Runtime {
    Runtime::builder()
        .workers(2)
        .build()
        .expect("a default runtime builds")
}

/// A runtime of `workers` on the io_uring driver; fails with the reason
/// (and the probe's answer) where the ring is refused.
#[cfg(target_os = "linux")]
pub fn on_the_ring(workers: usize) -> Runtime {
    on_rings(workers, None, false)
}

/// A runtime of `workers` on the io_uring driver whose TCP reads
/// complete on the ring (`Builder::ring_receives`).
#[cfg(target_os = "linux")]
pub fn receiving_on_the_ring(workers: usize) -> Runtime {
    on_rings(workers, None, true)
}

/// A runtime of `workers` on the io_uring driver, on `rings` rings (the
/// default when `None`), its TCP reads on the ring if `ring_receives`.
#[cfg(target_os = "linux")]
pub fn on_rings(workers: usize, rings: Option<usize>, ring_receives: bool) -> Runtime {
    let mut builder = Runtime::builder();
    builder
        .workers(workers)
        .io_backend(keel::io::IoBackend::Uring)
        .ring_receives(ring_receives);
    if let Some(rings) = rings {
        builder.io_rings(rings);
    }
    builder.build().unwrap_or_else(|error| {
        panic!(
            "this test needs io_uring: {error} (probe: {})",
            keel::io::probe_io_uring()
        )
    })
}

/// `workers` workers each, with the tokio side (feature `tokio-context`)
/// on threads of its own and then on the workers
/// (`Builder::tokio_on_workers`).
pub fn with_each_tokio_side(workers: usize) -> [Runtime; 2] {
    [false, true].map(|on_workers| {
        Runtime::builder()
            .workers(workers)
            .tokio_on_workers(on_workers)
            .build()
            .unwrap()
    })
}

/// The fields of a `tracing` span or event, each as text (a string's
/// quotes trimmed): what the tests of task spans compare.
#[derive(Debug, Clone, Default)]
pub struct FieldText(pub std::collections::BTreeMap<String, String>);

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
}

/// Lowers this process's soft file size limit (`RLIMIT_FSIZE`) to `bytes`,
/// with `SIGXFSZ` ignored, so that a write past it fails (`EFBIG`) or
/// stops short instead of killing the process. For a test in a child
/// process of its own: the limit applies to the whole process.
pub fn limit_file_size(bytes: u64) {
    // SAFETY: ignoring SIGXFSZ installs no handler of ours.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit for the call to fill.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit) };
    assert_eq!(got, 0, "getrlimit: {}", std::io::Error::last_os_error());
    limit.rlim_cur = bytes as libc::rlim_t;
    // SAFETY: `limit` is a valid rlimit that the call only reads; lowering
    // the soft limit needs no privilege.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &limit) };
    assert_eq!(set, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

/// Appends `each` records from each of `tasks` tasks on `rt`, each task
/// awaiting its appends one after another. Checks that one task's LSNs
/// increase and that all of them together are 1 to `tasks × each`, and
/// returns every (LSN, record) in LSN order.
pub fn append_from_tasks(
    rt: &Runtime,
    log: &keel::wal::Log,
    tasks: u64,
    each: u64,
) -> Vec<(u64, Vec<u8>)> {
    let per_task: Vec<Vec<(u64, Vec<u8>)>> = rt.block_on(async {
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let log = log.clone();
                keel::spawn(async move {
                    let mut got = Vec::new();
                    for k in 0..each {
                        let data = format!("task {t} record {k}").into_bytes();
                        let lsn = log.append(&data).await.unwrap();
                        got.push((lsn.get(), data));
                    }
                    got
                })
            })
            .collect();
        let mut all = Vec::new();
        for handle in handles {
            all.push(handle.await.unwrap());
        }
        all
    });
    for got in &per_task {
        assert!(
            got.windows(2).all(|w| w[0].0 < w[1].0),
            "one task's LSNs increase: {got:?}"
        );
    }
    let mut all: Vec<(u64, Vec<u8>)> = per_task.into_iter().flatten().collect();
    all.sort();
    let lsns: Vec<u64> = all.iter().map(|(lsn, _)| *lsn).collect();
    assert_eq!(lsns, (1..=tasks * each).collect::<Vec<_>>());
    all
}
