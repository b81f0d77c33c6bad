//! Scenario servers, run as their own process by `keel-bench bench`.
//!
//! Each scenario has one server. S0, S1 and S2 (with S4) are written
//! once, over the runtime interface [`node::Node`] that keel
//! ([`node_keel`]) and tokio ([`node_tokio`]) implement, and so is S5's
//! log service. What differs by design is written per runtime, the tokio
//! side the way a competent tokio user would write it: how S5's node
//! makes a record durable ([`s5_keel`], [`s5_tokio`]) and S3's proxy,
//! whose classes are keel's ([`s3_keel`], [`s3_tokio`]). The harness
//! treats every variant identically: same process
//! layout, same flags, same control protocol ([`control`]), same CPU work
//! ([`cpu`]), and the same runtime, listener, accept loop and accounting
//! for every scenario. A server runs in its
//! own process so its CPU time can be read from `/proc` and so it never
//! shares a scheduler with the load generator or the harness.

pub mod control;
pub mod cpu;
pub mod job;
pub mod monoio;
pub mod node;
pub mod node_keel;
pub mod node_tokio;
pub mod s0;
pub mod s1;
pub mod s2;
pub mod s3;
pub mod s3_backend;
pub mod s3_keel;
pub mod s3_tokio;
pub mod s5;
pub mod s5_keel;
pub mod s5_tokio;
pub mod soak;
pub mod stamp;

use std::any::Any;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Which runtime a server runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuntimeKind {
    /// keel on its default IO driver, epoll: the runtime under test.
    Keel,
    /// keel on its io_uring driver (a ring per worker, the ring driver's
    /// default layout; `KEEL_IO_RINGS` picks another): the same servers
    /// as `keel`, so that the two drivers compare in every scenario.
    KeelUring,
    /// tokio's multi-thread runtime, the peer.
    Tokio,
    /// monoio, a thread-per-core io_uring runtime: a peer of another
    /// design, in S0 and S1 only (see `serve::monoio`).
    Monoio,
}

impl RuntimeKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Keel => "keel",
            Self::KeelUring => "keel-uring",
            Self::Tokio => "tokio",
            Self::Monoio => "monoio",
        }
    }

    /// Whether this is keel, on either driver.
    pub fn is_keel(self) -> bool {
        matches!(self, Self::Keel | Self::KeelUring)
    }

    /// The IO driver of a keel runtime of this kind (epoll for the peers,
    /// which have no such setting).
    pub fn io_backend(self) -> keel::io::IoBackend {
        match self {
            Self::KeelUring => keel::io::IoBackend::Uring,
            Self::Keel | Self::Tokio | Self::Monoio => keel::io::IoBackend::Epoll,
        }
    }

    /// Whether this runtime has a server for scenario `id` (`"s0"` ...):
    /// monoio serves S0 and S1 only (see `serve::monoio`).
    pub fn serves(self, id: &str) -> bool {
        self != Self::Monoio || matches!(id, "s0" | "s1")
    }
}

impl fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `keel-bench serve <scenario>`.
#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// S0: a minimal HTTP/1.1 server (hyper) answering every request with
    /// a 13-byte body.
    S0(ServeS0Args),
    /// S1: an echo service plus CPU tasks that yield between slices.
    S1(ServeS1Args),
    /// S2: a stream service whose handlers process every delivery, plus
    /// an API that runs a CPU job per request.
    S2(ServeS2Args),
    /// S4: the S2 stream service alone (read and sum every delivery),
    /// under a spin setting: what process CPU and the runtime's own
    /// accounting say under a steady paced load.
    S4(ServeS4Args),
    /// S5: a log node (records acknowledged once durable) plus an echo
    /// service for the ping probe.
    S5(ServeS5Args),
    /// S3: a TCP proxy to a backend, with an admin endpoint.
    Proxy(s3::ServeProxyArgs),
    /// S3: the file server behind the proxy (always on tokio).
    S3Backend(s3_backend::ServeS3BackendArgs),
    /// The soak: S1's echo and CPU tasks, S3's proxy and admin endpoint
    /// and S5's log, at once on one keel runtime.
    Soak(soak::ServeSoakArgs),
}

/// Flags of `keel-bench serve s0`.
#[derive(Debug, Args)]
pub struct ServeS0Args {
    /// The runtime to serve on.
    #[arg(long, value_enum)]
    pub runtime: RuntimeKind,
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = default_workers(), value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// keel's spin policy (keel's default when left out; tokio has none).
    #[arg(long, value_enum)]
    pub spin: Option<Spin>,
    /// Address to bind the HTTP service to.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
}

