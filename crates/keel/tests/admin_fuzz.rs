//! The admin endpoint's request handling on arbitrary bytes (feature
//! `admin`), over real TCP connections: proptest strategies over raw
//! bytes, HTTP-shaped bytes with random damage, and heads far past the
//! size limit. Whatever a client sends, the endpoint writes back only
//! whole answers (see `support/fuzz_admin.rs`), never panics, never makes
//! one allocation larger than its limits call for, and keeps serving.
//!
//! The same checks run coverage-guided, in memory, in the cargo-fuzz
//! target `admin_request` (`crates/keel/fuzz`), which CI runs for a
//! bounded time; inputs it finds that break a check are pinned below as
//! regression tests.

#![cfg(feature = "admin")]

#[path = "support/fuzz_admin.rs"]
mod fuzz_admin;
mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};

use keel::admin;
use keel::Runtime;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::alloc::{largest_allocation, Largest};
use support::http::assert_healthy;
use support::{within, TEST_LIMIT, WATCHDOG};

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// The largest allocation allowed while the endpoint takes arbitrary
/// input: a request head is bounded by `max_request_bytes` (16 KiB), an
/// answer by the size of `/metrics` (about 11 KB), and the client here
/// never holds more than a few KiB; a parser that buffered a whole
/// oversized head (up to 1 MiB below) would pass it.
const ALLOCATION_LIMIT: usize = 256 * 1024;

/// What one case sends: bytes in chunks, and optionally a head padded
/// past any limit with `padding` bytes of one header's value, written in
/// pieces so that the client never holds them all.
#[derive(Debug, Clone)]
struct Input {
    bytes: Vec<u8>,
    chunk: usize,
    padding: usize,
}

/// Sends `input` on a fresh connection, shuts down the sending side, and
/// reads everything the endpoint answers until it closes.
fn exchange(addr: SocketAddr, input: &Input) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).expect("connects");
    stream.set_read_timeout(Some(WATCHDOG)).unwrap();
    stream.set_write_timeout(Some(WATCHDOG)).unwrap();
    // A write may fail once the endpoint has answered and closed (a 400,
    // a 431): what it answered is still read below.
    let mut send = || -> std::io::Result<()> {
        for piece in input.bytes.chunks(input.chunk.max(1)) {
            stream.write_all(piece)?;
        }
        if input.padding > 0 {
            stream.write_all(b"GET /health HTTP/1.1\r\nx-padding: ")?;
            let pad = [b'p'; 4096];
            let mut left = input.padding;
            while left > 0 {
                let n = left.min(pad.len());
                stream.write_all(&pad[..n])?;
                left -= n;
            }
            stream.write_all(b"\r\n\r\n")?;
        }
        Ok(())
    };
    let _ = send();
    let _ = stream.shutdown(Shutdown::Write);
    let mut output = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => output.extend_from_slice(&buf[..n]),
            // The endpoint drains before it closes; a reset can still end
            // a connection it closed while this client was writing.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the answers: {e}"),
        }
    }
    output
}

