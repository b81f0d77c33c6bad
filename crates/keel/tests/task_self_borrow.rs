//! Tasks whose futures borrow their own state across an await: the
//! everyday shape of async code, and the one an executor most easily
//! makes undefined behaviour of.
//!
//! An `async` block that holds a `&mut` into one of its own locals (a
//! `Vec`, a `String`, a slice of an array, a child `async fn` borrowing
//! its parent's data) across a suspension point is a self-referential
//! value. Whatever polls it must reach it only through the `Pin<&mut _>`
//! it was given: a shared reborrow of the future (`&Wrapper` taken to
//! read a field beside it) is a read of its bytes, and under Rust's
//! aliasing rules it invalidates the `&mut` the future holds into itself;
//! the next write through it is then undefined behaviour.
//!
//! These tests give the runtime futures of that shape and suspend them in
//! every way a task can be suspended and resumed: `yield_now`, a wake
//! from another task, a wake from a plain thread, a timer, an abort (the
//! future is dropped mid-borrow), on the workers, on the urgent lane and
//! through `block_on`. Each checks that the data written through the
//! borrow is what the task returns. Run natively they check the results;
//! run under Miri (CI does, with Tree Borrows) they also check every
//! access the runtime makes to the futures it polls.

#[macro_use]
mod support;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;

use keel::{Class, Runtime, UrgentLane};

use support::{within, DropFlag, TEST_LIMIT};

/// Suspension points per task: enough to resume each borrow several
/// times, few enough for Miri.
const ROUNDS: usize = 4;

/// How long each timer waits. Under Miri the clock is virtual and runs
/// far ahead of the work done (it jumps when every thread waits), so a
/// short sleep would often be over before its first poll and never
/// suspend the task; a long one costs nothing there, since the wait is
/// skipped.
const TIMER: Duration = if cfg!(miri) {
    Duration::from_secs(1)
} else {
    Duration::from_millis(1)
};

/// A one-worker runtime (what Miri runs; more workers only add threads
/// for it to interleave, the aliasing rules are per access).
fn runtime() -> Runtime {
    Runtime::builder()
        .workers(1)
        .build()
        .expect("runtime builds")
}

/// Runs `future` as a task spawned on a fresh [`runtime`], under the
/// watchdog, and returns its output.
fn spawned<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    within(TEST_LIMIT, move || {
        let rt = runtime();
        rt.block_on(async { keel::spawn(future).await.expect("the task finishes") })
    })
}

/// Pushes through a `&mut Vec` held across every yield.
async fn push_across_yields(rounds: usize) -> Vec<usize> {
    let mut values = Vec::new();
    let borrowed = &mut values;
    for i in 0..rounds {
        borrowed.push(i);
        keel::yield_now().await;
        borrowed.push(i * 10);
    }
    values
}

/// Appends through a `&mut String` held across every await of another
/// task's `JoinHandle` (a wake from another task).
async fn append_across_joins(rounds: usize) -> String {
    let mut text = String::new();
    let borrowed = &mut text;
    for i in 0..rounds {
        borrowed.push('a');
        let n = keel::spawn(async move {
            keel::yield_now().await;
            i
        })
        .await
        .expect("the child finishes");
        borrowed.push_str(&n.to_string());
    }
    text
}

/// Writes through a slice of a local array held across every sleep.
async fn fill_across_timers(rounds: usize) -> [u32; 8] {
    let mut array = [0u32; 8];
    let slice = &mut array[2..6];
    for i in 0..rounds {
        slice[i % slice.len()] += 1;
        keel::time::sleep(TIMER).await;
        slice[(i + 1) % slice.len()] += 10;
    }
    array
}

/// A child `async fn` that borrows its parent's data, held across yields
/// inside the child, and the parent's own borrow across the child's await.
async fn nested_borrow(rounds: usize) -> Vec<u8> {
    async fn child(data: &mut Vec<u8>, byte: u8) {
        data.push(byte);
        keel::yield_now().await;
        let last = data.len() - 1;
        data[last] += 1;
    }
    let mut data = Vec::new();
    let parent = &mut data;
    for i in 0..rounds {
        child(parent, i as u8 * 2).await;
        parent.push(255);
        keel::yield_now().await;
    }
    data
}

/// What `push_across_yields(rounds)` returns.
fn expected_pushes(rounds: usize) -> Vec<usize> {
    (0..rounds).flat_map(|i| [i, i * 10]).collect()
}

/// What `append_across_joins(rounds)` returns.
fn expected_appends(rounds: usize) -> String {
    (0..rounds).map(|i| format!("a{i}")).collect()
}

/// What `fill_across_timers(rounds)` returns.
fn expected_fill(rounds: usize) -> [u32; 8] {
    let mut array = [0u32; 8];
    for i in 0..rounds {
        array[2 + i % 4] += 1;
        array[2 + (i + 1) % 4] += 10;
    }
    array
}

/// What `nested_borrow(rounds)` returns.
fn expected_nested(rounds: usize) -> Vec<u8> {
    (0..rounds).flat_map(|i| [i as u8 * 2 + 1, 255]).collect()
}

#[test]
fn a_spawned_task_borrows_its_state_across_yields() {
    assert_eq!(spawned(push_across_yields(ROUNDS)), expected_pushes(ROUNDS));
}

