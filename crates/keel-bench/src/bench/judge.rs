//! From per-round ratios to a verdict: a median, an interval, and an
//! outcome that says when the rounds cannot settle it.
//!
//! Every verdict is computed once per round, from that round's figures
//! alone: the two runtimes of a keel/tokio ratio ran next to each other,
//! so the host's drift between rounds cancels out of each ratio rather
//! than landing on one side of a ratio of medians. The verdict's value is
//! the median of its per-round values, and its interval is a
//! distribution-free confidence interval of that median: the k-th smallest
//! and k-th largest value, with k as large as keeps the confidence at
//! [`CONFIDENCE`] or above (for 5 rounds the minimum and maximum, a 93.75%
//! interval; for 8 the second smallest and second largest, 93%). Fewer
//! than 5 rounds cannot reach 90%: the interval is then the minimum and
//! maximum, and its lower confidence is reported with it.
//!
//! The outcome is `pass` when the whole interval meets the goal, `fail`
//! when none of it does, and `unclear` when it straddles the goal. An
//! unclear verdict is not a pass: its note says which side the median is
//! on, what more rounds would do, and how noisy the host was in the rounds
//! (steal, the server's run-queue wait), and names a noise figure whose
//! rank order follows the verdict's values across rounds, if one does.
//! Verdicts measured under the shared placement or in a quick run are
//! `not judged`: their figures are reported, with what they would be.

use serde::Serialize;

use super::noise::Noise;
use super::outcome::{Goal, Verdict};
use super::stats::median;

/// The least confidence the interval aims for.
pub const CONFIDENCE: f64 = 0.90;

/// How close a noise figure's rank correlation with a verdict's values
/// must come to ±1 to be named as moving with it.
const LINKED: f64 = 0.8;

/// What a verdict says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Judgement {
    /// The whole interval meets the goal.
    #[serde(rename = "pass")]
    Pass,
    /// None of the interval meets the goal.
    #[serde(rename = "fail")]
    Fail,
    /// The interval straddles the goal: these rounds cannot settle it.
    #[serde(rename = "unclear")]
    Unclear,
    /// Reported only: a shared placement or a quick run.
    #[serde(rename = "not judged")]
    NotJudged,
    /// A figure shown for comparison, without a goal.
    #[serde(rename = "reported")]
    Reported,
    /// A figure it needs is missing.
    #[serde(rename = "n/a")]
    Missing,
}

impl Judgement {
    /// The word the table prints.
    pub fn word(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail => "FAIL",
            Self::Unclear => "unclear",
            Self::NotJudged => "not judged",
            Self::Reported => "-",
            Self::Missing => "n/a",
        }
    }
}

/// The interval of the median of `n` values: `k` (from 1) such that the
/// k-th smallest and k-th largest bound it, and the confidence they give.
pub fn median_interval_rank(n: usize) -> (usize, f64) {
    if n == 0 {
        return (0, 0.0);
    }
    // P(the median lies outside [x(k), x(n+1-k)]) = 2 * P(Bin(n, 1/2) < k).
    let outside = |k: usize| -> f64 {
        let mut tail = 0.0;
        for i in 0..k {
            tail += binomial(n, i);
        }
        2.0 * tail / 2f64.powi(n as i32)
    };
    let mut k = 1;
    while k < n.div_ceil(2) && 1.0 - outside(k + 1) >= CONFIDENCE {
        k += 1;
    }
    (k, (1.0 - outside(k)).max(0.0))
}