/// Bytes shaped like requests: a request line, headers, a blank line and
/// maybe a body, from parts the endpoint treats specially and parts it
/// has never seen.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let method = prop_oneof![
        6 => Just("GET".to_owned()),
        2 => Just("HEAD".to_owned()),
        1 => Just("POST".to_owned()),
        1 => Just("OPTIONS".to_owned()),
        1 => "[A-Z]{1,8}",
        1 => "[ -~]{0,6}",
    ];
    let path = prop_oneof![
        2 => Just("/health".to_owned()),
        2 => Just("/status".to_owned()),
        2 => Just("/stats".to_owned()),
        4 => Just("/metrics".to_owned()),
        1 => Just("/metrics?x=1".to_owned()),
        1 => Just("*".to_owned()),
        1 => Just("http://admin/metrics".to_owned()),
        1 => "/[ -~]{0,20}",
    ];
    let version = prop_oneof![
        8 => Just("HTTP/1.1".to_owned()),
        1 => Just("HTTP/1.0".to_owned()),
        1 => Just("HTTP/2.0".to_owned()),
        1 => "HTTP/[0-9]\\.[0-9]",
        1 => "[ -~]{0,8}",
    ];
    let accept = prop_oneof![
        Just("application/openmetrics-text".to_owned()),
        Just("application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2".to_owned()),
        Just("text/plain;q=0, application/openmetrics-text;q=0.001".to_owned()),
        "[a-z*]{0,12}/[a-z*.+-]{0,20}(;[a-z]{1,8}=(\"[ -~]{0,8}\"|[0-9.]{0,6})){0,3}(, ?[a-z*]{1,8}/[a-z*-]{1,12}){0,3}",
    ];
    let header = prop_oneof![
        6 => accept.prop_map(|v| format!("accept: {v}")),
        3 => Just("host: admin".to_owned()),
        1 => "[0-9]{0,12}".prop_map(|v| format!("content-length: {v}")),
        1 => Just("content-length: 18446744073709551616".to_owned()),
        1 => Just("transfer-encoding: chunked".to_owned()),
        1 => Just("connection: close".to_owned()),
        1 => Just("connection: keep-alive".to_owned()),
        1 => Just("expect: 100-continue".to_owned()),
        1 => "[!-9;-~]{1,16}: [ -~]{0,40}",
        1 => "[ -~]{0,30}",
    ];
    (
        method,
        path,
        version,
        proptest::collection::vec(header, 0..6),
        proptest::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(method, path, version, headers, body)| {
            let mut bytes = format!("{method} {path} {version}\r\n").into_bytes();
            for header in headers {
                bytes.extend_from_slice(header.as_bytes());
                bytes.extend_from_slice(b"\r\n");
            }
            bytes.extend_from_slice(b"\r\n");
            bytes.extend_from_slice(&body);
            bytes
        })
}

/// Damage to apply to bytes: (kind, position, byte).
fn damaged(bytes: Vec<u8>, edits: Vec<(u8, usize, u8)>) -> Vec<u8> {
    let mut bytes = bytes;
    for (kind, at, byte) in edits {
        let at = if bytes.is_empty() {
            0
        } else {
            at % bytes.len()
        };
        match kind % 4 {
            0 if !bytes.is_empty() => bytes[at] ^= byte | 1,
            1 => bytes.insert(at, byte),
            2 if !bytes.is_empty() => {
                bytes.remove(at);
            }
            3 => bytes.truncate(at),
            _ => {}
        }
    }
    bytes
}

fn inputs() -> impl Strategy<Value = Input> {
    let requests = proptest::collection::vec(request(), 1..4).prop_map(|r| r.concat());
    let damage = prop_oneof![
        1 => Just(Vec::new()),
        1 => proptest::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..4),
    ];
    let bytes = prop_oneof![
        3 => (requests, damage).prop_map(|(bytes, edits)| damaged(bytes, edits)),
        1 => proptest::collection::vec(any::<u8>(), 0..2048),
    ];
    let padding = prop_oneof![
        8 => Just(0usize),
        1 => 1usize..20_000,
        1 => 20_000usize..(1 << 20),
    ];
    (bytes, 1usize..512, padding).prop_map(|(bytes, chunk, padding)| Input {
        bytes,
        chunk,
        padding,
    })
}

fn endpoint() -> (Runtime, admin::AdminServer) {
    let rt = Runtime::builder()
        .workers(2)
        .build()
        .expect("runtime builds");
    let server = admin::serve("127.0.0.1:0", rt.handle()).unwrap();
    (rt, server)
}

/// Checks one exchange's answers, and that no allocation so far was past
/// the limit.
fn check(addr: SocketAddr, input: &Input) -> Result<(), String> {
    let output = exchange(addr, input);
    let sent = if input.bytes.is_empty() && input.padding > 0 {
        &b"GET /health HTTP/1.1\r\nx-padding: "[..]
    } else {
        &input.bytes[..]
    };
    fuzz_admin::check_exchange(sent, &output, false)?;
    let largest = largest_allocation();
    if largest > ALLOCATION_LIMIT {
        return Err(format!("an allocation of {largest} bytes"));
    }
    Ok(())
}

