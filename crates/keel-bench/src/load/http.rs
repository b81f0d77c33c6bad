//! The HTTP/1.1 wire as the load generators and probes speak it: the one
//! request S0 sends, and the answers every load reads (S0's clients, S2's
//! API probe, S3's downloads, connection storm and admin probe).
//!
//! The load shares the machine's cores with the server it measures, so
//! every cycle it spends is taken from the server: answers are parsed in
//! place, without copying or allocating, by `httparse`, and only what the
//! loads look at is kept ([`Head`]): the status code, `Content-Length`
//! (the scenario servers' answers always carry one), whether the server
//! will close the connection (`Connection: close`, or HTTP/1.0 without
//! `keep-alive`), and where the head ends. [`header`] finds any other
//! header on demand. An answer with a chunked body, without a length,
//! with two different lengths, with a head that does not fit in
//! [`Limits::max_head`] or a body over [`Limits::max_body`] is refused as
//! an error ([`WireError`]) rather than half-understood.
//!
//! Each parser takes the bytes read so far and answers `Ok(None)` while
//! more are needed, so a caller reads, parses, and reads again. The
//! answer at the front of the buffer is all that is parsed; its length
//! says where the next one (a pipelined or keep-alive answer) starts.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;

/// Headers an answer may carry; the scenario servers send a handful.
pub const MAX_HEADERS: usize = 32;

/// How much of an answer a reader accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest head (status line, headers and the blank line that
    /// ends them), bytes. A head whose end is not within the first
    /// `max_head` bytes is refused as soon as that many have arrived.
    pub max_head: usize,
    /// The longest body an answer may announce, bytes.
    pub max_body: u64,
}

/// What the loads read from an answer's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// The body's length, from `Content-Length`.
    pub content_length: u64,
    /// Whether the server closes the connection after this answer.
    pub close: bool,
    /// Bytes of the head, its closing blank line included: the body
    /// starts here.
    pub len: usize,
}

/// A whole answer at the front of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Its head.
    pub head: Head,
    /// Where the body sits in the buffer.
    pub body: Range<usize>,
    /// Bytes of the buffer this answer takes (head and body); the next
    /// answer, if any, starts here.
    pub len: usize,
}

/// Why an answer is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The head did not end within the limit.
    HeadTooLong {
        /// The limit, bytes.
        limit: usize,
    },
    /// Not an HTTP/1.x answer, or one `httparse` cannot read.
    Malformed {
        /// What `httparse` found wrong.
        error: httparse::Error,
        /// The answer's first line (at most 64 bytes), to recognise it by.
        start: String,
    },
    /// No `Content-Length`.
    NoContentLength,
    /// A `Content-Length` that is not a number.
    BadContentLength(String),
    /// Two `Content-Length` headers that disagree.
    TwoContentLengths,
    /// A `Transfer-Encoding` (a chunked body), which the loads do not read.
    TransferEncoding(String),
    /// A body longer than the limit.
    BodyTooLong {
        /// The announced length, bytes.
        length: u64,
        /// The limit, bytes.
        limit: u64,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HeadTooLong { limit } => {
                write!(f, "the answer's head is over {limit} bytes")
            }
            Self::Malformed { error, start } => {
                write!(f, "not an HTTP/1.x answer ({error}): {start:?}")
            }
            Self::NoContentLength => f.write_str("the answer has no Content-Length"),
            Self::BadContentLength(value) => write!(f, "a bad Content-Length: {value:?}"),
            Self::TwoContentLengths => f.write_str("two different Content-Lengths"),
            Self::TransferEncoding(value) => {
                write!(
                    f,
                    "a Transfer-Encoding this client does not read: {value:?}"
                )
            }
            Self::BodyTooLong { length, limit } => {
                write!(f, "a body of {length} bytes is over {limit}")
            }
        }
    }
}

impl std::error::Error for WireError {}

impl From<WireError> for std::io::Error {
    fn from(error: WireError) -> Self {
        std::io::Error::other(error)
    }
}

/// The request for `GET /` on `host`; with `close`, it asks the server to
/// close the connection after answering.
pub fn request(host: SocketAddr, close: bool) -> Vec<u8> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    format!("GET / HTTP/1.1\r\nHost: {host}\r\n{connection}\r\n").into_bytes()
}

