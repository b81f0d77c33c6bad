//! Receives that complete on the ring: on an io_uring reactor, a TCP
//! stream's reads are `IORING_OP_RECV`s into a buffer the stream owns,
//! copied out to the reader.
//!
//! # Why
//!
//! On readiness, every read is a `recv` system call after the event that
//! said data was there. On the ring, a read that finds nothing buffered
//! queues a receive and returns `Pending`; the receives queued by all the
//! tasks a worker ran go to the kernel together, in the one
//! `io_uring_enter` the worker makes when it next looks at the ring or
//! parks (see `driver::uring`), and each completes into its buffer: a
//! request/response server makes one system call per loop turn, not one
//! per read.
//!
//! What it costs: one copy of the received bytes, from the stream's
//! buffer to the reader's (the reader's buffer cannot be handed to the
//! kernel: a future dropped with the receive in flight would leave the
//! kernel writing into freed memory), and a buffer per stream that has
//! read, of [`buffer_len`] bytes, allocated at its first read.
//!
//! # Invariants
//!
//! - **The buffer outlives the kernel's use of it.** A receive in flight
//!   holds a reference to its [`RecvSlot`] (the operation's user data is
//!   an `Arc` turned into a pointer), released only when its completion
//!   is reaped, or when the ring itself is dropped after its operations
//!   were cancelled. The buffer is freed with the slot.
//! - **Nobody touches the buffer while the kernel may write it.** Rust
//!   code reads the buffer only in [`Phase::Filled`], under the slot's
//!   lock; the kernel writes it only in [`Phase::InFlight`], which only
//!   the completion ends.
//! - **A receive never reaches the kernel after its stream closed its
//!   descriptor.** A queued receive becomes an entry in the submission
//!   queue only under the ring's submission lock, and only if the slot is
//!   not [closed](RecvSlot::close); a stream closes its slot before it
//!   deregisters, and deregistration takes that lock, submits what the
//!   queue still holds, and cancels every operation on the descriptor
//!   before it returns (see `driver::uring`): the number cannot be reused
//!   under a receive.
//! - **Bytes keep their order.** Once a slot has a receive queued, in
//!   flight or buffered, every read of the stream goes through it until
//!   it is drained, whatever the batch policy says meanwhile.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::lock;

/// The largest buffer a stream gets: a read of more is served in pieces.
const MAX_BUFFER: usize = 64 * 1024;
/// The smallest: a reader asking for a few bytes (a length prefix) still
/// gets a buffer worth a system call.
const MIN_BUFFER: usize = 4 * 1024;

/// The buffer a stream whose first read asks for `wanted` bytes gets.
pub(crate) fn buffer_len(wanted: usize) -> usize {
    wanted.clamp(MIN_BUFFER, MAX_BUFFER)
}

/// Where a stream's receive stands.
#[derive(Debug)]
enum Phase {
    /// Nothing queued, in flight or buffered.
    Idle,
    /// Waiting for the ring's next submission.
    Queued,
    /// The kernel holds the buffer.
    InFlight,
    /// `start..end` of the buffer hold received bytes not yet read.
    Filled { start: usize, end: usize },
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
    phase: Phase,
    /// `None` until the first receive.
    buffer: Option<Buffer>,
    /// The tasks waiting to read (two tasks may read one stream at once;
    /// both are woken, one gets the bytes).
    wakers: Vec<Waker>,
    /// The stream is gone: nothing is submitted any more.
    closed: bool,
}

/// One stream's receive and its buffer (see the module docs).
#[derive(Debug)]
pub(crate) struct RecvSlot {
    fd: RawFd,
    state: Mutex<State>,
}

// SAFETY: the buffer is reached only through `state`'s lock (by Rust code,
// in `Phase::Filled`) or by the kernel (in `Phase::InFlight`), never both
// (see the module invariants); everything else in the slot is `Send` and
// `Sync`.
unsafe impl Send for RecvSlot {}
// SAFETY: as above.
unsafe impl Sync for RecvSlot {}

