//! Backend selection by URL scheme.

use crate::{DynBackend, LockError};

pub use lock_core::backend::redact::redact_url;

/// Connect with `$connect` (a future of a backend) when `$feature` is compiled in; a typed
/// [`LockError::FeatureNotEnabled`] otherwise. The expression is not even name-resolved when
/// the feature is off, so the backend crate need not exist in the build.
macro_rules! connect {
    ($feature:literal, $scheme:expr, $connect:expr) => {{
        #[cfg(feature = $feature)]
        let connected: Result<DynBackend, LockError> = Ok(std::sync::Arc::new($connect.await?));
        #[cfg(not(feature = $feature))]
        let connected: Result<DynBackend, LockError> =
            Err(LockError::FeatureNotEnabled { scheme: $scheme.to_owned(), feature: $feature });
        connected
    }};
}

/// Connect to the backend a URL names:
///
/// | scheme | backend | feature |
/// |---|---|---|
/// | `memory://<table>` | in-process table, shared by every `from_url` with the same name | `memory` |
/// | `redis://`, `rediss://` (`?mode=simple\|reentrant\|fair\|redis-py\|python-redis-lock`, `key_prefix=`) | Redis | `redis` |
/// | `redis+cluster://[user:pw@]h1:p1,h2:p2` (`rediss+cluster://`; `?mode=simple\|reentrant\|fair`, `key_prefix=`) | Redis Cluster | `redis` |
/// | `redis+sentinel://[user:pw@]s1:p1,s2:p2/master-name[/db]` (the same options) | the primary Redis Sentinel names, followed across a failover | `redis` |
/// | `redlock://[user:pw@]h1:p1,h2:p2,h3:p3[/db]` (`?mode=simple\|reentrant`, `key_prefix=`) | Redlock: a [`QuorumBackend`](crate::QuorumBackend) over one Redis client per independent master | `redis` |
/// | `mysql://`, `mariadb://` (`?mode=pessimistic\|optimistic\|get_lock`) | MySQL / MariaDB | `mysql` |
/// | `zk://host:port[,host:port]/root` | ZooKeeper | `zk` |
/// | `postgres://`, `postgresql://` (`?table=`, `keepalive=`) | PostgreSQL session advisory locks | `postgres` |
/// | `etcd://[user:pw@]h1:p1[,h2:p2]/prefix` (`?lease_ttl=`) | etcd v3 | `etcd` |
/// | `file:///absolute/dir` (`?check_every=`) | advisory file locks (`flock`) of one host, not on NFS | `file` |
///
/// # Errors
/// [`LockError::FeatureNotEnabled`] for a known scheme compiled out, [`LockError::InvalidConfig`]
/// for an unknown scheme or a malformed URL, backend errors when the server is unreachable.
pub async fn from_url(url: &str) -> Result<DynBackend, LockError> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(LockError::InvalidConfig { reason: format!("not a URL: {:?}", redact_url(url)) });
    };
    let scheme = scheme.to_ascii_lowercase();
    // One arm per backend: its schemes, its cargo feature, and how it connects.
    match scheme.as_str() {
        "memory" => connect!("memory", &scheme, async { Ok::<_, LockError>(memory(url)) }),
        "redis" | "rediss" | "redis+cluster" | "rediss+cluster" | "redis+sentinel" => {
            connect!("redis", &scheme, lock_redis::RedisLock::from_url(url))
        }
        "redlock" => connect!("redis", &scheme, redlock(url)),
        "mysql" | "mariadb" => connect!("mysql", &scheme, lock_mysql::MySqlLock::builder().url(url).build()),
        "zk" | "zookeeper" => connect!("zk", &scheme, lock_zk::ZkLock::builder().url(url).build()),
        "postgres" | "postgresql" => {
            connect!("postgres", &scheme, lock_postgres::PgLock::builder().url(url).build())
        }
        "etcd" => connect!("etcd", &scheme, lock_etcd::EtcdLock::from_url(url)),
        "file" => connect!("file", &scheme, async { lock_file::FileLock::from_url(url) }),
        other => Err(LockError::InvalidConfig {
            reason: format!(
                "unknown scheme {other:?} (expected memory, redis, rediss, redis+cluster, rediss+cluster, redis+sentinel, redlock, mysql, mariadb, zk, etcd, postgres, postgresql or file)"
            ),
        }),
    }
}

/// One table per name, so every "client" of `memory://x` shares the locks of x.
#[cfg(feature = "memory")]
fn memory(url: &str) -> lock_core::MemoryBackend {
    let name = url.split_once("://").map_or(url, |(_, name)| name);
    use std::collections::HashMap;
    use std::sync::LazyLock;

    use lock_core::MemoryBackend;
    use lock_core::backend::Mutex;
    static TABLES: LazyLock<Mutex<HashMap<String, MemoryBackend>>> = LazyLock::new(Mutex::default);
    TABLES.lock().entry(name.trim_end_matches('/').to_owned()).or_default().clone()
}

