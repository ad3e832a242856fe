//! `scalebench plot`: the reports' curves as SVG charts, leasekv and etcd on the same axes.
//!
//! SVG rather than PNG because plotters' SVG backend writes text as `<text>` elements that the
//! viewer lays out: no font file, no fontconfig or freetype on the machine that draws (CI has
//! neither), and the charts stay small, diffable text that docs can link.

use crate::report::{Report, Series};
use anyhow::Context;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The size of a chart in pixels: room for nine client counts on x and a legend of several
/// lines in the upper left corner.
const SIZE: (u32, u32) = (960, 560);

/// The client counts' suffix: those curves span 1..256 clients, which only a log axis shows.
const LOG_X_SUFFIX: &str = "_vs_clients";

/// Draws every curve found in the reports of `input` (JSON files) into `output` as SVG files,
/// one chart per (workload, series name), one line per (system, count) with a legend, so leasekv
/// and etcd are side by side. Returns the paths written.
///
/// The charts are `{workload}-{series}.svg`, and `README.md` beside them (written last, and
/// last in the list) shows them all, so docs can link one page. A curve without a finite point
/// is left out; a chart left without any curve is not drawn.
pub fn draw_all(input: &Path, output: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let reports = Report::read_all(input).with_context(|| format!("reading the reports in {}", input.display()))?;
    std::fs::create_dir_all(output).with_context(|| format!("creating {}", output.display()))?;

    let mut written = Vec::new();
    let mut index = Vec::new();
    for chart in charts(&reports) {
        let file = format!("{}-{}.svg", file_part(&chart.workload), file_part(&chart.series));
        let path = output.join(&file);
        draw_chart(&chart, &path).with_context(|| format!("drawing {}", path.display()))?;
        index.push((chart.workload.clone(), chart.title(), file));
        written.push(path);
    }

    let readme = output.join("README.md");
    std::fs::write(&readme, index_markdown(&index)).with_context(|| format!("writing {}", readme.display()))?;
    written.push(readme);
    Ok(written)
}

/// One chart: a series name of one workload, as every system and count measured it.
struct Chart {
    workload: String,
    series: String,
    x_label: String,
    y_label: String,
    /// The curves by (system, count).
    lines: BTreeMap<(String, u64), Curve>,
}

/// One system's curve at one count.
#[derive(Default)]
struct Curve {
    /// When the run that measured it ended: of two reports of the same run, the later wins.
    finished_unix_s: u64,
    points: Vec<(f64, f64)>,
}

impl Chart {
    fn title(&self) -> String {
        format!("{}: {} against {}", self.workload, self.y_label, self.x_label)
    }

    fn points(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.lines.values().flat_map(|curve| curve.points.iter().copied())
    }

    /// A log x axis for the client-count curves, unless a point at x <= 0 (which a log axis
    /// cannot place) makes it linear after all.
    fn log_x(&self) -> bool {
        self.series.ends_with(LOG_X_SUFFIX) && self.points().all(|(x, _)| x > 0.0)
    }
}

/// Groups the reports' curves into charts, dropping non-finite points (a failed measurement
/// must not stretch the axes or stop the drawing) and curves left empty.
fn charts(reports: &[Report]) -> Vec<Chart> {
    let mut charts: BTreeMap<(String, String), Chart> = BTreeMap::new();
    for report in reports {
        for (name, Series { x_label, y_label, points }) in &report.series {
            let points: Vec<_> = points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
            if points.is_empty() {
                continue;
            }
            let chart = charts.entry((report.workload.clone(), name.clone())).or_insert_with(|| Chart {
                workload: report.workload.clone(),
                series: name.clone(),
                x_label: x_label.clone(),
                y_label: y_label.clone(),
                lines: BTreeMap::new(),
            });
            // Two files for the same run (a copy, a rename): the later run wins.
            let curve = chart.lines.entry((report.system.clone(), report.count)).or_default();
            if curve.points.is_empty() || report.finished_unix_s >= curve.finished_unix_s {
                *curve = Curve { finished_unix_s: report.finished_unix_s, points };
            }
        }
    }
    charts.into_values().collect()
}

