//! [`EtcdLock`] and its [`LockBackend`] implementation.

use std::fmt;
use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse};
use lock_core::backend::queue;
use lock_core::backend::{
    AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RENEW_BATCH, RenewItem,
};
use lock_core::{FencingToken, LockError, LostReason, OwnerToken, Result, async_trait};
use tokio::runtime::Handle;

use crate::builder::{Config, EtcdLockBuilder};
use crate::error::{NAME, bounded, lock_error};
use crate::keys::is_reader;
use crate::recipe::Queue;
use crate::session::Inner;
use lock_core::backend::Admin;

/// etcd locks: one key per acquisition under `<prefix>/<encoded key>/`, put under this
/// client's lease; the lowest create revision holds, each waiter watches only the key created
/// just before its own.
///
/// One lease is shared by every lock taken through this value and its clones and kept alive
/// in the background; the lease *is* the hold's lifetime (see the crate docs). If it is revoked
/// or expires, every lock taken under it is reported lost and the next acquisition grants a
/// new lease. Dropping the last clone revokes the lease.
///
/// A second, short lease (2 s) carries only the keys of waiting attempts, moved to the main
/// lease when they are granted: a waiter killed without clean-up costs the next waiter at most
/// that short TTL, not the main lease's (see the crate docs, *The waiting lease*).
#[derive(Clone)]
pub struct EtcdLock {
    inner: Arc<Inner>,
}

impl fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.current();
        f.debug_struct("EtcdLock")
            .field("config", &self.inner.cfg)
            .field("lease", &format_args!("{:016x}", s.lease))
            .field("lease_ttl", &s.ttl)
            .field("holds", &self.inner.holds.len())
            .finish()
    }
}

impl EtcdLock {
    /// Start configuring an etcd lock client.
    pub fn builder() -> EtcdLockBuilder {
        EtcdLockBuilder::default()
    }

    /// Connect with an `etcd://` URL (see [`EtcdLockBuilder::url`]).
    ///
    /// # Errors
    /// As [`EtcdLockBuilder::build`].
    pub async fn from_url(url: &str) -> Result<EtcdLock> {
        EtcdLockBuilder::default().url(url).build().await
    }

    pub(crate) async fn start(cfg: Config, client: Client) -> Result<EtcdLock> {
        let runtime = Handle::try_current()
            .map_err(|_| LockError::InvalidConfig { reason: "EtcdLock needs a tokio runtime".to_owned() })?;
        Ok(EtcdLock { inner: Inner::start(cfg, client, runtime).await? })
    }

    /// The TTL the server granted the current lease: how long a crashed or partitioned holder
    /// keeps its locks.
    pub fn lease_ttl(&self) -> Duration {
        self.inner.current().ttl
    }

    /// The prefix of `key`'s queue: `<prefix>/<encode_key(key)>/`.
    pub fn lock_prefix(&self, key: &str) -> String {
        self.inner.dir(key)
    }

    /// Test hook (feature `testing`, not for production): the etcd client.
    #[cfg(feature = "testing")]
    pub fn client(&self) -> Client {
        self.inner.client.clone()
    }

    /// Test hook (feature `testing`, not for production): the id of the current lease.
    #[cfg(feature = "testing")]
    pub fn lease_id(&self) -> i64 {
        self.inner.current().lease
    }

    /// Test hook (feature `testing`, not for production): how long ago the last confirmed
    /// keep-alive of the current lease was sent.
    #[cfg(feature = "testing")]
    pub fn lease_confirmed_age(&self) -> Duration {
        self.inner.current().confirmed_at().elapsed()
    }

    /// Test hook (feature `testing`, not for production): when the last confirmed keep-alive of
    /// the current lease (or its grant) was sent.
    #[cfg(feature = "testing")]
    pub fn lease_confirmed_at(&self) -> tokio::time::Instant {
        self.inner.current().confirmed_at()
    }