#[test]
fn a_spawned_task_borrows_its_state_across_wakes_by_other_tasks() {
    assert_eq!(
        spawned(append_across_joins(ROUNDS)),
        expected_appends(ROUNDS)
    );
}

#[test]
fn a_spawned_task_borrows_its_state_across_timers() {
    assert_eq!(spawned(fill_across_timers(ROUNDS)), expected_fill(ROUNDS));
}

#[test]
fn a_nested_async_fn_borrows_its_parent_across_yields() {
    assert_eq!(spawned(nested_borrow(ROUNDS)), expected_nested(ROUNDS));
}

#[test]
fn block_on_borrows_its_state_across_every_kind_of_wake() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let (values, text, array, data) = rt.block_on(async {
            (
                push_across_yields(ROUNDS).await,
                append_across_joins(ROUNDS).await,
                fill_across_timers(ROUNDS).await,
                nested_borrow(ROUNDS).await,
            )
        });
        assert_eq!(values, expected_pushes(ROUNDS));
        assert_eq!(text, expected_appends(ROUNDS));
        assert_eq!(array, expected_fill(ROUNDS));
        assert_eq!(data, expected_nested(ROUNDS));
    });
}

#[test]
fn tasks_of_every_class_borrow_their_state() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let results = rt.block_on(async {
            let handles: Vec<_> = [Class::URGENT, Class::NORMAL, Class::BULK]
                .into_iter()
                .map(|class| keel::spawn_in(class, push_across_yields(ROUNDS)))
                .collect();
            let mut results = Vec::new();
            for handle in handles {
                results.push(handle.await.expect("the task finishes"));
            }
            results
        });
        for values in results {
            assert_eq!(values, expected_pushes(ROUNDS));
        }
    });
}

#[test]
fn urgent_tasks_on_the_lane_borrow_their_state() {
    within(TEST_LIMIT, || {
        let rt = Runtime::builder()
            .workers(1)
            .urgent_lane(UrgentLane::new())
            .build()
            .expect("runtime builds");
        let (values, array, data) = rt.block_on(async {
            let values = keel::spawn_in(Class::URGENT, push_across_yields(ROUNDS));
            let array = keel::spawn_in(Class::URGENT, fill_across_timers(ROUNDS));
            let data = keel::spawn_in(Class::URGENT, nested_borrow(ROUNDS));
            (
                values.await.expect("the task finishes"),
                array.await.expect("the task finishes"),
                data.await.expect("the task finishes"),
            )
        });
        assert_eq!(values, expected_pushes(ROUNDS));
        assert_eq!(array, expected_fill(ROUNDS));
        assert_eq!(data, expected_nested(ROUNDS));
    });
}

/// A wake from a plain thread, outside the runtime: the task parks on a
/// slot that the thread fills, with a borrow of its own state held across.
#[test]
fn a_task_borrows_its_state_across_wakes_from_a_thread() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let slot: Arc<Mutex<(Option<usize>, Option<Waker>)>> = Arc::default();
        let task_slot = slot.clone();
        let handle = rt.spawn(async move {
            let mut received = Vec::new();
            let borrowed = &mut received;
            for _ in 0..ROUNDS {
                let value = std::future::poll_fn(|cx| {
                    let mut slot = task_slot.lock().unwrap();
                    match slot.0.take() {
                        Some(value) => Poll::Ready(value),
                        None => {
                            slot.1 = Some(cx.waker().clone());
                            Poll::Pending
                        }
                    }
                })
                .await;
                borrowed.push(value);
            }
            received
        });
        let mut sent = 0;
        while sent < ROUNDS {
            let waker = {
                let mut slot = slot.lock().unwrap();
                if slot.0.is_some() || slot.1.is_none() {
                    None
                } else {
                    slot.0 = Some(sent);
                    sent += 1;
                    slot.1.take()
                }
            };
            match waker {
                Some(waker) => waker.wake(),
                None => std::thread::yield_now(),
            }
        }
        let received = rt.block_on(handle).expect("the task finishes");
        assert_eq!(received, (0..ROUNDS).collect::<Vec<_>>());
    });
}

/// An abort lands while the task is suspended with a live borrow of its
/// state: the future is dropped mid-borrow, and its destructors run.
#[test]
fn an_aborted_task_is_dropped_while_borrowing_its_state() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let dropped = Arc::new(AtomicBool::new(false));
        let pushed = Arc::new(AtomicUsize::new(0));
        let (flag, count) = (dropped.clone(), pushed.clone());
        let handle = rt.spawn(async move {
            let _flag = DropFlag(flag);
            let mut values = Vec::new();
            let borrowed = &mut values;
            loop {
                borrowed.push(count.fetch_add(1, SeqCst));
                keel::yield_now().await;
                let last = borrowed.len() - 1;
                borrowed[last] += 1;
            }
        });
        support::wait_until("the task has run twice", || pushed.load(SeqCst) >= 2);
        handle.abort();
        let outcome = rt.block_on(handle);
        assert!(outcome.unwrap_err().is_cancelled());
        assert!(dropped.load(SeqCst), "the future was dropped");
    });
}
