//! File operations that complete on the ring: on an io_uring reactor,
//! [`File`](crate::fs::File)'s reads and syncs and
//! [`OpenOptions::open`](crate::fs::OpenOptions::open) are
//! `IORING_OP_READ`s, `IORING_OP_FSYNC`s and `IORING_OP_OPENAT`s
//! submitted with the worker's other operations, and the task is woken
//! by their completion (the calls that queue them are in `calls`). A chain of positional writes ending in a sync
//! ([`write_then_sync_on_ring`]) goes to the kernel as linked entries
//! (`IOSQE_IO_LINK`), so the sync starts only once the writes are done,
//! and the task is woken once, by the last completion.
//!
//! # Why
//!
//! On epoll a file call is a job for the blocking pool: the task hands it
//! to a pool thread, which blocks in the system call and then wakes the
//! task from outside the workers, two thread hand-offs around the call.
//! On the ring the kernel does the work at submission where it can (an
//! open, a read the page cache serves) or in its own workers (a sync),
//! and posts the completion to the queue the workers already read: no
//! pool thread, and the wake is a reap, as a socket's event is. Reads
//! are never left to the kernel's workers: their round trip costs more
//! than the pool's, so one that would block is refused and made on the
//! pool (see [`read_on_ring`]). `File`'s writes stay on the pool: a write
//! at the file position made without blocking (`RWF_NOWAIT`) and cut
//! short leaves the position where it was (Linux 6.18), so the rest of
//! the bytes would be written over the first; without `RWF_NOWAIT`
//! every buffered write on ext4 goes to the kernel's workers. That holds
//! for an operation a worker's task asks for; one asked for off the
//! workers goes to the pool (see [`sync_on_ring`]).
//!
//! # Invariants
//!
//! - **The descriptor and the buffers outlive the kernel's use of them.**
//!   An operation holds a reference to the file (an `Arc` of the
//!   `std::fs::File`), owns the bytes its writes take, never touched
//!   again once built, and the buffer its read fills ([`ReadBuf`]), read
//!   by Rust code only once the operation is done (an open owns the
//!   path); each entry in flight holds a reference to the
//!   operation (its user data is an `Arc` turned into a pointer, tagged
//!   with the entry's step), taken back only when that entry's
//!   completion is reaped or when the ring itself drops after cancelling
//!   it. A task that stops waiting (its future dropped) drops its own
//!   reference only: the file is closed and the bytes freed after the
//!   last completion, never under the kernel. A read's bytes are copied
//!   into the caller's buffer when its future sees the completion.
//! - **A descriptor an open made is never leaked**: it belongs to the
//!   operation until the waiting task takes it; an operation dropped
//!   with it untaken (the task stopped waiting) closes it.
//! - **The steps of a chain reach the kernel together, in order**: they
//!   are pushed to the submission queue all at once or not at all, so a
//!   submission never ends inside a chain (which would unlink its tail).
//! - **A result is reported once, to the waiting task**: the last
//!   completion moves the operation from in flight to done, and the
//!   future takes every step's result. A step the kernel cancelled (a
//!   step before it failed or wrote less than asked, or the ring's end)
//!   is reported as an error, never as success: nothing says its data
//!   reached the device.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::lock;

mod calls;
mod read_buf;

pub(crate) use calls::{
    open_on_ring, read_on_ring, ring_worker, sync_on_ring, would_block_on_ring,
    write_then_sync_on_ring, Always,
};
pub(crate) use read_buf::ReadBuf;

/// Which sync an operation asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyncKind {
    /// `fdatasync`: the data, and the metadata needed to read it back.
    Data,
    /// `fsync`: the data and all of the metadata.
    All,
}