    /// Test hook (feature `testing`, not for production): make the current lease's holds due to
    /// be given up `after` from now, as if its keep-alives had gone unconfirmed since then
    /// minus the ttl (a later confirmed keep-alive moves the deadline again).
    #[cfg(feature = "testing")]
    pub fn set_lease_deadline(&self, after: Duration) {
        self.inner.current().set_give_up_at(tokio::time::Instant::now() + after);
    }

    /// Test hook (feature `testing`, not for production): how many predecessor-watch wake-ups
    /// this client's waiters had (with no herd effect, one release causes at most one).
    #[cfg(feature = "testing")]
    pub fn watch_wakeups(&self) -> u64 {
        self.inner.wakeups.load(Ordering::Relaxed)
    }

    /// Test hook (feature `testing`, not for production): how many times this client's
    /// waiters read their predecessor after their own put.
    #[cfg(feature = "testing")]
    pub fn predecessor_reads(&self) -> u64 {
        self.inner.predecessor_reads.load(Ordering::Relaxed)
    }

    /// Test hook (feature `testing`, not for production): the number of locks held through
    /// this client (reentrant holds count once).
    #[cfg(feature = "testing")]
    pub fn held_count(&self) -> usize {
        self.inner.holds.len()
    }
}

#[async_trait]
impl LockBackend for EtcdLock {
    fn name(&self) -> &'static str {
        NAME
    }

    /// `etcd://<cluster id>/<prefix>`: the cluster's own id (the same however its endpoints
    /// are spelled or reached), and the key prefix. No credentials.
    fn identity(&self) -> String {
        format!("etcd://{:016x}{}", self.inner.cluster_id, self.inner.cfg.prefix)
    }

    fn capabilities(&self) -> Capability {
        let mut c = queue::capabilities();
        // Every put and delete is a Raft entry committed by a majority before the answer, and
        // revisions are cluster-wide: a leader failover neither loses a grant nor repeats one.
        c.failover_safe = true;
        // A read-write lock's readers and writers queue under one prefix (see `recipe.rs`).
        c.shared = true;
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.inner.acquire(req).await
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        queue::release(&Queue(&self.inner), key, owner).await
    }

    /// Confirms each hold's key is still there with its create revision (one transaction of
    /// reads per batch). The lease itself is kept alive by the keep-alive task.
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let inner = &self.inner;
        let session = inner.current();
        let names: Vec<Option<(String, i64)>> = items
            .iter()
            .map(|it| {
                inner.holds.get(it.key, it.owner, |h| {
                    (h.generation == session.generation && !h.is_lost() && !session.is_ended())
                        .then(|| (h.name.clone(), h.fence))
                })
            })
            .collect();
        let live: Vec<&(String, i64)> = names.iter().flatten().collect();
        let mut found = Vec::with_capacity(live.len());
        // etcd caps the operations of one transaction (128 by default).
        for chunk in live.chunks(RENEW_BATCH.min(100)) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|(n, _)| TxnOp::get(n.as_str(), Some(GetOptions::new().with_keys_only())))
                .collect();
            let mut kv = inner.client.kv_client();
            let resp = bounded(inner.cfg.conn.request_timeout, kv.txn(Txn::new().and_then(ops)))
                .await
                .map_err(lock_error)?;
            for (op, (_, fence)) in resp.op_responses().into_iter().zip(chunk) {
                let ours = match op {
                    TxnOpResponse::Get(g) => g.kvs().iter().any(|k| k.create_revision() == *fence),
                    _ => false,
                };
                found.push(ours);
            }
        }
        let mut found = found.into_iter();
        let out: Vec<bool> = names.iter().map(|n| n.is_some() && found.next().unwrap_or(false)).collect();
        // A key gone behind our back (deleted by someone else): the hold is lost, and no
        // release will come for it.
        for ((it, name), ours) in items.iter().zip(&names).zip(&out) {
            if let (Some((name, _)), false) = (name, ours) {
                inner.holds.lose(&(it.key.to_owned(), it.owner), name, LostReason::NotOwner);
            }
        }
        Ok(out)
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let dir = self.inner.dir(key);
        let opts =
            GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_keys_only();
        let mut kv = self.inner.client.kv_client();
        let resp = bounded(self.inner.cfg.conn.request_timeout, kv.get(dir.as_str(), Some(opts)))
            .await
            .map_err(lock_error)?;
        let Some(head) = resp.kvs().first() else { return Ok(LockInfo::free()) };
        let mut info = LockInfo::held();
        // Readers at the head hold together, up to the first writer.
        let readers = resp.kvs().iter().take_while(|kv| is_reader(&dir, kv.key())).count();
        if readers > 0 {
            info.readers = Some(readers);
            info.waiters = Some(resp.kvs().len() - readers);
            return Ok(info);
        }
        info.fence = u64::try_from(head.create_revision()).ok().map(FencingToken);
        info.waiters = Some(resp.kvs().len() - 1);
        // `<lease>_<n>`: names the holder's lease, not its owner token.
        info.owner =
            Some(String::from_utf8_lossy(&head.key()[dir.len().min(head.key().len())..]).into_owned());
        Ok(info)
    }

    // The holder's own key carries its note (see `note.rs`).
    // Keys under `<prefix>/%records/`, outside any lease (records.rs).
    lock_core::backend::hand_out!(notes, records, admin);
}

