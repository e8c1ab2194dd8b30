//! The campaign task: acquire, lead until the hold is lost or given up, back off on errors.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::candidate::{Command, Shared};
use super::{LeaderElection, Leadership};
use crate::Result;
use crate::backend::Backoff;

/// First pause after a campaign step failed with an error the acquisition does not retry itself.
const ERROR_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest pause between failed campaign steps.
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How a term ended.
enum TermEnd {
    Lost,
    Resigned(oneshot::Sender<Result<()>>),
    Dropped,
}

/// The campaign task: follower (acquiring), leader (holding until lost or told), idle after a
/// resignation; ends when the candidate is dropped.
pub(super) async fn campaign(
    election: LeaderElection,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shared: Arc<Shared>,
) {
    let mut campaigning = true;
    let mut backoff = Backoff::new(ERROR_BACKOFF_MIN, ERROR_BACKOFF_MAX);
    loop {
        if !campaigning {
            match commands.recv().await {
                None => return,
                Some(Command::Rejoin) => campaigning = true,
                Some(Command::Resign(reply)) => drop(reply.send(Ok(()))),
            }
            continue;
        }
        // Follower: one unbounded acquisition, kept across commands that do not end it (a
        // fair backend's place in the queue survives).
        let won = {
            let win = election.win();
            tokio::pin!(win);
            loop {
                tokio::select! {
                    won = &mut win => break Ok(won),
                    cmd = commands.recv() => match cmd {
                        None => return, // the acquisition is cancellation-safe
                        Some(Command::Resign(reply)) => {
                            campaigning = false;
                            break Err(reply);
                        }
                        Some(Command::Rejoin) => {}
                    },
                }
            }
        };
        // The resignation is confirmed only once the acquisition is dropped (above): its
        // clean-up, leaving the queue, has started, so a caller that settles the clean-ups
        // (`settle_cleanups`) before it exits waits for it.
        let won = match won {
            Ok(won) => Some(won),
            Err(reply) => {
                drop(reply.send(Ok(())));
                None
            }
        };
        let guard = match won {
            None | Some(Ok(None)) => continue,
            Some(Ok(Some(guard))) => guard,
            Some(Err(e)) => {
                tracing::debug!(name = %election.name, error = %e, "campaign step failed; backing off");
                *shared.last_error.lock() = Some(Arc::new(e));
                let pause = tokio::time::sleep(backoff.next_delay());
                tokio::pin!(pause);
                loop {
                    tokio::select! {
                        () = &mut pause => break,
                        cmd = commands.recv() => match cmd {
                            None => return,
                            Some(Command::Resign(reply)) => {
                                campaigning = false;
                                drop(reply.send(Ok(())));
                                break;
                            }
                            Some(Command::Rejoin) => {}
                        },
                    }
                }
                continue;
            }
        };
        backoff = Backoff::new(ERROR_BACKOFF_MIN, ERROR_BACKOFF_MAX);
        *shared.last_error.lock() = None;

        // Leader: the term's token is the lock's lost signal's child, so it is cancelled in the
        // same instant as the lock is known lost, before the task even wakes.
        let term = guard.fence();
        let lost = guard.lost_token().child_token();
        *shared.term.lock() = Some((term, lost.clone()));
        shared.state.send_replace(Leadership::Leader { term });
        tracing::debug!(name = %election.name, ?term, "became leader");
        let end = loop {
            tokio::select! {
                () = lost.cancelled() => break TermEnd::Lost,
                cmd = commands.recv() => match cmd {
                    Some(Command::Rejoin) => {}
                    Some(Command::Resign(reply)) => break TermEnd::Resigned(reply),
                    None => break TermEnd::Dropped,
                },
            }
        };
        // Follower before anything else (a release is a round trip).
        lost.cancel();
        *shared.term.lock() = None;
        shared.state.send_replace(Leadership::Follower);
        match end {
            TermEnd::Lost => {
                tracing::debug!(name = %election.name, ?term, "leadership lost; campaigning again");
                drop(guard); // lost: nothing to release
            }
            TermEnd::Resigned(reply) => {
                campaigning = false;
                tracing::debug!(name = %election.name, ?term, "resigned");
                drop(reply.send(guard.release().await));
            }
            TermEnd::Dropped => {
                if let Err(e) = guard.release().await {
                    tracing::debug!(name = %election.name, error = %e, "release by a dropped candidate failed");
                }
                return;
            }
        }
    }
}
