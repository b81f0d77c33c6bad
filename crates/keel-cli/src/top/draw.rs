//! Drawing a [`View`] with ratatui: the same code paints the live
//! terminal, the plain-text frame of `--once`, and the buffers the tests
//! read.
//!
//! Every figure is text, and each worker state has its own glyph as well
//! as its own colour, so a frame printed without colours (by `--once`, or
//! on a terminal without them) reads the same as the live view. Rows are
//! laid out in fixed-width columns and the bars take the width that is
//! left, so the frame fits any terminal at least 80 columns wide.

use std::fmt::Write as _;
use std::time::Duration;

use ratatui::backend::TestBackend;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};
use ratatui::{Frame, Terminal};

use super::model::{ClassRow, View, WorkerRow, STATES};

/// What one frame shows: the newest view, and the error of the newest
/// fetch if it failed.
#[derive(Debug, Clone, Copy)]
pub struct Screen<'a> {
    /// The admin endpoint's address, as the user wrote it.
    pub addr: &'a str,
    /// The view of the newest answer, if any came.
    pub view: Option<&'a View>,
    /// Why the newest fetch failed, if it did.
    pub error: Option<&'a str>,
    /// How often the view is refreshed.
    pub interval: Duration,
    /// Whether a person is watching live (and so needs the key hints).
    pub live: bool,
}

/// Lines inside the summary box: one more with a tokio side, one more
/// with an urgent lane.
fn summary_height(screen: &Screen<'_>) -> u16 {
    6 + u16::from(screen.view.is_some_and(|v| v.tokio.is_some()))
        + u16::from(screen.view.is_some_and(|v| v.lane.is_some()))
}

/// The glyph and colour of each of [`STATES`], in order.
const STATE_GLYPHS: [(char, Color); 6] = [
    ('█', Color::Green),
    ('▓', Color::Cyan),
    ('▒', Color::Yellow),
    ('░', Color::Magenta),
    ('~', Color::Red),
    ('·', Color::DarkGray),
];

/// The rows a frame needs to show `screen` whole.
pub fn height(screen: &Screen<'_>) -> u16 {
    let (workers, classes) = screen
        .view
        .map_or((0, 0), |v| (v.workers.len(), v.classes.len()));
    let rows = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
    let footer = footer_height(screen);
    (summary_height(screen) + 2)
        .saturating_add(rows(workers).saturating_add(3))
        .saturating_add(rows(classes).saturating_add(3))
        .saturating_add(footer)
}

/// Draws `screen` over the whole frame.
pub fn draw(frame: &mut Frame<'_>, screen: &Screen<'_>) {
    let area = frame.area();
    let footer = footer_height(screen);
    let (worker_rows, class_rows) = screen
        .view
        .map_or((0, 0), |v| (v.workers.len(), v.classes.len()));
    let rows = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
    let class_height = rows(class_rows).saturating_add(3);
    // The workers take the rows the rest leaves, up to what they need
    // and at least enough to say how many do not fit; spare rows go
    // below the classes.
    let left = area
        .height
        .saturating_sub(summary_height(screen) + 2 + class_height + footer);
    let worker_height = rows(worker_rows).saturating_add(3).min(left).max(4);
    let [summary, workers, classes, _, bottom] = Layout::vertical([
        Constraint::Length(summary_height(screen) + 2),
        Constraint::Length(worker_height),
        Constraint::Length(class_height),
        Constraint::Fill(1),
        Constraint::Length(footer),
    ])
    .areas(area);

    let title = format!(" keel top · {} ", screen.addr);
    let summary_block = Block::bordered().title(Span::styled(title, bold()));
    let Some(view) = screen.view else {
        let waiting = Paragraph::new("waiting for the first /stats answer…").block(summary_block);
        frame.render_widget(waiting, summary);
        draw_footer(frame, bottom, screen);
        return;
    };
    frame.render_widget(
        Paragraph::new(summary_lines(view)).block(summary_block),
        summary,
    );

    let legend: Vec<Span<'_>> = STATES
        .iter()
        .zip(STATE_GLYPHS)
        .flat_map(|(name, (glyph, color))| {
            [
                Span::styled(glyph.to_string(), Style::default().fg(color)),
                Span::raw(format!(" {name} ")),
            ]
        })
        .collect();
    let mut worker_title = vec![Span::styled(" workers ", bold()), Span::raw("· ")];
    worker_title.extend(legend);
    let worker_block = Block::bordered().title(Line::from(worker_title));
    let inner = worker_block.inner(workers);
    frame.render_widget(
        Paragraph::new(worker_lines(view, inner)).block(worker_block),
        workers,
    );

    let class_block = Block::bordered().title(Line::from(vec![
        Span::styled(" classes ", bold()),
        Span::raw("· share of poll time over the span (█ got, │ owed) · queue delay since start "),
    ]));
    let inner = class_block.inner(classes);
    frame.render_widget(
        Paragraph::new(class_lines(view, inner.width)).block(class_block),
        classes,
    );
    draw_footer(frame, bottom, screen);
}

