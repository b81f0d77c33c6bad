//! The admin endpoint (feature `admin`): each route, /metrics parsed back
//! in both formats (the Prometheus text format by default, OpenMetrics
//! when asked), /stats's documented JSON fields, and the limits: garbage,
//! oversized heads and bodies, slow clients; after each, the endpoint
//! still answers. Hostile clients (slowloris floods, the connection
//! limit) are in `admin_hostile.rs`.

#![cfg(feature = "admin")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use keel::admin::{self, Admin, AdminServer};
use keel::{Class, Runtime};
use serde_json::Value;
use support::http::{
    assert_healthy, closed_by_server, connect, get, get_with, read_answer, request,
};
use support::{runtime, wait_until, within, TEST_LIMIT};

// ---------------------------------------------------------------------
// A strict parser of the two exposition formats, as far as the endpoint
// uses them.

/// The `/metrics` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    /// The Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0.
    OpenMetrics,
}

const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: Option<String>,
    unit: Option<String>,
    samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses `{a="x",b="y"}` at the start of `text`; returns the labels and
/// the rest.
fn parse_labels(text: &str) -> (BTreeMap<String, String>, &str) {
    let mut labels = BTreeMap::new();
    let mut rest = text.strip_prefix('{').unwrap();
    if let Some(after) = rest.strip_prefix('}') {
        return (labels, after);
    }
    loop {
        let eq = rest.find('=').expect("a label has '='");
        let name = &rest[..eq];
        assert!(is_label_name(name), "bad label name {name:?}");
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .expect("a quoted label value");
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            let (i, c) = chars.next().expect("an unterminated label value");
            match c {
                '"' => break i,
                '\\' => match chars.next().expect("an escape").1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    other => panic!("bad escape \\{other}"),
                },
                '\n' => panic!("a newline in a label value"),
                c => value.push(c),
            }
        };
        assert!(
            labels.insert(name.to_owned(), value).is_none(),
            "label {name} twice"
        );
        rest = &rest[end + 1..];
        if let Some(after) = rest.strip_prefix('}') {
            return (labels, after);
        }
        rest = rest.strip_prefix(',').expect("labels are separated by ','");
    }
}

fn parse_value(text: &str) -> f64 {
    match text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => text
            .parse()
            .unwrap_or_else(|_| panic!("bad sample value {text:?}")),
    }
}

/// Parses an exposition strictly: descriptors before samples, each
/// family once, sample names that fit their family's type (and unit),
/// histograms with cumulative buckets ending in `+Inf` equal to `_count`.
/// OpenMetrics: counter samples are the family's name and `_total`, and
/// `# EOF` ends the text. The text format 0.0.4: a counter family's name
/// ends with `_total` and its samples have the family's name, there are
/// no `# UNIT` lines and no end marker.
fn parse_exposition(text: &str, format: Format) -> BTreeMap<String, Family> {
    let body = match format {
        Format::OpenMetrics => text
            .strip_suffix("# EOF\n")
            .expect("the exposition ends with '# EOF'"),
        Format::Text => {
            assert!(!text.contains("# EOF"), "an end marker in the text format");
            text
        }
    };
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut sampled = false;
    for line in body.lines() {
        assert!(!line.is_empty(), "an empty line");
        if let Some(descriptor) = line.strip_prefix("# ") {
            let mut parts = descriptor.splitn(3, ' ');
            let keyword = parts.next().unwrap();
            let name = parts.next().expect("a descriptor names its family");
            let value = parts.next().expect("a descriptor has a value").to_owned();
            assert!(is_metric_name(name), "bad family name {name:?}");
            if current.as_deref() != Some(name) || sampled {
                assert!(
                    !families.contains_key(name),
                    "family {name} described twice, or after its samples"
                );
                current = Some(name.to_owned());
                sampled = false;
            }
            let family = families.entry(name.to_owned()).or_default();
            match keyword {
                "HELP" => family.help = Some(value),
                "TYPE" => {
                    assert!(
                        [
                            "counter",
                            "gauge",
                            "histogram",
                            "summary",
                            "info",
                            "unknown"
                        ]
                        .contains(&value.as_str()),
                        "bad type {value}"
                    );
                    family.kind = value;
                }
                "UNIT" => {
                    assert_eq!(format, Format::OpenMetrics, "# UNIT in the text format");
                    assert!(
                        name.ends_with(&format!("_{value}")),
                        "{name} does not end with its unit {value}"
                    );
                    family.unit = Some(value);
                }
                other => panic!("unknown descriptor {other}"),
            }
            continue;
        }
        assert!(!line.starts_with('#'), "a stray comment {line:?}");
        let family_name = current.clone().expect("a sample before any descriptor");
        let family = families.get_mut(&family_name).unwrap();
        assert!(!family.kind.is_empty(), "{family_name} has no TYPE");
        let name_end = line.find(['{', ' ']).expect("a sample has a value");
        let name = &line[..name_end];
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end..])
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let value_text = rest.strip_prefix(' ').expect("a space before the value");
        assert!(
            !value_text.contains(' '),
            "timestamps and exemplars are not expected: {line:?}"
        );
        let value = parse_value(value_text);
        let suffix = name
            .strip_prefix(family_name.as_str())
            .unwrap_or_else(|| panic!("sample {name} outside family {family_name}"));
        let allowed: &[&str] = match (family.kind.as_str(), format) {
            ("counter", Format::OpenMetrics) => &["_total", "_created"],
            ("counter", Format::Text) => {
                assert!(
                    family_name.ends_with("_total"),
                    "counter {family_name} without _total"
                );
                &[""]
            }
            ("gauge", _) => &[""],
            ("histogram", _) => &["_bucket", "_sum", "_count", "_created"],
            (other, _) => panic!("unexpected type {other}"),
        };
        assert!(
            allowed.contains(&suffix),
            "{name} does not fit a {}",
            family.kind
        );
        if family.kind == "counter" {
            assert!(value >= 0.0, "a negative counter: {line}");
        }
        family.samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
        sampled = true;
    }
    for (name, family) in &families {
        assert!(family.help.is_some(), "{name} has no HELP");
        if family.kind == "histogram" {
            check_histogram(name, family);
        }
    }
    families
}

