//! The io_uring driver: each source watched by a multishot `POLL_ADD`,
//! the waker an eventfd watched the same way, TCP reads completed as
//! `IORING_OP_RECV`s, multishot into the ring's provided buffers (see
//! `io::ring_recv`), and files' opens, reads,
//! positional writes and syncs as `IORING_OP_OPENAT`s,
//! `IORING_OP_READ`s, `IORING_OP_WRITE`s and `IORING_OP_FSYNC`s (see
//! `io::ring_file`), and a source closed by its ring's own worker as a
//! cancellation linked to an `IORING_OP_CLOSE`.
//!
//! # Why a ring
//!
//! Looking for events without blocking, which a busy worker does every
//! `io_interval`, reads the completion queue's head and tail, memory the
//! kernel shares with the process: no system call when nothing happened
//! (epoll needs an `epoll_wait` to learn that). Whether there is anything
//! to look at is three loads from any thread (see `glance`), so with a
//! ring per worker a worker looks at every poll boundary where its ring
//! has news, not only every `io_interval`. Receives queued by the
//! tasks of a loop turn go to the kernel in the turn's one enter, as do
//! files' linked writes and syncs (the log's batches, with
//! `wal::Options::writer_on_ring`), and the closes of the turn's
//! finished connections. Sends and accepts are to follow.
//!
//! # Operations
//!
//! An operation's user data is its `Arc` (a receive's slot, a file's
//! operation) as a pointer with [`OPERATION_BIT`] set (a poll's token
//! never has it); a file operation's entries, one per step, each hold a
//! reference, with `FILE_BIT` and the step's index set too. The reap
//! takes the reference back and completes the step. A file operation's
//! steps are pushed together, linked, or not at all (see
//! `io::ring_file`). Operations are queued in
//! [`Uring::queue`] and pushed to the submission queue under the
//! submission lock by the poller's wait or by [`Uring::flush`]; a
//! close cancels behind what the queue holds (submitting it first when
//! the cancellation is synchronous), so that the cancellation finds
//! every operation on the descriptor. A file operation holds its file,
//! so no close concerns it.
//!
//! # How it keeps the driver contract
//!
//! - **Edges** (contract 1): a multishot poll is edge triggered unless
//!   `IORING_POLL_ADD_LEVEL` is asked for, and an arm finds a source that
//!   is already ready at once.
//! - **Closing** (2): a poll holds a reference to its file, so the
//!   socket would outlive its descriptor; every poll and operation on the
//!   descriptor is cancelled before the descriptor is closed, and the
//!   reactor forgets the token first, so that the poll that reaps the
//!   cancellation does not arm it again. On the ring of the worker that
//!   closes it, the cancellation (`IORING_OP_ASYNC_CANCEL` by descriptor)
//!   and an `IORING_OP_CLOSE` go into the submission queue, hard-linked,
//!   for that worker's next look or wait ([`Uring::close_at_next_enter`]):
//!   the number stays taken until both ran, so no operation reaches its
//!   next owner. Elsewhere the cancellation is synchronous
//!   (`IORING_REGISTER_SYNC_CANCEL`, Linux 6.0) and the caller closes
//!   after it. The cancelled poll's reference is dropped by the worker
//!   that armed it, microseconds later; a listener is always cancelled
//!   synchronously and shut for reading first, so that it stops
//!   listening before the close returns (see `stop_listening`).
//! - **One poller** (3): the completion queue is read only by the holder
//!   of the [`Poller`], of which there is one; the submission queue is
//!   written under [`Uring::submissions`] by whoever registers.
//! - **Who arms a poll.** The kernel posts a poll's completion from the
//!   thread that armed it (task work), interrupting that thread's system
//!   call to do so: a blocking `read` with a timeout then fails with
//!   `EINTR`. So only the runtime's workers arm polls; a source registered
//!   on any other thread (`block_on`'s, a thread that entered the
//!   runtime) waits in [`Uring::unarmed`] for the poller's next wait,
//!   which the registration wakes. A close finds it there, never armed,
//!   or finds it armed and cancels it.
//! - **Waking** (4): an eventfd write wakes the eventfd's poll, whose
//!   completion ends the wait; the counter is never read (a multishot poll
//!   reports every write, whatever the count), and at one write per wake
//!   would take centuries to overflow.
//! - **Liveness** (5): the kernel ends a multishot poll (a completion
//!   without `IORING_CQE_F_MORE`, `ECANCELED`) at its first event after
//!   the thread that armed it exited, since the completion would run on
//!   that thread, or when it could not post a completion; the poller arms
//!   it again, with
//!   the reactor's registry locked so that a close cannot slip in
//!   between, and reports the source ready both ways.
//!
//! # Completions without interrupts
//!
//! A poll's completion is kernel work queued to the thread that armed it.
//! By default the kernel interrupts that thread (an inter-processor
//! interrupt when it runs on another core) to post it at once: one per
//! packet, which halved a keep-alive server's throughput. The ring is set
//! up with `IORING_SETUP_COOP_TASKRUN`: a sleeping thread is still woken
//! to post, a running one posts at its next entry to the kernel (a system
//! call, or the timer tick), and `IORING_SETUP_TASKRUN_FLAG` marks the
//! ring meanwhile, so that a busy worker's look, finding the completion
//! queue empty and the mark set, enters the kernel to post (a system call
//! only when something happened): a worker that computes without system
//! calls posts at its next look, within `io_interval`, rather than at the
//! next tick.
//!
//! # What it costs
//!
//! A worker that armed a socket's poll and then parked is interrupted to
//! post its events (task work). A registration on a worker and a close
//! by the home ring's worker cost no system call (they go in with the
//! worker's next enter); elsewhere a registration costs a wake of the
//! poller, whose next wait arms it, and a close a synchronous cancel.

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::Waker;
use std::time::Duration;

