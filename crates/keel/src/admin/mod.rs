//! The built-in admin endpoint (feature `admin`): the runtime's own
//! figures over HTTP/1.1, served by the runtime it describes.
//!
//! ```
//! use keel::Runtime;
//!
//! let rt = Runtime::builder().workers(2).build().unwrap();
//! let admin = keel::admin::serve("127.0.0.1:0", rt.handle()).unwrap();
//! println!("admin endpoint on http://{}/status", admin.local_addr());
//! // ... run the server ...
//! admin.shutdown();
//! ```
//!
//! [`AdminOptions::serve_unix`] serves the same endpoint on a Unix domain
//! socket instead, for a host that keeps it off the network: only the
//! users that [`AdminOptions::unix_mode`] lets write the socket file
//! (default `0o600`, the owner) can connect.
//!
//! # Routes
//!
//! | route | answer |
//! |---|---|
//! | `GET /health` | `200`, `ok\n`: the runtime runs and polls the admin class |
//! | `GET /status` | `200`, a plain-text summary of a few hundred bytes: uptime, workers, live tasks, utilization and spin since start, each class's share of the poll time beside its configured share and its queue-delay p99, then the application's lines ([`AdminOptions::status_section`]) |
//! | `GET /stats` | `200`, a JSON snapshot (`application/json`); its fields are listed [below](#stats-json) |
//! | `GET /metrics` | `200`, the [Prometheus families](#metrics), built from a fresh [`Stats`](crate::stats::Stats) snapshot at each scrape, in the format the `Accept` header asks for: the Prometheus text format 0.0.4 by default (`text/plain; version=0.0.4; charset=utf-8`), OpenMetrics 1.0.0 when the client weighs `application/openmetrics-text` above it (`application/openmetrics-text; version=1.0.0; charset=utf-8`), as Prometheus servers do; see [Metrics](#metrics) |
//!
//! `HEAD` works wherever `GET` does. Other methods on these paths get
//! `405 Method Not Allowed` (with `allow: GET, HEAD`), other paths
//! `404 Not Found`; the query string is ignored. Connections are kept
//! alive between requests, as HTTP/1.1 does by default. A client may shut
//! down its sending side once its request is sent (as `nc -N` does) and
//! still reads the answer.
//!
//! # Why the urgent class
//!
//! The admin endpoint is the control plane: it is what an operator (or
//! Prometheus, or a load balancer's health check) asks when the server is
//! in trouble, and trouble usually means every worker is busy. Its tasks
//! (the accept loop and one task per connection) run in
//! [`Class::URGENT`] by default, so that under load they are picked ahead
//! of the bulk and normal queues whenever their class is behind on its
//! share, and a health check does not time out just because bulk work
//! fills the queues. This is a scheduling preference, not a hard bound: a
//! task already running keeps its worker until it yields or its coop budget
//! is spent, and the OS may preempt the worker itself. The class is a
//! knob ([`AdminOptions::class`]) so that a benchmark can run the endpoint
//! in [`Class::NORMAL`] and measure what the urgent class buys.
//!
//! # Limits, and what each protects against
//!
//! No client can hold a worker: every connection is a task that waits for
//! its socket's readiness, and a worker polls it only when there is input
//! to parse or room to write. What a misbehaving client can hold is a
//! connection slot, with its task and buffers; the limits bound those, so
//! the endpoint stays up when clients misbehave and never costs the server
//! it observes more than a bounded amount of memory and tasks:
//!
//! | knob | default | failure it prevents | what a client sees |
//! |---|---|---|---|
//! | [`max_connections`](AdminOptions::max_connections) | [16](DEFAULT_MAX_CONNECTIONS) | a flood of connections (or a leak in a scraper) growing tasks and memory without bound | past the limit, a connection waiting for a request head is closed to make room: a stalled half-sent head first, the longest waiting (see below); only if every slot is answering a request does the newcomer get `503 Service Unavailable` with `connection: close` |
//! | [`read_timeout`](AdminOptions::read_timeout) | [5 s](DEFAULT_READ_TIMEOUT) | a slow client (slowloris: a request head sent byte by byte, or an idle keep-alive connection) holding a connection slot forever; a client that stops reading answers | the whole request head must arrive within it, or the connection is closed without an answer; a write of the answer that makes no progress for as long also closes it |
//! | [`max_request_bytes`](AdminOptions::max_request_bytes) | [16 KiB](DEFAULT_MAX_REQUEST_BYTES) | a huge request head (or body) making the endpoint buffer without bound | a head larger than this: `431 Request Header Fields Too Large`; a declared body (`content-length`) larger than this: `413 Payload Too Large`; the connection is closed after either |
//!
//! A request that is not HTTP/1.x (garbage, a bad method, header or
//! version) gets `400 Bad Request` and the connection is closed.
//!
//! A head of more than 100 header fields also gets `431`, however
//! small: that is the most hyper's parser takes.
//!
//! The head limit answers 431, not 413, because hyper, which parses the
//! requests, answers an oversized head itself, with the status RFC 6585
//! defines for it; 413 is the status for a body that is too large, which
//! is what the endpoint answers for one.
//!
//! ## Hostile clients: who gets a slot
//!
//! The endpoint is what an operator reaches for when things go wrong, so
//! idle or incomplete connections must never lock it: the read timeout
//! alone would let 16 slowloris sockets shut it for 5 s at a time. So a
//! connection holding a slot is either *answering* (a whole request head
//! was read and its answer is not yet all written) or *waiting* (for its
//! first head, or for the next one on a kept-alive connection). A
//! connection that arrives when every slot is taken takes the slot of a
//! waiting one, which is closed without an answer (*evicted*): the
//! connection that has waited longest with part of a head sent and the
//! rest not (a stalled head, the slowloris mark); if no head is stalled,
//! the one that has waited longest having sent nothing (a new connection
//! whose client has not written yet, or a kept-alive one between
//! requests). Only when every slot is answering is the newcomer refused
//! with `503`. So a whole request is always answered unless
//! `max_connections` other requests are being answered at that moment,
//! however many idle, silent or half-sent connections there are: they
//! push each other out. An honest client can lose an idle kept-alive
//! connection this way, which HTTP clients reopen on their own.
//!
//! Eviction never cuts an answer, and looks before it closes: an evicted
//! connection reads what its client has sent once more, and a whole head
//! found then (sent just before the eviction, its readiness not yet
//! delivered) is answered before the connection closes. At most
//! `max_connections` such last looks run at once (they share the linger
//! permits below), so the endpoint never serves more than twice its
//! limit. The accept loop also admits at most half the slots' worth of
//! connections before it lets their tasks run, so a client that sends its
//! request with its connection is read before a burst of newer
//! connections could push it out.
//!
//! What was shed is counted: [`AdminServer::evicted_connections`] and
//! `keel_admin_evicted_connections_total`, [`AdminServer::rejected_connections`]
//! and `keel_admin_rejected_connections_total` (the `503`s).
//!
//! ## Closing without a reset
//!
//! Whenever the endpoint ends a connection it has answered (after an
//! error, or after an answer with `connection: close`) or refuses one
//! with `503`, it first shuts down its sending side and then reads and
//! discards what the client still sends, until the client closes or for
//! at most a second (and at most `read_timeout`): closing a socket with
//! unread input makes the kernel reset the connection, and a reset can
//! destroy the last answer before the client has read it. At most
//! `max_connections` connections linger so at once, apart from the slots;
//! past that a connection's input is discarded as far as it has arrived
//! and the socket closed at once, so a refused client still reads its
//! whole `503` followed by the end of the stream. An evicted connection
//! is owed no answer and is closed at once.
//!
//! Errors of `accept` (out of file descriptors, a connection reset before
//! it was accepted) never stop the endpoint: it logs them with `tracing`
//! and, when the process is out of descriptors or memory, pauses 100 ms
//! before accepting again, so the loop does not spin on a listener that
//! stays readable.
//!
//! # `/stats` JSON
//!
//! The document is [`StatsDocument`]: the endpoint serializes it, and a
//! client deserializes the answer into it (`keel top` does), which also
//! copes with servers older or newer than the client (see [its
//! docs](StatsDocument)). Pretty-printed, with the fields in the order
//! below.
//!
//! Names carry their unit as a suffix: `_s` seconds, `_us` microseconds,
//! `_pct` percent (0–100; per-worker and window figures are percent of
//! worker time, so they never exceed 100). Names without a suffix are
//! counts. Cumulative figures run from the runtime's start.
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `uptime_s` | number | time since the runtime was built |
//! | `workers` | integer | worker threads |
//! | `live_tasks` | integer | tasks spawned and not finished |
//! | `pending_timers` | integer | timers filed and not yet fired or cancelled |
//! | `utilization_pct` | number | (task + io + timers) / wall, all workers together, since the runtime started |
//! | `spin_pct` | number | spin / wall, all workers together, since the runtime started |
//! | `worker_states[]` | array | one object per worker, by index: |
//! | `worker_states[].worker` | integer | the worker's index |
//! | `worker_states[].wall_s` | number | the worker's accounted wall time (the sum of the states below) |
//! | `worker_states[].task_s` | number | polling tasks, all classes |
//! | `worker_states[].io_s`, `.timers_s`, `.search_s`, `.spin_s`, `.parked_s` | number | the other states (see [`WorkerStats`](crate::stats::WorkerStats)) |
//! | `worker_states[].utilization_pct` | number | (task + io + timers) / wall for this worker |
//! | `worker_states[].cpu_s` | number | CPU time the kernel charged to the worker's thread (see [`WorkerStats::cpu`](crate::stats::WorkerStats::cpu)) |
//! | `worker_states[].park_cpu_s` | number | CPU time the worker's thread used while parked, going to sleep and waking (see [`WorkerStats::park_cpu`](crate::stats::WorkerStats::park_cpu)) |
//! | `worker_states[].io_looks` | integer | times the worker looked at the reactor without blocking, between task polls or before it parks (see [`WorkerStats::io_looks`](crate::stats::WorkerStats::io_looks)) |
//! | `worker_states[].rescues` | integer | times the worker took tasks queued on a sibling stuck in one state for 1 ms (see [`WorkerStats::rescues`](crate::stats::WorkerStats::rescues)) |
//! | `worker_states[].io_poll_gap_max_us` | number | the longest the worker went between two looks at the reactor while it had work, since it started (see [`WorkerStats::io_poll_gap_max`](crate::stats::WorkerStats::io_poll_gap_max)) |
//! | `worker_states[].preempted_s` | number | time in on-CPU states the kernel did not run the worker (see [`WorkerStats::preempted`](crate::stats::WorkerStats::preempted)) |
//! | `worker_states[].polls` | integer | task polls on this worker, all classes |
//! | `worker_states[].preempted_in_polls_s` | number or null | time the kernel preempted the worker inside task polls, measured from its log of the worker's switches and left out of the classes' charges; null where the kernel refuses that log (see [`WorkerStats::preempted_in_polls`](crate::stats::WorkerStats::preempted_in_polls)) |
//! | `classes[]` | array | one object per class, by index: |
//! | `classes[].name`, `.index` | string, integer | the class |
//! | `classes[].shares` | integer | its configured shares |
//! | `classes[].configured_share_pct` | number | its shares over all classes' shares: the share of worker time it is owed when every class has work |
//! | `classes[].wall_s` | number | wall time its polls took on their workers, from each poll's start to its end (preemption and blocking included, so not CPU time) |
//! | `classes[].wall_share_pct` | number | its `wall_s` over all classes' `wall_s`: the share it received |
//! | `classes[].cpu_s` | number | **deprecated**, goes away in the next release: the same value as `wall_s`, under its old name |
//! | `classes[].cpu_share_pct` | number | **deprecated**, goes away in the next release: the same value as `wall_share_pct`, under its old name |
//! | `classes[].polls`, `.stalls` | integer | polls, and polls longer than the stall threshold |
//! | `classes[].charged_s` | number | what the shares divide: `wall_s` less the time the kernel preempted the workers inside its polls (equal to `wall_s` where the workers cannot measure that; see [`ClassStats::charged`](crate::stats::ClassStats::charged)) |
//! | `classes[].queue_delay` | object | wake → first poll: `count` (integer), `mean_us`, `p50_us`, `p90_us`, `p99_us`, `p999_us`, `max_us` (numbers) |
//! | `blocking` | object | the blocking pool: `threads`, `idle`, `queued`, `waiting`, `completed`, `rejected`, `max_threads`, `queue_capacity` (integers), `busy_s` (number); see [`BlockingStats`](crate::stats::BlockingStats) |
//! | `deliveries` | object | TCP read deliveries per batch mode: `off`, `fixed`, `adaptive`, each `{count, bytes}` (integers) |
//! | `admin` | object | this endpoint: `class` (string, the class the answering task ran in), `connections_open` (integer, connections holding a slot), `connections_rejected` (integer, 503s since it started), `connections_evicted` (integer, connections closed to make room since it started), `max_connections` (integer) |
//! | `since_start` | window | accounting against process CPU since the endpoint started ([`serve`] took a baseline) |
//! | `since_last` | window | the same since the previous `/stats` answer of this endpoint (the first: since it started) |
//! | `lane` | object or null | the urgent lane, when the runtime has one (see [`Builder::urgent_lane`](crate::Builder::urgent_lane)): `priority` (string, how it got ahead of the workers, and why not at real-time priority if that was refused), `polls`, `throttled` (integers), `busy_s`, `charged_s`, `cpu_s` (numbers; `cpu_s` is the lane thread's CPU clock) |
//! | `tokio` | object or null | the tokio side, when the runtime has one (see [`Builder::tokio_threads`](crate::Builder::tokio_threads)): `workers`, `threads`, `alive_tasks` (integers), `busy_s`, `cpu_s` (numbers) |
//! | `io` | object | the IO driver (see [`Builder::io_backend`](crate::Builder::io_backend)): `driver` (`epoll` or `io_uring`), `requested` (`auto`, `epoll`, `uring`), `fallback` (string or null: why `auto` runs on epoll), `operations_in_flight` (reads and file syncs the ring holds), `rings` (io_uring instances, 0 on epoll), `ring_per_worker` (boolean: each worker has a ring of its own), `glances` (with a ring per worker, the rings a worker glances at after every poll; 0 on epoll and on shared rings), `wait_errors` (waits of the driver the kernel refused; a blocking one with nothing to reap is slept off for 1 ms), `last_wait_error` (string or null: the last of them) |
//! | `doze` | object | parked workers' dozes (see [`DozeStats`](crate::stats::DozeStats)): `enabled` (boolean: parked workers may doze now), `dozes` (times a worker began to doze), `alarms` (times the alarm fired and woke at least one dozer), `alarm_error` (string or null: why workers may not doze where the runtime would have them doze, the kernel having refused the alarm's timer) |
//!
//! A class is charged the wall time of its polls less the time the kernel
//! preempted their workers inside them: a poll that blocks pays for all
//! the worker time it holds, but not for the time slices another thread
//! had. The workers' CPU time is `worker_states[].cpu_s` (their thread
//! clocks), and the windows below compare the two. The class figures
//! used to be named `cpu_s` and `cpu_share_pct`; the old names are still
//! written beside the new ones, with the same values, for one more
//! release.
//!
//! A *window* compares what the workers accounted with what the kernel
//! charged the process over the same span, so anyone can check that they
//! agree. Its fields:
//!
//! | field | type | meaning |
//! |---|---|---|
//! | `wall_s` | number | the span, by the runtime's clock |
//! | `worker_wall_s` | number | wall time the workers accounted in it, all workers together (about `wall_s` × workers) |
//! | `busy_s` | number | task + io + timers |
//! | `search_s`, `spin_s`, `parked_s` | number | the other worker states |
//! | `park_cpu_s` | number | CPU the worker threads used while parked: going to sleep and waking |
//! | `blocking_busy_s` | number | blocking-pool closures' run time ended in the span |
//! | `tokio_cpu_s` | number or null | CPU of the tokio side's threads in the span; `null` without a tokio side |
//! | `lane_cpu_s` | number or null | CPU of the urgent lane's thread in the span (its thread clock); `null` without a lane |
//! | `accounted_cpu_s` | number | busy + search + spin + park CPU + blocking + the tokio side's CPU + the lane's CPU: what should have cost CPU |
//! | `workers_cpu_s` | number | CPU the kernel charged to the worker threads (their thread clocks) |
//! | `preempted_s` | number | time the workers were in on-CPU states but the kernel ran something else: where `accounted_cpu_s` exceeds what they really got |
//! | `process_user_s`, `process_system_s`, `process_cpu_s` | number or null | `getrusage(RUSAGE_SELF)` user, system and their sum; `null` where it is unavailable |
//! | `utilization_pct` | number | `busy_s` / `worker_wall_s` |
//! | `spin_pct` | number | `spin_s` / `worker_wall_s` |
//! | `accounted_cpu_pct` | number | `accounted_cpu_s` / `worker_wall_s` |
//! | `workers_cpu_pct` | number | `workers_cpu_s` / `worker_wall_s` |
//! | `process_cpu_pct` | number or null | `process_cpu_s` / `worker_wall_s`: comparable with `accounted_cpu_pct`; it also counts threads that are not workers nor the blocking pool, such as `block_on`'s caller |
//! | `host_cpu_s`, `host_steal_s` | number or null | the host's CPU time in the span (every CPU and state, idle included) and the part the hypervisor gave to other guests, from `/proc/stat`; `null` where it is unavailable |
//! | `host_steal_pct` | number or null | `host_steal_s` / `host_cpu_s`, sar's `%steal`: on a virtual machine, time the workers' wall-clock accounting counts as theirs although no CPU ran them; `utilization_pct` compares with sar's user + system + steal |
//!
//! `since_last` is shared by every client of one endpoint: two clients
//! polling `/stats` shorten each other's windows. A benchmark that wants
//! one clean window reads `since_start`, or two `/stats` answers and takes
//! the second one's `since_last`.
//!
//! # Metrics
//!
//! Every family is prefixed `keel_`, has a HELP text, and names its unit.
//! The two formats carry the same samples, with the same names, labels and
//! values; they differ in how families are declared:
//!
//! | | Prometheus text 0.0.4 (default) | OpenMetrics 1.0.0 (when asked) |
//! |---|---|---|
//! | `content-type` | `text/plain; version=0.0.4; charset=utf-8` | `application/openmetrics-text; version=1.0.0; charset=utf-8` |
//! | a counter family | `# TYPE keel_class_polls_total counter` | `# TYPE keel_class_polls counter` |
//! | its samples | `keel_class_polls_total{class="urgent"} 12` | the same |
//! | units | in the name only | in the name, and `# UNIT` |
//! | end | the last sample | `# EOF` |
//!
//! Which one a request gets: the text format unless the `Accept` header
//! weighs `application/openmetrics-text` (version 1.0.0, 0.0.1 or none)
//! above `text/plain`, by its `q` and then by the more specific match
//! (RFC 9110); Prometheus servers ask for OpenMetrics first, `curl` and
//! most other tools send `*/*`. An `Accept` that allows neither still
//! gets the text format. Answers carry `vary: accept`. Each format is
//! what every reader of it accepts (`promtool check metrics` reads the
//! text format; Prometheus scrapes either): neither reader accepts the
//! other's counters, which is why the format is negotiated rather than
//! fixed.
//!
//! The table names each family as OpenMetrics declares it; the text
//! format declares counters with their `_total`.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `keel_uptime_seconds` | gauge | |
//! | `keel_workers` | gauge | |
//! | `keel_live_tasks` | gauge | |
//! | `keel_pending_timers` | gauge | |
//! | `keel_worker_state_seconds` | counter | `worker`, `state` (`task`, `io`, `timers`, `search`, `spin`, `parked`) |
//! | `keel_worker_park_cpu_seconds` | counter | `worker` |
//! | `keel_worker_rescues` | counter | `worker` |
//! | `keel_worker_io_looks` | counter | `worker` |
//! | `keel_class_wall_seconds` | counter | `class`; wall time of the class's polls |
//! | `keel_class_charged_seconds` | counter | `class`; what the shares divide: the wall time less the time the kernel preempted the workers inside the polls (see `Builder::charge_on_cpu`) |
//! | `keel_class_cpu_seconds` | counter | `class`; **deprecated**, goes away in the next release: the same samples as `keel_class_wall_seconds`, under its old name |
//! | `keel_class_polls` | counter | `class` |
//! | `keel_class_stalls` | counter | `class` |
//! | `keel_class_shares` | gauge | `class` |
//! | `keel_class_queue_delay_seconds` | histogram | `class` (buckets 1 µs to 5 s) |
//! | `keel_blocking_threads`, `keel_blocking_idle_threads`, `keel_blocking_queued_jobs`, `keel_blocking_waiting_callers` | gauge | |
//! | `keel_blocking_completed_jobs`, `keel_blocking_rejected_jobs` | counter | |
//! | `keel_blocking_busy_seconds` | counter | |
//! | `keel_tokio_workers`, `keel_tokio_threads`, `keel_tokio_alive_tasks` | gauge | only with a tokio side (see [`Builder::tokio_threads`](crate::Builder::tokio_threads)) |
//! | `keel_tokio_busy_seconds`, `keel_tokio_cpu_seconds` | counter | the same; busy as tokio counts it, CPU from the threads' clocks |
//! | `keel_lane_polls`, `keel_lane_throttled` | counter | only with an urgent lane (see [`Builder::urgent_lane`](crate::Builder::urgent_lane)): urgent polls on the lane, and times it spent its budget |
//! | `keel_lane_wall_seconds`, `keel_lane_charged_seconds`, `keel_lane_cpu_seconds` | counter | the same; its polls' wall time, what the urgent class was charged for them, the lane thread's CPU |
//! | `keel_tcp_deliveries` | counter | `mode` (`off`, `fixed`, `adaptive`) |
//! | `keel_tcp_delivered_bytes` | counter | `mode` |
//! | `keel_process_cpu_seconds` | counter | `mode` (`user`, `system`); from `getrusage` |
//! | `keel_admin_connections` | gauge | |
//! | `keel_admin_rejected_connections` | counter | |
//! | `keel_admin_evicted_connections` | counter | |
//!
//! The queue-delay histogram is rebuilt at each scrape from the runtime's
//! own histogram, which has 1% resolution: a delay is counted in the
//! first bucket whose bound is at least the highest value of its 1% range,
//! and the `_sum` is the mean times the count.