/// Buckets cumulative and ascending per label set, the last `+Inf`, equal
/// to `_count`.
fn check_histogram(name: &str, family: &Family) {
    let mut series: BTreeMap<BTreeMap<String, String>, Vec<&Sample>> = BTreeMap::new();
    for sample in &family.samples {
        let mut key = sample.labels.clone();
        key.remove("le");
        series.entry(key).or_default().push(sample);
    }
    for (labels, samples) in series {
        let count = samples
            .iter()
            .find(|s| s.name == format!("{name}_count"))
            .expect("a _count")
            .value;
        let sum = samples
            .iter()
            .find(|s| s.name == format!("{name}_sum"))
            .expect("a _sum")
            .value;
        assert!(sum >= 0.0);
        let buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.name == format!("{name}_bucket"))
            .map(|s| (parse_value(&s.labels["le"]), s.value))
            .collect();
        assert!(buckets.len() >= 2, "{name}{labels:?}: too few buckets");
        for pair in buckets.windows(2) {
            assert!(
                pair[0].0 < pair[1].0,
                "{name}{labels:?}: bounds not ascending"
            );
            assert!(pair[0].1 <= pair[1].1, "{name}{labels:?}: not cumulative");
        }
        let last = buckets.last().unwrap();
        assert_eq!(last.0, f64::INFINITY, "{name}{labels:?}: no +Inf bucket");
        assert_eq!(last.1, count, "{name}{labels:?}: +Inf bucket != count");
    }
}

fn samples_of<'a>(families: &'a BTreeMap<String, Family>, family: &str) -> &'a [Sample] {
    &families
        .get(family)
        .unwrap_or_else(|| panic!("family {family} missing"))
        .samples
}

fn value_of(families: &BTreeMap<String, Family>, sample: &str, labels: &[(&str, &str)]) -> f64 {
    let family = families
        .values()
        .find(|f| f.samples.iter().any(|s| s.name == sample))
        .unwrap_or_else(|| panic!("no sample {sample}"));
    family
        .samples
        .iter()
        .find(|s| {
            s.name == sample
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .unwrap_or_else(|| panic!("no sample {sample}{labels:?}"))
        .value
}

// ---------------------------------------------------------------------
// The routes.

/// Some work in each class, so the figures are not all zero.
fn exercise(rt: &Runtime) {
    rt.block_on(async {
        let mut tasks = Vec::new();
        for class in [Class::URGENT, Class::NORMAL, Class::BULK] {
            for _ in 0..4 {
                tasks.push(keel::spawn_in(class, async {
                    for _ in 0..20 {
                        support::busy_for(Duration::from_micros(200));
                        keel::yield_now().await;
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        keel::spawn_blocking(|| std::thread::sleep(Duration::from_millis(5)))
            .await
            .unwrap();
    });
    // The pool counts a job done just after its handle resolves.
    wait_until("the blocking job is counted", || {
        rt.stats().blocking.completed >= 1
    });
}

#[test]
fn status_section_is_appended() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = calls.clone();
        let server = admin::Admin::builder()
            .status_section(move || {
                let n = counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                format!("app requests: {n}\n")
            })
            .serve("127.0.0.1:0", rt.handle())
            .unwrap();
        let addr = server.local_addr();
        for n in 1..=2 {
            let status = get(addr, "/status");
            assert_eq!(status.status, 200);
            assert!(status.body.contains("live tasks"), "{}", status.body);
            assert!(
                status.body.ends_with(&format!("app requests: {n}\n")),
                "{}",
                status.body
            );
        }
        // Only /status runs it.
        assert_eq!(get(addr, "/stats").status, 200);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    });
}

#[test]
fn health_status_and_errors_of_routing() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        assert_healthy(addr);

        let head = request(
            addr,
            "HEAD /health HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
        );
        assert_eq!(head.status, 200);
        assert_eq!(head.body, "");

        exercise(&rt);
        let status = get(addr, "/status");
        assert_eq!(status.status, 200);
        assert!(status.headers["content-type"].starts_with("text/plain"));
        let text = &status.body;
        assert!(
            text.len() < 1024,
            "a short summary, not {} bytes",
            text.len()
        );
        assert!(text.contains("2 workers"), "{text}");
        assert!(text.contains("live tasks"), "{text}");
        // Why the workers and the spin are what they are.
        assert!(text.contains("workers: set on the builder"), "{text}");
        assert!(text.contains("spin 0 us: the default: no spin"), "{text}");
        assert!(text.contains("utilization"), "{text}");
        for class in ["urgent", "normal", "bulk"] {
            assert!(text.contains(class), "{text}");
        }
        eprintln!("{text}");

        let missing = get(addr, "/nowhere");
        assert_eq!(missing.status, 404);
        let post = request(
            addr,
            "POST /health HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
        assert_eq!(post.status, 405);
        assert_eq!(post.headers["allow"], "GET, HEAD");
        // A query string is ignored.
        assert_eq!(get(addr, "/health?verbose=1").status, 200);
        assert_healthy(addr);
        server.shutdown();
    });
}

/// A client that shuts down its sending side right after its request (as
/// `nc -N` and many scripts do) still reads the answer.
#[test]
fn a_client_that_half_closes_after_its_request_is_answered() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        for path in ["/health", "/metrics", "/stats", "/status"].repeat(5) {
            let mut stream = connect(addr);
            stream
                .write_all(format!("GET {path} HTTP/1.1\r\nhost: a\r\n\r\n").as_bytes())
                .unwrap();
            stream.shutdown(std::net::Shutdown::Write).unwrap();
            let answer = read_answer(&mut stream, false).expect("an answer");
            assert_eq!(answer.status, 200, "{path}");
            assert!(closed_by_server(&mut stream));
        }
    });
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let mut stream = connect(server.local_addr());
        for path in ["/health", "/status", "/stats", "/metrics", "/health"] {
            write!(stream, "GET {path} HTTP/1.1\r\nhost: a\r\n\r\n").unwrap();
            let answer = read_answer(&mut stream, false).expect("an answer");
            assert_eq!(answer.status, 200, "{path}");
        }
        assert_eq!(server.connections(), 1);
    });
}

