//! `BatchCell`: a stream's batch policy and the state of its batched
//! reads, the phases of the parent module's docs in code.
//!
//! # Who touches what
//!
//! - `mode` is written by [`BatchCell::set`] under the state's lock, and
//!   read without it: by every read, to take the plain path when batching
//!   is off without locking anything, and by every write, to note answers
//!   in adaptive mode.
//! - `wrote` is set by writes (any task) while the mode is adaptive and
//!   taken by the next delivery of a batch.
//! - `state` is locked by the reading task for one poll of a batched read,
//!   and by [`BatchCell::set`] and [`BatchCell::policy`]. Under it, the
//!   reader files and cancels its timer (the wheel's lock, taken after
//!   this one and never the other way round).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use mio::net::TcpStream;

use super::adaptive::{Adaptive, Sample, ADAPTIVE_MAX_BYTES};
use super::{sys, BatchMode, BatchPolicy};
use crate::io::lock;
use crate::io::readiness::Ready;
use crate::io::source::IoSource;
use crate::sched::Shared;
use crate::time::driver::TimerWake;
use crate::time::wheel::TimerKey;

/// A stream's batching (see the module docs).
#[derive(Debug)]
pub(crate) struct BatchCell {
    /// The [`BatchMode`] index of the policy in `state`.
    mode: AtomicU8,
    /// The stream was written to since the last delivery (adaptive only).
    wrote: AtomicBool,
    /// `None` until a policy other than off is first set.
    state: Mutex<Option<Box<BatchReader>>>,
}

impl BatchCell {
    /// Batching off.
    pub(crate) fn new() -> BatchCell {
        BatchCell {
            mode: AtomicU8::new(BatchMode::Off.index() as u8),
            wrote: AtomicBool::new(false),
            state: Mutex::new(None),
        }
    }

    /// Whether batching is off: reads take the plain path.
    pub(crate) fn is_off(&self) -> bool {
        BatchMode::from_index(self.mode.load(Relaxed)) == BatchMode::Off
    }

    /// The policy as last set.
    pub(crate) fn policy(&self) -> BatchPolicy {
        lock(&self.state)
            .as_ref()
            .map_or(BatchPolicy::off(), |reader| reader.policy)
    }

    /// Sets the policy of the stream `io`, and wakes a waiting read so that
    /// it goes on under the new one (as if the socket had reported
    /// readable: a read that finds nothing to take waits again).
    ///
    /// # Errors
    ///
    /// If the socket's options cannot be read or set; the previous policy
    /// then stays in force.
    pub(crate) fn set(&self, io: &IoSource<TcpStream>, policy: BatchPolicy) -> io::Result<()> {
        let socket = io.get_ref();
        {
            let mut state = lock(&self.state);
            if policy.is_off() {
                if let Some(reader) = state.as_deref_mut() {
                    reader.set_low_water(socket, 1)?;
                    reader.configure(policy, 0);
                }
            } else {
                let half_buffer = (sys::receive_buffer(socket)? / 2).max(1);
                let reader = match state.as_deref_mut() {
                    Some(reader) => reader,
                    None => state.insert(Box::new(BatchReader::new(io.runtime().clone()))),
                };
                let (_, target) = plan(policy, half_buffer);
                reader.set_low_water(socket, target)?;
                reader.configure(policy, half_buffer);
            }
            self.wrote.store(false, Relaxed);
            self.mode.store(policy.mode().index() as u8, Relaxed);
        }
        io.recheck_readable();
        Ok(())
    }

    /// Notes a write (for adaptive mode's "answered" rule).
    pub(crate) fn note_write(&self) {
        if BatchMode::from_index(self.mode.load(Relaxed)) == BatchMode::Adaptive
            && !self.wrote.load(Relaxed)
        {
            self.wrote.store(true, Relaxed);
        }
    }

    /// A batched read of `io`: `read` performs the system call. `None` if
    /// batching turned out to be off (the caller takes the plain path).
    pub(crate) fn poll_read(
        &self,
        io: &IoSource<TcpStream>,
        cx: &mut Context<'_>,
        read: &mut impl FnMut(&TcpStream) -> io::Result<usize>,
    ) -> Option<Poll<io::Result<usize>>> {
        let mut state = lock(&self.state);
        let reader = state.as_deref_mut().filter(|r| !r.policy.is_off())?;
        Some(io.poll_read_with(cx, |socket, seen, waker| {
            reader.attempt(socket, seen, waker, &self.wrote, &mut *read)
        }))
    }
}

/// The largest batch on a socket whose receive buffer allows
/// `half_buffer`, and the batch size to start with (≤ 1: immediate).
fn plan(policy: BatchPolicy, half_buffer: usize) -> (usize, usize) {
    let delay = policy.max_delay().unwrap_or(Duration::ZERO);
    match policy.min_bytes() {
        Some(min_bytes) => {
            let cap = min_bytes.min(half_buffer);
            (cap, if delay.is_zero() { 0 } else { cap })
        }
        None if policy.is_adaptive() => (half_buffer.min(ADAPTIVE_MAX_BYTES), 0),
        None => (0, 0),
    }
}