/// `n` choose `k`, as a float (exact for the small counts of rounds).
fn binomial(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// The interval of the median of `values` (NaNs ignored) and its
/// confidence; `None` when there are no values.
pub fn median_interval(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let (k, confidence) = median_interval_rank(sorted.len());
    Some((sorted[k - 1], sorted[sorted.len() - k], confidence))
}

/// Where an interval lies against a goal.
fn against(goal: Goal, low: f64, high: f64) -> Judgement {
    if goal.met_by(low) && goal.met_by(high) {
        return Judgement::Pass;
    }
    let clear_fail = match goal {
        Goal::AtMost(limit) => low > limit,
        Goal::AtLeast(limit) => high < limit,
        Goal::Within(a, b) => high < a || low > b,
    };
    if clear_fail {
        Judgement::Fail
    } else {
        Judgement::Unclear
    }
}

/// Spearman's rank correlation of two equally long lists (NaN pairs
/// dropped); `None` with fewer than 3 pairs or a constant list.
pub fn rank_correlation(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let pairs: Vec<(f64, f64)> = xs
        .iter()
        .zip(ys)
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .map(|(&x, &y)| (x, y))
        .collect();
    if pairs.len() < 3 {
        return None;
    }
    let ranks = |values: Vec<f64>| -> Vec<f64> {
        let mut order: Vec<usize> = (0..values.len()).collect();
        order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
        let mut ranks = vec![0.0; values.len()];
        let mut i = 0;
        while i < order.len() {
            let mut j = i;
            while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
                j += 1;
            }
            // Ties share the mean of their ranks.
            let rank = (i + j) as f64 / 2.0;
            for &index in &order[i..=j] {
                ranks[index] = rank;
            }
            i = j + 1;
        }
        ranks
    };
    let rx = ranks(pairs.iter().map(|p| p.0).collect());
    let ry = ranks(pairs.iter().map(|p| p.1).collect());
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (mx, my) = (mean(&rx), mean(&ry));
    let (mut cov, mut vx, mut vy) = (0.0, 0.0, 0.0);
    for (x, y) in rx.iter().zip(&ry) {
        cov += (x - mx) * (y - my);
        vx += (x - mx).powi(2);
        vy += (y - my).powi(2);
    }
    if vx == 0.0 || vy == 0.0 {
        None
    } else {
        Some(cov / (vx * vy).sqrt())
    }
}

/// The range of a noise figure over rounds, as `a–b%` (or `-`).
fn range(values: impl Iterator<Item = f64>) -> String {
    let values: Vec<f64> = values.filter(|v| v.is_finite()).collect();
    if values.is_empty() {
        return "-".into();
    }
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{low:.1}–{high:.1}%")
}

/// Combines per-round verdicts into one per name: `per_round[r]` holds the
/// verdicts computed from round `r`'s figures alone (the same names in the
/// same order every round), `noise[r]` that round's host noise. `judged`
/// is false for a shared placement or a quick run.
pub fn combine(per_round: &[Vec<Verdict>], noise: &[Noise], judged: bool) -> Vec<Verdict> {
    let Some(first) = per_round.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .map(|(index, shape)| {
            let values: Vec<Option<f64>> = per_round
                .iter()
                .map(|round| round.get(index).and_then(|v| v.value))
                .collect();
            let missing = per_round
                .iter()
                .filter_map(|round| round.get(index).and_then(|v| v.missing.clone()))
                .next();
            combine_one(shape, values, missing, noise, judged)
        })
        .collect()
}

