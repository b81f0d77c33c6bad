//! Core executor behaviour of keel: `block_on`, spawning and joining,
//! detaching and aborting tasks, panic containment, classes and class
//! inheritance, the runtime context (`Handle::try_current`), the `Builder`'s
//! validation, `yield_now`, and the shape and contents of stats snapshots.
//!
//! Runtime tests use `rt_test!`, which runs each body with 1, 2 and 4
//! workers under every spin policy. No test asserts on durations: waits are
//! bounded by a 30 s watchdog only so that a broken runtime fails instead of
//! hanging, and stats, which workers publish with a short delay, are polled
//! until they show what is expected.

#[macro_use]
mod support;

use support::{wait_until, DropFlag, WATCHDOG};

use std::collections::HashSet;
use std::future::Future;
use std::hint::black_box;
use std::io::ErrorKind;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use keel::stats::Stats;
use keel::{Class, Handle, JoinHandle, Runtime, MAX_CLASSES};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Polls `rt.stats()` until `cond` holds (stats are published with a delay
/// of up to ~10 ms), failing the test after [`WATCHDOG`]. Returns the
/// snapshot that satisfied `cond`.
fn stats_eventually(rt: &Runtime, what: &str, mut cond: impl FnMut(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + WATCHDOG;
    loop {
        let stats = rt.stats();
        if cond(&stats) {
            return stats;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WATCHDOG:?} waiting until {what}; last snapshot: {stats:#?}"
        );
        thread::sleep(Duration::from_millis(2));
    }
}

/// Polls of `class` summed over workers.
fn class_polls(stats: &Stats, class: Class) -> u64 {
    stats.classes[class.index()].polls
}

/// Polls of worker `index`, all classes together.
fn worker_polls(stats: &Stats, index: usize) -> u64 {
    stats.workers[index].polls.iter().sum()
}

/// Wraps `future` so that it panics ("timed out") if it is still pending
/// after [`WATCHDOG`]: a hang becomes a test failure.
fn within<F: Future>(future: F) -> Within<F> {
    Within {
        future: Box::pin(future),
        watchdog: None,
    }
}

struct Within<F> {
    future: Pin<Box<F>>,
    watchdog: Option<Watchdog>,
}

struct Watchdog {
    state: Arc<WatchdogState>,
    thread: thread::Thread,
}

struct WatchdogState {
    fired: AtomicBool,
    done: AtomicBool,
    waker: Mutex<Waker>,
}

impl<F: Future> Future for Within<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if let Poll::Ready(output) = self.future.as_mut().poll(cx) {
            return Poll::Ready(output);
        }
        match &self.watchdog {
            Some(watchdog) => {
                assert!(
                    !watchdog.state.fired.load(SeqCst),
                    "future still pending after {WATCHDOG:?}"
                );
                *watchdog.state.waker.lock().unwrap() = cx.waker().clone();
            }
            None => {
                let state = Arc::new(WatchdogState {
                    fired: AtomicBool::new(false),
                    done: AtomicBool::new(false),
                    waker: Mutex::new(cx.waker().clone()),
                });
                let timer = state.clone();
                let thread = thread::Builder::new()
                    .name("test-watchdog".to_owned())
                    .spawn(move || {
                        let deadline = Instant::now() + WATCHDOG;
                        loop {
                            if timer.done.load(SeqCst) {
                                return;
                            }
                            let now = Instant::now();
                            if now >= deadline {
                                timer.fired.store(true, SeqCst);
                                timer.waker.lock().unwrap().wake_by_ref();
                                return;
                            }
                            thread::park_timeout(deadline - now);
                        }
                    })
                    .expect("watchdog thread spawns")
                    .thread()
                    .clone();
                self.watchdog = Some(Watchdog { state, thread });
            }
        }
        Poll::Pending
    }
}

impl<F> Drop for Within<F> {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.state.done.store(true, SeqCst);
            watchdog.thread.unpark();
        }
    }
}

