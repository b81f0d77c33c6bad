//! Runtime shutdown: what dropping a keel `Runtime` does to the tasks it
//! still holds (their futures are dropped, their `JoinHandle`s resolve to
//! cancelled, nothing leaks), to spawns through a `Handle` that outlives it,
//! and to its worker threads (all joined), including tasks whose
//! destructors spawn and a runtime dropped from one of its own tasks.
//!
//! These tests must own (and drop) their runtime, so they use
//! `rt_builder_test!`: one `#[test]` per worker count (1, 2, 4), each
//! looping over every spin policy, with the body building its runtime from
//! a prepared `Builder`. No test asserts on durations; waits are bounded by a 30 s
//! watchdog so that a hang fails the test.

#[macro_use]
mod support;

use support::{
    block_on, drop_within, threads_named, wait_until, worker_threads_named, DropFlag, WATCHDOG,
};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use keel::{Class, Handle, JoinHandle, Runtime};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Asserts that `handle` resolves to a cancelled `JoinError`.
fn assert_cancelled<T>(handle: JoinHandle<T>) {
    let id = handle.id();
    match block_on(handle) {
        Ok(_) => panic!("task {id} completed; expected it to be cancelled"),
        Err(error) => {
            assert!(error.is_cancelled(), "task {id}: {error}");
            assert_eq!(error.id(), Some(id));
        }
    }
}

/// Counts its drops: observes that a task's future was dropped.
struct DropCounter(Arc<AtomicUsize>);

