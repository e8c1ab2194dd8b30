//! `RedisLock`'s `LockBackend` impl: the attempt by mode, release with its hand-over, batched
//! renewal and inspection (what it hands out besides is in `capabilities.rs`).

use std::collections::HashMap;

use async_trait::async_trait;
use lock_core::backend::{
    AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RENEW_BATCH, RenewItem, millis,
};
use lock_core::{FencingToken, OwnerToken, Result};
use redis::cluster_routing::Slot;

use super::script_calls::{release_plain, release_simple};
use super::{RedisLock, hint};
use crate::call::Token;
use crate::error::{NAME, bad_reply, classify};
use crate::handoffs;
use crate::options::Mode;
use crate::scripts;
use lock_core::backend::{Notify, WaitQueue};

#[async_trait]
impl LockBackend for RedisLock {
    fn name(&self) -> &'static str {
        NAME
    }

    /// `redis://host:port/db?prefix=...`, without credentials; the interop modes add
    /// `&mode=...` (their keys are another lock space).
    fn identity(&self) -> String {
        let prefix = self.inner.layout.prefix();
        let mode = self.inner.mode;
        let space = if mode.is_interop() {
            format!("prefix={prefix}&mode={mode}")
        } else {
            format!("prefix={prefix}")
        };
        self.inner.target.identity(&space)
    }

    fn capabilities(&self) -> Capability {
        // Capability is non-exhaustive outside lock-core: start from NONE and set fields.
        // Not failover_safe: replication to replicas is asynchronous, so a promoted replica can
        // miss the latest grants and fence increments (see the README).
        let mut c = Capability::NONE;
        c.renew = true;
        c.fencing = true;
        c.reentrant = matches!(self.inner.mode, Mode::Reentrant | Mode::Fair);
        c.fair = self.inner.mode == Mode::Fair;
        // A release grants the next waiter its hold in advance (handoffs.rs).
        c.early_grants = !self.inner.mode.is_interop();
        // Readers in a hash next to the lock (shared.rs); the other library's clients would
        // not respect them.
        c.shared = !self.inner.mode.is_interop();
        // A semaphore's permits, shared holds of one key with a slot each (shared.rs).
        c.permits = c.shared;
        // An upgrade is a writer whose own read does not count (handoff.lua).
        c.upgrade = c.shared;
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        #[cfg(feature = "testing")]
        self.inner.attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let attempt = match self.inner.mode {
            _ if req.side.is_shared() => self.acquire_shared(req).await?,
            Mode::Simple => self.acquire_simple(req).await?,
            Mode::Reentrant | Mode::Fair => self.acquire_hash(req).await?,
            Mode::RedisPy | Mode::PythonRedisLock => self.acquire_plain(req).await?,
        };
        if let (Some(ack), Attempt::Acquired(_)) = (self.inner.replica_ack, attempt) {
            self.replicated(req, ack).await?;
        }
        Ok(attempt)
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        if self.is_shared(key, owner) {
            return self.release_shared(key, owner).await;
        }
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        let mut buf = [0; 32];
        let token = owner.encode(&mut buf);
        let claim = millis(self.claim_window());
        let (r, next): (i64, String) = match self.inner.mode {
            Mode::Simple => release_simple(conn, &names, token, claim).await?,
            // 2 = freed, as the other release scripts say; nobody is named next.
            Mode::RedisPy | Mode::PythonRedisLock => {
                (2 * release_plain(conn, &names, token).await?, String::new())
            }
            Mode::Reentrant | Mode::Fair => scripts::RELEASE_HASH
                .get(conn.sharded())
                .key(names.lock())
                .key(names.queue())
                .key(names.waiters())
                .key(names.fence())
                .arg(token)
                .arg(names.channel())
                .arg(claim)
                .arg(Token(OwnerToken::random()))
                .invoke_async(&mut conn)
                .await
                .map_err(classify)?,
        };
        if r != 1 {
            // A hold taken from a hand-over ends with its last release (or was not ours).
            self.inner.handoffs.released(key, owner);
        }
        if r == 2 {
            self.freed(key, &next);
        }
        Ok(r > 0)
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        if self.inner.shared.lock().is_empty() {
            return self.renew_exclusive(items).await;
        }
        let (shared, exclusive): (Vec<usize>, Vec<usize>) =
            (0..items.len()).partition(|&i| self.is_shared(items[i].key, items[i].owner));
        let renewed = self.renew_shared(&shared.iter().map(|&i| &items[i]).collect::<Vec<_>>()).await?;
        let picked: Vec<RenewItem<'_>> = exclusive.iter().map(|&i| items[i]).collect();
        let mut out = vec![false; items.len()];
        for (i, f) in shared.into_iter().zip(renewed) {
            out[i] = f;
        }
        for (i, f) in exclusive.into_iter().zip(self.renew_exclusive(&picked).await?) {
            out[i] = f;
        }
        Ok(out)
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        let mut inv = scripts::INSPECT.prepare_invoke();
        inv.key(names.lock()).key(names.fence());
        // Interop modes: there is no queue, and the script shows a fence only for a hold of
        // ours (the other library's client draws none).
        if !self.inner.mode.is_interop() {
            inv.key(names.queue());
        }
        let (held, pttl, owner, fence, waiters): (i64, i64, Vec<u8>, String, i64) =
            inv.invoke_async(&mut conn).await.map_err(classify)?;
        // The other library's token need not be UTF-8.
        let owner = String::from_utf8_lossy(&owner).into_owned();
        let mut info = if held == 1 { LockInfo::held() } else { LockInfo::free() };
        if held == 1 {
            info.remaining = hint(pttl);
            info.fence = fence.parse::<u64>().ok().map(FencingToken);
            info.owner = Some(owner).filter(|o| !o.is_empty()).map(|o| LockInfo::short_owner(&o));
        }
        info.waiters = usize::try_from(waiters).ok();
        if held != 1
            && !self.inner.mode.is_interop()
            && let Some(mut readers) = self.inspect_shared(key).await?
        {
            readers.waiters = info.waiters;
            return Ok(readers);
        }
        Ok(info)
    }

    /// Pub/sub release messages, unless the builder turned them off.
    fn notify(&self) -> Option<&dyn Notify> {
        self.inner.notifications.then_some(self as &dyn Notify)
    }

    /// Waiters keep their place in the wait set (fair: the queue) between attempts, so a
    /// release wakes only the one it hands the lock to; the core does the waiting. Not in the
    /// interop modes: the other library's clients would ignore a reservation, so there is no
    /// wait set, and notifications cover our own releases only (waiters also poll).
    fn queue(&self) -> Option<&dyn WaitQueue> {
        (!self.inner.mode.is_interop()).then_some(self as &dyn WaitQueue)
    }

    // Notes live inside the hold and the fence counter is ours in every mode (see
    // set_note.lua, raise_fence.lua); neither changes what the other library reads.
    // A number and a set next to nothing else (records.rs).
    lock_core::backend::hand_out!(notes, fences, records, admin);
}