mod conn;
mod document;
mod exposition;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
mod metrics;
mod negotiate;
mod report;
mod routes;
mod slots;

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use crate::runtime::context;
use crate::{Class, Handle, JoinHandle};
use slots::Slots;

pub use document::{
    AdminFigures, BlockingFigures, ClassFigures, CountBytes, DeliveryFigures, DozeFigures,
    IoFigures, LaneFigures, QueueDelayFigures, StatsDocument, TokioFigures, WindowFigures,
    WorkerFigures,
};

/// Default [`AdminOptions::max_connections`]: 16.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// Default [`AdminOptions::read_timeout`]: 5 s.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Default [`AdminOptions::unix_mode`]: `0o600`, read and write for the
/// owner only.
pub const DEFAULT_UNIX_MODE: u32 = 0o600;

/// Default [`AdminOptions::max_request_bytes`]: 16 KiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 16 * 1024;

/// The smallest [`AdminOptions::max_request_bytes`]: 8 KiB, the smallest
/// read buffer hyper accepts; smaller settings are raised to it.
pub const MIN_MAX_REQUEST_BYTES: usize = 8 * 1024;

/// The longest a connection lingers after an error, reading and
/// discarding input so that its error answer is not destroyed by a reset.
const LINGER: Duration = Duration::from_secs(1);

