//! A small blocking HTTP/1.1 client on std sockets, for the admin
//! endpoint's tests: one request, one answer, and whether the server
//! closed the connection.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};

use super::WATCHDOG;

/// An answer: status, lower-cased headers, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connects");
    stream
        .set_read_timeout(Some(WATCHDOG))
        .expect("read timeout set");
    stream
        .set_write_timeout(Some(WATCHDOG))
        .expect("write timeout set");
    stream
}

/// Reads one answer from `stream`: the head, then `content-length` bytes
/// of body (none for `HEAD` requests, when `head_only`). `None` if the
/// stream ends before a whole head arrives.
pub fn read_answer(stream: &mut TcpStream, head_only: bool) -> Option<Answer> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("reading an answer: {e}"),
        }
    };
    let head = std::str::from_utf8(&buf[..head_end]).expect("the head is text");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line}");
    let status = parts.next().unwrap().parse().expect("a numeric status");
    let headers: BTreeMap<String, String> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (name, value) = l.split_once(':').expect("a header line");
            (name.to_ascii_lowercase(), value.trim().to_owned())
        })
        .collect();
    let length: usize = if head_only {
        0
    } else {
        headers
            .get("content-length")
            .map(|l| l.parse().unwrap())
            .unwrap_or(0)
    };
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).expect("body read");
        assert!(n > 0, "the body ends early");
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Answer {
        status,
        headers,
        body: String::from_utf8(body).expect("the body is text"),
    })
}

/// Whether the server has closed `stream`: a read returns end-of-file or
/// a reset (after any bytes still queued).
pub fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut sink = [0u8; 4096];
    loop {
        match stream.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(e) => panic!("unexpected read error: {e}"),
        }
    }
}

/// Sends `GET path` on a fresh connection (closed after the answer).
pub fn get(addr: SocketAddr, path: &str) -> Answer {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n"),
    )
}

/// Sends `GET path` with the extra header lines `headers` (each ending in
/// `\r\n`) on a fresh connection (closed after the answer).
pub fn get_with(addr: SocketAddr, path: &str, headers: &str) -> Answer {
    request(
        addr,
        &format!("GET {path} HTTP/1.1\r\nhost: admin\r\n{headers}connection: close\r\n\r\n"),
    )
}

/// Sends the raw request `raw` on a fresh connection and reads one answer.
pub fn request(addr: SocketAddr, raw: &str) -> Answer {
    let mut stream = connect(addr);
    stream.write_all(raw.as_bytes()).expect("request sent");
    let head_only = raw.starts_with("HEAD ");
    read_answer(&mut stream, head_only).expect("an answer")
}

/// `GET /health` answers `200 ok`.
pub fn assert_healthy(addr: SocketAddr) {
    let answer = get(addr, "/health");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.body, "ok\n");
}
