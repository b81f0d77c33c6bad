//! Waking many tasks from outside the workers with one notification.
//!
//! A thread that is not a worker and completes many operations at once
//! (the log's writer answering a batch of appends) wakes their tasks one
//! after another. Each wake queues its task in the class's injector and,
//! if every worker sleeps, unparks one. When that thread shares a CPU with
//! the worker, the kernel may switch to the worker right at the first
//! unpark: the worker runs the one task queued so far, finds nothing more,
//! and parks again; only then does the thread go on to the next wake, and
//! the same happens again. A batch of `n` wakes then costs `n` round trips
//! between the two threads instead of one.
//!
//! [`together`] defers the notifications of the wakes made inside it to
//! its end: every task is queued first, then each runtime that received
//! one is notified once.
//!
//! # Why no wake-up is lost
//!
//! A deferred notification is the notifier's half of the idle protocol
//! (see [`super::idle`]) made later: the task is pushed, the `SeqCst`
//! fence follows the push at once (in `Shared::queue_injected`), and the
//! read of the idle state comes at the end of the batch. A notifier that
//! reads late is one the protocol already allows for, a slow one: a worker
//! that parked in between is unparked, and one still searching finds the
//! task. The end runs in a drop guard, so a panic inside the batch still
//! notifies.
//!
//! Wakers of other runtimes (tokio's, a `block_on` thread's) are not
//! deferred; nor are wakes made on a worker, which go to its own queues.

use std::cell::RefCell;
use std::sync::Arc;

use super::Shared;

thread_local! {
    /// The runtimes that received a task inside the innermost open batch
    /// on this thread, or `None` outside any batch.
    static DEFERRED: RefCell<Option<Vec<Arc<Shared>>>> = const { RefCell::new(None) };
}

/// Runs `wakes`, deferring the worker notifications of the keel tasks it
/// wakes to its end (see the module docs). A batch inside another one
/// belongs to the outer batch.
pub(crate) fn together<R>(wakes: impl FnOnce() -> R) -> R {
    let opened = DEFERRED.with(|deferred| {
        let mut deferred = deferred.borrow_mut();
        let outside = deferred.is_none();
        if outside {
            *deferred = Some(Vec::new());
        }
        outside
    });
    // Only the outermost batch makes an `End`: its drop is the
    // notification.
    let _end = if opened { Some(End) } else { None };
    wakes()
}

/// The end of the outermost batch: notifies every runtime it queued to.
struct End;

impl Drop for End {
    fn drop(&mut self) {
        let runtimes = DEFERRED.with(|deferred| deferred.borrow_mut().take());
        for shared in runtimes.into_iter().flatten() {
            shared.notify_one();
        }
    }
}

/// Called after a task was queued in `shared`'s injector from outside its
/// workers: returns `true` if a batch is open on this thread and will
/// notify `shared` at its end, `false` if the caller must notify now.
pub(super) fn defer(shared: &Arc<Shared>) -> bool {
    DEFERRED
        .try_with(|deferred| {
            let mut deferred = deferred.borrow_mut();
            let Some(runtimes) = deferred.as_mut() else {
                return false;
            };
            if !runtimes.iter().any(|r| Arc::ptr_eq(r, shared)) {
                runtimes.push(shared.clone());
            }
            true
        })
        // A wake from a thread-local destructor, after this one is gone.
        .unwrap_or(false)
}

