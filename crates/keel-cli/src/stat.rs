//! `keel stat`: one line per interval, for logs and CI, as `sar` prints
//! them: the figures `keel top` draws, read from the same `/stats`
//! documents and computed by the same model (`top::model::View`), so the
//! two never disagree.
//!
//! Each line covers the interval since the one before: the wall-clock
//! time (UTC) at its end, the workers' utilization and spin, the process
//! CPU, the host's CPU stolen by the hypervisor (sar's `%steal`: on a
//! virtual machine the workers' utilization, being wall-clock time,
//! includes it, and compares with sar's user + system + steal), each
//! class's share of the polling and its queue-delay p99 (since
//! the server started: `/stats` keeps one histogram per class), the
//! deliveries per second, the blocking pool's queue, the tokio side's
//! CPU (in CPUs) when the server has one, and the urgent lane's polls per
//! second, CPU and times it spent its budget when the server has one. `--json` writes one JSON object per line
//! instead, for a program to read. Every line is flushed as it is written,
//! so a pipe into a log sees it at once.
//!
//! A server that does not answer, or answers with something that is not a
//! `/stats` document, ends the run with one line on stderr and exit code
//! 1, whether at the start or in the middle: a log then shows where the
//! figures stop and why.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use keel::admin::StatsDocument;
use serde_json::json;

use crate::error::Error;
use crate::top::{fetch_stats, Endpoint, View, FETCH_TIMEOUT};

/// `keel stat`'s arguments.
#[derive(Debug, clap::Args)]
pub struct StatArgs {
    /// The admin endpoint of the server to read (`host:port`, as served by
    /// `keel::admin::serve`).
    #[arg(long, value_name = "ADDR")]
    admin: String,

    /// Seconds between lines; each line's rates cover this span.
    #[arg(
        value_name = "INTERVAL",
        default_value_t = 1.0,
        value_parser = parse_interval,
    )]
    interval: f64,

    /// Lines to print before exiting (default: until interrupted).
    #[arg(
        value_name = "COUNT",
        value_parser = clap::value_parser!(u64).range(1..),
    )]
    count: Option<u64>,

    /// One JSON object per line instead of columns.
    #[arg(long)]
    json: bool,
}

/// An interval in seconds, from 0.05 to one hour.
fn parse_interval(text: &str) -> Result<f64, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if (0.05..=3600.0).contains(&seconds) {
        Ok(seconds)
    } else {
        Err(format!("{seconds} s is outside 0.05 to 3600 s"))
    }
}

/// Runs `keel stat`.
///
/// # Errors
///
/// If the address does not resolve, or the server does not answer with a
/// `/stats` document, at the start or later; or if stdout is closed.
pub fn run(args: &StatArgs) -> Result<(), Error> {
    let endpoint = Endpoint::resolve(&args.admin, FETCH_TIMEOUT)?;
    let interval = Duration::from_secs_f64(args.interval);
    let hint = |error: Error| {
        Error::new(format!(
            "{error}; is the admin endpoint of a keel server listening at {}?",
            endpoint.authority()
        ))
    };
    let mut before = fetch_stats(&endpoint).map_err(hint)?;
    let mut out = std::io::stdout().lock();
    if !args.json {
        writeln!(out, "{}", header(&before))?;
    }
    let mut printed = 0;
    while args.count.is_none_or(|count| printed < count) {
        std::thread::sleep(interval);
        let now = fetch_stats(&endpoint).map_err(hint)?;
        let view = View::new(Some(&before), &now);
        let unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let line = if args.json {
            json_line(&view, unix_s)
        } else {
            text_line(&view, unix_s)
        };
        writeln!(out, "{line}")?;
        out.flush()?;
        before = now;
        printed += 1;
    }
    Ok(())
}

/// The column names, one per figure of [`text_line`].
fn header(document: &StatsDocument) -> String {
    let mut columns = vec![
        format!("{:<8}", "UTC"),
        format!("{:>6}", "util%"),
        format!("{:>6}", "spin%"),
        format!("{:>6}", "cpu%"),
        format!("{:>6}", "steal%"),
    ];
    for class in &document.classes {
        columns.push(format!("{:>9}", format!("{}%", class.name)));
        columns.push(format!("{:>9}", format!("{}_p99", class.name)));
    }
    columns.push(format!("{:>9}", "deliv/s"));
    columns.push(format!("{:>5}", "blkq"));
    if document.tokio.is_some() {
        columns.push(format!("{:>7}", "tokio"));
    }
    if document.lane.is_some() {
        columns.push(format!("{:>8}", "lane/s"));
        columns.push(format!("{:>7}", "lanecpu"));
        columns.push(format!("{:>5}", "lthr"));
    }
    columns.join(" ")
}

