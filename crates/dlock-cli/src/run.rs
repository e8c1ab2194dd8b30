//! `dlock run`.

use std::process::ExitCode;
use std::time::Duration;

use std::os::unix::process::ExitStatusExt;

use dlock::{LockError, Locker, redact_url};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::hold::{Hold, Mode};
use crate::supervise::{OnLost, Supervision, Until, exit_of};
use crate::{EXIT_CONFIG, EXIT_LOST, EXIT_NOPERM, EXIT_TIMEOUT, EXIT_UNAVAILABLE, EXIT_UNSUPPORTED};

pub(crate) fn fail(url: &str, e: &LockError) -> ExitCode {
    let code = match e {
        LockError::Timeout { .. } => EXIT_TIMEOUT,
        LockError::Backend { .. } => EXIT_UNAVAILABLE,
        LockError::Unsupported { .. } => EXIT_UNSUPPORTED,
        LockError::PermissionDenied { .. } => EXIT_NOPERM,
        // Granted, then lost before the command could start (the holder's note, the top-up
        // renewal of a hand-over): the lock's status, not a usage error.
        LockError::LeaseLost { .. } => EXIT_LOST,
        _ => EXIT_CONFIG,
    };
    let mut msg = format!("dlock: {e}");
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        // Drivers often repeat their source's text in their own message: print it once.
        let text = s.to_string();
        if !msg.contains(&text) {
            msg.push_str(&format!(": {text}"));
        }
        src = s.source();
    }
    eprintln!("{msg} (url {})", redact_url(url));
    ExitCode::from(code)
}

/// The error for a server that did not answer the connection within the wait.
pub(crate) fn unreachable(wait: Duration) -> LockError {
    LockError::temporary("dlock", format!("no connection to the server within --wait {wait:?}"))
}

pub(crate) async fn locker(url: &str, lease: Duration) -> Result<Locker, LockError> {
    Locker::new(dlock::from_url(url).await?).with_watchdog_lease(lease)
}

/// The first of SIGTERM, SIGINT and SIGHUP to arrive.
pub(crate) async fn any_signal(sigs: &mut Signals) -> Signal {
    let [(a, sa), (b, sb), (c, sc)] = sigs;
    tokio::select! {
        _ = sa.recv() => *a,
        _ = sb.recv() => *b,
        _ = sc.recv() => *c,
    }
}

pub(crate) type Signal_ = (Signal, tokio::signal::unix::Signal);

pub(crate) fn exit_signal(sig: Signal) -> ExitCode {
    ExitCode::from(u8::try_from(128 + sig as i32).unwrap_or(255))
}

/// How long `dlock` waits, before it exits, for the store to forget what a cancelled wait left
/// there: a few round trips on a live store, and an exit that stays prompt on a dead one.
const SETTLE: Duration = Duration::from_secs(1);

/// Called last, on every path out of `dlock`: a wait that ended without the lock (a signal, an
/// error) was dropped, which started its clean-up (leaving the store's queue) in a task of the
/// runtime; that task dies with the runtime, and the place would stay queued until its lease
/// or session ran out, delaying every waiter behind it. Nothing pending: returns at once.
pub(crate) async fn settle() {
    if !dlock::settle_cleanups(SETTLE).await {
        eprintln!(
            "dlock: the store did not confirm within {SETTLE:?} that an abandoned wait left its queue; \
             its lease or session will"
        );
    }
}