/// A future that is ready once `flag` is set by someone who then wakes the
/// stored waker.
struct Gate {
    open: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Gate {
    fn new() -> Arc<Gate> {
        Arc::new(Gate {
            open: AtomicBool::new(false),
            waker: Mutex::new(None),
        })
    }

    fn open(&self) {
        self.open.store(true, SeqCst);
        if let Some(waker) = self.waker.lock().unwrap().take() {
            waker.wake();
        }
    }

    fn wait(self: &Arc<Gate>) -> GateWait {
        GateWait(self.clone())
    }
}

struct GateWait(Arc<Gate>);

impl Future for GateWait {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut waker = self.0.waker.lock().unwrap();
        if self.0.open.load(SeqCst) {
            return Poll::Ready(());
        }
        *waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// The message of a panic payload, if it is a string.
fn payload_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&'static str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}

/// Panics with a `&'static str` payload; typed so tasks can return it.
fn explode() -> u32 {
    panic!("task exploded on purpose")
}

/// Spawns `workers * 4` tasks that each record their thread's name and then
/// hold their worker until every worker has run one of them, so they cannot
/// all run on one worker; returns the names of the threads that ran them.
fn rendezvous_on_every_worker(rt: &Runtime) -> HashSet<String> {
    let workers = rt.handle().workers();
    let seen = Arc::new(Mutex::new(HashSet::new()));
    rt.block_on(within(async {
        let tasks: Vec<_> = (0..workers * 4)
            .map(|_| {
                let seen = seen.clone();
                keel::spawn(async move {
                    let name = thread::current().name().unwrap_or("<unnamed>").to_owned();
                    seen.lock().unwrap().insert(name);
                    let deadline = Instant::now() + WATCHDOG;
                    while seen.lock().unwrap().len() < workers {
                        assert!(
                            Instant::now() < deadline,
                            "only {:?} of {workers} workers ran a task",
                            seen.lock().unwrap()
                        );
                        thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("rendezvous task completes");
        }
    }));
    let seen = seen.lock().unwrap().clone();
    seen
}

/// Spawns, in `class` (from `block_on`, so through the injector), a parent
/// task that spawns a detached child with `keel::spawn`; the child yields
/// `yields` times and then reports on `done`. The parent is polled once and
/// the child `yields + 1` times, all in the class the child inherits.
fn parent_and_child_in(rt: &Runtime, class: Class, yields: usize) {
    let (done, finished) = mpsc::channel();
    let parent = rt.block_on(within(async move {
        keel::spawn_in(class, async move {
            drop(keel::spawn(async move {
                for _ in 0..yields {
                    keel::yield_now().await;
                }
                done.send(()).unwrap();
            }));
        })
        .await
    }));
    parent.expect("parent completes");
    finished
        .recv_timeout(WATCHDOG)
        .expect("detached child completes");
}

// ---------------------------------------------------------------------------
// Runtime tests (1, 2 and 4 workers, every spin policy)
// ---------------------------------------------------------------------------

rt_test! {
    fn block_on_returns_the_output_of_its_future(rt) {
        assert_eq!(rt.block_on(async { 40 + 2 }), 42);
        let text = rt.block_on(async { String::from("keel") });
        assert_eq!(text, "keel");
    }

    fn block_on_returns_once_a_pending_future_is_woken_from_another_thread(rt) {
        let gate = Gate::new();
        let opener = gate.clone();
        let thread = thread::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            opener.open();
        });
        let output = rt.block_on(within(async {
            gate.wait().await;
            "woken"
        }));
        assert_eq!(output, "woken");
        thread.join().unwrap();
    }

    fn spawned_task_output_is_returned_by_its_join_handle(rt) {
        let output = rt.block_on(within(async { keel::spawn(async { 6 * 7 }).await }));
        assert_eq!(output.unwrap(), 42);

        let output = rt.block_on(within(async {
            keel::spawn(async { vec![1u8, 2, 3] }).await
        }));
        assert_eq!(output.unwrap(), vec![1, 2, 3]);
    }

    fn runtime_and_handle_spawn_from_outside_block_on(rt) {
        let from_runtime = rt.spawn(async { 1 });
        let handle = rt.handle().clone();
        let from_thread = thread::spawn(move || handle.spawn(async { 2 }))
            .join()
            .unwrap();
        let from_spawn_in = rt.spawn_in(Class::BULK, async { 3 });
        let outputs = rt.block_on(within(async {
            (
                from_runtime.await.unwrap(),
                from_thread.await.unwrap(),
                from_spawn_in.await.unwrap(),
            )
        }));
        assert_eq!(outputs, (1, 2, 3));
    }

    fn ten_thousand_tasks_all_complete_with_their_outputs(rt) {
        const TASKS: u64 = support::miri_or(10_000, 100);
        let outputs = rt.block_on(within(async {
            let handles: Vec<JoinHandle<u64>> =
                (0..TASKS).map(|i| keel::spawn(async move { i * 3 })).collect();
            let mut outputs = Vec::with_capacity(handles.len());
            for handle in handles {
                outputs.push(handle.await.unwrap());
            }
            outputs
        }));
        assert_eq!(outputs.len() as u64, TASKS);
        for (i, output) in outputs.into_iter().enumerate() {
            assert_eq!(output, i as u64 * 3, "output of task {i}");
        }
    }

    fn tasks_spawned_from_tasks_complete(rt) {
        /// Spawns a tree of tasks `depth` deep with `FANOUT` children per
        /// node; each node returns the number of nodes in its subtree.
        fn tree(depth: u32) -> Pin<Box<dyn Future<Output = u64> + Send>> {
            const FANOUT: u64 = 4;
            Box::pin(async move {
                if depth == 0 {
                    return 1;
                }
                let children: Vec<_> = (0..FANOUT).map(|_| keel::spawn(tree(depth - 1))).collect();
                let mut nodes = 1;
                for child in children {
                    nodes += child.await.expect("child task completes");
                }
                nodes
            })
        }
        // 1 + 4 + 16 + 64 + 256 nodes; under Miri two levels less, 21.
        let (depth, expected) = support::miri_or((4, 341), (2, 21));
        let nodes = rt.block_on(within(rt.spawn(tree(depth)))).unwrap();
        assert_eq!(nodes, expected);
    }

    fn dropped_join_handle_detaches_the_task_which_still_completes(rt) {
        let (tx, rx) = mpsc::channel();
        let gate = Gate::new();
        let task_gate = gate.clone();
        rt.block_on(async {
            let handle = keel::spawn(async move {
                // Still pending when its handle is dropped.
                task_gate.wait().await;
                for _ in 0..3 {
                    keel::yield_now().await;
                }
                tx.send("finished").unwrap();
            });
            drop(handle);
        });
        gate.open();
        assert_eq!(rx.recv_timeout(WATCHDOG).expect("detached task completes"), "finished");
    }

    fn abort_cancels_a_pending_task_and_drops_its_future(rt) {
        let dropped = Arc::new(AtomicBool::new(false));
        let polled = Arc::new(AtomicBool::new(false));
        let guard = DropFlag(dropped.clone());
        let task_polled = polled.clone();
        let handle = rt.spawn(async move {
            let _guard = guard;
            task_polled.store(true, SeqCst);
            std::future::pending::<()>().await;
        });
        wait_until("the task is polled", || polled.load(SeqCst));
        assert!(!handle.is_finished());
        assert!(!dropped.load(SeqCst), "future dropped before abort");

        let id = handle.id();
        handle.abort();
        handle.abort(); // Aborting twice does nothing more.
        let error = rt.block_on(within(handle)).expect_err("aborted task has no output");
        assert!(error.is_cancelled(), "{error}");
        assert!(!error.is_panic());
        assert_eq!(error.id(), Some(id));
        assert!(error.to_string().contains("cancelled"), "{error}");
        assert!(dropped.load(SeqCst), "aborted task's future was not dropped");
    }

    fn abort_before_first_poll_cancels_the_task_without_running_it(rt) {
        let ran = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicBool::new(false));
        let task_ran = ran.clone();
        let guard = DropFlag(dropped.clone());
        let result = rt.block_on(within(async move {
            // From a task on a worker, spawn and abort before yielding the
            // worker: with one worker the child cannot have run yet.
            keel::spawn(async move {
                let child = keel::spawn(async move {
                    let _guard = guard;
                    task_ran.store(true, SeqCst);
                    // With several workers another one may run it first:
                    // it must still be cancelled, not complete.
                    std::future::pending::<()>().await;
                });
                child.abort();
                child.await
            })
            .await
        }));
        let error = result.expect("parent completes").expect_err("child was aborted");
        assert!(error.is_cancelled(), "{error}");
        assert!(dropped.load(SeqCst), "aborted child's future was not dropped");
        if rt.handle().workers() == 1 {
            assert!(!ran.load(SeqCst), "aborted child ran on the only worker");
        }
    }

    fn abort_after_completion_keeps_the_output(rt) {
        let handle = rt.spawn(async { String::from("done") });
        wait_until("the task finishes", || handle.is_finished());
        handle.abort();
        handle.abort();
        assert!(handle.is_finished());
        assert_eq!(rt.block_on(within(handle)).unwrap(), "done");
    }

    fn abort_stops_a_task_that_yields_in_a_loop(rt) {
        let counter = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicBool::new(false));
        let task_counter = counter.clone();
        let guard = DropFlag(dropped.clone());
        let handle = rt.spawn(async move {
            let _guard = guard;
            loop {
                task_counter.fetch_add(1, SeqCst);
                keel::yield_now().await;
            }
        });
        wait_until("the loop runs", || counter.load(SeqCst) >= 100);
        handle.abort();
        let error = rt.block_on(within(handle)).expect_err("aborted loop has no output");
        assert!(error.is_cancelled(), "{error}");
        assert!(dropped.load(SeqCst), "aborted loop's future was not dropped");

        let first = counter.load(SeqCst);
        // Give a still-running loop every chance to show itself.
        rt.block_on(async {
            for _ in 0..100 {
                keel::yield_now().await;
            }
        });
        for _ in 0..20 {
            thread::yield_now();
            thread::sleep(Duration::from_millis(1));
        }
        let second = counter.load(SeqCst);
        assert_eq!(first, second, "the aborted loop kept running");
    }

    fn panicking_task_gives_join_error_with_its_payload_and_message(rt) {
        let handle = rt.spawn(async { explode() });
        let id = handle.id();
        let error = rt.block_on(within(handle)).expect_err("panicking task has no output");
        assert!(error.is_panic(), "{error}");
        assert!(!error.is_cancelled());
        assert_eq!(error.id(), Some(id));
        let display = error.to_string();
        assert!(display.contains("task exploded on purpose"), "{display}");
        assert!(display.contains("panicked"), "{display}");
        assert!(format!("{error:?}").contains("task exploded on purpose"));

        let payload = error.try_into_panic().expect("a panic carries its payload");
        assert_eq!(
            payload.downcast_ref::<&'static str>(),
            Some(&"task exploded on purpose")
        );

        // A formatted panic carries a String.
        let error = rt
            .block_on(within(rt.spawn(async {
                let n = black_box(7);
                if n == 7 {
                    panic!("formatted panic {n}");
                }
                n
            })))
            .expect_err("panicking task has no output");
        assert!(error.to_string().contains("formatted panic 7"), "{error}");
        let payload = error.try_into_panic().unwrap();
        assert_eq!(payload.downcast_ref::<String>().map(String::as_str), Some("formatted panic 7"));

        // A cancelled error is not a panic and gives itself back.
        let pending = rt.spawn(std::future::pending::<()>());
        pending.abort();
        let cancelled = rt.block_on(within(pending)).unwrap_err();
        let cancelled = cancelled.try_into_panic().expect_err("cancellation is no panic");
        assert!(cancelled.is_cancelled());
    }

    fn runtime_runs_tasks_on_every_worker_after_100_panics(rt) {
        let workers = rt.handle().workers();
        // 100 panics (20 under Miri, where each unwinds slowly).
        let expected_panics = support::miri_or(100, 10);
        let panics = rt.block_on(within(async move {
            let handles: Vec<_> = (0..expected_panics)
                .map(|_| keel::spawn(async { explode() }))
                .collect();
            let mut panics = 0;
            for handle in handles {
                let error = handle.await.expect_err("panicking task has no output");
                assert!(error.is_panic(), "{error}");
                panics += 1;
            }
            panics
        }));
        assert_eq!(panics, expected_panics);

        // Plain tasks still complete...
        let (tasks, expected_sum) = support::miri_or((1_000u64, 499_500), (30, 435));
        let sum = rt.block_on(within(async move {
            let handles: Vec<_> = (0..tasks).map(|i| keel::spawn(async move { i })).collect();
            let mut sum = 0;
            for handle in handles {
                sum += handle.await.unwrap();
            }
            sum
        }));
        assert_eq!(sum, expected_sum);

        // ...and every worker still runs tasks.
        let before = rt.stats();
        let seen = rendezvous_on_every_worker(rt);
        let expected: HashSet<String> = (0..workers).map(|i| format!("keel-worker-{i}")).collect();
        assert_eq!(seen, expected);
        stats_eventually(rt, "every worker's poll count increases", |stats| {
            (0..workers).all(|i| worker_polls(stats, i) > worker_polls(&before, i))
        });
    }

    fn spawn_in_runs_the_task_in_that_class_and_spawn_inherits_it(rt) {
        const YIELDS: usize = 5;
        let all = [Class::URGENT, Class::NORMAL, Class::BULK];
        for class in all {
            let before = rt.stats();
            parent_and_child_in(rt, class, YIELDS);
            // The parent's poll and the child's `YIELDS + 1` polls.
            let expected = YIELDS as u64 + 2;
            let after = stats_eventually(rt, "the class's polls are published", |stats| {
                class_polls(stats, class) - class_polls(&before, class) >= expected
            });
            for other in all.into_iter().filter(|&c| c != class) {
                assert_eq!(
                    class_polls(&after, other),
                    class_polls(&before, other),
                    "spawning in {class:?} polled tasks in {other:?}"
                );
            }
        }
    }

    fn handle_spawn_inside_a_task_inherits_its_class(rt) {
        let handle = rt.handle().clone();
        let before = rt.stats();
        let (done, finished) = mpsc::channel();
        let parent = rt.spawn_in(Class::URGENT, async move {
            // Through a Handle, not `keel::spawn`.
            drop(handle.spawn(async move { done.send(()).unwrap() }));
        });
        rt.block_on(within(parent)).unwrap();
        finished.recv_timeout(WATCHDOG).expect("child completes");
        let after = stats_eventually(rt, "urgent polls are published", |stats| {
            class_polls(stats, Class::URGENT) - class_polls(&before, Class::URGENT) >= 2
        });
        assert_eq!(class_polls(&after, Class::NORMAL), class_polls(&before, Class::NORMAL));
        assert_eq!(class_polls(&after, Class::BULK), class_polls(&before, Class::BULK));
    }

    fn spawn_outside_any_task_lands_in_the_normal_class(rt) {
        let before = rt.stats();
        let from_block_on = rt.block_on(within(async { keel::spawn(async { 1 }).await }));
        let from_runtime = rt.block_on(within(rt.spawn(async { 2 })));
        assert_eq!((from_block_on.unwrap(), from_runtime.unwrap()), (1, 2));
        let after = stats_eventually(rt, "normal polls are published", |stats| {
            class_polls(stats, Class::NORMAL) - class_polls(&before, Class::NORMAL) >= 2
        });
        assert_eq!(class_polls(&after, Class::URGENT), class_polls(&before, Class::URGENT));
        assert_eq!(class_polls(&after, Class::BULK), class_polls(&before, Class::BULK));
    }

    fn spawning_on_another_runtime_from_a_task_does_not_inherit_the_class(rt) {
        let other = Runtime::builder().workers(1).build().unwrap();
        let other_handle = other.handle().clone();
        let before = other.stats();
        let output = rt.block_on(within(rt.spawn_in(Class::BULK, async move {
            other_handle.spawn(async { 5 }).await
        })));
        assert_eq!(output.unwrap().unwrap(), 5);
        let after = stats_eventually(&other, "the other runtime's normal polls", |stats| {
            class_polls(stats, Class::NORMAL) > class_polls(&before, Class::NORMAL)
        });
        assert_eq!(class_polls(&after, Class::BULK), 0, "class leaked across runtimes");
    }

    fn try_current_is_none_outside_and_some_inside_block_on_and_tasks(rt) {
        assert!(Handle::try_current().is_none(), "a test thread is in no runtime");
        let workers = rt.handle().workers();
        let inside_block_on = rt.block_on(async { Handle::try_current().map(|h| h.workers()) });
        assert_eq!(inside_block_on, Some(workers));
        let inside_task = rt
            .block_on(within(rt.spawn(async { Handle::try_current().map(|h| h.workers()) })))
            .unwrap();
        assert_eq!(inside_task, Some(workers));
        let from_detached = rt.block_on(within(rt.spawn(async {
            // `Handle::current` works where `try_current` is Some.
            Handle::current().workers()
        })));
        assert_eq!(from_detached.unwrap(), workers);
        assert!(Handle::try_current().is_none(), "block_on left its context behind");
    }

    fn block_on_inside_a_task_panics_and_is_contained_as_a_join_error(rt) {
        let other = Arc::new(Runtime::builder().workers(1).build().unwrap());
        let in_task = other.clone();
        let error = rt
            .block_on(within(rt.spawn(async move { in_task.block_on(async { 1 }) })))
            .expect_err("block_on on a worker panics");
        assert!(error.is_panic(), "{error}");
        assert!(
            error.to_string().contains("block_on called on a keel worker thread"),
            "{error}"
        );
        // Every worker survived: the runtime still runs tasks on all of them.
        let seen = rendezvous_on_every_worker(rt);
        assert_eq!(seen.len(), rt.handle().workers());
        assert_eq!(rt.block_on(within(rt.spawn(async { 2 }))).unwrap(), 2);
        // The runtime whose block_on was refused is unharmed too.
        assert_eq!(other.block_on(async { 3 }), 3);
    }

    fn yield_now_returns_in_block_on_and_in_tasks(rt) {
        rt.block_on(within(async {
            for _ in 0..10 {
                keel::yield_now().await;
            }
        }));
        let rounds = rt
            .block_on(within(rt.spawn(async {
                let mut rounds = 0;
                for _ in 0..10 {
                    keel::yield_now().await;
                    rounds += 1;
                }
                rounds
            })))
            .unwrap();
        assert_eq!(rounds, 10);
    }

    fn a_task_yielding_in_a_loop_does_not_keep_others_from_running(rt) {
        let flag = Arc::new(AtomicBool::new(false));
        let spinner_flag = flag.clone();
        let setter_flag = flag.clone();
        let yields = rt
            .block_on(within(rt.spawn(async move {
                let spinner = keel::spawn(async move {
                    let mut yields = 0u64;
                    while !spinner_flag.load(SeqCst) {
                        keel::yield_now().await;
                        yields += 1;
                    }
                    yields
                });
                let setter = keel::spawn(async move { setter_flag.store(true, SeqCst) });
                setter.await.unwrap();
                spinner.await.unwrap()
            })))
            .unwrap();
        assert!(flag.load(SeqCst));
        if rt.handle().workers() == 1 {
            // Spinner and setter sit in the same worker's queue: the setter
            // must run at the spinner's first yield.
            assert!(yields <= 1, "the spinner yielded {yields} times before the setter ran");
        }
    }

    fn stats_snapshot_has_one_entry_per_worker_and_the_default_classes(rt) {
        let stats = rt.stats();
        assert_eq!(stats.workers.len(), rt.handle().workers());
        for (index, worker) in stats.workers.iter().enumerate() {
            assert_eq!(worker.index, index);
            assert_eq!(worker.task.len(), 3);
            assert_eq!(worker.polls.len(), 3);
        }
        let classes: Vec<(&str, u32)> =
            stats.classes.iter().map(|c| (c.name.as_str(), c.shares)).collect();
        assert_eq!(classes, [("urgent", 16), ("normal", 33), ("bulk", 50)]);
        assert_eq!(stats.classes[Class::URGENT.index()].name, "urgent");
        assert_eq!(stats.classes[Class::NORMAL.index()].name, "normal");
        assert_eq!(stats.classes[Class::BULK.index()].name, "bulk");
        assert_eq!(rt.handle().class("normal"), Some(Class::NORMAL));
        assert_eq!(rt.handle().class_name(Class::BULK), Some("bulk"));
        assert_eq!(rt.handle().class("nope"), None);
    }

    fn stats_account_polls_cpu_and_queue_delay_to_the_normal_class(rt) {
        const TASKS: u64 = support::miri_or(64, 16);
        let sum = rt.block_on(within(async {
            let handles: Vec<_> = (0..TASKS)
                .map(|i| {
                    keel::spawn(async move {
                        let mut acc = 0u64;
                        for round in 0..4 {
                            for j in 0..support::miri_or(2_000u64, 50) {
                                acc = acc.wrapping_add(black_box(i * j + round));
                            }
                            keel::yield_now().await;
                        }
                        acc
                    })
                })
                .collect();
            let mut sum = 0u64;
            for handle in handles {
                sum = sum.wrapping_add(handle.await.unwrap());
            }
            sum
        }));
        black_box(sum);
        let stats = stats_eventually(rt, "normal has cpu, polls and queue delays", |stats| {
            let normal = &stats.classes[Class::NORMAL.index()];
            normal.busy > Duration::ZERO && normal.polls >= TASKS * 5 && normal.queue_delay.count() > 0
        });
        let normal = &stats.classes[Class::NORMAL.index()];
        assert!(normal.queue_delay.max() >= normal.queue_delay.p50());
        assert_eq!(stats.classes[Class::URGENT.index()].polls, 0);
        assert_eq!(stats.classes[Class::BULK.index()].polls, 0);
        let per_worker: u64 = stats.workers.iter().map(|w| w.polls[Class::NORMAL.index()]).sum();
        assert_eq!(per_worker, normal.polls, "class polls are the sum over workers");
    }

    fn task_ids_count_up_from_one_in_spawn_order(rt) {
        let first = rt.spawn(async {});
        let second = rt.handle().spawn(async {});
        let parent = rt.spawn(async { keel::spawn(async {}).id() });
        assert_eq!(first.id().as_u64(), 1);
        assert_eq!(second.id().as_u64(), 2);
        assert_eq!(parent.id().as_u64(), 3);
        assert_eq!(first.id().to_string(), "1");
        let child = rt.block_on(within(async {
            first.await.unwrap();
            second.await.unwrap();
            parent.await.unwrap()
        }));
        assert_eq!(child.as_u64(), 4);
    }

    fn live_tasks_counts_tasks_until_they_finish(rt) {
        let handles: Vec<_> = (0..10).map(|_| rt.spawn(std::future::pending::<()>())).collect();
        assert_eq!(rt.handle().live_tasks(), 10);
        for handle in &handles {
            handle.abort();
        }
        for handle in handles {
            assert!(rt.block_on(within(handle)).unwrap_err().is_cancelled());
        }
        wait_until("aborted tasks leave the registry", || rt.handle().live_tasks() == 0);
    }
}

// ---------------------------------------------------------------------------
// Tests that need no runtime, or a specific configuration
// ---------------------------------------------------------------------------

#[test]
fn spawn_outside_a_runtime_panics_with_a_helpful_message() {
    assert!(Handle::try_current().is_none());
    let spawn = catch_unwind(|| drop(keel::spawn(async {})));
    let message = payload_message(&*spawn.expect_err("spawn outside a runtime panics")).unwrap();
    assert!(message.contains("not inside a keel runtime"), "{message}");

    let spawn_in = catch_unwind(|| drop(keel::spawn_in(Class::BULK, async {})));
    let message = payload_message(&*spawn_in.expect_err("spawn_in outside a runtime panics"));
    assert!(message.unwrap().contains("not inside a keel runtime"));

    let current = catch_unwind(Handle::current);
    let message = payload_message(&*current.expect_err("Handle::current outside panics"));
    assert!(message.unwrap().contains("not inside a keel runtime"));
}

#[test]
fn block_on_of_its_own_runtime_inside_a_task_panics_and_is_contained() {
    for workers in [1, 2] {
        let rt = Arc::new(Runtime::builder().workers(workers).build().unwrap());
        let in_task = rt.clone();
        let error = rt
            .block_on(within(
                rt.spawn(async move { in_task.block_on(async { 1 }) }),
            ))
            .expect_err("block_on on a worker panics");
        assert!(error.is_panic(), "{error}");
        assert!(error.to_string().contains("keel worker thread"), "{error}");
        assert_eq!(rt.block_on(within(rt.spawn(async { 2 }))).unwrap(), 2);
        wait_until("the task released its Arc", || Arc::strong_count(&rt) == 1);
    }
}

#[test]
fn builder_rejects_zero_workers() {
    let error = Runtime::builder()
        .workers(0)
        .build()
        .expect_err("0 workers is invalid");
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    let message = error.to_string();
    assert!(message.contains("workers"), "{message}");
    assert!(message.contains('0'), "{message}");

    let error = Runtime::builder()
        .workers(usize::MAX)
        .build()
        .expect_err("too many workers");
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert!(error.to_string().contains("workers"), "{error}");
}

/// Without the `tokio-context` feature there is no tokio side to ask for
/// (the tests that use one are in `compat_tokio_context`).
#[cfg(not(feature = "tokio-context"))]
#[test]
fn builder_rejects_a_tokio_side_without_its_feature() {
    assert_eq!(keel::runtime::DEFAULT_TOKIO_THREADS, 0);
    let error = Runtime::builder()
        .tokio_threads(1)
        .build()
        .expect_err("no tokio side without the feature");
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert!(error.to_string().contains("tokio-context"), "{error}");
    assert!(Runtime::builder()
        .workers(1)
        .tokio_threads(0)
        .build()
        .is_ok());
}

#[test]
fn builder_rejects_a_class_with_zero_shares() {
    let error = Runtime::builder()
        .workers(1)
        .class("replication", 0)
        .build()
        .expect_err("0 shares is invalid");
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    let message = error.to_string();
    assert!(message.contains("replication"), "{message}");
    assert!(message.contains("shares"), "{message}");

    // Retuning a default class to 0 is just as invalid.
    let error = Runtime::builder()
        .workers(1)
        .class("bulk", 0)
        .build()
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert!(error.to_string().contains("bulk"), "{error}");
}

#[test]
fn builder_rejects_an_empty_class_name() {
    let error = Runtime::builder()
        .workers(1)
        .class("", 5)
        .build()
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    assert!(error.to_string().contains("name"), "{error}");
}

#[test]
fn builder_adds_a_named_class_that_tasks_can_run_in() {
    for spin in support::SPINS {
        let rt = Runtime::builder()
            .workers(2)
            .spin(spin)
            .class("x", 5)
            .build()
            .unwrap();
        let x = rt.handle().class("x").expect("class x exists");
        assert_eq!(x.index(), 3);
        assert_eq!(rt.handle().class_name(x), Some("x"));
        let stats = rt.stats();
        assert_eq!(stats.classes.len(), 4);
        assert_eq!(
            (stats.classes[3].name.as_str(), stats.classes[3].shares),
            ("x", 5)
        );

        parent_and_child_in(&rt, x, 3);
        let after = stats_eventually(&rt, "class x polls are published", |stats| {
            class_polls(stats, x) >= 5
        });
        for default in [Class::URGENT, Class::NORMAL, Class::BULK] {
            assert_eq!(class_polls(&after, default), 0, "{default:?} polled");
        }

        // A class of this runtime does not exist in a runtime without it.
        let small = Runtime::builder().workers(1).build().unwrap();
        assert_eq!(small.handle().class_name(x), None);
        let refused = catch_unwind(AssertUnwindSafe(|| drop(small.spawn_in(x, async {}))));
        let message = payload_message(&*refused.expect_err("foreign class panics")).unwrap();
        assert!(message.contains("does not exist"), "{message}");
    }
}

#[test]
fn builder_class_retunes_the_shares_of_an_existing_class() {
    let rt = Runtime::builder()
        .workers(1)
        .class("bulk", 70)
        .build()
        .unwrap();
    let stats = rt.stats();
    assert_eq!(stats.classes.len(), 3, "retuning must not add a class");
    assert_eq!(stats.classes[2].name, "bulk");
    assert_eq!(stats.classes[2].shares, 70);
    assert_eq!(stats.classes[0].shares, 16);
    assert_eq!(stats.classes[1].shares, 33);
    assert_eq!(rt.handle().class("bulk"), Some(Class::BULK));
}

#[test]
fn builder_accepts_max_classes_and_rejects_more() {
    let mut builder = Runtime::builder();
    builder.workers(1);
    for extra in 0..MAX_CLASSES - 3 {
        builder.class(&format!("extra{extra}"), 1);
    }
    let rt = builder.build().expect("MAX_CLASSES classes are allowed");
    assert_eq!(rt.stats().classes.len(), MAX_CLASSES);
    let last = rt
        .handle()
        .class(&format!("extra{}", MAX_CLASSES - 4))
        .unwrap();
    assert_eq!(last.index(), MAX_CLASSES - 1);
    assert_eq!(
        rt.block_on(within(rt.spawn_in(last, async { 9 }))).unwrap(),
        9
    );

    builder.class("one-too-many", 1);
    let error = builder
        .build()
        .expect_err("more than MAX_CLASSES is invalid");
    assert_eq!(error.kind(), ErrorKind::InvalidInput);
    let message = error.to_string();
    assert!(message.contains(&MAX_CLASSES.to_string()), "{message}");
    assert!(message.contains("classes"), "{message}");
}

/// Records `tag` into `order`, then yields, `rounds` times.
async fn record_and_yield(tag: char, order: Arc<Mutex<String>>, rounds: usize) {
    for _ in 0..rounds {
        order.lock().unwrap().push(tag);
        keel::yield_now().await;
    }
}

#[test]
fn yield_now_alternates_two_tasks_spawned_from_a_task_on_one_worker() {
    const ROUNDS: usize = 20;
    for spin in support::SPINS {
        let rt = Runtime::builder().workers(1).spin(spin).build().unwrap();
        let order = Arc::new(Mutex::new(String::new()));
        let task_order = order.clone();
        rt.block_on(within(rt.spawn(async move {
            let a = keel::spawn(record_and_yield('a', task_order.clone(), ROUNDS));
            let b = keel::spawn(record_and_yield('b', task_order, ROUNDS));
            a.await.unwrap();
            b.await.unwrap();
        })))
        .unwrap();
        let order = order.lock().unwrap().clone();
        assert_eq!(order, "ab".repeat(ROUNDS), "spin {spin:?}");
    }
}

#[test]
fn yield_now_interleaves_two_tasks_spawned_from_block_on_on_one_worker() {
    const ROUNDS: usize = 10;
    for spin in support::SPINS {
        let rt = Runtime::builder().workers(1).spin(spin).build().unwrap();
        // Occupy the only worker so that both tasks are queued (in the
        // injector) before either runs: the order is then deterministic.
        let started = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let (blocker_started, blocker_release) = (started.clone(), release.clone());
        let blocker = rt.spawn(async move {
            blocker_started.store(true, SeqCst);
            let deadline = Instant::now() + WATCHDOG;
            while !blocker_release.load(SeqCst) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(1));
            }
        });
        wait_until("the blocker occupies the worker", || started.load(SeqCst));

