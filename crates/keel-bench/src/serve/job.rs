//! The API job of S2: parse a generated configuration file.
//!
//! The job stands for the work a control-plane request does (the seed's
//! "1-second API call"): it generates a configuration text of `lines`
//! sections and keys, deterministically, then parses it into a map and
//! folds the result into a checksum, so neither part can be skipped. It
//! allocates and hashes like real parsing does, so a scheduling storm that
//! thrashes caches slows it the way it slows real work. The harness
//! calibrates `lines` once so the job takes about 20 ms, and the same
//! count goes to every server.

use std::collections::HashMap;
use std::fmt::Write;
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Generates and parses a configuration of `lines` lines; returns a
/// checksum of what was parsed.
pub fn run(lines: u64) -> u64 {
    let lines = black_box(lines);
    let mut text = String::with_capacity(usize::try_from(lines).unwrap_or(0).saturating_mul(32));
    for i in 0..lines {
        if i % 16 == 0 {
            let _ = writeln!(text, "[section_{}]", i / 16);
        } else {
            let _ = writeln!(
                text,
                "key_{} = value_{}_{}",
                i % 16,
                i,
                i.wrapping_mul(2_654_435_761) % 9973
            );
        }
    }
    let mut config: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
        } else if let Some((key, value)) = line.split_once('=') {
            config
                .entry(section.clone())
                .or_default()
                .insert(key.trim().to_string(), value.trim().to_string());
        }
    }
    // A fold that does not depend on the map's (random) iteration order.
    let mut sum = 0u64;
    for (name, keys) in &config {
        let section = name.bytes().map(u64::from).sum::<u64>();
        for (key, value) in keys {
            let entry = key.bytes().map(u64::from).sum::<u64>()
                ^ value.bytes().map(u64::from).sum::<u64>().wrapping_mul(31);
            sum = sum.wrapping_add(entry.wrapping_mul(section | 1));
        }
    }
    black_box(sum)
}

/// How long one job of `lines` lines takes right now, on this thread.
pub fn time(lines: u64) -> Duration {
    let start = Instant::now();
    run(lines);
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job is deterministic and depends on its size.
    #[test]
    fn deterministic() {
        assert_eq!(run(100), run(100));
        assert_ne!(run(100), run(101));
    }

    /// A bigger job takes longer.
    #[test]
    fn grows_with_lines() {
        let small = (0..3).map(|_| time(1_000)).min().unwrap();
        let big = (0..3).map(|_| time(100_000)).min().unwrap();
        assert!(big > small * 5, "{small:?} {big:?}");
    }
}
