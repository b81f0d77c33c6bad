//! Receives that complete on the ring: on an io_uring reactor, a TCP
//! stream's reads are `IORING_OP_RECV`s, multishot into the ring's
//! provided buffers ([`BufPool`]) or single into a buffer the stream
//! owns, copied out to the reader.
//!
//! # Why
//!
//! On readiness, every read is a `recv` system call after the event that
//! said data was there. On the ring, a read that finds nothing buffered
//! queues a receive and returns `Pending`; the receives queued by all the
//! tasks a worker ran go to the kernel together, in the one
//! `io_uring_enter` the worker makes when it next looks at the ring or
//! parks (see `driver::uring`).
//!
//! The receive is multishot (Linux 6.0): armed once, it stays armed for
//! the stream's life and completes once per arrival into a buffer the
//! kernel picks from the ring's pool, so a request/response stream costs
//! no submission per request at all, and no poll armed inside the kernel
//! per read (what a single receive that finds nothing does). When the
//! pool runs dry (`ENOBUFS`, which ends the multishot receive), the next
//! receive is a single one into the stream's own buffer, so a stream
//! never waits for another to give buffers back; the one after is
//! multishot again.
//!
//! What it costs: one copy of the received bytes, from the ring's buffer
//! to the reader's (the reader's buffer cannot be handed to the kernel: a
//! future dropped with the receive in flight would leave the kernel
//! writing into freed memory); pool buffers held by a stream until its
//! reader reads them, at most [`MAX_HELD`] of them before the ring
//! cancels the stream's receive (so a stream that receives and is not
//! read leaves the pool to the others; what follows waits in the socket,
//! and the receive is armed again once the reader has drained it); and,
//! for a stream that ever fell back to a single receive, a buffer of its
//! own of [`buffer_len`] bytes, sized by its first read.
//!
//! # Invariants
//!
//! - **The buffers outlive the kernel's use of them.** A receive in
//!   flight or armed holds a reference to its [`RecvSlot`] (the
//!   operation's user data is an `Arc` turned into a pointer), released
//!   only when its last completion is reaped, or when the ring itself is
//!   dropped after its operations were cancelled; the slot holds the
//!   pool of the ring it armed a multishot receive on. The own buffer is
//!   freed with the slot.
//! - **Nobody touches a buffer while the kernel may write it.** Rust code
//!   reads a buffer only once a completion filled it, under the slot's
//!   lock; the kernel writes the own buffer only while the single receive
//!   is in flight, which only its completion ends, and a pool buffer only
//!   between its publication and the completion that names it (see
//!   `pool`). A filled pool buffer is given back once read, or when the
//!   slot is dropped.
//! - **A receive never reaches the kernel after its stream closed its
//!   descriptor.** A queued receive becomes an entry in the submission
//!   queue only under the ring's submission lock, and only if the slot is
//!   not [closed](RecvSlot::close); a stream closes its slot before its
//!   descriptor is closed, and the close cancels every operation on the
//!   descriptor, multishot receives included, after whatever the queue
//!   holds and before the number is free: synchronously, having
//!   submitted the queue, or on its home ring's worker linked to an
//!   `IORING_OP_CLOSE` behind the queued entries (see `driver::uring`).
//!   The number cannot be reused under a receive.
//! - **Bytes keep their order.** A slot has at most one receive queued,
//!   in flight or armed, and a multishot receive's completions come in
//!   order; filled buffers are read first to last, and an end of stream
//!   or an error is told only after them. Once a slot has a receive or
//!   bytes, every read of the stream goes through it until it is
//!   drained, whatever the batch policy says meanwhile.

mod pool;

use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

pub(crate) use pool::BufPool;

use super::lock;

/// The largest buffer a stream gets: a read of more is served in pieces.
const MAX_BUFFER: usize = 64 * 1024;
/// The smallest: a reader asking for a few bytes (a length prefix) still
/// gets a buffer worth a system call.
const MIN_BUFFER: usize = 4 * 1024;