/// How many runtimes the batch open on this thread will notify at its end
/// (zero outside any batch).
#[cfg(all(test, not(loom)))]
pub(crate) fn deferred_runtimes() -> usize {
    DEFERRED.with(|deferred| deferred.borrow().as_ref().map_or(0, Vec::len))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::future::poll_fn;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Poll, Waker};
    use std::thread;
    use std::time::Duration;

    use super::{deferred_runtimes, together};
    use crate::{JoinHandle, Runtime};

    /// Tasks that wait for a flag, their wakers left where a thread outside
    /// the runtime can take them.
    struct Waiters {
        open: Arc<AtomicBool>,
        wakers: Arc<Mutex<Vec<Waker>>>,
        handles: Vec<JoinHandle<()>>,
    }

    /// Spawns `count` tasks on `rt` (of one worker) that wait for one
    /// flag, and returns once every one of them has left its waker and
    /// the worker has parked since: no task's poll is still running, so a
    /// wake schedules its task from the waking thread (a wake during the
    /// poll would leave the scheduling to the worker).
    fn waiters(rt: &Runtime, count: usize) -> Waiters {
        let open = Arc::new(AtomicBool::new(false));
        let wakers = Arc::new(Mutex::new(Vec::new()));
        let handles = (0..count)
            .map(|_| {
                let (open, wakers) = (open.clone(), wakers.clone());
                rt.spawn(async move {
                    let mut registered = false;
                    poll_fn(|cx| {
                        if open.load(Ordering::Acquire) {
                            return Poll::Ready(());
                        }
                        if !registered {
                            registered = true;
                            wakers.lock().unwrap().push(cx.waker().clone());
                        }
                        Poll::Pending
                    })
                    .await;
                })
            })
            .collect();
        while wakers.lock().unwrap().len() < count {
            thread::sleep(Duration::from_millis(1));
        }
        while rt.handle().shared.idle.sleeping() == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        Waiters {
            open,
            wakers,
            handles,
        }
    }

    impl Waiters {
        /// Opens the flag and wakes every task, from this thread.
        fn wake_all(&self) {
            self.open.store(true, Ordering::Release);
            for waker in self.wakers.lock().unwrap().drain(..) {
                waker.wake();
            }
        }

        /// Waits for every task to finish.
        fn join(self, rt: &Runtime) {
            rt.block_on(async {
                for handle in self.handles {
                    handle.await.unwrap();
                }
            });
        }
    }

    fn runtime() -> Runtime {
        Runtime::builder().workers(1).build().unwrap()
    }

    /// Wakes inside a batch queue their tasks and leave one notification
    /// per runtime to the batch's end, which runs them all.
    #[test]
    fn a_batch_notifies_each_runtime_once_at_its_end() {
        let (first, second) = (runtime(), runtime());
        let (a, b) = (waiters(&first, 8), waiters(&second, 3));
        assert_eq!(deferred_runtimes(), 0);
        together(|| {
            a.wake_all();
            assert_eq!(deferred_runtimes(), 1);
            b.wake_all();
            assert_eq!(deferred_runtimes(), 2);
        });
        assert_eq!(deferred_runtimes(), 0);
        a.join(&first);
        b.join(&second);
    }

    /// A batch inside another belongs to the outer one: its end notifies
    /// nobody, the outer end does.
    #[test]
    fn an_inner_batch_leaves_the_notification_to_the_outer() {
        let rt = runtime();
        let waiting = waiters(&rt, 4);
        together(|| {
            together(|| waiting.wake_all());
            assert_eq!(deferred_runtimes(), 1);
        });
        assert_eq!(deferred_runtimes(), 0);
        waiting.join(&rt);
    }

    /// A batch that panics still notifies: the tasks it woke run.
    #[test]
    fn a_panicking_batch_still_notifies() {
        let rt = runtime();
        let waiting = waiters(&rt, 4);
        let result = catch_unwind(AssertUnwindSafe(|| {
            together(|| {
                waiting.wake_all();
                panic!("in the batch");
            })
        }));
        assert!(result.is_err());
        assert_eq!(deferred_runtimes(), 0);
        waiting.join(&rt);
    }

    /// Wakers that are not a keel runtime's are not deferred.
    #[test]
    fn other_wakers_wake_at_once() {
        let woken = Arc::new(AtomicBool::new(false));
        struct Flag(Arc<AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::Release);
            }
        }
        let waker = Waker::from(Arc::new(Flag(woken.clone())));
        together(|| {
            waker.wake_by_ref();
            assert!(woken.load(Ordering::Acquire));
            assert_eq!(deferred_runtimes(), 0);
        });
    }
}
