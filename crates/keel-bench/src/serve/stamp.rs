//! The server's side of a probed request: a stamp of the clock the probe
//! shares with it, written into the answer.
//!
//! A probe times a request from its send to the answer's arrival. That
//! end-to-end figure includes the probe's own wake-up once the answer has
//! arrived, which on a busy machine is the kernel's business, not the
//! server's. To show the runtime's own share, every server (keel and tokio,
//! through the same code) writes `CLOCK_MONOTONIC` into its answer just
//! before the write that sends it; the probe, on the same machine and so
//! the same clock, subtracts the instant it sent the request. On loopback
//! a send puts the request's bytes into the server's socket (and makes it
//! readable) before the send returns, so the difference is the time from
//! the request's readiness to the answer's write: the server's wake-up,
//! the runtime's dispatch, the handler, and a few microseconds of the
//! network stack.
//!
//! Two carriers:
//! - **echo** (S1, S5): the probe leaves bytes [`ECHO_STAMP`] of its
//!   payload zero; the echo handler writes the clock there (little-endian
//!   nanoseconds) in every chunk it reads that is long enough and still
//!   holds zeros there, and echoes the rest unchanged. A client that sends
//!   anything else at those offsets gets its bytes back untouched.
//! - **status text** (S3): the admin answer carries a line
//!   `clock_ns: <nanoseconds>`, taken while the answer is produced; hyper
//!   writes it in the same poll.

use std::ops::Range;

/// Where an echo answer carries the server's stamp.
pub const ECHO_STAMP: Range<usize> = 16..24;

/// The key of the status text's clock line.
pub const STATUS_CLOCK_KEY: &str = "clock_ns: ";

/// `CLOCK_MONOTONIC` now, in nanoseconds (0 if the clock cannot be read).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call, and CLOCK_MONOTONIC is always available on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Writes the clock into an echo chunk about to be sent back, if the chunk
/// has room at [`ECHO_STAMP`] and holds zeros there (a probe's request).
pub fn stamp_echo(chunk: &mut [u8]) {
    if let Some(slot) = chunk.get_mut(ECHO_STAMP) {
        if slot.iter().all(|&b| b == 0) {
            slot.copy_from_slice(&monotonic_ns().to_le_bytes());
        }
    }
}

/// Why an echo answer is not the request it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoMismatch;

/// Compares an echo answer with the request sent: the server's stamp if
/// it wrote one, `None` for an echo that did not stamp, an error if any
/// other byte differs.
pub fn read_echo_stamp(sent: &[u8], received: &[u8]) -> Result<Option<u64>, EchoMismatch> {
    if sent.len() != received.len() {
        return Err(EchoMismatch);
    }
    let slot = ECHO_STAMP;
    if sent.len() < slot.end {
        return if sent == received {
            Ok(None)
        } else {
            Err(EchoMismatch)
        };
    }
    if sent[..slot.start] != received[..slot.start] || sent[slot.end..] != received[slot.end..] {
        return Err(EchoMismatch);
    }
    if sent[slot.clone()] == received[slot.clone()] {
        return Ok(None);
    }
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&received[slot]);
    Ok(Some(u64::from_le_bytes(bytes)))
}

/// The status text's clock line, ending with a newline.
pub fn status_clock_line() -> String {
    format!("{STATUS_CLOCK_KEY}{}\n", monotonic_ns())
}

/// The clock a status text carries, if it has a well-formed clock line.
pub fn read_status_clock(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(STATUS_CLOCK_KEY))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock moves forward.
    #[test]
    fn monotonic_clock_advances() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(a > 0 && b >= a + 1_000_000, "{a} {b}");
    }

    /// A probe's payload gets the clock in its slot and nowhere else, and
    /// the probe reads it back.
    #[test]
    fn echo_stamp_round_trip() {
        let sent: Vec<u8> = (0..64u8)
            .map(|i| {
                if ECHO_STAMP.contains(&(i as usize)) {
                    0
                } else {
                    i + 1
                }
            })
            .collect();
        let mut answer = sent.clone();
        let before = monotonic_ns();
        stamp_echo(&mut answer);
        let after = monotonic_ns();
        let stamp = read_echo_stamp(&sent, &answer).unwrap().unwrap();
        assert!(
            (before..=after).contains(&stamp),
            "{before} {stamp} {after}"
        );
        assert_eq!(answer[..16], sent[..16]);
        assert_eq!(answer[24..], sent[24..]);
    }

    /// Bytes other than zeros in the slot, or a chunk too short, are
    /// echoed untouched; a plain echo reads as unstamped.
    #[test]
    fn other_payloads_are_left_alone() {
        let mut ping = *b"ping";
        stamp_echo(&mut ping);
        assert_eq!(&ping, b"ping");
        let mut busy = [7u8; 64];
        stamp_echo(&mut busy);
        assert_eq!(busy, [7u8; 64]);
        assert_eq!(read_echo_stamp(&busy, &busy), Ok(None));
        assert_eq!(read_echo_stamp(b"ping", b"ping"), Ok(None));
    }

    /// A byte changed outside the slot, or a length that differs, is a
    /// mismatch.
    #[test]
    fn mismatches_are_caught() {
        let sent = [0u8; 64];
        let mut answer = sent;
        answer[40] = 1;
        assert_eq!(read_echo_stamp(&sent, &answer), Err(EchoMismatch));
        assert_eq!(read_echo_stamp(&sent, &sent[..63]), Err(EchoMismatch));
        assert_eq!(read_echo_stamp(b"ping", b"pong"), Err(EchoMismatch));
    }

    /// The status clock line is read back from a body, wherever it is.
    #[test]
    fn status_clock_round_trip() {
        let line = status_clock_line();
        let body = format!("keel proxy status\n{line}uptime: 1 s\n");
        let clock = read_status_clock(body.as_bytes()).unwrap();
        assert!(clock > 0 && clock <= monotonic_ns());
        assert_eq!(read_status_clock(b"no clock here\n"), None);
        assert_eq!(read_status_clock(b"clock_ns: soon\n"), None);
        assert_eq!(read_status_clock(&[0xff, 0xfe]), None);
    }
}