/// [`combine`] for one verdict.
fn combine_one(
    shape: &Verdict,
    values: Vec<Option<f64>>,
    missing: Option<String>,
    noise: &[Noise],
    judged: bool,
) -> Verdict {
    let present: Vec<f64> = values.iter().flatten().copied().collect();
    let mut verdict = Verdict::new(
        shape.name.clone(),
        shape.runtime.clone(),
        median(&present),
        shape.goal,
    );
    verdict.rounds = values.clone();
    let Some((low, high, confidence)) = median_interval(&present) else {
        verdict.judgement = Judgement::Missing;
        verdict.pass = None;
        verdict.missing = missing.or_else(|| Some("a figure is missing".into()));
        return verdict;
    };
    verdict.interval = Some([low, high]);
    verdict.confidence = Some(confidence);
    // Noise over the rounds this verdict has a value in.
    let rounds_noise: Vec<Noise> = values
        .iter()
        .zip(noise)
        .filter(|(v, _)| v.is_some())
        .map(|(_, n)| *n)
        .collect();
    verdict.noise = Some(format!(
        "steal {}, server wait {}",
        range(rounds_noise.iter().map(|n| n.steal_pct)),
        range(rounds_noise.iter().map(|n| n.server_wait_pct)),
    ));
    let by_round: Vec<f64> = values.iter().map(|v| v.unwrap_or(f64::NAN)).collect();
    let linked = Noise::unmeasured()
        .figures()
        .iter()
        .enumerate()
        .filter_map(|(i, (name, _))| {
            let figure: Vec<f64> = noise.iter().map(|n| n.figures()[i].1).collect();
            let rho = rank_correlation(&by_round, &figure)?;
            (rho.abs() >= LINKED).then(|| format!("{name} (rank correlation {rho:+.2})"))
        })
        .collect::<Vec<_>>();
    if !linked.is_empty() {
        verdict.moved_with = Some(linked.join(", "));
    }
    let Some(goal) = shape.goal else {
        verdict.judgement = Judgement::Reported;
        verdict.pass = None;
        return verdict;
    };
    let outcome = against(goal, low, high);
    verdict.would_be = Some(outcome);
    if !judged {
        verdict.judgement = Judgement::NotJudged;
        verdict.pass = None;
        return verdict;
    }
    verdict.judgement = outcome;
    verdict.pass = match outcome {
        Judgement::Pass => Some(true),
        Judgement::Fail => Some(false),
        _ => None,
    };
    if outcome == Judgement::Unclear {
        let median = verdict.value.unwrap_or(f64::NAN);
        let side = if goal.met_by(median) {
            "meets"
        } else {
            "misses"
        };
        let more = present.len().max(5) + 3;
        let (k, c) = median_interval_rank(more);
        verdict.settle = Some(format!(
            "the rounds run from {low:.3} to {high:.3}, across the goal {goal}, and their median {median:.3} {side} it; \
             {more} rounds would bound the median by their {k}{} smallest and largest values ({:.0}% confidence), \
             or a quieter host would narrow the spread ({})",
            ordinal_suffix(k),
            c * 100.0,
            verdict.noise.as_deref().unwrap_or("noise not measured"),
        ));
    }
    verdict
}