/// How long the accept loop pauses when the process is out of file
/// descriptors or memory.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Serves the admin endpoint on `addr` with the default
/// [`AdminOptions`], in `handle`'s runtime.
///
/// May be called from inside or outside the runtime. The listener is
/// bound before this returns, so `addr` may use port 0 and
/// [`AdminServer::local_addr`] tells the port chosen.
///
/// # Errors
///
/// The OS error of binding `addr` (`AddrInUse`, `PermissionDenied`, ...).
pub fn serve(addr: impl ToSocketAddrs, handle: &Handle) -> io::Result<AdminServer> {
    AdminOptions::new().serve(addr, handle)
}

/// The entry point for configuring an admin endpoint; see
/// [`Admin::builder`].
#[derive(Debug)]
pub enum Admin {}

impl Admin {
    /// Options for an admin endpoint, every knob at its default; set the
    /// knobs and call [`AdminOptions::serve`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use keel::{admin::Admin, Class, Runtime};
    ///
    /// let rt = Runtime::builder().workers(2).build().unwrap();
    /// let admin = Admin::builder()
    ///     .max_connections(4)
    ///     .read_timeout(Duration::from_secs(2))
    ///     .class(Class::NORMAL)
    ///     .serve("127.0.0.1:0", rt.handle())
    ///     .unwrap();
    /// # drop(admin);
    /// ```
    pub fn builder() -> AdminOptions {
        AdminOptions::new()
    }
}