/// The most pool buffers a stream holds unread before its multishot
/// receive is cancelled (256 KiB at the pool's 16 KiB): a stream that
/// receives and is not read stops taking the pool from the others; its
/// next receive is armed once its reader has drained it.
pub(crate) const MAX_HELD: usize = 16;

/// The buffer a stream whose first read asks for `wanted` bytes gets.
pub(crate) fn buffer_len(wanted: usize) -> usize {
    wanted.clamp(MIN_BUFFER, MAX_BUFFER)
}

/// Where a stream's receive stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receive {
    /// Nothing queued or in flight.
    Idle,
    /// Waiting for the ring's next submission.
    Queued,
    /// A single receive: the kernel holds the stream's own buffer.
    InFlight,
    /// A multishot receive: the kernel fills the pool's buffers as bytes
    /// arrive, until a completion says it ended.
    Armed,
}

/// Received bytes not yet read: `start..end` of the stream's own buffer,
/// or of a pool buffer the slot owns.
#[derive(Debug)]
enum Filled {
    Own { start: usize, end: usize },
    Pooled { id: u16, start: usize, end: usize },
}

/// How the stream's receiving ended, told once its bytes are read.
#[derive(Debug)]
enum End {
    /// The peer closed its side: every read returns 0.
    Eof,
    /// The receive failed; the next read returns the error.
    Failed(io::Error),
}

/// The buffer, owned by the slot (see the module invariants).
#[derive(Debug)]
struct Buffer {
    ptr: NonNull<MaybeUninit<u8>>,
    len: usize,
}

#[derive(Debug)]
struct State {
    receive: Receive,
    /// In arrival order; at most one `Own`, and only while nothing is in
    /// flight.
    filled: VecDeque<Filled>,
    end: Option<End>,
    /// `None` until the first single receive.
    buffer: Option<Buffer>,
    /// What the stream's first read asked for, which sizes `buffer`.
    first_wanted: usize,
    /// The pool of the ring the multishot receive was submitted to, which
    /// the `Pooled` buffers go back to.
    pool: Option<Arc<BufPool>>,
    /// The pool ran dry under the last multishot receive: the next
    /// receive is a single one, into the stream's own buffer.
    single_next: bool,
    /// The ring was asked to cancel the multishot receive (the slot held
    /// [`MAX_HELD`] buffers); until its last completion.
    cancelling: bool,
    /// The tasks waiting to read (two tasks may read one stream at once;
    /// both are woken, one gets the bytes).
    wakers: Vec<Waker>,
    /// The stream is gone: nothing is submitted any more.
    closed: bool,
}

/// One stream's receive and its buffers (see the module docs).
#[derive(Debug)]
pub(crate) struct RecvSlot {
    fd: RawFd,
    state: Mutex<State>,
}

// SAFETY: the buffers are reached only through `state`'s lock (by Rust
// code, once filled) or by the kernel (while a receive is in flight or
// armed, and a pool buffer until a completion names it), never both (see
// the module invariants); everything else in the slot is `Send` and
// `Sync`.
unsafe impl Send for RecvSlot {}
// SAFETY: as above.
unsafe impl Sync for RecvSlot {}

/// A receive ready for the submission queue.
pub(crate) enum Submission {
    /// A single receive into the stream's own buffer, which the kernel may
    /// write until the completion.
    Single { fd: RawFd, buf: *mut u8, len: u32 },
    /// A multishot receive into the buffers of the pool's group.
    Multishot { fd: RawFd, group: u16 },
}

impl RecvSlot {
    /// The stream's descriptor.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// The slot of the stream on descriptor `fd`.
    pub(crate) fn new(fd: RawFd) -> Arc<RecvSlot> {
        Arc::new(RecvSlot {
            fd,
            state: Mutex::new(State {
                receive: Receive::Idle,
                filled: VecDeque::new(),
                end: None,
                buffer: None,
                first_wanted: 0,
                pool: None,
                single_next: false,
                cancelling: false,
                wakers: Vec::new(),
                closed: false,
            }),
        })
    }

