//! The calls that queue file operations on the current worker's ring:
//! one-step reads, opens and syncs, and a chain of positional writes
//! ending in a sync; each gives `None` where the caller is not a worker of an
//! io_uring runtime, so that it makes the call on the blocking pool.

use std::ffi::CString;
use std::fs::File;
use std::future::Future;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::{FileOp, ReadBuf, Step, SyncKind};
#[cfg(doc)]
use super::{AT_POSITION, MAX_STEPS, MAX_WRITE};

/// The current runtime, where its reactor is a ring and the caller is one
/// of its workers: where an operation queued now goes to the ring.
pub(crate) fn ring_worker() -> Option<crate::runtime::Handle> {
    crate::runtime::context::current().filter(|handle| {
        handle.shared.reactor.completes_operations() && handle.shared.on_worker_thread()
    })
}

/// Queues the steps `steps` makes on `file` (`None` for an open) on the
/// current runtime's ring, or returns `None` where [`ring_worker`] finds
/// none (and makes no steps).
fn queue_on_ring(
    file: Option<&Arc<File>>,
    steps: impl FnOnce() -> Vec<Step>,
) -> Option<Arc<FileOp>> {
    let shared = ring_worker()?.shared;
    let worker = shared.worker_index()?;
    let operation = FileOp::new(file.cloned(), steps());
    shared.reactor.queue_file_op(Arc::clone(&operation), worker);
    Some(operation)
}

/// A sync of `file` on the current runtime's ring, or `None` where the
/// runtime's reactor is not a ring or the caller is not one of its
/// workers (the caller then syncs on the blocking pool). Queued at once,
/// for the worker's next look at the ring; the future waits for the
/// completion. The other one-step operations ([`read_on_ring`],
/// [`open_on_ring`]) go to the ring where this does.
///
/// Off the workers (`block_on`'s thread, the urgent lane) the pool is the
/// quicker way: such a thread must not submit to the ring itself (see
/// `driver::uring`), so the sync would wait for the poller to be woken to
/// submit it, then for the poller to wake the caller (two hops where the
/// pool takes two, plus the poller's wait; 350–370 µs a write and sync
/// against the pool's 220–320 on the machine of BENCHMARKS.md, 2026-11-27).
pub(crate) fn sync_on_ring(
    file: &Arc<File>,
    kind: SyncKind,
) -> Option<impl Future<Output = io::Result<()>> + Send> {
    let step = OneStep::queue(Some(file), || Step::Sync(kind))?;
    Some(async move { step.await.map(|_| ()) })
}

/// Whether `error`, from a [`read_on_ring`], says that the read was not
/// made because it would have blocked, and whether that is so for every
/// read of the file (`EOPNOTSUPP`: the filesystem never reads without
/// blocking) rather than for this one (`EAGAIN`).
pub(crate) fn would_block_on_ring(error: &io::Error) -> Option<Always> {
    match error.raw_os_error() {
        Some(libc::EAGAIN) => Some(Always(false)),
        Some(libc::EOPNOTSUPP) => Some(Always(true)),
        _ => None,
    }
}

/// Whether a read that would block always would (see
/// [`would_block_on_ring`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Always(pub(crate) bool);

/// A read of up to `into.len()` bytes (at most [`MAX_WRITE`]) of `file`
/// at `offset` (or [`AT_POSITION`]) on the ring, done at submission or
/// not at all, or `None` (see [`sync_on_ring`]). The kernel reads into a
/// buffer of the operation's; the future copies what was read into
/// `into` and gives its length. A dropped future leaves the read to
/// finish into the operation's buffer.
///
/// A read the kernel cannot do without blocking (the page cache misses,
/// or a filesystem such as tmpfs that never reads without blocking)
/// fails with [`would_block_on_ring`]'s errors instead of going to the
/// kernel's workers, whose round trip costs more than the pool's
/// (BENCHMARKS.md, "Files"); the caller reads on the pool instead. A
/// refused read does not move the file position; one cut short moves it
/// by what it read.
pub(crate) fn read_on_ring<'a>(
    file: &Arc<File>,
    into: &'a mut [u8],
    offset: u64,
) -> Option<impl Future<Output = io::Result<usize>> + Send + 'a> {
    let len = into.len();
    let step = OneStep::queue(Some(file), || Step::Read {
        buf: ReadBuf::new(len),
        offset,
    })?;
    Some(async move {
        let operation = Arc::clone(&step.operation);
        let n = step.await?;
        let filled = operation.read_bytes(n);
        into[..filled.len()].copy_from_slice(filled);
        Ok(filled.len())
    })
}

/// An open of `path` with `open(2)`'s `flags` (`O_CLOEXEC` is added) and
/// `mode` on the ring, or `None` (see [`sync_on_ring`]); the future gives
/// the file. A dropped future leaves the open to finish, and the
/// descriptor it makes is closed.
pub(crate) fn open_on_ring(
    path: CString,
    flags: i32,
    mode: u32,
) -> Option<impl Future<Output = io::Result<File>> + Send> {
    let flags = flags | libc::O_CLOEXEC;
    let step = OneStep::queue(None, || Step::Open { path, flags, mode })?;
    Some(async move {
        let fd = step.await?;
        let fd = RawFd::try_from(fd).map_err(|_| io::Error::other("an open gave no descriptor"))?;
        // SAFETY: the open's new descriptor, which `poll_done` handed to
        // this future alone: nothing else owns it.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    })
}

/// The future of a one-step operation: the step's result.
#[derive(Debug)]
pub(crate) struct OneStep {
    operation: Arc<FileOp>,
}

impl OneStep {
    fn queue(file: Option<&Arc<File>>, step: impl FnOnce() -> Step) -> Option<OneStep> {
        let operation = queue_on_ring(file, || vec![step()])?;
        Some(OneStep { operation })
    }
}

impl Future for OneStep {
    type Output = io::Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.operation.poll_done(cx).map(|results| {
            results
                .into_iter()
                .next()
                .unwrap_or_else(|| Err(io::Error::other("a step without a result")))
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
    let operation = queue_on_ring(Some(file), || steps)?;
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

impl Future for WriteThenSync {
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
