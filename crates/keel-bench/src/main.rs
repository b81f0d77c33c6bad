//! `keel-bench`: the seed-suite bench of the keel runtime, for the
//! people who develop keel.
//!
//! It reproduces the seed failures against keel and tokio (`bench`), and
//! for that serves the scenario servers (`serve`) and generates their load
//! (`load`) as separate processes, so that the measuring side never shares
//! a scheduler, an allocator or a CPU budget with the measured side. The
//! harness starts those processes from this same executable
//! (`std::env::current_exe()`), so `serve` and `load` are subcommands of
//! this binary and not of the user-facing `keel` tool (crate `keel-cli`),
//! which keeps `keel top` and `keel --defaults`.
//!
//! It is the workspace's default member: `cargo run --release -- bench`
//! from the repository root runs the suite.
//!
//! Layout: [`bench`](mod@bench) drives scenarios and writes reports,
//! [`serve`] holds the servers (a tokio peer and a keel variant behind one
//! signature), [`load`] holds the load generators and latency probes and
//! [`load::http`] the HTTP/1.1 answers they read, [`error`] the one error
//! type.

#![warn(clippy::missing_docs_in_private_items)]

mod bench;
mod error;
mod load;
mod serve;

use clap::{Parser, Subcommand};

/// keel-bench: the seed-suite bench of the keel runtime, keel against
/// tokio, with the scenario servers and load generators it runs.
#[derive(Debug, Parser)]
#[command(name = "keel-bench", version)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the seed-suite scenarios against keel and tokio, print a table
    /// and write report.json and report.md.
    Bench(bench::BenchArgs),
    /// Run a scenario server (used by `bench`; speaks one JSON object per
    /// line on stdout and takes `mark`/`stop` on stdin).
    #[command(subcommand)]
    Serve(serve::ServeCommand),
    /// Run a scenario's load generator or latency probe (used by `bench`;
    /// prints one JSON line of results).
    #[command(subcommand)]
    Load(load::LoadCommand),
    /// Run S1's CPU tasks, S3's proxy and S5's log at once on one keel
    /// runtime under their loads, sample the server's resources every
    /// second, and fail if any grows after the warm-up.
    Soak(bench::soak::SoakArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Bench(args)) => bench::run(&args),
        Some(Command::Serve(command)) => serve::run(&command),
        Some(Command::Load(command)) => load::run(&command),
        Some(Command::Soak(args)) => bench::soak::run(&args),
        None => {
            // No subcommand: show the help, as `keel-bench --help` would.
            let mut command = <Cli as clap::CommandFactory>::command();
            command.print_help().expect("stdout is writable");
            println!();
            Ok(())
        }
    };
    if let Err(error) = result {
        eprintln!("keel-bench: {error}");
        std::process::exit(error.code());
    }
}
