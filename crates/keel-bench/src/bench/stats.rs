//! Small order statistics for the harness.
//!
//! The harness summarises repeated measurements (calibration timings,
//! per-round figures) by their median, because on a shared machine a
//! single disturbed run should move the answer as little as possible.
//! Verdicts are ratios, guarded against zero and non-finite inputs so a
//! missing figure becomes "n/a" rather than `inf` or `NaN`.

/// The median, ignoring NaNs: the middle value, or the mean of the two
/// middle values of an even count; `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        Some(sorted[mid])
    } else {
        Some((sorted[mid - 1] + sorted[mid]) / 2.0)
    }
}

/// `numerator / denominator` when both are finite and the denominator is
/// positive.
pub fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    let (n, d) = (numerator?, denominator?);
    if n.is_finite() && d.is_finite() && d > 0.0 {
        Some(n / d)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Odd and even counts, unsorted input, NaNs ignored.
    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[9.0, 1.0, 5.0]), Some(5.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 2.0, 1.0, 3.0]), Some(2.0));
    }

    /// Ratios refuse zero, negative and non-finite denominators.
    #[test]
    fn ratios() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(Some(3.0), Some(-1.0)), None);
        assert_eq!(ratio(Some(f64::INFINITY), Some(1.0)), None);
        assert_eq!(ratio(None, Some(1.0)), None);
    }
}
