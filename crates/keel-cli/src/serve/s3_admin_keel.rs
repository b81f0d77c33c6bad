//! The keel proxy's admin endpoint: a minimal HTTP/1.1 responder on keel
//! sockets, standing in until the library's own admin endpoint
//! (`keel::admin`) takes its place.
//!
//! Everything that will change then is in this file, behind [`serve`]:
//! bind the address, answer `GET /status` with the text the caller
//! produces, 404 anything else, one request per connection. It runs in
//! the class it is given (`Class::URGENT` in the proxy, so the control
//! plane is picked ahead of the forwarding), and its accept loop, like
//! the proxy's, survives accept errors.

use std::net::SocketAddr;
use std::sync::Arc;

use keel::io::{AsyncReadExt, AsyncWriteExt};
use keel::net::TcpStream;
use keel::Class;

use super::s1_keel::{accept_each, bind};
use super::s2::request_end;
use crate::error::Error;

/// The largest admin request accepted, bytes; a bigger one is answered
/// 413 and the connection closed.
const MAX_REQUEST: usize = 8 * 1024;

/// The answer to a request over [`MAX_REQUEST`].
const TOO_LARGE: &[u8] =
    b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Produces the status text, once per `GET /status`.
pub type StatusFn = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves the admin endpoint on `rt` in `class` at `addr`; returns the
/// bound address.
pub fn serve(
    rt: &keel::Runtime,
    addr: SocketAddr,
    class: Class,
    status: StatusFn,
) -> Result<SocketAddr, Error> {
    let (listener, bound) = bind(rt, addr).map_err(|e| e.context("the admin endpoint"))?;
    // Connection tasks are spawned from the accept loop, so they inherit
    // its class.
    rt.spawn_in(
        class,
        accept_each(listener, move |stream, _| {
            answer_one(stream, Arc::clone(&status))
        }),
    );
    Ok(bound)
}

/// Reads one request from `stream`, answers it and closes the connection.
async fn answer_one(mut stream: TcpStream, status: StatusFn) {
    let _ = stream.set_nodelay(true);
    let mut request = Vec::with_capacity(256);
    let mut buf = [0u8; 1024];
    let end = loop {
        if let Some(end) = request_end(&request) {
            break end;
        }
        if request.len() > MAX_REQUEST {
            let _ = stream.write_all(TOO_LARGE).await;
            return;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    };
    let answer = answer(&request[..end], &*status);
    let _ = stream.write_all(&answer).await;
}

/// The whole HTTP/1.1 answer to one request: `GET /status` gets
/// `status()` as plain text, anything else 404. Every answer closes the
/// connection.
fn answer(request: &[u8], status: impl FnOnce() -> String) -> Vec<u8> {
    let (code, body) = if is_status_request(request) {
        ("200 OK", status())
    } else {
        ("404 Not Found", String::from("not found\n"))
    };
    format!(
        "HTTP/1.1 {code}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Whether a request line asks for `GET /status` (a query string is
/// allowed).
fn is_status_request(request: &[u8]) -> bool {
    let line = request.split(|&b| b == b'\r').next().unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return false;
    };
    let path = target.split(|&b| b == b'?').next().unwrap_or(&[]);
    method == b"GET" && path == b"/status"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only `GET /status` is the status request.
    #[test]
    fn recognises_status_requests() {
        assert!(is_status_request(b"GET /status HTTP/1.1\r\n\r\n"));
        assert!(is_status_request(b"GET /status?x=1 HTTP/1.1\r\n\r\n"));
        assert!(!is_status_request(b"GET /statusx HTTP/1.1\r\n\r\n"));
        assert!(!is_status_request(b"POST /status HTTP/1.1\r\n\r\n"));
        assert!(!is_status_request(b"GET"));
        assert!(!is_status_request(b""));
    }

    /// Answers carry their length and close the connection.
    #[test]
    fn answers() {
        let ok = answer(b"GET /status HTTP/1.1\r\n\r\n", || "hi\n".into());
        let ok = String::from_utf8(ok).unwrap();
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Length: 3\r\n"), "{ok}");
        assert!(ok.contains("Connection: close\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nhi\n"), "{ok}");
        let missing = answer(b"GET / HTTP/1.1\r\n\r\n", || unreachable!());
        assert!(missing.starts_with(b"HTTP/1.1 404"));
    }

    /// The endpoint answers over a real socket, in the class it is given.
    #[test]
    fn serves_status() {
        use std::io::{Read, Write};
        let rt = keel::Runtime::builder().workers(1).build().unwrap();
        let status: StatusFn = Arc::new(|| String::from("fine\n"));
        let addr = serve(&rt, "127.0.0.1:0".parse().unwrap(), Class::URGENT, status).unwrap();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        client.write_all(b"GET /status HTTP/1.1\r\n\r\n").unwrap();
        let mut text = String::new();
        client.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\nfine\n"), "{text}");
    }
}
