//! The live view's terminal: taking it over, the loop of keys and
//! answers, and giving it back.
//!
//! A program that leaves a terminal in raw mode, or on the alternate
//! screen, leaves its user with a shell that does not echo, so giving the
//! terminal back is done on every way out: a quitting key, an error
//! (the guard's `Drop`), a panic (a hook that restores the terminal
//! before the panic message is printed, so the message is readable), and
//! a signal that asks the process to end (`SIGTERM`, `SIGHUP` when the
//! terminal goes away, `SIGINT` or `SIGQUIT` sent with `kill`): each only
//! sets a flag, and the loop, which looks at it every [`TICK`], quits as
//! if a key had been pressed. In raw mode Ctrl-C is a key like any
//! other, not a signal, so it is handled with the other quitting keys.
//!
//! Fetching runs on its own thread and sends each answer (or error) over
//! a channel: a server that takes seconds to answer, or a connect that
//! times out, then never delays a key or a redraw.

use std::io::{IsTerminal, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::{Arc, Once};
use std::thread;
use std::time::{Duration, Instant};

use keel::admin::StatsDocument;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;

use super::draw::{self, Screen};
use super::fetch::Endpoint;
use super::model::View;
use crate::error::{Context as _, Error};

/// How long the loop waits for a key before it looks for a new answer.
const TICK: Duration = Duration::from_millis(50);

/// Whether the terminal is taken over now, so that restoring it happens
/// once however many ways out are taken.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Shows the live view until a quitting key, starting from `first`.
///
/// # Errors
///
/// If stdout is not a terminal, or the terminal cannot be driven; the
/// terminal is restored before the error is returned.
pub fn run(endpoint: Endpoint, first: StatsDocument, interval: Duration) -> Result<(), Error> {
    if !std::io::stdout().is_terminal() {
        return Err(Error::new(
            "stdout is not a terminal; use --once to print a frame as text",
        ));
    }
    let addr = endpoint.authority().to_owned();
    let answers = spawn_fetcher(endpoint, interval);
    let stop = stop_on_signals().context(|| "installing the signal handlers")?;
    let mut guard = TerminalGuard::enter().context(|| "taking over the terminal")?;

    let mut view = View::new(None, &first);
    let mut last = first;
    let mut error: Option<String> = None;
    loop {
        let screen = Screen {
            addr: &addr,
            view: Some(&view),
            error: error.as_deref(),
            interval,
            live: true,
        };
        guard
            .terminal
            .draw(|frame| draw::draw(frame, &screen))
            .context(|| "drawing")?;
        // Wait for something that changes the frame: a key, a resize, or
        // an answer.
        loop {
            if stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            if event::poll(TICK).context(|| "reading keys")? {
                match event::read().context(|| "reading keys")? {
                    Event::Key(key) if quits(&key) => return Ok(()),
                    Event::Resize(..) => break,
                    _ => {}
                }
            }
            match answers.try_recv() {
                Ok(Ok(snapshot)) => {
                    view = View::new(Some(&last), &snapshot);
                    last = snapshot;
                    error = None;
                    break;
                }
                Ok(Err(message)) => {
                    error = Some(message);
                    break;
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => {
                    return Err(Error::new("the fetching thread stopped"));
                }
            }
        }
    }
}

/// The signals that ask the process to end: each sets the flag returned
/// (and nothing else), which the loop turns into a clean quit.
const STOP_SIGNALS: [i32; 4] = [
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGQUIT,
];

/// Registers [`STOP_SIGNALS`] to set the flag it returns.
fn stop_on_signals() -> std::io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in STOP_SIGNALS {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// Whether `key` quits: q, Esc, or Ctrl-C.
fn quits(key: &KeyEvent) -> bool {
    key.kind == KeyEventKind::Press
        && match key.code {
            KeyCode::Char('q' | 'Q') | KeyCode::Esc => true,
            KeyCode::Char('c') => key.modifiers.contains(KeyModifiers::CONTROL),
            _ => false,
        }
}

/// Starts the thread that asks `endpoint` for `/stats` every `interval`
/// and sends each snapshot, or the error as text. The thread ends at the
/// first send after the receiver is gone.
fn spawn_fetcher(
    endpoint: Endpoint,
    interval: Duration,
) -> Receiver<Result<StatsDocument, String>> {
    let (sender, receiver) = mpsc::channel();
    thread::Builder::new()
        .name("keel-top-fetch".into())
        .spawn(move || {
            let mut next = Instant::now() + interval;
            loop {
                thread::sleep(next.saturating_duration_since(Instant::now()));
                let answer = super::fetch_stats(&endpoint).map_err(|error| error.to_string());
                if sender.send(answer).is_err() {
                    return;
                }
                // Keep the cadence; after a slow answer, start afresh.
                next += interval;
                let now = Instant::now();
                if next < now {
                    next = now + interval;
                }
            }
        })
        .expect("a thread can be started");
    receiver
}

/// The terminal, taken over: raw mode, the alternate screen, the cursor
/// hidden. Dropping it gives the terminal back.
struct TerminalGuard {
    /// The ratatui terminal drawing on stdout.
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl TerminalGuard {
    /// Takes the terminal over, after installing the panic hook that
    /// gives it back.
    fn enter() -> std::io::Result<TerminalGuard> {
        install_panic_hook();
        terminal::enable_raw_mode()?;
        TAKEN.store(true, Ordering::SeqCst);
        let mut stdout = std::io::stdout();
        if let Err(error) = execute!(stdout, terminal::EnterAlternateScreen, cursor::Hide) {
            restore();
            return Err(error);
        }
        match Terminal::new(CrosstermBackend::new(stdout)) {
            Ok(terminal) => Ok(TerminalGuard { terminal }),
            Err(error) => {
                restore();
                Err(error)
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

/// Gives the terminal back (leaves the alternate screen, shows the
/// cursor, leaves raw mode), if it is taken; errors are ignored, as there
/// is nothing better to do on the way out.
fn restore() {
    if TAKEN.swap(false, Ordering::SeqCst) {
        let _ = execute!(
            std::io::stdout(),
            terminal::LeaveAlternateScreen,
            cursor::Show
        );
        let _ = terminal::disable_raw_mode();
    }
}

/// Makes every panic restore the terminal before the usual report.
fn install_panic_hook() {
    /// The hook is installed once, however many times the view starts.
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// q, Q, Esc and Ctrl-C quit; a plain c, other keys, and releases do
    /// not.
    #[test]
    fn quitting_keys() {
        let key = |code, modifiers| KeyEvent::new(code, modifiers);
        assert!(quits(&key(KeyCode::Char('q'), KeyModifiers::NONE)));
        assert!(quits(&key(KeyCode::Char('Q'), KeyModifiers::SHIFT)));
        assert!(quits(&key(KeyCode::Esc, KeyModifiers::NONE)));
        assert!(quits(&key(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert!(!quits(&key(KeyCode::Char('c'), KeyModifiers::NONE)));
        assert!(!quits(&key(KeyCode::Enter, KeyModifiers::NONE)));
        let mut release = key(KeyCode::Char('q'), KeyModifiers::NONE);
        release.kind = KeyEventKind::Release;
        assert!(!quits(&release));
    }

    /// A signal that asks the process to end sets the flag the loop quits
    /// on, instead of killing the process with the terminal still taken.
    #[test]
    fn stop_signals_set_the_flag() {
        let stop = stop_on_signals().unwrap();
        assert!(!stop.load(Ordering::SeqCst));
        signal_hook::low_level::raise(signal_hook::consts::SIGTERM).unwrap();
        assert!(stop.load(Ordering::SeqCst), "SIGTERM sets the flag");
    }

    /// Restoring a terminal that was never taken does nothing (and in
    /// particular writes no escape sequences into the test's output).
    #[test]
    fn restore_without_taking_is_a_no_op() {
        restore();
        assert!(!TAKEN.load(Ordering::SeqCst));
    }
}