        let order = Arc::new(Mutex::new(String::new()));
        let a = rt.spawn(record_and_yield('a', order.clone(), ROUNDS));
        let b = rt.spawn(record_and_yield('b', order.clone(), ROUNDS));
        release.store(true, SeqCst);
        rt.block_on(within(async {
            blocker.await.unwrap();
            a.await.unwrap();
            b.await.unwrap();
        }));
        let order = order.lock().unwrap().clone();
        let (first_a, last_a) = (order.find('a').unwrap(), order.rfind('a').unwrap());
        let (first_b, last_b) = (order.find('b').unwrap(), order.rfind('b').unwrap());
        assert!(
            first_b < last_a && first_a < last_b,
            "spin {spin:?}: tasks did not interleave on yield_now: {order}"
        );
    }
}

/// A panicking destructor costs only its own task: aborting a task drops
/// its future on a worker, which must survive. Run in a child process
/// because the failure mode is a process abort.
#[test]
fn aborting_a_task_whose_destructor_panics_leaves_the_runtime_running() {
    if !support::in_child_process() {
        support::run_in_child_process(
            "aborting_a_task_whose_destructor_panics_leaves_the_runtime_running",
        );
        return;
    }

    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("destructor panics on purpose");
        }
    }

    let rt = Runtime::builder().workers(1).build().unwrap();
    let polled = Arc::new(AtomicBool::new(false));
    let task_polled = polled.clone();
    let handle = rt.spawn(async move {
        let _bomb = PanicOnDrop;
        task_polled.store(true, SeqCst);
        std::future::pending::<()>().await;
    });
    wait_until("the task is polled", || polled.load(SeqCst));
    handle.abort();
    let error = rt
        .block_on(within(handle))
        .expect_err("aborted task has no output");
    assert!(error.is_cancelled() || error.is_panic(), "{error}");
    assert_eq!(rt.block_on(within(rt.spawn(async { 1 }))).unwrap(), 1);
}

/// Same for the output of a detached task, which the runtime drops when the
/// task completes. Run in a child process because the failure mode is a
/// process abort.
#[test]
fn detached_task_whose_output_destructor_panics_leaves_the_runtime_running() {
    if !support::in_child_process() {
        support::run_in_child_process(
            "detached_task_whose_output_destructor_panics_leaves_the_runtime_running",
        );
        return;
    }

    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("output destructor panics on purpose");
        }
    }

    let rt = Runtime::builder().workers(1).build().unwrap();
    let gate = Gate::new();
    let task_gate = gate.clone();
    let (done, finished) = mpsc::channel();
    drop(rt.spawn(async move {
        task_gate.wait().await;
        done.send(()).unwrap();
        PanicOnDrop
    }));
    gate.open();
    finished.recv_timeout(WATCHDOG).expect("detached task runs");
    // The only worker must survive dropping the output.
    assert_eq!(rt.block_on(within(rt.spawn(async { 1 }))).unwrap(), 1);
}
