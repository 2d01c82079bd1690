//! Draws the SVG charts of `docs/performance.md` from figures files written by
//! `bench --csv PATH` (`scripts/charts` runs the bench runs and then this).
//!
//! ```text
//! cargo run --release -p botmesh-redis-bench --bin charts -- --out docs/img FILE...
//! ```
//!
//! For each deployment and runtime found in the files, three charts, each a panel per workload:
//!
//! - `throughput-<deployment>-<runtime>.svg`: each client's closed-loop throughput at the
//!   default setting (64 callers, W1's 200-byte payload; the median when the file holds several
//!   rounds) as bars, and the servers' ceiling (`redis-benchmark`) as a line across them;
//! - `open-loop-<deployment>-<runtime>.svg`: p99 latency against the offered rate (open loop),
//!   a line per client;
//! - `callers-<deployment>-<runtime>.svg`: throughput against the callers (logarithmic), a
//!   line per client.
//!
//! A chart whose figures are not in the files is left out (said on stderr).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use botmesh_redis_bench::figures::{self, Kind, Row};
use botmesh_redis_bench::{CALLERS, CLIENT_NAMES, OURS, PAYLOAD_LEN};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

type Drawn = Result<(), Box<dyn Error>>;

/// A chart of one deployment and runtime: its file, its title's end, the rows, the colors.
type Draw = fn(&Path, &str, &[Row], &Colors) -> Drawn;

/// Width of one workload's panel and height of a chart, in pixels.
const PANEL: (u32, u32) = (460, 420);

/// Draws the charts of `docs/performance.md` from the bench's CSV figures.
#[derive(Debug, clap::Parser)]
#[command(name = "charts")]
struct Args {
    /// The folder the SVG files go to.
    #[arg(long)]
    out: PathBuf,
    /// The bench's `--csv` files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

fn main() {
    let Args { out, files } = clap::Parser::parse();
    let mut rows = Vec::new();
    for file in &files {
        rows.extend(figures::read(file).unwrap_or_else(|e| {
            eprintln!("charts: {e}");
            std::process::exit(1)
        }));
    }
    let colors = Colors::of(&rows);
    let mut runs: BTreeMap<(String, String), Vec<Row>> = BTreeMap::new();
    for row in rows {
        let key = (row.deployment.clone(), row.runtime.clone());
        runs.entry(key).or_default().push(row);
    }
    for ((deployment, runtime), rows) in &runs {
        let name = |chart: &str| out.join(format!("{chart}-{deployment}-{runtime}.svg"));
        let title = format!("{deployment}, runtime {runtime}");
        let charts: [(&str, Draw); 3] = [
            ("throughput", throughput),
            ("open-loop", open_loop),
            ("callers", callers),
        ];
        for (chart, draw) in charts {
            let path = name(chart);
            match draw(&path, &title, rows, &colors) {
                Ok(()) => eprintln!("charts: wrote {}", path.display()),
                Err(e) => eprintln!("charts: {} left out: {e}", path.display()),
            }
        }
    }
}

/// A color per client, the same in every chart.
struct Colors(Vec<String>);

impl Colors {
    /// Each client's color by its place among the bench's client names in name order (ours
    /// first, whichever driver ran it), so that a client has one color in every chart, however
    /// many files are drawn together and whichever clients they hold.
    fn of(rows: &[Row]) -> Colors {
        let mut names: Vec<String> = CLIENT_NAMES.iter().map(|&name| name.to_owned()).collect();
        names.sort();
        // A client the bench no longer names, from an old file: after the known ones.
        let mut unknown: Vec<String> = rows
            .iter()
            .filter(|r| r.kind != Kind::Ceiling)
            .map(|r| family(&r.client).to_owned())
            .filter(|name| !names.contains(name))
            .collect();
        unknown.sort();
        unknown.dedup();
        names.extend(unknown);
        Colors(names)
    }

