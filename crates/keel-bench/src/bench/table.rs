//! The printed table: metrics by runtime side by side, then verdicts.
//!
//! Plain text with fixed-width columns, so it reads the same in a
//! terminal, a CI log and the Markdown report. Numbers get fewer decimals
//! as they grow, so a column of latencies and one of rates both stay
//! readable; a missing figure prints as `-` and a verdict without a value
//! as `n/a`, never as `NaN`.

use std::fmt::Write;

use super::judge::Judgement;
use super::outcome::Outcome;

/// Renders one scenario's table (ending with a newline).
pub fn render(outcome: &Outcome) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}: {}", outcome.id, outcome.title);

    // Metric rows, in order of first appearance across runs.
    let mut names: Vec<&'static str> = Vec::new();
    for run in &outcome.runs {
        for (name, _) in &run.metrics.0 {
            if !names.contains(name) {
                names.push(name);
            }
        }
    }
    let width = names.iter().map(|n| n.len()).max().unwrap_or(6).max(6) + 2;
    let headers: Vec<String> = outcome
        .runs
        .iter()
        .map(|run| {
            if run.mode == "default" {
                run.runtime.clone()
            } else {
                format!("{} ({})", run.runtime, run.mode)
            }
        })
        .collect();
    // A column is as wide as its header plus a gap, and at least 14.
    let widths: Vec<usize> = headers.iter().map(|h| (h.len() + 2).max(14)).collect();
    let _ = write!(out, "{:<width$}", "metric");
    for (header, w) in headers.iter().zip(&widths) {
        let _ = write!(out, "{header:>w$}");
    }
    out.push('\n');
    for name in &names {
        let _ = write!(out, "{name:<width$}");
        for (run, w) in outcome.runs.iter().zip(&widths) {
            let cell = run.metric(name).map_or_else(|| "-".to_string(), number);
            let _ = write!(out, "{cell:>w$}");
        }
        out.push('\n');
    }

    if !outcome.verdicts.is_empty() {
        out.push('\n');
        render_verdicts(&mut out, outcome);
    }
    if !outcome.noise.is_empty() {
        let rounds: Vec<String> = outcome
            .noise
            .iter()
            .map(|r| {
                format!(
                    "r{} steal {} (server CPU {}), server wait {}",
                    r.round,
                    percent(r.noise.steal_pct),
                    percent(r.noise.server_steal_pct),
                    percent(r.noise.server_wait_pct)
                )
            })
            .collect();
        let _ = writeln!(out, "\nnoise by round: {}", rounds.join("; "));
    }

    out.push('\n');
    let sizes: Vec<String> = outcome
        .sizes
        .0
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    let _ = writeln!(out, "sizes: {}", sizes.join(" "));
    for note in &outcome.notes {
        let _ = writeln!(out, "note: {note}");
    }
    for problem in &outcome.problems {
        let _ = writeln!(out, "MISSING: {problem}");
    }
    out
}