    /// Whether a read must come here (something is queued, in flight,
    /// armed or buffered) even if its stream would otherwise read another
    /// way.
    pub(crate) fn is_busy(&self) -> bool {
        let state = lock(&self.state);
        state.receive != Receive::Idle || !state.filled.is_empty() || state.end.is_some()
    }

    /// A read of up to `wanted` bytes: buffered bytes are handed to
    /// `copy` (which copies what fits and says how many), end-of-file and
    /// errors are reported once the bytes before them are read, and
    /// otherwise a receive is queued if none is in flight (`queue` is
    /// called with the slot, once, after the lock is released) and the
    /// task waits.
    pub(crate) fn poll_read(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        wanted: usize,
        copy: &mut dyn FnMut(&[u8]) -> usize,
        queue: impl FnOnce(Arc<RecvSlot>),
    ) -> Poll<io::Result<usize>> {
        let mut state = lock(&self.state);
        if let Some(n) = state.copy_out(copy) {
            return Poll::Ready(Ok(n));
        }
        match state.end.take() {
            Some(End::Eof) => {
                state.end = Some(End::Eof);
                return Poll::Ready(Ok(0));
            }
            Some(End::Failed(error)) => return Poll::Ready(Err(error)),
            None => {}
        }
        add_waker(&mut state.wakers, cx.waker());
        if state.receive != Receive::Idle {
            return Poll::Pending;
        }
        if state.first_wanted == 0 {
            state.first_wanted = wanted;
        }
        state.receive = Receive::Queued;
        drop(state);
        queue(Arc::clone(self));
        Poll::Pending
    }

