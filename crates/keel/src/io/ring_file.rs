//! File operations that complete on the ring: on an io_uring reactor,
//! [`File::sync_data`](crate::fs::File::sync_data) and
//! [`File::sync_all`](crate::fs::File::sync_all) are `IORING_OP_FSYNC`s
//! submitted with the worker's other operations, and the task is woken
//! by their completion. A chain of positional writes ending in a sync
//! ([`write_then_sync_on_ring`]) goes to the kernel as linked entries
//! (`IOSQE_IO_LINK`), so the sync starts only once the writes are done,
//! and the task is woken once, by the last completion.
//!
//! # Why
//!
//! On epoll a sync is a job for the blocking pool: the task hands it to a
//! pool thread, which blocks in `fdatasync` and then wakes the task from
//! outside the workers, two thread hand-offs around the device's time.
//! On the ring the kernel runs the sync in its own workers and posts the
//! completion to the queue the workers already read: no pool thread, and
//! the wake is a reap, as a socket's event is. That holds for an
//! operation a worker's task asks for; one asked for off the workers
//! goes to the pool (see [`sync_on_ring`]).
//!
//! # Invariants
//!
//! - **The descriptor and the buffers outlive the kernel's use of them.**
//!   An operation holds a reference to the file (an `Arc` of the
//!   `std::fs::File`) and owns the bytes its writes take, never touched
//!   again once built; each entry in flight holds a reference to the
//!   operation (its user data is an `Arc` turned into a pointer, tagged
//!   with the entry's step), taken back only when that entry's
//!   completion is reaped or when the ring itself drops after cancelling
//!   it. A task that stops waiting (its future dropped) drops its own
//!   reference only: the file is closed and the bytes freed after the
//!   last completion, never under the kernel.
//! - **The steps of a chain reach the kernel together, in order**: they
//!   are pushed to the submission queue all at once or not at all, so a
//!   submission never ends inside a chain (which would unlink its tail).
//! - **A result is reported once, to the waiting task**: the last
//!   completion moves the operation from in flight to done, and the
//!   future takes every step's result. A step the kernel cancelled (a
//!   step before it failed or wrote less than asked, or the ring's end)
//!   is reported as an error, never as success: nothing says its data
//!   reached the device.

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

/// One step of a [`FileOp`].
#[derive(Debug)]
pub(crate) enum Step {
    /// Write all of `buf` at `offset` (one `IORING_OP_WRITE`; a shorter
    /// write ends the chain).
    Write {
        /// The bytes, read by the kernel while the step is in flight.
        buf: Vec<u8>,
        /// Where in the file.
        offset: u64,
    },
    /// Sync the file.
    Sync(SyncKind),
}

/// The most steps one operation takes: the step's index travels in its
/// user data (see `driver::uring`).
pub(crate) const MAX_STEPS: usize = 8;

/// The most bytes one write step takes (an `IORING_OP_WRITE`'s length is
/// 32 bits).
pub(crate) const MAX_WRITE: usize = u32::MAX as usize;

/// Where an operation stands.
#[derive(Debug)]
enum Phase {
    /// Waiting for the ring's next submission.
    Queued,
    /// The kernel holds this many of its steps.
    InFlight(usize),
    /// Completed; the results are taken by the waiting task.
    Done,
    /// The results were taken.
    Taken,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// Each step's outcome once known: bytes written (0 for a sync), or
    /// the error.
    results: Vec<Option<io::Result<usize>>>,
    waker: Option<Waker>,
}

/// Positional writes and syncs of one file, linked in order (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct FileOp {
    file: Arc<File>,
    steps: Vec<Step>,
    state: Mutex<State>,
}

impl FileOp {
    /// An operation of `steps` on `file`, queued by nobody yet.
    ///
    /// # Panics
    ///
    /// If `steps` is empty or longer than [`MAX_STEPS`], or a write is
    /// longer than [`MAX_WRITE`]: the callers build bounded chains.
    fn new(file: Arc<File>, steps: Vec<Step>) -> Arc<FileOp> {
        assert!(
            (1..=MAX_STEPS).contains(&steps.len()),
            "a chain of {} steps",
            steps.len()
        );
        assert!(steps
            .iter()
            .all(|step| !matches!(step, Step::Write { buf, .. } if buf.len() > MAX_WRITE)));
        let results = steps.iter().map(|_| None).collect();
        Arc::new(FileOp {
            file,
            steps,
            state: Mutex::new(State {
                phase: Phase::Queued,
                results,
                waker: None,
            }),
        })
    }

