//! [`ZkLock`] and its [`LockBackend`] implementation.

use std::fmt;
use std::sync::Arc;
#[cfg(feature = "testing")]
use std::sync::atomic::Ordering;
use std::time::Duration;

use lock_core::backend::queue as lock_queue;
use lock_core::backend::{AcquireRequest, Attempt, Capability, LockBackend, LockInfo, RenewItem};
use lock_core::{FencingToken, LockError, OwnerToken, Result, async_trait};
use tokio::runtime::Handle;
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::builder::ZkLockBuilder;
use crate::config::Config;
use crate::contenders::{is_reader, queue};
use crate::error::{NAME, SessionEnded, lock_error, session_ended};
use crate::keys::{gate_dir, is_semaphore};
use crate::queue::Queue;
use crate::session::{Inner, open_client};
use lock_core::backend::Admin;

/// ZooKeeper locks: one `EPHEMERAL_SEQUENTIAL` node per acquisition under
/// `<root>/<encoded key>/`, lowest sequence holds, each waiter watches only its predecessor.
///
/// One ZooKeeper session is shared by every lock taken through this value and its clones;
/// the session *is* the lease (see the crate docs). If the session expires, every lock taken
/// on it is reported lost and the next acquisition opens a new session.
#[derive(Clone)]
pub struct ZkLock {
    inner: Arc<Inner>,
}

impl fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.inner.current();
        f.debug_struct("ZkLock")
            .field("config", &self.inner.cfg)
            .field("session", &format_args!("{:#x}", s.client.session_id().0))
            .field("state", &s.client.state())
            .field("holds", &self.inner.holds.len())
            .finish()
    }
}

/// Whether the caller's client is authenticated as a user (digest, SASL, ...), so that its
/// nodes can be creator-only. Servers before 3.7 cannot tell (no `whoAmI`): open ACLs then.
async fn user_client_authed(client: &zk::Client) -> Result<bool> {
    match client.list_auth_users().await {
        Ok(users) => Ok(users.iter().any(|u| !matches!(u.scheme(), "ip" | "world"))),
        Err(e) if session_ended(&e) => {
            Err(LockError::permanent(NAME, SessionEnded { state: client.state() }))
        }
        Err(e @ (zk::Error::Unimplemented | zk::Error::BadArguments(_))) => {
            tracing::warn!(error = %e, "cannot ask the server who the given client is; lock nodes get open ACLs");
            Ok(false)
        }
        Err(e) => Err(lock_error(e)),
    }
}

impl ZkLock {
    /// Start configuring a ZooKeeper lock client.
    pub fn builder() -> ZkLockBuilder {
        ZkLockBuilder::default()
    }

