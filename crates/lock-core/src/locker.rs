//! The user API: acquire once, acquire with a deadline, run a closure under the lock.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use crate::backend::{AcquireRequest, Attempt, Backoff, Cleanup, Grant, RenewItem, Subscription};
use crate::hold::Holds;
use crate::observe::{self, Outcome};
use crate::renewer::{NewLease, Renewer};
use crate::{
    DEFAULT_WATCHDOG_LEASE, LockBackend, LockError, LockGuard, OwnerToken, Result, validate_key,
    validate_lease, validate_wait,
};

/// How long a waiter subscribed to release notifications sleeps when the backend gave no
/// remaining-lease hint: the most a lost notification can cost.
const NOTIFY_FALLBACK: Duration = Duration::from_millis(500);
/// First polling delay for backends without notifications.
const POLL_MIN: Duration = Duration::from_millis(2);
/// Longest polling delay for backends without notifications.
const POLL_MAX: Duration = Duration::from_millis(100);
/// A native wait with no deadline is issued as one wait of this length: slicing it would
/// drop a fair backend's waiter to the back of the queue at every slice.
const NATIVE_WAIT_SLICE: Duration = crate::MAX_WAIT;
/// Longest polling delay accepted by [`Locker::with_poll_backoff`]: longer bounds are cut to
/// this, so no user duration can overflow the deadline arithmetic.
const POLL_BOUND: Duration = Duration::from_secs(3600);
/// Default clock-drift rate: the local lease deadline comes 1 % of the lease early (Redlock's
/// drift factor)...
pub const DRIFT_MARGIN_RATE: f64 = 0.01;
/// ...plus this much, for the expiry precision of the servers and the 1 ms resolution of
/// timers.
pub const DRIFT_MARGIN_FLOOR: Duration = Duration::from_millis(5);

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

/// The clock-drift margin for `lease`: `lease * rate + floor`, at most half the lease.
pub fn drift_margin(lease: Duration, rate: f64, floor: Duration) -> Duration {
    lease.mul_f64(rate.clamp(0.0, 0.5)).saturating_add(floor).min(lease / 2)
}

/// Locks over one backend. Cheap to clone; clones share the watchdog.
#[derive(Clone)]
pub struct Locker {
    backend: Arc<dyn LockBackend>,
    renewer: Renewer,
    holds: Holds,
    watchdog_lease: Duration,
    poll: (Duration, Duration),
    drift: (f64, Duration),
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("drift", &self.drift)
            .field("renewer", &self.renewer)
            .finish()
    }
}

impl Locker {
    /// Locks over `backend`, with the default watchdog lease of 30 s.
    pub fn new(backend: Arc<dyn LockBackend>) -> Self {
        Locker {
            renewer: Renewer::new(backend.clone()),
            holds: Holds::default(),
            backend,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            poll: (POLL_MIN, POLL_MAX),
            drift: (DRIFT_MARGIN_RATE, DRIFT_MARGIN_FLOOR),
        }
    }

    /// How much earlier than the server the holder considers a lease over: `lease * rate +
    /// floor` (defaults [`DRIFT_MARGIN_RATE`], [`DRIFT_MARGIN_FLOOR`]; capped at half the lease). The lost
    /// signal fires that long before the backend can grant the key to someone else, as long as
    /// the two clocks drift apart by less.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when `rate` is not within `0.0..=0.5`.
    pub fn with_clock_drift(mut self, rate: f64, floor: Duration) -> Result<Self> {
        if !(0.0..=0.5).contains(&rate) {
            return Err(LockError::InvalidConfig {
                reason: format!("clock drift rate {rate} is outside 0.0..=0.5"),
            });
        }
        self.drift = (rate, floor.min(crate::MAX_LEASE));
        Ok(self)
    }

    /// The drift margin this locker keeps for `lease` (see [`with_clock_drift`](Self::with_clock_drift)).
    pub fn drift_margin(&self, lease: Duration) -> Duration {
        drift_margin(lease, self.drift.0, self.drift.1)
    }

    /// Lease used (and renewed every third of it) when a request gives none.
    ///
    /// # Errors
    /// [`LockError::InvalidLease`] outside the accepted range.
    pub fn with_watchdog_lease(mut self, lease: Duration) -> Result<Self> {
        validate_lease(lease)?;
        self.watchdog_lease = lease;
        Ok(self)
    }

    /// Polling backoff bounds for backends without notifications (each cut to an hour).
    pub fn with_poll_backoff(mut self, min: Duration, max: Duration) -> Self {
        let (min, max) = (min.min(POLL_BOUND), max.min(POLL_BOUND));
        self.poll = (min, max.max(min));
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    /// Number of leases the watchdog currently watches (0 after every guard is gone).
    pub fn watched_leases(&self) -> usize {
        self.renewer.len()
    }

    /// Whether the watchdog task is running (it exits when nothing is held).
    pub fn watchdog_running(&self) -> bool {
        self.renewer.is_running()
    }

    /// Start building a lock request for `key`.
    pub fn lock(&self, key: impl Into<String>) -> LockRequest<'_> {
        LockRequest { locker: self, key: key.into(), lease: None, wait: None, owner: None, max_hold: None }
    }

    /// One attempt with the watchdog lease: `Ok(None)` when someone else holds `key`.
    ///
    /// # Errors
    /// Invalid keys and backend errors.
    pub async fn try_lock(&self, key: impl Into<String>) -> Result<Option<LockGuard>> {
        self.lock(key).try_acquire().await
    }

    /// Wait up to `wait` for `key`, run `work` while holding it, then release.
    ///
    /// `work` receives a token that is cancelled if the lease is lost.
    ///
    /// # Errors
    /// [`LockError::Timeout`], backend errors, and [`LockError::LeaseLost`] when the lease was
    /// lost while `work` ran (its result is then discarded: the work was not exclusive).
    pub async fn with_lock<T, F, Fut>(&self, key: impl Into<String>, wait: Duration, work: F) -> Result<T>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock(key).wait(wait).run(work).await
    }
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
}

impl LockRequest<'_> {
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
        let result = self.attempts(once).instrument(span.clone()).await;
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
            let req = AcquireRequest { key: &key, owner, lease, wait_until, signal: &joined.signal };
            if queued && place.is_none() {
                place = Some(leave_on_drop(backend, &key, owner));
            }
            let mut sent_at = Instant::now();
            let result = match backend.try_acquire(&req).await {
                Ok(Attempt::Acquired(grant)) if caps.early_grants => {
                    top_up(backend, &key, owner, lease, locker.drift_margin(lease), grant, &mut sent_at).await
                }
                other => other,
            };
            let retry_after = match result {
                Ok(Attempt::Acquired(grant)) => {
                    if let Some(p) = place.take() {
                        p.disarm(); // the grant took this waiter out of the queue
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
                    return Ok(Some(LockGuard::new(
                        key,
                        owner,
                        fence,
                        backend.clone(),
                        signal,
                        registration,
                        hold,
                    )));
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
                if let Some(p) = place.take()
                    && let Err(e) = p.run_now().await
                {
                    tracing::debug!(key = %key, error = %e, "leaving the wait queue failed; the waiter timeout will");
                }
                return Err(LockError::Timeout { key: key.to_string(), waited: started.elapsed() });
            }
            if caps.notify && sub.is_none() {
                match backend.subscribe(&key).await {
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
                            s.notified().await
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
