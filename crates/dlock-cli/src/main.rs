//! `dlock`: run a command under a distributed lock, inspect a lock, benchmark the backends.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

mod bench;
mod duration;
mod run;

use duration::parse_duration;

/// Exit status when the lock was not acquired before `--wait` ran out.
pub const EXIT_TIMEOUT: u8 = 75;
/// Exit status when the lock was lost while the command ran (the command was terminated).
pub const EXIT_LOST: u8 = 76;
/// Exit status for a bad URL, a missing feature or bad arguments.
pub const EXIT_CONFIG: u8 = 64;
/// Exit status when the backend is unreachable.
pub const EXIT_UNAVAILABLE: u8 = 69;

#[derive(Parser, Debug)]
#[command(
    name = "dlock",
    version,
    about = "Distributed locks over memory, Redis, MySQL/MariaDB and ZooKeeper"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Hold a lock while a command runs, like flock(1) or `etcdctl lock`.
    ///
    /// The lock is renewed by a watchdog while the command runs. If the lock is lost, the
    /// command gets SIGTERM, then SIGKILL after --grace, and dlock exits with status 76.
    /// Exit statuses: the command's own; 75 lock not acquired in time; 76 lock lost;
    /// 64 bad arguments / URL / missing feature; 69 backend unreachable.
    Run {
        /// Backend URL: memory://name, redis://host:port/?mode=simple|reentrant|fair,
        /// mysql://user:pass@host:port/db?mode=pessimistic|optimistic, zk://host:port/root
        #[arg(long, env = "DLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        key: String,
        /// How long to wait for the lock (e.g. 500ms, 30s, 5m).
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        wait: Duration,
        /// Watchdog lease: renewed every third of it while the command runs.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        lease: Duration,
        /// Time between SIGTERM and SIGKILL when the lock is lost.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        grace: Duration,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
    /// Tell whether a lock is held and its remaining lease (probes with one attempt).
    Status {
        /// Backend URL (see `dlock run --help`).
        #[arg(long, env = "DLOCK_URL")]
        url: String,
        /// Lock name.
        #[arg(long)]
        key: String,
    },
    /// Benchmark every available backend with the same scenarios; writes a report folder.
    Bench(bench::BenchArgs),
    /// Internal: hold a lock until killed (the crash-recovery scenario's victim).
    #[command(hide = true)]
    Hold {
        #[arg(long)]
        url: String,
        #[arg(long)]
        key: String,
        #[arg(long, value_parser = parse_duration)]
        lease: Duration,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(tracing::Level::WARN).init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dlock: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    rt.block_on(async move {
        match cli.cmd {
            Cmd::Run { url, key, wait, lease, grace, command } => {
                run::run(&url, &key, wait, lease, grace, &command).await
            }
            Cmd::Status { url, key } => run::status(&url, &key).await,
            Cmd::Bench(args) => bench::main(args).await,
            Cmd::Hold { url, key, lease } => run::hold(&url, &key, lease).await,
        }
    })
}