/// 2,000 cases (or `PROPTEST_CASES`): random inputs, each on its own
/// connection; the endpoint answers a health check after all of them.
#[test]
fn any_bytes_get_whole_answers_or_none() {
    within(TEST_LIMIT, || {
        let (_rt, server) = endpoint();
        let addr = server.local_addr();
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(2_000);
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let simple = AtomicUsize::new(0);
        runner
            .run(&inputs(), |input| {
                if fuzz_admin::simple_request(&input.bytes) {
                    simple.fetch_add(1, Ordering::Relaxed);
                }
                check(addr, &input).map_err(TestCaseError::fail)
            })
            .unwrap();
        assert_healthy(addr);
        println!(
            "{cases} cases, {} starting with a simple request; the largest allocation was {} bytes",
            simple.load(Ordering::Relaxed),
            largest_allocation()
        );
    });
}

/// Inputs worth keeping as they are: the shapes the fuzzers found to
/// matter (a head over the limit, half-closed pipelines, bodies that are
/// declared and not sent), each checked the same way.
#[test]
fn regressions() {
    let cases: &[(&[u8], usize)] = &[
        // A head over the limit: 431, and no allocation of its size.
        (b"", 1 << 20),
        // Two requests, then the end of the stream: the first answered.
        (
            b"GET /health HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\naccept: application/openmetrics-text\r\n\r\n",
            0,
        ),
        // A body declared larger than the limit, and one never sent.
        (
            b"POST /health HTTP/1.1\r\ncontent-length: 99999999\r\n\r\n",
            0,
        ),
        (b"GET /metrics HTTP/1.1\r\ncontent-length: 10\r\n\r\nabc", 0),
        // A HEAD of /metrics: a length and no body.
        (
            b"HEAD /metrics HTTP/1.1\r\naccept: application/openmetrics-text\r\n\r\nGET /health HTTP/1.1\r\n\r\n",
            0,
        ),
        // Garbage, a TLS hello, an HTTP/2 preface.
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 0),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0),
        (b"\r\n\r\n\r\n", 0),
    ];
    within(TEST_LIMIT, move || {
        let (_rt, server) = endpoint();
        let addr = server.local_addr();
        for &(bytes, padding) in cases {
            for chunk in [1, 7, 4096] {
                let input = Input {
                    bytes: bytes.to_vec(),
                    chunk,
                    padding,
                };
                if let Err(e) = check(addr, &input) {
                    panic!("{input:?}: {e}");
                }
            }
        }
        assert_healthy(addr);
    });
}

/// A small head with more header fields than hyper's parser takes is
/// refused with `431`, like a head over the size limit: the plainly valid
/// requests the checks insist on answering with `200` are those of at
/// most [`fuzz_admin::MAX_HEADERS`] fields.
#[test]
fn a_small_head_of_too_many_fields_is_refused() {
    let head = |fields: usize| {
        let mut bytes = b"GET /health HTTP/1.1\r\n".to_vec();
        for _ in 0..fields {
            bytes.extend_from_slice(b"x-f: a\r\n");
        }
        bytes.extend_from_slice(b"\r\n");
        bytes
    };
    within(TEST_LIMIT, move || {
        let (_rt, server) = endpoint();
        let addr = server.local_addr();
        for (fields, status) in [
            (fuzz_admin::MAX_HEADERS, "HTTP/1.1 200 "),
            (fuzz_admin::MAX_HEADERS + 1, "HTTP/1.1 431 "),
        ] {
            let input = Input {
                bytes: head(fields),
                chunk: 4096,
                padding: 0,
            };
            assert_eq!(
                fuzz_admin::simple_request(&input.bytes),
                fields <= fuzz_admin::MAX_HEADERS
            );
            let output = exchange(addr, &input);
            assert!(
                output.starts_with(status.as_bytes()),
                "{fields} fields: {:?}",
                String::from_utf8_lossy(&output[..output.len().min(60)])
            );
            if let Err(e) = check(addr, &input) {
                panic!("{fields} fields: {e}");
            }
        }
        assert_healthy(addr);
    });
}