lock_core::backend::forward_to!(EtcdLock, inner: notes, records);

#[async_trait]
impl Admin for EtcdLock {
    /// The locks with at least one key (a holder's or a waiter's) under the prefix, from one
    /// keys-only range read: `<prefix>/<encoded key>/...`.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let root = format!("{}/", self.inner.cfg.prefix);
        let from = format!("{root}{}", crate::recipe::encode_key(prefix));
        let opts = GetOptions::new().with_prefix().with_keys_only();
        let mut kv = self.inner.client.kv_client();
        let resp = bounded(self.inner.cfg.conn.request_timeout, kv.get(from.as_str(), Some(opts)))
            .await
            .map_err(lock_error)?;
        let mut keys = std::collections::BTreeSet::new();
        for k in resp.kvs() {
            let Some(rest) = std::str::from_utf8(k.key()).ok().and_then(|n| n.strip_prefix(&root)) else {
                continue;
            };
            let Some((encoded, _)) = rest.split_once('/') else { continue };
            if let Some(key) = lock_core::backend::percent_decode(encoded).filter(|k| k.starts_with(prefix)) {
                keys.insert(key);
            }
        }
        Ok(keys.into_iter().take(limit).collect())
    }

    /// Deletes the key at the head of the lock's queue if its create revision is `fence`, in
    /// one transaction that compares it: the holder's check after its next keep-alive finds its
    /// key gone (lost), and the next waiter, which watches it, takes the lock.
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let dir = self.inner.dir(key);
        let opts = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_keys_only()
            .with_limit(1);
        let mut kv = self.inner.client.kv_client();
        let t = self.inner.cfg.conn.request_timeout;
        let resp = bounded(t, kv.get(dir.as_str(), Some(opts))).await.map_err(lock_error)?;
        let Some(head) = resp.kvs().first().filter(|h| !is_reader(&dir, h.key())) else { return Ok(false) };
        if u64::try_from(head.create_revision()).ok() != Some(fence.0) {
            return Ok(false);
        }
        let revision = head.create_revision();
        let txn = Txn::new()
            .when(vec![Compare::create_revision(head.key(), CompareOp::Equal, revision)])
            .and_then(vec![TxnOp::delete(head.key(), None)]);
        let done = bounded(t, kv.txn(txn)).await.map_err(lock_error)?;
        Ok(done.succeeded())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn public_types_are_send_and_sync() {
        fn assert<T: Send + Sync>() {}
        assert::<super::EtcdLock>();
        assert::<crate::EtcdLockBuilder>();
    }
}
