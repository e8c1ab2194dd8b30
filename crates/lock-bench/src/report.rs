//! Results: a terminal table, JSON lines, a Markdown report and SVG charts.

use std::fmt::Write as _;
use std::path::Path;

use crate::error::{BenchError, Result};
use crate::floor::Floor;
use crate::row::Row;

/// Columns of the results table.
const HEADERS: usize = 14;

const FLOOR_HEADERS: [&str; 7] =
    ["target", "round trip", "p50 µs", "p99 µs", "acquire+release floor", "p50 µs", "p99 µs"];

/// Everything one run measured.
#[derive(Debug)]
pub struct Report {
    quick: bool,
    /// How the servers kept their data (durability settings, filesystem).
    storage: String,
    notes: Vec<String>,
    floors: Vec<[String; 7]>,
    rows: Vec<Row>,
}

fn fmt_opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn fmt_f(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.prec$}"))
}

impl Report {
    pub fn new(quick: bool, storage: String, notes: Vec<String>) -> Self {
        Report { quick, storage, notes, floors: Vec::new(), rows: Vec::new() }
    }

    pub fn floor(&mut self, target: &str, f: &Floor) {
        self.floors.push([
            target.to_owned(),
            f.rtt_label.to_owned(),
            fmt_opt(f.rtt_p50),
            fmt_opt(f.rtt_p99),
            f.pair_label.to_owned(),
            fmt_opt(f.pair_p50),
            fmt_opt(f.pair_p99),
        ]);
    }

    pub fn push(&mut self, r: Row) {
        self.rows.push(r);
    }

    fn headers() -> [&'static str; HEADERS] {
        [
            "scenario",
            "target",
            "metric",
            "p50 µs",
            "p99 µs",
            "p99/p50",
            "ops/s or value",
            "x floor p50",
            "x try_acquire p50",
            "min/max per client",
            "attempts per acq",
            "allocs/op",
            "bytes/op",
            "notes",
        ]
    }

    fn cells(r: &Row) -> Vec<String> {
        let fairness = match (r.extra.get("min_per_client"), r.extra.get("max_per_client")) {
            (Some(a), Some(b)) => format!("{a}/{b}"),
            _ => "-".into(),
        };
        let notes: Vec<String> = r
            .extra
            .iter()
            .filter(|(k, _)| !k.ends_with("per_client"))
            .map(|(k, v)| format!("{k}={}", v.as_f64().map_or_else(|| v.to_string(), |f| format!("{f:.1}"))))
            .collect();
        vec![
            r.scenario.clone(),
            r.target.clone(),
            r.metric.clone(),
            fmt_opt(r.p50),
            fmt_opt(r.p99),
            fmt_f(r.tail(), 1),
            fmt_f(r.value, 0),
            // Only one client alone on a key does what the floor does; under contention the
            // ratio would mostly measure the waiting, not the library.
            if r.scenario.starts_with("uncontended") { fmt_f(r.ratio, 2) } else { "-".into() },
            fmt_f(r.vs_try_acquire, 2),
            fairness,
            fmt_f(r.attempts, 2),
            fmt_f(r.allocs, 0),
            fmt_f(r.alloc_bytes, 0),
            notes.join(" "),
        ]
    }

