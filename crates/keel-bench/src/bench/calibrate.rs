//! Calibrating the CPU slice once, in the harness.
//!
//! The servers must do identical work, so the iteration count is measured
//! here, once, and passed to both; neither server calibrates itself (a
//! runtime with more overhead would otherwise get smaller slices). The
//! count is sized from a long timed run and then corrected once from the
//! median of several timed slices, which a single preempted run cannot
//! move. Everything is bounded in iterations and in time.

use std::time::Duration;

use super::stats::median;
use crate::serve::cpu::time_slice;

/// Timed slices per median.
const SAMPLES: usize = 9;

/// The most iterations a slice may have (beyond that the target is absurd).
const MAX_ITERS: u64 = 1 << 40;

/// The calibrated slice.
#[derive(Debug, Clone, Copy)]
pub struct Calibration {
    /// Iterations of `cpu::slice` per slice.
    pub iters: u64,
    /// The median time of a slice of that many iterations, as measured.
    pub measured: Duration,
}

/// Finds the iteration count for which one slice takes about `target`.
pub fn calibrate(target: Duration) -> Calibration {
    calibrate_with(target, time_slice)
}

/// Finds the size for which one run of some work takes about `target`,
/// given `time(size)`, which runs the work once at that size and says how
/// long it took (sizes in the same unit as [`Calibration::iters`]).
pub fn calibrate_with(target: Duration, time: impl Fn(u64) -> Duration) -> Calibration {
    let target = target.max(Duration::from_micros(1));
    // Grow until one run is long enough to time well (at least the target,
    // and at least a millisecond).
    let floor = target.max(Duration::from_millis(1));
    let mut iters = 1_000u64;
    let mut took = time(iters);
    while took < floor && iters < MAX_ITERS {
        iters *= 2;
        took = time(iters);
    }
    let mut iters = scale(iters, target, took);
    // Correct once from the median of several runs of the estimate.
    let measured = median_time(&time, iters);
    iters = scale(iters, target, measured);
    Calibration {
        iters,
        measured: median_time(&time, iters),
    }
}

/// The median of [`SAMPLES`] timed runs of `iters`.
fn median_time(time: &impl Fn(u64) -> Duration, iters: u64) -> Duration {
    let times: Vec<f64> = (0..SAMPLES).map(|_| time(iters).as_secs_f64()).collect();
    Duration::from_secs_f64(median(&times).unwrap_or(0.0).max(0.0))
}

/// `iters` scaled by `target / took`, clamped to `1..=MAX_ITERS`.
fn scale(iters: u64, target: Duration, took: Duration) -> u64 {
    if took.is_zero() {
        return iters.min(MAX_ITERS);
    }
    let scaled = iters as f64 * target.as_secs_f64() / took.as_secs_f64();
    if scaled.is_finite() {
        (scaled.round() as u64).clamp(1, MAX_ITERS)
    } else {
        iters.min(MAX_ITERS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scaling is proportional and clamped.
    #[test]
    fn scaling() {
        let us = Duration::from_micros;
        assert_eq!(scale(1000, us(200), us(100)), 2000);
        assert_eq!(scale(1000, us(100), us(200)), 500);
        assert_eq!(scale(1000, us(1), Duration::from_secs(100)), 1);
        assert_eq!(scale(1000, us(1), Duration::ZERO), 1000);
    }

    /// A calibrated slice lands within a generous factor of its target
    /// (the test machine may be busy).
    #[test]
    fn calibrates_near_target() {
        let target = Duration::from_micros(500);
        let cal = calibrate(target);
        assert!(cal.iters >= 1);
        assert!(
            cal.measured > target / 4 && cal.measured < target * 4,
            "{cal:?}"
        );
    }
}
