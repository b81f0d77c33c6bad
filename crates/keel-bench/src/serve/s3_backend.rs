//! The S3 backend: the file server behind the proxy, in its own process.
//!
//! It is not under test, so it runs on tokio whichever runtime the proxy
//! uses, and it is written to cost as little as possible per request: a
//! hand-written HTTP/1.1 responder (keep-alive, pipelining) whose answers
//! are built once at start, so a request costs one parse and one
//! `write_all` of a prepared buffer. Two objects exist: `GET /big`, a
//! 1 MiB body of fixed content ([`body_byte`]), and `GET /empty`, a 0-byte
//! body; anything else is 404. A request with `Connection: close` gets the
//! same answer with `Connection: close`, and the backend closes first, so
//! TIME_WAIT lands on its listening port rather than on the ephemeral
//! ports of the connection-rate clients.
//!
//! The content of `/big` is a pattern a client can check at any offset
//! without keeping a copy, so corruption anywhere along the proxy is
//! caught.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use clap::Args;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::node_tokio::{accept_each, bind, Guard};
use super::s2::{next_request, Next};
use super::{control, Running};
use crate::error::Error;

/// Bytes of the `/big` object.
pub const BIG_LEN: usize = 1 << 20;

/// The largest request accepted, bytes (up to and including its blank
/// line); a bigger one is answered 413 and the connection closed, however
/// the reads split it.
const MAX_REQUEST: usize = 8 * 1024;

/// The byte at `offset` of the `/big` object. The period, 251, is prime,
/// so it shares no factor with any buffer or page size and a chunk that
/// is dropped, repeated or moved shows up as a wrong byte.
pub fn body_byte(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// The answers, built once: `[keep-alive, close]` for each object.
struct Answers {
    /// `GET /big`.
    big: [Vec<u8>; 2],
    /// `GET /empty`.
    empty: [Vec<u8>; 2],
    /// Anything else.
    missing: [Vec<u8>; 2],
}

/// The answers, built on first use.
static ANSWERS: LazyLock<Answers> = LazyLock::new(|| {
    let body: Vec<u8> = (0..BIG_LEN as u64).map(body_byte).collect();
    Answers {
        big: [
            answer("200 OK", &body, false),
            answer("200 OK", &body, true),
        ],
        empty: [answer("200 OK", b"", false), answer("200 OK", b"", true)],
        missing: [
            answer("404 Not Found", b"", false),
            answer("404 Not Found", b"", true),
        ],
    }
});

/// One whole HTTP/1.1 answer.
fn answer(status: &str, body: &[u8], close: bool) -> Vec<u8> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n{connection}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The answer to a request over [`MAX_REQUEST`].
const TOO_LARGE: &[u8] =
    b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Flags of `keel-bench serve s3-backend`.
#[derive(Debug, Args)]
pub struct ServeS3BackendArgs {
    /// Worker threads of its tokio runtime (one serves far more than a
    /// proxy on the same cores can forward, and leaves them the CPU).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// Address to bind to.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
}

/// Runs `keel-bench serve s3-backend` until `stop` or the end of stdin.
pub fn run(args: &ServeS3BackendArgs) -> Result<(), Error> {
    let opts = BackendOpts {
        workers: usize::try_from(args.workers).unwrap_or(usize::MAX),
        addr: args.addr,
    };
    let running = start(&opts).map_err(|e| e.context("serve s3-backend"))?;
    control::serve_until_stop(running, &AtomicU64::new(0))
}

/// What the backend is asked to run.
#[derive(Debug, Clone)]
pub struct BackendOpts {
    /// Worker threads of its tokio runtime.
    pub workers: usize,
    /// Where it binds.
    pub addr: SocketAddr,
}

/// Counters reported in each `mark` under `backend`, cumulative.
#[derive(Debug, Default)]
struct Counters {
    /// Connections accepted.
    connections: AtomicU64,
    /// `GET /big` answered.
    big: AtomicU64,
    /// `GET /empty` answered.
    empty: AtomicU64,
    /// Requests answered 404 or 413.
    refused: AtomicU64,
}

/// Starts the backend.
pub fn start(opts: &BackendOpts) -> Result<Running, Error> {
    let rt = super::node_tokio::runtime(opts.workers)?;
    LazyLock::force(&ANSWERS);
    let (listener, addr) = bind(&rt, opts.addr)?;
    let counters = Arc::new(Counters::default());
    rt.spawn(accept_loop(listener, Arc::clone(&counters)));
    let runtime_stats = Box::new(move || {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "backend": {
                "connections": load(&counters.connections),
                "big": load(&counters.big),
                "empty": load(&counters.empty),
                "refused": load(&counters.refused),
            }
        })
    });
    Ok(Running {
        addr,
        log_addr: None,
        api_addr: None,
        admin_addr: None,
        startup: json!({"big_bytes": BIG_LEN}),
        runtime_stats,
        guard: Box::new(Guard(Some(rt))),
    })
}

