//! Leader election on the mutex: a candidate leads while it holds the lock `name`.
//!
//! Built once here on [`Locker`], so it runs on every backend: the campaign is an unbounded
//! acquisition of the mutex (woken by the backend's notifications), a term is one hold, the
//! term's fencing token is the hold's, and leadership ends with the hold's lost signal. The
//! leader's identity is published as a note on its hold ([`LockBackend::notes`](crate::backend::LockBackend::notes)),
//! so observers can read who leads without campaigning.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::backend::Mutex;
use crate::{FencingToken, LockError, LockGuard, Locker, Result, validate_key, validate_note};

use campaign::campaign;
pub use candidate::Candidate;
use candidate::Shared;

mod campaign;
mod candidate;
#[cfg(all(test, feature = "memory"))]
mod tests;

/// What a candidate is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leadership {
    /// Not leading: campaigning, resigned, or between terms.
    Follower,
    /// Leading for one term.
    Leader {
        /// The term's fencing token: strictly greater than every earlier term's of this
        /// election. Hand it to the resources the leader writes to, so they can reject a deposed
        /// leader's writes. `None` on backends without fencing
        /// ([`Capability::fencing`](crate::Capability)).
        term: Option<FencingToken>,
    },
}

impl Leadership {
    /// Whether this is [`Leadership::Leader`].
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader { .. })
    }
}

/// An election: the mutex `name` on a [`Locker`]'s backend, entered as `identity`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lock_core::LockError> {
/// use std::{sync::Arc, time::Duration};
/// use lock_core::{LeaderElection, Locker, MemoryBackend};
///
/// let locker = Locker::new(Arc::new(MemoryBackend::new()));
/// let election = LeaderElection::new(&locker, "jobs/scheduler", "host-a:4711")?.lease(Duration::from_secs(5))?;
/// let candidate = election.campaign()?;
/// let term = candidate.until_leader().await;
/// // Lead: pass `term` to every write; stop when candidate.lost_token() is cancelled.
/// assert!(candidate.is_leader() && term.is_some());
/// assert_eq!(election.leader().await?.as_deref(), Some("host-a:4711"));
/// candidate.resign().await?;
/// assert!(!candidate.is_leader());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderElection {
    locker: Locker,
    name: Arc<str>,
    identity: Arc<str>,
}

impl fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElection")
            .field("backend", &self.locker.backend().name())
            .field("name", &self.name)
            .field("identity", &self.identity)
            .finish()
    }
}

impl LeaderElection {
    /// The election `name` (a lock key) on `locker`'s backend, entered as `identity` (what
    /// observers read from [`leader`](Self::leader): public, never a secret). Terms use the
    /// locker's watchdog lease, renewed every third of it (see [`lease`](Self::lease)).
    ///
    /// # Errors
    /// [`LockError::InvalidKey`] for a bad name; [`LockError::InvalidConfig`] for an identity
    /// longer than [`MAX_NOTE_BYTES`](crate::backend::MAX_NOTE_BYTES) or with control
    /// characters.
    pub fn new(locker: &Locker, name: impl Into<String>, identity: impl Into<String>) -> Result<Self> {
        let (name, identity) = (name.into(), identity.into());
        validate_key(&name)?;
        validate_note(&identity)?;
        Ok(LeaderElection { locker: locker.clone(), name: name.into(), identity: identity.into() })
    }

    /// The lease of each term, renewed by the watchdog: a leader that can no longer renew (a
    /// crash, a partition) is succeeded about one lease later, and is told it lost leadership
    /// before that.
    ///
    /// # Errors
    /// [`LockError::InvalidLease`] outside the accepted range.
    pub fn lease(mut self, lease: Duration) -> Result<Self> {
        self.locker = self.locker.with_watchdog_lease(lease)?;
        Ok(self)
    }

    /// The election's name (the mutex key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The identity this election's candidates publish.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Start campaigning in a background task on the current Tokio runtime. The task runs
    /// until [`Candidate::resign`] (then idles until [`Candidate::rejoin`]) or until the
    /// candidate is dropped, which ends the term and releases the lock in the background.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] outside a Tokio runtime.
    pub fn campaign(&self) -> Result<Candidate> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| LockError::InvalidConfig {
            reason: "a leader election campaigns on a tokio runtime; none is running".into(),
        })?;
        let (commands, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            state: watch::Sender::new(Leadership::Follower),
            term: Mutex::new(None),
            last_error: Mutex::new(None),
        });
        runtime.spawn(campaign(self.clone(), rx, shared.clone()));
        Ok(Candidate { election: self.clone(), commands, shared })
    }

    /// The identity the current leader published: `None` when nobody leads (or the leader's
    /// note is not written yet, just after its grant).
    ///
    /// # Errors
    /// [`LockError::Unsupported`] on backends without notes
    /// ([`LockBackend::notes`](crate::backend::LockBackend::notes)); backend errors.
    pub async fn leader(&self) -> Result<Option<String>> {
        let backend = self.locker.backend();
        backend.note(&self.name).await
    }

    /// One grant of the mutex with the identity published on it; `None` when the hold was
    /// gone before the note could be attached (campaign again at once).
    async fn win(&self) -> Result<Option<LockGuard>> {
        let guard = self.locker.lock(self.name.to_string()).acquire().await?;
        let backend = self.locker.backend();
        if backend.notes().is_none() {
            return Ok(Some(guard));
        }
        match backend.set_note(&self.name, guard.owner(), &self.identity).await {
            Ok(true) => Ok(Some(guard)),
            Ok(false) => {
                drop(guard);
                Ok(None)
            }
            Err(e) => {
                // A leader whose identity observers cannot read is not announced: give the
                // term back and campaign again after a pause.
                if let Err(release) = guard.release().await {
                    tracing::debug!(name = %self.name, error = %release, "release after a failed note");
                }
                Err(e)
            }
        }
    }
}
