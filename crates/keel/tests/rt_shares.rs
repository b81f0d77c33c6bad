//! Classes share the workers by their shares, in time, whatever the number
//! of tasks and the length of their polls.
//!
//! Three always-busy classes with the default shares (urgent 16, normal 33,
//! bulk 50) on two workers: urgent with a few 100 µs polls, normal with a
//! thousand 10 µs polls (20 µs unoptimised), bulk with two tasks of 1 ms
//! polls. Every poll computes for its length of its thread's CPU time and
//! counts what it used, so the split checked is not keel's bookkeeping but the CPU the
//! tasks really received; keel's own figure (what it charged) is checked
//! too. The split must hold on a quiet machine and on one where another
//! process keeps a core busy: there the kernel preempts the workers, and
//! keel charges the classes only for their time on a core (see
//! `Builder::charge_on_cpu`), and with the urgent class on the urgent
//! lane (`Builder::urgent_lane`). A class whose polls block (sleep) must
//! not escape its share either, nor a class whose tasks wait on a socket
//! between polls lose it: there what each class received is its polls'
//! whole CPU time, system calls included (see [`PollCpu`]). This file
//! holds only these tests, and they take turns, so nothing else competes
//! for the two cores.

#[macro_use]
mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use keel::stats::Stats;
use keel::{Class, Runtime, SpinPolicy};
use std::time::Instant;

use support::{busy_for, cpu_for, thread_cpu};

/// A task's future that adds the thread CPU time of each of its polls,
/// whole, to `cpu`: the time a share promises, system calls and all.
///
/// For tasks that only compute, that is what their bodies count
/// (`cpu_for`). For a task that talks to a socket, each poll also writes
/// and reads, and the kernel's side of that (a write that wakes the peer
/// thread costs most) is CPU the class's polls took, charged to it as the
/// shares say: measured here, it is 3 to 9 µs an echo, by where the
/// kernel placed the echo threads, so a figure of the bodies alone would
/// move with the kernel's placement, not with keel's split.
struct PollCpu<F> {
    future: Pin<Box<F>>,
    cpu: Arc<AtomicU64>,
}

impl<F: Future> Future for PollCpu<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let start = thread_cpu();
        let poll = self.future.as_mut().poll(cx);
        let used = thread_cpu() - start;
        self.cpu
            .fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
        poll
    }
}

/// Allowed distance from the configured split, in percentage points.
///
/// keel charges a class the wall time of its polls, scheduler overhead
/// inside the poll included, while the *measured* split counts only the
/// time the polls' own bodies saw. For the class of 10 µs polls that
/// overhead is a few percent in an optimised build but, unoptimised, about
/// a tenth of each poll on some machines (measured 29.7% against 33.3%,
/// with keel's own report at 33.3%). So the bound is 3 points in release
/// builds, where it checks the scheduler, and 5 in debug builds, where it
/// still catches a class losing a fifth of its share.
const TOLERANCE_PP: f64 = if cfg!(debug_assertions) { 5.0 } else { 3.0 };

/// The normal class's polls in the split tests: 10 µs in release builds;
/// 20 µs unoptimised, where keel's own work around each poll (about a
/// microsecond there, charged to the class and outside what its polls
/// measure) put the class 4–5 points under its share with 10 µs polls,
/// against a tolerance of 5, whatever the scheduler did (its charged
/// split stayed within a point).
const SHORT_POLL: Duration = if cfg!(debug_assertions) {
    Duration::from_micros(20)
} else {
    Duration::from_micros(10)
};

fn spawn_busy(
    rt: &Runtime,
    class: Class,
    tasks: usize,
    poll: Duration,
    stop: &Arc<AtomicBool>,
    cpu: &Arc<AtomicU64>,
) {
    for _ in 0..tasks {
        let stop = stop.clone();
        let task = async move {
            while !stop.load(Ordering::Relaxed) {
                cpu_for(poll);
                keel::yield_now().await;
            }
        };
        rt.spawn_in(class, poll_cpu(task, cpu));
    }
}

fn split(cpu: &[u64]) -> Vec<f64> {
    let total: u64 = cpu.iter().sum();
    cpu.iter()
        .map(|&c| 100.0 * c as f64 / total as f64)
        .collect()
}

