//! A candidate: the handle to one campaign, and what it shares with the campaign task.

use std::fmt;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{LeaderElection, Leadership};
use crate::backend::Mutex;
use crate::{FencingToken, LockError, Result};

/// What the campaign task and its [`Candidate`] share.
pub(super) struct Shared {
    pub(super) state: watch::Sender<Leadership>,
    /// The current term and its token, set before the state says `Leader` and cancelled before
    /// it says `Follower`.
    pub(super) term: Mutex<Option<(Option<FencingToken>, CancellationToken)>>,
    pub(super) last_error: Mutex<Option<Arc<LockError>>>,
}

/// What a candidate tells its campaign task.
pub(super) enum Command {
    Resign(oneshot::Sender<Result<()>>),
    Rejoin,
}

/// A campaigning (or resigned) member of a [`LeaderElection`]. Dropping it ends its term and
/// stops the campaign; the lock is released in the background.
pub struct Candidate {
    pub(super) election: LeaderElection,
    pub(super) commands: mpsc::UnboundedSender<Command>,
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Candidate")
            .field("election", &self.election)
            .field("leadership", &*self.shared.state.borrow())
            .finish()
    }
}

impl Candidate {
    /// The election this candidate campaigns in.
    pub fn election(&self) -> &LeaderElection {
        &self.election
    }

    /// Whether this candidate leads now. Turns `false` the moment the term's lock is known
    /// lost (with [`lost_token`](Self::lost_token)), before the lock can pass to another
    /// candidate.
    pub fn is_leader(&self) -> bool {
        self.shared.term.lock().as_ref().is_some_and(|(_, lost)| !lost.is_cancelled())
    }

    /// The current term's fencing token while leading; `None` while not leading (or on a
    /// backend without fencing).
    pub fn term(&self) -> Option<FencingToken> {
        self.shared.term.lock().as_ref().filter(|(_, lost)| !lost.is_cancelled()).and_then(|(t, _)| *t)
    }

    /// A token cancelled when the current term ends (lost or resigned); `None` while not
    /// leading. Select on it around the leader's work: it fires with the lock's lost signal,
    /// before another candidate can lead.
    pub fn lost_token(&self) -> Option<CancellationToken> {
        self.shared
            .term
            .lock()
            .as_ref()
            .filter(|(_, lost)| !lost.is_cancelled())
            .map(|(_, lost)| lost.clone())
    }

    /// Every change of leadership (a watch: a slow reader sees the latest state, and may miss a
    /// short term in between; count terms by their fencing tokens).
    pub fn changes(&self) -> watch::Receiver<Leadership> {
        self.shared.state.subscribe()
    }

    /// Wait until this candidate leads; returns the term's fencing token. Waits for ever after
    /// [`resign`](Self::resign) (until [`rejoin`](Self::rejoin)).
    pub async fn until_leader(&self) -> Option<FencingToken> {
        let mut changes = self.changes();
        loop {
            if let Leadership::Leader { term } = *changes.borrow_and_update()
                && self.is_leader()
            {
                return term;
            }
            if changes.changed().await.is_err() {
                // The task is gone (its runtime shut down): nothing will ever change.
                return std::future::pending().await;
            }
        }
    }

    /// The last error the campaign met since it last became leader (it backs off and keeps
    /// trying; the acquisition itself retries temporary errors), such as a backend refusing
    /// the credentials.
    pub fn last_error(&self) -> Option<Arc<LockError>> {
        self.shared.last_error.lock().clone()
    }

    /// End the term if leading (the lock is released) and stop campaigning.
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] when the term's lock had already been lost; backend errors
    /// from the release (the lease then frees the lock). Campaigning stops either way.
    pub async fn resign(&self) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        if self.commands.send(Command::Resign(tx)).is_err() {
            return Ok(()); // the task is gone: nothing held
        }
        rx.await.unwrap_or(Ok(()))
    }

    /// Campaign again after [`resign`](Self::resign); does nothing while campaigning.
    pub fn rejoin(&self) {
        let _ = self.commands.send(Command::Rejoin);
    }
}
