//! `dlock run`, `dlock status` and the hidden `dlock hold`.

use std::process::ExitCode;
use std::time::Duration;

use dlock::{AcquireRequest, Attempt, LeaseSignal, LockError, Locker, OwnerToken, redact_url};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::Command;

use crate::{EXIT_CONFIG, EXIT_LOST, EXIT_TIMEOUT, EXIT_UNAVAILABLE};

fn fail(url: &str, e: &LockError) -> ExitCode {
    let code = match e {
        LockError::Timeout { .. } => EXIT_TIMEOUT,
        LockError::Backend { .. } => EXIT_UNAVAILABLE,
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

async fn locker(url: &str, lease: Duration) -> Result<Locker, LockError> {
    Locker::new(dlock::from_url(url).await?).with_watchdog_lease(lease)
}

/// Hold `key` while `command` runs; see the `run` subcommand's help.
pub async fn run(
    url: &str,
    key: &str,
    wait: Duration,
    lease: Duration,
    grace: Duration,
    command: &[String],
) -> ExitCode {
    let locker = match locker(url, lease).await {
        Ok(l) => l,
        Err(e) => return fail(url, &e),
    };
    let guard = match locker.lock(key).wait(wait).acquire().await {
        Ok(g) => g,
        Err(e) => return fail(url, &e),
    };
    let Some((program, args)) = command.split_first() else {
        eprintln!("dlock: no command given");
        return ExitCode::from(EXIT_CONFIG);
    };
    let mut cmd = Command::new(program);
    cmd.args(args).kill_on_drop(true);
    // Only a real fencing token is exported: a number from a backend without fencing would
    // look like one and protect nothing.
    match guard.fence() {
        Some(f) => cmd.env("DLOCK_FENCING_TOKEN", f.to_string()),
        None => cmd.env_remove("DLOCK_FENCING_TOKEN"),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dlock: cannot run {program:?}: {e}");
            let _ = guard.release().await;
            return ExitCode::from(127);
        }
    };
    let status = tokio::select! {
        status = child.wait() => status,
        _ = guard.lost() => {
            eprintln!("dlock: lock {key:?} lost; terminating {program:?}");
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
            if tokio::time::timeout(grace, child.wait()).await.is_err() {
                let _ = child.kill().await;
            }
            let _ = guard.release().await;
            return ExitCode::from(EXIT_LOST);
        }
    };
    let released = guard.release().await;
    match (status, released) {
        (_, Err(LockError::LeaseLost { .. })) => {
            eprintln!("dlock: lock {key:?} was lost while {program:?} ran");
            ExitCode::from(EXIT_LOST)
        }
        (Ok(s), _) => match s.code() {
            Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
            // Killed by a signal: the shell convention 128 + signal.
            None => {
                ExitCode::from(128 + std::os::unix::process::ExitStatusExt::signal(&s).unwrap_or(0) as u8)
            }
        },
        (Err(e), _) => {
            eprintln!("dlock: waiting for {program:?} failed: {e}");
            ExitCode::from(1)
        }
    }
}

/// Print whether `key` is held, probing with one attempt that is released at once.
pub async fn status(url: &str, key: &str) -> ExitCode {
    let backend = match dlock::from_url(url).await {
        Ok(b) => b,
        Err(e) => return fail(url, &e),
    };
    if let Err(e) = dlock::validate_key(key) {
        return fail(url, &e);
    }
    let owner = OwnerToken::random();
    let signal = LeaseSignal::new();
    let req = AcquireRequest { key, owner, lease: Duration::from_secs(5), wait_until: None, signal: &signal };
    match backend.try_acquire(&req).await {
        Ok(Attempt::Acquired(_)) => {
            let _ = backend.release(key, owner).await;
            println!("{key}: free ({})", backend.name());
            ExitCode::SUCCESS
        }
        Ok(Attempt::Held { retry_after }) => {
            match retry_after {
                Some(d) => println!("{key}: held ({}), remaining lease {d:?}", backend.name()),
                None => println!("{key}: held ({}), lease bound to the holder's session", backend.name()),
            }
            ExitCode::from(1)
        }
        Ok(_) => ExitCode::from(1),
        Err(e) => fail(url, &e),
    }
}

/// Acquire `key`, print `held <fence>`, and wait to be killed (the crash-recovery victim).
pub async fn hold(url: &str, key: &str, lease: Duration) -> ExitCode {
    let locker = match locker(url, lease).await {
        Ok(l) => l,
        Err(e) => return fail(url, &e),
    };
    match locker.lock(key).wait(Duration::from_secs(30)).acquire().await {
        Ok(g) => {
            match g.fence() {
                Some(f) => println!("held {f}"),
                None => println!("held"),
            }
            std::future::pending::<()>().await;
            drop(g);
            ExitCode::SUCCESS
        }
        Err(e) => fail(url, &e),
    }
}
