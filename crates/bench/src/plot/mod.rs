//! `--plot DIR`: SVG charts of what `quicknat-bench` and
//! `quicknat-lab lab` measured, drawn with plotters' SVG backend (text stays `<text>`, no
//! font stack). File names are fixed per chart, so a rerun replaces them:
//!
//! | file | chart |
//! |---|---|
//! | `bench-frames.svg` | Mpps and Gbit/s by frame size (1 core, 8192 flows) |
//! | `bench-flows.svg` | Mpps by number of flows (1 core, 64 B) |
//! | `bench-cores.svg` | Mpps by worker count (64 B, 8192 flows) |
//! | `csit-tput.svg` | CSIT TPUT: Mpps per core by sessions, UDP and TCP |
//! | `csit-cps.svg` | CSIT CPS: connections per second per core by sessions, UDP and TCP |
//! | `lab-ratios.svg` | the lab's quicknat / reference ratios per measure (bars) |

use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::csit::{CsitRow, Measure, Proto};
use crate::BenchReport;

/// Chart size, pixels.
const SIZE: (u32, u32) = (720, 420);
/// Series colours, in order.
const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// A plotting failure, as text.
fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow::anyhow!("plot: {e}")
}

/// One line of a line chart.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points, x ascending.
    pub points: Vec<(f64, f64)>,
}

/// Draws a line chart into `path`: `log_x` for session and flow counts.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_x: bool,
    series: &[Series],
) -> anyhow::Result<()> {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (1.0, 2.0);
    }
    if x0 == x1 {
        x1 = x0 * 2.0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.15 } else { 1.0 };
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(&|x| short(*x))
                .y_label_formatter(&|y| short(*y))
                .draw()
                .map_err(err)?;
            for (k, s) in series.iter().enumerate() {
                let c = COLOURS[k % COLOURS.len()];
                chart
                    .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                    .map_err(err)?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }};
    }
    if log_x {
        draw!(b
            .build_cartesian_2d((x0 * 0.8..x1 * 1.25).log_scale(), 0.0..y1)
            .map_err(err)?);
    } else {
        draw!(b.build_cartesian_2d(x0..x1, 0.0..y1).map_err(err)?);
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Draws grouped bars into `path`: one group per category, one bar per series (a missing
/// figure leaves a gap), and a dashed line at `reference` (1.0 for ratios) when given.
pub fn bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    categories: &[String],
    series: &[(String, Vec<Option<f64>>)],
    reference: Option<f64>,
) -> anyhow::Result<()> {
    let n = categories.len().max(1);
    let k = series.len().max(1);
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .copied()
        .chain(reference)
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.2 } else { 1.0 };
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_desc)
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => categories.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()
        .map_err(err)?;
    // Bars are drawn on a finer, plain axis over the same area (group i spans i..i+1).
    let inner = chart.plotting_area().strip_coord_spec();
    let mut fine = ChartBuilder::on(&inner)
        .build_cartesian_2d(0.0..n as f64, 0.0..top)
        .map_err(err)?;
    let width = 0.8 / k as f64;
    for (j, (name, vals)) in series.iter().enumerate() {
        let c = COLOURS[j % COLOURS.len()];
        fine.draw_series(vals.iter().enumerate().filter_map(|(i, v)| {
            let x = i as f64 + 0.1 + j as f64 * width;
            v.map(|y| Rectangle::new([(x, 0.0), (x + width * 0.9, y)], c.filled()))
        }))
        .map_err(err)?
        .label(name.clone())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    if let Some(r) = reference {
        fine.draw_series(DashedLineSeries::new(
            [(0.0, r), (n as f64, r)],
            6,
            4,
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
    }
    fine.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// 1200 -> "1.2k", 4_000_000 -> "4M", 0.75 -> "0.75".
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

fn create(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow::anyhow!("plot: cannot create {}: {e}", dir.display()))
}

/// The main report's charts: frames, flows, cores. Returns the files written.
pub fn bench(dir: &Path, r: &BenchReport) -> anyhow::Result<Vec<PathBuf>> {
    create(dir)?;
    let mut out = Vec::new();
    let when = format!("{}, {}", r.machine.date, r.machine.cpu);
    let p = dir.join("bench-frames.svg");
    bars(
        &p,
        &format!("NAT44 engine by frame size, 1 core, 8192 flows ({when})"),
        "Mpps / Gbit/s",
        &r.frames
            .iter()
            .map(|f| format!("{} B", f.frame))
            .collect::<Vec<_>>(),
        &[
            (
                "Mpps".into(),
                r.frames.iter().map(|f| Some(f.mpps)).collect(),
            ),
            (
                "Gbit/s".into(),
                r.frames.iter().map(|f| Some(f.gbps)).collect(),
            ),
        ],
        None,
    )?;
    out.push(p);
    let p = dir.join("bench-flows.svg");
    lines(
        &p,
        &format!("NAT44 engine by flows, 1 core, 64 B ({when})"),
        "flows",
        "Mpps",
        true,
        &[Series {
            name: "NAT44 64 B".into(),
            points: r.flows.iter().map(|f| (f.flows as f64, f.mpps)).collect(),
        }],
    )?;
    out.push(p);
    let p = dir.join("bench-cores.svg");
    lines(
        &p,
        &format!("NAT44 engine by cores, 64 B, 8192 flows ({when})"),
        "workers",
        "Mpps",
        false,
        &[Series {
            name: "NAT44 64 B".into(),
            points: r
                .cores
                .iter()
                .enumerate()
                .map(|(i, m)| ((i + 1) as f64, *m))
                .collect(),
        }],
    )?;
    out.push(p);
    Ok(out)
}

/// The CSIT charts: TPUT and CPS by sessions, UDP and TCP. Returns the files written.
pub fn csit(dir: &Path, rows: &[CsitRow]) -> anyhow::Result<Vec<PathBuf>> {
    create(dir)?;
    let mut out = Vec::new();
    for (measure, file, title, y) in [
        (
            Measure::Tput,
            "csit-tput.svg",
            "CSIT NAT44ed TPUT profile: established sessions, 64 B, 1 core",
            "Mpps per core",
        ),
        (
            Measure::Cps,
            "csit-cps.svg",
            "CSIT NAT44ed CPS profile: connections set up and torn down, 1 core",
            "connections/s per core",
        ),
    ] {
        let series: Vec<Series> = [Proto::Udp, Proto::Tcp]
            .into_iter()
            .map(|proto| Series {
                name: proto.name().to_uppercase(),
                points: rows
                    .iter()
                    .filter(|r| r.measure == measure && r.proto == proto)
                    .map(|r| (r.sessions as f64, r.median))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            continue;
        }
        let p = dir.join(file);
        lines(&p, title, "sessions", y, true, &series)?;
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
