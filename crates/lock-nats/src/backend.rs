//! [`NatsLock`] and its [`LockBackend`] implementation.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use lock_core::backend::{
    AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RenewItem, Subscription,
};
use lock_core::{FencingToken, LockError, LostReason, OwnerToken, Result, async_trait};
use tokio::runtime::Handle;

use crate::builder::{Config, NatsLockBuilder};
use crate::client::Inner;
use crate::error::{self, NAME, Refused, bounded};
use crate::holds::Holds;
use crate::keys::{lock_key, lock_of};
use crate::markers::Markers;
use crate::notify::Notifier;
use crate::store::Current;
use lock_core::backend::{Admin, Notes, Notify, Record, RecordOp, Records};

/// NATS JetStream key-value locks: one bucket key per lock (`l.<encoded key>`), created only
/// if absent; the create's revision is the fence, a renewal rewrites the value on its last
/// revision (compare-and-set), a release deletes it on its last revision (compare-and-delete),
/// and the bucket's max age frees the key of a crashed holder.
///
/// Every lease is the bucket's TTL (see the crate docs). Clones share the connection, the
/// holds and the watch.
#[derive(Clone)]
pub struct NatsLock {
    inner: Arc<Inner>,
}

impl fmt::Debug for NatsLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsLock")
            .field("config", &self.inner.cfg)
            .field("lease_ttl", &self.inner.bucket.ttl)
            .field("holds", &self.inner.holds.len())
            .finish()
    }
}

impl NatsLock {
    /// Start configuring a NATS lock client.
    pub fn builder() -> NatsLockBuilder {
        NatsLockBuilder::default()
    }

    /// Connect with a `nats://` URL (see [`NatsLockBuilder::url`]).
    ///
    /// # Errors
    /// As [`NatsLockBuilder::build`].
    pub async fn from_url(url: &str) -> Result<NatsLock> {
        NatsLockBuilder::default().url(url).build().await
    }

    pub(crate) async fn connect(cfg: Config) -> Result<NatsLock> {
        let runtime = Handle::try_current()
            .map_err(|_| LockError::InvalidConfig { reason: "NatsLock needs a tokio runtime".to_owned() })?;
        let bucket = crate::connect::open(&cfg).await?;
        let markers = Arc::new(Markers::default());
        let notifier = Notifier::new(markers.clone());
        let records = tokio::sync::OnceCell::new();
        let inner =
            Arc::new(Inner { cfg, bucket, holds: Holds::default(), notifier, markers, runtime, records });
        crate::keeper::start(&inner);
        Ok(NatsLock { inner })
    }

    /// The bucket's TTL: every hold's lease, how long a crashed or partitioned holder keeps its
    /// locks.
    pub fn lease_ttl(&self) -> Duration {
        self.inner.bucket.ttl
    }

    /// The bucket key of the lock `key`: `l.<encode_key(key)>`.
    pub fn bucket_key(&self, key: &str) -> String {
        lock_key(key)
    }

    /// Test hook (feature `testing`, not for production): the bucket, to write behind a
    /// holder's back.
    #[cfg(feature = "testing")]
    pub fn bucket_store(&self) -> async_nats::jetstream::kv::Store {
        self.inner.bucket.kv.clone()
    }

    /// Test hook (feature `testing`, not for production): the number of locks held through
    /// this client (nested holds count once).
    #[cfg(feature = "testing")]
    pub fn held_count(&self) -> usize {
        self.inner.holds.len()
    }

    /// Test hook (feature `testing`, not for production): how many delete markers this
    /// client's watch delivered.
    #[cfg(feature = "testing")]
    pub fn watch_events(&self) -> u64 {
        self.inner.notifier.events.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl LockBackend for NatsLock {
    fn name(&self) -> &'static str {
        NAME
    }

    /// `nats://<sorted servers>/<bucket>`: no credentials.
    fn identity(&self) -> String {
        let mut servers = self.inner.cfg.conn.hosts.clone();
        servers.sort();
        format!("nats://{}/{}", servers.join(","), self.inner.cfg.bucket)
    }

    fn capabilities(&self) -> Capability {
        let mut c = Capability::NONE;
        c.renew = true;
        c.fencing = true;
        // Nested acquisitions of one owner through this client share its hold (holds.rs).
        c.reentrant = true;
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.inner.acquire(req).await
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.inner.release(key, owner).await
    }

    /// Rewrites each hold's value on its last revision, all sent at once (NATS has no
    /// transaction to batch them in; they share the connection).
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let inner = &self.inner;
        let each = items.iter().map(|it| async move {
            let Some(hold) = inner.holds.get(it.key, it.owner) else { return Ok(false) };
            let ours = inner.rewrite(&lock_key(it.key), &hold, None, Some(it.lease)).await?;
            if !ours {
                hold.mark_lost(LostReason::NotOwner);
            }
            Ok(ours)
        });
        join_all(each).await.into_iter().collect()
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let Current::Held { revision, value, written } = self.inner.bucket.current(&lock_key(key)).await?
        else {
            return Ok(LockInfo::free());
        };
        let mut info = LockInfo::held();
        info.remaining = Some(self.inner.bucket.remaining(written));
        if let Some(v) = value {
            info.fence = Some(FencingToken(v.fence_at(revision)));
            info.owner = Some(LockInfo::short_owner(&v.owner.to_string()));
        }
        Ok(info)
    }

