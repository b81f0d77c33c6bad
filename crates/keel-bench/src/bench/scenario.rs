//! What every measured scenario shares, written once: the [`Scenario`]
//! trait and the driver that runs one, [`run`].
//!
//! S0 to S5 all follow one skeleton. Each round runs every phase once:
//! a phase is one fresh server (keel or tokio, in some mode) under one
//! load, measured between two marks. A round is a list of *stages* run in
//! order (S0's keep-alive phases before its short ones, S2's API alone
//! before the storms); within a stage the phases run in their canonical
//! order in odd rounds and reversed in even ones, so slow drift on a
//! shared machine lands on every runtime alike without mixing what a
//! stage measures with what the next one does. After the last round, each
//! round's phases become that round's figures per runtime and mode, the
//! report's figures are their medians across rounds, and each verdict is
//! computed per round and judged on its median and interval (see
//! [`super::judge`]).
//!
//! A scenario says only what differs: its stages, how one phase is
//! measured and summed up on the progress line, what a round's phases
//! make as metrics, its verdicts, its checks, sizes and charts. The driver
//! does the rest (the rounds and their order, the progress bars, the
//! medians, the noise, the judging, the problems shared by every
//! scenario, the outcome), so a new scenario cannot get the interleaving
//! or the judging subtly different from the others.
//!
//! `--crash` is not a scenario in this sense: it kills one node again and
//! again and audits its log, with no rounds, no runtimes to compare and no
//! medians, and stays on its own in [`super::crash`].

use std::cell::RefCell;
use std::time::Duration;

use serde::Serialize;

use super::charts::Chart;
use super::noise::Noise;
use super::outcome::{
    check_runs, judge_rounds, medians_of, probe_note, round_noise, Outcome, Pairs, RoundFigures,
    RunFigures, Verdict,
};
use super::progress::PhaseBar;
use super::RunSpec;
use crate::error::Error;
use crate::load::realtime::ProbeScheduling;
use crate::serve::RuntimeKind;

/// A measured scenario: what it runs, how it measures a phase, and what it
/// makes of the figures. [`run`] drives it.
pub trait Scenario {
    /// One phase of a round: which runtime, in which mode, under which
    /// load.
    type Phase: Copy;
    /// What one phase measured, with its round; the report keeps every
    /// record under `rounds`.
    type Record: Serialize;

    /// The scenario id (`s1`).
    const ID: &'static str;
    /// What the scenario measures, in a few words, for the table.
    const TITLE: &'static str;

    /// What every scenario run shares: runtimes, rounds, phase sizes,
    /// placement.
    fn spec(&self) -> &RunSpec;

    /// The phases of one round, stage by stage in canonical order (each
    /// stage's phases are reversed in even rounds).
    fn stages(&self) -> Vec<Vec<Self::Phase>>;

    /// What the progress line calls `phase` after the round
    /// (`keel keepalive`).
    fn phase_name(&self, phase: Self::Phase) -> String;

    /// About how long `phase` takes, for its progress bar.
    fn expected(&self, phase: Self::Phase) -> Duration;

    /// Measures `phase` of `round`, saying what it does on `bar`. Children
    /// it starts are killed on any early return.
    fn measure(
        &self,
        round: u32,
        phase: Self::Phase,
        bar: &PhaseBar,
    ) -> Result<Self::Record, Error>;

    /// The progress line's figures for a measured phase (after its label).
    fn summary(&self, record: &Self::Record) -> String;

    /// The round a record was measured in, from 1.
    fn round_of(record: &Self::Record) -> u32;

    /// The host's noise while a record was measured.
    fn noise_of(record: &Self::Record) -> Noise;

    /// One round's figures per runtime and mode, from that round's records
    /// (runs without every phase they need in the round are left out).
    fn round_runs(&self, records: &[&Self::Record]) -> Vec<RunFigures>;

    /// The verdicts of one round, from its figures alone.
    fn verdicts(&self, runs: &[RunFigures]) -> Vec<Verdict>;

    /// Problems (figures that should exist and do not: these fail the
    /// run) and notes (things worth knowing) about the records; the
    /// problems every scenario shares are added by the driver.
    fn check(&self, records: &[Self::Record]) -> (Vec<String>, Vec<String>);

