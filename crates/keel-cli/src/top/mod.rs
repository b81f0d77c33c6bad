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

pub use fetch::Endpoint;
/// Documents shaped like a server's, for other commands' tests.
#[cfg(test)]
pub use model::tests as test_documents;
pub use model::View;

use std::time::Duration;

use keel::admin::StatsDocument;

use crate::error::Error;
use draw::Screen;

/// The limit of each step of one request (connect, write, read): a server
/// slower than this to answer a small document is shown as not answering.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(3);

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
            "{error}; is the admin endpoint of a keel server listening at {}?",
            endpoint.authority()
        ))
    };
    let first = fetch_stats(&endpoint).map_err(hint)?;
    if args.once {
        std::thread::sleep(interval);
        let second = fetch_stats(&endpoint).map_err(hint)?;
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
///
/// # Errors
///
/// If the server does not answer, or answers with something that is not
/// a `/stats` document; the message names the address.
pub fn fetch_stats(endpoint: &Endpoint) -> Result<StatsDocument, Error> {
    let body = endpoint.get("/stats")?;
    model::parse(&body).map_err(|error| error.context(endpoint.authority()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel::{Class, Runtime};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    /// The calling thread's CPU time.
    fn thread_cpu() -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec into `ts`, which lives
        // across the call.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    /// Against a real runtime with an urgent lane: the lane's line shows
    /// the CPU its thread used between the two answers.
    #[test]
    fn frame_of_a_real_server_with_a_lane() {
        let rt = Runtime::builder()
            .workers(1)
            .urgent_lane(keel::UrgentLane::new().priority(keel::LanePriority::NiceWorkers(5)))
            .build()
            .unwrap();
        let admin = keel::admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let endpoint = Endpoint::resolve(&admin.local_addr().to_string(), FETCH_TIMEOUT).unwrap();
        let first = fetch_stats(&endpoint).unwrap();
        rt.block_on(rt.spawn_in(Class::URGENT, async {
            // 20 ms of the lane thread's CPU, however long that takes.
            let start = thread_cpu();
            while thread_cpu() - start < Duration::from_millis(20) {
                std::hint::spin_loop();
            }
        }))
        .unwrap();
        let second = fetch_stats(&endpoint).unwrap();
        let view = View::new(Some(&first), &second);
        let lane = view.lane.clone().expect("the lane's row");
        assert!(lane.polls_per_s > 0.0, "{lane:?}");
        let used = lane.cpus.expect("the lane's CPU") * view.span_s;
        assert!(used >= 0.020, "{lane:?} over {} s", view.span_s);
        let screen = Screen {
            addr: endpoint.authority(),
            view: Some(&view),
            error: None,
            interval: Duration::from_secs(1),
            live: false,
        };
        let mut terminal = Terminal::new(TestBackend::new(130, draw::height(&screen))).unwrap();
        terminal.draw(|frame| draw::draw(frame, &screen)).unwrap();
        let text = draw::buffer_text(terminal.backend().buffer());
        assert!(text.contains("urgent lane (workers nice +5): "), "{text}");
    }

    /// Against a real runtime's admin endpoint: two answers make a view,
    /// and a frame drawn into a test buffer shows each worker, each class
    /// with its configured shares, and the figures.
    #[test]
    fn frame_of_a_real_server() {
        let rt = Runtime::builder().workers(2).build().unwrap();
        let admin = keel::admin::serve("127.0.0.1:0", rt.handle()).unwrap();
        let endpoint = Endpoint::resolve(&admin.local_addr().to_string(), FETCH_TIMEOUT).unwrap();
        let first = fetch_stats(&endpoint).unwrap();
        // Some work in every class between the two answers.
        rt.block_on(async {
            let tasks: Vec<_> = [Class::URGENT, Class::NORMAL, Class::BULK]
                .into_iter()
                .map(|class| {
                    keel::spawn_in(class, async {
                        let mut sum = 0u64;
                        for i in 0..20_000u64 {
                            sum = sum.wrapping_add(i * i);
                            if i % 1_000 == 0 {
                                keel::yield_now().await;
                            }
                        }
                        sum
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        let second = fetch_stats(&endpoint).unwrap();
        let view = View::new(Some(&first), &second);
        assert!(!view.since_start);
        assert_eq!(view.workers.len(), 2);

        let screen = Screen {
            addr: endpoint.authority(),
            view: Some(&view),
            error: None,
            interval: Duration::from_secs(1),
            live: true,
        };
        let mut terminal = Terminal::new(TestBackend::new(110, draw::height(&screen))).unwrap();
        terminal.draw(|frame| draw::draw(frame, &screen)).unwrap();
        let text = draw::buffer_text(terminal.backend().buffer());

        assert!(
            text.contains(&format!("keel top · {}", admin.local_addr())),
            "{text}"
        );
        assert!(text.contains("rates over the last"), "{text}");
        assert!(text.contains("utilization "), "{text}");
        assert!(text.contains("deliveries "), "{text}");
        assert!(text.contains("blocking pool: "), "{text}");
        // This server reports the gap: a figure, not "n/a".
        let gap = text
            .lines()
            .find(|l| l.contains("IO poll gap max: "))
            .unwrap_or_else(|| panic!("no IO poll gap line:\n{text}"));
        assert!(!gap.contains("n/a"), "{gap}");
        assert!(text.contains("q, Esc or Ctrl-C quits"), "{text}");
        for worker in ["w0", "w1"] {
            let row = text
                .lines()
                .find(|l| l.contains(&format!(" {worker} ")))
                .unwrap_or_else(|| panic!("no row for {worker}:\n{text}"));
            assert_eq!(row.matches('%').count(), 7, "{row}");
        }
        let stats = rt.stats();
        let total: u32 = stats.classes.iter().map(|c| c.shares).sum();
        for class in &stats.classes {
            let owed = f64::from(class.shares) / f64::from(total) * 100.0;
            let row = text
                .lines()
                .find(|l| l.contains(&format!(" {} ", class.name)))
                .unwrap_or_else(|| panic!("no row for {}:\n{text}", class.name));
            let words: Vec<&str> = row.split_whitespace().collect();
            let at = words.iter().position(|w| *w == class.name).unwrap();
            let shares = [class.shares.to_string(), format!("{owed:.1}%")];
            assert_eq!(words[at + 1..at + 3], shares, "{row}");
            // The row fits, to its largest delay (`-` before any wake).
            assert!(row.ends_with("s│") || row.ends_with("-│"), "{row}");
            let held = words[at + 3..]
                .iter()
                .find_map(|w| w.parse::<f64>().ok())
                .unwrap();
            assert!(held >= 0.0, "{row}");
        }
        for name in ["urgent", "normal", "bulk"] {
            assert!(text.contains(&format!(" {name} ")), "{name}:\n{text}");
        }
    }
}
