//! Accounting: where workers spend their time, what each class received,
//! and how long tasks wait to run.
//!
//! Workers account for themselves (the `account` module); [`Handle::stats`] gathers
//! what they published into a [`Stats`] snapshot, with the blocking pool's
//! figures beside them ([`BlockingStats`]) and the TCP read deliveries per
//! batch mode ([`DeliveryStats`], counted by `net::batch::deliveries`).
//!
//! This module holds the counters and the snapshot's types, and reads
//! nothing of the scheduler: the scheduler gathers the snapshot
//! (`sched::gather`), so the dependency runs one way.
//!
//! [`Handle::stats`]: crate::Handle::stats

pub(crate) mod account;
mod snapshot;
pub(crate) mod thread_cpu;

pub use snapshot::{
    BlockingStats, ClassStats, Deliveries, DeliveryStats, DozeStats, IoDriverStats, LaneStats,
    QueueDelay, SizingStats, Stats, TokioStats, WorkerStats,
};
