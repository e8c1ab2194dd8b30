//! The attempts of one acquisition: each sent with the deadline it may wait to, a grant turned
//! into a guard (unless it was answered past its lease), a refusal followed by a wait
//! ([`Wait`]), a temporary error retried under a fresh owner token, and a queue store's place
//! left when the acquisition ends without a grant.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::grant::{leave_on_drop, top_up};
use super::wait::Wait;
use super::{Locker, NATIVE_WAIT_SLICE};
use crate::backend::{AcquireRequest, Attempt, Capability, Cleanup, Grant, Side};
use crate::deadline::{GRACE, within};
use crate::hold::Joined;
use crate::renewer::NewLease;
use crate::{LockError, LockGuard, OwnerToken, Result};

/// One acquisition, validated: what it asks for and where it stands.
pub(super) struct Acquisition<'a> {
    pub(super) locker: &'a Locker,
    /// One allocation shared by the guard, the watchdog entry and the hold registry.
    pub(super) key: Arc<str>,
    pub(super) lease: Duration,
    /// The lease is the watchdog's (no lease given): renewed until released.
    pub(super) auto: bool,
    pub(super) side: Side,
    /// A try: one attempt, no wait.
    pub(super) once: bool,
    pub(super) max_hold: Option<Duration>,
    pub(super) owner: OwnerToken,
    /// The owner was drawn here, not given (nesting): an attempt whose outcome is unknown (a
    /// temporary error) may still be granted, and its cleanup may run late, so the next
    /// attempt takes a fresh token and neither can be mistaken for the other. A caller-chosen
    /// owner cannot change; backends tell its attempts apart by a nonce of their own.
    pub(super) rotate: bool,
    pub(super) started: Instant,
    pub(super) deadline: Option<Instant>,
}

/// What one attempt came to.
enum Step {
    Granted(LockGuard),
    Refused(Option<Duration>),
}

