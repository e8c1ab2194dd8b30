//! `dlock run`.

use std::process::ExitCode;
use std::time::Duration;

use std::os::unix::process::ExitStatusExt;

use dlock::{LockError, Locker};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::connect;
use crate::duration::Wait;
use crate::hold::{Hold, Mode};
use crate::signals::{Signals, any_signal, exit_signal};
use crate::supervise::{OnLost, Supervision, Until, exit_of};
use crate::{EXIT_CONFIG, EXIT_LOST};

pub(crate) use crate::report::fail;

/// The error for a server that did not answer the connection within `wait`.
pub(crate) fn unreachable(wait: Duration) -> LockError {
    crate::report::unreachable_for(wait)
}

pub(crate) async fn locker(url: &str, lease: Duration) -> Result<Locker, LockError> {
    Locker::new(dlock::from_url(url).await?).with_watchdog_lease(lease)
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
pub(crate) fn prepare(url: &str, lease: Duration, on_lost: OnLost) -> Result<Signals, ExitCode> {
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

/// How long `dlock run` waits for the lock, and how it says it did not get it.
#[derive(Debug, Clone)]
pub struct Waits {
    pub wait: Wait,
    /// `--conflict-exit-code` (75 unless given).
    pub conflict_exit_code: u8,
    /// `--quiet`: no message when the lock is not acquired in time.
    pub quiet: bool,
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

/// Hold `key` while `command` runs (or, without a command, until stdin closes or a signal);
/// see the `run` subcommand's help.
pub async fn run(
    url: &str,
    key: &str,
    HoldArgs { mode, holder, lease, on_lost, until }: HoldArgs,
    Waits { wait, conflict_exit_code, quiet }: Waits,
    command: &[String],
) -> ExitCode {
    // What can be told wrong without the store is told before connecting: a mistyped key is
    // a usage error (64), not an unreachable server (69), whatever the server's state.
    if let Err(e) = mode.check(key).and_then(|()| dlock::validate_lease(lease)) {
        return fail(url, &e);
    }
    let mut sigs = match prepare(url, lease, on_lost) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let started = tokio::time::Instant::now();
    let store = connect::with_lease(url, lease);
    let guard = tokio::select! {
        g = async {
            // --wait bounds everything, connecting included; `--wait 0` (one try) still connects.
            let backend = connect::connect(&store, &wait, quiet).await?;
            let locker = Locker::new(backend).with_watchdog_lease(lease)?.with_holder(holder)?;
            let left = wait.bound.map(|b| b.saturating_sub(started.elapsed()));
            Hold::acquire(&locker, key, mode, left).await
        } => match g {
            Ok(g) => g,
            Err(LockError::Timeout { .. }) => {
                if !quiet {
                    eprintln!("dlock: {key} is held elsewhere; not acquired within --wait {wait}");
                }
                return ExitCode::from(conflict_exit_code);
            }
            Err(e) => return fail(url, &e),
        },
        sig = any_signal(&mut sigs) => return exit_signal(sig),
    };
    if command.is_empty() {
        return crate::hold::hold_until_told(key, guard, &mut sigs).await;
    }
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
    /// dlock was told to stop (SIGTERM, SIGINT, SIGHUP) and passed the signal on to the
    /// command: whatever else happened, it is not to run the command again.
    pub signalled: bool,
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
    let (mut killed, mut signalled) = (false, false);
    tokio::pin!(lost);
    let status = loop {
        let kill_at = lost_at.map(|t| t + grace);
        tokio::select! {
            status = sup.wait() => break status,
            sig = any_signal(sigs) => {
                signalled = true;
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
    Ok(Ran { status, lost: lost_at.is_some(), signalled, program: program.clone() })
}
