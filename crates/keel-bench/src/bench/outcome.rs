//! What a scenario hands back: sizes, figures per runtime, verdicts.
//!
//! Every scenario produces the same shape, so that the table, the report
//! and the exit status are written once. Metrics and sizes are ordered
//! lists rather than maps, because their order is the order a person
//! reads them in (and serialise as JSON objects in that order). Verdicts
//! carry their goal; a verdict that cannot be computed (a runtime was not
//! run, a figure is missing) keeps its place with no value.

use std::borrow::Cow;
use std::fmt;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::charts::{Chart, ChartFile};
use super::judge::Judgement;
use super::noise::Noise;
use crate::load::realtime::ProbeScheduling;
use crate::serve::RuntimeKind;

/// One scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The scenario id (`s1`).
    pub id: &'static str,
    /// What the scenario measures, in a few words.
    pub title: &'static str,
    /// The sizes used, in reading order.
    pub sizes: Pairs<serde_json::Value>,
    /// Figures per runtime (and mode).
    pub runs: Vec<RunFigures>,
    /// Ratios with their goals.
    pub verdicts: Vec<Verdict>,
    /// Raw figures per round and phase, to recompute anything from.
    pub rounds: serde_json::Value,
    /// The host's noise in each round (the worst of the round's phases).
    pub noise: Vec<RoundNoise>,
    /// Figures that should exist and do not: these fail the run.
    pub problems: Vec<String>,
    /// Things worth knowing that do not invalidate the figures.
    pub notes: Vec<String>,
    /// Charts to draw beside the report; their files are listed under
    /// `charts` once the report is written.
    #[serde(skip)]
    pub charts: Vec<Chart>,
    /// The chart files drawn, next to `report.json`.
    #[serde(rename = "charts")]
    pub chart_files: Vec<ChartFile>,
}

/// The figures of one runtime in one mode.
#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    /// The runtime's name.
    pub runtime: String,
    /// The mode (`default` unless a scenario compares settings).
    pub mode: String,
    /// Metrics, named with their unit as a suffix.
    pub metrics: Pairs<f64>,
}

impl RunFigures {
    /// The value of metric `name`, if present.
    pub fn metric(&self, name: &str) -> Option<f64> {
        self.metrics.get(name)
    }

    /// The run as a column header: the runtime, and the mode unless it is
    /// `default`.
    pub fn label(&self) -> String {
        if self.mode == "default" {
            self.runtime.clone()
        } else {
            format!("{} {}", self.runtime, self.mode)
        }
    }
}

/// The host's noise in one round.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RoundNoise {
    /// Round number, from 1.
    pub round: u32,
    /// Steal and the server's run-queue wait, the worst of the round's
    /// phases.
    #[serde(flatten)]
    pub noise: Noise,
}

/// The figures of one round: each run's metrics from that round alone,
/// and the host's noise while they were measured.
#[derive(Debug, Clone)]
pub struct RoundFigures {
    /// Round number, from 1.
    pub round: u32,
    /// Each run's metrics in this round (runs without a complete round
    /// are left out).
    pub runs: Vec<RunFigures>,
    /// The worst noise of the round's phases.
    pub noise: Noise,
}

