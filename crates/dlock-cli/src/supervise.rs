//! The supervisor between `dlock run` and the command: it leads the command's process group,
//! and stops the command when the `dlock` process holding the lock dies (SIGKILL, OOM), so the
//! command never outlives the lock unnoticed.
//!
//! Linux has a parent-death signal (`prctl(PR_SET_PDEATHSIG)`), but setting it for the command
//! needs code between fork and exec (`pre_exec`, which is `unsafe`), and other systems lack
//! it. The supervisor instead watches its parent pid, which works on every Unix: when `dlock`
//! dies the supervisor is re-parented, sees it within [`PARENT_POLL`], and stops the group.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::str::FromStr;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::{getpgrp, getppid};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use crate::reaper;
use crate::{EXIT_CONFIG, EXIT_LOST};

/// How often the supervisor checks that `dlock` is still its parent.
pub const PARENT_POLL: Duration = Duration::from_millis(50);

/// What `dlock run` does to the command when the lock is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLost {
    /// Send this signal to the command's group, then SIGKILL after the grace period.
    Stop(Signal, Duration),
    /// Leave the command running (dlock still exits with status 76 afterwards).
    Nothing,
}

/// `--on-lost` as given: its grace period only where one was written (`TERM:2s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnLostArg {
    /// Send this signal, then SIGKILL after the grace period given, or the default one.
    Stop(Signal, Option<Duration>),
    /// Leave the command running.
    Nothing,
}

/// The grace period when none is given: 5 s, or a third of the lease when that is shorter (the
/// grace must end before the lease does, so a short `--lease` alone is accepted).
const DEFAULT_GRACE: Duration = Duration::from_secs(5);

impl OnLostArg {
    /// What to do for a hold of `lease`.
    pub fn for_lease(self, lease: Duration) -> OnLost {
        match self {
            OnLostArg::Stop(sig, Some(grace)) => OnLost::Stop(sig, grace),
            OnLostArg::Stop(sig, None) => OnLost::Stop(sig, DEFAULT_GRACE.min(lease / 3)),
            OnLostArg::Nothing => OnLost::Nothing,
        }
    }
}

impl OnLost {
    /// The grace period, when the command is to be stopped.
    pub fn grace(&self) -> Option<Duration> {
        match self {
            OnLost::Stop(_, g) => Some(*g),
            OnLost::Nothing => None,
        }
    }
}

/// Parse `--on-lost`: `TERM`, `TERM:5s`, `SIGINT:500ms`, `KILL`, or `none`.
pub fn parse_on_lost(s: &str) -> Result<OnLostArg, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(OnLostArg::Nothing);
    }
    let (sig, grace) = match s.split_once(':') {
        Some((sig, grace)) => (sig, Some(grace)),
        None => (s, None),
    };
    let name = sig.trim().to_ascii_uppercase();
    let name = if name.starts_with("SIG") { name } else { format!("SIG{name}") };
    let signal = match Signal::from_str(&name) {
        Ok(
            s @ (Signal::SIGTERM
            | Signal::SIGINT
            | Signal::SIGHUP
            | Signal::SIGKILL
            | Signal::SIGUSR1
            | Signal::SIGUSR2),
        ) => s,
        _ => {
            return Err(format!(
                "unknown or unsupported signal {sig:?} (TERM, INT, HUP, KILL, USR1, USR2 or none)"
            ));
        }
    };
    Ok(OnLostArg::Stop(signal, grace.map(crate::duration::parse_duration).transpose()?))
}

/// The exit status `dlock` reports for a finished process: its code, or 128 + the signal.
pub fn exit_of(status: ExitStatus) -> ExitCode {
    match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(u8::try_from(c & 0xff).unwrap_or(1)),
        (None, Some(sig)) => ExitCode::from(u8::try_from(128 + sig).unwrap_or(255)),
        (None, None) => ExitCode::from(1),
    }
}

/// The signals `--on-lost` and `dlock`'s forwarding send to the group, which the supervisor
/// survives (it has to report the command's status and keep waiting for its background
/// processes) and passes on to the adopted processes that left the group. SIGKILL cannot be
/// caught: it ends the supervisor as well, which `dlock` then sees.
const FORWARDED: [Signal; 5] =
    [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP, Signal::SIGUSR1, Signal::SIGUSR2];

/// How the supervisor ends its watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The command and every process it started have exited (flock(1)'s behaviour).
    AllExited,
    /// The command itself has exited (`--ignore-background`).
    CommandExited,
}

/// How the command runs under a hold: what a lost hold does to it, and what ends the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supervision {
    /// What a lost hold does to the command.
    pub on_lost: OnLost,
    /// Whether the hold lasts until the command's background processes have exited too.
    pub until: Until,
}

impl Until {
    /// From `--ignore-background`.
    pub fn of(ignore_background: bool) -> Until {
        if ignore_background { Until::CommandExited } else { Until::AllExited }
    }
}

