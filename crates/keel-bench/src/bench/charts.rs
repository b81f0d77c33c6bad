//! The report's charts, drawn as SVG with `plotters`.
//!
//! A scenario describes what it wants drawn as data ([`Chart`]): lines
//! over time (a probe's latency per slice of the run, one line per runtime)
//! or stacked bars (where each worker's wall time went, state by state).
//! [`render`] draws one chart into one file; the report writes them next to
//! `report.json` and lists them there and in `report.md`. Charts are an
//! aid for reading a run: every figure in them is in `report.json` too.

use std::path::Path;

use keel::admin::WorkerFigures;
use plotters::prelude::*;
use serde::Serialize;

use crate::error::Error;
use crate::load::summary::SeriesPoint;
use crate::serve::node_keel::worker_pairs;

/// Pixels of one chart.
const SIZE: (u32, u32) = (960, 540);

/// A chart a scenario wants in its report.
#[derive(Debug, Clone, PartialEq)]
pub enum Chart {
    /// Lines over time.
    Lines(LineChart),
    /// Bars made of stacked layers.
    Stacked(StackedBars),
}

/// Lines over a shared x axis (time, in seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// File-name part (`latency`): the file is `<scenario>-<slug>.svg`.
    pub slug: &'static str,
    /// The title drawn on top.
    pub title: String,
    /// What the y axis measures, with its unit.
    pub y_label: &'static str,
    /// One line each: its name and its `(seconds, value)` points.
    pub series: Vec<(String, Vec<(f64, f64)>)>,
}

/// Bars, each the sum of its layers.
#[derive(Debug, Clone, PartialEq)]
pub struct StackedBars {
    /// File-name part: the file is `<scenario>-<slug>.svg`.
    pub slug: &'static str,
    /// The title drawn on top.
    pub title: String,
    /// What the y axis measures, with its unit.
    pub y_label: &'static str,
    /// The bars' labels, left to right.
    pub bars: Vec<String>,
    /// The layers, bottom first: a name and one value per bar.
    pub layers: Vec<(&'static str, Vec<f64>)>,
}

/// What `report.json` says of a chart: its file and title.
#[derive(Debug, Clone, Serialize)]
pub struct ChartFile {
    /// The SVG's file name, next to `report.json`.
    pub file: String,
    /// The chart's title.
    pub title: String,
}

impl Chart {
    /// The file-name part.
    pub fn slug(&self) -> &'static str {
        match self {
            Chart::Lines(c) => c.slug,
            Chart::Stacked(c) => c.slug,
        }
    }

    /// The title.
    pub fn title(&self) -> &str {
        match self {
            Chart::Lines(c) => &c.title,
            Chart::Stacked(c) => &c.title,
        }
    }

    /// Whether there is anything to draw.
    pub fn is_empty(&self) -> bool {
        match self {
            Chart::Lines(c) => c.series.iter().all(|(_, points)| points.is_empty()),
            Chart::Stacked(c) => c.bars.is_empty() || c.layers.is_empty(),
        }
    }
}

/// The colour of the `i`th line or layer: distinct, and readable on white.
fn colour(i: usize) -> RGBColor {
    const PALETTE: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(127, 127, 127),
        RGBColor(23, 190, 207),
    ];
    PALETTE[i % PALETTE.len()]
}

/// Draws `chart` into the SVG file `path`.
pub fn render(chart: &Chart, path: &Path) -> Result<(), Error> {
    let drawn = match chart {
        Chart::Lines(c) => draw_lines(c, path),
        Chart::Stacked(c) => draw_stacked(c, path),
    };
    drawn.map_err(|e| Error::new(format!("drawing {}: {e}", path.display())))
}