/// The admin endpoint's knobs; each is described with the failure it
/// prevents in the [module docs](self#limits-and-what-each-protects-against).
#[derive(Debug, Clone)]
pub struct AdminOptions {
    max_connections: usize,
    read_timeout: Duration,
    max_request_bytes: usize,
    class: Class,
    status_section: Option<StatusSection>,
    unix_mode: u32,
}

/// The application's part of `/status` (see
/// [`AdminOptions::status_section`]).
#[derive(Clone)]
struct StatusSection(Arc<dyn Fn() -> String + Send + Sync>);

impl fmt::Debug for StatusSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StatusSection(..)")
    }
}

impl Default for AdminOptions {
    fn default() -> AdminOptions {
        AdminOptions::new()
    }
}

impl AdminOptions {
    /// Every knob at its default.
    pub fn new() -> AdminOptions {
        AdminOptions {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            read_timeout: DEFAULT_READ_TIMEOUT,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            class: Class::URGENT,
            status_section: None,
            unix_mode: DEFAULT_UNIX_MODE,
        }
    }

    /// The most connections served at once. Default:
    /// [16](DEFAULT_MAX_CONNECTIONS). Bounds the tasks and memory a flood
    /// of connections can cost. A connection past the limit takes the slot
    /// of one waiting for a request head (a stalled half-sent head
    /// first, the longest waiting), which is closed; if every slot is answering a request, it gets
    /// `503 Service Unavailable` instead (see the [module
    /// docs](self#hostile-clients-who-gets-a-slot)). A connection holds
    /// its slot from its accept until hyper is done with it; the close
    /// that follows lingers outside the slots, at most this many at once.
    pub fn max_connections(&mut self, max: usize) -> &mut AdminOptions {
        self.max_connections = max;
        self
    }

