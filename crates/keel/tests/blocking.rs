//! The blocking pool: `spawn_blocking` and `blocking::unblock`, its limits
//! (threads, queue, keep-alive), rejection and waiting for room, abort,
//! panics, the runtime context inside closures, stats, and shutdown.
//!
//! Closures that must stay busy wait on a [`Gate`] the test opens. Every
//! wait is bounded by the 30 s watchdog, so a lost wake-up fails a test
//! instead of hanging it; no test asserts on durations beyond what the
//! accounting must at least contain.

#[macro_use]
mod support;

use support::{block_on, drop_within, threads_named, wait_until, DropFlag, WATCHDOG};

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::Duration;

use keel::{Handle, JoinHandle, Runtime};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A gate that pool closures wait at until the test opens it, counting
/// those that arrived.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    arrived: AtomicUsize,
}

impl Gate {
    fn new() -> Arc<Gate> {
        Arc::new(Gate::default())
    }

    /// Blocks the calling thread until the gate opens; panics after the
    /// watchdog.
    fn wait(&self) {
        self.arrived.fetch_add(1, SeqCst);
        let open = self.open.lock().unwrap();
        let (open, timeout) = self
            .opened
            .wait_timeout_while(open, WATCHDOG, |open| !*open)
            .unwrap();
        assert!(*open && !timeout.timed_out(), "the gate never opened");
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }

    /// Waits until `n` closures wait at the gate.
    fn await_arrivals(&self, n: usize) {
        wait_until(&format!("{n} closures wait at the gate"), || {
            self.arrived.load(SeqCst) >= n
        });
    }
}

fn pool(max_threads: usize, queue: usize) -> Runtime {
    Runtime::builder()
        .workers(2)
        .max_blocking_threads(max_threads)
        .blocking_queue(queue)
        .build()
        .unwrap()
}

/// Occupies every one of `threads` pool threads with a closure waiting at
/// `gate`, and returns their handles.
fn occupy(rt: &Runtime, threads: usize, gate: &Arc<Gate>) -> Vec<JoinHandle<()>> {
    let handles = (0..threads)
        .map(|_| {
            let gate = gate.clone();
            rt.spawn_blocking(move || gate.wait())
        })
        .collect();
    gate.await_arrivals(threads);
    handles
}

/// Polls `future` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    pin!(future).poll(&mut cx)
}

// ---------------------------------------------------------------------------
// Running jobs
// ---------------------------------------------------------------------------

rt_test! {
    fn spawn_blocking_returns_the_closures_values(rt) {
        let total = rt.block_on(async {
            let jobs: Vec<_> = (0..50u64).map(|i| keel::spawn_blocking(move || i * i)).collect();
            let mut total = 0;
            for job in jobs {
                total += job.await.unwrap();
            }
            total
        });
        assert_eq!(total, (0..50u64).map(|i| i * i).sum::<u64>());
        // From inside a task as well as from `block_on`.
        let text = rt.block_on(rt.spawn(async {
            keel::spawn_blocking(|| "done".to_owned()).await.unwrap()
        }));
        assert_eq!(text.unwrap(), "done");
    }

    fn a_panicking_closure_becomes_is_panic_and_the_thread_lives_on(rt) {
        let error = rt
            .block_on(rt.spawn(async {
                keel::spawn_blocking(|| -> u32 { panic!("disk on fire") }).await
            }))
            .unwrap()
            .unwrap_err();
        assert!(error.is_panic(), "{error}");
        assert!(!error.is_rejected() && !error.is_cancelled());
        assert!(error.to_string().contains("disk on fire"), "{error}");
        assert_eq!(rt.block_on(rt.spawn(async {
            keel::spawn_blocking(|| 5).await
        })).unwrap().unwrap(), 5);
    }

    fn handle_current_works_inside_a_closure_and_can_spawn_back(rt) {
        let out = rt.block_on(async {
            let job = keel::spawn_blocking(|| {
                assert!(Handle::try_current().is_some());
                let task = Handle::current().spawn(async { 40 });
                let other = keel::spawn(async { 2 });
                (task, other)
            });
            let (task, other) = job.await.unwrap();
            task.await.unwrap() + other.await.unwrap()
        });
        assert_eq!(out, 42);
    }

    fn unblock_returns_values_and_resumes_panics_in_the_caller(rt) {
        let n = rt.block_on(async { keel::blocking::unblock(|| 6 * 7).await.unwrap() });
        assert_eq!(n, 42);
        let task = rt.spawn(async {
            keel::blocking::unblock(|| -> u8 { panic!("resumed here") }).await.ok()
        });
        let error = rt.block_on(task).unwrap_err();
        assert!(error.is_panic() && error.to_string().contains("resumed here"), "{error}");
    }
}

