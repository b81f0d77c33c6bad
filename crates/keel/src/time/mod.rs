//! Time: [`sleep()`], [`sleep_until()`], [`timeout()`] and [`interval()`] on a
//! hierarchical timer wheel.
//!
//! Timers have a resolution of one millisecond and never fire early. They
//! are fired by the workers themselves: on every poll a worker compares the
//! earliest deadline with the time it already read, and one parked worker
//! at a time sleeps only until the earliest deadline, so an idle runtime
//! still fires its timers without a timer thread.
//!
//! # Parking with timers (see `sched::worker`)
//!
//! A worker reads the earliest deadline only *after* it has registered as
//! parked (a `SeqCst` step, then a fence), and a task that files a new
//! earliest timer publishes it, fences, then wakes the watching worker or
//! notifies one: the same Dekker pairing as `sched::idle`, so a deadline is
//! never missed by a worker going to sleep. One parked worker at a time
//! watches the earliest deadline (a timed park, later the reactor's poll
//! timeout); the others sleep without a timeout, so timers do not wake a
//! herd.

pub(crate) mod driver;
mod interval;
mod sleep;
mod timeout;
pub(crate) mod wheel;

pub use interval::{interval, Interval};
pub use sleep::{sleep, sleep_until, Sleep};
pub use timeout::{timeout, Elapsed, Timeout};
