//! What `RedisLock` hands out beyond the required calls: notifications, the wait set, notes,
//! the fence floor, records and the operator's list and evict.

use async_trait::async_trait;
use lock_core::backend::{
    Admin, Notes, Notify, RaiseFence, Record, RecordOp, Records, Subscription, WaitQueue, millis,
};
use lock_core::{FencingToken, LockError, OwnerToken, Result};

use super::RedisLock;
use super::script_calls::{cancel, evict_plain};
use crate::error::{NAME, classify};
use crate::options::Mode;
use crate::scripts;

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
