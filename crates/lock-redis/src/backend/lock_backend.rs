//! `RedisLock`'s `LockBackend` impl: the attempt by mode, release with its hand-over, batched
//! renewal, inspection, leaving the queue, notifications, notes and the fence floor.

use std::collections::HashMap;

use async_trait::async_trait;
use lock_core::backend::{
    AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RENEW_BATCH, Record, RecordOp, RenewItem,
    Subscription, millis,
};
use lock_core::{FencingToken, LockError, OwnerToken, Result};
use redis::cluster_routing::Slot;

use super::script_calls::{cancel, evict_plain, release_plain, release_simple};
use super::{RedisLock, hint};
use crate::call::Token;
use crate::error::{NAME, bad_reply, classify};
use crate::handoffs;
use crate::options::Mode;
use crate::scripts;
use lock_core::backend::{Admin, Notes, Notify, RaiseFence, Records, WaitQueue};

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

#[async_trait]
impl Notify for RedisLock {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        let Some(n) = self.notifier().await? else { return Ok(None) };
        Ok(Some(n.subscribe(key).await.map_err(classify)?))
    }

    fn listening(&self, key: &str) -> bool {
        self.inner.notifier.get().is_some_and(|n| n.listening(key))
    }
}

#[async_trait]
impl WaitQueue for RedisLock {
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        let (conn, names) = (self.inner.conn.clone(), self.inner.layout.names(key));
        let claim = millis(self.claim_window());
        // The wait ended without a guard: what was noted for it goes, but not a hand-over this
        // owner took here for another acquisition (it nests), which the script must not free.
        self.inner.handoffs.forget(key, owner);
        let taken = self.inner.handoffs.taken(key, owner).map(|f| f.to_string()).unwrap_or_default();
        let token = owner.to_string();
        // An empty nonce: leave the wait set and free a hold handed to this waiter and not
        // taken; never touch a hold otherwise.
        cancel(self.inner.mode, conn, &names, &token, "", claim, self.tag(), &taken).await
    }
}

#[async_trait]
impl Notes for RedisLock {
    /// `set_note.lua`: the note goes inside the hold (after the value's owner token and nonce,
    /// or the hash field `m`), so it leaves with the hold.
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let mut conn = self.inner.conn.clone();
        let stored: i64 = scripts::SET_NOTE
            .key(self.inner.layout.lock(key))
            .arg(owner.to_string())
            .arg(note)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(stored == 1)
    }

    /// One read of the hold itself (`GET`, or `HMGET` of the marker and note fields): what it
    /// returns is the current holder's note or nothing.
    async fn note(&self, key: &str) -> Result<Option<String>> {
        let lock = self.inner.layout.lock(key);
        let mut conn = self.inner.conn.clone();
        if matches!(self.inner.mode, Mode::Reentrant | Mode::Fair) {
            // A hold made by a hand-over starts without a note (handoff.lua writes a new hash).
            return redis::cmd("HGET").arg(&lock).arg("m").query_async(&mut conn).await.map_err(classify);
        }
        let value: Option<Vec<u8>> =
            redis::cmd("GET").arg(&lock).query_async(&mut conn).await.map_err(classify)?;
        Ok(value.as_deref().and_then(note_of_value))
    }
}

#[async_trait]
impl RaiseFence for RedisLock {
    /// `raise_fence.lua`, for the holder only; a counter above `floor` is left alone.
    async fn raise_fence(&self, key: &str, owner: OwnerToken, floor: FencingToken) -> Result<bool> {
        // The counter is a Redis integer: a floor it cannot hold is no token this backend drew.
        if i64::try_from(floor.0).is_err() {
            return Err(LockError::InvalidConfig {
                reason: format!("fence floor {} is above a redis counter's range", floor.0),
            });
        }
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        let held: i64 = scripts::RAISE_FENCE
            .key(names.lock())
            .key(names.fence())
            .arg(owner.to_string())
            .arg(floor.0)
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(held == 1)
    }
}

#[async_trait]
impl Records for RedisLock {
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        self.record_op(key, op).await
    }
}

#[async_trait]
impl Admin for RedisLock {
    /// `SCAN` for the lock names (held exclusively) and the shared-hold hashes (readers,
    /// permits) of the keys starting with `prefix`; both expire with their last hold.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let Some(pattern) = self.inner.layout.lock_pattern(prefix) else {
            return Err(lock_core::backend::unsupported(NAME, "listing locks in an interop mode"));
        };
        let mut conn = self.inner.conn.clone();
        if conn.sharded() {
            return Err(lock_core::backend::unsupported(NAME, "listing the locks of a Redis Cluster"));
        }
        let mut keys = std::collections::BTreeSet::new();
        for (pattern, suffix) in [(pattern.clone(), ""), (format!("{pattern}:s"), ":s")] {
            let mut cursor = 0_u64;
            loop {
                let (next, names): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await
                    .map_err(classify)?;
                let found =
                    names.iter().filter_map(|n| self.inner.layout.key_of_lock(n.strip_suffix(suffix)?));
                keys.extend(found.filter(|k| k.starts_with(prefix)));
                if next == 0 || keys.len() >= limit {
                    break;
                }
                cursor = next;
            }
        }
        Ok(keys.into_iter().take(limit).collect())
    }

    /// `evict.lua`: the hold with `fence` goes, whoever holds it, and the next waiter gets the
    /// lock. The interop modes: `evict_plain.lua`, for a hold of ours only (the other library's
    /// client draws no fence, so none names its hold).
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let names = self.inner.layout.names(key);
        let mut conn = self.inner.conn.clone();
        if self.inner.mode.is_interop() {
            return evict_plain(conn, &names, fence).await;
        }
        let (evicted, next): (i64, String) = scripts::EVICT
            .get(conn.sharded())
            .key(names.lock())
            .key(names.waiters())
            .key(names.queue())
            .key(names.fence())
            .arg(fence.0)
            .arg(names.channel())
            .arg(millis(self.claim_window()))
            .invoke_async(&mut conn)
            .await
            .map_err(classify)?;
        if evicted == 1 {
            self.freed(key, &next);
        }
        Ok(evicted == 1)
    }
}

/// The note in a string-layout hold (`set_note.lua`): owner token and nonce (64 hex digits),
/// `:`, the note. Anything else (no note, a hand-over marker, the other library's value in
/// the interop modes) has none.
fn note_of_value(v: &[u8]) -> Option<String> {
    let (head, rest) = (v.get(..64)?, v.get(64..)?);
    let note = rest.strip_prefix(b":")?;
    if !head.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    String::from_utf8(note.to_vec()).ok()
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
