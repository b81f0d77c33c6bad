//! The CPU work of the scenarios: one deterministic slice of arithmetic.
//!
//! Both runtimes run exactly this function with the same iteration count
//! (calibrated once, in the harness), so any difference in slices per
//! second is the runtime's, not the work's. The loop is an xorshift and
//! multiply-add chain: each step depends on the previous one, so it cannot
//! be vectorised or shortened, and its input and output go through
//! [`std::hint::black_box`], so the optimiser cannot drop or precompute it.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Runs one slice of `iters` dependent arithmetic steps and returns the
/// result (which callers may ignore: it is already opaque to the optimiser).
pub fn slice(iters: u64) -> u64 {
    let iters = black_box(iters);
    let mut x = black_box(0x9E37_79B9_7F4A_7C15_u64);
    for i in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_mul(0x2545_F491_4F6C_DD1D).wrapping_add(i);
    }
    black_box(x)
}

/// The CPU time the kernel has charged to the calling thread, or `None`
/// where the thread clock cannot be read.
pub fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call, and CLOCK_THREAD_CPUTIME_ID names the calling thread's clock.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| {
        Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        )
    })
}

/// How long one [`slice()`] of `iters` takes right now, on this thread.
pub fn time_slice(iters: u64) -> Duration {
    let start = Instant::now();
    slice(iters);
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same iteration count always gives the same result, and more
    /// iterations give a different one (the loop is not folded away).
    #[test]
    fn slice_is_deterministic() {
        assert_eq!(slice(1000), slice(1000));
        assert_ne!(slice(1000), slice(1001));
        assert_ne!(slice(0), slice(1));
    }

    /// More iterations take longer.
    #[test]
    fn slice_takes_time_in_proportion() {
        let small = (0..5).map(|_| time_slice(10_000)).min().unwrap();
        let large = (0..5).map(|_| time_slice(1_000_000)).min().unwrap();
        assert!(large > small * 10, "{small:?} {large:?}");
    }
}
