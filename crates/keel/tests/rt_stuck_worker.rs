//! A worker that stops making progress (its thread preempted by the kernel,
//! or in a poll that blocks) does not keep the tasks queued on it: a
//! sibling takes them, even when the sibling has work of its own and would
//! never run dry and steal.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel::{Runtime, SpinPolicy};
use support::{thread_tag, wait_until};

mod support;

/// How long the blocking poll holds its worker.
const BLOCK: Duration = Duration::from_millis(500);

/// How long the two yielding tasks may take to settle on two workers.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

#[test]
fn a_task_queued_behind_a_blocking_poll_is_taken_by_a_busy_sibling() {
    let rescues = queued_task_behind_a_blocking_poll(true);
    assert!(rescues >= 1, "the stats count no rescue");
}

/// The rescue does not depend on the accounting: switched off (as the
/// overhead benchmark does), the scheduler is the same.
#[test]
fn the_rescue_works_with_the_accounting_off() {
    queued_task_behind_a_blocking_poll(false);
}

/// Blocks one of two workers in a poll while a task is queued behind it
/// and the other worker has local work of its own; fails unless the queued
/// task runs during the blocking poll. Returns the rescues the stats
/// counted (zero with the accounting off).
fn queued_task_behind_a_blocking_poll(accounting: bool) -> u64 {
    let rt = Runtime::builder()
        .workers(2)
        .spin(SpinPolicy::None)
        .accounting(accounting)
        .build()
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let other_thread = Arc::new(AtomicUsize::new(0));

    // Keeps one worker busy with local work: it always has this task in
    // its queue, so it never runs dry and never steals in the usual way.
    let busy = rt.spawn({
        let (done, other_thread) = (done.clone(), other_thread.clone());
        async move {
            let deadline = Instant::now() + SETTLE_LIMIT + BLOCK * 4;
            while !done.load(SeqCst) && Instant::now() < deadline {
                other_thread.store(thread_tag(), SeqCst);
                keel::yield_now().await;
            }
        }
    });

    let blocker = rt.spawn({
        let (done, other_thread) = (done.clone(), other_thread.clone());
        async move {
            // Yield until the two tasks have run on different workers for
            // a while: each then has its own worker.
            let deadline = Instant::now() + SETTLE_LIMIT;
            let mut apart = 0;
            while apart < 100 {
                let theirs = other_thread.load(SeqCst);
                apart = if theirs != 0 && theirs != thread_tag() {
                    apart + 1
                } else {
                    0
                };
                assert!(
                    Instant::now() < deadline,
                    "two yielding tasks never settled on two workers"
                );
                keel::yield_now().await;
            }
            // Queued on this worker, which then blocks inside this poll.
            let ran_at = Arc::new(Mutex::new(None));
            let queued = keel::spawn({
                let ran_at = ran_at.clone();
                async move {
                    *ran_at.lock().unwrap() = Some(Instant::now());
                }
            });
            let blocked_at = Instant::now();
            std::thread::sleep(BLOCK);
            let ran_at = ran_at.lock().unwrap().take();
            done.store(true, SeqCst);
            queued.await.unwrap();
            (blocked_at, ran_at)
        }
    });

    let before = rt.stats();
    let (blocked_at, ran_at) = rt.block_on(blocker).unwrap();
    rt.block_on(busy).unwrap();
    let rescues = || -> u64 {
        rt.stats()
            .workers
            .iter()
            .zip(&before.workers)
            .map(|(now, then)| now.since(then).rescues)
            .sum()
    };
    if accounting {
        // Published when the workers park, which they do once idle.
        wait_until("the stats count a rescue", || rescues() >= 1);
    }
    let ran_at = ran_at.unwrap_or_else(|| {
        panic!("the queued task waited for its worker's blocking poll of {BLOCK:?} to end")
    });
    let rescues = rescues();
    eprintln!(
        "accounting {accounting}: the queued task ran {:?} into the blocking poll; {rescues} rescues",
        ran_at.duration_since(blocked_at)
    );
    rescues
}