    fn of_client(&self, client: &str) -> PaletteColor<Palette99> {
        let client = family(client);
        Palette99::pick(self.0.iter().position(|c| c == client).unwrap_or(0))
    }
}

/// The name a client's color goes by: ours by `OURS`, whichever driver's name follows it.
fn family(client: &str) -> &str {
    match client.strip_prefix(OURS) {
        Some(driver) if driver.starts_with('-') => OURS,
        _ => client,
    }
}

/// Whether `row` is at the default setting of its workload: the default callers, and W1's
/// default payload.
fn at_default(row: &Row) -> bool {
    row.callers == CALLERS && (row.workload != "W1" || row.payload == Some(PAYLOAD_LEN))
}

/// W1-W3, as found in `rows`.
fn workloads(rows: &[Row]) -> Vec<String> {
    let mut names: Vec<String> = rows
        .iter()
        .filter(|r| r.workload.starts_with('W'))
        .map(|r| r.workload.clone())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The median of some figures (none for none).
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        n if n % 2 == 1 => Some(values[n / 2]),
        n => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

/// For each client of `rows` (in order of first appearance), the points `point` gives, x
/// sorted, medians where several rows share an x.
fn lines(rows: &[&Row], point: impl Fn(&Row) -> (f64, f64)) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut clients: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for row in rows {
        match clients.iter_mut().find(|(c, _)| *c == row.client) {
            Some((_, points)) => points.push(point(row)),
            None => clients.push((row.client.clone(), vec![point(row)])),
        }
    }
    for (_, points) in &mut clients {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, Vec<f64>)> = Vec::new();
        for &(x, y) in points.iter() {
            match merged.last_mut() {
                Some((last, ys)) if *last == x => ys.push(y),
                _ => merged.push((x, vec![y])),
            }
        }
        *points = merged
            .into_iter()
            .filter_map(|(x, ys)| median(ys).map(|y| (x, y)))
            .collect();
    }
    clients
}

/// The drawing area of a chart with a panel per workload, titled.
fn panels<'p>(
    path: &'p Path,
    title: &str,
    count: usize,
) -> Result<Vec<DrawingArea<SVGBackend<'p>, plotters::coord::Shift>>, Box<dyn Error>> {
    let width = PANEL.0 * count.max(1) as u32;
    let root = SVGBackend::new(path, (width, PANEL.1)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    Ok(root.split_evenly((1, count.max(1))))
}

/// Throughput bars per client and workload, the ceiling as a line.
fn throughput(path: &Path, title: &str, rows: &[Row], colors: &Colors) -> Drawn {
    let names = workloads(rows);
    let closed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.kind == Kind::Closed && at_default(r))
        .collect();
    if closed.is_empty() {
        return Err("no closed-loop figures at 64 callers".into());
    }
    let areas = panels(path, &format!("Throughput, {title}"), names.len())?;
    for (area, workload) in areas.iter().zip(&names) {
        let bars: Vec<(String, f64)> = lines(
            &closed
                .iter()
                .copied()
                .filter(|r| &r.workload == workload)
                .collect::<Vec<_>>(),
            |r| (0.0, r.ops_per_s),
        )
        .into_iter()
        .map(|(client, points)| (client, points[0].1))
        .collect();
        let ceiling = rows
            .iter()
            .filter(|r| r.kind == Kind::Ceiling && &r.workload == workload && at_default_payload(r))
            .map(|r| r.ops_per_s)
            .fold(None, |max: Option<f64>, v| {
                Some(max.map_or(v, |m| m.max(v)))
            });
        bar_panel(area, workload, &bars, ceiling, colors)?;
    }
    Ok(())
}

/// Whether a ceiling row is at W1's default payload (W2's are at their value size).
fn at_default_payload(row: &Row) -> bool {
    row.workload != "W1" || row.payload == Some(PAYLOAD_LEN)
}

