//! `/metrics`: a [`Stats`] snapshot as Prometheus families, through
//! `prometheus-client`'s OpenMetrics text encoder.

use std::fmt;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
    MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::report::process_cpu;
use super::Shared;
use crate::stats::{QueueDelay, Stats};

/// Upper bounds of the queue-delay histogram's buckets, in seconds; a
/// `+Inf` bucket follows.
const DELAY_BUCKETS: [f64; 21] = [
    1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0,
];

/// The OpenMetrics text of `stats` and the endpoint's own figures.
pub(super) fn encode(shared: &Shared, stats: Stats) -> Result<String, fmt::Error> {
    let mut registry = Registry::with_prefix("keel");
    registry.register_collector(Box::new(Snapshot {
        stats,
        live_tasks: shared.handle.live_tasks(),
        admin_open: shared.open.load(Ordering::Relaxed),
        admin_rejected: shared.rejected.load(Ordering::Relaxed),
        process: process_cpu(),
    }));
    let mut text = String::with_capacity(8 * 1024);
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

/// One scrape's figures; encoded once, then dropped with the registry.
#[derive(Debug)]
struct Snapshot {
    stats: Stats,
    live_tasks: usize,
    admin_open: usize,
    admin_rejected: u64,
    process: Option<(std::time::Duration, std::time::Duration)>,
}

/// Writes one family's descriptor, then `samples` writes its samples.
fn family(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    kind: MetricType,
    samples: impl FnOnce(MetricEncoder<'_>) -> fmt::Result,
) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, unit.as_ref(), kind)?;
    samples(metric)
}

/// A value of a sample: integers for counts, floats for seconds.
trait Value: EncodeCounterValue + EncodeGaugeValue + fmt::Debug {}

impl Value for u64 {}
impl Value for f64 {}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: impl Value,
) -> fmt::Result {
    family(encoder, name, help, unit, MetricType::Gauge, |m| {
        ConstGauge::new(value).encode(m)
    })
}

fn counter(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: impl Value,
) -> fmt::Result {
    family(encoder, name, help, unit, MetricType::Counter, |m| {
        ConstCounter::new(value).encode(m)
    })
}

/// Samples of one labelled family.
fn labelled<S: EncodeLabelSet, V: Value>(
    mut metric: MetricEncoder<'_>,
    samples: impl IntoIterator<Item = (S, V)>,
    kind: MetricType,
) -> fmt::Result {
    for (labels, value) in samples {
        let sample = metric.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(value).encode(sample)?,
            _ => ConstGauge::new(value).encode(sample)?,
        }
    }
    Ok(())
}

/// The queue-delay histogram's `(upper bound, count)` pairs, not
/// cumulative, ending with `+Inf` (`f64::MAX` to the encoder), with the
/// sum in seconds and the count.
fn delay_buckets(delay: &QueueDelay) -> (Vec<(f64, u64)>, f64, u64) {
    let mut counts = vec![0u64; DELAY_BUCKETS.len() + 1];
    for value in delay.histogram.iter_recorded() {
        let seconds = value.value_iterated_to() as f64 / 1e9;
        let bucket = DELAY_BUCKETS
            .iter()
            .position(|&bound| seconds <= bound)
            .unwrap_or(DELAY_BUCKETS.len());
        counts[bucket] += value.count_at_value();
    }
    let buckets = DELAY_BUCKETS
        .iter()
        .copied()
        .chain([f64::MAX])
        .zip(counts)
        .collect();
    let count = delay.count();
    let sum = delay.histogram.mean() * count as f64 / 1e9;
    (buckets, sum, count)
}

impl Collector for Snapshot {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let e = &mut encoder;
        let stats = &self.stats;
        gauge(
            e,
            "uptime",
            "Time since the runtime was built.",
            Some(Unit::Seconds),
            stats.elapsed.as_secs_f64(),
        )?;
        gauge(
            e,
            "workers",
            "Worker threads.",
            None,
            stats.workers.len() as u64,
        )?;
        gauge(
            e,
            "live_tasks",
            "Tasks spawned and not yet finished.",
            None,
            self.live_tasks as u64,
        )?;
        gauge(
            e,
            "pending_timers",
            "Timers filed and not yet fired or cancelled.",
            None,
            stats.pending_timers as u64,
        )?;

        family(
            e,
            "worker_state",
            "Wall time each worker spent in each state; a worker's states add up to its wall time, and utilization is (task + io + timers) / wall.",
            Some(Unit::Seconds),
            MetricType::Counter,
            |m| {
                let samples = stats.workers.iter().flat_map(|w| {
                    let worker = w.index.to_string();
                    [
                        ("task", w.busy()),
                        ("io", w.io),
                        ("timers", w.timers),
                        ("search", w.search),
                        ("spin", w.spin),
                        ("parked", w.parked),
                    ]
                    .map(|(state, time)| {
                        (
                            [("worker", worker.clone()), ("state", state.to_owned())],
                            time.as_secs_f64(),
                        )
                    })
                });
                labelled(m, samples, MetricType::Counter)
            },
        )?;

        family(
            e,
            "worker_park_cpu",
            "CPU time each worker's thread used while parked: going to sleep and waking up, which no state's wall time shows.",
            Some(Unit::Seconds),
            MetricType::Counter,
            |m| {
                let samples = stats.workers.iter().map(|w| {
                    (
                        [("worker", w.index.to_string())],
                        w.park_cpu.as_secs_f64(),
                    )
                });
                labelled(m, samples, MetricType::Counter)
            },
        )?;