    /// The scenario's own sizes, in reading order (the run's shared sizes
    /// follow them).
    fn sizes(&self) -> Vec<(&'static str, serde_json::Value)>;

    /// How a latency probe's threads were scheduled in the phase of
    /// `record`, per probe; none for a scenario without such probes.
    fn schedulings(record: &Self::Record) -> Vec<Option<&ProbeScheduling>> {
        let _ = record;
        Vec::new()
    }

    /// The report's `rounds`: by default, every record.
    fn rounds_json(&self, records: &[Self::Record]) -> Result<serde_json::Value, Error> {
        Ok(serde_json::to_value(records)?)
    }

    /// Charts to draw beside the report; none by default.
    fn charts(&self, records: &[Self::Record]) -> Vec<Chart> {
        let _ = records;
        Vec::new()
    }

    /// The label of `phase` in `round`, on its progress line and in its
    /// errors (`s0 r1/5 keel keepalive`).
    fn label(&self, round: u32, phase: Self::Phase) -> String {
        format!(
            "{} r{round}/{} {}",
            Self::ID,
            self.spec().runs,
            self.phase_name(phase)
        )
    }
}

/// Runs `scenario`: every phase of every round, then its figures,
/// verdicts and checks as an [`Outcome`].
pub fn run<S: Scenario>(scenario: &S) -> Result<Outcome, Error> {
    let mut records = Vec::new();
    for (round, phase) in schedule(&scenario.stages(), scenario.spec().runs) {
        records.push(run_phase(scenario, round, phase)?);
    }
    outcome(scenario, &records)
}

/// The phases of `runs` rounds (from 1) in the order they run: stage by
/// stage, each stage's phases in order in odd rounds and reversed in even
/// ones.
pub fn schedule<P: Copy>(stages: &[Vec<P>], runs: u32) -> Vec<(u32, P)> {
    let mut out = Vec::new();
    for round in 1..=runs {
        for stage in stages {
            let mut order = stage.clone();
            if round % 2 == 0 {
                order.reverse();
            }
            out.extend(order.into_iter().map(|phase| (round, phase)));
        }
    }
    out
}

/// Runs one phase, showing its progress, and ends its bar with the
/// phase's summary (or clears it, the error saying which phase failed).
fn run_phase<S: Scenario>(scenario: &S, round: u32, phase: S::Phase) -> Result<S::Record, Error> {
    let label = scenario.label(round, phase);
    let bar = PhaseBar::new(&label, scenario.expected(phase));
    match scenario.measure(round, phase, &bar) {
        Ok(record) => {
            bar.finish(&format!("{label:<28} {}", scenario.summary(&record)));
            Ok(record)
        }
        Err(error) => {
            bar.abandon();
            Err(error.context(label))
        }
    }
}

/// Each round's figures: for every round from 1 to the last, the runs
/// its records make, and the worst noise of those records.
pub fn round_figures<S: Scenario>(scenario: &S, records: &[S::Record]) -> Vec<RoundFigures> {
    let last = records.iter().map(S::round_of).max().unwrap_or(0);
    (1..=last)
        .map(|round| {
            let mine: Vec<&S::Record> =
                records.iter().filter(|r| S::round_of(r) == round).collect();
            RoundFigures {
                round,
                runs: scenario.round_runs(&mine),
                noise: Noise::worst_of(mine.iter().map(|r| S::noise_of(r))),
            }
        })
        .collect()
}

/// The verdicts of `rounds`, each judged on its per-round values.
///
/// Where keel-uring ran, each verdict on keel is judged a second time on
/// keel-uring's figures in keel's place: its *ring twin*, so that every
/// goal keel meets on epoll is checked on the ring too, with no scenario
/// writing its verdicts twice. A twin is named with `keel-uring` for
/// `keel` (or, if its name does not mention keel, with `, keel-uring`
/// after it); one whose name the scenario judges itself (a goal of the
/// ring's own) gives way to it. A twin of a verdict that needs a mode of
/// keel's that keel-uring does not run (S1's unaccounted one, S3's lane)
/// is left out: one that has a value from keel's runs but none from
/// keel's runs in keel-uring's modes alone, in some round, or, where keel
/// has no value in any round to tell by (keel not run), one that has no
/// value either.
pub fn judged_verdicts<S: Scenario>(scenario: &S, rounds: &[RoundFigures]) -> Vec<Verdict> {
    let spec = scenario.spec();
    if !spec.runtimes.contains(&RuntimeKind::KeelUring) {
        return judge_rounds(rounds, spec.judged, |runs| scenario.verdicts(runs));
    }
    let ring_modes: Vec<&str> = rounds
        .iter()
        .flat_map(|round| &round.runs)
        .filter(|run| run.runtime == RuntimeKind::KeelUring.name())
        .map(|run| run.mode.as_str())
        .collect();
    // The list of verdicts, and so of twins, is the same whatever the
    // figures: each twin's own verdict, by index.
    let own = scenario.verdicts(&[]);
    let twin_of: Vec<usize> = ring_twins(&own, own.clone())
        .into_iter()
        .map(|(index, _)| index)
        .collect();
    let needs_keel_only = RefCell::new(vec![false; own.len()]);
    let mut verdicts = judge_rounds(rounds, spec.judged, |runs| {
        let mut verdicts = scenario.verdicts(runs);
        let in_ring_modes: Vec<RunFigures> = runs
            .iter()
            .filter(|run| {
                run.runtime != RuntimeKind::Keel.name() || ring_modes.contains(&&*run.mode)
            })
            .cloned()
            .collect();
        let restricted = scenario.verdicts(&in_ring_modes);
        for ((flag, full), restricted) in needs_keel_only
            .borrow_mut()
            .iter_mut()
            .zip(&verdicts)
            .zip(&restricted)
        {
            *flag |= full.value.is_some() && restricted.value.is_none();
        }
        let twins = ring_twins(&verdicts, scenario.verdicts(&with_the_ring_as_keel(runs)));
        verdicts.extend(twins.into_iter().map(|(_, twin)| twin));
        verdicts
    });
    let twins = verdicts.split_off(own.len().min(verdicts.len()));
    let needs_keel_only = needs_keel_only.into_inner();
    let has_value = |verdict: &Verdict| verdict.rounds.iter().any(Option::is_some);
    let kept: Vec<Verdict> = twins
        .into_iter()
        .zip(twin_of)
        .filter(|(twin, of)| {
            !needs_keel_only[*of] && (has_value(&verdicts[*of]) || has_value(twin))
        })
        .map(|(twin, _)| twin)
        .collect();
    verdicts.extend(kept);
    verdicts
}

/// `runs` with keel-uring's in keel's place: keel's left out, and
/// keel-uring's renamed `keel`.
fn with_the_ring_as_keel(runs: &[RunFigures]) -> Vec<RunFigures> {
    runs.iter()
        .filter(|run| run.runtime != RuntimeKind::Keel.name())
        .map(|run| {
            let mut run = run.clone();
            if run.runtime == RuntimeKind::KeelUring.name() {
                run.runtime = RuntimeKind::Keel.name().into();
            }
            run
        })
        .collect()
}

/// The ring twins (see [`judged_verdicts`]) among `on_the_ring`, the
/// verdicts computed with keel-uring's figures as keel's: those on keel
/// (not the ring's own, such as `… keel-uring/keel`), renamed, less those
/// `own` already names; each with the index of the verdict it twins.
fn ring_twins(own: &[Verdict], on_the_ring: Vec<Verdict>) -> Vec<(usize, Verdict)> {
    let (keel, ring) = (RuntimeKind::Keel.name(), RuntimeKind::KeelUring.name());
    on_the_ring
        .into_iter()
        .enumerate()
        .filter(|(_, v)| v.runtime != ring && (v.runtime == keel || mentions_keel(&v.name)))
        .map(|(index, mut v)| {
            v.name = if mentions_keel(&v.name) {
                keel_to_ring(&v.name)
            } else {
                format!("{}, {}", v.name, RuntimeKind::KeelUring.name())
            }
            .into();
            v.runtime = keel_to_ring(&v.runtime).into();
            v.missing = v.missing.as_deref().map(keel_to_ring);
            (index, v)
        })
        .filter(|(_, twin)| !own.iter().any(|v| v.name == twin.name))
        .collect()
}

/// Where the word `keel` (not `keel-uring`) stands in `text`.
fn keel_words(text: &str) -> impl Iterator<Item = usize> + '_ {
    let part_of_a_word =
        |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || "-_".contains(c));
    let keel = RuntimeKind::Keel.name();
    text.match_indices(keel)
        .map(|(at, _)| at)
        .filter(move |&at| {
            !part_of_a_word(text[..at].chars().next_back())
                && !part_of_a_word(text[at + keel.len()..].chars().next())
        })
}

