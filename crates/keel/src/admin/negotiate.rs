//! Which format `/metrics` answers in, from the request's `Accept` header.
//!
//! Prometheus servers ask for what they can parse, with weights: 2.x sends
//! `application/openmetrics-text;version=1.0.0;q=0.5,…,text/plain;version=0.0.4;q=0.3,*/*;q=0.2`;
//! most other tools (promtool, curl, exporters' scrapers) send nothing or
//! `*/*` and expect the Prometheus text format. So the text format is the
//! default, and OpenMetrics is answered when the client weighs it above
//! the text format.
//!
//! The rules, after RFC 9110 §12.5.1:
//!
//! - Each format takes the weight (`q`, default 1) of the most specific
//!   media range that matches it: `text/plain` (version absent, `0.0.4`
//!   or `1.0.0`) or `application/openmetrics-text` (version absent,
//!   `0.0.1` or `1.0.0`, which keel's output satisfies alike); then
//!   `text/*` or `application/*`; then `*/*`.
//! - The heavier format wins; at equal weights, the one matched by the
//!   more specific range; then the text format.
//! - A header that accepts neither format (or none at all, or one that
//!   cannot be parsed) gets the text format: the endpoint disregards it,
//!   as RFC 9110 allows, rather than answering `406`.
//!
//! The parser is total: any bytes give an answer, and a malformed range
//! is skipped, never an error.

use super::exposition::Format;

/// The format for a request whose `Accept` headers are `values` (several
/// headers count as one comma-separated list).
pub(super) fn metrics_format<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Format {
    let mut text = Match::NONE;
    let mut openmetrics = Match::NONE;
    for value in values {
        for range in split_outside_quotes(value, b',') {
            let Some(range) = MediaRange::parse(range) else {
                continue;
            };
            text = text.better(range.weigh(Format::Text));
            openmetrics = openmetrics.better(range.weigh(Format::OpenMetrics));
        }
    }
    if openmetrics.q > 0 && (openmetrics.q, openmetrics.specificity) > (text.q, text.specificity) {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// How one format is matched: by the most specific range so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Match {
    /// 0: no range matched; 1: `*/*`; 2: `type/*`; 3: the full type.
    specificity: u8,
    /// The weight in thousandths, 0 to 1000.
    q: u16,
}

impl Match {
    const NONE: Match = Match {
        specificity: 0,
        q: 0,
    };

    /// The more specific of two matches; at equal specificity, the
    /// heavier.
    fn better(self, other: Match) -> Match {
        if (other.specificity, other.q) > (self.specificity, self.q) {
            other
        } else {
            self
        }
    }
}

/// One parsed media range: `type/subtype;params`.
struct MediaRange<'a> {
    kind: &'a [u8],
    subtype: &'a [u8],
    version: Option<&'a [u8]>,
    q: u16,
}

impl<'a> MediaRange<'a> {
    fn parse(range: &'a [u8]) -> Option<MediaRange<'a>> {
        let mut parts = split_outside_quotes(range, b';');
        let media = trim(parts.next()?);
        let slash = media.iter().position(|&b| b == b'/')?;
        let (kind, subtype) = (trim(&media[..slash]), trim(&media[slash + 1..]));
        if kind.is_empty() || subtype.is_empty() || (kind == b"*" && subtype != b"*") {
            return None;
        }
        let mut version = None;
        let mut q = 1000;
        for param in parts {
            let param = trim(param);
            let Some(eq) = param.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (name, value) = (trim(&param[..eq]), unquote(trim(&param[eq + 1..])));
            if name.eq_ignore_ascii_case(b"q") {
                q = parse_q(value)?;
            } else if name.eq_ignore_ascii_case(b"version") {
                version = Some(value);
            }
        }
        Some(MediaRange {
            kind,
            subtype,
            version,
            q,
        })
    }

    /// How this range matches `format`.
    fn weigh(&self, format: Format) -> Match {
        let (kind, subtype, versions): (&[u8], &[u8], &[&[u8]]) = match format {
            Format::Text => (b"text", b"plain", &[b"0.0.4", b"1.0.0"]),
            Format::OpenMetrics => (b"application", b"openmetrics-text", &[b"1.0.0", b"0.0.1"]),
        };
        let specificity = if self.kind == b"*" {
            1
        } else if !self.kind.eq_ignore_ascii_case(kind) {
            return Match::NONE;
        } else if self.subtype == b"*" {
            2
        } else if !self.subtype.eq_ignore_ascii_case(subtype) {
            return Match::NONE;
        } else if self.version.is_some_and(|v| !versions.contains(&v)) {
            // A version keel does not write is a different format.
            return Match::NONE;
        } else {
            3
        };
        Match {
            specificity,
            q: self.q,
        }
    }
}

/// A weight, `0` to `1` with at most three decimals, in thousandths;
/// `None` if it is not one.
fn parse_q(value: &[u8]) -> Option<u16> {
    let (whole, fraction) = match value.iter().position(|&b| b == b'.') {
        Some(dot) => (&value[..dot], &value[dot + 1..]),
        None => (value, &[][..]),
    };
    if whole.len() != 1 || fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        let digit = fraction.get(i).map_or(0, |d| u16::from(d - b'0'));
        thousandths = thousandths * 10 + digit;
    }
    match whole[0] {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The pieces of `bytes` between `separator`s that are not inside a
/// quoted string (where `\` escapes the next byte).
fn split_outside_quotes(bytes: &[u8], separator: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let bytes = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (i, &b) in bytes.iter().enumerate() {
            if escaped {
                escaped = false;
            } else if quoted && b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                quoted = !quoted;
            } else if b == separator && !quoted {
                rest = Some(&bytes[i + 1..]);
                return Some(&bytes[..i]);
            }
        }
        rest = None;
        Some(bytes)
    })
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