use io_uring::types::{self, CancelBuilder, Fd, SubmitArgs, Timespec};
use io_uring::{cqueue, opcode, squeue, IoUring};
use mio::Interest;

use super::glance::Glance;
use super::Owner;
use crate::io::lock;
use crate::io::readiness::Event;
use crate::io::ring_file::{FileOp, Step, SyncKind, MAX_STEPS};
use crate::io::ring_probe;
use crate::io::ring_recv::{BufPool, RecvSlot, Submission};

/// Submission queue entries: room for the receives a loop turn queues
/// (a full queue is submitted and reused, never a failure).
const SUBMISSION_ENTRIES: u32 = 256;
/// The bit that marks an operation's user data (a [`RecvSlot`] or
/// [`FileOp`] pointer) apart from a poll's token, whose generation never
/// reaches it (see `reactor`); the waker's token has it too, and is told
/// apart first.
pub(crate) const OPERATION_BIT: u64 = 1 << 63;
/// With [`OPERATION_BIT`], marks a [`FileOp`]'s user data apart from a
/// receive's. No pointer reaches it, nor the step bits below it:
/// user-space addresses stay below 2^57 on every x86_64 and aarch64
/// paging mode.
const FILE_BIT: u64 = 1 << 62;
/// Where a file operation's step index starts in its user data: bits 58
/// to 61, room for [`MAX_STEPS`].
const STEP_SHIFT: u32 = 58;
/// The step index's bits.
const STEP_MASK: u64 = 0b1111 << STEP_SHIFT;
const _: () = assert!(MAX_STEPS <= 16);

/// Completion queue entries: room for a burst of events from many
/// sources between two polls (more are kept by the kernel, not dropped).
const COMPLETION_ENTRIES: u32 = 4096;
/// The user data of the set-up check's cancellation, which matches
/// nothing.
const NO_REQUEST: u64 = u64::MAX - 1;
/// The user data of a cancellation of a stream's multishot receive (see
/// [`Uring::cancel_receive`]), whose own completion is dropped. No
/// operation's user data reaches it: its pointer bits are all set.
const CANCELLATION: u64 = u64::MAX - 2;

/// A source registered on a thread that must not arm its poll, waiting
/// for the poller to arm it (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Unarmed {
    fd: RawFd,
    token: u64,
    interest: Interest,
}

/// An operation on the ring: queued for its next submission, then, once
/// submitted, named by its user data until its completion is reaped.
#[derive(Debug)]
pub(crate) enum Operation {
    /// A stream's receive (see `io::ring_recv`).
    Recv(Arc<RecvSlot>),
    /// A file's open, read or sync, or its writes and a sync (see
    /// `io::ring_file`).
    File(Arc<FileOp>),
}

/// The ring, and the registration side: usable from any thread.
pub(crate) struct Uring {
    ring: IoUring,
    /// Held while writing the submission queue (see the module docs).
    submissions: Mutex<()>,
    /// Registrations the poller arms at its next wait; locked by the
    /// poller until they are submitted.
    unarmed: Mutex<Vec<Unarmed>>,
    /// `unarmed` is not empty: one load for a busy worker's look.
    has_unarmed: AtomicBool,
    /// Written by [`Uring::wake`], watched by a multishot poll.
    wake_fd: OwnedFd,
    wake_token: u64,
    /// Operations queued for the next submission (see `io::ring_recv`,
    /// `io::ring_file`).
    queued: Mutex<Vec<Operation>>,
    /// `queued` is not empty: one load for a look that finds nothing.
    has_queued: AtomicBool,
    /// The submission queue holds polls or closes pushed for the next
    /// enter (see [`Uring::watch_at_next_enter`] and
    /// [`Uring::close_at_next_enter`]); set after the push, under the
    /// submission lock, and cleared before the enter that submits them.
    unsubmitted: AtomicBool,
    /// Operations submitted and not yet reaped.
    in_flight: AtomicU64,
    /// The provided buffers of multishot receives, registered at the
    /// first receive; `None` if the kernel refused them (receives are then
    /// single). Declared after `ring`, so dropped after the ring is
    /// closed (see `io::ring_recv::pool`).
    pool: OnceLock<Option<Arc<BufPool>>>,
    /// A glance at the ring for the worker that runs beside it (see
    /// `glance`); `None` where the kernel maps the rings apart or the
    /// second mapping failed: only the interval looks then.
    glance: Option<Glance>,
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uring")
            .field("fd", &self.ring.as_raw_fd())
            .finish_non_exhaustive()
    }
}

/// The right to read the completion queue; one per ring.
#[derive(Debug)]
pub(crate) struct Poller {
    _one: (),
}