/// Flags of `keel-bench serve s1`.
#[derive(Debug, Args)]
pub struct ServeS1Args {
    /// The runtime to serve on.
    #[arg(long, value_enum)]
    pub runtime: RuntimeKind,
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = default_workers(), value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// CPU tasks that loop forever doing slices of arithmetic.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=4096))]
    pub cpu_tasks: u64,
    /// Iterations of one CPU slice (see `keel-bench bench`, which
    /// calibrates it).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub slice_iters: u64,
    /// Address to bind the echo service to.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// keel only: run with the runtime's accounting off, to measure what
    /// it costs (`keel-bench bench s1` runs this variant beside the default).
    #[arg(long, hide = true)]
    pub no_accounting: bool,
}

/// Flags of `keel-bench serve s2`.
#[derive(Debug, Args)]
pub struct ServeS2Args {
    /// The runtime to serve on.
    #[arg(long, value_enum)]
    pub runtime: RuntimeKind,
    /// How stream handlers read (keel: off, fixed, adaptive; tokio:
    /// read-1460, read-64k).
    #[arg(long, value_enum)]
    pub mode: s2::S2Mode,
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = default_workers(), value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// Lines of the API job's configuration (see `keel-bench bench`, which
    /// calibrates it to about 20 ms).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub job_lines: u64,
    /// Lines of the same work a stream handler does per delivery, on top
    /// of summing its bytes (see `keel-bench bench --handler-us`); 0 for
    /// none.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    pub handler_lines: u64,
    /// Batching: bytes a delivery waits for (fixed mode).
    #[arg(long, default_value_t = 64 * 1024, value_parser = clap::value_parser!(u64).range(1..=64 * 1024 * 1024))]
    pub min_bytes: u64,
    /// Batching: milliseconds a byte may wait (fixed and adaptive modes).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub max_delay_ms: u64,
    /// Address to bind the stream service to.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// Address to bind the API service to.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub api_addr: SocketAddr,
}

/// Flags of `keel-bench serve s4`.
#[derive(Debug, Args)]
pub struct ServeS4Args {
    /// The runtime to serve on.
    #[arg(long, value_enum)]
    pub runtime: RuntimeKind,
    /// keel's spin policy (tokio has none; leave it out for tokio).
    #[arg(long, value_enum)]
    pub spin: Option<Spin>,
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = default_workers(), value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// Address to bind the stream service to.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
}

/// A spin setting of keel's workers, as named on the command line and in
/// reports (see [`keel::SpinPolicy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Spin {
    /// Park as soon as no work is found (keel's default).
    None,
    /// Spin 20 µs before parking.
    Short,
    /// Spin 100 µs.
    Medium,
    /// Spin 1 ms.
    Long,
}

impl Spin {
    /// Every setting, least spin first.
    pub const ALL: [Spin; 4] = [Spin::None, Spin::Short, Spin::Medium, Spin::Long];

    /// The runtime's policy.
    pub fn policy(self) -> keel::SpinPolicy {
        match self {
            Spin::None => keel::SpinPolicy::None,
            Spin::Short => keel::SpinPolicy::Short,
            Spin::Medium => keel::SpinPolicy::Medium,
            Spin::Long => keel::SpinPolicy::Long,
        }
    }

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Spin::None => "none",
            Spin::Short => "short",
            Spin::Medium => "medium",
            Spin::Long => "long",
        }
    }
}

impl fmt::Display for Spin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Flags of `keel-bench serve s5`.
#[derive(Debug, Args)]
pub struct ServeS5Args {
    /// The runtime to serve on.
    #[arg(long, value_enum)]
    pub runtime: RuntimeKind,
    /// How records are made durable (keel has `group` only).
    #[arg(long, value_enum, default_value_t = s5::LogMode::Group)]
    pub mode: s5::LogMode,
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = default_workers(), value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// The directory that holds the log (on a real disk, not tmpfs, for
    /// the figures to mean anything).
    #[arg(long)]
    pub dir: PathBuf,
    /// Address to bind the echo service to.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub addr: SocketAddr,
    /// Address to bind the log service to.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub log_addr: SocketAddr,
}