    /// How long a client may take to send a whole request head (and how
    /// long an idle keep-alive connection stays open); a write of the
    /// answer that makes no progress for this long also closes the
    /// connection. Default: [5 s](DEFAULT_READ_TIMEOUT). Prevents a slow
    /// client (slowloris) from holding a connection slot forever. A
    /// connection that runs out of time is closed without an answer.
    ///
    /// # Panics
    ///
    /// If `timeout` is zero.
    #[track_caller]
    pub fn read_timeout(&mut self, timeout: Duration) -> &mut AdminOptions {
        assert!(
            !timeout.is_zero(),
            "the admin read timeout must not be zero"
        );
        self.read_timeout = timeout;
        self
    }

    /// The largest request head accepted, in bytes, and the largest
    /// declared body. Default: [16 KiB](DEFAULT_MAX_REQUEST_BYTES); at
    /// least [8 KiB](MIN_MAX_REQUEST_BYTES) (smaller values are raised).
    /// Bounds the memory one connection can make the endpoint buffer. A
    /// larger head gets `431 Request Header Fields Too Large`, a larger
    /// `content-length` `413 Payload Too Large`, and the connection is
    /// closed.
    pub fn max_request_bytes(&mut self, bytes: usize) -> &mut AdminOptions {
        self.max_request_bytes = bytes.max(MIN_MAX_REQUEST_BYTES);
        self
    }

