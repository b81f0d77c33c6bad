//! A tiny blocking HTTP/1.1 client for one thing: `GET` a path from an
//! admin endpoint and hand back the body of a `200` answer.
//!
//! `keel top` asks one small document once a second; an async runtime, a
//! connection pool or an HTTP library would all be more machinery than
//! that needs, and a blocking socket with timeouts on every step cannot
//! hang the view. Each request opens a connection and asks the server to
//! close it (`connection: close`), so the end of the body is the end of the
//! stream when the server does not say its length. Every failure comes
//! back as a sentence that names the address, since that is what a person
//! needs to fix a typo or find a server that is down.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::Error;

/// The largest answer accepted; a `/stats` document is a few KiB per
/// worker, so anything far larger is not one.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// Where the admin endpoint is: the address as the user wrote it (for
/// messages and the `host` header) and what it resolved to.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port`, without any `http://` the user may have written.
    authority: String,
    /// The socket addresses `authority` resolved to, tried in order.
    addrs: Vec<SocketAddr>,
    /// The limit of each step: connect, every write and every read.
    timeout: Duration,
}

impl Endpoint {
    /// Resolves `addr` (`host:port`, optionally written as
    /// `http://host:port/`), with `timeout` for each step of a request.
    ///
    /// # Errors
    ///
    /// If `addr` names no reachable form of address (no port, an unknown
    /// host).
    pub fn resolve(addr: &str, timeout: Duration) -> Result<Endpoint, Error> {
        let authority = addr
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let addrs: Vec<SocketAddr> = authority
            .to_socket_addrs()
            .map_err(|error| {
                Error::new(format!(
                    "{authority}: not an address (host:port expected): {error}"
                ))
            })?
            .collect();
        if addrs.is_empty() {
            return Err(Error::new(format!("{authority}: resolves to no address")));
        }
        Ok(Endpoint {
            authority,
            addrs,
            timeout,
        })
    }

    /// The address as the user wrote it, for messages.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// `GET path` and the body of the answer, which must be `200 OK`.
    ///
    /// # Errors
    ///
    /// Nothing listening, a timeout, an answer that is not HTTP, or a
    /// status other than 200; the message names the address.
    pub fn get(&self, path: &str) -> Result<Vec<u8>, Error> {
        let mut stream = self.connect()?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nhost: {}\r\naccept: application/json\r\n\
             user-agent: keel-top\r\nconnection: close\r\n\r\n",
            self.authority
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|error| self.failed("sending the request", &error))?;
        let mut answer = Vec::new();
        // One byte past the limit tells an answer that is too large.
        let limit = u64::try_from(MAX_ANSWER_BYTES + 1).unwrap_or(u64::MAX);
        let ended = stream.take(limit).read_to_end(&mut answer);
        let read_error = ended.err();
        if let Some(error) = &read_error {
            if answer.is_empty() {
                return Err(self.failed("reading the answer", error));
            }
        }
        if answer.len() > MAX_ANSWER_BYTES {
            return Err(Error::new(format!(
                "{}: the answer to GET {path} is larger than {MAX_ANSWER_BYTES} bytes",
                self.authority
            )));
        }
        // A server may reset the connection after a whole answer instead
        // of closing it: what arrived still counts if its length says it
        // is whole. If it is not whole, the broken stream is the news,
        // unless what arrived was not HTTP at all.
        parse_answer(&answer, read_error.is_none()).map_err(|why| match &read_error {
            Some(error) if answer.starts_with(b"HTTP/") => self.failed("reading the answer", error),
            _ => Error::new(format!("{}: GET {path}: {why}", self.authority)),
        })
    }

    /// A connection to the first address that accepts one.
    fn connect(&self) -> Result<TcpStream, Error> {
        let mut last = None;
        for addr in &self.addrs {
            match TcpStream::connect_timeout(addr, self.timeout) {
                Ok(stream) => {
                    stream
                        .set_read_timeout(Some(self.timeout))
                        .and_then(|()| stream.set_write_timeout(Some(self.timeout)))
                        .map_err(|error| self.failed("configuring the socket", &error))?;
                    return Ok(stream);
                }
                Err(error) => last = Some(error),
            }
        }
        let error = last.unwrap_or_else(|| std::io::Error::other("no address to try"));
        Err(self.failed("connecting", &error))
    }

    /// The error of `step` failing with `error`, naming the address.
    fn failed(&self, step: &str, error: &std::io::Error) -> Error {
        let why = match error.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                format!("no answer within {:?}", self.timeout)
            }
            _ => error.to_string(),
        };
        Error::new(format!(
            "{} does not answer ({step}: {why})",
            self.authority
        ))
    }
}

