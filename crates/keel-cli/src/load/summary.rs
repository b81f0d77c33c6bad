//! What a latency probe reports: a few quantiles of its RTT histogram.
//!
//! The probe records nanoseconds in an HDR histogram (3 significant
//! digits, so quantiles are exact to 0.1% at any scale and the memory is
//! fixed however long it runs) and reports microseconds, the unit of the
//! report's `_us` metrics.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The JSON line a probe prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSummary {
    /// Recorded round trips (warm-up excluded).
    pub count: u64,
    /// Median RTT, µs.
    pub p50_us: f64,
    /// 99th percentile RTT, µs.
    pub p99_us: f64,
    /// 99.9th percentile RTT, µs.
    pub p999_us: f64,
    /// Longest RTT, µs.
    pub max_us: f64,
    /// Exchanges that failed (timeout, reset, wrong echo).
    pub errors: u64,
}

/// A histogram of nanoseconds from 1 ns to an hour, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
        .expect("constant histogram bounds are valid")
}

impl ProbeSummary {
    /// Summarises a histogram of RTTs in nanoseconds (all zeros if empty).
    pub fn from_histogram(hist: &Histogram<u64>, errors: u64) -> Self {
        let us = |ns: u64| ns as f64 / 1000.0;
        if hist.is_empty() {
            return Self {
                count: 0,
                p50_us: 0.0,
                p99_us: 0.0,
                p999_us: 0.0,
                max_us: 0.0,
                errors,
            };
        }
        Self {
            count: hist.len(),
            p50_us: us(hist.value_at_quantile(0.50)),
            p99_us: us(hist.value_at_quantile(0.99)),
            p999_us: us(hist.value_at_quantile(0.999)),
            max_us: us(hist.max()),
            errors,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quantiles of 1..=1000 µs land where they should, within the
    /// histogram's 0.1% precision.
    #[test]
    fn quantiles_of_a_uniform_run() {
        let mut hist = new_histogram();
        for us in 1..=1000u64 {
            hist.record(us * 1000).unwrap();
        }
        let s = ProbeSummary::from_histogram(&hist, 2);
        assert_eq!(s.count, 1000);
        assert_eq!(s.errors, 2);
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.002;
        assert!(close(s.p50_us, 500.0), "{s:?}");
        assert!(close(s.p99_us, 990.0), "{s:?}");
        assert!(close(s.p999_us, 999.0), "{s:?}");
        assert!(close(s.max_us, 1000.0), "{s:?}");
    }

    /// An empty histogram reports a zero count, not garbage.
    #[test]
    fn empty_histogram() {
        let s = ProbeSummary::from_histogram(&new_histogram(), 0);
        assert_eq!(s.count, 0);
        assert_eq!(s.max_us, 0.0);
    }

    /// The JSON line has the field names the harness reads.
    #[test]
    fn wire_shape() {
        let s = ProbeSummary::from_histogram(&new_histogram(), 0);
        let value = serde_json::to_value(&s).unwrap();
        for key in ["count", "p50_us", "p99_us", "p999_us", "max_us", "errors"] {
            assert!(value.get(key).is_some(), "{key} missing");
        }
    }
}
