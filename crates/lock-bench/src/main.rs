//! `lock-bench`: the same scenarios on every backend and mode, through the same
//! `dyn LockBackend` path, each next to a raw floor measured in the same run. Not shipped with
//! `dlock`: this is the project's comparison harness.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Parser, Subcommand};

mod alloc;
mod curves;
mod error;
mod floor;
mod micros;
mod peers;
mod report;
mod row;
mod scenarios;
mod sides;
mod targets;

use error::BenchError;
use report::Report;
use scenarios::{Ctx, SCENARIOS, Scenario, Sizes};

/// Exit status for no target to benchmark (bad `--url`/`--only`, or a build without backends).
const EXIT_CONFIG: u8 = 64;

#[derive(Parser, Debug)]
#[command(
    name = "lock-bench",
    version,
    about = "Benchmark every available dlock backend with the same scenarios; writes a report folder",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    internal: Option<Internal>,
    #[command(flatten)]
    args: BenchArgs,
}

#[derive(Subcommand, Debug)]
enum Internal {
    /// Hold a lock until killed (the crash scenario's victim).
    #[command(hide = true, name = "__hold")]
    Hold {
        #[arg(long)]
        url: String,
        #[arg(long)]
        key: String,
        #[arg(long)]
        lease_ms: u64,
    },
    /// A scale run's client process.
    #[command(hide = true, name = "__clients")]
    Clients(scenarios::ClientsArgs),
}

/// What to benchmark and where the report goes.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Small sizes: the whole run takes a few minutes (CI smoke run).
    #[arg(long)]
    pub quick: bool,
    /// Benchmark these backend URLs instead of starting local servers (repeatable).
    #[arg(long = "url")]
    pub urls: Vec<String>,
    /// Only targets whose name contains one of these (repeatable): memory, redis, mysql, zk, ...
    #[arg(long = "only")]
    pub only: Vec<String>,
    /// Also start a Redis Cluster (3 masters), a Sentinel set (primary, replica, 3 sentinels)
    /// and 5 Redlock masters: targets redis-cluster/simple, redis-sentinel/simple and
    /// redlock-5/simple. Without it each starts only when an --only names it (redis-cluster,
    /// redis-sentinel, redlock).
    #[arg(long)]
    pub topologies: bool,
    /// Scenarios to run (repeatable; default: all).
    #[arg(long = "scenario", value_parser = scenario_names())]
    pub scenarios: Vec<String>,
    /// Start the servers with the test suites' fast settings (data on tmpfs, fsync off) instead
    /// of their packaged durability defaults with the data on disk; the report says which.
    #[arg(long)]
    pub fast_servers: bool,
    /// Report folder: results.jsonl, report.md and one SVG chart per scenario.
    #[arg(long, default_value = "results")]
    pub out: PathBuf,
}

/// `--scenario` accepts the table's names, with what each measures as their help.
fn scenario_names() -> PossibleValuesParser {
    PossibleValuesParser::new(SCENARIOS.iter().map(|s| PossibleValue::new(s.name).help(s.measures)))
}

fn main() -> ExitCode {
    // The backends' warnings (reconnects, lost leases) go to stderr, beside the progress bar.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_max_level(tracing::Level::WARN)
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lock-bench: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(async move {
        match cli.internal {
            Some(Internal::Hold { url, key, lease_ms }) => {
                scenarios::hold(&url, &key, Duration::from_millis(lease_ms)).await
            }
            Some(Internal::Clients(args)) => scenarios::clients(args).await,
            None => bench(cli.args).await,
        }
    })
}

