//! No wake-up is ever lost: a million cross-thread wakes all complete.
//!
//! Wakes come from both directions the scheduler distinguishes: task to
//! task (pushed on the waking worker's queue, often stolen by the other)
//! and plain thread to task (pushed on the injector). Every exchange is a
//! strict handshake, so a single lost wake-up stalls it for good; a
//! watchdog turns that into a failure instead of a hung suite. Parking is
//! most frequent with no spinning, which is where lost wake-ups hide.

#[macro_use]
mod support;

use std::sync::Arc;
use std::time::Duration;

use keel::{Runtime, SpinPolicy};
use support::{within, Signal};

/// Task pairs that ping-pong with each other.
const PAIRS: usize = 8;
/// Plain threads that ping-pong with a task each.
const THREADS: usize = 2;

/// Runs `wakes` wakes in all (half task↔task, half thread↔task) and
/// returns how many completed.
fn ping_pong(rt: &Runtime, wakes: usize) -> usize {
    let pair_rounds = wakes / 2 / PAIRS / 2;
    let thread_rounds = wakes / 2 / THREADS / 2;
    let mut handles = Vec::new();
    for _ in 0..PAIRS {
        let (ping, pong) = (Arc::new(Signal::default()), Arc::new(Signal::default()));
        let (ping2, pong2) = (ping.clone(), pong.clone());
        handles.push(rt.spawn(async move {
            for _ in 0..pair_rounds {
                ping.notify();
                pong.wait().await;
            }
            pair_rounds * 2
        }));
        handles.push(rt.spawn(async move {
            for _ in 0..pair_rounds {
                ping2.wait().await;
                pong2.notify();
            }
            0
        }));
    }
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        let (to_task, to_thread) = (Arc::new(Signal::default()), Arc::new(Signal::default()));
        let (to_task2, to_thread2) = (to_task.clone(), to_thread.clone());
        handles.push(rt.spawn(async move {
            for _ in 0..thread_rounds {
                to_task2.wait().await;
                to_thread2.notify();
            }
            0
        }));
        threads.push(std::thread::spawn(move || {
            for _ in 0..thread_rounds {
                to_task.notify();
                while !to_thread.set_and_clear() {
                    std::thread::yield_now();
                }
            }
            thread_rounds * 2
        }));
    }
    let from_tasks: usize = rt.block_on(async move {
        let mut total = 0;
        for handle in handles {
            total += handle.await.unwrap();
        }
        total
    });
    from_tasks
        + threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum::<usize>()
}

#[test]
fn a_million_cross_thread_wakes_all_complete() {
    const WAKES: usize = 1_000_000;
    let done = within(Duration::from_secs(300), || {
        let rt = Runtime::builder()
            .workers(4)
            .spin(SpinPolicy::None)
            .build()
            .unwrap();
        ping_pong(&rt, WAKES)
    });
    assert_eq!(done, WAKES);
}

rt_test! {
    fn many_wakes_complete_in_every_configuration(rt) {
        const WAKES: usize = 40_000;
        assert_eq!(ping_pong(rt, WAKES), WAKES);
    }
}
