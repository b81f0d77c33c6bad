//! `Config`: the settled form of a [`Builder`](super::Builder), read by the
//! scheduler. Public names live on the builder; the scheduler depends only
//! on this.

use std::time::Duration;

/// One class: its name and its shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClassConfig {
    pub(crate) name: String,
    pub(crate) shares: u32,
}

/// Everything the scheduler needs to know, validated.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) workers: usize,
    /// io_uring instances of the workers' reactor, at least one.
    pub(crate) io_rings: usize,
    /// Each worker has a ring of its own, instead (see
    /// `Builder::io_ring_per_worker`).
    pub(crate) ring_per_worker: bool,
    pub(crate) classes: Vec<ClassConfig>,
    /// How long an idle worker busy-waits before it parks.
    pub(crate) spin: Duration,
    pub(crate) thread_name: String,
    pub(crate) stack_size: Option<usize>,
    /// Nanoseconds between two non-blocking reactor polls of busy workers.
    pub(crate) io_interval: u64,
    /// Task polls between two reactor polls of one worker.
    pub(crate) io_every: u32,
    /// Nanoseconds a task poll may run before its IO yields.
    pub(crate) task_quota: u64,
    /// IO operations per task poll.
    pub(crate) task_io_budget: u32,
    /// Nanoseconds a task poll may run before it counts as a stall.
    pub(crate) stall_threshold: u64,
    /// Whether workers keep their accounting (off only for the overhead
    /// benchmark; see `Builder::accounting`).
    pub(crate) accounting: bool,
    /// Whether polls are charged without the time the kernel preempted
    /// their worker (see `Builder::charge_on_cpu`).
    pub(crate) charge_on_cpu: bool,
    /// The urgent lane, if the runtime has one (see `Builder::urgent_lane`).
    pub(crate) urgent_lane: Option<crate::UrgentLane>,
    /// The blocking pool's limits.
    pub(crate) blocking: crate::blocking::pool::BlockingConfig,
    /// Worker threads of the tokio side; 0 for none (see
    /// `Builder::tokio_threads`).
    #[cfg_attr(not(feature = "tokio-context"), allow(dead_code))]
    pub(crate) tokio_threads: usize,
    /// The tokio side runs on the workers (see `Builder::tokio_on_workers`).
    #[cfg_attr(not(feature = "tokio-context"), allow(dead_code))]
    pub(crate) tokio_on_workers: bool,
    /// The IO driver asked for (see `Builder::io_backend`).
    pub(crate) io_backend: crate::io::IoBackend,
    /// TCP reads complete on the ring (see `Builder::ring_receives`).
    pub(crate) ring_receives: bool,
    /// Why `workers` and `spin` are what they are, for `Stats`.
    pub(crate) sizing: crate::stats::SizingStats,
}

impl Config {
    /// The name of `class`, if this runtime has it.
    pub(crate) fn class_name(&self, class: crate::Class) -> Option<&str> {
        self.classes.get(class.index()).map(|c| c.name.as_str())
    }
}
