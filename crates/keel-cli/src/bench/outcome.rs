//! What a scenario hands back: sizes, figures per runtime, verdicts.
//!
//! Every scenario produces the same shape, so that the table, the report
//! and the exit status are written once. Metrics and sizes are ordered
//! lists rather than maps, because their order is the order a person
//! reads them in (and serialise as JSON objects in that order). Verdicts
//! carry their goal; a verdict that cannot be computed (a runtime was not
//! run, a figure is missing) keeps its place with no value.

use std::fmt;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use super::charts::{Chart, ChartFile};
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

impl fmt::Display for Goal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AtMost(limit) => write!(f, "<= {limit}"),
            Self::AtLeast(limit) => write!(f, ">= {limit}"),
            Self::Within(low, high) => write!(f, "in [{low}, {high}]"),
        }
    }
}

impl Serialize for Goal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A ratio between figures, with its goal if it has one.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// What is divided by what (`loaded_p99/idle_p99`).
    pub name: &'static str,
    /// The runtime it judges (`keel` for keel-vs-tokio ratios).
    pub runtime: &'static str,
    /// The ratio; `None` when a figure it needs is missing.
    pub value: Option<f64>,
    /// The goal; `None` for a figure reported for comparison only.
    pub goal: Option<Goal>,
    /// Whether the goal is met; `None` without a goal or a value.
    pub pass: Option<bool>,
    /// Why there is no value, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

impl Verdict {
    /// A verdict on `value`, judged against `goal`.
    pub fn new(
        name: &'static str,
        runtime: &'static str,
        value: Option<f64>,
        goal: Option<Goal>,
    ) -> Self {
        let pass = match (value, goal) {
            (Some(value), Some(goal)) => Some(goal.met_by(value)),
            _ => None,
        };
        Self {
            name,
            runtime,
            value,
            goal,
            pass,
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
