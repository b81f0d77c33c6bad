//! S5, the log node: what its variants share, and its log service
//! written once over [`Node`].
//!
//! A log node serves two things: an echo service (the ping client of S1
//! measures it) and a log service where each client sends a record and
//! waits for its acknowledgement. The node acknowledges a record only once
//! it is durable (written and `fdatasync`ed), so the acknowledgement is a
//! promise that survives `kill -9`; `keel-bench bench s5 --crash` holds every
//! variant that claims it to that promise.
//!
//! # Wire protocol of the log service
//!
//! A request is a record: its length as a little-endian `u32`, then that
//! many bytes (at most [`MAX_RECORD`]). The answer is the record's LSN as a
//! little-endian `u64`, sent after the record is durable. A node that
//! cannot make a record durable closes the connection instead of
//! answering, so a client never mistakes a failure for an acknowledgement.
//!
//! # What differs between the nodes
//!
//! Only how a record is made durable, the [`Sink`]: keel's `wal::Log`
//! (`s5_keel`), and on tokio the group committer a careful user writes by
//! hand, a sync per record on the blocking pool, or the blocking mistake
//! (`s5_tokio`). The connection's service ([`log_accept_loop`]) and the
//! echo beside it are the same code on both.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::node::{accept_each, Node};

/// The largest record the log service accepts, bytes. A bigger length
/// prefix is a protocol error and closes the connection, so a garbage
/// prefix cannot make the node allocate gigabytes.
pub const MAX_RECORD: usize = 1 << 20;

/// Bytes a log connection reads ahead, in both nodes: a record and its
/// length prefix in one system call.
pub const READ_BUFFER: usize = 8 * 1024;

/// What makes a record durable on a node: its log.
pub trait Sink: Clone + Send + Sync + 'static {
    /// Makes `record` durable and returns its LSN; an error means it may
    /// not be, and the connection is closed unanswered.
    fn append(&self, record: Vec<u8>) -> impl Future<Output = io::Result<u64>> + Send;
}

/// Accepts log clients forever, one task each, their records going to
/// `sink`.
pub async fn log_accept_loop<N: Node, S: Sink>(
    listener: N::Listener,
    sink: S,
    counters: Arc<LogCounters>,
) {
    accept_each::<N, _, _>(listener, move |stream, _| {
        serve_log::<N, S>(stream, sink.clone(), Arc::clone(&counters))
    })
    .await
}

/// Serves one log client: record in, LSN out once durable.
async fn serve_log<N: Node, S: Sink>(mut stream: N::Stream, sink: S, counters: Arc<LogCounters>) {
    let _ = N::set_nodelay(&stream);
    let mut records = Records::default();
    loop {
        let record = match records.next::<N>(&mut stream).await {
            Ok(record) => record,
            Err(Ended::Closed) => return,
            Err(Ended::Refused(why)) => {
                eprintln!("keel serve: closing a log client: {why}");
                return;
            }
        };
        match sink.append(record).await {
            Ok(lsn) => {
                counters.acked.fetch_add(1, Ordering::Relaxed);
                if N::write_all(&mut stream, &lsn.to_le_bytes()).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                eprintln!("keel serve: a record failed, closing its client: {error}");
                return;
            }
        }
    }
}

/// Why a connection has no next record.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The client closed it (possibly mid-record), or a read failed.
    Closed,
    /// The client broke the protocol: why.
    Refused(String),
}

/// A log connection's bytes, read [`READ_BUFFER`] at a time and cut into
/// records, so that a record and its length prefix take one read, not
/// two.
#[derive(Default)]
struct Records {
    /// Bytes read; those before `taken` were taken as records.
    pending: Vec<u8>,
    /// How many bytes of `pending` were taken. They are dropped when more
    /// bytes arrive, once a read rather than once a record.
    taken: usize,
}

impl Records {
    /// The bytes read and not yet taken as a record.
    fn unread(&self) -> &[u8] {
        &self.pending[self.taken..]
    }

    /// Adds `bytes` after the unread ones.
    fn extend(&mut self, bytes: &[u8]) {
        self.pending.drain(..self.taken);
        self.taken = 0;
        self.pending.extend_from_slice(bytes);
    }

    /// The next whole record among the unread bytes, if one is there; a
    /// length over [`MAX_RECORD`] is refused before anything is allocated
    /// for it.
    fn take(&mut self) -> Result<Option<Vec<u8>>, Ended> {
        let unread = self.unread();
        let Some(prefix) = unread.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = check_len(*prefix).map_err(Ended::Refused)?;
        let Some(record) = unread.get(4..4 + len) else {
            return Ok(None);
        };
        let record = record.to_vec();
        self.taken += 4 + len;
        Ok(Some(record))
    }

    /// Reads until a whole record is there, and takes it.
    async fn next<N: Node>(&mut self, stream: &mut N::Stream) -> Result<Vec<u8>, Ended> {
        let mut chunk = [0u8; READ_BUFFER];
        loop {
            if let Some(record) = self.take()? {
                return Ok(record);
            }
            match N::read(stream, &mut chunk).await {
                Ok(0) | Err(_) => return Err(Ended::Closed),
                Ok(n) => self.extend(&chunk[..n]),
            }
        }
    }
}