impl Uring {
    /// Sets the ring up and checks that the kernel has what the driver
    /// needs; the error says what is missing or what refused the ring.
    pub(super) fn new(wake_token: usize) -> io::Result<(Uring, Poller)> {
        let refused = |why: String| io::Error::new(io::ErrorKind::Unsupported, why);
        let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
        if let Some(why) = sysctl.as_deref().and_then(ring_probe::disabled_by_sysctl) {
            return Err(refused(why));
        }
        let ring = IoUring::builder()
            .setup_cqsize(COMPLETION_ENTRIES)
            .setup_clamp()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .build(SUBMISSION_ENTRIES)
            .map_err(|error| refused(ring_probe::setup_refusal(&error, sysctl.as_deref())))?;
        let params = ring.params();
        if !params.is_feature_ext_arg() {
            return Err(refused(
                "the kernel's io_uring cannot wait with a timeout (IORING_FEAT_EXT_ARG, Linux 5.11)"
                    .into(),
            ));
        }
        if !params.is_feature_nodrop() {
            return Err(refused(
                "the kernel's io_uring drops completions when its queue is full \
                 (IORING_FEAT_NODROP, Linux 5.5)"
                    .into(),
            ));
        }
        match ring
            .submitter()
            .register_sync_cancel(Some(Timespec::new()), CancelBuilder::user_data(NO_REQUEST))
        {
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Ok(()) => {}
            Err(error) => {
                return Err(refused(format!(
                    "the kernel's io_uring cannot cancel synchronously \
                     (IORING_REGISTER_SYNC_CANCEL, Linux 6.0): {error}"
                )))
            }
        }
        // SAFETY: eventfd takes no pointer; a non-negative result is a new
        // descriptor that nothing else owns.
        let wake_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake_fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: just created, owned by nothing else (see above).
        let wake_fd = unsafe { OwnedFd::from_raw_fd(wake_fd) };
        let glance = Glance::new(&ring).ok();
        let uring = Uring {
            ring,
            submissions: Mutex::new(()),
            unarmed: Mutex::new(Vec::new()),
            has_unarmed: AtomicBool::new(false),
            wake_fd,
            wake_token: wake_token as u64,
            queued: Mutex::new(Vec::new()),
            has_queued: AtomicBool::new(false),
            unsubmitted: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            pool: OnceLock::new(),
            glance,
        };
        uring.watch(
            uring.wake_fd.as_raw_fd(),
            uring.wake_token,
            Interest::READABLE,
        )?;
        let mut poller = Poller { _one: () };
        uring.check_multishot(&mut poller).map_err(refused)?;
        uring.hand_the_wake_poll_to_the_poller(&mut poller)?;
        Ok((uring, poller))
    }

    /// Cancels the eventfd's poll, armed by the thread that builds the
    /// runtime (which must not keep it: see "Who arms a poll"), and leaves
    /// it for the poller's first wait to arm again.
    fn hand_the_wake_poll_to_the_poller(&self, poller: &mut Poller) -> io::Result<()> {
        self.ring
            .submitter()
            .register_sync_cancel(None, CancelBuilder::user_data(self.wake_token))?;
        let _ = poller;
        // SAFETY: `poller` is the ring's one poller, borrowed mutably: no
        // other completion queue view exists. Drops the cancellation's
        // completion (and any wake before it).
        unsafe { self.ring.completion_shared() }.for_each(drop);
        self.leave_to_the_poller(Unarmed {
            fd: self.wake_fd.as_raw_fd(),
            token: self.wake_token,
            interest: Interest::READABLE,
        });
        Ok(())
    }

    /// Wakes the ring's own poll and reaps the completion: a kernel
    /// without multishot polls (Linux 5.13) ends it at once.
    fn check_multishot(&self, poller: &mut Poller) -> Result<(), String> {
        self.wake();
        let timeout = Timespec::from(Duration::from_secs(5));
        match self
            .ring
            .submitter()
            .submit_with_args(1, &SubmitArgs::new().timespec(&timeout))
        {
            Ok(_) => {}
            Err(error) => return Err(format!("waiting for the ring's first completion: {error}")),
        }
        let _ = poller;
        // SAFETY: `poller` is the ring's one poller, borrowed mutably: no
        // other completion queue view exists.
        let mut completions = unsafe { self.ring.completion_shared() };
        let Some(first) = completions.next() else {
            return Err("the ring did not report its eventfd's poll within 5 s".into());
        };
        if first.result() < 0 || !cqueue::more(first.flags()) {
            return Err(format!(
                "the kernel's io_uring has no multishot poll (IORING_POLL_ADD_MULTI, Linux \
                 5.13): the poll ended with {}",
                io::Error::from_raw_os_error(-first.result().min(0))
            ));
        }
        Ok(())
    }

    /// Arms a multishot poll of `fd` for `interest`, under `token`.
    fn watch(&self, fd: RawFd, token: u64, interest: Interest) -> io::Result<()> {
        self.submit(&poll_entry(fd, token, interest))
    }

    /// Whether a look at the ring would find something (see `glance`);
    /// `false` without a glance, where only the interval looks.
    pub(super) fn has_news(&self) -> bool {
        self.glance.as_ref().is_some_and(Glance::news)
    }

    /// Watches `fd` from the ring's own worker, like [`watch`](Self::watch)
    /// but without a system call of its own: the poll is pushed to the
    /// submission queue and reaches the kernel with the worker's next
    /// enter, a look (within `io_interval`) or its park, whichever comes
    /// first; a worker that steals the ring's events submits it too (see
    /// [`flush`](Self::flush)). A stream's first wait is most often
    /// followed by the worker's running dry, so this saves an
    /// `io_uring_enter` a connection. The poll finds the socket's state
    /// when it is armed, so nothing that arrived meanwhile is missed.
    pub(super) fn watch_at_next_enter(
        &self,
        fd: RawFd,
        token: usize,
        interest: Interest,
    ) -> io::Result<()> {
        let entry = poll_entry(fd, token as u64, interest);
        let _submitting = lock(&self.submissions);
        self.push_unowned(std::slice::from_ref(&entry))?;
        self.unsubmitted.store(true, Ordering::Release);
        Ok(())
    }

    /// Pushes `entry`, a poll or a cancellation (entries that point at no
    /// memory), and submits it at once.
    fn submit(&self, entry: &squeue::Entry) -> io::Result<()> {
        let _submitting = lock(&self.submissions);
        self.push_unowned(std::slice::from_ref(entry))?;
        // The view is dropped: the tail is published before entering.
        self.submit_queue()
    }

    /// Pushes `entries`, polls, cancellations or closes (entries that
    /// point at no memory), to the submission queue (see
    /// [`push_together`](Self::push_together)). The caller holds
    /// [`Uring::submissions`].
    fn push_unowned(&self, entries: &[squeue::Entry]) -> io::Result<()> {
        // SAFETY: such entries point at no memory.
        unsafe { self.push_together(entries) }
    }

