//! The HTTP/1.1 wire format of S0's load generator: one fixed request,
//! and just enough of a response parser to check the answer.
//!
//! The generator shares the machine's cores with the server it measures,
//! so every cycle it spends is taken from the server. It therefore writes
//! a request built once per connection and reads answers with a parser
//! that looks only at what S0 needs: the status code, `Content-Length`
//! (the server's answers always carry one), and whether the server will
//! close the connection (`Connection: close`, or HTTP/1.0 without
//! `keep-alive`). An answer with a chunked body, without a length, or
//! with a head over [`MAX_HEAD`] bytes is refused as an error rather than
//! half-understood.

use std::net::SocketAddr;
use std::ops::Range;

/// The longest head (status line, headers and the blank line that ends
/// them) an answer may have, bytes. A longer one is refused whether or
/// not its end is in the buffer yet.
pub const MAX_HEAD: usize = 4096;

/// The longest body an answer may announce.
pub const MAX_BODY: usize = 1 << 20;

/// The request for `GET /` on `host`; with `close`, it asks the server to
/// close the connection after answering.
pub fn request(host: SocketAddr, close: bool) -> Vec<u8> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    format!("GET / HTTP/1.1\r\nHost: {host}\r\n{connection}\r\n").into_bytes()
}

/// A complete answer at the front of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// Where the body sits in the buffer.
    pub body: Range<usize>,
    /// Whether the server closes the connection after this answer.
    pub close: bool,
    /// Bytes of the buffer this answer takes (head and body).
    pub len: usize,
}

/// Parses the answer at the front of `buf`: `Ok(None)` while it is
/// incomplete, an error when it is not an answer this client accepts.
pub fn parse(buf: &[u8]) -> Result<Option<Answer>, String> {
    let Some(head_len) = find_head_end(&buf[..buf.len().min(MAX_HEAD)]) else {
        if buf.len() > MAX_HEAD {
            return Err(format!("the answer's head is over {MAX_HEAD} bytes"));
        }
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..head_len - 4])
        .map_err(|_| "the answer's head is not text".to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let (version, rest) = status_line
        .split_once(' ')
        .ok_or_else(|| format!("not a status line: {status_line:?}"))?;
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(format!("not an HTTP/1.x status line: {status_line:?}")),
    };
    let status = rest
        .get(..3)
        .and_then(|code| code.parse::<u16>().ok())
        .filter(|code| (100..=999).contains(code))
        .ok_or_else(|| format!("no status code in {status_line:?}"))?;
    let mut length: Option<usize> = None;
    let mut close = http10;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("not a header: {line:?}"))?;
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            let parsed: usize = value
                .parse()
                .map_err(|_| format!("a bad Content-Length: {value:?}"))?;
            if length.is_some_and(|known| known != parsed) {
                return Err("two different Content-Lengths".to_string());
            }
            length = Some(parsed);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!(
                "a Transfer-Encoding this client does not read: {value:?}"
            ));
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && http10 {
                    close = false;
                }
            }
        }
    }
    let length = length.ok_or_else(|| "the answer has no Content-Length".to_string())?;
    if length > MAX_BODY {
        return Err(format!("a body of {length} bytes is over {MAX_BODY}"));
    }
    let len = head_len + length;
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some(Answer {
        status,
        body: head_len..len,
        close,
        len,
    }))
}

/// The length of the head including its closing blank line, if it is
/// all in `buf`.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What hyper sends for `Hello, world!`.
    const HELLO: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-length: 13\r\ndate: Sun, 22 Nov 2026 10:00:00 GMT\r\n\r\nHello, world!";

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

    /// A whole answer parses; every shorter prefix is incomplete.
    #[test]
    fn whole_and_partial_answers() {
        let answer = parse(HELLO).unwrap().unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(&HELLO[answer.body.clone()], b"Hello, world!");
        assert!(!answer.close);
        assert_eq!(answer.len, HELLO.len());
        for cut in 0..HELLO.len() {
            assert_eq!(parse(&HELLO[..cut]), Ok(None), "cut at {cut}");
        }
    }

    /// Bytes after the answer are not part of it.
    #[test]
    fn leaves_what_follows() {
        let mut two = HELLO.to_vec();
        two.extend_from_slice(HELLO);
        let answer = parse(&two).unwrap().unwrap();
        assert_eq!(answer.len, HELLO.len());
        assert_eq!(parse(&two[answer.len..]).unwrap().unwrap().len, HELLO.len());
    }

    /// `Connection: close` and HTTP/1.0 close; 1.0 with keep-alive does not.
    #[test]
    fn closing_answers() {
        let close = b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n";
        assert!(parse(close).unwrap().unwrap().close);
        let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert!(parse(old).unwrap().unwrap().close);
        let kept = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
        assert!(!parse(kept).unwrap().unwrap().close);
    }

    /// Other statuses parse (the caller judges them); answers this client
    /// cannot read are errors.
    #[test]
    fn refusals() {
        let missing = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(parse(missing).unwrap().unwrap().status, 404);
        for bad in [
            &b"HTTP/2 200\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 2x0 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(parse(&[b'x'; MAX_HEAD + 1]).is_err());
    }

    /// A head of exactly [`MAX_HEAD`] bytes is read; one a byte longer is
    /// refused as soon as it is known to be longer, whether or not its end
    /// and its body have arrived.
    #[test]
    fn holds_heads_to_the_limit() {
        let answer = |head: usize| {
            let mut bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nX-Pad: ".to_vec();
            bytes.resize(head - 4, b'a');
            bytes.extend_from_slice(b"\r\n\r\nHello, world!");
            bytes
        };
        let at_limit = answer(MAX_HEAD);
        let parsed = parse(&at_limit).unwrap().unwrap();
        assert_eq!(parsed.body, MAX_HEAD..MAX_HEAD + 13);
        let over = answer(MAX_HEAD + 1);
        for cut in [MAX_HEAD + 1, MAX_HEAD + 4, over.len()] {
            let error = parse(&over[..cut]).unwrap_err();
            assert!(error.contains("head is over"), "cut at {cut}: {error}");
        }
        assert_eq!(parse(&over[..MAX_HEAD]), Ok(None));
    }
}
