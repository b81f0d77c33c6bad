//! The adaptive rule: the next batch size from the last few deliveries.
//!
//! See the parent module's docs ("Adaptive mode") for the rule in words;
//! this is that rule in integers, a handful of operations per delivery.

/// The smallest batch adaptive mode gathers: 4 KiB, about three full-size
/// Ethernet segments. A stream whose pace would not bring this much in one
/// `max_delay` is served immediately (and one already batching goes back
/// to immediate delivery below half of it): a smaller batch saves too few
/// wake-ups to be worth any delay.
pub const ADAPTIVE_MIN_BYTES: usize = 4 * 1024;

/// The largest batch adaptive mode gathers: 64 KiB, half of Linux's
/// default receive buffer (128 KiB), so the socket can hold a whole batch
/// and keep receiving. It is lowered further to half of `SO_RCVBUF` when
/// the socket's buffer is smaller.
pub const ADAPTIVE_MAX_BYTES: usize = 64 * 1024;

/// The state of the rule for one stream.
#[derive(Debug, Clone, Default)]
pub(crate) struct Adaptive {
    /// Bytes one `max_delay` brings at the stream's recent rate (a running
    /// average); zero when unknown.
    pace: u64,
    /// When the previous batch was delivered, in nanoseconds on the timer
    /// clock; `None` before the first or after an idle spell.
    last: Option<u64>,
}

/// What the rule learns from one delivery.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// The bytes of the batch: what was queued when it was released, or
    /// what the read returned for an immediate read.
    pub(crate) bytes: usize,
    /// When it was delivered (timer clock, ns).
    pub(crate) now: u64,
    /// Whether the stream was written to since the previous delivery.
    pub(crate) answered: bool,
    /// Whether the batch was released by its deadline, short of its size.
    pub(crate) timed_out: bool,
}

impl Adaptive {
    /// Forgets the stream's history: the next delivery starts afresh.
    pub(crate) fn reset(&mut self) {
        *self = Adaptive::default();
    }

    /// Learns from one delivery that began a batch and returns the next
    /// batch size (0: immediate delivery). `current` is the present size,
    /// `delay_ns` the policy's `max_delay`, `cap` the largest size allowed
    /// on this socket.
    pub(crate) fn next_target(
        &mut self,
        sample: Sample,
        current: usize,
        delay_ns: u64,
        cap: usize,
    ) -> usize {
        let previous = self.last.replace(sample.now);
        let Some(previous) = previous else {
            // The first delivery, or the first after an idle spell: no gap
            // to measure a pace over yet.
            self.pace = 0;
            return 0;
        };
        let gap = sample.now.saturating_sub(previous);
        if sample.answered || gap > delay_ns.saturating_mul(2) {
            // The peer may be waiting for us, or the stream paused:
            // deliver at once.
            self.pace = 0;
            return 0;
        }
        if sample.timed_out && sample.bytes < ADAPTIVE_MIN_BYTES / 2 {
            // A whole delay brought less than half of the smallest batch:
            // the stream slowed down too far for batching to pay.
            self.pace = 0;
            return 0;
        }
        let pace = u128::from(sample.bytes as u64) * u128::from(delay_ns) / u128::from(gap.max(1));
        let pace = u64::try_from(pace).unwrap_or(u64::MAX);
        self.pace = if self.pace == 0 {
            pace
        } else {
            self.pace / 2 + pace / 2
        };
        let pace = usize::try_from(self.pace).unwrap_or(usize::MAX);
        // Entering needs a pace that fills the smallest batch within the
        // delay; staying needs only half of that, so a stream near the
        // threshold does not flap between the two.
        let floor = if current > 0 {
            ADAPTIVE_MIN_BYTES / 2
        } else {
            ADAPTIVE_MIN_BYTES
        };
        if pace < floor {
            return 0;
        }
        let cap = cap.clamp(1, ADAPTIVE_MAX_BYTES);
        // The size sits above what one delay brings, so that batches are
        // normally released by their deadline and the kernel wakes early
        // only on a burst. A size that is still between one and a half
        // and four paces is kept: moving it would change nothing but cost
        // a system call.
        if current >= ADAPTIVE_MIN_BYTES.min(cap)
            && current.saturating_mul(2) >= pace.saturating_mul(3)
            && current <= pace.saturating_mul(4)
            && current <= cap
        {
            return current;
        }
        // Otherwise twice the pace, to the next power of two, growing at
        // most twofold per batch (a burst cannot make one jump to the top).
        let limit = current.max(ADAPTIVE_MIN_BYTES / 2).saturating_mul(2);
        let wanted = pace
            .saturating_mul(2)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX);
        round_down_kib(wanted.min(limit).min(cap)).max(ADAPTIVE_MIN_BYTES.min(cap))
    }
}