/// How one curve is drawn.
struct Line<'a> {
    label: String,
    colour: RGBColor,
    /// `None` for a solid line, else the dash and gap lengths in pixels.
    dash: Option<(i32, i32)>,
    points: &'a [(f64, f64)],
}

/// One colour per system, so a system is recognised across charts: etcd the reference in dark
/// grey, leasekv in blue, its lease-tracker backend in orange; any other from a fixed list.
fn system_colour(system: &str, others: &mut Vec<String>) -> RGBColor {
    const OTHERS: [RGBColor; 4] =
        [RGBColor(214, 39, 40), RGBColor(148, 103, 189), RGBColor(44, 160, 44), RGBColor(140, 86, 75)];
    match system {
        "etcd" => RGBColor(70, 70, 70),
        "leasekv" => RGBColor(31, 119, 180),
        "leasekv/lease-tracker" => RGBColor(230, 120, 0),
        _ => {
            let i = others.iter().position(|s| s == system).unwrap_or_else(|| {
                others.push(system.to_string());
                others.len() - 1
            });
            OTHERS[i % OTHERS.len()]
        }
    }
}

/// Counts of one system share its colour: the smallest solid and darkest, larger ones dashed
/// and lighter.
fn lines(chart: &Chart) -> Vec<Line<'_>> {
    const DASHES: [Option<(i32, i32)>; 4] = [None, Some((10, 5)), Some((3, 4)), Some((14, 4))];
    let mut per_system: BTreeMap<&str, usize> = BTreeMap::new();
    for (system, _) in chart.lines.keys() {
        *per_system.entry(system).or_default() += 1;
    }
    let mut others = Vec::new();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut lines = Vec::new();
    for ((system, count), Curve { points, .. }) in &chart.lines {
        let of_system = per_system[system.as_str()];
        let nth = seen.entry(system).or_default();
        let base = system_colour(system, &mut others);
        let lighter = if of_system > 1 { 0.5 * *nth as f64 / (of_system - 1) as f64 } else { 0.0 };
        let label = if of_system == 1 { system.clone() } else { format!("{system}, count={count}") };
        lines.push(Line { label, colour: tint(base, lighter), dash: DASHES[*nth % DASHES.len()], points });
        *nth += 1;
    }
    lines
}

/// `colour` moved `towards_white` (0 to 1) of the way to white.
fn tint(colour: RGBColor, towards_white: f64) -> RGBColor {
    let mix = |c: u8| (c as f64 + (255.0 - c as f64) * towards_white).round() as u8;
    RGBColor(mix(colour.0), mix(colour.1), mix(colour.2))
}

/// The x range: the data's, widened a little so the end points' circles stay inside; a single
/// value gets a range around it.
fn x_range(points: impl Iterator<Item = f64>, log: bool) -> Range<f64> {
    let (lo, hi) = min_max(points).unwrap_or((0.0, 1.0));
    if log {
        // Every x is > 0 here: log_x checked.
        if lo == hi {
            return lo / 2.0..hi * 2.0;
        }
        let pad = (hi / lo).powf(0.03);
        return lo / pad..hi * pad;
    }
    if lo == hi {
        let half = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return lo - half..hi + half;
    }
    let pad = (hi - lo) * 0.03;
    lo - pad..hi + pad
}

/// The y range: from 0 (or below, if a value is negative) to a little above the largest value.
fn y_range(points: impl Iterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = min_max(points).unwrap_or((0.0, 1.0));
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    let span = if hi > lo { hi - lo } else { 1.0 };
    let lo = if lo < 0.0 { lo - span * 0.05 } else { lo };
    lo..hi + span * 0.08
}