/// Chooses how the servers the bench starts keep their data, before any starts; returns the
/// report's line for it.
fn choose_durability(fast: bool) -> Result<String, String> {
    use lock_testkit::server::{Durability, disk_base, filesystem_of, set_durability};
    let wanted = if fast { Durability::Fast } else { Durability::Packaged };
    set_durability(wanted).map_err(|d| format!("servers already chosen {d:?}, not {wanted:?}"))?;
    Ok(match wanted {
        Durability::Fast => "the test suites' fast settings (fsync off, data on tmpfs): not how users \
                             run them, for comparison only"
            .to_owned(),
        Durability::Packaged => {
            let base = disk_base();
            let fs = filesystem_of(&base).unwrap_or_else(|| "an unknown filesystem".into());
            format!(
                "as packaged: fsync and synchronous commits on, MariaDB flushing its redo log at \
                 every commit, ZooKeeper forceSync=yes, default connection limits; data on {fs} \
                 under {}",
                base.display()
            )
        }
    })
}

/// The run: every scenario on every target, then the report.
async fn bench(args: BenchArgs) -> ExitCode {
    let sizes = Sizes::new(args.quick);
    let storage = match choose_durability(args.fast_servers) {
        Ok(_) if !args.urls.is_empty() => "the servers named by --url, as they are configured".to_owned(),
        Ok(storage) => storage,
        Err(e) => {
            eprintln!("lock-bench: {e}");
            return ExitCode::from(1);
        }
    };
    let (targets, _servers, notes) = targets::discover(&args).await;
    for n in &notes {
        eprintln!("note: {n}");
    }
    if targets.is_empty() {
        eprintln!("lock-bench: no target to benchmark");
        return ExitCode::from(EXIT_CONFIG);
    }
    let chosen: Vec<&Scenario> = if args.scenarios.is_empty() {
        SCENARIOS.iter().collect()
    } else {
        args.scenarios.iter().filter_map(|n| Scenario::by_name(n)).collect()
    };
    let mut report = Report::new(args.quick, storage, notes);
    let runs = targets.iter().map(|t| chosen.iter().filter(|s| s.runs_on(t)).count()).sum::<usize>();
    let pb = indicatif::ProgressBar::new(runs as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut failed = false;
    // Where a run's time goes (the CI's smoke run has a budget): each floor and scenario.
    let mut took: Vec<(std::time::Duration, String)> = Vec::new();
    for t in &targets {
        let started = std::time::Instant::now();
        let setup = async {
            let caps = match t.peer {
                Some(p) => p.floor_capability(),
                None => t.client().await?.capabilities(),
            };
            Ok::<_, BenchError>((caps, floor::measure(t, caps, sizes.floor_samples).await?))
        };
        let (caps, floor) = match setup.await {
            Ok((caps, (f, note))) => {
                if let Some(n) = note {
                    eprintln!("note: {n}");
                }
                (caps, f)
            }
            Err(e) => {
                eprintln!("{}: floor failed: {}", t.name, e.chain());
                failed = true;
                continue;
            }
        };
        report.floor(&t.name, &floor);
        took.push((started.elapsed(), format!("{} floor", t.name)));
        let cx = Ctx { target: t, caps, floor: &floor, sizes: &sizes };
        // A peer takes part in the scenarios that measure a user's acquire, not in those that
        // measure this library's machinery (watchdog, crash recovery by lease, the seeds).
        for s in chosen.iter().filter(|s| s.runs_on(t)) {
            pb.set_message(format!("{} {}", t.name, s.name));
            let started = std::time::Instant::now();
            let ran = s.run(&cx).await;
            took.push((started.elapsed(), format!("{} {}", t.name, s.name)));
            match ran {
                Ok(rows) => rows.into_iter().for_each(|r| report.push(r)),
                Err(e) => {
                    eprintln!("{} {}: {}", t.name, s.name, e.chain());
                    failed = true;
                }
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    print!("{}", report.table());
    took.sort_by_key(|t| std::cmp::Reverse(t.0));
    let total: std::time::Duration = took.iter().map(|t| t.0).sum();
    let slowest: Vec<String> =
        took.iter().take(8).map(|(d, what)| format!("{what} {:.1} s", d.as_secs_f64())).collect();
    eprintln!("took {:.0} s; slowest: {}", total.as_secs_f64(), slowest.join(", "));
    if let Err(e) = report.write(&args.out) {
        eprintln!("lock-bench: {}", e.chain());
        return ExitCode::from(1);
    }
    eprintln!("report written to {}", args.out.display());
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}