/// The default worker count: the available parallelism of this machine.
pub fn default_workers() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// What an S1 server is asked to run.
#[derive(Debug, Clone)]
pub struct S1Opts {
    /// Worker threads of the runtime.
    pub workers: usize,
    /// keel's IO driver.
    pub io: keel::io::IoBackend,
    /// CPU tasks to start (0 for the idle phase).
    pub cpu_tasks: usize,
    /// Iterations of [`cpu::slice`] per slice.
    pub slice_iters: u64,
    /// Address to bind the echo service to.
    pub addr: SocketAddr,
    /// keel: whether the runtime keeps its accounting (the default).
    pub accounting: bool,
}

/// A started server: where it listens, how to read its runtime's own
/// accounting, and what keeps it alive.
pub struct Running {
    /// The bound address of the service: S0's HTTP listener, the echo
    /// service of S1 and S5, the stream service of S2 and S4, the proxy's
    /// listener (S3) or the S3 backend's.
    pub addr: SocketAddr,
    /// The bound address of the log service, for servers that have one.
    pub log_addr: Option<SocketAddr>,
    /// The bound address of the API service, for servers that have one.
    pub api_addr: Option<SocketAddr>,
    /// The bound address of the admin endpoint, for servers that have one.
    pub admin_addr: Option<SocketAddr>,
    /// What the server found when it started (`null` if nothing to say),
    /// printed with its address.
    pub startup: serde_json::Value,
    /// The runtime's own accounting, as JSON (`null` if it has none); it is
    /// reported as the `runtime` field of each `mark` answer.
    pub runtime_stats: Box<dyn Fn() -> serde_json::Value + Send>,
    /// Keeps the runtime alive; dropping it stops the server.
    pub guard: Box<dyn Any + Send>,
}