/// The rows under the classes: two for an error (long ones wrap), one
/// for the keys of the live view, none for a printed frame.
fn footer_height(screen: &Screen<'_>) -> u16 {
    if screen.error.is_some() {
        2
    } else {
        u16::from(screen.live)
    }
}

/// The last lines: the error of the newest fetch, or the keys.
fn draw_footer(frame: &mut Frame<'_>, area: Rect, screen: &Screen<'_>) {
    let every = format!("every {:.1} s", screen.interval.as_secs_f64());
    let line = match screen.error {
        Some(error) => Line::from(vec![
            Span::styled(
                format!("error: {error}"),
                Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(" · retrying {every}")),
        ]),
        None => Line::from(format!("q, Esc or Ctrl-C quits · refreshed {every}")),
    };
    frame.render_widget(Paragraph::new(line).wrap(Wrap { trim: true }), area);
}

/// The summary: uptime and the span, utilization against CPU, deliveries,
/// the blocking pool, and the IO poll gap.
fn summary_lines(view: &View) -> Vec<Line<'static>> {
    let span = if view.since_start {
        "averages since start (first sample)".to_owned()
    } else {
        format!("rates over the last {:.2} s", view.span_s)
    };
    let process = view
        .process_cpu_pct
        .map_or_else(|| "n/a".to_owned(), |p| format!("{p:.1}%"));
    let [off, fixed, adaptive] = view.deliveries_per_s_by_mode;
    let per_delivery = view.bytes_per_delivery.map_or_else(
        || "no deliveries".to_owned(),
        |b| format!("{}/delivery", bytes(b)),
    );
    let b = &view.blocking;
    let gap = match view.io_poll_gap_max_us {
        Some(gap) => {
            let worker = view
                .workers
                .iter()
                .find(|w| w.io_poll_gap_max_us == Some(gap))
                .map_or(String::new(), |w| format!(" (worker {})", w.index));
            format!("{}{worker}", micros(gap))
        }
        None => "n/a (not reported by this server)".to_owned(),
    };
    let mut lines = vec![
        Line::from(format!(
            "up {:.1} s · {} workers · {} live tasks · {} timers · {span}",
            view.uptime_s,
            view.workers.len(),
            view.live_tasks,
            view.pending_timers,
        )),
        Line::from(vec![
            Span::raw("utilization "),
            Span::styled(format!("{:.1}%", view.utilization_pct), bold()),
            Span::raw(format!(
                " · spin {:.1}% · CPU accounted {:.1}% · process {process} (% of worker time)",
                view.spin_pct, view.accounted_cpu_pct,
            )),
        ]),
        Line::from(format!(
            "deliveries {}/s (off {}, fixed {}, adaptive {}) · {per_delivery}",
            rate(view.deliveries_per_s),
            rate(off),
            rate(fixed),
            rate(adaptive),
        )),
        Line::from(format!(
            "blocking pool: {}/{} threads, {} idle · {} jobs/s done · {:.2} threads busy",
            b.threads,
            b.max_threads,
            b.idle,
            rate(b.completed_per_s),
            b.busy_threads,
        )),
        Line::from(format!(
            "blocking queue: {}/{} jobs queued · {} callers waiting · {} rejected",
            b.queued, b.queue_capacity, b.waiting, b.rejected,
        )),
    ];
    if let Some(tokio) = &view.tokio {
        lines.push(Line::from(format!(
            "tokio side (outside the classes): {} workers, {} threads · {} tasks · {:.2} CPUs used · {:.2} workers busy",
            tokio.workers, tokio.threads, tokio.alive_tasks, tokio.cpus, tokio.busy_workers,
        )));
    }
    if let Some(lane) = &view.lane {
        let cpus = lane
            .cpus
            .map_or_else(|| "n/a".to_owned(), |cpus| format!("{cpus:.2}"));
        lines.push(Line::from(format!(
            "urgent lane ({}): {} polls/s · {cpus} CPUs used · {:.2} CPUs in polls · {} throttled",
            lane.priority,
            rate(lane.polls_per_s),
            lane.busy,
            lane.throttled,
        )));
    }
    lines.push(Line::from(format!("IO poll gap max: {gap}")));
    lines
}

