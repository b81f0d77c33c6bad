//! What a latency probe reports: a few quantiles of its RTT histogram.
//!
//! The probe records nanoseconds in an HDR histogram (3 significant
//! digits, so quantiles are exact to 0.1% at any scale and the memory is
//! fixed however long it runs) and reports microseconds, the unit of the
//! report's `_us` metrics.
//!
//! Beside the quantiles, a probe keeps a [`Timeline`]: its RTTs in
//! consecutive [`BUCKET`]-long slices of the measured time, summarised per
//! slice, for the report's latency-over-time charts. A stall shows there
//! as a spike at the moment it happened, which a whole-run p99 hides.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::realtime::ProbeScheduling;

/// The width of one slice of a probe's [`Timeline`] (250 ms: at the S1
/// probe's 1 ms interval, 250 samples, enough for a p99 per slice).
pub const BUCKET: Duration = Duration::from_millis(250);

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
    /// RTTs over time, one point per [`BUCKET`] of measured time (empty
    /// when the probe keeps no timeline).
    #[serde(default)]
    pub series: Vec<SeriesPoint>,
    /// The server's share of each recorded round trip, from the request's
    /// send to the answer's write (see [`crate::serve::stamp`]); absent
    /// when the server did not stamp its answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Quantiles>,
    /// How the probe's thread was scheduled; absent from probes that do
    /// not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<ProbeScheduling>,
}

/// A few quantiles of a latency histogram, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Values recorded.
    pub count: u64,
    /// Median, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
    /// Largest, µs.
    pub max_us: f64,
}

impl Quantiles {
    /// The quantiles of a histogram of nanoseconds; `None` when it is
    /// empty.
    pub fn of(hist: &Histogram<u64>) -> Option<Self> {
        if hist.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        Some(Self {
            count: hist.len(),
            p50_us: us(hist.value_at_quantile(0.50)),
            p99_us: us(hist.value_at_quantile(0.99)),
            p999_us: us(hist.value_at_quantile(0.999)),
            max_us: us(hist.max()),
        })
    }
}

/// The RTTs of one slice of measured time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// When the slice began, seconds after the measured time began.
    pub t_s: f64,
    /// Round trips recorded in the slice.
    pub count: u64,
    /// Median RTT of the slice, µs.
    pub p50_us: f64,
    /// 99th percentile RTT of the slice, µs.
    pub p99_us: f64,
    /// Longest RTT of the slice, µs.
    pub max_us: f64,
}

/// RTTs kept per [`BUCKET`] of measured time, exactly (a probe records a
/// few thousand per second at most, so a list per slice is small).
#[derive(Debug, Clone)]
pub struct Timeline {
    /// When the first slice begins.
    start: Instant,
    /// RTTs in ns, per slice.
    slices: Vec<Vec<u64>>,
}

impl Timeline {
    /// A timeline whose first slice begins at `start`.
    pub fn new(start: Instant) -> Timeline {
        Timeline {
            start,
            slices: Vec::new(),
        }
    }

    /// Records an RTT of `rtt_ns` measured at `at`; one before `start` is
    /// ignored.
    pub fn record(&mut self, at: Instant, rtt_ns: u64) {
        let Some(since) = at.checked_duration_since(self.start) else {
            return;
        };
        let index = usize::try_from(since.as_nanos() / BUCKET.as_nanos()).unwrap_or(usize::MAX);
        // Bounded: a probe's measured time is bounded, and a slice index
        // far beyond it would be a clock fault, not a reason to allocate.
        if index >= 1 << 20 {
            return;
        }
        if self.slices.len() <= index {
            self.slices.resize_with(index + 1, Vec::new);
        }
        self.slices[index].push(rtt_ns);
    }

    /// One point per slice, empty slices included (count 0) so that a
    /// silence shows as a gap rather than vanishing.
    pub fn points(mut self) -> Vec<SeriesPoint> {
        let us = |ns: u64| ns as f64 / 1000.0;
        self.slices
            .iter_mut()
            .enumerate()
            .map(|(i, rtts)| {
                rtts.sort_unstable();
                let at = |q: f64| {
                    if rtts.is_empty() {
                        0.0
                    } else {
                        let rank = ((q * rtts.len() as f64).ceil() as usize).clamp(1, rtts.len());
                        us(rtts[rank - 1])
                    }
                };
                SeriesPoint {
                    t_s: i as f64 * BUCKET.as_secs_f64(),
                    count: rtts.len() as u64,
                    p50_us: at(0.50),
                    p99_us: at(0.99),
                    max_us: rtts.last().map_or(0.0, |&ns| us(ns)),
                }
            })
            .collect()
    }
}

/// A histogram of nanoseconds from 1 ns to an hour, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
        .expect("constant histogram bounds are valid")
}

impl ProbeSummary {
    /// Summarises a histogram of RTTs in nanoseconds (all zeros if empty).
    pub fn from_histogram(hist: &Histogram<u64>, errors: u64) -> Self {
        let q = Quantiles::of(hist).unwrap_or(Quantiles {
            count: 0,
            p50_us: 0.0,
            p99_us: 0.0,
            p999_us: 0.0,
            max_us: 0.0,
        });
        Self {
            count: q.count,
            p50_us: q.p50_us,
            p99_us: q.p99_us,
            p999_us: q.p999_us,
            max_us: q.max_us,
            errors,
            series: Vec::new(),
            server: None,
            scheduling: None,
        }
    }

    /// This summary with the server's shares of its round trips, from a
    /// histogram of nanoseconds (absent if it is empty).
    pub fn with_server(mut self, hist: &Histogram<u64>) -> Self {
        self.server = Quantiles::of(hist);
        self
    }

    /// This summary with how its probe thread was scheduled.
    pub fn with_scheduling(mut self, scheduling: ProbeScheduling) -> Self {
        self.scheduling = Some(scheduling);
        self
    }

    /// This summary with `timeline`'s points.
    pub fn with_timeline(mut self, timeline: Timeline) -> Self {
        self.series = timeline.points();
        self
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

    /// RTTs land in the slice of the moment they were measured; empty
    /// slices stay, and quantiles are nearest-rank.
    #[test]
    fn timeline_slices() {
        let start = Instant::now();
        let mut timeline = Timeline::new(start);
        for us in 1..=100u64 {
            timeline.record(start + Duration::from_millis(10), us * 1000);
        }
        timeline.record(start + BUCKET * 2 + Duration::from_millis(1), 7_000);
        timeline.record(
            start.checked_sub(Duration::from_millis(1)).unwrap_or(start),
            1,
        );
        let points = timeline.points();
        assert_eq!(points.len(), 3);
        assert_eq!(points[0].count, 100);
        assert_eq!(points[0].p50_us, 50.0);
        assert_eq!(points[0].p99_us, 99.0);
        assert_eq!(points[0].max_us, 100.0);
        assert_eq!(points[1].count, 0);
        assert_eq!(points[1].max_us, 0.0);
        assert_eq!(points[2].t_s, 2.0 * BUCKET.as_secs_f64());
        assert_eq!(points[2].p99_us, 7.0);
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
