//! The S1 server on keel.
//!
//! PLACEHOLDER: keel's networking (`keel::net::TcpListener`) is not part of
//! this build yet, so [`start`] only reports that. The real server replaces
//! the body of [`start`] and nothing else: the harness, the control
//! protocol and the report already treat both runtimes alike.
//!
//! What the real one must do, to mirror `s1_tokio` exactly:
//! - build a keel runtime with `opts.workers` workers;
//! - bind `opts.addr` and spawn an accept loop with one task per
//!   connection that sets `TCP_NODELAY`, reads up to 64 KiB and writes it
//!   all back until end of stream;
//! - spawn `opts.cpu_tasks` tasks that loop forever:
//!   `cpu::slice(opts.slice_iters)`, `slices.fetch_add(1, Relaxed)`,
//!   `keel::yield_now().await`;
//! - return a [`Running`] with the bound address, as `runtime_stats` a
//!   closure over a `keel::Handle` returning `stats_json(&handle.stats())`,
//!   and the `keel::Runtime` itself as the guard.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Running, S1Opts};
use crate::error::Error;

/// Starts the keel S1 server (see [`super::S1Start`]).
///
/// PLACEHOLDER: always fails until keel's networking is merged.
pub fn start(opts: &S1Opts, slices: Arc<AtomicU64>) -> Result<Running, Error> {
    let _ = (opts, slices);
    Err(Error::new(
        "the keel S1 server is not available in this build",
    ))
}

/// keel's own accounting as the `runtime` field of a `mark` answer.
///
/// Counters are cumulative since the runtime was built, so the harness can
/// difference the two marks around a measured window. Durations are in
/// seconds (`_s`) or microseconds (`_us`), as the report's metric names.
#[cfg_attr(not(test), allow(dead_code))] // used by the real `start`
pub fn stats_json(stats: &keel::stats::Stats) -> Value {
    let secs = |d: Duration| d.as_secs_f64();
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    let workers: Vec<Value> = stats
        .workers
        .iter()
        .map(|w| {
            json!({
                "index": w.index,
                "busy_s": secs(w.busy()),
                "search_s": secs(w.search),
                "spin_s": secs(w.spin),
                "parked_s": secs(w.parked),
                "timers_s": secs(w.timers),
                "wall_s": secs(w.wall()),
                "polls": w.polls.iter().sum::<u64>(),
            })
        })
        .collect();
    let classes: Vec<Value> = stats
        .classes
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "shares": c.shares,
                "busy_s": secs(c.busy),
                "polls": c.polls,
                "queue_delay_count": c.queue_delay.count(),
                "queue_delay_p50_us": micros(c.queue_delay.p50()),
                "queue_delay_p99_us": micros(c.queue_delay.p99()),
                "queue_delay_max_us": micros(c.queue_delay.max()),
            })
        })
        .collect();
    json!({
        "elapsed_s": secs(stats.elapsed),
        "pending_timers": stats.pending_timers,
        "workers": workers,
        "classes": classes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The placeholder says plainly that keel's server is missing.
    #[test]
    fn placeholder_reports_clearly() {
        let opts = S1Opts {
            workers: 1,
            cpu_tasks: 0,
            slice_iters: 1,
            addr: "127.0.0.1:0".parse().unwrap(),
        };
        let error = start(&opts, Arc::new(AtomicU64::new(0))).unwrap_err();
        assert!(error.to_string().contains("not available in this build"));
    }

    /// The accounting JSON of a real keel runtime has one entry per worker
    /// and per class, with the documented field names.
    #[test]
    fn stats_json_shape() {
        let rt = keel::Runtime::builder().workers(1).build().unwrap();
        rt.block_on(async { keel::yield_now().await });
        let value = stats_json(&rt.stats());
        assert!(value["elapsed_s"].as_f64().unwrap() >= 0.0);
        assert_eq!(value["workers"].as_array().unwrap().len(), 1);
        assert!(value["workers"][0]["busy_s"].is_f64());
        let classes = value["classes"].as_array().unwrap();
        assert!(!classes.is_empty());
        assert!(classes[0]["name"].is_string());
        assert!(classes[0]["queue_delay_p99_us"].is_f64());
    }
}