/// Parses the head of the answer at the front of `buf`: `Ok(None)` while
/// it is incomplete, an error when it is not a head this client accepts.
/// The body may or may not have arrived; it starts at [`Head::len`].
pub fn parse_head(buf: &[u8], limits: Limits) -> Result<Option<Head>, WireError> {
    let window = &buf[..buf.len().min(limits.max_head)];
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(window) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= limits.max_head => {
            return Err(WireError::HeadTooLong {
                limit: limits.max_head,
            });
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => {
            return Err(WireError::Malformed {
                error,
                start: first_line(buf),
            })
        }
    };
    // httparse completes a head only with its version and code read.
    let status = response.code.unwrap_or_default();
    let http10 = response.version == Some(0);
    let mut content_length: Option<u64> = None;
    let mut close = http10;
    for header in response.headers.iter() {
        let value = trim(header.value);
        if header.name.eq_ignore_ascii_case("content-length") {
            let parsed =
                parse_length(value).ok_or_else(|| WireError::BadContentLength(lossy(value)))?;
            if content_length.is_some_and(|known| known != parsed) {
                return Err(WireError::TwoContentLengths);
            }
            content_length = Some(parsed);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(WireError::TransferEncoding(lossy(value)));
        } else if header.name.eq_ignore_ascii_case("connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && http10 {
                    close = false;
                }
            }
        }
    }
    let content_length = content_length.ok_or(WireError::NoContentLength)?;
    if content_length > limits.max_body {
        return Err(WireError::BodyTooLong {
            length: content_length,
            limit: limits.max_body,
        });
    }
    Ok(Some(Head {
        status,
        content_length,
        close,
        len,
    }))
}

/// Parses the whole answer (head and body) at the front of `buf`:
/// `Ok(None)` while it is incomplete, an error when it is not an answer
/// this client accepts. Bytes after it are left alone.
pub fn parse_response(buf: &[u8], limits: Limits) -> Result<Option<Response>, WireError> {
    let Some(head) = parse_head(buf, limits)? else {
        return Ok(None);
    };
    let body_len = usize::try_from(head.content_length).map_err(|_| WireError::BodyTooLong {
        length: head.content_length,
        limit: limits.max_body,
    })?;
    let len = head.len + body_len;
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some(Response {
        head,
        body: head.len..len,
        len,
    }))
}

/// The value of the first header called `name` (in any case) of the
/// complete head at the front of `buf`, trimmed; `None` if there is no
/// such header, or no complete, well-formed head, or the value is not
/// text.
pub fn header<'b>(buf: &'b [u8], name: &str) -> Option<&'b str> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    if !matches!(response.parse(buf), Ok(httparse::Status::Complete(_))) {
        return None;
    }
    let value = response
        .headers
        .iter()
        .find(|header| header.name.eq_ignore_ascii_case(name))?
        .value;
    std::str::from_utf8(trim(value)).ok()
}

/// A `Content-Length` value: ASCII digits only, as RFC 9110 writes it.
fn parse_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// `bytes` without the spaces and tabs around it.
fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .map_or(start, |at| at + 1);
    &bytes[start..end]
}