/// Run `command` in this process's group (which `dlock run` made for us) until it exits, and,
/// with [`Until::AllExited`], until every process it started has exited as well; or until
/// `parent` is no longer our parent.
pub async fn supervise(parent: u32, grace: Duration, until: Until, command: &[String]) -> ExitCode {
    // The group's signals reach the command directly; the supervisor stays to report its
    // status. Registering the handlers replaces the default action (terminate) for good.
    let mut handlers = Vec::with_capacity(FORWARDED.len());
    for sig in FORWARDED {
        match signal(SignalKind::from_raw(sig as i32)) {
            Ok(h) => handlers.push((sig, h)),
            Err(e) => {
                eprintln!("dlock: cannot install signal handlers: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        }
    }
    let Ok(mut handlers) = <[_; 5]>::try_from(handlers) else {
        return ExitCode::from(EXIT_CONFIG);
    };
    let Some((program, args)) = command.split_first() else {
        return ExitCode::from(EXIT_CONFIG);
    };
    let follow = until == Until::AllExited && reaper::adopt_descendants();
    let mut child = match Command::new(program).args(args).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dlock: cannot run {program:?}: {e}");
            // The shell's conventions: 127 not found, 126 found but not runnable.
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            return ExitCode::from(code);
        }
    };
    let mut tick = tokio::time::interval(PARENT_POLL);
    let mut status: Option<ExitCode> = None;
    loop {
        tokio::select! {
            s = child.wait(), if status.is_none() => {
                let code = match s {
                    Ok(s) => exit_of(s),
                    Err(e) => {
                        eprintln!("dlock: waiting for {program:?} failed: {e}");
                        ExitCode::from(1)
                    }
                };
                if !follow || reaper::reap_exited() {
                    return code;
                }
                status = Some(code);
            }
            sig = next_signal(&mut handlers) => reaper::forward_outside_group(sig),
            _ = tick.tick() => {
                if let Some(code) = status && reaper::reap_exited() {
                    return code;
                }
                if u32::try_from(getppid().as_raw()).ok() == Some(parent) {
                    continue;
                }
                eprintln!("dlock: the dlock process that held the lock died; stopping {program:?}");
                return orphaned(grace, &mut child, follow).await;
            }
        }
    }
}

/// `dlock` died: stop the command's group (and the processes that left it), SIGKILL after
/// `grace`, before the lease lets another holder in.
async fn orphaned(grace: Duration, child: &mut tokio::process::Child, follow: bool) -> ExitCode {
    let group = getpgrp();
    let _ = killpg(group, Signal::SIGTERM);
    reaper::forward_outside_group(Signal::SIGTERM);
    let all_gone = async {
        let _ = child.wait().await;
        let mut tick = tokio::time::interval(PARENT_POLL);
        while follow && !reaper::reap_exited() {
            tick.tick().await;
        }
    };
    if tokio::time::timeout(grace, all_gone).await.is_err() {
        reaper::forward_outside_group(Signal::SIGKILL);
        let _ = killpg(group, Signal::SIGKILL); // this process included
    }
    ExitCode::from(EXIT_LOST)
}

/// The first of the supervisor's handled signals to arrive.
async fn next_signal(handlers: &mut [(Signal, tokio::signal::unix::Signal); 5]) -> Signal {
    let [(a, ha), (b, hb), (c, hc), (d, hd), (e, he)] = handlers;
    tokio::select! {
        _ = ha.recv() => *a,
        _ = hb.recv() => *b,
        _ = hc.recv() => *c,
        _ = hd.recv() => *d,
        _ = he.recv() => *e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_lost_parses() {
        assert_eq!(parse_on_lost("none"), Ok(OnLostArg::Nothing));
        assert_eq!(parse_on_lost("TERM"), Ok(OnLostArg::Stop(Signal::SIGTERM, None)));
        assert_eq!(
            parse_on_lost("sigint:250ms"),
            Ok(OnLostArg::Stop(Signal::SIGINT, Some(Duration::from_millis(250))))
        );
        assert_eq!(parse_on_lost("KILL:0s"), Ok(OnLostArg::Stop(Signal::SIGKILL, Some(Duration::ZERO))));
        // The default grace follows the lease; a given one is kept (and checked against it).
        let term = OnLostArg::Stop(Signal::SIGTERM, None);
        assert_eq!(
            term.for_lease(Duration::from_secs(30)),
            OnLost::Stop(Signal::SIGTERM, Duration::from_secs(5))
        );
        assert_eq!(
            term.for_lease(Duration::from_secs(3)),
            OnLost::Stop(Signal::SIGTERM, Duration::from_secs(1))
        );
        let given = OnLostArg::Stop(Signal::SIGTERM, Some(Duration::from_secs(5)));
        assert_eq!(
            given.for_lease(Duration::from_secs(1)),
            OnLost::Stop(Signal::SIGTERM, Duration::from_secs(5))
        );
        assert!(parse_on_lost("TERM:5").is_err(), "a grace has a unit");
        assert!(parse_on_lost("STOP").is_err());
        assert!(parse_on_lost("TERM:soon").is_err());
        assert!(parse_on_lost("").is_err());
    }
}