#[test]
#[should_panic(expected = "not inside a keel runtime")]
fn spawn_blocking_outside_a_runtime_panics() {
    drop(keel::spawn_blocking(|| 1));
}

#[test]
#[should_panic(expected = "not inside a keel runtime")]
fn unblock_outside_a_runtime_panics() {
    drop(keel::blocking::unblock(|| 1));
}

#[test]
fn zero_max_blocking_threads_is_refused() {
    let error = Runtime::builder()
        .max_blocking_threads(0)
        .build()
        .unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
}

// ---------------------------------------------------------------------------
// Limits
// ---------------------------------------------------------------------------

#[test]
fn the_pool_grows_to_its_limit_and_no_further_and_queues_the_rest() {
    let rt = pool(3, 100);
    let gate = Gate::new();
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let jobs: Vec<_> = (0..10)
        .map(|i| {
            let (gate, running, most) = (gate.clone(), running.clone(), most.clone());
            rt.spawn_blocking(move || {
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                gate.wait();
                running.fetch_sub(1, SeqCst);
                i
            })
        })
        .collect();
    gate.await_arrivals(3);
    let stats = rt.stats().blocking;
    assert_eq!(
        (stats.threads, stats.idle, stats.queued),
        (3, 0, 7),
        "{stats:?}"
    );
    assert_eq!((stats.max_threads, stats.queue_capacity), (3, 100));
    // Give a fourth thread every chance to show up.
    thread::sleep(Duration::from_millis(50));
    assert_eq!(gate.arrived.load(SeqCst), 3);
    assert_eq!(rt.stats().blocking.threads, 3);

    gate.open();
    let outputs: Vec<_> = jobs
        .into_iter()
        .map(|job| rt.block_on(job).unwrap())
        .collect();
    assert_eq!(outputs, (0..10).collect::<Vec<_>>());
    assert_eq!(
        most.load(SeqCst),
        3,
        "more closures ran at once than the limit"
    );
    wait_until("every job is counted", || {
        rt.stats().blocking.completed == 10
    });
    let stats = rt.stats().blocking;
    assert_eq!((stats.queued, stats.rejected), (0, 0));
}

#[test]
fn a_full_pool_rejects_at_once_naming_its_limits() {
    let rt = pool(1, 2);
    let gate = Gate::new();
    let busy = occupy(&rt, 1, &gate);
    let queued: Vec<_> = (0..2).map(|i| rt.spawn_blocking(move || i)).collect();

    let ran = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let (flag, guard) = (ran.clone(), DropFlag(dropped.clone()));
    let refused = rt.spawn_blocking(move || {
        let _guard = guard;
        flag.store(true, SeqCst);
    });
    assert!(refused.is_finished(), "a rejected job must resolve at once");
    assert!(
        dropped.load(SeqCst),
        "the rejected closure was not dropped at once"
    );
    let error = rt.block_on(refused).unwrap_err();
    assert!(error.is_rejected(), "{error}");
    assert!(!error.is_cancelled() && !error.is_panic());
    let message = error.to_string();
    assert!(
        message.contains("blocking pool is full: 1 threads busy and 2 jobs queued"),
        "{message}"
    );
    assert_eq!(io::Error::from(error).kind(), io::ErrorKind::ResourceBusy);
    assert_eq!(rt.stats().blocking.rejected, 1);

    gate.open();
    for job in busy {
        rt.block_on(job).unwrap();
    }
    for (i, job) in queued.into_iter().enumerate() {
        assert_eq!(rt.block_on(job).unwrap(), i);
    }
    assert!(!ran.load(SeqCst), "a rejected job ran");
}

#[test]
fn a_queue_of_zero_runs_jobs_only_on_free_threads() {
    let rt = pool(2, 0);
    let gate = Gate::new();
    let busy = occupy(&rt, 2, &gate);
    let refused = rt.spawn_blocking(|| ());
    assert!(rt.block_on(refused).unwrap_err().is_rejected());
    gate.open();
    for job in busy {
        rt.block_on(job).unwrap();
    }
    wait_until("a thread is idle again", || rt.stats().blocking.idle > 0);
    assert_eq!(rt.block_on(rt.spawn_blocking(|| 3)).unwrap(), 3);
}