/// The sample names and label sets of an exposition.
fn series(families: &BTreeMap<String, Family>) -> BTreeSet<(String, BTreeMap<String, String>)> {
    families
        .values()
        .flat_map(|f| &f.samples)
        .map(|s| (s.name.clone(), s.labels.clone()))
        .collect()
}

#[test]
fn metrics_parse_back_in_both_formats() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        exercise(&rt);
        assert_healthy(addr);

        let text = get(addr, "/metrics");
        assert_eq!(text.status, 200);
        assert_eq!(text.headers["content-type"], TEXT_TYPE);
        assert_eq!(text.headers["vary"], "accept");
        let text = parse_exposition(&text.body, Format::Text);
        let answer = get_with(
            addr,
            "/metrics",
            "accept: application/openmetrics-text; version=1.0.0\r\n",
        );
        assert_eq!(answer.status, 200);
        assert_eq!(answer.headers["content-type"], OPENMETRICS_TYPE);
        let families = parse_exposition(&answer.body, Format::OpenMetrics);
        // The same series in both; counters' family names differ by their
        // `_total`, and only OpenMetrics declares units.
        assert_eq!(series(&text), series(&families));
        for (name, family) in &families {
            let text_name = if family.kind == "counter" {
                format!("{name}_total")
            } else {
                name.clone()
            };
            let in_text = text
                .get(&text_name)
                .unwrap_or_else(|| panic!("{text_name} missing from the text format"));
            assert_eq!(in_text.kind, family.kind, "{name}");
            assert_eq!(in_text.help, family.help, "{name}");
        }
        assert_eq!(text.len(), families.len());

        let documented = [
            ("keel_uptime_seconds", "gauge"),
            ("keel_workers", "gauge"),
            ("keel_live_tasks", "gauge"),
            ("keel_pending_timers", "gauge"),
            ("keel_worker_state_seconds", "counter"),
            ("keel_worker_park_cpu_seconds", "counter"),
            ("keel_worker_rescues", "counter"),
            ("keel_worker_io_looks", "counter"),
            ("keel_class_wall_seconds", "counter"),
            ("keel_class_charged_seconds", "counter"),
            ("keel_class_cpu_seconds", "counter"),
            ("keel_class_polls", "counter"),
            ("keel_class_stalls", "counter"),
            ("keel_class_shares", "gauge"),
            ("keel_class_queue_delay_seconds", "histogram"),
            ("keel_blocking_threads", "gauge"),
            ("keel_blocking_idle_threads", "gauge"),
            ("keel_blocking_queued_jobs", "gauge"),
            ("keel_blocking_waiting_callers", "gauge"),
            ("keel_blocking_completed_jobs", "counter"),
            ("keel_blocking_rejected_jobs", "counter"),
            ("keel_blocking_busy_seconds", "counter"),
            ("keel_tcp_deliveries", "counter"),
            ("keel_tcp_delivered_bytes", "counter"),
            ("keel_process_cpu_seconds", "counter"),
            ("keel_admin_connections", "gauge"),
            ("keel_admin_rejected_connections", "counter"),
            ("keel_admin_evicted_connections", "counter"),
        ];
        for (name, kind) in documented {
            let family = families
                .get(name)
                .unwrap_or_else(|| panic!("family {name} missing"));
            assert_eq!(family.kind, kind, "{name}");
            assert!(!family.samples.is_empty(), "{name} has no samples");
        }
        for name in families.keys() {
            assert!(name.starts_with("keel_"), "{name} is not prefixed");
        }
        assert_eq!(
            families["keel_worker_state_seconds"].unit.as_deref(),
            Some("seconds")
        );

        assert!(value_of(&families, "keel_uptime_seconds", &[]) > 0.0);
        assert_eq!(value_of(&families, "keel_workers", &[]), 2.0);
        // Every worker, every state; the states add up to a positive wall.
        let states = samples_of(&families, "keel_worker_state_seconds");
        assert_eq!(states.len(), 2 * 6);
        for worker in ["0", "1"] {
            let wall: f64 = states
                .iter()
                .filter(|s| s.labels["worker"] == worker)
                .map(|s| s.value)
                .sum();
            assert!(wall > 0.0, "worker {worker} accounted no time");
        }
        for class in ["urgent", "normal", "bulk"] {
            let wall = value_of(
                &families,
                "keel_class_wall_seconds_total",
                &[("class", class)],
            );
            // 4 tasks x 20 polls x 200 µs of work each.
            assert!(wall >= 0.010, "{class}: {wall} s of polls");
            // The charge leaves out only preempted time: never more than
            // the wall time. Both come from the same publications of each
            // worker's account, so this holds at any instant, even while
            // the endpoint's own polls are being charged.
            let charged = value_of(
                &families,
                "keel_class_charged_seconds_total",
                &[("class", class)],
            );
            assert!(
                charged > 0.0 && charged <= wall,
                "{class}: charged {charged} s of {wall} s"
            );
            let polls = value_of(&families, "keel_class_polls_total", &[("class", class)]);
            assert!(polls >= 80.0, "{class}: {polls} polls");
            let delays = value_of(
                &families,
                "keel_class_queue_delay_seconds_count",
                &[("class", class)],
            );
            assert!(delays >= 1.0, "{class}: {delays} delays");
        }
        assert_eq!(
            value_of(&families, "keel_class_shares", &[("class", "urgent")]),
            16.0
        );
        assert!(value_of(&families, "keel_blocking_completed_jobs_total", &[]) >= 1.0);
        let user = value_of(
            &families,
            "keel_process_cpu_seconds_total",
            &[("mode", "user")],
        );
        assert!(user > 0.0);
        // The scrape itself is being served.
        assert!(value_of(&families, "keel_admin_connections", &[]) >= 1.0);
        assert_eq!(
            value_of(&families, "keel_admin_evicted_connections_total", &[]),
            0.0
        );
        assert_eq!(
            value_of(&text, "keel_admin_rejected_connections_total", &[]),
            0.0
        );
    });
}

