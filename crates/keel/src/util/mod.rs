//! Small tools every part of the runtime uses and that depend on nothing
//! in it: the nanosecond clock ([`clock`]) and a cheap random generator
//! ([`rng`]).
//!
//! They sit at the bottom of the crate so that the scheduler, the timers,
//! the blocking pool and the accounting can share them without reaching
//! into each other.

pub(crate) mod clock;
pub(crate) mod preempt;
pub(crate) mod rng;