    /// Called by the ring under its submission lock, with the ring's pool
    /// if it has one: the receive to submit, if the slot still wants one
    /// (it is queued and its stream is open), and the slot is then in
    /// flight or armed. Multishot when there is a pool, unless the pool
    /// ran dry under the slot's last one.
    pub(crate) fn take_for_submission(&self, pool: Option<&Arc<BufPool>>) -> Option<Submission> {
        let mut state = lock(&self.state);
        if state.closed || state.receive != Receive::Queued {
            return None;
        }
        debug_assert!(
            state.filled.is_empty(),
            "a receive is queued only once all is read"
        );
        match pool {
            Some(pool) if !std::mem::take(&mut state.single_next) => {
                state.pool = Some(Arc::clone(pool));
                state.receive = Receive::Armed;
                Some(Submission::Multishot {
                    fd: self.fd,
                    group: pool::GROUP,
                })
            }
            _ => {
                let wanted = state.first_wanted;
                let buffer = state.buffer.get_or_insert_with(|| {
                    let len = buffer_len(wanted);
                    let boxed = Box::<[u8]>::new_uninit_slice(len);
                    // SAFETY: `Box::into_raw` never returns null.
                    let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(boxed).cast()) };
                    Buffer { ptr, len }
                });
                let submission = Submission::Single {
                    fd: self.fd,
                    buf: buffer.ptr.as_ptr().cast(),
                    len: u32::try_from(buffer.len).unwrap_or(u32::MAX),
                };
                state.receive = Receive::InFlight;
                Some(submission)
            }
        }
    }

    /// A completion of the slot's receive: `result` a byte count or a
    /// negated OS error, `buffer` the pool buffer it filled, `more`
    /// whether a multishot receive goes on. The waiting tasks' wakers go
    /// to `wake`. Returns whether the ring should cancel the multishot
    /// receive: the slot now holds [`MAX_HELD`] unread pool buffers (asked
    /// once a receive).
    #[must_use = "the ring cancels the receive when asked"]
    pub(crate) fn complete(
        &self,
        result: i32,
        buffer: Option<u16>,
        more: bool,
        wake: &mut Vec<Waker>,
    ) -> bool {
        let mut state = lock(&self.state);
        let multishot = state.receive == Receive::Armed;
        if !more {
            state.receive = Receive::Idle;
            state.cancelling = false;
        }
        match (result, buffer) {
            (n, Some(id)) if n > 0 && multishot => {
                let end = usize::try_from(n).expect("positive");
                state.filled.push_back(Filled::Pooled { id, start: 0, end });
            }
            (n, None) if n > 0 && !multishot => {
                let end = usize::try_from(n).expect("positive");
                state.filled.push_back(Filled::Own { start: 0, end });
            }
            (n, buffer) if n > 0 => {
                // A completion that does not match the receive: its
                // buffer goes back, the reader gets an error.
                if let (Some(id), Some(pool)) = (buffer, &state.pool) {
                    pool.give_back(id);
                }
                state.end = Some(End::Failed(io::Error::other(
                    "the ring completed a receive with a buffer that does not match it",
                )));
            }
            (0, _) => state.end = Some(End::Eof),
            // The pool ran dry: the next receive is a single one.
            (n, _) if -n == libc::ENOBUFS => state.single_next = true,
            // Cancelled while the stream lives (the ring dropped it, as it
            // does when the thread that submitted it exits), or
            // interrupted: the reader queues another.
            (n, _) if -n == libc::ECANCELED || -n == libc::EINTR || -n == libc::EAGAIN => {}
            (n, _) => state.end = Some(End::Failed(io::Error::from_raw_os_error(-n))),
        }
        wake.append(&mut state.wakers);
        let cancel = more && !state.cancelling && state.pooled() >= MAX_HELD;
        state.cancelling |= cancel;
        cancel
    }

    /// A receive that could not be submitted (the ring refused it): the
    /// reader gets `error`.
    pub(crate) fn fail(&self, error: io::Error, wake: &mut Vec<Waker>) {
        let mut state = lock(&self.state);
        state.receive = Receive::Idle;
        state.end = Some(End::Failed(error));
        wake.append(&mut state.wakers);
    }

    /// The stream is closing: nothing is submitted for it from now on.
    /// Called before its deregistration (see the module invariants).
    pub(crate) fn close(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        state.wakers.clear();
    }
}

impl State {
    /// Pool buffers held unread.
    fn pooled(&self) -> usize {
        self.filled
            .iter()
            .filter(|fill| matches!(fill, Filled::Pooled { .. }))
            .count()
    }

    /// Copies out of the first filled buffer, if any, and gives a pool
    /// buffer back once it is read: how many bytes were copied.
    fn copy_out(&mut self, copy: &mut dyn FnMut(&[u8]) -> usize) -> Option<usize> {
        // The filled buffer's first `end` bytes, and where reading is.
        let (bytes, start, end) = match self.filled.front_mut()? {
            Filled::Own { start, end } => {
                let buffer = self.buffer.as_ref().expect("an own fill has its buffer");
                // SAFETY: the receive into the own buffer completed (it is
                // filled), so the kernel is done with it and wrote its
                // first `end` bytes (`end` ≤ its length, from the
                // completion); the lock is held, so no other reader copies
                // out of it meanwhile.
                let bytes =
                    unsafe { std::slice::from_raw_parts(buffer.ptr.as_ptr().cast::<u8>(), *end) };
                (bytes, start, *end)
            }
            Filled::Pooled { id, start, end } => {
                let pool = self.pool.as_ref().expect("a pooled fill has its pool");
                // SAFETY: a completion named buffer `id` with `end` bytes,
                // and the slot has not given it back (see `pool`).
                (unsafe { pool.bytes(*id, *end) }, start, *end)
            }
        };
        let n = copy(&bytes[*start..]);
        *start += n;
        if *start >= end {
            self.give_back_front();
        }
        Some(n)
    }