/// With a tokio side, its threads' CPU, its tasks and its workers' busy
/// time are in `/metrics` and `/stats`, and its CPU is part of what the
/// window accounts.
#[cfg(feature = "tokio-context")]
#[test]
fn the_tokio_side_is_in_metrics_and_stats() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        // 30 ms of CPU on the tokio side, and a task left alive there.
        let (hold, held) = std::sync::mpsc::channel::<()>();
        rt.block_on(async move {
            tokio::spawn(async move {
                let _hold = hold;
                std::future::pending::<()>().await;
            });
            // 30 ms on a core, however long the kernel keeps it off one.
            tokio::spawn(async { support::cpu_for(Duration::from_millis(30)) })
                .await
                .unwrap();
        });
        let families = parse_exposition(&get(addr, "/metrics").body, Format::Text);
        assert_eq!(value_of(&families, "keel_tokio_workers", &[]), 1.0);
        assert!(value_of(&families, "keel_tokio_threads", &[]) >= 1.0);
        assert!(value_of(&families, "keel_tokio_alive_tasks", &[]) >= 1.0);
        assert!(value_of(&families, "keel_tokio_cpu_seconds_total", &[]) >= 0.030);
        // tokio publishes a worker's busy time when the worker next parks,
        // which may come after the task's result reached block_on.
        support::wait_until("the tokio side's busy time is published", || {
            let families = parse_exposition(&get(addr, "/metrics").body, Format::Text);
            value_of(&families, "keel_tokio_busy_seconds_total", &[]) > 0.0
        });

        let stats: Value = serde_json::from_str(&get(addr, "/stats").body).unwrap();
        let tokio = &stats["tokio"];
        assert_eq!(tokio["workers"], 1, "{tokio}");
        assert!(tokio["cpu_s"].as_f64().unwrap() >= 0.030, "{tokio}");
        assert!(tokio["alive_tasks"].as_u64().unwrap() >= 1, "{tokio}");
        let window = &stats["since_start"];
        let tokio_cpu = window["tokio_cpu_s"].as_f64().unwrap();
        assert!(tokio_cpu >= 0.030, "{window}");
        assert!(
            window["accounted_cpu_s"].as_f64().unwrap() >= tokio_cpu,
            "{window}"
        );
        drop(held);
    });
}

/// With an urgent lane, the lane's polls, charge and thread CPU are in
/// `/metrics` and `/stats`, and its CPU is part of what the windows
/// account (it runs on no worker, so no worker's states hold it).
#[test]
fn the_urgent_lane_is_in_metrics_and_stats() {
    within(TEST_LIMIT, || {
        let rt = Runtime::builder()
            .workers(2)
            .urgent_lane(keel::UrgentLane::new().priority(keel::LanePriority::NiceWorkers(5)))
            .build()
            .unwrap();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        // 30 ms of CPU in one urgent poll: on the lane's thread.
        rt.block_on(rt.spawn_in(Class::URGENT, async {
            support::cpu_for(Duration::from_millis(30));
        }))
        .unwrap();
        let families = parse_exposition(&get(addr, "/metrics").body, Format::Text);
        assert!(value_of(&families, "keel_lane_polls_total", &[]) >= 1.0);
        assert!(value_of(&families, "keel_lane_wall_seconds_total", &[]) >= 0.030);
        assert!(value_of(&families, "keel_lane_charged_seconds_total", &[]) > 0.0);
        assert!(value_of(&families, "keel_lane_cpu_seconds_total", &[]) >= 0.030);
        // A 30 ms poll spends more than the urgent share of a 10 ms window
        // of two workers: the lane waits once (counted as its loop goes on).
        wait_until("the lane's throttle is counted", || {
            let families = parse_exposition(&get(addr, "/metrics").body, Format::Text);
            value_of(&families, "keel_lane_throttled_total", &[]) >= 1.0
        });

        let stats: Value = serde_json::from_str(&get(addr, "/stats").body).unwrap();
        let lane = &stats["lane"];
        assert!(lane["cpu_s"].as_f64().unwrap() >= 0.030, "{lane}");
        let window = &stats["since_start"];
        let lane_cpu = window["lane_cpu_s"].as_f64().unwrap();
        assert!(lane_cpu >= 0.030, "{window}");
        // The lane's 30 ms are in no worker's busy time, only in its own.
        assert!(window["busy_s"].as_f64().unwrap() < 0.030, "{window}");
        assert!(
            window["accounted_cpu_s"].as_f64().unwrap() >= lane_cpu,
            "{window}"
        );
        // Without a lane, the field is null.
        let plain = runtime();
        let server = admin::serve("127.0.0.1:0", plain.handle()).unwrap();
        let stats: Value = serde_json::from_str(&get(server.local_addr(), "/stats").body).unwrap();
        assert!(stats["since_start"]["lane_cpu_s"].is_null(), "{stats}");
        assert!(stats["lane"].is_null(), "{stats}");
    });
}