/// Checks that `classes` (indexes) split both the CPU their tasks used
/// (`used`, a figure per class, in the same order) and what keel charged
/// them between `before` and `after` by their shares, within
/// [`TOLERANCE_PP`].
fn assert_split(classes: &[usize], used: &[u64], before: &Stats, after: &Stats) {
    let charged: Vec<u64> = classes
        .iter()
        .map(|&c| (after.classes[c].charged - before.classes[c].charged).as_nanos() as u64)
        .collect();
    let shares: Vec<u64> = classes
        .iter()
        .map(|&c| u64::from(after.classes[c].shares))
        .collect();
    let names: Vec<&str> = classes
        .iter()
        .map(|&c| after.classes[c].name.as_str())
        .collect();
    let (measured, charged, expected) = (split(used), split(&charged), split(&shares));
    eprintln!(
        "{names:?} split %: expected {expected:.1?}, measured {measured:.1?}, charged {charged:.1?}"
    );
    for (i, name) in names.iter().enumerate() {
        assert!(
            (measured[i] - expected[i]).abs() <= TOLERANCE_PP,
            "{name}: measured {:.1}% of the CPU, expected {:.1}% ± {TOLERANCE_PP}",
            measured[i],
            expected[i]
        );
        assert!(
            (charged[i] - expected[i]).abs() <= TOLERANCE_PP,
            "{name}: keel charged {:.1}%, expected {:.1}% ± {TOLERANCE_PP}",
            charged[i],
            expected[i]
        );
    }
}

/// The tests of this file take turns: each needs both cores to itself.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn split_follows_shares_regardless_of_task_count_and_poll_length() {
    let _turn = one_at_a_time();
    check_split(false);
}

/// Another thread keeps a core busy (as another process on the machine
/// would): the kernel preempts the workers in the middle of polls, and the
/// split of the CPU the classes received still follows their shares.
#[test]
fn split_follows_shares_when_another_thread_takes_a_core() {
    let _turn = one_at_a_time();
    check_split(true);
}

/// With the urgent lane, the urgent class runs on a thread of its own at
/// real-time priority, bounded by its share of the workers' time; the two
/// workers split the rest between normal and bulk. The split over the
/// whole machine still follows the shares.
#[test]
fn split_follows_shares_with_the_urgent_lane() {
    let _turn = one_at_a_time();
    check_split_with(false, true);
}

fn check_split(competitor: bool) {
    check_split_with(competitor, false);
}

fn check_split_with(competitor: bool, lane: bool) {
    let mut builder = Runtime::builder();
    if lane {
        builder.urgent_lane(keel::UrgentLane::new());
    }
    let rt = builder.workers(2).spin(SpinPolicy::Short).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let cpu: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    spawn_busy(
        &rt,
        Class::URGENT,
        4,
        Duration::from_micros(100),
        &stop,
        &cpu[0],
    );
    spawn_busy(&rt, Class::NORMAL, 1000, SHORT_POLL, &stop, &cpu[1]);
    spawn_busy(
        &rt,
        Class::BULK,
        2,
        Duration::from_millis(1),
        &stop,
        &cpu[2],
    );

    let competitor = competitor.then(|| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                busy_for(Duration::from_millis(1));
            }
        })
    });
    let read = |cpu: &[Arc<AtomicU64>]| -> Vec<u64> {
        cpu.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    };
    std::thread::sleep(Duration::from_millis(300));
    let (before, stats_before) = (read(&cpu), rt.stats());
    std::thread::sleep(Duration::from_secs(2));
    let (after, stats_after) = (read(&cpu), rt.stats());
    stop.store(true, Ordering::Relaxed);
    if let Some(competitor) = competitor {
        competitor.join().unwrap();
    }

    let measured: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_split(&[0, 1, 2], &measured, &stats_before, &stats_after);
}

/// A class whose polls block (here: sleep 2 ms) holds its workers as much
/// as one that computes, and is charged for it: the computing class still
/// gets its share of the workers instead of being starved.
///
/// The share is of the workers' time, so what the computing class got is
/// measured as the wall time its polls held a worker. Its polls' CPU time
/// would fall short of that by whatever the host took from the virtual
/// machine meanwhile (steal, which the guest's kernel does not report as
/// preemption, so keel charges it too): on a host stealing 5–10%, the CPU
/// figure read 34–38% against the 39.8% promised, with the scheduler's
/// split unchanged.
#[test]
fn a_class_that_blocks_in_its_polls_cannot_starve_another() {
    let _turn = one_at_a_time();
    let rt = Runtime::builder().workers(2).build().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let normal = Arc::new(AtomicU64::new(0));
    for _ in 0..4 {
        let (stop, held) = (stop.clone(), normal.clone());
        rt.spawn_in(Class::NORMAL, async move {
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                cpu_for(Duration::from_micros(100));
                held.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                keel::yield_now().await;
            }
        });
    }
    for _ in 0..4 {
        let stop = stop.clone();
        rt.spawn_in(Class::BULK, async move {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(2));
                keel::yield_now().await;
            }
        });
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = normal.load(Ordering::Relaxed);
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let got = normal.load(Ordering::Relaxed) - before;
    let wall = window.elapsed().as_nanos() as u64 * 2;
    stop.store(true, Ordering::Relaxed);
    let share = 100.0 * got as f64 / wall as f64;
    let expected = 100.0 * 33.0 / 83.0;
    eprintln!("normal received {share:.1}% of two workers (expected {expected:.1}%)");
    assert!(
        (share - expected).abs() <= TOLERANCE_PP,
        "normal received {share:.1}% of the workers, expected {expected:.1}% ± {TOLERANCE_PP}"
    );
}