    /// Watches `fd`: at once if the calling thread may arm polls
    /// (`arms`), otherwise at the poller's next wait, which this wakes.
    pub(super) fn register(
        &self,
        fd: RawFd,
        token: usize,
        interest: Interest,
        arms: bool,
    ) -> io::Result<()> {
        if arms {
            return self.watch(fd, token as u64, interest);
        }
        self.leave_to_the_poller(Unarmed {
            fd,
            token: token as u64,
            interest,
        });
        self.wake();
        Ok(())
    }

    /// Watches again a source whose poll ended: at once if `here`, else
    /// at the poller's next wait.
    fn watch_again(&self, fd: RawFd, token: u64, interest: Interest, here: bool) -> io::Result<()> {
        if here {
            return self.watch(fd, token, interest);
        }
        self.leave_to_the_poller(Unarmed {
            fd,
            token,
            interest,
        });
        Ok(())
    }

    /// Leaves `unarmed` for the poller's next wait to arm.
    fn leave_to_the_poller(&self, unarmed: Unarmed) {
        lock(&self.unarmed).push(unarmed);
        self.has_unarmed.store(true, Ordering::Release);
    }

    /// Arms the polls of the registrations made on other threads; the
    /// list stays locked until they are submitted, so that a close
    /// either finds its source still unarmed or finds its poll submitted,
    /// or ahead of its cancellation in the queue, to cancel.
    pub(super) fn arm_registered_elsewhere(&self) -> io::Result<()> {
        self.arm_left_to_the_poller(false)
    }

    /// [`arm_registered_elsewhere`](Self::arm_registered_elsewhere) for a
    /// thread that is not the ring's poller (see `rings`): the sources'
    /// polls, not the waker's, which stays for the poller to arm, since
    /// the thread that arms it is the one its wakes reach first.
    pub(super) fn arm_sources_left_to_the_poller(&self) -> io::Result<()> {
        self.arm_left_to_the_poller(true)
    }