    /// Open the session and make sure the root (and, if asked for, the chroot) exists.
    pub(crate) async fn connect(cfg: Config, user_client: Option<zk::Client>) -> Result<ZkLock> {
        let runtime = Handle::try_current()
            .map_err(|_| LockError::InvalidConfig { reason: "ZkLock needs a tokio runtime".to_owned() })?;
        let opened = Instant::now();
        let (client, authed) = match user_client {
            Some(client) => {
                if client.state().is_terminated() {
                    return Err(LockError::permanent(NAME, SessionEnded { state: client.state() }));
                }
                let authed = user_client_authed(&client).await?;
                (client, authed)
            }
            None => (open_client(&cfg, &cfg.connect).await?, cfg.auth.is_some()),
        };
        let acls = if authed {
            vec![
                zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed()),
                zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
            ]
        } else {
            vec![zk::Acl::new(zk::Permission::ALL, zk::AuthId::anyone())]
        };
        if !cfg.root.is_empty() {
            let opts = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acls));
            match client.mkdir(&cfg.root, &opts).await {
                Err(zk::Error::NoNode) if cfg.user_client.as_deref().is_some_and(|c| c != "/") => {
                    let chroot = cfg.user_client.as_deref().unwrap_or_default();
                    return Err(LockError::InvalidConfig {
                        reason: format!("the chroot {chroot:?} of the zookeeper client given does not exist"),
                    });
                }
                Err(zk::Error::NoNode) if cfg.chroot().is_some() && !cfg.create_chroot => {
                    let (_, chroot) = cfg.chroot().unwrap_or_default();
                    return Err(LockError::InvalidConfig {
                        reason: format!(
                            "zookeeper chroot {chroot:?} does not exist: create it, or set create_chroot \
                             (builder) / ?create_chroot=true (url)"
                        ),
                    });
                }
                Err(zk::Error::NoNode) if cfg.chroot().is_some() => {
                    // The chroot itself is missing: create it through a session without it.
                    let (hosts, chroot) = cfg.chroot().unwrap_or_default();
                    let plain = open_client(&cfg, hosts).await?;
                    plain.mkdir(chroot, &opts).await.map_err(lock_error)?;
                    drop(plain);
                    client.mkdir(&cfg.root, &opts).await.map_err(lock_error)?;
                }
                // The root may exist with an ACL that lets us create lock directories but not
                // siblings of the root: ZooKeeper checks CREATE on the parent before existence.
                Err(zk::Error::NoAuth) if client.check_stat(&cfg.root).await.is_ok_and(|s| s.is_some()) => {}
                r => r.map_err(lock_error)?,
            }
        }
        Ok(ZkLock { inner: Inner::start(cfg, acls, runtime, client, opened) })
    }

    /// The session timeout the server negotiated: how long a crashed or partitioned holder
    /// keeps its locks.
    pub fn session_timeout(&self) -> Duration {
        self.inner.current().client.session_timeout()
    }

    /// The lock directory of `key`: `<root>/<encode_key(key)>` (inside the chroot), where its
    /// queue of nodes lives. Give this path to Curator's `InterProcessMutex` or kazoo's `Lock`
    /// (with `extra_lock_patterns=["-lock-"]`) to share the lock (see the crate docs).
    pub fn lock_dir(&self, key: &str) -> String {
        self.inner.dir(key)
    }

    /// Test hook (feature `testing`, not for production): the client of the current session.
    #[cfg(feature = "testing")]
    pub fn client(&self) -> zk::Client {
        self.inner.current().client.clone()
    }

    /// Test hook (feature `testing`, not for production): the id of the current session, the
    /// `ephemeralOwner` of this client's lock nodes.
    #[cfg(feature = "testing")]
    pub fn session_id(&self) -> i64 {
        self.inner.current().client.session_id().0
    }

    /// Test hook (feature `testing`, not for production): how many predecessor deletions this
    /// client's waiters acted on, told by the watch or found when setting it again (with no
    /// herd effect, one release causes one; a predecessor's heartbeats and notes, which fire
    /// the watch too, are not counted).
    #[cfg(feature = "testing")]
    pub fn watch_wakeups(&self) -> u64 {
        self.inner.wakeups.load(Ordering::Relaxed)
    }

    /// Test hook (feature `testing`, not for production): the number of locks held through
    /// this client (reentrant holds count once).
    #[cfg(feature = "testing")]
    pub fn held_count(&self) -> usize {
        self.inner.holds.len()
    }

    /// Test hook (feature `testing`, not for production): this process's TCP connections to
    /// the servers of the connect string, and how many of them have Nagle's algorithm on.
    ///
    /// # Errors
    /// When the connections cannot be inspected (not Linux 5.6 or later).
    #[cfg(feature = "testing")]
    pub async fn connections_with_nagle(&self) -> std::io::Result<(usize, usize)> {
        crate::nodelay::count(&self.inner.cfg.connect).await
    }
}