/// The `redis://` URL of every master of `redlock://<rest>`; each carries the query
/// (`mode=simple|reentrant`, `key_prefix=`) for `RedisLock::from_url`.
#[cfg(feature = "redis")]
fn redlock_urls(rest: &str) -> Result<Vec<String>, LockError> {
    use lock_core::backend::{UrlOptions, redact::split_userinfo};
    let invalid = |reason: String| LockError::InvalidConfig { reason };
    // Fair mode waits in one master's queue, which a quorum cannot combine; the interop modes
    // share a key with a Python client that locks one server, not a majority.
    let mut options = UrlOptions::parse(&format!("redlock://{rest}"))?;
    if let Some(mode) = options.take::<String>("mode")?.filter(|m| m != "simple" && m != "reentrant") {
        return Err(invalid(format!("redlock supports mode=simple or mode=reentrant, not {mode}")));
    }
    // The userinfo first: a raw password may contain `/`, `?` or `@`.
    let (userinfo, after) = split_userinfo(rest);
    let userinfo = userinfo.map_or(String::new(), |u| format!("{u}@"));
    let (hosts, tail) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    let urls: Vec<String> =
        hosts.split(',').filter(|h| !h.is_empty()).map(|h| format!("redis://{userinfo}{h}{tail}")).collect();
    if urls.is_empty() {
        return Err(invalid(format!(
            "redlock needs at least one host: {:?}",
            redact_url(&format!("redlock://{rest}"))
        )));
    }
    Ok(urls)
}

/// Redlock starts while a minority of its masters is unreachable: those members connect on
/// first use, and again after every failure, so they join the quorum when they come back.
#[cfg(feature = "redis")]
async fn redlock(url: &str) -> Result<lock_core::QuorumBackend, LockError> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let urls = redlock_urls(rest)?;
    let connects = urls.iter().map(|u| lock_redis::RedisLock::from_url(u));
    let results = futures_util::future::join_all(connects).await;
    let quorum = urls.len() / 2 + 1;
    let up = results.iter().filter(|r| r.is_ok()).count();
    let mut members: Vec<DynBackend> = Vec::new();
    let mut first_err = None;
    for (url, r) in urls.into_iter().zip(results) {
        match r {
            Ok(m) => members.push(std::sync::Arc::new(m)),
            Err(e) if e.is_temporary() => {
                tracing::warn!(url = %redact_url(&url), error = %e, "redlock master unreachable; it joins when it answers");
                first_err.get_or_insert(e);
                members.push(std::sync::Arc::new(lazy::LazyRedis::new(url)));
            }
            // A permanent error (bad config, auth) will not heal by waiting.
            Err(e) => return Err(e),
        }
    }
    if up < quorum {
        return Err(first_err.unwrap_or_else(|| LockError::temporary("quorum", "no master reachable")));
    }
    lock_core::QuorumBackend::new(members)
}

#[cfg(feature = "redis")]
mod lazy {
    //! A Redis master that was down at start: connects on first use.

    use lock_core::async_trait;
    use lock_core::backend::{AcquireRequest, Attempt, Capability, LockBackend, RenewItem, Subscription};
    use lock_core::{OwnerToken, Result};
    use lock_redis::RedisLock;
    use tokio::sync::OnceCell;

    #[derive(Debug)]
    pub(super) struct LazyRedis {
        url: String,
        identity: String,
        conn: OnceCell<RedisLock>,
    }

    impl LazyRedis {
        pub(super) fn new(url: String) -> Self {
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
        let prefix = prefix.unwrap_or_else(|| lock_redis::DEFAULT_KEY_PREFIX.to_owned());
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
        let default = format!("redis://h:1/0?prefix={}", lock_redis::DEFAULT_KEY_PREFIX);
        assert_eq!(identity("redis://h:1"), default);
    }