/// Each client gets the format it asks for, whatever else it accepts;
/// `HEAD` negotiates as `GET` does.
#[test]
fn metrics_formats_are_negotiated_on_accept() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        let cases = [
            // curl, promtool's fetchers: anything.
            ("accept: */*\r\n", TEXT_TYPE),
            ("", TEXT_TYPE),
            ("accept: text/plain;version=0.0.4\r\n", TEXT_TYPE),
            ("accept: application/json\r\n", TEXT_TYPE),
            ("accept: application/openmetrics-text\r\n", OPENMETRICS_TYPE),
            // Prometheus 2.x.
            (
                "accept: application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2\r\n",
                OPENMETRICS_TYPE,
            ),
            // The same, split over two headers.
            (
                "accept: text/plain;version=0.0.4;q=0.3\r\naccept: application/openmetrics-text;q=0.5\r\n",
                OPENMETRICS_TYPE,
            ),
            (
                "accept: application/openmetrics-text;q=0.2, text/plain;q=0.9\r\n",
                TEXT_TYPE,
            ),
        ];
        for (accept, expected) in cases {
            let answer = get_with(addr, "/metrics", accept);
            assert_eq!(answer.status, 200, "{accept}");
            assert_eq!(answer.headers["content-type"], expected, "{accept:?}");
            let format = if expected == TEXT_TYPE {
                Format::Text
            } else {
                Format::OpenMetrics
            };
            parse_exposition(&answer.body, format);
        }
        let head = request(
            addr,
            "HEAD /metrics HTTP/1.1\r\nhost: a\r\naccept: application/openmetrics-text\r\nconnection: close\r\n\r\n",
        );
        assert_eq!(head.status, 200);
        assert_eq!(head.headers["content-type"], OPENMETRICS_TYPE);
        assert!(head.body.is_empty());
    });
}

/// The documented `/stats` fields, with their JSON types.
#[test]
fn stats_json_has_the_documented_fields() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        exercise(&rt);
        let answer = get(addr, "/stats");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.headers["content-type"], "application/json");
        let stats: Value = serde_json::from_str(&answer.body).expect("valid JSON");

        let number = |v: &Value, path: &str| -> f64 {
            let mut at = v;
            for key in path.split('.') {
                at = at
                    .get(key)
                    .unwrap_or_else(|| panic!("field {path} missing"));
            }
            at.as_f64()
                .unwrap_or_else(|| panic!("{path} is not a number: {at}"))
        };
        let integer = |v: &Value, path: &str| -> u64 {
            let mut at = v;
            for key in path.split('.') {
                at = at
                    .get(key)
                    .unwrap_or_else(|| panic!("field {path} missing"));
            }
            at.as_u64()
                .unwrap_or_else(|| panic!("{path} is not an integer: {at}"))
        };

        assert!(number(&stats, "uptime_s") > 0.0);
        assert_eq!(integer(&stats, "workers"), 2);
        integer(&stats, "live_tasks");
        integer(&stats, "pending_timers");
        for pct in ["utilization_pct", "spin_pct"] {
            let value = number(&stats, pct);
            assert!((0.0..=100.0).contains(&value), "{pct} = {value}");
        }

        let workers = stats["worker_states"].as_array().expect("worker_states");
        assert_eq!(workers.len(), 2);
        for (i, worker) in workers.iter().enumerate() {
            assert_eq!(integer(worker, "worker"), i as u64);
            let wall = number(worker, "wall_s");
            let parts: f64 = [
                "task_s", "io_s", "timers_s", "search_s", "spin_s", "parked_s",
            ]
            .iter()
            .map(|f| number(worker, f))
            .sum();
            assert!(wall > 0.0);
            assert!((parts - wall).abs() < 1e-3, "states {parts} vs wall {wall}");
            let utilization = number(worker, "utilization_pct");
            assert!((0.0..=100.0).contains(&utilization));
            let cpu = number(worker, "cpu_s");
            let preempted = number(worker, "preempted_s");
            assert!(
                cpu >= 0.0 && preempted >= 0.0 && preempted <= wall,
                "{worker}"
            );
            integer(worker, "polls");
            integer(worker, "rescues");
            integer(worker, "io_looks");
            let park_cpu = number(worker, "park_cpu_s");
            assert!(park_cpu >= 0.0 && park_cpu <= cpu + 0.02, "{worker}");
        }

        let classes = stats["classes"].as_array().expect("classes");
        assert_eq!(classes.len(), 3);
        let mut configured = 0.0;
        let mut received = 0.0;
        for (i, class) in classes.iter().enumerate() {
            assert!(class["name"].is_string());
            assert_eq!(integer(class, "index"), i as u64);
            integer(class, "shares");
            configured += number(class, "configured_share_pct");
            received += number(class, "wall_share_pct");
            assert!(number(class, "wall_s") > 0.0);
            assert!(integer(class, "polls") >= 80);
            integer(class, "stalls");
            assert!(integer(class, "queue_delay.count") >= 1);
            let p50 = number(class, "queue_delay.p50_us");
            let p90 = number(class, "queue_delay.p90_us");
            let p99 = number(class, "queue_delay.p99_us");
            let p999 = number(class, "queue_delay.p999_us");
            let max = number(class, "queue_delay.max_us");
            number(class, "queue_delay.mean_us");
            assert!(p50 <= p90 && p90 <= p99 && p99 <= p999 && p999 <= max);
        }
        assert!((configured - 100.0).abs() < 1e-6);
        assert!((received - 100.0).abs() < 1e-6);
        assert_eq!(classes[0]["name"], "urgent");

        for field in [
            "threads",
            "idle",
            "queued",
            "waiting",
            "completed",
            "rejected",
            "max_threads",
            "queue_capacity",
        ] {
            integer(&stats["blocking"], field);
        }
        assert!(integer(&stats["blocking"], "completed") >= 1);
        assert!(number(&stats["blocking"], "busy_s") > 0.0);
        for mode in ["off", "fixed", "adaptive"] {
            integer(&stats["deliveries"][mode], "count");
            integer(&stats["deliveries"][mode], "bytes");
        }

        assert_eq!(stats["admin"]["class"], "urgent");
        assert_eq!(integer(&stats["admin"], "connections_open"), 1);
        integer(&stats["admin"], "connections_rejected");
        integer(&stats["admin"], "connections_evicted");
        assert_eq!(integer(&stats["admin"], "max_connections"), 16);

        for window in ["since_start", "since_last"] {
            let w = &stats[window];
            for field in [
                "wall_s",
                "worker_wall_s",
                "busy_s",
                "search_s",
                "spin_s",
                "parked_s",
                "park_cpu_s",
                "blocking_busy_s",
                "accounted_cpu_s",
                "workers_cpu_s",
                "preempted_s",
                "process_user_s",
                "process_system_s",
                "process_cpu_s",
                "utilization_pct",
                "spin_pct",
                "accounted_cpu_pct",
                "workers_cpu_pct",
                "process_cpu_pct",
            ] {
                let value = number(w, field);
                assert!(value >= 0.0, "{window}.{field} = {value}");
            }
            // The work done since the endpoint started shows in both.
            assert!(number(w, "busy_s") >= 0.030, "{window}: {w}");
            assert!(number(w, "process_cpu_s") > 0.0, "{window}: {w}");
            // The workers' thread clocks are part of the process's CPU.
            assert!(
                number(w, "workers_cpu_s") <= number(w, "process_cpu_s") + 0.005,
                "{window}: {w}"
            );
            assert!(number(w, "utilization_pct") <= 100.0);
            // What should have cost CPU is the states that run on a core,
            // the CPU of parking, the blocking pool's run time, and the CPU
            // of the tokio side's and the lane's threads where there are
            // any (null otherwise).
            let parts: f64 = [
                "busy_s",
                "search_s",
                "spin_s",
                "park_cpu_s",
                "blocking_busy_s",
            ]
            .iter()
            .map(|f| number(w, f))
            .sum::<f64>()
                + ["tokio_cpu_s", "lane_cpu_s"]
                    .iter()
                    .map(|f| w[*f].as_f64().unwrap_or(0.0))
                    .sum::<f64>();
            let accounted = number(w, "accounted_cpu_s");
            assert!((parts - accounted).abs() < 1e-6, "{window}: {w}");
        }
        eprintln!("since_start: {}", stats["since_start"]);

        // The second answer's window starts at the first answer.
        std::thread::sleep(Duration::from_millis(20));
        let second: Value = serde_json::from_str(&get(addr, "/stats").body).unwrap();
        let last = number(&second, "since_last.wall_s");
        let start = number(&second, "since_start.wall_s");
        assert!(
            last > 0.0 && last < start,
            "since_last {last} vs since_start {start}"
        );
    });
}