/// Checks shared by every command that runs a command under a hold (`run`, `leader`), and
/// the signal handlers, installed before anything else so that a signal while waiting ends
/// dlock cleanly.
pub(crate) fn prepare(
    url: &str,
    lease: Duration,
    on_lost: OnLost,
    command: &[String],
) -> Result<Signals, ExitCode> {
    if url.get(..9).is_some_and(|s| s.eq_ignore_ascii_case("memory://")) {
        eprintln!(
            "dlock: memory:// locks live inside one process, so another dlock process would never see \
             this one; use one of {}",
            crate::stores::shared_schemes()
        );
        return Err(ExitCode::from(EXIT_CONFIG));
    }
    if let Some(grace) = on_lost.grace()
        && grace >= lease
    {
        eprintln!(
            "dlock: --on-lost grace {grace:?} must be shorter than --lease {lease:?}: if dlock dies, \
             the command must be stopped before the lease lets another holder in"
        );
        return Err(ExitCode::from(EXIT_CONFIG));
    }
    if command.is_empty() {
        eprintln!("dlock: no command given");
        return Err(ExitCode::from(EXIT_CONFIG));
    }
    let kinds = [
        (Signal::SIGTERM, SignalKind::terminate()),
        (Signal::SIGINT, SignalKind::interrupt()),
        (Signal::SIGHUP, SignalKind::hangup()),
    ];
    let mut sigs = Vec::with_capacity(3);
    for (sig, kind) in kinds {
        match signal(kind) {
            Ok(s) => sigs.push((sig, s)),
            Err(e) => {
                eprintln!("dlock: cannot install signal handlers: {e}");
                return Err(ExitCode::from(EXIT_CONFIG));
            }
        }
    }
    sigs.try_into().map_err(|_| ExitCode::from(EXIT_CONFIG))
}

/// SIGTERM, SIGINT and SIGHUP, as [`prepare`] installs them.
pub(crate) type Signals = [Signal_; 3];

/// How long `dlock run --wait 0` (one try) may take to connect.
const TRY_ONCE_CONNECT: Duration = Duration::from_secs(5);

/// How long `dlock run` waits for the lock, and its exit status when that runs out.
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    pub wait: Duration,
    /// `--conflict-exit-code` (75 unless given).
    pub conflict_exit_code: u8,
}

/// What `dlock run` holds and how: the primitive, the holder identity noted on it, the
/// watchdog lease, and what a loss does to the command.
#[derive(Debug, Clone)]
pub struct HoldArgs {
    pub mode: Mode,
    pub holder: String,
    pub lease: Duration,
    pub on_lost: OnLost,
    /// Whether the hold lasts until the command's background processes have exited too.
    pub until: Until,
}

/// Hold `key` while `command` runs; see the `run` subcommand's help.
pub async fn run(
    url: &str,
    key: &str,
    HoldArgs { mode, holder, lease, on_lost, until }: HoldArgs,
    Waits { wait, conflict_exit_code }: Waits,
    command: &[String],
) -> ExitCode {
    let mut sigs = match prepare(url, lease, on_lost, command) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let deadline = tokio::time::Instant::now() + wait;
    // --wait bounds everything, connecting included; `--wait 0` (one try) still connects.
    let connect_for = if wait.is_zero() { TRY_ONCE_CONNECT } else { wait };
    let guard = tokio::select! {
        g = async {
            let locker = tokio::time::timeout(connect_for, locker(url, lease))
                .await
                .map_err(|_| unreachable(connect_for))??
                .with_holder(holder)?;
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            Hold::acquire(&locker, key, mode, left).await
        } => match g {
            Ok(g) => g,
            Err(e @ LockError::Timeout { .. }) => {
                fail(url, &e);
                return ExitCode::from(conflict_exit_code);
            }
            Err(e) => return fail(url, &e),
        },
        sig = any_signal(&mut sigs) => return exit_signal(sig),
    };
    let ran = run_held(
        key,
        Supervision { on_lost, until },
        command,
        guard.fence(),
        &guard.env(),
        guard.lost(),
        &mut sigs,
    )
    .await;
    let released = guard.release().await;
    let ran = match ran {
        Ok(ran) => ran,
        Err(code) => return code,
    };
    if ran.lost || matches!(released, Err(LockError::LeaseLost { .. })) {
        eprintln!("dlock: lock {key:?} was lost while {:?} ran", ran.program);
        return ExitCode::from(EXIT_LOST);
    }
    ran.exit()
}

/// How a command run under a hold ended.
pub(crate) struct Ran {
    status: std::io::Result<std::process::ExitStatus>,
    /// The hold was lost while the command ran (it was stopped, unless `--on-lost none`).
    pub lost: bool,
    /// The command's program, for messages.
    pub program: String,
}