/// Whether `text` names keel (on epoll).
fn mentions_keel(text: &str) -> bool {
    keel_words(text).next().is_some()
}

/// `text` with every word `keel` made `keel-uring`.
fn keel_to_ring(text: &str) -> String {
    let keel = RuntimeKind::Keel.name();
    let mut out = String::with_capacity(text.len() + 16);
    let mut last = 0;
    for at in keel_words(text) {
        out.push_str(&text[last..at]);
        out.push_str(RuntimeKind::KeelUring.name());
        last = at + keel.len();
    }
    out.push_str(&text[last..]);
    out
}

/// What `records` of a finished run make: medians, verdicts, problems,
/// notes, sizes and charts.
pub fn outcome<S: Scenario>(scenario: &S, records: &[S::Record]) -> Result<Outcome, Error> {
    let rounds = round_figures(scenario, records);
    let runs = medians_of(&rounds);
    let verdicts = judged_verdicts(scenario, &rounds);
    let (mut problems, mut notes) = scenario.check(records);
    problems.extend(check_runs(&runs));
    notes.extend(probe_note(records.iter().flat_map(S::schedulings)));
    let mut sizes = Pairs(scenario.sizes());
    sizes.0.extend(scenario.spec().sizes());
    Ok(Outcome {
        id: S::ID,
        title: S::TITLE,
        sizes,
        runs,
        verdicts,
        rounds: scenario.rounds_json(records)?,
        noise: round_noise(&rounds),
        problems,
        notes,
        charts: scenario.charts(records),
        chart_files: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::bench::outcome::{find_metric, Goal};
    use crate::serve::RuntimeKind;

    /// A scenario that measures nothing: each phase's figure is its
    /// runtime's value in the round, the host as noisy as the round says.
    struct Toy {
        /// Two runtimes, three rounds.
        spec: RunSpec,
        /// The phases in the order they were measured.
        measured: RefCell<Vec<(u32, RuntimeKind)>>,
    }

    /// One toy phase's figure.
    #[derive(Serialize)]
    struct ToyRecord {
        /// Round number, from 1.
        round: u32,
        /// The runtime.
        runtime: RuntimeKind,
        /// The figure.
        value: f64,
        /// The steal this phase saw.
        steal_pct: f64,
    }

    impl Scenario for Toy {
        type Phase = RuntimeKind;
        type Record = ToyRecord;
        const ID: &'static str = "toy";
        const TITLE: &'static str = "a toy";

        fn spec(&self) -> &RunSpec {
            &self.spec
        }

        fn stages(&self) -> Vec<Vec<RuntimeKind>> {
            vec![self.spec.runtimes.clone()]
        }

        fn phase_name(&self, runtime: RuntimeKind) -> String {
            runtime.to_string()
        }

        fn expected(&self, _: RuntimeKind) -> Duration {
            Duration::from_millis(1)
        }

        fn measure(
            &self,
            round: u32,
            runtime: RuntimeKind,
            _: &PhaseBar,
        ) -> Result<ToyRecord, Error> {
            self.measured.borrow_mut().push((round, runtime));
            let value = match runtime {
                RuntimeKind::Keel => f64::from(round),
                RuntimeKind::KeelUring => 3.0,
                RuntimeKind::Tokio => 2.0,
                RuntimeKind::Monoio => 4.0,
            };
            Ok(ToyRecord {
                round,
                runtime,
                value,
                steal_pct: f64::from(round)
                    * if runtime == RuntimeKind::Keel {
                        1.0
                    } else {
                        2.0
                    },
            })
        }

        fn summary(&self, record: &ToyRecord) -> String {
            format!("value {}", record.value)
        }

        fn round_of(record: &ToyRecord) -> u32 {
            record.round
        }

        fn noise_of(record: &ToyRecord) -> Noise {
            Noise {
                steal_pct: record.steal_pct,
                ..Noise::unmeasured()
            }
        }

        /// Each runtime's value; keel's also in a mode of its own.
        fn round_runs(&self, records: &[&ToyRecord]) -> Vec<RunFigures> {
            let run = |r: &ToyRecord, mode: &str| RunFigures {
                runtime: r.runtime.to_string(),
                mode: mode.into(),
                metrics: Pairs(vec![("value", r.value)]),
            };
            let mut runs: Vec<RunFigures> = records.iter().map(|r| run(r, "default")).collect();
            runs.extend(
                records
                    .iter()
                    .filter(|r| r.runtime == RuntimeKind::Keel)
                    .map(|r| run(r, "own")),
            );
            runs
        }

        /// keel against tokio, keel against its own mode, keel's value,
        /// tokio's, a goal of the ring's own, the ring against keel, a
        /// ratio that never has a value, and a value that only keel's
        /// runs give.
        fn verdicts(&self, runs: &[RunFigures]) -> Vec<Verdict> {
            let value = |runtime| find_metric(runs, runtime, "default", "value");
            let ratio = crate::bench::stats::ratio;
            vec![
                Verdict::new(
                    "value keel/tokio",
                    "keel",
                    ratio(value("keel"), value("tokio")),
                    Some(Goal::AtLeast(0.4)),
                ),
                Verdict::new(
                    "value keel/keel own",
                    "keel",
                    ratio(value("keel"), find_metric(runs, "keel", "own", "value")),
                    None,
                ),
                Verdict::new("value", "keel", value("keel"), Some(Goal::AtMost(3.0))),
                Verdict::new("value tokio", "tokio", value("tokio"), None),
                Verdict::new(
                    "value keel-uring/tokio",
                    "keel-uring",
                    ratio(value("keel-uring"), value("tokio")),
                    Some(Goal::AtLeast(1.2)),
                ),
                Verdict::new(
                    "value keel-uring/keel",
                    "keel-uring",
                    ratio(value("keel-uring"), value("keel")),
                    None,
                ),
                Verdict::new(
                    "value keel/nobody",
                    "keel",
                    ratio(value("keel"), value("nobody")),
                    None,
                ),
                Verdict::new(
                    "small value keel",
                    "keel",
                    value("keel").filter(|v| *v < 2.5),
                    None,
                )
                .missing_because("keel's value is not small"),
            ]
        }

        fn check(&self, records: &[ToyRecord]) -> (Vec<String>, Vec<String>) {
            (vec![], vec![format!("{} records", records.len())])
        }

        fn sizes(&self) -> Vec<(&'static str, serde_json::Value)> {
            vec![("toy_size", serde_json::json!(1))]
        }
    }

    /// The driver measures every phase in schedule order, takes medians
    /// and the worst noise per round, judges the per-round verdicts, and
    /// puts the scenario's sizes and checks before the shared ones.
    #[test]
    fn runs_a_scenario_into_an_outcome() {
        let mut spec = RunSpec::for_tests(&[RuntimeKind::Keel, RuntimeKind::Tokio]);
        spec.runs = 3;
        let toy = Toy {
            spec,
            measured: RefCell::new(Vec::new()),
        };
        let outcome = run(&toy).unwrap();
        let (keel, tokio) = (RuntimeKind::Keel, RuntimeKind::Tokio);
        assert_eq!(
            *toy.measured.borrow(),
            [
                (1, keel),
                (1, tokio),
                (2, tokio),
                (2, keel),
                (3, keel),
                (3, tokio)
            ]
        );
        assert_eq!((outcome.id, outcome.title), ("toy", "a toy"));
        assert_eq!(outcome.runs[0].label(), "keel");
        assert_eq!(outcome.runs[0].metric("value"), Some(2.0));
        let verdict = &outcome.verdicts[0];
        assert_eq!(verdict.rounds, [Some(0.5), Some(1.0), Some(1.5)]);
        assert_eq!(verdict.value, Some(1.0));
        assert_eq!(verdict.judgement, crate::bench::judge::Judgement::Pass);
        let steal: Vec<f64> = outcome.noise.iter().map(|n| n.noise.steal_pct).collect();
        assert_eq!(steal, [2.0, 4.0, 6.0]);
        let sizes: Vec<&str> = outcome.sizes.0.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            sizes,
            [
                "toy_size",
                "duration_s",
                "warmup_ms",
                "workers",
                "runs",
                "placement"
            ]
        );
        assert_eq!(outcome.notes, ["6 records"]);
        assert!(outcome.problems.is_empty(), "{:?}", outcome.problems);
        assert_eq!(outcome.rounds.as_array().unwrap().len(), 6);
    }

    /// With keel-uring run, each verdict on keel is judged again on the
    /// ring's figures, unless the scenario has a goal of that name or the
    /// verdict needs a mode only keel runs, or neither keel nor the ring
    /// has a value; tokio's are not. A twin whose figure is missing for
    /// another reason stays, and says so in the ring's words.
    #[test]
    fn the_ring_is_judged_on_keels_verdicts_too() {
        let mut spec = RunSpec::for_tests(&[
            RuntimeKind::Keel,
            RuntimeKind::KeelUring,
            RuntimeKind::Tokio,
        ]);
        spec.runs = 2;
        let toy = Toy {
            spec,
            measured: RefCell::new(Vec::new()),
        };
        let outcome = run(&toy).unwrap();
        let judged: Vec<(&str, &str, Option<f64>)> = outcome
            .verdicts
            .iter()
            .map(|v| (&*v.name, &*v.runtime, v.value))
            .collect();
        assert_eq!(
            judged,
            [
                ("value keel/tokio", "keel", Some(0.75)),
                ("value keel/keel own", "keel", Some(1.0)),
                ("value", "keel", Some(1.5)),
                ("value tokio", "tokio", Some(2.0)),
                ("value keel-uring/tokio", "keel-uring", Some(1.5)),
                ("value keel-uring/keel", "keel-uring", Some(2.25)),
                ("value keel/nobody", "keel", None),
                ("small value keel", "keel", Some(1.5)),
                ("value, keel-uring", "keel-uring", Some(3.0)),
                ("small value keel-uring", "keel-uring", None),
            ]
        );
        assert_eq!(
            outcome.verdicts[9].missing.as_deref(),
            Some("keel-uring's value is not small")
        );
        let twin = &outcome.verdicts[8];
        assert_eq!(twin.goal, Some(Goal::AtMost(3.0)));
        assert_eq!(twin.rounds, [Some(3.0), Some(3.0)]);
        // Without the ring, no twins.
        let toy = Toy {
            spec: RunSpec::for_tests(&[RuntimeKind::Keel, RuntimeKind::Tokio]),
            measured: RefCell::new(Vec::new()),
        };
        assert_eq!(run(&toy).unwrap().verdicts.len(), 8);
    }

    /// Only the word `keel` becomes `keel-uring`.
    #[test]
    fn names_move_to_the_ring_word_by_word() {
        assert_eq!(
            keel_to_ring("slices_per_s keel/keel unaccounted"),
            "slices_per_s keel-uring/keel-uring unaccounted"
        );
        assert_eq!(
            keel_to_ring("bulk share, keel classes"),
            "bulk share, keel-uring classes"
        );
        assert_eq!(keel_to_ring("keel"), "keel-uring");
        for unchanged in [
            "keel-uring/tokio",
            "keeling",
            "tokio group",
            "keel_x",
            "akeel",
        ] {
            assert_eq!(keel_to_ring(unchanged), unchanged);
            assert!(!mentions_keel(unchanged), "{unchanged}");
        }
        assert!(mentions_keel("(keel)"));
    }

    /// Stages run in order every round; within one, the phases reverse in
    /// even rounds (S2's shape: API alone per runtime, then every storm).
    #[test]
    fn stages_reverse_in_even_rounds() {
        let stages = vec![vec!["a1", "a2"], vec!["b1", "b2", "b3"]];
        let order: Vec<(u32, &str)> = schedule(&stages, 3);
        assert_eq!(
            order,
            [
                (1, "a1"),
                (1, "a2"),
                (1, "b1"),
                (1, "b2"),
                (1, "b3"),
                (2, "a2"),
                (2, "a1"),
                (2, "b3"),
                (2, "b2"),
                (2, "b1"),
                (3, "a1"),
                (3, "a2"),
                (3, "b1"),
                (3, "b2"),
                (3, "b3"),
            ]
        );
        assert!(schedule(&stages, 0).is_empty());
    }
}
