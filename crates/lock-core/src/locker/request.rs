//! One acquisition: the request being built, and the attempts that take the lock or wait.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use super::{Locker, NATIVE_WAIT_SLICE, NOTIFY_FALLBACK, POLL_BOUND};
use crate::backend::{AcquireRequest, Attempt, Backoff, Cleanup, Grant, RenewItem, Side, Subscription};
use crate::deadline::{GRACE, within};
use crate::observe::{self, Outcome};
use crate::renewer::NewLease;
use crate::{
    LockBackend, LockError, LockGuard, OwnerToken, Result, validate_key, validate_lease, validate_note,
    validate_wait,
};

/// Shortest local validity (a short grant less the drift margin) left to the watchdog's top-up:
/// below it, a loaded machine could miss the deadline before the renewal is answered, and tell
/// the holder of a loss that never happened (at 200 ms, the conformance suite's 10 x 1000 case
/// saw that at a load average of 12).
const SHORT_GRANT_MIN: Duration = Duration::from_secs(1);

/// A grant shorter than the lease asked for (a hold handed over in advance, see
/// [`Grant::lease`](crate::backend::Grant)) is topped up by the watchdog soon after; one so short
/// that the drift margin would eat half of it, or leave less than [`SHORT_GRANT_MIN`], is
/// topped up here, before the guard exists.
/// Answers the grant with the lease it now has (counted from `sent_at`, moved to the top-up's
/// send), or `Held` if the short grant ran out first.
async fn top_up(
    backend: &Arc<dyn LockBackend>,
    key: &str,
    owner: OwnerToken,
    lease: Duration,
    margin: Duration,
    grant: Grant,
    sent_at: &mut Instant,
) -> Result<Attempt> {
    let Some(short) = grant.lease.filter(|g| *g < lease) else { return Ok(Attempt::Acquired(grant)) };
    let valid = short.saturating_sub(margin);
    if valid >= short / 2 && valid >= SHORT_GRANT_MIN {
        return Ok(Attempt::Acquired(grant));
    }
    let sent = Instant::now();
    // No guard exists yet: a grant whose top-up fails or is cancelled would be nobody's and
    // block the key until it expires, so it is released (in the background when dropped).
    let undo = release_on_drop(backend, key, owner);
    let held = backend.renew(&[RenewItem { key, owner, lease }]).await?;
    undo.disarm();
    if held.first() != Some(&true) {
        return Ok(Attempt::Held { retry_after: None });
    }
    *sent_at = sent;
    Ok(Attempt::Acquired(Grant { lease: Some(lease), ..grant }))
}

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

    async fn attempts(self, once: bool) -> Result<Option<LockGuard>> {
        // One allocation shared by the guard, the watchdog entry and the hold registry.
        let key: Arc<str> = Arc::from(self.key);
        let auto = self.lease.is_none();
        let lease = self.lease.unwrap_or(self.locker.watchdog_lease);
        validate_lease(lease)?;
        if let Some(w) = self.wait {
            validate_wait(w)?;
        }
        if let Some(m) = self.max_hold {
            validate_wait(m)?;
        }
        let locker = self.locker;
        let backend = &locker.backend;
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
        // An attempt whose outcome is unknown (a temporary error) may still be granted, and
        // its cleanup may run late: the next attempt takes a fresh token so that neither can be
        // mistaken for the other. A caller-chosen owner (nesting) cannot change; backends tell
        // its attempts apart by a nonce of their own.
        let rotate = self.owner.is_none();
        let mut owner = self.owner.unwrap_or_else(OwnerToken::random);
        let started = Instant::now();
        let deadline = if once { Some(started) } else { self.wait.map(|w| started + w) };

        // A queue backend keeps this waiter's place between attempts; leaving it when the
        // acquisition ends without a grant is armed before each attempt that may take a place,
        // so a future dropped at any point leaves too (an attempt's own cleanup only undoes
        // what that attempt did: the place, and a hold handed to it, are the acquisition's).
        let queued = caps.queue && !once;
        let mut place: Option<Cleanup> = None;
        // Who a fair release must name to wake this waiter (made only once it waits).
        let mut owner_text: Option<String> = None;
        let mut sub: Option<Subscription> = None;
        // Counted as waiting from the first nap to the outcome, however the acquisition ends.
        let mut waiting: Option<observe::Waiting> = None;
        let mut backoff = Backoff::new(locker.poll.0, locker.poll.1);
        // Entered only while this acquisition sleeps between attempts.
        let wait_span = (!once).then(|| tracing::debug_span!("dlock.wait"));
        loop {
            let wait_until = match (caps.native_wait || queued, deadline) {
                (false, _) => None,
                (true, Some(d)) if d <= Instant::now() && !queued => None,
                (true, Some(d)) => Some(d),
                (true, None) => Some(Instant::now() + NATIVE_WAIT_SLICE),
            };
            // A nested acquisition joins the live hold's lost signal.
            let joined = locker.holds.join(&key, backend.name(), owner, !rotate);
            let req = AcquireRequest {
                key: &key,
                owner,
                lease,
                wait_until,
                signal: &joined.signal,
                side: self.side,
            };
            if queued && place.is_none() {
                place = Some(leave_on_drop(backend, &key, owner));
            }
            // Every await of a waiting acquisition keeps its deadline (a try has only the
            // store's own response bound).
            let bound = deadline.filter(|_| !once).map(|d| d + GRACE);
            let timeout = || LockError::Timeout { key: key.to_string(), waited: started.elapsed() };
            if caps.notify && !once && sub.is_none() && backend.listening(&key) {
                // Heard from before the attempt is sent: a refusal waits at once.
                sub = within(bound, backend.subscribe(&key)).await.ok().and_then(|s| s.ok().flatten());
            }
            let mut sent_at = Instant::now();
            let attempt = async {
                match backend.try_acquire(&req).await {
                    Ok(Attempt::Acquired(grant)) if caps.early_grants => {
                        top_up(backend, &key, owner, lease, locker.drift_margin(lease), grant, &mut sent_at)
                            .await
                    }
                    other => other,
                }
            };
            // An attempt still unanswered at the bound is dropped (its own cleanup undoes what
            // it may have done; the queue place leaves with `place`).
            let result = within(bound, attempt).await.map_err(|_| timeout())?;
            let retry_after = match result {
                Ok(Attempt::Acquired(grant)) => {
                    if let Some(p) = place.take() {
                        p.disarm(); // the grant took this waiter out of the queue
                    }
                    if !self.side.is_shared()
                        && let Some(s) = sub.as_mut()
                    {
                        s.granted(); // the wake-up that led here is used: the release wakes the next
                    }
                    let hold = locker.holds.granted(&key, owner, &joined);
                    let signal = joined.signal;
                    let registration = (auto || grant.lease.is_some()).then(|| {
                        locker.renewer.register(NewLease {
                            key: key.clone(),
                            owner,
                            lease,
                            auto,
                            granted: grant.lease,
                            sent_at,
                            margin: locker.drift_margin(lease),
                            renew_until: self.max_hold.map(|m| started + m),
                            signal: signal.clone(),
                            early: caps.early_grants,
                        })
                    });
                    let fence = caps.fencing.then_some(grant.fence);
                    tracing::debug!(backend = backend.name(), key = %key, ?fence, waited = ?started.elapsed(), "lock acquired");
                    let guard =
                        LockGuard::new(key, owner, fence, backend.clone(), signal, registration, hold);
                    return Ok(Some(guard.with_slot(grant.slot)));
                }
                Ok(Attempt::Held { retry_after }) => retry_after,
                Err(e) if e.is_temporary() && !once && deadline.is_none_or(|d| Instant::now() < d) => {
                    tracing::debug!(key = %key, error = %e, "acquire attempt failed; retrying");
                    if rotate {
                        owner = OwnerToken::random();
                        owner_text = None;
                        // The old owner's queue place goes (in the background); the new owner
                        // joins with its next attempt.
                        drop(place.take());
                    }
                    Some(backoff.next_delay())
                }
                Err(e) => return Err(e), // a queue place is left by `place`'s drop
            };
            if once {
                return Ok(None);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                // Leaving the queue at once, within the grace; else in the background.
                if let Some(p) = place.take()
                    && let Ok(Err(e)) = within(Some(now + GRACE), p.run_now()).await
                {
                    tracing::debug!(key = %key, error = %e, "leaving the wait queue failed; the waiter timeout will");
                }
                return Err(LockError::Timeout { key: key.to_string(), waited: started.elapsed() });
            }
            if caps.notify && sub.is_none() {
                match within(bound, backend.subscribe(&key)).await.map_err(|_| timeout())? {
                    Ok(s) => {
                        sub = s;
                        // Subscribed after the failed attempt: retry at once so a release in
                        // between is not missed.
                        if sub.is_some() {
                            continue;
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "subscribe failed; polling instead"),
                }
            }
            let nap = match (&sub, retry_after) {
                (Some(_), Some(hint)) => hint,
                (Some(_), None) => NOTIFY_FALLBACK,
                (None, Some(hint)) => backoff.next_delay().min(hint),
                (None, None) => backoff.next_delay(),
            };
            if waiting.is_none() {
                waiting = Some(observe::Waiting::start(backend.name()));
            }
            let wake = now.checked_add(nap).unwrap_or(now + POLL_BOUND);
            let wake = deadline.map_or(wake, |d| d.min(wake));
            match sub.as_mut() {
                Some(s) => {
                    let woken = async {
                        if queued {
                            // Only a release naming this waiter (or nobody) as next wakes it.
                            let me = owner_text.get_or_insert_with(|| owner.to_string());
                            s.notified_for(me).await
                        } else {
                            let me = owner_text.get_or_insert_with(|| owner.to_string());
                            s.notified_as(me).await
                        }
                    };
                    let woken_or_slept = async {
                        tokio::select! {
                            _ = tokio::time::sleep_until(wake) => true,
                            alive = woken => alive,
                        }
                    };
                    if !woken_or_slept.instrument(wait_span.clone().unwrap_or_else(Span::none)).await {
                        sub = None;
                    }
                }
                None => {
                    tokio::time::sleep_until(wake)
                        .instrument(wait_span.clone().unwrap_or_else(Span::none))
                        .await
                }
            }
        }
    }
}

/// Notes `holder` on the hold `guard` has, where the store keeps notes. A hold gone before its
/// note landed is reported lost; a note the store refused gives the hold back.
async fn note_holder(locker: &Locker, guard: LockGuard, holder: &str) -> Result<LockGuard> {
    let backend = &locker.backend;
    if !backend.capabilities().notes {
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

/// Releases `owner`'s grant on `key` when dropped armed (a grant no guard holds yet).
fn release_on_drop(backend: &Arc<dyn LockBackend>, key: &str, owner: OwnerToken) -> Cleanup {
    let (backend, key) = (backend.clone(), key.to_owned());
    Cleanup::arm("releasing a grant no guard holds", move || async move {
        backend.release(&key, owner).await.map(drop)
    })
}

/// Leaves `key`'s server-side queue as `owner` when dropped armed (see `Capability::queue`).
fn leave_on_drop(backend: &Arc<dyn LockBackend>, key: &str, owner: OwnerToken) -> Cleanup {
    let (backend, key) = (backend.clone(), key.to_owned());
    Cleanup::arm("leaving a lock's wait queue", move || async move { backend.leave_queue(&key, owner).await })
}