/// Tasks of the class that waits on sockets in
/// [`a_class_that_waits_on_sockets_between_polls_keeps_its_share`].
const ECHOING_TASKS: usize = 8;

/// What each of them computes per echo: each task's polls are short, and
/// between every two of them it waits for the reactor.
const ECHO_WORK: Duration = Duration::from_micros(100);

/// A class whose tasks wait on a socket between polls (here: each writes a
/// byte to a thread that echoes it, waits for the echo, then computes
/// [`ECHO_WORK`]) keeps its share while another class is always runnable.
/// Its tasks are runnable only once the reactor has seen their echoes,
/// and its queue drains whenever every one waits at once; the split must
/// still be its shares', not what is left behind the class that never
/// waits. Each class is measured by its polls' whole CPU time (see
/// [`PollCpu`]): the echoes' system calls are a part of bulk's polls that
/// moved a figure of the bodies alone by up to 3.6 points.
#[test]
fn a_class_that_waits_on_sockets_between_polls_keeps_its_share() {
    use keel::io::{AsyncReadExt, AsyncWriteExt};
    use std::io::{Read, Write};

    let _turn = one_at_a_time();
    let rt = Runtime::builder()
        .workers(2)
        .spin(SpinPolicy::Short)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // What each class's polls took, whole (see `PollCpu`); the bodies'
    // compute alone is printed beside it.
    let cpu: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let bodies: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::new(AtomicU64::new(0))).collect();
    for _ in 0..4 {
        let (stop, body) = (stop.clone(), bodies[0].clone());
        let task = async move {
            while !stop.load(Ordering::Relaxed) {
                let used = cpu_for(Duration::from_micros(100));
                body.fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
                keel::yield_now().await;
            }
        };
        rt.spawn_in(Class::NORMAL, poll_cpu(task, &cpu[0]));
    }
    let mut echoes = Vec::new();
    for _ in 0..ECHOING_TASKS {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        // The echo ends when the task's end closes.
        echoes.push(std::thread::spawn(move || {
            let mut theirs = theirs;
            let mut byte = [0u8; 1];
            while theirs.read_exact(&mut byte).is_ok() {
                if theirs.write_all(&byte).is_err() {
                    break;
                }
            }
        }));
        let (stop, body) = (stop.clone(), bodies[1].clone());
        let task = async move {
            let mut stream = keel::net::UnixStream::from_std(ours).unwrap();
            let mut byte = [7u8; 1];
            // Errors end the task: the runtime closes its sockets when it
            // shuts down.
            while !stop.load(Ordering::Relaxed) {
                if stream.write_all(&byte).await.is_err()
                    || stream.read_exact(&mut byte).await.is_err()
                {
                    break;
                }
                let used = cpu_for(ECHO_WORK);
                body.fetch_add(used.as_nanos() as u64, Ordering::Relaxed);
            }
        };
        rt.spawn_in(Class::BULK, poll_cpu(task, &cpu[1]));
    }

    let read = |cpu: &[Arc<AtomicU64>]| -> Vec<u64> {
        cpu.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    };
    std::thread::sleep(Duration::from_millis(300));
    let (before, bodies_before, stats_before) = (read(&cpu), read(&bodies), rt.stats());
    std::thread::sleep(Duration::from_secs(2));
    let (after, bodies_after, stats_after) = (read(&cpu), read(&bodies), rt.stats());
    stop.store(true, Ordering::Relaxed);
    drop(rt);
    for echo in echoes {
        echo.join().unwrap();
    }

    let computed: Vec<u64> = bodies_after
        .iter()
        .zip(&bodies_before)
        .map(|(a, b)| a - b)
        .collect();
    eprintln!("the bodies' compute alone split {:.1?} %", split(&computed));
    let measured: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    // Normal and bulk, the two backlogged classes (urgent has no tasks).
    assert_split(&[1, 2], &measured, &stats_before, &stats_after);
}

/// `task`, with each poll's thread CPU added to `cpu` (see [`PollCpu`]).
fn poll_cpu<F: Future>(task: F, cpu: &Arc<AtomicU64>) -> PollCpu<F> {
    PollCpu {
        future: Box::pin(task),
        cpu: cpu.clone(),
    }
}
