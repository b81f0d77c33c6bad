//! `keel top`: a live terminal view of a running keel server, read from
//! its admin endpoint's `/stats`.
//!
//! The numbers a keel server keeps about itself (each worker's time by
//! state, each class's CPU against its configured share, queue delays,
//! deliveries, the blocking pool) are cumulative, and the endpoint hands
//! them out as one JSON document. What a person watching a server wants
//! is how those numbers move, so `top` polls the document, subtracts
//! consecutive answers and draws the rates.
//!
//! It is split so that each part can be tested on its own: [`fetch`]
//! speaks just enough HTTP/1.1, [`model`] turns documents into the
//! figures to show, [`draw`] lays them out with ratatui (into a real
//! terminal or a test buffer alike), and [`term`] owns the terminal: raw
//! mode, the alternate screen, keys, and putting it all back however the
//! program ends.
//!
//! The address is checked before the terminal is touched, so a typo or a
//! server that is down gives one clear line on stderr and exit code 1,
//! not a flash of a blank screen. Once running, a server that stops
//! answering is shown as an error under the last figures while `top`
//! keeps asking.

mod draw;
mod fetch;
mod model;
mod term;

use std::time::Duration;

use crate::error::Error;
use draw::Screen;
use fetch::Endpoint;
use model::{Snapshot, View};

/// The limit of each step of one request (connect, write, read): a server
/// slower than this to answer a small document is shown as not answering.
const FETCH_TIMEOUT: Duration = Duration::from_secs(3);

/// `keel top`'s flags.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// The admin endpoint of the server to watch (`host:port`, as served by
    /// `keel::admin::serve`).
    #[arg(long, value_name = "ADDR")]
    admin: String,

    /// How often to ask for `/stats`, in milliseconds; rates are over this
    /// interval.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u64).range(50..=3_600_000),
    )]
    interval_ms: u64,

    /// Print one frame as plain text on stdout and exit, without taking
    /// over the terminal (rates over one interval).
    #[arg(long)]
    once: bool,

    /// The width of the `--once` frame, in columns.
    #[arg(
        long,
        value_name = "COLUMNS",
        default_value_t = 100,
        requires = "once",
        value_parser = clap::value_parser!(u16).range(60..=1000),
    )]
    width: u16,
}

/// Runs `keel top`.
///
/// # Errors
///
/// If the address does not resolve or does not answer with a `/stats`
/// document at the start (before the terminal is touched), or if the
/// terminal cannot be driven.
pub fn run(args: &TopArgs) -> Result<(), Error> {
    let interval = Duration::from_millis(args.interval_ms);
    let endpoint = Endpoint::resolve(&args.admin, FETCH_TIMEOUT)?;
    let hint = |error: Error| {
        Error::new(format!(
            "{error} (is the admin endpoint of a keel server listening at {}?)",
            endpoint.authority()
        ))
    };
    let first = fetch(&endpoint).map_err(hint)?;
    if args.once {
        std::thread::sleep(interval);
        let second = fetch(&endpoint).map_err(hint)?;
        let view = View::new(Some(&first), &second);
        let screen = Screen {
            addr: endpoint.authority(),
            view: Some(&view),
            error: None,
            interval,
            live: false,
        };
        print!("{}", draw::render_text(&screen, args.width));
        return Ok(());
    }
    term::run(endpoint, first, interval)
}

/// One `/stats` document from `endpoint`.
fn fetch(endpoint: &Endpoint) -> Result<Snapshot, Error> {
    let body = endpoint.get("/stats")?;
    Snapshot::parse(&body).map_err(|error| error.context(endpoint.authority()))
}
