//! Shared holds, the read side of a native read-write lock (`scripts/acquire_shared.lua` and
//! the layout in `scripts/handoff.lua`): a hash of readers next to the lock, which exclusive
//! attempts respect and the last reader hands over from.
//!
//! Release and renewal name only a key and an owner, so this client remembers which of its
//! holds are shared and sends those to the shared scripts.

use std::collections::HashMap;
use std::sync::Arc;

use lock_core::backend::{AcquireRequest, Attempt, Cleanup, LockInfo, Mutex, PermitInfo, RenewItem, millis};
use lock_core::{FencingToken, OwnerToken, Result};
use tokio::time::Instant;

use super::{RedisLock, attempt, hint};
use crate::error::classify;
use crate::keys::KeyNames;
use crate::options::Mode;
use crate::scripts;

/// The shared holds this client granted and has not released: the keys of each owner. Every
/// release and renewal looks here, and a process may hold many permits: found by owner (a
/// random token per acquisition, so almost always one key each), never by a scan.
pub(super) type SharedHolds = Mutex<HashMap<OwnerToken, Vec<String>>>;

impl RedisLock {
    /// Whether `owner`'s hold of `key` here is shared.
    pub(super) fn is_shared(&self, key: &str, owner: OwnerToken) -> bool {
        self.inner.shared.lock().get(&owner).is_some_and(|keys| keys.iter().any(|k| k == key))
    }

    fn note_shared(&self, key: &str, owner: OwnerToken) {
        let mut shared = self.inner.shared.lock();
        let keys = shared.entry(owner).or_default();
        if !keys.iter().any(|k| k == key) {
            keys.push(key.to_owned());
        }
    }

    fn forget_shared(&self, key: &str, owner: OwnerToken) {
        let mut shared = self.inner.shared.lock();
        if let Some(keys) = shared.get_mut(&owner) {
            keys.retain(|k| k != key);
            if keys.is_empty() {
                shared.remove(&owner);
            }
        }
    }

    /// One shared attempt. A waiting reader refused registers as waiting (for two heartbeats;
    /// it comes back within one): the next freed write lets it in before later writers
    /// (phase-fair, `read_phases.lua`), and wakes it.
    pub(super) async fn acquire_shared(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let names = Arc::new(self.inner.layout.names(req.key));
        let waiting = self.wait_ms(req) > 0;
        self.listen_first(waiting).await;
        let permits = req.side.permits().unwrap_or(0);
        // A permit a release handed to this waiter (hand_permit in handoff.lua) is held at once.
        if permits > 0
            && let Err(grant) = self.before_attempt(req)
        {
            self.note_shared(req.key, req.owner);
            return Ok(grant);
        }
        let mark = if waiting { millis(self.heartbeat() * 2) } else { 0 };
        let owner = req.owner.to_string();
        let mut conn = self.inner.conn.clone();
        let mut inv = scripts::ACQUIRE_SHARED.prepare_invoke();
        inv.key(names.lock()).key(names.waiters()).key(names.fence());
        inv.arg(&owner).arg(millis(req.lease)).arg(mark).arg(permits).arg(self.tag());
        // An answer that never comes may hide a grant: the release undoes it and marks the
        // owner done, so a late copy of the attempt grants nothing either.
        let cleanup = self.arm_shared(names, owner);
        let sent = Instant::now();
        let reply: Vec<i64> = inv.invoke_async(&mut conn).await.map_err(classify)?;
        cleanup.disarm();
        let (ok, value) = (reply.first().copied().unwrap_or(0), reply.get(1).copied().unwrap_or(-1));
        if permits > 0 {
            // A refused waiter's deadline is what a hand-over to it names.
            let deadline = if ok == 1 { 0 } else { reply.get(2).copied().unwrap_or(0) };
            self.inner.handoffs.answered(req.key, req.owner, ok == 1, deadline, sent);
        }
        let mut answer = attempt(ok, value, req.lease);
        if let Attempt::Acquired(grant) = &mut answer {
            self.note_shared(req.key, req.owner);
            grant.slot = reply.get(2).and_then(|s| u32::try_from(*s).ok());
        }
        Ok(self.refused(answer, waiting))
    }