/// A quoted-string's content (escapes left as they are: no value keel
/// compares holds one); other values unchanged.
fn unquote(value: &[u8]) -> &[u8] {
    match value {
        [b'"', inner @ .., b'"'] => inner,
        _ => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(accept: &[&str]) -> Format {
        metrics_format(accept.iter().map(|a| a.as_bytes()))
    }

    #[test]
    fn the_text_format_is_the_default() {
        assert_eq!(format(&[]), Format::Text);
        assert_eq!(format(&["*/*"]), Format::Text);
        assert_eq!(format(&["text/plain"]), Format::Text);
        assert_eq!(format(&["application/json"]), Format::Text);
        assert_eq!(format(&[""]), Format::Text);
        assert_eq!(format(&[",,;;=\"\\"]), Format::Text);
    }

    #[test]
    fn openmetrics_when_asked_for() {
        assert_eq!(
            format(&["application/openmetrics-text"]),
            Format::OpenMetrics
        );
        assert_eq!(
            format(&["application/openmetrics-text; version=1.0.0; charset=utf-8"]),
            Format::OpenMetrics
        );
        assert_eq!(
            format(&["Application/OpenMetrics-Text"]),
            Format::OpenMetrics
        );
        assert_eq!(format(&["application/*"]), Format::OpenMetrics);
        // Named beside a wildcard: the named one is more specific.
        assert_eq!(
            format(&["application/openmetrics-text, */*"]),
            Format::OpenMetrics
        );
        assert_eq!(
            format(&["*/*", "application/openmetrics-text"]),
            Format::OpenMetrics
        );
    }

    #[test]
    fn what_prometheus_servers_send() {
        // Prometheus 2.x.
        assert_eq!(
            format(&["application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"]),
            Format::OpenMetrics
        );
        // Prometheus 3.x, protobuf first (not served), then OpenMetrics.
        assert_eq!(
            format(&["application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.4,application/openmetrics-text;version=0.0.1;q=0.3,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.2,text/plain;version=0.0.4;q=0.1,*/*;q=0.1"]),
            Format::OpenMetrics
        );
        // A scrape configured for the text format first.
        assert_eq!(
            format(&[
                "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5"
            ]),
            Format::Text
        );
    }

    #[test]
    fn weights_decide() {
        assert_eq!(
            format(&["text/plain;q=0.9, application/openmetrics-text;q=0.8"]),
            Format::Text
        );
        assert_eq!(
            format(&["text/plain;q=0.1, application/openmetrics-text"]),
            Format::OpenMetrics
        );
        // Equal weights, equal specificity: the default.
        assert_eq!(
            format(&["application/openmetrics-text, text/plain"]),
            Format::Text
        );
        // q=0 refuses.
        assert_eq!(
            format(&["application/openmetrics-text;q=0, */*"]),
            Format::Text
        );
        assert_eq!(
            format(&["text/plain;q=0, application/openmetrics-text;q=0.001"]),
            Format::OpenMetrics
        );
        // Both refused: the default all the same.
        assert_eq!(
            format(&["text/plain;q=0, application/openmetrics-text;q=0"]),
            Format::Text
        );
    }

    #[test]
    fn unknown_versions_and_malformed_ranges_do_not_match() {
        assert_eq!(
            format(&["application/openmetrics-text;version=2.0.0"]),
            Format::Text
        );
        assert_eq!(
            format(&["application/openmetrics-text;version=\"1.0.0\""]),
            Format::OpenMetrics
        );
        // A bad weight drops the range.
        for q in ["2", "1.5", "0.1234", "x", "", "-0", "01"] {
            assert_eq!(
                format(&[&format!("application/openmetrics-text;q={q}")]),
                Format::Text,
                "q={q}"
            );
        }
        assert_eq!(format(&["*/openmetrics-text"]), Format::Text);
        assert_eq!(format(&["application/"]), Format::Text);
        // A comma inside a quoted parameter does not split the range.
        assert_eq!(
            format(&["application/openmetrics-text;x=\"a,text/plain\""]),
            Format::OpenMetrics
        );
    }

    #[test]
    fn weights_parse_as_rfc_9110_says() {
        assert_eq!(parse_q(b"1"), Some(1000));
        assert_eq!(parse_q(b"1.000"), Some(1000));
        assert_eq!(parse_q(b"1.001"), None);
        assert_eq!(parse_q(b"0"), Some(0));
        assert_eq!(parse_q(b"0.5"), Some(500));
        assert_eq!(parse_q(b"0.25"), Some(250));
        assert_eq!(parse_q(b"0.125"), Some(125));
        assert_eq!(parse_q(b"0."), Some(0));
        assert_eq!(parse_q(b".5"), None);
    }
}