/// Per run, in order of first appearance, each metric's median across
/// `rounds`.
pub fn medians_of(rounds: &[RoundFigures]) -> Vec<RunFigures> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for round in rounds {
        for run in &round.runs {
            let key = (run.runtime.clone(), run.mode.clone());
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys.into_iter()
        .map(|(runtime, mode)| {
            let per_round: Vec<Vec<(&'static str, f64)>> = rounds
                .iter()
                .filter_map(|round| {
                    round
                        .runs
                        .iter()
                        .find(|r| r.runtime == runtime && r.mode == mode)
                        .map(|r| r.metrics.0.clone())
                })
                .collect();
            RunFigures {
                runtime,
                mode,
                metrics: Pairs::medians(&per_round),
            }
        })
        .collect()
}

/// A scenario's verdicts: `verdicts` computed from each round's figures
/// alone, combined into a median, an interval and an outcome (see
/// [`super::judge`]); `judged` is false when they are reported only.
pub fn judge_rounds(
    rounds: &[RoundFigures],
    judged: bool,
    verdicts: impl Fn(&[RunFigures]) -> Vec<Verdict>,
) -> Vec<Verdict> {
    let per_round: Vec<Vec<Verdict>> = rounds.iter().map(|r| verdicts(&r.runs)).collect();
    let noise: Vec<Noise> = rounds.iter().map(|r| r.noise).collect();
    super::judge::combine(&per_round, &noise, judged)
}

/// The noise of each round, for the report.
pub fn round_noise(rounds: &[RoundFigures]) -> Vec<RoundNoise> {
    rounds
        .iter()
        .map(|r| RoundNoise {
            round: r.round,
            noise: r.noise,
        })
        .collect()
}

/// A note saying how the latency probes' threads were scheduled, each
/// distinct way once with how many phases it held for; `None` when no
/// probe said.
pub fn probe_note<'a>(
    schedulings: impl Iterator<Item = Option<&'a ProbeScheduling>>,
) -> Option<String> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for scheduling in schedulings.flatten() {
        let mut what = scheduling.label();
        if let Some(why) = &scheduling.refused {
            what.push_str(&format!(" ({why})"));
        }
        match seen.iter_mut().find(|(w, _)| *w == what) {
            Some((_, n)) => *n += 1,
            None => seen.push((what, 1)),
        }
    }
    if seen.is_empty() {
        return None;
    }
    let parts: Vec<String> = seen
        .iter()
        .map(|(what, n)| format!("{what} in {n} phase{}", if *n == 1 { "" } else { "s" }))
        .collect();
    Some(format!("latency probes ran at {}", parts.join(", ")))
}

/// The value of metric `name` of the run of `runtime` in `mode`, if any.
pub fn find_metric(runs: &[RunFigures], runtime: &str, mode: &str, name: &str) -> Option<f64> {
    runs.iter()
        .find(|r| r.runtime == runtime && r.mode == mode)
        .and_then(|r| r.metric(name))
}

/// Problems with the figures of `runs`: a run without a complete round,
/// and metrics that are not numbers.
pub fn check_runs(runs: &[RunFigures]) -> Vec<String> {
    let mut problems = Vec::new();
    for run in runs {
        if run.metrics.0.is_empty() {
            problems.push(format!("{}: no complete round", run.label()));
        }
        for (name, value) in &run.metrics.0 {
            if !value.is_finite() {
                problems.push(format!("{}: {name} is not a number", run.label()));
            }
        }
    }
    problems
}

/// Why a verdict that needs `needed` has no value, when `ran` were run:
/// the runtimes that were not run, or else a missing figure.
pub fn why_missing(needed: &[RuntimeKind], ran: &[RuntimeKind]) -> String {
    let absent: Vec<&str> = needed
        .iter()
        .filter(|r| !ran.contains(r))
        .map(|r| r.name())
        .collect();
    if absent.is_empty() {
        "a figure is missing".to_string()
    } else {
        format!("{} not run", absent.join(" and "))
    }
}

/// A verdict `name` on keel-uring's `metric` over keel's, both in `mode`:
/// how the ring compares with epoll, judged against `goal` if the ring
/// has one of its own. `ran`: the runtimes the run measured.
pub fn ring_over_epoll(
    runs: &[RunFigures],
    ran: &[RuntimeKind],
    name: &'static str,
    mode: &str,
    metric: &str,
    goal: Option<Goal>,
) -> Verdict {
    over(
        runs,
        ran,
        name,
        (RuntimeKind::KeelUring, RuntimeKind::Keel),
        mode,
        metric,
        goal,
    )
}