/// The width of a worker row's figures after its bar: busy, six states,
/// the poll rate, and the poll gap if reported.
fn worker_figures_width(gaps: bool) -> u16 {
    7 * 7 + 9 + if gaps { 9 } else { 0 }
}

/// The header and one line per worker that fits in `area`; if some do
/// not fit, the last line says how many are left out.
fn worker_lines(view: &View, area: Rect) -> Vec<Line<'static>> {
    let gaps = view.io_poll_gap_max_us.is_some();
    let label = 5;
    let bar = area
        .width
        .saturating_sub(label + 1 + worker_figures_width(gaps))
        .max(5);
    // The bar's heading is cut to the bar, to keep the columns aligned.
    let mut header = format!(
        "{:<label$} {:<bar$.bar$}",
        "  #",
        "time by state",
        label = usize::from(label),
        bar = usize::from(bar)
    );
    for name in ["busy", "task", "io", "timers", "search", "spin", "parked"] {
        let _ = write!(header, "{name:>7}");
    }
    let _ = write!(header, "{:>9}", "polls/s");
    if gaps {
        let _ = write!(header, "{:>9}", "poll gap");
    }
    let mut lines = vec![Line::styled(header, bold())];
    let room = usize::from(area.height.saturating_sub(1));
    let shown = if view.workers.len() > room {
        room.saturating_sub(1)
    } else {
        view.workers.len()
    };
    for worker in &view.workers[..shown] {
        lines.push(worker_line(
            worker,
            usize::from(label),
            usize::from(bar),
            gaps,
        ));
    }
    if shown < view.workers.len() {
        lines.push(Line::from(format!(
            "  … {} more workers (a taller terminal shows them)",
            view.workers.len() - shown
        )));
    }
    lines
}

/// One worker: its index, its stacked bar, and its figures.
fn worker_line(worker: &WorkerRow, label: usize, bar: usize, gaps: bool) -> Line<'static> {
    let mut spans = vec![Span::raw(format!(
        "{:>label$} ",
        format!("w{}", worker.index)
    ))];
    let cells = apportion(&worker.state_pct, bar);
    for (count, (glyph, color)) in cells.iter().zip(STATE_GLYPHS) {
        if *count > 0 {
            let text: String = std::iter::repeat_n(glyph, *count).collect();
            spans.push(Span::styled(text, Style::default().fg(color)));
        }
    }
    let drawn: usize = cells.iter().sum();
    if drawn < bar {
        spans.push(Span::raw(" ".repeat(bar - drawn)));
    }
    let mut figures = format!("{:>6.1}%", worker.utilization_pct());
    for pct in worker.state_pct {
        let _ = write!(figures, "{pct:>6.1}%");
    }
    let _ = write!(figures, "{:>9}", rate(worker.polls_per_s));
    if gaps {
        let gap = worker
            .io_poll_gap_max_us
            .map_or_else(|| "n/a".to_owned(), micros);
        let _ = write!(figures, "{gap:>9}");
    }
    spans.push(Span::raw(figures));
    Line::from(spans)
}

