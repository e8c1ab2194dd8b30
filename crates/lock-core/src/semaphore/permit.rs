//! A permit request being built, and the permit it gives.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::Semaphore;
#[cfg(doc)]
use crate::LockError;
use crate::{FencingToken, LeaseState, LockGuard, Result, validate_wait};

/// A permit request being built: `sem.acquire().lease(..).wait(..).acquire().await`.
#[derive(Debug)]
#[must_use = "a permit request does nothing until acquired"]
pub struct PermitRequest<'a> {
    pub(super) sem: &'a Semaphore,
    pub(super) wait: Option<Duration>,
    pub(super) lease: Option<Duration>,
}

impl PermitRequest<'_> {
    /// Wait at most `wait` in [`acquire`](Self::acquire) (default: without a bound).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// A fixed lease for the permit: no watchdog; it expires after `lease` unless renewed by
    /// hand (default: the watchdog lease, renewed while held).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Take a permit, waiting up to the request's wait when all are held.
    ///
    /// # Errors
    /// [`LockError::Timeout`] (naming the semaphore) at the deadline; invalid input; backend
    /// errors.
    pub async fn acquire(self) -> Result<Permit> {
        let (started, deadline) = (Instant::now(), self.deadline()?);
        let take = self.sem.take(false, deadline, self.lease);
        match crate::deadline::by_deadline(deadline, self.sem.name(), started, take).await? {
            Some(p) => Ok(p),
            None => unreachable!("take(false) returns a permit or an error"),
        }
    }

    /// One pass over the slots without waiting: `Ok(None)` when every permit is held.
    ///
    /// # Errors
    /// Invalid input and backend errors.
    pub async fn try_acquire(self) -> Result<Option<Permit>> {
        self.sem.take(true, None, self.lease).await
    }

    pub(super) fn deadline(&self) -> Result<Option<Instant>> {
        match self.wait {
            Some(w) => {
                validate_wait(w)?;
                Ok(Some(Instant::now() + w))
            }
            None => Ok(None),
        }
    }
}

/// A held permit of a [`Semaphore`]: the guard of one slot's lock, or of one permit of the
/// semaphore's key where the store keeps permits itself. Release it with
/// [`release`](Self::release); dropping it releases in the background, like a [`LockGuard`].
#[derive(Debug)]
#[must_use = "dropping the permit releases it in the background"]
pub struct Permit {
    pub(super) slot: u32,
    pub(super) guard: LockGuard,
}

impl Permit {
    pub(crate) fn new(slot: u32, guard: LockGuard) -> Self {
        Permit { slot, guard }
    }

    /// The slot this permit holds (`0..permits`).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The lock key: the slot's, or the semaphore's where the store keeps permits
    /// ([`Semaphore::is_native`]).
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// The permit's fencing token: strictly greater than any earlier holder's of the same slot
    /// (`None` without [`Capability::fencing`](crate::Capability)); where the store keeps
    /// permits, greater than every earlier permit's of the semaphore. Nothing is fenced across
    /// permits: they are not exclusive.
    pub fn fence(&self) -> Option<FencingToken> {
        self.guard.fence()
    }

    /// Resolves when the permit's lease is known lost.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.guard.lost()
    }

    /// A token cancelled when the permit's lease is lost.
    pub fn lost_token(&self) -> CancellationToken {
        self.guard.lost_token()
    }

    /// Whether the permit's lease is known lost.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// Held, uncertain or lost.
    pub fn state(&self) -> LeaseState {
        self.guard.state()
    }

    /// A receiver of every lease state change.
    pub fn state_changes(&self) -> tokio::sync::watch::Receiver<LeaseState> {
        self.guard.state_changes()
    }

    /// Extend the lease to `lease` from now (see [`LockGuard::renew`]).
    ///
    /// # Errors
    /// As [`LockGuard::renew`].
    pub fn renew(&self, lease: Duration) -> impl Future<Output = Result<()>> + '_ {
        self.guard.renew(lease)
    }

    /// The slot's lock guard.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Give the permit back.
    ///
    /// # Errors
    /// As [`LockGuard::release`]: [`LockError::LeaseLost`] when the lease had been lost.
    pub async fn release(self) -> Result<()> {
        self.guard.release().await
    }

    /// Forget the permit without releasing it, as a crashed process would: its lease (or the
    /// end of its session) gives it back.
    pub fn abandon(self) {
        self.guard.abandon();
    }
}