    fn arm_shared(&self, names: Arc<KeyNames>, owner: String) -> Cleanup {
        let this = self.clone();
        Cleanup::arm("redis shared lock attempt", move || async move {
            this.release_shared_script(&names, &owner).await.map(drop)
        })
    }

    async fn release_shared_script(&self, names: &KeyNames, owner: &str) -> Result<(i64, String)> {
        let mut conn = self.inner.conn.clone();
        let hash = if matches!(self.inner.mode, Mode::Simple) { "0" } else { "1" };
        scripts::RELEASE_SHARED
            .get(conn.sharded())
            .key(names.lock())
            .key(names.queue())
            .key(names.waiters())
            .key(names.fence())
            .arg(owner)
            .arg(names.channel())
            .arg(millis(self.claim_window()))
            .arg(hash)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)
    }

    /// Release `owner`'s shared hold of `key`; the last reader hands the lock over.
    pub(super) async fn release_shared(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        let names = self.inner.layout.names(key);
        let (r, next) = self.release_shared_script(&names, &owner.to_string()).await?;
        self.forget_shared(key, owner);
        self.inner.handoffs.released(key, owner);
        // The lock or a permit handed to a waiter, maybe one of ours: it need not wait for the
        // message to come back.
        if r == 2 || !next.is_empty() {
            self.freed(key, &next);
        }
        Ok(r > 0)
    }

    /// Extend shared holds (`items`, all shared), one flag each.
    pub(super) async fn renew_shared(&self, items: &[&RenewItem<'_>]) -> Result<Vec<bool>> {
        let mut conn = self.inner.conn.clone();
        let mut out = Vec::with_capacity(items.len());
        // One script per item: on a cluster each lock may live in another slot, and shared
        // holds are few next to the exclusive ones the batches are for.
        for it in items {
            let flags: Vec<i64> = scripts::RENEW_SHARED
                .key(self.inner.layout.lock(it.key))
                .arg(it.owner.to_string())
                .arg(millis(it.lease))
                .invoke_async(&mut conn)
                .await
                .map_err(classify)?;
            let held = flags.first() == Some(&1);
            if !held {
                // A permit taken from a hand-over and now lost is nothing to remember.
                self.inner.handoffs.released(it.key, it.owner);
            }
            out.push(held);
        }
        Ok(out)
    }

    /// The readers of `key` when the lock itself is free.
    pub(super) async fn inspect_shared(&self, key: &str) -> Result<Option<LockInfo>> {
        let mut conn = self.inner.conn.clone();
        let (count, last, permits): (i64, i64, Vec<String>) = scripts::INSPECT_SHARED
            .key(self.inner.layout.lock(key))
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok((count > 0).then(|| {
            let mut info = LockInfo::held();
            info.readers = usize::try_from(count).ok();
            info.remaining = hint(last);
            info.permits = permits.chunks_exact(4).filter_map(permit_info).collect();
            info.permits.sort_by_key(|p| p.slot);
            info
        }))
    }
}

/// One permit of `inspect_shared.lua`'s list: owner token, `slot:fence`, ms left, and its
/// holder note after a `:` (empty for none).
fn permit_info(p: &[String]) -> Option<PermitInfo> {
    let (slot, fence) = p[1].split_once(':')?;
    let left = p[2].parse::<i64>().ok()?;
    let owner = LockInfo::short_owner(&p[0]);
    let holder = p[3].strip_prefix(':').map(str::to_owned);
    let info = PermitInfo::new(slot.parse().ok()?, FencingToken(fence.parse().ok()?), hint(left), owner);
    Some(info.with_holder(holder))
}