/// One workload's bars, named in the legend, and its ceiling as a dashed line.
fn bar_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    workload: &str,
    bars: &[(String, f64)],
    ceiling: Option<f64>,
    colors: &Colors,
) -> Drawn {
    // Headroom above the highest bar for the legend.
    let top = bars.iter().map(|b| b.1).chain(ceiling).fold(1.0, f64::max) * 1.6;
    let count = bars.len() as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{workload} (operations/s)"), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(10)
        .y_label_area_size(70)
        .build_cartesian_2d((0..count).into_segmented(), 0.0..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|_| String::new())
        .y_max_light_lines(0)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    for (i, (client, ops)) in bars.iter().enumerate() {
        let i = i as i32;
        let color = colors.of_client(client).to_rgba();
        let mut bar = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), *ops),
            ],
            color.filled(),
        );
        bar.set_margin(0, 0, 6, 6);
        chart
            .draw_series([bar])?
            .label(format!("{client}: {ops:.0}"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    if let Some(ceiling) = ceiling {
        let line = [
            (SegmentValue::Exact(0), ceiling),
            (SegmentValue::Last, ceiling),
        ];
        chart
            .draw_series(DashedLineSeries::new(line, 6, 4, RED.stroke_width(2)))?
            .label(format!(
                "ceiling, redis-benchmark -P 16 -c 64: {ceiling:.0}"
            ))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], RED.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// The legend of a chart's series.
fn legend<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> Drawn
where
    X: plotters::coord::ranged1d::Ranged,
    Y: plotters::coord::ranged1d::Ranged,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()?;
    Ok(())
}

/// p99 against the offered rate, a line per client, a panel per workload.
fn open_loop(path: &Path, title: &str, rows: &[Row], colors: &Colors) -> Drawn {
    let open: Vec<&Row> = rows
        .iter()
        .filter(|r| r.kind == Kind::Open && at_default_payload(r) && r.p99_us.is_some())
        .collect();
    if open.is_empty() {
        return Err("no open-loop figures (bench --open-loop)".into());
    }
    let heading = format!("p99 latency against offered load, {title}");
    let point = |r: &Row| {
        (
            r.offered_per_s.unwrap_or(0.0),
            r.p99_us.unwrap_or(0.0) / 1000.0,
        )
    };
    let axes = |workload: &str| Axes {
        caption: format!("{workload}: p99 (ms) by offered operations/s"),
        x_desc: "offered operations/s",
        y_desc: "p99 latency (ms, logarithmic)",
        log2_x: false,
        log_y: true,
    };
    line_panels(path, &heading, &open, point, axes, colors)
}

/// Throughput against the callers, a line per client, a panel per workload.
fn callers(path: &Path, title: &str, rows: &[Row], colors: &Colors) -> Drawn {
    let closed: Vec<&Row> = rows
        .iter()
        .filter(|r| r.kind == Kind::Closed && at_default_payload(r) && r.workload.starts_with('W'))
        .collect();
    let mut counts: Vec<usize> = closed.iter().map(|r| r.callers).collect();
    counts.sort_unstable();
    counts.dedup();
    if counts.len() < 2 {
        return Err("figures at one caller count only (bench --callers LIST)".into());
    }
    let heading = format!("Throughput by callers, {title}");
    let point = |r: &Row| ((r.callers as f64).log2(), r.ops_per_s);
    let axes = |workload: &str| Axes {
        caption: format!("{workload}: operations/s by callers"),
        x_desc: "concurrent callers",
        y_desc: "operations/s",
        log2_x: true,
        log_y: false,
    };
    line_panels(path, &heading, &closed, point, axes, colors)
}

/// A chart of line panels, one per workload of `rows`: a line per client through the points
/// `point` reads off its rows.
fn line_panels(
    path: &Path,
    heading: &str,
    rows: &[&Row],
    point: impl Fn(&Row) -> (f64, f64),
    axes: impl Fn(&str) -> Axes,
    colors: &Colors,
) -> Drawn {
    let names = workloads(&rows.iter().map(|r| (*r).clone()).collect::<Vec<_>>());
    let areas = panels(path, heading, names.len())?;
    for (area, workload) in areas.iter().zip(&names) {
        let of_workload: Vec<&Row> = rows
            .iter()
            .copied()
            .filter(|r| &r.workload == workload)
            .collect();
        let lines = lines(&of_workload, &point);
        line_panel(area, &axes(workload), &lines, colors)?;
    }
    Ok(())
}

/// The captions and scales of a line panel.
struct Axes {
    caption: String,
    x_desc: &'static str,
    y_desc: &'static str,
    /// The x values are base-2 logarithms (of caller counts), labelled with their powers.
    log2_x: bool,
    /// A logarithmic y axis (latencies over orders of magnitude), else linear from 0.
    log_y: bool,
}

/// A line per client, its points marked, and the legend.
fn line_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    axes: &Axes,
    lines: &[(String, Vec<(f64, f64)>)],
    colors: &Colors,
) -> Drawn {
    let points: Vec<(f64, f64)> = lines.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    let x_max = points.iter().map(|p| p.0).fold(1.0, f64::max);
    let x_min = points.iter().map(|p| p.0).fold(x_max, f64::min);
    let y_max = points.iter().map(|p| p.1).fold(f64::MIN_POSITIVE, f64::max);
    let y_min = points.iter().map(|p| p.1).fold(y_max, f64::min);
    let x_range = match axes.log2_x {
        // Ticks at the integers: 1, 2, 4, ... callers.
        true => x_min.floor() - 0.25..x_max.ceil() + 0.25,
        false => 0.0..x_max * 1.1,
    };
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&axes.caption, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    let x_label = |v: &f64| match axes.log2_x {
        true => format!("{:.0}", v.exp2()),
        false => format!("{v:.0}"),
    };
    let x_labels = match axes.log2_x {
        true => (x_max.ceil() - x_min.floor()) as usize + 1,
        false => 8,
    };
    if axes.log_y {
        let y_range = (y_min / 2.0).max(1e-3)..y_max * 4.0;
        let mut chart = builder.build_cartesian_2d(x_range, y_range.log_scale())?;
        chart
            .configure_mesh()
            .max_light_lines(0)
            .x_desc(axes.x_desc)
            .y_desc(axes.y_desc)
            .x_labels(x_labels)
            .x_label_formatter(&x_label)
            .y_label_formatter(&|v| format!("{v}"))
            .draw()?;
        draw_lines(&mut chart, lines, colors)
    } else {
        let mut chart = builder.build_cartesian_2d(x_range, 0.0..y_max * 1.5)?;
        chart
            .configure_mesh()
            .max_light_lines(0)
            .x_desc(axes.x_desc)
            .y_desc(axes.y_desc)
            .x_labels(x_labels)
            .x_label_formatter(&x_label)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()?;
        draw_lines(&mut chart, lines, colors)
    }
}