/// Every leaf of a JSON value by its path (`classes.1.wall_s`).
fn leaves(value: &Value, path: &str, out: &mut BTreeMap<String, Value>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                leaves(field, &join(key), out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                leaves(item, &join(&i.to_string()), out);
            }
        }
        leaf => {
            out.insert(path.to_owned(), leaf.clone());
        }
    }
}

/// A real runtime's `/stats` answer deserializes into
/// [`admin::StatsDocument`] with its figures in place, and written again it
/// is the same document: the same fields, the same values (to a float's
/// last digit, which JSON parsing may round).
#[test]
fn stats_document_round_trips() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        exercise(&rt);
        let body = get(addr, "/stats").body;
        let doc = admin::StatsDocument::from_json(body.as_bytes()).expect("a /stats document");

        assert!(doc.uptime_s > 0.0);
        assert_eq!(doc.workers, 2);
        assert_eq!(doc.worker_states.len(), 2);
        for (i, worker) in doc.worker_states.iter().enumerate() {
            assert_eq!(worker.worker, i);
            assert!(worker.wall_s > 0.0, "{worker:?}");
            let states = worker.task_s
                + worker.io_s
                + worker.timers_s
                + worker.search_s
                + worker.spin_s
                + worker.parked_s;
            assert!((states - worker.wall_s).abs() < 1e-3, "{worker:?}");
            // This server writes every later figure.
            assert!(
                worker.cpu_s.is_some() && worker.park_cpu_s.is_some(),
                "{worker:?}"
            );
            assert!(
                worker.preempted_s.is_some() && worker.rescues.is_some(),
                "{worker:?}"
            );
            assert!(worker.io_poll_gap_max_us.is_some(), "{worker:?}");
        }
        let names: Vec<&str> = doc.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["urgent", "normal", "bulk"]);
        let mut received = 0.0;
        for (i, class) in doc.classes.iter().enumerate() {
            assert_eq!(class.index, i);
            // 4 tasks x 20 polls x 200 µs of work each.
            assert!(class.wall_s >= 0.010, "{class:?}");
            assert!(class.polls >= 80, "{class:?}");
            assert!(class.queue_delay.count >= 1, "{class:?}");
            received += class.wall_share_pct;
        }
        assert!((received - 100.0).abs() < 1e-6);
        assert_eq!(doc.classes[0].shares, 16);
        assert!(doc.blocking.completed >= 1);
        assert_eq!(doc.admin.class, "urgent");
        assert_eq!(doc.admin.connections_evicted, Some(0));
        assert_eq!(doc.admin.max_connections, 16);
        for window in [&doc.since_start, &doc.since_last] {
            assert!(window.busy_s >= 0.030, "{window:?}");
            assert!(window.process_cpu_s.is_some(), "{window:?}");
            assert!(window.workers_cpu_s.is_some(), "{window:?}");
        }

        let mut sent = BTreeMap::new();
        leaves(&serde_json::from_str(&body).unwrap(), "", &mut sent);
        let mut again = BTreeMap::new();
        leaves(
            &serde_json::from_str(&doc.to_json()).unwrap(),
            "",
            &mut again,
        );
        assert_eq!(
            sent.keys().collect::<Vec<_>>(),
            again.keys().collect::<Vec<_>>()
        );
        for (path, value) in &sent {
            match (value.as_f64(), again[path].as_f64()) {
                (Some(a), Some(b)) => assert!(
                    (a - b).abs() <= a.abs() * 1e-12,
                    "{path}: sent {a}, written again {b}"
                ),
                _ => assert_eq!(value, &again[path], "{path}"),
            }
        }
    });
}

