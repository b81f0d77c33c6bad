//! `keel top` run as a program: a frame printed by `--once` against a
//! real admin endpoint, and the messages for addresses that do not answer
//! with a `/stats` document.

mod support;

use std::net::TcpListener;
use std::time::Duration;

use support::{keel, serve_one};

/// How long any one `keel top` run may take.
const LIMIT: Duration = Duration::from_secs(60);

/// `--once` against a keel runtime's admin endpoint prints one frame: the
/// address, a row per worker, and every class with its configured shares.
#[test]
fn once_prints_a_frame() {
    let rt = keel::Runtime::builder().workers(2).build().unwrap();
    let admin = keel::admin::serve("127.0.0.1:0", rt.handle()).unwrap();
    let addr = admin.local_addr().to_string();
    let run = keel(
        &["top", "--admin", &addr, "--once", "--interval-ms", "100"],
        LIMIT,
    );
    assert!(run.status.success(), "{}", run.stderr);
    let frame = &run.stdout;
    assert!(frame.contains(&format!("keel top · {addr}")), "{frame}");
    assert!(frame.contains("rates over the last"), "{frame}");
    assert!(frame.contains("IO poll gap max"), "{frame}");
    assert!(!frame.contains('\u{1b}'), "plain text, no escape sequences");
    for worker in ["w0", "w1"] {
        assert!(frame.contains(&format!(" {worker} ")), "{frame}");
    }
    let stats = rt.stats();
    let total: u32 = stats.classes.iter().map(|c| c.shares).sum();
    for class in &stats.classes {
        let row = frame
            .lines()
            .find(|l| l.contains(&format!(" {} ", class.name)))
            .unwrap_or_else(|| panic!("no row for {}:\n{frame}", class.name));
        let owed = f64::from(class.shares) / f64::from(total) * 100.0;
        let words: Vec<&str> = row.split_whitespace().collect();
        let at = words.iter().position(|w| *w == class.name).unwrap();
        assert_eq!(
            words[at + 1..at + 3],
            [class.shares.to_string(), format!("{owed:.1}%")],
            "{row}"
        );
    }
    // Every line fits the default width.
    assert!(frame.lines().all(|l| l.chars().count() <= 100), "{frame}");
}

/// An address with nothing listening exits 1 with a message that names
/// it, before touching the terminal (nothing on stdout), with or without
/// `--once`.
#[test]
fn nothing_listening_exits_1() {
    let addr = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    for once in [true, false] {
        let mut args = vec!["top", "--admin", &addr];
        if once {
            args.push("--once");
        }
        let run = keel(&args, LIMIT);
        assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
        assert!(
            run.stderr.contains(&format!("{addr} does not answer")),
            "{}",
            run.stderr
        );
        assert!(run.stdout.is_empty(), "{:?}", run.stdout);
    }
}

/// A server that answers something other than a `/stats` document gives
/// a clear error, and exit code 1.
#[test]
fn wrong_answers_are_explained() {
    let cases = [
        ("SSH-2.0-OpenSSH_9.6\r\n", "not an HTTP answer"),
        (
            "HTTP/1.1 404 Not Found\r\ncontent-length: 10\r\n\r\nnot found\n",
            "the server answered 404 Not Found",
        ),
        (
            "HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n<html></html",
            "not a keel /stats document",
        ),
    ];
    for (answer, expected) in cases {
        let addr = serve_one(answer);
        let run = keel(&["top", "--admin", &addr, "--once"], LIMIT);
        assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
        assert!(run.stderr.contains(&addr), "{}", run.stderr);
        assert!(run.stdout.is_empty(), "{:?}", run.stdout);
    }
}

/// Flags that make no sense are clap's usage errors (exit 2).
#[test]
fn bad_flags_are_usage_errors() {
    for args in [
        &["top"][..],
        &["top", "--admin", "127.0.0.1:1", "--interval-ms", "0"],
        &["top", "--admin", "127.0.0.1:1", "--interval-ms", "soon"],
        &["top", "--admin", "127.0.0.1:1", "--width", "120"],
    ] {
        let run = keel(args, LIMIT);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", run.stderr);
    }
}
