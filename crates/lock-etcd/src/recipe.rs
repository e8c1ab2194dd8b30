//! The etcd v3 lock recipe (etcd's own `concurrency.Mutex`): a key per attempt under the
//! client's lease, ownership by the lowest create revision under the lock's prefix, each waiter
//! watching only the key created just before its own.

use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;

use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse, WatchFilterType, WatchOptions,
};
use lock_core::backend::{AcquireRequest, Attempt, Grant};
use lock_core::{FencingToken, LeaseSignal, OwnerToken, Result};
use tokio::time::Instant;

use crate::cleanup;
use crate::cleanup::AttemptKeys;
use crate::error::{bounded, lease_gone, lock_error, temporary};
use crate::session::{Hold, Inner, Session};

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
    let opts = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    TxnOp::get(dir, Some(opts.with_limit(1).with_keys_only()))
}

/// The last key (highest create revision) under a lock's prefix: the end of its queue.
fn last_created(dir: &str) -> TxnOp {
    let opts = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Descend);
    TxnOp::get(dir, Some(opts.with_limit(1).with_keys_only()))
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
        let timeout = self.cfg.request_timeout;
        let mut regranted = false;
        // Put our key under the lease unless it or its cancel marker exists, and read the
        // holder in the same transaction: one round trip for a free lock. The operations apply
        // in order, so the last key created before the put is our predecessor in the queue.
        let (name, fence, cleanup, holder, predecessor) = loop {
            let n = self.nonce.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("{dir}{:016x}_{n:x}", session.lease);
            let keys = AttemptKeys {
                marker: format!("{}/%cancelled/{:016x}_{n:x}", self.cfg.prefix, session.lease),
                name: name.clone(),
                lease: session.lease,
            };
            let mut cleanup = cleanup::guard(&self.client, keys.clone(), timeout, session.life());
            let txn = Txn::new()
                .when([
                    Compare::create_revision(name.as_str(), CompareOp::Equal, 0),
                    Compare::create_revision(keys.marker.as_str(), CompareOp::Equal, 0),
                ])
                .and_then([
                    last_created(&dir),
                    TxnOp::put(name.as_str(), "", Some(PutOptions::new().with_lease(session.lease))),
                    first_created(&dir),
                ]);
            match bounded(timeout, kv.txn(txn)).await {
                Ok(resp) => {
                    cleanup::answered(&mut cleanup, &self.client, name.clone(), timeout, session.life());
                    if !resp.succeeded() {
                        return Err(temporary("lock key or its cancel marker exists already"));
                    }
                    let fence = resp.header().map_or(0, |h| h.revision());
                    let mut rs =
                        ranges(&resp).into_iter().map(|r| r.into_iter().next().map(|kv| kv.key().to_vec()));
                    let predecessor = rs.next().flatten();
                    let holder = rs.nth(1).flatten();
                    break (name, fence, cleanup, holder, predecessor);
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
            let held = match req.wait_until {
                None => Some(Attempt::Held { retry_after: None }),
                Some(_) => self.wait_turn(req, &session, &dir, (&name, fence), predecessor).await?,
            };
            if let Some(held) = held {
                // Our key goes before the answer: left queued a moment longer, it would be
                // taken for the holder by the next client to look. But the answer waits for
                // one request at most, like the put: past that (the server unreachable, or
                // this future dropped) the delete goes on in the background while the lease
                // lives, and the caller gets its answer in time.
                let _ = tokio::time::timeout(timeout, cleanup.run_now()).await;
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
        let hold =
            Hold { name, fence, count: 1, generation: session.generation, signals: vec![req.signal.clone()] };
        let old = self.holds.lock().insert(hk, hold);
        session.held();
        if let Some(old) = old {
            // Only a lost hold can be replaced (a live one nests): its key goes, by its name.
            self.delete_lost(old);
        }
        Ok(granted(fence))
    }

    /// Wait until no key created before ours is left: `Ok(None)` once ours is first,
    /// `Ok(Some(Held))` at the deadline. Each round watches only the last key created before
    /// ours (and ours, should the lease end) for a delete. `known`: that predecessor as the
    /// put's own transaction read it.
    async fn wait_turn(
        &self,
        req: &AcquireRequest<'_>,
        session: &Session,
        dir: &str,
        (name, fence): (&str, i64),
        known: Option<Vec<u8>>,
    ) -> Result<Option<Attempt>> {
        let timeout = self.cfg.request_timeout;
        let mut watcher = self.client.watch_client();
        let mut candidate = known;
        loop {
            let Some(deadline) = req.wait_until.filter(|d| Instant::now() < *d) else {
                return Ok(Some(Attempt::Held { retry_after: None }));
            };
            if session.is_ended() {
                return Err(temporary("etcd lease ended while waiting"));
            }
            let predecessor = match candidate.take() {
                Some(p) => p,
                None => match self.predecessor(dir, name, fence).await? {
                    Some((p, _)) => p,
                    None => return Ok(None),
                },
            };
            // Watch from now, then read. (A watch from a past revision is served by the
            // server's catch-up loop, every 100 ms: a slow hand-over.) A delete before the
            // watch started shows in the read, one after it in the watch.
            let opts = || WatchOptions::new().with_filters([WatchFilterType::NoPut]);
            let watch = watcher.watch(predecessor.clone(), Some(opts()));
            let mut stream = bounded(timeout, watch).await.map_err(lock_error)?;
            stream.watch(name, Some(opts())).await.map_err(lock_error)?;
            let mut created = 0;
            let mut woke = false;
            let started = async {
                while created < 2 && !woke {
                    match stream.message().await.map_err(lock_error)? {
                        Some(m) => {
                            created += usize::from(m.created());
                            woke = m.canceled()
                                || m.events().iter().any(|e| e.event_type() == EventType::Delete);
                        }
                        None => return Err(temporary("watch stream closed while waiting")),
                    }
                }
                Ok(())
            };
            match tokio::time::timeout(timeout, started).await {
                Ok(r) => r?,
                Err(_) => return Err(temporary("watch not created in time")),
            }
            if woke {
                continue;
            }
            let head = match self.predecessor(dir, name, fence).await? {
                None => return Ok(None),
                Some((p, _)) if p != predecessor => {
                    candidate = Some(p);
                    continue;
                }
                Some((_, head)) => head,
            };
            // `Ok(true)`: the predecessor was deleted; `Ok(false)`: look again (watch cancelled).
            let woke = async {
                loop {
                    match stream.message().await {
                        Ok(Some(m)) if m.canceled() => return Ok(false),
                        Ok(Some(m)) => {
                            let deleted = |key: &[u8]| {
                                m.events().iter().any(|e| {
                                    e.event_type() == EventType::Delete
                                        && e.kv().is_some_and(|kv| kv.key() == key)
                                })
                            };
                            if deleted(name.as_bytes()) {
                                return Err(temporary("own lock key vanished while waiting"));
                            }
                            if deleted(&predecessor) {
                                return Ok(true);
                            }
                        }
                        Ok(None) => return Err(temporary("watch stream closed while waiting")),
                        Err(e) => return Err(lock_error(e)),
                    }
                }
            };
            tokio::select! {
                r = woke => {
                    let predecessor_gone = r?;
                    #[cfg(feature = "testing")]
                    self.wakeups.fetch_add(1, Ordering::Relaxed);
                    // The holder itself was our predecessor: nothing older is left, and a key
                    // created later queues behind ours. Our own key's delete, had it come
                    // first, would have come first on this stream (events are sent in revision
                    // order): the lock is ours without another read.
                    if predecessor_gone && head {
                        return Ok(None);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return Ok(Some(Attempt::Held { retry_after: None })),
            }
        }
    }

    /// The last key created before ours (`fence`) under `dir` and whether it is the holder (the
    /// first key), or `None` when ours is first.
    ///
    /// # Errors
    /// Temporary when our own key is gone (deleted behind our back, or its lease ended).
    async fn predecessor(&self, dir: &str, name: &str, fence: i64) -> Result<Option<(Vec<u8>, bool)>> {
        let before = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(fence - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let own = TxnOp::get(name, Some(GetOptions::new().with_keys_only()));
        let txn = Txn::new().and_then([own, TxnOp::get(dir, Some(before)), first_created(dir)]);
        let mut kv = self.client.kv_client();
        let resp = bounded(self.cfg.request_timeout, kv.txn(txn)).await.map_err(lock_error)?;
        let rs = ranges(&resp);
        if !rs.first().is_some_and(|r| r.iter().any(|k| k.create_revision() == fence)) {
            return Err(temporary("own lock key vanished while waiting"));
        }
        let head = rs.get(2).and_then(|r| r.first()).map(KeyValue::key);
        Ok(rs.get(1).and_then(|r| r.first()).map(|k| (k.key().to_vec(), Some(k.key()) == head)))
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
