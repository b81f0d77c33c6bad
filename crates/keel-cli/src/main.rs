//! `keel`: the command-line companion of the keel runtime.
//!
//! It reproduces the seed failures against keel and tokio (`bench`), and
//! for that serves the scenario servers (`serve`) and generates their load
//! (`load`) as separate processes, so that the measuring side never shares
//! a scheduler, an allocator or a CPU budget with the measured side.
//! `keel --defaults` describes the runtime it is built on, and `keel top`
//! watches a running keel server through its admin endpoint.
//!
//! Layout: [`bench`](mod@bench) drives scenarios and writes reports, [`serve`] holds
//! the servers (a tokio peer and a keel variant behind one signature),
//! [`load`] holds the load generators and latency probes, [`top`] the live
//! view, [`error`] the one error type.

#![warn(clippy::missing_docs_in_private_items)]

mod bench;
mod error;
mod load;
mod serve;
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
    /// Watch a running keel server live: workers by state, classes' CPU
    /// share against their configured shares, queue delays, deliveries,
    /// the blocking pool; read from its admin endpoint's /stats.
    Top(top::TopArgs),
}

fn main() {
    let cli = Cli::parse();
    if cli.defaults {
        print_defaults();
        return;
    }
    let result = match cli.command {
        Some(Command::Bench(args)) => bench::run(&args),
        Some(Command::Serve(command)) => serve::run(&command),
        Some(Command::Load(command)) => load::run(&command),
        Some(Command::Top(args)) => top::run(&args),
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
        std::process::exit(error.code());
    }
}

/// Prints the defaults a `keel::Runtime::builder()` starts from, read from
/// a real runtime rather than restated.
fn print_defaults() {
    let rt = match keel::Runtime::builder().workers(1).build() {
        Ok(rt) => rt,
        Err(error) => {
            eprintln!("keel: cannot start a runtime: {error}");
            std::process::exit(1);
        }
    };
    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    println!("workers: {workers} (available CPUs)");
    println!("spin: {:?}", keel::SpinPolicy::default().duration());
    for class in rt.stats().classes {
        println!("class {}: {} shares", class.name, class.shares);
    }
}