impl RedisLock {
    /// Extend exclusive holds, batched per slot.
    async fn renew_exclusive(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let script = match self.inner.mode {
            // A plain string whose value starts with the owner token, in the interop modes too.
            Mode::Simple | Mode::RedisPy | Mode::PythonRedisLock => &*scripts::RENEW_SIMPLE,
            Mode::Reentrant | Mode::Fair => &*scripts::RENEW_HASH,
        };
        let mut out = vec![false; items.len()];
        let mut conn = self.inner.conn.clone();
        let locks: Vec<String> = items.iter().map(|it| self.inner.layout.lock(it.key)).collect();
        // On a cluster one script runs in one slot: each slot's keys go in their own batches.
        let groups: Vec<Vec<usize>> = if conn.sharded() {
            let mut by_slot: HashMap<Slot, Vec<usize>> = HashMap::new();
            for (i, lock) in locks.iter().enumerate() {
                by_slot.entry(Slot::for_key(lock)).or_default().push(i);
            }
            by_slot.into_values().collect()
        } else {
            vec![(0..items.len()).collect()]
        };
        for chunk in groups.iter().flat_map(|g| g.chunks(RENEW_BATCH)) {
            let mut inv = script.prepare_invoke();
            for &i in chunk {
                inv.key(&locks[i]).arg(Token(items[i].owner)).arg(millis(items[i].lease));
            }
            let flags: Vec<i64> = inv.invoke_async(&mut conn).await.map_err(classify)?;
            if flags.len() != chunk.len() {
                return Err(bad_reply("the renew script"));
            }
            for (&i, f) in chunk.iter().zip(flags) {
                out[i] = f == 1;
                if !out[i] {
                    // A hold taken from a hand-over and now lost is nothing to remember.
                    self.inner.handoffs.released(items[i].key, items[i].owner);
                }
            }
        }
        Ok(out)
    }

    /// After a release freed `key` with the hand-over `next` (its payload, '' for nobody):
    /// this client's own waiters need not wait for the message to come back; only the one the
    /// lock was handed to wakes, and takes the hold if it waits here.
    pub(super) fn freed(&self, key: &str, next: &str) {
        let Some(n) = self.inner.notifier.get() else { return };
        let next = match handoffs::parse(next) {
            Some((waiter, handed, _)) => {
                self.inner.handoffs.handed_if_waiting(key, waiter, handed);
                next.get(..32)
            }
            None => None,
        };
        n.notify_next(key, next);
    }
}
