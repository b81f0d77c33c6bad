//! The soak server: S1's echo and CPU tasks, S3's proxy with its admin
//! endpoint, and S5's log, all at once on one keel runtime, the way a
//! real service mixes them (see `bench::soak`, which drives it).
//!
//! Each part is the scenario's own code: S1's CPU tasks in the default
//! class, S3's classes (admin urgent, setup normal, downloads bulk), S5's
//! log connections in bulk. Its `mark` answer is the runtime's accounting
//! plus what the soak samples of the runtime: live tasks, pending timers
//! and the blocking pool.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use clap::Args;
use serde_json::json;

use super::node_keel::{accept_echo, bind, runtime, stats_json, KeelNode};
use super::s3::ProxyCounters;
use super::s3_keel::Classes;
use super::s5::LogCounters;
use super::{control, default_workers, Running};
use crate::error::Error;

/// Flags of `keel-bench serve soak`.
#[derive(Debug, Args)]
pub struct ServeSoakArgs {
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = default_workers(), value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// The S3 backend the proxy forwards to.
    #[arg(long)]
    pub backend: SocketAddr,
    /// The directory that holds the log.
    #[arg(long)]
    pub dir: PathBuf,
    /// S1's CPU tasks.
    #[arg(long, default_value_t = 4)]
    pub cpu_tasks: u64,
    /// Iterations of one CPU slice.
    #[arg(long)]
    pub slice_iters: u64,
}

/// Runs `keel-bench serve soak` until `stop` or the end of stdin.
pub fn run(args: &ServeSoakArgs) -> Result<(), Error> {
    let slices = Arc::new(AtomicU64::new(0));
    let running = start(args, Arc::clone(&slices)).map_err(|e| e.context("serve soak"))?;
    control::serve_until_stop(running, &slices)
}

/// Starts every part on one runtime. The address line's `addr` is the
/// proxy's, `log_addr` the log's, `admin_addr` the admin endpoint's, and
/// `startup.echo_addr` the echo service's.
fn start(args: &ServeSoakArgs, slices: Arc<AtomicU64>) -> Result<Running, Error> {
    let workers = usize::try_from(args.workers).unwrap_or(usize::MAX);
    // The driver `KEEL_IO_BACKEND` names (epoll when unset), so that CI
    // soaks either.
    let io = keel::io::IoBackend::from_env().map_err(|e| Error::new(e.to_string()))?;
    let rt = runtime(workers, None, io)?;
    let any = SocketAddr::from(([127, 0, 0, 1], 0));

    // S1: echo and CPU tasks, default class.
    let (echo, echo_addr) = bind(&rt, any)?;
    rt.spawn(accept_echo(echo));
    for _ in 0..args.cpu_tasks {
        rt.spawn(super::s1::cpu_task::<super::node_keel::KeelNode>(
            args.slice_iters,
            Arc::clone(&slices),
        ));
    }

    // S3: the proxy in its classes, and the admin endpoint.
    let classes = Classes::new(false);
    let proxy_counters = Arc::new(ProxyCounters::default());
    let (proxy, addr) = bind(&rt, any)?;
    let admin = super::s3_keel::serve_admin(
        &rt,
        any,
        classes.admin,
        workers,
        Arc::clone(&proxy_counters),
    )?;
    let admin_addr = admin.local_addr();
    rt.spawn_in(
        classes.setup,
        super::s3_keel::accept_loop(proxy, args.backend, classes, Arc::clone(&proxy_counters)),
    );

    // S5: the log, its connections in bulk.
    let log = super::s5_keel::open_log(&args.dir)?;
    let log_counters = Arc::new(LogCounters::default());
    let (log_listener, log_addr) = bind(&rt, any)?;
    rt.spawn_in(
        keel::Class::BULK,
        super::s5::log_accept_loop::<KeelNode, _>(
            log_listener,
            log.clone(),
            Arc::clone(&log_counters),
        ),
    );

    let handle = rt.handle().clone();
    let runtime_stats = Box::new(move || {
        let stats = handle.stats();
        let mut value = stats_json(&stats);
        value["live_tasks"] = json!(handle.live_tasks());
        value["blocking"] = json!({
            "threads": stats.blocking.threads,
            "queued": stats.blocking.queued,
            "waiting": stats.blocking.waiting,
        });
        value["proxy"] = proxy_counters.to_json();
        value["log"] = log_counters.to_json();
        value
    });
    Ok(Running {
        addr,
        log_addr: Some(log_addr),
        api_addr: None,
        admin_addr: Some(admin_addr),
        startup: json!({"echo_addr": echo_addr, "backend": args.backend}),
        runtime_stats,
        // The admin endpoint stops before its runtime; the log writes what
        // is pending once the runtime is gone.
        guard: Box::new((admin, rt, log)),
    })
}