fn min_max(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// Draws `chart` into the SVG file `path`.
fn draw_chart(chart: &Chart, path: &Path) -> anyhow::Result<()> {
    let lines = lines(chart);
    let y = y_range(chart.points().map(|(_, y)| y));
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder.caption(chart.title(), ("sans-serif", 22)).margin(16).x_label_area_size(50).y_label_area_size(80);
    if chart.log_x() {
        let x = x_range(chart.points().map(|(x, _)| x), true);
        // Few distinct client counts (1, 2, 4 ... 256): tick exactly those.
        let mut ticks: Vec<f64> = chart.points().map(|(x, _)| x).collect();
        ticks.sort_by(f64::total_cmp);
        ticks.dedup();
        if ticks.len() <= 12 {
            let mut plot = builder.build_cartesian_2d(x.log_scale().with_key_points(ticks), y)?;
            draw_lines(&mut plot, chart, &lines)?;
        } else {
            let mut plot = builder.build_cartesian_2d(x.log_scale(), y)?;
            draw_lines(&mut plot, chart, &lines)?;
        }
    } else {
        let x = x_range(chart.points().map(|(x, _)| x), false);
        let mut plot = builder.build_cartesian_2d(x, y)?;
        draw_lines(&mut plot, chart, &lines)?;
    }
    root.present()?;
    Ok(())
}

/// The axes, the curves with a circle on each measured point, and the legend, on either kind
/// of x axis.
fn draw_lines<'a, X>(
    plot: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, RangedCoordf64>>,
    chart: &Chart,
    lines: &[Line<'_>],
) -> anyhow::Result<()>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    plot.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .max_light_lines(1)
        .light_line_style(RGBColor(240, 240, 240))
        .bold_line_style(RGBColor(210, 210, 210))
        .draw()?;

    for line in lines {
        let style = ShapeStyle::from(line.colour).stroke_width(2);
        let points = line.points.iter().copied();
        let anno = match line.dash {
            None => plot.draw_series(LineSeries::new(points, style))?,
            Some((dash, gap)) => plot.draw_series(DashedLineSeries::new(points, dash, gap, style))?,
        };
        let label_dash = line.dash;
        anno.label(line.label.as_str()).legend(move |(x, y)| {
            // The legend's sample is the line as drawn (for a dash pattern, its first dash and
            // gap, shortened to fit), with the point marker in its middle.
            let (dash, gap) = match label_dash {
                None => (10, 0),
                Some((dash, gap)) => (dash.clamp(2, 8), gap.min(4)),
            };
            EmptyElement::at((x, y))
                + Circle::new((10, 0), 3, style.filled())
                + PathElement::new(vec![(0, 0), (dash, 0)], style)
                + PathElement::new(vec![(dash + gap, 0), (20, 0)], style)
        });
        plot.draw_series(line.points.iter().map(|&p| Circle::new(p, 3, style.filled())))?;
    }

    plot.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()?;
    Ok(())
}