/// What [`parse_answer`] says of an answer without a length whose stream
/// failed before its end.
const CUT_SHORT: &str = "the answer was cut short";

/// The body of a whole HTTP/1.x answer, if its status is 200; otherwise
/// why not, as a phrase. `eof` tells whether the stream ended cleanly,
/// which is the end of a body that has no length.
fn parse_answer(answer: &[u8], eof: bool) -> Result<Vec<u8>, String> {
    if answer.is_empty() {
        return Err("the server closed the connection without answering".into());
    }
    let Some(head_end) = find(answer, b"\r\n\r\n") else {
        return Err(format!("not an HTTP answer: {}", preview(answer)));
    };
    let head = std::str::from_utf8(&answer[..head_end])
        .map_err(|_| format!("not an HTTP answer: {}", preview(answer)))?;
    let body = &answer[head_end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") || code.len() != 3 || code.parse::<u16>().is_err() {
        return Err(format!("not an HTTP answer: {}", preview(answer)));
    }
    if code != "200" {
        let reason = parts.next().unwrap_or_default();
        return Err(format!(
            "the server answered {code} {reason}: {}",
            preview(body)
        ));
    }
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!(
                "a malformed header line: {}",
                preview(line.as_bytes())
            ));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| format!("a malformed content-length: {value}"))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    if chunked {
        return dechunk(body);
    }
    match length {
        Some(length) if body.len() < length => Err(format!(
            "the answer ended after {} of its {length} bytes",
            body.len()
        )),
        Some(length) => Ok(body[..length].to_vec()),
        // No length: the body runs to the end of the stream.
        None if eof => Ok(body.to_vec()),
        None => Err(CUT_SHORT.into()),
    }
}

/// The payload of a `transfer-encoding: chunked` body.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(body.len());
    loop {
        let line_end = find(body, b"\r\n").ok_or("a chunked body ended early")?;
        let size_text = std::str::from_utf8(&body[..line_end]).unwrap_or_default();
        // Chunk extensions (`;name=value`) follow the size; ignore them.
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("a malformed chunk size: {}", preview(&body[..line_end])))?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if body.len() < size + 2 {
            return Err("a chunked body ended early".into());
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// The first position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// The start of `bytes` as text for an error message: at most 60
/// characters of one line, with what is not printable escaped.
pub fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(60)]);
    let mut shown: String = text.escape_debug().collect();
    if bytes.len() > 60 {
        shown.push('…');
    }
    format!("\"{shown}\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 200 answer with a length gives exactly that many bytes.
    #[test]
    fn content_length_bounds_the_body() {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}extra";
        assert_eq!(parse_answer(answer, true).unwrap(), b"{}");
    }

    /// Without a length the body runs to the end of the stream.
    #[test]
    fn no_length_reads_to_the_end() {
        let answer = b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\n{\"a\":1}";
        assert_eq!(parse_answer(answer, true).unwrap(), b"{\"a\":1}");
        assert_eq!(parse_answer(answer, false).unwrap_err(), CUT_SHORT);
    }

    /// A chunked body is put back together.
    #[test]
    fn chunked_body_is_decoded() {
        let answer =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_answer(answer, true).unwrap(), b"abcde");
    }

    /// Statuses other than 200, garbage and truncation are errors that
    /// say what was wrong.
    #[test]
    fn bad_answers_are_explained() {
        let not_found =
            parse_answer(b"HTTP/1.1 404 Not Found\r\n\r\nno such path", true).unwrap_err();
        assert!(not_found.contains("404 Not Found"), "{not_found}");
        let garbage = parse_answer(b"SSH-2.0-OpenSSH_9.6\r\n", true).unwrap_err();
        assert!(garbage.contains("not an HTTP answer"), "{garbage}");
        assert!(garbage.contains("SSH-2.0"), "{garbage}");
        let short =
            parse_answer(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", true).unwrap_err();
        assert!(short.contains("3 of its 10 bytes"), "{short}");
        let empty = parse_answer(b"", true).unwrap_err();
        assert!(empty.contains("without answering"), "{empty}");
    }

    /// Addresses may be written as URLs; a name without a port is refused.
    #[test]
    fn addresses_are_resolved() {
        let timeout = Duration::from_secs(1);
        let endpoint = Endpoint::resolve("http://127.0.0.1:9/", timeout).unwrap();
        assert_eq!(endpoint.authority(), "127.0.0.1:9");
        let error = Endpoint::resolve("127.0.0.1", timeout).unwrap_err();
        assert!(
            error.to_string().starts_with("127.0.0.1: not an address"),
            "{error}"
        );
    }
}