/// `st`, `nd`, `rd` or `th`.
fn ordinal_suffix(n: usize) -> &'static str {
    match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interval ranks and confidences of the order-statistic interval.
    #[test]
    fn interval_ranks() {
        assert_eq!(median_interval_rank(0), (0, 0.0));
        let (k, c) = median_interval_rank(1);
        assert_eq!((k, c), (1, 0.0));
        let (k, c) = median_interval_rank(3);
        assert_eq!(k, 1);
        assert!((c - 0.75).abs() < 1e-12);
        let (k, c) = median_interval_rank(5);
        assert_eq!(k, 1);
        assert!((c - 0.9375).abs() < 1e-12);
        let (k, c) = median_interval_rank(8);
        assert_eq!(k, 2);
        assert!((c - (1.0 - 2.0 * 9.0 / 256.0)).abs() < 1e-12);
        let (k, c) = median_interval_rank(20);
        assert!(k >= 5 && c >= CONFIDENCE, "{k} {c}");
    }

    /// Five rounds: the interval is the minimum and the maximum.
    #[test]
    fn five_rounds_span_min_to_max() {
        let (low, high, c) = median_interval(&[3.0, 1.0, 5.0, f64::NAN, 2.0, 4.0]).unwrap();
        assert_eq!((low, high), (1.0, 5.0));
        assert!(c > 0.93);
        assert_eq!(median_interval(&[]), None);
    }

    /// An interval clear of the goal passes or fails; one across it is
    /// unclear, whichever side its median is on.
    #[test]
    fn outcomes_against_goals() {
        assert_eq!(against(Goal::AtMost(3.0), 1.0, 2.9), Judgement::Pass);
        assert_eq!(against(Goal::AtMost(3.0), 3.1, 9.0), Judgement::Fail);
        assert_eq!(against(Goal::AtMost(3.0), 2.0, 3.5), Judgement::Unclear);
        assert_eq!(against(Goal::AtLeast(0.9), 0.95, 1.2), Judgement::Pass);
        assert_eq!(against(Goal::AtLeast(0.9), 0.5, 0.8), Judgement::Fail);
        assert_eq!(against(Goal::Within(-1.0, 1.0), -0.5, 0.5), Judgement::Pass);
        assert_eq!(against(Goal::Within(-1.0, 1.0), 2.0, 3.0), Judgement::Fail);
        assert_eq!(
            against(Goal::Within(-1.0, 1.0), -2.0, 2.0),
            Judgement::Unclear
        );
    }

    /// Rank correlation: +1, -1, ties, and too little data.
    #[test]
    fn rank_correlations() {
        let up = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert!(
            (rank_correlation(&up, &[10.0, 20.0, 30.0, 40.0, 99.0]).unwrap() - 1.0).abs() < 1e-12
        );
        assert!((rank_correlation(&up, &[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(rank_correlation(&up, &[1.0; 5]), None);
        assert_eq!(rank_correlation(&[1.0, 2.0], &[1.0, 2.0]), None);
        let tied = rank_correlation(&[1.0, 1.0, 2.0, 3.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!(tied > 0.9 && tied < 1.0, "{tied}");
    }

    /// A verdict per round for `values`, judged against `goal`.
    fn rounds(values: &[Option<f64>], goal: Option<Goal>) -> Vec<Vec<Verdict>> {
        values
            .iter()
            .map(|&v| vec![Verdict::new("ratio", "keel", v, goal)])
            .collect()
    }

    /// Noise per round, steal rising with the round.
    fn noise(n: usize) -> Vec<Noise> {
        (0..n)
            .map(|i| Noise {
                steal_pct: i as f64,
                server_steal_pct: 0.0,
                server_wait_pct: 0.5,
            })
            .collect()
    }

    /// The combined verdict carries the median, the interval, the rounds
    /// and the noise, and passes only when every round's value does.
    #[test]
    fn combines_rounds_into_a_judged_verdict() {
        let per_round = rounds(
            &[Some(2.0), Some(2.5), Some(1.0), Some(2.2), Some(2.9)],
            Some(Goal::AtMost(3.0)),
        );
        let v = &combine(&per_round, &noise(5), true)[0];
        assert_eq!(v.value, Some(2.2));
        assert_eq!(v.interval, Some([1.0, 2.9]));
        assert_eq!(v.judgement, Judgement::Pass);
        assert_eq!(v.pass, Some(true));
        assert_eq!(v.rounds.len(), 5);
        assert!(
            v.noise.as_deref().unwrap().contains("steal 0.0–4.0%"),
            "{v:?}"
        );
        assert!(v.settle.is_none());
    }

    /// One round across the goal makes the verdict unclear, with a note
    /// that says what would settle it, and names the noise that moved
    /// with the values.
    #[test]
    fn a_straddling_verdict_is_unclear_and_says_why() {
        let per_round = rounds(
            &[Some(1.0), Some(1.5), Some(2.0), Some(2.5), Some(3.5)],
            Some(Goal::AtMost(3.0)),
        );
        let v = &combine(&per_round, &noise(5), true)[0];
        assert_eq!(v.judgement, Judgement::Unclear);
        assert_eq!(v.pass, None);
        let settle = v.settle.as_deref().unwrap();
        assert!(
            settle.contains("meets it") && settle.contains("8 rounds"),
            "{settle}"
        );
        assert!(
            v.moved_with.as_deref().unwrap().contains("steal_pct"),
            "{v:?}"
        );
    }

    /// Not judged: the outcome is kept as what it would be.
    #[test]
    fn shared_runs_are_not_judged() {
        let per_round = rounds(&[Some(9.0), Some(8.0), Some(7.0)], Some(Goal::AtMost(3.0)));
        let v = &combine(&per_round, &noise(3), false)[0];
        assert_eq!(v.judgement, Judgement::NotJudged);
        assert_eq!(v.would_be, Some(Judgement::Fail));
        assert_eq!(v.pass, None);
    }

    /// No goal: reported; no value in any round: n/a with the reason.
    #[test]
    fn reported_and_missing() {
        let v = &combine(&rounds(&[Some(1.0)], None), &noise(1), true)[0];
        assert_eq!(v.judgement, Judgement::Reported);
        let per_round: Vec<Vec<Verdict>> = (0..2)
            .map(|_| {
                vec![Verdict::new("ratio", "keel", None, Some(Goal::AtMost(1.0)))
                    .missing_because("tokio not run")]
            })
            .collect();
        let v = &combine(&per_round, &noise(2), true)[0];
        assert_eq!(v.judgement, Judgement::Missing);
        assert_eq!(v.missing.as_deref(), Some("tokio not run"));
        assert!(combine(&[], &[], true).is_empty());
    }
}