/// The deprecated names carry the same figures as their replacements: in
/// `/stats`, every class's `cpu_s` and `cpu_share_pct` are its `wall_s`
/// and `wall_share_pct`; in `/metrics`, in both formats, the samples of
/// `keel_class_cpu_seconds` are those of `keel_class_wall_seconds`, and
/// the old family's HELP says it is deprecated and names the new one.
#[test]
fn deprecated_names_equal_their_replacements() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        exercise(&rt);

        let stats: Value = serde_json::from_str(&get(addr, "/stats").body).unwrap();
        let classes = stats["classes"].as_array().expect("classes");
        assert_eq!(classes.len(), 3);
        for class in classes {
            assert!(class["wall_s"].as_f64().unwrap() > 0.0, "{class}");
            assert_eq!(class["cpu_s"], class["wall_s"], "{class}");
            assert_eq!(class["cpu_share_pct"], class["wall_share_pct"], "{class}");
        }

        for (accept, format) in [
            ("", Format::Text),
            (
                "accept: application/openmetrics-text; version=1.0.0\r\n",
                Format::OpenMetrics,
            ),
        ] {
            let families = parse_exposition(&get_with(addr, "/metrics", accept).body, format);
            let (old, new) = match format {
                Format::Text => (
                    "keel_class_cpu_seconds_total",
                    "keel_class_wall_seconds_total",
                ),
                Format::OpenMetrics => ("keel_class_cpu_seconds", "keel_class_wall_seconds"),
            };
            let (old, new) = (&families[old], &families[new]);
            assert_eq!((&old.kind, &old.unit), (&new.kind, &new.unit), "{format:?}");
            let samples = |family: &Family| {
                family
                    .samples
                    .iter()
                    .map(|s| (s.labels["class"].clone(), s.value))
                    .collect::<Vec<_>>()
            };
            assert_eq!(samples(old).len(), 3, "{format:?}");
            assert_eq!(samples(old), samples(new), "{format:?}");
            let help = old.help.as_deref().unwrap();
            assert!(
                help.starts_with("Deprecated, use keel_class_wall_seconds"),
                "{format:?}: {help}"
            );
            let help = new.help.as_deref().unwrap();
            assert!(!help.contains("eprecated"), "{format:?}: {help}");
        }
    });
}

// ---------------------------------------------------------------------
// Bad requests and the limits.

#[test]
fn garbage_gets_400_and_the_connection_is_closed() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        for garbage in [
            &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nbad header line\r\n\r\n",
            b"G\x00T / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/9.9\r\n\r\n",
        ] {
            let mut stream = connect(addr);
            stream.write_all(garbage).unwrap();
            let answer = read_answer(&mut stream, false).expect("an answer");
            assert_eq!(answer.status, 400, "{:?}", String::from_utf8_lossy(garbage));
            assert!(closed_by_server(&mut stream), "the connection is closed");
            assert_healthy(addr);
        }
    });
}

#[test]
fn an_oversized_head_gets_431_and_the_connection_is_closed() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        let mut stream = connect(addr);
        let mut writer = stream.try_clone().unwrap();
        // A 1 MB header, written from another thread: the server stops
        // reading the head at its limit, so this write may fail.
        let sender = std::thread::spawn(move || {
            let mut head = b"GET /health HTTP/1.1\r\nhost: a\r\nx-big: ".to_vec();
            head.resize(head.len() + 1024 * 1024, b'a');
            head.extend_from_slice(b"\r\n\r\n");
            let _ = writer.write_all(&head);
        });
        let answer = read_answer(&mut stream, false).expect("an answer before the close");
        assert_eq!(answer.status, 431, "{answer:?}");
        assert!(closed_by_server(&mut stream), "the connection is closed");
        sender.join().unwrap();
        assert_healthy(addr);

        // Many small headers add up the same way.
        let mut head = String::from("GET /health HTTP/1.1\r\nhost: a\r\n");
        for i in 0..2000 {
            head.push_str(&format!("x-h{i}: v\r\n"));
        }
        head.push_str("\r\n");
        let mut stream = connect(addr);
        let mut writer = stream.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let _ = writer.write_all(head.as_bytes());
        });
        let answer = read_answer(&mut stream, false).expect("an answer");
        assert_eq!(answer.status, 431);
        assert!(closed_by_server(&mut stream));
        sender.join().unwrap();
        assert_healthy(addr);
    });
}

#[test]
fn an_oversized_body_gets_413_and_the_connection_is_closed() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        let mut stream = connect(addr);
        stream
            .write_all(b"GET /health HTTP/1.1\r\nhost: a\r\ncontent-length: 1048576\r\n\r\nsome")
            .unwrap();
        let answer = read_answer(&mut stream, false).expect("an answer");
        assert_eq!(answer.status, 413);
        assert_eq!(answer.headers["connection"], "close");
        assert!(closed_by_server(&mut stream));
        assert_healthy(addr);
    });
}

#[test]
fn a_slow_client_is_closed_after_the_read_timeout() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let timeout = Duration::from_millis(300);
        let server = Admin::builder()
            .read_timeout(timeout)
            .serve("127.0.0.1:0", rt.handle())
            .unwrap();
        let addr = server.local_addr();

        // Half a head, then silence (slowloris).
        let started = Instant::now();
        let mut slow = connect(addr);
        slow.write_all(b"GET /health HTTP/1.1\r\nhost: lo").unwrap();
        // Meanwhile the endpoint serves others.
        assert_healthy(addr);
        let mut rest = Vec::new();
        match slow.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        }
        assert!(started.elapsed() >= timeout, "closed before the timeout");
        assert!(
            rest.is_empty(),
            "no answer: {:?}",
            String::from_utf8_lossy(&rest)
        );
        assert_healthy(addr);

        // A head trickled a byte at a time does not reset the clock.
        let started = Instant::now();
        let mut trickle = connect(addr);
        let mut closed = false;
        for byte in b"GET /health HTTP/1.1\r\nhost: a-very-long-host-name-indeed\r\n\r\n" {
            if trickle.write_all(&[*byte]).is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !closed {
            let answer = read_answer(&mut trickle, false);
            assert!(
                answer.is_none(),
                "the trickled head was answered: {answer:?}"
            );
        }
        assert!(started.elapsed() >= timeout);
        assert_healthy(addr);

        // A connection that sends nothing is closed too.
        let mut idle = connect(addr);
        assert!(closed_by_server(&mut idle));
        assert_healthy(addr);
        wait_until("slow connections are let go", || server.connections() == 0);
    });
}

