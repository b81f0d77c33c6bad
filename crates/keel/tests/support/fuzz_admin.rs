//! What the admin endpoint may write back to a client that sent anything
//! at all: shared by the proptest in `admin_fuzz.rs` (over TCP) and the
//! cargo-fuzz target `admin_request` (in memory), which include this file.
//!
//! Whatever the input, the output must be a sequence of whole HTTP/1.x
//! answers and nothing else: a status line (HTTP/1.1, or 1.0 for a 1.0
//! request) with a status the endpoint uses, headers, a `content-length` and exactly that much body (none
//! for an answer to `HEAD`); after an answer that closes the connection,
//! nothing. A `/metrics` answer is whole in the format it names. A `500`
//! (an answer the endpoint failed to make) never appears.
//!
//! And silence is no answer to a request that is plainly valid: when the
//! input starts with a simple, well-formed `GET` or `HEAD` of a route
//! (by the strict reading of [`simple_request`]), the first answer must be
//! there, and a `200`.

/// Checks what the endpoint wrote back (`output`) to a client that sent
/// `input` (see the module docs); returns the number of whole answers.
/// With `cut`, the client stopped reading, so the last answer may be cut
/// short.
pub fn check_exchange(input: &[u8], output: &[u8], cut: bool) -> Result<usize, String> {
    let answers = check_answers(output, cut)?;
    if simple_request(input) && !(cut && answers == 0) {
        if answers == 0 {
            return Err("no answer to a simple, valid request".into());
        }
        if !output.starts_with(b"HTTP/1.1 200 ") {
            return Err(format!(
                "a simple, valid request answered {:?}",
                lossy(&output[..output.len().min(40)])
            ));
        }
    }
    Ok(answers)
}

/// Whether `input` starts with a request no server could refuse: `GET` or
/// `HEAD` of a route (a query allowed) in HTTP/1.1, then header lines of
/// plain token names and visible values, none that asks for more than a
/// plain answer (a body, an upgrade, a continue, a connection option),
/// at most [`MAX_HEADERS`] of them, and the blank line, all within 8 KiB.
pub fn simple_request(input: &[u8]) -> bool {
    let Some(end) = find(&input[..input.len().min(8 * 1024)], b"\r\n\r\n") else {
        return false;
    };
    let Ok(head) = std::str::from_utf8(&input[..end]) else {
        return false;
    };
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let Some((method, rest)) = line.split_once(' ') else {
        return false;
    };
    let Some((target, version)) = rest.split_once(' ') else {
        return false;
    };
    // A query of the characters RFC 3986 allows there (`<`, `"` or `{`,
    // say, are not, and an HTTP parser may refuse them with a 400).
    let path = target.split_once('?').map_or(target, |(path, query)| {
        if query
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b))
        {
            path
        } else {
            ""
        }
    });
    if !matches!(method, "GET" | "HEAD")
        || !matches!(path, "/health" | "/status" | "/stats" | "/metrics")
        || version != "HTTP/1.1"
        || lines.clone().count() > MAX_HEADERS
    {
        return false;
    }
    lines.all(|line| {
        let Some((name, value)) = line.split_once(':') else {
            return false;
        };
        !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && value
                .bytes()
                .all(|b| b == b' ' || b == b'\t' || b.is_ascii_graphic())
            && ![
                "content-length",
                "transfer-encoding",
                "expect",
                "upgrade",
                "connection",
                "te",
            ]
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n))
    })
}

/// The most header fields hyper's HTTP/1 parser takes in one head (its
/// default); a head with more is answered `431`, however small.
pub const MAX_HEADERS: usize = 100;

/// The statuses the endpoint (or hyper, for requests it cannot parse)
/// answers with.
const STATUSES: [u16; 9] = [200, 400, 404, 405, 413, 414, 431, 501, 505];

/// Checks `output` as described above; returns the number of whole
/// answers. With `cut`, the client stopped reading, so the last answer
/// may be cut short.
pub fn check_answers(output: &[u8], cut: bool) -> Result<usize, String> {
    let mut rest = output;
    let mut answers = 0;
    while !rest.is_empty() {
        let Some(head_end) = find(rest, b"\r\n\r\n") else {
            if cut {
                return Ok(answers);
            }
            return Err(format!(
                "answer {answers}: a head cut short: {:?}",
                lossy(rest)
            ));
        };
        let head = std::str::from_utf8(&rest[..head_end])
            .map_err(|_| format!("answer {answers}: a head that is not UTF-8"))?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        // hyper answers a request in the version it came in.
        let status: u16 = status_line
            .strip_prefix("HTTP/1.1 ")
            .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("answer {answers}: a bad status line {status_line:?}"))?;
        if !STATUSES.contains(&status) {
            return Err(format!("answer {answers}: status {status}: {head:?}"));
        }
        let mut length = None;
        let mut close = false;
        let mut content_type = None;
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("answer {answers}: a bad header line {line:?}"))?;
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => {
                    if length.is_some() {
                        return Err(format!("answer {answers}: two content-lengths"));
                    }
                    length = Some(
                        value
                            .parse::<usize>()
                            .map_err(|_| format!("answer {answers}: content-length {value:?}"))?,
                    );
                }
                "connection" => close = value.eq_ignore_ascii_case("close"),
                "content-type" => content_type = Some(value.to_owned()),
                "transfer-encoding" => {
                    return Err(format!("answer {answers}: transfer-encoding {value}"))
                }
                _ => {}
            }
        }
        let length =
            length.ok_or_else(|| format!("answer {answers}: no content-length: {head:?}"))?;
        let after_head = &rest[head_end + 4..];
        // An answer to `HEAD` declares a length and sends no body; the
        // endpoint's bodies never start like an answer, so the next
        // answer (or nothing) right after the head tells one.
        let body_len = if length > 0
            && (after_head.is_empty()
                || after_head.starts_with(b"HTTP/1.1 ")
                || after_head.starts_with(b"HTTP/1.0 "))
        {
            0
        } else {
            length
        };
        let Some(body) = after_head.get(..body_len) else {
            if cut {
                return Ok(answers);
            }
            return Err(format!(
                "answer {answers}: {} of {length} body bytes",
                after_head.len()
            ));
        };
        if status == 200 && body_len > 0 {
            check_metrics(content_type.as_deref(), body)
                .map_err(|e| format!("answer {answers}: {e}"))?;
        }
        rest = &after_head[body_len..];
        answers += 1;
        if close && !rest.is_empty() {
            return Err(format!(
                "answer {answers}: bytes after an answer that closed the connection: {:?}",
                lossy(rest)
            ));
        }
    }
    Ok(answers)
}

/// A `/metrics` body is whole in the format its content type names.
fn check_metrics(content_type: Option<&str>, body: &[u8]) -> Result<(), String> {
    let text = || std::str::from_utf8(body).map_err(|_| "a metrics body that is not UTF-8");
    match content_type {
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8") => {
            let text = text()?;
            if !text.ends_with("\n# EOF\n") || text.matches("# EOF").count() != 1 {
                return Err("OpenMetrics without one # EOF at its end".into());
            }
        }
        Some("text/plain; version=0.0.4; charset=utf-8") => {
            let text = text()?;
            if text.contains("# EOF") || text.contains("# UNIT") || !text.ends_with('\n') {
                return Err("the text format with OpenMetrics lines, or cut short".into());
            }
            if !text.starts_with("# HELP keel_") {
                return Err("the text format starts without a family".into());
            }
        }
        _ => {}
    }
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned()
}