impl Drop for DropCounter {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// Pending forever; on its first poll it hands its waker to `stash` (kept
/// outside the runtime, never woken while the runtime runs).
struct StashWaker {
    stash: Arc<Mutex<Vec<Waker>>>,
    stashed: bool,
}

impl Future for StashWaker {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if !self.stashed {
            self.stashed = true;
            self.stash.lock().unwrap().push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The ways a task can be pending when the runtime is dropped.
#[derive(Clone, Copy, Debug)]
enum Pending {
    /// `std::future::pending`: no waker kept anywhere.
    Forever,
    /// Waiting on a waker that someone outside holds and never wakes.
    NeverWoken,
    /// Runnable all the time: yields in a loop.
    YieldLoop,
}

const PENDING_KINDS: [Pending; 3] = [Pending::Forever, Pending::NeverWoken, Pending::YieldLoop];

/// A future that counts its first poll on `polled`, then stays pending in
/// the way `kind` says, holding `keep` until it is dropped.
async fn pending_task<K: Send + 'static>(
    kind: Pending,
    keep: K,
    polled: Arc<AtomicUsize>,
    stash: Arc<Mutex<Vec<Waker>>>,
) {
    let _keep = keep;
    polled.fetch_add(1, SeqCst);
    match kind {
        Pending::Forever => std::future::pending::<()>().await,
        Pending::NeverWoken => {
            StashWaker {
                stash,
                stashed: false,
            }
            .await
        }
        Pending::YieldLoop => loop {
            keel::yield_now().await;
        },
    }
}

// ---------------------------------------------------------------------------
// Tests (1, 2 and 4 workers, every spin policy)
// ---------------------------------------------------------------------------

rt_builder_test! {
    fn dropping_the_runtime_drops_every_pending_future_and_cancels_its_handle(builder, _workers) {
        const PER_KIND: usize = 20;
        let rt = builder.build().unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let polled = Arc::new(AtomicUsize::new(0));
        let stash = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for _ in 0..PER_KIND {
            for kind in PENDING_KINDS {
                let guard = DropCounter(dropped.clone());
                handles.push(rt.spawn(pending_task(kind, guard, polled.clone(), stash.clone())));
            }
        }
        wait_until("every task has been polled", || polled.load(SeqCst) == handles.len());
        // And some that may not have been polled yet when the runtime drops.
        for _ in 0..PER_KIND {
            let guard = DropCounter(dropped.clone());
            handles.push(rt.spawn(pending_task(Pending::Forever, guard, polled.clone(), stash.clone())));
        }
        assert_eq!(dropped.load(SeqCst), 0, "a pending future was dropped early");

        drop_within(rt);

        assert_eq!(dropped.load(SeqCst), handles.len(), "futures left undropped by shutdown");
        for handle in handles {
            assert!(handle.is_finished());
            assert_cancelled(handle);
        }
        // Wakers that outlive the runtime stay harmless.
        for waker in stash.lock().unwrap().drain(..) {
            waker.wake();
        }
    }

    fn spawning_through_a_handle_after_drop_cancels_without_running_the_future(builder, _workers) {
        let rt = builder.build().unwrap();
        let handle = rt.handle().clone();
        assert_eq!(rt.block_on(handle.spawn(async { 1 })).unwrap(), 1);
        drop_within(rt);

        for class in [Class::URGENT, Class::NORMAL, Class::BULK] {
            let ran = Arc::new(AtomicBool::new(false));
            let dropped = Arc::new(AtomicBool::new(false));
            let guard = DropFlag(dropped.clone());
            let task_ran = ran.clone();
            let task = handle.spawn_in(class, async move {
                let _guard = guard;
                task_ran.store(true, SeqCst);
                7
            });
            assert!(dropped.load(SeqCst), "the refused future was not dropped at once");
            assert!(task.is_finished());
            assert_cancelled(task);
            assert!(!ran.load(SeqCst), "a task spawned after shutdown ran");
        }
        let late = handle.spawn(std::future::pending::<()>());
        assert_cancelled(late);
        assert_eq!(handle.live_tasks(), 0);
    }

    fn shutdown_joins_every_worker_thread(builder, workers) {
        // Unique per worker count: the three tests run in parallel.
        let name = format!("ktest-shut{workers}");
        let prefix = format!("{name}-");
        assert_eq!(threads_named(&prefix), 0, "threads left over before build");

        let rt = builder.thread_name(&name).build().unwrap();
        // A new thread names itself once it runs: wait for all of them.
        wait_until("every worker thread is named", || {
            worker_threads_named(&prefix) == workers
        });
        let names = rt.block_on(async {
            let handles: Vec<_> = (0..workers * 8)
                .map(|_| keel::spawn(async { thread::current().name().map(str::to_owned) }))
                .collect();
            let mut names = Vec::new();
            for handle in handles {
                names.push(handle.await.unwrap().expect("workers are named"));
            }
            names
        });
        assert!(names.iter().all(|n| n.starts_with(&prefix)), "{names:?}");
        assert_eq!(worker_threads_named(&prefix), workers);

        drop_within(rt);
        // `join` returns once a thread is done; the kernel may list it a
        // moment longer while it finishes exiting. Every thread of the
        // runtime goes: workers, and the tokio side's where there is one.
        let mut retries = 0;
        while threads_named(&prefix) != 0 {
            retries += 1;
            assert!(retries < 1_000, "{} threads outlived drop", threads_named(&prefix));
            thread::sleep(Duration::from_millis(1));
        }
    }

    fn drop_waits_for_the_poll_in_progress(builder, _workers) {
        let rt = builder.build().unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let (task_started, task_release, task_finished) =
            (started.clone(), release.clone(), finished.clone());
        let handle = rt.spawn(async move {
            task_started.store(true, SeqCst);
            // Blocks its worker, in one poll, until released.
            let deadline = Instant::now() + WATCHDOG;
            while !task_release.load(SeqCst) && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(1));
            }
            task_finished.store(true, SeqCst);
            std::future::pending::<()>().await;
        });
        wait_until("the task is in its poll", || started.load(SeqCst));
        let releaser = thread::spawn(move || {
            // Not an assertion: only gives the drop time to start waiting.
            thread::sleep(Duration::from_millis(20));
            release.store(true, SeqCst);
        });
        drop_within(rt);
        assert!(finished.load(SeqCst), "drop returned while a worker was still polling");
        releaser.join().unwrap();
        assert_cancelled(handle);
    }

