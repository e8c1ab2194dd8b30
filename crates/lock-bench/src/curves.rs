//! The curves: rows that carry a `curve` name and an `x` (clients, held locks, waiters) are
//! drawn as one line per target for each figure of the curve, and tabled target by x in the
//! Markdown report, so that where a store bends reads off one picture.

use std::fmt::Write as _;
use std::path::Path;

use crate::row::Row;

/// One figure of a curve: its label (with the unit) and how to read it off a row.
struct Figure {
    label: &'static str,
    file: &'static str,
    read: fn(&Row) -> Option<f64>,
}

fn extra(r: &Row, k: &str) -> Option<f64> {
    r.extra.get(k).and_then(serde_json::Value::as_f64)
}

/// What each curve shows.
fn figures(curve: &str) -> Vec<Figure> {
    if curve.starts_with("scale") {
        vec![
            Figure { label: "acquisitions/s", file: "rate", read: |r| r.value },
            Figure { label: "acquire wait p99 (µs)", file: "p99", read: |r| r.p99.map(|v| v as f64) },
            Figure {
                label: "fairness: fewest / most acquisitions of one client",
                file: "fairness",
                read: |r| match (extra(r, "min_per_client"), extra(r, "max_per_client")) {
                    (Some(a), Some(b)) if b > 0.0 => Some(a / b),
                    _ => None,
                },
            },
            Figure { label: "backend calls per acquisition", file: "calls", read: |r| r.attempts },
        ]
    } else if curve == "watchdog" {
        vec![
            Figure { label: "renew round trips per period", file: "renews", read: |r| r.value },
            Figure { label: "CPU ms per period", file: "cpu", read: |r| extra(r, "cpu_ms_per_period") },
            Figure { label: "heap bytes per hold", file: "memory", read: |r| extra(r, "bytes_per_hold") },
        ]
    } else {
        vec![
            Figure {
                label: "release -> next holder p50 (µs)",
                file: "p50",
                read: |r| r.p50.map(|v| v as f64),
            },
            Figure {
                label: "release -> next holder p99 (µs)",
                file: "p99",
                read: |r| r.p99.map(|v| v as f64),
            },
            Figure { label: "backend calls per acquisition", file: "calls", read: |r| r.attempts },
        ]
    }
}

/// The curve names in the order the rows came.
fn curves(rows: &[Row]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        if let Some(c) = r.extra.get("curve").and_then(|v| v.as_str())
            && !names.iter().any(|n| n == c)
        {
            names.push(c.to_owned());
        }
    }
    names
}

/// A curve's points: its xs ascending, and each target's `(x, value)` pairs.
type Lines = (Vec<u64>, Vec<(String, Vec<(u64, f64)>)>);

fn lines(rows: &[Row], curve: &str, read: fn(&Row) -> Option<f64>) -> Lines {
    let mut xs = Vec::new();
    let mut by_target: Vec<(String, Vec<(u64, f64)>)> = Vec::new();
    for r in rows.iter().filter(|r| r.extra.get("curve").and_then(|v| v.as_str()) == Some(curve)) {
        let (Some(x), Some(y)) = (r.extra.get("x").and_then(serde_json::Value::as_u64), read(r)) else {
            continue;
        };
        if !xs.contains(&x) {
            xs.push(x);
        }
        match by_target.iter_mut().find(|(t, _)| *t == r.target) {
            Some((_, pts)) => pts.push((x, y)),
            None => by_target.push((r.target.clone(), vec![(x, y)])),
        }
    }
    xs.sort_unstable();
    (xs, by_target)
}

/// The Markdown tables: one per curve and figure, a row per target, a column per x.
pub fn markdown(rows: &[Row]) -> String {
    let mut md = String::new();
    let names = curves(rows);
    if names.is_empty() {
        return md;
    }
    let _ = writeln!(md, "\n## Curves\n");
    for c in &names {
        for f in figures(c) {
            let (xs, targets) = lines(rows, c, f.read);
            let head: Vec<String> = xs.iter().map(u64::to_string).collect();
            let _ = writeln!(
                md,
                "\n### {c}: {}\n\n| target | {} |\n|---|{}",
                f.label,
                head.join(" | "),
                "---|".repeat(xs.len())
            );
            for (t, pts) in targets {
                let cells: Vec<String> = xs
                    .iter()
                    .map(|x| pts.iter().find(|(px, _)| px == x).map_or_else(|| "-".into(), |(_, y)| num(*y)))
                    .collect();
                let _ = writeln!(md, "| {t} | {} |", cells.join(" | "));
            }
        }
    }
    md
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 { format!("{v:.0}") } else { format!("{v:.2}") }
}

/// One SVG per curve and figure: `curve-<name>-<figure>.svg`. A chart that cannot be drawn is
/// reported and skipped: the figures are in the tables.
pub fn charts(dir: &Path, rows: &[Row]) {
    for c in curves(rows) {
        for f in figures(&c) {
            let file = dir.join(format!("curve-{}-{}.svg", c.replace([' ', '/'], "_"), f.file));
            if let Err(e) = chart(&file, &c, &f, rows) {
                eprintln!("chart {}: {e}", file.display());
            }
        }
    }
}

/// x is placed by rank (the sizes grow by factors), labelled with its value; y is linear.
fn chart(path: &Path, curve: &str, f: &Figure, rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let (xs, targets) = lines(rows, curve, f.read);
    if xs.is_empty() {
        return Ok(());
    }
    let ymax =
        targets.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)).fold(f64::EPSILON, f64::max) * 1.15;
    let root = SVGBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let x_desc = match curve {
        "watchdog" => "locks held in one process",
        "waiters" => "waiters on one key",
        _ => "clients (over up to 4 processes)",
    };
    let rank = |x: u64| xs.iter().position(|v| *v == x).unwrap_or(0) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{curve}: {}", f.label), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(-0.2f64..(xs.len() as f64 - 0.8), 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_labels(xs.len())
        .x_desc(x_desc)
        .y_desc(f.label)
        .x_label_formatter(&|v| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                xs.get(i as usize).map_or_else(String::new, u64::to_string)
            } else {
                String::new()
            }
        })
        .draw()?;
    for (i, (target, pts)) in targets.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let series: Vec<(f64, f64)> = pts.iter().map(|(x, y)| (rank(*x), *y)).collect();
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)).point_size(3))?
            .label(target.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