#[test]
fn unblock_waits_for_room_and_serves_callers_in_arrival_order() {
    const CALLERS: usize = 20;
    let rt = pool(1, 1);
    let gate = Gate::new();
    let busy = occupy(&rt, 1, &gate);
    let queued = rt.spawn_blocking(|| "queued");
    assert_eq!(rt.stats().blocking.queued, 1);

    let order = Arc::new(Mutex::new(Vec::new()));
    let mut callers = Vec::new();
    for i in 0..CALLERS {
        let order = order.clone();
        callers.push(rt.spawn(async move {
            keel::blocking::unblock(move || order.lock().unwrap().push(i)).await
        }));
        // One at a time, so that their arrival order is known.
        wait_until("the caller waits in line", || {
            rt.stats().blocking.waiting == i + 1
        });
    }
    // spawn_blocking does not wait: the pool is full.
    assert!(rt
        .block_on(rt.spawn_blocking(|| ()))
        .unwrap_err()
        .is_rejected());

    gate.open();
    for job in busy {
        rt.block_on(job).unwrap();
    }
    assert_eq!(rt.block_on(queued).unwrap(), "queued");
    for caller in callers {
        rt.block_on(caller).unwrap().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..CALLERS).collect::<Vec<_>>());
    let stats = rt.stats().blocking;
    assert_eq!((stats.waiting, stats.rejected), (0, 1), "{stats:?}");
}

#[test]
fn many_unblock_calls_through_one_thread_and_a_queue_of_one_all_complete() {
    const CALLERS: usize = support::miri_or(200, 40);
    let rt = pool(1, 1);
    let done = rt.block_on(async {
        let callers: Vec<_> = (0..CALLERS)
            .map(|i| keel::spawn(async move { keel::blocking::unblock(move || i).await }))
            .collect();
        let mut done = Vec::new();
        for caller in callers {
            done.push(caller.await.unwrap().unwrap());
        }
        done
    });
    assert_eq!(done, (0..CALLERS).collect::<Vec<_>>());
    let stats = rt.stats().blocking;
    assert_eq!((stats.rejected, stats.waiting, stats.threads), (0, 0, 1));
    wait_until("every job is counted", || {
        rt.stats().blocking.completed == CALLERS as u64
    });
}

#[test]
fn dropping_a_waiting_unblock_future_leaves_the_line_unrun() {
    let rt = pool(1, 0);
    let gate = Gate::new();
    let busy = occupy(&rt, 1, &gate);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let mut first = rt.handle().unblock(move || flag.store(true, SeqCst));
    let mut second = rt.handle().unblock(|| 2);
    assert!(poll_once(&mut first).is_pending());
    assert!(poll_once(&mut second).is_pending());
    assert_eq!(rt.stats().blocking.waiting, 2);
    drop(first);
    assert_eq!(rt.stats().blocking.waiting, 1);

    gate.open();
    for job in busy {
        rt.block_on(job).unwrap();
    }
    // The caller behind the dropped one is served.
    assert_eq!(rt.block_on(second).unwrap(), 2);
    assert!(!ran.load(SeqCst), "the dropped caller's closure ran");
    assert_eq!(rt.stats().blocking.waiting, 0);
}

// ---------------------------------------------------------------------------
// Threads come and go
// ---------------------------------------------------------------------------

#[test]
#[cfg_attr(
    miri,
    ignore = "counts threads in /proc/self/task, which Miri isolates"
)]
fn idle_threads_retire_after_the_keep_alive_and_come_back_on_demand() {
    let rt = Runtime::builder()
        .workers(1)
        .thread_name("kb-retire")
        .max_blocking_threads(4)
        .blocking_keep_alive(Duration::from_millis(100))
        .build()
        .unwrap();
    let gate = Gate::new();
    let busy = occupy(&rt, 4, &gate);
    assert_eq!(rt.stats().blocking.threads, 4);
    wait_until("every pool thread is named", || {
        threads_named("kb-retire-b") == 4
    });
    gate.open();
    for job in busy {
        rt.block_on(job).unwrap();
    }
    wait_until("every idle pool thread retired", || {
        rt.stats().blocking.threads == 0
    });
    wait_until("retired threads are gone", || {
        threads_named("kb-retire-b") == 0
    });
    assert_eq!(rt.stats().blocking.idle, 0);
    assert_eq!(rt.block_on(rt.spawn_blocking(|| 9)).unwrap(), 9);
    drop_within(rt);
    wait_until("no pool thread outlives the runtime", || {
        threads_named("kb-retire-b") == 0
    });
}

