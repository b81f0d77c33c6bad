//! The two text formats `/metrics` answers in, written from one model of
//! the families.
//!
//! - The Prometheus text format 0.0.4, the default: what every Prometheus
//!   tool reads (promtool's linter, exporters' scrapers, Prometheus itself
//!   without negotiation). A counter family is named with its `_total`
//!   suffix (`# TYPE keel_class_polls_total counter`), units are part of
//!   the name only, and there is no end marker.
//! - OpenMetrics 1.0.0, when the client asks for it (see `negotiate`):
//!   written by `prometheus-client`'s encoder. A counter family is named
//!   without the suffix its samples carry, units are declared with
//!   `# UNIT`, and `# EOF` ends the text.
//!
//! Fed the other's text, each reader errs: a 0.0.4 parser takes an
//! OpenMetrics counter's `_total` samples for a family of their own,
//! without help or type (promtool's "no help text"). So the model below,
//! not either text, is what both are written from, and the same samples
//! appear in both with the same names, labels and values.
//!
//! `prometheus-client` writes only OpenMetrics, so the 0.0.4 writer is
//! here; it follows the format's rules: `# HELP` escapes `\` and line
//! feeds, label values also `"`, floats are written as Go's `ParseFloat`
//! reads them (`+Inf`, `-Inf`, `NaN` for the non-finite), histogram
//! buckets are cumulative with `le` bounds written as OpenMetrics writes
//! them, so that a series keeps its labels whichever format was scraped.

use std::fmt::{self, Write};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The prefix of every family's name.
const PREFIX: &str = "keel";

/// A format `/metrics` answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0.0 text.
    OpenMetrics,
}

impl Format {
    /// The `content-type` of an answer in this format.
    pub(super) fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// One metric family: its name without the prefix and unit, which the
/// writers add.
#[derive(Debug)]
pub(super) struct Family {
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    pub(super) unit: Option<Unit>,
    pub(super) kind: Kind,
    pub(super) samples: Vec<Sample>,
}

/// The units families are named with.
#[derive(Debug, Clone, Copy)]
pub(super) enum Unit {
    Seconds,
    Bytes,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Seconds => "seconds",
            Unit::Bytes => "bytes",
        }
    }
}

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Gauge,
    Counter,
    Histogram,
}

/// One sample (a labelled series) of a family.
#[derive(Debug)]
pub(super) struct Sample {
    pub(super) labels: Vec<(&'static str, String)>,
    pub(super) value: Value,
}

/// A sample's value.
#[derive(Debug)]
pub(super) enum Value {
    Int(u64),
    Float(f64),
    /// Buckets as `(upper bound, count in that bucket alone)`, ascending,
    /// the last bound `f64::INFINITY`; the sum of the observations and
    /// their count.
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
}

/// `families` as the text of `format`.
pub(super) fn encode(families: Vec<Family>, format: Format) -> Result<String, fmt::Error> {
    let mut text = String::with_capacity(16 * 1024);
    match format {
        Format::Text => encode_text(&families, &mut text)?,
        Format::OpenMetrics => {
            let mut registry = Registry::with_prefix(PREFIX);
            registry.register_collector(Box::new(Families(families)));
            prometheus_client::encoding::text::encode(&mut text, &registry)?;
        }
    }
    Ok(text)
}

/// The full name of a family in the text format 0.0.4: prefix, name,
/// unit, and `_total` for counters.
fn text_name(family: &Family) -> String {
    let mut name = format!("{PREFIX}_{}", family.name);
    if let Some(unit) = family.unit {
        name.push('_');
        name.push_str(unit.as_str());
    }
    if family.kind == Kind::Counter {
        name.push_str("_total");
    }
    name
}

fn encode_text(families: &[Family], out: &mut String) -> fmt::Result {
    for family in families {
        // As `prometheus-client` does: a family without samples is left out.
        if family.samples.is_empty() {
            continue;
        }
        let name = text_name(family);
        out.push_str("# HELP ");
        out.push_str(&name);
        out.push(' ');
        escape(out, family.help, false);
        out.push('\n');
        let kind = match family.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        };
        writeln!(out, "# TYPE {name} {kind}")?;
        for sample in &family.samples {
            match &sample.value {
                Value::Int(value) => {
                    sample_line(out, &name, "", &sample.labels, None)?;
                    writeln!(out, " {value}")?;
                }
                Value::Float(value) => {
                    sample_line(out, &name, "", &sample.labels, None)?;
                    out.push(' ');
                    float(out, *value);
                    out.push('\n');
                }
                Value::Histogram {
                    buckets,
                    sum,
                    count,
                } => {
                    let mut cumulative = 0u64;
                    for &(bound, n) in buckets {
                        cumulative += n;
                        let mut le = String::new();
                        float(&mut le, bound);
                        sample_line(out, &name, "_bucket", &sample.labels, Some(&le))?;
                        writeln!(out, " {cumulative}")?;
                    }
                    sample_line(out, &name, "_sum", &sample.labels, None)?;
                    out.push(' ');
                    float(out, *sum);
                    out.push('\n');
                    sample_line(out, &name, "_count", &sample.labels, None)?;
                    writeln!(out, " {count}")?;
                }
            }
        }
    }
    Ok(())
}