/// A verdict `name` on `runtime`'s `metric` over `other`'s, both in
/// `mode`, judging `runtime` against `goal`; where either is missing, why.
/// `ran`: the runtimes the run measured.
pub fn over(
    runs: &[RunFigures],
    ran: &[RuntimeKind],
    name: impl Into<Cow<'static, str>>,
    (runtime, other): (RuntimeKind, RuntimeKind),
    mode: &str,
    metric: &str,
    goal: Option<Goal>,
) -> Verdict {
    Verdict::new(
        name,
        runtime.name(),
        super::stats::ratio(
            find_metric(runs, runtime.name(), mode, metric),
            find_metric(runs, other.name(), mode, metric),
        ),
        goal,
    )
    .missing_because(why_missing(&[runtime, other], ran))
}

/// An ordered list of named values that serialises as a JSON object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pairs<T>(pub Vec<(&'static str, T)>);

impl<T: Clone> Pairs<T> {
    /// The value named `name`, if present.
    pub fn get(&self, name: &str) -> Option<T> {
        self.0
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.clone())
    }
}

impl Pairs<f64> {
    /// Per metric, the median across `rounds` (each the same metrics in the
    /// same order, as one round produces them); empty without rounds.
    pub fn medians(rounds: &[Vec<(&'static str, f64)>]) -> Pairs<f64> {
        let Some(first) = rounds.first() else {
            return Pairs::default();
        };
        Pairs(
            first
                .iter()
                .enumerate()
                .map(|(i, (name, _))| {
                    let values: Vec<f64> = rounds
                        .iter()
                        .filter_map(|round| round.get(i).map(|(_, v)| *v))
                        .collect();
                    (*name, super::stats::median(&values).unwrap_or(f64::NAN))
                })
                .collect(),
        )
    }
}

impl<T: Serialize> Serialize for Pairs<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A goal a verdict's value should meet.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// The value should be at most this.
    AtMost(f64),
    /// The value should be at least this.
    AtLeast(f64),
    /// The value should lie in this closed range.
    Within(f64, f64),
}

impl Goal {
    /// Whether `value` meets the goal.
    pub fn met_by(self, value: f64) -> bool {
        match self {
            Self::AtMost(limit) => value <= limit,
            Self::AtLeast(limit) => value >= limit,
            Self::Within(low, high) => (low..=high).contains(&value),
        }
    }
}

/// A goal's limit as people write it: at most three decimals, no
/// trailing zeros (a third is `0.333`, three is `3`).
struct Limit(f64);

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("{:.3}", self.0);
        let text = text.trim_end_matches('0').trim_end_matches('.');
        f.write_str(text)
    }
}

impl fmt::Display for Goal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AtMost(limit) => write!(f, "<= {}", Limit(*limit)),
            Self::AtLeast(limit) => write!(f, ">= {}", Limit(*limit)),
            Self::Within(low, high) => write!(f, "in [{}, {}]", Limit(*low), Limit(*high)),
        }
    }
}

impl Serialize for Goal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A ratio between figures, with its goal if it has one.
///
/// A verdict made by [`Verdict::new`] judges one value; the scenarios'
/// verdicts are made per round and combined by [`super::judge::combine`],
/// which fills in the interval, the rounds, the noise and the outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// What is divided by what (`loaded_p99/idle_p99`).
    pub name: Cow<'static, str>,
    /// The runtime it judges (`keel` for keel-vs-tokio ratios).
    pub runtime: Cow<'static, str>,
    /// The ratio (the median of the rounds' ratios); `None` when a figure
    /// it needs is missing.
    pub value: Option<f64>,
    /// The goal; `None` for a figure reported for comparison only.
    pub goal: Option<Goal>,
    /// Whether the goal is met: `Some(true)` for a pass, `Some(false)` for
    /// a fail, `None` otherwise (unclear, not judged, no goal, no value).
    pub pass: Option<bool>,
    /// The outcome: `pass`, `fail`, `unclear`, `not judged`, `reported`
    /// or `n/a`.
    #[serde(rename = "outcome")]
    pub judgement: Judgement,
    /// The confidence interval of the median, `[low, high]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval: Option<[f64; 2]>,
    /// The interval's confidence (0 to 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// The value of each round, in round order (`null` where a figure was
    /// missing).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rounds: Vec<Option<f64>>,
    /// For a verdict that is not judged: the outcome it would have.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_be: Option<Judgement>,
    /// The host's noise over the rounds (steal, the server's run-queue
    /// wait), as ranges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise: Option<String>,
    /// Noise figures whose rank order across rounds follows the values'.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_with: Option<String>,
    /// For an unclear verdict: what the rounds say and what would settle
    /// it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settle: Option<String>,
    /// Why there is no value, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