    /// Called by the ring under its submission lock: the descriptor and
    /// the steps to submit, if the operation is still queued; it is then
    /// in flight. The steps, and the bytes their writes point to, do not
    /// change or move while the operation lives.
    pub(crate) fn take_for_submission(&self) -> Option<(RawFd, &[Step])> {
        let mut state = lock(&self.state);
        if !matches!(state.phase, Phase::Queued) {
            return None;
        }
        state.phase = Phase::InFlight(self.steps.len());
        Some((self.file.as_raw_fd(), &self.steps))
    }

    /// Step `step` completed with `result` (bytes written, 0 for a sync, or
    /// a negated OS error); once every step has, the waiting task's waker
    /// goes to `wake`.
    pub(crate) fn complete(&self, step: usize, result: i32, wake: &mut Vec<Waker>) {
        let outcome = match usize::try_from(result) {
            Ok(n) => Ok(n),
            Err(_) => Err(io::Error::from_raw_os_error(-result)),
        };
        let mut state = lock(&self.state);
        if let Some(slot) = state.results.get_mut(step) {
            *slot = Some(outcome);
        }
        if let Phase::InFlight(left) = &mut state.phase {
            *left = left.saturating_sub(1);
            if *left == 0 {
                state.phase = Phase::Done;
                wake.extend(state.waker.take());
            }
        }
    }

    /// An operation that could not be submitted (the ring refused it):
    /// every step gets `error`.
    pub(crate) fn fail(&self, error: io::Error, wake: &mut Vec<Waker>) {
        let mut state = lock(&self.state);
        let (kind, message) = (error.kind(), error.to_string());
        for slot in &mut state.results {
            *slot = Some(Err(io::Error::new(kind, message.clone())));
        }
        state.phase = Phase::Done;
        wake.extend(state.waker.take());
    }