impl Ran {
    /// The command's exit status as dlock reports it.
    pub fn exit(self) -> ExitCode {
        match self.status {
            Ok(s) => exit_of(s),
            Err(e) => {
                eprintln!("dlock: waiting for {:?} failed: {e}", self.program);
                ExitCode::from(1)
            }
        }
    }
}

/// Run `command` under the supervisor while a hold of `key` lasts: `fence` exported as
/// `DLOCK_FENCING_TOKEN` (and `env`), dlock's signals forwarded to the command's group, the command
/// stopped as `--on-lost` says when `lost` is cancelled. Returns once the command has exited;
/// the caller releases the hold. `Err` is dlock's exit status when the command could not start.
pub(crate) async fn run_held(
    key: &str,
    Supervision { on_lost, until }: Supervision,
    command: &[String],
    fence: Option<dlock::FencingToken>,
    env: &[(&str, String)],
    lost: impl std::future::Future<Output = ()>,
    sigs: &mut Signals,
) -> Result<Ran, ExitCode> {
    let Some(program) = command.first() else { return Err(ExitCode::from(EXIT_CONFIG)) };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("dlock: cannot find its own executable to supervise the command: {e}");
            return Err(ExitCode::from(EXIT_CONFIG));
        }
    };
    let grace = on_lost.grace().unwrap_or(Duration::from_secs(5));
    let mut cmd = Command::new(exe);
    cmd.arg("__supervise")
        .arg("--parent")
        .arg(std::process::id().to_string())
        .arg("--grace")
        .arg(format!("{}ms", grace.as_millis()))
        .args((until == Until::CommandExited).then_some("--ignore-background"))
        .arg("--")
        .args(command)
        // The supervisor leads a new process group, which the command joins: one signal to
        // the group reaches both, and nothing else.
        .process_group(0);
    // Only a real fencing token is exported: a number from a backend without fencing would
    // look like one and protect nothing.
    match fence {
        Some(f) => cmd.env("DLOCK_FENCING_TOKEN", f.to_string()),
        None => cmd.env_remove("DLOCK_FENCING_TOKEN"),
    };
    cmd.env_remove("DLOCK_PERMIT_SLOT").envs(env.iter().map(|(k, v)| (k, v)));
    let mut sup = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dlock: cannot run {program:?}: {e}");
            return Err(ExitCode::from(127));
        }
    };
    let Some(group) = sup.id().and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw) else {
        return Err(ExitCode::from(1));
    };
    let mut lost_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    tokio::pin!(lost);
    let status = loop {
        let kill_at = lost_at.map(|t| t + grace);
        tokio::select! {
            status = sup.wait() => break status,
            sig = any_signal(sigs) => {
                let _ = killpg(group, sig);
            }
            () = &mut lost, if lost_at.is_none() => {
                lost_at = Some(tokio::time::Instant::now());
                match on_lost {
                    OnLost::Stop(sig, _) => {
                        eprintln!("dlock: lock {key:?} lost; sending {sig} to {program:?}");
                        let _ = killpg(group, sig);
                    }
                    OnLost::Nothing => eprintln!("dlock: lock {key:?} lost; {program:?} keeps running (--on-lost none)"),
                }
            }
            _ = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)), if kill_at.is_some() && !killed && on_lost != OnLost::Nothing => {
                killed = true;
                let _ = killpg(group, Signal::SIGKILL);
            }
        }
    };
    // A supervisor that died of a signal nobody here sent may have left the command running:
    // stop the group before the hold is given up.
    if status.as_ref().is_ok_and(|s| s.signal().is_some()) && !killed && killpg(group, None).is_ok() {
        let _ = killpg(group, Signal::SIGTERM);
        tokio::time::sleep(grace).await;
        let _ = killpg(group, Signal::SIGKILL);
    }
    Ok(Ran { status, lost: lost_at.is_some(), program: program.clone() })
}