/// A sample's name and labels (`le` last, if given), up to its value.
fn sample_line(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(&'static str, String)],
    le: Option<&str>,
) -> fmt::Result {
    out.push_str(name);
    out.push_str(suffix);
    if labels.is_empty() && le.is_none() {
        return Ok(());
    }
    out.push('{');
    let le = le.map(|le| ("le", le));
    let all = labels.iter().map(|(k, v)| (*k, v.as_str())).chain(le);
    for (i, (key, value)) in all.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(key);
        out.push_str("=\"");
        escape(out, value, true);
        out.push('"');
    }
    out.push('}');
    Ok(())
}

/// Escapes `\` and line feeds, and `"` if `quotes` (label values, and
/// OpenMetrics help texts).
fn escape(out: &mut String, text: &str, quotes: bool) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// A float as both formats write it.
fn float(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value == f64::INFINITY {
        out.push_str("+Inf");
    } else if value == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        out.push_str(dtoa::Buffer::new().format(value));
    }
}

/// The families, as `prometheus-client` collects them for OpenMetrics.
#[derive(Debug)]
struct Families(Vec<Family>);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        for family in &self.0 {
            if family.samples.is_empty() {
                continue;
            }
            let unit = family.unit.map(|unit| match unit {
                Unit::Seconds => prometheus_client::registry::Unit::Seconds,
                Unit::Bytes => prometheus_client::registry::Unit::Bytes,
            });
            let kind = match family.kind {
                Kind::Gauge => MetricType::Gauge,
                Kind::Counter => MetricType::Counter,
                Kind::Histogram => MetricType::Histogram,
            };
            // The encoder writes help texts and label values as they are:
            // they are escaped here (OpenMetrics escapes `"` in both).
            let mut help = String::new();
            escape(&mut help, family.help, true);
            let metric = encoder.encode_descriptor(family.name, &help, unit.as_ref(), kind)?;
            match family.samples.as_slice() {
                // Encoded as a family of label sets, a sample without
                // labels would be written with an empty `{}`.
                [only] if only.labels.is_empty() => encode_value(metric, &only.value, family.kind)?,
                samples => {
                    let mut metric = metric;
                    for sample in samples {
                        let labels: Vec<(&str, String)> = sample
                            .labels
                            .iter()
                            .map(|(key, value)| {
                                let mut escaped = String::with_capacity(value.len());
                                escape(&mut escaped, value, true);
                                (*key, escaped)
                            })
                            .collect();
                        let labelled = metric.encode_family(&labels)?;
                        encode_value(labelled, &sample.value, family.kind)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// One sample's value, through `prometheus-client`'s encoder.
fn encode_value(mut metric: MetricEncoder<'_>, value: &Value, kind: Kind) -> fmt::Result {
    match (value, kind) {
        (&Value::Int(v), Kind::Counter) => ConstCounter::new(v).encode(metric),
        (&Value::Float(v), Kind::Counter) => ConstCounter::new(v).encode(metric),
        (&Value::Int(v), _) => ConstGauge::new(v).encode(metric),
        (&Value::Float(v), _) => ConstGauge::new(v).encode(metric),
        (
            Value::Histogram {
                buckets,
                sum,
                count,
            },
            _,
        ) => {
            // The encoder writes `f64::MAX` as `+Inf`.
            let buckets: Vec<(f64, u64)> = buckets
                .iter()
                .map(|&(bound, n)| (if bound.is_finite() { bound } else { f64::MAX }, n))
                .collect();
            metric.encode_histogram::<NoLabelSet>(*sum, *count, &buckets, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn families() -> Vec<Family> {
        vec![
            Family {
                name: "polls",
                help: "Polls, with a \\ and\na line feed.",
                unit: None,
                kind: Kind::Counter,
                samples: vec![
                    Sample {
                        labels: vec![("class", "urgent".into())],
                        value: Value::Int(7),
                    },
                    Sample {
                        labels: vec![("class", "a \"quoted\"\\name\n".into())],
                        value: Value::Int(0),
                    },
                ],
            },
            Family {
                name: "uptime",
                help: "Uptime.",
                unit: Some(Unit::Seconds),
                kind: Kind::Gauge,
                samples: vec![Sample {
                    labels: vec![],
                    value: Value::Float(1.5),
                }],
            },
            Family {
                name: "empty",
                help: "Left out.",
                unit: None,
                kind: Kind::Gauge,
                samples: vec![],
            },
            Family {
                name: "delay",
                help: "Delays.",
                unit: Some(Unit::Seconds),
                kind: Kind::Histogram,
                samples: vec![Sample {
                    labels: vec![("class", "bulk".into())],
                    value: Value::Histogram {
                        buckets: vec![(1e-6, 1), (0.5, 2), (f64::INFINITY, 3)],
                        sum: 2.25,
                        count: 6,
                    },
                }],
            },
        ]
    }

    #[test]
    fn the_text_format_names_counters_with_their_suffix() {
        let text = encode(families(), Format::Text).unwrap();
        let expected = "\
# HELP keel_polls_total Polls, with a \\\\ and\\na line feed.
# TYPE keel_polls_total counter
keel_polls_total{class=\"urgent\"} 7
keel_polls_total{class=\"a \\\"quoted\\\"\\\\name\\n\"} 0
# HELP keel_uptime_seconds Uptime.
# TYPE keel_uptime_seconds gauge
keel_uptime_seconds 1.5
# HELP keel_delay_seconds Delays.
# TYPE keel_delay_seconds histogram
keel_delay_seconds_bucket{class=\"bulk\",le=\"0.000001\"} 1
keel_delay_seconds_bucket{class=\"bulk\",le=\"0.5\"} 3
keel_delay_seconds_bucket{class=\"bulk\",le=\"+Inf\"} 6
keel_delay_seconds_sum{class=\"bulk\"} 2.25
keel_delay_seconds_count{class=\"bulk\"} 6
";
        assert_eq!(text, expected);
    }

    #[test]
    fn openmetrics_names_counters_by_family_and_ends_with_eof() {
        let text = encode(families(), Format::OpenMetrics).unwrap();
        assert!(text.contains("# TYPE keel_polls counter\n"), "{text}");
        assert!(
            text.contains("# HELP keel_polls Polls, with a \\\\ and\\na line feed.\n"),
            "{text}"
        );
        assert!(
            text.contains("keel_polls_total{class=\"a \\\"quoted\\\"\\\\name\\n\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("keel_polls_total{class=\"urgent\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("# UNIT keel_uptime_seconds seconds\n"),
            "{text}"
        );
        assert!(
            text.contains("keel_delay_seconds_bucket{le=\"0.000001\",class=\"bulk\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("keel_delay_seconds_bucket{le=\"+Inf\",class=\"bulk\"} 6\n"),
            "{text}"
        );
        assert!(!text.contains("keel_empty"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn floats_are_written_as_prometheus_reads_them() {
        let mut out = String::new();
        for value in [
            0.0,
            1.0,
            1e-6,
            2.5e-3,
            1e21,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ] {
            float(&mut out, value);
            out.push(' ');
        }
        assert_eq!(out, "0.0 1.0 0.000001 0.0025 1e21 +Inf -Inf NaN ");
    }
}