    /// Every step's result once the last is known: a write's bytes
    /// written (all of its buffer unless the kernel took less), a sync's
    /// 0, or the step's error.
    fn poll_done(&self, cx: &mut Context<'_>) -> Poll<Vec<io::Result<usize>>> {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut state.phase, Phase::Taken) {
            Phase::Done => {
                let results = std::mem::take(&mut state.results);
                Poll::Ready(results.into_iter().map(known).collect())
            }
            Phase::Taken => Poll::Ready(
                self.steps
                    .iter()
                    .map(|_| Err(io::Error::other("the operation's results were taken")))
                    .collect(),
            ),
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

/// A step's result, which its completion set.
fn known(result: Option<io::Result<usize>>) -> io::Result<usize> {
    result.unwrap_or_else(|| Err(io::Error::other("a step completed without a result")))
}

/// The current runtime, where its reactor is a ring and the caller is one
/// of its workers: where an operation queued now goes to the ring.
pub(crate) fn ring_worker() -> Option<crate::runtime::Handle> {
    crate::runtime::context::current().filter(|handle| {
        handle.shared.reactor.completes_operations() && handle.shared.on_worker_thread()
    })
}

/// Queues `steps` on `file` on the current runtime's ring, or returns
/// `None` where [`ring_worker`] finds none.
fn queue_on_ring(file: &Arc<File>, steps: Vec<Step>) -> Option<Arc<FileOp>> {
    let shared = ring_worker()?.shared;
    let operation = FileOp::new(Arc::clone(file), steps);
    shared.reactor.queue_file_op(Arc::clone(&operation));
    Some(operation)
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
    let operation = queue_on_ring(file, vec![Step::Sync(kind)])?;
    Some(SyncOnRing { operation })
}

/// The future of [`sync_on_ring`].
#[derive(Debug)]
pub(crate) struct SyncOnRing {
    operation: Arc<FileOp>,
}

impl std::future::Future for SyncOnRing {
    type Output = io::Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.operation.poll_done(cx).map(|results| {
            results
                .into_iter()
                .next()
                .unwrap_or_else(|| Err(io::Error::other("a sync without a result")))
                .map(|_| ())
        })
    }
}

/// Writes each of `writes` (bytes, offset) to `file` in order, then syncs
/// it as `kind`, all linked on the current runtime's ring; `None` where
/// [`sync_on_ring`] would give `None` (the caller then writes and syncs
/// on its own thread or the pool). At most [`MAX_STEPS`] − 1 writes, each
/// at most [`MAX_WRITE`] bytes.
///
/// The future gives each write's bytes written and the sync's result. A
/// write that fails or writes less than its bytes ends the chain: the
/// steps after it report `ECANCELED` (the sync too, so the writes before
/// are not known to be durable).
pub(crate) fn write_then_sync_on_ring(
    file: &Arc<File>,
    writes: Vec<(Vec<u8>, u64)>,
    kind: SyncKind,
) -> Option<WriteThenSync> {
    let mut steps: Vec<Step> = writes
        .into_iter()
        .map(|(buf, offset)| Step::Write { buf, offset })
        .collect();
    steps.push(Step::Sync(kind));
    let operation = queue_on_ring(file, steps)?;
    Some(WriteThenSync { operation })
}

/// The future of [`write_then_sync_on_ring`].
#[derive(Debug)]
pub(crate) struct WriteThenSync {
    operation: Arc<FileOp>,
}

/// What a [`WriteThenSync`] did.
#[derive(Debug)]
pub(crate) struct Written {
    /// Each write's bytes written, or its error, in order.
    pub(crate) writes: Vec<io::Result<usize>>,
    /// The sync's result.
    pub(crate) sync: io::Result<()>,
}

impl std::future::Future for WriteThenSync {
    type Output = Written;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Written> {
        self.operation.poll_done(cx).map(|mut writes| {
            let sync = writes
                .pop()
                .unwrap_or_else(|| Err(io::Error::other("a sync without a result")))
                .map(|_| ());
            Written { writes, sync }
        })
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
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        Arc::new(file)
    }

    fn poll(op: &FileOp) -> Poll<Vec<io::Result<usize>>> {
        op.poll_done(&mut Context::from_waker(Waker::noop()))
    }

    fn write(byte: u8, len: usize, offset: u64) -> Step {
        Step::Write {
            buf: vec![byte; len],
            offset,
        }
    }