/// `bytes` as text for a message, invalid UTF-8 replaced.
fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The first line of `buf` (at most 64 bytes), for a message.
fn first_line(buf: &[u8]) -> String {
    let line = buf
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(buf);
    lossy(&line[..line.len().min(64)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What hyper sends for `Hello, world!`.
    const HELLO: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-length: 13\r\ndate: Sun, 22 Nov 2026 10:00:00 GMT\r\n\r\nHello, world!";

    /// Generous limits, for tests that are not about them.
    const ROOMY: Limits = Limits {
        max_head: 4096,
        max_body: 1 << 20,
    };

    /// The requests are exact, with and without `Connection: close`.
    #[test]
    fn requests() {
        let host: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(
            request(host, false),
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
        );
        assert_eq!(
            request(host, true),
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\n\r\n"
        );
    }

    /// A whole answer parses, head and body.
    #[test]
    fn complete_answer() {
        let answer = parse_response(HELLO, ROOMY).unwrap().unwrap();
        assert_eq!(answer.head.status, 200);
        assert_eq!(answer.head.content_length, 13);
        assert!(!answer.head.close);
        assert_eq!(&HELLO[answer.body.clone()], b"Hello, world!");
        assert_eq!(answer.len, HELLO.len());
        assert_eq!(answer.head.len, HELLO.len() - 13);
        assert_eq!(parse_head(HELLO, ROOMY).unwrap(), Some(answer.head));
    }

    /// Every shorter prefix of an answer needs more bytes; a head is
    /// complete as soon as its blank line is in, whatever of the body has
    /// arrived.
    #[test]
    fn partial_answer_needs_more_bytes() {
        let head_len = HELLO.len() - 13;
        for cut in 0..HELLO.len() {
            assert_eq!(
                parse_response(&HELLO[..cut], ROOMY),
                Ok(None),
                "cut at {cut}"
            );
            let head = parse_head(&HELLO[..cut], ROOMY).unwrap();
            assert_eq!(head.is_some(), cut >= head_len, "cut at {cut}");
        }
    }

    /// Pipelined answers parse one after the other; bytes after an answer
    /// are not part of it.
    #[test]
    fn pipelined_answers() {
        let empty = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n";
        let mut three = HELLO.to_vec();
        three.extend_from_slice(empty);
        three.extend_from_slice(&HELLO[..20]);
        let first = parse_response(&three, ROOMY).unwrap().unwrap();
        assert_eq!(first.len, HELLO.len());
        let rest = &three[first.len..];
        let second = parse_response(rest, ROOMY).unwrap().unwrap();
        assert_eq!((second.head.status, second.len), (204, empty.len()));
        assert!(second.body.is_empty());
        assert_eq!(parse_response(&rest[second.len..], ROOMY), Ok(None));
    }

    /// `Connection: close` and HTTP/1.0 close; 1.0 with keep-alive does
    /// not; tokens are read from a list in any case.
    #[test]
    fn closing_answers() {
        let close = |bytes: &[u8]| parse_head(bytes, ROOMY).unwrap().unwrap().close;
        assert!(close(
            b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(close(
            b"HTTP/1.1 200 OK\r\nConnection: upgrade, close\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(close(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(!close(
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!close(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    }

    /// Other statuses parse (the caller judges them), and header names
    /// match in any case.
    #[test]
    fn statuses_and_header_case() {
        let missing = b"HTTP/1.1 404 Not Found\r\nCONTENT-LENGTH: 0\r\n\r\n";
        let head = parse_head(missing, ROOMY).unwrap().unwrap();
        assert_eq!((head.status, head.content_length), (404, 0));
    }

    /// Answers that are not HTTP/1.x, or not well formed, are errors that
    /// say what was wrong and show the first line.
    #[test]
    fn malformed_answers_are_clear_errors() {
        for (bad, why) in [
            (
                &b"HTTP/2 200\r\ncontent-length: 0\r\n\r\n"[..],
                "invalid HTTP version",
            ),
            (b"SSH-2.0-OpenSSH_9.6\r\n", "invalid HTTP version"),
            (
                b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n",
                "invalid response status",
            ),
            (
                b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
                "invalid header name",
            ),
            (&[0xff, 0xfe], "invalid HTTP version"),
        ] {
            let error = parse_head(bad, ROOMY).unwrap_err();
            assert!(matches!(error, WireError::Malformed { .. }), "{error:?}");
            let message = error.to_string();
            assert!(message.starts_with("not an HTTP/1.x answer"), "{message}");
            assert!(message.contains(why), "{message}");
            let line = String::from_utf8_lossy(bad.split(|&b| b == b'\r').next().unwrap());
            assert!(message.contains(&format!("{line:?}")), "{message}");
        }
    }

    /// Answers this client cannot read the length of are refused.
    #[test]
    fn unreadable_lengths_are_refused() {
        let refused = |bytes: &[u8]| parse_head(bytes, ROOMY).unwrap_err();
        assert_eq!(
            refused(b"HTTP/1.1 200 OK\r\n\r\n"),
            WireError::NoContentLength
        );
        assert_eq!(
            refused(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
            WireError::TransferEncoding("chunked".into())
        );
        for value in ["-1", "+5", "1 2", "", "0x10", "99999999999999999999999"] {
            let bytes = format!("HTTP/1.1 200 OK\r\ncontent-length: {value}\r\n\r\n");
            assert_eq!(
                refused(bytes.as_bytes()),
                WireError::BadContentLength(value.into()),
                "{value:?}"
            );
        }
        assert_eq!(
            refused(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n"),
            WireError::TwoContentLengths
        );
        // The same length twice is one length.
        let twice = b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\nx";
        assert_eq!(
            parse_response(twice, ROOMY).unwrap().unwrap().len,
            twice.len()
        );
        assert_eq!(
            refused(b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n"),
            WireError::BodyTooLong {
                length: 99_999_999_999,
                limit: 1 << 20
            }
        );
    }

    /// A head of exactly `max_head` bytes is read; one a byte longer is
    /// refused as soon as `max_head` bytes are in, whether or not its end
    /// and its body have arrived.
    #[test]
    fn holds_heads_to_the_limit() {
        let limits = Limits {
            max_head: 256,
            max_body: 1 << 20,
        };
        let answer = |head: usize| {
            let mut bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nX-Pad: ".to_vec();
            bytes.resize(head - 4, b'a');
            bytes.extend_from_slice(b"\r\n\r\nHello, world!");
            bytes
        };
        let at_limit = answer(256);
        let parsed = parse_response(&at_limit, limits).unwrap().unwrap();
        assert_eq!(parsed.body, 256..256 + 13);
        let over = answer(257);
        assert_eq!(parse_head(&over[..255], limits), Ok(None));
        for cut in [256, 257, 260, over.len()] {
            let error = parse_head(&over[..cut], limits).unwrap_err();
            assert_eq!(error, WireError::HeadTooLong { limit: 256 }, "cut at {cut}");
            assert!(error.to_string().contains("head is over 256 bytes"));
        }
    }

    /// Any header is found by name, in any case, trimmed; a missing one,
    /// or an incomplete head, gives `None`.
    #[test]
    fn finds_headers() {
        let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-Job-Us:  20123 \r\n\r\n42\n";
        assert_eq!(header(ok, "x-job-us"), Some("20123"));
        assert_eq!(header(ok, "Content-Length"), Some("3"));
        assert_eq!(header(ok, "x-missing"), None);
        assert_eq!(header(&ok[..20], "content-length"), None);
    }

    /// Errors read as sentences and convert to IO errors.
    #[test]
    fn errors_convert_to_io() {
        let error: std::io::Error = WireError::NoContentLength.into();
        assert_eq!(error.to_string(), "the answer has no Content-Length");
    }
}