    #[async_trait]
    impl LockBackend for LazyRedis {
        fn name(&self) -> &'static str {
            "redis"
        }
        fn capabilities(&self) -> Capability {
            match self.conn.get() {
                Some(c) => c.capabilities(),
                None => {
                    let mut c = Capability::NONE;
                    c.renew = true;
                    c.fencing = true;
                    c.notify = true;
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
        async fn leave_queue(&self, key: &str, owner: OwnerToken) -> Result<()> {
            self.get().await?.leave_queue(key, owner).await
        }

        async fn subscribe(&self, key: &str) -> Result<Option<Subscription>> {
            self.get().await?.subscribe(key).await
        }
        async fn inspect(&self, key: &str) -> Result<lock_core::LockInfo> {
            self.get().await?.inspect(key).await
        }
        async fn set_note(&self, key: &str, owner: OwnerToken, note: &str) -> Result<bool> {
            self.get().await?.set_note(key, owner, note).await
        }
        async fn note(&self, key: &str) -> Result<Option<String>> {
            self.get().await?.note(key).await
        }
        async fn raise_fence(
            &self,
            key: &str,
            owner: OwnerToken,
            floor: lock_core::FencingToken,
        ) -> Result<bool> {
            self.get().await?.raise_fence(key, owner, floor).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("redis://user:s3cret@h:1/0"), "redis://user:***@h:1/0");
        assert_eq!(
            redact_url("mysql://root:pw@127.0.0.1:3306/db?x=1"),
            "mysql://root:***@127.0.0.1:3306/db?x=1"
        );
        assert_eq!(redact_url("redis://:pw@h"), "redis://:***@h");
        assert_eq!(redact_url("zk://h:2181/r"), "zk://h:2181/r");
    }

    #[tokio::test]
    async fn memory_tables_are_shared_by_name() {
        let a = crate::Locker::new(from_url("memory://t1").await.expect("memory"));
        let b = crate::Locker::new(from_url("memory://t1").await.expect("memory"));
        let c = crate::Locker::new(from_url("memory://t2").await.expect("memory"));
        let g = a.try_lock("k").await.expect("try").expect("free");
        assert!(b.try_lock("k").await.expect("try").is_none());
        c.try_lock("k").await.expect("try").expect("other table").release().await.expect("release");
        g.release().await.expect("release");
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn bad_redis_mode_is_refused_before_connecting() {
        let e = from_url("redis://127.0.0.1:1/?mode=bogus").await.expect_err("refused");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redlock_urls_name_every_master() {
        let urls = redlock_urls(":pw@127.0.0.1:1,127.0.0.1:2,h3:3/2?mode=reentrant&key_prefix=app:")
            .expect("parsed");
        let q = "?mode=reentrant&key_prefix=app:";
        assert_eq!(
            urls,
            [
                format!("redis://:pw@127.0.0.1:1/2{q}"),
                format!("redis://:pw@127.0.0.1:2/2{q}"),
                format!("redis://:pw@h3:3/2{q}")
            ]
        );
        assert!(matches!(redlock_urls("/?mode=simple"), Err(LockError::InvalidConfig { .. })));
        assert!(matches!(redlock_urls("h:1,h:2/?mode=fair"), Err(LockError::InvalidConfig { .. })));
        assert!(matches!(redlock_urls("h:1,h:2/?mode=redis-py"), Err(LockError::InvalidConfig { .. })));
        assert!(matches!(redlock_urls("h:1/?mode=simple&mode=fair"), Err(LockError::InvalidConfig { .. })));
        let urls = redlock_urls(":p/w@h1:1,h2:2/0").expect("a raw password with a slash");
        assert_eq!(urls, ["redis://:p/w@h1:1/0", "redis://:p/w@h2:2/0"]);
    }

    /// Three real masters: the quorum locks, and a second client through the same URL is
    /// excluded.
    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redlock_scheme_locks_on_three_masters() {
        use lock_testkit::server::{RedisServer, require_servers};
        let mut masters = Vec::new();
        for _ in 0..3 {
            match RedisServer::start() {
                Ok(s) => masters.push(s),
                Err(e) if e.is_missing_binary() && !require_servers() => return eprintln!("SKIPPED: {e}"),
                Err(e) => panic!("redis-server: {e}"),
            }
        }
        let hosts: Vec<String> = masters.iter().map(|m| format!("127.0.0.1:{}", m.port())).collect();
        // One master down at start: the quorum still forms, and the master joins when it is back.
        masters[2].kill().expect("kill");
        let early = crate::Locker::new(
            from_url(&format!("redlock://{}/?mode=simple", hosts.join(","))).await.expect("a minority down"),
        );
        early.try_lock("minority").await.expect("try").expect("free").release().await.expect("release");
        masters[2].restart().expect("restart");
        masters[0].kill().expect("kill another");
        early
            .try_lock("minority")
            .await
            .expect("try")
            .expect("healed master makes the quorum")
            .release()
            .await
            .expect("release");
        masters[0].restart().expect("restart");
        let url = format!("redlock://{}/?mode=simple&key_prefix=url-test:", hosts.join(","));
        let a = from_url(&url).await.expect("redlock");
        assert_eq!(a.name(), "quorum");
        assert!(a.capabilities().fencing, "Redlock grants carry the quorum's fencing token");
        let (a, b) = (crate::Locker::new(a), crate::Locker::new(from_url(&url).await.expect("redlock")));
        let g = a.try_lock("k").await.expect("try").expect("free");
        assert!(b.try_lock("k").await.expect("try").is_none());
        masters[2].kill().expect("kill");
        g.release().await.expect("release on 2 of 3");
        b.try_lock("k").await.expect("2 of 3").expect("free").release().await.expect("release");
    }

    #[tokio::test]
    async fn unknown_and_malformed_urls_are_typed_errors() {
        assert!(matches!(from_url("ftp://x").await, Err(LockError::InvalidConfig { .. })));
        assert!(matches!(from_url("nonsense").await, Err(LockError::InvalidConfig { .. })));
        let err = from_url("mysql://u:topsecret@h/db").await.expect_err("error");
        assert!(!err.to_string().contains("topsecret"));
    }
}
