//! The S5 log node on keel: `wal::Log` behind the log service.
//!
//! Connection tasks (the log service written once, `s5::log_accept_loop`)
//! read a record, `append` it and answer with the LSN once the append's
//! future resolves, that is once the record is durable. They never touch
//! the disk themselves: the log's writer thread takes
//! every pending record, writes them at once and syncs once per batch,
//! so the workers stay free for the echo service, which is S1's.
//!
//! Two settings matter here, each the one a keel user would choose for
//! such a node (the first differs from the defaults, the second keeps
//! one):
//!
//! - The log connections run in the `bulk` class and the echo service in
//!   `normal`: log traffic is the bulk work here, and a ping that wakes
//!   while several log tasks are queued is picked first (classes share
//!   the CPU by shares, so when both are busy the log still gets 50 of
//!   the 83 shares in play, some 60% of it, and all of it when the echo
//!   service is idle).
//! - Workers do not spin before parking (the default, kept on purpose):
//!   the node shares its cores with the load generator, and a worker
//!   that spins takes from the clients the CPU they need to send the
//!   next record. Measured here, spinning
//!   raised the loaded ping p99 by about a third at the same record rate.

use std::future::Future;
use std::io;
use std::sync::Arc;

use keel::wal::{Log, Options, Recovery};
use serde_json::{json, Value};

use super::node_keel::{accept_echo, bind, stats_json, KeelNode};
use super::s5::{log_accept_loop, LogCounters, LogMode, S5Opts, Sink};
use super::Running;
use crate::error::Error;

/// Starts the keel S5 node.
pub fn start(opts: &S5Opts) -> Result<Running, Error> {
    if opts.mode != LogMode::Group {
        return Err(Error::usage(format!(
            "keel serves S5 with --mode group (wal::Log) only, not {}",
            opts.mode
        )));
    }
    let rt = super::node_keel::runtime(opts.workers, Some(keel::SpinPolicy::None), opts.io)?;
    // Opened by a task of the log's class, so that on the io_uring driver
    // the writer is a task of that class whose batches go to the ring.
    let dir = opts.dir.clone();
    let log = rt
        .block_on(rt.spawn_in(keel::Class::BULK, async move { open_log(&dir) }))
        .map_err(|e| Error::new(format!("opening the log: {e}")))??;
    let startup = json!({"mode": opts.mode, "recovery": recovery_json(log.recovery())});

    let (echo, addr) = bind(&rt, opts.addr)?;
    let (listener, log_addr) = bind(&rt, opts.log_addr)?;

    let counters = Arc::new(LogCounters::default());
    rt.spawn(accept_echo(echo));
    // The accept loop's class is its connections' class: `spawn` keeps
    // the class of the task that calls it.
    rt.spawn_in(
        keel::Class::BULK,
        log_accept_loop::<KeelNode, Log>(listener, log.clone(), Arc::clone(&counters)),
    );

    let handle = rt.handle().clone();
    let stats_log = log.clone();
    let runtime_stats = Box::new(move || {
        let mut value = stats_json(&handle.stats());
        let mut log_counters = counters.to_json();
        let log_stats = stats_log.stats();
        log_counters["syncs"] = json!(log_stats.batches);
        log_counters["write_s"] = json!(log_stats.write_time.as_secs_f64());
        log_counters["sync_s"] = json!(log_stats.sync_time.as_secs_f64());
        log_counters["regroups"] = json!(log_stats.regroups);
        log_counters["regroups_expired"] = json!(log_stats.regroups_expired);
        log_counters["writer_on_ring"] = json!(log_stats.writer_on_ring);
        value["log"] = log_counters;
        value
    });
    Ok(Running {
        addr,
        log_addr: Some(log_addr),
        api_addr: None,
        admin_addr: None,
        startup,
        runtime_stats,
        // The runtime stops first, then the log writes what is pending and
        // its writer is joined.
        guard: Box::new((rt, log)),
    })
}

/// Opens the node's log in `dir` with the default options, its writer on
/// the ring where the calling runtime's driver is io_uring.
pub fn open_log(dir: &std::path::Path) -> Result<Log, Error> {
    Log::open(dir, Options::default().writer_on_ring(true))
        .map_err(|e| Error::new(format!("cannot open the log in {}: {e}", dir.display())))
}

/// What opening the log found, for the address line.
pub fn recovery_json(recovery: &Recovery) -> Value {
    json!({
        "records": recovery.records,
        "segments": recovery.segments,
        "dropped_bytes": recovery.dropped_bytes,
        "torn_tail": recovery.torn_tail.as_ref().map(|tail| json!({
            "segment": tail.segment,
            "offset": tail.offset,
            "bytes": tail.bytes,
            "reason": tail.reason.to_string(),
        })),
    })
}

/// keel's log as the node's [`Sink`]: a record is durable when its
/// `append` resolves.
impl Sink for Log {
    fn append(&self, record: Vec<u8>) -> impl Future<Output = io::Result<u64>> + Send {
        let append = Log::append(self, &record);
        async move { append.await.map(|lsn| lsn.get()) }
    }
}