/// The error type of a drawing.
type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Draws lines; the y axis is logarithmic, so a 100 µs baseline and a
/// 20 ms stall are both readable.
fn draw_lines(chart: &LineChart, path: &Path) -> DrawResult {
    let points = chart.series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_min, mut y_max) = (0.0f64, f64::INFINITY, 0.0f64);
    for &(x, y) in points {
        x_max = x_max.max(x);
        if y > 0.0 && y.is_finite() {
            y_min = y_min.min(y);
            y_max = y_max.max(y);
        }
    }
    if !y_min.is_finite() {
        (y_min, y_max) = (1.0, 10.0);
    }
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            0.0..x_max.max(1e-3),
            ((y_min / 1.5)..(y_max * 1.5)).log_scale(),
        )?;
    ctx.configure_mesh()
        .x_desc("time into the measured window (s)")
        .y_desc(chart.y_label)
        .draw()?;
    for (i, (name, points)) in chart.series.iter().enumerate() {
        let style = colour(i).stroke_width(2);
        let visible = points.iter().copied().filter(|&(_, y)| y > 0.0);
        ctx.draw_series(LineSeries::new(visible, style))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 20, y)], colour(i).stroke_width(2))
            });
    }
    ctx.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Draws stacked bars, one per label, layers bottom first.
fn draw_stacked(chart: &StackedBars, path: &Path) -> DrawResult {
    let n = chart.bars.len();
    let totals: Vec<f64> = (0..n)
        .map(|b| {
            chart
                .layers
                .iter()
                .map(|(_, v)| v.get(b).copied().unwrap_or(0.0).max(0.0))
                .sum()
        })
        .collect();
    // Headroom above the tallest bar for the legend.
    let top = totals.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.35;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let labels = chart.bars.clone();
    let mut ctx = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..top)?;
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(n.max(1))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .y_desc(chart.y_label)
        .draw()?;
    let mut base = vec![0.0; n];
    for (i, (name, values)) in chart.layers.iter().enumerate() {
        let fill = colour(i).filled();
        let bars: Vec<Rectangle<(SegmentValue<usize>, f64)>> = (0..n)
            .map(|b| {
                let value = values.get(b).copied().unwrap_or(0.0).max(0.0);
                let rect = Rectangle::new(
                    [
                        (SegmentValue::Exact(b), base[b]),
                        (SegmentValue::Exact(b + 1), base[b] + value),
                    ],
                    fill,
                );
                base[b] += value;
                rect
            })
            .collect();
        ctx.draw_series(bars)?.label(*name).legend(move |(x, y)| {
            Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour(i).filled())
        });
    }
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Lines of per-slice p99 latency, one per `(name, points)`.
pub fn latency_lines(
    slug: &'static str,
    title: String,
    series: Vec<(String, &[SeriesPoint])>,
) -> Chart {
    Chart::Lines(LineChart {
        slug,
        title,
        y_label: "p99 RTT per 250 ms (µs, log scale)",
        series: series
            .into_iter()
            .map(|(name, points)| {
                let line = points
                    .iter()
                    .filter(|p| p.count > 0)
                    .map(|p| (p.t_s, p.p99_us))
                    .collect();
                (name, line)
            })
            .collect(),
    })
}

/// Reads one state's seconds from a worker's figures.
pub type StateField = fn(&WorkerFigures) -> f64;

/// The state layers of keel's per-worker accounting, in the order they
/// stack, with the field of [`WorkerFigures`] each comes from.
pub const KEEL_STATES: [(&str, StateField); 6] = [
    ("task", |w| w.task_s),
    ("io", |w| w.io_s),
    ("timers", |w| w.timers_s),
    ("search", |w| w.search_s),
    ("spin", |w| w.spin_s),
    ("parked", |w| w.parked_s),
];

/// Per worker, the share of the window (in %) each state took between two
/// marks of keel's accounting (their `worker_states`, see
/// [`worker_pairs`]); `None` when either mark is not keel's or the two
/// do not hold the same workers.
pub fn keel_worker_states(
    start: &serde_json::Value,
    end: &serde_json::Value,
) -> Option<Vec<[f64; 6]>> {
    let pairs = worker_pairs(start, end)?;
    let started = start["worker_states"].as_array().map_or(0, Vec::len);
    if started != pairs.len() || pairs.is_empty() {
        return None;
    }
    let shares = pairs
        .iter()
        .map(|(s, e)| {
            let mut shares = [0.0; 6];
            for (slot, (_, state)) in shares.iter_mut().zip(KEEL_STATES) {
                *slot = (state(e) - state(s)).max(0.0);
            }
            let wall: f64 = shares.iter().sum();
            if wall > 0.0 {
                for share in &mut shares {
                    *share *= 100.0 / wall;
                }
            }
            shares
        })
        .collect();
    Some(shares)
}

