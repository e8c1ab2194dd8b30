//! The quorum's `LockBackend` impl: one attempt in two phases, release, renew and subscribe
//! across the members.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::{Instant, timeout};

use super::attempt::{Tally, Undo};
use super::failure::{Failure, NoQuorum, member_result};
use super::{NAME, QuorumBackend, drift_allowance};
use crate::backend::{
    AcquireRequest, Attempt, Capability, Grant, LockBackend, RenewItem, Side, Subscription,
};
use crate::backend::{Admin, Notify};
use crate::{FencingToken, LockError, OwnerToken, Result};

#[async_trait]
impl LockBackend for QuorumBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capability {
        let caps: Vec<Capability> = self.members.iter().map(|m| m.capabilities()).collect();
        // Everything else stays off: no reentrancy (type docs); a member restarted without a
        // synced append-only file forgets its grants and counter, so not failover_safe; members
        // are asked one attempt at a time, so no native wait or queue.
        let mut c = Capability::NONE;
        c.renew = caps.iter().all(|c| c.renew);
        c.fencing = self.fencing();
        c.refusal_writes = caps.iter().any(|c| c.refusal_writes);
        c
    }

    async fn inspect(&self, key: &str) -> Result<crate::LockInfo> {
        // Held when a quorum of the members that answer says so; the shortest remaining lease.
        let t = self.other_timeout();
        let answers = join_all(self.members.iter().map(|m| timeout(t, m.inspect(key)))).await;
        let infos: Vec<crate::LockInfo> = answers.into_iter().filter_map(|a| a.ok()?.ok()).collect();
        if infos.len() < self.quorum {
            return Err(LockError::temporary(
                NAME,
                format!("only {} of {} members answered", infos.len(), self.members.len()),
            ));
        }
        let held: Vec<&crate::LockInfo> = infos.iter().filter(|i| i.held).collect();
        if held.len() < self.quorum {
            return Ok(crate::LockInfo::free());
        }
        let mut info = crate::LockInfo::held();
        info.remaining = held.iter().filter_map(|i| i.remaining).min();
        info.owner = held.first().and_then(|i| i.owner.clone());
        // The owner of a majority and its grant's token, which names the hold to evict; only
        // where tokens are fences (a number without them names no hold).
        if let Some((owner, fence)) = super::evict::holder(&held, self.quorum) {
            info.owner = Some(owner);
            info.fence = fence.filter(|_| self.fencing());
        }
        Ok(info)
    }

    fn identity(&self) -> String {
        let mut ids: Vec<String> = self.members.iter().map(|m| m.identity()).collect();
        ids.sort();
        format!("quorum({})", ids.join(","))
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let start = Instant::now();
        let n = self.members.len();
        let t = self.attempt_timeout(req.lease);
        let member_req = AcquireRequest {
            key: req.key,
            owner: req.owner,
            lease: req.lease,
            wait_until: None,
            signal: req.signal,
            // A quorum offers no shared holds (`Capability::shared` unset): never asked for one.
            side: Side::Exclusive,
        };
        // Releases the members that answered a grant. A member whose answer never came (cut
        // off, timed out, failed) undoes its own attempt, by that attempt's nonce: releasing it
        // here by owner could free the outer hold of a nesting of the same owner (the server
        // cannot tell them apart).
        let undo = Undo::arm(&self.members, req.key, req.owner, self.other_timeout());
        let mut tally = Tally::default();
        // Phase 1: the probe member alone. A refusal there ends the attempt at the cost of one
        // request and nothing to undo; contenders meet at the probe first, so they rarely split
        // the other members' votes between them.
        let probe = self.probe.load(Ordering::Relaxed) % n;
        let first = timeout(t, self.members[probe].try_acquire(&member_req)).await;
        tally.record(probe, member_result(first, t), &undo);
        if tally.refused == 1 && n > 1 {
            return Ok(Attempt::Held { retry_after: tally.hint });
        }
        if tally.failures.len() == 1 {
            // Next time, probe a member that may be alive.
            let _ = self.probe.compare_exchange(probe, (probe + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
        }
        // Phase 2: every other member at once.
        let mut calls: FuturesUnordered<_> = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != probe)
            .map(|(i, m)| {
                let r = &member_req;
                async move { (i, timeout(t, m.try_acquire(r)).await) }
            })
            .collect();
        while let Some((i, r)) = calls.next().await {
            tally.record(i, member_result(r, t), &undo);
        }
        drop(calls);
        let Tally { granted, refused, top, grants, min_lease, mut hint, failures } = tally;
        let elapsed = start.elapsed();
        let drift = drift_allowance(req.lease);
        let basis = min_lease.unwrap_or(req.lease);
        if granted >= self.quorum && elapsed + drift < basis {
            let (top, i) = top.unwrap_or_default();
            if !self.fencing() {
                undo.disarm();
                let number = top.saturating_mul(n as u64).saturating_add(i as u64);
                return Ok(Attempt::Acquired(Grant {
                    fence: FencingToken(number),
                    lease: min_lease.map(|l| l - drift),
                    slot: None,
                }));
            }
            // The undo stays armed through the write-back: a drop there releases every member.
            let (confirmed, failures) = self.write_back(req.key, req.owner, &grants, top, t).await;
            let elapsed = start.elapsed();
            if confirmed >= self.quorum && elapsed + drift < basis {
                undo.disarm();
                return Ok(Attempt::Acquired(Grant {
                    fence: FencingToken(top),
                    lease: min_lease.map(|l| l - drift),
                    slot: None,
                }));
            }
            tracing::debug!(
                key = req.key,
                confirmed,
                ?elapsed,
                "fence write-back short of a quorum in time; undoing"
            );
            undo.run().await;
            return Err(LockError::temporary(
                NAME,
                NoQuorum { what: "the fence write-back".to_owned(), answered: confirmed, n, failures },
            ));
        }
        if granted >= self.quorum {
            tracing::debug!(key = req.key, ?elapsed, lease = ?basis, "quorum reached too late; undoing");
        }
        undo.run().await;
        let answered = granted + refused;
        if answered < self.quorum {
            return Err(self.no_quorum("acquire", answered, failures));
        }
        if refused < self.quorum {
            // A split vote (or a quorum reached too late): retry after a short random delay, in
            // the order of one attempt, so that competing clients fall out of step.
            let jitter = start.elapsed().mul_f64(0.5 + fastrand::f64()).clamp(Duration::from_millis(1), t);
            hint = Some(hint.map_or(jitter, |h| h.min(jitter)));
        }
        Ok(Attempt::Held { retry_after: hint })
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let t = self.other_timeout();
        let calls = self.members.iter().map(|m| timeout(t, m.release(key, owner)));
        let (mut released, mut answered) = (0, 0);
        let mut failures = Vec::new();
        for r in join_all(calls).await {
            match member_result(r, t) {
                Ok(true) => (released, answered) = (released + 1, answered + 1),
                Ok(false) => answered += 1,
                Err(f) => failures.push(f),
            }
        }
        if released >= self.quorum {
            Ok(true)
        } else if released + failures.len() >= self.quorum {
            Err(self.no_quorum("release", answered, failures))
        } else {
            Ok(false)
        }
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let Some(shortest) = items.iter().map(|it| it.lease).min() else { return Ok(Vec::new()) };
        let t = self.attempt_timeout(shortest);
        let padded: Vec<RenewItem<'_>> =
            items.iter().map(|it| RenewItem { lease: it.lease + drift_allowance(it.lease), ..*it }).collect();
        let calls = self.members.iter().map(|m| timeout(t, m.renew(&padded)));
        let mut confirmed = vec![0usize; items.len()];
        let mut answered = 0;
        let mut failures = Vec::new();
        for r in join_all(calls).await {
            match member_result(r, t) {
                Ok(flags) if flags.len() == items.len() => {
                    answered += 1;
                    for (c, held) in confirmed.iter_mut().zip(flags) {
                        *c += usize::from(held);
                    }
                }
                Ok(flags) => failures.push(Failure::Error(LockError::permanent(
                    NAME,
                    format!("member renew answered {} flags for {} items", flags.len(), items.len()),
                ))),
                Err(f) => failures.push(f),
            }
        }
        let unknown = failures.len();
        // Renewed: a quorum confirmed. Lost: not even the unknown members could make a quorum.
        // Anything in between is unknown, which fails the whole batch (the watchdog retries).
        if confirmed.iter().any(|c| *c < self.quorum && c + unknown >= self.quorum) {
            return Err(self.no_quorum("renew", answered, failures));
        }
        Ok(confirmed.into_iter().map(|c| c >= self.quorum).collect())
    }

    /// Where any member has notifications: a waiter hears the members that do.
    fn notify(&self) -> Option<&dyn Notify> {
        self.members.iter().any(|m| m.notify().is_some()).then_some(self as &dyn Notify)
    }

    crate::hand_out!(admin);
}

#[async_trait]
impl Notify for QuorumBackend {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        self.listen(key).await
    }
}

#[async_trait]
impl Admin for QuorumBackend {
    /// The members may list different keys, and a key one lists need not be held by a
    /// majority: `dlock list` asks the members themselves.
    async fn list(&self, _prefix: &str, _limit: usize) -> Result<Vec<String>> {
        Err(crate::backend::unsupported(self.name(), "listing the locks held"))
    }

    /// Every member's hold of the owner that `fence` names, each by its own fence (evict.rs).
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        self.evict_hold(key, fence).await
    }
}