/// Accepts connections forever, one task each.
async fn accept_loop(listener: TcpListener, counters: Arc<Counters>) {
    accept_each(listener, move |stream, _| {
        serve(stream, Arc::clone(&counters))
    })
    .await
}

/// Answers requests on one connection until it closes or asks to.
async fn serve(mut stream: TcpStream, counters: Arc<Counters>) {
    counters.connections.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_nodelay(true);
    let mut pending = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    loop {
        match next_request(&pending, MAX_REQUEST) {
            Next::Request(end) => {
                let (answer, close) = route(&pending[..end], &counters);
                pending.drain(..end);
                if stream.write_all(answer).await.is_err() || close {
                    return;
                }
            }
            Next::TooLarge => {
                counters.refused.fetch_add(1, Ordering::Relaxed);
                let _ = stream.write_all(TOO_LARGE).await;
                return;
            }
            Next::Partial => match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            },
        }
    }
}

/// The prepared answer to one request head, and whether to close after
/// it.
fn route(head: &[u8], counters: &Counters) -> (&'static [u8], bool) {
    let close = wants_close(head);
    let answers = &*ANSWERS;
    let pick = |pair: &'static [Vec<u8>; 2]| pair[usize::from(close)].as_slice();
    let answer = if head.starts_with(b"GET /big ") {
        counters.big.fetch_add(1, Ordering::Relaxed);
        pick(&answers.big)
    } else if head.starts_with(b"GET /empty ") {
        counters.empty.fetch_add(1, Ordering::Relaxed);
        pick(&answers.empty)
    } else {
        counters.refused.fetch_add(1, Ordering::Relaxed);
        pick(&answers.missing)
    };
    (answer, close)
}

/// Whether a request head carries `Connection: close`.
fn wants_close(head: &[u8]) -> bool {
    head.split(|&b| b == b'\n').skip(1).any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return false;
        };
        let (name, value) = line.split_at(colon);
        name.eq_ignore_ascii_case(b"connection")
            && value[1..]
                .split(|&b| b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
    })
}

#[cfg(test)]
mod tests {
    use super::super::s2::request_end;
    use super::*;

    /// The body follows its pattern and has its length.
    #[test]
    fn big_answer_shape() {
        let counters = Counters::default();
        let (big, close) = route(b"GET /big HTTP/1.1\r\n\r\n", &counters);
        assert!(!close);
        let head_end = request_end(big).unwrap();
        let head = std::str::from_utf8(&big[..head_end]).unwrap();
        assert!(
            head.contains(&format!("Content-Length: {BIG_LEN}\r\n")),
            "{head}"
        );
        let body = &big[head_end..];
        assert_eq!(body.len(), BIG_LEN);
        assert!(body
            .iter()
            .enumerate()
            .all(|(i, &b)| b == body_byte(i as u64)));
        assert_eq!(counters.big.load(Ordering::Relaxed), 1);
    }

    /// `/empty` has no body; unknown paths are 404; close is honoured.
    #[test]
    fn routes() {
        let counters = Counters::default();
        let (empty, close) = route(
            b"GET /empty HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            &counters,
        );
        assert!(close);
        assert_eq!(
            empty,
            b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        let (missing, _) = route(b"GET /bigger HTTP/1.1\r\n\r\n", &counters);
        assert!(missing.starts_with(b"HTTP/1.1 404"));
        assert_eq!(counters.refused.load(Ordering::Relaxed), 1);
    }

    /// `Connection: close` is found in any case and among other tokens.
    #[test]
    fn finds_connection_close() {
        assert!(wants_close(b"GET / HTTP/1.1\r\nconnection: Close\r\n\r\n"));
        assert!(wants_close(
            b"GET / HTTP/1.1\r\nConnection: upgrade, close\r\n\r\n"
        ));
        assert!(!wants_close(
            b"GET / HTTP/1.1\r\nConnection: keep-alive\r\n\r\n"
        ));
        assert!(!wants_close(b"GET /close HTTP/1.1\r\nX: close\r\n\r\n"));
        assert!(!wants_close(b"GET / HTTP/1.1\r\nConnection:\r\n\r\n"));
    }
}
