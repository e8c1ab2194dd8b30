//! One acquisition: the request being built, and the attempts that take the lock or wait.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::Locker;
use super::attempts::Acquisition;
use crate::backend::Side;
use crate::observe::{self, Outcome};
use crate::{
    LockError, LockGuard, OwnerToken, Result, validate_key, validate_lease, validate_note, validate_wait,
};

/// A lock request being built: `locker.lock("k").lease(..).wait(..).acquire().await`.
#[derive(Debug)]
#[must_use = "a lock request does nothing until acquired"]
pub struct LockRequest<'a> {
    locker: &'a Locker,
    key: String,
    lease: Option<Duration>,
    wait: Option<Duration>,
    owner: Option<OwnerToken>,
    max_hold: Option<Duration>,
    side: Side,
    holder: Option<Arc<str>>,
}

impl<'a> LockRequest<'a> {
    pub(super) fn new(locker: &'a Locker, key: String) -> Self {
        LockRequest {
            locker,
            key,
            lease: None,
            wait: None,
            owner: None,
            max_hold: None,
            side: Side::Exclusive,
            holder: locker.holder.clone(),
        }
    }

    /// One side of a native read-write lock: [`Side::Read`] is a shared hold (many at once, or
    /// one exclusive hold), sent only to a backend with [`Capability::shared`](crate::Capability).
    pub(crate) fn side(mut self, side: Side) -> Self {
        self.side = side;
        self
    }
    /// A fixed lease: no watchdog; the lock expires after `lease` unless renewed by hand.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Wait at most `wait` in [`acquire`](Self::acquire) (default: without a bound).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Acquire as `owner`: a nested acquisition on a reentrant backend
    /// ([`Capability::reentrant`](crate::Capability)). Nest through the same `Locker` (or a
    /// clone): the nested guard then shares the outer hold's lost signal, so a loss seen by
    /// either reaches both. Do not reuse an owner token on other backends: two holds under one
    /// token are indistinguishable to them.
    pub fn owner(mut self, owner: OwnerToken) -> Self {
        self.owner = Some(owner);
        self
    }

    /// With the watchdog: stop renewing after `max_hold`, so the lock expires at most one lease
    /// later even if the holder never releases.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Note `holder` on this hold (see [`Locker::with_holder`], whose identity it replaces).
    /// Checked when the request is sent: a note that is too long or has control characters
    /// fails it with [`LockError::InvalidConfig`].
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(Arc::from(holder.into()));
        self
    }

    /// One attempt: `Ok(None)` if someone else holds the key. Never waits.
    ///
    /// # Errors
    /// Invalid input and backend errors.
    pub async fn try_acquire(self) -> Result<Option<LockGuard>> {
        self.acquire_inner(true).await
    }

    /// Acquire, waiting up to the request's wait.
    ///
    /// # Errors
    /// [`LockError::Timeout`] at the deadline; invalid input; permanent backend errors.
    /// Temporary backend errors are retried until the deadline.
    pub async fn acquire(self) -> Result<LockGuard> {
        match self.acquire_inner(false).await? {
            Some(g) => Ok(g),
            None => unreachable!("acquire_inner(false) returns a guard or an error"),
        }
    }

    /// Acquire, run `work`, release. See [`Locker::with_lock`].
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), plus [`LockError::LeaseLost`] if the lease was lost.
    pub async fn run<T, F, Fut>(self, work: F) -> Result<T>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire().await?;
        let out = work(guard.lost_token()).await;
        guard.release().await?;
        Ok(out)
    }

    async fn acquire_inner(self, once: bool) -> Result<Option<LockGuard>> {
        validate_key(&self.key)?;
        if let Some(h) = &self.holder {
            validate_note(h)?;
        }
        let backend = self.locker.backend.name();
        let span = tracing::info_span!(
            "dlock.acquire",
            backend,
            key = %self.key,
            wait = !once,
            outcome = tracing::field::Empty,
            fence = tracing::field::Empty,
        );
        let started = Instant::now();
        // Exclusive holds and a store's permits, each one holder's; readers are many and share
        // one hold, which has no place for notes.
        let noted = !matches!(self.side, Side::Read);
        let (locker, holder) = (self.locker, self.holder.clone().filter(|_| noted));
        let result = async {
            let guard = self.attempts(once).await?;
            match (guard, holder) {
                (Some(guard), Some(holder)) => note_holder(locker, guard, &holder).await.map(Some),
                (guard, _) => Ok(guard),
            }
        }
        .instrument(span.clone())
        .await;
        let outcome = match &result {
            Ok(Some(guard)) => {
                if let Some(fence) = guard.fence() {
                    span.record("fence", fence.0);
                }
                Outcome::Acquired
            }
            Ok(None) => Outcome::Busy,
            Err(LockError::Timeout { .. }) => Outcome::Timeout,
            Err(_) => Outcome::Error,
        };
        span.record("outcome", outcome.as_str());
        observe::acquire(backend, outcome, started.elapsed());
        result
    }

    /// The acquisition this request asks for, validated, and its attempts.
    async fn attempts(self, once: bool) -> Result<Option<LockGuard>> {
        let lease = self.lease.unwrap_or(self.locker.watchdog_lease);
        validate_lease(lease)?;
        if let Some(w) = self.wait {
            validate_wait(w)?;
        }
        if let Some(m) = self.max_hold {
            validate_wait(m)?;
        }
        let backend = &self.locker.backend;
        let caps = backend.capabilities();
        let side_ok = match self.side {
            Side::Read => caps.shared,
            Side::Permit { .. } => caps.permits,
            Side::Upgrade { .. } => caps.upgrade,
            _ => true,
        };
        if !side_ok {
            // A backend would take an unknown side for another: refused here, once for all.
            return Err(LockError::Unsupported { backend: backend.name(), what: "this kind of shared hold" });
        }
        let started = Instant::now();
        Acquisition {
            locker: self.locker,
            key: Arc::from(self.key),
            lease,
            auto: self.lease.is_none(),
            side: self.side,
            once,
            max_hold: self.max_hold,
            owner: self.owner.unwrap_or_else(OwnerToken::random),
            rotate: self.owner.is_none(),
            started,
            deadline: if once { Some(started) } else { self.wait.map(|w| started + w) },
        }
        .run()
        .await
    }
}

/// Notes `holder` on the hold `guard` has, where the store keeps notes. A hold gone before its
/// note landed is reported lost; a note the store refused gives the hold back.
async fn note_holder(locker: &Locker, guard: LockGuard, holder: &str) -> Result<LockGuard> {
    let backend = &locker.backend;
    if backend.notes().is_none() {
        return Ok(guard);
    }
    match backend.set_note(guard.key(), guard.owner(), holder).await {
        Ok(true) => Ok(guard),
        Ok(false) => {
            let key = guard.key().to_owned();
            guard.abandon();
            Err(LockError::LeaseLost { key })
        }
        Err(e) => {
            if let Err(release) = guard.release().await {
                tracing::debug!(error = %release, "release after a failed holder note");
            }
            Err(e)
        }
    }
}
