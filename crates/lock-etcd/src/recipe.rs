//! The etcd v3 lock recipe (etcd's own `concurrency.Mutex`): a key per attempt under the
//! client's lease, ownership by the lowest create revision under the lock's prefix, each waiter
//! watching only the key created just before its own.

use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use lock_core::backend::{AcquireRequest, Attempt, Grant};
use lock_core::{FencingToken, LeaseSignal, LostReason, OwnerToken, Result};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::cleanup;
use crate::error::{lease_gone, lock_error, temporary};
use crate::session::{Hold, HoldKey, Inner, Session};

/// Pause before watching our own key again after the watch failed (connection trouble).
const WATCH_RETRY: Duration = Duration::from_millis(100);

/// `key` as one segment of an etcd key: `%` and `/` percent-encoded, so that no key's prefix
/// `<prefix>/<key>/` can contain another key's (`a` and `a/b` stay apart), and the encoding is
/// reversible.
pub fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for c in key.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
    out
}

fn granted(fence: i64) -> Attempt {
    Attempt::Acquired(Grant { fence: FencingToken(u64::try_from(fence).unwrap_or(0)), lease: None })
}

/// The key ranges of a transaction's answer, in the order of its operations.
fn ranges(resp: &TxnResponse) -> Vec<Vec<KeyValue>> {
    resp.op_responses()
        .into_iter()
        .map(|r| match r {
            TxnOpResponse::Get(mut g) => g.take_kvs(),
            _ => Vec::new(),
        })
        .collect()
}

/// The first key (lowest create revision) under a lock's prefix: its holder.
fn first_created(dir: &str) -> TxnOp {
    TxnOp::get(dir, Some(GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1)))
}

impl Inner {
    /// `<prefix>/<encode_key(key)>/`: every attempt's key on `key` starts with it.
    pub fn dir(&self, key: &str) -> String {
        format!("{}/{}/", self.cfg.prefix, encode_key(key))
    }

    /// A nested acquisition by a current holder: the outer hold's fence.
    fn nest(&self, key: &str, owner: OwnerToken, signal: &LeaseSignal) -> Option<i64> {
        let mut holds = self.holds.lock();
        let hk = (key.to_owned(), owner);
        let h = holds.get_mut(&hk)?;
        if h.is_lost() {
            // Told lost by the core (a refused renewal), not by us: no release will come for
            // it, and its key would stay queued ahead of the new attempt.
            let old = holds.remove(&hk);
            drop(holds);
            if let Some(old) = old {
                self.delete_lost(old);
            }
            return None;
        }
        h.count += 1;
        if !h.signals.iter().any(|s| s.same_as(signal)) {
            h.signals.push(signal.clone());
        }
        Some(h.fence)
    }

