//! The etcd v3 lock recipe (etcd's own `concurrency.Mutex`): a key per attempt under the
//! client's lease (a waiter's under its short waiting lease until it is first), ownership by the
//! lowest create revision under the lock's prefix, each waiter watching only the key created
//! just before its own.

use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use lock_core::backend::queue::{self, Place, QueueHold, QueueHolds, QueueStore, Watched};
use lock_core::backend::{AcquireRequest, Attempt, Cleanup, Side};
use lock_core::{Result, async_trait};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cleanup;
use crate::cleanup::AttemptKeys;
use crate::error::{bounded, lease_gone, lock_error, temporary};
use crate::keys::{AHEAD_MAX, attempt_ops, first_created, ranges, side_dir, waits_for};
use crate::notify::{Mark, PrefixWatch, Woken};
use crate::session::{Inner, Session, WaitingLease};

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

impl Inner {
    /// `<prefix>/<encode_key(key)>/`: every attempt's key on `key` starts with it.
    pub fn dir(&self, key: &str) -> String {
        format!("{}/{}/", self.cfg.prefix, encode_key(key))
    }

    /// One acquisition: nest, or put our key and wait (until `req.wait_until`) to be first.
    pub async fn acquire(self: &Arc<Self>, req: &AcquireRequest<'_>) -> Result<Attempt> {
        queue::acquire(&Queue(self), req).await
    }

    /// The key an attempt of `side` created as `fence` under `dir` waits for, and whether it
    /// is the holder (the first key), or `None` when the attempt holds: for a writer or a mutex
    /// the last key created before ours; for a reader the first writer's created before ours
    /// (never taken for the holder: another writer may come after it).
    ///
    /// # Errors
    /// Temporary when our own key is gone (deleted behind our back, or its lease ended).
    async fn predecessor(
        &self,
        dir: &str,
        side: Side,
        name: &str,
        fence: i64,
    ) -> Result<Option<(Vec<u8>, bool)>> {
        let order = if side.is_shared() { SortOrder::Ascend } else { SortOrder::Descend };
        let before = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(fence - 1)
            .with_sort(SortTarget::Create, order)
            .with_limit(1)
            .with_keys_only();
        let own = TxnOp::get(name, Some(GetOptions::new().with_keys_only()));
        let ahead = TxnOp::get(waits_for(dir, side), Some(before));
        let txn = Txn::new().and_then([own, ahead, first_created(dir)]);
        #[cfg(feature = "testing")]
        self.predecessor_reads.fetch_add(1, Ordering::Relaxed);
        let mut kv = self.client.kv_client();
        let resp = bounded(self.cfg.conn.request_timeout, kv.txn(txn)).await.map_err(lock_error)?;
        let rs = ranges(&resp);
        if !rs.first().is_some_and(|r| r.iter().any(|k| k.create_revision() == fence)) {
            return Err(temporary("own lock key vanished while waiting"));
        }
        let head = rs.get(2).and_then(|r| r.first()).map(KeyValue::key).filter(|_| !side.is_shared());
        Ok(rs.get(1).and_then(|r| r.first()).map(|k| (k.key().to_vec(), Some(k.key()) == head)))
    }
}

/// The store calls of the shared queue recipe, for one acquisition.
pub(crate) struct Queue<'a>(pub(crate) &'a Arc<Inner>);

/// One attempt's key: the lease it was put under, its name and create revision, and the
/// cleanup that deletes it unless the attempt ends in a grant.
pub(crate) struct Entry {
    session: Arc<Session>,
    /// The waiting lease, while the key is queued on it (promoted to the session lease when it
    /// becomes the head).
    waiting: Option<Arc<WaitingLease>>,
    /// First, known from the watch: the next look promotes the key and grants it.
    first: bool,
    /// The kind of hold asked for.
    side: Side,
    dir: String,
    name: String,
    fence: i64,
    cleanup: Cleanup,
    /// The prefix's watch marked before the put (see `enqueue`).
    early: Option<Early>,
}

/// The prefix's watch marked before an attempt's put, and every key ahead when there were at
/// most [`AHEAD_MAX`] (for a mutex or a writer: whether the holder's key was the one waited for
/// follows from them).
struct Early {
    mark: Mark,
    prefix: Arc<PrefixWatch>,
    ahead: Option<Vec<Vec<u8>>>,
}

