//! `/metrics`: a [`Stats`] snapshot and the endpoint's own counters as
//! metric families, written in the format the client asked for (see
//! `exposition`).

use std::fmt;
use std::time::Duration;

use super::exposition::{self, Family, Format, Kind, Sample, Unit, Value};
use super::report::process_cpu;
use super::Shared;
use crate::stats::{QueueDelay, Stats};

/// Upper bounds of the queue-delay histogram's buckets, in seconds; a
/// `+Inf` bucket follows.
const DELAY_BUCKETS: [f64; 21] = [
    1e-6, 2.5e-6, 5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0,
];

/// The text of `stats` and the endpoint's own figures, in `format`.
pub(super) fn encode(shared: &Shared, stats: Stats, format: Format) -> Result<String, fmt::Error> {
    exposition::encode(families(shared, &stats), format)
}

/// One family of one unlabelled sample.
fn single(
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: Kind,
    value: Value,
) -> Family {
    Family {
        name,
        help,
        unit,
        kind,
        samples: vec![Sample {
            labels: Vec::new(),
            value,
        }],
    }
}

/// One family of labelled samples.
fn labelled(
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: Kind,
    samples: impl IntoIterator<Item = (Vec<(&'static str, String)>, Value)>,
) -> Family {
    Family {
        name,
        help,
        unit,
        kind,
        samples: samples
            .into_iter()
            .map(|(labels, value)| Sample { labels, value })
            .collect(),
    }
}

fn seconds(duration: Duration) -> Value {
    Value::Float(duration.as_secs_f64())
}

fn count(n: impl TryInto<u64>) -> Value {
    Value::Int(n.try_into().unwrap_or(u64::MAX))
}

/// The queue-delay histogram: buckets of [`DELAY_BUCKETS`] and `+Inf`.
fn delay_histogram(delay: &QueueDelay) -> Value {
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
        .chain([f64::INFINITY])
        .zip(counts)
        .collect();
    let count = delay.count();
    Value::Histogram {
        buckets,
        sum: delay.histogram.mean() * count as f64 / 1e9,
        count,
    }
}

/// Every family, in the order the module docs list them.
fn families(shared: &Shared, stats: &Stats) -> Vec<Family> {
    use Kind::{Counter, Gauge, Histogram};
    let mut families = vec![
        single(
            "uptime",
            "Time since the runtime was built.",
            Some(Unit::Seconds),
            Gauge,
            seconds(stats.elapsed),
        ),
        single(
            "workers",
            "Worker threads.",
            None,
            Gauge,
            count(stats.workers.len()),
        ),
        single(
            "live_tasks",
            "Tasks spawned and not yet finished.",
            None,
            Gauge,
            count(shared.handle.live_tasks()),
        ),
        single(
            "pending_timers",
            "Timers filed and not yet fired or cancelled.",
            None,
            Gauge,
            count(stats.pending_timers),
        ),
        labelled(
            "worker_state",
            "Wall time each worker spent in each state; a worker's states add up to its wall time, and utilization is (task + io + timers) / wall.",
            Some(Unit::Seconds),
            Counter,
            stats.workers.iter().flat_map(|w| {
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
                        vec![("worker", worker.clone()), ("state", state.to_owned())],
                        seconds(time),
                    )
                })
            }),
        ),
        labelled(
            "worker_park_cpu",
            "CPU time each worker's thread used while parked: going to sleep and waking up, which no state's wall time shows.",
            Some(Unit::Seconds),
            Counter,
            stats
                .workers
                .iter()
                .map(|w| (vec![("worker", w.index.to_string())], seconds(w.park_cpu))),
        ),
        labelled(
            "worker_rescues",
            "Times each worker took tasks queued on a sibling that had not changed state for 1 ms (preempted by the kernel, or blocked in a poll).",
            None,
            Counter,
            stats
                .workers
                .iter()
                .map(|w| (vec![("worker", w.index.to_string())], count(w.rescues))),
        ),
        labelled(
            "worker_io_looks",
            "Times each worker looked at the reactor without blocking, between task polls or before it parks.",
            None,
            Counter,
            stats
                .workers
                .iter()
                .map(|w| (vec![("worker", w.index.to_string())], count(w.io_looks))),
        ),
    ];
    let class = |name: &str| vec![("class", name.to_owned())];
    families.extend([
        labelled(
            "class_wall",
            "Wall time the polls of each class's tasks took on their workers, from each poll's start to its end, preemption and blocking included.",
            Some(Unit::Seconds),
            Counter,
            stats
                .classes
                .iter()
                .map(|c| (class(&c.name), seconds(c.busy))),
        ),
        labelled(
            "class_charged",
            "What the shares charged each class: its wall time less the time the kernel preempted the workers inside its polls, where the workers measure that.",
            Some(Unit::Seconds),
            Counter,
            stats
                .classes
                .iter()
                .map(|c| (class(&c.name), seconds(c.charged))),
        ),
        // The same samples under the old name, kept for one release so
        // that dashboards and alerts can move.
        labelled(
            "class_cpu",
            "Deprecated, use keel_class_wall_seconds (the same samples): a class is charged its polls' wall time, not CPU time. This family goes away in the next release.",
            Some(Unit::Seconds),
            Counter,
            stats
                .classes
                .iter()
                .map(|c| (class(&c.name), seconds(c.busy))),
        ),
        labelled(
            "class_polls",
            "Polls of each class's tasks.",
            None,
            Counter,
            stats
                .classes
                .iter()
                .map(|c| (class(&c.name), count(c.polls))),
        ),
        labelled(
            "class_stalls",
            "Polls of each class's tasks that ran past the stall threshold.",
            None,
            Counter,
            stats
                .classes
                .iter()
                .map(|c| (class(&c.name), count(c.stalls))),
        ),
        labelled(
            "class_shares",
            "Each class's configured shares of worker time.",
            None,
            Gauge,
            stats
                .classes
                .iter()
                .map(|c| (class(&c.name), count(c.shares))),
        ),
        labelled(
            "class_queue_delay",
            "How long each class's tasks waited between being woken and being polled.",
            Some(Unit::Seconds),
            Histogram,
            stats
                .classes
                .iter()
                .map(|c| (class(&c.name), delay_histogram(&c.queue_delay))),
        ),
    ]);
    let blocking = &stats.blocking;
    families.extend([
        single(
            "blocking_threads",
            "Blocking-pool threads alive.",
            None,
            Gauge,
            count(blocking.threads),
        ),
        single(
            "blocking_idle_threads",
            "Blocking-pool threads waiting for a job.",
            None,
            Gauge,
            count(blocking.idle),
        ),
        single(
            "blocking_queued_jobs",
            "Blocking jobs accepted and not yet started.",
            None,
            Gauge,
            count(blocking.queued),
        ),
        single(
            "blocking_waiting_callers",
            "Callers of unblock waiting for room in the blocking pool.",
            None,
            Gauge,
            count(blocking.waiting),
        ),
        single(
            "blocking_completed_jobs",
            "Blocking closures that ran to their end.",
            None,
            Counter,
            count(blocking.completed),
        ),
        single(
            "blocking_rejected_jobs",
            "Blocking jobs refused because the pool was full.",
            None,
            Counter,
            count(blocking.rejected),
        ),
        single(
            "blocking_busy",
            "Wall time blocking-pool threads spent running closures, summed over threads.",
            Some(Unit::Seconds),
            Counter,
            seconds(blocking.busy),
        ),
    ]);
    if let Some(tokio) = &stats.tokio {
        families.extend([
            single(
                "tokio_workers",
                "Worker threads of the runtime's tokio side.",
                None,
                Gauge,
                count(tokio.workers),
            ),
            single(
                "tokio_threads",
                "Threads of the tokio side alive, workers and blocking threads.",
                None,
                Gauge,
                count(tokio.threads),
            ),
            single(
                "tokio_alive_tasks",
                "Tasks alive on the tokio side: what libraries spawned with tokio::spawn, outside keel's classes.",
                None,
                Gauge,
                count(tokio.alive_tasks),
            ),
            single(
                "tokio_busy",
                "Time the tokio side's workers spent busy, summed over them, as tokio counts it.",
                Some(Unit::Seconds),
                Counter,
                seconds(tokio.busy),
            ),
            single(
                "tokio_cpu",
                "CPU time of the tokio side's threads, those that exited included.",
                Some(Unit::Seconds),
                Counter,
                seconds(tokio.cpu),
            ),
        ]);
    }
    if let Some(lane) = &stats.lane {
        families.extend([
            single(
                "lane_polls",
                "Polls of urgent tasks on the urgent lane's thread.",
                None,
                Counter,
                count(lane.polls),
            ),
            single(
                "lane_wall",
                "Wall time of the urgent lane's polls.",
                Some(Unit::Seconds),
                Counter,
                seconds(lane.busy),
            ),
            single(
                "lane_charged",
                "What the urgent class was charged for the lane's polls: their wall time less the time the kernel preempted the lane inside them.",
                Some(Unit::Seconds),
                Counter,
                seconds(lane.charged),
            ),
            single(
                "lane_cpu",
                "CPU time of the urgent lane's thread (its thread clock).",
                Some(Unit::Seconds),
                Counter,
                seconds(lane.cpu),
            ),
            single(
                "lane_throttled",
                "Times the urgent lane spent its budget and waited for the next window.",
                None,
                Counter,
                count(lane.throttled),
            ),
        ]);
    }
    let modes = [
        ("off", stats.deliveries.off),
        ("fixed", stats.deliveries.fixed),
        ("adaptive", stats.deliveries.adaptive),
    ];
    let mode = |name: &str| vec![("mode", name.to_owned())];
    families.extend([
        labelled(
            "tcp_deliveries",
            "Reads of TCP streams that returned data, per batch mode.",
            None,
            Counter,
            modes.map(|(name, d)| (mode(name), count(d.count))),
        ),
        labelled(
            "tcp_delivered",
            "Bytes those TCP reads returned, per batch mode.",
            Some(Unit::Bytes),
            Counter,
            modes.map(|(name, d)| (mode(name), count(d.bytes))),
        ),
    ]);
    if let Some((user, system)) = process_cpu() {
        families.push(labelled(
            "process_cpu",
            "CPU time of the whole process, from getrusage, per mode.",
            Some(Unit::Seconds),
            Counter,
            [
                (mode("user"), seconds(user)),
                (mode("system"), seconds(system)),
            ],
        ));
    }
    let slots = &shared.slots;
    families.extend([
        single(
            "admin_connections",
            "Connections holding a slot of the admin endpoint: being answered or waiting for a request head.",
            None,
            Gauge,
            count(slots.open()),
        ),
        single(
            "admin_rejected_connections",
            "Connections the admin endpoint refused with 503: every slot was answering a request.",
            None,
            Counter,
            count(slots.refused()),
        ),
        single(
            "admin_evicted_connections",
            "Connections the admin endpoint closed to make room for a newer one while they waited for a request head (stalled half-sent heads first).",
            None,
            Counter,
            count(slots.evicted()),
        ),
    ]);
    families
}
