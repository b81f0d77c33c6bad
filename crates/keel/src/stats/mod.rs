//! Accounting: where workers spend their time, what each class received,
//! and how long tasks wait to run.
//!
//! Workers account for themselves (the `account` module); [`Handle::stats`] gathers
//! what they published into a [`Stats`] snapshot, with the blocking pool's
//! figures beside them ([`BlockingStats`]) and the TCP read deliveries per
//! batch mode ([`DeliveryStats`], counted in the `deliveries` module).
//!
//! [`Handle::stats`]: crate::Handle::stats

pub(crate) mod account;
pub(crate) mod clock;
pub(crate) mod deliveries;
mod snapshot;

pub use snapshot::{
    BlockingStats, ClassStats, Deliveries, DeliveryStats, QueueDelay, Stats, WorkerStats,
};

use std::time::Duration;

use crate::sched::Shared;
use account::Published;

/// Builds a snapshot from every worker's publication.
pub(crate) fn snapshot(shared: &Shared) -> Stats {
    let classes = shared.config.classes.len();
    let read: Vec<(Published, u64)> = shared.metrics.iter().map(|m| m.read()).collect();
    // Taken after the reads, so no published instant lies in the future.
    let now = shared.clock.now();

    let workers = read
        .iter()
        .enumerate()
        .map(|(index, (p, current))| {
            let times = p.times_at(*current, now);
            WorkerStats {
                index,
                started: Duration::from_nanos(p.started),
                task: times[..classes]
                    .iter()
                    .map(|&ns| Duration::from_nanos(ns))
                    .collect(),
                search: Duration::from_nanos(Published::search_ns(&times)),
                spin: Duration::from_nanos(Published::spin_ns(&times)),
                parked: Duration::from_nanos(Published::parked_ns(&times)),
                timers: Duration::from_nanos(Published::timers_ns(&times)),
                io: Duration::from_nanos(Published::io_ns(&times)),
                polls: p.polls[..classes].to_vec(),
                cpu: Duration::from_nanos(p.cpu),
                io_poll_gap_max: Duration::from_nanos(p.io_gap_max),
                rescues: p.rescues,
                park_cpu: Duration::from_nanos(p.park_cpu),
            }
        })
        .collect::<Vec<_>>();

    let classes = shared
        .config
        .classes
        .iter()
        .enumerate()
        .map(|(index, class)| {
            let histogram = shared.delays.read(index);
            ClassStats {
                name: class.name.clone(),
                shares: class.shares,
                busy: workers.iter().map(|w| w.task[index]).sum(),
                polls: workers.iter().map(|w| w.polls[index]).sum(),
                stalls: read.iter().map(|(p, _)| p.stalls[index]).sum(),
                queue_delay: QueueDelay { histogram },
            }
        })
        .collect();

    Stats {
        elapsed: Duration::from_nanos(now),
        workers,
        classes,
        pending_timers: shared.timers.len(),
        blocking: shared.blocking.stats(),
        deliveries: shared.reactor.deliveries.snapshot(),
    }
}
