//! Batched input: a TCP read that waits for enough bytes to be worth a
//! wake-up, so that wake-ups track work, not packets.
//!
//! # Why
//!
//! A peer that writes in small pieces (an IP camera writes one 1460-byte
//! packet at a time, as if TCP were UDP) makes every packet a readiness
//! event, and every event wakes the reading task for one small read. At a
//! few hundred connections the wake-ups, polls and reads cost more than
//! the work on the bytes, and the storm of runnable tasks delays every
//! other task in the runtime (in the story behind this module, an API call
//! took minutes). Letting bytes pile up in the socket for a moment and
//! reading them in one go turns forty thousand wake-ups a second into two
//! thousand, with the same bytes delivered.
//!
//! # The policy
//!
//! [`BatchPolicy`] is set per stream with
//! [`TcpStream::set_batch`](crate::net::TcpStream::set_batch) (or on the
//! reading half, [`OwnedReadHalf::set_batch`](crate::net::OwnedReadHalf::set_batch)):
//!
//! - [`BatchPolicy::off`], the default: a read completes as soon as any
//!   byte is there. It runs the very code path of a stream that never
//!   heard of batching.
//! - [`BatchPolicy::fixed`]`(min_bytes, max_delay)`: a read completes
//!   when at least `min_bytes` are queued in the socket, or when
//!   `max_delay` has passed while bytes wait, or at end-of-file or error,
//!   whichever comes first. It then returns as much as fits in the
//!   caller's buffer.
//! - [`BatchPolicy::adaptive`]`(max_delay)`: like `fixed`, with a
//!   `min_bytes` that follows the stream (see [Adaptive mode](#adaptive-mode)).
//!
//! # What the kernel does, and what keel does
//!
//! While a read waits for a batch, keel sets the socket's `SO_RCVLOWAT` to
//! the batch size. Linux then holds back the readable event (for epoll as
//! for `poll`) until that many bytes are queued, so no wake-up is spent on
//! a partial batch; end-of-file and errors are still signalled at once.
//! Linux also signals below the mark when waiting longer could stall the
//! stream (the receive buffer under memory pressure, or a window too small
//! for the peer to send the rest); keel honours that and delivers. keel
//! asks how much is queued with `FIONREAD` (`SIOCINQ`), and bounds the
//! wait with one timer on the runtime's timer wheel.
//!
//! A read therefore goes through these phases:
//!
//! 1. *Released*: bytes of a batch that completed are still queued (the
//!    caller's buffer was smaller than the batch). The read takes them at
//!    once.
//! 2. *Fresh*: the read starts. If the read direction is closed or failed,
//!    or `FIONREAD` shows a full batch, or the kernel has signalled below
//!    the mark (checked with `poll(2)` when an event came), it reads at
//!    once. Otherwise it starts the clock (deadline = now + `max_delay`),
//!    sets `SO_RCVLOWAT` to the batch size, files the timer and waits:
//!    *gathering*.
//! 3. *Gathering*: the read wakes when the kernel signals (a full batch,
//!    end-of-file, an error, or pressure) or at the deadline. At the
//!    deadline it reads whatever is queued; the task the deadline wakes
//!    queues behind tasks that waited for events (the timer is deferred,
//!    see `sched::lanes`), since the deadlines of many streams share a
//!    timer tick and would otherwise release a burst ahead of them. If
//!    nothing came at all, the
//!    stream is idle: the read lowers `SO_RCVLOWAT` to 1 and waits, with no
//!    timer, for the first byte (*idle*).
//! 4. *Idle*: the first byte wakes the read, which goes back to gathering
//!    with the clock started at that moment.
//!
//! A batch is *released* when its read goes ahead (full, signalled,
//! deadline): all the bytes `FIONREAD` reported at that moment are handed
//! out without further waiting, over as many reads as the caller's buffer
//! needs. The read after them is fresh again and starts the next batch.
//! A batch size of 0 or 1 (a `min_bytes` that small, a zero `max_delay`,
//! or adaptive mode delivering immediately) skips all this: the read
//! follows the plain readiness rule, with `SO_RCVLOWAT` at 1.
//!
//! The kernel behaviour described is Linux's. keel does not depend on it
//! for correctness: where a kernel ignores `SO_RCVLOWAT` for its events,
//! reads are woken more often and find less than a batch, and wait again
//! within the same deadline; where it does not signal when the mark is
//! lowered, keel counts again or wakes the read itself.
//!
//! # Invariants
//!
//! - **Nothing is lost or reordered.** Batching only decides *when* a read
//!   calls `read(2)`; the bytes come from the socket in order, as without
//!   it.
//! - **The delay is bounded.** A read that is waiting while at least one
//!   byte is queued completes within `max_delay` of the later of two
//!   moments: when the read began waiting, and when the reactor reported
//!   the first of those bytes (which under load may trail its arrival by
//!   up to [`io_interval`](crate::Builder::io_interval)). Add the timer
//!   resolution (1 ms) and the time the woken task waits for a worker.
//!   Time the application spends between reads, when no read waits, is not
//!   batching delay and is not counted: batching never holds a byte back
//!   longer than `max_delay` of waiting.
//! - **End-of-file and errors are prompt.** A read whose stream was shut
//!   down or reset by the peer completes at once, whatever `min_bytes` is:
//!   first with the bytes left, then with end-of-file or the error.
//! - **Small buffers make progress.** A read returns as soon as its batch
//!   is complete, with `min(queued, buf.len())` bytes, and the reads after
//!   it return the rest of that batch without waiting. A reader whose
//!   buffer is smaller than `min_bytes` thus waits once per batch, not once
//!   per read; give reads a buffer of at least `min_bytes` (twice that is
//!   better: bytes keep arriving between the wake-up and the read) to get
//!   one delivery per batch.
//! - **`min_bytes` is reachable.** A socket cannot queue more than its
//!   receive buffer, so `min_bytes` is clamped to half of `SO_RCVBUF` as
//!   read when the policy is set (Linux clamps `SO_RCVLOWAT` the same way
//!   when the buffer size is fixed; with the default autotuned buffer of
//!   128 KiB that is 64 KiB), and clamped again whenever the kernel
//!   signals readable below the mark (the buffer may have shrunk since).
//!   Enlarge `SO_RCVBUF` before setting the policy for larger batches. A `min_bytes` of 0 or 1, or a zero `max_delay`,
//!   means immediate delivery.
//! - **Off is untouched.** With batching off (the default, or set back to
//!   off), `SO_RCVLOWAT` is 1 and a read is the plain readiness loop: no
//!   `FIONREAD`, no timer, no lock.
//! - At most one timer per stream is filed, and it is cancelled when a
//!   read delivers or the stream is dropped. A policy set while a read
//!   waits wakes that read, which goes on under the new policy.
//!
//! keel owns `SO_RCVLOWAT` on a stream with batching on: do not set it
//! yourself. Only one task should read a stream at a time (as without
//! batching).
//!
//! # What it costs
//!
//! Latency: a stream that sends less than `min_bytes` and then waits, as a
//! request/response protocol does, sees each message delayed by up to
//! `max_delay`. Do not use [`BatchPolicy::fixed`] on such streams (HTTP,
//! RPC, anything with small requests awaiting answers); use
//! [`BatchPolicy::adaptive`] where a stream may be either, or leave
//! batching off.
//!
//! CPU: per batch, a read makes one or two `FIONREAD` calls and usually
//! one `poll(2)` (to ask whether an event means the kernel signalled below
//! the mark), and files and cancels one timer; `SO_RCVLOWAT` is changed only when the
//! batch size changes or the stream goes idle. Per packet it costs
//! nothing, which is the point.
//!
//! # Adaptive mode
//!
//! [`BatchPolicy::adaptive`] starts with immediate delivery and, after each
//! delivery that began a batch (not the hand-out of a released batch),
//! picks the next batch size from three integers: the time of the previous
//! such delivery, the *pace* (how many bytes one `max_delay` brings at the
//! stream's recent rate, a running average), and the current size.
//!
//! - **Answered: immediate.** If the stream was written to since the
//!   previous delivery, the peer may be waiting for that answer before it
//!   sends more: request/response. The next read is immediate, so an
//!   interactive stream sees no added latency. (A full-duplex stream that
//!   writes as much as it reads therefore gets little batching from
//!   adaptive mode; use `fixed` there.)
//! - **Idle: immediate.** If more than twice `max_delay` passed since the
//!   previous delivery (the stream paused), the next read is immediate and
//!   the pace is forgotten.
//! - **Nearly stopped: immediate.** If a batch released by its deadline
//!   holds less than half of [`ADAPTIVE_MIN_BYTES`], a whole `max_delay`
//!   brought too little to be worth waiting for: the next read is
//!   immediate and the pace is forgotten.
//! - **Otherwise, follow the pace.** The delivery's bytes (the whole
//!   released batch) over the time since the previous delivery give this
//!   delivery's pace, `bytes × max_delay / gap`; the pace is averaged with
//!   the previous one (`(old + new) / 2`). A pace under
//!   [`ADAPTIVE_MIN_BYTES`] means immediate delivery (a stream already
//!   batching stays down to half of it, so a stream near the threshold
//!   does not flap). Otherwise the batch size is kept while it lies
//!   between one and a half and four paces; outside that band it becomes
//!   twice the pace, rounded up to a power of two, at most twice the
//!   current size (a burst cannot make one jump to the top), at most
//!   [`ADAPTIVE_MAX_BYTES`] (and half of `SO_RCVBUF`).
//!
//! The size thus sits above what one `max_delay` brings, on purpose: a
//! steady stream's batches are released by their deadline, and the kernel
//! wakes a read early only when a burst fills the batch. Deadlines fall on
//! the ticks of the timer wheel, so one worker wake-up serves every stream
//! whose deadline shares a tick, where batches that complete on the
//! kernel's mark each wake a worker of their own at a moment of their own.
//! On a runtime that is otherwise idle the wake-ups, not the reads, are
//! what a delivery costs most; with 300 streams of 1460-byte packets a
//! size that the deadline releases cost about half the CPU of one that the
//! mark released, for the same bytes per delivery.
//!
//! So a stream of 1460-byte packets every 8 ms with `max_delay` 100 ms
//! (a pace of about 18 KB) settles on 32 KiB batches released every
//! 100 ms with about 18 KB each, instead of one wake-up per packet; a
//! trickle of 100 bytes every 10 ms (a pace of 1 KB) stays immediate,
//! since no batch worth having would fill in time. The price is latency:
//! a steady stream's bytes wait up to the whole `max_delay`, as with
//! [`BatchPolicy::fixed`].

