//! `dlock leader`: campaign for leadership of a name and run a command only while leading.

use std::process::ExitCode;
use std::time::Duration;

use dlock::{LeaderElection, LockError};

use crate::EXIT_LOST;
use crate::run::{fail, locker, prepare, run_held, unreachable};
use crate::signals::{any_signal, exit_signal};
use crate::supervise::{OnLost, Supervision, Until};

/// How long `dlock leader` waits for the connection to the backend.
const CONNECT: Duration = Duration::from_secs(30);
/// How often a follower looks at the campaign's last error (a refused credential ends dlock;
/// temporary errors are retried by the campaign).
const ERROR_CHECK: Duration = Duration::from_millis(200);

/// What `dlock leader` was asked to do.
#[derive(Debug)]
pub struct LeaderArgs<'a> {
    /// Backend URL.
    pub url: &'a str,
    /// The election's name (a lock key).
    pub key: &'a str,
    /// What observers read as the leader (default host:pid).
    pub identity: Option<String>,
    /// The lease of each term.
    pub lease: Duration,
    /// What to do to the command when leadership is lost.
    pub on_lost: OnLost,
    /// Whether a term lasts until the command's background processes have exited too.
    pub until: Until,
    /// Exit after the first term instead of campaigning again.
    pub once: bool,
    /// The command and its arguments.
    pub command: &'a [String],
}

/// Campaign for `key`; run the command each time this process leads, stop it when leadership is
/// lost, and campaign again (unless `--once`). Ends with the command's status when the command
/// ends by itself (leadership is then given up), 76 when leadership was lost with `--once`.
pub async fn leader(a: LeaderArgs<'_>) -> ExitCode {
    if let Err(e) = dlock::validate_key(a.key).and_then(|()| dlock::validate_lease(a.lease)) {
        return fail(a.url, &e);
    }
    let mut sigs = match prepare(a.url, a.lease, a.on_lost) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let identity = a.identity.unwrap_or_else(|| crate::holder::identity(None, None));
    let store = crate::connect::with_lease(a.url, a.lease);
    let connected = tokio::select! {
        l = tokio::time::timeout(CONNECT, locker(&store, a.lease)) => l.map_err(|_| unreachable(CONNECT)).and_then(|l| l),
        sig = any_signal(&mut sigs) => return exit_signal(sig),
    };
    let candidate = match connected
        .and_then(|locker| LeaderElection::new(&locker, a.key, identity))
        .and_then(|election| election.campaign())
    {
        Ok(c) => c,
        Err(e) => return fail(a.url, &e),
    };
    let mut check = tokio::time::interval(ERROR_CHECK);
    loop {
        let term = tokio::select! {
            term = candidate.until_leader() => term,
            sig = any_signal(&mut sigs) => {
                let _ = candidate.resign().await;
                return exit_signal(sig);
            }
            _ = check.tick() => {
                match candidate.last_error() {
                    Some(e) if !e.is_temporary() => {
                        let _ = candidate.resign().await;
                        return fail(a.url, &e);
                    }
                    _ => continue,
                }
            }
        };
        // The term may already be over (lost between the two calls): campaign on.
        let Some(lost) = candidate.lost_token() else { continue };
        match term {
            Some(t) => eprintln!("dlock: leading {:?} (term {t})", a.key),
            None => eprintln!("dlock: leading {:?}", a.key),
        }
        let ran = match run_held(
            a.key,
            Supervision { on_lost: a.on_lost, until: a.until },
            a.command,
            term,
            &[],
            lost.cancelled_owned(),
            &mut sigs,
        )
        .await
        {
            Ok(ran) => ran,
            Err(code) => {
                let _ = candidate.resign().await;
                return code;
            }
        };
        if ran.lost {
            eprintln!("dlock: leadership of {:?} lost while {:?} ran", a.key, ran.program);
        }
        // Told to stop while the term ran: a loss at the same moment must not start another
        // term (the signal was spent on the command, and the campaign would run it again).
        if ran.signalled {
            let _ = candidate.resign().await;
            return ran.exit();
        }
        if ran.lost {
            if a.once {
                let _ = candidate.resign().await;
                return ExitCode::from(EXIT_LOST);
            }
            continue;
        }
        // The command ended by itself: give up leadership.
        return match candidate.resign().await {
            Err(LockError::LeaseLost { .. }) => {
                eprintln!("dlock: leadership of {:?} was lost while {:?} ran", a.key, ran.program);
                ExitCode::from(EXIT_LOST)
            }
            Err(e) => {
                // The release failed: the lease frees the name; the command's status stands.
                eprintln!("dlock: giving up leadership of {:?} failed: {e}", a.key);
                ran.exit()
            }
            Ok(()) => ran.exit(),
        };
    }
}