    /// Drops the first filled buffer, giving a pool buffer back.
    fn give_back_front(&mut self) {
        if let Some(Filled::Pooled { id, .. }) = self.filled.pop_front() {
            self.pool
                .as_ref()
                .expect("a pooled fill has its pool")
                .give_back(id);
        }
    }
}

impl Drop for RecvSlot {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        while !state.filled.is_empty() {
            state.give_back_front();
        }
        if let Some(buffer) = state.buffer.take() {
            let slice = std::ptr::slice_from_raw_parts_mut(buffer.ptr.as_ptr(), buffer.len);
            // SAFETY: allocated by `Box::<[MaybeUninit<u8>]>` of this
            // length in `take_for_submission`; the slot is dropped only
            // when nothing else holds it, the kernel included (its receive
            // holds an `Arc`), so nobody reads or writes the buffer any
            // more.
            drop(unsafe { Box::from_raw(slice) });
        }
    }
}

/// Adds `waker` to `wakers` unless it is there already.
fn add_waker(wakers: &mut Vec<Waker>, waker: &Waker) {
    if !wakers.iter().any(|w| w.will_wake(waker)) {
        wakers.push(waker.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Waker;

    fn read(
        slot: &Arc<RecvSlot>,
        into: &mut Vec<u8>,
        max: usize,
    ) -> (Poll<io::Result<usize>>, bool) {
        let mut queued = false;
        let mut cx = Context::from_waker(Waker::noop());
        let poll = slot.poll_read(
            &mut cx,
            max,
            &mut |bytes| {
                let n = bytes.len().min(max);
                into.extend_from_slice(&bytes[..n]);
                n
            },
            |_| queued = true,
        );
        (poll, queued)
    }

    /// Writes `bytes` where the kernel would, and completes the receive.
    fn kernel_receives(slot: &RecvSlot, bytes: &[u8]) {
        let Some(Submission::Single { buf, len, .. }) = slot.take_for_submission(None) else {
            panic!("a single receive queued");
        };
        assert!(bytes.len() <= len as usize);
        // SAFETY: the slot is in flight: the test stands for the kernel,
        // the only writer of the buffer now.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
        let _ = slot.complete(bytes.len() as i32, None, false, &mut Vec::new());
    }

    #[test]
    fn a_receive_is_read_in_pieces_then_queued_again() {
        let slot = RecvSlot::new(-1);
        let mut got = Vec::new();
        let (poll, queued) = read(&slot, &mut got, 3);
        assert!(poll.is_pending() && queued);
        // Queued once: a second read waits without queueing again.
        assert!(matches!(read(&slot, &mut got, 3), (Poll::Pending, false)));
        kernel_receives(&slot, b"hello");
        assert!(matches!(
            read(&slot, &mut got, 3),
            (Poll::Ready(Ok(3)), false)
        ));
        assert!(matches!(
            read(&slot, &mut got, 3),
            (Poll::Ready(Ok(2)), false)
        ));
        assert_eq!(got, b"hello");
        assert!(!slot.is_busy());
        assert!(matches!(read(&slot, &mut got, 3), (Poll::Pending, true)));
    }

    #[test]
    fn end_of_file_stays_and_errors_are_reported_once() {
        let slot = RecvSlot::new(-1);
        let mut got = Vec::new();
        let _ = read(&slot, &mut got, 10);
        slot.take_for_submission(None).unwrap();
        let _ = slot.complete(-libc::ECONNRESET, None, false, &mut Vec::new());
        match read(&slot, &mut got, 10) {
            (Poll::Ready(Err(error)), false) => {
                assert_eq!(error.kind(), io::ErrorKind::ConnectionReset)
            }
            other => panic!("{other:?}"),
        }
        let _ = read(&slot, &mut got, 10);
        slot.take_for_submission(None).unwrap();
        let _ = slot.complete(0, None, false, &mut Vec::new());
        for _ in 0..2 {
            assert!(matches!(
                read(&slot, &mut got, 10),
                (Poll::Ready(Ok(0)), false)
            ));
        }
    }

    #[test]
    fn a_cancelled_receive_is_queued_again_and_a_closed_slot_submits_nothing() {
        let slot = RecvSlot::new(-1);
        let mut got = Vec::new();
        let _ = read(&slot, &mut got, 10);
        slot.take_for_submission(None).unwrap();
        let _ = slot.complete(-libc::ECANCELED, None, false, &mut Vec::new());
        assert!(matches!(read(&slot, &mut got, 10), (Poll::Pending, true)));
        slot.close();
        assert!(slot.take_for_submission(None).is_none());
    }

    /// Arms `slot`'s queued receive on `pool`, as the ring does.
    fn arm(slot: &RecvSlot, pool: &Arc<BufPool>) {
        assert!(matches!(
            slot.take_for_submission(Some(pool)),
            Some(Submission::Multishot { .. })
        ));
    }

    /// A multishot completion of `bytes` into pool buffer `id`; whether
    /// the slot asks for its receive to be cancelled.
    fn arrives(slot: &RecvSlot, pool: &BufPool, id: u16, bytes: &[u8], more: bool) -> bool {
        pool.fill_as_the_kernel(id, bytes);
        slot.complete(bytes.len() as i32, Some(id), more, &mut Vec::new())
    }

    #[test]
    fn a_multishot_receive_stays_armed_and_its_buffers_go_back_once_read() {
        let pool = Arc::new(BufPool::unregistered());
        let slot = RecvSlot::new(-1);
        let mut got = Vec::new();
        assert!(matches!(read(&slot, &mut got, 4), (Poll::Pending, true)));
        arm(&slot, &pool);
        let _ = arrives(&slot, &pool, 5, b"abcdef", true);
        let _ = arrives(&slot, &pool, 9, b"gh", true);
        let before = pool.given_back();
        assert!(matches!(
            read(&slot, &mut got, 4),
            (Poll::Ready(Ok(4)), false)
        ));
        assert_eq!(pool.given_back(), before, "buffer 5 is not read yet");
        assert!(matches!(
            read(&slot, &mut got, 4),
            (Poll::Ready(Ok(2)), false)
        ));
        assert_eq!(pool.given_back(), before + 1);
        assert!(matches!(
            read(&slot, &mut got, 4),
            (Poll::Ready(Ok(2)), false)
        ));
        assert_eq!(pool.given_back(), before + 2);
        assert_eq!(got, b"abcdefgh");
        // Still armed: a read waits without queueing another receive.
        assert!(slot.is_busy());
        assert!(matches!(read(&slot, &mut got, 4), (Poll::Pending, false)));
        // The end of stream ends it, after the bytes before it.
        let _ = arrives(&slot, &pool, 2, b"ij", true);
        let _ = slot.complete(0, None, false, &mut Vec::new());
        assert!(matches!(
            read(&slot, &mut got, 4),
            (Poll::Ready(Ok(2)), false)
        ));
        assert!(matches!(
            read(&slot, &mut got, 4),
            (Poll::Ready(Ok(0)), false)
        ));
        assert!(matches!(
            read(&slot, &mut got, 4),
            (Poll::Ready(Ok(0)), false)
        ));
        assert_eq!(got, b"abcdefghij");
    }

    #[test]
    fn a_dry_pool_makes_the_next_receive_single_and_the_one_after_multishot() {
        let pool = Arc::new(BufPool::unregistered());
        let slot = RecvSlot::new(-1);
        let mut got = Vec::new();
        let _ = read(&slot, &mut got, 100);
        arm(&slot, &pool);
        let _ = slot.complete(-libc::ENOBUFS, None, false, &mut Vec::new());
        assert!(matches!(read(&slot, &mut got, 100), (Poll::Pending, true)));
        let Some(Submission::Single { buf, len, .. }) = slot.take_for_submission(Some(&pool))
        else {
            panic!("a single receive after the pool ran dry");
        };
        assert_eq!(len as usize, MIN_BUFFER);
        // SAFETY: the single receive is in flight: the test is the kernel.
        unsafe { std::ptr::copy_nonoverlapping(b"xyz".as_ptr(), buf, 3) };
        let _ = slot.complete(3, None, false, &mut Vec::new());
        assert!(matches!(
            read(&slot, &mut got, 100),
            (Poll::Ready(Ok(3)), false)
        ));
        assert!(matches!(read(&slot, &mut got, 100), (Poll::Pending, true)));
        arm(&slot, &pool);
        assert_eq!(got, b"xyz");
    }

    #[test]
    fn a_dropped_slot_gives_its_unread_buffers_back() {
        let pool = Arc::new(BufPool::unregistered());
        let slot = RecvSlot::new(-1);
        let _ = read(&slot, &mut Vec::new(), 10);
        arm(&slot, &pool);
        let _ = arrives(&slot, &pool, 1, b"one", true);
        let _ = arrives(&slot, &pool, 3, b"two", true);
        slot.close();
        let _ = slot.complete(-libc::ECANCELED, None, false, &mut Vec::new());
        let before = pool.given_back();
        drop(slot);
        assert_eq!(pool.given_back(), before + 2);
    }

    #[test]
    fn an_error_is_told_after_the_bytes_received_before_it() {
        let pool = Arc::new(BufPool::unregistered());
        let slot = RecvSlot::new(-1);
        let mut got = Vec::new();
        let _ = read(&slot, &mut got, 10);
        arm(&slot, &pool);
        let _ = arrives(&slot, &pool, 0, b"last", true);
        let _ = slot.complete(-libc::ECONNRESET, None, false, &mut Vec::new());
        assert!(matches!(
            read(&slot, &mut got, 10),
            (Poll::Ready(Ok(4)), false)
        ));
        assert!(matches!(
            read(&slot, &mut got, 10),
            (Poll::Ready(Err(_)), false)
        ));
        assert_eq!(got, b"last");
    }

    #[test]
    fn a_stream_holding_its_share_of_the_pool_asks_once_for_its_receive_to_end() {
        let pool = Arc::new(BufPool::unregistered());
        let slot = RecvSlot::new(-1);
        let mut got = Vec::new();
        let _ = read(&slot, &mut got, 10);
        arm(&slot, &pool);
        for id in 0..MAX_HELD as u16 - 1 {
            assert!(!arrives(&slot, &pool, id, b"x", true), "buffer {id}");
        }
        assert!(
            arrives(&slot, &pool, 99, b"x", true),
            "the last one it may hold"
        );
        // Asked once: more arriving before the cancellation lands does not
        // ask again.
        assert!(!arrives(&slot, &pool, 100, b"y", true));
        let _ = slot.complete(-libc::ECANCELED, None, false, &mut Vec::new());
        // What it held is read, and then the receive is armed again.
        for _ in 0..=MAX_HELD {
            assert!(matches!(
                read(&slot, &mut got, 10),
                (Poll::Ready(Ok(1)), false)
            ));
        }
        assert_eq!(got.len(), MAX_HELD + 1);
        assert!(matches!(read(&slot, &mut got, 10), (Poll::Pending, true)));
        arm(&slot, &pool);
        assert!(!arrives(&slot, &pool, 3, b"z", true));
    }

    #[test]
    fn buffers_are_sized_from_the_first_read_within_bounds() {
        assert_eq!(buffer_len(5), MIN_BUFFER);
        assert_eq!(buffer_len(8192), 8192);
        assert_eq!(buffer_len(1 << 20), MAX_BUFFER);
    }
}
