//! A Redis master that was down at start: connects on first use.

use crate::RedisLock;
use lock_core::async_trait;
use lock_core::backend::{AcquireRequest, Attempt, Capability, LockBackend, RenewItem, Subscription};
use lock_core::backend::{Admin, Notes, Notify, RaiseFence, Records, WaitQueue};
use lock_core::{OwnerToken, Result};
use tokio::sync::OnceCell;

#[derive(Debug)]
pub(crate) struct LazyRedis {
    url: String,
    identity: String,
    conn: OnceCell<RedisLock>,
}

impl LazyRedis {
    pub(crate) fn new(url: String) -> Self {
        LazyRedis { identity: identity(&url), url, conn: OnceCell::new() }
    }

    async fn get(&self) -> Result<&RedisLock> {
        self.conn.get_or_try_init(|| RedisLock::from_url(&self.url)).await
    }
}

/// What `RedisLock::identity` will say once connected: `redis://host:port/db?prefix=...`.
fn identity(url: &str) -> String {
    use lock_core::backend::{UrlOptions, redact::split_userinfo};
    // The prefix as the connected backend reads it: percent-decoded, through UrlOptions.
    let (base, prefix) = match UrlOptions::parse(url) {
        Ok(mut o) => {
            let prefix = o.take::<String>("key_prefix").ok().flatten();
            (o.base().to_owned(), prefix)
        }
        Err(_) => (url.to_owned(), None),
    };
    let prefix = prefix.unwrap_or_else(|| crate::DEFAULT_KEY_PREFIX.to_owned());
    let rest = base.split_once("://").map_or(base.as_str(), |(_, r)| r);
    let (_, hostpath) = split_userinfo(rest);
    let (host, path) = hostpath.split_once('/').unwrap_or((hostpath, ""));
    let db = path.trim_matches('/').parse::<i64>().unwrap_or(0);
    format!("redis://{host}/{db}?prefix={prefix}")
}

#[test]
fn identity_matches_the_connected_backend() {
    assert_eq!(
        identity("redis://:p@w@127.0.0.1:6379/2?key_prefix=a%3Ab"),
        "redis://127.0.0.1:6379/2?prefix=a:b"
    );
    let default = format!("redis://h:1/0?prefix={}", crate::DEFAULT_KEY_PREFIX);
    assert_eq!(identity("redis://h:1"), default);
}

#[test]
fn a_master_down_at_start_keeps_the_quorum_fenced() {
    let lazy = LazyRedis::new("redis://127.0.0.1:1/".to_owned());
    let c = lazy.capabilities();
    assert!(c.fencing && lazy.fences().is_some(), "{c:?}");
}

#[async_trait]
impl LockBackend for LazyRedis {
    fn name(&self) -> &'static str {
        "redis"
    }
    fn capabilities(&self) -> Capability {
        match self.conn.get() {
            Some(c) => c.capabilities(),
            // What every connected RedisLock has in the modes Redlock allows, with the fence
            // counter handed out too (`fences`), so the quorum's fencing (and its grants'
            // numbers, and force-unlock, which needs fences) does not change when a master
            // that was down joins.
            None => {
                let mut c = Capability::NONE;
                c.renew = true;
                c.fencing = true;
                c
            }
        }
    }
    fn identity(&self) -> String {
        self.identity.clone()
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        self.get().await?.try_acquire(req).await
    }
    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        self.get().await?.release(key, owner).await
    }
    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        self.get().await?.renew(items).await
    }

    async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
        self.get().await?.inspect(key).await
    }

    lock_core::backend::hand_out!(notify);

    /// Notifications, notes, the fence counter, records and the operator's calls are every
    /// connected master's in the modes Redlock allows; its wait set only once connected.
    fn queue(&self) -> Option<&dyn WaitQueue> {
        self.conn.get().and_then(|c| c.queue()).map(|_| self as &dyn WaitQueue)
    }

    lock_core::backend::hand_out!(notes, fences, records, admin);
}

#[async_trait]
impl Notify for LazyRedis {
    async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
        self.get().await?.subscribe(key).await
    }
}

#[async_trait]
impl WaitQueue for LazyRedis {
    async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
        self.get().await?.leave_queue(key, owner).await
    }
}

#[async_trait]
impl Notes for LazyRedis {
    async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
        self.get().await?.set_note(key, owner, note).await
    }

    async fn note(&self, key: &str) -> Result<Option<String>> {
        self.get().await?.note(key).await
    }
}

#[async_trait]
impl RaiseFence for LazyRedis {
    async fn raise_fence(
        &self,
        key: &str,
        owner: OwnerToken,
        floor: lock_core::FencingToken,
    ) -> Result<bool> {
        self.get().await?.raise_fence(key, owner, floor).await
    }
}

#[async_trait]
impl Records for LazyRedis {
    async fn record(
        &self,
        key: &str,
        op: lock_core::backend::RecordOp<'_>,
    ) -> Result<lock_core::backend::Record> {
        self.get().await?.record(key, op).await
    }
}

#[async_trait]
impl Admin for LazyRedis {
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        self.get().await?.list(prefix, limit).await
    }

    async fn evict(&self, key: &str, fence: lock_core::FencingToken) -> Result<bool> {
        self.get().await?.evict(key, fence).await
    }
}