/// The offset of a read step that reads at the file position and moves
/// it, as `read(2)` does (io_uring's −1,
/// `IORING_FEAT_RW_CUR_POS`: Linux 5.6, older than the 6.0 the driver
/// needs).
pub(crate) const AT_POSITION: u64 = u64::MAX;

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
    /// Read up to `buf`'s length at `offset` (one `IORING_OP_READ`),
    /// at submission or not at all (`RWF_NOWAIT`: `EAGAIN`, or
    /// `EOPNOTSUPP` where the filesystem never reads without blocking,
    /// rather than a hand-off to the kernel's workers).
    Read {
        /// Where the kernel puts the bytes.
        buf: ReadBuf,
        /// Where in the file, or [`AT_POSITION`].
        offset: u64,
    },
    /// Open `path`, relative to the current directory, with `open(2)`'s
    /// `flags` and `mode` (one `IORING_OP_OPENAT`); the result is the new
    /// descriptor. Only ever the one step of an operation without a file.
    Open {
        /// The path, read by the kernel while the step is in flight.
        path: CString,
        /// `O_*` flags.
        flags: i32,
        /// The permission bits of a file the open creates.
        mode: u32,
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

/// Reads, writes and syncs of one file, linked in order, or an open (see
/// the module docs).
#[derive(Debug)]
pub(crate) struct FileOp {
    /// The file the steps work on; `None` for an open.
    file: Option<Arc<File>>,
    steps: Vec<Step>,
    state: Mutex<State>,
}

impl FileOp {
    /// An operation of `steps` on `file`, queued by nobody yet.
    ///
    /// # Panics
    ///
    /// If `steps` is empty or longer than [`MAX_STEPS`], a read or write
    /// is longer than [`MAX_WRITE`], or an open is not the one step of an
    /// operation without a file: the callers build bounded chains.
    fn new(file: Option<Arc<File>>, steps: Vec<Step>) -> Arc<FileOp> {
        assert!(
            (1..=MAX_STEPS).contains(&steps.len()),
            "a chain of {} steps",
            steps.len()
        );
        assert!(steps.iter().all(|step| match step {
            Step::Write { buf, .. } => buf.len() <= MAX_WRITE,
            Step::Read { buf, .. } => buf.len() <= MAX_WRITE,
            Step::Open { .. } | Step::Sync(_) => true,
        }));
        assert_eq!(
            file.is_none(),
            matches!(steps[..], [Step::Open { .. }]),
            "an open is the one step of an operation without a file"
        );
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

    /// The file's descriptor; `None` for an open.
    pub(crate) fn fd(&self) -> Option<RawFd> {
        self.file.as_ref().map(|file| file.as_raw_fd())
    }

    /// Called by the ring under its submission lock: the descriptor
    /// (`AT_FDCWD` for an open) and the steps to submit, if the operation
    /// is still queued; it is then in flight. The steps, and the bytes
    /// their buffers and paths point to, do not move while the operation
    /// lives.
    pub(crate) fn take_for_submission(&self) -> Option<(RawFd, &[Step])> {
        let mut state = lock(&self.state);
        if !matches!(state.phase, Phase::Queued) {
            return None;
        }
        state.phase = Phase::InFlight(self.steps.len());
        let fd = self.file.as_ref().map_or(libc::AT_FDCWD, |f| f.as_raw_fd());
        Some((fd, &self.steps))
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
    /// written (all of its buffer unless the kernel took less), a read's
    /// bytes read, a sync's 0, an open's descriptor (the caller's to own
    /// from now on), or the step's error.
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

    /// The first `n` bytes the operation's read step read, once the
    /// operation is done (empty before, or without a read step).
    fn read_bytes(&self, n: usize) -> &[u8] {
        if !matches!(lock(&self.state).phase, Phase::Done | Phase::Taken) {
            return &[];
        }
        match self
            .steps
            .iter()
            .find(|step| matches!(step, Step::Read { .. }))
        {
            // SAFETY: done means every entry's completion was reaped, or
            // none was ever pushed: the kernel no longer writes the buffer.
            Some(Step::Read { buf, .. }) => unsafe { buf.filled(n) },
            _ => &[],
        }
    }
}

impl Drop for FileOp {
    /// Closes the descriptor of an open whose result nobody took.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (step, result) in self.steps.iter().zip(&state.results) {
            if let (Step::Open { .. }, Some(Ok(fd))) = (step, result) {
                if let Ok(fd) = RawFd::try_from(*fd) {
                    // SAFETY: the open's own new descriptor, which nothing
                    // took: nothing else owns it.
                    drop(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
    }
}

/// A step's result, which its completion set.
fn known(result: Option<io::Result<usize>>) -> io::Result<usize> {
    result.unwrap_or_else(|| Err(io::Error::other("a step completed without a result")))
}

#[cfg(test)]
mod tests {
    use super::calls::Written;
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
        FileOp::new(Some(temp_file()), vec![Step::Sync(kind)])
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn a_sync_is_submitted_once_and_its_result_taken_once() {
        let sync = sync(SyncKind::Data);
        assert!(poll(&sync).is_pending());
        let (fd, steps) = sync.take_for_submission().expect("queued");
        assert_eq!(fd, sync.file.as_ref().unwrap().as_raw_fd());
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
            Some(temp_file()),
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
            Some(temp_file()),
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

    #[test]
    fn a_read_buffer_gives_back_what_was_written_into_it() {
        let buf = ReadBuf::new(8);
        assert_eq!(buf.len(), 8);
        // SAFETY: writes 3 bytes inside the 8-byte allocation; no slice of
        // it lives meanwhile (the kernel's part in a real read).
        unsafe { std::ptr::copy_nonoverlapping(b"abc".as_ptr(), buf.as_mut_ptr(), 3) };
        // SAFETY: nothing writes the buffer any more.
        assert_eq!(unsafe { buf.filled(3) }, b"abc");
        // SAFETY: as above; asking for more than it holds gives all of it.
        assert_eq!(unsafe { buf.filled(100) }, b"abc\0\0\0\0\0");
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn a_read_gives_its_bytes_only_once_done() {
        let op = FileOp::new(
            Some(temp_file()),
            vec![Step::Read {
                buf: ReadBuf::new(16),
                offset: AT_POSITION,
            }],
        );
        let (_, steps) = op.take_for_submission().unwrap();
        let Step::Read { buf, .. } = &steps[0] else {
            panic!("{steps:?}");
        };
        // SAFETY: as the kernel would, into the operation's own buffer,
        // while no slice of it lives.
        unsafe { std::ptr::copy_nonoverlapping(b"read".as_ptr(), buf.as_mut_ptr(), 4) };
        assert!(op.read_bytes(4).is_empty(), "read before its completion");
        op.complete(0, 4, &mut Vec::new());
        assert!(matches!(poll(&op), Poll::Ready(results) if matches!(results[..], [Ok(4)])));
        assert_eq!(op.read_bytes(4), b"read");
    }

    /// An open's operation whose completion gave it a descriptor (a
    /// duplicate of a new file's, at 700 or above, a number no other test
    /// takes), and that descriptor.
    fn an_open_that_completed() -> (Arc<FileOp>, RawFd) {
        let path = CString::new("/").unwrap();
        let op = FileOp::new(
            None,
            vec![Step::Open {
                path,
                flags: libc::O_RDONLY,
                mode: 0,
            }],
        );
        let (fd, _) = op.take_for_submission().unwrap();
        assert_eq!(fd, libc::AT_FDCWD);
        let file = temp_file();
        // SAFETY: duplicates a live descriptor; the new one is owned by
        // the operation from its completion on.
        let new = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 700) };
        assert!(new >= 700, "{}", io::Error::last_os_error());
        op.complete(0, new, &mut Vec::new());
        (op, new)
    }

    fn is_open(fd: RawFd) -> bool {
        // SAFETY: F_GETFD reads the descriptor's flags; no memory.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        flags >= 0
    }

    #[test]
    #[cfg_attr(miri, ignore = "creates a file, which Miri's isolation refuses")]
    fn an_opens_descriptor_is_closed_with_the_operation_unless_taken() {
        let (op, fd) = an_open_that_completed();
        assert!(is_open(fd));
        drop(op);
        assert!(!is_open(fd), "the untaken descriptor was left open");

        let (op, fd) = an_open_that_completed();
        let Poll::Ready(results) = poll(&op) else {
            panic!("an open is done at its completion");
        };
        assert_eq!(*results[0].as_ref().unwrap(), fd as usize);
        drop(op);
        assert!(is_open(fd), "the taken descriptor was closed");
        // SAFETY: the descriptor was taken above: this test owns it.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }

    #[test]
    #[should_panic(expected = "an open is the one step")]
    fn an_open_cannot_be_chained() {
        let path = CString::new("/").unwrap();
        FileOp::new(
            None,
            vec![
                Step::Open {
                    path,
                    flags: 0,
                    mode: 0,
                },
                Step::Sync(SyncKind::Data),
            ],
        );
    }
}
