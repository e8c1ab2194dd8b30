//! Leader election on the mutex: a candidate leads while it holds the lock `name`.
//!
//! Built once here on [`Locker`], so it runs on every backend: the campaign is an unbounded
//! acquisition of the mutex (woken by the backend's notifications), a term is one hold, the
//! term's fencing token is the hold's, and leadership ends with the hold's lost signal. The
//! leader's identity is published as a note on its hold ([`Capability::notes`](crate::Capability)),
//! so observers can read who leads without campaigning.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::backend::{Backoff, Mutex, unsupported};
use crate::{FencingToken, LockError, LockGuard, Locker, Result, validate_key, validate_note};

/// First pause after a campaign step failed with an error the acquisition does not retry itself.
const ERROR_BACKOFF_MIN: Duration = Duration::from_millis(50);
/// Longest pause between failed campaign steps.
const ERROR_BACKOFF_MAX: Duration = Duration::from_secs(5);

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
    /// ([`Capability::notes`](crate::Capability)); backend errors.
    pub async fn leader(&self) -> Result<Option<String>> {
        let backend = self.locker.backend();
        if !backend.capabilities().notes {
            return Err(unsupported(backend.name(), "notes on a hold"));
        }
        backend.note(&self.name).await
    }

    /// One grant of the mutex with the identity published on it; `None` when the hold was
    /// gone before the note could be attached (campaign again at once).
    async fn win(&self) -> Result<Option<LockGuard>> {
        let guard = self.locker.lock(self.name.to_string()).acquire().await?;
        let backend = self.locker.backend();
        if !backend.capabilities().notes {
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

/// What the campaign task and its [`Candidate`] share.
struct Shared {
    state: watch::Sender<Leadership>,
    /// The current term and its token, set before the state says `Leader` and cancelled before
    /// it says `Follower`.
    term: Mutex<Option<(Option<FencingToken>, CancellationToken)>>,
    last_error: Mutex<Option<Arc<LockError>>>,
}

enum Command {
    Resign(oneshot::Sender<Result<()>>),
    Rejoin,
}

/// A campaigning (or resigned) member of a [`LeaderElection`]. Dropping it ends its term and
/// stops the campaign; the lock is released in the background.
pub struct Candidate {
    election: LeaderElection,
    commands: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
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

/// How a term ended.
enum TermEnd {
    Lost,
    Resigned(oneshot::Sender<Result<()>>),
    Dropped,
}

/// The campaign task: follower (acquiring), leader (holding until lost or told), idle after a
/// resignation; ends when the candidate is dropped.
async fn campaign(
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
                    won = &mut win => break Some(won),
                    cmd = commands.recv() => match cmd {
                        None => return, // the acquisition is cancellation-safe
                        Some(Command::Resign(reply)) => {
                            campaigning = false;
                            drop(reply.send(Ok(())));
                            break None;
                        }
                        Some(Command::Rejoin) => {}
                    },
                }
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

#[cfg(all(test, feature = "memory"))]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    fn locker() -> Locker {
        Locker::new(Arc::new(MemoryBackend::new()))
    }

    #[test]
    fn public_types_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<LeaderElection>();
        check::<Candidate>();
        check::<Leadership>();
    }

    #[test]
    fn bad_input_is_typed() {
        let l = locker();
        assert!(matches!(LeaderElection::new(&l, "", "a"), Err(LockError::InvalidKey { .. })));
        assert!(matches!(LeaderElection::new(&l, "e", "a\nb"), Err(LockError::InvalidConfig { .. })));
        let long = "x".repeat(crate::backend::MAX_NOTE_BYTES + 1);
        assert!(matches!(LeaderElection::new(&l, "e", long), Err(LockError::InvalidConfig { .. })));
        let e = LeaderElection::new(&l, "e", "a").expect("valid");
        assert!(matches!(e.clone().lease(Duration::ZERO), Err(LockError::InvalidLease { .. })));
        assert!(matches!(e.campaign(), Err(LockError::InvalidConfig { .. })), "no runtime");
    }

    /// A memory backend whose acquisitions fail with a permanent error while `refuse` is set.
    #[derive(Debug)]
    struct Refusing {
        inner: MemoryBackend,
        refuse: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl crate::LockBackend for Refusing {
        fn name(&self) -> &'static str {
            "refusing"
        }
        fn capabilities(&self) -> crate::Capability {
            self.inner.capabilities()
        }
        fn identity(&self) -> String {
            self.inner.identity()
        }
        async fn try_acquire(
            &self,
            req: &crate::backend::AcquireRequest<'_>,
        ) -> Result<crate::backend::Attempt> {
            if self.refuse.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(LockError::permission_denied("refusing", "no grants today"));
            }
            self.inner.try_acquire(req).await
        }
        async fn release(&self, key: &str, owner: crate::OwnerToken) -> Result<bool> {
            self.inner.release(key, owner).await
        }
        async fn renew(&self, items: &[crate::backend::RenewItem<'_>]) -> Result<Vec<bool>> {
            self.inner.renew(items).await
        }
        async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
            self.inner.inspect(key).await
        }
        async fn leave_queue(&self, key: &str, owner: crate::OwnerToken) -> Result<()> {
            self.inner.leave_queue(key, owner).await
        }
        async fn subscribe(&self, key: &str) -> Result<Option<crate::backend::Subscription>> {
            self.inner.subscribe(key).await
        }
        async fn set_note(&self, key: &str, owner: crate::OwnerToken, note: &str) -> Result<bool> {
            self.inner.set_note(key, owner, note).await
        }
        async fn note(&self, key: &str) -> Result<Option<String>> {
            self.inner.note(key).await
        }
        async fn raise_fence(
            &self,
            key: &str,
            owner: crate::OwnerToken,
            floor: crate::FencingToken,
        ) -> Result<bool> {
            self.inner.raise_fence(key, owner, floor).await
        }
    }

    #[tokio::test]
    async fn campaign_errors_are_kept_and_retried() {
        let backend = Arc::new(Refusing { inner: MemoryBackend::new(), refuse: true.into() });
        let l = Locker::new(backend.clone());
        let c = LeaderElection::new(&l, "e", "a").expect("a").campaign().expect("a");
        let mut changes = c.changes();
        while c.last_error().is_none() {
            tokio::task::yield_now().await;
        }
        let e = c.last_error().expect("kept");
        assert!(matches!(*e, LockError::PermissionDenied { .. }), "{e:?}");
        assert!(!c.is_leader() && *changes.borrow_and_update() == Leadership::Follower);
        backend.refuse.store(false, std::sync::atomic::Ordering::SeqCst);
        c.until_leader().await;
        assert!(c.last_error().is_none(), "cleared by a term");
    }

    #[tokio::test]
    async fn dropping_the_leader_hands_over() {
        let l = locker();
        let a = LeaderElection::new(&l, "e", "a").expect("a").campaign().expect("a");
        let ta = a.until_leader().await.expect("fenced");
        let b = LeaderElection::new(&l, "e", "b").expect("b").campaign().expect("b");
        drop(a);
        let tb = b.until_leader().await.expect("fenced");
        assert!(tb > ta);
        assert_eq!(b.election().leader().await.expect("note").as_deref(), Some("b"));
        b.resign().await.expect("resign");
        assert_eq!(b.election().leader().await.expect("note"), None);
        b.rejoin();
        assert!(b.until_leader().await.expect("fenced") > tb);
    }
}