/// Stacked bars of per-worker states: for each phase `(label, workers)`,
/// one bar per worker, labelled `<label> w<index>`.
pub fn worker_state_bars(
    slug: &'static str,
    title: String,
    phases: &[(String, Vec<[f64; 6]>)],
) -> Chart {
    let workers: Vec<(String, [f64; 6])> = phases
        .iter()
        .flat_map(|(label, states)| {
            states
                .iter()
                .enumerate()
                .map(move |(i, s)| (format!("{label} w{i}"), *s))
        })
        .collect();
    Chart::Stacked(StackedBars {
        slug,
        title,
        y_label: "share of the worker's wall time (%)",
        bars: workers.iter().map(|(label, _)| label.clone()).collect(),
        layers: KEEL_STATES
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (*name, workers.iter().map(|(_, s)| s[i]).collect()))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shares come from the difference of two marks and add up to 100.
    #[test]
    fn worker_states_from_marks() {
        let worker = |states: [f64; 6]| {
            let mut w = WorkerFigures::default();
            [
                w.task_s, w.io_s, w.timers_s, w.search_s, w.spin_s, w.parked_s,
            ] = states;
            w
        };
        let start = serde_json::json!({"worker_states": [worker([1.0, 0.0, 0.0, 0.0, 0.0, 1.0])]});
        let end = serde_json::json!({"worker_states": [worker([2.0, 0.5, 0.0, 0.25, 0.25, 3.0])]});
        let states = keel_worker_states(&start, &end).unwrap();
        assert_eq!(states, vec![[25.0, 12.5, 0.0, 6.25, 6.25, 50.0]]);
        let tokio = serde_json::json!({"workers": [{"busy_s": 1.0}]});
        assert_eq!(keel_worker_states(&tokio, &tokio), None);
        assert_eq!(keel_worker_states(&serde_json::Value::Null, &end), None);
        let two = serde_json::json!({"worker_states": [
            worker([1.0; 6]),
            worker([1.0; 6]),
        ]});
        assert_eq!(keel_worker_states(&two, &end), None, "workers differ");
    }

    /// Both kinds draw into SVG files that parse as XML and hold the
    /// title, the legend and drawn shapes; an empty chart still draws.
    #[test]
    fn renders_valid_svg() {
        let dir = std::env::temp_dir().join(format!("keel-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lines = Chart::Lines(LineChart {
            slug: "latency",
            title: "RTT p99 per 250 ms".into(),
            y_label: "RTT (µs)",
            series: vec![
                (
                    "keel".into(),
                    vec![(0.0, 100.0), (0.25, 120.0), (0.5, 90.0)],
                ),
                (
                    "tokio".into(),
                    vec![(0.0, 500.0), (0.25, 0.0), (0.5, 20000.0)],
                ),
            ],
        });
        let bars = worker_state_bars(
            "workers",
            "keel workers, loaded".into(),
            &[(
                "loaded".into(),
                vec![
                    [50.0, 5.0, 1.0, 4.0, 0.0, 40.0],
                    [60.0, 5.0, 1.0, 4.0, 10.0, 20.0],
                ],
            )],
        );
        let Chart::Stacked(stacked) = &bars else {
            panic!("stacked bars")
        };
        assert_eq!(stacked.bars, ["loaded w0", "loaded w1"]);
        let empty = Chart::Lines(LineChart {
            slug: "empty",
            title: "nothing".into(),
            y_label: "x",
            series: vec![],
        });
        assert!(empty.is_empty() && !lines.is_empty() && !bars.is_empty());
        for (chart, must_hold) in [
            (&lines, ["RTT p99 per 250 ms", "tokio", "polyline"]),
            (&bars, ["keel workers, loaded", "parked", "rect"]),
            (&empty, ["nothing", "svg", "svg"]),
        ] {
            let path = dir.join(format!("{}.svg", chart.slug()));
            render(chart, &path).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            let doc = roxmltree::Document::parse(&text).expect("valid XML");
            assert_eq!(doc.root_element().tag_name().name(), "svg");
            for needle in must_hold {
                assert!(text.contains(needle), "{needle} not in {}", path.display());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