    fn sync(kind: SyncKind) -> Arc<FileOp> {
        FileOp::new(temp_file(), vec![Step::Sync(kind)])
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn a_sync_is_submitted_once_and_its_result_taken_once() {
        let sync = sync(SyncKind::Data);
        assert!(poll(&sync).is_pending());
        let (fd, steps) = sync.take_for_submission().expect("queued");
        assert_eq!(fd, sync.file.as_raw_fd());
        assert!(matches!(steps, [Step::Sync(SyncKind::Data)]));
        assert!(sync.take_for_submission().is_none());
        assert!(poll(&sync).is_pending());
        let mut wake = Vec::new();
        sync.complete(0, 0, &mut wake);
        assert!(matches!(poll(&sync), Poll::Ready(results) if matches!(results[..], [Ok(0)])));
        assert!(matches!(poll(&sync), Poll::Ready(results) if results[0].is_err()));
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn a_failed_sync_reports_the_os_error() {
        let sync = self::sync(SyncKind::All);
        sync.take_for_submission().unwrap();
        sync.complete(0, -libc::EIO, &mut Vec::new());
        match poll(&sync) {
            Poll::Ready(results) => {
                assert_eq!(
                    results[0].as_ref().unwrap_err().raw_os_error(),
                    Some(libc::EIO)
                )
            }
            other => panic!("{other:?}"),
        }
        // A cancelled sync is an error too: nothing says the data is on
        // the device.
        let sync = self::sync(SyncKind::Data);
        sync.take_for_submission().unwrap();
        sync.complete(0, -libc::ECANCELED, &mut Vec::new());
        assert!(matches!(poll(&sync), Poll::Ready(results) if results[0].is_err()));
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn a_chain_is_done_at_its_last_completion_with_every_steps_result() {
        let op = FileOp::new(
            temp_file(),
            vec![
                write(1, 10, 0),
                write(0, 20, 10),
                Step::Sync(SyncKind::Data),
            ],
        );
        let (_, steps) = op.take_for_submission().unwrap();
        assert_eq!(steps.len(), 3);
        let mut wake = Vec::new();
        // Completions may come in any order; only the last ends it.
        op.complete(2, -libc::ECANCELED, &mut wake);
        op.complete(0, 10, &mut wake);
        assert!(poll(&op).is_pending());
        op.complete(1, 7, &mut wake);
        let Poll::Ready(results) = poll(&op) else {
            panic!("not done after every step completed");
        };
        assert_eq!(results[0].as_ref().unwrap(), &10);
        assert_eq!(results[1].as_ref().unwrap(), &7);
        assert_eq!(
            results[2].as_ref().unwrap_err().raw_os_error(),
            Some(libc::ECANCELED)
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn a_chain_the_ring_refused_fails_every_step() {
        let op = FileOp::new(
            temp_file(),
            vec![write(1, 10, 0), Step::Sync(SyncKind::All)],
        );
        op.take_for_submission().unwrap();
        op.fail(io::Error::from_raw_os_error(libc::EBUSY), &mut Vec::new());
        let Poll::Ready(results) = poll(&op) else {
            panic!("a refused chain is done");
        };
        assert!(results.iter().all(|r| r.is_err()));
    }

    /// Runs `writes` and a sync of `file` as one chain from a task on a
    /// ring runtime.
    fn chain_on_a_ring(file: Arc<File>, writes: Vec<(Vec<u8>, u64)>) -> Written {
        let rt = crate::Runtime::builder()
            .workers(1)
            .io_backend(crate::io::IoBackend::Uring)
            .build()
            .expect("this test needs io_uring");
        rt.block_on(rt.spawn(async move {
            write_then_sync_on_ring(&file, writes, SyncKind::Data)
                .expect("a worker of a ring runtime")
                .await
        }))
        .unwrap()
    }

    #[test]
    #[cfg_attr(miri, ignore = "io_uring and files are beyond Miri")]
    fn a_chain_writes_in_order_then_syncs() {
        let file = temp_file();
        let written = chain_on_a_ring(
            file.clone(),
            vec![(b"hello ".to_vec(), 0), (b"world".to_vec(), 6)],
        );
        assert_eq!(written.writes.len(), 2);
        assert_eq!(*written.writes[0].as_ref().unwrap(), 6);
        assert_eq!(*written.writes[1].as_ref().unwrap(), 5);
        written.sync.unwrap();
        let mut read = [0; 11];
        std::os::unix::fs::FileExt::read_exact_at(&*file, &mut read, 0).unwrap();
        assert_eq!(&read, b"hello world");
    }

    #[test]
    #[cfg_attr(miri, ignore = "io_uring and files are beyond Miri")]
    fn a_failed_write_cancels_the_rest_of_the_chain() {
        let path = std::env::temp_dir().join(format!("keel-ring-chain-ro-{}", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let read_only = Arc::new(File::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        let written = chain_on_a_ring(read_only, vec![(b"x".to_vec(), 0), (b"y".to_vec(), 1)]);
        assert_eq!(
            written.writes[0].as_ref().unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        for cancelled in [
            &written.writes[1].as_ref().map(|_| ()),
            &written.sync.as_ref().map(|_| ()),
        ] {
            assert_eq!(
                cancelled.as_ref().unwrap_err().raw_os_error(),
                Some(libc::ECANCELED)
            );
        }
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
        let sync = sync(SyncKind::Data);
        assert!(sync
            .poll_done(&mut Context::from_waker(&waker))
            .is_pending());
        sync.take_for_submission().unwrap();
        let mut wake = Vec::new();
        sync.complete(0, 0, &mut wake);
        wake.into_iter().for_each(Waker::wake);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }
}