/// How a node makes records durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogMode {
    /// Group commit: one `fdatasync` covers the records pending at the
    /// time, up to a cap on the batch (keel: `wal::Log`, whose batch holds
    /// at most what fits in one segment; tokio: one committer task that
    /// takes at most 1024 records a batch and runs each batch on
    /// `spawn_blocking`). Records past the cap wait for the next batch.
    Group,
    /// One `spawn_blocking` write and `fdatasync` per record (tokio).
    PerRecord,
    /// The write and `fdatasync` called inside the async task, blocking
    /// its worker (tokio): the failure of seed 004.
    Inline,
}

impl LogMode {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Group => "group",
            Self::PerRecord => "per-record",
            Self::Inline => "inline",
        }
    }
}

impl std::fmt::Display for LogMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What an S5 node is asked to run.
#[derive(Debug, Clone)]
pub struct S5Opts {
    /// Worker threads of the runtime.
    pub workers: usize,
    /// Where the echo service binds.
    pub addr: SocketAddr,
    /// Where the log service binds.
    pub log_addr: SocketAddr,
    /// The directory that holds the log (created if missing).
    pub dir: PathBuf,
    /// How records are made durable.
    pub mode: LogMode,
    /// keel's IO driver (tokio ignores it).
    pub io: keel::io::IoBackend,
}

/// Counters every variant keeps, reported in each `mark` answer under
/// `log`, cumulative since start.
#[derive(Debug, Default)]
pub struct LogCounters {
    /// Records acknowledged (durable and answered).
    pub acked: AtomicU64,
    /// `fdatasync` calls made.
    pub syncs: AtomicU64,
    /// Records that failed to become durable (their connection was
    /// closed without an answer).
    pub failed: AtomicU64,
}

impl LogCounters {
    /// The counters as the `log` object of a mark.
    pub fn to_json(&self) -> Value {
        json!({
            "acked": self.acked.load(Ordering::Relaxed),
            "syncs": self.syncs.load(Ordering::Relaxed),
            "failed": self.failed.load(Ordering::Relaxed),
        })
    }
}

/// Frames `record` for the log service: length prefix, then the bytes.
pub fn frame(record: &[u8]) -> Vec<u8> {
    let len = u32::try_from(record.len()).expect("records are at most MAX_RECORD bytes");
    let mut out = Vec::with_capacity(4 + record.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(record);
    out
}

/// Checks a record's length prefix, naming the problem if it is refused.
pub fn check_len(prefix: [u8; 4]) -> Result<usize, String> {
    let len = u32::from_le_bytes(prefix) as usize;
    if len > MAX_RECORD {
        return Err(format!(
            "a record of {len} bytes is over the limit of {MAX_RECORD}"
        ));
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records are taken whole however the reads split them, an empty
    /// record among them; a length over the limit is refused.
    #[test]
    fn records_are_cut_from_the_bytes_however_they_arrive() {
        let mut records = Records::default();
        let mut wire = frame(b"first");
        wire.extend_from_slice(&frame(b""));
        wire.extend_from_slice(&frame(b"third"));
        let mut taken = Vec::new();
        for byte in wire {
            records.extend(&[byte]);
            while let Some(record) = records.take().unwrap() {
                taken.push(record);
            }
        }
        assert_eq!(taken, [b"first".to_vec(), Vec::new(), b"third".to_vec()]);
        assert!(records.unread().is_empty());
        // Many records and a part of the next in one read, the rest after.
        let mut wire = frame(b"one");
        wire.extend_from_slice(&frame(b"two"));
        wire.extend_from_slice(&frame(b"three"));
        records.extend(&wire[..wire.len() - 2]);
        assert_eq!(records.take().unwrap(), Some(b"one".to_vec()));
        assert_eq!(records.take().unwrap(), Some(b"two".to_vec()));
        assert_eq!(records.take().unwrap(), None);
        records.extend(&wire[wire.len() - 2..]);
        assert_eq!(records.take().unwrap(), Some(b"three".to_vec()));
        assert!(records.unread().is_empty());
        records.extend(&(MAX_RECORD as u32 + 1).to_le_bytes());
        assert!(matches!(records.take(), Err(Ended::Refused(_))));
    }

    /// A framed record starts with its little-endian length.
    #[test]
    fn frames_with_a_length_prefix() {
        let framed = frame(b"abc");
        assert_eq!(framed, [3, 0, 0, 0, b'a', b'b', b'c']);
        assert_eq!(check_len([3, 0, 0, 0]), Ok(3));
    }

    /// A length over the limit is refused, not allocated.
    #[test]
    fn refuses_oversized_lengths() {
        assert!(check_len(u32::MAX.to_le_bytes()).is_err());
        let limit = u32::try_from(MAX_RECORD).unwrap();
        assert_eq!(check_len(limit.to_le_bytes()), Ok(MAX_RECORD));
        assert!(check_len((limit + 1).to_le_bytes()).is_err());
    }

    /// Counters serialise under the names the harness reads.
    #[test]
    fn counters_json() {
        let counters = LogCounters::default();
        counters.acked.fetch_add(3, Ordering::Relaxed);
        let value = counters.to_json();
        assert_eq!(value["acked"], 3);
        assert_eq!(value["syncs"], 0);
        assert_eq!(value["failed"], 0);
    }
}