/// Splits `width` cells among `pcts` (percent of the whole), rounding so
/// that the cells add up to the rounded total (largest remainders first).
fn apportion(pcts: &[f64; 6], width: usize) -> [usize; 6] {
    let exact: Vec<f64> = pcts
        .iter()
        .map(|p| p.clamp(0.0, 100.0) / 100.0 * width as f64)
        .collect();
    let total = (exact.iter().sum::<f64>().round() as usize).min(width);
    let mut cells: [usize; 6] = std::array::from_fn(|i| exact[i].floor() as usize);
    let mut order: Vec<usize> = (0..6).collect();
    order.sort_by(|&a, &b| {
        let frac = |i: usize| exact[i] - exact[i].floor();
        frac(b).total_cmp(&frac(a))
    });
    let mut left = total.saturating_sub(cells.iter().sum());
    for i in order {
        if left == 0 {
            break;
        }
        cells[i] += 1;
        left -= 1;
    }
    cells
}

/// The header and one line per class, `width` columns wide.
fn class_lines(view: &View, width: u16) -> Vec<Line<'static>> {
    let name = view
        .classes
        .iter()
        .map(|c| c.name.chars().count())
        .max()
        .unwrap_or(0)
        .max(6);
    // Three spaces: before the name, after it, and before the bar.
    let figures = 7 + 7 + 7 + 8 + 9 + 7 + 9 + 9;
    let bar = usize::from(width).saturating_sub(name + 3 + figures).max(5);
    let header = format!(
        " {:<name$} {:>7}{:>7}{:>7} {:<bar$}{:>8}{:>9}{:>7}{:>9}{:>9}",
        "class", "shares", "owed", "got", "", "workers", "polls/s", "stalls", "q p99", "q max",
    );
    let mut lines = vec![Line::styled(header, bold())];
    for class in &view.classes {
        lines.push(class_line(class, name, bar));
    }
    lines
}

/// One class: configured against received share, and its queue delay.
fn class_line(class: &ClassRow, name: usize, bar: usize) -> Line<'static> {
    let got = class
        .wall_share_pct
        .map_or_else(|| "-".to_owned(), |p| format!("{p:.1}%"));
    let head = format!(
        " {:<name$} {:>7}{:>7}{:>7} ",
        class.name,
        class.shares,
        format!("{:.1}%", class.configured_pct),
        got,
    );
    let filled = class.wall_share_pct.map_or(0, |p| {
        (p.clamp(0.0, 100.0) / 100.0 * bar as f64).round() as usize
    });
    let owed = ((class.configured_pct.clamp(0.0, 100.0) / 100.0 * bar as f64).round() as usize)
        .min(bar.saturating_sub(1));
    let mut spans = vec![Span::raw(head)];
    for i in 0..bar {
        let span = if i == owed {
            Span::styled(
                "│",
                Style::default()
                    .fg(Color::Yellow)
                    .add_modifier(Modifier::BOLD),
            )
        } else if i < filled {
            Span::styled("█", Style::default().fg(Color::Green))
        } else {
            Span::styled("·", Style::default().fg(Color::DarkGray))
        };
        spans.push(span);
    }
    let delay = |us: Option<f64>| us.map_or_else(|| "-".to_owned(), micros);
    spans.push(Span::raw(format!(
        "{:>8.2}{:>9}{:>7}{:>9}{:>9}",
        class.workers_held,
        rate(class.polls_per_s),
        class.stalls,
        delay(class.queue_p99_us),
        delay(class.queue_max_us),
    )));
    Line::from(spans)
}

/// `screen` drawn into a `width`-column buffer as tall as it needs, as
/// plain text: one line per row, without trailing spaces.
pub fn render_text(screen: &Screen<'_>, width: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height(screen)))
        .expect("a test backend always works");
    terminal
        .draw(|frame| draw(frame, screen))
        .expect("a test backend always works");
    buffer_text(terminal.backend().buffer())
}