    /// One acquisition: nest, or put our key and wait (until `req.wait_until`) to be first.
    pub async fn acquire(self: &Arc<Self>, req: &AcquireRequest<'_>) -> Result<Attempt> {
        if let Some(fence) = self.nest(req.key, req.owner, req.signal) {
            return Ok(granted(fence));
        }
        let mut session = self.session().await?;
        let dir = self.dir(req.key);
        let mut kv = self.client.kv_client();
        let mut regranted = false;
        // Put our key under the lease unless it exists (it cannot: the name is new), and read
        // the holder in the same transaction: one round trip for a free lock.
        let (name, fence, cleanup, holder) = loop {
            let n = self.nonce.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("{dir}{:016x}_{n:x}", session.lease);
            let cleanup = cleanup::guard(&self.client, name.clone());
            let txn = Txn::new()
                .when([Compare::create_revision(name.as_str(), CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(name.as_str(), "", Some(PutOptions::new().with_lease(session.lease))),
                    first_created(&dir),
                ])
                .or_else([TxnOp::get(name.as_str(), None), first_created(&dir)]);
            match kv.txn(txn).await {
                Ok(resp) => {
                    let rs = ranges(&resp);
                    let fence = if resp.succeeded() {
                        resp.header().map_or(0, |h| h.revision())
                    } else {
                        rs.first().and_then(|r| r.first()).map_or(0, KeyValue::create_revision)
                    };
                    let holder = rs.get(1).and_then(|r| r.first()).map(|kv| kv.key().to_vec());
                    break (name, fence, cleanup, holder);
                }
                // The lease ended under us (revoked, expired): once more under a new one.
                Err(e) if lease_gone(&e) && !regranted => {
                    cleanup.disarm();
                    self.lease_ended(session.generation);
                    session = self.session().await?;
                    regranted = true;
                }
                Err(e) => return Err(lock_error(e)),
            }
        };
        if fence <= 0 {
            return Err(temporary("lock key put answered without a revision"));
        }
        if holder.as_deref() != Some(name.as_bytes()) {
            if req.wait_until.is_none() {
                return Ok(Attempt::Held { retry_after: None }); // the cleanup deletes our key
            }
            if let Some(held) = self.wait_turn(req, &session, &dir, &name, fence).await? {
                return Ok(held);
            }
        }
        // A grant on a lease whose last confirmation is too old is no grant: give it up, and
        // let the next attempt run on a new lease.
        if Instant::now() >= session.give_up_at() {
            return Err(temporary("etcd lease not confirmed within its ttl"));
        }
        cleanup.disarm();
        let hk = (req.key.to_owned(), req.owner);
        let watch = self.watch_own_key(session.generation, hk.clone(), name.clone(), fence);
        let hold = Hold {
            name,
            fence,
            count: 1,
            generation: session.generation,
            signals: vec![req.signal.clone()],
            watch: Some(watch),
        };
        let old = self.holds.lock().insert(hk, hold);
        if let Some(old) = old {
            // Only a lost hold can be replaced (a live one nests): its key goes, by its name.
            self.delete_lost(old);
        }
        Ok(granted(fence))
    }

    /// Wait until no key created before ours is left: `Ok(None)` once ours is first,
    /// `Ok(Some(Held))` at the deadline. Each round reads our key and the last key created
    /// before it, then watches only that one (and ours) for a delete.
    async fn wait_turn(
        &self,
        req: &AcquireRequest<'_>,
        session: &Session,
        dir: &str,
        name: &str,
        fence: i64,
    ) -> Result<Option<Attempt>> {
        let mut kv = self.client.kv_client();
        let mut watcher = self.client.watch_client();
        loop {
            let Some(deadline) = req.wait_until.filter(|d| Instant::now() < *d) else {
                return Ok(Some(Attempt::Held { retry_after: None }));
            };
            let before = GetOptions::new()
                .with_prefix()
                .with_max_create_revision(fence - 1)
                .with_sort(SortTarget::Create, SortOrder::Descend)
                .with_limit(1)
                .with_keys_only();
            let txn = Txn::new().and_then([TxnOp::get(name, Some(GetOptions::new().with_keys_only())), TxnOp::get(dir, Some(before))]);
            let resp = kv.txn(txn).await.map_err(lock_error)?;
            let rev = resp.header().map_or(0, |h| h.revision());
            let rs = ranges(&resp);
            if !rs.first().is_some_and(|r| r.iter().any(|k| k.create_revision() == fence)) {
                // Deleted behind our back, or the lease ended; nothing left to clean up.
                return Err(temporary("own lock key vanished while waiting"));
            }
            let Some(predecessor) = rs.get(1).and_then(|r| r.first()).map(|k| k.key().to_vec()) else {
                return Ok(None);
            };
            if session.is_ended() {
                return Err(temporary("etcd lease ended while waiting"));
            }
            // From the revision after the read: a delete in between is still seen.
            let opts = || WatchOptions::new().with_start_revision(rev + 1).with_filters([WatchFilterType::NoPut]);
            let mut stream = watcher.watch(predecessor, Some(opts())).await.map_err(lock_error)?;
            stream.watch(name, Some(opts())).await.map_err(lock_error)?;
            let woke = async {
                loop {
                    match stream.message().await {
                        Ok(Some(m)) if m.canceled() => return Ok(()),
                        Ok(Some(m)) if m.events().iter().any(|e| e.event_type() == EventType::Delete) => {
                            return Ok(());
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => return Err(temporary("watch stream closed while waiting")),
                        Err(e) => return Err(lock_error(e)),
                    }
                }
            };
            tokio::select! {
                r = woke => {
                    r?;
                    #[cfg(feature = "testing")]
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                }
                _ = tokio::time::sleep_until(deadline) => return Ok(Some(Attempt::Held { retry_after: None })),
            }
        }
    }

    /// Watch our own key while held: deleted behind our back (a foreign delete, the lease
    /// revoked or expired) -> lost. Holds no `Inner` between events, so dropping every
    /// `EtcdLock` still revokes the lease.
    fn watch_own_key(self: &Arc<Self>, generation: u64, hk: HoldKey, name: String, fence: i64) -> AbortHandle {
        let weak = Arc::downgrade(self);
        let client = self.client.clone();
        let task = self.runtime.spawn(async move {
            let lose = |reason: LostReason| {
                if let Some(inner) = weak.upgrade() {
                    inner.lose(&hk, &name, reason);
                }
            };
            let mut watcher = client.watch_client();
            // From our own create revision: a delete before the watch starts is still seen.
            let mut from = fence;
            loop {
                let opts = WatchOptions::new().with_start_revision(from).with_filters([WatchFilterType::NoPut]);
                let mut stream = match watcher.watch(name.as_str(), Some(opts)).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(error = %e, "watching own lock key failed; retrying");
                        tokio::time::sleep(WATCH_RETRY).await;
                        continue;
                    }
                };
                loop {
                    match stream.message().await {
                        Ok(Some(m)) if m.events().iter().any(|e| e.event_type() == EventType::Delete) => {
                            let ended = weak.upgrade().is_none_or(|i| {
                                let s = i.current();
                                s.generation != generation || s.is_ended()
                            });
                            return lose(if ended { LostReason::SessionEnded } else { LostReason::NotOwner });
                        }
                        Ok(Some(m)) if m.canceled() => {
                            // Compacted past `from`: is the key still ours?
                            match client.kv_client().get(name.as_str(), None).await {
                                Ok(r) if r.kvs().iter().any(|k| k.create_revision() == fence) => {
                                    from = r.header().map_or(from, |h| h.revision() + 1);
                                    break;
                                }
                                Ok(_) => return lose(LostReason::NotOwner),
                                Err(_) => break,
                            }
                        }
                        // Created, progress: nothing happened to our key.
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => {
                            tokio::time::sleep(WATCH_RETRY).await;
                            break;
                        }
                    }
                }
            }
        });
        task.abort_handle()
    }
}

#[cfg(test)]
mod tests {
    use super::encode_key;

    #[test]
    fn keys_are_one_segment() {
        assert_eq!(encode_key("a/b"), "a%2Fb");
        assert_eq!(encode_key("50%/x"), "50%25%2Fx");
        assert_ne!(encode_key("a%2Fb"), encode_key("a/b"));
        assert_eq!(encode_key("plain-key:1"), "plain-key:1");
    }
}
