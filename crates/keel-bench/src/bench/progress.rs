//! Progress on stderr: one bar per phase, then one summary line.
//!
//! Progress goes to stderr so that stdout stays the table and, last, the
//! report path, for scripts to read. indicatif draws the bar only on a
//! terminal; the summary line after each phase is printed either way, so
//! a CI log still shows how far a run got and what each phase measured.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The progress display of one phase.
pub struct PhaseBar {
    /// The bar, measured in milliseconds.
    bar: ProgressBar,
    /// When the phase started.
    started: Instant,
    /// How long the phase is expected to take.
    expected: Duration,
}

impl PhaseBar {
    /// A bar labelled `label` for a phase of about `expected`.
    pub fn new(label: &str, expected: Duration) -> Self {
        let total = u64::try_from(expected.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{prefix:<24} [{bar:24}] {elapsed:>3} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        Self {
            bar,
            started: Instant::now(),
            expected,
        }
    }

    /// Says what the phase is doing now.
    pub fn step(&self, message: &'static str) {
        self.bar.set_message(message);
        self.tick();
    }

    /// Moves the bar to the time elapsed (it never passes the end).
    pub fn tick(&self) {
        let elapsed = self.started.elapsed().min(self.expected);
        self.bar
            .set_position(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX));
    }

    /// Clears the bar and prints `summary` in its place.
    pub fn finish(self, summary: &str) {
        self.bar.finish_and_clear();
        eprintln!("{summary}");
    }

    /// Clears the bar without a summary (the phase failed; the error says
    /// why).
    pub fn abandon(self) {
        self.bar.finish_and_clear();
    }
}
