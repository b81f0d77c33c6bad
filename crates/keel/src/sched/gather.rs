//! Gathers a [`Stats`] snapshot: what every worker published, the class
//! clocks' queue delays, the timers, the blocking pool and the delivery
//! counters, read at one instant.
//!
//! It lives with the scheduler, which owns all of those, so that the
//! accounting (`crate::stats`) holds counters and types and never reads
//! the scheduler back.

use std::time::Duration;

use super::Shared;
use crate::stats::account::Published;
use crate::stats::{ClassStats, QueueDelay, Stats, WorkerStats};

impl Shared {
    /// Builds a snapshot from every worker's publication.
    pub(crate) fn stats(&self) -> Stats {
        let shared = self;
        let read: Vec<(Published, u64)> = shared.metrics.iter().map(|m| m.read()).collect();
        // Taken after the reads, so no published instant lies in the future.
        let now = shared.clock.now();

        let workers = read
            .iter()
            .enumerate()
            .map(|(index, (p, current))| {
                // With the accounting off nothing is published, but the
                // state word is still kept for the scheduler: extending it
                // to `now` would show a worker's current state (a poll in
                // progress) as time accounted.
                let times = if shared.config.accounting {
                    p.times_at(*current, now)
                } else {
                    p.times.clone()
                };
                WorkerStats {
                    index,
                    started: Duration::from_nanos(p.started),
                    task: Published::task_ns(&times)
                        .iter()
                        .map(|&ns| Duration::from_nanos(ns))
                        .collect(),
                    search: Duration::from_nanos(Published::search_ns(&times)),
                    spin: Duration::from_nanos(Published::spin_ns(&times)),
                    parked: Duration::from_nanos(Published::parked_ns(&times)),
                    timers: Duration::from_nanos(Published::timers_ns(&times)),
                    io: Duration::from_nanos(Published::io_ns(&times)),
                    polls: p.polls.to_vec(),
                    cpu: Duration::from_nanos(p.cpu),
                    io_poll_gap_max: Duration::from_nanos(p.io_gap_max),
                    rescues: p.rescues,
                    io_looks: p.io_looks,
                    park_cpu: Duration::from_nanos(p.park_cpu),
                    preempted_in_polls: p.preempted_in_polls.map(Duration::from_nanos),
                }
            })
            .collect::<Vec<_>>();

        let lane = shared.lane.as_ref().map(super::urgent::Lane::stats);
        let classes = shared
            .config
            .classes
            .iter()
            .enumerate()
            .map(|(index, class)| {
                let histogram = shared.delays.read(index);
                // The lane's polls are the urgent class's too.
                let on_lane = lane.as_ref().filter(|_| super::urgent::Lane::serves(index));
                ClassStats {
                    name: class.name.clone(),
                    shares: class.shares,
                    busy: workers.iter().map(|w| w.task[index]).sum::<Duration>()
                        + on_lane.map_or(Duration::ZERO, |l| l.busy),
                    // From the same publications as `busy`, so a class is
                    // never shown charged more than its polls took.
                    charged: read
                        .iter()
                        .map(|(p, _)| Duration::from_nanos(p.charged[index]))
                        .sum::<Duration>()
                        + on_lane.map_or(Duration::ZERO, |l| l.charged),
                    polls: workers.iter().map(|w| w.polls[index]).sum::<u64>()
                        + on_lane.map_or(0, |l| l.polls),
                    stalls: read.iter().map(|(p, _)| p.stalls[index]).sum(),
                    queue_delay: QueueDelay { histogram },
                }
            })
            .collect();

        Stats {
            elapsed: Duration::from_nanos(now),
            workers,
            classes,
            pending_timers: shared.timer_driver.len(),
            blocking: shared.blocking.stats(),
            deliveries: shared.deliveries.snapshot(),
            lane,
            #[cfg(feature = "tokio-context")]
            tokio: shared
                .tokio
                .as_ref()
                .map(crate::runtime::tokio_side::TokioSide::stats),
            #[cfg(not(feature = "tokio-context"))]
            tokio: None,
            io: shared.reactor.stats(),
            sizing: shared.config.sizing.clone(),
            doze: shared.doze.stats(),
        }
    }
}
