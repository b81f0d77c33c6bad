//! The S5 log node on tokio, in the three ways a tokio user writes it.
//!
//! - `per-record`: each record is written and `fdatasync`ed on
//!   `spawn_blocking`, the textbook advice. Syncs from different tasks
//!   overlap in the kernel, so this is faster than it sounds.
//! - `group`: the tasks hand records to one committer task over a channel;
//!   the committer takes what is pending, up to 1024 records (`MAX_BATCH`,
//!   so a slow disk cannot grow one batch without bound), writes the batch
//!   and syncs once on `spawn_blocking`, then answers every record of it;
//!   whatever is left waits for the next batch. This is the group commit
//!   a careful tokio user builds by hand, and the fair peer for keel's
//!   `wal::Log`.
//! - `inline`: the write and the sync run inside the async task and block
//!   its worker, the mistake of seed 004.
//!
//! All three write length-prefixed records to one append-only file
//! (`tokio.log` in the node's directory) and acknowledge a record only
//! after the sync that covers it has returned. The echo service is S1's.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::node_tokio::{accept_echo, bind, tokio_stats_json, Guard, TokioNode};
use super::s5::{frame, log_accept_loop, LogCounters, LogMode, S5Opts, Sink};
use super::Running;
use crate::error::Error;

/// Records the group committer takes in one batch at most, so one batch
/// cannot grow without bound while the disk is slow.
const MAX_BATCH: usize = 1024;

/// Starts the tokio S5 node.
pub fn start(opts: &S5Opts) -> Result<Running, Error> {
    let rt = super::node_tokio::runtime(opts.workers)?;
    std::fs::create_dir_all(&opts.dir)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", opts.dir.display())))?;
    let path = opts.dir.join("tokio.log");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| Error::new(format!("cannot open {}: {e}", path.display())))?;
    let counters = Arc::new(LogCounters::default());
    let store = Arc::new(Store {
        file,
        next_lsn: Mutex::new(1),
        counters: Arc::clone(&counters),
    });

    let (echo, addr) = bind(&rt, opts.addr)?;
    let (log, log_addr) = bind(&rt, opts.log_addr)?;

    let sink = match opts.mode {
        LogMode::PerRecord => Durability::PerRecord(Arc::clone(&store)),
        LogMode::Inline => Durability::Inline(Arc::clone(&store)),
        LogMode::Group => {
            let (tx, rx) = mpsc::unbounded_channel();
            rt.spawn(committer(Arc::clone(&store), rx));
            Durability::Group(tx)
        }
    };
    rt.spawn(accept_echo(echo));
    rt.spawn(log_accept_loop::<TokioNode, _>(
        log,
        sink,
        Arc::clone(&counters),
    ));

    let handle = rt.handle().clone();
    let runtime_stats = Box::new(move || {
        let mut value = tokio_stats_json(&handle);
        value["log"] = counters.to_json();
        value
    });
    Ok(Running {
        addr,
        log_addr: Some(log_addr),
        api_addr: None,
        admin_addr: None,
        startup: serde_json::json!({"mode": opts.mode, "file": path}),
        runtime_stats,
        guard: Box::new(Guard(Some(rt))),
    })
}

/// The append-only file and the LSN counter.
struct Store {
    /// The log file, opened for appending.
    file: File,
    /// The LSN the next written record gets; held while writing, so
    /// records land in LSN order.
    next_lsn: Mutex<u64>,
    /// What the node reports.
    counters: Arc<LogCounters>,
}

impl Store {
    /// Writes `records` (already framed, concatenated) holding `count`
    /// records; returns the LSN of the first.
    fn write(&self, bytes: &[u8], count: u64) -> io::Result<u64> {
        let mut next = self.next_lsn.lock().unwrap_or_else(|p| p.into_inner());
        (&self.file).write_all(bytes)?;
        let first = *next;
        *next += count;
        Ok(first)
    }

    /// `fdatasync`s the file. Not under the LSN lock, so syncs from
    /// different records overlap as they would in any tokio server.
    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()?;
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes and syncs one record; returns its LSN.
    fn append_one(&self, record: &[u8]) -> io::Result<u64> {
        let lsn = self.write(&frame(record), 1)?;
        self.sync()?;
        Ok(lsn)
    }
}

/// Where a connection task sends its records: how this node makes them
/// durable.
#[derive(Clone)]
enum Durability {
    /// `spawn_blocking` per record.
    PerRecord(Arc<Store>),
    /// Blocking calls in the task.
    Inline(Arc<Store>),
    /// To the committer task.
    Group(mpsc::UnboundedSender<(Vec<u8>, oneshot::Sender<io::Result<u64>>)>),
}

impl Sink for Durability {
    async fn append(&self, record: Vec<u8>) -> io::Result<u64> {
        match self {
            Self::PerRecord(store) => {
                let store = Arc::clone(store);
                tokio::task::spawn_blocking(move || store.append_one(&record))
                    .await
                    .map_err(io::Error::other)?
            }
            Self::Inline(store) => store.append_one(&record),
            Self::Group(tx) => {
                let (done, answer) = oneshot::channel();
                tx.send((record, done))
                    .map_err(|_| io::Error::other("the committer has stopped"))?;
                answer
                    .await
                    .map_err(|_| io::Error::other("the committer dropped the record"))?
            }
        }
    }
}

/// The group committer: takes the pending records, up to [`MAX_BATCH`] at
/// a time, writes and syncs them on `spawn_blocking`, answers each.
async fn committer(
    store: Arc<Store>,
    mut rx: mpsc::UnboundedReceiver<(Vec<u8>, oneshot::Sender<io::Result<u64>>)>,
) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let mut bytes = Vec::new();
        for (record, _) in &batch {
            bytes.extend_from_slice(&frame(record));
        }
        let count = batch.len() as u64;
        let writer = Arc::clone(&store);
        let result = tokio::task::spawn_blocking(move || {
            let first = writer.write(&bytes, count)?;
            writer.sync()?;
            Ok::<u64, io::Error>(first)
        })
        .await
        .map_err(io::Error::other)
        .and_then(|r| r);
        for (i, (_, done)) in batch.into_iter().enumerate() {
            let answer = match &result {
                Ok(first) => Ok(first + i as u64),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            };
            let _ = done.send(answer);
        }
    }
}