    fn a_task_whose_drop_spawns_during_shutdown_does_not_hang_or_panic(builder, _workers) {
        const TASKS: usize = 10;

        /// Spawns a task when dropped (through `keel::spawn` or a Handle)
        /// and keeps its JoinHandle.
        struct SpawnOnDrop {
            via: Option<Handle>,
            spawned: Arc<Mutex<Vec<JoinHandle<()>>>>,
            inner_ran: Arc<AtomicUsize>,
            inner_dropped: Arc<AtomicUsize>,
        }

        impl Drop for SpawnOnDrop {
            fn drop(&mut self) {
                let ran = self.inner_ran.clone();
                let guard = DropCounter(self.inner_dropped.clone());
                let inner = async move {
                    let _guard = guard;
                    ran.fetch_add(1, SeqCst);
                };
                let handle = match &self.via {
                    Some(handle) => handle.spawn(inner),
                    None => keel::spawn(inner),
                };
                self.spawned.lock().unwrap().push(handle);
            }
        }

        let rt = builder.build().unwrap();
        let spawned = Arc::new(Mutex::new(Vec::new()));
        let inner_ran = Arc::new(AtomicUsize::new(0));
        let inner_dropped = Arc::new(AtomicUsize::new(0));
        let polled = Arc::new(AtomicUsize::new(0));
        let stash = Arc::new(Mutex::new(Vec::new()));
        let mut handles = Vec::new();
        for i in 0..TASKS {
            let on_drop = SpawnOnDrop {
                via: (i % 2 == 0).then(|| rt.handle().clone()),
                spawned: spawned.clone(),
                inner_ran: inner_ran.clone(),
                inner_dropped: inner_dropped.clone(),
            };
            let kind = PENDING_KINDS[i % PENDING_KINDS.len()];
            handles.push(rt.spawn(pending_task(kind, on_drop, polled.clone(), stash.clone())));
        }
        wait_until("every task has been polled", || polled.load(SeqCst) == TASKS);

        drop_within(rt);

        let spawned = std::mem::take(&mut *spawned.lock().unwrap());
        assert_eq!(spawned.len(), TASKS, "every destructor ran and spawned");
        assert_eq!(inner_dropped.load(SeqCst), TASKS, "tasks spawned by destructors leaked");
        assert_eq!(inner_ran.load(SeqCst), 0, "a task spawned during shutdown ran");
        for handle in spawned {
            assert_cancelled(handle);
        }
        for handle in handles {
            assert_cancelled(handle);
        }
    }

    fn no_task_state_leaks_after_dropping_the_runtime(builder, _workers) {
        const TASKS: usize = 1_000;
        let rt = builder.build().unwrap();
        let shared = Arc::new(());
        let polled = Arc::new(AtomicUsize::new(0));
        let stash = Arc::new(Mutex::new(Vec::new()));
        let mut kept = Vec::new();
        for i in 0..TASKS {
            let kind = PENDING_KINDS[i % PENDING_KINDS.len()];
            let handle = rt.spawn(pending_task(kind, shared.clone(), polled.clone(), stash.clone()));
            // Keep half of the handles, detach the others.
            if i % 2 == 0 {
                kept.push(handle);
            }
        }
        assert_eq!(Arc::strong_count(&shared), TASKS + 1);
        wait_until("some tasks have been polled", || polled.load(SeqCst) > 0);

        drop_within(rt);

        assert_eq!(Arc::strong_count(&shared), 1, "task futures leaked");
        for handle in kept {
            assert_cancelled(handle);
        }
        stash.lock().unwrap().clear();
        assert_eq!(Arc::strong_count(&shared), 1);
    }