/// Where a batched read stands (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No read has waited since the last delivery.
    Fresh,
    /// Waiting for a full batch until `deadline` (timer clock, ns).
    Gathering { deadline: u64 },
    /// A whole `max_delay` passed with nothing queued: waiting, with no
    /// timer and the low-water mark at 1, for the first byte.
    Idle,
}

/// Why the read about to be made goes ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    /// The batch size is ≤ 1: the plain readiness rule.
    Immediate,
    /// Bytes of a released batch are still queued.
    Released,
    /// The read direction closed or failed.
    Closed,
    /// A full batch is queued.
    Full,
    /// The kernel called the socket readable below the mark.
    Kernel,
    /// The deadline passed with bytes queued.
    Deadline,
}

/// The state of one stream's batched reads; lives under the cell's lock.
struct BatchReader {
    policy: BatchPolicy,
    mode: BatchMode,
    /// The runtime: its timer wheel and its delivery counters.
    shared: Arc<Shared>,
    /// `max_delay` in nanoseconds.
    delay_ns: u64,
    /// The largest batch on this socket (see [`plan`]).
    cap: usize,
    /// The present batch size; ≤ 1 means immediate delivery.
    target: usize,
    phase: Phase,
    cause: Cause,
    /// Bytes of the last released batch not yet handed out.
    released: usize,
    /// Bytes queued when the last batch was released.
    batch_bytes: usize,
    /// `SO_RCVLOWAT` as last set (1 is the kernel's default).
    low_water: usize,
    /// The deadline's timer, while filed.
    timer: Option<TimerKey>,
    adaptive: Adaptive,
}

impl BatchReader {
    fn new(shared: Arc<Shared>) -> BatchReader {
        BatchReader {
            policy: BatchPolicy::off(),
            mode: BatchMode::Off,
            shared,
            delay_ns: 0,
            cap: 0,
            target: 0,
            phase: Phase::Fresh,
            cause: Cause::Immediate,
            released: 0,
            batch_bytes: 0,
            low_water: 1,
            timer: None,
            adaptive: Adaptive::default(),
        }
    }

    /// Starts afresh under `policy`.
    fn configure(&mut self, policy: BatchPolicy, half_buffer: usize) {
        let (cap, target) = plan(policy, half_buffer);
        let delay = policy.max_delay().unwrap_or(Duration::ZERO);
        self.policy = policy;
        self.mode = policy.mode();
        self.delay_ns = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.cap = cap;
        self.target = target;
        self.released = 0;
        self.adaptive.reset();
        self.finish();
    }

