//! A worker busy with long polls of its own class still looks at its
//! sibling's queues for a class that is owed the CPU, within one poll: an
//! urgent task queued on a sibling in a long poll does not wait for a
//! count of the busy worker's picks.
//!
//! Two workers. Bulk tasks keep one worker busy with 300 µs polls. A task
//! on the other worker spawns an urgent task (into its own queue) and then
//! computes for 20 ms, so the urgent task can only run soon if the busy
//! worker takes it. The bulk tasks count their polls: the urgent task
//! notes how many began between its spawn and its first poll. Looking at
//! siblings every eighth pick, that count would be up to seven; looking
//! every 100 µs of polling, it is at most one or two.

#[macro_use]
mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use keel::{Class, Runtime, SpinPolicy};
use support::{busy_for, thread_tag};

/// Trials, and how many of them must show the urgent task taken at once.
const TRIALS: usize = 10;
const REQUIRED: usize = 8;

/// Bulk polls that may begin between the spawn and the urgent task's
/// first poll: the one under way, and one in a race with the spawn.
const MAX_BULK_POLLS_BETWEEN: u64 = 2;

#[test]
fn an_urgent_task_on_a_sibling_in_a_long_poll_is_taken_within_one_poll() {
    let rt = Runtime::builder()
        .workers(2)
        .spin(SpinPolicy::None)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let bulk_polls = Arc::new(AtomicU64::new(0));
    for _ in 0..3 {
        let (stop, bulk_polls) = (stop.clone(), bulk_polls.clone());
        rt.spawn_in(Class::BULK, async move {
            while !stop.load(SeqCst) {
                bulk_polls.fetch_add(1, SeqCst);
                busy_for(Duration::from_micros(300));
                keel::yield_now().await;
            }
        });
    }
    std::thread::sleep(Duration::from_millis(50));

    let mut taken_at_once = 0;
    let mut seen = Vec::new();
    for _ in 0..TRIALS {
        let bulk_polls = bulk_polls.clone();
        let trial = rt.spawn_in(Class::NORMAL, async move {
            let spawner = thread_tag();
            let before = bulk_polls.load(SeqCst);
            let ran_on = Arc::new(AtomicUsize::new(0));
            let between = Arc::new(AtomicU64::new(u64::MAX));
            let urgent = keel::spawn_in(Class::URGENT, {
                let (ran_on, between, bulk_polls) =
                    (ran_on.clone(), between.clone(), bulk_polls.clone());
                async move {
                    between.store(bulk_polls.load(SeqCst) - before, SeqCst);
                    ran_on.store(thread_tag(), SeqCst);
                }
            });
            // Holds this worker: the urgent task, queued here, can only
            // run soon on the other one.
            busy_for(Duration::from_millis(20));
            urgent.await.unwrap();
            (ran_on.load(SeqCst) != spawner, between.load(SeqCst))
        });
        let (elsewhere, between) = rt.block_on(trial).unwrap();
        seen.push((elsewhere, between));
        eprintln!("trial: ran elsewhere {elsewhere}, bulk polls between {between}");
        if elsewhere && between <= MAX_BULK_POLLS_BETWEEN {
            taken_at_once += 1;
        }
    }
    stop.store(true, SeqCst);
    assert!(
        taken_at_once >= REQUIRED,
        "the urgent task was taken by the busy worker within \
         {MAX_BULK_POLLS_BETWEEN} bulk polls in {taken_at_once} of {TRIALS} trials \
         (ran elsewhere, bulk polls between): {seen:?}"
    );
}