mod adaptive;
pub(crate) mod deliveries;
pub(crate) mod reader;
mod sys;

use std::time::Duration;

pub use adaptive::{ADAPTIVE_MAX_BYTES, ADAPTIVE_MIN_BYTES};

/// How a [`TcpStream`](crate::net::TcpStream) delivers input: at once, or
/// in batches of at least `min_bytes` within `max_delay` (see the
/// [module docs](self) for the rules and the invariants).
///
/// ```
/// use std::time::Duration;
/// use keel::io::{AsyncReadExt, AsyncWriteExt};
/// use keel::net::{BatchPolicy, TcpListener, TcpStream};
///
/// let rt = keel::Runtime::new().unwrap();
/// rt.block_on(async {
///     let listener = TcpListener::bind("127.0.0.1:0").unwrap();
///     let addr = listener.local_addr().unwrap();
///     let client = keel::spawn(async move {
///         let mut stream = TcpStream::connect(addr).await.unwrap();
///         for _ in 0..4 {
///             stream.write_all(&[7; 1460]).await.unwrap();
///         }
///     });
///     let (mut stream, _) = listener.accept().await.unwrap();
///     // Wake this task for 4 KiB at a time, or after 50 ms of waiting.
///     stream
///         .set_batch(BatchPolicy::fixed(4096, Duration::from_millis(50)))
///         .unwrap();
///     let mut buf = vec![0; 64 * 1024];
///     let n = stream.read(&mut buf).await.unwrap();
///     assert!(n >= 4096);
///     client.await.unwrap();
/// });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BatchPolicy {
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
enum Kind {
    #[default]
    Off,
    Fixed {
        min_bytes: usize,
        max_delay: Duration,
    },
    Adaptive {
        max_delay: Duration,
    },
}