#[test]
fn an_idle_thread_is_reused_within_the_keep_alive() {
    let rt = pool(8, 8);
    let ids: Vec<_> = (0..20)
        .map(|_| {
            let id = rt
                .block_on(rt.spawn_blocking(|| thread::current().id()))
                .unwrap();
            // The thread goes idle once the job's accounting is done.
            wait_until("the thread is idle", || rt.stats().blocking.idle == 1);
            id
        })
        .collect();
    assert!(
        ids.iter().all(|id| *id == ids[0]),
        "jobs ran on new threads: {ids:?}"
    );
    assert_eq!(rt.stats().blocking.threads, 1);
}

// ---------------------------------------------------------------------------
// Abort
// ---------------------------------------------------------------------------

#[test]
fn aborting_a_queued_job_cancels_it_unrun() {
    let rt = pool(1, 4);
    let gate = Gate::new();
    let busy = occupy(&rt, 1, &gate);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let job = rt.spawn_blocking(move || flag.store(true, SeqCst));
    let after = rt.spawn_blocking(|| "after");
    job.abort();
    gate.open();
    for busy in busy {
        rt.block_on(busy).unwrap();
    }
    let error = rt.block_on(job).unwrap_err();
    assert!(error.is_cancelled(), "{error}");
    assert_eq!(rt.block_on(after).unwrap(), "after");
    assert!(!ran.load(SeqCst), "an aborted job ran");
}

#[test]
fn a_full_queue_makes_room_of_aborted_jobs() {
    let rt = pool(1, 1);
    let gate = Gate::new();
    let busy = occupy(&rt, 1, &gate);
    let aborted = rt.spawn_blocking(|| 1);
    aborted.abort();
    // The queue is full of an aborted job: the next job takes its place,
    // and the aborted one resolves without waiting for a thread.
    let next = rt.spawn_blocking(|| 2);
    assert!(rt.block_on(aborted).unwrap_err().is_cancelled());
    assert!(!next.is_finished());
    gate.open();
    for job in busy {
        rt.block_on(job).unwrap();
    }
    assert_eq!(rt.block_on(next).unwrap(), 2);
}

#[test]
fn aborting_a_running_job_lets_it_finish() {
    let rt = pool(1, 1);
    let gate = Gate::new();
    let finished = Arc::new(AtomicBool::new(false));
    let (g, flag) = (gate.clone(), finished.clone());
    let job = rt.spawn_blocking(move || {
        g.wait();
        flag.store(true, SeqCst);
    });
    gate.await_arrivals(1);
    job.abort();
    gate.open();
    wait_until("the running closure finished", || finished.load(SeqCst));
    // It completed before the abort could take effect.
    assert!(rt.block_on(job).is_ok());
}

// ---------------------------------------------------------------------------
// Accounting
// ---------------------------------------------------------------------------

#[test]
fn stats_count_blocking_time_apart_from_task_time_and_jobs_apart_from_tasks() {
    const NAP: Duration = Duration::from_millis(200);
    let rt = pool(2, 2);
    let gate = Gate::new();
    let busy = occupy(&rt, 1, &gate);
    assert_eq!(
        rt.handle().live_tasks(),
        0,
        "a blocking job counted as a task"
    );
    gate.open();
    for job in busy {
        rt.block_on(job).unwrap();
    }
    rt.block_on(async {
        keel::spawn_blocking(move || thread::sleep(NAP))
            .await
            .unwrap()
    });
    wait_until("both jobs are counted", || {
        rt.stats().blocking.completed == 2
    });
    let stats = rt.stats();
    assert!(stats.blocking.busy >= NAP, "{:?}", stats.blocking);
    let task_time: Duration = stats.workers.iter().map(|w| w.busy()).sum();
    assert!(
        task_time < NAP,
        "blocking time was charged to workers: {task_time:?}"
    );
}

// ---------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------