    // One watch per client (notify.rs).
    // The note rides in the holder's value (keys.rs).
    // Records in a bucket of their own, without a TTL (records.rs).
    lock_core::backend::hand_out!(notify, notes, records, admin);
}

#[async_trait]
impl Notify for NatsLock {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        let inner = &self.inner;
        inner.notifier.subscribe(&inner.bucket.kv, key, inner.bucket.timeout).await.map(Some)
    }

    fn listening(&self, _key: &str) -> bool {
        self.inner.notifier.listening()
    }
}

#[async_trait]
impl Records for NatsLock {
    async fn record(&self, key: &str, op: RecordOp<'_>) -> Result<Record> {
        self.inner.record(key, op).await
    }
}

#[async_trait]
impl Notes for NatsLock {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        let inner = &self.inner;
        let Ok(Some(hold)) = inner.holds.live(key, owner) else { return Ok(false) };
        let ours = inner.rewrite(&lock_key(key), &hold, Some(Some(note.to_owned())), None).await?;
        if !ours {
            hold.mark_lost(LostReason::NotOwner);
        }
        Ok(ours)
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        Ok(match self.inner.bucket.current(&lock_key(key)).await? {
            Current::Held { value: Some(v), .. } => v.note,
            _ => None,
        })
    }
}

#[async_trait]
impl Admin for NatsLock {
    /// The lock keys of the bucket's stream, from one stream-info request that names its
    /// subjects (paged by the server), decoded and filtered by `prefix`. Not a consumer over
    /// the keys (`Store::keys`): that reads every key's last message and took longer than a
    /// request's bound on a busy bucket. A key released a moment ago still has its delete
    /// marker and is listed until the marker expires (the caller inspects each).
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let bucket = &self.inner.bucket;
        let head = format!("$KV.{}.", bucket.name);
        let keys = bounded(bucket.timeout, async {
            let subjects = format!("{head}l.>");
            let mut names =
                bucket.kv.stream.info_with_subjects(subjects).await.map_err(|e| error::driver(e, true))?;
            let mut found = BTreeSet::new();
            while let Some(name) = names.next().await {
                let (subject, _) = name.map_err(|e| error::driver(e, true))?;
                let key = subject.strip_prefix(&head).and_then(lock_of);
                if let Some(key) = key.filter(|k| k.starts_with(prefix)) {
                    found.insert(key);
                }
            }
            Ok(found)
        })
        .await?;
        Ok(keys.into_iter().take(limit).collect())
    }

    /// Deletes the key on its last revision if its hold's fence is `fence`: the holder's next
    /// renewal is refused (lost), and the watch wakes a waiter. A renewal between the read and
    /// the delete moves the revision on; then the key is read again.
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let (bucket, key) = (&self.inner.bucket, lock_key(key));
        for _ in 0..5 {
            let Current::Held { revision, value: Some(v), .. } = bucket.current(&key).await? else {
                return Ok(false);
            };
            if v.fence_at(revision) != fence.0 {
                return Ok(false);
            }
            match bucket.delete(&key, revision, &format!("evict.{}.{revision}", fence.0)).await {
                Ok(marker) => {
                    self.inner.markers.put(&key, marker);
                    return Ok(true);
                }
                Err(Refused::Conflict) => continue,
                Err(Refused::Failed(e)) => return Err(e),
            }
        }
        Err(error::temporary("the lock kept changing while it was being evicted"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn public_types_are_send_and_sync() {
        fn assert<T: Send + Sync>() {}
        assert::<super::NatsLock>();
        assert::<crate::NatsLockBuilder>();
    }
}