    /// One attempt of a read (see `IoSource::poll_read_with`):
    /// `WouldBlock` means wait.
    fn attempt(
        &mut self,
        socket: &TcpStream,
        seen: Ready,
        waker: &Waker,
        wrote: &AtomicBool,
        read: &mut impl FnMut(&TcpStream) -> io::Result<usize>,
    ) -> io::Result<usize> {
        if !self.gate(socket, seen, waker)? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match read(socket) {
            Ok(n) => {
                self.delivered(n, wrote);
                Ok(n)
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                // Someone else took the bytes: nothing is released any more.
                self.released = 0;
                Err(error)
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => Err(error),
            Err(error) => {
                self.released = 0;
                self.finish();
                Err(error)
            }
        }
    }

    /// Whether to read now; if not, the kernel's mark and the timer are
    /// set for the wake-up that will say so.
    fn gate(&mut self, socket: &TcpStream, seen: Ready, waker: &Waker) -> io::Result<bool> {
        if self.released > 0 {
            self.cause = Cause::Released;
            return Ok(true);
        }
        if seen.is_read_closed() || seen.is_error() {
            self.cause = Cause::Closed;
            return Ok(true);
        }
        if self.target <= 1 {
            self.cause = Cause::Immediate;
            self.set_low_water(socket, 1)?;
            return Ok(seen.is_readable());
        }
        let queued = sys::queued(socket)?;
        if queued >= self.target {
            return Ok(self.release(queued, Cause::Full));
        }
        // An event while the kernel knew our mark, and yet less than a
        // batch: the kernel judged that waiting on could stall the stream
        // (memory pressure, a closing window). Ask it whether that still
        // holds; a stale event from before the mark was set says no.
        if queued > 0
            && seen.is_readable()
            && self.low_water == self.target
            && sys::readable_now(socket)?
        {
            self.fit_to_buffer(socket)?;
            return Ok(self.release(queued, Cause::Kernel));
        }
        let now = self.shared.timers().now();
        match self.phase {
            Phase::Gathering { deadline } if now >= deadline => {
                if queued > 0 {
                    return Ok(self.release(queued, Cause::Deadline));
                }
                // A whole max_delay and not a byte: wait for the first one,
                // which starts the clock again.
                self.cancel_timer();
                self.phase = Phase::Idle;
                self.set_low_water(socket, 1)?;
                // A byte that came between the count and the lowering
                // raised no event under the old mark, and not every kernel
                // re-signals when the mark drops (Linux does): count again.
                if sys::queued(socket)? > 0 {
                    self.start_gathering(socket, now, waker)?;
                }
            }
            Phase::Gathering { deadline } => self.gather(socket, deadline, waker)?,
            Phase::Idle if queued == 0 => {}
            Phase::Fresh | Phase::Idle => self.start_gathering(socket, now, waker)?,
        }
        Ok(false)
    }

    /// Starts the clock at `now` and gathers.
    fn start_gathering(&mut self, socket: &TcpStream, now: u64, waker: &Waker) -> io::Result<()> {
        let deadline = now.saturating_add(self.delay_ns);
        self.phase = Phase::Gathering { deadline };
        self.gather(socket, deadline, waker)
    }

    /// Clamps the batch size again to half of the receive buffer, which
    /// may have shrunk since the policy was set: the kernel just said it
    /// cannot hold a full batch. Later batches then fit, instead of each
    /// one closing the window and waiting for the peer to probe it.
    fn fit_to_buffer(&mut self, socket: &TcpStream) -> io::Result<()> {
        let half_buffer = (sys::receive_buffer(socket)? / 2).max(1);
        if half_buffer < self.cap {
            self.cap = half_buffer;
            self.target = self.target.min(half_buffer);
        }
        Ok(())
    }

    /// Releases a batch of `queued` bytes; the read goes ahead.
    fn release(&mut self, queued: usize, cause: Cause) -> bool {
        self.released = queued;
        self.batch_bytes = queued;
        self.cause = cause;
        true
    }

    /// Waits for a full batch until `deadline`: the kernel's mark at the
    /// batch size, the timer at the deadline.
    fn gather(&mut self, socket: &TcpStream, deadline: u64, waker: &Waker) -> io::Result<()> {
        self.set_low_water(socket, self.target)?;
        // A batch released by its deadline queues behind the tasks that
        // waited for events (see `TimerWake::Deferred`).
        self.timer = Some(self.shared.timers().file(
            self.timer,
            deadline,
            waker,
            TimerWake::Deferred,
        ));
        Ok(())
    }

    /// After a read that returned `n` bytes.
    fn delivered(&mut self, n: usize, wrote: &AtomicBool) {
        if n == 0 {
            // End-of-file.
            self.released = 0;
            self.finish();
            return;
        }
        self.shared.deliveries.record(self.mode, n);
        self.released = self.released.saturating_sub(n);
        let bytes = match self.cause {
            // Handing out a released batch: nothing new to learn.
            Cause::Released => return,
            Cause::Closed => {
                self.finish();
                return;
            }
            Cause::Immediate => n,
            Cause::Full | Cause::Kernel | Cause::Deadline => self.batch_bytes,
        };
        self.finish();
        if self.mode == BatchMode::Adaptive {
            let sample = Sample {
                bytes,
                now: self.shared.timers().now(),
                answered: wrote.swap(false, Relaxed),
                timed_out: self.cause == Cause::Deadline,
            };
            self.target = self
                .adaptive
                .next_target(sample, self.target, self.delay_ns, self.cap);
        }
    }

    /// Ends the present wait: the next read starts fresh.
    fn finish(&mut self) {
        self.phase = Phase::Fresh;
        self.cancel_timer();
    }

    fn cancel_timer(&mut self) {
        if let Some(key) = self.timer.take() {
            self.shared.timers().cancel(key);
        }
    }

    /// Sets `SO_RCVLOWAT` to `bytes` unless it already is.
    fn set_low_water(&mut self, socket: &TcpStream, bytes: usize) -> io::Result<()> {
        let bytes = bytes.max(1);
        if self.low_water != bytes {
            sys::set_low_water(socket, bytes)?;
            self.low_water = bytes;
        }
        Ok(())
    }
}

impl std::fmt::Debug for BatchReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchReader")
            .field("policy", &self.policy)
            .field("target", &self.target)
            .field("phase", &self.phase)
            .field("released", &self.released)
            .field("low_water", &self.low_water)
            .finish_non_exhaustive()
    }
}

impl Drop for BatchReader {
    fn drop(&mut self) {
        self.cancel_timer();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn plans_clamp_to_half_the_receive_buffer() {
        assert_eq!(plan(BatchPolicy::fixed(1000, MS), 65536), (1000, 1000));
        assert_eq!(
            plan(BatchPolicy::fixed(usize::MAX, MS), 65536),
            (65536, 65536)
        );
        // A zero delay, or a batch of one byte, is immediate delivery.
        assert_eq!(plan(BatchPolicy::fixed(1000, Duration::ZERO), 65536).1, 0);
        assert_eq!(plan(BatchPolicy::fixed(1, MS), 65536).1, 1);
        // Adaptive starts immediate, up to its own cap.
        assert_eq!(
            plan(BatchPolicy::adaptive(MS), 1 << 20),
            (ADAPTIVE_MAX_BYTES, 0)
        );
        assert_eq!(plan(BatchPolicy::adaptive(MS), 20_000), (20_000, 0));
        assert_eq!(plan(BatchPolicy::off(), 65536), (0, 0));
    }
}
