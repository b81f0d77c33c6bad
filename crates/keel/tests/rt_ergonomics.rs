//! `Runtime::enter`, `Runtime::shutdown_timeout` and `task::JoinSet`.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use keel::task::JoinSet;
use keel::{Handle, Runtime};
use support::wait_until;

#[test]
#[cfg_attr(miri, ignore = "binds a TCP listener: Miri isolates the network")]
fn enter_makes_the_runtime_current_until_the_guard_drops() {
    let a = Runtime::builder().workers(1).build().unwrap();
    let b = Runtime::builder().workers(2).build().unwrap();
    assert!(Handle::try_current().is_none());
    {
        let _a = a.enter();
        assert_eq!(Handle::current().workers(), 1);
        // Sockets and tasks work outside block_on.
        let listener = keel::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let task = keel::spawn(async { 5 });
        {
            let _b = b.enter();
            assert_eq!(Handle::current().workers(), 2);
        }
        // The inner guard restored the outer runtime.
        assert_eq!(Handle::current().workers(), 1);
        assert_eq!(a.block_on(task).unwrap(), 5);
        drop(listener);
    }
    assert!(Handle::try_current().is_none());
    assert!(keel::net::TcpListener::bind("127.0.0.1:0").is_err());
}

#[test]
fn shutdown_timeout_is_clean_when_nothing_is_stuck() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let parked = rt.spawn(keel::time::sleep(Duration::from_secs(3600)));
    let job = rt.spawn_blocking(|| 1);
    assert_eq!(rt.block_on(job).unwrap(), 1);
    // A timeout past the clock's range is bad input: it means "no limit".
    assert!(rt.shutdown_timeout(Duration::MAX));
    // The sleeping task was dropped, so its handle resolves.
    let error = support::block_on(parked).unwrap_err();
    assert!(error.is_cancelled());
}

#[test]
fn shutdown_timeout_gives_up_on_a_worker_stuck_in_a_poll() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let release = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let (r, s) = (release.clone(), started.clone());
    drop(rt.spawn(async move {
        s.store(true, Ordering::SeqCst);
        // Never yields until released: the worker is stuck in this poll.
        while !r.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }));
    wait_until("the stuck task starts", || started.load(Ordering::SeqCst));
    let begun = std::time::Instant::now();
    assert!(!rt.shutdown_timeout(Duration::from_millis(100)));
    // It returned instead of waiting for the task (a wide margin).
    assert!(begun.elapsed() < Duration::from_secs(20));
    release.store(true, Ordering::SeqCst);
}

#[test]
fn a_join_set_yields_outputs_as_tasks_finish() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(async {
        let mut set = JoinSet::new();
        assert!(set.is_empty());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Mutex::new(rx);
        // The slow task waits for a message sent only after the fast one
        // has been joined, so the order is certain.
        set.spawn_on(&Handle::current(), async move {
            keel::blocking::unblock(move || rx.lock().unwrap().recv())
                .await
                .unwrap()
                .unwrap();
            "slow"
        });
        set.spawn_in(keel::Class::URGENT, async { "fast" });
        assert_eq!(set.len(), 2);
        assert_eq!(set.join_next().await.unwrap().unwrap(), "fast");
        tx.send(()).unwrap();
        assert_eq!(set.join_next().await.unwrap().unwrap(), "slow");
        assert!(set.join_next().await.is_none());
        // A task spawned elsewhere can join the set.
        let id = set.insert(keel::spawn(async { "inserted" }));
        assert_eq!(set.len(), 1);
        assert_ne!(id.as_u64(), 0);
        assert_eq!(set.join_next().await.unwrap().unwrap(), "inserted");
        // A panic is an error, not a lost task.
        set.spawn(async { panic!("boom") });
        assert!(set.join_next().await.unwrap().unwrap_err().is_panic());
    });
}

#[test]
fn dropping_a_join_set_aborts_its_tasks() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let dropped = Arc::new(AtomicBool::new(false));
    rt.block_on(async {
        let mut set = JoinSet::new();
        let guard = support::DropFlag(dropped.clone());
        set.spawn(async move {
            let _guard = guard;
            keel::time::sleep(Duration::from_secs(3600)).await;
        });
        drop(set);
    });
    wait_until("the aborted task is dropped", || {
        dropped.load(Ordering::SeqCst)
    });
}

#[test]
fn abort_all_and_shutdown_cancel_and_empty_the_set() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    rt.block_on(async {
        let mut set = JoinSet::new();
        for _ in 0..4 {
            set.spawn(keel::time::sleep(Duration::from_secs(3600)));
        }
        set.abort_all();
        let mut cancelled = 0;
        while let Some(result) = set.join_next().await {
            assert!(result.unwrap_err().is_cancelled());
            cancelled += 1;
        }
        assert_eq!(cancelled, 4);
        for _ in 0..3 {
            set.spawn(keel::time::sleep(Duration::from_secs(3600)));
        }
        set.shutdown().await;
        assert!(set.is_empty());
    });
}