impl fmt::Debug for Running {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Running")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Starts the S1 server on `runtime` (see [`s1::start`]).
pub fn s1_start(
    runtime: RuntimeKind,
    opts: &S1Opts,
    slices: Arc<AtomicU64>,
) -> Result<Running, Error> {
    match runtime {
        RuntimeKind::Keel | RuntimeKind::KeelUring => {
            let rt = node_keel::runtime_with(opts.workers, None, opts.io, opts.accounting)?;
            s1::start(node_keel::KeelNode::new(rt), opts, slices)
        }
        RuntimeKind::Tokio => s1::start(
            node_tokio::TokioNode::new(node_tokio::runtime(opts.workers)?),
            opts,
            slices,
        ),
        RuntimeKind::Monoio => monoio::start_s1(
            opts.workers,
            opts.addr,
            opts.cpu_tasks,
            opts.slice_iters,
            slices,
        ),
    }
}

/// Starts the S2 node (S4's too) on `runtime` (see [`s2::start`]).
fn s2_start(runtime: RuntimeKind, opts: &s2::S2Opts) -> Result<Running, Error> {
    match runtime {
        RuntimeKind::Keel | RuntimeKind::KeelUring => {
            let rt = node_keel::runtime(opts.workers, opts.spin, opts.io)?;
            s2::start(node_keel::KeelNode::new(rt), opts)
        }
        RuntimeKind::Tokio => no_spin(runtime, opts.spin)
            .and_then(|()| node_tokio::runtime(opts.workers))
            .and_then(|rt| s2::start(node_tokio::TokioNode::new(rt), opts)),
        RuntimeKind::Monoio => Err(not_served(runtime)),
    }
}

/// Refuses a spin policy for a peer runtime, which has no such setting.
fn no_spin(runtime: RuntimeKind, spin: Option<keel::SpinPolicy>) -> Result<(), Error> {
    match spin {
        Some(spin) => Err(Error::usage(format!(
            "{runtime} has no spin setting (asked for {spin:?}); leave --spin out"
        ))),
        None => Ok(()),
    }
}

/// The error for a scenario that `runtime` has no server for.
pub fn not_served(runtime: RuntimeKind) -> Error {
    Error::usage(format!(
        "{runtime} serves S0 and S1 only (a peer of another design, not ported further)"
    ))
}

/// Runs `keel-bench serve ...` until `stop` or the end of stdin.
pub fn run(command: &ServeCommand) -> Result<(), Error> {
    match command {
        ServeCommand::S0(args) => {
            let opts = s0::S0Opts {
                workers: usize::try_from(args.workers).unwrap_or(usize::MAX),
                addr: args.addr,
                spin: args.spin.map(Spin::policy),
                io: args.runtime.io_backend(),
            };
            let running = match args.runtime {
                RuntimeKind::Keel | RuntimeKind::KeelUring => {
                    node_keel::runtime(opts.workers, opts.spin, opts.io)
                        .and_then(|rt| s0::start(node_keel::KeelNode::new(rt), &opts))
                }
                RuntimeKind::Tokio => no_spin(args.runtime, opts.spin)
                    .and_then(|()| node_tokio::runtime(opts.workers))
                    .and_then(|rt| s0::start(node_tokio::TokioNode::new(rt), &opts)),
                RuntimeKind::Monoio => no_spin(args.runtime, opts.spin)
                    .and_then(|()| monoio::start_s0(opts.workers, opts.addr)),
            }
            .map_err(|e| e.context(format!("serve s0 --runtime {}", args.runtime)))?;
            control::serve_until_stop(running, &AtomicU64::new(0))
        }
        ServeCommand::S1(args) => {
            let opts = S1Opts {
                workers: usize::try_from(args.workers).unwrap_or(usize::MAX),
                io: args.runtime.io_backend(),
                cpu_tasks: usize::try_from(args.cpu_tasks).unwrap_or(usize::MAX),
                slice_iters: args.slice_iters,
                addr: args.addr,
                accounting: !args.no_accounting,
            };
            if args.no_accounting && !args.runtime.is_keel() {
                return Err(Error::new(
                    "serve s1: --no-accounting is a keel setting; tokio has no such switch",
                ));
            }
            let slices = Arc::new(AtomicU64::new(0));
            let running = s1_start(args.runtime, &opts, Arc::clone(&slices))
                .map_err(|e| e.context(format!("serve s1 --runtime {}", args.runtime)))?;
            control::serve_until_stop(running, &slices)
        }
        ServeCommand::S2(args) => {
            let opts = s2::S2Opts {
                workers: usize::try_from(args.workers).unwrap_or(usize::MAX),
                addr: args.addr,
                api_addr: args.api_addr,
                mode: args.mode,
                job_lines: args.job_lines,
                handler_lines: args.handler_lines,
                min_bytes: usize::try_from(args.min_bytes).unwrap_or(usize::MAX),
                max_delay: std::time::Duration::from_millis(args.max_delay_ms),
                spin: None,
                io: args.runtime.io_backend(),
            };
            let context = format!("serve s2 --runtime {} --mode {}", args.runtime, args.mode);
            let running = s2_start(args.runtime, &opts).map_err(|e| e.context(&context))?;
            control::serve_until_stop(running, &AtomicU64::new(0))
        }
        ServeCommand::S4(args) => {
            // S4 is S2's stream service on its own: keel reads per
            // readiness, tokio into 64 KiB buffers; the API is never called.
            let opts = s2::S2Opts {
                workers: usize::try_from(args.workers).unwrap_or(usize::MAX),
                addr: args.addr,
                api_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                mode: match args.runtime {
                    RuntimeKind::Keel | RuntimeKind::KeelUring => s2::S2Mode::Off,
                    RuntimeKind::Tokio => s2::S2Mode::Read64k,
                    RuntimeKind::Monoio => return Err(not_served(args.runtime).context("serve s4")),
                },
                job_lines: 1,
                handler_lines: 0,
                min_bytes: 64 * 1024,
                max_delay: std::time::Duration::from_millis(100),
                spin: args.spin.map(Spin::policy),
                io: args.runtime.io_backend(),
            };
            let spin = args.spin.map_or("default", Spin::name);
            let context = format!("serve s4 --runtime {} --spin {spin}", args.runtime);
            let running = s2_start(args.runtime, &opts).map_err(|e| e.context(&context))?;
            control::serve_until_stop(running, &AtomicU64::new(0))
        }
        ServeCommand::S5(args) => {
            let opts = s5::S5Opts {
                workers: usize::try_from(args.workers).unwrap_or(usize::MAX),
                addr: args.addr,
                log_addr: args.log_addr,
                dir: args.dir.clone(),
                mode: args.mode,
                io: args.runtime.io_backend(),
            };
            let context = format!("serve s5 --runtime {} --mode {}", args.runtime, args.mode);
            let running = match args.runtime {
                RuntimeKind::Keel | RuntimeKind::KeelUring => s5_keel::start(&opts),
                RuntimeKind::Tokio => s5_tokio::start(&opts),
                RuntimeKind::Monoio => Err(not_served(args.runtime)),
            }
            .map_err(|e| e.context(&context))?;
            control::serve_until_stop(running, &AtomicU64::new(0))
        }
        ServeCommand::Proxy(args) => s3::run(args),
        ServeCommand::S3Backend(args) => s3_backend::run(args),
        ServeCommand::Soak(args) => soak::run(args),
    }
}
