//! `dlock`: run a command under a distributed lock, or inspect a lock. The benchmark of the
//! backends is the project's `lock-bench` binary (`cargo run --release -p lock-bench`), not
//! part of what users install.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::process::ExitCode;

mod cli;
mod connect;
#[cfg(test)]
mod doc_truth;
mod duration;
mod hold;
mod holder;
mod leader;
mod list;
mod reaper;
mod report;
mod run;
mod signals;
mod status;
mod stores;
mod supervise;
mod unlock;

use cli::{Cli, Cmd};

/// Exit status when the lock was not acquired before `--wait` ran out.
pub const EXIT_TIMEOUT: u8 = 75;
/// Exit status when the lock was lost while the command ran (the command was terminated).
pub const EXIT_LOST: u8 = 76;
/// Exit status for every usage error: a bad URL, a missing feature, bad arguments.
pub const EXIT_CONFIG: u8 = 64;
/// Exit status when the backend is unreachable.
pub const EXIT_UNAVAILABLE: u8 = 69;
/// Exit status when the backend refused the credentials or the permission.
pub const EXIT_NOPERM: u8 = 77;
/// Exit status when the store refused the configuration for good (a database that does not
/// exist, TLS to a server without it) or cannot do what was asked.
pub const EXIT_UNSUPPORTED: u8 = 78;

/// Installs the Prometheus recorder with its HTTP listener on `addr` (inside the runtime).
fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), ExitCode> {
    metrics_exporter_prometheus::PrometheusBuilder::new().with_http_listener(addr).install().map_err(|e| {
        eprintln!("dlock: cannot serve metrics on {addr}: {e}");
        ExitCode::from(EXIT_CONFIG)
    })
}

fn main() -> ExitCode {
    // Colour codes only for a terminal: cron mails and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_max_level(tracing::Level::WARN)
        .init();
    let cli = stores::parse();
    if let Cmd::Status { json: true, .. } | Cmd::List { json: true, .. } | Cmd::Unlock { json: true, .. } =
        &cli.cmd
    {
        report::json_errors();
    }
    // A key that no store would take is a usage error whatever the store's state: said before
    // connecting, so a mistyped key is never reported as an unreachable server.
    if let Cmd::Status { url, key, .. } | Cmd::Unlock { url, key, .. } = &cli.cmd
        && let Err(e) = dlock::validate_key(key)
    {
        return report::fail(url, &e);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dlock: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_UNAVAILABLE);
        }
    };
    let code = rt.block_on(async move {
        match cli.cmd {
            Cmd::Run {
                url,
                key,
                permits,
                read,
                write,
                reader_slots,
                wait,
                conflict_exit_code,
                quiet,
                lease,
                on_lost,
                metrics_addr,
                ignore_background,
                holder_label,
                shell_command,
                command,
            } => {
                if let Some(addr) = metrics_addr
                    && let Err(code) = serve_metrics(addr)
                {
                    return code;
                }
                let mode = match (permits, read, write) {
                    (Some(n), _, _) => hold::Mode::Permits(n),
                    (None, true, _) => hold::Mode::Read(reader_slots),
                    (None, false, true) => hold::Mode::Write(reader_slots),
                    (None, false, false) => hold::Mode::Mutex,
                };
                let waits = run::Waits { wait, conflict_exit_code, quiet };
                let command = match shell_command {
                    Some(c) => vec!["sh".to_owned(), "-c".to_owned(), c],
                    None => command,
                };
                let holder = holder::identity(command.first().map(String::as_str), holder_label.as_deref());
                let hold = run::HoldArgs {
                    mode,
                    holder,
                    lease,
                    on_lost: on_lost.for_lease(lease),
                    until: supervise::Until::of(ignore_background),
                };
                run::run(&url, &key, hold, waits, &command).await
            }
            Cmd::Leader {
                url,
                key,
                identity,
                lease,
                on_lost,
                once,
                ignore_background,
                metrics_addr,
                command,
            } => {
                if let Some(addr) = metrics_addr
                    && let Err(code) = serve_metrics(addr)
                {
                    return code;
                }
                leader::leader(leader::LeaderArgs {
                    url: &url,
                    key: &key,
                    identity,
                    lease,
                    on_lost: on_lost.for_lease(lease),
                    until: supervise::Until::of(ignore_background),
                    once,
                    command: &command,
                })
                .await
            }
            Cmd::Completions { shell } => {
                let mut cmd = stores::for_completions();
                clap_complete::generate(shell, &mut cmd, "dlock", &mut std::io::stdout());
                ExitCode::SUCCESS
            }
            Cmd::List { url, prefix, limit, json } => list::list(&url, &prefix, limit, json).await,
            Cmd::Unlock { url, key, force: _, fence, slot, yes, json } => {
                unlock::unlock(&url, &key, unlock::Named { fence, slot }, yes, json).await
            }
            Cmd::Supervise { parent, grace, ignore_background, command } => {
                supervise::supervise(parent, grace, supervise::Until::of(ignore_background), &command).await
            }
            Cmd::Status { url, key, json, leader, read_write, reader_slots, permits } => {
                let kind = match (permits, read_write) {
                    (Some(n), _) => status::Kind::Permits(n),
                    (None, true) => status::Kind::ReadWrite { reader_slots },
                    (None, false) => status::Kind::Mutex { leader },
                };
                status::status(&url, &key, kind, json).await
            }
        }
    });
    // Before the runtime, and the clean-ups running in it, go (see `run::settle`).
    rt.block_on(run::settle());
    code
}