/// A receive ready for the submission queue: the descriptor, and the
/// buffer the kernel may write until the completion.
pub(crate) struct Submission {
    pub(crate) fd: RawFd,
    pub(crate) buf: *mut u8,
    pub(crate) len: u32,
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
                phase: Phase::Idle,
                buffer: None,
                wakers: Vec::new(),
                closed: false,
            }),
        })
    }

    /// Whether a read must come here (something is queued, in flight or
    /// buffered) even if its stream would otherwise read another way.
    pub(crate) fn is_busy(&self) -> bool {
        !matches!(lock(&self.state).phase, Phase::Idle)
    }

    /// A read of up to `wanted` bytes: buffered bytes are handed to
    /// `copy` (which copies what fits and says how many), end-of-file and
    /// errors are reported, and otherwise a receive is queued (`queue` is
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
        match &mut state.phase {
            Phase::Filled { start, end } => {
                let (from, to) = (*start, *end);
                let buffer = state.buffer.as_ref().expect("a filled slot has its buffer");
                // SAFETY: in `Filled` the kernel is done with the buffer
                // and wrote `from..to` (`to` ≤ its length, from the
                // completion); the lock is held, so no other reader
                // copies out of it meanwhile.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        buffer.ptr.as_ptr().add(from).cast::<u8>(),
                        to - from,
                    )
                };
                let n = copy(bytes);
                state.phase = if from + n >= to {
                    Phase::Idle
                } else {
                    Phase::Filled {
                        start: from + n,
                        end: to,
                    }
                };
                Poll::Ready(Ok(n))
            }
            Phase::Eof => Poll::Ready(Ok(0)),
            Phase::Failed(_) => {
                let Phase::Failed(error) = std::mem::replace(&mut state.phase, Phase::Idle) else {
                    unreachable!("matched above")
                };
                Poll::Ready(Err(error))
            }
            Phase::Queued | Phase::InFlight => {
                add_waker(&mut state.wakers, cx.waker());
                Poll::Pending
            }
            Phase::Idle => {
                if state.buffer.is_none() {
                    let len = buffer_len(wanted);
                    let boxed = Box::<[u8]>::new_uninit_slice(len);
                    // SAFETY: `Box::into_raw` never returns null.
                    let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(boxed).cast()) };
                    state.buffer = Some(Buffer { ptr, len });
                }
                state.phase = Phase::Queued;
                add_waker(&mut state.wakers, cx.waker());
                drop(state);
                queue(Arc::clone(self));
                Poll::Pending
            }
        }
    }

    /// Called by the ring under its submission lock: the receive to
    /// submit, if the slot still wants one (it is queued and its stream
    /// is open), and the slot is then in flight.
    pub(crate) fn take_for_submission(&self) -> Option<Submission> {
        let mut state = lock(&self.state);
        if state.closed || !matches!(state.phase, Phase::Queued) {
            return None;
        }
        let buffer = state.buffer.as_ref().expect("a queued slot has its buffer");
        let submission = Submission {
            fd: self.fd,
            buf: buffer.ptr.as_ptr().cast(),
            len: u32::try_from(buffer.len).unwrap_or(u32::MAX),
        };
        state.phase = Phase::InFlight;
        Some(submission)
    }

    /// The receive completed with `result` (a byte count, or a negated
    /// OS error); the waiting tasks' wakers go to `wake`.
    pub(crate) fn complete(&self, result: i32, wake: &mut Vec<Waker>) {
        let mut state = lock(&self.state);
        state.phase = match result {
            0 => Phase::Eof,
            n if n > 0 => Phase::Filled {
                start: 0,
                end: usize::try_from(n).expect("positive"),
            },
            // Cancelled while the stream lives (the ring dropped it, as it
            // does when the thread that submitted it exits), or
            // interrupted: the reader queues another.
            n if -n == libc::ECANCELED || -n == libc::EINTR || -n == libc::EAGAIN => Phase::Idle,
            n => Phase::Failed(io::Error::from_raw_os_error(-n)),
        };
        wake.append(&mut state.wakers);
    }

    /// A receive that could not be submitted (the ring refused it): the
    /// reader gets `error`.
    pub(crate) fn fail(&self, error: io::Error, wake: &mut Vec<Waker>) {
        let mut state = lock(&self.state);
        state.phase = Phase::Failed(error);
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

impl Drop for RecvSlot {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(buffer) = state.buffer.take() {
            let slice = std::ptr::slice_from_raw_parts_mut(buffer.ptr.as_ptr(), buffer.len);
            // SAFETY: allocated by `Box::<[MaybeUninit<u8>]>` of this
            // length in `poll_read`; the slot is dropped only when nothing
            // else holds it, the kernel included (its receive holds an
            // `Arc`), so nobody reads or writes the buffer any more.
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
        let submission = slot.take_for_submission().expect("queued");
        assert!(bytes.len() <= submission.len as usize);
        // SAFETY: the slot is in flight: the test stands for the kernel,
        // the only writer of the buffer now.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), submission.buf, bytes.len()) };
        slot.complete(bytes.len() as i32, &mut Vec::new());
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
        slot.take_for_submission().unwrap();
        slot.complete(-libc::ECONNRESET, &mut Vec::new());
        match read(&slot, &mut got, 10) {
            (Poll::Ready(Err(error)), false) => {
                assert_eq!(error.kind(), io::ErrorKind::ConnectionReset)
            }
            other => panic!("{other:?}"),
        }
        let _ = read(&slot, &mut got, 10);
        slot.take_for_submission().unwrap();
        slot.complete(0, &mut Vec::new());
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
        slot.take_for_submission().unwrap();
        slot.complete(-libc::ECANCELED, &mut Vec::new());
        assert!(matches!(read(&slot, &mut got, 10), (Poll::Pending, true)));
        slot.close();
        assert!(slot.take_for_submission().is_none());
    }

    #[test]
    fn buffers_are_sized_from_the_first_read_within_bounds() {
        assert_eq!(buffer_len(5), MIN_BUFFER);
        assert_eq!(buffer_len(8192), 8192);
        assert_eq!(buffer_len(1 << 20), MAX_BUFFER);
    }
}