/// A wait on the deletes of the predecessor and of our own key, the predecessor waited for,
/// and whether it is the holder.
pub(crate) struct PredecessorWatch {
    woken: mpsc::UnboundedReceiver<Woken>,
    /// Keeps the prefix's watch open while waiting.
    prefix: Arc<PrefixWatch>,
    predecessor: Vec<u8>,
    head: bool,
    /// Every key ahead, as the put's transaction read them after the watch was marked: when
    /// all are deleted (and our own key is not), the lock is ours without another read.
    ahead: Option<(Mark, Vec<Vec<u8>>)>,
}

#[async_trait]
impl QueueStore for Queue<'_> {
    type Entry = Entry;
    /// The predecessor's key, when known without another read.
    type Predecessor = Option<Vec<u8>>;
    type Watch = PredecessorWatch;

    fn holds(&self) -> &QueueHolds {
        &self.0.holds
    }

    fn delete_lost(&self, hold: QueueHold) {
        self.0.delete_lost(hold);
    }

    /// Put our key unless it or its cancel markers exist, and read the holder in the same
    /// transaction: one round trip for a free lock. The operations apply in order, so the last
    /// key created before the put is our predecessor in the queue. A request that may wait has
    /// the server pick the lease in that transaction: the session lease when nothing is ahead
    /// (the key holds at once), else the waiting lease (`session::waiting`), so that a waiter
    /// that dies costs the one behind it at most that lease's TTL.
    async fn enqueue(&self, req: &AcquireRequest<'_>) -> Result<(Entry, Place<Option<Vec<u8>>>)> {
        let inner = self.0;
        let mut session = inner.session().await?;
        // Only a request that may wait can queue: one that cannot never stands in the queue.
        let mut waiting = match req.wait_until {
            Some(_) => inner.waiting_lease().await,
            None => None,
        };
        let dir = inner.dir(req.key);
        let mut kv = inner.client.kv_client();
        let timeout = inner.cfg.conn.request_timeout;
        let mut regranted = false;
        // A request that may wait marks the watch before its key goes in, if this client already
        // watches the lock's prefix: what the put's transaction reads is then all a wait needs
        // (a delete after it cannot be missed), so waiting costs no other read.
        let early = req.wait_until.and_then(|_| inner.hub.open_watch(&dir));
        let early = early.and_then(|prefix| Some((prefix.mark()?, prefix)));
        let (name, fence, cleanup, holder, before, waiting) = loop {
            let n = inner.nonce.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("{}{:016x}_{n:x}", side_dir(&dir, req.side), session.lease);
            let marker = format!("{}/%cancelled/{:016x}_{n:x}", inner.cfg.prefix, session.lease);
            let keys = AttemptKeys {
                waiting: waiting.as_ref().map(|w| (w.id, format!("{marker}w"))),
                marker,
                name: name.clone(),
                lease: session.lease,
            };
            // Until the answer, the key may land under either lease: its cleanup lasts as long.
            let life = waiting.as_ref().map_or_else(|| session.life(), |w| session.life().and(w.life()));
            let mut cleanup = cleanup::guard(&inner.client, keys.clone(), timeout, life);
            let absent = |k: &str| Compare::create_revision(k, CompareOp::Equal, 0);
            let compares = std::iter::once(name.as_str()).chain(keys.markers().into_iter().map(|(m, _)| m));
            let ops = attempt_ops(&dir, req.side, &name, session.lease, waiting.as_ref().map(|w| w.id));
            let txn = Txn::new().when(compares.map(absent).collect::<Vec<_>>()).and_then(ops);
            match bounded(timeout, kv.txn(txn)).await {
                Ok(resp) => {
                    // Nested: its branch tells the lease (the else branch is the waiting one).
                    let (rs, queued) = match resp.op_responses().into_iter().next() {
                        Some(TxnOpResponse::Txn(nested)) => (ranges(&nested), !nested.succeeded()),
                        _ => (ranges(&resp), false),
                    };
                    let waiting = waiting.filter(|_| queued);
                    // A key on the waiting lease lives as long as that lease, not the session's:
                    // its delete is retried while that lease lives (stopping when the session
                    // lease ends would leave it queued while its own lease is kept alive).
                    let life = waiting.as_ref().map_or_else(|| session.life(), |w| w.life());
                    cleanup::answered(&mut cleanup, &inner.client, name.clone(), timeout, life);
                    if !resp.succeeded() {
                        return Err(temporary("lock key or its cancel marker exists already"));
                    }
                    let fence = resp.header().map_or(0, |h| h.revision());
                    let mut rs = rs.into_iter();
                    let before: Vec<Vec<u8>> =
                        rs.next().unwrap_or_default().iter().map(|kv| kv.key().to_vec()).collect();
                    let holder = rs.nth(1).and_then(|r| r.into_iter().next()).map(|kv| kv.key().to_vec());
                    break (name, fence, cleanup, holder, before, waiting);
                }
                // A lease is gone, the waiting one or the session's (the error does not say):
                // once more on the session lease alone. The waiting lease's keep-alive finds out
                // whether it was the one, and the next waiter gets a new one.
                Err(e) if lease_gone(&e) && waiting.is_some() => {
                    cleanup.disarm();
                    waiting = None;
                }
                // The lease ended under us (revoked, expired): once more under a new one.
                Err(e) if lease_gone(&e) && !regranted => {
                    cleanup.disarm();
                    inner.lease_ended(session.generation);
                    session = inner.session().await?;
                    regranted = true;
                }
                Err(e) => return Err(lock_error(e)),
            }
        };
        if fence <= 0 {
            return Err(temporary("lock key put answered without a revision"));
        }
        let predecessor = before.first().cloned();
        // For a mutex or a writer, every key ahead when the read got them all (a reader's read
        // is of the first writer only).
        let ahead = (!req.side.is_shared() && before.len() <= AHEAD_MAX).then_some(before);
        let early = early.map(|(mark, prefix)| Early { mark, prefix, ahead });
        let place = match predecessor {
            None if req.side.is_shared() => Place::Head,
            _ if holder.as_deref() == Some(name.as_bytes()) => Place::Head,
            predecessor => Place::Behind(predecessor),
        };
        let mut entry =
            Entry { session, waiting, first: false, side: req.side, dir, name, fence, cleanup, early };
        // Queued on the waiting lease only with a key ahead, so never first here; if it were,
        // it would be promoted like any other head.
        let place = match place {
            Place::Head => self.head(&mut entry).await?,
            behind => behind,
        };
        Ok((entry, place))
    }

    /// Wait for the last key created before ours (and ours, should the lease end) to be
    /// deleted, on this client's watch of the lock's prefix ([`crate::notify`]): marked first, then
    /// the predecessor read, so a delete after that read cannot be missed.
    async fn watch(
        &self,
        entry: &mut Entry,
        candidate: Option<Vec<u8>>,
    ) -> Result<Watched<PredecessorWatch, Option<Vec<u8>>>> {
        let inner = self.0;
        if entry.session.is_ended() {
            return Err(temporary("etcd lease ended while waiting"));
        }
        // Its key goes with it (no longer renewed): start again on a new one.
        if entry.waiting.as_ref().is_some_and(|w| w.is_ended()) {
            return Err(temporary("etcd waiting lease ended while waiting"));
        }
        // The put's own read, the watch marked before it: no other read.
        if let (Some(predecessor), Some(Early { mark, prefix, ahead })) = (candidate, entry.early.take()) {
            let woken = prefix.wait_for(mark, &[&predecessor, entry.name.as_bytes()]);
            // The holder's key was the one waited for when it is the only key ahead: covered by
            // the keys ahead all going.
            let ahead = ahead.map(|keys| (mark, keys));
            return Ok(Watched::Armed(PredecessorWatch { woken, prefix, predecessor, head: false, ahead }));
        }
        let (dir, side, name, fence) = (entry.dir.as_str(), entry.side, entry.name.as_str(), entry.fence);
        let prefix = inner.hub.watch(&inner.client, dir, inner.cfg.conn.request_timeout).await?;
        // Ended since it was handed out: the next round opens another.
        let Some(mark) = prefix.mark() else { return Ok(Watched::Moved(Place::Behind(None))) };
        match inner.predecessor(dir, side, name, fence).await? {
            None => Ok(Watched::Moved(self.head(entry).await?)),
            Some((predecessor, head)) => {
                let woken = prefix.wait_for(mark, &[&predecessor, name.as_bytes()]);
                Ok(Watched::Armed(PredecessorWatch { woken, prefix, predecessor, head, ahead: None }))
            }
        }
    }

    async fn deleted(
        &self,
        entry: &mut Entry,
        w: PredecessorWatch,
    ) -> Result<Option<Place<Option<Vec<u8>>>>> {
        let PredecessorWatch { mut woken, prefix, predecessor, head, ahead } = w;
        // `true`: the predecessor was deleted; `false`: look again (the watch ended, or this
        // waiter's deletes were forgotten before it registered).
        let predecessor_gone = match woken.recv().await {
            Some(Woken::Deleted(key)) if *key == *predecessor => true,
            Some(Woken::Deleted(_)) => return Err(temporary("own lock key vanished while waiting")),
            Some(Woken::LookAgain) | None => false,
        };
        #[cfg(feature = "testing")]
        self.0.wakeups.fetch_add(1, Ordering::Relaxed);
        // The holder itself was our predecessor, or every key ahead of ours is gone: nothing
        // older is left, and a key created later queues behind ours. Our own key's delete, had
        // it come first, would have come first on this watch (events are sent in revision
        // order), and the keys ahead are checked against it: the lock is ours without another
        // read.
        let first = predecessor_gone
            && (head
                || ahead.is_some_and(|(mark, keys)| {
                    prefix.all_deleted_since(mark, &keys, entry.name.as_bytes())
                }));
        Ok(match (first, &entry.waiting) {
            (false, _) => Some(Place::Behind(None)),
            (true, None) => Some(Place::Head),
            // The promotion is a request: it goes in `look`, which the end of the wait does not
            // cut short (the lock is ours by now).
            (true, Some(_)) => {
                entry.first = true;
                None
            }
        })
    }

    /// First (known from the watch): promote and hold. Otherwise the next round reads the
    /// predecessor together with setting its watch.
    async fn look(&self, entry: &mut Entry) -> Result<Place<Option<Vec<u8>>>> {
        if std::mem::take(&mut entry.first) {
            return self.head(entry).await;
        }
        Ok(Place::Behind(None))
    }

    /// Our key goes before the answer: left queued a moment longer, it would be taken for the
    /// holder by the next client to look. But the answer waits for one request at most, like
    /// the put: past that (the server unreachable, or this future dropped) the delete goes on
    /// in the background while the lease lives, and the caller gets its answer in time.
    async fn leave(&self, entry: Entry) -> Result<Attempt> {
        let _ = tokio::time::timeout(self.0.cfg.conn.request_timeout, entry.cleanup.run_now()).await;
        Ok(Attempt::Held { retry_after: None })
    }

    fn hold(&self, req: &AcquireRequest<'_>, entry: Entry) -> Result<i64> {
        debug_assert!(entry.waiting.is_none(), "granted on the waiting lease");
        let Entry { session, side, name, fence, cleanup, .. } = entry;
        // A grant on a lease whose last confirmation is too old is no grant: give it up, and
        // let the next attempt run on a new lease.
        if Instant::now() >= session.give_up_at() {
            return Err(temporary("etcd lease not confirmed within its ttl"));
        }
        cleanup.disarm();
        let hold = QueueHold::new(name, fence, session.generation, req.signal).of_side(side);
        let old = self.0.holds.insert(req.key, req.owner, hold, || None);
        session.held(req.signal);
        if let Some(old) = old {
            // Only a lost hold can be replaced (a live one nests): its key goes, by its name.
            self.0.delete_lost(old);
        }
        Ok(fence)
    }
}

impl Queue<'_> {
    /// The entry is first. A key queued on the waiting lease moves to the session lease
    /// before the grant: a hold lives exactly as long as the session lease, whatever the
    /// waiting lease does.
    ///
    /// # Errors
    /// As [`Inner::promote`]; the key's cleanup then deletes it.
    async fn head(&self, entry: &mut Entry) -> Result<Place<Option<Vec<u8>>>> {
        let Some(waiting) = entry.waiting.take() else { return Ok(Place::Head) };
        let (inner, timeout) = (self.0, self.0.cfg.conn.request_timeout);
        let both = entry.session.life().and(waiting.life());
        // While the promotion's answer is unknown the key is on either lease.
        cleanup::answered(&mut entry.cleanup, &inner.client, entry.name.clone(), timeout, both);
        inner.promote(&entry.name, entry.fence, &entry.session).await?;
        let life = entry.session.life();
        cleanup::answered(&mut entry.cleanup, &inner.client, entry.name.clone(), timeout, life);
        Ok(Place::Head)
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
