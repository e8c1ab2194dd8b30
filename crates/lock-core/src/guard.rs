//! The guard of a held lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tracing::Instrument;

use crate::backend::RenewItem;
use crate::hold::HoldRef;
use crate::observe::{self, HoldEnd};
use crate::renewer::Registration;
use crate::{
    FencingToken, LeaseSignal, LeaseState, LockBackend, LockError, LostReason, OwnerToken, Result,
    validate_lease,
};

/// A held lock. Release it with [`release`](Self::release); dropping it spawns a best-effort
/// release on the runtime it was acquired on (the lease or session is the final safety net).
#[must_use = "dropping the guard releases the lock in the background"]
pub struct LockGuard {
    held: Option<Held>,
}

struct Held {
    key: Arc<str>,
    owner: OwnerToken,
    fence: Option<FencingToken>,
    /// A permit's slot ([`Grant::slot`](crate::backend::Grant)).
    slot: Option<u32>,
    backend: Arc<dyn LockBackend>,
    signal: LeaseSignal,
    registration: Option<Registration>,
    runtime: Option<tokio::runtime::Handle>,
    /// For the hold-time histogram.
    granted_at: Instant,
    /// Membership in the locker's hold registry (nested guards share the signal).
    _hold: HoldRef,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.held {
            Some(h) => f
                .debug_struct("LockGuard")
                .field("backend", &h.backend.name())
                .field("key", &h.key)
                .field("owner", &h.owner)
                .field("fence", &h.fence)
                .field("state", &h.signal.state())
                .finish(),
            None => f.write_str("LockGuard(released)"),
        }
    }
}

impl LockGuard {
    pub(crate) fn new(
        key: Arc<str>,
        owner: OwnerToken,
        fence: Option<FencingToken>,
        backend: Arc<dyn LockBackend>,
        signal: LeaseSignal,
        registration: Option<Registration>,
        hold: HoldRef,
    ) -> Self {
        let runtime = tokio::runtime::Handle::try_current().ok();
        observe::hold_started(backend.name());
        let granted_at = Instant::now();
        LockGuard {
            held: Some(Held {
                key,
                owner,
                fence,
                slot: None,
                backend,
                signal,
                registration,
                runtime,
                granted_at,
                _hold: hold,
            }),
        }
    }

    /// With the permit slot the grant named.
    pub(crate) fn with_slot(mut self, slot: Option<u32>) -> Self {
        if let Some(h) = self.held.as_mut() {
            h.slot = slot;
        }
        self
    }