impl BatchPolicy {
    /// No batching, the default: a read completes as soon as any byte is
    /// queued.
    pub const fn off() -> BatchPolicy {
        BatchPolicy { kind: Kind::Off }
    }

    /// A read completes once `min_bytes` are queued, or once it has waited
    /// `max_delay` with bytes queued, or at end-of-file or error.
    ///
    /// `min_bytes` is clamped to half of the socket's receive buffer when
    /// the policy is set; 0 or 1, or a zero `max_delay`, deliver at once.
    /// Every message smaller than `min_bytes` that the peer sends before
    /// waiting for an answer is delayed by up to `max_delay`: keep `fixed`
    /// for streams that flow one way (ingest, uploads, replication).
    pub const fn fixed(min_bytes: usize, max_delay: Duration) -> BatchPolicy {
        BatchPolicy {
            kind: Kind::Fixed {
                min_bytes,
                max_delay,
            },
        }
    }

    /// Batches whose size follows the stream: immediate delivery while the
    /// stream is idle, slow or answered (request/response), batches sized
    /// from the stream's pace while small deliveries come fast (so a steady
    /// stream is released by its `max_delay` deadline, and streams share the
    /// timer's ticks).
    /// No read waits more than `max_delay`; see the
    /// [module docs](self#adaptive-mode) for the rule.
    pub const fn adaptive(max_delay: Duration) -> BatchPolicy {
        BatchPolicy {
            kind: Kind::Adaptive { max_delay },
        }
    }