/// The lines, their points marked, and the legend.
fn draw_lines<'a, Y>(
    chart: &mut ChartContext<
        'a,
        SVGBackend<'a>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
    >,
    lines: &[(String, Vec<(f64, f64)>)],
    colors: &Colors,
) -> Drawn
where
    Y: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    for (client, points) in lines {
        let color = colors.of_client(client).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(client.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2)));
        chart.draw_series(PointSeries::of_element(
            points.iter().copied(),
            3,
            color.filled(),
            &|point, size, style| Circle::new(point, size, style),
        ))?;
    }
    legend(chart, SeriesLabelPosition::UpperLeft)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closed(runtime: &str, client: &str) -> Row {
        Row {
            kind: Kind::Closed,
            workload: "W2".to_owned(),
            deployment: "standalone".to_owned(),
            runtime: runtime.to_owned(),
            client: client.to_owned(),
            callers: CALLERS,
            payload: Some(100),
            offered_per_s: None,
            ops_per_s: 1000.0,
            p50_us: Some(1.0),
            p99_us: Some(2.0),
            p999_us: Some(3.0),
            cpu_s_per_100k: Some(0.1),
        }
    }

    fn index(colors: &Colors, client: &str) -> Option<usize> {
        colors.0.iter().position(|c| c == family(client))
    }

    #[test]
    fn a_client_keeps_its_color_whichever_files_are_drawn() {
        let tokio = Colors::of(&[
            closed("multi", "botmesh-tokio"),
            closed("multi", "fred-pool"),
            closed("multi", "redis-rs"),
        ]);
        let async_std = Colors::of(&[
            closed("async-std", "botmesh-async-std"),
            closed("async-std", "redis-rs-pipe"),
        ]);
        // The order the charts drawn before this rule gave every client of the full set.
        let order = [
            "botmesh-tokio",
            "fred",
            "fred-pipe",
            "fred-pool",
            "fred-pool-pipe",
            "redis-rs",
            "redis-rs-pipe",
        ];
        for (i, client) in order.into_iter().enumerate() {
            assert_eq!(index(&tokio, client), Some(i), "{client}");
            assert_eq!(index(&async_std, client), Some(i), "{client}");
        }
        assert_eq!(index(&async_std, "botmesh-async-std"), Some(0));
        // A name no bench prints now still gets a color of its own, after the known ones.
        let old = Colors::of(&[closed("multi", "jedis")]);
        assert_eq!(index(&old, "jedis"), Some(CLIENT_NAMES.len()));
        assert_eq!(family("botmeshy"), "botmeshy");
    }
}