impl Verdict {
    /// A verdict on `value`, judged against `goal`.
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        runtime: impl Into<Cow<'static, str>>,
        value: Option<f64>,
        goal: Option<Goal>,
    ) -> Self {
        let pass = match (value, goal) {
            (Some(value), Some(goal)) => Some(goal.met_by(value)),
            _ => None,
        };
        let judgement = match (value, pass) {
            (None, _) => Judgement::Missing,
            (Some(_), None) => Judgement::Reported,
            (Some(_), Some(true)) => Judgement::Pass,
            (Some(_), Some(false)) => Judgement::Fail,
        };
        Self {
            name: name.into(),
            runtime: runtime.into(),
            value,
            goal,
            pass,
            judgement,
            interval: None,
            confidence: None,
            rounds: Vec::new(),
            would_be: None,
            noise: None,
            moved_with: None,
            settle: None,
            missing: None,
        }
    }

    /// The same verdict, saying why it has no value (if it has none).
    pub fn missing_because(mut self, why: impl Into<String>) -> Self {
        if self.value.is_none() {
            self.missing = Some(why.into());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goals judge values on the right side of their limit, inclusive.
    #[test]
    fn goals() {
        assert!(Goal::AtMost(3.0).met_by(3.0));
        assert!(!Goal::AtMost(3.0).met_by(3.01));
        assert!(Goal::AtLeast(0.97).met_by(1.0));
        assert!(!Goal::AtLeast(0.97).met_by(0.9));
        assert_eq!(Goal::AtMost(0.333).to_string(), "<= 0.333");
        assert_eq!(Goal::AtMost(1.0 / 3.0).to_string(), "<= 0.333");
        assert_eq!(Goal::AtLeast(0.9).to_string(), ">= 0.9");
        assert_eq!(Goal::AtMost(3.0).to_string(), "<= 3");
        assert_eq!(Goal::Within(0.9, 1.1).to_string(), "in [0.9, 1.1]");
        assert_eq!(Goal::AtLeast(0.97).to_string(), ">= 0.97");
    }

    /// A verdict passes or fails only with both a value and a goal.
    #[test]
    fn verdict_pass() {
        let v = Verdict::new("x", "keel", Some(2.0), Some(Goal::AtMost(3.0)));
        assert_eq!(v.pass, Some(true));
        let v = Verdict::new("x", "tokio", Some(9.0), None);
        assert_eq!(v.pass, None);
        let v = Verdict::new("x", "keel", None, Some(Goal::AtMost(3.0))).missing_because("no keel");
        assert_eq!(v.pass, None);
        assert_eq!(v.missing.as_deref(), Some("no keel"));
    }

    /// Medians are taken per metric across rounds.
    #[test]
    fn medians_per_metric() {
        let rounds = vec![
            vec![("a", 1.0), ("b", 30.0)],
            vec![("a", 3.0), ("b", 10.0)],
            vec![("a", 2.0), ("b", 20.0)],
        ];
        let medians = Pairs::medians(&rounds);
        assert_eq!(medians, Pairs(vec![("a", 2.0), ("b", 20.0)]));
        assert_eq!(Pairs::medians(&[]), Pairs::default());
    }

    /// Pairs serialise as an object in their own order.
    #[test]
    fn pairs_keep_order() {
        let pairs = Pairs(vec![("zeta", 1.0), ("alpha", 2.0)]);
        assert_eq!(
            serde_json::to_string(&pairs).unwrap(),
            r#"{"zeta":1.0,"alpha":2.0}"#
        );
        assert_eq!(pairs.get("alpha"), Some(2.0));
        assert_eq!(pairs.get("beta"), None);
    }
}
