//! Timers: `sleep`, `sleep_until`, `timeout` and `interval`.
//!
//! Timers never fire early (that is a guarantee, so it is asserted);
//! how late they fire is a performance figure and is not asserted here.

#[macro_use]
mod support;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::time::{interval, sleep, sleep_until, timeout, Elapsed};
use keel::Runtime;
use support::{busy_for, DropFlag};

rt_test! {
    fn sleeps_complete_no_earlier_than_asked(rt) {
        let handles: Vec<_> = (0..60u64)
            .map(|i| {
                let asked = Duration::from_micros(i * 397 % 12_000);
                rt.spawn(async move {
                    let start = Instant::now();
                    sleep(asked).await;
                    (asked, start.elapsed())
                })
            })
            .collect();
        rt.block_on(async {
            for handle in handles {
                let (asked, slept) = handle.await.unwrap();
                assert!(slept >= asked, "asked {asked:?}, woke after {slept:?}");
            }
        });
    }

    #[cfg_attr(miri, ignore = "wall-clock order: Miri's clock runs with the interpreted work, which eats the 50 ms gaps")]
    fn timers_fire_in_deadline_order(rt) {
        // Deadlines 50 ms apart: the order checked is that of the tasks'
        // pushes after their wakes, so the gap must dwarf how long the OS
        // may hold a woken worker on a busy machine (10 ms apart flaked).
        let order = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = [150u64, 50, 100]
            .into_iter()
            .map(|ms| {
                let order = order.clone();
                rt.spawn(async move {
                    sleep(Duration::from_millis(ms)).await;
                    order.lock().unwrap().push(ms);
                })
            })
            .collect();
        rt.block_on(async {
            for handle in handles {
                handle.await.unwrap();
            }
        });
        assert_eq!(*order.lock().unwrap(), vec![50, 100, 150]);
    }

    fn a_sleep_in_block_on_is_fired_by_idle_workers(rt) {
        // Every worker is parked; the timer is filed from a thread that is
        // not a worker, so a worker must be woken to watch it.
        std::thread::sleep(Duration::from_millis(20));
        let start = Instant::now();
        rt.block_on(sleep(Duration::from_millis(15)));
        assert!(start.elapsed() >= Duration::from_millis(15));
        let deadline = Instant::now() + Duration::from_millis(5);
        rt.block_on(sleep_until(deadline));
        assert!(Instant::now() >= deadline);
    }

    fn timers_fire_while_every_worker_is_busy(rt) {
        let stop = Arc::new(AtomicBool::new(false));
        for _ in 0..8 {
            let stop = stop.clone();
            rt.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    busy_for(Duration::from_micros(200));
                    keel::yield_now().await;
                }
            });
        }
        let slept = rt.block_on(rt.spawn(async {
            let start = Instant::now();
            sleep(Duration::from_millis(10)).await;
            start.elapsed()
        }));
        stop.store(true, Ordering::Relaxed);
        assert!(slept.unwrap() >= Duration::from_millis(10));
    }

    fn timeout_returns_the_output_when_the_future_wins(rt) {
        let out = rt.block_on(rt.spawn(timeout(Duration::from_secs(30), async {
            sleep(Duration::from_millis(2)).await;
            5
        })));
        assert_eq!(out.unwrap(), Ok(5));
        assert_eq!(rt.stats().pending_timers, 0, "the timeout's own timer is cancelled");
    }

    fn timeout_elapses_and_drops_the_future(rt) {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = DropFlag(dropped.clone());
        let start = Instant::now();
        let out = rt.block_on(rt.spawn(async move {
            let _guard = guard;
            timeout(Duration::from_millis(10), std::future::pending::<()>()).await
        }));
        assert!(matches!(out.unwrap(), Err(Elapsed { .. })));
        assert!(start.elapsed() >= Duration::from_millis(10));
        assert!(dropped.load(Ordering::SeqCst));
        assert_eq!(rt.stats().pending_timers, 0);
    }

    fn interval_ticks_once_per_period_in_phase(rt) {
        let ticks = rt.block_on(rt.spawn(async {
            let mut every = interval(Duration::from_millis(4));
            let mut ticks = Vec::new();
            for _ in 0..5 {
                ticks.push(every.tick().await);
            }
            ticks
        })).unwrap();
        // In phase: each tick is a whole number of periods after the last
        // (more than one only if the task was late by a period or more).
        let period = Duration::from_millis(4);
        for pair in ticks.windows(2) {
            let gap = pair[1] - pair[0];
            assert!(
                gap >= period && gap.as_nanos() % period.as_nanos() == 0,
                "ticks {gap:?} apart with a {period:?} period"
            );
        }
    }
}

#[test]
fn interval_skips_missed_ticks_instead_of_bursting() {
    let period = Duration::from_millis(10);
    let rt = Runtime::builder().workers(1).build().unwrap();
    let ticks = rt
        .block_on(rt.spawn(async move {
            let mut every = interval(period);
            let first = every.tick().await;
            // Busy for three and a half periods (or longer, if the thread
            // is preempted): three ticks or more are missed.
            busy_for(Duration::from_millis(35));
            let late = every.tick().await;
            let asked = Instant::now();
            let next = every.tick().await;
            (first, late, asked, next)
        }))
        .unwrap();
    let (first, late, asked, next) = ticks;
    assert_eq!(late - first, period, "the overdue tick comes at once");
    // A burst would return the missed ticks (first + 20 ms, + 30 ms), all
    // before `asked`; skipping returns the next tick in phase after it.
    // Both hold however long the thread was preempted.
    assert!(
        next >= asked,
        "a missed tick was returned: {:?} after the first, asked at {:?}",
        next - first,
        asked - first
    );
    assert_eq!(
        (next - first).as_nanos() % period.as_nanos(),
        0,
        "then the schedule resumes in phase"
    );
}

#[test]
fn dropping_a_sleep_cancels_its_timer_and_shutdown_leaks_nothing() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let held = Arc::new(());
    for _ in 0..100 {
        let held = held.clone();
        rt.spawn(async move {
            let _held = held;
            sleep(Duration::from_secs(3600)).await;
        });
    }
    support::wait_until("100 timers are filed", || rt.stats().pending_timers == 100);
    let timed_out = rt.block_on(timeout(
        Duration::from_millis(1),
        sleep(Duration::from_secs(3600)),
    ));
    assert!(timed_out.is_err());
    assert_eq!(
        rt.stats().pending_timers,
        100,
        "both of the timeout's timers are gone"
    );
    drop(rt);
    assert_eq!(Arc::strong_count(&held), 1, "sleeping tasks were dropped");
}

#[test]
fn polling_a_sleep_outside_a_runtime_panics_with_a_clear_message() {
    let mut pending = Box::pin(sleep(Duration::from_secs(60)));
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = pending.as_mut().poll(&mut cx);
    }))
    .unwrap_err();
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .unwrap_or_default()
        .to_owned()
        + panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
    assert!(message.contains("not inside a keel runtime"), "{message}");
}