    /// Whether this is [`BatchPolicy::off`].
    pub const fn is_off(&self) -> bool {
        matches!(self.kind, Kind::Off)
    }

    /// Whether this is an [`BatchPolicy::adaptive`] policy.
    pub const fn is_adaptive(&self) -> bool {
        matches!(self.kind, Kind::Adaptive { .. })
    }

    /// The `min_bytes` of a [`fixed`](BatchPolicy::fixed) policy, as given
    /// (before clamping); `None` otherwise.
    pub const fn min_bytes(&self) -> Option<usize> {
        match self.kind {
            Kind::Fixed { min_bytes, .. } => Some(min_bytes),
            _ => None,
        }
    }

    /// The `max_delay` of a fixed or adaptive policy; `None` when off.
    pub const fn max_delay(&self) -> Option<Duration> {
        match self.kind {
            Kind::Off => None,
            Kind::Fixed { max_delay, .. } | Kind::Adaptive { max_delay } => Some(max_delay),
        }
    }

    /// The mode, for the counters.
    pub(crate) const fn mode(&self) -> BatchMode {
        match self.kind {
            Kind::Off => BatchMode::Off,
            Kind::Fixed { .. } => BatchMode::Fixed,
            Kind::Adaptive { .. } => BatchMode::Adaptive,
        }
    }
}

/// The three modes, as the stats count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchMode {
    Off = 0,
    Fixed = 1,
    Adaptive = 2,
}

impl BatchMode {
    /// Number of modes.
    pub(crate) const COUNT: usize = 3;

    /// The mode's index, `0..COUNT`.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }

    /// The mode of an index stored by [`BatchMode::index`].
    pub(crate) const fn from_index(index: u8) -> BatchMode {
        match index {
            1 => BatchMode::Fixed,
            2 => BatchMode::Adaptive,
            _ => BatchMode::Off,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_off_and_accessors_report_what_was_given() {
        assert_eq!(BatchPolicy::default(), BatchPolicy::off());
        assert!(BatchPolicy::off().is_off());
        assert_eq!(BatchPolicy::off().max_delay(), None);
        let fixed = BatchPolicy::fixed(usize::MAX, Duration::from_millis(5));
        assert!(!fixed.is_off() && !fixed.is_adaptive());
        assert_eq!(fixed.min_bytes(), Some(usize::MAX));
        assert_eq!(fixed.max_delay(), Some(Duration::from_millis(5)));
        let adaptive = BatchPolicy::adaptive(Duration::from_millis(7));
        assert!(adaptive.is_adaptive());
        assert_eq!(adaptive.min_bytes(), None);
        assert_eq!(adaptive.max_delay(), Some(Duration::from_millis(7)));
        for mode in [BatchMode::Off, BatchMode::Fixed, BatchMode::Adaptive] {
            assert_eq!(BatchMode::from_index(mode.index() as u8), mode);
        }
    }
}