        family(
            e,
            "worker_rescues",
            "Times each worker took tasks queued on a sibling that had not changed state for 1 ms (preempted by the kernel, or blocked in a poll).",
            None,
            MetricType::Counter,
            |m| {
                let samples = stats
                    .workers
                    .iter()
                    .map(|w| ([("worker", w.index.to_string())], w.rescues));
                labelled(m, samples, MetricType::Counter)
            },
        )?;

        let classes = || stats.classes.iter().map(|c| c.name.clone());
        family(
            e,
            "class_cpu",
            "Worker time the polls of each class's tasks took: what the shares divide.",
            Some(Unit::Seconds),
            MetricType::Counter,
            |m| {
                let samples = classes()
                    .zip(&stats.classes)
                    .map(|(name, c)| ([("class", name)], c.busy.as_secs_f64()));
                labelled(m, samples, MetricType::Counter)
            },
        )?;
        family(
            e,
            "class_polls",
            "Polls of each class's tasks.",
            None,
            MetricType::Counter,
            |m| {
                let samples = classes()
                    .zip(&stats.classes)
                    .map(|(name, c)| ([("class", name)], c.polls));
                labelled(m, samples, MetricType::Counter)
            },
        )?;
        family(
            e,
            "class_stalls",
            "Polls of each class's tasks that ran past the stall threshold.",
            None,
            MetricType::Counter,
            |m| {
                let samples = classes()
                    .zip(&stats.classes)
                    .map(|(name, c)| ([("class", name)], c.stalls));
                labelled(m, samples, MetricType::Counter)
            },
        )?;
        family(
            e,
            "class_shares",
            "Each class's configured shares of worker time.",
            None,
            MetricType::Gauge,
            |m| {
                let samples = classes()
                    .zip(&stats.classes)
                    .map(|(name, c)| ([("class", name)], u64::from(c.shares)));
                labelled(m, samples, MetricType::Gauge)
            },
        )?;
        family(
            e,
            "class_queue_delay",
            "How long each class's tasks waited between being woken and being polled.",
            Some(Unit::Seconds),
            MetricType::Histogram,
            |mut m| {
                for (name, c) in classes().zip(&stats.classes) {
                    let (buckets, sum, count) = delay_buckets(&c.queue_delay);
                    let labels = [("class", name)];
                    m.encode_family(&labels)?
                        .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
                }
                Ok(())
            },
        )?;

        let blocking = &stats.blocking;
        gauge(
            e,
            "blocking_threads",
            "Blocking-pool threads alive.",
            None,
            blocking.threads as u64,
        )?;
        gauge(
            e,
            "blocking_idle_threads",
            "Blocking-pool threads waiting for a job.",
            None,
            blocking.idle as u64,
        )?;
        gauge(
            e,
            "blocking_queued_jobs",
            "Blocking jobs accepted and not yet started.",
            None,
            blocking.queued as u64,
        )?;
        gauge(
            e,
            "blocking_waiting_callers",
            "Callers of unblock waiting for room in the blocking pool.",
            None,
            blocking.waiting as u64,
        )?;
        counter(
            e,
            "blocking_completed_jobs",
            "Blocking closures that ran to their end.",
            None,
            blocking.completed,
        )?;
        counter(
            e,
            "blocking_rejected_jobs",
            "Blocking jobs refused because the pool was full.",
            None,
            blocking.rejected,
        )?;
        counter(
            e,
            "blocking_busy",
            "Wall time blocking-pool threads spent running closures, summed over threads.",
            Some(Unit::Seconds),
            blocking.busy.as_secs_f64(),
        )?;

        let modes = [
            ("off", stats.deliveries.off),
            ("fixed", stats.deliveries.fixed),
            ("adaptive", stats.deliveries.adaptive),
        ];
        family(
            e,
            "tcp_deliveries",
            "Reads of TCP streams that returned data, per batch mode.",
            None,
            MetricType::Counter,
            |m| {
                let samples = modes.map(|(mode, d)| ([("mode", mode)], d.count));
                labelled(m, samples, MetricType::Counter)
            },
        )?;
        family(
            e,
            "tcp_delivered",
            "Bytes those TCP reads returned, per batch mode.",
            Some(Unit::Bytes),
            MetricType::Counter,
            |m| {
                let samples = modes.map(|(mode, d)| ([("mode", mode)], d.bytes));
                labelled(m, samples, MetricType::Counter)
            },
        )?;

        if let Some((user, system)) = self.process {
            family(
                e,
                "process_cpu",
                "CPU time of the whole process, from getrusage, per mode.",
                Some(Unit::Seconds),
                MetricType::Counter,
                |m| {
                    let samples = [
                        ([("mode", "user")], user.as_secs_f64()),
                        ([("mode", "system")], system.as_secs_f64()),
                    ];
                    labelled(m, samples, MetricType::Counter)
                },
            )?;
        }

        gauge(
            e,
            "admin_connections",
            "Connections the admin endpoint is serving.",
            None,
            self.admin_open as u64,
        )?;
        counter(
            e,
            "admin_rejected_connections",
            "Connections the admin endpoint refused with 503, past its connection limit.",
            None,
            self.admin_rejected,
        )?;
        Ok(())
    }
}