    /// The class the endpoint's tasks run in. Default: [`Class::URGENT`],
    /// so the endpoint answers while bulk work fills every queue (see the
    /// [module docs](self#why-the-urgent-class)).
    pub fn class(&mut self, class: Class) -> &mut AdminOptions {
        self.class = class;
        self
    }

    /// Text that `/status` appends after keel's own lines: the
    /// application's part of the status (connections open, requests
    /// served, its version). Default: none. `section` runs on a worker, in
    /// the endpoint's class, once per `/status` request; keep it cheap
    /// (atomic loads, a format), as a slow one delays the answer.
    pub fn status_section(
        &mut self,
        section: impl Fn() -> String + Send + Sync + 'static,
    ) -> &mut AdminOptions {
        self.status_section = Some(StatusSection(Arc::new(section)));
        self
    }

    /// The permission bits of the socket file of an endpoint served with
    /// [`serve_unix`](Self::serve_unix). Default:
    /// [`0o600`](DEFAULT_UNIX_MODE), the owner only. Connecting needs
    /// write permission on the file, so this decides which local users
    /// can read the runtime's figures; the file has these bits before any
    /// client can reach it.
    pub fn unix_mode(&mut self, mode: u32) -> &mut AdminOptions {
        self.unix_mode = mode;
        self
    }

