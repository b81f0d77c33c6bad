//! Time: timers on a hierarchical wheel.
//!
//! Status: the wheel (`wheel.rs`) is here and tested against a model; the
//! driver that fires it from the worker loop, and the public `sleep`,
//! `sleep_until`, `timeout` and `interval`, come with the reactor, which
//! shares their schedule and their parking. Until then the module is
//! compiled for its tests only.
//!
//! # How the driver will be wired (the plan the wheel is built for)
//!
//! - Resolution: one tick is 1 ms. A timer due at `d` ns is filed at tick
//!   `ceil(d / tick)` and the wheel is advanced to `floor(now / tick)`, so
//!   it can never fire early; a `Sleep` also checks the clock itself.
//! - Firing: workers advance the wheel on the IO schedule (every
//!   `io_interval` of CPU time or `io_every` polls) and after parking.
//! - Parking: a worker reads the earliest deadline only *after* it has
//!   registered as parked (a `SeqCst` step, then a fence), and a task that
//!   files a new earliest timer publishes it, fences, then notifies: the
//!   same Dekker pairing as `sched::idle`, so a deadline is never missed by
//!   a worker going to sleep. One parked worker at a time watches the
//!   earliest deadline (by a timed park, later by the epoll timeout); the
//!   others sleep without a timeout, so timers do not wake a herd.

#[cfg(test)]
mod wheel;