impl Acquisition<'_> {
    /// Attempt until granted, refused once (a try), or the deadline.
    pub(super) async fn run(mut self) -> Result<Option<LockGuard>> {
        let caps = self.locker.backend.capabilities();
        // A queue backend keeps this waiter's place between attempts; leaving it when the
        // acquisition ends without a grant is armed before each attempt that may take a place,
        // so a future dropped at any point leaves too (an attempt's own cleanup only undoes
        // what that attempt did: the place, and a hold handed to it, are the acquisition's).
        let queued = self.locker.backend.queue().is_some() && !self.once;
        let mut place: Option<Cleanup> = None;
        let mut wait = Wait::new(self.locker.poll, queued, self.once);
        // Every await of a waiting acquisition keeps its deadline (a try has only the store's
        // own response bound).
        let bound = self.deadline.filter(|_| !self.once).map(|d| d + GRACE);
        let backend = self.locker.backend.clone();
        loop {
            if queued && place.is_none() {
                place = Some(leave_on_drop(&backend, &self.key, self.owner));
            }
            if !self.once && !wait.subscribed() && backend.listening(&self.key) {
                // Heard from before the attempt is sent: a refusal waits at once.
                let sub = within(bound, backend.subscribe(&self.key)).await;
                wait.listen(sub.ok().and_then(|s| s.ok().flatten()));
            }
            let attempt = within(bound, self.attempt(caps, queued, &mut wait)).await;
            let retry_after = match attempt.map_err(|_| self.timeout())? {
                Ok(Step::Granted(guard)) if guard.is_lost() && self.rotate => {
                    // Answered after its lease ran out by this machine's clock (held up on its
                    // way): the store may have freed it for someone else already, so it is no
                    // guard. The dead grant keeps the key until its lease ends; the next
                    // attempt goes under a fresh owner, and the old one's queue place goes.
                    tracing::debug!(key = %self.key, "a grant answered past its lease; not handed out");
                    drop(guard);
                    self.owner = OwnerToken::random();
                    wait.renamed();
                    drop(place.take());
                    None
                }
                Ok(Step::Granted(guard)) => {
                    if let Some(p) = place.take() {
                        p.disarm(); // the grant took this waiter out of the queue
                    }
                    return Ok(Some(guard));
                }
                Ok(Step::Refused(retry_after)) => retry_after,
                Err(e)
                    if e.is_temporary() && !self.once && self.deadline.is_none_or(|d| Instant::now() < d) =>
                {
                    tracing::debug!(key = %self.key, error = %e, "acquire attempt failed; retrying");
                    if self.rotate {
                        self.owner = OwnerToken::random();
                        wait.renamed();
                        // The old owner's queue place goes (in the background); the new owner
                        // joins with its next attempt.
                        drop(place.take());
                    }
                    Some(wait.after_error())
                }
                Err(e) => return Err(e), // a queue place is left by `place`'s drop
            };
            if self.once {
                return Ok(None);
            }
            let now = Instant::now();
            if self.deadline.is_some_and(|d| now >= d) {
                // Leaving the queue at once, within the grace; else in the background.
                if let Some(p) = place.take()
                    && let Ok(Err(e)) = within(Some(now + GRACE), p.run_now()).await
                {
                    tracing::debug!(key = %self.key, error = %e, "leaving the wait queue failed; the waiter timeout will");
                }
                return Err(self.timeout());
            }
            if backend.notify().is_some() && !wait.subscribed() {
                match within(bound, backend.subscribe(&self.key)).await.map_err(|_| self.timeout())? {
                    Ok(Some(sub)) => {
                        // Subscribed after the refused attempt: retry at once so a release in
                        // between is not missed.
                        wait.listen(Some(sub));
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!(error = %e, "subscribe failed; polling instead"),
                }
            }
            wait.nap(backend.name(), self.owner, retry_after, self.deadline).await;
        }
    }

    /// One attempt, sent with the instant it may wait to in the server (a native wait or a
    /// queue place); a grant becomes a guard.
    async fn attempt(&self, caps: Capability, queued: bool, wait: &mut Wait) -> Result<Step> {
        let (locker, backend) = (self.locker, &self.locker.backend);
        let wait_until = match (caps.native_wait || queued, self.deadline) {
            (false, _) => None,
            (true, Some(d)) if d <= Instant::now() && !queued => None,
            (true, Some(d)) => Some(d),
            (true, None) => Some(Instant::now() + NATIVE_WAIT_SLICE),
        };
        // A nested acquisition joins the live hold's lost signal.
        let joined = locker.holds.join(&self.key, backend.name(), self.owner, !self.rotate);
        let req = AcquireRequest {
            key: &self.key,
            owner: self.owner,
            lease: self.lease,
            wait_until,
            signal: &joined.signal,
            side: self.side,
        };
        let mut sent_at = Instant::now();
        let answer = match backend.try_acquire(&req).await? {
            Attempt::Acquired(grant) if caps.early_grants => {
                let margin = locker.drift_margin(self.lease);
                top_up(backend, &self.key, self.owner, (self.lease, margin), grant, &mut sent_at).await?
            }
            other => other,
        };
        match answer {
            Attempt::Acquired(grant) => {
                if !self.side.is_shared() {
                    wait.granted(); // the wake-up that led here is used: the release wakes the next
                }
                Ok(Step::Granted(self.guard(caps, grant, joined, sent_at)))
            }
            Attempt::Held { retry_after } => Ok(Step::Refused(retry_after)),
        }
    }

    /// The guard of `grant`: its hold registered (nesting, the lost signal) and its lease
    /// given to the watchdog, counted from `sent_at`, the granting request's send.
    fn guard(&self, caps: Capability, grant: Grant, joined: Joined, sent_at: Instant) -> LockGuard {
        let (locker, key, owner) = (self.locker, &self.key, self.owner);
        let hold = locker.holds.granted(key, owner, &joined);
        let signal = joined.signal;
        let registration = (self.auto || grant.lease.is_some()).then(|| {
            locker.renewer.register(NewLease {
                key: key.clone(),
                owner,
                lease: self.lease,
                auto: self.auto,
                granted: grant.lease,
                sent_at,
                margin: locker.drift_margin(self.lease),
                renew_until: self.max_hold.map(|m| self.started + m),
                signal: signal.clone(),
                early: caps.early_grants,
            })
        });
        let fence = caps.fencing.then_some(grant.fence);
        let backend = &locker.backend;
        tracing::debug!(backend = backend.name(), key = %key, ?fence, waited = ?self.started.elapsed(), "lock acquired");
        LockGuard::new(key.clone(), owner, fence, backend.clone(), signal, registration, hold)
            .with_slot(grant.slot)
    }

    fn timeout(&self) -> LockError {
        LockError::Timeout { key: self.key.to_string(), waited: self.started.elapsed() }
    }
}
