//! `keel`: the command-line companion of the keel runtime.
//!
//! It will reproduce the seed failures against keel and tokio (`bench`),
//! serve the scenario servers (`serve`), generate load (`load`) and show a
//! live view of a running server (`top`). None of those exists yet: for
//! now it describes itself and the runtime it is built on.

use clap::Parser;

/// keel: an async runtime for network servers that stays responsive under
/// any mix of load.
#[derive(Debug, Parser)]
#[command(name = "keel", version)]
struct Cli {
    /// Print the runtime's default configuration and exit.
    #[arg(long)]
    defaults: bool,
}

fn main() {
    let cli = Cli::parse();
    if cli.defaults {
        print_defaults();
        return;
    }
    // No subcommand exists yet: show the help, as `keel --help` would.
    let mut command = <Cli as clap::CommandFactory>::command();
    command.print_help().expect("stdout is writable");
    println!();
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