/// A tick label short enough for the label area: `250k` rather than `250000.0`; the unit is in
/// the axis label.
fn tick(v: f64) -> String {
    let abs = v.abs();
    let (scaled, suffix) = match abs {
        a if a >= 1e12 => (v / 1e12, "T"),
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e4 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let text = if scaled == scaled.trunc() {
        format!("{scaled:.0}")
    } else {
        // Three significant digits, without trailing zeros.
        let decimals = (2 - scaled.abs().log10().floor() as i32).clamp(0, 6) as usize;
        let text = format!("{scaled:.decimals$}");
        if text.contains('.') {
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            text
        }
    };
    if text == "-0" {
        "0".to_string()
    } else {
        format!("{text}{suffix}")
    }
}

/// A workload or series name as part of a file name (and a Markdown link): nothing that would
/// make a directory, a space or a character a link would need escaped.
fn file_part(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect()
}

/// The Markdown page that shows every chart, by workload, with links relative to itself.
fn index_markdown(charts: &[(String, String, String)]) -> String {
    let mut text = String::from(
        "# scalebench charts\n\n\
         Drawn by `scalebench plot` from the JSON reports `scalebench` wrote: one chart per \
         workload and curve, one line per system and count (etcd in grey, leasekv in blue, \
         leasekv/lease-tracker in orange). This file is rewritten by every `scalebench plot`.\n",
    );
    if charts.is_empty() {
        text.push_str("\nNo report had a curve to draw.\n");
    }
    let mut workload = None;
    for (chart_workload, title, file) in charts {
        if workload != Some(chart_workload) {
            let _ = write!(text, "\n## {chart_workload}\n");
            workload = Some(chart_workload);
        }
        let alt = title.replace('[', "\\[").replace(']', "\\]");
        let _ = write!(text, "\n![{alt}]({file})\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(system: &str, count: u64, scale: f64) -> Report {
        let mut report = Report::new("leases", system, count);
        for clients in [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0] {
            report.point("put_p99_ms_vs_clients", "clients", "put p99 (ms)", clients, scale * clients.sqrt());
        }
        for leases in [0.0, 250_000.0, 500_000.0, 1_000_000.0] {
            report.point("rss_vs_leases", "live leases", "RSS (MiB)", leases, 40.0 + scale * leases / 1e4);
        }
        // One point only, and a series that is empty: neither may panic.
        report.point("startup", "restarts", "startup (s)", 1.0, scale);
        report.series.insert("empty".into(), Series::default());
        report
    }

    #[test]
    fn draws_each_curve_with_both_systems_and_an_index() {
        let input = tempfile::tempdir().unwrap();
        let output = input.path().join("charts");
        report("etcd", 1_000_000, 2.0).write(input.path()).unwrap();
        report("leasekv", 1_000_000, 1.0).write(input.path()).unwrap();
        report("leasekv", 100_000, 0.5).write(input.path()).unwrap();

        let written = draw_all(input.path(), &output).unwrap();
        let names: Vec<_> = written.iter().map(|p| p.file_name().unwrap().to_str().unwrap()).collect();
        assert_eq!(
            names,
            ["leases-put_p99_ms_vs_clients.svg", "leases-rss_vs_leases.svg", "leases-startup.svg", "README.md"]
        );
        for path in &written[..3] {
            let svg = std::fs::read_to_string(path).unwrap();
            assert!(svg.contains("<svg"), "{}", path.display());
            // etcd has one count: its name alone; leasekv two: with the count.
            assert!(svg.contains("etcd") && !svg.contains("etcd, count="), "{}", path.display());
            assert!(svg.contains("leasekv, count=100000"), "{}", path.display());
            assert!(svg.contains("leasekv, count=1000000"), "{}", path.display());
        }
        let title = "leases: RSS (MiB) against live leases";
        assert!(std::fs::read_to_string(&written[1]).unwrap().contains(title));
        let readme = std::fs::read_to_string(&written[3]).unwrap();
        assert!(readme.contains(&format!("![{title}](leases-rss_vs_leases.svg)")), "{readme}");
    }

    #[test]
    fn many_client_counts_get_the_log_axis_own_ticks() {
        let input = tempfile::tempdir().unwrap();
        let mut report = Report::new("keys", "etcd", 10);
        for clients in 1..=40 {
            report.point("get_p50_ms_vs_clients", "clients", "get p50 (ms)", clients as f64, 1.0);
        }
        report.write(input.path()).unwrap();
        let written = draw_all(input.path(), &input.path().join("charts")).unwrap();
        assert!(std::fs::read_to_string(&written[0]).unwrap().contains("<svg"));
    }

    #[test]
    fn no_reports_still_writes_the_index() {
        let input = tempfile::tempdir().unwrap();
        let output = input.path().join("charts");
        let written = draw_all(input.path(), &output).unwrap();
        assert_eq!(written, [output.join("README.md")]);
    }

    #[test]
    fn a_missing_input_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere");
        let error = draw_all(&missing, &dir.path().join("charts")).unwrap_err();
        assert!(format!("{error:#}").contains("nowhere"), "{error:#}");
    }

    #[test]
    fn ranges_survive_degenerate_data() {
        assert_eq!(x_range([5.0].into_iter(), false), 4.5..5.5);
        assert_eq!(x_range([0.0].into_iter(), false), -1.0..1.0);
        assert_eq!(x_range([4.0].into_iter(), true), 2.0..8.0);
        assert_eq!(x_range(std::iter::empty(), false).start, -0.03);
        assert_eq!(y_range([3.0, 3.0].into_iter()).start, 0.0);
        assert!(y_range([-2.0, 1.0].into_iter()).start < -2.0);
        assert!(y_range([0.0].into_iter()).end > 0.0);
    }

    #[test]
    fn ticks_are_short() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(256.0), "256");
        assert_eq!(tick(250_000.0), "250k");
        assert_eq!(tick(1_500_000.0), "1.5M");
        assert_eq!(tick(0.125), "0.125");
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(-0.0), "0");
    }
}