/// The text of `buffer`, one line per row, without trailing spaces.
pub fn buffer_text(buffer: &ratatui::buffer::Buffer) -> String {
    let mut text = String::new();
    for y in 0..buffer.area.height {
        let mut line = String::new();
        for x in 0..buffer.area.width {
            line.push_str(buffer[(x, y)].symbol());
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

/// Bold text.
fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

/// A rate, short: `12.3`, `45.6k`, `7.89M`.
fn rate(per_s: f64) -> String {
    if per_s < 1e3 {
        format!("{per_s:.1}")
    } else if per_s < 1e6 {
        format!("{:.1}k", per_s / 1e3)
    } else {
        format!("{:.2}M", per_s / 1e6)
    }
}

/// Microseconds, short: `42 us`, `1.5 ms`, `2.00 s`.
fn micros(us: f64) -> String {
    if us < 1e3 {
        format!("{us:.0} us")
    } else if us < 1e6 {
        format!("{:.1} ms", us / 1e3)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

/// A byte count, short: `512 B`, `4.0 KiB`, `1.5 MiB`.
fn bytes(b: f64) -> String {
    if b < 1024.0 {
        format!("{b:.0} B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::tests::{snapshot, with_lane, with_tokio};
    use super::*;

    /// A screen of `view` as `--once` prints it.
    fn once(view: &View) -> Screen<'_> {
        Screen {
            addr: "127.0.0.1:9",
            view: Some(view),
            error: None,
            interval: Duration::from_secs(1),
            live: false,
        }
    }

    /// A runtime with a tokio side gets one more summary line, before the
    /// IO poll gap, and the frame grows by it.
    #[test]
    fn the_tokio_side_has_its_line() {
        let plain = View::new(Some(&snapshot(10.0, None)), &snapshot(11.0, None));
        let view = View::new(Some(&with_tokio(10.0)), &with_tokio(11.0));
        let text = render_text(&once(&view), 140);
        let line = "tokio side (outside the classes): 1 workers, 2 threads · 4 tasks · 0.25 CPUs used · 0.50 workers busy";
        let at = text.find(line).unwrap_or_else(|| panic!("{text}"));
        assert!(at < text.find("IO poll gap max").unwrap(), "{text}");
        assert!(!render_text(&once(&plain), 140).contains("tokio side"));
        assert_eq!(height(&once(&view)), height(&once(&plain)) + 1);
    }

    /// A runtime with an urgent lane gets one more summary line, and the
    /// frame grows by it.
    #[test]
    fn the_lane_has_its_line() {
        let plain = View::new(Some(&snapshot(10.0, None)), &snapshot(11.0, None));
        let view = View::new(Some(&with_lane(10.0)), &with_lane(11.0));
        let text = render_text(&once(&view), 140);
        let line = "urgent lane (fifo:1): 100.0 polls/s · 0.50 CPUs used · 0.25 CPUs in polls · 2 throttled";
        let at = text.find(line).unwrap_or_else(|| panic!("{text}"));
        assert!(at < text.find("IO poll gap max").unwrap(), "{text}");
        assert!(!render_text(&once(&plain), 140).contains("urgent lane"));
        assert_eq!(height(&once(&view)), height(&once(&plain)) + 1);
    }

    /// The frame shows every worker with its states, every class with its
    /// shares and received share, and the summary figures.
    #[test]
    fn frame_shows_workers_classes_and_figures() {
        let view = View::new(Some(&snapshot(10.0, None)), &snapshot(11.0, None));
        let text = render_text(&once(&view), 120);
        assert!(text.contains("keel top · 127.0.0.1:9"), "{text}");
        assert!(text.contains("rates over the last 1.00 s"), "{text}");
        assert!(text.contains("utilization 60.0%"), "{text}");
        assert!(
            text.contains("CPU accounted 70.0% · process 75.0% (% of worker time)"),
            "{text}"
        );
        assert!(
            text.contains(
                "deliveries 200.0/s (off 200.0, fixed 0.0, adaptive 0.0) · 512 B/delivery"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "blocking pool: 2/512 threads, 1 idle · 10.0 jobs/s done · 0.50 threads busy"
            ),
            "{text}"
        );
        assert!(
            text.contains("blocking queue: 0/1024 jobs queued · 0 callers waiting · 0 rejected"),
            "{text}"
        );
        assert!(
            text.contains("IO poll gap max: n/a (not reported by this server)"),
            "{text}"
        );
        let w1 = text
            .lines()
            .find(|l| l.contains("   w1 "))
            .expect("a row for worker 1");
        assert!(w1.contains("██████"), "{w1}");
        assert!(
            w1.contains("60.0%  50.0%  10.0%   0.0%   5.0%   5.0%  30.0%"),
            "{w1}"
        );
        assert!(w1.contains("1.0k"), "{w1}");
        let bulk = text
            .lines()
            .find(|l| l.contains(" bulk "))
            .expect("a row for bulk");
        assert!(bulk.contains("1   7.7%  60.0%"), "{bulk}");
        assert!(bulk.contains("42 us"), "{bulk}");
        assert!(
            text.lines()
                .any(|l| l.contains(" urgent ") && l.contains("8  61.5%")),
            "{text}"
        );
        assert!(!text.contains("q, Esc"), "no key hints in a printed frame");
    }

    /// A server that reports poll gaps gets a column and a summary.
    #[test]
    fn poll_gaps_are_shown_when_reported() {
        let view = View::new(None, &snapshot(3.0, Some(1500.0)));
        let text = render_text(&once(&view), 120);
        assert!(
            text.contains("IO poll gap max: 1.5 ms (worker 0)"),
            "{text}"
        );
        assert!(text.contains("poll gap"), "{text}");
        assert!(text.contains("averages since start"), "{text}");
    }

    /// A failed fetch shows its error under the last view, and a short
    /// terminal says how many workers it left out.
    #[test]
    fn errors_and_short_terminals() {
        let view = View::new(None, &snapshot(3.0, None));
        let screen = Screen {
            error: Some("127.0.0.1:9 does not answer (connecting: refused)"),
            live: true,
            ..once(&view)
        };
        let mut terminal = Terminal::new(TestBackend::new(100, 20)).unwrap();
        terminal.draw(|frame| draw(frame, &screen)).unwrap();
        let text = buffer_text(terminal.backend().buffer());
        assert!(
            text.contains("error: 127.0.0.1:9 does not answer"),
            "{text}"
        );
        assert!(text.contains("retrying every 1.0 s"), "{text}");
        assert!(text.contains("… 2 more workers"), "{text}");
    }

    /// At 80 columns every row still fits whole: the bars give way.
    #[test]
    fn rows_fit_80_columns() {
        let view = View::new(Some(&snapshot(10.0, None)), &snapshot(11.0, Some(80.0)));
        let text = render_text(&once(&view), 80);
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line}");
        }
        for row in ["   w1 ", " urgent ", " bulk "] {
            let line = text.lines().find(|l| l.contains(row)).unwrap();
            assert_eq!(line.chars().count(), 80, "{line}");
            assert!(
                line.ends_with("s│"),
                "the row ends with its last figure: {line}"
            );
        }
        for end in [
            "rates over the last 1.00 s",
            "process 75.0%",
            "/delivery",
            "rejected",
        ] {
            assert!(text.contains(end), "{end}: {text}");
        }
    }

    /// Bars fill their width exactly when the shares add up to 100%.
    #[test]
    fn apportion_rounds_to_the_width() {
        assert_eq!(
            apportion(&[33.4, 33.3, 33.3, 0.0, 0.0, 0.0], 10),
            [4, 3, 3, 0, 0, 0]
        );
        assert_eq!(apportion(&[0.0; 6], 10), [0; 6]);
        assert_eq!(
            apportion(&[50.0, 50.0, 0.0, 0.0, 0.0, 0.0], 7)
                .iter()
                .sum::<usize>(),
            7
        );
    }
}
