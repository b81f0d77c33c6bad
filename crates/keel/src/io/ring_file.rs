//! File syncs that complete on the ring: on an io_uring reactor,
//! [`File::sync_data`](crate::fs::File::sync_data) and
//! [`File::sync_all`](crate::fs::File::sync_all) are `IORING_OP_FSYNC`s
//! submitted with the worker's other operations, and the task is woken
//! by their completion.
//!
//! # Why
//!
//! On epoll a sync is a job for the blocking pool: the task hands it to a
//! pool thread, which blocks in `fdatasync` and then wakes the task from
//! outside the workers, two thread hand-offs around the device's time.
//! On the ring the kernel runs the sync in its own workers and posts the
//! completion to the queue the workers already read: no pool thread, and
//! the wake is a reap, as a socket's event is. That holds for a sync a
//! worker's task asks for; one asked for off the workers goes to the
//! pool (see [`sync_on_ring`]).
//!
//! # Invariants
//!
//! - **The descriptor outlives the kernel's use of it.** An operation
//!   holds a reference to the file (an `Arc` of the `std::fs::File`), and
//!   the operation in flight holds one to the operation (its user data is
//!   an `Arc` turned into a pointer), taken back only when its completion
//!   is reaped or when the ring itself drops after cancelling it. A task
//!   that stops waiting (its future dropped) drops its own reference
//!   only: the file is closed after the completion, never under the sync.
//! - **A result is reported once, to the waiting task**: the completion
//!   moves the operation from in flight to done, and the future takes the
//!   result. A sync the kernel cancelled (the ring's end) is reported as
//!   an error, never as success: nothing says the data reached the
//!   device.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::lock;

/// Which sync an operation asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncKind {
    /// `fdatasync`: the data, and the metadata needed to read it back.
    Data,
    /// `fsync`: the data and all of the metadata.
    All,
}

/// Where an operation stands.
#[derive(Debug)]
enum Phase {
    /// Waiting for the ring's next submission.
    Queued,
    /// The kernel holds it.
    InFlight,
    /// Completed; the result is taken by the waiting task.
    Done(io::Result<()>),
    /// The result was taken.
    Taken,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    waker: Option<Waker>,
}

/// One sync of one file (see the module docs).
#[derive(Debug)]
pub(crate) struct FileSync {
    file: Arc<File>,
    kind: SyncKind,
    state: Mutex<State>,
}

impl FileSync {
    /// A sync of `file`, queued by nobody yet.
    fn new(file: Arc<File>, kind: SyncKind) -> Arc<FileSync> {
        Arc::new(FileSync {
            file,
            kind,
            state: Mutex::new(State {
                phase: Phase::Queued,
                waker: None,
            }),
        })
    }

    /// Called by the ring under its submission lock: the descriptor and
    /// the kind of sync to submit, if the operation is still queued; it is
    /// then in flight.
    pub(crate) fn take_for_submission(&self) -> Option<(RawFd, SyncKind)> {
        let mut state = lock(&self.state);
        if !matches!(state.phase, Phase::Queued) {
            return None;
        }
        state.phase = Phase::InFlight;
        Some((self.file.as_raw_fd(), self.kind))
    }

    /// The sync completed with `result` (0, or a negated OS error); the
    /// waiting task's waker goes to `wake`.
    pub(crate) fn complete(&self, result: i32, wake: &mut Vec<Waker>) {
        let outcome = if result >= 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(-result))
        };
        self.finish(outcome, wake);
    }

    /// A sync that could not be submitted (the ring refused it): the task
    /// gets `error`.
    pub(crate) fn fail(&self, error: io::Error, wake: &mut Vec<Waker>) {
        self.finish(Err(error), wake);
    }

    fn finish(&self, outcome: io::Result<()>, wake: &mut Vec<Waker>) {
        let mut state = lock(&self.state);
        state.phase = Phase::Done(outcome);
        wake.extend(state.waker.take());
    }

    fn poll_done(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut state.phase, Phase::Taken) {
            Phase::Done(outcome) => Poll::Ready(outcome),
            Phase::Taken => Poll::Ready(Err(io::Error::other("the sync's result was taken"))),
            waiting => {
                state.phase = waiting;
                match &state.waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    _ => state.waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
        }
    }
}

/// A sync of `file` on the current runtime's ring, or `None` where the
/// runtime's reactor is not a ring or the caller is not one of its
/// workers (the caller then syncs on the blocking pool). Queued at once,
/// for the worker's next look at the ring; the future waits for the
/// completion.
///
/// Off the workers (`block_on`'s thread, the urgent lane) the pool is the
/// quicker way: such a thread must not submit to the ring itself (see
/// `driver::uring`), so the sync would wait for the poller to be woken to
/// submit it, then for the poller to wake the caller (two hops where the
/// pool takes two, plus the poller's wait; 350–370 µs a write and sync
/// against the pool's 220–320 on the machine of BENCHMARKS.md, 2026-11-27).
pub(crate) fn sync_on_ring(file: &Arc<File>, kind: SyncKind) -> Option<SyncOnRing> {
    let shared = crate::runtime::context::current()?.shared;
    if !shared.reactor.completes_operations() || !shared.on_worker_thread() {
        return None;
    }
    let operation = FileSync::new(Arc::clone(file), kind);
    shared.reactor.queue_file_sync(Arc::clone(&operation));
    Some(SyncOnRing { operation })
}

/// The future of [`sync_on_ring`].
#[derive(Debug)]
pub(crate) struct SyncOnRing {
    operation: Arc<FileSync>,
}

impl std::future::Future for SyncOnRing {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.operation.poll_done(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file() -> Arc<File> {
        let path = std::env::temp_dir().join(format!(
            "keel-ring-file-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = File::create(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        Arc::new(file)
    }

    fn poll(sync: &FileSync) -> Poll<io::Result<()>> {
        sync.poll_done(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn a_sync_is_submitted_once_and_its_result_taken_once() {
        let sync = FileSync::new(temp_file(), SyncKind::Data);
        assert!(poll(&sync).is_pending());
        let (fd, kind) = sync.take_for_submission().expect("queued");
        assert_eq!((fd, kind), (sync.file.as_raw_fd(), SyncKind::Data));
        assert!(sync.take_for_submission().is_none());
        assert!(poll(&sync).is_pending());
        let mut wake = Vec::new();
        sync.complete(0, &mut wake);
        assert!(matches!(poll(&sync), Poll::Ready(Ok(()))));
        assert!(matches!(poll(&sync), Poll::Ready(Err(_))));
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn a_failed_sync_reports_the_os_error() {
        let sync = FileSync::new(temp_file(), SyncKind::All);
        sync.take_for_submission().unwrap();
        sync.complete(-libc::EIO, &mut Vec::new());
        match poll(&sync) {
            Poll::Ready(Err(error)) => assert_eq!(error.raw_os_error(), Some(libc::EIO)),
            other => panic!("{other:?}"),
        }
        // A cancelled sync is an error too: nothing says the data is on
        // the device.
        let sync = FileSync::new(temp_file(), SyncKind::Data);
        sync.take_for_submission().unwrap();
        sync.complete(-libc::ECANCELED, &mut Vec::new());
        assert!(matches!(poll(&sync), Poll::Ready(Err(_))));
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn the_waiting_task_is_woken_by_the_completion() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let sync = FileSync::new(temp_file(), SyncKind::Data);
        assert!(sync
            .poll_done(&mut Context::from_waker(&waker))
            .is_pending());
        sync.take_for_submission().unwrap();
        let mut wake = Vec::new();
        sync.complete(0, &mut wake);
        wake.into_iter().for_each(Waker::wake);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }
}
