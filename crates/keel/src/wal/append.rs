//! [`Append`]: the future of one record, and the [`Slot`] through which
//! the writer thread completes it.
//!
//! The slot is a one-shot cell shared by the future and the queued record
//! ([`Pending`]). The writer stores the result and takes the waker under
//! the slot's lock, then wakes outside it; the future stores its waker and
//! checks for a result under the same lock, so a completion is never missed.
//! Nothing here knows about keel's scheduler: the future works with any
//! executor's [`Waker`].

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::{lock, Lsn};

/// The state of one append, shared by its future and its queued record.
pub(crate) struct Slot {
    state: Mutex<SlotState>,
}

enum SlotState {
    /// Not durable yet; the waker of the last poll, if any.
    Waiting(Option<Waker>),
    /// The result, not yet taken by the future.
    Done(io::Result<Lsn>),
    /// The future has returned the result.
    Taken,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: Mutex::new(SlotState::Waiting(None)),
        }
    }

    /// Stores the result `make` gives and wakes the future. Only the first
    /// completion counts: later ones do not even call `make`.
    fn complete_with(&self, make: impl FnOnce() -> io::Result<Lsn>) {
        let waker = {
            let mut state = lock(&self.state);
            match &mut *state {
                SlotState::Waiting(waker) => {
                    let waker = waker.take();
                    *state = SlotState::Done(make());
                    waker
                }
                SlotState::Done(_) | SlotState::Taken => return,
            }
        };
        if let Some(waker) = waker {
            // A waker is foreign code running on the writer thread: if it
            // panics, the record is still durable and answered, and the
            // writer must go on with the rest of the batch.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| waker.wake()));
        }
    }

    fn poll(&self, cx: &mut Context<'_>) -> Poll<io::Result<Lsn>> {
        let mut state = lock(&self.state);
        match &mut *state {
            SlotState::Waiting(waker) => {
                match waker {
                    Some(waker) if waker.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            SlotState::Done(_) => match std::mem::replace(&mut *state, SlotState::Taken) {
                SlotState::Done(result) => Poll::Ready(result),
                // Just matched as `Done`, under the same lock.
                SlotState::Waiting(_) | SlotState::Taken => Poll::Ready(Err(polled_after())),
            },
            SlotState::Taken => Poll::Ready(Err(polled_after())),
        }
    }
}

fn polled_after() -> io::Error {
    super::error::plain(
        io::ErrorKind::Other,
        "wal: Append polled after it completed".to_owned(),
    )
}

/// A record in the queue, waiting for the writer: its bytes as they go to
/// disk (frame and data) and the slot of its future.
///
/// A pending record dropped before the writer completed it (the writer
/// thread stopped unexpectedly) fails its future rather than leaving it
/// waiting forever.
pub(crate) struct Pending {
    /// The record's frame and data.
    pub(crate) framed: Vec<u8>,
    slot: Arc<Slot>,
}

impl Pending {
    /// A queued record and the future that waits for it.
    pub(crate) fn new(framed: Vec<u8>) -> (Pending, Append) {
        let slot = Arc::new(Slot::new());
        let append = Append {
            inner: Inner::Waiting(slot.clone()),
        };
        (Pending { framed, slot }, append)
    }

    /// The length of the record's data (without its frame).
    pub(crate) fn data_len(&self) -> usize {
        self.framed.len() - super::format::FRAME_LEN
    }

    /// Completes the record's future.
    pub(crate) fn complete(&self, result: io::Result<Lsn>) {
        self.slot.complete_with(|| result);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.slot.complete_with(|| {
            Err(super::error::plain(
                io::ErrorKind::Other,
                "wal: the writer stopped before this record was written".to_owned(),
            ))
        });
    }
}

/// The future returned by [`Log::append`](super::Log::append): resolves to
/// the record's [`Lsn`] once the record is written and synced to disk.
///
/// The record was queued when `append` was called, not when this future is
/// first polled. Dropping the future does not take the record back: it is
/// written, synced and given an LSN all the same, and nobody learns which.
///
/// It needs no particular runtime: it is woken through the [`Waker`] of
/// whatever polls it, from the log's writer thread.
#[must_use = "the record is written whether or not this is awaited; await it to know it is durable"]
pub struct Append {
    inner: Inner,
}

enum Inner {
    /// Queued; the writer completes the slot.
    Waiting(Arc<Slot>),
    /// Decided at the call (refused, or the log is closed); `None` once
    /// returned.
    Ready(Option<io::Error>),
}

impl Append {
    /// An append that failed before it was queued.
    pub(crate) fn failed(error: io::Error) -> Append {
        Append {
            inner: Inner::Ready(Some(error)),
        }
    }
}

impl Future for Append {
    type Output = io::Result<Lsn>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<Lsn>> {
        match &mut self.get_mut().inner {
            Inner::Waiting(slot) => slot.poll(cx),
            Inner::Ready(error) => Poll::Ready(Err(error.take().unwrap_or_else(polled_after))),
        }
    }
}

impl std::fmt::Debug for Append {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.inner {
            Inner::Waiting(_) => "queued",
            Inner::Ready(_) => "failed",
        };
        f.debug_struct("Append").field("state", &state).finish()
    }
}