/// The verdict rows: label, value (the median of the rounds), interval,
/// goal and outcome; under each, the rounds' values and the host's noise,
/// and for an unclear verdict what would settle it.
fn render_verdicts(out: &mut String, outcome: &Outcome) {
    let labels: Vec<String> = outcome
        .verdicts
        .iter()
        .map(|v| {
            if v.name.contains(&*v.runtime) {
                v.name.to_string()
            } else {
                format!("{} ({})", v.name, v.runtime)
            }
        })
        .collect();
    let vwidth = labels.iter().map(String::len).max().unwrap_or(7).max(7) + 2;
    let _ = writeln!(
        out,
        "{:<vwidth$}{:>10}  {:<19}{:<10}result",
        "verdict", "value", "interval", "goal"
    );
    for (verdict, label) in outcome.verdicts.iter().zip(&labels) {
        let value = verdict.value.map_or_else(|| "n/a".to_string(), number);
        let interval = verdict.interval.map_or_else(
            || "-".to_string(),
            |[low, high]| format!("[{} – {}]", number(low), number(high)),
        );
        let goal = verdict
            .goal
            .map_or_else(|| "-".to_string(), |g| g.to_string());
        let mut result = verdict.judgement.word().to_string();
        if let Some(would_be) = verdict
            .would_be
            .filter(|_| verdict.judgement == Judgement::NotJudged)
        {
            result.push_str(&format!(" (would be {})", would_be.word()));
        }
        if let Some(why) = &verdict.missing {
            result.push_str(&format!(" ({why})"));
        }
        let _ = writeln!(
            out,
            "{label:<vwidth$}{value:>10}  {interval:<19}{goal:<10}{result}"
        );
        let mut detail = Vec::new();
        if verdict.rounds.len() > 1 {
            let rounds: Vec<String> = verdict
                .rounds
                .iter()
                .map(|v| v.map_or_else(|| "-".to_string(), number))
                .collect();
            let confidence = verdict
                .confidence
                .map_or_else(String::new, |c| format!(" ({:.0}% interval)", c * 100.0));
            detail.push(format!("rounds {}{confidence}", rounds.join(" ")));
        }
        if verdict.goal.is_some() {
            if let Some(noise) = &verdict.noise {
                detail.push(noise.clone());
            }
        }
        if let Some(moved) = &verdict.moved_with {
            detail.push(format!("moved with {moved}"));
        }
        if !detail.is_empty() {
            let _ = writeln!(out, "    {}", detail.join("; "));
        }
        if let Some(settle) = &verdict.settle {
            let _ = writeln!(out, "    unclear: {settle}");
        }
    }
}

/// A percentage with one decimal, or `-` when not measured.
fn percent(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.1}%")
    } else {
        "-".to_string()
    }
}