    /// The backend's name.
    pub(crate) fn backend_name(&self) -> &'static str {
        self.held().backend.name()
    }

    /// The permit slot of a hold granted as one of a semaphore's permits.
    pub(crate) fn slot(&self) -> Option<u32> {
        self.held().slot
    }

    fn held(&self) -> &Held {
        // `held` is only taken by `release(self)` and `drop`, so a borrowed guard always has it.
        self.held.as_ref().unwrap_or_else(|| unreachable!("guard used after release"))
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.held().key
    }

    /// The owner token of this hold; pass it to a nested acquisition on a reentrant backend.
    pub fn owner(&self) -> OwnerToken {
        self.held().owner
    }

    /// The fencing token: strictly greater than any earlier holder's of this key. `None` when
    /// the backend has no fencing ([`Capability::fencing`](crate::Capability) is false, as for
    /// a Redlock quorum over members that cannot raise their counters): there is then no number
    /// that could fence off a stale holder, and none is handed out that would look like one.
    pub fn fence(&self) -> Option<FencingToken> {
        self.held().fence
    }

    /// Resolves when the lease is known lost. Select on it around the protected work.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.held().signal.token().cancelled_owned()
    }

    /// A token cancelled when the lease is lost.
    pub fn lost_token(&self) -> CancellationToken {
        self.held().signal.token()
    }

    /// Whether the lease is known lost.
    pub fn is_lost(&self) -> bool {
        self.held().signal.is_lost()
    }

    /// Held, uncertain (a renewal failed transiently) or lost.
    pub fn state(&self) -> LeaseState {
        self.held().signal.state()
    }

    /// A receiver of every lease state change.
    pub fn state_changes(&self) -> tokio::sync::watch::Receiver<LeaseState> {
        self.held().signal.subscribe()
    }

    /// The local deadline on the monotonic clock past which the guard reads lost: the lease's,
    /// or the server's own where it frees the hold sooner by its own clock (a TTL, a session
    /// timeout; see [`LeaseSignal::kept_by`]). `None` for a hold with neither (a file lock).
    pub fn lease_deadline(&self) -> Option<Instant> {
        self.held().signal.deadline()
    }

    /// Extend the lease to `lease` from now (compare-and-extend).
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] if the backend says this owner no longer holds the key;
    /// backend errors otherwise (the lease is then uncertain, not lost).
    pub async fn renew(&self, lease: Duration) -> Result<()> {
        validate_lease(lease)?;
        let h = self.held();
        if h.signal.is_lost() {
            return Err(LockError::LeaseLost { key: h.key.to_string() });
        }
        let name = h.backend.name();
        let span = tracing::info_span!("dlock.renew", backend = name, key = %h.key, ?lease);
        let sent_at = Instant::now();
        let item = RenewItem { key: &h.key, owner: h.owner, lease };
        let answer = h.backend.renew(std::slice::from_ref(&item)).instrument(span).await;
        match answer.inspect_err(|_| observe::renew(name, "error", 1))?.first() {
            Some(true) => {
                observe::renew(name, "renewed", 1);
                if let Some(r) = &h.registration {
                    r.confirmed(sent_at, lease);
                }
                tracing::debug!(key = %h.key, ?lease, "lock renewed");
                Ok(())
            }
            _ => {
                observe::renew(name, "not_owner", 1);
                h.signal.mark_lost(LostReason::NotOwner);
                Err(LockError::LeaseLost { key: h.key.to_string() })
            }
        }
    }

    /// Release the lock (compare-and-delete by owner token). Renewal stops first.
    ///
    /// A guard whose lease is already known lost sends nothing: its hold is gone, and a
    /// compare-and-delete by owner token could only hit a later grant to the same owner (a
    /// nested or retried acquisition).
    ///
    /// # Errors
    /// [`LockError::LeaseLost`] when the lease had been lost before the release (the work
    /// done under it may not have been exclusive); backend errors when the release could not be
    /// sent (the lease or session then frees the key).
    pub async fn release(mut self) -> Result<()> {
        let Some(mut h) = self.held.take() else { return Ok(()) };
        drop(h.registration.take());
        let name = h.backend.name();
        if h.signal.is_lost() {
            observe::hold_ended(name, HoldEnd::Lost, h.granted_at.elapsed());
            tracing::debug!(key = %h.key, "release of a lost lock: nothing sent");
            return Err(LockError::LeaseLost { key: h.key.to_string() });
        }
        observe::hold_ended(name, HoldEnd::Released, h.granted_at.elapsed());
        let span = tracing::info_span!("dlock.release", backend = name, key = %h.key);
        let released = h.backend.release(&h.key, h.owner).instrument(span).await;
        let released = released.inspect_err(|_| observe::release(name, "error"))?;
        tracing::debug!(key = %h.key, released, "lock released");
        if !released {
            observe::release(name, "not_owner");
            h.signal.mark_lost(LostReason::NotOwner);
            return Err(LockError::LeaseLost { key: h.key.to_string() });
        }
        observe::release(name, "released");
        Ok(())
    }
}

impl LockGuard {
    /// Stop renewing and forget the lock without releasing it, as a crashed process would:
    /// the lease (or the end of the session) frees it.
    pub fn abandon(mut self) {
        if let Some(mut h) = self.held.take() {
            drop(h.registration.take());
            observe::hold_ended(h.backend.name(), HoldEnd::Abandoned, h.granted_at.elapsed());
            tracing::debug!(key = %h.key, "lock abandoned to its lease");
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(mut h) = self.held.take() else { return };
        drop(h.registration.take());
        let name = h.backend.name();
        if h.signal.is_lost() {
            observe::hold_ended(name, HoldEnd::Lost, h.granted_at.elapsed());
            return; // nothing to release, and a release could only hit a later grant
        }
        observe::hold_ended(name, HoldEnd::Dropped, h.granted_at.elapsed());
        let Some(rt) = h.runtime.take() else {
            tracing::warn!(key = %h.key, "lock guard dropped without a runtime; the lease will free it");
            return;
        };
        // Never block in Drop: the release runs on the runtime the lock was taken on. The hold
        // leaves the registry now, so a later acquisition does not join a hold being released.
        let Held { key, owner, backend, .. } = h;
        rt.spawn(async move {
            match backend.release(&key, owner).await {
                Ok(released) => {
                    observe::release(name, if released { "released" } else { "not_owner" });
                    tracing::debug!(%key, "dropped lock released")
                }
                Err(e) => {
                    observe::release(name, "error");
                    tracing::warn!(%key, error = %e, "background release of a dropped lock failed")
                }
            }
        });
    }
}
