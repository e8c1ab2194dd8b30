//! All-or-nothing acquisition of several keys, possibly on different backends.

use std::time::Duration;

use tokio::time::Instant;

use crate::parts::{release_quietly, until_live};
use crate::{LockError, LockGuard, Locker, Result, validate_wait};

/// Several locks taken together in a canonical order (by key, then the backend's
/// [`identity`](crate::LockBackend::identity)), the same in every process, so two `MultiLock`s
/// over overlapping keys cannot deadlock, not even across processes. On any failure the locks already taken
/// are released before the error is returned.
#[derive(Debug, Default)]
pub struct MultiLock {
    parts: Vec<(Locker, String)>,
}

/// The guards of a [`MultiLock`].
#[derive(Debug)]
#[must_use = "dropping the guard releases the locks in the background"]
pub struct MultiGuard {
    guards: Vec<LockGuard>,
}

impl MultiLock {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `key` on `locker`.
    pub fn with(mut self, locker: &Locker, key: impl Into<String>) -> Self {
        self.parts.push((locker.clone(), key.into()));
        self
    }

    /// Acquire every lock within `wait` in total; `lease` as in
    /// [`LockRequest::lease`](crate::LockRequest::lease) (`None`: watchdog).
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for an empty set or a key listed twice in one lock space;
    /// [`LockError::InvalidWait`] for a wait over [`MAX_WAIT`](crate::MAX_WAIT); otherwise the
    /// first error met, after releasing what was taken.
    pub async fn acquire(self, wait: Duration, lease: Option<Duration>) -> Result<MultiGuard> {
        if self.parts.is_empty() {
            return Err(LockError::InvalidConfig { reason: "multi-lock over no keys".into() });
        }
        validate_wait(wait)?;
        // Never by address: two processes must compute the same order.
        let mut parts: Vec<(String, &Locker, &String)> =
            self.parts.iter().map(|(l, k)| (l.backend().identity(), l, k)).collect();
        parts.sort_by(|(ia, _, ka), (ib, _, kb)| (ka, ia).cmp(&(kb, ib)));
        if parts.windows(2).any(|w| w[0].2 == w[1].2 && w[0].0 == w[1].0) {
            return Err(LockError::InvalidConfig {
                reason: "multi-lock lists a key twice in one lock space".into(),
            });
        }
        let started = Instant::now();
        let deadline = started + wait;
        // A lock taken early can be lost while a later one is awaited: everything goes back and
        // the set is taken again from its first key, since taking one key again while holding
        // later ones would break the order that keeps multi-locks from deadlocking.
        let held = until_live(
            false,
            || async { in_order(&parts, deadline, lease).await.map(Some) },
            |guards: &Vec<LockGuard>| guards.iter().any(LockGuard::is_lost),
            release_partial,
        )
        .await;
        match held {
            Ok(Some(guards)) => Ok(MultiGuard { guards }),
            Ok(None) => unreachable!("a multi-lock that waits hands out its locks or an error"),
            Err(LockError::Timeout { key, .. }) => Err(LockError::Timeout { key, waited: started.elapsed() }),
            Err(e) => Err(e),
        }
    }
}

/// Each lock of `parts` in turn, waiting until `deadline`; on a failure those taken are
/// released and the error returned.
async fn in_order(
    parts: &[(String, &Locker, &String)],
    deadline: Instant,
    lease: Option<Duration>,
) -> Result<Vec<LockGuard>> {
    let mut guards = Vec::with_capacity(parts.len());
    for (_, locker, key) in parts {
        let mut req = locker.lock((*key).clone()).wait(deadline.saturating_duration_since(Instant::now()));
        if let Some(l) = lease {
            req = req.lease(l);
        }
        match req.acquire().await {
            Ok(g) => guards.push(g),
            Err(e) => {
                release_partial(guards).await;
                return Err(e);
            }
        }
    }
    Ok(guards)
}

/// Release the locks of an unfinished multi-lock, the last taken first (a lost one answers that
/// it was lost, which is no failure here).
async fn release_partial(guards: Vec<LockGuard>) {
    for g in guards.into_iter().rev() {
        release_quietly("a partial multi-lock", g.release()).await;
    }
}

impl MultiGuard {
    /// The individual guards, in acquisition order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether any of the leases is known lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Release every lock, all at once: a stalled store costs one release's bound, not one per
    /// lock.
    ///
    /// # Errors
    /// The first release error; every release is still attempted.
    pub async fn release(self) -> Result<()> {
        crate::parts::release_all(self.guards.into_iter().map(LockGuard::release)).await
    }
}