/// A number with fewer decimals the larger it is (none for whole numbers,
/// such as counts).
pub fn number(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_string();
    }
    let magnitude = value.abs();
    if value.fract() == 0.0 || magnitude >= 1000.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::outcome::{Goal, Pairs, RunFigures, Verdict};

    /// Decimals shrink as numbers grow; non-finite values print as `-`.
    #[test]
    fn numbers() {
        assert_eq!(number(0.5), "0.500");
        assert_eq!(number(41.04), "41.0");
        assert_eq!(number(9512.6), "9513");
        assert_eq!(number(943.0), "943");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(f64::NAN), "-");
    }

    /// Two runtimes side by side, a missing cell, verdicts and sizes.
    #[test]
    fn renders_side_by_side() {
        let outcome = Outcome {
            id: "s1",
            title: "IO starvation under CPU load",
            sizes: Pairs(vec![("cpu_tasks", 8.into())]),
            runs: vec![
                RunFigures {
                    runtime: "keel".into(),
                    mode: "default".into(),
                    metrics: Pairs(vec![("idle_p99_us", 41.0)]),
                },
                RunFigures {
                    runtime: "tokio".into(),
                    mode: "default".into(),
                    metrics: Pairs(vec![("idle_p99_us", 45.0), ("cpu_s", 1.5)]),
                },
            ],
            verdicts: vec![
                Verdict::new(
                    "loaded_p99/idle_p99",
                    "keel",
                    Some(2.0),
                    Some(Goal::AtMost(3.0)),
                ),
                Verdict::new(
                    "slices_per_s keel/tokio",
                    "keel",
                    None,
                    Some(Goal::AtLeast(0.97)),
                )
                .missing_because("keel was not run"),
            ],
            rounds: serde_json::Value::Null,
            noise: Vec::new(),
            problems: vec![],
            notes: vec!["a note".into()],
            charts: Vec::new(),
            chart_files: Vec::new(),
        };
        let text = render(&outcome);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].contains("keel") && lines[1].contains("tokio"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("idle_p99_us") && lines[2].contains(" 41 "),
            "{text}"
        );
        assert!(
            lines[3].starts_with("cpu_s") && lines[3].contains('-'),
            "{text}"
        );
        assert!(text.contains("<= 3") && text.contains("pass"), "{text}");
        assert!(text.contains("n/a (keel was not run)"), "{text}");
        assert!(text.contains("sizes: cpu_tasks=8"), "{text}");
        assert!(text.contains("note: a note"), "{text}");
    }

    /// Judged verdicts show their interval and rounds, an unclear one says
    /// what would settle it, an unjudged one what it would be, and the
    /// rounds' noise closes the table.
    #[test]
    fn renders_intervals_outcomes_and_noise() {
        use crate::bench::judge::combine;
        use crate::bench::noise::Noise;
        use crate::bench::outcome::RoundNoise;
        let noise: Vec<Noise> = (0..5)
            .map(|i| Noise {
                steal_pct: f64::from(i),
                server_steal_pct: 0.0,
                server_wait_pct: 0.5,
            })
            .collect();
        let per_round = |values: [f64; 5], goal| -> Vec<Vec<Verdict>> {
            values
                .iter()
                .map(|&v| vec![Verdict::new("ratio", "keel", Some(v), Some(goal))])
                .collect()
        };
        let unclear = combine(
            &per_round([1.0, 2.0, 2.5, 2.8, 3.5], Goal::AtMost(3.0)),
            &noise,
            true,
        );
        let unjudged = combine(
            &per_round([1.0, 1.1, 1.2, 1.3, 1.4], Goal::AtLeast(1.0)),
            &noise,
            false,
        );
        let outcome = Outcome {
            id: "s1",
            title: "t",
            sizes: Pairs(vec![]),
            runs: vec![],
            verdicts: vec![unclear[0].clone(), unjudged[0].clone()],
            rounds: serde_json::Value::Null,
            noise: noise
                .iter()
                .enumerate()
                .map(|(i, &noise)| RoundNoise {
                    round: i as u32 + 1,
                    noise,
                })
                .collect(),
            problems: vec![],
            notes: vec![],
            charts: Vec::new(),
            chart_files: Vec::new(),
        };
        let text = render(&outcome);
        assert!(
            text.contains("[1 – 3.500]") && text.contains("unclear"),
            "{text}"
        );
        assert!(
            text.contains("rounds 1 2 2.500 2.800 3.500 (94% interval)"),
            "{text}"
        );
        assert!(
            text.contains("    unclear: the rounds run from 1.000 to 3.500"),
            "{text}"
        );
        assert!(text.contains("not judged (would be pass)"), "{text}");
        assert!(
            text.contains("steal 0.0–4.0%, server wait 0.5–0.5%"),
            "{text}"
        );
        assert!(
            text.contains("noise by round: r1 steal 0.0% (server CPU 0.0%), server wait 0.5%; r2"),
            "{text}"
        );
    }

    /// A header longer than the default column widens its column, so
    /// headers never run together.
    #[test]
    fn long_headers_keep_a_gap() {
        let run = |runtime: &str, mode: &str| RunFigures {
            runtime: runtime.into(),
            mode: mode.into(),
            metrics: Pairs(vec![("records_per_s", 4460.0)]),
        };
        let outcome = Outcome {
            id: "s5",
            title: "t",
            sizes: Pairs(vec![]),
            runs: vec![run("tokio", "per-record"), run("tokio", "group")],
            verdicts: vec![],
            rounds: serde_json::Value::Null,
            noise: Vec::new(),
            problems: vec![],
            notes: vec![],
            charts: Vec::new(),
            chart_files: Vec::new(),
        };
        let text = render(&outcome);
        let header = text.lines().nth(1).unwrap();
        assert!(
            header.contains("  tokio (per-record)  tokio (group)"),
            "{text}"
        );
        let row = text.lines().nth(2).unwrap();
        assert_eq!(row.len(), header.len(), "{text}");
    }
}