// ---------------------------------------------------------------------
// Classes, shutdown, load.

#[test]
fn the_endpoint_runs_in_its_class() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let before = rt.stats().classes[Class::URGENT.index()].polls;
        let urgent = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let stats: Value = serde_json::from_str(&get(urgent.local_addr(), "/stats").body).unwrap();
        assert_eq!(stats["admin"]["class"], "urgent");
        for _ in 0..5 {
            assert_healthy(urgent.local_addr());
        }
        // Nothing else runs in the urgent class here.
        wait_until("the urgent class's polls are published", || {
            rt.stats().classes[Class::URGENT.index()].polls >= before + 5
        });

        let normal = Admin::builder()
            .class(Class::NORMAL)
            .serve("127.0.0.1:0", rt.handle())
            .unwrap();
        let stats: Value = serde_json::from_str(&get(normal.local_addr(), "/stats").body).unwrap();
        assert_eq!(stats["admin"]["class"], "normal");

        let other = Runtime::builder()
            .workers(1)
            .class("c4", 10)
            .class("c5", 10)
            .build()
            .unwrap();
        let missing = other.handle().class("c5").unwrap();
        let error = Admin::builder()
            .class(missing)
            .serve("127.0.0.1:0", rt.handle())
            .expect_err("a class the runtime lacks");
        assert_eq!(error.kind(), ErrorKind::InvalidInput);
    });
}

#[test]
fn serve_works_from_inside_the_runtime_and_shutdown_closes_the_listener() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server: AdminServer = rt
            .block_on(async { admin::serve("127.0.0.1:0", &keel::Handle::current()) })
            .unwrap();
        let addr = server.local_addr();
        assert_healthy(addr);
        server.shutdown();
        wait_until(
            "the listener closes",
            || matches!(TcpStream::connect(addr), Err(e) if e.kind() == ErrorKind::ConnectionRefused),
        );

        // The port is free again.
        let again = Admin::builder().serve(addr, rt.handle()).unwrap();
        assert_healthy(again.local_addr());
        drop(again);
        wait_until("the listener closes on drop", || {
            TcpStream::connect(addr).is_err()
        });

        // A server that outlives its runtime drops quietly.
        let orphan = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        assert_healthy(orphan.local_addr());
        support::drop_within(rt);
        drop(orphan);
    });
}

#[test]
fn the_endpoint_answers_while_bulk_work_fills_every_worker() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let addr = server.local_addr();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut hogs = Vec::new();
        for _ in 0..8 {
            let stop = stop.clone();
            hogs.push(rt.handle().spawn_in(Class::BULK, async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    support::busy_for(Duration::from_millis(1));
                    keel::yield_now().await;
                }
            }));
        }
        for _ in 0..20 {
            assert_healthy(addr);
            assert_eq!(get(addr, "/status").status, 200);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        rt.block_on(async {
            for hog in hogs {
                hog.await.unwrap();
            }
        });
    });
}

#[test]
fn a_client_that_stops_reading_is_let_go() {
    within(TEST_LIMIT, || {
        let rt = runtime();
        let server = Admin::builder()
            .read_timeout(Duration::from_millis(300))
            .serve("127.0.0.1:0", rt.handle())
            .unwrap();
        let addr = server.local_addr();
        // Pipelined scrapes whose answers (several MB together) are never
        // read: the endpoint's writes stall once the socket buffers fill.
        let mut greedy = connect(addr);
        let requests = "GET /metrics HTTP/1.1\r\nhost: a\r\n\r\n".repeat(3000);
        let mut writer = greedy.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            let _ = writer.write_all(requests.as_bytes());
        });
        wait_until("the stalled connection is closed", || {
            server.connections() == 0
        });
        assert_healthy(addr);
        // Only now does the client read: what was sent, then the end.
        assert!(closed_by_server(&mut greedy));
        sender.join().unwrap();
    });
}

/// Out of file descriptors, `accept` fails; the endpoint pauses and
/// retries, and serves the waiting connection once descriptors are free.
/// In a child process, since it lowers the process's descriptor limit.
#[test]
fn accept_errors_do_not_stop_the_endpoint() {
    if !support::in_child_process() {
        support::run_in_child_process("accept_errors_do_not_stop_the_endpoint");
        return;
    }
    let rt = runtime();
    let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
    let addr = server.local_addr();
    assert_healthy(addr);

    // A low limit, so that filling it is quick.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid `rlimit` for getrlimit to fill.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(read, 0);
    let low = libc::rlimit {
        rlim_cur: limit.rlim_cur.min(256),
        rlim_max: limit.rlim_max,
    };
    // SAFETY: `low` is a valid `rlimit`; lowering the soft limit below the
    // hard one is always allowed.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) };
    assert_eq!(set, 0);

    // Every descriptor taken, then one given back for the client's socket.
    let mut fillers = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(file) => fillers.push(file),
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => break,
            Err(e) => panic!("{e}"),
        }
    }
    fillers.pop();
    let mut client = connect(addr);
    client
        .write_all(b"GET /health HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
        .unwrap();
    // The endpoint cannot accept it for now: EMFILE, a pause, again.
    std::thread::sleep(Duration::from_millis(350));
    drop(fillers);
    let answer = read_answer(&mut client, false).expect("served once descriptors are free");
    assert_eq!(answer.status, 200);
    assert_healthy(addr);
}
