//! `keel stat` run as a program against a real admin endpoint: a header
//! and one line per interval, `--json` objects, and one clear line on
//! stderr with exit code 1 for a server that is not there or answers
//! something else.

mod support;

use std::net::TcpListener;
use std::time::Duration;

use support::{keel, serve_one};

/// How long any one `keel stat` run may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Three intervals of 0.1 s: the header, then three lines with a figure
/// under every column; the classes of the server are the columns.
#[test]
fn three_lines_under_a_header() {
    let rt = keel::Runtime::builder().workers(2).build().unwrap();
    let admin = keel::admin::serve("127.0.0.1:0", rt.handle()).unwrap();
    let addr = admin.local_addr().to_string();
    let run = keel(&["stat", "--admin", &addr, "0.1", "3"], LIMIT);
    assert!(run.status.success(), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", run.stdout);
    let header = lines[0];
    for column in [
        "UTC",
        "util%",
        "spin%",
        "cpu%",
        "urgent%",
        "normal_p99",
        "bulk%",
        "deliv/s",
        "blkq",
    ] {
        assert!(
            header.split_whitespace().any(|c| c == column),
            "{column}: {header}"
        );
    }
    for line in &lines[1..] {
        assert_eq!(
            line.split_whitespace().count(),
            header.split_whitespace().count(),
            "{header}\n{line}"
        );
        let util: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!((0.0..=100.0).contains(&util), "{line}");
    }
}

/// `--json`: one object per line, each with the classes of the server.
#[test]
fn json_lines_are_objects() {
    let rt = keel::Runtime::builder().workers(1).build().unwrap();
    let admin = keel::admin::serve("127.0.0.1:0", rt.handle()).unwrap();
    let addr = admin.local_addr().to_string();
    let run = keel(&["stat", "--admin", &addr, "--json", "0.1", "2"], LIMIT);
    assert!(run.status.success(), "{}", run.stderr);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", run.stdout);
    for line in lines {
        let object: serde_json::Value = serde_json::from_str(line).unwrap();
        let span = object["span_s"].as_f64().unwrap();
        assert!(span > 0.05, "{line}");
        let names: Vec<&str> = object["classes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["urgent", "normal", "bulk"], "{line}");
        assert!(object["utilization_pct"].is_number(), "{line}");
    }
}

/// Nothing listening, or a server that answers something else: exit 1,
/// one line on stderr naming the address, nothing on stdout.
#[test]
fn a_server_that_is_not_there_or_not_keel_is_one_line_and_exit_1() {
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let not_keel = serve_one("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello");
    for (addr, expected) in [
        (closed, "does not answer"),
        (not_keel, "not a keel /stats document"),
    ] {
        let run = keel(&["stat", "--admin", &addr, "0.1", "1"], LIMIT);
        assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
        assert!(run.stderr.contains(&addr), "{}", run.stderr);
        assert!(run.stdout.is_empty(), "{:?}", run.stdout);
    }
}

/// A server that goes away mid-run: the lines so far, then one line on
/// stderr and exit 1.
#[test]
fn a_server_that_goes_away_ends_the_run_with_its_reason() {
    let rt = keel::Runtime::builder().workers(1).build().unwrap();
    let admin = keel::admin::serve("127.0.0.1:0", rt.handle()).unwrap();
    let addr = admin.local_addr().to_string();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(700));
        drop(admin);
        drop(rt);
    });
    let run = keel(&["stat", "--admin", &addr, "0.2", "1000"], LIMIT);
    stopper.join().unwrap();
    assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains(&addr), "{}", run.stderr);
    assert!(
        run.stdout.lines().count() >= 2,
        "the header and a line: {}",
        run.stdout
    );
}

/// Arguments that make no sense are clap's usage errors (exit 2).
#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        &["stat"][..],
        &["stat", "--admin", "127.0.0.1:1", "0"],
        &["stat", "--admin", "127.0.0.1:1", "soon"],
        &["stat", "--admin", "127.0.0.1:1", "1", "0"],
        &["stat", "--admin", "127.0.0.1:1", "1", "-3"],
    ] {
        let run = keel(args, LIMIT);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
    }
}