    fn dropping_the_runtime_from_one_of_its_own_tasks_does_not_hang(builder, _workers) {
        const OTHERS: usize = 10;
        let rt = builder.build().unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let polled = Arc::new(AtomicUsize::new(0));
        let stash = Arc::new(Mutex::new(Vec::new()));
        let others: Vec<_> = (0..OTHERS)
            .map(|i| {
                let kind = PENDING_KINDS[i % PENDING_KINDS.len()];
                let guard = DropCounter(dropped.clone());
                rt.spawn(pending_task(kind, guard, polled.clone(), stash.clone()))
            })
            .collect();
        wait_until("the other tasks have been polled", || polled.load(SeqCst) == OTHERS);

        let slot = Arc::new(Mutex::new(None::<Runtime>));
        let handle = rt.handle().clone();
        *slot.lock().unwrap() = Some(rt);
        let (done, finished) = mpsc::channel();
        let task_slot = slot.clone();
        let dropper = handle.spawn(async move {
            let rt = task_slot.lock().unwrap().take().expect("runtime in the slot");
            drop(rt);
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(WATCHDOG)
            .expect("a task dropping its own runtime finishes");
        assert_eq!(block_on(dropper).ok(), Some(()));
        assert_eq!(dropped.load(SeqCst), OTHERS, "other tasks' futures leaked");
        for other in others {
            assert_cancelled(other);
        }
        assert_cancelled(handle.spawn(async {}));
    }
}

/// Documented in `drop_all_tasks`: "A future whose destructor panics must
/// not stop the others." Run in a child process because the failure mode is
/// a process abort.
#[test]
fn a_panicking_future_destructor_during_shutdown_does_not_stop_the_others() {
    if !support::in_child_process() {
        support::run_in_child_process(
            "a_panicking_future_destructor_during_shutdown_does_not_stop_the_others",
        );
        return;
    }

    struct PanicOnDrop;
    impl Drop for PanicOnDrop {
        fn drop(&mut self) {
            panic!("destructor panics on purpose");
        }
    }

    let rt = Runtime::builder().workers(2).build().unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let polled = Arc::new(AtomicUsize::new(0));
    let stash = Arc::new(Mutex::new(Vec::new()));
    let mut handles = Vec::new();
    for i in 0..10 {
        let guard = DropCounter(dropped.clone());
        handles.push(rt.spawn(pending_task(
            Pending::Forever,
            guard,
            polled.clone(),
            stash.clone(),
        )));
        if i == 5 {
            handles.push(rt.spawn(pending_task(
                Pending::Forever,
                PanicOnDrop,
                polled.clone(),
                stash.clone(),
            )));
        }
    }
    wait_until("every task has been polled", || {
        polled.load(SeqCst) == handles.len()
    });
    drop_within(rt);
    assert_eq!(dropped.load(SeqCst), 10);
    for handle in handles {
        assert_cancelled(handle);
    }
}

/// A task that retries an accept on every error, as an accept loop that
/// logs and goes on does, and that is inside a poll when the runtime starts
/// to stop: its accepts then fail at once, and its poll must still end
/// (each failure spends the poll's IO budget, so the task yields), or the
/// runtime's drop would wait for its worker for ever.
#[test]
fn a_task_retrying_failed_accepts_does_not_hold_up_the_drop() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let (in_poll, polling) = mpsc::channel();
    let retrying = Arc::new(AtomicBool::new(false));
    let started = retrying.clone();
    rt.spawn(async move {
        let listener = keel::net::TcpListener::bind("127.0.0.1:0").unwrap();
        in_poll.send(()).unwrap();
        // Within this one poll, until the runtime is stopping: then the
        // accept fails instead of waiting for a connection.
        {
            let mut cx = Context::from_waker(Waker::noop());
            let deadline = Instant::now() + WATCHDOG;
            while !matches!(listener.poll_accept(&mut cx), Poll::Ready(Err(_))) {
                assert!(Instant::now() < deadline, "the runtime never stopped");
                thread::yield_now();
            }
        }
        // The loop under test, reached with the runtime stopping.
        started.store(true, SeqCst);
        loop {
            let _ = listener.accept().await;
        }
    });
    polling.recv_timeout(WATCHDOG).unwrap();
    drop_within(rt);
    assert!(
        retrying.load(SeqCst),
        "the accept loop ran while the runtime stopped"
    );
}
