//! The user API: acquire once, acquire with a deadline, run a closure under the lock.

mod attempts;
mod grant;
mod request;
mod wait;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use request::LockRequest;

use crate::hold::Holds;
use crate::renewer::Renewer;
use crate::{DEFAULT_WATCHDOG_LEASE, LockBackend, LockError, LockGuard, Result, validate_lease};

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
    /// The holder identity noted on every exclusive hold of this locker (`with_holder`).
    holder: Option<Arc<str>>,
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("drift", &self.drift)
            .field("holder", &self.holder)
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
            holder: None,
        }
    }

    /// Note `holder` (who holds: a host, a process, a program, a label) on every exclusive
    /// hold this locker grants, where the store keeps notes (see
    /// [`Capability`](crate::Capability)), so that `note` and `dlock status` can say who holds
    /// a lock. It costs one more round trip per hold (a composite's parts each: a
    /// non-native writer notes every reader slot); [`LockRequest::holder`] sets it for one
    /// request. The note is public: never put a secret in it.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a note longer than
    /// [`MAX_NOTE_BYTES`](crate::backend::MAX_NOTE_BYTES) or with control characters.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Result<Self> {
        let holder = holder.into();
        crate::validate::validate_note(&holder)?;
        self.holder = Some(Arc::from(holder));
        Ok(self)
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
        LockRequest::new(self, key.into())
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