/// One interval as columns under [`header`]: percentages of worker wall
/// time, queue delays with their unit, `-` for a figure the server does
/// not report or a class that has not run.
fn text_line(view: &View, unix_s: f64) -> String {
    let mut columns = vec![
        format!("{:<8}", clock(unix_s)),
        format!("{:>6.1}", view.utilization_pct),
        format!("{:>6.1}", view.spin_pct),
        format!(
            "{:>6}",
            optional(view.process_cpu_pct, |p| format!("{p:.1}"))
        ),
        format!(
            "{:>6}",
            optional(view.host_steal_pct, |p| format!("{p:.1}"))
        ),
    ];
    for class in &view.classes {
        columns.push(format!(
            "{:>9}",
            optional(class.wall_share_pct, |p| format!("{p:.1}"))
        ));
        columns.push(format!("{:>9}", optional(class.queue_p99_us, micros)));
    }
    columns.push(format!("{:>9.0}", view.deliveries_per_s));
    columns.push(format!("{:>5}", view.blocking.queued));
    if let Some(tokio) = &view.tokio {
        columns.push(format!("{:>7.3}", tokio.cpus));
    }
    if let Some(lane) = &view.lane {
        columns.push(format!("{:>8.0}", lane.polls_per_s));
        columns.push(format!(
            "{:>7}",
            optional(lane.cpus, |cpus| format!("{cpus:.3}"))
        ));
        columns.push(format!("{:>5}", lane.throttled));
    }
    columns.join(" ")
}

/// One interval as a JSON object.
fn json_line(view: &View, unix_s: f64) -> String {
    let classes: Vec<_> = view
        .classes
        .iter()
        .map(|class| {
            json!({
                "name": class.name,
                "configured_pct": class.configured_pct,
                "share_pct": class.wall_share_pct,
                "polls_per_s": class.polls_per_s,
                "queue_p99_us": class.queue_p99_us,
            })
        })
        .collect();
    json!({
        "unix_s": unix_s,
        "span_s": view.span_s,
        "utilization_pct": view.utilization_pct,
        "spin_pct": view.spin_pct,
        "process_cpu_pct": view.process_cpu_pct,
        "host_steal_pct": view.host_steal_pct,
        "accounted_cpu_pct": view.accounted_cpu_pct,
        "classes": classes,
        "deliveries_per_s": view.deliveries_per_s,
        "blocking_queued": view.blocking.queued,
        "blocking_completed_per_s": view.blocking.completed_per_s,
        "tokio_cpus": view.tokio.as_ref().map(|t| t.cpus),
        "lane": view.lane.as_ref().map(|lane| json!({
            "polls_per_s": lane.polls_per_s,
            "cpus": lane.cpus,
            "throttled": lane.throttled,
        })),
    })
    .to_string()
}

/// `HH:MM:SS` of a Unix time, in UTC.
fn clock(unix_s: f64) -> String {
    let day_s = unix_s as u64 % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        day_s / 3600,
        day_s / 60 % 60,
        day_s % 60
    )
}

/// A queue delay with a unit that keeps it short.
fn micros(us: f64) -> String {
    if us < 1_000.0 {
        format!("{us:.0}us")
    } else if us < 1_000_000.0 {
        format!("{:.1}ms", us / 1_000.0)
    } else {
        format!("{:.2}s", us / 1_000_000.0)
    }
}

/// `show(value)`, or `-` where there is none.
fn optional(value: Option<f64>, show: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "-".to_owned(), show)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::test_documents;

    #[test]
    fn intervals_outside_the_range_or_not_numbers_are_refused() {
        assert_eq!(parse_interval("0.5"), Ok(0.5));
        assert_eq!(parse_interval("2"), Ok(2.0));
        assert!(parse_interval("0").unwrap_err().contains("outside"));
        assert!(parse_interval("7200").unwrap_err().contains("outside"));
        assert!(parse_interval("soon").unwrap_err().contains("not a number"));
    }

    #[test]
    fn the_clock_and_the_delays_read_as_sar_does() {
        assert_eq!(clock(86_400.0 * 3.0 + 3_723.9), "01:02:03");
        assert_eq!(micros(35.2), "35us");
        assert_eq!(micros(2_150.0), "2.1ms");
        assert_eq!(micros(3_500_000.0), "3.50s");
    }

    /// Every column of the header has its figure in each line, in the
    /// same order, with or without a tokio side or a lane.
    #[test]
    fn lines_have_a_figure_under_every_column() {
        for (before, now) in [
            (
                test_documents::snapshot(1.0, Some(10.0)),
                test_documents::snapshot(2.0, Some(20.0)),
            ),
            (
                test_documents::with_tokio(1.0),
                test_documents::with_tokio(2.0),
            ),
            (
                test_documents::with_lane(1.0),
                test_documents::with_lane(2.0),
            ),
        ] {
            let view = View::new(Some(&before), &now);
            let header = header(&now);
            let line = text_line(&view, 0.0);
            assert_eq!(
                header.split_whitespace().count(),
                line.split_whitespace().count(),
                "{header}\n{line}"
            );
            assert_eq!(header.contains("tokio"), now.tokio.is_some());
            let object: serde_json::Value = serde_json::from_str(&json_line(&view, 0.0)).unwrap();
            assert_eq!(
                object["classes"].as_array().unwrap().len(),
                now.classes.len()
            );
            assert_eq!(object["tokio_cpus"].is_null(), now.tokio.is_none());
            assert_eq!(header.contains("lane/s"), now.lane.is_some());
            assert_eq!(object["lane"].is_null(), now.lane.is_none());
            if now.lane.is_some() {
                assert_eq!(object["lane"]["throttled"], 2, "{object}");
            }
        }
    }
}