    /// Binds `addr` and serves the endpoint in `handle`'s runtime, with
    /// these options. May be called from inside or outside the runtime.
    ///
    /// # Errors
    ///
    /// The OS error of binding `addr`, or `InvalidInput` if the
    /// configured class does not exist in the runtime.
    pub fn serve(&self, addr: impl ToSocketAddrs, handle: &Handle) -> io::Result<AdminServer> {
        let listener = self.bind(handle, || TcpListener::bind(addr))?;
        let local_addr = listener.local_addr()?;
        Ok(self.start(handle, listener, Listening::Tcp(local_addr)))
    }

    /// Serves the endpoint on a Unix domain socket at `path`, in
    /// `handle`'s runtime, with these options: reachable only from this
    /// host, by the users that [`unix_mode`](Self::unix_mode) lets
    /// connect, as HAProxy's stats socket is. A stale socket file at
    /// `path` (one nothing listens on, left by a process that crashed) is
    /// replaced; a live one, or a file that is not a socket, is not.
    /// Dropping the server removes the socket file.
    ///
    /// ```
    /// let rt = keel::Runtime::new().unwrap();
    /// let path = std::env::temp_dir().join(format!("keel-admin-doc-{}.sock", std::process::id()));
    /// let admin = keel::admin::Admin::builder().serve_unix(&path, rt.handle()).unwrap();
    /// assert_eq!(admin.path(), Some(path.as_path()));
    /// # drop(admin);
    /// ```
    ///
    /// # Errors
    ///
    /// The error of binding the socket (`AddrInUse` when a live socket or
    /// another file is at `path`, `PermissionDenied`, `NotFound` for a
    /// missing directory), naming the path; `InvalidInput` if the
    /// configured class does not exist in the runtime.
    pub fn serve_unix(&self, path: impl AsRef<Path>, handle: &Handle) -> io::Result<AdminServer> {
        let path = path.as_ref();
        let listener = self.bind(handle, || {
            UnixListener::options()
                .replace_stale(true)
                .mode(self.unix_mode)
                .bind(path)
        })?;
        let inode = std::fs::metadata(path).map(|m| m.ino())?;
        Ok(self.start(
            handle,
            listener,
            Listening::Unix {
                path: path.to_owned(),
                inode,
            },
        ))
    }

    /// Runs `bind` where a listener registers with `handle`'s reactor, in
    /// the endpoint's class, after checking that the class exists.
    fn bind<L>(&self, handle: &Handle, bind: impl FnOnce() -> io::Result<L>) -> io::Result<L> {
        if handle.class_name(self.class).is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "class {} does not exist in this runtime",
                    self.class.index()
                ),
            ));
        }
        // Sockets register with the current runtime's reactor: make it
        // `handle`'s for the bind, wherever this is called from, and its
        // class's, so that an urgent endpoint listens on the urgent lane
        // when the runtime has one.
        let _enter = context::enter(handle.clone());
        context::with_class(self.class, bind)
    }

    /// Starts the accept loop on `listener`.
    fn start<L: Accept>(&self, handle: &Handle, listener: L, listening: Listening) -> AdminServer {
        let shared = Arc::new(Shared::new(handle, self));
        let task = handle.spawn_in(self.class, accept_loop(listener, shared.clone()));
        AdminServer {
            listening,
            task,
            shared,
        }
    }
}