/// `n` rounded down to a whole KiB (at least 1 KiB).
fn round_down_kib(n: usize) -> usize {
    (n / 1024 * 1024).max(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const DELAY: u64 = 100 * MS;

    /// Feeds `count` deliveries of `bytes` every `every` ns; returns the
    /// targets chosen after each.
    fn run(rule: &mut Adaptive, start: u64, bytes: usize, every: u64, count: usize) -> Vec<usize> {
        let mut target = 0;
        (0..count)
            .map(|i| {
                let sample = Sample {
                    bytes,
                    now: start + i as u64 * every,
                    answered: false,
                    timed_out: false,
                };
                target = rule.next_target(sample, target, DELAY, ADAPTIVE_MAX_BYTES);
                target
            })
            .collect()
    }

    #[test]
    fn small_fast_deliveries_raise_the_target_step_by_step() {
        let mut rule = Adaptive::default();
        // 1460 bytes every 2 ms: a pace of 73 KB per 100 ms.
        let targets = run(&mut rule, 0, 1460, 2 * MS, 8);
        assert_eq!(targets[0], 0, "no gap to measure on the first delivery");
        assert_eq!(&targets[1..5], &[4096, 8192, 16384, 32768]);
        // Twice 73 KB is above the largest batch.
        assert!(
            targets[5..].iter().all(|&t| t == ADAPTIVE_MAX_BYTES),
            "{targets:?}"
        );
    }

    #[test]
    fn a_camera_pace_settles_on_a_batch_the_deadline_releases() {
        let mut rule = Adaptive::default();
        // 1460 bytes every 8 ms: about 18 KB per 100 ms. 32 KiB is between
        // one and a half and four paces: the deadline, not the size, ends
        // each batch, and the size stays put.
        let targets = run(&mut rule, 0, 1460, 8 * MS, 10);
        assert_eq!(&targets[5..], &[32 * 1024; 5], "{targets:?}");
    }

    #[test]
    fn a_trickle_stays_immediate() {
        let mut rule = Adaptive::default();
        // 100 bytes every 10 ms: 1 KB per 100 ms, no batch worth waiting for.
        let targets = run(&mut rule, 0, 100, 10 * MS, 50);
        assert!(targets.iter().all(|&t| t == 0), "{targets:?}");
    }

    #[test]
    fn an_answer_or_a_long_gap_drops_to_immediate() {
        let mut rule = Adaptive::default();
        let targets = run(&mut rule, 0, 1460, MS, 6);
        let target = *targets.last().unwrap();
        assert!(target > 0);
        let answered = Sample {
            bytes: 1460,
            now: 6 * MS,
            answered: true,
            timed_out: false,
        };
        assert_eq!(
            rule.next_target(answered, target, DELAY, ADAPTIVE_MAX_BYTES),
            0
        );

        let mut rule = Adaptive::default();
        let targets = run(&mut rule, 0, 1460, MS, 6);
        let target = *targets.last().unwrap();
        // A pause of more than twice the delay.
        let paused = Sample {
            bytes: 1460,
            now: 5 * MS + 2 * DELAY + MS,
            answered: false,
            timed_out: false,
        };
        assert_eq!(
            rule.next_target(paused, target, DELAY, ADAPTIVE_MAX_BYTES),
            0
        );
        // And the pace is forgotten: the next fast delivery starts over.
        let next = Sample {
            bytes: 1460,
            now: 7 * MS + 2 * DELAY,
            answered: false,
            timed_out: false,
        };
        assert_eq!(rule.next_target(next, 0, DELAY, ADAPTIVE_MAX_BYTES), 4096);
    }

    #[test]
    fn a_deadline_batch_keeps_the_size_unless_the_stream_nearly_stopped() {
        let mut rule = Adaptive::default();
        let _ = run(&mut rule, 0, 1460, 8 * MS, 10);
        let target = 32 * 1024;
        // The normal case: the deadline released a pace's worth.
        let on_pace = Sample {
            bytes: 18_000,
            now: 9 * 8 * MS + DELAY,
            answered: false,
            timed_out: true,
        };
        assert_eq!(
            rule.next_target(on_pace, target, DELAY, ADAPTIVE_MAX_BYTES),
            target
        );
        // A whole delay brought less than half of the smallest batch.
        let nearly_stopped = Sample {
            bytes: 1500,
            now: 9 * 8 * MS + 2 * DELAY,
            answered: false,
            timed_out: true,
        };
        assert_eq!(
            rule.next_target(nearly_stopped, target, DELAY, ADAPTIVE_MAX_BYTES),
            0
        );
    }

    #[test]
    fn a_pace_near_the_threshold_keeps_batching() {
        let mut rule = Adaptive::default();
        // 100 bytes a millisecond: 10 KB per 100 ms, enough to enter.
        let targets = run(&mut rule, 0, 100, MS, 2);
        assert_eq!(targets[1], ADAPTIVE_MIN_BYTES);
        // The stream slows to 3 KB per delay: too little to enter (under
        // 4 KiB), enough to stay (over half of it). As the average
        // forgets the faster start, the size settles on a power of two
        // between one and a half and four paces.
        let mut target = targets[1];
        for i in 1..=8 {
            let sample = Sample {
                bytes: 3000,
                now: MS + i * DELAY,
                answered: false,
                timed_out: true,
            };
            target = rule.next_target(sample, target, DELAY, ADAPTIVE_MAX_BYTES);
            assert!(target >= ADAPTIVE_MIN_BYTES, "after batch {i}");
        }
        assert_eq!(target, 8 * 1024);
        // A fresh rule at that pace does not enter.
        let mut fresh = Adaptive::default();
        let targets = run(&mut fresh, 0, 3000, DELAY, 5);
        assert!(targets.iter().all(|&t| t == 0), "{targets:?}");
    }

    #[test]
    fn the_target_respects_the_socket_cap() {
        let mut rule = Adaptive::default();
        let mut target = 0;
        for i in 0..20 {
            let sample = Sample {
                bytes: 60_000,
                now: i * MS,
                answered: false,
                timed_out: false,
            };
            target = rule.next_target(sample, target, DELAY, 10_000);
        }
        assert_eq!(target, 9 * 1024, "the largest whole KiB under the cap");
    }

    #[test]
    fn sizes_round_down_to_a_whole_kib() {
        assert_eq!(round_down_kib(1), 1024);
        assert_eq!(round_down_kib(4096), 4096);
        assert_eq!(round_down_kib(8191), 7 * 1024);
    }
}