#[async_trait]
impl LockBackend for ZkLock {
    fn name(&self) -> &'static str {
        NAME
    }

    fn identity(&self) -> String {
        self.inner.cfg.identity()
    }

    fn capabilities(&self) -> Capability {
        let mut c = lock_queue::capabilities();
        // Every grant is a quorum write in the ensemble: a leader failover neither loses it nor
        // repeats a czxid (see the README).
        c.failover_safe = true;
        // Readers and writers queue together in Curator's `InterProcessReadWriteLock` layout
        // (see `recipe.rs`).
        c.shared = true;
        // Permits as Curator's `InterProcessSemaphoreV2` keeps them (see `permits.rs`).
        c.permits = true;
        c
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        if req.wait_until.is_some() {
            // A wait is bounded by the caller's deadline (lock-core gives it up past it).
            return self.inner.acquire(req).await;
        }
        // A try has no deadline of its own: on a connection gone silent the client's requests
        // waited for its reconnects, about 10 s with the default 6 s session. Half a session
        // timeout is the bound every other call of this store meets; the entry a try dropped
        // here may have created is deleted by its cleanup, as a cancelled attempt's is.
        let bound = self.session_timeout() / 2;
        match tokio::time::timeout(bound, self.inner.acquire(req)).await {
            Ok(answer) => answer,
            Err(_) => Err(LockError::temporary(NAME, format!("no answer from ZooKeeper within {bound:?}"))),
        }
    }

    async fn release(&self, key: &str, owner: OwnerToken) -> Result<bool> {
        lock_queue::release(&Queue(&self.inner), key, owner).await
    }

    async fn renew(&self, items: &[RenewItem<'_>]) -> Result<Vec<bool>> {
        let inner = &self.inner;
        let session = inner.current();
        let sid = session.client.session_id().0;
        let paths: Vec<Option<String>> = items
            .iter()
            .map(|it| {
                inner.holds.get(it.key, it.owner, |h| {
                    (h.generation == session.generation && !h.is_lost()).then(|| h.name.clone())
                })
            })
            .collect();
        // One pipelined batch: every check is sent before the first answer is awaited.
        let sent = Instant::now();
        let checks: Vec<_> =
            paths.iter().map(|p| p.as_deref().map(|p| session.client.check_stat(p))).collect();
        let mut out = Vec::with_capacity(items.len());
        for check in checks {
            out.push(match check {
                None => false,
                Some(check) => match check.await {
                    Ok(stat) => {
                        session.confirm(sent);
                        stat.is_some_and(|s| s.ephemeral_owner == sid)
                    }
                    Err(e) if session_ended(&e) => false,
                    Err(e) => return Err(lock_error(e)),
                },
            });
        }
        Ok(out)
    }

    async fn inspect(&self, key: &str) -> Result<LockInfo> {
        let session = self.inner.session().await?;
        let dir = self.inner.dir(key);
        let children = match session.client.list_children(&dir).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(LockInfo::free()),
            Err(e) => return Err(lock_error(e)),
        };
        if is_semaphore(&children) {
            let (held, permits) = self.inner.inspect_permits(&session.client, &dir).await?;
            if held == 0 {
                return Ok(LockInfo::free());
            }
            let mut info = LockInfo::held();
            info.readers = Some(held);
            info.permits = permits;
            // Each node at the gate is one acquisition waiting (its head for a free permit).
            info.waiters = session.client.list_children(&gate_dir(&dir)).await.ok().map(|g| queue(g).len());
            return Ok(info);
        }
        let queue = queue(children);
        let Some((_, head)) = queue.first() else { return Ok(LockInfo::free()) };
        let mut info = LockInfo::held();
        // Readers at the head hold together, up to the first writer.
        let readers = queue.iter().take_while(|(_, c)| is_reader(c)).count();
        if readers > 0 {
            info.readers = Some(readers);
            info.waiters = Some(queue.len() - readers);
            return Ok(info);
        }
        let stat = session.client.check_stat(&format!("{dir}/{head}")).await.map_err(lock_error)?;
        info.fence = stat.map(|s| FencingToken(s.czxid as u64));
        info.waiters = Some(queue.len() - 1);
        info.owner = Some(head.clone());
        Ok(info)
    }

    // The holder's own node carries its note (see `note.rs`).
    // Persistent nodes under `<root>/%records` (records.rs).
    lock_core::backend::hand_out!(notes, records, admin);
}

lock_core::backend::forward_to!(ZkLock, inner: notes, records);

#[async_trait]
impl Admin for ZkLock {
    /// The lock directories under the root whose keys start with `prefix` (a directory stays
    /// after its last node goes, so some of them may be free).
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<String>> {
        let session = self.inner.session().await?;
        let children = match session.client.list_children(&self.inner.cfg.root).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(lock_error(e)),
        };
        let mut keys: Vec<String> = children
            .iter()
            .filter_map(|c| lock_core::backend::percent_decode(c))
            .filter(|k| k.starts_with(prefix))
            .collect();
        keys.sort();
        keys.truncate(limit);
        Ok(keys)
    }

    /// Deletes the node at the head of the key's queue if its czxid is `fence`, from this
    /// session: its owner's watch on it reports the loss, and the next node's waiter, which
    /// watches it, takes the lock. Sequential names are never reused, so the check and the
    /// delete name one node.
    async fn evict(&self, key: &str, fence: FencingToken) -> Result<bool> {
        let session = self.inner.session().await?;
        let dir = self.inner.dir(key);
        let children = match session.client.list_children(&dir).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return Err(lock_error(e)),
        };
        if is_semaphore(&children) {
            return Err(lock_core::backend::unsupported(NAME, "force-unlock of a semaphore's permit"));
        }
        let Some((_, head)) = queue(children).into_iter().next().filter(|(_, c)| !is_reader(c)) else {
            return Ok(false);
        };
        let path = format!("{dir}/{head}");
        match session.client.check_stat(&path).await.map_err(lock_error)? {
            Some(stat) if u64::try_from(stat.czxid).ok() == Some(fence.0) => {}
            _ => return Ok(false),
        }
        match session.client.delete(&path, None).await {
            Ok(()) => Ok(true),
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => Err(lock_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn public_types_are_send_and_sync() {
        fn assert<T: Send + Sync>() {}
        assert::<super::ZkLock>();
        assert::<crate::ZkLockBuilder>();
    }
}