/// Where an endpoint listens.
#[derive(Debug)]
enum Listening {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket file, and its inode (so that dropping the server
    /// removes only the file it bound).
    Unix { path: PathBuf, inode: u64 },
}

/// A running admin endpoint. Dropping it, or [`shutdown`](Self::shutdown),
/// stops accepting connections and closes the listener; connections
/// already accepted finish their current request (each is bounded by the
/// read timeout).
pub struct AdminServer {
    listening: Listening,
    task: JoinHandle<()>,
    shared: Arc<Shared>,
}

impl AdminServer {
    /// The TCP address the endpoint listens on. An endpoint on a Unix
    /// socket ([`AdminOptions::serve_unix`]) has none, and answers the
    /// unspecified address `0.0.0.0:0`; its [`path`](Self::path) is where
    /// it listens.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.listening {
            Listening::Tcp(addr) => *addr,
            Listening::Unix { .. } => SocketAddr::from(([0, 0, 0, 0], 0)),
        }
    }

    /// The socket file the endpoint listens on, if it was served with
    /// [`AdminOptions::serve_unix`].
    pub fn path(&self) -> Option<&Path> {
        match &self.listening {
            Listening::Tcp(_) => None,
            Listening::Unix { path, .. } => Some(path),
        }
    }

    /// Connections holding a slot now: being served or waiting for a
    /// request head (not counting refused ones, nor closes lingering).
    pub fn connections(&self) -> usize {
        self.shared.slots.open()
    }

    /// Connections refused with `503` since the endpoint started: they
    /// arrived when every slot was answering a request.
    pub fn rejected_connections(&self) -> u64 {
        self.shared.slots.refused()
    }

    /// Connections closed since the endpoint started to make room for a
    /// newer one, while they waited for a request head (see the [module
    /// docs](self#hostile-clients-who-gets-a-slot) for which go first).
    pub fn evicted_connections(&self) -> u64 {
        self.shared.slots.evicted()
    }

    /// Stops accepting connections and closes the listener (as dropping
    /// the server does). The listener closes when the runtime next runs
    /// the accept task, which is at once unless every worker is busy.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.task.abort();
        if let Listening::Unix { path, inode } = &self.listening {
            // Only the file this server bound: a later server may have
            // replaced it since.
            if std::fs::metadata(path).is_ok_and(|m| m.ino() == *inode) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

impl fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminServer")
            .field("listening", &self.listening)
            .field("options", &self.shared.options)
            .field("connections", &self.connections())
            .finish_non_exhaustive()
    }
}

/// What the accept loop and every connection of one endpoint share.
struct Shared {
    handle: Handle,
    options: AdminOptions,
    /// The connection slots: who is served, who waits longest.
    slots: Arc<Slots>,
    /// Connections lingering after their close (see `conn`).
    lingering: AtomicUsize,
    /// The accounting when the endpoint started.
    start: report::Sample,
    /// The accounting at the previous `/stats` answer.
    last: Mutex<report::Sample>,
}

impl Shared {
    fn new(handle: &Handle, options: &AdminOptions) -> Shared {
        let baseline = report::Sample::take(&handle.stats());
        Shared {
            handle: handle.clone(),
            options: options.clone(),
            slots: Arc::new(Slots::new(options.max_connections)),
            lingering: AtomicUsize::new(0),
            last: Mutex::new(baseline.clone()),
            start: baseline,
        }
    }
}

/// Takes one unit of `counter` if it is below `max`; the unit is given
/// back when the permit drops.
struct Permit<'a>(&'a AtomicUsize);

impl<'a> Permit<'a> {
    fn try_take(counter: &'a AtomicUsize, max: usize) -> Option<Permit<'a>> {
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Permit(counter))
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A listener the endpoint accepts connections on.
trait Accept: Send + Sync + 'static {
    /// Its connections.
    type Stream: conn::Transport;
    /// As the listener's `poll_accept`, ready for serving HTTP.
    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(Self::Stream, conn::Peer)>>;
}

impl Accept for TcpListener {
    type Stream = TcpStream;

    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, conn::Peer)>> {
        TcpListener::poll_accept(self, cx).map_ok(|(stream, peer)| {
            let _ = stream.set_nodelay(true);
            (stream, conn::Peer::Tcp(peer))
        })
    }
}

impl Accept for UnixListener {
    type Stream = UnixStream;

    fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(UnixStream, conn::Peer)>> {
        UnixListener::poll_accept(self, cx).map_ok(|(stream, _)| (stream, conn::Peer::Unix))
    }
}

async fn accept_loop<L: Accept>(listener: L, shared: Arc<Shared>) {
    let batch = (shared.options.max_connections / 2).max(1);
    let mut accepted = 0;
    loop {
        match poll_fn(|cx| listener.poll_accept(cx)).await {
            Ok((stream, peer)) => {
                // Detached: the connection's task ends on its own, bounded
                // by the read timeout.
                let task = match shared.slots.admit() {
                    Some(slot) => shared.handle.spawn_in(
                        shared.options.class,
                        conn::serve(stream, peer, shared.clone(), slot),
                    ),
                    None => {
                        tracing::debug!(
                            %peer,
                            max = shared.options.max_connections,
                            "admin endpoint: connection refused, every slot is answering"
                        );
                        shared
                            .handle
                            .spawn_in(shared.options.class, conn::refuse(stream, shared.clone()))
                    }
                };
                drop(task);
                // The new connections' tasks run before more are accepted:
                // each reads what its client has sent already, and a whole
                // request head makes it answering. Half the slots at most
                // are admitted in one turn, so a burst of newer connections
                // cannot evict one before it was even read.
                accepted += 1;
                if accepted == batch {
                    accepted = 0;
                    crate::yield_now().await;
                }
            }
            Err(error) => {
                let pause = matches!(
                    error.raw_os_error(),
                    Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                );
                tracing::warn!(%error, pause, "admin endpoint: accept failed");
                if pause {
                    crate::time::sleep(ACCEPT_PAUSE).await;
                }
            }
        }
    }
}