    /// The terminal table.
    pub fn table(&self) -> String {
        let mut t = comfy_table::Table::new();
        t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED).set_header(Self::headers());
        for r in &self.rows {
            t.add_row(Self::cells(r));
        }
        let mut f = comfy_table::Table::new();
        f.load_style(comfy_table::presets::UTF8_FULL_CONDENSED).set_header(FLOOR_HEADERS);
        for row in &self.floors {
            f.add_row(row.clone());
        }
        format!("{f}\n{t}\n")
    }

    fn markdown(&self) -> String {
        let mut md = String::new();
        let when = std::process::Command::new("date").arg("-u").arg("+%Y-%m-%d %H:%M UTC").output().ok();
        let when = when.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_default();
        let cpus = std::thread::available_parallelism().map_or(0, usize::from);
        let _ = writeln!(md, "# dlock bench report\n");
        let _ = writeln!(md, "| | |\n|---|---|");
        let _ = writeln!(md, "| date | {when} |");
        let _ = writeln!(
            md,
            "| commit | {} |",
            output("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into())
        );
        let command: Vec<String> = std::env::args().collect();
        let _ = writeln!(md, "| command | `{}` |", command.join(" "));
        let _ =
            writeln!(md, "| mode | {} |", if self.quick { "quick (CI smoke: few samples)" } else { "full" });
        let _ = writeln!(md, "| machine | {}, {cpus} CPUs, {} |", cpu_model(), os_name());
        let _ = writeln!(md, "| servers | {} |", server_versions());
        let _ = writeln!(md, "| storage | {} |\n", self.storage);
        let _ = writeln!(
            md,
            "Latencies in µs. *x floor p50* is shown for the uncontended rows only: p50 over the \
             p50 of the cheapest raw round trips that could take and free a lock on that store \
             (the floors below), measured in the same run, so it reads the library's own cost \
             on a noisy machine. Under contention the waiting dominates and the ratio would not \
             mean that, so it is left out there.\n"
        );
        for n in &self.notes {
            let _ = writeln!(md, "- note: {n}");
        }
        let _ = writeln!(
            md,
            "\n## Floors (same run)\n\n| {} |\n|{}",
            FLOOR_HEADERS.join(" | "),
            "---|".repeat(7)
        );
        for row in &self.floors {
            let _ = writeln!(md, "| {} |", row.join(" | "));
        }
        let _ =
            writeln!(md, "\n## Results\n\n| {} |\n|{}", Self::headers().join(" | "), "---|".repeat(HEADERS));
        for r in &self.rows {
            let _ = writeln!(md, "| {} |", Self::cells(r).join(" | "));
        }
        md.push_str(&crate::curves::markdown(&self.rows));
        md
    }

    /// Write `results.jsonl`, `report.md` and `<scenario>.svg` into `dir`. A chart that cannot
    /// be drawn is reported and skipped: the figures are in the other two files.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let failed = |source| BenchError::Report { path: dir.to_owned(), source };
        std::fs::create_dir_all(dir).map_err(failed)?;
        let mut jl = String::new();
        for r in &self.rows {
            jl.push_str(&r.json().to_string());
            jl.push('\n');
        }
        std::fs::write(dir.join("results.jsonl"), jl).map_err(failed)?;
        std::fs::write(dir.join("report.md"), self.markdown()).map_err(failed)?;
        crate::curves::charts(dir, &self.rows);
        // A curve's points are drawn as lines above, not as one bar chart each.
        let mut scenarios: Vec<&str> = self
            .rows
            .iter()
            .filter(|r| !r.extra.contains_key("curve"))
            .map(|r| r.scenario.as_str())
            .collect();
        scenarios.dedup();
        for s in scenarios {
            let rows: Vec<&Row> = self.rows.iter().filter(|r| r.scenario == s).collect();
            let file = dir.join(format!("{}.svg", s.replace([' ', '/'], "_")));
            if let Err(e) = chart(&file, s, &rows) {
                eprintln!("chart {}: {e}", file.display());
            }
        }
        Ok(())
    }
}

/// Runs `program args` and returns its trimmed stdout, if it ran.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find_map(|l| {
            l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

fn os_name() -> String {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_owned()))
        .unwrap_or_else(|| std::env::consts::OS.into())
}

/// The Debian packages of the servers the bench starts (the versions the figures are for).
fn server_versions() -> String {
    let packages = ["redis-server", "mariadb-server", "zookeeper", "postgresql-15", "etcd-server"];
    let mut args = vec!["-W", "-f", "${Package} ${Version}\\n"];
    args.extend(packages);
    match output("dpkg-query", &args) {
        Some(list) if !list.is_empty() => list.lines().collect::<Vec<_>>().join(", "),
        _ => "unknown (no dpkg-query)".into(),
    }
}

/// One group of bars per target: p50 and p99 where the scenario measures latency (a legend
/// tells them apart), else the scenario's own figure. Titled, with both axes named and the
/// unit on the value axis.
fn chart(path: &Path, scenario: &str, rows: &[&Row]) -> std::result::Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let latency = rows.iter().all(|r| r.p50.is_some());
    let series: Vec<(&str, RGBColor, Vec<f64>)> = if latency {
        vec![
            ("p50", BLUE, rows.iter().map(|r| r.p50.unwrap_or(0) as f64).collect()),
            ("p99", RED, rows.iter().map(|r| r.p99.or(r.p50).unwrap_or(0) as f64).collect()),
        ]
    } else {
        let metric = rows.first().map_or("value", |r| r.metric.as_str());
        vec![(metric, BLUE, rows.iter().map(|r| r.value.unwrap_or(0.0)).collect())]
    };
    let ymax = series.iter().flat_map(|(.., v)| v.iter().copied()).fold(1.0, f64::max) * 1.15;
    let root = SVGBackend::new(path, (960, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (caption, y_desc) = if latency {
        (format!("{scenario}: latency per target (p50 and p99)"), "latency (µs)".to_owned())
    } else {
        let metric = rows.first().map_or("", |r| r.metric.as_str());
        (format!("{scenario}: {metric} per target"), metric.to_owned())
    };
    // One segment per bar, each group followed by an empty segment as a gap.
    let group = series.len() as u32 + 1;
    let n = rows.len() as u32 * group;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d((0u32..n).into_segmented(), 0f64..ymax)?;
    let names: Vec<String> = rows.iter().map(|r| r.target.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n as usize)
        .x_desc("target")
        .y_desc(y_desc)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) if i % group == 0 => {
                names.get((i / group) as usize).cloned().unwrap_or_default()
            }
            _ => String::new(),
        })
        .draw()?;
    for (k, (label, color, vals)) in series.iter().enumerate() {
        let color = *color;
        chart
            .draw_series(
                plotters::series::Histogram::vertical(&chart)
                    .style(color.mix(0.7).filled())
                    .margin(2)
                    .data(vals.iter().enumerate().map(|(i, v)| (i as u32 * group + k as u32, *v))),
            )?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.mix(0.7).filled()));
    }
    chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    root.present()?;
    Ok(())
}