    fn arm_left_to_the_poller(&self, but_the_waker: bool) -> io::Result<()> {
        if !self.has_unarmed.swap(false, Ordering::Acquire) {
            return Ok(());
        }
        let mut unarmed = lock(&self.unarmed);
        let mut kept = None;
        while let Some(next) = unarmed.pop() {
            if but_the_waker && next.token == self.wake_token {
                kept = Some(next);
                continue;
            }
            if let Err(error) = self.watch(next.fd, next.token, next.interest) {
                // Left in the list: the next wait tries again.
                unarmed.push(next);
                unarmed.extend(kept);
                self.has_unarmed.store(true, Ordering::Release);
                return Err(error);
            }
        }
        if let Some(waker) = kept {
            unarmed.push(waker);
            self.has_unarmed.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Cancels every poll and operation on `fd` at once (a synchronous
    /// cancel), then stops a listener listening; the caller closes `fd`
    /// after.
    pub(super) fn deregister(&self, fd: RawFd, token: usize, listening: bool) -> io::Result<()> {
        // Never armed; a receive on the descriptor may still be in
        // flight, so the cancellation below still runs.
        self.forget_unarmed(token);
        // A receive for the descriptor may sit in the submission queue,
        // pushed by a poller that has not entered the kernel yet: submit
        // it now, so that the cancellation finds it (see
        // `io::ring_recv`), rather than let it reach the kernel after the
        // descriptor is closed, and perhaps reused.
        {
            let _submitting = lock(&self.submissions);
            // SAFETY: under the lock, the only submission queue view.
            let waiting = !unsafe { self.ring.submission_shared() }.is_empty();
            if waiting {
                // A failure (the kernel out of memory) is what the
                // cancellation below then reports.
                let _ = self.submit_queue();
            }
        }
        let cancelled = match self
            .ring
            .submitter()
            .register_sync_cancel(None, CancelBuilder::fd(Fd(fd)).all())
        {
            // No poll on it: it ended and was not armed again.
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
            result => result,
        };
        if listening {
            stop_listening(fd);
        }
        cancelled
    }

    /// Takes `token` off the sources waiting for their poll to be armed.
    fn forget_unarmed(&self, token: usize) {
        let mut unarmed = lock(&self.unarmed);
        if let Some(at) = unarmed.iter().position(|u| u.token == token as u64) {
            unarmed.swap_remove(at);
        }
    }

    /// Closes `fd` at the ring's next submission, its polls and operations
    /// cancelled first, with no system call now: a cancellation of
    /// everything on the descriptor, hard-linked to an `IORING_OP_CLOSE`,
    /// pushed behind whatever the submission queue holds (a receive pushed
    /// for it is issued, then cancelled). Both run in the kernel in that
    /// order, the cancellation naming the descriptor while it is still
    /// this socket's, so nothing reaches the number's next owner; until
    /// then the number stays taken. Only the ring's own worker calls this:
    /// it enters the ring at its next look or wait, or a sleeping worker
    /// serving the ring does (see `rings`). Neither entry posts a
    /// completion unless it fails (a cancellation that found nothing),
    /// and such a completion is ignored. `Err` hands `fd` back when the
    /// queue was full and could not be submitted to make room.
    pub(super) fn close_at_next_enter(&self, fd: OwnedFd, token: usize) -> Result<(), OwnedFd> {
        self.forget_unarmed(token);
        let raw = fd.as_raw_fd();
        let chain = [
            opcode::AsyncCancel2::new(CancelBuilder::fd(Fd(raw)).all())
                .build()
                .flags(squeue::Flags::IO_HARDLINK | squeue::Flags::SKIP_SUCCESS)
                .user_data(CANCELLATION),
            opcode::Close::new(Fd(raw))
                .build()
                .flags(squeue::Flags::SKIP_SUCCESS)
                .user_data(CANCELLATION),
        ];
        let _submitting = lock(&self.submissions);
        if self.push_unowned(&chain).is_err() {
            return Err(fd);
        }
        // The kernel owns the descriptor now: its close is queued.
        let _ = fd.into_raw_fd();
        self.unsubmitted.store(true, Ordering::Release);
        Ok(())
    }

    /// Queues an operation for the next submission. A thread that will
    /// not submit it itself (`wake_poller`: not a worker) wakes the
    /// poller, whose wait submits it; a worker submits it at its next look
    /// or before it sleeps (see `sched::worker`).
    pub(super) fn queue(&self, operation: Operation, wake_poller: bool) {
        lock(&self.queued).push(operation);
        self.has_queued.store(true, Ordering::Release);
        if wake_poller {
            self.wake();
        }
    }

    /// Pushes the queued receives to the submission queue, submitting when
    /// it is full; the caller holds `submissions` and enters the kernel
    /// after (which submits the rest). Returns how many were pushed.
    fn push_queued(&self) -> usize {
        if !self.has_queued.swap(false, Ordering::Acquire) {
            return 0;
        }
        let operations = std::mem::take(&mut *lock(&self.queued));
        let mut pushed = 0;
        let mut wake = Vec::new();
        for operation in operations {
            match operation {
                Operation::Recv(slot) => {
                    let entry = match slot.take_for_submission(self.pool()) {
                        None => continue,
                        Some(Submission::Single { fd, buf, len }) => {
                            opcode::Recv::new(Fd(fd), buf, len).build()
                        }
                        Some(Submission::Multishot { fd, group }) => {
                            opcode::RecvMulti::new(Fd(fd), group).build()
                        }
                    };
                    let token = Operation::Recv(slot).into_user_data(0);
                    // SAFETY: a single receive's buffer stays allocated
                    // until its completion is reaped (the `Arc` in the user
                    // data), and is not touched by Rust code while the slot
                    // is in flight; a multishot receive's pool stays
                    // mapped while the slot, held by the user data until
                    // the last completion, holds it (see `io::ring_recv`).
                    match unsafe { self.push_entries(&[entry.user_data(token)]) } {
                        Ok(()) => pushed += 1,
                        // SAFETY: made by `into_user_data` above, for an
                        // entry that was never pushed: nothing else takes
                        // it back.
                        Err(error) => unsafe { Operation::of(token) }.fail(error, &mut wake),
                    }
                }
                Operation::File(op) => {
                    if self.push_file_op(&op, &mut wake) {
                        pushed += 1;
                    }
                }
            }
        }
        wake.into_iter().for_each(Waker::wake);
        pushed
    }

    /// Pushes a file operation's steps, linked, each entry holding a
    /// reference to it; the caller holds `submissions`. Returns whether
    /// they were pushed (if not, the operation has failed).
    fn push_file_op(&self, op: &Arc<FileOp>, wake: &mut Vec<Waker>) -> bool {
        let Some((fd, steps)) = op.take_for_submission() else {
            return false;
        };
        let last = steps.len() - 1;
        let entries: Vec<squeue::Entry> = steps
            .iter()
            .enumerate()
            .map(|(index, step)| {
                let entry = match step {
                    Step::Write { buf, offset } => {
                        // A step's length fits: `FileOp::new` checks it.
                        opcode::Write::new(Fd(fd), buf.as_ptr(), buf.len() as u32)
                            .offset(*offset)
                            .build()
                    }
                    Step::Read { buf, offset } => {
                        opcode::Read::new(Fd(fd), buf.as_mut_ptr(), buf.len() as u32)
                            .offset(*offset)
                            .rw_flags(libc::RWF_NOWAIT)
                            .build()
                    }
                    Step::Open { path, flags, mode } => opcode::OpenAt::new(Fd(fd), path.as_ptr())
                        .flags(*flags)
                        .mode(*mode)
                        .build(),
                    Step::Sync(kind) => {
                        let flags = match kind {
                            SyncKind::Data => types::FsyncFlags::DATASYNC,
                            SyncKind::All => types::FsyncFlags::empty(),
                        };
                        opcode::Fsync::new(Fd(fd)).flags(flags).build()
                    }
                };
                let entry = if index < last {
                    entry.flags(squeue::Flags::IO_LINK)
                } else {
                    entry
                };
                entry.user_data(Operation::File(Arc::clone(op)).into_user_data(index))
            })
            .collect();
        // SAFETY: a write's bytes and an open's path are owned by the
        // operation, never changed or moved while it lives, and it lives
        // until the last of its entries' completions is reaped (each
        // holds a reference in its user data); a read's buffer is owned
        // the same way and not touched by Rust code until the operation is
        // done; a sync's entry holds no pointer; the descriptor stays open
        // as long (the operation holds the file: see `io::ring_file`).
        match unsafe { self.push_entries(&entries) } {
            Ok(()) => true,
            Err(error) => {
                for entry in &entries {
                    // SAFETY: made by `into_user_data` above, for entries
                    // that were never pushed: nothing else takes them back.
                    drop(unsafe { Operation::of(entry.get_user_data()) });
                }
                op.fail(error, wake);
                false
            }
        }
    }

    /// Pushes an operation's `entries` (see
    /// [`push_together`](Self::push_together)) and counts them in flight;
    /// the caller holds `submissions`.
    ///
    /// # Safety
    ///
    /// As [`push_together`](Self::push_together).
    unsafe fn push_entries(&self, entries: &[squeue::Entry]) -> io::Result<()> {
        // SAFETY: the caller's promise.
        unsafe { self.push_together(entries) }?;
        self.in_flight
            .fetch_add(entries.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Pushes `entries` to the submission queue, all together and in
    /// order, submitting what it holds first when they do not fit; the
    /// caller holds `submissions`.
    ///
    /// # Safety
    ///
    /// Whatever the entries point to stays valid, and untouched by Rust
    /// code where the kernel writes it, until their completions are reaped.
    unsafe fn push_together(&self, entries: &[squeue::Entry]) -> io::Result<()> {
        loop {
            // SAFETY: the caller holds the submission lock: this is the
            // only submission queue view (every other is made under it
            // too); the entries' memory is the caller's promise.
            if unsafe { self.ring.submission_shared().push_multiple(entries) }.is_ok() {
                return Ok(());
            }
            // The queue is full; once submitted it is empty, and a chain
            // is never longer than it is.
            self.submit_queue()?;
        }
    }

    /// Submits what the submission queue holds; the caller holds
    /// `submissions`.
    fn submit_queue(&self) -> io::Result<()> {
        loop {
            match self.ring.submitter().submit() {
                Ok(_) => return Ok(()),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }

    /// Submits the queued receives now, if there are any: a worker that
    /// will not poll the ring before it sleeps (another is the poller)
    /// or that is busy (see `sched::worker`).
    pub(super) fn flush(&self) {
        if !self.has_queued.load(Ordering::Relaxed) && !self.unsubmitted.load(Ordering::Relaxed) {
            return;
        }
        let _submitting = lock(&self.submissions);
        let unsubmitted = self.unsubmitted.swap(false, Ordering::Acquire);
        if self.push_queued() > 0 || unsubmitted {
            // A failure leaves the entries in the submission queue: the
            // next wait or flush submits them.
            if self.submit_queue().is_err() {
                self.unsubmitted.store(true, Ordering::Release);
            }
        }
    }

    /// Asks the kernel to end the multishot receive whose user data is
    /// `token` (its stream holds its share of the pool: see
    /// `io::ring_recv::MAX_HELD`), submitted at once, since a busy worker
    /// might not enter the kernel again soon and the receive would go on
    /// taking buffers; its last completion, `ECANCELED`, comes after.
    fn cancel_receive(&self, token: u64) -> io::Result<()> {
        self.submit(
            &opcode::AsyncCancel::new(token)
                .build()
                .user_data(CANCELLATION),
        )
    }

    /// The ring's pool of provided buffers, registered at the first call;
    /// `None` where the kernel refused it.
    fn pool(&self) -> Option<&Arc<BufPool>> {
        self.pool
            .get_or_init(|| BufPool::register(&self.ring).ok().map(Arc::new))
            .as_ref()
    }

    /// Whether a worker beside this ring can glance at it (see `glance`):
    /// `false` where the kernel maps the rings apart or the second mapping
    /// failed, and only the interval and the count then trigger a look.
    pub(super) fn has_glance(&self) -> bool {
        self.glance.is_some()
    }

    /// Operations submitted and not yet reaped.
    pub(super) fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub(super) fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live local array to a descriptor
        // this driver owns. Fails only when the counter is near overflow
        // (see the module docs), where the poll has been woken anyway.
        let _ = unsafe { libc::write(self.wake_fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Reports the completions to `on_event` and the operations' tasks.
    /// A poll that ended is watched again here (contract 5), unless
    /// `for_its_poller` is false (another ring's worker reaps: see
    /// `rings`), where it is left to the ring's own poller's next wait,
    /// which arms it before it blocks: the thread that arms a poll posts
    /// its completions.
    pub(super) fn reap(
        &self,
        poller: &mut Poller,
        wake: &mut Vec<Waker>,
        for_its_poller: bool,
        mut on_event: impl FnMut(usize, Event, &mut Vec<Waker>) -> Owner,
    ) -> io::Result<()> {
        let _ = poller;
        // SAFETY: `poller` is the ring's one poller, borrowed mutably for
        // this call: no other completion queue view exists meanwhile.
        let completions = unsafe { self.ring.completion_shared() };
        for completion in completions {
            let token = completion.user_data();
            let ended = !cqueue::more(completion.flags());
            if token == CANCELLATION {
                continue;
            }
            if token == self.wake_token {
                if ended {
                    // Armed again before this poll returns (contract 5).
                    self.watch_again(
                        self.wake_fd.as_raw_fd(),
                        token,
                        Interest::READABLE,
                        for_its_poller,
                    )?;
                }
                continue;
            }
            if token & OPERATION_BIT != 0 {
                let buffer = cqueue::buffer_select(completion.flags());
                if !ended {
                    // SAFETY: a completion with more to come is a multishot
                    // receive's (no file operation is multishot): its slot's
                    // reference stays the kernel's until the last one.
                    let slot = unsafe { Operation::borrowed_receive(token) };
                    if slot.complete(completion.result(), buffer, true, wake) {
                        self.cancel_receive(token)?;
                    }
                    continue;
                }
                self.in_flight.fetch_sub(1, Ordering::Relaxed);
                // SAFETY: the operation's last completion: this is the one
                // call for its user data.
                match unsafe { Operation::of(token) } {
                    // A last completion never asks for a cancellation.
                    Operation::Recv(slot) => {
                        let _ = slot.complete(completion.result(), buffer, false, wake);
                    }
                    Operation::File(op) => op.complete(step_of(token), completion.result(), wake),
                }
                continue;
            }
            let mut event = match u32::try_from(completion.result()) {
                Ok(mask) => event_of(mask),
                // An error ends the poll: whatever the source's state,
                // its task finds out by trying.
                Err(_) => Event::default(),
            };
            if ended {
                event.readable = true;
                event.writable = true;
            }
            let Ok(token) = usize::try_from(token) else {
                continue;
            };
            if let (true, Owner::Live(fd)) = (ended, on_event(token, event, wake)) {
                // Still registered: the registry stays locked by the
                // caller's callback until this poll returns, so no
                // close runs before the poll is armed again (or left to
                // the poller, where a close finds it).
                self.watch_again(
                    fd,
                    token as u64,
                    Interest::READABLE | Interest::WRITABLE,
                    for_its_poller,
                )?;
            }
        }
        Ok(())
    }

    /// Waits for a completion at most `timeout` unless one is there, or
    /// flushes completions the kernel kept aside while the queue was full.
    ///
    /// Called only by the holder of the ring's [`Poller`] (the driver's
    /// `wait` takes it), so reading the completion queue's length here is
    /// that holder's read.
    pub(super) fn wait(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.arm_registered_elsewhere()?;
        // The queued receives are pushed here and submitted by the enter
        // below (or by `flush` when the wait does not enter).
        let pushed = if self.has_queued.load(Ordering::Relaxed) {
            let _submitting = lock(&self.submissions);
            self.push_queued()
        } else {
            0
        };
        // Polls pushed for this enter (`watch_at_next_enter`): the flag is
        // cleared before the enter below, which submits every entry the
        // queue holds, so a poll pushed after it sets the flag again.
        let unsubmitted = self.unsubmitted.swap(false, Ordering::Acquire);
        let result = self.enter(timeout, pushed + usize::from(unsubmitted));
        if result.is_err() && (unsubmitted || pushed > 0) {
            // Perhaps not submitted: the next wait or flush enters again.
            self.unsubmitted.store(true, Ordering::Release);
        }
        result
    }

    /// [`wait`](Self::wait)'s enter, `pushed` entries waiting to be
    /// submitted.
    fn enter(&self, timeout: Option<Duration>, pushed: usize) -> io::Result<()> {
        // SAFETY: the caller holds the ring's one poller (see `wait`): no
        // other completion queue view exists meanwhile.
        if !unsafe { self.ring.completion_shared() }.is_empty() {
            if pushed > 0 {
                let _submitting = lock(&self.submissions);
                match self.submit_queue() {
                    Ok(_) => {}
                    // The kernel could not take them while completions
                    // wait (EBUSY, EAGAIN): they stay queued, and the flag
                    // makes the next wait or flush submit them (a wait
                    // that does not block would not enter otherwise).
                    Err(error)
                        if matches!(error.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) =>
                    {
                        self.unsubmitted.store(true, Ordering::Release);
                    }
                    Err(error) => return Err(error),
                }
            }
            return Ok(());
        }
        let submitter = self.ring.submitter();
        let result = match timeout {
            Some(Duration::ZERO) => {
                let (overflowed, posting) = {
                    let _submitting = lock(&self.submissions);
                    // SAFETY: as in `submit`: under the lock, the only
                    // submission queue view.
                    let queue = unsafe { self.ring.submission_shared() };
                    (queue.cq_overflow(), queue.taskrun())
                };
                if !overflowed && !posting && pushed == 0 {
                    return Ok(());
                }
                // Enters with GETEVENTS: flushes the kept completions and
                // runs this thread's pending completions.
                submitter.submit_and_wait(0)
            }
            Some(timeout) => {
                let timeout = Timespec::from(timeout);
                submitter.submit_with_args(1, &SubmitArgs::new().timespec(&timeout))
            }
            None => submitter.submit_and_wait(1),
        };
        match result {
            Ok(_) => Ok(()),
            // The timeout passed, or the kernel could not flush every
            // completion it kept aside: reap what is there.
            Err(error) if matches!(error.raw_os_error(), Some(libc::ETIME | libc::EBUSY)) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The ring's descriptor: readable while its completion queue holds
    /// entries.
    pub(super) fn ring_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    /// Whether completions wait to be reaped.
    pub(super) fn has_completions(&self, poller: &mut Poller) -> bool {
        let _ = poller;
        // SAFETY: `poller` is the ring's one poller, borrowed mutably for
        // this call: no other completion queue view exists meanwhile.
        !unsafe { self.ring.completion_shared() }.is_empty()
    }
}

impl Drop for Uring {
    /// Takes back the operations still in flight: cancelled (or, for a
    /// sync already running, finished), their completions are reaped here
    /// and their buffers freed and files closed. One whose completion the
    /// kernel has not posted yet (it posts from the thread that submitted
    /// it, or when the device answers) stays allocated, a sync's file
    /// open (and an open's new descriptor): a bounded leak, at the
    /// runtime's end only, rather than memory the kernel might write or a
    /// descriptor it might still use.
    fn drop(&mut self) {
        if self.unsubmitted.load(Ordering::Acquire) {
            // Closes queued by `close_at_next_enter` (and polls) that no
            // enter took yet: submitted, so the descriptors are closed.
            let _ = self.ring.submitter().submit();
        }
        if self.in_flight() == 0 {
            return;
        }
        let _ = self
            .ring
            .submitter()
            .register_sync_cancel(None, CancelBuilder::any());
        let _ = self.ring.submitter().submit_and_wait(0);
        // SAFETY: `&mut self`: no poller or other view exists any more.
        for completion in unsafe { self.ring.completion_shared() } {
            let token = completion.user_data();
            let last = !cqueue::more(completion.flags());
            let operation = token != self.wake_token && token != CANCELLATION;
            if last && operation && token & OPERATION_BIT != 0 {
                // SAFETY: as in `reap`: the completion's one call.
                match unsafe { Operation::of(token) } {
                    // Completed, so that a descriptor an open made is
                    // closed with the operation; nobody is woken.
                    Operation::File(op) => {
                        op.complete(step_of(token), completion.result(), &mut Vec::new())
                    }
                    Operation::Recv(slot) => drop(slot),
                }
            }
        }
    }
}

impl Operation {
    /// The user data that names this operation's entry for `step` (0 for
    /// a receive) in the kernel: its `Arc` as a pointer, tagged, holding
    /// the reference [`Operation::of`] takes back.
    fn into_user_data(self, step: usize) -> u64 {
        match self {
            Operation::Recv(slot) => OPERATION_BIT | Arc::into_raw(slot) as u64,
            Operation::File(op) => {
                OPERATION_BIT
                    | FILE_BIT
                    | ((step as u64) << STEP_SHIFT) & STEP_MASK
                    | Arc::into_raw(op) as u64
            }
        }
    }

    /// The receive slot a multishot receive's user data names, without
    /// taking its reference from the kernel.
    ///
    /// # Safety
    ///
    /// `token` is the user data of a receive's completion with more to
    /// come: the reference [`Operation::into_user_data`] gave the kernel is
    /// still held, so the slot lives at least until the last completion.
    unsafe fn borrowed_receive(token: u64) -> ManuallyDrop<Arc<RecvSlot>> {
        debug_assert_eq!(token & FILE_BIT, 0, "no file operation is multishot");
        let pointer = pointer_of(token);
        // SAFETY: per the contract, the pointer came from
        // `Arc::<RecvSlot>::into_raw` and its reference is still held;
        // `ManuallyDrop` keeps this view from releasing it.
        ManuallyDrop::new(unsafe { Arc::from_raw(pointer as *const RecvSlot) })
    }

    /// The descriptor the operation works on; `None` for an open.
    pub(super) fn fd(&self) -> Option<RawFd> {
        match self {
            Operation::Recv(slot) => Some(slot.fd()),
            Operation::File(op) => op.fd(),
        }
    }

    /// The operation could not be submitted: its waiting task gets
    /// `error`.
    fn fail(&self, error: io::Error, wake: &mut Vec<Waker>) {
        match self {
            Operation::Recv(slot) => slot.fail(error, wake),
            Operation::File(op) => op.fail(error, wake),
        }
    }

    /// The operation the user data `token` names, taking back the
    /// reference [`Operation::into_user_data`] gave the kernel.
    ///
    /// # Safety
    ///
    /// `token` is the user data of an operation's completion (an `Arc` of
    /// a [`RecvSlot`], or of a [`FileOp`] with [`FILE_BIT`] set, made into
    /// a pointer by [`Operation::into_user_data`]), and this is called
    /// once for it.
    unsafe fn of(token: u64) -> Operation {
        let pointer = pointer_of(token);
        if token & FILE_BIT != 0 {
            // SAFETY: per the contract above, the pointer came from
            // `Arc::<FileOp>::into_raw` and its reference has not been
            // taken back.
            Operation::File(unsafe { Arc::from_raw(pointer as *const FileOp) })
        } else {
            // SAFETY: as above, for a receive's slot.
            Operation::Recv(unsafe { Arc::from_raw(pointer as *const RecvSlot) })
        }
    }
}

/// A multishot poll of `fd` for `interest`, under `token`.
fn poll_entry(fd: RawFd, token: u64, interest: Interest) -> squeue::Entry {
    let mut mask = 0;
    if interest.is_readable() {
        mask |= (libc::POLLIN | libc::POLLPRI | libc::POLLRDHUP) as u32;
    }
    if interest.is_writable() {
        mask |= libc::POLLOUT as u32;
    }
    opcode::PollAdd::new(Fd(fd), mask)
        .multi(true)
        .build()
        .user_data(token)
}

/// The `Arc` pointer in an operation's user data, its tag bits cleared.
fn pointer_of(token: u64) -> u64 {
    token & !(OPERATION_BIT | FILE_BIT | STEP_MASK)
}

/// The step a file operation's user data names.
fn step_of(token: u64) -> usize {
    ((token & STEP_MASK) >> STEP_SHIFT) as usize
}

/// Stops `fd`, a listening socket, listening.
///
/// The cancelled poll's reference to the file is dropped by the worker
/// that armed it, in the kernel work that posts the cancellation,
/// microseconds after the cancellation returns: the caller's close may
/// then not be the last reference, and a listener would accept for those
/// microseconds, long enough for a bind of the same address right after
/// the drop to find it alive (`EADDRINUSE`, or a Unix socket file that
/// does not look stale). A listener shut for reading stops listening at
/// once (TCP and Unix alike); a connected stream is left alone, since its
/// close must send what a shutdown would not (a reset over unread data).
pub(super) fn stop_listening(fd: RawFd) {
    // SAFETY: no memory is passed; the descriptor is the caller's, open
    // until after this returns. A failure (not a socket) changes nothing.
    unsafe { libc::shutdown(fd, libc::SHUT_RD) };
}

/// What a poll's mask says, read as epoll's event would be.
fn event_of(mask: u32) -> Event {
    let has = |bit: libc::c_short| mask & bit as u32 != 0;
    Event {
        readable: has(libc::POLLIN) || has(libc::POLLPRI),
        writable: has(libc::POLLOUT),
        read_closed: has(libc::POLLHUP) || (has(libc::POLLIN) && has(libc::POLLRDHUP)),
        write_closed: has(libc::POLLHUP)
            || (has(libc::POLLOUT) && has(libc::POLLERR))
            || mask == libc::POLLERR as u32,
        error: has(libc::POLLERR),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_read_as_epoll_events_do() {
        let bits = |bits: &[libc::c_short]| bits.iter().fold(0, |mask, bit| mask | *bit as u32);
        let data = event_of(bits(&[libc::POLLIN]));
        assert!(data.readable && !data.writable && !data.read_closed && !data.error);
        let peer_closed = event_of(bits(&[libc::POLLIN, libc::POLLRDHUP, libc::POLLOUT]));
        assert!(peer_closed.readable && peer_closed.read_closed && !peer_closed.write_closed);
        let hangup = event_of(bits(&[libc::POLLHUP]));
        assert!(hangup.read_closed && hangup.write_closed && !hangup.readable);
        let reset = event_of(bits(&[libc::POLLERR]));
        assert!(reset.error && reset.write_closed && !reset.read_closed);
        let room = event_of(bits(&[libc::POLLOUT]));
        assert!(room.writable && !room.readable && !room.write_closed);
    }
}
