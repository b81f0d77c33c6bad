//! `keel`: the command-line companion of the keel runtime, for the people
//! who run keel servers.
//!
//! `keel top` watches a running keel server through its admin endpoint
//! (`keel::admin`), `keel stat` prints its figures one line per interval
//! for logs, and `keel --defaults` describes the runtime it is built
//! on. The seed-suite bench and its scenario servers and load generators
//! are a separate binary for keel's developers, `keel-bench` (crate
//! `keel-bench`), so this tool depends on neither tokio nor hyper.
//!
//! Layout: [`top`] the live view, [`stat`] the line-per-interval log,
//! [`error`] the one error type.

#![warn(clippy::missing_docs_in_private_items)]

mod error;
mod stat;
mod top;

use clap::{Parser, Subcommand};

/// keel: an async runtime for network servers that stays responsive under
/// any mix of load.
#[derive(Debug, Parser)]
#[command(name = "keel", version)]
struct Cli {
    /// Print the runtime's default configuration and exit.
    #[arg(long)]
    defaults: bool,

    /// What to do.
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Watch a running keel server live: workers by state, classes' CPU
    /// share against their configured shares, queue delays, deliveries,
    /// the blocking pool; read from its admin endpoint's /stats.
    Top(top::TopArgs),
    /// Print one line of figures per interval, for logs and CI, as sar
    /// does: utilization, spin, process CPU, each class's share and
    /// queue-delay p99 since the start, deliveries/s, the blocking queue,
    /// the tokio side's CPU; `--json` for one JSON object per line.
    Stat(stat::StatArgs),
}

fn main() {
    die_quietly_on_a_closed_pipe();
    let cli = Cli::parse();
    if cli.defaults {
        print_defaults();
        return;
    }
    let result = match cli.command {
        Some(Command::Top(args)) => top::run(&args),
        Some(Command::Stat(args)) => stat::run(&args),
        None => {
            // No subcommand: show the help, as `keel --help` would.
            let mut command = <Cli as clap::CommandFactory>::command();
            command.print_help().expect("stdout is writable");
            println!();
            Ok(())
        }
    };
    if let Err(error) = result {
        eprintln!("keel: {error}");
        std::process::exit(1);
    }
}

/// Lets a write to a closed pipe end the process as it ends `cat` or
/// `sar` (`keel stat | head -3`), instead of a panic in `println!`: Rust
/// programs start with `SIGPIPE` ignored, so such a write returns `EPIPE`.
fn die_quietly_on_a_closed_pipe() {
    // SAFETY: called first in `main`, before any other thread exists or
    // any handler is installed; SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Prints the defaults a `keel::Runtime::builder()` starts from, read from
/// a real runtime rather than restated.
fn print_defaults() {
    let rt = match keel::Runtime::builder().build() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("keel: cannot start a runtime: {error}");
            std::process::exit(1);
        }
    };
    let stats = rt.stats();
    println!(
        "workers: {}; {}",
        stats.workers.len(),
        stats.sizing.workers_reason
    );
    println!(
        "spin: {:?}; {}",
        stats.sizing.spin, stats.sizing.spin_reason
    );
    for class in rt.stats().classes {
        println!("class {}: {} shares", class.name, class.shares);
    }
    let io = rt.stats().io;
    match &io.fallback {
        None => println!("io backend: {} (asked {})", io.driver, io.requested),
        Some(why) => println!(
            "io backend: {} (asked {}, no ring: {why})",
            io.driver, io.requested
        ),
    }
    println!("io_uring: {}", keel::io::probe_io_uring());
}