#[test]
#[cfg_attr(
    miri,
    ignore = "counts threads in /proc/self/task, which Miri isolates"
)]
fn shutdown_cancels_queued_jobs_finishes_running_ones_and_joins_every_thread() {
    let rt = Runtime::builder()
        .workers(2)
        .thread_name("kb-shut")
        .max_blocking_threads(2)
        .blocking_queue(8)
        .build()
        .unwrap();
    let gate = Gate::new();
    let finished = Arc::new(AtomicUsize::new(0));
    let running: Vec<_> = (0..2)
        .map(|i| {
            let (gate, finished) = (gate.clone(), finished.clone());
            rt.spawn_blocking(move || {
                gate.wait();
                finished.fetch_add(1, SeqCst);
                i
            })
        })
        .collect();
    gate.await_arrivals(2);
    let ran = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let queued: Vec<_> = (0..5)
        .map(|_| {
            let ran = ran.clone();
            let guard = Counted(dropped.clone());
            rt.spawn_blocking(move || {
                let _guard = guard;
                ran.fetch_add(1, SeqCst);
            })
        })
        .collect();
    wait_until("both pool threads are named", || {
        threads_named("kb-shut-block") == 2
    });

    let (done, dropped_rt) = mpsc::channel();
    let dropper = thread::spawn(move || {
        drop(rt);
        done.send(()).unwrap();
    });
    // The queued jobs are cancelled at once, while the running ones hold
    // the drop back.
    wait_until("queued closures are dropped", || dropped.load(SeqCst) == 5);
    assert!(
        dropped_rt.recv_timeout(Duration::from_millis(50)).is_err(),
        "the runtime was dropped while closures still ran"
    );
    assert_eq!(finished.load(SeqCst), 0);

    gate.open();
    dropped_rt
        .recv_timeout(WATCHDOG)
        .expect("the drop finishes");
    dropper.join().unwrap();
    // `join` returns once a thread is done; the kernel may list it a
    // moment longer.
    wait_until("no pool thread is left", || {
        threads_named("kb-shut-block") == 0
    });
    assert_eq!(finished.load(SeqCst), 2);
    for (i, job) in running.into_iter().enumerate() {
        assert_eq!(block_on(job).unwrap(), i);
    }
    for job in queued {
        assert!(block_on(job).unwrap_err().is_cancelled());
    }
    assert_eq!(ran.load(SeqCst), 0, "a queued job ran during shutdown");
}

/// Counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

#[test]
fn shutdown_answers_callers_waiting_for_room() {
    let rt = pool(1, 0);
    let gate = Gate::new();
    let busy = occupy(&rt, 1, &gate);
    let waiter = rt.handle().unblock(|| 1);
    let (result_tx, result) = mpsc::channel();
    let caller = thread::spawn(move || result_tx.send(block_on(waiter)).unwrap());
    wait_until("the caller waits in line", || {
        rt.stats().blocking.waiting == 1
    });

    let dropper = thread::spawn(move || drop(rt));
    let error = result
        .recv_timeout(WATCHDOG)
        .expect("the waiting caller is answered")
        .unwrap_err();
    assert!(error.to_string().contains("cancelled"), "{error}");
    gate.open();
    dropper.join().unwrap();
    caller.join().unwrap();
    assert!(block_on(busy.into_iter().next().unwrap()).is_ok());
}

#[test]
fn spawning_blocking_work_after_shutdown_cancels_it_unrun() {
    let rt = pool(2, 2);
    let handle = rt.handle().clone();
    drop_within(rt);
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let job = handle.spawn_blocking(move || flag.store(true, SeqCst));
    assert!(block_on(job).unwrap_err().is_cancelled());
    let error = block_on(handle.unblock(|| 1)).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::Other);
    assert!(!ran.load(SeqCst));
}

#[test]
fn a_closure_may_drop_its_own_runtime() {
    let rt = pool(2, 2);
    let handle = rt.handle().clone();
    let job = handle.spawn_blocking(move || {
        drop(rt);
        "dropped"
    });
    assert_eq!(block_on(job).unwrap(), "dropped");
    assert!(block_on(handle.spawn_blocking(|| ()))
        .unwrap_err()
        .is_cancelled());
}

/// A keep-alive too long to add to an instant (`Duration::MAX`, the
/// natural "never retire") keeps idle threads for good: the idle thread
/// neither dies nor strands the next job.
#[test]
#[cfg_attr(
    miri,
    ignore = "counts threads in /proc/self/task, which Miri isolates"
)]
fn a_keep_alive_of_duration_max_never_retires_and_never_strands_a_job() {
    let rt = keel::Runtime::builder()
        .workers(1)
        .thread_name("kbmax")
        .max_blocking_threads(1)
        .blocking_keep_alive(Duration::MAX)
        .build()
        .unwrap();
    assert_eq!(rt.block_on(rt.spawn_blocking(|| 1)).unwrap(), 1);
    wait_until("the thread is idle", || rt.stats().blocking.idle == 1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(threads_named("kbmax-block"), 1, "the idle thread is alive");
    let job = rt.spawn_blocking(|| 2);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(block_on(job).map_err(|e| e.to_string()));
    });
    let out = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the second job ran");
    assert_eq!(out.unwrap(), 2);
}
